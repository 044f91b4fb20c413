//! Clusters in a suite: the `cluster:` section (N members of the node),
//! the phases that act on members (`kill: { member: leader }`), and
//! partitions between them (`partition: { isolate: leader }`, `heal`).
//!
//! Targets like `leader` and `random` are resolved when the phase runs;
//! what a run records, replays and shrinks is the member it chose.

use std::fmt;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use super::values::{did_you_mean, Count, Dur, Sig};

/// `cluster: { members: 3, peer: "...", clients: per_member, leader: ... }`
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClusterSpec {
    /// How many members run the node definition (1 to 200).
    pub members: Count,
    /// Each member's entry in `${PEERS}`, templated per member: etcd's
    /// `m${MEMBER}=http://${MEMBER_ADDR}:2380`, ZooKeeper's
    /// `server.${MEMBER}=${MEMBER_ADDR}:2888:3888`, Kafka's
    /// `${MEMBER}@${MEMBER_ADDR}:9093`.
    #[serde(default = "default_peer")]
    pub peer: String,
    /// What joins the entries of `${PEERS}` (default `,`).
    #[serde(default = "default_separator")]
    pub separator: String,
    /// Which member each load connection talks to.
    #[serde(default)]
    pub clients: Clients,
    /// How to find the leader, for faults that target it: a command run
    /// for each member (templated per member) that exits 0 on the leader.
    pub leader: Option<LeaderProbe>,
}

fn default_peer() -> String {
    "${MEMBER_ADDR}".into()
}

fn default_separator() -> String {
    ",".into()
}

/// Which member each load connection talks to.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Clients {
    /// Connection `i` talks to member `i mod N` + 1, always: a client per
    /// member, as Jepsen binds its processes to nodes.
    #[default]
    PerMember,
    /// Connection `i` starts at member `i mod N` + 1 and moves to the next
    /// member each time its session breaks, as a client with a list of
    /// endpoints fails over.
    RoundRobin,
}

/// `leader: { exec: ["sh", "-c", "..."] }`
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LeaderProbe {
    /// Run for each member, with that member's `${MEMBER}` and
    /// `${MEMBER_ADDR}`; exits 0 on the leader.
    pub exec: Vec<String>,
    #[serde(default = "default_leader_timeout")]
    pub timeout: Dur,
}

fn default_leader_timeout() -> Dur {
    Dur(Duration::from_secs(5))
}

/// Which members a fault acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Member `n` (1-based).
    One(usize),
    /// A member drawn from the cell's seed.
    Random,
    /// The member the leader probe names.
    Leader,
    /// A random minority (fewer than half).
    Minority,
    /// A random majority (more than half).
    Majority,
    All,
}

pub const TARGETS: [&str; 5] = ["random", "leader", "minority", "majority", "all"];

impl Target {
    fn parse(s: &str) -> Result<Target, String> {
        Ok(match s.trim() {
            "random" => Target::Random,
            "leader" => Target::Leader,
            "minority" => Target::Minority,
            "majority" => Target::Majority,
            "all" => Target::All,
            other => match other.parse::<usize>() {
                Ok(0) => return Err("members count from 1: `member: 1` is the first".into()),
                Ok(n) => Target::One(n),
                Err(_) => {
                    return Err(format!(
                        "`{other}` is not a member{}: give a number (1 is the first), or one of {}",
                        did_you_mean(other, TARGETS),
                        TARGETS.join(", ")
                    ))
                }
            },
        })
    }

    /// The member it names, if one.
    pub fn number(&self) -> Option<usize> {
        match self {
            Target::One(n) => Some(*n),
            _ => None,
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Target::One(n) => write!(f, "{n}"),
            Target::Random => f.write_str("random"),
            Target::Leader => f.write_str("leader"),
            Target::Minority => f.write_str("minority"),
            Target::Majority => f.write_str("majority"),
            Target::All => f.write_str("all"),
        }
    }
}

