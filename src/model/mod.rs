//! The model of a run: what `summary.json` holds, and the records the
//! phase runner (`cell`) builds while a cell runs. A leaf: it depends on nothing of soak's
//! but its units, so that every layer above (the phase runner, the reporters,
//! `report compare` and `merge`, the tests) reads one typed contract.
//!
//! `summary.json` is versioned by [`SCHEMA_VERSION`]; new fields may be
//! added at any version (with `#[serde(default)]`, so that a summary
//! written by an older soak still loads), and its JSON Schema is committed
//! as `summary.schema.json` (`soak schema --summary`).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Bumped only when a field of the contract changes meaning; new fields
/// may be added at any version.
pub const SCHEMA_VERSION: u32 = 1;

/// A verdict, ordered from best to worst: the verdict of several is the
/// worst of them ([`Verdict::worst`]).
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    #[default]
    Pass,
    /// A check marked `severity: warn` failed, or a `memory_growth` check
    /// neither found nor ruled out growth over its max (`inconclusive:
    /// warn`, the default): shown, never failing.
    Warn,
    Fail,
    /// The cell could not finish (the environment, an interrupt).
    Error,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Warn => "warn",
            Verdict::Fail => "fail",
            Verdict::Error => "error",
        }
    }

    /// The worst of several; `Pass` for none.
    pub fn worst(verdicts: impl IntoIterator<Item = Verdict>) -> Verdict {
        verdicts.into_iter().max().unwrap_or(Verdict::Pass)
    }

    /// The verdict of a whole run from its cells': a warning alone passes.
    pub fn of_run(cells: impl IntoIterator<Item = Verdict>) -> Verdict {
        match Verdict::worst(cells) {
            Verdict::Warn => Verdict::Pass,
            v => v,
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The whole run: what `summary.json` holds.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Summary {
    #[serde(default)]
    pub schema_version: u32,
    pub suite: String,
    #[serde(default)]
    pub description: String,
    /// "pass", "fail" or "error" (a warning alone passes: see
    /// `warned_cells` and `warned_checks`, and [`Summary::headline`]).
    pub verdict: Verdict,
    /// Cells whose verdict is `warn`: a passing run that warned says so
    /// ("pass, 3 warnings in 3 cells").
    #[serde(default)]
    pub warned_cells: usize,
    /// Checks that warned, over every cell.
    #[serde(default)]
    pub warned_checks: usize,
    #[serde(default)]
    pub run_id: String,
    /// The run's seed: `soak run --seed N` replays workloads and chaos.
    #[serde(default)]
    pub seed: u64,
    /// `I/N` when the run was one shard of the suite.
    #[serde(default)]
    pub shard: Option<String>,
    #[serde(default)]
    pub started_at: String,
    #[serde(default)]
    pub duration_s: f64,
    #[serde(default)]
    pub suite_file: String,
    #[serde(default)]
    pub soak_version: String,
    /// Why the run stopped before its cells were done: `interrupted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<Stop>,
    pub cells: Vec<CellResult>,
    /// For a report made by `soak report merge`: the runs it joins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub merged: Vec<String>,
    /// Shards (`I/N`) that no merged run covered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing_shards: Vec<String>,
    /// The suite's `prepare:` steps, as they ran before the cells.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prepared: Vec<Prepared>,
}

/// One `prepare:` step as it ran.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, JsonSchema)]
pub struct Prepared {
    /// The argv as run, joined by spaces.
    pub command: String,
    pub took_s: f64,
    /// Its exit code; `None`: timed out, or died by a signal.
    pub code: Option<i32>,
    /// Its output (stdout and stderr), in the run's folder.
    pub log: String,
}

impl Summary {
    /// Cells that warned, and checks that warned.
    pub fn warnings(&self) -> (usize, usize) {
        let cells = self
            .cells
            .iter()
            .filter(|c| c.verdict == Verdict::Warn)
            .count();
        let checks = self
            .cells
            .iter()
            .flat_map(|c| &c.checks)
            .filter(|k| k.verdict == Verdict::Warn)
            .count();
        (cells, checks)
    }

    /// Sets `warned_cells` and `warned_checks` from the cells.
    pub fn tally(&mut self) {
        (self.warned_cells, self.warned_checks) = self.warnings();
    }

    /// The run's verdict as its top line says it: `pass`, `pass, 3
    /// warnings in 2 cells`, `fail`, `error`. A reader of a PR comment
    /// must not see a green pass and nothing else when cells warned.
    pub fn headline(&self) -> String {
        let (cells, checks) = self.warnings();
        match self.verdict {
            Verdict::Pass if checks > 0 || cells > 0 => format!(
                "pass, {} in {}",
                plural(checks.max(cells), "warning"),
                plural(cells, "cell")
            ),
            v => v.as_str().to_string(),
        }
    }

    /// Whether the run passed with warnings.
    pub fn warned(&self) -> bool {
        self.verdict == Verdict::Pass && self.warnings() != (0, 0)
    }

    /// Whether the run was stopped early by the user (Ctrl-C, SIGTERM).
    pub fn interrupted(&self) -> bool {
        self.stopped == Some(Stop::Interrupted)
            || self
                .cells
                .iter()
                .any(|c| c.error.as_deref() == Some(INTERRUPTED))
    }
}

/// `1 warning`, `3 warnings`.
fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// Why a run stopped early.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Stop {
    Interrupted,
}

/// The error text of a cell the user interrupted (as older soaks wrote it).
pub const INTERRUPTED: &str = "interrupted";

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct CellResult {
    pub id: String,
    #[serde(default)]
    pub params: BTreeMap<String, String>,
    pub verdict: Verdict,
    /// Why the cell could not finish (verdict "error").
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub checks: Vec<CheckResult>,
    #[serde(default)]
    pub integrity: Integrity,
    #[serde(default)]
    pub memory: MemorySummary,
    #[serde(default)]
    pub restarts: Vec<Restart>,
    #[serde(default)]
    pub load: Option<LoadSummary>,
    #[serde(default)]
    pub phases: Vec<PhaseRecord>,
    /// Paths of the cell's files, relative to the report folder.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    #[serde(default)]
    pub seed: Option<u64>,
    /// The allocator profile and its library's package version.
    #[serde(default)]
    pub allocator: Option<String>,
    /// Chaos actions as done, with the seed of their schedule.
    #[serde(default)]
    pub chaos: Vec<ChaosRecord>,
    /// Commands the `exec` phases ran: exit code, log, time, throughput.
    #[serde(default)]
    pub execs: Vec<ExecResult>,
    /// Upgrades and downgrades, each with its outcome and read-back.
    #[serde(default)]
    pub upgrades: Vec<UpgradeRecord>,
    /// `verify: offline` phases: the data directory read with RocksDB.
    #[serde(default)]
    pub offline: Vec<OfflineRecord>,
    /// The node's cgroup and what its kernel counters recorded.
    #[serde(default)]
    pub cgroup: Option<CgroupSummary>,
    /// The Docker engine the node's containers ran on (none: a process).
    #[serde(default)]
    pub engine: Option<EngineInfo>,
    /// What the suite expected this cell to show (`expect:`), and whether
    /// it did.
    #[serde(default)]
    pub expectation: Option<Expectation>,
    /// With `--repeat N`: the cell this run repeats (its id without `#i`).
    #[serde(default)]
    pub repeat_of: Option<String>,
    /// What soak's network proxy did, where `network` phases set faults
    /// between the load and the node.
    #[serde(default)]
    pub network: Option<NetworkStats>,
    /// What soak's fault filesystem under the data directory did, where
    /// the suite has disk faults (`power_cut`, `disk_full`, `io_errors`,
    /// `io_delay`, `limits.disk`).
    #[serde(default)]
    pub disk_faults: Option<DiskStats>,
    /// Each fault lifted (`disk_full: false`, `io_errors: clear`, ...) and
    /// how soon after it the node served writes again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recoveries: Vec<Recovery>,
    /// The node's distinct error replies to the load (at most 8), with
    /// when each first came: what it said while it refused requests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub error_replies: Vec<ErrorReply>,
    /// Lines of the node's log that read as errors (distinct up to their
    /// numbers, at most 8), with how often each came.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub log_errors: Vec<LogLine>,
    /// The services beside the node (`services:`), and what happened to
    /// them: their deaths are theirs, not the node's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<ServiceRecord>,
    /// What soak itself cost while the cell ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harness: Option<HarnessCost>,
    /// What the linearizability checker found in the cell's history (a
    /// `linearizable` check).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<HistoryRecord>,
}

/// A cell's history (every request of its load), as the linearizability
/// checker judged it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct HistoryRecord {
    /// `linearizable`, `not_linearizable` or `unknown` (the search ran
    /// out of its budget, or the history could not be read).
    pub verdict: String,
    pub operations: u64,
    pub keys: u64,
    pub clients: u64,
    /// How long the check took.
    pub seconds: f64,
    /// The history's file, relative to the run's folder.
    pub file: String,
    /// Keys that could not be linearized (the first few), each with the
    /// operation that could not be and the smallest window around it.
    pub violations: Vec<HistoryViolation>,
    /// How many keys could not be (all of them, where `violations` holds
    /// the first few), and how many were not checked after one was found.
    pub violating_keys: u64,
    pub unchecked_keys: u64,
    /// Why the verdict is unknown, if it is.
    pub unknown: Option<String>,
}

