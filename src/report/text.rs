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
