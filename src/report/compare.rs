//! `soak report compare BASE HEAD`: two runs' `summary.json`, cell by cell
//! (matched by id), and what got worse. A release engineer runs the suite on
//! the last release and on the candidate and attaches this table to the
//! pull request.
//!
//! Summaries are read through the typed model (`crate::model`), whose new
//! fields all have defaults: a summary written by an older soak (fewer
//! fields) still loads and compares, and a figure one side lacks is shown
//! as `-` and judged on neither side.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::model::{CellResult, Summary, Verdict};
use crate::units::Bytes;

/// Which way is better for a measured figure.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Better {
    Higher,
    Lower,
}

#[derive(Clone, Copy)]
enum Unit {
    PerSecond,
    Micros,
    Bytes,
    Count,
}

/// A figure compared by how much it changed.
struct Figure {
    name: &'static str,
    of: fn(&CellResult) -> Option<f64>,
    better: Better,
    unit: Unit,
}

const FIGURES: &[Figure] = &[
    Figure {
        name: "ops/s",
        of: |c| Some(c.load.as_ref()?.ops_per_s),
        better: Better::Higher,
        unit: Unit::PerSecond,
    },
    Figure {
        name: "writes/s",
        of: |c| Some(c.load.as_ref()?.writes_per_s),
        better: Better::Higher,
        unit: Unit::PerSecond,
    },
    Figure {
        name: "reads/s",
        of: |c| Some(c.load.as_ref()?.reads_per_s),
        better: Better::Higher,
        unit: Unit::PerSecond,
    },
    Figure {
        name: "p50",
        of: |c| Some(c.load.as_ref()?.latency_us.as_ref()?.p50 as f64),
        better: Better::Lower,
        unit: Unit::Micros,
    },
    Figure {
        name: "p99",
        of: |c| Some(c.load.as_ref()?.latency_us.as_ref()?.p99 as f64),
        better: Better::Lower,
        unit: Unit::Micros,
    },
    Figure {
        name: "p99.9",
        of: |c| Some(c.load.as_ref()?.latency_us.as_ref()?.p999 as f64),
        better: Better::Lower,
        unit: Unit::Micros,
    },
    Figure {
        name: "peak RSS",
        of: |c| bytes(c.memory.peak_rss_bytes),
        better: Better::Lower,
        unit: Unit::Bytes,
    },
    Figure {
        name: "steady RSS",
        of: |c| c.memory.rss.steady,
        better: Better::Lower,
        unit: Unit::Bytes,
    },
    Figure {
        name: "peak cgroup",
        of: |c| bytes(c.memory.peak_cgroup_bytes),
        better: Better::Lower,
        unit: Unit::Bytes,
    },
    Figure {
        name: "peak disk",
        of: |c| bytes(c.memory.peak_disk_bytes),
        better: Better::Lower,
        unit: Unit::Bytes,
    },
];

/// Bytes: none measured reads as 0, shown as `-`.
fn bytes(b: u64) -> Option<f64> {
    (b > 0).then_some(b as f64)
}