impl Serialize for Target {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Target::One(n) => s.serialize_u64(*n as u64),
            other => s.serialize_str(&other.to_string()),
        }
    }
}

impl<'de> Deserialize<'de> for Target {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Target;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(
                    f,
                    "a member: a number (1 is the first), or one of {}",
                    TARGETS.join(", ")
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Target, E> {
                Target::parse(v).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Target, E> {
                Target::parse(&v.to_string()).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Target, E> {
                Target::parse(&v.to_string()).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// What a member phase does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verb {
    Kill(Sig),
    Stop,
    Start,
    Restart,
    Pause(#[serde(serialize_with = "secs")] Duration),
    /// A graceful stop, the version's command (rendered for the member),
    /// a start; with several members, one at a time, each ready before
    /// the next (a rolling upgrade).
    Upgrade(String),
    /// SIGKILL and every byte the member had not fsynced dropped from its
    /// data directory (soak's fault filesystem), then a start; several
    /// members lose their power together and start together.
    PowerCut {
        torn: bool,
    },
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// `- kill: { member: leader }`, `- stop: { member: 2 }`, `- start: {
/// member: 2 }`, `- pause: { member: random, for: 5s }`
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemberPhase {
    pub verb: Verb,
    pub member: Target,
}

impl MemberPhase {
    /// Reads the map after `word` (`kill`, `stop`, `start`, `restart`,
    /// `pause`, `upgrade`).
    pub fn from_map<'de, A: MapAccess<'de>>(word: &str, map: A) -> Result<MemberPhase, A::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Raw {
            member: Target,
            signal: Option<Sig>,
            #[serde(rename = "for")]
            for_: Option<Dur>,
            to: Option<String>,
        }
        let r = Raw::deserialize(de::value::MapAccessDeserializer::new(map))?;
        let verb = match word {
            "kill" => Verb::Kill(r.signal.unwrap_or(Sig(Signal::SIGKILL))),
            "pause" => match r.for_ {
                Some(d) => Verb::Pause(d.0),
                None => return Err(de::Error::custom(
                    "a member's pause needs its length: write `- pause: { member: 2, for: 5s }`",
                )),
            },
            "stop" => Verb::Stop,
            "start" => Verb::Start,
            "upgrade" => match &r.to {
                Some(v) => Verb::Upgrade(v.clone()),
                None => return Err(de::Error::custom(
                    "a member's upgrade needs its version: write `- upgrade: { to: v2, member: 2 }` (`member: all` upgrades one member at a time)",
                )),
            },
            _ => Verb::Restart,
        };
        if r.to.is_some() && word != "upgrade" {
            return Err(de::Error::custom(format!(
                "`to` is for `upgrade`, not `{word}`"
            )));
        }
        if r.signal.is_some() && word != "kill" {
            return Err(de::Error::custom(format!(
                "`signal` is for `kill`, not `{word}`"
            )));
        }
        if r.for_.is_some() && word != "pause" {
            return Err(de::Error::custom(format!(
                "`for` is for `pause`, not `{word}`"
            )));
        }
        Ok(MemberPhase {
            verb,
            member: r.member,
        })
    }

    /// Whether it cuts the members' power (through soak's fault
    /// filesystem under each one's data directory).
    pub fn cuts_power(&self) -> bool {
        matches!(self.verb, Verb::PowerCut { .. })
    }

    pub fn word(&self) -> &'static str {
        match self.verb {
            Verb::Kill(_) => "kill",
            Verb::Stop => "stop",
            Verb::Start => "start",
            Verb::Restart => "restart",
            Verb::Pause(_) => "pause",
            Verb::Upgrade(_) => "upgrade",
            Verb::PowerCut { .. } => "power_cut",
        }
    }
}

impl fmt::Display for MemberPhase {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match &self.verb {
            Verb::Kill(s) => write!(f, "kill member {} ({s})", self.member),
            Verb::Upgrade(v) => write!(f, "upgrade member {} to {v}", self.member),
            Verb::PowerCut { torn } => write!(
                f,
                "power cut member {}{}",
                self.member,
                if *torn { " (torn)" } else { "" }
            ),
            Verb::Pause(d) => write!(
                f,
                "pause member {} for {}",
                self.member,
                crate::units::human_duration(*d)
            ),
            _ => write!(f, "{} member {}", self.word(), self.member),
        }
    }
}

/// How the members are cut apart.
#[derive(Debug, Clone, PartialEq)]
pub enum Partition {
    /// These members (one, or the leader) cut from every other.
    Isolate(Target),
    /// A random split into a majority and a minority.
    Halves,
    /// Groups that hear only their own members, by name.
    Groups(Vec<(String, Vec<usize>)>),
    /// Two halves that each hear one member in the middle (Jepsen's
    /// bridge): with 5 members, 1 2 | 3 | 4 5.
    Bridge,
    /// Each member hears only its neighbours on a ring.
    Ring,
    /// `from` cannot reach `to`; `to` still reaches `from`.
    Drop { from: Target, to: Target },
    /// A share of what goes between two members is lost, both ways.
    Loss { between: (usize, usize), rate: f64 },
    /// What goes between two members is held `by` (give or take up to
    /// `jitter`) before it goes, both ways: a slow link.
    Delay {
        between: (usize, usize),
        by: Duration,
        jitter: Duration,
    },
}

pub const PARTITIONS: [&str; 8] = [
    "isolate", "halves", "groups", "bridge", "ring", "drop", "loss", "delay",
];

impl Partition {
    /// The members it names by number, for the suite's check that they
    /// exist (and the group names that name them).
    pub fn named(&self) -> Vec<usize> {
        match self {
            Partition::Isolate(t) => t.number().into_iter().collect(),
            Partition::Groups(g) => g.iter().flat_map(|(_, m)| m.clone()).collect(),
            Partition::Drop { from, to } => from.number().into_iter().chain(to.number()).collect(),
            Partition::Loss { between, .. } | Partition::Delay { between, .. } => {
                vec![between.0, between.1]
            }
            _ => vec![],
        }
    }
}

impl fmt::Display for Partition {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Partition::Isolate(t) => write!(f, "isolate member {t}"),
            Partition::Halves => f.write_str("halves"),
            Partition::Groups(g) => {
                let parts: Vec<String> = g
                    .iter()
                    .map(|(n, m)| {
                        format!(
                            "{n}: {}",
                            m.iter()
                                .map(|x| x.to_string())
                                .collect::<Vec<_>>()
                                .join(" ")
                        )
                    })
                    .collect();
                write!(f, "groups {}", parts.join(" | "))
            }
            Partition::Bridge => f.write_str("bridge"),
            Partition::Ring => f.write_str("ring"),
            Partition::Drop { from, to } => write!(f, "drop {from} -> {to}"),
            Partition::Loss { between, rate } => {
                write!(
                    f,
                    "loss {:.0}% between {} and {}",
                    rate * 100.0,
                    between.0,
                    between.1
                )
            }
            Partition::Delay {
                between,
                by,
                jitter,
            } => {
                write!(f, "delay {}", crate::units::exact_duration(*by))?;
                if !jitter.is_zero() {
                    write!(f, " ±{}", crate::units::exact_duration(*jitter))?;
                }
                write!(f, " between {} and {}", between.0, between.1)
            }
        }
    }
}

impl Serialize for Partition {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            Partition::Halves => s.serialize_str("halves"),
            Partition::Bridge => s.serialize_str("bridge"),
            Partition::Ring => s.serialize_str("ring"),
            Partition::Isolate(t) => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("isolate", t)?;
                m.end()
            }
            Partition::Groups(g) => {
                let mut m = s.serialize_map(Some(1))?;
                let groups: std::collections::BTreeMap<&str, &Vec<usize>> =
                    g.iter().map(|(n, v)| (n.as_str(), v)).collect();
                m.serialize_entry("groups", &groups)?;
                m.end()
            }
            Partition::Drop { from, to } => {
                let mut m = s.serialize_map(Some(1))?;
                let mut inner = std::collections::BTreeMap::new();
                inner.insert("from", *from);
                inner.insert("to", *to);
                m.serialize_entry("drop", &inner)?;
                m.end()
            }
            Partition::Loss { between, rate } => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry(
                    "loss",
                    &serde_json::json!({"between": [between.0, between.1], "rate": rate}),
                )?;
                m.end()
            }
            Partition::Delay { .. } => {
                let mut m = s.serialize_map(Some(1))?;
                m.serialize_entry("delay", &delay_fields(self))?;
                m.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Partition {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Partition;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a partition: halves, bridge, ring, or { isolate: leader }, { groups: { a: [1], b: [2, 3] } }, { drop: { from: 1, to: 2 } }, { loss: { between: [1, 2], rate: 20% } }, { delay: { between: [1, 2], by: 200ms, jitter: 20ms } }")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Partition, E> {
                match v {
                    "halves" | "majority" | "minority" => Ok(Partition::Halves),
                    "bridge" => Ok(Partition::Bridge),
                    "ring" => Ok(Partition::Ring),
                    "isolate" | "groups" | "drop" | "loss" | "delay" => Err(E::custom(format!(
                        "`partition: {v}` needs its members: write e.g. `partition: {{ isolate: leader }}`, `{{ groups: {{ a: [1], b: [2, 3] }} }}`, `{{ drop: {{ from: 1, to: 2 }} }}`, `{{ loss: {{ between: [1, 2], rate: 20% }} }}`, `{{ delay: {{ between: [1, 2], by: 200ms }} }}`"
                    ))),
                    other => Err(E::custom(format!(
                        "unknown partition `{other}`{}; partitions: {}",
                        did_you_mean(other, PARTITIONS),
                        PARTITIONS.join(", ")
                    ))),
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Partition, A::Error> {
                let Some(key) = map.next_key::<String>()? else {
                    return Err(de::Error::custom("an empty map is not a partition: write e.g. `partition: { isolate: leader }`"));
                };
                let p = match key.as_str() {
                    "isolate" => Partition::Isolate(map.next_value()?),
                    "groups" => Partition::Groups(map.next_value::<Groups>()?.0),
                    "drop" => {
                        #[derive(Deserialize)]
                        #[serde(deny_unknown_fields)]
                        struct Link {
                            from: Target,
                            to: Target,
                        }
                        let l: Link = map.next_value()?;
                        Partition::Drop {
                            from: l.from,
                            to: l.to,
                        }
                    }
                    "loss" => map
                        .next_value::<Lossy>()?
                        .partition()
                        .map_err(de::Error::custom)?,
                    "delay" => map
                        .next_value::<Slow>()?
                        .partition()
                        .map_err(de::Error::custom)?,
                    other => {
                        return Err(de::Error::custom(format!(
                            "unknown partition `{other}`{}; partitions: {}",
                            did_you_mean(other, PARTITIONS),
                            PARTITIONS.join(", ")
                        )))
                    }
                };
                if let Some(extra) = map.next_key::<String>()? {
                    return Err(de::Error::custom(format!(
                        "one partition per phase: `{extra}` needs its own `- partition:` line"
                    )));
                }
                Ok(p)
            }
        }
        d.deserialize_any(V)
    }
}