/// A key whose operations cannot be linearized.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct HistoryViolation {
    pub key: String,
    /// The operation that could not be linearized: usually the read that
    /// saw what it should not have (`read() -> 41`).
    pub operation: String,
    pub client: u32,
    /// When it was invoked and completed, seconds since the cell began.
    pub invoke_s: f64,
    pub complete_s: f64,
    /// The smallest window of the key's operations that cannot be
    /// linearized (its last 12), oldest first; the culprit among them.
    pub window: Vec<WindowOp>,
    /// The faults in force while it ran, or lifted shortly before (a
    /// partition, a member down).
    pub faults: Vec<ActiveFault>,
}

/// An operation of a violation's window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct WindowOp {
    pub client: u32,
    /// `write(14) -> ok`, `read() -> 12`.
    pub operation: String,
    /// Seconds since the cell began; no completion for one whose outcome
    /// is unknown.
    pub invoke_s: f64,
    pub complete_s: Option<f64>,
    /// The operation that could not be linearized.
    pub culprit: bool,
}

/// A fault in force around a violation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct ActiveFault {
    /// `partition isolate 2 (leader)`, `member 3 down (signal SIGKILL)`.
    pub what: String,
    pub from_s: f64,
    /// When it was lifted (none: never).
    pub to_s: Option<f64>,
}

impl std::fmt::Display for ActiveFault {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{} from {:.1} s", self.what, self.from_s)?;
        match self.to_s {
            Some(t) => write!(f, " to {t:.1} s"),
            None => f.write_str(", never lifted"),
        }
    }
}

