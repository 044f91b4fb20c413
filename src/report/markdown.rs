//! `report.md`: the verdict first, then one section per cell.

use std::io::{self, Write};

use super::charts::CellChart;
use super::mermaid::*;
use super::text::*;
use super::{CellResult, Summary};
use crate::analysis::stats::Spread;
use crate::units::Bytes;

/// Where a series settled, or `n/a`.
fn steady(a: &crate::analysis::SeriesAnalysis) -> String {
    a.steady
        .map(|v| Bytes(v as u64).to_string())
        .unwrap_or_else(|| "n/a".into())
}

pub fn write(w: &mut impl Write, s: &Summary, charts: &super::charts::Charts) -> io::Result<()> {
    writeln!(w, "# soak: {} — {}\n", s.suite, run_badge(s))?;
    if !s.description.trim().is_empty() {
        for line in s.description.trim().lines() {
            writeln!(w, "> {line}")?;
        }
        writeln!(w)?;
    }
    writeln!(
        w,
        "Run `{}` of `{}`{} (seed {}), started {}, took {}; soak {}. Every series at full resolution, with its events, zoomable: [report.html](report.html) beside this file.\n",
        s.run_id,
        s.suite_file,
        s.shard
            .as_ref()
            .map(|x| format!(", shard {x}"))
            .unwrap_or_default(),
        s.seed,
        s.started_at,
        super::human_duration(std::time::Duration::from_secs_f64(s.duration_s)),
        s.soak_version
    )?;
    if !s.merged.is_empty() {
        writeln!(w, "Merged from: {}.\n", s.merged.join("; "))?;
    }
    if !s.missing_shards.is_empty() {
        writeln!(
            w,
            "**Missing shards:** {} (no run of them was merged: their cells are not in this report).\n",
            s.missing_shards.join(", ")
        )?;
    }
    for p in &s.prepared {
        let how = match p.code {
            Some(0) => "done".to_string(),
            Some(c) => format!("**failed** (exit code {c})"),
            None => "**stopped** (timed out, interrupted or killed)".to_string(),
        };
        writeln!(
            w,
            "Prepared: `{}`, {how} in {:.1} s; output in [{}]({}).\n",
            p.command, p.took_s, p.log, p.log
        )?;
    }
    let found = super::text::finding_columns(s);
    let heads: String = found.iter().map(|f| format!(" {} |", f.heading)).collect();
    let rules = "---:|".repeat(found.len());
    writeln!(w, "| cell | verdict | acknowledged | lost | corrupted | in doubt |{heads} OOM kills | restarts | peak RSS | RSS growth | ops/s | p99 |")?;
    writeln!(
        w,
        "|---|---|---:|---:|---:|---:|{rules}---:|---:|---:|---:|---:|---:|"
    )?;
    for c in &s.cells {
        let (ops, p99) = super::text::ops_and_p99(c);
        let figures: String = found.iter().map(|f| format!(" {} |", f.cell(c))).collect();
        writeln!(
            w,
            "| `{}` | {} | {} | {} | {} | {} |{figures} {} | {} | {} | {} | {} | {} |",
            c.id,
            badge(c.verdict),
            c.integrity.acknowledged,
            c.integrity.lost_writes(),
            c.integrity.corrupted,
            c.integrity.in_doubt,
            c.memory.oom_kills,
            c.restarts.len(),
            Bytes(c.memory.peak_rss_bytes),
            mib_per_h(c.memory.slope_bytes_per_hour),
            ops,
            p99
        )?;
    }
    writeln!(w)?;
    expectations(w, s)?;
    glance(w, s)?;
    load_glance(w, s)?;
    repeats(w, s)?;
    for c in &s.cells {
        cell(w, c, charts.get(&c.id))?;
    }
    Ok(())
}

/// Per cell, what the suite expected it to show and whether it did: a
/// reproduction suite tells its story here.
fn expectations(w: &mut impl Write, s: &Summary) -> io::Result<()> {
    if s.cells.iter().all(|c| c.expectation.is_none()) {
        return Ok(());
    }
    writeln!(w, "**Expected outcomes:**\n")?;
    writeln!(
        w,
        "| cell | expected (measured, limit) | outcome |\n|---|---|---|"
    )?;
    for c in &s.cells {
        if let Some(e) = &c.expectation {
            writeln!(
                w,
                "| `{}` | {} | {} |",
                c.id,
                table_text(&e.checks.join("; ")),
                e.outcome()
            )?;
        }
    }
    writeln!(w)
}

