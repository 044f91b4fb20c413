//! A cell's result, assembled from its records and what it measured: a
//! pure function (no file is read here; what the run wrote, it also kept).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::analysis;
use crate::cell::bus::Bus;
use crate::cell::checks::{self, Measured};
use crate::cell::event::Event;
use crate::cell::record::Recorder;
use crate::cell::CellError;
use crate::model::{
    CellResult, CgroupSummary, CheckResult, Expectation, Integrity, MemorySummary, ScrapeSummary,
    Verdict,
};
use crate::plan::CellPlan;
use crate::telemetry::{prometheus, Sample, ScrapeStats};
use crate::workload::{LoadStats, Served};

/// What a node that stopped answering a read-back shows: the error, and
/// what its cgroup said (at its limit how often, its memory pressure): a
/// node that stalls at its limit while the kernel reclaims its page cache
/// instead of killing it is alive, and answers nothing.
fn unresponsive(e: &crate::verify::VerifyError, cg: Option<&CgroupSummary>) -> String {
    let mut out = format!("the node stopped answering while alive: {e}");
    if let Some(c) = cg {
        out.push_str(&format!(
            "; its cgroup: at its memory limit {} times",
            c.events_max
        ));
        if c.events_high > 0 {
            out.push_str(&format!(", over memory.high {} times", c.events_high));
        }
        if let Some(p) = c.pressure_full_avg10_max {
            out.push_str(&format!(
                ", memory pressure (all tasks stalled) up to {p:.0}% of 10 s"
            ));
        } else if let Some(p) = c.pressure_some_avg10_max {
            out.push_str(&format!(
                ", memory pressure (some tasks stalled) up to {p:.0}% of 10 s"
            ));
        }
        if let Some(peak) = c.peak_bytes {
            out.push_str(&format!(", peak {}", crate::units::Bytes(peak)));
        }
    }
    out
}

/// What the cell measured besides its records.
pub(super) struct CellMeasures {
    pub(super) load: Option<LoadStats>,
    /// The load of each window the windowed checks judge.
    pub(super) windows: Vec<crate::model::WindowLoad>,
    /// The samples kept (see [`crate::telemetry::Kept`]), of how many taken.
    pub(super) samples: Vec<Sample>,
    /// A cluster's members' own samples, in member order.
    pub(super) members: Vec<Vec<Sample>>,
    pub(super) samples_taken: usize,
    pub(super) scrapes: Option<ScrapeStats>,
    pub(super) cgroup: Option<CgroupSummary>,
    pub(super) oom_kills: u64,
    pub(super) engine: Option<crate::model::EngineInfo>,
    pub(super) network: Option<crate::model::NetworkStats>,
    pub(super) disk_faults: Option<crate::model::DiskStats>,
    pub(super) error_replies: Vec<(f64, String)>,
    /// Each interval of the load: when writes were served again after a
    /// fault was lifted.
    pub(super) served: Vec<Served>,
    /// The lines of the node's log that read as errors.
    pub(super) log_errors: Vec<crate::model::LogLine>,
    /// The node's own out-of-memory errors in its log.
    pub(super) oom_errors: Vec<crate::model::LogLine>,
    /// What the services beside the node did.
    pub(super) services: Vec<crate::model::ServiceRecord>,
    /// The history the load recorded, if it recorded one.
    pub(super) history: Option<crate::history::record::Written>,
    /// What the `linearizable` check found in it.
    pub(super) judged: Option<crate::cell::linearizable::Judged>,
    /// What the heap profiler found (`memory.profile`).
    pub(super) profile: Option<crate::model::ProfileSummary>,
    /// The JVM's Native Memory Tracking readings (`memory.jvm`), and the
    /// last error of one that failed.
    pub(super) jvm: Option<(Vec<crate::telemetry::nmt::Reading>, Option<String>)>,
}

fn memory_summary(plan: &CellPlan, m: &CellMeasures) -> MemorySummary {
    let (samples, limit, w) = (&m.samples, plan.memory_limit(), plan.warmup_s);
    let rss = analysis::analyse(samples, |s| s.rss, w, limit);
    let pss = analysis::analyse(samples, |s| s.pss, w, limit);
    let anon = analysis::analyse(samples, |s| s.anon, w, limit);
    let cgroup = analysis::analyse(samples, |s| s.cgroup, w, limit);
    let disk = analysis::analyse(samples, |s| s.disk, w, None);
    let held_free = m
        .scrapes
        .as_ref()
        .and_then(|s| prometheus::held_free(&s.largest));
    MemorySummary {
        peak_rss_bytes: rss.peak,
        peak_pss_bytes: pss.peak,
        peak_anon_bytes: anon.peak,
        // The kernel's peak, where it keeps one: sampling misses spikes.
        peak_cgroup_bytes: cgroup
            .peak
            .max(m.cgroup.as_ref().and_then(|c| c.peak_bytes).unwrap_or(0)),
        limit_bytes: limit,
        slope_bytes_per_hour: rss.slope_per_hour,
        cgroup_slope_bytes_per_hour: cgroup.slope_per_hour,
        oom_kills: m.oom_kills,
        oom_errors: m.oom_errors.iter().map(|l| l.count).sum(),
        oom_error_lines: m.oom_errors.clone(),
        samples: m.samples_taken,
        peak_disk_bytes: disk.peak,
        fragmentation: m
            .scrapes
            .as_ref()
            .and_then(|s| prometheus::fragmentation(&s.largest)),
        allocator_free_bytes: held_free.map(|h| h.0),
        allocator_free_share: held_free.map(|h| h.1),
        scrapes: m.scrapes.as_ref().map(|s| ScrapeSummary {
            ok: s.ok,
            failed: s.failed,
            empty: s.empty,
            series: s.last.len(),
            last_error: s.last_error.clone(),
        }),
        kinds: analysis::kinds::of_mappings(samples, w),
        members: analysis::kinds::of_members(&m.members, w),
        jvm: m
            .jvm
            .as_ref()
            .map(|(r, e)| analysis::kinds::jvm_account(r, e.clone(), w)),
        profile: m.profile.clone(),
        rss,
        pss,
        anon,
        cgroup,
        disk,
    }
}

