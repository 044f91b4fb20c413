//! Phases: the steps of a suite. A phase is a bare word (`- start`) or a
//! one-key map (`- run: 20s`), read by hand so that each form gets its own
//! message.

use std::fmt;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

use std::marker::PhantomData;

use super::cluster::{Either, MemberOr, NoValue};
use super::faults::DiskFault;
use super::values::{did_you_mean, Count, Dur, Sig, Size};

pub const PHASES: [&str; 23] = [
    "load",
    "run",
    "kill",
    "start",
    "stop",
    "restart",
    "pause",
    "wait",
    "exec",
    "limit",
    "verify",
    "repeat",
    "chaos",
    "upgrade",
    "downgrade",
    "network",
    "power_cut",
    "disk_full",
    "io_errors",
    "io_delay",
    "service",
    "partition",
    "heal",
];

/// One step of a suite.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Write every key of the workload once, as fast as the node takes it.
    Load,
    /// Drive the workload for this long, or until it has had this many
    /// operations acknowledged.
    Run(RunFor),
    /// Send a signal to the node's process group and wait for it to die.
    Kill(Sig),
    /// Start the node again and wait until it is ready.
    Start,
    /// Stop the node gracefully (the suite's stop signal, then SIGKILL).
    Stop,
    /// Stop gracefully, then start.
    Restart,
    /// SIGSTOP the node for this long, then SIGCONT; the load goes on.
    Pause(#[serde(serialize_with = "secs")] Duration),
    /// Let time pass with no load (the node is still watched).
    Wait(#[serde(serialize_with = "secs")] Duration),
    /// Run a command (never through a shell unless it names one).
    Exec(ExecSpec),
    /// Change the node's memory limit while it runs.
    Limit(Size),
    /// Read back every key the ledger knows and classify it.
    Verify,
    /// With the node stopped: open its RocksDB data directory read-only,
    /// verify every block's checksum, judge every key against the ledger,
    /// and count the SSTs by level and compression.
    VerifyOffline,
    /// Run these phases this many times.
    Repeat { times: u64, phases: Vec<Phase> },
    /// Random kills, pauses and restarts under load, from a seed.
    Chaos(ChaosSpec),
    /// Stop gracefully, swap to this version of `versions`, start, verify.
    Upgrade(String),
    /// The same, toward an older version: a refusal to start is reported
    /// with its reason, and the version before is started again.
    Downgrade(String),
    /// Put these network faults between the load and the node (soak's
    /// proxy, see `faults::proxy`), replacing those before; `clear` lifts
    /// them.
    Network(NetworkSpec),
    /// A fault of the node's data directory, through soak's fault
    /// filesystem (`faults::disk`): `power_cut`, `disk_full`, `io_errors`,
    /// `io_delay`.
    Disk(DiskFault),
    /// Kill, stop, start or restart one of the suite's `services` (a
    /// broker under the node): what follows is not the node's doing.
    Service(ServicePhase),
    /// A member of a cluster killed, stopped, started, restarted or
    /// paused (`- kill: { member: leader }`).
    Member(super::cluster::MemberPhase),
    /// The members cut apart (`- partition: { isolate: leader }`); the
    /// partition before it lifted.
    Partition(super::cluster::Partition),
    /// Every partition between the members lifted.
    Heal,
}

/// `service: { name: kafka, action: kill }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServicePhase {
    pub name: String,
    pub action: ServiceAction,
}

/// What a `service` phase does to the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServiceAction {
    /// SIGKILL to its process group.
    Kill,
    /// Its stop signal, then SIGKILL after its grace.
    Stop,
    /// Start it again and wait until it is ready.
    Start,
    /// Stop, then start.
    Restart,
}

impl fmt::Display for ServiceAction {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(match self {
            ServiceAction::Kill => "kill",
            ServiceAction::Stop => "stop",
            ServiceAction::Start => "start",
            ServiceAction::Restart => "restart",
        })
    }
}

/// `network: { latency: 50ms, jitter: 10ms, bandwidth: 1MiB/s, blackhole:
/// true, reset: true, slow_close: 1s }`, or `network: clear`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct NetworkSpec {
    #[serde(serialize_with = "secs")]
    pub latency: Duration,
    #[serde(serialize_with = "secs")]
    pub jitter: Duration,
    /// Bytes per second, each way, per connection.
    pub bandwidth: Option<u64>,
    pub blackhole: bool,
    pub reset: bool,
    #[serde(serialize_with = "secs")]
    pub slow_close: Duration,
}

