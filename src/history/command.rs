//! `soak check-history FILE` and `soak history CELL_DIR`: the checker on
//! any history, and a cell's recorded history in other tools' forms.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::check::{self, Budget, Options, Report, Verdict};
use super::formats::{self, Format};
use super::History;
use crate::exit;

/// Exit code of a search that ran out of its budget.
pub const UNKNOWN: i32 = 3;

#[derive(clap::Args)]
pub struct CheckArgs {
    /// The history: Jepsen's log or EDN (history.edn), Porcupine's JSON
    /// or soak's JSON lines; `-` for standard input.
    pub file: PathBuf,
    /// Give up after this long (the verdict is then unknown, exit 3).
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub timeout: Option<Duration>,
    /// Search steps a key may take before its verdict is unknown.
    #[arg(long, value_name = "N", default_value_t = Budget::default().steps)]
    pub max_steps: u64,
    /// Threads checking keys (default: one a core).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Print the verdict as JSON.
    #[arg(long)]
    pub json: bool,
    /// Check every key, also after one was found not linearizable (by
    /// default the check stops after the round of searches that found
    /// the first).
    #[arg(long)]
    pub all_keys: bool,
    /// The verdict alone: no search for the smallest window around a
    /// violation (the whole key is shown).
    #[arg(long)]
    pub no_window: bool,
}

#[derive(clap::Args)]
pub struct ExportArgs {
    /// A cell's folder (reports/SUITE/RUN/cells/CELL), its
    /// history.bin.gz, or a history in any form check-history reads.
    pub cell: PathBuf,
    /// The form to write.
    #[arg(long, value_enum, default_value = "jsonl")]
    pub format: Format,
    /// Write here instead of standard output.
    #[arg(long, short)]
    pub out: Option<PathBuf>,
}

fn duration(s: &str) -> Result<Duration, String> {
    crate::units::parse_duration(s).map_err(|e| format!("{s:?}: {e}"))
}

/// `soak check-history`: 0 linearizable, 1 not, 2 not a history, 3
/// unknown.
pub fn check_history(a: CheckArgs) -> i32 {
    let text = if a.file.as_os_str() == "-" {
        let mut s = String::new();
        match std::io::Read::read_to_string(&mut std::io::stdin(), &mut s) {
            Ok(_) => s,
            Err(e) => {
                eprintln!("error: standard input: {e}");
                return exit::INVALID;
            }
        }
    } else {
        match read_text(&a.file) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("error: {e}");
                return exit::INVALID;
            }
        }
    };
    let h = match formats::read(&text) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("error: {}:{}: {} (soak check-history reads Jepsen's log and EDN, Porcupine's JSON and soak's JSON lines; `soak history CELL --format` writes them)", a.file.display(), e.line, e.what);
            return exit::INVALID;
        }
    };
    let opts = Options {
        budget: Budget {
            steps: a.max_steps,
            deadline: a.timeout.map(|t| std::time::Instant::now() + t),
            ..Budget::default()
        },
        threads: a.threads,
        windows: !a.no_window,
        all_keys: a.all_keys,
    };
    let r = check::check(&h, &opts);
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json(&h, &r)).expect("serializes")
        );
    } else {
        print!("{}", tell(&h, &r, &a.file.display().to_string()));
    }
    match r.verdict {
        Verdict::Linearizable => exit::PASS,
        Verdict::NotLinearizable => exit::CHECK_FAILED,
        Verdict::Unknown => UNKNOWN,
    }
}

fn read_text(path: &Path) -> Result<String, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    // A recorded history given as it is.
    if bytes.starts_with(&[0x1f, 0x8b]) {
        let (h, _) =
            super::record::read(path, key_name).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut out = Vec::new();
        formats::write_jsonl(&h, &mut out).map_err(|e| e.to_string())?;
        return String::from_utf8(out).map_err(|e| e.to_string());
    }
    String::from_utf8(bytes).map_err(|_| {
        format!(
            "{}: not text (a history is text: Jepsen's log or EDN, JSON)",
            path.display()
        )
    })
}

fn key_name(k: u64) -> String {
    crate::oracle::Ledger::key_name(k as usize)
}

/// A time of the history: seconds for recorded ones, the line for
/// Jepsen's logs (which have none).
fn at(t: u64, timed: bool) -> String {
    if t == u64::MAX {
        "never".into()
    } else if timed {
        format!("{:.3} s", t as f64 / 1e9)
    } else {
        format!("#{t}")
    }
}

