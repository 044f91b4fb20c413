//! The result model of a run and its exporters: `summary.json` (a stable,
//! versioned contract) and `report.md` (GitHub-flavoured, charts as mermaid
//! `xychart-beta` so they render in a pull request comment).

pub mod compare;
pub mod junit;
pub mod markdown;
pub mod merge;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::verify::Integrity;

/// Bumped only when a field of the contract changes meaning; new fields
/// may be added at any version.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Pass,
    Warn,
    Fail,
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
}

/// The whole run: what `summary.json` holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    pub schema_version: u32,
    pub suite: String,
    pub description: String,
    /// "pass", "fail" or "error" (a warning alone passes).
    pub verdict: Verdict,
    pub run_id: String,
    /// The run's seed: `soak run --seed N` replays workloads and chaos.
    pub seed: u64,
    /// `I/N` when the run was one shard of the suite.
    pub shard: Option<String>,
    pub started_at: String,
    pub duration_s: f64,
    pub suite_file: String,
    pub soak_version: String,
    pub cells: Vec<CellResult>,
    /// For a report made by `soak report merge`: the runs it joins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub merged: Vec<String>,
    /// Shards (`I/N`) that no merged run covered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing_shards: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CellResult {
    pub id: String,
    #[serde(default)]
    pub params: BTreeMap<String, String>,
    pub verdict: Verdict,
    /// Why the cell could not finish (verdict "error").
    pub error: Option<String>,
    #[serde(default)]
    pub checks: Vec<CheckResult>,
    pub integrity: Integrity,
    pub memory: MemorySummary,
    #[serde(default)]
    pub restarts: Vec<Restart>,
    pub load: Option<LoadSummary>,
    #[serde(default)]
    pub phases: Vec<PhaseRecord>,
    /// Paths of the cell's files, relative to the report folder.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    pub seed: Option<u64>,
    /// The allocator profile and its library's package version.
    pub allocator: Option<String>,
    /// Chaos actions as done, with the seed of their schedule.
    #[serde(default)]
    pub chaos: Vec<ChaosRecord>,
    /// Commands the `exec` phases ran: exit code, log, time, throughput.
    #[serde(default)]
    pub execs: Vec<crate::chaos::ExecResult>,
    /// Upgrades and downgrades, each with its outcome and read-back.
    #[serde(default)]
    pub upgrades: Vec<crate::chaos::UpgradeRecord>,
    /// `verify: offline` phases: the data directory read with RocksDB.
    #[cfg(feature = "node")]
    #[serde(default)]
    pub offline: Vec<crate::chaos::OfflineRecord>,
    /// The node's cgroup and what its kernel counters recorded.
    #[serde(default)]
    pub cgroup: Option<CgroupSummary>,
}