/// `groups: { a: [1], b: [2, 3] }`, or a list `[[1], [2, 3]]` (named 1, 2, ...).
struct Groups(Vec<(String, Vec<usize>)>);

impl<'de> Deserialize<'de> for Groups {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Groups;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("groups of members: { a: [1], b: [2, 3] } or [[1], [2, 3]]")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Groups, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Vec<usize>>()? {
                    out.push((k, v));
                }
                Ok(Groups(out))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Groups, A::Error> {
                let mut out = Vec::new();
                while let Some(v) = seq.next_element::<Vec<usize>>()? {
                    out.push(((out.len() + 1).to_string(), v));
                }
                Ok(Groups(out))
            }
        }
        let g = d.deserialize_any(V)?;
        if g.0.len() < 2 {
            return Err(de::Error::custom("a partition needs at least two groups"));
        }
        if let Some(m) = g.0.iter().flat_map(|(_, m)| m).find(|&&m| m == 0) {
            return Err(de::Error::custom(format!(
                "member {m}: members count from 1"
            )));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (name, members) in &g.0 {
            for m in members {
                if !seen.insert(*m) {
                    return Err(de::Error::custom(format!(
                        "member {m} is in two groups (the second: {name})"
                    )));
                }
            }
        }
        Ok(g)
    }
}

