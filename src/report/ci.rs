//! What soak writes for the pages a CI run is read on: GitHub's job
//! summary (appended to `$GITHUB_STEP_SUMMARY`), its workflow-command
//! annotations (`::error`, `::warning`, printed when `GITHUB_ACTIONS` is
//! `true`), and `pr-comment.md` beside report.md, a report that fits a
//! pull request comment whatever the number of cells (GitHub refuses
//! comments over 65,536 characters: the details are folded, and what does
//! not fit is left to report.md).

use std::fmt::Write as _;
use std::io;
use std::path::Path;

use super::charts::Charts;
use super::mermaid::chart_rss;
use super::text::{badge, code_span, mib_per_h, table_text, value_text};
use super::{CellResult, CheckResult, Summary, Verdict};
use crate::units::Bytes;

/// GitHub refuses a comment longer than this many characters.
pub const COMMENT_LIMIT: usize = 65_536;

/// What pr-comment.md may take of it, leaving room for a line a workflow
/// adds (a link to the run, say).
const COMMENT_BUDGET: usize = 60_000;

/// Cells listed in a summary's table; the rest are counted.
const TABLE_ROWS: usize = 100;

/// Failed and warned checks listed; the rest are counted.
const PROBLEM_LINES: usize = 60;

/// RSS charts in a job summary.
const SUMMARY_CHARTS: usize = 10;

/// A failed or warned check, or a cell that could not run.
struct Problem<'a> {
    cell: &'a CellResult,
    verdict: Verdict,
    check: Option<&'a CheckResult>,
}

impl Problem<'_> {
    /// One line: the check, what it measured and its limit, and how.
    fn text(&self) -> String {
        match self.check {
            Some(k) => {
                let mut t = format!(
                    "{}: measured {}, limit {}",
                    k.name,
                    value_text(&k.value, &k.unit),
                    value_text(&k.limit, &k.unit)
                );
                if let Some(d) = &k.detail {
                    let _ = write!(t, " ({d})");
                }
                t
            }
            None => format!(
                "the cell did not run to its end: {}",
                self.cell.error.as_deref().unwrap_or("an error")
            ),
        }
    }
}

/// Every failed check first, then every warned one, in cell order.
fn problems(s: &Summary) -> Vec<Problem<'_>> {
    let mut out = vec![];
    for want in [Verdict::Error, Verdict::Fail, Verdict::Warn] {
        for c in &s.cells {
            if want == Verdict::Error && c.error.is_some() {
                out.push(Problem {
                    cell: c,
                    verdict: Verdict::Error,
                    check: None,
                });
            }
            for k in c.checks.iter().filter(|k| k.verdict == want) {
                out.push(Problem {
                    cell: c,
                    verdict: want,
                    check: Some(k),
                });
            }
        }
    }
    out
}

fn heading(s: &Summary) -> String {
    let count = |v: Verdict| s.cells.iter().filter(|c| c.verdict == v).count();
    let mut tally = vec![];
    for (v, word) in [
        (Verdict::Pass, "passed"),
        (Verdict::Warn, "warned"),
        (Verdict::Fail, "failed"),
        (Verdict::Error, "could not run"),
    ] {
        let n = count(v);
        if n > 0 {
            tally.push(format!("{n} {word}"));
        }
    }
    format!(
        "### soak: {} — {}\n\nRun {} of {} (seed {}), {}: {} cell{}, {}.\n\n",
        table_text(&s.suite),
        super::text::run_badge(s),
        code_span(&s.run_id),
        code_span(&s.suite_file),
        s.seed,
        super::human_duration(std::time::Duration::from_secs_f64(s.duration_s)),
        s.cells.len(),
        if s.cells.len() == 1 { "" } else { "s" },
        tally.join(", ")
    )
}