/// The node's cgroup: where it was, and the kernel's own counters, read
/// just before it was removed.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
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

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChaosRecord {
    pub seed: u64,
    /// Offset from the start of the chaos phase, as planned.
    pub at_s: f64,
    pub action: crate::suite::Action,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckResult {
    pub name: String,
    /// "pass", "fail" or "warn".
    pub verdict: Verdict,
    pub value: serde_json::Value,
    pub limit: serde_json::Value,
    pub unit: String,
    /// How the verdict was reached, where it needs more than value and limit.
    pub detail: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct MemorySummary {
    pub peak_rss_bytes: u64,
    /// Proportional and anonymous resident memory, from smaps_rollup.
    pub peak_pss_bytes: u64,
    pub peak_anon_bytes: u64,
    pub peak_cgroup_bytes: u64,
    pub limit_bytes: Option<u64>,
    /// Growth of the RSS, Theil-Sen, pooled over segments between restarts.
    pub slope_bytes_per_hour: Option<f64>,
    pub cgroup_slope_bytes_per_hour: Option<f64>,
    pub oom_kills: u64,
    pub samples: usize,
    pub peak_disk_bytes: u64,
    /// Resident over allocated at the last scrape, where the node reports
    /// its allocator's statistics on its Prometheus endpoint.
    pub fragmentation: Option<f64>,
    /// Prometheus scrapes: answered, failed, answered with no series.
    pub scrapes: Option<ScrapeSummary>,
    /// The full analysis of each series: steady state, slope interval,
    /// significance, time to the limit.
    pub rss: crate::analysis::SeriesAnalysis,
    pub pss: crate::analysis::SeriesAnalysis,
    pub anon: crate::analysis::SeriesAnalysis,
    pub cgroup: crate::analysis::SeriesAnalysis,
    pub disk: crate::analysis::SeriesAnalysis,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ScrapeSummary {
    pub ok: u64,
    pub failed: u64,
    pub empty: u64,
    pub series: usize,
    pub last_error: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Restart {
    /// What took the node down: a planned `kill`, `stop` or `restart`
    /// phase, a `chaos` action, an `oom` kill, a `crash`, or an `upgrade`.
    pub reason: String,
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
    pub first_lost: Option<crate::workload::ledger::LostWrite>,
}

impl Restart {
    /// Adds what an oracle found, naming it.
    pub fn found(
        &mut self,
        oracle: &str,
        i: &Integrity,
        first: Option<crate::workload::ledger::LostWrite>,
    ) {
        self.lost += i.lost;
        self.corrupted += i.corrupted;
        self.resurrected += i.resurrected;
        self.in_doubt += i.in_doubt;
        if i.lost + i.corrupted + i.resurrected > 0 {
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

/// The load of a cell, or of one phase.
#[derive(Debug, Clone, Serialize, Deserialize)]
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

impl LoadSummary {
    pub fn of(l: &crate::workload::LoadStats) -> LoadSummary {
        LoadSummary {
            active_s: l.active_s,
            sets: l.sets_ok,
            gets: l.gets_ok,
            dels: l.dels_ok,
            mgets: l.mgets_ok,
            fill_sets: l.fill_sets,
            errors: l.errors,
            unavailable: l.unavailable,
            corrupted_reads: l.corrupted_reads,
            ops_per_s: l.ops_per_s(),
            writes_per_s: l.per_s(l.writes()),
            reads_per_s: l.per_s(l.reads()),
            latency_us: Latency::of(&l.latency_us),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Latency {
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

impl Latency {
    pub fn of(h: &hdrhistogram::Histogram<u64>) -> Option<Latency> {
        (!h.is_empty()).then(|| Latency {
            p50: h.value_at_quantile(0.5),
            p90: h.value_at_quantile(0.9),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
        })
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PhaseRecord {
    pub phase: String,
    pub start_s: f64,
    pub end_s: f64,
    pub outcome: String,
    /// The load while the phase ran, where there was any.
    pub load: Option<LoadSummary>,
    /// The data directory's size when the phase ended.
    pub disk_bytes: Option<u64>,
}

/// `90s`, `12m 5s`, `2h 3m`, `450ms`.
pub fn human_duration(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 1.0 {
        return format!("{}ms", d.as_millis());
    }
    let total = d.as_secs();
    let (h, m, sec) = (total / 3600, (total % 3600) / 60, total % 60);
    match (h, m) {
        (0, 0) if s.fract() > 0.0 && s < 10.0 => format!("{s:.1}s"),
        (0, 0) => format!("{sec}s"),
        (0, _) if sec == 0 => format!("{m}m"),
        (0, _) => format!("{m}m {sec}s"),
        _ if m == 0 => format!("{h}h"),
        _ => format!("{h}h {m}m"),
    }
}

/// Writes `summary.json`, `report.md` and `junit.xml` into `dir`,
/// replacing them.
pub fn write_all(
    dir: &Path,
    summary: &Summary,
    charts: &BTreeMap<String, Vec<(f64, u64)>>,
) -> std::io::Result<()> {
    let json = serde_json::to_string_pretty(summary).map_err(std::io::Error::other)?;
    std::fs::write(dir.join("summary.json"), json + "\n")?;
    write_rendered(dir, summary, charts)
}

/// Writes what is rendered from a summary, `report.md` and `junit.xml`,
/// into `dir`, replacing them.
pub fn write_rendered(
    dir: &Path,
    summary: &Summary,
    charts: &BTreeMap<String, Vec<(f64, u64)>>,
) -> std::io::Result<()> {
    let mut md = Vec::new();
    markdown::write(&mut md, summary, charts)?;
    std::fs::write(dir.join("junit.xml"), junit::write(summary))?;
    std::fs::write(dir.join("report.md"), md)
}