/// What soak itself cost while a cell ran, from its own samples: a reader
/// sees that the harness did not disturb the node.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct HarnessCost {
    /// soak's resident memory at the cell's first and last sample, and
    /// the most it had.
    pub rss_first_bytes: u64,
    pub rss_last_bytes: u64,
    pub rss_peak_bytes: u64,
    /// soak's CPU over the cell, as a share of one core (0.01: 1%).
    pub cpu_share: f64,
    /// The sampler's part of it, at `interval_s` between samples.
    pub sampler_cpu_share: f64,
    pub interval_s: f64,
    /// The load's part (its thread), and the fault filesystem's (its
    /// threads), where the cell had them.
    pub load_cpu_share: f64,
    pub faultfs_cpu_share: f64,
}

/// A fault lifted, and the node's way back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Recovery {
    /// The phase that lifted it, as the report names phases.
    pub fault: String,
    /// Seconds since the cell started.
    pub lifted_at_s: f64,
    /// Seconds from the lift to the end of the first telemetry interval
    /// with writes acknowledged and no request failed (at most one
    /// interval late); none: the node did not serve again before the
    /// next fault, or the end of the cell.
    pub serving_after_s: Option<f64>,
    /// Seconds from the lift to the next fault (a chaos action, a power
    /// cut, a network or disk fault), which ends the measurement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_fault_after_s: Option<f64>,
}

/// A service beside the node (a broker), and what happened to it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct ServiceRecord {
    pub name: String,
    /// Its log, relative to the cell's folder.
    pub log: String,
    /// How long each of its starts took to get ready, in milliseconds.
    pub ready_ms: Vec<u64>,
    /// Times `service` phases killed it, and stopped it.
    pub kills: u64,
    pub stops: u64,
    /// How it exited when soak had not taken it down, if it did.
    pub exited: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LogLine {
    pub line: String,
    pub count: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorReply {
    /// Seconds since the cell started, when it first came.
    pub at_s: f64,
    pub reply: String,
}

/// What the fault filesystem under the node's data directory did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct DiskStats {
    /// Writes, reads and fsyncs the node made through it.
    pub writes: u64,
    pub bytes_written: u64,
    pub reads: u64,
    pub fsyncs: u64,
    /// Power cuts, the unsynced bytes they dropped, and the files they
    /// changed.
    pub power_cuts: u64,
    pub bytes_dropped: u64,
    pub files_cut: u64,
    /// Writes refused with ENOSPC (`disk_full`, `limits.disk`).
    pub refused_writes: u64,
    /// Operations failed with EIO (`io_errors`).
    pub read_errors: u64,
    pub write_errors: u64,
    pub fsync_errors: u64,
    /// Operations held (`io_delay`).
    pub delayed: u64,
    /// Whether the kernel's writeback cache gathered the node's writes
    /// (cells whose faults leave `write()` alone), or every write came
    /// through to soak (a full disk, `limits.disk`, faults on writes).
    pub writeback_cache: bool,
    /// Operations the filesystem failed for the node (other than a
    /// missing or existing name), by operation and error, e.g.
    /// `"write EINVAL": 150000`: what a node that makes no progress on it
    /// was told.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub failed: std::collections::BTreeMap<String, u64>,
}

impl DiskStats {
    /// Adds another filesystem's counts (a cluster's members' together).
    pub fn add(&mut self, o: DiskStats) {
        self.writes += o.writes;
        self.bytes_written += o.bytes_written;
        self.reads += o.reads;
        self.fsyncs += o.fsyncs;
        self.power_cuts += o.power_cuts;
        self.bytes_dropped += o.bytes_dropped;
        self.files_cut += o.files_cut;
        self.refused_writes += o.refused_writes;
        self.read_errors += o.read_errors;
        self.write_errors += o.write_errors;
        self.fsync_errors += o.fsync_errors;
        self.delayed += o.delayed;
        self.writeback_cache |= o.writeback_cache;
        for (k, v) in o.failed {
            *self.failed.entry(k).or_default() += v;
        }
    }
}

/// What the network fault proxy between the load and the node did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct NetworkStats {
    /// Connections the load opened through it.
    pub connections: u64,
    /// Connections it reset (`reset: true`).
    pub resets: u64,
    /// Bytes delivered from the load to the node, and back.
    pub bytes_to_node: u64,
    pub bytes_to_load: u64,
    /// Bytes accepted and dropped (`blackhole: true`).
    pub bytes_blackholed: u64,
    /// Replies delivered later than they came (`latency`, `jitter`).
    pub chunks_delayed: u64,
}

/// A Docker engine, as the report names it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct EngineInfo {
    /// As given: `unix:///var/run/docker.sock`, `tcp://host:2376`,
    /// `ssh://user@host`.
    pub host: String,
    pub version: String,
    /// The API version soak and the engine agreed on.
    pub api: String,
    pub kernel: String,
    pub os: String,
    /// `1` or `2`.
    pub cgroup_version: String,
    /// Whether the engine runs on this machine (its containers' cgroups
    /// and processes are read here).
    pub local: bool,
}

/// A cell's expected outcome: a reproduction cell expects the incident (a
/// count of at least one, e.g. `oom_kills: ">= 1"`), a fix cell expects it
/// not to happen.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct Expectation {
    /// The expected checks, as measured against their limits
    /// (`oom_kills: 4 (>= 1)`).
    pub checks: Vec<String>,
    /// Whether the cell was to show the incident.
    pub incident: bool,
    /// Whether every expected check held.
    pub met: bool,
}