fn cell(w: &mut impl Write, c: &CellResult, chart: Option<&CellChart>) -> io::Result<()> {
    writeln!(w, "## `{}` — {}\n", c.id, badge(c.verdict))?;
    cell_head(w, c)?;
    integrity(w, &c.integrity)?;
    super::linearizable::section(w, c)?;
    memory(w, c)?;
    faults(w, c)?;
    what_the_node_said(w, c)?;
    let m = &c.memory;
    series_table(w, m)?;
    super::attribution::section(w, c)?;
    allocator(w, m)?;
    if let Some(chart) = chart {
        chart_rss(w, &c.id, &chart.rss, m.limit_bytes)?;
        chart_parts(w, &c.id, chart)?;
        chart_series(w, c, chart)?;
    }
    if !c.restarts.is_empty() {
        restarts(w, &c.restarts)?;
    }
    load_line(w, c)?;
    if let Some(h) = &c.harness {
        harness_line(w, h)?;
    }
    upgrades_table(w, c)?;
    data_dirs(w, c)?;
    phase_loads(w, c)?;
    phases_table(w, c)?;
    if !c.files.is_empty() {
        let f: Vec<String> = c.files.iter().map(|(k, v)| format!("[{k}]({v})")).collect();
        writeln!(w, "Files: {}\n", f.join(", "))?;
    }
    Ok(())
}

/// Why the cell could not finish, its parameters, allocator and chaos
/// schedule, and its checks.
fn cell_head(w: &mut impl Write, c: &CellResult) -> io::Result<()> {
    if let Some(e) = &c.error {
        // The error may quote the node's log, which may hold anything,
        // backticks too: the fence is longer than any run of them in it.
        let fence = "`".repeat(longest_backtick_run(e).max(2) + 1);
        writeln!(
            w,
            "**The cell could not finish:**\n\n{fence}\n{}\n{fence}\n",
            e.trim()
        )?;
    }
    if !c.params.is_empty() {
        let p: Vec<String> = c.params.iter().map(|(k, v)| format!("`{k}={v}`")).collect();
        writeln!(w, "Parameters: {}\n", p.join(", "))?;
    }
    if let Some(a) = &c.allocator {
        writeln!(w, "Allocator: {a}\n")?;
    }
    if !c.chaos.is_empty() {
        let acts: Vec<String> = c
            .chaos
            .iter()
            .map(|x| match &x.fault {
                Some(f) => format!("{} +{:.1}s", code_span(f), x.at_s),
                None => format!("{:?} +{:.1}s", x.action, x.at_s).to_lowercase(),
            })
            .collect();
        writeln!(w, "Chaos (seed {}): {}\n", c.chaos[0].seed, acts.join(", "))?;
    }
    if !c.checks.is_empty() {
        writeln!(
            w,
            "| check | verdict | measured | limit |\n|---|---|---:|---:|"
        )?;
        for k in &c.checks {
            writeln!(
                w,
                "| {} | {} | {} | {} |",
                k.name,
                badge(k.verdict),
                value_text(&k.value, &k.unit),
                value_text(&k.limit, &k.unit)
            )?;
        }
        writeln!(w)?;
    }
    Ok(())
}

/// What the read-backs found.
fn integrity(w: &mut impl Write, i: &super::Integrity) -> io::Result<()> {
    if !i.judged() {
        writeln!(
            w,
            "**Integrity:** no writes judged: soak read nothing back (the cell has no `workload`, or its node acknowledged no write), so nothing here says the node keeps its writes.\n"
        )?;
    } else {
        writeln!(
            w,
            "**Integrity:** {} writes acknowledged; summed over the read-backs, {} keys as expected, {} lost, {} corrupted, {} in doubt (a write in flight at a failure; either value allowed), {} resurrected{}.\n",
            i.acknowledged,
            i.verified,
            i.lost,
            i.corrupted,
            i.in_doubt,
            i.resurrected,
            if i.aborted > 0 {
                format!(", {} aborted reads (writes the node said failed, read back)", i.aborted)
            } else {
                String::new()
            }
        )?;
    }
    if i.lost_unsynced > 0 {
        writeln!(
            w,
            "**Lost unsynced:** {} acknowledged writes power cuts took from the unsynced tail of their connections (every later write of the connection lost too: no hole).\n",
            i.lost_unsynced
        )?;
    }
    Ok(())
}

/// Memory, the cgroup, and the Docker engine the node ran on.
fn memory(w: &mut impl Write, c: &CellResult) -> io::Result<()> {
    let m = &c.memory;
    writeln!(
        w,
        "**Memory:** peak RSS {}, peak cgroup {}, limit {}; RSS growth {} (cgroup {}); {} OOM kills; peak disk {}; {} samples.\n",
        Bytes(m.peak_rss_bytes),
        Bytes(m.peak_cgroup_bytes),
        m.limit_bytes.map(|l| Bytes(l).to_string()).unwrap_or_else(|| "none".into()),
        mib_per_h(m.slope_bytes_per_hour),
        mib_per_h(m.cgroup_slope_bytes_per_hour),
        m.oom_kills,
        Bytes(m.peak_disk_bytes),
        m.samples
    )?;
    if let Some(cg) = &c.cgroup {
        cgroup_line(w, cg)?;
    }
    out_of_memory(w, c)?;
    services(w, c)?;
    if let Some(e) = &c.engine {
        writeln!(
            w,
            "**Docker engine:** `{}`: Docker {}, API {}, {}, kernel {}, cgroup v{}{}.\n",
            e.host,
            table_text(&e.version),
            table_text(&e.api),
            table_text(&e.os),
            table_text(&e.kernel),
            table_text(&e.cgroup_version),
            if e.local {
                "; memory read on this machine"
            } else {
                "; remote: memory is the engine's stats of the container's cgroup, and the RSS, PSS and anonymous memory of its processes are missing"
            }
        )?;
    }
    Ok(())
}