/// Counts where any increase is a regression, whatever the threshold.
type Count = (&'static str, fn(&CellResult) -> Option<f64>);

const COUNTS: &[Count] = &[
    ("lost writes", |c| Some(c.integrity.lost_writes() as f64)),
    ("corrupted writes", |c| Some(c.integrity.corrupted as f64)),
    ("resurrected deletes", |c| {
        Some(c.integrity.resurrected as f64)
    }),
    ("OOM kills", |c| Some(c.memory.oom_kills as f64)),
    ("load errors", |c| Some(c.load.as_ref()?.errors as f64)),
];

/// A summary.json that was read, and where from.
pub struct Run {
    pub path: PathBuf,
    pub summary: Summary,
}

/// Reads a run: its folder (holding `summary.json`) or the file itself.
pub fn load(path: &Path) -> Result<Run, String> {
    let file = if path.is_dir() {
        path.join("summary.json")
    } else {
        path.to_path_buf()
    };
    let text = std::fs::read_to_string(&file).map_err(|e| {
        format!(
            "{}: {e} (give a run's report folder, reports/SUITE/RUN, or its summary.json)",
            file.display()
        )
    })?;
    let summary: Summary = serde_json::from_str(&text)
        .map_err(|e| format!("{}: not a soak summary: {e}", file.display()))?;
    Ok(Run {
        path: file,
        summary,
    })
}

/// One row of the comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub cell: String,
    pub what: String,
    pub base: String,
    pub head: String,
    /// Relative change, where both sides have a non-zero figure.
    pub change: Option<f64>,
    pub judgement: Judgement,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judgement {
    Regression,
    Improvement,
    Same,
}

/// Everything compared, and the rows that changed beyond the threshold.
pub struct Comparison {
    pub rows: Vec<Row>,
    pub only_base: Vec<String>,
    pub only_head: Vec<String>,
}

impl Comparison {
    pub fn regressions(&self) -> usize {
        self.count(Judgement::Regression)
    }

    fn count(&self, j: Judgement) -> usize {
        self.rows.iter().filter(|r| r.judgement == j).count()
    }
}

fn show(v: f64, unit: Unit) -> String {
    match unit {
        Unit::PerSecond => format!("{v:.0}"),
        Unit::Micros if v >= 1000.0 => format!("{:.2} ms", v / 1000.0),
        Unit::Micros => format!("{v:.0} µs"),
        Unit::Bytes => Bytes(v as u64).to_string(),
        Unit::Count => format!("{v:.0}"),
    }
}

/// Compares every cell both runs have. `threshold` is the relative change
/// (0.1 = 10%) beyond which a figure counts as a regression or an
/// improvement; counts (lost writes, OOM kills...) regress on any increase.
pub fn compare(base: &Summary, head: &Summary, threshold: f64) -> Comparison {
    let mut rows = vec![];
    let (bg, hg) = (groups(base), groups(head));
    for (id, hs) in &hg {
        let Some((_, bs)) = bg.iter().find(|(b, _)| b == id) else {
            continue;
        };
        match (bs.as_slice(), hs.as_slice()) {
            ([b], [h]) => compare_cell(b, h, threshold, &mut rows),
            _ => compare_repeats(id, bs, hs, &mut rows),
        }
    }
    let only = |a: &[(String, Vec<&CellResult>)], b: &[(String, Vec<&CellResult>)]| {
        a.iter()
            .filter(|(id, _)| !b.iter().any(|(o, _)| o == id))
            .map(|(id, _)| id.clone())
            .collect::<Vec<String>>()
    };
    Comparison {
        rows,
        only_base: only(&bg, &hg),
        only_head: only(&hg, &bg),
    }
}

/// A run's cells by the cell they run: one each, or a cell's repeats
/// (`repeat_of`) together.
fn groups(s: &Summary) -> Vec<(String, Vec<&CellResult>)> {
    let mut out: Vec<(String, Vec<&CellResult>)> = vec![];
    for c in &s.cells {
        let id = c.repeat_of.clone().unwrap_or_else(|| c.id.clone());
        match out.iter_mut().find(|(g, _)| *g == id) {
            Some((_, runs)) => runs.push(c),
            None => out.push((id, vec![c])),
        }
    }
    out
}

/// A cell that ran more than once on a side: each figure's median and
/// range; it moved only where the two ranges do not overlap (the runs'
/// own spread, not a fixed percentage). Counts and verdicts: the worst run.
fn compare_repeats(id: &str, bs: &[&CellResult], hs: &[&CellResult], rows: &mut Vec<Row>) {
    use crate::analysis::stats::Spread;
    let row = |what: &str, base: String, head: String, change, judgement| Row {
        cell: id.to_string(),
        what: what.to_string(),
        base,
        head,
        change,
        judgement,
    };
    let worst = |cs: &[&CellResult]| Verdict::worst(cs.iter().map(|c| c.verdict));
    let (vb, vh) = (worst(bs), worst(hs));
    rows.push(row(
        "verdict",
        vb.to_string(),
        vh.to_string(),
        None,
        judge_verdicts(vb, vh),
    ));
    for (name, of) in COUNTS {
        let max = |cs: &[&CellResult]| cs.iter().filter_map(|c| of(c)).reduce(f64::max);
        let (x, y) = (max(bs), max(hs));
        if let Some((base, head, judgement)) = count_row(x, y) {
            rows.push(row(name, base, head, None, judgement));
        }
    }
    for f in FIGURES {
        let spread = |cs: &[&CellResult]| {
            Spread::of(&cs.iter().filter_map(|c| (f.of)(c)).collect::<Vec<_>>())
        };
        let (x, y) = (spread(bs), spread(hs));
        if x.is_none() && y.is_none() {
            continue;
        }
        let change = match (x, y) {
            (Some(x), Some(y)) if x.median > 0.0 => Some((y.median - x.median) / x.median),
            _ => None,
        };
        let judgement = match (x, y) {
            (Some(x), Some(y)) if !x.overlaps(&y) => {
                if (y.median > x.median) == (f.better == Better::Lower) {
                    Judgement::Regression
                } else {
                    Judgement::Improvement
                }
            }
            _ => Judgement::Same,
        };
        let s = |v: Option<Spread>, n: usize| {
            v.map_or("-".into(), |v| {
                format!(
                    "{} ({}–{}, {n} runs)",
                    show(v.median, f.unit),
                    show(v.min, f.unit),
                    show(v.max, f.unit),
                )
            })
        };
        rows.push(row(
            f.name,
            s(x, bs.len()),
            s(y, hs.len()),
            change,
            judgement,
        ));
    }
}

/// A count on both sides (any increase regresses), shown; `None` when
/// neither side has it.
fn count_row(x: Option<f64>, y: Option<f64>) -> Option<(String, String, Judgement)> {
    if x.is_none() && y.is_none() {
        return None;
    }
    let judgement = match (x, y) {
        (Some(x), Some(y)) if y > x => Judgement::Regression,
        (Some(x), Some(y)) if y < x => Judgement::Improvement,
        _ => Judgement::Same,
    };
    let s = |v: Option<f64>| v.map_or("-".into(), |v| show(v, Unit::Count));
    Some((s(x), s(y), judgement))
}

fn judge_verdicts(b: Verdict, h: Verdict) -> Judgement {
    match h.cmp(&b) {
        std::cmp::Ordering::Greater => Judgement::Regression,
        std::cmp::Ordering::Less => Judgement::Improvement,
        std::cmp::Ordering::Equal => Judgement::Same,
    }
}

fn compare_cell(b: &CellResult, h: &CellResult, threshold: f64, rows: &mut Vec<Row>) {
    let row = |what: &str, base: String, head: String, change, judgement| Row {
        cell: h.id.clone(),
        what: what.to_string(),
        base,
        head,
        change,
        judgement,
    };
    rows.push(row(
        "verdict",
        b.verdict.to_string(),
        h.verdict.to_string(),
        None,
        judge_verdicts(b.verdict, h.verdict),
    ));
    for (name, of) in COUNTS {
        let (x, y) = (of(b), of(h));
        if let Some((base, head, judgement)) = count_row(x, y) {
            rows.push(row(name, base, head, None, judgement));
        }
    }
    for f in FIGURES {
        let (x, y) = ((f.of)(b), (f.of)(h));
        if x.is_none() && y.is_none() {
            continue;
        }
        let change = match (x, y) {
            (Some(x), Some(y)) if x > 0.0 => Some((y - x) / x),
            _ => None,
        };
        let judgement = match change {
            Some(c) if c.abs() > threshold => {
                if (c > 0.0) == (f.better == Better::Lower) {
                    Judgement::Regression
                } else {
                    Judgement::Improvement
                }
            }
            _ => Judgement::Same,
        };
        let s = |v: Option<f64>| v.map_or("-".into(), |v| show(v, f.unit));
        rows.push(row(f.name, s(x), s(y), change, judgement));
    }
    // Checks by name: one that passed and now fails is a regression even
    // where no figure above moved (a user's own check, an exec's regex).
    for hc in &h.checks {
        let Some(bc) = b.checks.iter().find(|c| c.name == hc.name) else {
            continue;
        };
        let judgement = judge_verdicts(bc.verdict, hc.verdict);
        if judgement != Judgement::Same {
            rows.push(row(
                &format!("check {}", hc.name),
                bc.verdict.to_string(),
                hc.verdict.to_string(),
                None,
                judgement,
            ));
        }
    }
}

/// The comparison as GitHub-flavoured markdown: regressions first, then
/// improvements, then every figure in a folded table.
pub fn markdown(base: &Run, head: &Run, cmp: &Comparison, threshold: f64) -> String {
    let field = |r: &Run, k: &str| {
        let s = &r.summary;
        match k {
            "suite" => s.suite.clone(),
            "run_id" => s.run_id.clone(),
            "started_at" => s.started_at.clone(),
            _ => s.soak_version.clone(),
        }
    };
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# soak compare: {} — {} regression{}, {} improvement{}\n",
        field(head, "suite"),
        cmp.regressions(),
        if cmp.regressions() == 1 { "" } else { "s" },
        cmp.count(Judgement::Improvement),
        if cmp.count(Judgement::Improvement) == 1 {
            ""
        } else {
            "s"
        },
    );
    for (label, r) in [("Base", base), ("Head", head)] {
        let _ = writeln!(
            md,
            "- {label}: run `{}` of `{}`, started {}, soak {} ({})",
            field(r, "run_id"),
            field(r, "suite"),
            field(r, "started_at"),
            field(r, "soak_version"),
            r.path.display()
        );
    }
    let _ = writeln!(
        md,
        "\nFigures count as changed beyond ±{:.0}%; lost, corrupted and resurrected writes, OOM kills and load errors on any increase; verdicts and checks when they get worse.\n",
        threshold * 100.0
    );
    if field(base, "suite") != field(head, "suite") {
        let _ = writeln!(
            md,
            "**Note:** the runs are of different suites (`{}` and `{}`); cells are matched by id.\n",
            field(base, "suite"),
            field(head, "suite")
        );
    }
    for (title, j) in [
        ("Regressions", Judgement::Regression),
        ("Improvements", Judgement::Improvement),
    ] {
        let rows: Vec<&Row> = cmp.rows.iter().filter(|r| r.judgement == j).collect();
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(md, "## {title}\n");
        table(&mut md, &rows);
    }
    if cmp.rows.iter().all(|r| r.judgement == Judgement::Same) {
        let _ = writeln!(md, "Nothing changed beyond the threshold.\n");
    }
    for (which, ids) in [("base", &cmp.only_base), ("head", &cmp.only_head)] {
        if !ids.is_empty() {
            let shown: Vec<String> = ids.iter().map(|i| format!("`{i}`")).collect();
            let _ = writeln!(md, "Cells only in the {which}: {}.\n", shown.join(", "));
        }
    }
    let _ = writeln!(md, "<details><summary>Every figure</summary>\n");
    table(&mut md, &cmp.rows.iter().collect::<Vec<_>>());
    let _ = writeln!(md, "</details>");
    md
}

