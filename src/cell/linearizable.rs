//! The `linearizable` check: a cell's recorded history judged by the
//! checker within the check's time, each violation told with the
//! operation that could not be linearized, the smallest window around it
//! and the faults in force while it ran.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::history::check::{self, Budget, Options, Verdict as Found};
use crate::history::History;
use crate::model::{ActiveFault, CheckResult, HistoryRecord, HistoryViolation, Verdict, WindowOp};
use crate::suite::checks::LinearizableCheck;
use crate::suite::Severity;

/// Violations told in full (the others are counted).
const TOLD: usize = 5;

/// The check's result and the record for the summary.
pub struct Judged {
    pub record: HistoryRecord,
    pub result: CheckResult,
}

fn secs(t: u64) -> f64 {
    if t == u64::MAX {
        f64::INFINITY
    } else {
        t as f64 / 1e9
    }
}

/// Judges the history at `path` (`rel`: its name in the run's folder);
/// `faults` names the faults in force between two times (seconds).
pub fn judge(
    path: &Path,
    rel: &str,
    c: &LinearizableCheck,
    faults: &dyn Fn(f64, f64) -> Vec<ActiveFault>,
) -> Judged {
    let began = Instant::now();
    let mut record = HistoryRecord {
        file: rel.to_string(),
        ..HistoryRecord::default()
    };
    let h =
        match crate::history::record::read(path, |k| crate::oracle::Ledger::key_name(k as usize)) {
            Ok((h, _)) => h,
            Err(e) => {
                record.verdict = "unknown".into();
                record.unknown = Some(format!("the history could not be read: {e}"));
                return Judged {
                    result: result(
                        c,
                        Found::Unknown,
                        Value::from("unknown"),
                        record.unknown.clone(),
                    ),
                    record,
                };
            }
        };
    let opts = Options {
        budget: Budget {
            deadline: Some(began + c.timeout.0),
            ..Budget::default()
        },
        ..Options::default()
    };
    let r = check::check(&h, &opts);
    record.operations = h.ops.len() as u64;
    record.keys = r.keys as u64;
    record.clients = h.clients() as u64;
    record.violating_keys = r.violations.len() as u64;
    record.unchecked_keys = r.unchecked as u64;
    record.violations = r
        .violations
        .iter()
        .take(TOLD)
        .map(|v| violation(&h, v, faults))
        .collect();
    record.verdict = match r.verdict {
        Found::Linearizable => "linearizable",
        Found::NotLinearizable => "not_linearizable",
        Found::Unknown => "unknown",
    }
    .into();
    if r.verdict == Found::Unknown {
        record.unknown = r
            .unknown
            .first()
            .map(|(k, why)| format!("key {}: {why}", h.keys.name(*k)));
    }
    record.seconds = began.elapsed().as_secs_f64();
    let detail = detail(&record, &r);
    Judged {
        result: result(c, r.verdict, Value::from(record.verdict.clone()), detail),
        record,
    }
}

/// A violation as the summary keeps it, with the faults in force.
fn violation(
    h: &History,
    v: &check::Violation,
    faults: &dyn Fn(f64, f64) -> Vec<ActiveFault>,
) -> HistoryViolation {
    let o = &h.ops[v.culprit];
    let (a, b) = (secs(o.invoke), secs(o.complete).min(1e12));
    // The faults are those around the writes of the values the window
    // saw, too: a write an old primary acknowledged during a partition
    // shows as lost only when it is read back, long after.
    let since = since(h, v).min(a);
    HistoryViolation {
        key: h.keys.name(v.key).to_string(),
        operation: h.describe(o),
        client: o.client,
        invoke_s: a,
        complete_s: b,
        window: v
            .window
            .iter()
            .rev()
            .take(12)
            .rev()
            .map(|&i| {
                let o = &h.ops[i];
                WindowOp {
                    client: o.client,
                    operation: h.describe(o),
                    invoke_s: secs(o.invoke),
                    complete_s: (o.complete != u64::MAX).then(|| secs(o.complete)),
                    culprit: i == v.culprit,
                }
            })
            .collect(),
        faults: faults(since, b),
    }
}

/// When the earliest write of a value the window's operations read or
/// wrote was invoked, in seconds.
fn since(h: &History, v: &check::Violation) -> f64 {
    use crate::history::{Outcome, F};
    let key = h.ops[v.culprit].key;
    let values: std::collections::HashSet<u32> = v
        .window
        .iter()
        .filter_map(|&i| match (h.ops[i].f, h.ops[i].outcome) {
            (F::Read, Outcome::Ok(x)) | (F::Write(x), _) => Some(x),
            _ => None,
        })
        .collect();
    h.ops
        .iter()
        .filter(|o| o.key == key && matches!(o.f, F::Write(x) if values.contains(&x)))
        .map(|o| secs(o.invoke))
        .fold(f64::INFINITY, f64::min)
}

/// The check's detail: the first violation and its faults, why the
/// search could not tell, or what was checked.
fn detail(record: &HistoryRecord, r: &check::Report) -> Option<String> {
    match record.violations.first() {
        Some(v) => Some(format!(
            "{} of {} keys not linearizable; key {}: {} by client {} at {:.3} s{}",
            r.violations.len(),
            r.keys,
            v.key,
            v.operation,
            v.client,
            v.invoke_s,
            if v.faults.is_empty() {
                " (no fault in force, or lifted in the 10 s before)".to_string()
            } else {
                let f: Vec<String> = v
                    .faults
                    .iter()
                    .map(|f| {
                        if f.to_s.is_some_and(|t| t < v.invoke_s) {
                            format!(
                                "{}, lifted {:.1} s before",
                                f.what,
                                v.invoke_s - f.to_s.unwrap_or(0.0)
                            )
                        } else {
                            f.what.clone()
                        }
                    })
                    .collect();
                format!(", during {}", f.join(", "))
            }
        )),
        None if r.verdict == Found::Unknown => record.unknown.clone(),
        None => Some(format!(
            "{} operations on {} keys, checked in {:.1} s",
            record.operations, r.keys, record.seconds
        )),
    }
}

fn result(
    c: &LinearizableCheck,
    found: Found,
    value: Value,
    detail: Option<String>,
) -> CheckResult {
    let failed = match c.severity {
        Severity::Fail => Verdict::Fail,
        Severity::Warn => Verdict::Warn,
    };
    let verdict = match (found, c.expect) {
        // A search that could not tell never passes.
        (Found::Unknown, _) => Verdict::Warn,
        (Found::Linearizable, true) | (Found::NotLinearizable, false) => Verdict::Pass,
        _ => failed,
    };
    CheckResult {
        name: "linearizable".into(),
        verdict,
        value,
        limit: Value::from(if c.expect {
            "linearizable"
        } else {
            "not linearizable"
        }),
        unit: String::new(),
        detail,
    }
}

/// The time a check may take at most, for the run's plan.
pub fn timeout(c: &LinearizableCheck) -> Duration {
    c.timeout.0
}
