//! `shrink.md`: the original schedule, each trial of the search, the
//! schedule it ended with and the finding that schedule reproduces.

use std::fmt::Write;

use super::shrink::{Options, Outcome};
use super::Recorded;
use crate::cell::timeline::Step;
use crate::units::human_duration;

fn secs(s: f64) -> String {
    format!("{s:.2} s")
}

/// The report, in markdown like the run's.
pub fn render(rec: &Recorded, opts: &Options, out: &Outcome, shrunk: Option<&str>) -> String {
    let mut md = String::new();
    header(&mut md, rec, opts, out);
    original(&mut md, rec, out);
    search(&mut md, out);
    result(&mut md, rec, out, shrunk);
    md
}

fn header(md: &mut String, rec: &Recorded, opts: &Options, out: &Outcome) {
    let t = &rec.timeline;
    let h = &t.header;
    let _ = writeln!(md, "# soak shrink: cell `{}`\n", h.cell);
    let _ = writeln!(
        md,
        "- Run: `{}` (suite `{}`, seed {}, `--duration-scale {}`)",
        rec.run_dir.display(),
        h.suite_file,
        h.seed,
        h.scale
    );
    let _ = writeln!(
        md,
        "- Reproducing: check `{}` failing ({})",
        out.check,
        rec.result
            .checks
            .iter()
            .find(|c| c.name == out.check)
            .map(|c| format!("{} against {}", c.value, c.limit))
            .unwrap_or_default()
    );
    let _ = writeln!(
        md,
        "- Judged: a schedule fails when the check fails in at least one of {} tries (each a real run of the node)",
        opts.tries
    );
    if let Some(o) = opts.over.describe() {
        let _ = writeln!(md, "- Against {o}");
    }
    let _ = writeln!(
        md,
        "- Search: {} trials in {}{}",
        out.trials.len(),
        human_duration(out.took),
        out.cut_short
            .as_deref()
            .map(|w| format!(", cut short: {w}"))
            .unwrap_or_default()
    );
}

/// Each action the chaos phases drew.
fn original(md: &mut String, rec: &Recorded, out: &Outcome) {
    let t = &rec.timeline;
    let _ = writeln!(
        md,
        "\n## The original schedule: {} chaos actions\n",
        out.actions
    );
    let _ = writeln!(
        md,
        "| # | chaos phase at | action at | ops then | action | took |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|");
    let mut i = 0;
    for step in &t.steps {
        if let Step::Chaos(c) = step {
            for a in &c.actions {
                let _ = writeln!(
                    md,
                    "| {i} | {} | +{} | {} | {} | {} |",
                    secs(c.at_s),
                    secs(a.at_s),
                    a.ops,
                    a.action,
                    secs(a.took_s)
                );
                i += 1;
            }
        }
    }
}

/// Each trial.
fn search(md: &mut String, out: &Outcome) {
    let _ = writeln!(md, "\n## The search\n");
    let _ = writeln!(
        md,
        "| trial | step | actions kept | waits | result | tries failed | took |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|");
    for tr in &out.trials {
        let kept: Vec<String> = tr.schedule.keep.iter().map(|k| k.to_string()).collect();
        let kept = if kept.len() > 12 {
            format!("{} ({})", kept.len(), kept[..12].join(" ") + " ...")
        } else {
            format!("{} ({})", kept.len(), kept.join(" "))
        };
        let _ = writeln!(
            md,
            "| {} | {} | {kept} | x{} | {} | {}/{} | {} |",
            tr.no,
            tr.step,
            tr.schedule.waits,
            if tr.failed() { "fails" } else { "passes" },
            tr.fails,
            tr.tries,
            secs(tr.secs)
        );
    }
}

/// The schedule found and what it reproduces, or why there is none.
fn result(md: &mut String, rec: &Recorded, out: &Outcome, shrunk: Option<&str>) {
    if let (Some(_), None) = (&out.best, shrunk) {
        let (f, n) = out.confirmed.unwrap_or_default();
        let _ = writeln!(
            md,
            "\n## Not kept\n\nThe smallest schedule the search found failed {f} of {n} runs after it: a race it won once. Shrink again with more `--tries`."
        );
        return;
    }
    match (&out.best, shrunk) {
        (Some(best), Some(yaml)) => {
            let last = out
                .trials
                .iter()
                .rev()
                .find(|tr| tr.schedule == *best && tr.failed());
            let _ = writeln!(
                md,
                "\n## The shrunk schedule: {} of {} actions, waits x{}\n",
                best.keep.len(),
                out.actions,
                best.waits
            );
            let actions = rec.timeline.actions();
            let kept: Vec<String> = best
                .keep
                .iter()
                .filter_map(|&i| {
                    let a = actions.get(i)?;
                    Some(format!("{i} ({} at +{})", a.action, secs(a.at_s)))
                })
                .collect();
            let _ = writeln!(
                md,
                "Actions kept: {}.\n",
                if kept.is_empty() {
                    "none (the suite's own phases fail)".to_string()
                } else {
                    kept.join(", ")
                }
            );
            let _ = writeln!(md, "`shrunk.yaml`, a suite that needs nothing else:\n");
            let _ = writeln!(md, "```yaml\n{}```", yaml);
            let _ = writeln!(md, "\n## What it reproduces\n");
            if let Some((f, n)) = out.confirmed {
                let _ = writeln!(
                    md,
                    "- Run {n} more times after the search: failed {f} of {n} ({:.0}%).",
                    100.0 * f as f64 / n as f64
                );
            }
            if let Some(tr) = last {
                let _ = writeln!(
                    md,
                    "- Failed in {} of {} tries (trial {}).",
                    tr.fails, tr.tries, tr.no
                );
                if let Some(f) = &tr.finding {
                    let _ = writeln!(md, "- {f}");
                }
                if let Some(d) = &tr.dir {
                    let _ = writeln!(md, "- Its report: `{}`", d.join("report.md").display());
                }
            }
        }
        _ => {
            let _ = writeln!(
                md,
                "\n## Not reproduced\n\nThe recorded schedule did not fail `{}` again in {} tries{}: nothing was shrunk. A failure that needs a race may need more `--tries`.",
                out.check,
                out.trials.first().map_or(0, |t| t.tries),
                out.cut_short
                    .as_deref()
                    .map(|w| format!(" ({w})"))
                    .unwrap_or_default()
            );
        }
    }
}