fn table(md: &mut String, rows: &[&Row]) {
    let _ = writeln!(
        md,
        "| cell | what | base | head | change | |\n|---|---|---:|---:|---:|---|"
    );
    for r in rows {
        let change = r
            .change
            .map(|c| format!("{:+.1}%", c * 100.0))
            .unwrap_or_else(|| "-".into());
        let mark = match r.judgement {
            Judgement::Regression => "❌ worse",
            Judgement::Improvement => "✅ better",
            Judgement::Same => "",
        };
        let _ = writeln!(
            md,
            "| `{}` | {} | {} | {} | {change} | {mark} |",
            r.cell, r.what, r.base, r.head
        );
    }
    let _ = writeln!(md);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(lost: u64, p99: u64, rss: u64, verdict: &str) -> Summary {
        serde_json::from_value(json!({"suite": "s", "verdict": verdict, "cells": [{
            "id": "a", "verdict": verdict,
            "integrity": {"lost": lost, "corrupted": 0},
            "memory": {"peak_rss_bytes": rss, "oom_kills": 0},
            "load": {"ops_per_s": 1000.0, "errors": 0, "latency_us": {"p99": p99}},
            "checks": [{"name": "lost_writes", "verdict": verdict}]
        }]}))
        .expect("an old, sparse summary still loads")
    }

    fn judged(c: &Comparison, what: &str) -> Judgement {
        c.rows.iter().find(|r| r.what == what).unwrap().judgement
    }

    /// Three runs a side: a figure moves only where the ranges part.
    fn repeated(rss: [u64; 3], p99: [u64; 3]) -> Summary {
        let cells: Vec<serde_json::Value> = (0..3)
            .map(|i| {
                json!({
                    "id": format!("a#{}", i + 1), "repeat_of": "a", "verdict": "pass",
                    "memory": {"peak_rss_bytes": rss[i]},
                    "load": {"ops_per_s": 1000.0, "latency_us": {"p99": p99[i]}}
                })
            })
            .collect();
        serde_json::from_value(json!({"suite": "s", "verdict": "pass", "cells": cells})).unwrap()
    }

    #[test]
    fn repeats_are_compared_by_their_spread_not_a_fixed_share() {
        let base = repeated([100, 110, 120], [1000, 1500, 2000]);
        // Peak RSS 40% up beyond both ranges: a regression even with a
        // threshold of 100%; p99 60% up but inside base's range: noise.
        let head = repeated([150, 160, 170], [1500, 1600, 1700]);
        let c = compare(&base, &head, 1.0);
        assert_eq!(judged(&c, "peak RSS"), Judgement::Regression);
        assert_eq!(judged(&c, "p99"), Judgement::Same);
        let rss = c.rows.iter().find(|r| r.what == "peak RSS").unwrap();
        assert_eq!(rss.cell, "a");
        assert!(rss.base.contains("3 runs"), "{rss:?}");
        assert!(c.only_base.is_empty() && c.only_head.is_empty());
    }

    #[test]
    fn a_lost_write_regresses_whatever_the_threshold() {
        let c = compare(&run(0, 1000, 100, "pass"), &run(1, 1000, 100, "fail"), 10.0);
        assert_eq!(judged(&c, "lost writes"), Judgement::Regression);
        assert_eq!(judged(&c, "verdict"), Judgement::Regression);
        assert_eq!(judged(&c, "check lost_writes"), Judgement::Regression);
        assert_eq!(c.regressions(), 3);
    }

    #[test]
    fn figures_move_only_beyond_the_threshold_and_each_in_its_direction() {
        // p99 +30% is worse; RSS -30% is better; ops/s unchanged.
        let c = compare(&run(0, 1000, 100, "pass"), &run(0, 1300, 70, "pass"), 0.1);
        assert_eq!(judged(&c, "p99"), Judgement::Regression);
        assert_eq!(judged(&c, "peak RSS"), Judgement::Improvement);
        assert_eq!(judged(&c, "ops/s"), Judgement::Same);
        // Within the threshold: the same.
        let c = compare(&run(0, 1000, 100, "pass"), &run(0, 1050, 95, "pass"), 0.1);
        assert_eq!(c.regressions(), 0);
        assert!(c.rows.iter().all(|r| r.judgement == Judgement::Same));
    }

    #[test]
    fn cells_are_matched_by_id_and_the_unmatched_named() {
        let mut head = run(0, 1000, 100, "pass");
        head.cells[0].id = "b".into();
        let c = compare(&run(0, 1000, 100, "pass"), &head, 0.1);
        assert!(c.rows.is_empty());
        assert_eq!(
            (c.only_base, c.only_head),
            (vec!["a".into()], vec!["b".into()])
        );
    }
}