/// The network and disk faults, and how soon the node served again after
/// each was lifted.
fn faults(w: &mut impl Write, c: &CellResult) -> io::Result<()> {
    if let Some(n) = &c.network {
        writeln!(
            w,
            "**Network faults** (soak's proxy between the load and the node): {} connections, {} to the node and {} back, {} blackholed, {} replies delayed, {} connections reset.\n",
            n.connections,
            Bytes(n.bytes_to_node),
            Bytes(n.bytes_to_load),
            Bytes(n.bytes_blackholed),
            n.chunks_delayed,
            n.resets
        )?;
    }
    if let Some(d) = &c.disk_faults {
        disk_faults(w, d)?;
    }
    for r in &c.recoveries {
        let back = match r.serving_after_s {
            Some(s) => format!(
                "the node acknowledged writes again, with no request failing, within {s:.1} s"
            ),
            None => match r.next_fault_after_s {
                Some(n) => format!(
                    "the node had not served writes again, with no request failing, when the next fault came {n:.1} s later"
                ),
                None => "the node never served writes again in this cell".into(),
            },
        };
        writeln!(
            w,
            "**Recovery** from `{}` at {:.1} s: {back}.\n",
            r.fault, r.lifted_at_s
        )?;
    }
    Ok(())
}

/// The node's own out-of-memory errors, named with their cause: a JVM
/// that cannot reserve direct memory fails its requests and goes on
/// running, and no kernel counter shows it.
fn out_of_memory(w: &mut impl Write, c: &CellResult) -> io::Result<()> {
    let m = &c.memory;
    if m.oom_error_lines.is_empty() {
        return Ok(());
    }
    let failed = c
        .load
        .as_ref()
        .filter(|l| l.errors > 0)
        .map(|l| format!("; the load saw {} requests fail", l.errors))
        .unwrap_or_default();
    writeln!(
        w,
        "**Out of memory inside the node** ({} lines of node.log say so, whether or not it exited{failed}):\n",
        m.oom_errors
    )?;
    for l in &m.oom_error_lines {
        writeln!(w, "- {} times: {}", l.count, table_code(&l.line))?;
    }
    writeln!(w)
}

/// The services beside the node, and what happened to them.
fn services(w: &mut impl Write, c: &CellResult) -> io::Result<()> {
    for s in &c.services {
        let ready: Vec<String> = s
            .ready_ms
            .iter()
            .map(|ms| format!("{:.1} s", *ms as f64 / 1000.0))
            .collect();
        let mut did = vec![format!("ready after {}", ready.join(", "))];
        if s.kills > 0 {
            did.push(format!("killed {} times by `service` phases", s.kills));
        }
        if s.stops > 0 {
            did.push(format!("stopped {} times by `service` phases", s.stops));
        }
        if let Some(e) = &s.exited {
            did.push(format!("**exited on its own** ({e})"));
        }
        writeln!(
            w,
            "**Service `{}`** (beside the node, not counted as its restarts): {}; its log: `{}`.\n",
            s.name,
            did.join("; "),
            s.log
        )?;
    }
    Ok(())
}

/// The node's error replies and the errors in its log.
fn what_the_node_said(w: &mut impl Write, c: &CellResult) -> io::Result<()> {
    if !c.error_replies.is_empty() {
        writeln!(w, "**The node's error replies** (distinct, first 8):\n")?;
        writeln!(w, "| first at | reply |\n|---:|---|")?;
        for e in &c.error_replies {
            writeln!(w, "| {:.1} s | {} |", e.at_s, table_code(&e.reply))?;
        }
        writeln!(w)?;
    }
    if !c.log_errors.is_empty() {
        writeln!(
            w,
            "**What the node logged** (lines of node.log that read as errors, distinct up to their numbers, first 8):\n"
        )?;
        writeln!(w, "| times | line |\n|---:|---|")?;
        for l in &c.log_errors {
            writeln!(w, "| {} | {} |", l.count, table_code(&l.line))?;
        }
        writeln!(w)?;
    }
    Ok(())
}

