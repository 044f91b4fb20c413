//! Reports from recorded runs: `soak report DIR` renders a run's report
//! (and `junit.xml`) again from its `summary.json` and samples (after a soak upgrade, or when
//! the report was lost), and `soak report merge DIR...` joins the shards of
//! a suite (`soak run --shard I/N` on several CI runners) into one report.
//!
//! A merged report does not copy the shards' cell folders (they hold the
//! nodes' data directories): its links point into the shards' folders,
//! relative to where the merged report is written, so the artifacts work
//! as long as they are kept side by side.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use super::charts::{self, Charts};
use super::{Summary, Verdict};

/// Why a report could not be made: the inputs (exit 2), or the place to
/// write it (exit 3).
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Environment(String),
}

impl From<String> for ReportError {
    fn from(s: String) -> ReportError {
        ReportError::Invalid(s)
    }
}

/// A run's summary, read from its report folder.
pub fn load(dir: &Path) -> Result<Summary, String> {
    let file = dir.join("summary.json");
    let text = std::fs::read_to_string(&file).map_err(|e| {
        format!(
            "{}: {e} (give a run's report folder: reports/SUITE/RUN)",
            file.display()
        )
    })?;
    serde_json::from_str(&text).map_err(|e| {
        format!(
            "{}: not a summary this soak can render: {e}",
            file.display()
        )
    })
}

/// Renders `report.md` of the run in `dir` again.
pub fn render(dir: &Path) -> Result<Summary, ReportError> {
    let s = load(dir)?;
    super::write_rendered(dir, &s, &charts::of_run(dir, &s))
        .map_err(|e| ReportError::Environment(format!("cannot write in {}: {e}", dir.display())))?;
    Ok(s)
}

/// Writes `report.html` of the run in `dir` (a run of a soak before it had
/// one), and says where.
pub fn html(dir: &Path) -> Result<std::path::PathBuf, ReportError> {
    let s = load(dir)?;
    super::html::write(dir, &s)
        .map_err(|e| ReportError::Environment(format!("cannot write in {}: {e}", dir.display())))
}

/// Joins the runs in `dirs` (shards of one suite) into one report in
/// `out`. Cells keep their order, shard by shard; a cell id in two runs is
/// refused (a shard merged twice, or runs of different matrices).
/// Without `out`, the merged report goes next to the first run's folder,
/// named like a run's (`<UTC time>-<id>`).
/// The runs in `dirs`, each with its summary: one suite's, at least one.
fn load_runs(dirs: &[PathBuf]) -> Result<Vec<(PathBuf, Summary)>, ReportError> {
    let mut runs = vec![];
    for d in dirs {
        let d = d
            .canonicalize()
            .map_err(|e| format!("{}: {e}", d.display()))?;
        let s = load(&d)?;
        runs.push((d, s));
    }
    let Some((_, first)) = runs.first() else {
        return Err(ReportError::Invalid(
            "give the report folders of the runs to merge".into(),
        ));
    };
    if let Some((d, s)) = runs.iter().find(|(_, s)| s.suite != first.suite) {
        return Err(ReportError::Invalid(format!(
            "{}: a run of suite `{}`, not `{}`: merge the shards of one suite",
            d.display(),
            s.suite,
            first.suite
        )));
    }
    Ok(runs)
}

/// `--shard I/N` of a run, as numbers.
fn shard(s: &Summary) -> Option<(u32, u32)> {
    let (i, n) = s.shard.as_deref()?.split_once('/')?;
    Some((i.parse().ok()?, n.parse().ok()?))
}

