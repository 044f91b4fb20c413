//! The text every exporter writes the same way: verdict badges, figures
//! with their units, and markdown that survives what it quotes (table
//! cells, code spans). `report.md`, the pull request comment, the step
//! summary, the comparison and the history all take them from here.

use super::{Latency, LoadSummary, Summary, Verdict};
use crate::units::Bytes;

pub(crate) fn badge(v: Verdict) -> &'static str {
    match v {
        Verdict::Pass => "✅ pass",
        Verdict::Warn => "⚠️ warn",
        Verdict::Fail => "❌ fail",
        Verdict::Error => "💥 error",
    }
}

/// The run's top line: its verdict, and its warnings when it passed with
/// some (`⚠️ pass, 3 warnings in 3 cells`), never a bare green pass.
pub(crate) fn run_badge(s: &Summary) -> String {
    if s.warned() {
        format!("⚠️ {}", s.headline())
    } else {
        badge(s.verdict).to_string()
    }
}

pub(crate) fn mib_per_h(v: Option<f64>) -> String {
    match v {
        Some(v) => format!("{:+.1} MiB/h", v / (1024.0 * 1024.0)),
        None => "n/a".into(),
    }
}

/// A check's value or limit as the report writes it (also in
/// `summary.json`'s expectations).
pub(crate) fn value_text(v: &serde_json::Value, unit: &str) -> String {
    match (v, unit) {
        (serde_json::Value::Null, _) => "n/a".into(),
        (serde_json::Value::Number(n), "bytes/h") => mib_per_h(n.as_f64()),
        (serde_json::Value::Number(n), "bytes") => {
            Bytes(n.as_f64().unwrap_or(0.0) as u64).to_string()
        }
        (serde_json::Value::String(s), _) => s.clone(),
        (v, _) => v.to_string(),
    }
}

/// A check as measured against its limit, in a line:
/// `oom_kills: 4 (limit >= 1, detail)`.
pub(crate) fn check_text(r: &crate::model::CheckResult) -> String {
    let detail = r
        .detail
        .as_ref()
        .map(|d| format!(", {d}"))
        .unwrap_or_default();
    format!(
        "{}: {} (limit {}{detail})",
        r.name,
        value_text(&r.value, &r.unit),
        value_text(&r.limit, &r.unit)
    )
}

/// One latency figure of a load, in milliseconds, or "n/a".
pub(crate) fn ms(l: &LoadSummary, f: impl Fn(&Latency) -> u64) -> String {
    l.latency_us
        .as_ref()
        .map(|x| format!("{:.2} ms", f(x) as f64 / 1000.0))
        .unwrap_or_else(|| "n/a".into())
}

/// Text from outside (a node's log, an engine) on one line of a table or
/// a paragraph: no line breaks, no column breaks, no HTML.
pub(crate) fn table_text(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
        .replace('|', "\\|")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Text from outside as inline code in a table cell: one line, its pipes
/// escaped (GitHub splits cells on them even in code); `<` stays as it
/// is, since code is never HTML.
pub(crate) fn table_code(s: &str) -> String {
    code_span(&s.replace(['\n', '\r'], " ").replace('|', "\\|"))
}

/// `s` as inline code, whatever backticks it holds.
pub(crate) fn code_span(s: &str) -> String {
    let ticks = "`".repeat(longest_backtick_run(s) + 1);
    format!("{ticks} {s} {ticks}")
}

/// The longest run of backticks in `s`.
pub(crate) fn longest_backtick_run(s: &str) -> usize {
    s.split(|c| c != '`').map(str::len).max().unwrap_or(0)
}

/// `1,204`.
pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The counts a check or an expectation judges beyond the cells table's
/// own columns (lost, corrupted, OOM kills), by check name, with their
/// column's heading: a cell whose power cuts took 8,000 unsynced commits
/// must not read "lost 0" at the top of its report.
const FINDING_COUNTS: &[(&str, &str)] = &[
    ("unsynced_writes", "lost unsynced"),
    ("aborted_reads", "aborted reads"),
    ("oom_errors", "OOM errors"),
    ("out_of_memory", "out of memory"),
    ("unrecovered", "unrecovered"),
    ("unresponsive", "unresponsive"),
    ("crashes", "crashes"),
];

/// A column of the cells table that a finding adds.
pub(crate) struct FindingColumn {
    pub heading: &'static str,
    name: &'static str,
}

impl FindingColumn {
    /// The cell's figure: what its check measured, or where no check
    /// judged it, what the records say (a power cut's unsynced losses,
    /// the node's own OOM errors, a history that is not linearizable).
    pub fn cell(&self, c: &crate::model::CellResult) -> String {
        if let Some(r) = c.checks.iter().find(|r| r.name == self.name) {
            return match self.name {
                "linearizable" => value_text(&r.value, &r.unit),
                _ => r
                    .value
                    .as_u64()
                    .map(|n| n.to_string())
                    .unwrap_or_else(|| value_text(&r.value, &r.unit)),
            };
        }
        match self.name {
            "unsynced_writes" => c.integrity.lost_unsynced.to_string(),
            "aborted_reads" => c.integrity.aborted.to_string(),
            "oom_errors" => c.memory.oom_errors.to_string(),
            _ => "n/a".into(),
        }
    }

    fn found(&self, c: &crate::model::CellResult) -> bool {
        let judged = c.checks.iter().find(|r| r.name == self.name);
        match (self.name, judged) {
            ("linearizable", r) => r.is_some(),
            (_, Some(r)) => r.value.as_u64().is_some_and(|v| v > 0),
            _ => !matches!(self.cell(c).as_str(), "0" | "n/a"),
        }
    }
}

/// The finding columns of a run's cells table: each count that some cell
/// has (above 0), and a history's verdict where a cell checked one.
pub(crate) fn finding_columns(s: &Summary) -> Vec<FindingColumn> {
    std::iter::once(("linearizable", "linearizable"))
        .chain(FINDING_COUNTS.iter().copied())
        .map(|(name, heading)| FindingColumn { heading, name })
        .filter(|col| s.cells.iter().any(|c| col.found(c)))
        .collect()
}

/// A cell's load in the cells tables: operations a second and p99, or
/// "n/a" for a cell without a load.
pub(crate) fn ops_and_p99(c: &crate::model::CellResult) -> (String, String) {
    c.load
        .as_ref()
        .map(|l| (format!("{:.0}", l.ops_per_s), ms(l, |l| l.p99)))
        .unwrap_or(("n/a".into(), "n/a".into()))
}