/// The allocator's fragmentation, and metrics that never came.
fn allocator(w: &mut impl Write, m: &super::MemorySummary) -> io::Result<()> {
    if let Some(f) = m.fragmentation {
        let free = match (m.allocator_free_bytes, m.allocator_free_share) {
            (Some(b), Some(share)) => format!(
                "; it held {} free, {:.1}% of all it held",
                Bytes(b),
                share * 100.0
            ),
            _ => String::new(),
        };
        writeln!(
            w,
            "**Allocator:** resident / allocated = {f:.2} where the node was largest{free}.\n"
        )?;
    }
    if let Some(s) = &m.scrapes {
        if s.ok == 0 {
            writeln!(
                w,
                "**Metrics:** no scrape gave any series ({} failed, {} empty).\n",
                s.failed, s.empty
            )?;
        }
    }
    Ok(())
}

/// The load of the whole cell: rates, counts, latency percentiles.
fn load_line(w: &mut impl Write, c: &CellResult) -> io::Result<()> {
    if let Some(l) = &c.load {
        writeln!(
            w,
            "**Load:** {:.0} ops/s over {:.0} s: {:.0} writes/s, {:.0} reads/s ({} SET, {} GET, {} MGET, {} DEL acknowledged{}; {} errors; {} not sent while the node was down; {} corrupted reads). Latency (from the scheduled start; from the send at `rate: max`): p50 {}, p90 {}, p99 {}, p99.9 {}, max {}. Per interval: `latency.csv`.\n",
            l.ops_per_s,
            l.active_s,
            l.writes_per_s,
            l.reads_per_s,
            l.sets,
            l.gets,
            l.mgets,
            l.dels,
            if l.fill_sets > 0 {
                format!("; {} SET by `load`", l.fill_sets)
            } else {
                String::new()
            },
            match (l.not_done, l.client_restarts) {
                (0, 0) => l.errors.to_string(),
                (n, 0) => format!("{} ({n} writes the node said were not done)", l.errors),
                (0, r) => format!("{} ({r} client adapters exited and were started again)", l.errors),
                (n, r) => format!(
                    "{} ({n} writes the node said were not done; {r} client adapters exited and were started again)",
                    l.errors
                ),
            },
            l.unavailable,
            l.corrupted_reads,
            ms(l, |l| l.p50),
            ms(l, |l| l.p90),
            ms(l, |l| l.p99),
            ms(l, |l| l.p999),
            ms(l, |l| l.max),
        )?;
    }
    Ok(())
}

/// Every upgrade and downgrade: outcome, readiness, read-back.
fn upgrades_table(w: &mut impl Write, c: &CellResult) -> io::Result<()> {
    if !c.upgrades.is_empty() {
        writeln!(w, "| version change | at | outcome | ready after | as expected | lost | corrupted | in doubt |\n|---|---:|---|---:|---:|---:|---:|---:|")?;
        for u in &c.upgrades {
            let i = u.integrity.unwrap_or_default();
            let outcome = match &u.reason {
                Some(r) => format!("{}: {}", u.outcome, table_text(r)),
                None => u.outcome.to_string(),
            };
            writeln!(
                w,
                "| {} {} -> {} | {:.1} s | {} | {} | {} | {} | {} | {} |",
                u.kind,
                u.from,
                u.to,
                u.at_s,
                outcome,
                u.ready_after_ms
                    .map(|m| format!("{m} ms"))
                    .unwrap_or_else(|| "-".into()),
                i.verified,
                i.lost,
                i.corrupted,
                i.in_doubt
            )?;
        }
        writeln!(w)?;
    }
    Ok(())
}

/// SST files by compression: `Snappy 1.2 MiB (3 files), ...`.
fn sst_groups(i: &crate::model::Inspection) -> String {
    let v: Vec<String> = i
        .compression
        .iter()
        .map(|(c, g)| format!("{c} {} ({} files)", Bytes(g.bytes), g.files))
        .collect();
    if v.is_empty() {
        "no SST files".to_string()
    } else {
        v.join(", ")
    }
}