impl Expectation {
    /// Whether the incident happened in this cell.
    pub fn reproduced(&self) -> bool {
        self.incident == self.met
    }

    /// `reproduced, as expected`, `**not reproduced**, ...`.
    pub fn outcome(&self) -> &'static str {
        match (self.incident, self.met) {
            (true, true) => "reproduced, as expected",
            (true, false) => "**not reproduced** (the suite expected it here)",
            (false, true) => "not reproduced, as expected (the fix holds)",
            (false, false) => "**reproduced** (the suite expected the fix to hold)",
        }
    }
}

impl CellResult {
    /// A cell that could not run at all.
    pub fn error(id: &str, params: BTreeMap<String, String>, error: String) -> CellResult {
        CellResult {
            id: id.into(),
            params,
            verdict: Verdict::Error,
            error: Some(error),
            ..CellResult::default()
        }
    }
}

/// The node's cgroup: where it was, and the kernel's own counters, read
/// just before it was removed.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct CgroupSummary {
    /// `v1` or `v2`.
    pub version: String,
    pub path: String,
    /// How soak got a place for it (see `soak doctor`).
    pub placement: String,
    /// The kernel's peak usage: v2 `memory.peak` (Linux 5.19+), v1
    /// `memory.max_usage_in_bytes`.
    pub peak_bytes: Option<u64>,
    /// `limits.high`: v2's `memory.high`.
    pub high_bytes: Option<u64>,
    /// `memory.events`: times throttled over `memory.high`, times at
    /// `memory.max` (v1: `memory.failcnt`), OOM killer runs and kills.
    pub events_high: u64,
    pub events_max: u64,
    pub events_oom: u64,
    pub oom_kills: u64,
    /// Memory pressure (PSI, v2): the highest sampled share of 10 s in
    /// which some / all of the node's tasks stalled, in percent, and the
    /// whole stall in seconds.
    pub pressure_some_avg10_max: Option<f64>,
    pub pressure_full_avg10_max: Option<f64>,
    pub pressure_some_stall_s: Option<f64>,
    pub pressure_full_stall_s: Option<f64>,
}

/// What chaos may do to the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// The chaos signal (SIGKILL by default), then a start.
    Kill,
    /// SIGSTOP for the pause time, then SIGCONT.
    Pause,
    /// A graceful stop, then a start.
    Restart,
    /// SIGKILL, every unsynced byte dropped (soak's fault filesystem),
    /// then a start.
    #[serde(rename = "power_cut")]
    PowerCut,
    /// Network faults on soak's proxy, held, then cleared.
    Network,
    /// A disk fault (full, I/O errors, delays), held, then lifted.
    Disk,
    /// A cluster's members cut apart, held, then healed.
    Partition,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ChaosRecord {
    pub seed: u64,
    /// Offset from the start of the chaos phase, as planned.
    pub at_s: f64,
    pub action: Action,
    /// The fault, for `network` and `disk` actions (e.g. "network latency
    /// 200ms", "disk full"), with how long it was held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct CheckResult {
    pub name: String,
    /// "pass", "fail" or "warn".
    pub verdict: Verdict,
    #[serde(default)]
    pub value: serde_json::Value,
    #[serde(default)]
    pub limit: serde_json::Value,
    #[serde(default)]
    pub unit: String,
    /// How the verdict was reached, where it needs more than value and limit.
    #[serde(default)]
    pub detail: Option<String>,
}

/// What one memory (or disk) series says, in bytes and bytes per hour.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct SeriesAnalysis {
    pub peak: u64,
    /// Median of the last quarter of the last segment: where it settled.
    pub steady: Option<f64>,
    /// Growth, bytes per hour, with its 95% interval: Theil-Sen, or where a
    /// segment warms up its curve's least-squares fit, pooled over the
    /// segments between restarts.
    pub slope_per_hour: Option<f64>,
    pub slope_low_per_hour: Option<f64>,
    pub slope_high_per_hour: Option<f64>,
    /// One-sided p-value of growth (Mann-Kendall, autocorrelation-corrected,
    /// with a warm-up's fit pooled in by the weighted Z method).
    pub p_growth: Option<f64>,
    /// At the slope, hours from the steady state to the limit.
    pub hours_to_limit: Option<f64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct MemorySummary {
    pub peak_rss_bytes: u64,
    /// Proportional and anonymous resident memory, from smaps_rollup.
    pub peak_pss_bytes: u64,
    pub peak_anon_bytes: u64,
    pub peak_cgroup_bytes: u64,
    pub limit_bytes: Option<u64>,
    /// Growth of the RSS (as `SeriesAnalysis::slope_per_hour`), pooled over
    /// segments between restarts.
    pub slope_bytes_per_hour: Option<f64>,
    pub cgroup_slope_bytes_per_hour: Option<f64>,
    pub oom_kills: u64,
    /// Out-of-memory errors the node logged itself (a JVM's
    /// `OutOfMemoryError`, an allocation failure of Rust, Go or C++),
    /// whether or not it exited: how many lines said so, and the first
    /// distinct ones with how often each came.
    #[serde(default)]
    pub oom_errors: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub oom_error_lines: Vec<LogLine>,
    pub samples: usize,
    pub peak_disk_bytes: u64,
    /// The process's RSS over the bytes its program allocated, at the
    /// scrape where the node was largest (its highest RSS), where the node
    /// reports its allocator's statistics on its Prometheus endpoint (the
    /// same way for every allocator).
    pub fragmentation: Option<f64>,
    /// The bytes the allocator held free at that scrape, and their share
    /// of all it held (free and allocated).
    #[serde(default)]
    pub allocator_free_bytes: Option<u64>,
    #[serde(default)]
    pub allocator_free_share: Option<f64>,
    /// Prometheus scrapes: answered, failed, answered with no series.
    pub scrapes: Option<ScrapeSummary>,
    /// The full analysis of each series: steady state, slope interval,
    /// significance, time to the limit.
    pub rss: SeriesAnalysis,
    pub pss: SeriesAnalysis,
    pub anon: SeriesAnalysis,
    pub cgroup: SeriesAnalysis,
    pub disk: SeriesAnalysis,
    /// Where the resident memory was, by kind of mapping (`smaps`): each
    /// kind's figures and trend, those ever above 0.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kinds: Vec<KindGrowth>,
    /// A cluster's members, each one's RSS and its trend (the cell's
    /// figures are their sum, against the sum of their limits).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<KindGrowth>,
    /// The call stacks whose live bytes grew most (`memory.profile`), or
    /// why there are none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<ProfileSummary>,
    /// The JVM's own account (`memory.jvm: nmt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jvm: Option<JvmAccountSummary>,
}