fn cells_table(s: &Summary) -> String {
    let found = super::text::finding_columns(s);
    let heads: String = found.iter().map(|f| format!(" {} |", f.heading)).collect();
    let rules = "---:|".repeat(found.len());
    let mut t = format!(
        "| cell | verdict | lost | corrupted |{heads} OOM kills | peak RSS | RSS growth | ops/s | p99 |\n|---|---|---:|---:|{rules}---:|---:|---:|---:|---:|\n",
    );
    for c in s.cells.iter().take(TABLE_ROWS) {
        let (ops, p99) = super::text::ops_and_p99(c);
        let figures: String = found.iter().map(|f| format!(" {} |", f.cell(c))).collect();
        let _ = writeln!(
            t,
            "| {} | {} | {} | {} |{figures} {} | {} | {} | {ops} | {p99} |",
            code_span(&table_text(&c.id)),
            badge(c.verdict),
            c.integrity.lost_writes(),
            c.integrity.corrupted,
            c.memory.oom_kills,
            Bytes(c.memory.peak_rss_bytes),
            mib_per_h(c.memory.slope_bytes_per_hour),
        );
    }
    if s.cells.len() > TABLE_ROWS {
        let _ = writeln!(
            t,
            "\n… and {} more cells: see report.md.",
            s.cells.len() - TABLE_ROWS
        );
    }
    t.push('\n');
    t
}

fn problem_lines(s: &Summary) -> String {
    let all = problems(s);
    if all.is_empty() {
        return String::new();
    }
    let mut t = String::from("**Failed and warned checks:**\n\n");
    for p in all.iter().take(PROBLEM_LINES) {
        let _ = writeln!(
            t,
            "- {} {}: {}",
            badge(p.verdict),
            code_span(&table_text(&p.cell.id)),
            table_text(&p.text())
        );
    }
    if all.len() > PROBLEM_LINES {
        let _ = writeln!(
            t,
            "- … and {} more: see report.md",
            all.len() - PROBLEM_LINES
        );
    }
    t.push('\n');
    t
}

/// The cells with something to show first: failed, errors, warned, passed.
fn cells_by_concern(s: &Summary) -> Vec<&CellResult> {
    let rank = |v: Verdict| match v {
        Verdict::Fail => 0,
        Verdict::Error => 1,
        Verdict::Warn => 2,
        Verdict::Pass => 3,
    };
    let mut cells: Vec<&CellResult> = s.cells.iter().collect();
    cells.sort_by_key(|c| rank(c.verdict));
    cells
}

fn rss_chart(c: &CellResult, charts: &Charts) -> String {
    let Some(chart) = charts.get(&c.id) else {
        return String::new();
    };
    let mut out = Vec::new();
    let _ = chart_rss(&mut out, &c.id, &chart.rss, c.memory.limit_bytes);
    String::from_utf8_lossy(&out).into_owned()
}

/// The job summary: the verdict, the cells, the failed checks with value
/// and limit, and the RSS charts of the cells that need a look first.
pub fn step_summary(s: &Summary, charts: &Charts) -> String {
    let mut t = heading(s);
    t.push_str(&cells_table(s));
    t.push_str(&problem_lines(s));
    for c in cells_by_concern(s).into_iter().take(SUMMARY_CHARTS) {
        t.push_str(&rss_chart(c, charts));
    }
    t
}

/// The checks of one cell as a table, and its RSS chart.
fn cell_details(c: &CellResult, charts: &Charts) -> String {
    let mut t = format!(
        "<details><summary>{} — {}</summary>\n\n",
        html_text(&c.id),
        badge(c.verdict)
    );
    if let Some(e) = &c.error {
        let _ = writeln!(t, "The cell did not run to its end: {}\n", table_text(e));
    }
    if !c.checks.is_empty() {
        t.push_str("| check | verdict | measured | limit |\n|---|---|---:|---:|\n");
        for k in &c.checks {
            let _ = writeln!(
                t,
                "| {} | {} | {} | {} |",
                table_text(&k.name),
                badge(k.verdict),
                table_text(&value_text(&k.value, &k.unit)),
                table_text(&value_text(&k.limit, &k.unit))
            );
        }
        t.push('\n');
    }
    if let Some(line) = where_it_went(c) {
        let _ = writeln!(t, "{}\n", table_text(&line));
    }
    t.push_str(&rss_chart(c, charts));
    t.push_str("</details>\n\n");
    t
}