/// The data directory before and after each swap of versions, and what
/// each `verify: offline` found in it.
fn data_dirs(w: &mut impl Write, c: &CellResult) -> io::Result<()> {
    for u in &c.upgrades {
        if let (Some(b), Some(a)) = (&u.before, &u.after) {
            writeln!(
                w,
                "**{} {} -> {}, the data directory:** before (RocksDB {}, {}): {}; {}. After (RocksDB {}, {}): {}.",
                u.kind,
                u.from,
                u.to,
                b.rocksdb_version.as_deref().unwrap_or("?"),
                Bytes(b.size_bytes),
                sst_groups(b),
                b.corruption.as_deref().unwrap_or("every block's checksum verified"),
                a.rocksdb_version.as_deref().unwrap_or("?"),
                Bytes(a.size_bytes),
                sst_groups(a),
            )?;
            // Values that differ first: options one version's file has
            // and the other's lacks are mostly new defaults, named only.
            let changed: Vec<String> = u
                .options_changed
                .iter()
                .filter_map(|(k, x, y)| Some(format!("`{k}` {} -> {}", x.as_ref()?, y.as_ref()?)))
                .collect();
            let only = |new: bool| -> Vec<String> {
                u.options_changed
                    .iter()
                    .filter(|(_, x, y)| x.is_none() == new && y.is_none() != new)
                    .map(|(k, _, _)| format!("`{k}`"))
                    .collect()
            };
            if !changed.is_empty() {
                write!(
                    w,
                    " Options changed ({}): {}.",
                    changed.len(),
                    changed.join("; ")
                )?;
            }
            for (names, which) in [(only(true), "new in"), (only(false), "gone from")] {
                if !names.is_empty() {
                    write!(
                        w,
                        " {} options {which} the OPTIONS file after: {}{}.",
                        names.len(),
                        names.iter().take(8).cloned().collect::<Vec<_>>().join(", "),
                        if names.len() > 8 { ", ..." } else { "" }
                    )?;
                }
            }
            writeln!(w)?;
        }
    }
    offline_lines(w, c)?;
    Ok(())
}

/// Each `verify: offline`.
fn offline_lines(w: &mut impl Write, c: &CellResult) -> io::Result<()> {
    for o in &c.offline {
        let i = &o.inspection;
        let levels: Vec<String> = i
            .levels
            .iter()
            .map(|(l, g)| format!("{l} {} files {}", g.files, Bytes(g.bytes)))
            .collect();
        let keys: Vec<String> = i
            .keys
            .iter()
            .map(|(cf, n)| format!("{n} in {cf}"))
            .collect();
        let judged = i
            .integrity
            .as_ref()
            .map(|x| format!("; against the ledger: {x}"))
            .unwrap_or_default();
        writeln!(
            w,
            "**Offline verification at {:.1} s** (RocksDB {} wrote it; {}): {}; keys: {}{judged}; SSTs {}; by level: {}.\n",
            o.at_s,
            i.rocksdb_version.as_deref().unwrap_or("?"),
            Bytes(i.size_bytes),
            i.corruption.as_deref().unwrap_or("every block's checksum verified"),
            keys.join(", "),
            sst_groups(i),
            levels.join(", ")
        )?;
    }
    Ok(())
}

/// The load of each phase that had one.
fn phase_loads(w: &mut impl Write, c: &CellResult) -> io::Result<()> {
    let loaded: Vec<_> = c
        .phases
        .iter()
        .filter_map(|p| p.load.as_ref().map(|l| (p, l)))
        .collect();
    if !loaded.is_empty() {
        writeln!(w, "| phase | from | ops/s | writes/s | reads/s | errors | p50 | p99 | p99.9 | max |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")?;
        for (p, l) in loaded {
            // A `load` phase's SETs are pipelined and outside the rate.
            let (ops, writes) = if l.fill_sets > 0 && l.ops_per_s == 0.0 {
                let fill = l.fill_sets as f64 / (p.end_s - p.start_s).max(1e-9);
                (fill, fill)
            } else {
                (l.ops_per_s, l.writes_per_s)
            };
            writeln!(
                w,
                "| {} | {:.1} s | {:.0} | {:.0} | {:.0} | {} | {} | {} | {} | {} |",
                p.phase,
                p.start_s,
                ops,
                writes,
                l.reads_per_s,
                l.errors,
                ms(l, |l| l.p50),
                ms(l, |l| l.p99),
                ms(l, |l| l.p999),
                ms(l, |l| l.max),
            )?;
        }
        writeln!(w)?;
    }
    Ok(())
}

/// Every phase, folded: when, the data directory after it, its outcome.
fn phases_table(w: &mut impl Write, c: &CellResult) -> io::Result<()> {
    if !c.phases.is_empty() {
        writeln!(w, "<details><summary>Phases</summary>\n\n| phase | from | to | data directory after | outcome |\n|---|---:|---:|---:|---|")?;
        for p in &c.phases {
            writeln!(
                w,
                "| {} | {:.1} s | {:.1} s | {} | {} |",
                p.phase,
                p.start_s,
                p.end_s,
                p.disk_bytes
                    .map(|b| Bytes(b).to_string())
                    .unwrap_or_else(|| "-".into()),
                p.outcome.replace('\n', " ").replace('|', "\\|")
            )?;
        }
        writeln!(w, "\n</details>\n")?;
    }
    Ok(())
}

