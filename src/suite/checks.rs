//! Checks: what a cell must show to pass. Each fails the cell, or only warns
//! (`severity: warn`).

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use super::values::{Bound, Count, Dur, GrowthRate, Rate, Size};
use super::{Phase, Suite};

/// What a check does when its limit is exceeded.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    #[default]
    Fail,
    Warn,
}

/// A count limit: `lost_writes: 0`, `oom_kills: ">= 1"` (an incident a
/// reproduction must show), `"<= 3"`, or `{ max: 0, min: 0, severity: warn }`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CountCheck {
    pub max: Option<u64>,
    pub min: Option<u64>,
    pub severity: Severity,
}

impl CountCheck {
    pub fn at_most(max: u64) -> CountCheck {
        CountCheck {
            max: Some(max),
            min: None,
            severity: Severity::Fail,
        }
    }

    pub fn holds(&self, value: u64) -> bool {
        self.max.is_none_or(|m| value <= m) && self.min.is_none_or(|m| value >= m)
    }

    /// `0`, `>= 1`, `1..3`, as the report writes the limit.
    pub fn describe(&self) -> String {
        match (self.min, self.max) {
            (Some(lo), Some(hi)) if lo == hi => format!("{lo}"),
            (Some(lo), Some(hi)) => format!("{lo}..{hi}"),
            (Some(lo), None) => format!(">= {lo}"),
            (None, Some(hi)) => format!("{hi}"),
            (None, None) => "any".into(),
        }
    }

    /// `3`, `<= 3`, `< 4`, `>= 1`, `> 0`, `== 2`.
    fn parse(text: &str) -> Result<CountCheck, String> {
        let t: String = text.chars().filter(|c| *c != '_' && *c != ' ').collect();
        let (op, n) = ["<=", ">=", "==", "<", ">", "="]
            .iter()
            .find_map(|op| t.strip_prefix(op).map(|n| (*op, n)))
            .unwrap_or(("<=", t.as_str()));
        let n: u64 = n.parse().map_err(|_| {
            format!("{text:?} is not a count limit: write a number (the most allowed), or \">= 1\", \"<= 3\"")
        })?;
        let (min, max) = match op {
            "<=" => (None, Some(n)),
            "<" if n == 0 => return Err(format!("{text:?}: no count is below 0")),
            "<" => (None, Some(n - 1)),
            ">=" => (Some(n), None),
            ">" => (Some(n + 1), None),
            _ => (Some(n), Some(n)),
        };
        Ok(CountCheck {
            max,
            min,
            severity: Severity::Fail,
        })
    }
}