/// Whether a cell showed what its `expect:` said, from its checks' results.
fn expectation(expect: &crate::suite::Checks, results: &[CheckResult]) -> Expectation {
    let names = expect.names();
    let expected: Vec<&CheckResult> = results
        .iter()
        .filter(|r| {
            names
                .iter()
                .any(|n| r.name == *n || r.name.starts_with(&format!("{n} ")))
        })
        .collect();
    Expectation {
        checks: expected
            .iter()
            .map(|r| crate::report::text::check_text(r))
            .collect(),
        // Expected to happen: a loss, an OOM kill, a start that failed, a
        // history that cannot be linearized.
        incident: [
            expect.oom_kills,
            expect.oom_errors,
            expect.out_of_memory,
            expect.crashes,
            expect.lost_writes,
            expect.unsynced_writes,
            expect.corrupted_writes,
            expect.aborted_reads,
            expect.unrecovered,
            expect.unresponsive,
        ]
        .iter()
        .flatten()
        .any(|c| c.min.is_some_and(|m| m >= 1))
            || expect.linearizable.is_some_and(|l| !l.expect),
        met: expected.iter().all(|r| r.verdict == Verdict::Pass),
    }
}

/// The cell's result: its records, what it measured, its checks and its
/// verdict.
pub(super) fn assemble(
    plan: &CellPlan,
    error: Option<CellError>,
    bus: &mut Bus,
    m: CellMeasures,
) -> CellResult {
    let memory = memory_summary(plan, &m);
    // A node that did not start again, or that stopped answering once it
    // had served, is the cell's finding, not the environment's error.
    let (error, unrecovered, unresponsive) = match error {
        Some(e @ CellError::NotRecovered { .. }) => (None, Some(e.to_string()), None),
        Some(CellError::Verify(e)) if !e.fatal => {
            (None, None, Some(unresponsive(&e, m.cgroup.as_ref())))
        }
        e => (e, None, None),
    };
    // The records are complete: the cell's events are over but its verdict.
    let rec: Recorder = std::mem::take(&mut bus.recorder);
    let mut integrity: Integrity = rec.integrity;
    integrity.acknowledged = m
        .load
        .as_ref()
        .map(|l| l.acknowledged_writes())
        .unwrap_or(0);
    // Reads during the load judged every key they read: what they found
    // counts with the read-backs' findings (a key is counted once: a loss
    // marks it unknown until rewritten).
    if let Some(l) = &m.load {
        integrity.lost += l.lost_reads;
        integrity.corrupted += l.corrupted_reads;
        integrity.resurrected += l.resurrected_reads;
        integrity.aborted += l.aborted_reads;
    }
    let checks = checks::evaluate(
        &plan.checks,
        &Measured {
            integrity: &integrity,
            memory: &memory,
            restarts: &rec.restarts,
            ops_per_s: m.load.as_ref().map(|l| l.ops_per_s()),
            latency_us: m.load.as_ref().map(|l| &l.latency_us),
            execs: &rec.execs,
            upgrades: &rec.upgrades,
            phases: &rec.phases,
            windows: &m.windows,
            samples: &m.samples,
            warmup_s: plan.warmup_s,
            memory_limit: plan.limits.memory,
            unsynced_tail_allowed: plan.unsynced_tail_allowed,
            unrecovered,
            unresponsive,
        },
    );
    let mut checks = checks;
    let history = m.judged.map(|j| {
        checks.insert(0, j.result);
        j.record
    });
    let verdict = checks::cell_verdict(error.is_some(), &checks);
    let expectation = plan.expect.as_ref().map(|e| expectation(e, &checks));
    bus.emit(Event::Verdict { verdict });
    let files = files(plan, m.load.is_some(), &rec.execs);
    let result = CellResult {
        id: plan.id.clone(),
        params: plan.params.clone(),
        verdict,
        error: error.map(|e| e.to_string()),
        checks,
        integrity,
        memory,
        load: m.load.as_ref().map(|l| l.summary()),
        files,
        seed: Some(plan.seed),
        allocator: plan.allocator.as_ref().map(|a| a.text.clone()),
        restarts: rec.restarts,
        phases: rec.phases,
        chaos: rec.chaos,
        execs: rec.execs,
        upgrades: rec.upgrades,
        offline: rec.offline,
        cgroup: m.cgroup,
        engine: m.engine,
        expectation,
        repeat_of: None,
        network: m.network,
        disk_faults: m.disk_faults,
        recoveries: recoveries(&m.served, rec.lifts, &rec.faults_at),
        error_replies: m
            .error_replies
            .into_iter()
            .map(|(at_s, reply)| crate::model::ErrorReply { at_s, reply })
            .collect(),
        log_errors: m.log_errors,
        harness: harness_cost(&m.samples, plan.interval),
        services: m.services,
        history,
    };
    result
}