/// What soak itself cost, in one line.
fn harness_line(w: &mut impl Write, h: &crate::model::HarnessCost) -> io::Result<()> {
    let mut parts = vec![format!(
        "the sampler {:.2}% (every {})",
        h.sampler_cpu_share * 100.0,
        crate::units::human_duration(std::time::Duration::from_secs_f64(h.interval_s))
    )];
    if h.load_cpu_share > 0.0 {
        parts.push(format!("the load {:.1}%", h.load_cpu_share * 100.0));
    }
    if h.faultfs_cpu_share > 0.0 {
        parts.push(format!(
            "the fault filesystem {:.1}%",
            h.faultfs_cpu_share * 100.0
        ));
    }
    writeln!(
        w,
        "**soak's own cost:** {:.1}% of a core over the cell, of which {}; soak's RSS {} at the start, {} at the end, {} at most.\n",
        h.cpu_share * 100.0,
        parts.join(", "),
        Bytes(h.rss_first_bytes),
        Bytes(h.rss_last_bytes),
        Bytes(h.rss_peak_bytes)
    )
}

/// What soak's fault filesystem did, in one paragraph.
fn disk_faults(w: &mut impl Write, d: &crate::model::DiskStats) -> io::Result<()> {
    let mut did = vec![];
    if d.power_cuts > 0 {
        did.push(format!(
            "{} power cuts dropped {} not fsynced from {} files",
            d.power_cuts,
            Bytes(d.bytes_dropped),
            d.files_cut
        ));
    }
    if d.refused_writes > 0 {
        did.push(format!("{} writes refused with ENOSPC", d.refused_writes));
    }
    let eio = d.read_errors + d.write_errors + d.fsync_errors;
    if eio > 0 {
        did.push(format!(
            "{} reads, {} writes and {} fsyncs failed with EIO",
            d.read_errors, d.write_errors, d.fsync_errors
        ));
    }
    if d.delayed > 0 {
        did.push(format!("{} operations delayed", d.delayed));
    }
    if did.is_empty() {
        did.push("no fault hit".into());
    }
    writeln!(
        w,
        "**Disk faults** (soak's fault filesystem under the data directory): {}; the node made {} reads, {} writes ({}) and {} fsyncs through it ({}).\n",
        did.join("; "),
        d.reads,
        d.writes,
        Bytes(d.bytes_written),
        d.fsyncs,
        if d.writeback_cache {
            "its writes gathered by the kernel's writeback cache"
        } else {
            "each write through to soak, as the faults on writes need"
        }
    )
}

/// Every restart: why, how long it took, and what its death took, found
/// by the read-back after it or by reads during the load.
fn restarts(w: &mut impl Write, restarts: &[super::Restart]) -> io::Result<()> {
    for (n, r) in restarts.iter().enumerate() {
        for h in &r.holes {
            writeln!(
                w,
                "- restart {} ({} at {:.1} s): **a hole** in connection {}: {} acknowledged writes lost while `{}`, acknowledged after them, survived; first: `{}` version {} acknowledged at {:.1} s, read {}",
                n + 1,
                r.reason,
                r.at_s,
                h.connection,
                thousands(h.lost),
                h.survivor,
                h.first_lost.key,
                h.first_lost.acked_version,
                h.first_lost.acked_at_s,
                h.first_lost.read
            )?;
        }
        if r.lost_unsynced > 0 {
            writeln!(
                w,
                "- restart {} ({} at {:.1} s): {} acknowledged writes lost from the unsynced tail",
                n + 1,
                r.reason,
                r.at_s,
                thousands(r.lost_unsynced)
            )?;
        }
        let bad = r.lost + r.corrupted + r.resurrected + r.aborted;
        if bad == 0 || !r.holes.is_empty() {
            continue;
        }
        writeln!(
            w,
            "- restart {} ({}, {} at {:.1} s): {} acknowledged writes lost{}{}{}{}, found by {}{}",
            n + 1,
            r.reason,
            r.exit,
            r.at_s,
            thousands(r.lost),
            if r.corrupted > 0 {
                format!(", {} corrupted", thousands(r.corrupted))
            } else {
                String::new()
            },
            if r.resurrected > 0 {
                format!(", {} deletes undone", thousands(r.resurrected))
            } else {
                String::new()
            },
            if r.aborted > 0 {
                format!(
                    ", {} writes the node said failed read back (aborted reads)",
                    thousands(r.aborted)
                )
            } else {
                String::new()
            },
            r.readback_s
                .map(|s| format!(", in {s:.1} s of read-back"))
                .unwrap_or_default(),
            r.oracle.as_deref().unwrap_or("?"),
            r.first_lost
                .as_ref()
                .map(|f| format!(
                    "; first: `{}` version {} acknowledged at {:.1} s, read {}",
                    f.key, f.acked_version, f.acked_at_s, f.read
                ))
                .unwrap_or_default(),
        )?;
    }
    writeln!(w, "\n| restart | reason | at | ready after | previous incarnation ended by | lost | corrupted | resurrected | in doubt | read-back |\n|---:|---|---:|---:|---|---:|---:|---:|---:|---:|")?;
    for (n, r) in restarts.iter().enumerate() {
        writeln!(
            w,
            "| {} | {} | {:.1} s | {} ms | {} | {} | {} | {} | {} | {} |",
            n + 1,
            r.reason,
            r.at_s,
            r.ready_after_ms,
            r.exit,
            r.lost,
            r.corrupted,
            r.resurrected,
            r.in_doubt,
            r.readback_s
                .map(|s| format!("{s:.1} s"))
                .unwrap_or_else(|| "-".into()),
        )?;
    }
    writeln!(w)
}

