//! A cell's event stream: what happened, typed, in the order it happened.
//! The phase runner emits [`Event`]s onto the cell's bus (bus.rs);
//! the bus stamps them and fans them out to its sinks: the console,
//! `events.jsonl` (one JSON object per line, tagged by `kind`), the live
//! progress, and the recorder that folds them into the cell's records.
//! Nothing in the phase runner prints.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use crate::model::{
    Action, Cause, ExecResult, Hole, Integrity, LoadSummary, LostWrite, OfflineRecord, Oracle,
    UpgradeRecord, Verdict,
};
use crate::units::human_duration;

/// One thing that happened to a cell.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Event {
    /// The cell begins: its seed, allocator and cgroup.
    Cell {
        seed: u64,
        allocator: Option<String>,
        cgroup: Option<String>,
    },
    /// The allocator was proven loaded in the node's process.
    Allocator {
        text: String,
    },
    /// The node is ready: after its first start (`cause` none), or a
    /// restart after `cause`, which took it down at `down_at_s`.
    Ready {
        pid: i32,
        after_ms: u64,
        cause: Option<Cause>,
        down_at_s: f64,
        /// How the incarnation before ended.
        exit: String,
        version: Option<String>,
    },
    /// The node died without soak causing it.
    Died {
        cause: Cause,
        exit: String,
    },
    /// soak killed the node.
    Killed {
        signal: String,
        exit: String,
    },
    /// A power cut: the node was killed, and the bytes no fsync had made
    /// durable dropped from its data directory.
    PowerCut {
        dropped: u64,
        torn: bool,
    },
    /// A network or disk fault was put in force (a phase or a chaos
    /// action): a recovery under way is cut short by it.
    FaultSet {
        fault: String,
    },
    /// A fault was lifted (space back, I/O errors or delays cleared, the
    /// network cleared): the node's recovery is measured from here.
    FaultLifted {
        fault: String,
    },
    /// soak acted on one member of a cluster (killed, stopped, started,
    /// paused or resumed it).
    Member {
        member: usize,
        action: String,
        text: String,
    },
    /// soak stopped the node gracefully.
    Stopped {
        why: String,
        exit: String,
    },
    Paused {
        for_s: f64,
    },
    Resumed,
    PhaseStarted {
        phase: String,
    },
    PhaseFinished {
        phase: String,
        /// Its place in the suite's `phases` list, from 1 (none inside a
        /// `repeat`).
        #[serde(skip_serializing_if = "Option::is_none")]
        place: Option<u32>,
        start_s: f64,
        outcome: String,
        ok: bool,
        load: Option<LoadSummary>,
        disk_bytes: Option<u64>,
    },
    /// A `load` phase wrote every key.
    Loaded {
        keys: u64,
        took_s: f64,
    },
    Repeat {
        round: u64,
        times: u64,
    },
    ChaosPlanned {
        seed: u64,
        actions: usize,
    },
    ChaosAction {
        seed: u64,
        at_s: f64,
        action: Action,
        /// A network or disk fault's own words, with its hold.
        fault: Option<String>,
    },
    ExecStarted {
        command: String,
    },
    ExecFinished {
        text: String,
        result: ExecResult,
    },
    Swap {
        swap: String,
        from: String,
        to: String,
    },
    Refused {
        to: String,
        reason: String,
    },
    Swapped {
        record: Box<UpgradeRecord>,
    },
    Limit {
        bytes: u64,
        text: String,
    },
    VerifyStarted {
        what: String,
    },
    /// Keys read back so far (shown live, not written to events.jsonl).
    VerifyProgress {
        done: usize,
        all: usize,
    },
    /// A read-back found this: after restart `restart` (the read-back after
    /// an unclean restart), or for a `verify` phase (`restart` none).
    ReadBack {
        oracle: Oracle,
        restart: Option<usize>,
        integrity: Integrity,
        first_lost: Option<LostWrite>,
        /// After a power cut: connections whose losses were not a tail.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        holes: Vec<Hole>,
        took_s: f64,
    },
    /// Reads during the load found these since the last restart began.
    ReadsFound {
        integrity: Integrity,
        first_lost: Option<LostWrite>,
    },
    /// A read-back failed because the node died under it; it is restarted
    /// and read back again.
    ReadBackRetry {
        error: String,
    },
    /// The node did not start again after going down at `down_at_s`: the
    /// cell's phases end here, and its `unrecovered` check fails.
    NotRecovered {
        after: Cause,
        down_at_s: f64,
        error: String,
    },
    OfflineVerified {
        text: String,
        record: Box<OfflineRecord>,
    },
    Corruption {
        text: String,
    },
    Notice {
        what: String,
        text: String,
    },
    Error {
        text: String,
    },
    Verdict {
        verdict: Verdict,
    },
}

