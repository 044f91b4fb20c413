//! `soak report history DIR...`: the nightly runs of a suite in time
//! order, and where each cell's figures changed (a step, or a creep that
//! no single night's check sees). The method is
//! [`crate::analysis::changes`].

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::analysis::changes::{changes, Change};
use crate::model::{CellResult, Summary};
use crate::units::Bytes;

/// A figure followed over the runs.
struct Figure {
    name: &'static str,
    of: fn(&CellResult) -> Option<f64>,
    /// Whether a rise is the bad way.
    rise_is_worse: bool,
    text: fn(f64) -> String,
    /// The charts' unit, and what a value is multiplied by for it.
    unit: &'static str,
    scale: f64,
}

fn bytes(v: f64) -> String {
    Bytes(v.max(0.0) as u64).to_string()
}

fn mib_h(v: f64) -> String {
    format!("{:+.1} MiB/h", v / 1048576.0)
}

fn ms(us: f64) -> String {
    format!("{:.2} ms", us / 1000.0)
}

fn per_s(v: f64) -> String {
    format!("{v:.0}/s")
}

const FIGURES: &[Figure] = &[
    Figure {
        name: "peak RSS",
        of: |c| (c.memory.peak_rss_bytes > 0).then_some(c.memory.peak_rss_bytes as f64),
        rise_is_worse: true,
        text: bytes,
        unit: "MiB",
        scale: 1.0 / 1048576.0,
    },
    Figure {
        name: "steady RSS",
        of: |c| c.memory.rss.steady,
        rise_is_worse: true,
        text: bytes,
        unit: "MiB",
        scale: 1.0 / 1048576.0,
    },
    Figure {
        name: "RSS growth",
        of: |c| c.memory.rss.slope_per_hour,
        rise_is_worse: true,
        text: mib_h,
        unit: "MiB/h",
        scale: 1.0 / 1048576.0,
    },
    Figure {
        name: "ops/s",
        of: |c| Some(c.load.as_ref()?.ops_per_s),
        rise_is_worse: false,
        text: per_s,
        unit: "ops/s",
        scale: 1.0,
    },
    Figure {
        name: "p99",
        of: |c| Some(c.load.as_ref()?.latency_us.as_ref()?.p99 as f64),
        rise_is_worse: true,
        text: ms,
        unit: "ms",
        scale: 1.0 / 1000.0,
    },
    Figure {
        name: "peak disk",
        of: |c| (c.memory.peak_disk_bytes > 0).then_some(c.memory.peak_disk_bytes as f64),
        rise_is_worse: true,
        text: bytes,
        unit: "MiB",
        scale: 1.0 / 1048576.0,
    },
];

/// One run of the history.
pub struct Run {
    pub dir: PathBuf,
    pub summary: Summary,
}

/// The runs under `paths`, oldest first (by `started_at`): each path is a
/// run's report folder (it holds summary.json) or a folder of them, as a
/// suite's `reports/SUITE` is, searched two levels down.
pub fn load(paths: &[PathBuf]) -> Result<Vec<Run>, String> {
    let mut dirs = vec![];
    for p in paths {
        let found = runs_under(p, 2);
        if found.is_empty() {
            return Err(format!(
                "{}: no run's summary.json in it or in its folders (give report folders, reports/SUITE/RUN, or the folder that holds them, reports/SUITE)",
                p.display()
            ));
        }
        dirs.extend(found);
    }
    dirs.sort();
    dirs.dedup();
    let mut runs = dirs
        .into_iter()
        .map(|dir| {
            let summary = super::merge::load(&dir)?;
            Ok(Run { dir, summary })
        })
        .collect::<Result<Vec<Run>, String>>()?;
    runs.sort_by(|a, b| {
        started(&a.summary)
            .cmp(&started(&b.summary))
            .then(a.dir.cmp(&b.dir))
    });
    Ok(runs)
}

fn started(s: &Summary) -> Option<chrono::DateTime<chrono::FixedOffset>> {
    chrono::DateTime::parse_from_rfc3339(&s.started_at).ok()
}