/// What the node's cgroup counted: the kernel's peak, how often the limits
/// were hit, and memory pressure.
fn cgroup_line(w: &mut impl Write, cg: &super::CgroupSummary) -> io::Result<()> {
    let mut parts = vec![];
    if let Some(p) = cg.peak_bytes {
        parts.push(format!("kernel's peak {}", Bytes(p)));
    }
    if let Some(h) = cg.high_bytes {
        parts.push(format!(
            "`memory.high` {} went over {} times (throttled and reclaimed)",
            Bytes(h),
            cg.events_high
        ));
    }
    parts.push(format!(
        "at its limit {} times, OOM killer {} times ({} killed)",
        cg.events_max, cg.events_oom, cg.oom_kills
    ));
    if let (Some(some), Some(full)) = (cg.pressure_some_avg10_max, cg.pressure_full_avg10_max) {
        parts.push(format!(
            "memory pressure up to {some:.1}% some / {full:.1}% full (avg10){}",
            match (cg.pressure_some_stall_s, cg.pressure_full_stall_s) {
                (Some(s), Some(f)) => format!(", {s:.1} s / {f:.1} s stalled in all"),
                _ => String::new(),
            }
        ));
    }
    writeln!(
        w,
        "**cgroup {}:** {}. `{}`{}\n",
        cg.version,
        parts.join("; "),
        cg.path,
        if cg.placement.is_empty() {
            String::new()
        } else {
            format!(" ({})", cg.placement)
        }
    )
}

/// Per series: peak, where it settled, the growth with its interval and
/// significance, and when the limit is reached at that rate.
fn series_table(w: &mut impl Write, m: &super::MemorySummary) -> io::Result<()> {
    if m.samples == 0 {
        return Ok(());
    }
    writeln!(w, "| series | peak | steady | growth | 95% interval | p (growth) | limit reached in |\n|---|---:|---:|---:|---:|---:|---:|")?;
    for (name, a) in [
        ("RSS", &m.rss),
        ("PSS", &m.pss),
        ("anonymous", &m.anon),
        ("cgroup", &m.cgroup),
        ("disk", &m.disk),
    ] {
        if a.peak == 0 {
            continue;
        }
        writeln!(
            w,
            "| {name} | {} | {} | {} | {} .. {} | {} | {} |",
            Bytes(a.peak),
            steady(a),
            mib_per_h(a.slope_per_hour),
            mib_per_h(a.slope_low_per_hour),
            mib_per_h(a.slope_high_per_hour),
            a.p_growth
                .map(|p| format!("{p:.1e}"))
                .unwrap_or_else(|| "n/a".into()),
            a.hours_to_limit
                .map(crate::units::hours)
                .unwrap_or_else(|| "-".into()),
        )?;
    }
    writeln!(w)
}

type Figure = (
    &'static str,
    fn(&CellResult) -> Option<f64>,
    fn(f64) -> String,
);

/// The figures of "load at a glance", as the repeats section spreads them.
const FIGURES: [Figure; 6] = [
    (
        "writes/s",
        |c| c.load.as_ref().map(|l| l.writes_per_s),
        |v| format!("{v:.0}"),
    ),
    (
        "reads/s",
        |c| c.load.as_ref().map(|l| l.reads_per_s),
        |v| format!("{v:.0}"),
    ),
    (
        "p99",
        |c| c.load.as_ref()?.latency_us.as_ref().map(|l| l.p99 as f64),
        |v| format!("{:.2} ms", v / 1000.0),
    ),
    (
        "peak RSS",
        |c| Some(c.memory.peak_rss_bytes as f64),
        |v| Bytes(v as u64).to_string(),
    ),
    (
        "peak cgroup",
        |c| Some(c.memory.peak_cgroup_bytes as f64),
        |v| Bytes(v as u64).to_string(),
    ),
    (
        "peak disk",
        |c| Some(c.memory.peak_disk_bytes as f64),
        |v| Bytes(v as u64).to_string(),
    ),
];