impl<'de> Deserialize<'de> for CountCheck {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Full {
            max: Option<Count>,
            min: Option<Count>,
            #[serde(default)]
            severity: Severity,
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = CountCheck;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a limit such as 0 or \">= 1\", or { max: 0, severity: warn }")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<CountCheck, E> {
                Ok(CountCheck::at_most(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<CountCheck, E> {
                u64::try_from(v)
                    .map(CountCheck::at_most)
                    .map_err(|_| E::custom("a limit cannot be negative"))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<CountCheck, E> {
                CountCheck::parse(v).map_err(E::custom)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<CountCheck, A::Error> {
                let f = Full::deserialize(de::value::MapAccessDeserializer::new(map))?;
                if f.max.is_none() && f.min.is_none() {
                    return Err(de::Error::custom("give `max`, `min` or both"));
                }
                Ok(CountCheck {
                    max: f.max.map(|c| c.0),
                    min: f.min.map(|c| c.0),
                    severity: f.severity,
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// Which memory series a check reads.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Series {
    /// Resident set size of the node's whole process tree.
    #[default]
    Rss,
    /// Proportional set size: shared pages divided among their users.
    Pss,
    /// Anonymous resident memory (heap, arenas; not files, not shared memory).
    Anon,
    /// The node's cgroup memory usage (includes page cache).
    Cgroup,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrowthCheck {
    /// The largest acceptable slope, e.g. `20MiB/h`.
    #[serde(default = "unbounded", skip_serializing_if = "is_unbounded")]
    pub max: GrowthRate,
    /// The least growth a reproduction must show, e.g. `30MiB/h`: a
    /// significant trend at least this steep (a cell that expects a leak).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<GrowthRate>,
    #[serde(default)]
    pub series: Series,
    /// Samples this soon after each (re)start are left out of the slope.
    #[serde(default = "default_warmup", skip_serializing)]
    pub warmup: Dur,
    /// Judged on one phase only: its place in the suite's `phases` list,
    /// counting from 1 (a `repeat` counts as one, all its rounds), or its
    /// words as the report names it (`pause 400ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<PhaseRef>,
    /// Judged on every window of this length from the cell's start, e.g.
    /// `5m`: each must pass (a last window shorter than half the length is
    /// left out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Dur>,
    #[serde(default)]
    pub severity: Severity,
    /// What the check says when it found no growth but cannot rule out
    /// growth above `max` either: the top of the slope's 95% interval is
    /// over it (a run too short for its noise, a step that split it).
    /// `warn` (the default) shows it without failing the run, `fail`
    /// fails it as the check's `severity` says, `pass` passes it.
    #[serde(default)]
    pub inconclusive: Inconclusive,
}

/// A growth check's verdict when growth above its max was neither found
/// nor ruled out.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Inconclusive {
    Pass,
    #[default]
    Warn,
    Fail,
}

fn unbounded() -> GrowthRate {
    GrowthRate(f64::INFINITY)
}

fn is_unbounded(g: &GrowthRate) -> bool {
    g.0.is_infinite()
}

fn default_warmup() -> Dur {
    Dur(std::time::Duration::from_secs(10))
}

/// `peak_memory: { max: 512MiB, series: cgroup }`, or `max: 85%` of the
/// cell's memory limit.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PeakCheck {
    pub max: Bound,
    #[serde(default)]
    pub series: Series,
    /// Judged on one phase only: its place in the suite's `phases` list,
    /// counting from 1 (a `repeat` counts as one, all its rounds), or its
    /// words as the report names it (`pause 400ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<PhaseRef>,
    /// Judged on every window of this length from the cell's start, e.g.
    /// `5m`: each must pass (a last window shorter than half the length is
    /// left out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Dur>,
    #[serde(default)]
    pub severity: Severity,
}

/// `disk: { max: 4GiB }`: the data directory's largest size;
/// `disk: { max_growth: 1.5 }`: its size at the end over its size at the
/// end of the first phase that left data, or with `from: upgrade`, over
/// its size before the first upgrade (an upgrade that doubles the
/// database shows as 2.0).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DiskCheck {
    pub max: Option<Size>,
    pub max_growth: Option<f64>,
    /// The least growth a reproduction must show (the end over the base),
    /// e.g. `2.0`: a database that doubles.
    pub min_growth: Option<f64>,
    /// What `max_growth` compares the end with: `first` (the default),
    /// the size after the first phase that left data; `upgrade`, the size
    /// before the first `upgrade` or `downgrade` phase (compact before it
    /// for a settled figure: right after a load, the write-ahead log still
    /// holds every value uncompressed).
    #[serde(default)]
    pub from: GrowthFrom,
    #[serde(default)]
    pub severity: Severity,
}

/// What a disk-growth check compares the data directory's final size with.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum GrowthFrom {
    #[default]
    First,
    Upgrade,
}

/// `throughput: { min: 5000/s }`: acknowledged operations per second of load.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ThroughputCheck {
    pub min: Rate,
    /// Judged on one phase only: its place in the suite's `phases` list,
    /// counting from 1 (a `repeat` counts as one, all its rounds), or its
    /// words as the report names it (`pause 400ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<PhaseRef>,
    /// Judged on every window of this length from the cell's start, e.g.
    /// `5m`: each must pass (a last window shorter than half the length is
    /// left out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Dur>,
    #[serde(default)]
    pub severity: Severity,
}

/// `latency: { percentile: 99, max: 10ms }`, from scheduled start to reply.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LatencyCheck {
    #[serde(default = "default_percentile")]
    pub percentile: f64,
    pub max: Dur,
    /// Judged on one phase only: its place in the suite's `phases` list,
    /// counting from 1 (a `repeat` counts as one, all its rounds), or its
    /// words as the report names it (`pause 400ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<PhaseRef>,
    /// Judged on every window of this length from the cell's start, e.g.
    /// `5m`: each must pass (a last window shorter than half the length is
    /// left out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Dur>,
    #[serde(default)]
    pub severity: Severity,
}

fn default_percentile() -> f64 {
    99.0
}

/// `restart_time: { max: 10s }`: the slowest restart to ready.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RestartTimeCheck {
    pub max: Dur,
    #[serde(default)]
    pub severity: Severity,
}

/// `linearizable: true`: every operation of the cell's history (every
/// request of the load, recorded) can be put in one order, each taking
/// effect between its invocation and its completion, that a register per
/// key explains. `false` expects that it cannot (a reproduction of stale
/// reads); `{ expect: true, timeout: 2m, severity: warn }` in full.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LinearizableCheck {
    /// Whether the history is expected to be linearizable.
    pub expect: bool,
    /// How long the checker may search before its verdict is unknown (a
    /// warning, never a pass).
    pub timeout: Dur,
    pub severity: Severity,
}

/// The forms `linearizable` takes (the suite schema's view).
#[allow(dead_code)]
#[derive(schemars::JsonSchema)]
#[serde(untagged)]
enum LinearizableForm {
    Expect(bool),
    Full {
        expect: Option<bool>,
        /// A duration such as 2m.
        timeout: Option<String>,
        severity: Option<Severity>,
    },
}

impl<'de> Deserialize<'de> for LinearizableCheck {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Full {
            #[serde(default = "yes")]
            expect: bool,
            #[serde(default = "default_search")]
            timeout: Dur,
            #[serde(default)]
            severity: Severity,
        }
        fn yes() -> bool {
            true
        }
        fn default_search() -> Dur {
            Dur(std::time::Duration::from_secs(120))
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = LinearizableCheck;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("true, false, or { expect: true, timeout: 2m, severity: warn }")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<LinearizableCheck, E> {
                Ok(LinearizableCheck {
                    expect: v,
                    timeout: default_search(),
                    severity: Severity::Fail,
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<LinearizableCheck, A::Error> {
                let f = Full::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(LinearizableCheck {
                    expect: f.expect,
                    timeout: f.timeout,
                    severity: f.severity,
                })
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Checks {
    /// Every request's history linearizable (`true`), or expected not to
    /// be (`false`): soak's checker, per key.
    #[schemars(with = "Option<LinearizableForm>")]
    pub linearizable: Option<LinearizableCheck>,
    pub lost_writes: Option<CountCheck>,
    /// Acknowledged writes power cuts took from the unsynced tail of their
    /// connections (`lost_unsynced`): `0` for a node that fsyncs before it
    /// acknowledges, `">= 1"` to show that a power cut can take them.
    pub unsynced_writes: Option<CountCheck>,
    pub corrupted_writes: Option<CountCheck>,
    /// Writes the node said definitely failed (a 4xx, an SQL error, an
    /// adapter's `fail`) that were read back all the same (Elle's aborted
    /// reads). Without it, `lost_writes`'s limit holds for them too.
    pub aborted_reads: Option<CountCheck>,
    pub oom_kills: Option<CountCheck>,
    /// Out-of-memory errors the node logged itself, whether or not it
    /// exited (a JVM's `OutOfMemoryError: Cannot reserve ... bytes of
    /// direct buffer memory`, Rust's "memory allocation of N bytes
    /// failed"): lines of node.log that say so.
    pub oom_errors: Option<CountCheck>,
    /// The node ran out of memory, however it showed: OOM kills, its own
    /// out-of-memory errors, and a stall at its memory limit (unresponsive
    /// while its cgroup was at the limit: a kernel reclaiming its page
    /// cache instead of killing it, as cgroup v1 often does). A
    /// reproduction's `expect: { out_of_memory: ">= 1" }` holds whichever
    /// way the kernel ends it.
    pub out_of_memory: Option<CountCheck>,
    /// Restarts after which the node never got ready again (a data
    /// directory it will not start from after a power cut), or died under
    /// five read-backs in a row (a node killed by every read of its data):
    /// the cell ends there. Without it, one such restart fails the cell; `1` expects it.
    pub unrecovered: Option<CountCheck>,
    /// Read-backs the node, alive, did not answer (a node stalled at its
    /// memory limit while the kernel reclaims instead of killing): the
    /// cell ends there. Without it, one such fails the cell; `1` expects it.
    pub unresponsive: Option<CountCheck>,
    /// Deaths that were neither soak's doing nor the OOM killer's.
    pub crashes: Option<CountCheck>,
    /// One check, or a list: `[{ max: 20MiB/h }, { max: 50MiB/h, window: 1h }]`.
    #[serde(default, deserialize_with = "one_or_more")]
    #[schemars(with = "OneOrMore<GrowthCheck>")]
    pub memory_growth: Vec<GrowthCheck>,
    #[serde(default, deserialize_with = "one_or_more")]
    #[schemars(with = "OneOrMore<PeakCheck>")]
    pub peak_memory: Vec<PeakCheck>,
    pub disk: Option<DiskCheck>,
    #[serde(default, deserialize_with = "one_or_more")]
    #[schemars(with = "OneOrMore<ThroughputCheck>")]
    pub throughput: Vec<ThroughputCheck>,
    /// One check, or a list: `[{ max: 10ms }, { max: 50ms, window: 1m }]`.
    #[serde(default, deserialize_with = "one_or_more")]
    #[schemars(with = "OneOrMore<LatencyCheck>")]
    pub latency: Vec<LatencyCheck>,
    pub restart_time: Option<RestartTimeCheck>,
}

/// A check, or a list of checks of one kind (the suite schema's view).
#[allow(dead_code)]
#[derive(schemars::JsonSchema)]
#[serde(untagged)]
enum OneOrMore<T> {
    One(T),
    More(Vec<T>),
}

/// A check given alone or as a list of them; either reads as a list. The
/// errors stay those of the check itself.
fn one_or_more<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct V<T>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a check (a map), or a list of them")
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Vec<T>, A::Error> {
            T::deserialize(de::value::MapAccessDeserializer::new(map)).map(|t| vec![t])
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<Vec<T>, A::Error> {
            Vec::deserialize(de::value::SeqAccessDeserializer::new(seq))
        }
    }
    d.deserialize_any(V(std::marker::PhantomData))
}

/// A phase a check looks at: its place in `phases`, from 1, or its words
/// as the report's phases table names it (`run 10m`, `pause 400ms`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum PhaseRef {
    Place(u32),
    Name(String),
}

impl PhaseRef {
    /// Whether the record of a phase of the suite's own list is this one.
    pub fn is(&self, place: Option<u32>, words: &str) -> bool {
        match self {
            PhaseRef::Place(n) => place == Some(*n),
            PhaseRef::Name(name) => place.is_some() && words == name,
        }
    }
}

impl fmt::Display for PhaseRef {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            PhaseRef::Place(n) => write!(f, "{n}"),
            PhaseRef::Name(name) => write!(f, "`{name}`"),
        }
    }
}

/// Where a scoped check looks, as its result's name says it:
/// ` in phase 3`, ` in every 1m window`.
pub fn scope_text(phase: Option<&PhaseRef>, window: Option<Dur>) -> String {
    match (phase, window) {
        (Some(p), _) => format!(" in phase {p}"),
        (None, Some(w)) => format!(" in every {} window", crate::units::human_duration(w.0)),
        (None, None) => String::new(),
    }
}

fn has_phase(phases: &[Phase], f: &dyn Fn(&Phase) -> bool) -> bool {
    phases.iter().any(|p| match p {
        Phase::Repeat { phases, .. } => has_phase(phases, f),
        p => f(p),
    })
}

/// The percentiles a phase's and a window's load keeps.
pub const KEPT_PERCENTILES: [f64; 4] = [50.0, 90.0, 99.0, 99.9];

fn either<T: Clone>(over: &[T], base: &[T]) -> Vec<T> {
    if over.is_empty() { base } else { over }.to_vec()
}

/// `checks.latency.window`, or `checks.latency[1].window` in a list.
fn at(name: &str, n: usize, i: usize, field: &str) -> String {
    if n > 1 {
        format!("checks.{name}[{i}].{field}")
    } else {
        format!("checks.{name}.{field}")
    }
}

/// What is wrong with one check's `phase` or `window` (the check is
/// `checks.NAME[I]` of `n`).
fn scope_problems_of(
    s: &Suite,
    name: &str,
    n: usize,
    i: usize,
    phase: Option<&PhaseRef>,
    window: Option<Dur>,
    out: &mut Vec<(String, String)>,
) {
    if phase.is_some() && window.is_some() {
        out.push((
            at(name, n, i, "window"),
            "give `phase` or `window`, not both".into(),
        ));
    }
    match phase {
        Some(PhaseRef::Place(p)) if *p == 0 || *p as usize > s.phases.len() => {
            out.push((
                at(name, n, i, "phase"),
                format!(
                    "`phase: {p}`: the suite has {} phases; count them from 1 as listed under `phases` (a `repeat` is one)",
                    s.phases.len()
                ),
            ));
        }
        Some(PhaseRef::Name(words)) => {
            let names: Vec<String> = s.phases.iter().map(|p| p.to_string()).collect();
            let same = names.iter().filter(|n| *n == words).count();
            if same != 1 {
                out.push((
                    at(name, n, i, "phase"),
                    format!(
                        "`phase: {words}`: {} name a phase by its words as the report does ({}), or by its place from 1",
                        if same == 0 { "no phase of the suite is called that;" } else { "more than one phase is called that;" },
                        names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
        }
        _ => {}
    }
    if window.is_some_and(|w| w.0.is_zero()) {
        out.push((
            at(name, n, i, "window"),
            "a window has a length, e.g. 1m".into(),
        ));
    }
}

/// What is wrong with the `disk` check in this suite.
fn disk_problems(d: &DiskCheck, s: &Suite) -> Vec<(String, String)> {
    let mut out = vec![];
    if d.max.is_none() && d.max_growth.is_none() && d.min_growth.is_none() {
        out.push((
                "checks.disk".into(),
                "give `max` (a size, e.g. 4GiB), `max_growth` (a ratio, e.g. 1.5), or `min_growth` (the growth a reproduction must show, e.g. 2.0)"
                    .into(),
            ));
    }
    if d.max_growth.is_some_and(|g| !(g > 0.0 && g.is_finite())) {
        out.push((
            "checks.disk.max_growth".into(),
            "a ratio above 0, e.g. 1.5 for half as large again".into(),
        ));
    }
    let swaps = s.phases.iter().any(|p| {
        matches!(
            p,
            crate::suite::Phase::Upgrade(_) | crate::suite::Phase::Downgrade(_)
        )
    });
    if d.from == GrowthFrom::Upgrade && !swaps {
        out.push((
                "checks.disk.from".into(),
                "`from: upgrade` compares with the size before the first upgrade, and the suite has no `upgrade` or `downgrade` phase: add one, or leave `from` out".into(),
            ));
    }
    out
}

impl Checks {
    /// These checks with `over`'s in place of those it names: a cell's
    /// expectations over the suite's checks.
    pub fn overlaid(&self, over: &Checks) -> Checks {
        Checks {
            linearizable: over.linearizable.or(self.linearizable),
            lost_writes: over.lost_writes.or(self.lost_writes),
            unsynced_writes: over.unsynced_writes.or(self.unsynced_writes),
            corrupted_writes: over.corrupted_writes.or(self.corrupted_writes),
            aborted_reads: over.aborted_reads.or(self.aborted_reads),
            oom_kills: over.oom_kills.or(self.oom_kills),
            oom_errors: over.oom_errors.or(self.oom_errors),
            out_of_memory: over.out_of_memory.or(self.out_of_memory),
            unrecovered: over.unrecovered.or(self.unrecovered),
            unresponsive: over.unresponsive.or(self.unresponsive),
            crashes: over.crashes.or(self.crashes),
            memory_growth: either(&over.memory_growth, &self.memory_growth),
            peak_memory: either(&over.peak_memory, &self.peak_memory),
            disk: over.disk.clone().or_else(|| self.disk.clone()),
            throughput: either(&over.throughput, &self.throughput),
            latency: either(&over.latency, &self.latency),
            restart_time: over
                .restart_time
                .clone()
                .or_else(|| self.restart_time.clone()),
        }
    }

    /// The window lengths the load must keep figures for.
    pub fn windows(&self) -> Vec<std::time::Duration> {
        let mut w: Vec<std::time::Duration> = self
            .latency
            .iter()
            .filter_map(|c| c.window)
            .chain(self.throughput.iter().filter_map(|c| c.window))
            .map(|d| d.0)
            .collect();
        w.sort();
        w.dedup();
        w
    }

    /// The names of the checks set here, as results name them (a result's
    /// name may add the series: `peak_memory (rss)`).
    pub fn names(&self) -> Vec<&'static str> {
        [
            ("linearizable", self.linearizable.is_some()),
            ("lost_writes", self.lost_writes.is_some()),
            ("unsynced_writes", self.unsynced_writes.is_some()),
            ("corrupted_writes", self.corrupted_writes.is_some()),
            ("aborted_reads", self.aborted_reads.is_some()),
            ("oom_kills", self.oom_kills.is_some()),
            ("oom_errors", self.oom_errors.is_some()),
            ("out_of_memory", self.out_of_memory.is_some()),
            ("unrecovered", self.unrecovered.is_some()),
            ("unresponsive", self.unresponsive.is_some()),
            ("crashes", self.crashes.is_some()),
            ("memory_growth", !self.memory_growth.is_empty()),
            ("peak_memory", !self.peak_memory.is_empty()),
            ("disk", self.disk.is_some()),
            ("throughput", !self.throughput.is_empty()),
            ("latency", !self.latency.is_empty()),
            ("restart_time", self.restart_time.is_some()),
        ]
        .into_iter()
        .filter(|(_, set)| *set)
        .map(|(n, _)| n)
        .collect()
    }

    /// What is wrong with the checks of a phase or a window: a phase the
    /// suite does not have, both at once, a percentile a window does not
    /// keep.
    fn scope_problems(&self, s: &Suite) -> Vec<(String, String)> {
        let mut out = vec![];
        for (i, l) in self.latency.iter().enumerate() {
            let at = |f: &str| at("latency", self.latency.len(), i, f);
            if !(l.percentile > 0.0 && l.percentile < 100.0) {
                out.push((
                    at("percentile"),
                    "the percentile is between 0 and 100 (exclusive), e.g. 99 or 99.9".into(),
                ));
            } else if (l.phase.is_some() || l.window.is_some())
                && !KEPT_PERCENTILES.contains(&l.percentile)
            {
                out.push((
                    at("percentile"),
                    format!("a phase's or a window's latency is kept at the 50th, 90th, 99th and 99.9th percentiles, not the {}th: use one of those", l.percentile),
                ));
            }
        }
        let scopes = self
            .latency
            .iter()
            .map(|c| (c.phase.as_ref(), c.window))
            .enumerate()
            .map(|(i, s)| ("latency", self.latency.len(), i, s))
            .chain(self.throughput.iter().enumerate().map(|(i, c)| {
                (
                    "throughput",
                    self.throughput.len(),
                    i,
                    (c.phase.as_ref(), c.window),
                )
            }))
            .chain(self.memory_growth.iter().enumerate().map(|(i, c)| {
                (
                    "memory_growth",
                    self.memory_growth.len(),
                    i,
                    (c.phase.as_ref(), c.window),
                )
            }))
            .chain(self.peak_memory.iter().enumerate().map(|(i, c)| {
                (
                    "peak_memory",
                    self.peak_memory.len(),
                    i,
                    (c.phase.as_ref(), c.window),
                )
            }));
        for (i, g) in self.memory_growth.iter().enumerate() {
            let n = self.memory_growth.len();
            if g.max.0.is_infinite() && g.min.is_none() {
                let path = if n > 1 {
                    format!("checks.memory_growth[{i}]")
                } else {
                    "checks.memory_growth".into()
                };
                out.push((
                    path,
                    "give `max` (the most growth allowed, e.g. 20MiB/h), or `min` (the least a reproduction must show)".into(),
                ));
            }
            if g.min.is_some() && (g.phase.is_some() || g.window.is_some()) {
                out.push((
                    at("memory_growth", n, i, "min"),
                    "`min` is judged on the whole run: remove `phase` and `window`, or give a second check without `min`".into(),
                ));
            }
        }
        for (name, n, i, (phase, window)) in scopes {
            scope_problems_of(s, name, n, i, phase, window, &mut out);
        }
        out
    }

    /// Checks that cannot be measured by this suite.
    pub fn problems(&self, s: &Suite) -> Vec<(String, String)> {
        let mut out = vec![];
        if self.linearizable.is_some() && s.workload.is_none() {
            out.push(("checks.linearizable".into(), "`linearizable` judges the history of the load's requests, and the suite has no `workload:`".into()));
        }
        // An upgrade or a downgrade reads back too.
        let verifies = has_phase(&s.phases, &|p| {
            matches!(
                p,
                Phase::Verify | Phase::VerifyOffline | Phase::Upgrade(_) | Phase::Downgrade(_)
            )
        });
        // Reads during the load are judged too, and so is the read-back
        // after every kill.
        let w = s.workload.as_ref();
        let reads_judged = w.is_some_and(|w| w.mix.get + w.mix.mget > 0.0)
            && has_phase(&s.phases, &|p| matches!(p, Phase::Run(_) | Phase::Chaos(_)));
        let read_back = w.is_some_and(|w| w.readback_after_restart)
            && has_phase(&s.phases, &|p| {
                matches!(
                    p,
                    Phase::Kill(_)
                        | Phase::Chaos(_)
                        | Phase::Disk(crate::suite::faults::DiskFault::PowerCut { .. })
                )
            });
        for (name, set) in [
            ("lost_writes", self.lost_writes.is_some()),
            ("corrupted_writes", self.corrupted_writes.is_some()),
            ("aborted_reads", self.aborted_reads.is_some()),
        ] {
            if set && !(verifies || reads_judged || read_back) {
                out.push((format!("checks.{name}"), format!("`{name}` is measured by a `verify` phase, the read-back after a kill, or reads during the load, and the suite has none: add `- verify` after a restart")));
            }
        }
        let power_cuts = s.workload.is_some()
            && has_phase(&s.phases, &|p| match p {
                Phase::Disk(crate::suite::faults::DiskFault::PowerCut { .. }) => true,
                Phase::Chaos(c) => c.power_cuts(),
                _ => false,
            });
        if self.unsynced_writes.is_some() && !power_cuts {
            out.push(("checks.unsynced_writes".into(), "`unsynced_writes` counts what power cuts took from the unsynced tail, and the suite has no `power_cut` (a phase or a chaos action) with a workload: add `- power_cut`".into()));
        }
        let loads = has_phase(&s.phases, &|p| {
            matches!(p, Phase::Run(_) | Phase::Load | Phase::Chaos(_))
        });
        for (name, set) in [
            ("throughput", !self.throughput.is_empty()),
            ("latency", !self.latency.is_empty()),
        ] {
            if set && (s.workload.is_none() || !loads) {
                out.push((format!("checks.{name}"), format!("`{name}` is measured on the built-in workload: add a `workload:` and a `run` phase")));
            }
        }
        if let Some(d) = &self.disk {
            out.extend(disk_problems(d, s));
        }
        out.extend(self.scope_problems(s));
        for p in &self.peak_memory {
            if matches!(p.max, Bound::OfLimit(_)) && s.limits.memory.is_none() {
                out.push((
                    "checks.peak_memory.max".into(),
                    "a share of the memory limit needs `limits: { memory: ... }`; or give a size such as 340MiB".into(),
                ));
            }
            if let (Some(limit), Bound::Bytes(max)) = (s.limits.memory, p.max) {
                if max > limit.0 {
                    out.push((
                        "checks.peak_memory.max".into(),
                        format!(
                            "the check allows more than limits.memory ({}): it can never fail",
                            crate::units::Bytes(limit.0)
                        ),
                    ));
                }
            }
        }
        out
    }
}