/// The verdict in words, with each violation's window.
pub fn tell(h: &History, r: &Report, what: &str) -> String {
    use std::fmt::Write;
    let timed = h
        .ops
        .iter()
        .any(|o| o.complete != u64::MAX && o.complete > 1_000_000);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "soak: {what}: {} operations on {} key{}, {} clients",
        r.ops,
        r.keys,
        if r.keys == 1 { "" } else { "s" },
        h.clients()
    );
    for v in r.violations.iter().take(10) {
        let c = &h.ops[v.culprit];
        let _ = writeln!(
            s,
            "key {:?}: {} by client {} ({} to {}) cannot be linearized",
            h.keys.name(v.key),
            h.describe(c),
            c.client,
            at(c.invoke, timed),
            at(c.complete, timed)
        );
        let _ = writeln!(
            s,
            "  the smallest window that cannot be linearized{}, {} operation{}:",
            if v.from_start {
                " (from the key's start)"
            } else {
                " (from any value)"
            },
            v.window.len(),
            if v.window.len() == 1 { "" } else { "s" }
        );
        let shown = shown_window(&v.window, v.culprit);
        if shown.len() < v.window.len() {
            let _ = writeln!(
                s,
                "    ({} before these not shown)",
                v.window.len() - shown.len()
            );
        }
        for &i in shown {
            let o = &h.ops[i];
            let _ = writeln!(
                s,
                "    client {:<4} {:<28} {} to {}{}",
                o.client,
                h.describe(o),
                at(o.invoke, timed),
                at(o.complete, timed),
                if i == v.culprit {
                    "   <- cannot be linearized"
                } else {
                    ""
                }
            );
        }
    }
    for (k, why) in r.unknown.iter().take(10) {
        let _ = writeln!(s, "key {:?}: unknown: {why}", h.keys.name(*k));
    }
    let verdict = match r.verdict {
        Verdict::Linearizable => "linearizable".to_string(),
        Verdict::NotLinearizable if r.unchecked > 0 => format!(
            "not linearizable ({} of {} keys; {} not checked once it was found: --all-keys checks them)",
            r.violations.len(),
            r.keys,
            r.unchecked
        ),
        Verdict::NotLinearizable => format!("not linearizable ({} of {} keys)", r.violations.len(), r.keys),
        Verdict::Unknown => format!("unknown ({} of {} keys ran out of the search's budget; none is known not to be linearizable)", r.unknown.len(), r.keys),
    };
    let _ = writeln!(
        s,
        "soak: {verdict}; checked in {:.3} s ({} steps, {} operations that constrain nothing left out)",
        r.took.as_secs_f64(),
        r.steps,
        r.dropped
    );
    s
}

/// The last operations of a window, up to 20, the culprit among them.
fn shown_window(window: &[usize], culprit: usize) -> &[usize] {
    let end = window
        .iter()
        .position(|&i| i == culprit)
        .map_or(window.len(), |p| (p + 1).max(window.len().min(p + 4)));
    let start = end.saturating_sub(20);
    &window[start..end]
}

/// The verdict as JSON.
pub fn json(h: &History, r: &Report) -> serde_json::Value {
    let op = |i: usize| {
        let o = &h.ops[i];
        serde_json::json!({
            "index": i,
            "client": o.client,
            "op": h.describe(o),
            "invoke": o.invoke,
            "complete": (o.complete != u64::MAX).then_some(o.complete),
        })
    };
    serde_json::json!({
        "verdict": r.verdict,
        "operations": r.ops,
        "keys": r.keys,
        "dropped": r.dropped,
        "unchecked": r.unchecked,
        "steps": r.steps,
        "seconds": r.took.as_secs_f64(),
        "violations": r.violations.iter().map(|v| serde_json::json!({
            "key": h.keys.name(v.key),
            "culprit": op(v.culprit),
            "from_start": v.from_start,
            "window": v.window.iter().map(|&i| op(i)).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "unknown": r.unknown.iter().map(|(k, why)| serde_json::json!({"key": h.keys.name(*k), "why": why})).collect::<Vec<_>>(),
    })
}

/// `soak history`: a cell's recorded history in another form.
pub fn export(a: ExportArgs) -> i32 {
    let path = if a.cell.is_dir() {
        a.cell.join(FILE)
    } else {
        a.cell.clone()
    };
    // A history in another form, converted.
    if !path.is_dir() && std::fs::read(&path).is_ok_and(|b| !b.starts_with(&[0x1f, 0x8b])) {
        return match read_text(&path).and_then(|t| {
            formats::read(&t).map_err(|e| format!("{}:{}: {}", path.display(), e.line, e.what))
        }) {
            Ok(h) => write_out(&h, &a),
            Err(e) => {
                eprintln!("error: {e}");
                exit::INVALID
            }
        };
    }
    let (h, notes) = match super::record::read(&path, key_name) {
        Ok(x) => x,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("error: {} has no recorded history ({}): give a cell's folder, reports/SUITE/RUN/cells/CELL, of a run whose suite records one (`workload.history`, or a `linearizable` check)", a.cell.display(), FILE);
            return exit::INVALID;
        }
        Err(e) => {
            eprintln!("error: {}: {e}", path.display());
            return exit::INVALID;
        }
    };
    if notes.truncated {
        eprintln!(
            "soak: {} ends inside a chunk (the run died while writing it): {} operations before it",
            path.display(),
            h.ops.len()
        );
    }
    write_out(&h, &a)
}

fn write_out(h: &History, a: &ExportArgs) -> i32 {
    let written = match &a.out {
        Some(p) => std::fs::File::create(p)
            .map(std::io::BufWriter::new)
            .and_then(|mut f| {
                formats::write(h, a.format, &mut f)?;
                std::io::Write::flush(&mut f)
            }),
        None => {
            let stdout = std::io::stdout();
            let mut lock = std::io::BufWriter::new(stdout.lock());
            formats::write(h, a.format, &mut lock).and_then(|_| std::io::Write::flush(&mut lock))
        }
    };
    match written {
        Ok(()) => exit::PASS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => exit::PASS,
        Err(e) => {
            eprintln!("error: {e}");
            exit::ENVIRONMENT
        }
    }
}

/// A cell's recorded history, in its folder.
pub const FILE: &str = "history.bin.gz";