impl Event {
    /// Whether it belongs in `events.jsonl` (progress does not).
    pub fn durable(&self) -> bool {
        !matches!(self, Event::VerifyProgress { .. })
    }

    /// The word a reader sees first.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::Cell { .. } => "cell",
            Event::Allocator { .. } => "allocator",
            Event::Ready { .. } => "ready",
            Event::Died { cause, .. } if *cause == Cause::Oom => "oom-killed",
            Event::Died { .. } => "crashed",
            Event::Killed { .. } => "killed",
            Event::PowerCut { .. } => "power-cut",
            Event::FaultLifted { .. } => "lifted",
            Event::FaultSet { .. } => "fault",
            Event::Stopped { .. } => "stopped",
            Event::Member { .. } => "member",
            Event::Paused { .. } => "paused",
            Event::Resumed => "resumed",
            Event::PhaseStarted { .. } => "phase",
            Event::PhaseFinished { .. } => "phase-done",
            Event::Loaded { .. } => "loaded",
            Event::Repeat { .. } => "repeat",
            Event::ChaosPlanned { .. } => "chaos",
            Event::ChaosAction { .. } => "chaos-action",
            Event::ExecStarted { .. } => "exec",
            Event::ExecFinished { .. } => "exec-done",
            Event::Swap { .. } => "swap",
            Event::Refused { .. } => "refused",
            Event::Swapped { .. } => "swapped",
            Event::Limit { .. } => "limit",
            Event::VerifyStarted { .. } => "verify",
            Event::VerifyProgress { .. } => "verify",
            Event::ReadBack {
                restart: Some(_), ..
            } => "read-back",
            Event::ReadBack { .. } => "verified",
            Event::ReadsFound { .. } => "lost",
            Event::ReadBackRetry { .. } => "read-back",
            Event::NotRecovered { .. } => "not-recovered",
            Event::OfflineVerified { .. } => "verified",
            Event::Corruption { .. } => "corruption",
            Event::Notice { .. } => "notice",
            Event::Error { .. } => "error",
            Event::Verdict { .. } => "verdict",
        }
    }

    /// The rest of the console line.
    pub fn text(&self) -> String {
        if let Some(text) = self.verify_text() {
            return text;
        }
        match self {
            Event::Cell {
                seed,
                allocator,
                cgroup,
            } => {
                let allocator = allocator.as_deref().unwrap_or("as linked");
                format!(
                    "seed {seed}, allocator {allocator}, cgroup {}",
                    cgroup.as_deref().unwrap_or("none")
                )
            }
            Event::Allocator { text }
            | Event::Limit { text, .. }
            | Event::Corruption { text }
            | Event::Error { text }
            | Event::OfflineVerified { text, .. }
            | Event::ExecFinished { text, .. } => text.clone(),
            Event::Notice { what, text } => format!("{what}: {text}"),
            Event::Ready {
                pid,
                after_ms,
                cause,
                version,
                ..
            } => ready_text(*pid, *after_ms, *cause, version.as_deref()),
            Event::Died { exit, .. } => exit.clone(),
            Event::Member {
                member,
                action,
                text,
            } => format!("{action} member {member}: {text}"),
            Event::Killed { signal, exit } => format!("{signal} ({exit})"),
            Event::FaultLifted { fault } => format!("{fault}: recovery measured from here"),
            Event::FaultSet { fault } => fault.clone(),
            Event::PowerCut { dropped, torn } => format!(
                "{} not fsynced dropped from the data directory{}",
                crate::units::Bytes(*dropped),
                if *torn {
                    " (torn: part of each tail kept)"
                } else {
                    ""
                }
            ),
            Event::Stopped { why, exit } if why.is_empty() => exit.clone(),
            Event::Stopped { why, exit } => format!("{why}, {exit}"),
            Event::Paused { for_s } => format!(
                "SIGSTOP for {}",
                human_duration(Duration::from_secs_f64(*for_s))
            ),
            Event::Resumed => "SIGCONT".into(),
            Event::PhaseStarted { phase } => phase.clone(),
            Event::PhaseFinished { phase, outcome, .. } => format!("{phase}: {outcome}"),
            Event::Loaded { keys, took_s } => format!(
                "{keys} keys written in {took_s:.1} s ({:.0} keys/s)",
                *keys as f64 / took_s.max(1e-9)
            ),
            Event::Repeat { round, times } => format!("{round}/{times}"),
            Event::ChaosPlanned { seed, actions } => {
                format!("seed {seed}: {actions} actions planned")
            }
            Event::ChaosAction {
                action,
                at_s,
                fault,
                ..
            } => match fault {
                Some(f) => format!("{f} at +{at_s:.3}s"),
                None => format!("{action:?} at +{at_s:.3}s"),
            },
            Event::ExecStarted { command } => command.clone(),
            Event::Swap { from, to, .. } => format!("{from} -> {to}"),
            Event::Refused { to, reason } => format!("{to} would not start: {reason}"),
            Event::Swapped { record: r } => {
                format!(
                    "{} {} -> {}: {:?}",
                    r.kind.as_str(),
                    r.from,
                    r.to,
                    r.outcome
                )
            }
            Event::VerifyStarted { .. }
            | Event::VerifyProgress { .. }
            | Event::ReadBack { .. }
            | Event::ReadsFound { .. }
            | Event::NotRecovered { .. }
            | Event::ReadBackRetry { .. } => unreachable!("said by verify_text"),
            Event::Verdict { verdict } => verdict.as_str().into(),
        }
    }

    /// The words of the events of read-backs and recoveries.
    fn verify_text(&self) -> Option<String> {
        Some(match self {
            Event::VerifyStarted { what } => what.clone(),
            Event::VerifyProgress { done, all } => format!("{done}/{all} keys"),
            Event::ReadBack {
                restart,
                integrity,
                took_s,
                first_lost,
                holes,
                ..
            } => {
                let found = format!("{}{}", first(first_lost), holes_text(holes));
                match restart {
                    Some(n) => {
                        format!("restart {n}: {integrity}, in {took_s:.1} s of read-back{found}")
                    }
                    None => format!("{integrity}{found}"),
                }
            }
            Event::ReadsFound {
                integrity,
                first_lost,
            } => reads_found_text(integrity, first_lost),
            Event::NotRecovered {
                after,
                down_at_s,
                error,
            } => format!(
                "the node did not start again after {} at {down_at_s:.1} s: {}",
                after.said(),
                error.lines().next().unwrap_or_default()
            ),
            Event::ReadBackRetry { error } => format!(
                "the node died during the read-back ({error}); reading back again after its restart"
            ),
            _ => return None,
        })
    }
}