/// A phase word's value: its own (`kill: SIGTERM`, `pause: 5s`), or a
/// member's (`kill: { member: leader }`).
pub enum Either<T> {
    Plain(T),
    Member(MemberPhase),
}

/// Reads a phase word's value as [`Either`].
pub struct MemberOr<T>(pub &'static str, pub std::marker::PhantomData<T>);

impl<'de, T: Deserialize<'de>> de::DeserializeSeed<'de> for MemberOr<T> {
    type Value = Either<T>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Either<T>, D::Error> {
        struct V<T>(&'static str, std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Either<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "`{}`'s value, or {{ member: N }} in a cluster", self.0)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Either<T>, A::Error> {
                MemberPhase::from_map(self.0, map).map(Either::Member)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Either<T>, E> {
                T::deserialize(de::value::StrDeserializer::<E>::new(v)).map(Either::Plain)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Either<T>, E> {
                T::deserialize(de::value::U64Deserializer::<E>::new(v)).map(Either::Plain)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Either<T>, E> {
                T::deserialize(de::value::I64Deserializer::<E>::new(v)).map(Either::Plain)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Either<T>, E> {
                T::deserialize(de::value::F64Deserializer::<E>::new(v)).map(Either::Plain)
            }
        }
        d.deserialize_any(V::<T>(self.0, std::marker::PhantomData))
    }
}

/// The value of `start`, `stop` and `restart`, which take none of their own.
pub struct NoValue;

impl<'de> Deserialize<'de> for NoValue {
    fn deserialize<D: Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
        Err(de::Error::custom(
            "takes no value: write `- start` (or stop, restart), or for one member of a cluster `- start: { member: 2 }`",
        ))
    }
}

fn target_value(t: Target) -> serde_norway::Value {
    match t {
        Target::One(n) => serde_norway::Value::from(n as u64),
        other => serde_norway::Value::String(other.to_string()),
    }
}

impl MemberPhase {
    /// The phase as a suite writes it (`kill: { member: 2, signal: SIGKILL }`).
    pub fn emit(&self) -> serde_norway::Value {
        use serde_norway::{Mapping, Value};
        let mut m = Mapping::new();
        m.insert("member".into(), target_value(self.member));
        match &self.verb {
            Verb::Kill(s) => {
                m.insert("signal".into(), Value::String(s.to_string()));
            }
            Verb::Pause(d) => {
                m.insert(
                    "for".into(),
                    Value::String(crate::units::exact_duration(*d)),
                );
            }
            Verb::Upgrade(v) => {
                m.insert("to".into(), Value::String(v.clone()));
            }
            Verb::PowerCut { torn: true } => {
                m.insert("torn".into(), Value::Bool(true));
            }
            _ => {}
        }
        let mut outer = Mapping::new();
        outer.insert(self.word().into(), Value::Mapping(m));
        Value::Mapping(outer)
    }
}

impl Partition {
    /// The phase as a suite writes it (`partition: { isolate: 2 }`).
    pub fn emit(&self) -> serde_norway::Value {
        use serde_norway::{Mapping, Value};
        let inner = match self {
            Partition::Loss { between, rate } => {
                let mut m = Mapping::new();
                m.insert(
                    "between".into(),
                    Value::Sequence(vec![(between.0 as u64).into(), (between.1 as u64).into()]),
                );
                m.insert("rate".into(), Value::String(format!("{}%", rate * 100.0)));
                let mut o = Mapping::new();
                o.insert("loss".into(), Value::Mapping(m));
                Value::Mapping(o)
            }
            Partition::Delay { .. } => {
                let mut o = Mapping::new();
                o.insert(
                    "delay".into(),
                    serde_norway::to_value(delay_fields(self)).unwrap_or(Value::Null),
                );
                Value::Mapping(o)
            }
            Partition::Drop { from, to } => {
                let mut m = Mapping::new();
                m.insert("from".into(), target_value(*from));
                m.insert("to".into(), target_value(*to));
                let mut o = Mapping::new();
                o.insert("drop".into(), Value::Mapping(m));
                Value::Mapping(o)
            }
            Partition::Isolate(t) => {
                let mut o = Mapping::new();
                o.insert("isolate".into(), target_value(*t));
                Value::Mapping(o)
            }
            other => serde_norway::to_value(other).unwrap_or(Value::Null),
        };
        let mut outer = Mapping::new();
        outer.insert("partition".into(), inner);
        Value::Mapping(outer)
    }
}

/// `partition: { loss: { between: [1, 2], rate: 20% } }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Lossy {
    between: (usize, usize),
    rate: super::values::Bound,
}

impl Lossy {
    fn partition(self) -> Result<Partition, &'static str> {
        match self.rate {
            super::values::Bound::OfLimit(rate) => Ok(Partition::Loss {
                between: self.between,
                rate,
            }),
            super::values::Bound::Bytes(_) => Err("`rate` is a share of the packets, such as 20%"),
        }
    }
}