/// A JVM's Native Memory Tracking over a cell: each category (`nmt:Other`,
/// labelled `JVM Other`), the committed total (`nmt:total`) and RSS beyond
/// it (`nmt:outside`), each with its trend.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct JvmAccountSummary {
    pub readings: usize,
    pub categories: Vec<KindGrowth>,
    /// Why there is nothing to show, where there is not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// What a cell's heap profile found.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct ProfileSummary {
    /// `jemalloc` or `heaptrack`.
    pub tool: String,
    /// The two dumps compared (jemalloc's), or twice heaptrack's one
    /// record, relative to the cell's folder, and the seconds between the
    /// moments compared.
    pub base: Option<String>,
    pub last: Option<String>,
    pub seconds: f64,
    /// The stacks whose live bytes grew most, the largest first.
    pub growing: Vec<GrowingStack>,
    /// Why there is nothing to show, where there is not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A call stack whose live bytes grew, symbolized.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct GrowingStack {
    /// Innermost first, the allocator's own frames left out:
    /// `remember_session (allocnode.c:62)`.
    pub frames: Vec<String>,
    /// Live bytes at the later dump, and their growth since the earlier.
    pub live_bytes: u64,
    pub growth_bytes: i64,
    pub growth_bytes_per_hour: Option<f64>,
}

/// Significance level of the growth test: a trend must be this unlikely
/// under "no growth" before a check fails on it (or a kind of memory is
/// named as the one that grew).
pub const GROWTH_ALPHA: f64 = 0.01;

/// One kind of resident memory (heap, glibc arenas, thread stacks, ...)
/// over a cell, from the node's `smaps`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct KindGrowth {
    /// `heap`, `arenas`, `stacks`, `other_anon`, `file`, `shared`.
    pub kind: String,
    /// How reports name it: `glibc arenas`.
    pub label: String,
    pub peak_bytes: u64,
    /// At the first reading after warm-up, and at the last one.
    pub first_bytes: u64,
    pub last_bytes: u64,
    /// Its growth (as [`SeriesAnalysis::slope_per_hour`]) and its
    /// significance.
    pub slope_bytes_per_hour: Option<f64>,
    pub p_growth: Option<f64>,
    /// For glibc arenas: how many there were at those two readings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count_first: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count_last: Option<u64>,
}

impl KindGrowth {
    /// Whether it grew: a significant rise (as `memory_growth` judges).
    pub fn grew(&self) -> bool {
        self.p_growth.is_some_and(|p| p < GROWTH_ALPHA)
            && self.slope_bytes_per_hour.is_some_and(|s| s > 0.0)
    }

    /// The one that grew fastest among `kinds`, if any grew.
    pub fn fastest<'a>(kinds: impl IntoIterator<Item = &'a KindGrowth>) -> Option<&'a KindGrowth> {
        kinds.into_iter().filter(|k| k.grew()).max_by(|a, b| {
            a.slope_bytes_per_hour
                .partial_cmp(&b.slope_bytes_per_hour)
                .unwrap_or(std::cmp::Ordering::Equal)
        })
    }
}

impl MemorySummary {
    /// The kind that carried the most significant growth, if any grew.
    pub fn growing_kind(&self) -> Option<&KindGrowth> {
        KindGrowth::fastest(&self.kinds)
    }

    /// "in the JVM's account, JVM Other +14.2 MiB/h": the category of a
    /// JVM's Native Memory Tracking (or RSS outside it) that grew most.
    pub fn jvm_attribution(&self) -> Option<String> {
        let jvm = &self.jvm.as_ref()?.categories;
        let k = KindGrowth::fastest(jvm.iter().filter(|k| k.kind != "nmt:total"))?;
        Some(format!(
            "in the JVM's account, {} {:+.1} MiB/h",
            k.label,
            k.slope_bytes_per_hour? / 1048576.0
        ))
    }

    /// "of which glibc arenas +110.0 MiB/h (8 arenas to 24)": the kind that
    /// carried a growth of `total` bytes an hour, and its share of it; in
    /// a cluster, the member first ("of which member 3 +100.0 MiB/h, 83%
    /// of it; ...").
    pub fn attribution(&self, total: f64) -> Option<String> {
        let share = |slope: f64| match total > 0.0 {
            true => format!(", {:.0}% of it", (slope / total * 100.0).min(100.0)),
            false => String::new(),
        };
        let member = KindGrowth::fastest(&self.members).and_then(|m| {
            let slope = m.slope_bytes_per_hour?;
            Some(format!(
                "of which {} {:+.1} MiB/h{}",
                m.label,
                slope / 1048576.0,
                share(slope)
            ))
        });
        match (member, self.kind_attribution(total)) {
            (Some(m), Some(k)) => Some(format!("{m}; {k}")),
            (m, k) => m.or(k),
        }
    }