impl NetworkSpec {
    pub fn is_clear(&self) -> bool {
        *self == NetworkSpec::default()
    }
}

impl fmt::Display for NetworkSpec {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        if self.is_clear() {
            return f.write_str("clear");
        }
        let d = |d: Duration| crate::units::human_duration(d);
        let mut parts = vec![];
        if !self.latency.is_zero() || !self.jitter.is_zero() {
            parts.push(if self.jitter.is_zero() {
                format!("latency {}", d(self.latency))
            } else {
                format!("latency {} ± {}", d(self.latency), d(self.jitter))
            });
        }
        if let Some(b) = self.bandwidth {
            parts.push(format!("bandwidth {}/s", crate::units::Bytes(b)));
        }
        if self.blackhole {
            parts.push("blackhole".into());
        }
        if self.reset {
            parts.push("reset".into());
        }
        if !self.slow_close.is_zero() {
            parts.push(format!("slow close {}", d(self.slow_close)));
        }
        f.write_str(&parts.join(", "))
    }
}

impl<'de> Deserialize<'de> for NetworkSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Raw {
            latency: Option<Dur>,
            jitter: Option<Dur>,
            bandwidth: Option<String>,
            #[serde(default)]
            blackhole: bool,
            #[serde(default)]
            reset: bool,
            slow_close: Option<Dur>,
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = NetworkSpec;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("network faults, e.g. `{ latency: 50ms, jitter: 10ms }`, `{ blackhole: true }`, or `clear`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<NetworkSpec, E> {
                match v {
                    "clear" | "none" => Ok(NetworkSpec::default()),
                    other => Err(E::custom(format!(
                        "`network: {other}`: write `network: clear` to lift the faults, or a map such as `network: {{ latency: 50ms }}`"
                    ))),
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<NetworkSpec, A::Error> {
                let r = Raw::deserialize(de::value::MapAccessDeserializer::new(map))?;
                let bandwidth = match r.bandwidth {
                    None => None,
                    Some(b) => {
                        let per_s = b.trim().strip_suffix("/s").ok_or_else(|| {
                            de::Error::custom(format!(
                                "`bandwidth: {b}`: a size per second, e.g. `1MiB/s`"
                            ))
                        })?;
                        let size = crate::units::parse_size(per_s.trim())
                            .map_err(|e| de::Error::custom(format!("`bandwidth: {b}`: {e}")))?;
                        if size == 0 {
                            return Err(de::Error::custom(
                                "`bandwidth: 0/s` would carry nothing: use `blackhole: true` for that",
                            ));
                        }
                        Some(size)
                    }
                };
                Ok(NetworkSpec {
                    latency: r.latency.map(|d| d.0).unwrap_or_default(),
                    jitter: r.jitter.map(|d| d.0).unwrap_or_default(),
                    bandwidth,
                    blackhole: r.blackhole,
                    reset: r.reset,
                    slow_close: r.slow_close.map(|d| d.0).unwrap_or_default(),
                })
            }
        }
        d.deserialize_any(V)
    }
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// How long a `run` lasts: `run: 3m`, or `run: { ops: 1_000_000, max: 10m }`:
/// until the load has had this many operations acknowledged (SETs, GETs,
/// DELs, MGETs), at most `max` (default 1h). A reproduction bounded by
/// work, not time, does the same work on a busy machine as on a quiet
/// one. `--duration-scale` scales both.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RunFor {
    Time(Duration),
    Ops { ops: u64, max: Duration },
}

impl RunFor {
    /// The longest it may last.
    pub fn most(&self) -> Duration {
        match *self {
            RunFor::Time(d) | RunFor::Ops { max: d, .. } => d,
        }
    }
}