/// `partition: { delay: { between: [1, 2], by: 200ms, jitter: 20ms } }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Slow {
    between: (usize, usize),
    by: Dur,
    #[serde(default)]
    jitter: Option<Dur>,
}

impl Slow {
    fn partition(self) -> Result<Partition, &'static str> {
        let jitter = self.jitter.map(|j| j.0).unwrap_or_default();
        if self.by.0.is_zero() || self.by.0 > Duration::from_secs(60) {
            return Err(
                "`by` is how long each packet is held: more than 0 and at most 60s, such as 200ms",
            );
        }
        if jitter > self.by.0 {
            return Err("`jitter` is at most `by` (a packet is never sent before it was queued)");
        }
        Ok(Partition::Delay {
            between: self.between,
            by: self.by.0,
            jitter,
        })
    }
}

/// A delay's fields as a suite writes them.
fn delay_fields(p: &Partition) -> serde_json::Value {
    let Partition::Delay {
        between,
        by,
        jitter,
    } = p
    else {
        return serde_json::Value::Null;
    };
    let mut v = serde_json::json!({
        "between": [between.0, between.1],
        "by": crate::units::exact_duration(*by),
    });
    if !jitter.is_zero() {
        v["jitter"] = crate::units::exact_duration(*jitter).into();
    }
    v
}