    fn kind_attribution(&self, total: f64) -> Option<String> {
        let k = self.growing_kind()?;
        let slope = k.slope_bytes_per_hour?;
        let share = if total > 0.0 {
            format!(", {:.0}% of it", (slope / total * 100.0).min(100.0))
        } else {
            String::new()
        };
        let count = match (k.count_first, k.count_last) {
            (Some(a), Some(b)) if a != b => format!(": {a} arenas to {b}"),
            (Some(a), Some(_)) => format!(": {a} arenas"),
            _ => String::new(),
        };
        Some(format!(
            "of which {} {:+.1} MiB/h{share}{count}",
            k.label,
            slope / 1048576.0
        ))
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct ScrapeSummary {
    pub ok: u64,
    pub failed: u64,
    pub empty: u64,
    pub series: usize,
    pub last_error: Option<String>,
}

/// Why the node went down before a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Cause {
    /// A `kill` phase.
    Kill,
    /// A `stop` phase.
    Stop,
    /// A `restart` phase.
    Restart,
    /// A chaos action.
    Chaos,
    /// The kernel's OOM killer.
    Oom,
    /// A death soak did not cause that was not an OOM kill.
    Crash,
    /// An `upgrade` or a `downgrade` phase.
    Upgrade,
    Downgrade,
    /// A power cut (a `power_cut` phase or chaos action): SIGKILL, and
    /// every byte not fsynced dropped from the data directory.
    #[serde(rename = "power_cut")]
    PowerCut,
}

impl Cause {
    /// Deaths soak did not cause.
    pub fn unexpected(self) -> bool {
        matches!(self, Cause::Oom | Cause::Crash)
    }

    /// Deaths that may take writes the node acknowledged: not a graceful
    /// stop.
    pub fn unclean(self) -> bool {
        matches!(
            self,
            Cause::Kill | Cause::Chaos | Cause::Oom | Cause::Crash | Cause::PowerCut
        )
    }

    /// As a reader says it: "restart after {}".
    pub fn said(self) -> &'static str {
        match self {
            Cause::Kill => "the planned kill",
            Cause::Stop => "the planned stop",
            Cause::Restart => "a planned restart",
            Cause::Chaos => "a chaos action",
            Cause::Oom => "an OOM kill",
            Cause::Crash => "a crash",
            Cause::Upgrade => "an upgrade",
            Cause::Downgrade => "a downgrade",
            Cause::PowerCut => "a power cut",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Kill => "kill",
            Cause::Stop => "stop",
            Cause::Restart => "restart",
            Cause::Chaos => "chaos",
            Cause::Oom => "oom",
            Cause::Crash => "crash",
            Cause::Upgrade => "upgrade",
            Cause::Downgrade => "downgrade",
            Cause::PowerCut => "power_cut",
        }
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which oracle found a restart's losses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Oracle {
    /// The read-back of every key right after the restart.
    ReadBack,
    /// A `verify` phase's read-back.
    Verify,
    /// The load's own reads, judged against the ledger.
    Reads,
}

impl Oracle {
    pub fn as_str(self) -> &'static str {
        match self {
            Oracle::ReadBack => "read-back",
            Oracle::Verify => "verify",
            Oracle::Reads => "reads during load",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Restart {
    /// What took the node down: a planned `kill`, `stop` or `restart`
    /// phase, a `chaos` action, an `oom` kill, a `crash`, or an `upgrade`.
    pub reason: Cause,
    /// Seconds since the cell started, when the node was down.
    pub at_s: f64,
    pub ready_after_ms: u64,
    /// How the previous incarnation ended.
    pub exit: String,
    /// Acknowledged writes this death took: found by the read-back right
    /// after the restart (before the load wrote again), and by reads during
    /// the load until the next restart.
    #[serde(default)]
    pub lost: u64,
    #[serde(default)]
    pub corrupted: u64,
    #[serde(default)]
    pub resurrected: u64,
    /// Writes the node said failed, read back after this death.
    #[serde(default)]
    pub aborted: u64,
    /// Writes in flight at the death, found either way by the read-back.
    #[serde(default)]
    pub in_doubt: u64,
    /// Seconds the read-back after the restart took (none: not read back).
    #[serde(default)]
    pub readback_s: Option<f64>,
    /// Which oracle found the losses: `read-back`, `reads during load`,
    /// or both.
    #[serde(default)]
    pub oracle: Option<String>,
    /// The first write found lost, to look up in the node's log.
    #[serde(default)]
    pub first_lost: Option<LostWrite>,
    /// After a power cut: acknowledged writes lost from the unsynced tail
    /// of their connections (see `Integrity::lost_unsynced`).
    #[serde(default)]
    pub lost_unsynced: u64,
    /// After a power cut: connections whose losses were not a tail (a
    /// write lost while a later one of the same connection survived).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holes: Vec<Hole>,
}

impl Restart {
    pub fn new(reason: Cause, at_s: f64, ready_after_ms: u64, exit: String) -> Restart {
        Restart {
            reason,
            at_s,
            ready_after_ms,
            exit,
            lost: 0,
            corrupted: 0,
            resurrected: 0,
            aborted: 0,
            in_doubt: 0,
            readback_s: None,
            oracle: None,
            first_lost: None,
            lost_unsynced: 0,
            holes: vec![],
        }
    }

    /// Adds what an oracle found, naming it.
    pub fn found(&mut self, oracle: Oracle, i: &Integrity, first: Option<LostWrite>) {
        self.lost += i.lost;
        self.lost_unsynced += i.lost_unsynced;
        self.corrupted += i.corrupted;
        self.resurrected += i.resurrected;
        self.aborted += i.aborted;
        self.in_doubt += i.in_doubt;
        let oracle = oracle.as_str();
        if i.harmed() > 0 {
            self.oracle = Some(match self.oracle.take() {
                Some(o) if o != oracle => format!("{o} and {oracle}"),
                _ => oracle.to_string(),
            });
        }
        if self.first_lost.is_none() {
            self.first_lost = first;
        }
    }
}

/// A hole in what a power cut left of one load connection's acknowledged
/// writes: `first_lost` was lost, and `survivor`, acknowledged after it on
/// the same connection, was read back. The node lost a write it had made
/// durable, or made later writes durable before earlier ones.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Hole {
    /// The load connection (it owns the keys `k` with `k % connections`
    /// equal to it).
    pub connection: usize,
    pub first_lost: LostWrite,
    /// The newest acknowledged write of the connection that survived.
    pub survivor: String,
    /// The connection's writes lost before the survivor.
    pub lost: u64,
}

/// The first write an oracle found lost (or corrupted, or resurrected).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LostWrite {
    /// The key's name as the node stores it (`soak:123`).
    pub key: String,
    /// The version acknowledged (the value's header says `key:version:`).
    pub acked_version: u32,
    /// When it was acknowledged, seconds since the cell started (the
    /// second it began in: the ledger keeps whole seconds).
    pub acked_at_s: f64,
    /// What was read instead: `nothing`, `version N`, or bytes of no version.
    pub read: String,
    /// What the oracle found it: `lost`, `corrupted`, `resurrected` or
    /// `aborted` (a summary of an older soak, without it: `lost`).
    #[serde(default = "lost_text")]
    pub found: String,
}

fn lost_text() -> String {
    "lost".into()
}

impl std::fmt::Display for LostWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "{} version {} acknowledged at {:.0} s, read {}",
            self.key, self.acked_version, self.acked_at_s, self.read
        )
    }
}