fn ready_text(pid: i32, after_ms: u64, cause: Option<Cause>, version: Option<&str>) -> String {
    let why = match (cause, version) {
        (Some(Cause::Upgrade | Cause::Downgrade), Some(v)) => format!(" ({v})"),
        (Some(c), _) => format!(" (restart after {})", c.said()),
        (None, _) => String::new(),
    };
    format!("pid {pid} after {after_ms} ms{why}")
}

fn reads_found_text(integrity: &Integrity, first_lost: &Option<LostWrite>) -> String {
    format!(
        "reads during the load: {} lost, {} corrupted, {} resurrected{}{}",
        integrity.lost,
        integrity.corrupted,
        integrity.resurrected,
        if integrity.aborted > 0 {
            format!(", {} aborted (a failed write read back)", integrity.aborted)
        } else {
            String::new()
        },
        first(first_lost)
    )
}

fn holes_text(holes: &[Hole]) -> String {
    holes
        .iter()
        .map(|h| {
            format!(
                "; HOLE in connection {}: {} lost before {} survived (first {})",
                h.connection, h.lost, h.survivor, h.first_lost.key
            )
        })
        .collect()
}

fn first(f: &Option<LostWrite>) -> String {
    f.as_ref()
        .map(|f| format!("; first {} {f}", f.found))
        .unwrap_or_default()
}

/// Where events go besides the recorder.
pub trait Sink: Send {
    /// `t`: seconds since the cell started.
    fn event(&mut self, cell: &str, t: f64, e: &Event);
}

/// `events.jsonl`: `{"t":1.2,"cell":"default","kind":"ready",...}`, each
/// event's fields beside a `detail` with the console's words.
pub struct Jsonl {
    file: std::io::BufWriter<std::fs::File>,
}

impl Jsonl {
    pub fn create(path: &Path) -> std::io::Result<Jsonl> {
        Ok(Jsonl {
            file: std::io::BufWriter::new(std::fs::File::create(path)?),
        })
    }
}

#[derive(Serialize)]
struct Line<'a> {
    t: f64,
    /// Wall-clock time (Unix seconds), to line events up with the node's
    /// own log and other machines' clocks.
    unix_s: f64,
    cell: &'a str,
    #[serde(flatten)]
    event: &'a Event,
    detail: String,
}

impl Sink for Jsonl {
    fn event(&mut self, cell: &str, t: f64, e: &Event) {
        if !e.durable() {
            return;
        }
        let unix_s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        let line = Line {
            t: (t * 1000.0).round() / 1000.0,
            unix_s: (unix_s * 1e6).round() / 1e6,
            cell,
            event: e,
            detail: e.text(),
        };
        if let Ok(text) = serde_json::to_string(&line) {
            let _ = writeln!(self.file, "{text}");
            // Written through at once: a crash of soak keeps what it saw.
            let _ = self.file.flush();
        }
    }
}