/// The variables a member's templates see besides the cell's: `MEMBER`
/// (1-based), `MEMBERS`, `MEMBER_ADDR`, `MEMBER_DIR`, `PEERS`, and every
/// member's address as `MEMBER_ADDR_1`...
pub fn variables(c: Option<&ClusterSpec>) -> Vec<String> {
    let Some(c) = c else {
        return vec![];
    };
    let mut v: Vec<String> = ["MEMBER", "MEMBERS", "MEMBER_ADDR", "MEMBER_DIR", "PEERS"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    v.extend((1..=c.members.0).map(|i| format!("MEMBER_ADDR_{i}")));
    v
}

/// What a cluster cannot be combined with yet, and its own bounds: (path,
/// problem).
pub fn problems(suite: &super::Suite) -> Vec<(String, String)> {
    let Some(c) = &suite.cluster else {
        return vec![];
    };
    let mut out = vec![];
    if c.members.0 == 0 || c.members.0 > 200 {
        out.push((
            "cluster.members".into(),
            "a cluster has between 1 and 200 members".into(),
        ));
    }
    if c.leader.as_ref().is_some_and(|l| l.exec.is_empty()) {
        out.push((
            "cluster.leader.exec".into(),
            "the command is empty: give argv that exits 0 on the leader".into(),
        ));
    }
    let not_yet = |what: &str| {
        format!("a cluster's members run as processes in network namespaces of the run's own; {what} is not done for clusters yet")
    };
    if suite.node.image.is_some() {
        out.push((
            "node.image".into(),
            not_yet("running them as containers or Pods"),
        ));
    }
    if suite.limits.disk.is_some() {
        out.push((
            "limits.disk".into(),
            not_yet("soak's fault filesystem (`limits.disk`, disk faults)"),
        ));
    }
    if suite.uses_network_faults() {
        out.push(("phases".into(), not_yet("soak's proxy between the load and the node (`network` faults): cut the members apart with `partition` instead")));
    }
    if let Some(d) = suite
        .disk_faults()
        .into_iter()
        .find(|d| !matches!(d, super::faults::DiskFault::PowerCut { .. }))
    {
        out.push((
            "phases".into(),
            not_yet(&format!("`{}` (each member's data directory is soak's fault filesystem for power cuts only)", d.word())),
        ));
    }
    out
}

/// A phase's problem in this suite: a member phase without a cluster, a
/// member it does not have, a phase a cluster cannot run yet.
pub fn phase_problem(suite: &super::Suite, p: &super::Phase) -> Option<String> {
    use super::{ChaosAction, Phase};
    // A chaos schedule's cluster actions, as the phases they are.
    if let Phase::Chaos(c) = p {
        return c.actions.iter().find_map(|a| match a {
            ChaosAction::Member(m) => phase_problem(suite, &Phase::Member(m.clone())),
            ChaosAction::Partition(x) => phase_problem(suite, &Phase::Partition(x.clone())),
            _ => None,
        });
    }
    let cluster_phase = matches!(p, Phase::Member(_) | Phase::Partition(_) | Phase::Heal);
    let Some(c) = &suite.cluster else {
        return cluster_phase.then(|| format!(
            "`{}` acts on a cluster's members, and the suite has none: add `cluster: {{ members: 3 }}`, or for the one node write `- {}`",
            p.word(),
            match p { Phase::Member(m) => m.word(), _ => "kill" }
        ));
    };
    let n = c.members.0 as usize;
    let named: Vec<usize> = match p {
        Phase::Member(m) => m.member.number().into_iter().collect(),
        Phase::Partition(x) => x.named(),
        Phase::Upgrade(_) | Phase::Downgrade(_) => {
            return Some(format!("`{}` acts on the one node; a cluster's members change version one at a time: write `- upgrade: {{ to: VERSION, member: all }}` (or `member: 2`; `to: node` goes back to the node as it started)", p.word()))
        }
        _ => vec![],
    };
    if let Some(m) = named.into_iter().find(|&m| m == 0 || m > n) {
        return Some(format!(
            "there is no member {m}: the cluster has {n} (members count from 1)"
        ));
    }
    if let (Phase::Member(m), None) = (p, &c.leader) {
        if m.member == Target::Leader {
            return Some("`member: leader` needs a way to find the leader: give `cluster.leader: { exec: [...] }`, a command that exits 0 on the leader".into());
        }
    }
    if let (Phase::Partition(Partition::Isolate(Target::Leader)), None) = (p, &c.leader) {
        return Some("`isolate: leader` needs a way to find the leader: give `cluster.leader: { exec: [...] }`".into());
    }
    None
}