/// Counts of one verification (or of several, added up).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(default)]
pub struct Integrity {
    /// Writes the node acknowledged during the run.
    pub acknowledged: u64,
    /// Keys read back and found as the ledger expected.
    pub verified: u64,
    pub lost: u64,
    pub corrupted: u64,
    pub in_doubt: u64,
    pub resurrected: u64,
    /// Writes the node said definitely failed (an error it defines as
    /// such, a 4xx, an SQL error) that were read back all the same:
    /// Elle's aborted reads.
    #[serde(default)]
    pub aborted: u64,
    /// Acknowledged writes a power cut took from the unsynced tail of their
    /// connection (every later write of it lost too): allowed where the
    /// suite says `durability: unsynced-tail-allowed`, and counted apart
    /// from `lost`, which is never allowed (a hole is lost).
    pub lost_unsynced: u64,
}

impl std::fmt::Display for Integrity {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "{} as expected, {} lost, {} corrupted, {} in doubt, {} resurrected",
            self.verified, self.lost, self.corrupted, self.in_doubt, self.resurrected
        )?;
        if self.aborted > 0 {
            write!(f, ", {} aborted (failed writes read back)", self.aborted)?;
        }
        if self.lost_unsynced > 0 {
            write!(f, ", {} lost unsynced (the tail)", self.lost_unsynced)?;
        }
        Ok(())
    }
}

impl Integrity {
    /// The one "lost" every output shows and `lost_writes` judges beside
    /// the unsynced tail: acknowledged writes read back older or missing,
    /// and acknowledged deletes undone (resurrected). Corrupted, aborted
    /// and lost-unsynced writes are counts of their own.
    pub fn lost_writes(&self) -> u64 {
        self.lost + self.resurrected
    }

    pub fn add(&mut self, o: &Integrity) {
        self.verified += o.verified;
        self.lost += o.lost;
        self.corrupted += o.corrupted;
        self.in_doubt += o.in_doubt;
        self.resurrected += o.resurrected;
        self.aborted += o.aborted;
        self.lost_unsynced += o.lost_unsynced;
    }

    /// Whether any write was judged: acknowledged by the node, or read
    /// back. Without one, "0 lost" says nothing.
    pub fn judged(&self) -> bool {
        self.acknowledged + self.verified + self.in_doubt + self.harmed() + self.lost_unsynced > 0
    }

    /// What was found lost, corrupted, resurrected or aborted.
    pub fn harmed(&self) -> u64 {
        self.lost + self.corrupted + self.resurrected + self.aborted
    }
}