fn runs_under(p: &Path, depth: u32) -> Vec<PathBuf> {
    if p.join("summary.json").is_file() {
        return vec![p.to_path_buf()];
    }
    if depth == 0 {
        return vec![];
    }
    let Ok(entries) = std::fs::read_dir(p) else {
        return vec![];
    };
    let mut out: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .flat_map(|e| runs_under(&e.path(), depth - 1))
        .collect();
    out.sort();
    out
}

/// A change found in one cell's figure.
pub struct Found {
    pub cell: String,
    pub figure: &'static str,
    pub change: Change,
    /// The run it began at, its index in the history.
    pub run: usize,
    pub worse: bool,
    /// Whether it is the last change of its series: the newest runs are
    /// at the level it brought.
    pub latest: bool,
    text: fn(f64) -> String,
}

/// One cell's figure over the runs: (place in the history, value).
pub struct Series {
    pub cell: String,
    pub figure: &'static str,
    pub points: Vec<(usize, f64)>,
}

/// Every change in every cell's figures, cells in the order they first
/// appear.
pub fn find(runs: &[Run]) -> (Vec<Found>, Vec<Series>) {
    let mut cells: Vec<String> = vec![];
    for r in runs {
        for c in &r.summary.cells {
            if !cells.contains(&c.id) {
                cells.push(c.id.clone());
            }
        }
    }
    let mut found = vec![];
    let mut series = vec![];
    for cell in &cells {
        for f in FIGURES {
            // The runs that have the figure, with their place in the history.
            let points: Vec<(usize, f64)> = runs
                .iter()
                .enumerate()
                .filter_map(|(i, r)| {
                    let c = r.summary.cells.iter().find(|c| &c.id == cell)?;
                    Some((i, (f.of)(c)?)).filter(|(_, v)| v.is_finite())
                })
                .collect();
            if points.len() < 6 {
                continue;
            }
            let values: Vec<f64> = points.iter().map(|p| p.1).collect();
            let all = changes(&values);
            let last = all.len().saturating_sub(1);
            for (i, change) in all.into_iter().enumerate() {
                let rise = match &change {
                    Change::Step { before, after, .. } => after > before,
                    Change::Creep { per_run, .. } => *per_run > 0.0,
                };
                found.push(Found {
                    cell: cell.clone(),
                    figure: f.name,
                    run: points[change.at()].0,
                    worse: rise == f.rise_is_worse,
                    latest: i == last,
                    change,
                    text: f.text,
                });
            }
            series.push(Series {
                cell: cell.clone(),
                figure: f.name,
                points,
            });
        }
    }
    (found, series)
}

/// Whether the newest runs hold a regression: a change for the worse that
/// no later change of its series undid.
pub fn regressed(found: &[Found]) -> bool {
    found.iter().any(|f| f.worse && f.latest)
}