/// With `--repeat N`: each cell's figures as median and range over its
/// runs, and which differences between cells are within that noise.
fn repeats(w: &mut impl Write, s: &super::Summary) -> io::Result<()> {
    let mut groups: Vec<(&str, Vec<&CellResult>)> = vec![];
    for c in &s.cells {
        let Some(base) = c.repeat_of.as_deref() else {
            continue;
        };
        match groups.iter_mut().find(|(b, _)| *b == base) {
            Some((_, runs)) => runs.push(c),
            None => groups.push((base, vec![c])),
        }
    }
    if groups.is_empty() {
        return Ok(());
    }
    let spread = |runs: &[&CellResult], f: fn(&CellResult) -> Option<f64>| {
        Spread::of(&runs.iter().filter_map(|c| f(c)).collect::<Vec<_>>())
    };
    let figures: Vec<&Figure> = FIGURES
        .iter()
        .filter(|(_, f, _)| {
            groups
                .iter()
                .any(|(_, runs)| spread(runs, *f).is_some_and(|x| x.max > 0.0))
        })
        .collect();
    writeln!(w, "**Repeats** (median, and min–max over the runs):\n")?;
    let head: Vec<&str> = figures.iter().map(|(n, _, _)| *n).collect();
    writeln!(w, "| cell | runs | {} |", head.join(" | "))?;
    writeln!(w, "|---|---:|{}", "---:|".repeat(head.len()))?;
    for (base, runs) in &groups {
        let cols: Vec<String> = figures
            .iter()
            .map(|(_, f, fmt)| match spread(runs, *f) {
                Some(x) => format!("{} ({}–{})", fmt(x.median), fmt(x.min), fmt(x.max)),
                None => "n/a".into(),
            })
            .collect();
        writeln!(w, "| `{base}` | {} | {} |", runs.len(), cols.join(" | "))?;
    }
    writeln!(w)?;
    if groups.len() > 1 {
        let mut lines = vec![];
        for (name, f, fmt) in &figures {
            for (i, (a, ra)) in groups.iter().enumerate() {
                for (b, rb) in groups.iter().skip(i + 1) {
                    let (Some(x), Some(y)) = (spread(ra, *f), spread(rb, *f)) else {
                        continue;
                    };
                    let verdict = if x.overlaps(&y) {
                        "within the noise (the runs' ranges overlap)"
                    } else {
                        "apart (the runs' ranges do not overlap)"
                    };
                    lines.push(format!(
                        "- {name}: `{a}` {} vs `{b}` {}: {verdict}",
                        fmt(x.median),
                        fmt(y.median)
                    ));
                }
            }
        }
        writeln!(w, "{}\n", lines.join("\n"))?;
    }
    Ok(())
}

fn load_glance(w: &mut impl Write, s: &super::Summary) -> io::Result<()> {
    if s.cells.iter().all(|c| c.load.is_none()) {
        return Ok(());
    }
    writeln!(w, "**Load at a glance** (the rate-controlled or closed-loop load, not `load` phases):\n\n| cell | writes/s | reads/s | p50 | p99 | p99.9 | peak RSS | steady RSS | peak disk |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|")?;
    for c in &s.cells {
        let Some(l) = &c.load else { continue };
        let m = &c.memory;
        writeln!(
            w,
            "| `{}` | {:.0} | {:.0} | {} | {} | {} | {} | {} | {} |",
            c.id,
            l.writes_per_s,
            l.reads_per_s,
            ms(l, |x| x.p50),
            ms(l, |x| x.p99),
            ms(l, |x| x.p999),
            Bytes(m.peak_rss_bytes),
            steady(&m.rss),
            Bytes(m.peak_disk_bytes),
        )?;
    }
    writeln!(w)
}

fn glance(w: &mut impl Write, s: &super::Summary) -> io::Result<()> {
    if s.cells.iter().all(|c| c.memory.samples == 0) {
        return Ok(());
    }
    writeln!(w, "| cell | allocator | peak RSS | steady RSS | peak cgroup | resident / allocated | OOM kills | peak disk |\n|---|---|---:|---:|---:|---:|---:|---:|")?;
    for c in &s.cells {
        let m = &c.memory;
        let alloc = c
            .allocator
            .as_deref()
            .map(|a| a.split(" (").next().unwrap_or(a))
            .unwrap_or("as linked");
        writeln!(
            w,
            "| `{}` | {alloc} | {} | {} | {} | {} | {} | {} |",
            c.id,
            Bytes(m.peak_rss_bytes),
            steady(&m.rss),
            Bytes(m.peak_cgroup_bytes),
            m.fragmentation
                .map(|f| format!("{f:.2}"))
                .unwrap_or_else(|| "n/a".into()),
            m.oom_kills,
            Bytes(m.peak_disk_bytes),
        )?;
    }
    writeln!(w)
}

#[cfg(test)]
mod tests {
    use super::Spread;

    #[test]
    fn a_spread_is_the_median_and_range_and_overlaps_say_noise() {
        let a = Spread::of(&[3.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!((a.median, a.min, a.max), (2.5, 1.0, 10.0));
        let b = Spread::of(&[11.0, 12.0, f64::NAN]).unwrap();
        assert_eq!((b.median, b.min, b.max), (11.5, 11.0, 12.0));
        assert!(!a.overlaps(&b));
        assert!(a.overlaps(&Spread::of(&[9.0, 20.0]).unwrap()));
        assert_eq!(Spread::of(&[]), None);
    }
}