/// "Where the memory went", in one line: the kind of mapping that grew
/// fastest (with its arena count), and the call stack a heap profile saw
/// grow most; none when nothing grew.
fn where_it_went(c: &CellResult) -> Option<String> {
    let m = &c.memory;
    let kind = crate::model::KindGrowth::fastest(&m.kinds).map(|k| {
        let counted = match (k.count_first, k.count_last) {
            (Some(a), Some(b)) => format!(" ({a} → {b})"),
            _ => String::new(),
        };
        format!(
            "{}{counted} {:+.1} MiB/h",
            k.label,
            k.slope_bytes_per_hour.unwrap_or(0.0) / 1048576.0
        )
    });
    let site = m
        .profile
        .as_ref()
        .and_then(|p| p.growing.first().map(|g| (p, g)))
        .map(|(p, g)| {
            format!(
                "grown most from `{}` ({}, {})",
                g.frames.first().map_or("??", |f| f.as_str()),
                p.tool,
                g.growth_bytes_per_hour
                    .map_or("rate unknown".into(), |r| format!(
                        "{:+.1} MiB/h",
                        r / 1048576.0
                    ))
            )
        });
    let parts: Vec<String> = kind.into_iter().chain(site).collect();
    (!parts.is_empty()).then(|| format!("**Where the memory went:** {}", parts.join("; ")))
}

/// A cell id inside HTML (a `<summary>`): no tags, no line breaks.
fn html_text(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace(['\n', '\r'], " ")
}

/// `pr-comment.md`: the heading, the cells, the failed checks, then each
/// cell's checks and chart folded, the cells that need a look first, as
/// many as fit under GitHub's comment limit; the rest are left to
/// report.md, and the comment says how many.
pub fn pr_comment(s: &Summary, charts: &Charts) -> String {
    pr_comment_linked(s, charts, None)
}

/// Where CI keeps this job's artifacts, from its environment: a GitLab
/// job's report.html (browsable there), or a GitHub run's page (which
/// lists its artifacts). None outside CI.
pub fn artifacts_link() -> Option<String> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    if let Some(job) = var("CI_JOB_URL") {
        return Some(format!("{job}/artifacts/browse"));
    }
    Some(format!(
        "{}/{}/actions/runs/{}",
        var("GITHUB_SERVER_URL")?,
        var("GITHUB_REPOSITORY")?,
        var("GITHUB_RUN_ID")?
    ))
}

/// `pr-comment.md`, its last line linking to where CI keeps the run's
/// artifacts when `link` is known.
pub fn pr_comment_linked(s: &Summary, charts: &Charts, link: Option<&str>) -> String {
    let place = match link {
        Some(l) => format!("in the run's artifacts ({l})"),
        None => "beside this comment in the run's artifacts".into(),
    };
    let tail = format!(
        "Everything else is in report.md, and every series at full resolution with its events, zoomable, in report.html (one file that opens offline), {place}.\n"
    );
    let tail = tail.as_str();
    let mut t = heading(s);
    for part in [cells_table(s), problem_lines(s)] {
        if t.chars().count() + part.chars().count() + 200 < COMMENT_BUDGET {
            t.push_str(&part);
        }
    }
    let mut left_out = 0;
    let mut used = t.chars().count();
    for c in cells_by_concern(s) {
        let d = cell_details(c, charts);
        let n = d.chars().count();
        if used + n + tail.len() + 200 < COMMENT_BUDGET {
            t.push_str(&d);
            used += n;
        } else {
            left_out += 1;
        }
    }
    if left_out > 0 {
        let _ = writeln!(
            t,
            "The details of {left_out} cell{} are left out to fit GitHub's comment limit.\n",
            if left_out == 1 { "" } else { "s" }
        );
    }
    t.push_str(tail);
    t
}