pub fn merge(dirs: &[PathBuf], out: Option<&Path>) -> Result<(Summary, PathBuf), ReportError> {
    let mut runs = load_runs(dirs)?;
    let first = runs[0].1.clone();
    runs.sort_by_key(|(_, s)| shard(s).map_or(0, |(i, _)| i));

    let run_id = crate::lock::new_run_id();
    let out = match out {
        Some(o) => o.to_path_buf(),
        None => runs[0].0.parent().unwrap_or(Path::new(".")).join(format!(
            "{}-{run_id}",
            chrono::Utc::now().format("%Y%m%dT%H%M%SZ")
        )),
    };
    let env = |e: String| ReportError::Environment(e);
    std::fs::create_dir_all(&out)
        .map_err(|e| env(format!("cannot create {}: {e}", out.display())))?;
    let out = out
        .canonicalize()
        .map_err(|e| env(format!("{}: {e}", out.display())))?;
    let mut merged = first.clone();
    merged.cells.clear();
    merged.shard = None;
    merged.run_id = run_id;
    let mut charts = Charts::new();
    let mut seen: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut per_run = vec![];
    for (dir, s) in &runs {
        let rel = relative(&out, dir);
        let mut cells = vec![];
        for c in &s.cells {
            if let Some(other) = seen.insert(c.id.clone(), dir.clone()) {
                return Err(ReportError::Invalid(format!(
                    "cell `{}` is in {} and in {}: each shard once, please",
                    c.id,
                    other.display(),
                    dir.display()
                )));
            }
            let mut c = c.clone();
            for f in c.files.values_mut() {
                *f = rel.join(&*f).to_string_lossy().into_owned();
            }
            cells.push(c);
        }
        per_run.push(cells.into_iter());
        charts.extend(charts::of_run(dir, s));
        merged.merged.push(format!(
            "{}run `{}` ({})",
            s.shard
                .as_ref()
                .map(|x| format!("shard {x}: "))
                .unwrap_or_default(),
            s.run_id,
            rel.display()
        ));
        merged.started_at = merged.started_at.clone().min(s.started_at.clone());
        merged.duration_s = merged.duration_s.max(s.duration_s);
    }
    // `--shard I/N` deals cell j to shard j % N + 1: dealing the shards'
    // cells back in turn restores the suite's order.
    while merged.cells.len() < seen.len() {
        for cells in per_run.iter_mut() {
            merged.cells.extend(cells.next());
        }
    }
    // Shards of the same split that no run covered.
    if let Some((_, n)) = shard(&first) {
        let have: Vec<u32> = runs
            .iter()
            .filter_map(|(_, s)| shard(s))
            .map(|x| x.0)
            .collect();
        merged.missing_shards = (1..=n)
            .filter(|i| !have.contains(i))
            .map(|i| format!("{i}/{n}"))
            .collect();
    }
    merged.verdict = Verdict::of_run(merged.cells.iter().map(|c| c.verdict));
    if !merged.missing_shards.is_empty() && merged.verdict == Verdict::Pass {
        // A report that is missing cells cannot say the suite passed.
        merged.verdict = Verdict::Error;
    }
    super::write_all(&out, &merged, &charts)
        .map_err(|e| env(format!("cannot write the report in {}: {e}", out.display())))?;
    Ok((merged, out))
}

/// `to` as seen from `from` (both absolute): `../shard-2`.
fn relative(from: &Path, to: &Path) -> PathBuf {
    let (a, b): (Vec<Component>, Vec<Component>) =
        (from.components().collect(), to.components().collect());
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut rel = PathBuf::new();
    for _ in common..a.len() {
        rel.push("..");
    }
    for c in &b[common..] {
        rel.push(c);
    }
    rel
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_of_an_older_soak_with_fewer_fields_renders() {
        let dir = tempfile::tempdir().unwrap();
        let old = r#"{"schema_version": 1, "suite": "s", "description": "",
            "verdict": "pass", "run_id": "abc", "seed": 1, "shard": null,
            "started_at": "2026-11-29T00:00:00Z", "duration_s": 60.0,
            "suite_file": "s.yaml", "soak_version": "0.1.0",
            "cells": [{"id": "default", "verdict": "pass", "error": null,
                "integrity": {"acknowledged": 5, "verified": 5, "lost": 0},
                "memory": {"peak_rss_bytes": 1048576, "oom_kills": 0},
                "load": null, "seed": null, "allocator": null}]}"#;
        std::fs::write(dir.path().join("summary.json"), old).unwrap();
        let s = render(dir.path()).unwrap();
        assert_eq!(s.cells[0].integrity.verified, 5);
        let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
        assert!(md.contains("| `default` | ✅ pass | 5 | 0 |"), "{md}");
        assert!(dir.path().join("junit.xml").exists());
    }

    #[test]
    fn a_path_relative_to_another() {
        let r = |a: &str, b: &str| relative(Path::new(a), Path::new(b));
        assert_eq!(r("/r/s/merged", "/r/s/shard1"), PathBuf::from("../shard1"));
        assert_eq!(r("/r/s", "/r/s/x/y"), PathBuf::from("x/y"));
        assert_eq!(r("/a/b", "/c"), PathBuf::from("../../c"));
    }
}