/// The cell's files, by name, relative to the run's folder.
fn files(
    plan: &CellPlan,
    load: bool,
    execs: &[crate::model::ExecResult],
) -> BTreeMap<String, String> {
    let rel = &plan.rel_dir;
    let mut files: BTreeMap<String, String> = ["node.log", "samples.csv.gz", "events.jsonl"]
        .iter()
        .map(|f| (f.to_string(), format!("{rel}/{f}")))
        .collect();
    if load {
        files.insert("latency.csv".into(), format!("{rel}/latency.csv"));
    }
    if plan.scrape.is_some() {
        files.insert("metrics.csv.gz".into(), format!("{rel}/metrics.csv.gz"));
    }
    if plan.cluster.is_some() && plan.dir.join("members.csv.gz").exists() {
        files.insert("members.csv.gz".into(), format!("{rel}/members.csv.gz"));
    }
    for e in execs {
        files.insert(e.log.clone(), format!("{rel}/{}", e.log));
    }
    files
}

/// soak's own cost over the cell, from the first to the last sample.
fn harness_cost(samples: &[Sample], interval: Duration) -> Option<crate::model::HarnessCost> {
    let (first, last) = (samples.first()?, samples.last()?);
    let span = last.t - first.t;
    (span > 0.0).then(|| crate::model::HarnessCost {
        rss_first_bytes: first.soak_rss,
        rss_last_bytes: last.soak_rss,
        rss_peak_bytes: samples.iter().map(|s| s.soak_rss).max().unwrap_or(0),
        cpu_share: (last.soak_cpu_s - first.soak_cpu_s) / span,
        sampler_cpu_share: (last.sampler_cpu_s - first.sampler_cpu_s) / span,
        interval_s: interval.as_secs_f64(),
        // A thread that ended before the last sample took its count
        // along: never below 0.
        load_cpu_share: ((last.load_cpu_s - first.load_cpu_s) / span).max(0.0),
        faultfs_cpu_share: ((last.faultfs_cpu_s - first.faultfs_cpu_s) / span).max(0.0),
    })
}

/// How soon after each lift the node served writes again: the end of the
/// first interval of the load after it with writes acknowledged and no
/// request failed, if that came before the next fault (`faults_at`).
fn recoveries(
    served: &[Served],
    mut lifts: Vec<crate::model::Recovery>,
    faults_at: &[f64],
) -> Vec<crate::model::Recovery> {
    for l in &mut lifts {
        let next = faults_at
            .iter()
            .copied()
            .filter(|&t| t >= l.lifted_at_s)
            .reduce(f64::min);
        l.next_fault_after_s = next.map(|t| t - l.lifted_at_s);
        l.serving_after_s = served
            .iter()
            .take_while(|s| next.is_none_or(|n| s.t <= n))
            .find(|s| s.t > l.lifted_at_s && s.writes > 0 && s.errors == 0)
            .map(|s| s.t - l.lifted_at_s);
    }
    lifts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lift(at: f64) -> crate::model::Recovery {
        crate::model::Recovery {
            fault: "network clear".into(),
            lifted_at_s: at,
            serving_after_s: None,
            next_fault_after_s: None,
        }
    }

    fn served(t: f64, writes: u64, errors: u64) -> Served {
        Served { t, writes, errors }
    }

    /// Serving again is the first interval after the lift with writes and
    /// no failure, and only if it came before the next fault.
    #[test]
    fn a_recovery_is_the_first_clean_interval_with_writes_before_the_next_fault() {
        let load = [
            served(1.0, 10, 0),
            served(2.0, 5, 3),
            served(3.0, 0, 0),
            served(4.0, 8, 0),
            served(9.0, 8, 0),
        ];
        let r = recoveries(&load, vec![lift(1.5), lift(4.5)], &[1.0, 8.0]);
        assert_eq!(r[0].serving_after_s, Some(2.5));
        assert_eq!(r[0].next_fault_after_s, Some(6.5));
        // The next fault at 8 s came before the node served again.
        assert_eq!(r[1].serving_after_s, None);
        assert_eq!(r[1].next_fault_after_s, Some(3.5));
        assert_eq!(
            recoveries(&load, vec![lift(4.5)], &[])[0].serving_after_s,
            Some(4.5)
        );
    }
}