/// A workflow command's message, escaped as GitHub's runner reads it.
fn command_data(s: &str) -> String {
    s.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// A workflow command's property value (`title=...`).
fn command_property(s: &str) -> String {
    command_data(s).replace(':', "%3A").replace(',', "%2C")
}

/// `::error` for each failed check (and cell that could not run),
/// `::warning` for each warned one.
pub fn annotations(s: &Summary) -> Vec<String> {
    problems(s)
        .iter()
        .map(|p| {
            let kind = if p.verdict == Verdict::Warn {
                "warning"
            } else {
                "error"
            };
            format!(
                "::{kind} title={}::{}",
                command_property(&format!("soak {}: cell {}", s.suite, p.cell.id)),
                command_data(&p.text())
            )
        })
        .collect()
}

/// What a run publishes to the CI it runs on: the job summary appended to
/// `$GITHUB_STEP_SUMMARY` when it is set, and the annotations on stdout
/// when `GITHUB_ACTIONS` is `true`.
pub fn publish(s: &Summary, charts: &Charts) -> io::Result<()> {
    if std::env::var("GITHUB_ACTIONS").as_deref() == Ok("true") {
        for a in annotations(s) {
            println!("{a}");
        }
    }
    if let Some(path) = std::env::var_os("GITHUB_STEP_SUMMARY").filter(|p| !p.is_empty()) {
        append(Path::new(&path), &step_summary(s, charts))?;
    }
    Ok(())
}

fn append(path: &Path, text: &str) -> io::Result<()> {
    use std::io::Write as _;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?
        .write_all(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CellResult, CheckResult};

    fn summary(cells: usize) -> Summary {
        let mut s: Summary = serde_json::from_value(serde_json::json!({
            "schema_version": crate::model::SCHEMA_VERSION,
            "suite": "wide", "suite_file": "suites/wide.yaml", "run_id": "r1",
            "seed": 1, "started_at": "2026-12-01T00:00:00Z", "duration_s": 60.0,
            "verdict": "fail", "soak_version": "0", "cells": []
        }))
        .expect("a summary");
        for i in 0..cells {
            let mut c = CellResult::error(
                &format!("cache={i}MiB,allocator=jemalloc"),
                Default::default(),
                "x".into(),
            );
            c.error = None;
            c.verdict = if i % 3 == 0 {
                Verdict::Fail
            } else {
                Verdict::Pass
            };
            c.checks = (0..12)
                .map(|k| CheckResult {
                    name: format!("check {k} with a long name: p99 < 50 ms in every window"),
                    verdict: if i % 3 == 0 && k < 4 {
                        Verdict::Fail
                    } else {
                        Verdict::Pass
                    },
                    value: serde_json::json!(123.4 + k as f64),
                    limit: serde_json::json!(100),
                    unit: "ms".into(),
                    detail: Some(
                        "the detail of how the verdict was reached, at some length".into(),
                    ),
                })
                .collect();
            s.cells.push(c);
        }
        s
    }

    /// "lost" is one count wherever it is printed: a resurrected delete
    /// is a lost write in the report's table, the PR comment and the
    /// HTML page as in the `lost_writes` check; corrupted stays apart.
    #[test]
    fn lost_counts_resurrected_deletes_in_every_table() {
        let mut s = summary(1);
        s.cells[0].integrity = crate::model::Integrity {
            acknowledged: 100,
            lost: 3,
            resurrected: 2,
            corrupted: 7,
            ..Default::default()
        };
        let comment = pr_comment(&s, &Charts::new());
        assert!(comment.contains(" | 5 | 7 |"), "{comment}");
        let mut md = vec![];
        crate::report::markdown::write(&mut md, &s, &Charts::new()).unwrap();
        let md = String::from_utf8(md).unwrap();
        assert!(md.contains(" | 100 | 5 | 7 |"), "{md}");
        let html = crate::report::html::page(&s, None);
        assert!(html.contains("<td>100</td><td>5</td><td>7</td>"), "{html}");
    }

    fn charts(s: &Summary) -> Charts {
        s.cells
            .iter()
            .map(|c| {
                let rss = (0..3600)
                    .map(|t| (t as f64, 100_000_000 + t as u64 * 12_345))
                    .collect();
                (
                    c.id.clone(),
                    super::super::charts::CellChart {
                        rss,
                        ..Default::default()
                    },
                )
            })
            .collect()
    }

    /// Three cells that warn and none that fails: every top line says
    /// "pass, 3 warnings", never a bare green pass (issue 44: a reader of
    /// the comment saw a green tick and nothing else).
    #[test]
    fn a_run_of_warnings_says_so_at_the_top_of_every_output() {
        let mut s = summary(3);
        s.verdict = Verdict::Pass;
        for c in &mut s.cells {
            c.verdict = Verdict::Warn;
            for k in &mut c.checks {
                k.verdict = Verdict::Pass;
            }
            c.checks[0].verdict = Verdict::Warn;
        }
        assert_eq!(s.headline(), "pass, 3 warnings in 3 cells");
        let charts = charts(&s);
        let comment = pr_comment(&s, &charts);
        let step = step_summary(&s, &charts);
        let mut md = vec![];
        crate::report::markdown::write(&mut md, &s, &charts).unwrap();
        let md = String::from_utf8(md).unwrap();
        for (what, text) in [
            ("comment", &comment),
            ("step summary", &step),
            ("report.md", &md),
        ] {
            let top = text.lines().find(|l| l.contains("soak: wide")).unwrap();
            assert!(
                top.contains("⚠️ pass, 3 warnings in 3 cells"),
                "{what}: {top}"
            );
            assert!(!top.contains("✅"), "{what}: {top}");
        }
        let junit = crate::report::junit::write(&s);
        assert!(
            junit.contains("soak: wide (pass, 3 warnings in 3 cells)"),
            "{junit}"
        );
        let mut counted = s.clone();
        counted.tally();
        assert_eq!((counted.warned_cells, counted.warned_checks), (3, 3));
        // A clean pass stays a plain pass.
        for c in &mut s.cells {
            c.verdict = Verdict::Pass;
            c.checks[0].verdict = Verdict::Pass;
        }
        assert_eq!(s.headline(), "pass");
    }

    #[test]
    fn the_comment_of_forty_cells_fits_githubs_limit_and_says_what_it_left_out() {
        let s = summary(40);
        let c = pr_comment(&s, &charts(&s));
        assert!(c.chars().count() < COMMENT_LIMIT, "{}", c.chars().count());
        assert!(c.contains("The details of"), "nothing left out?");
        assert!(c.contains("report.md"));
        // Every cell is in the table; the failed ones are detailed first.
        for cell in &s.cells {
            assert!(c.contains(&cell.id), "{}", cell.id);
        }
        let first = c.find("<details>").unwrap();
        assert!(
            c[first..].starts_with("<details><summary>cache=0MiB"),
            "{}",
            &c[first..first + 80]
        );
    }

    #[test]
    fn the_comment_says_where_the_memory_went_in_one_line() {
        let mut s = summary(1);
        s.cells[0].memory.kinds.push(crate::model::KindGrowth {
            kind: "arenas".into(),
            label: "glibc arenas".into(),
            slope_bytes_per_hour: Some(110.0 * 1048576.0),
            p_growth: Some(1e-6),
            count_first: Some(8),
            count_last: Some(24),
            ..Default::default()
        });
        s.cells[0].memory.profile = Some(crate::model::ProfileSummary {
            tool: "heaptrack".into(),
            growing: vec![crate::model::GrowingStack {
                frames: vec!["remember_session (allocnode.c:61)".into()],
                growth_bytes_per_hour: Some(100.0 * 1048576.0),
                ..Default::default()
            }],
            ..Default::default()
        });
        let c = pr_comment(&s, &charts(&s));
        assert!(
            c.contains("**Where the memory went:** glibc arenas (8 → 24) +110.0 MiB/h; grown most from `remember_session (allocnode.c:61)` (heaptrack, +100.0 MiB/h)"),
            "{c}"
        );
        // Nothing grew: no line.
        let quiet = summary(1);
        assert!(!pr_comment(&quiet, &charts(&quiet)).contains("Where the memory went"));
    }

    #[test]
    fn a_small_run_is_whole_in_its_comment() {
        let s = summary(2);
        let c = pr_comment(&s, &charts(&s));
        assert!(!c.contains("left out"));
        assert_eq!(c.matches("<details>").count(), 2);
        assert_eq!(c.matches("```mermaid").count(), 2);
    }

    #[test]
    fn annotations_are_escaped_as_the_runner_reads_them() {
        let mut s = summary(1);
        s.cells[0].checks[0].detail = Some("50%\nof it, said: \"no\"".into());
        let a = annotations(&s);
        assert_eq!(a.len(), 4);
        assert!(
            a[0].starts_with(
                "::error title=soak wide%3A cell cache=0MiB%2Callocator=jemalloc::check 0"
            ),
            "{}",
            a[0]
        );
        assert!(a[0].contains("50%25%0Aof it"), "{}", a[0]);
        assert!(!a[0].contains('\n'));
    }
}