/// The load of a cell, or of one phase.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct LoadSummary {
    /// Seconds the load ran.
    pub active_s: f64,
    pub sets: u64,
    pub gets: u64,
    pub dels: u64,
    pub mgets: u64,
    /// SETs of `load` phases (pipelined, outside the rate).
    pub fill_sets: u64,
    pub errors: u64,
    /// Of the failed writes, those the node said definitely did not
    /// happen (a refusal, a 4xx, an SQL error, an adapter's `fail`).
    pub not_done: u64,
    /// Client adapters that exited and were started again.
    pub client_restarts: u64,
    pub unavailable: u64,
    pub corrupted_reads: u64,
    /// Acknowledged operations (not `load` SETs) per second of load.
    pub ops_per_s: f64,
    /// SETs and DELs per second.
    pub writes_per_s: f64,
    /// GETs and MGETs per second.
    pub reads_per_s: f64,
    /// From the scheduled start (the send, in a closed loop) to the reply;
    /// `None` when no request was answered.
    pub latency_us: Option<Latency>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct Latency {
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

/// The load in one window of a windowed check's length (`window: 1m`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct WindowLoad {
    pub length_s: f64,
    pub start_s: f64,
    pub end_s: f64,
    pub load: LoadSummary,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct PhaseRecord {
    pub phase: String,
    /// Its place in the suite's `phases` list, from 1, as checks with
    /// `phase:` name it (none for the phases inside a `repeat`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub place: Option<u32>,
    pub start_s: f64,
    pub end_s: f64,
    pub outcome: String,
    /// The load while the phase ran, where there was any.
    #[serde(default)]
    pub load: Option<LoadSummary>,
    /// The data directory's size when the phase ended.
    #[serde(default)]
    pub disk_bytes: Option<u64>,
}

/// An `upgrade` or a `downgrade`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Swap {
    Upgrade,
    Downgrade,
}

impl std::fmt::Display for Swap {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Display for SwapOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(match self {
            SwapOutcome::Verified => "verified",
            SwapOutcome::Refused => "refused",
        })
    }
}

impl Swap {
    pub fn as_str(self) -> &'static str {
        match self {
            Swap::Upgrade => "upgrade",
            Swap::Downgrade => "downgrade",
        }
    }

    pub fn cause(self) -> Cause {
        match self {
            Swap::Upgrade => Cause::Upgrade,
            Swap::Downgrade => Cause::Downgrade,
        }
    }
}

/// How a swap of versions went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SwapOutcome {
    /// The new version started and read back every key.
    Verified,
    /// It would not start (a downgrade), and the old version runs again.
    Refused,
}

/// One `upgrade` or `downgrade`, as it went.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct UpgradeRecord {
    pub kind: Swap,
    pub from: String,
    pub to: String,
    pub at_s: f64,
    pub outcome: SwapOutcome,
    /// Why it was refused: the node's own words, from its log.
    #[serde(default)]
    pub reason: Option<String>,
    /// How long the new version took to get ready.
    #[serde(default)]
    pub ready_after_ms: Option<u64>,
    /// The read-back after it.
    #[serde(default)]
    pub integrity: Option<Integrity>,
    /// The data directory before the swap (the node stopped: checksums
    /// verified) and after it (the new version running: statistics only).
    #[serde(default)]
    pub before: Option<Inspection>,
    #[serde(default)]
    pub after: Option<Inspection>,
    /// RocksDB options that differ between the two (option, before, after).
    #[serde(default)]
    pub options_changed: Vec<(String, Option<String>, Option<String>)>,
}

/// One `verify: offline`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct OfflineRecord {
    pub at_s: f64,
    pub inspection: Inspection,
}

/// The outcome of one `exec` phase, for its check.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ExecResult {
    pub command: String,
    pub expected: i32,
    /// The exit code, or `None` when it timed out or died by a signal.
    pub code: Option<i32>,
    pub log: String,
    /// Seconds it ran.
    #[serde(default)]
    pub took_s: f64,
    /// The figure its `throughput` regex read from the output (ops/s).
    #[serde(default)]
    pub throughput: Option<f64>,
    /// The least `throughput` allowed, where the suite set one.
    #[serde(default)]
    pub throughput_min: Option<f64>,
    /// Set when a `throughput` regex matched nothing in the output.
    #[serde(default)]
    pub unmatched: Option<String>,
}

/// SST files of one level, or of one compression.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, JsonSchema)]
pub struct FileGroup {
    pub files: u64,
    pub bytes: u64,
    pub entries: u64,
}

/// A RocksDB data directory as read offline (see `verify::offline`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct Inspection {
    /// The data directory's size on disk.
    pub size_bytes: u64,
    pub column_families: Vec<String>,
    /// Keys found by the full scan, per column family.
    pub keys: BTreeMap<String, u64>,
    /// SST files by level (`L0`, `L1`, ...).
    pub levels: BTreeMap<String, FileGroup>,
    /// SST files by the compression their table properties name.
    pub compression: BTreeMap<String, FileGroup>,
    /// The first corruption RocksDB found, with the file it names.
    pub corruption: Option<String>,
    /// The version that wrote the newest OPTIONS file.
    pub rocksdb_version: Option<String>,
    /// The newest OPTIONS file, flattened to `section.option = value`.
    #[serde(skip)]
    pub options: BTreeMap<String, String>,
    /// The ledger's verdict on the contents, where one was given.
    pub integrity: Option<Integrity>,
    /// Seconds spent verifying checksums, and scanning every key.
    pub checksum_s: f64,
    pub scan_s: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worst_verdict_wins_and_a_warning_alone_passes_a_run() {
        use Verdict::*;
        assert_eq!(Verdict::worst([Pass, Warn, Pass]), Warn);
        assert_eq!(Verdict::worst([Warn, Error, Fail]), Error);
        assert_eq!(Verdict::worst([]), Pass);
        assert_eq!(Verdict::of_run([Pass, Warn]), Pass);
        assert_eq!(Verdict::of_run([Warn, Fail]), Fail);
    }
}