/// The history as markdown: the runs, then every change found.
pub fn markdown(runs: &[Run], found: &[Found], series: &[Series]) -> String {
    let mut out = String::new();
    let suite = runs.first().map_or("", |r| r.summary.suite.as_str());
    let _ = writeln!(out, "# History of {suite}: {} runs\n", runs.len());
    if let (Some(a), Some(b)) = (runs.first(), runs.last()) {
        let _ = writeln!(
            out,
            "From {} (run 1, `{}`) to {} (run {}, `{}`).\n",
            a.summary.started_at,
            a.summary.run_id,
            b.summary.started_at,
            runs.len(),
            b.summary.run_id
        );
    }
    let worse = found.iter().filter(|f| f.worse).count();
    let held = found.iter().filter(|f| f.worse && f.latest).count();
    let _ = writeln!(
        out,
        "**{}** in {} series (cell and figure) of at least 6 runs: {worse} for the worse, {held} of them still so in the newest runs.\n",
        match found.len() {
            0 => "No change".to_string(),
            1 => "1 change".to_string(),
            n => format!("{n} changes"),
        },
        series.len()
    );
    if !found.is_empty() {
        let _ = writeln!(
            out,
            "| cell | figure | change | from run | before | after | p |\n|---|---|---|---|---:|---:|---:|"
        );
        for f in found {
            let run = &runs[f.run].summary;
            let (what, before, after, p) = match &f.change {
                Change::Step {
                    before, after, p, ..
                } => (
                    format!("step {:+.1}%", (after / before - 1.0) * 100.0),
                    (f.text)(*before),
                    (f.text)(*after),
                    *p,
                ),
                Change::Creep {
                    from, per_run, p, ..
                } => (
                    format!("creep {:+.1}% a run", per_run / from * 100.0),
                    (f.text)(*from),
                    format!("{} a run", (f.text)(*per_run)),
                    *p,
                ),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {what}{} | {} (`{}`, {}) | {before} | {after} | {p:.1e} |",
                super::text::table_code(&f.cell),
                f.figure,
                if f.worse { " (worse)" } else { "" },
                f.run + 1,
                run.run_id,
                run.started_at
            );
        }
        out.push('\n');
    }
    charts(&mut out, found, series, runs.len());
    let _ = writeln!(
        out,
        "Method: steps by E-Divisive means and a t-test as Hunter does (Fleming et al., ICPE 2023; Matteson & James, JASA 2014); creeps by a two-phase regression (Hinkley, Biometrika 1969) and the Mann-Kendall test; each at p < {}.",
        crate::analysis::changes::MAX_P
    );
    out
}

/// A chart per figure, a line per cell (the cells with a change first, as
/// many as there are colours), x the run's place in the history.
fn charts(out: &mut String, found: &[Found], series: &[Series], runs: usize) {
    use super::mermaid::{chart_text, PALETTE};
    for f in FIGURES {
        let mut lines: Vec<&Series> = series.iter().filter(|s| s.figure == f.name).collect();
        if lines.is_empty() {
            continue;
        }
        let changed = |s: &Series| {
            found
                .iter()
                .any(|c| c.cell == s.cell && c.figure == s.figure)
        };
        lines.sort_by_key(|s| !changed(s));
        let left = lines.len().saturating_sub(PALETTE.len());
        lines.truncate(PALETTE.len());
        let top = lines
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1 * f.scale))
            .fold(0.0, f64::max);
        let bottom = lines
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1 * f.scale))
            .fold(0.0, f64::min);
        let (unit, scale) = (f.unit, f.scale);
        let legend: Vec<String> = lines
            .iter()
            .zip(PALETTE)
            .map(|(s, (_, colour))| format!("{} {colour}", s.cell))
            .collect();
        let palette: Vec<&str> = PALETTE.iter().take(lines.len()).map(|p| p.0).collect();
        let _ = writeln!(
            out,
            "**{}** by run{}: {}.\n\n```mermaid\n%%{{init: {{\"themeVariables\": {{\"xyChart\": {{\"plotColorPalette\": \"{}\"}}}}}}}}%%\nxychart-beta\n    title \"{} ({})\"",
            f.name,
            if left > 0 { format!(" ({left} more cells in the table's data)") } else { String::new() },
            legend.join(", "),
            palette.join(", "),
            chart_text(f.name),
            chart_text(unit)
        );
        let xs: Vec<String> = (1..=runs).map(|i| i.to_string()).collect();
        let _ = writeln!(out, "    x-axis [{}]", xs.join(", "));
        let _ = writeln!(
            out,
            "    y-axis \"{}\" {:.1} --> {:.1}",
            chart_text(unit),
            bottom * 1.1,
            (top * 1.1).max(1.0)
        );
        for s in lines {
            // A run without the figure holds the value before it.
            let mut last = s.points.first().map_or(0.0, |p| p.1);
            let vals: Vec<String> = (0..runs)
                .map(|i| {
                    if let Some(p) = s.points.iter().find(|p| p.0 == i) {
                        last = p.1;
                    }
                    format!("{:.2}", last * scale)
                })
                .collect();
            let _ = writeln!(out, "    line [{}]", vals.join(", "));
        }
        let _ = writeln!(out, "```\n");
    }
}