impl Serialize for RunFor {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match *self {
            RunFor::Time(d) => s.serialize_f64(d.as_secs_f64()),
            RunFor::Ops { ops, max } => {
                let mut m = s.serialize_map(Some(2))?;
                m.serialize_entry("ops", &ops)?;
                m.serialize_entry("max", &max.as_secs_f64())?;
                m.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for RunFor {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Ops {
            ops: Count,
            #[serde(default = "an_hour")]
            max: Dur,
        }
        fn an_hour() -> Dur {
            Dur(Duration::from_secs(3600))
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RunFor;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration such as 30s, or { ops: 1000000, max: 10m }")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RunFor, E> {
                crate::units::parse_duration(v)
                    .map(RunFor::Time)
                    .map_err(|e| E::custom(e.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<RunFor, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<RunFor, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<RunFor, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RunFor, A::Error> {
                let o = Ops::deserialize(de::value::MapAccessDeserializer::new(map))?;
                if o.ops.0 == 0 {
                    return Err(de::Error::custom("`ops` must be at least 1"));
                }
                Ok(RunFor::Ops {
                    ops: o.ops.0,
                    max: o.max.0,
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// `exec: [argv...]` or `exec: { command: [...], timeout: 60s, expect: 0 }`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExecSpec {
    pub command: Vec<String>,
    #[serde(serialize_with = "secs")]
    pub timeout: Duration,
    /// The exit code that counts as success.
    pub expect: i32,
    /// A figure to read from the command's output.
    pub throughput: Option<ThroughputParse>,
}

/// `throughput: 'REGEX'` or `{ regex: 'REGEX', min: 1000/s }`: the first
/// group of the regex's last match in the output is an operations-per-second
/// figure (e.g. db_bench's `(\d+) ops/sec`); with `min`, a check.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ThroughputParse {
    pub regex: String,
    pub min: Option<f64>,
}

impl ThroughputParse {
    fn new(regex: String, min: Option<f64>) -> Result<ThroughputParse, String> {
        let re = regex::Regex::new(&regex)
            .map_err(|e| format!("`throughput` is not a valid regex: {e}"))?;
        if re.captures_len() < 2 {
            return Err(format!(
                "`throughput: {regex}` has no group: put the figure in parentheses, e.g. '([0-9.]+) ops/sec'"
            ));
        }
        Ok(ThroughputParse { regex, min })
    }

    /// The figure in `output`: the first group of the last match.
    pub fn read(&self, output: &str) -> Option<f64> {
        let re = regex::Regex::new(&self.regex).ok()?;
        let caps = re.captures_iter(output).last()?;
        caps.get(1)?.as_str().replace(',', "").parse().ok()
    }
}

impl<'de> Deserialize<'de> for ThroughputParse {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Full {
            regex: String,
            min: Option<super::values::Rate>,
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ThroughputParse;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a regex with one group, e.g. '([0-9.]+) ops/sec', or { regex: '...', min: 1000/s }")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ThroughputParse, E> {
                ThroughputParse::new(v.to_string(), None).map_err(E::custom)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ThroughputParse, A::Error> {
                let f = Full::deserialize(de::value::MapAccessDeserializer::new(map))?;
                ThroughputParse::new(f.regex, f.min.map(|m| m.0)).map_err(de::Error::custom)
            }
        }
        d.deserialize_any(V)
    }
}

pub use crate::model::Action;

/// The words a chaos action may be; faults with parameters are one-key
/// maps (`{ network: { latency: 200ms } }`, `{ io_errors: { rate: 0.1 } }`).
pub const ACTIONS: [&str; 9] = [
    "kill",
    "pause",
    "restart",
    "power_cut",
    "partition",
    "disk_full",
    "network",
    "io_errors",
    "io_delay",
];

/// One thing a chaos schedule may do to the node, its data directory or
/// its network.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChaosAction {
    /// The chaos signal (SIGKILL by default), then a start.
    Kill,
    /// SIGSTOP for the pause time, then SIGCONT.
    Pause,
    /// A graceful stop, then a start.
    Restart,
    /// Network faults on the proxy, held for `hold`, then cleared.
    Network(NetworkSpec),
    /// A disk fault: a power cut (at once), or a fault held for `hold`
    /// and then lifted.
    Disk(DiskFault),
    /// One member of a cluster killed (and started again), paused,
    /// stopped or restarted: `{ kill: { member: leader } }`.
    Member(super::cluster::MemberPhase),
    /// The members cut apart, held for `hold`, then healed:
    /// `{ partition: { isolate: leader } }`.
    Partition(super::cluster::Partition),
    /// Every partition lifted (what lifts `Partition` after its hold).
    Heal,
}

impl ChaosAction {
    /// What the summary records for it.
    pub fn kind(&self) -> Action {
        match self {
            ChaosAction::Kill => Action::Kill,
            ChaosAction::Pause => Action::Pause,
            ChaosAction::Restart => Action::Restart,
            ChaosAction::Network(_) => Action::Network,
            ChaosAction::Disk(DiskFault::PowerCut { .. }) => Action::PowerCut,
            ChaosAction::Disk(_) => Action::Disk,
            ChaosAction::Member(m) => match m.verb {
                super::cluster::Verb::Kill(_) => Action::Kill,
                super::cluster::Verb::Pause(_) => Action::Pause,
                super::cluster::Verb::PowerCut { .. } => Action::PowerCut,
                _ => Action::Restart,
            },
            ChaosAction::Partition(_) | ChaosAction::Heal => Action::Partition,
        }
    }

    /// The fault that lifts this one after its hold, if it is held.
    pub fn lift(&self) -> Option<ChaosAction> {
        match self {
            ChaosAction::Network(_) => Some(ChaosAction::Network(NetworkSpec::default())),
            ChaosAction::Disk(d) => d.lifted().map(ChaosAction::Disk),
            ChaosAction::Partition(_) => Some(ChaosAction::Heal),
            _ => None,
        }
    }

    /// Whether it goes through soak's fault filesystem.
    pub fn on_disk(&self) -> bool {
        matches!(self, ChaosAction::Disk(_))
            || matches!(self, ChaosAction::Member(m) if m.cuts_power())
    }
}

impl fmt::Display for ChaosAction {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            ChaosAction::Kill => f.write_str("kill"),
            ChaosAction::Pause => f.write_str("pause"),
            ChaosAction::Restart => f.write_str("restart"),
            ChaosAction::Network(n) => write!(f, "network {n}"),
            ChaosAction::Disk(d) => write!(f, "{d}"),
            ChaosAction::Member(m) => write!(f, "{m}"),
            ChaosAction::Partition(p) => write!(f, "partition {p}"),
            ChaosAction::Heal => f.write_str("heal"),
        }
    }
}

impl<'de> Deserialize<'de> for ChaosAction {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        const HELD: &str = "soak lifts a chaos fault itself after the schedule's `hold`: give the fault, not its lifting";
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ChaosAction;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(
                    f,
                    "a chaos action: kill, pause, restart, power_cut, partition, disk_full, or a fault such as `{{ network: {{ latency: 200ms }} }}` or `{{ io_errors: {{ rate: 0.1 }} }}`"
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ChaosAction, E> {
                match v {
                    "kill" => Ok(ChaosAction::Kill),
                    "pause" => Ok(ChaosAction::Pause),
                    "restart" => Ok(ChaosAction::Restart),
                    "partition" => Ok(ChaosAction::Network(NetworkSpec {
                        blackhole: true,
                        ..NetworkSpec::default()
                    })),
                    "network" => Err(E::custom("a `network` action needs faults: write `{ network: { latency: 200ms } }`, or `partition` for a blackhole")),
                    other => match DiskFault::from_word(other) {
                        Some(r) => r.map(ChaosAction::Disk).map_err(E::custom),
                        None => Err(E::custom(format!(
                            "unknown chaos action `{other}`{}; actions: {}",
                            did_you_mean(other, ACTIONS),
                            ACTIONS.join(", ")
                        ))),
                    },
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ChaosAction, A::Error> {
                let Some(key) = map.next_key::<String>()? else {
                    return Err(de::Error::custom(
                        "an empty map is not a chaos action: write e.g. `{ network: { latency: 200ms } }`",
                    ));
                };
                let action = if key == "network" {
                    let n = map.next_value::<NetworkSpec>()?;
                    if n.is_clear() {
                        return Err(de::Error::custom(HELD));
                    }
                    ChaosAction::Network(n)
                } else if let Some(word) = ["kill", "pause", "stop", "start", "restart"]
                    .into_iter()
                    .find(|w| *w == key)
                {
                    ChaosAction::Member(map.next_value_seed(MemberOnly(word))?)
                } else if key == "partition" {
                    ChaosAction::Partition(map.next_value()?)
                } else if key == "power_cut" {
                    match power_cut_value(&mut map)? {
                        Either::Plain(d) => ChaosAction::Disk(d),
                        Either::Member(m) => ChaosAction::Member(m),
                    }
                } else {
                    match DiskFault::from_map(&key, &mut map) {
                        Some(r) => ChaosAction::Disk(r?),
                        None => {
                            return Err(de::Error::custom(format!(
                                "unknown chaos action `{key}`{}; actions: {}",
                                did_you_mean(&key, ACTIONS),
                                ACTIONS.join(", ")
                            )))
                        }
                    }
                };
                if matches!(&action, ChaosAction::Disk(d) if d.is_lift()) {
                    return Err(de::Error::custom(HELD));
                }
                if let Some(extra) = map.next_key::<String>()? {
                    return Err(de::Error::custom(format!(
                        "one action per list item: `{extra}` must be its own `{{ {extra}: ... }}`"
                    )));
                }
                Ok(action)
            }
        }
        d.deserialize_any(V)
    }
}

/// A member action's map in a chaos schedule (`{ kill: { member: 2 } }`).
struct MemberOnly(&'static str);

impl<'de> de::DeserializeSeed<'de> for MemberOnly {
    type Value = super::cluster::MemberPhase;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        match MemberOr::<NoValue>(self.0, PhantomData).deserialize(d)? {
            Either::Member(m) => Ok(m),
            Either::Plain(_) => unreachable!("NoValue never reads"),
        }
    }
}

/// `power_cut`'s value: `{ torn: true }` for the node (every member of a
/// cluster at once), or with `member:` for those members.
fn power_cut_value<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Either<DiskFault>, A::Error> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Raw {
        #[serde(default)]
        torn: bool,
        member: Option<super::cluster::Target>,
    }
    let r: Raw = map.next_value()?;
    Ok(match r.member {
        Some(member) => Either::Member(super::cluster::MemberPhase {
            verb: super::cluster::Verb::PowerCut { torn: r.torn },
            member,
        }),
        None => Either::Plain(DiskFault::PowerCut { torn: r.torn }),
    })
}

/// `chaos: { during: 10m, every: 30s..2m, actions: [kill, pause], seed: 7 }`
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChaosSpec {
    #[serde(serialize_with = "secs")]
    pub during: Duration,
    #[serde(serialize_with = "secs")]
    pub every_min: Duration,
    #[serde(serialize_with = "secs")]
    pub every_max: Duration,
    pub actions: Vec<ChaosAction>,
    /// Fixed seed for this schedule; without it, the run's seed.
    pub seed: Option<u64>,
    /// How long a `pause` action holds the node.
    #[serde(serialize_with = "secs")]
    pub pause: Duration,
    /// How long a network or disk fault lasts before soak lifts it.
    #[serde(serialize_with = "secs")]
    pub hold: Duration,
    pub signal: Sig,
}

impl ChaosSpec {
    /// Whether any action goes through soak's fault filesystem.
    pub fn on_disk(&self) -> bool {
        self.actions.iter().any(ChaosAction::on_disk)
    }

    /// Whether any action cuts the power.
    pub fn power_cuts(&self) -> bool {
        self.actions.iter().any(|a| a.kind() == Action::PowerCut)
    }

    /// Whether any action puts faults on the network proxy.
    pub fn on_network(&self) -> bool {
        self.actions
            .iter()
            .any(|a| matches!(a, ChaosAction::Network(_)))
    }
}

/// A span `30s..2m`, or one duration `1m` (min = max).
fn parse_every(s: &str) -> Result<(Duration, Duration), String> {
    let (a, b) = s.split_once("..").unwrap_or((s, s));
    let a = crate::units::parse_duration(a).map_err(|e| e.to_string())?;
    let b = crate::units::parse_duration(b).map_err(|e| e.to_string())?;
    if a.is_zero() || a > b {
        return Err(format!(
            "`every: {s}`: write MIN..MAX with 0 < MIN <= MAX, e.g. 30s..2m"
        ));
    }
    Ok((a, b))
}

impl<'de> Deserialize<'de> for ChaosSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Raw {
            during: Dur,
            every: String,
            #[serde(default = "default_actions")]
            actions: Vec<ChaosAction>,
            seed: Option<Count>,
            #[serde(default = "default_pause")]
            pause: Dur,
            #[serde(default = "default_pause")]
            hold: Dur,
            #[serde(default = "default_chaos_signal")]
            signal: Sig,
        }
        fn default_actions() -> Vec<ChaosAction> {
            vec![ChaosAction::Kill]
        }
        fn default_pause() -> Dur {
            Dur(Duration::from_secs(5))
        }
        fn default_chaos_signal() -> Sig {
            Sig(Signal::SIGKILL)
        }
        let r = Raw::deserialize(d)?;
        let (every_min, every_max) = parse_every(&r.every).map_err(de::Error::custom)?;
        if r.actions.is_empty() {
            return Err(de::Error::custom(
                "`actions` is empty: give at least one of kill, pause, restart, power_cut, partition, disk_full, or a fault such as `{ network: { latency: 200ms } }`",
            ));
        }
        Ok(ChaosSpec {
            during: r.during.0,
            every_min,
            every_max,
            actions: r.actions,
            seed: r.seed.map(|s| s.0),
            pause: r.pause.0,
            hold: r.hold.0,
            signal: r.signal,
        })
    }
}

impl<'de> Deserialize<'de> for ExecSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Full {
            command: Vec<String>,
            #[serde(default = "default_exec_timeout")]
            timeout: Dur,
            #[serde(default)]
            expect: i32,
            throughput: Option<ThroughputParse>,
        }
        fn default_exec_timeout() -> Dur {
            Dur(Duration::from_secs(60))
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ExecSpec;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a command as a list, e.g. [\"ldb\", \"--db=${DATA_DIR}\", \"checkconsistency\"], or { command: [...], timeout: 60s, expect: 0, throughput: 'REGEX' }")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<ExecSpec, A::Error> {
                let command =
                    Vec::<String>::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
                Ok(ExecSpec {
                    command,
                    timeout: default_exec_timeout().0,
                    expect: 0,
                    throughput: None,
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ExecSpec, A::Error> {
                let f = Full::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(ExecSpec {
                    command: f.command,
                    timeout: f.timeout.0,
                    expect: f.expect,
                    throughput: f.throughput,
                })
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ExecSpec, E> {
                Err(E::custom(format!(
                    "`exec: {v}`: give the command as a list of arguments, e.g. [\"sh\", \"-c\", \"{v}\"]; soak runs no shell unless you name one"
                )))
            }
        }
        d.deserialize_any(V)
    }
}

/// `repeat: { times: 3, phases: [...] }`
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RepeatSpec {
    times: Count,
    phases: Vec<Phase>,
}

fn unknown(word: &str) -> String {
    format!(
        "unknown phase `{word}`{}; phases: {}",
        did_you_mean(word, PHASES),
        PHASES.join(", ")
    )
}

/// The words that also act on one member of a cluster (`kill: {
/// member: leader }`), and `partition` and `heal`.
fn member_word<'de, A: MapAccess<'de>>(word: &str, map: &mut A) -> Result<Phase, A::Error> {
    Ok(match word {
        "kill" => match map.next_value_seed(MemberOr::<Sig>("kill", PhantomData))? {
            Either::Plain(s) => Phase::Kill(s),
            Either::Member(m) => Phase::Member(m),
        },
        "pause" => match map.next_value_seed(MemberOr::<Dur>("pause", PhantomData))? {
            Either::Plain(d) => Phase::Pause(d.0),
            Either::Member(m) => Phase::Member(m),
        },
        "upgrade" => match map.next_value_seed(MemberOr::<String>("upgrade", PhantomData))? {
            Either::Plain(v) => Phase::Upgrade(v),
            Either::Member(m) => Phase::Member(m),
        },
        "partition" => Phase::Partition(map.next_value()?),
        "heal" => return Err(de::Error::custom("`heal` takes no value: write `- heal`")),
        w => {
            let word = match w {
                "start" => "start",
                "stop" => "stop",
                _ => "restart",
            };
            match map.next_value_seed(MemberOr::<NoValue>(word, PhantomData))? {
                Either::Plain(_) => unreachable!("NoValue never reads"),
                Either::Member(m) => Phase::Member(m),
            }
        }
    })
}

impl<'de> Deserialize<'de> for Phase {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Phase;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(
                    f,
                    "a phase: one of {} (e.g. `- run: 20s` or `- start`)",
                    PHASES.join(", ")
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Phase, E> {
                match v {
                    "load" => Ok(Phase::Load),
                    "start" => Ok(Phase::Start),
                    "stop" => Ok(Phase::Stop),
                    "restart" => Ok(Phase::Restart),
                    "verify" => Ok(Phase::Verify),
                    "heal" => Ok(Phase::Heal),
                    "partition" => Err(E::custom("`partition` needs its shape: write `- partition: halves` (or bridge, ring), `- partition: { isolate: leader }`, `{ groups: { a: [1], b: [2, 3] } }`, `{ drop: { from: 1, to: 2 } }`")),
                    "kill" => Ok(Phase::Kill(Sig(Signal::SIGKILL))),
                    "run" | "pause" | "wait" => Err(E::custom(format!("`{v}` needs a duration: write `- {v}: 30s`"))),
                    "limit" => Err(E::custom("`limit` needs a size: write `- limit: 128MiB`")),
                    "exec" => Err(E::custom("`exec` needs a command: write `- exec: [\"cmd\", \"arg\"]`")),
                    "repeat" => Err(E::custom("`repeat` needs times and phases: write `- repeat: { times: 3, phases: [...] }`")),
                    "chaos" => Err(E::custom("`chaos` needs a schedule: write `- chaos: { during: 5m, every: 20s..1m, actions: [kill, pause] }`")),
                    "upgrade" | "downgrade" => Err(E::custom(format!("`{v}` needs a version: write `- {v}: NAME` with NAME under `versions:`"))),
                    "network" => Err(E::custom("`network` needs faults: write `- network: { latency: 50ms }`, or `- network: clear`")),
                    "service" => Err(E::custom("`service` needs a name and an action: write `- service: { name: kafka, action: kill }` (kill, stop, start or restart)")),
                    other => match DiskFault::from_word(other) {
                        Some(r) => r.map(Phase::Disk).map_err(E::custom),
                        None => Err(E::custom(unknown(other))),
                    },
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Phase, A::Error> {
                let Some(key) = map.next_key::<String>()? else {
                    return Err(de::Error::custom(
                        "an empty map is not a phase: write e.g. `- run: 30s`",
                    ));
                };
                let phase = match key.as_str() {
                    w @ ("kill" | "pause" | "start" | "stop" | "restart" | "partition" | "heal"
                    | "upgrade") => member_word(w, &mut map)?,
                    "power_cut" => match power_cut_value(&mut map)? {
                        Either::Plain(d) => Phase::Disk(d),
                        Either::Member(m) => Phase::Member(m),
                    },
                    "run" => Phase::Run(map.next_value::<RunFor>()?),
                    "wait" => Phase::Wait(map.next_value::<Dur>()?.0),
                    "limit" => Phase::Limit(map.next_value::<Size>()?),
                    "exec" => Phase::Exec(map.next_value::<ExecSpec>()?),
                    "chaos" => Phase::Chaos(map.next_value::<ChaosSpec>()?),
                    "downgrade" => Phase::Downgrade(map.next_value::<String>()?),
                    "network" => Phase::Network(map.next_value::<NetworkSpec>()?),
                    "service" => Phase::Service(map.next_value::<ServicePhase>()?),
                    "repeat" => {
                        let r: RepeatSpec = map.next_value()?;
                        if r.times.0 == 0 {
                            return Err(de::Error::custom("`repeat` needs `times` of at least 1"));
                        }
                        Phase::Repeat {
                            times: r.times.0,
                            phases: r.phases,
                        }
                    }
                    "load" => {
                        let what: String = map.next_value()?;
                        if what != "all" {
                            return Err(de::Error::custom(format!("`load: {what}`: the load phase fills the whole key space: write `- load: all` (or a bare `- load`)")));
                        }
                        Phase::Load
                    }
                    "verify" => {
                        let what: String = map.next_value()?;
                        match what.as_str() {
                            "acknowledged-writes" | "online" => Phase::Verify,
                            "offline" => Phase::VerifyOffline,
                            _ => {
                                return Err(de::Error::custom(format!(
                                    "`verify: {what}`: write `- verify` (through the node), or `- verify: offline` (its RocksDB data directory, the node stopped)"
                                )))
                            }
                        }
                    }
                    other => match DiskFault::from_map(other, &mut map) {
                        Some(r) => Phase::Disk(r?),
                        None => return Err(de::Error::custom(unknown(other))),
                    },
                };
                if let Some(extra) = map.next_key::<String>()? {
                    return Err(de::Error::custom(format!(
                        "one phase per list item: `{extra}` must start its own `- {extra}: ...` line"
                    )));
                }
                Ok(phase)
            }
        }
        d.deserialize_any(V)
    }
}

impl Phase {
    /// The phase as a cell runs it under `--duration-scale`: its run,
    /// wait and pause times, and a `run`'s operations, scaled (at least
    /// one operation); every other phase as it is (a chaos phase scales
    /// its own schedule, a repeat its phases as each runs).
    pub fn scaled(&self, scale: f64) -> Phase {
        match self {
            Phase::Run(RunFor::Time(d)) => Phase::Run(RunFor::Time(d.mul_f64(scale))),
            Phase::Run(RunFor::Ops { ops, max }) => Phase::Run(RunFor::Ops {
                ops: ((*ops as f64 * scale).ceil() as u64).max(1),
                max: max.mul_f64(scale),
            }),
            Phase::Pause(d) => Phase::Pause(d.mul_f64(scale)),
            Phase::Wait(d) => Phase::Wait(d.mul_f64(scale)),
            other => other.clone(),
        }
    }

    pub fn word(&self) -> &'static str {
        match self {
            Phase::Load => "load",
            Phase::Run(_) => "run",
            Phase::Kill(_) => "kill",
            Phase::Start => "start",
            Phase::Stop => "stop",
            Phase::Restart => "restart",
            Phase::Pause(_) => "pause",
            Phase::Wait(_) => "wait",
            Phase::Exec(_) => "exec",
            Phase::Limit(_) => "limit",
            Phase::Verify | Phase::VerifyOffline => "verify",
            Phase::Repeat { .. } => "repeat",
            Phase::Chaos(_) => "chaos",
            Phase::Upgrade(_) => "upgrade",
            Phase::Downgrade(_) => "downgrade",
            Phase::Network(_) => "network",
            Phase::Disk(d) => d.word(),
            Phase::Service(_) => "service",
            Phase::Member(m) => m.word(),
            Phase::Partition(_) => "partition",
            Phase::Heal => "heal",
        }
    }

    /// Whether this phase lifts a fault (`- io_errors: clear`,
    /// `- disk_full: false`, `- network: clear`, ...).
    pub fn lifts_fault(&self) -> bool {
        match self {
            Phase::Network(n) => n.is_clear(),
            Phase::Disk(d) => d.is_lift(),
            Phase::Heal => true,
            _ => false,
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let d = |d: &Duration| crate::units::human_duration(*d);
        match self {
            Phase::Run(RunFor::Time(x)) | Phase::Pause(x) | Phase::Wait(x) => {
                write!(f, "{} {}", self.word(), d(x))
            }
            Phase::Run(RunFor::Ops { ops, .. }) => {
                write!(f, "run {ops} ops")
            }
            Phase::Kill(s) => write!(f, "kill {s}"),
            Phase::Exec(e) => write!(f, "exec {}", e.command.join(" ")),
            Phase::Limit(s) => write!(f, "limit {}", crate::units::Bytes(s.0)),
            Phase::Upgrade(v) | Phase::Downgrade(v) => write!(f, "{} to {v}", self.word()),
            Phase::VerifyOffline => f.write_str("verify offline"),
            Phase::Network(n) => write!(f, "network {n}"),
            Phase::Disk(d) => write!(f, "{d}"),
            Phase::Service(s) => write!(f, "service {} {}", s.name, s.action),
            Phase::Member(m) => write!(f, "{m}"),
            Phase::Partition(p) => write!(f, "partition {p}"),
            Phase::Repeat { times, phases } => {
                write!(f, "repeat {times}x ({} phases)", phases.len())
            }
            Phase::Chaos(c) => write!(
                f,
                "chaos {} every {}..{}",
                d(&c.during),
                d(&c.every_min),
                d(&c.every_max)
            ),
            _ => f.write_str(self.word()),
        }
    }
}
