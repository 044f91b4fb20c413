//! The phase engine: runs a cell's phases against its node, watches for
//! deaths soak did not cause (OOM kills, crashes) and restarts the node after
//! them as a supervisor would, and records what happened.

pub mod schedule;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use nix::sys::signal::Signal;

use serde::Serialize;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::driver::process::{describe, Death, ProcessNode};
use crate::driver::DriverError;
use crate::report::{PhaseRecord, Restart};
use crate::suite::{template, Action, ChaosSpec, ExecSpec, Phase};
use crate::telemetry::Target;
use crate::verify::{self, Integrity};
use crate::workload::Engine;

/// The name of the version the node starts as (`node:` in the suite).
pub const BASE_VERSION: &str = "node";

/// Restarts after unexpected deaths allowed in one cell before it errors.
const MAX_UNEXPECTED_RESTARTS: usize = 50;

/// One line of `events.jsonl`.
#[derive(Debug, Serialize)]
struct Event<'a> {
    t: f64,
    cell: &'a str,
    kind: &'a str,
    detail: String,
}

/// The event stream of a cell: `events.jsonl` and the terminal.
pub struct Events {
    file: std::fs::File,
    cell: String,
    origin: Instant,
    pub quiet: bool,
}

impl Events {
    pub fn create(path: &Path, cell: &str, origin: Instant) -> std::io::Result<Events> {
        Ok(Events {
            file: std::fs::File::create(path)?,
            cell: cell.to_string(),
            origin,
            quiet: false,
        })
    }

    pub fn t(&self) -> f64 {
        self.origin.elapsed().as_secs_f64()
    }

    pub fn emit(&mut self, kind: &str, detail: impl Into<String>) {
        let e = Event {
            t: self.t(),
            cell: &self.cell,
            kind,
            detail: detail.into(),
        };
        if let Ok(line) = serde_json::to_string(&e) {
            let _ = writeln!(self.file, "{line}");
            let _ = self.file.flush();
        }
        if !self.quiet {
            eprintln!("[{:>7.1}s] {}: {} {}", e.t, self.cell, kind, e.detail);
        }
    }
}

/// A restart's reason as a reader says it.
fn restart_cause(reason: &str) -> &str {
    match reason {
        "kill" => "the planned kill",
        "stop" => "the planned stop",
        "restart" => "a planned restart",
        "chaos" => "a chaos action",
        "oom" => "an OOM kill",
        "crash" => "a crash",
        other => other,
    }
}

/// Why a cell stopped early.
#[derive(Debug, thiserror::Error)]
pub enum CellError {
    #[error(transparent)]
    Driver(#[from] DriverError),
    #[error(transparent)]
    Verify(#[from] verify::VerifyError),
    #[error("interrupted")]
    Interrupted,
    #[error("the node died {0} times without soak causing it; giving up")]
    CrashLoop(usize),
    #[error("{0}")]
    Setup(String),
}

/// What the phases need besides the node: the cell's folder, its template
/// variables, the seed and the duration scale.
#[derive(Debug, Clone)]
pub struct Context {
    pub dir: PathBuf,
    pub vars: BTreeMap<String, String>,
    pub run_id: String,
    pub seed: u64,
    pub scale: f64,
    /// Each version's argv and environment, rendered; `node` is the base.
    pub versions: BTreeMap<String, VersionCommand>,
}

/// A version's argv and environment.
pub type VersionCommand = (Vec<String>, Vec<(String, String)>);

/// One `upgrade` or `downgrade`, as it went.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct UpgradeRecord {
    /// "upgrade" or "downgrade".
    pub kind: String,
    pub from: String,
    pub to: String,
    pub at_s: f64,
    /// "verified": the new version started and read back every key;
    /// "refused": it would not start (a downgrade), and `from` runs again.
    pub outcome: String,
    /// Why it was refused: the node's own words, from its log.
    pub reason: Option<String>,
    /// How long the new version took to get ready.
    pub ready_after_ms: Option<u64>,
    /// The read-back after it.
    pub integrity: Option<Integrity>,
    /// The data directory before the swap (the node stopped: checksums
    /// verified) and after it (the new version running: statistics only).
    #[cfg(feature = "node")]
    pub before: Option<crate::verify::offline::Inspection>,
    #[cfg(feature = "node")]
    pub after: Option<crate::verify::offline::Inspection>,
    /// RocksDB options that differ between the two (option, before, after).
    #[serde(default)]
    pub options_changed: Vec<(String, Option<String>, Option<String>)>,
}

/// One `verify: offline`.
#[cfg(feature = "node")]
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct OfflineRecord {
    pub at_s: f64,
    pub inspection: crate::verify::offline::Inspection,
}

/// The outcome of one `exec` phase, for its check.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct ExecResult {
    pub command: String,
    pub expected: i32,
    /// The exit code, or `None` when it timed out or died by a signal.
    pub code: Option<i32>,
    pub log: String,
    /// Seconds it ran.
    #[serde(default)]
    pub took_s: f64,
    /// The figure its `throughput` regex read from the output (ops/s).
    pub throughput: Option<f64>,
    /// The least `throughput` allowed, where the suite set one.
    pub throughput_min: Option<f64>,
    /// Set when a `throughput` regex matched nothing in the output.
    pub unmatched: Option<String>,
}

/// What the phase engine works on, and what it records.
pub struct Cell<'a> {
    pub node: &'a mut ProcessNode,
    pub engine: Option<&'a mut Engine>,
    pub target: Target,
    pub events: &'a mut Events,
    pub verify_target: String,
    pub interrupt: watch::Receiver<bool>,
    pub ctx: Context,
    pub restarts: Vec<Restart>,
    pub integrity: Integrity,
    pub phases: Vec<PhaseRecord>,
    pub execs: Vec<ExecResult>,
    /// Chaos actions as planned and done: (phase seed, offset, action).
    pub chaos: Vec<(u64, schedule::Planned)>,
    pub upgrades: Vec<UpgradeRecord>,
    #[cfg(feature = "node")]
    pub offline: Vec<OfflineRecord>,
    /// The version the node runs (or ran last).
    pub version: String,
    /// Why the node is down, when soak took it down (for the next restart).
    down_reason: Option<(&'static str, f64, String)>,
    /// Read every key back after an unclean restart, before the load
    /// writes again (`workload.readback_after_restart`, default on).
    pub readback_after_restart: bool,
    /// What reads during the load had found when the last restart began.
    reads_mark: Integrity,
    phase_counter: u64,
    /// When the ledger was last saved, and how often to save it.
    saved_at: Instant,
    save_every: Duration,
}

impl<'a> Cell<'a> {
    pub fn new(
        node: &'a mut ProcessNode,
        engine: Option<&'a mut Engine>,
        target: Target,
        events: &'a mut Events,
        verify_target: String,
        interrupt: watch::Receiver<bool>,
        ctx: Context,
    ) -> Cell<'a> {
        Cell {
            node,
            engine,
            target,
            events,
            verify_target,
            interrupt,
            ctx,
            restarts: vec![],
            integrity: Integrity::default(),
            phases: vec![],
            execs: vec![],
            chaos: vec![],
            upgrades: vec![],
            #[cfg(feature = "node")]
            offline: vec![],
            version: BASE_VERSION.into(),
            down_reason: None,
            readback_after_restart: true,
            reads_mark: Integrity::default(),
            phase_counter: 0,
            saved_at: Instant::now(),
            save_every: Duration::from_secs(2),
        }
    }

    fn set_up(&mut self, up: bool) {
        self.target
            .pid
            .store(if up { self.node.pid().unwrap_or(0) } else { 0 }, Relaxed);
        if let Some(e) = self.engine.as_deref() {
            e.set_node_up(up);
        }
    }

    /// Saves the ledger to `ledger.bin` in the cell's folder (off the
    /// runtime's threads). Saved every few seconds, so that `soak verify`
    /// can judge the node's data should soak itself die; at most a
    /// twentieth of the time goes to saving, however large the ledger.
    async fn save_ledger(&mut self, complete: bool) {
        let Some(e) = self.engine.as_deref() else {
            return;
        };
        let ledger = e.ledger.clone();
        let path = self.ctx.dir.join("ledger.bin");
        let began = Instant::now();
        let saved = tokio::task::spawn_blocking(move || ledger.save(&path, complete)).await;
        self.saved_at = Instant::now();
        self.save_every = (began.elapsed() * 20).max(Duration::from_secs(2));
        if let Ok(Err(err)) = saved {
            self.events
                .emit("error", format!("cannot save the ledger: {err}"));
        }
    }

    /// The first start, before the phases.
    pub async fn first_start(&mut self) -> Result<(), CellError> {
        let ready = self.node.start().await?;
        self.set_up(true);
        self.events.emit(
            "ready",
            format!(
                "pid {} after {} ms",
                self.node.pid().unwrap_or(0),
                ready.as_millis()
            ),
        );
        Ok(())
    }

    /// Starts the node again after it went down, and records the restart.
    /// After an unclean death (a kill, a chaos action, an OOM kill, a
    /// crash) the load is held and every key read back before it writes
    /// again, so that each death's losses are counted against it (unless
    /// the suite says `readback_after_restart: false`). A node that dies
    /// under that read-back is restarted and read back again.
    async fn start(&mut self) -> Result<(), CellError> {
        let mut resume = false;
        loop {
            let (reason, at, exit) =
                self.down_reason
                    .take()
                    .unwrap_or(("stop", self.events.t(), "stopped".into()));
            let unclean = matches!(reason, "kill" | "chaos" | "oom" | "crash");
            let read_back = unclean && self.readback_after_restart && self.engine.is_some();
            if read_back && self.engine.as_deref().is_some_and(|e| e.is_running()) {
                resume = true;
                self.pause_load().await;
            }
            // What reads during the load found since the last restart is
            // that restart's.
            self.close_reads_window();
            self.target.segment.fetch_add(1, Relaxed);
            let ready = self.node.start().await?;
            self.set_up(true);
            self.events.emit(
                "ready",
                format!(
                    "pid {} after {} ms (restart after {})",
                    self.node.pid().unwrap_or(0),
                    ready.as_millis(),
                    restart_cause(reason)
                ),
            );
            self.restarts.push(Restart {
                reason: reason.into(),
                at_s: at,
                ready_after_ms: ready.as_millis() as u64,
                exit,
                ..Restart::default()
            });
            if !read_back {
                return Ok(());
            }
            let began = Instant::now();
            match self.read_back_once().await {
                Ok(found) => {
                    let took = began.elapsed().as_secs_f64();
                    let n = self.restarts.len();
                    self.events.emit(
                        "read-back",
                        format!(
                            "restart {n} ({} at {at:.1} s): {}, in {took:.1} s of read-back",
                            restart_cause(reason),
                            found.integrity
                        ),
                    );
                    self.count_read_back("read-back", &format!("restart {n}"), &found);
                    if let Some(r) = self.restarts.last_mut() {
                        r.readback_s = Some(took);
                    }
                    if resume {
                        if let Some(e) = self.engine.as_deref_mut() {
                            e.resume();
                        }
                    }
                    return Ok(());
                }
                Err(e) if self.died_within(Duration::from_secs(2)).await => {
                    self.events.emit(
                        "read-back",
                        format!("the node died during the read-back after its restart ({e}); starting it again"),
                    );
                    self.note_death()?;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// If the node died on its own: records why (for the restart), and
    /// whether it did.
    fn note_death(&mut self) -> Result<bool, CellError> {
        let Some(status) = self.node.exit_status() else {
            return Ok(false);
        };
        self.set_up(false);
        let death = self.node.classify_death();
        let (reason, kind) = match death {
            Death::Oom => ("oom", "oom-killed"),
            Death::Crash => ("crash", "crashed"),
        };
        let at = self.events.t();
        self.events.emit(kind, describe(status));
        let unexpected = self
            .restarts
            .iter()
            .filter(|r| r.reason == "oom" || r.reason == "crash")
            .count();
        if unexpected >= MAX_UNEXPECTED_RESTARTS {
            return Err(CellError::CrashLoop(unexpected));
        }
        self.down_reason = Some((reason, at, describe(status)));
        Ok(true)
    }

    /// If the node died on its own: record why and start it again.
    async fn supervise(&mut self) -> Result<(), CellError> {
        if self.note_death()? {
            self.start().await?;
        }
        Ok(())
    }

    /// Losses the reads during the load found since the last call go to
    /// the newest restart (the death before them), or, before any
    /// restart, to the cell alone.
    fn close_reads_window(&mut self) {
        let Some(engine) = self.engine.as_deref() else {
            return;
        };
        let stats = engine.stats();
        let now = Integrity {
            lost: stats.lost_reads,
            corrupted: stats.corrupted_reads,
            resurrected: stats.resurrected_reads,
            ..Integrity::default()
        };
        let since = Integrity {
            lost: now.lost - self.reads_mark.lost,
            corrupted: now.corrupted - self.reads_mark.corrupted,
            resurrected: now.resurrected - self.reads_mark.resurrected,
            ..Integrity::default()
        };
        self.reads_mark = now;
        let first = engine.take_first_lost();
        if since.lost + since.corrupted + since.resurrected == 0 {
            return;
        }
        let n = self.restarts.len();
        let whose = match self.restarts.last_mut() {
            Some(r) => {
                r.found("reads during load", &since, first.clone());
                format!("restart {n}")
            }
            None => "before any restart".to_string(),
        };
        self.events.emit(
            "lost",
            format!(
                "reads during the load ({whose}): {} lost, {} corrupted, {} resurrected{}",
                since.lost,
                since.corrupted,
                since.resurrected,
                first
                    .map(|f| format!("; first lost {f}"))
                    .unwrap_or_default()
            ),
        );
    }

    /// Whether the node has exited, or does within `d`.
    async fn died_within(&mut self, d: Duration) -> bool {
        let end = Instant::now() + d;
        loop {
            if self.node.exit_status().is_some() {
                return true;
            }
            if Instant::now() >= end {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits `d` while supervising the node; stops early on an interrupt.
    async fn hold(&mut self, d: Duration) -> Result<(), CellError> {
        let end = Instant::now() + d;
        while Instant::now() < end {
            if *self.interrupt.borrow() {
                return Err(CellError::Interrupted);
            }
            self.supervise().await?;
            if self.saved_at.elapsed() >= self.save_every {
                self.save_ledger(false).await;
            }
            let step = (end - Instant::now()).min(Duration::from_millis(100));
            let mut int = self.interrupt.clone();
            tokio::select! {
                _ = tokio::time::sleep(step) => {}
                _ = int.changed() => {}
            }
        }
        self.supervise().await
    }

    async fn pause_load(&mut self) {
        if let Some(e) = self.engine.as_deref_mut() {
            e.pause().await;
        }
    }

    /// `by`: what asked for it, for the restart's reason (`kill`, `chaos`).
    async fn kill(&mut self, sig: Signal, by: &'static str) -> Result<String, CellError> {
        self.supervise().await?;
        let at = self.events.t();
        let status = self.node.kill(sig).await?;
        self.set_up(false);
        self.events
            .emit("killed", format!("{} ({})", sig.as_str(), describe(status)));
        self.down_reason = Some((by, at, format!("{} from soak", sig.as_str())));
        Ok(format!("killed: {}", describe(status)))
    }

    /// `by`: what asked for it, for the restart's reason (`stop`, `chaos`).
    async fn stop(&mut self, by: &'static str) -> Result<String, CellError> {
        self.supervise().await?;
        let at = self.events.t();
        let status = self.node.stop().await?;
        self.set_up(false);
        let how = describe(status);
        self.events.emit("stopped", how.clone());
        self.down_reason = Some((by, at, format!("graceful stop, {how}")));
        Ok(format!("stopped: {how}"))
    }

    /// SIGSTOP for `d`, then SIGCONT, whatever happens in between.
    async fn pause_node(&mut self, d: Duration) -> Result<String, CellError> {
        self.supervise().await?;
        self.node.signal(Signal::SIGSTOP)?;
        self.events.emit(
            "paused",
            format!("SIGSTOP for {}", crate::report::human_duration(d)),
        );
        let held = self.hold(d).await;
        let _ = self.node.signal(Signal::SIGCONT);
        self.events.emit("resumed", "SIGCONT");
        held?;
        Ok("paused and resumed".into())
    }

    async fn verify(&mut self) -> Result<String, CellError> {
        Ok(match self.read_back().await? {
            Some(found) => found.to_string(),
            None => "nothing to verify".into(),
        })
    }

    /// Pauses the load and reads back every key the ledger knows; what was
    /// found is added to the cell's integrity and returned (`None` without
    /// a workload).
    async fn read_back(&mut self) -> Result<Option<Integrity>, CellError> {
        self.pause_load().await;
        self.supervise().await?;
        if self.engine.is_none() {
            return Ok(None);
        }
        self.events
            .emit("verify", "reading back every key the ledger knows");
        let found = loop {
            match self.read_back_once().await {
                Ok(found) => break found,
                // A node that dies under the read-back (an OOM kill while
                // its caches fill) is restarted as during load, and read
                // back again from the start; the restart is counted.
                Err(e) if self.died_within(Duration::from_secs(2)).await => {
                    self.events.emit(
                        "verify",
                        format!("the node died during the read-back ({e}); reading back again after its restart"),
                    );
                    self.supervise().await?;
                }
                Err(e) => return Err(e.into()),
            }
        };
        self.events.emit("verified", found.integrity.to_string());
        self.count_read_back("verify", "verify", &found);
        Ok(Some(found.integrity))
    }

    /// Adds what a read-back found to the cell, says its first lost write,
    /// and puts its losses on the newest restart (the death that took
    /// them; before any restart, the node lost them running). The writes
    /// in doubt a verify finds stay the cell's: a restart's are those its
    /// own read-back found.
    fn count_read_back(&mut self, oracle: &str, whose: &str, found: &verify::ReadBack) {
        self.integrity.add(&found.integrity);
        if let Some(first) = &found.first_lost {
            self.events
                .emit("lost", format!("{whose}: first lost {first}"));
        }
        if let Some(r) = self.restarts.last_mut() {
            let mut i = found.integrity;
            if oracle == "verify" {
                i.in_doubt = 0;
            }
            r.found(oracle, &i, found.first_lost.clone());
        }
    }

    /// One pass over every key the ledger knows, through the node, with
    /// the load paused; a node that dies under it is the caller's to handle.
    async fn read_back_once(&mut self) -> Result<verify::ReadBack, verify::VerifyError> {
        let engine = self.engine.as_deref().expect("a workload to read back");
        let mut last_shown = 0;
        verify::online(
            &self.verify_target,
            &engine.ledger,
            engine.cfg.timeout,
            |done, all| {
                if all > 0 && done < all && done > last_shown {
                    last_shown = done;
                    eprintln!("           verify: {done}/{all} keys");
                }
            },
        )
        .await
    }

    async fn exec(&mut self, e: &ExecSpec) -> Result<String, CellError> {
        let argv = e
            .command
            .iter()
            .map(|a| template::render(a, &self.ctx.vars))
            .collect::<Result<Vec<_>, _>>()
            .map_err(CellError::Setup)?;
        let n = self.execs.len() + 1;
        let log_name = format!("exec-{n}.log");
        let log = std::fs::File::create(self.ctx.dir.join(&log_name))
            .map_err(|e| CellError::Setup(format!("cannot create {log_name}: {e}")))?;
        let out = log
            .try_clone()
            .map_err(|e| CellError::Setup(e.to_string()))?;
        let shown = argv.join(" ");
        self.events.emit("exec", shown.clone());
        let mut cmd = tokio::process::Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .env("SOAK_RUN_ID", &self.ctx.run_id)
            .stdin(std::process::Stdio::null())
            .stdout(out)
            .stderr(log)
            .process_group(0)
            .kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .map_err(|err| CellError::Setup(format!("exec `{}`: {err}", argv[0])))?;
        let began = Instant::now();
        let code = match tokio::time::timeout(e.timeout, child.wait()).await {
            Ok(Ok(st)) => st.code(),
            _ => {
                if let Some(pid) = child.id() {
                    let _ = nix::sys::signal::killpg(
                        nix::unistd::Pid::from_raw(pid as i32),
                        Signal::SIGKILL,
                    );
                }
                let _ = child.wait().await;
                None
            }
        };
        let took_s = began.elapsed().as_secs_f64();
        // The figure, read from what the command wrote (stdout and stderr).
        let (throughput, unmatched) = match &e.throughput {
            Some(t) => {
                let output = std::fs::read(self.ctx.dir.join(&log_name)).unwrap_or_default();
                match t.read(&String::from_utf8_lossy(&output)) {
                    Some(v) => (Some(v), None),
                    None => (None, Some(t.regex.clone())),
                }
            }
            None => (None, None),
        };
        if let Some(v) = throughput {
            self.events.emit("exec-throughput", format!("{v:.1} ops/s"));
        }
        if let Some(re) = &unmatched {
            self.events.emit(
                "exec-throughput",
                format!("the regex `{re}` matched nothing in {log_name}"),
            );
        }
        let text = match code {
            Some(c) if c == e.expect => format!("exit code {c} as expected"),
            Some(c) => format!("exit code {c}, expected {}; see {log_name}", e.expect),
            None => format!(
                "timed out after {} or died by a signal; see {log_name}",
                crate::report::human_duration(e.timeout)
            ),
        };
        let text = match throughput {
            Some(v) => format!("{text}; {v:.0} ops/s"),
            None => text,
        };
        self.events.emit("exec-done", text.clone());
        self.execs.push(ExecResult {
            command: shown,
            expected: e.expect,
            code,
            log: log_name,
            took_s,
            throughput,
            throughput_min: e.throughput.as_ref().and_then(|t| t.min),
            unmatched,
        });
        Ok(text)
    }

    /// The data directory inspected offline (see `verify::offline`), when
    /// it holds a RocksDB database; `running`: statistics only, no
    /// checksum verification under a live node's compactions.
    #[cfg(feature = "node")]
    async fn inspect(&mut self, running: bool) -> Option<crate::verify::offline::Inspection> {
        let dir = self.target.data_dir.clone()?;
        if !dir.join("CURRENT").exists() {
            return None;
        }
        let r = tokio::task::spawn_blocking(move || {
            crate::verify::offline::inspect_with(&dir, None, !running)
        })
        .await
        .ok()?;
        match r {
            Ok(i) => Some(i),
            Err(e) => {
                self.events.emit("inspect", e);
                None
            }
        }
    }

    /// `verify: offline`: the node is stopped; its data directory is read
    /// with soak's RocksDB and judged against the ledger.
    #[cfg(feature = "node")]
    async fn verify_offline(&mut self) -> Result<String, CellError> {
        self.pause_load().await;
        let dir = self
            .target
            .data_dir
            .clone()
            .ok_or_else(|| CellError::Setup("no data directory".into()))?;
        let ledger = self.engine.as_deref().map(|e| e.ledger.clone());
        self.events
            .emit("verify", "offline: reading the data directory with RocksDB");
        let at_s = self.events.t();
        let inspection = tokio::task::spawn_blocking(move || {
            crate::verify::offline::inspect(&dir, ledger.as_deref())
        })
        .await
        .map_err(|e| CellError::Setup(e.to_string()))?
        .map_err(CellError::Setup)?;
        let mut found = inspection.integrity.unwrap_or_default();
        if let Some(c) = &inspection.corruption {
            self.events.emit("corruption", c.clone());
            found.corrupted += 1;
        }
        self.integrity.add(&found);
        let compression: Vec<String> = inspection
            .compression
            .iter()
            .map(|(c, g)| format!("{c} {} in {} files", crate::units::Bytes(g.bytes), g.files))
            .collect();
        let text = format!(
            "{} as expected, {} lost, {} corrupted, {} in doubt; {}; SSTs {}",
            found.verified,
            found.lost,
            found.corrupted,
            found.in_doubt,
            inspection
                .corruption
                .as_deref()
                .unwrap_or("checksums verified"),
            if compression.is_empty() {
                "none".to_string()
            } else {
                compression.join(", ")
            }
        );
        self.events.emit("verified", text.clone());
        self.offline.push(OfflineRecord { at_s, inspection });
        Ok(text)
    }

    /// Points the node at a version's argv and environment, and rewrites
    /// `node.json` so that `soak verify` starts this version.
    fn use_version(&mut self, name: &str) -> Result<(), CellError> {
        let (argv, env) = self
            .ctx
            .versions
            .get(name)
            .cloned()
            .ok_or_else(|| CellError::Setup(format!("no version `{name}`")))?;
        self.node.spec.argv = argv;
        self.node.spec.env = env;
        self.version = name.to_string();
        let path = self.ctx.dir.join("node.json");
        if let Ok(mut saved) = crate::verify::saved::SavedNode::read(&path) {
            saved.argv = self.node.spec.argv.clone();
            saved.env = self.node.spec.env.clone();
            let _ = saved.write(&path);
        }
        Ok(())
    }

    /// `upgrade` / `downgrade`: the load paused, a graceful stop, the swap,
    /// a start, and a read-back through the new version. A downgrade the
    /// old version refuses (it exits or never gets ready) is recorded with
    /// its reason and rolled forward again; a refused upgrade is an error.
    async fn swap_version(&mut self, to: &str, kind: &'static str) -> Result<String, CellError> {
        self.pause_load().await;
        self.supervise().await?;
        let from = self.version.clone();
        let at = self.events.t();
        if self.node.is_running() {
            let status = self.node.stop().await?;
            self.set_up(false);
            self.events.emit(
                "stopped",
                format!("for the {kind} to {to}, {}", describe(status)),
            );
        }
        self.use_version(to)?;
        self.events.emit(kind, format!("{from} -> {to}"));
        self.target.segment.fetch_add(1, Relaxed);
        let mut record = UpgradeRecord {
            kind: kind.into(),
            from: from.clone(),
            to: to.to_string(),
            at_s: at,
            outcome: "verified".into(),
            reason: None,
            ready_after_ms: None,
            integrity: None,
            #[cfg(feature = "node")]
            before: self.inspect(false).await,
            #[cfg(feature = "node")]
            after: None,
            options_changed: vec![],
        };
        match self.node.start().await {
            Ok(ready) => {
                self.set_up(true);
                record.ready_after_ms = Some(ready.as_millis() as u64);
                self.restarts.push(Restart {
                    reason: kind.into(),
                    at_s: at,
                    ready_after_ms: ready.as_millis() as u64,
                    exit: format!("{kind} from {from}"),
                    ..Restart::default()
                });
                self.events.emit(
                    "ready",
                    format!(
                        "pid {} after {} ms ({to})",
                        self.node.pid().unwrap_or(0),
                        ready.as_millis()
                    ),
                );
            }
            Err(e) if kind == "downgrade" => {
                let reason = e.to_string();
                self.events
                    .emit("refused", format!("{to} would not start: {reason}"));
                record.outcome = "refused".into();
                record.reason = Some(reason);
                self.use_version(&from)?;
                let ready = self.node.start().await?;
                self.set_up(true);
                self.restarts.push(Restart {
                    reason: kind.into(),
                    at_s: at,
                    ready_after_ms: ready.as_millis() as u64,
                    exit: format!("{to} refused; {from} started again"),
                    ..Restart::default()
                });
            }
            Err(e) => return Err(e.into()),
        }
        let read = self.read_back().await;
        record.integrity = read.as_ref().ok().copied().flatten();
        let text = read.map(|found| found.map(|f| f.to_string()).unwrap_or_default());
        #[cfg(feature = "node")]
        {
            record.after = self.inspect(true).await;
            if let (Some(b), Some(a)) = (&record.before, &record.after) {
                record.options_changed =
                    crate::verify::offline::options_diff(&b.options, &a.options)
                        .into_iter()
                        .filter(|(k, _, _)| !k.starts_with("Version.options_file_version"))
                        .collect();
            }
        }
        let outcome = match record.outcome.as_str() {
            "refused" => format!(
                "{to} refused to start ({}); {from} runs again; {}",
                record.reason.as_deref().unwrap_or(""),
                text.as_deref().unwrap_or("")
            ),
            _ => format!("{from} -> {to}; {}", text.as_deref().unwrap_or("")),
        };
        self.upgrades.push(record);
        text?;
        Ok(outcome)
    }

    async fn chaos(&mut self, c: &ChaosSpec) -> Result<String, CellError> {
        let seed = c
            .seed
            .unwrap_or_else(|| crate::workload::ledger::mix64(self.ctx.seed ^ self.phase_counter));
        let plan = schedule::plan(c, seed, self.ctx.scale);
        self.events.emit(
            "chaos",
            format!("seed {seed}: {} actions planned", plan.len()),
        );
        if let Some(e) = self.engine.as_deref_mut() {
            e.resume();
        }
        let start = Instant::now();
        for p in &plan {
            let now = start.elapsed();
            if p.at > now {
                self.hold(p.at - now).await?;
            }
            self.events.emit(
                "chaos-action",
                format!("{:?} at +{:.3}s", p.action, p.at.as_secs_f64()),
            );
            self.chaos.push((seed, *p));
            match p.action {
                Action::Kill => {
                    self.kill(c.signal.0, "chaos").await?;
                    self.start().await?;
                }
                Action::Pause => {
                    self.pause_node(c.pause.mul_f64(self.ctx.scale)).await?;
                }
                Action::Restart => {
                    self.stop("chaos").await?;
                    self.start().await?;
                }
            }
        }
        let during = c.during.mul_f64(self.ctx.scale);
        let now = start.elapsed();
        if during > now {
            self.hold(during - now).await?;
        }
        Ok(format!("seed {seed}, {} actions", plan.len()))
    }

    pub async fn run_phase(&mut self, phase: &Phase) -> Result<String, CellError> {
        let scale = self.ctx.scale;
        self.phase_counter += 1;
        match phase {
            Phase::Load => {
                self.supervise().await?;
                let Some(e) = self.engine.as_deref_mut() else {
                    return Ok("no workload".into());
                };
                e.pause().await;
                let (keys, took) = e.fill().await;
                let rate = keys as f64 / took.as_secs_f64().max(1e-9);
                let text = format!(
                    "{keys} keys written in {:.1} s ({rate:.0} keys/s)",
                    took.as_secs_f64()
                );
                self.events.emit("loaded", text.clone());
                Ok(text)
            }
            Phase::Run(d) => {
                if let Some(e) = self.engine.as_deref_mut() {
                    e.resume();
                }
                self.hold(d.mul_f64(scale)).await?;
                Ok("load applied".into())
            }
            Phase::Wait(d) => {
                self.pause_load().await;
                self.hold(d.mul_f64(scale)).await?;
                Ok("waited".into())
            }
            Phase::Kill(sig) => self.kill(sig.0, "kill").await,
            Phase::Start => {
                self.start().await?;
                Ok(format!(
                    "ready after {} ms",
                    self.restarts.last().map(|r| r.ready_after_ms).unwrap_or(0)
                ))
            }
            Phase::Stop => {
                self.pause_load().await;
                self.stop("stop").await
            }
            Phase::Restart => {
                let stopped = self.stop("restart").await?;
                self.start().await?;
                Ok(format!(
                    "{stopped}; ready after {} ms",
                    self.restarts.last().map(|r| r.ready_after_ms).unwrap_or(0)
                ))
            }
            Phase::Pause(d) => self.pause_node(d.mul_f64(scale)).await,
            Phase::Exec(e) => self.exec(e).await,
            Phase::Limit(size) => {
                let Some(cg) = &self.node.cgroup else {
                    return Err(CellError::Setup(
                        "`limit` needs the node's cgroup, and it has none".into(),
                    ));
                };
                cg.set_memory_limit(size.0)
                    .map_err(|e| CellError::Setup(e.to_string()))?;
                // What the kernel holds now, read back from its file.
                let file = match cg.version {
                    crate::driver::cgroup::Version::V1 => "memory.limit_in_bytes",
                    crate::driver::cgroup::Version::V2 => "memory.max",
                };
                let now = cg.memory_limit();
                if now != Some(size.0) {
                    return Err(CellError::Setup(format!(
                        "the memory limit was set to {} bytes, and {file} reads {now:?}",
                        size.0
                    )));
                }
                let text = format!(
                    "memory limit {} ({file} read back: {})",
                    crate::units::Bytes(size.0),
                    size.0
                );
                self.events.emit("limit", text.clone());
                Ok(text)
            }
            Phase::Verify => self.verify().await,
            #[cfg(feature = "node")]
            Phase::VerifyOffline => self.verify_offline().await,
            #[cfg(not(feature = "node"))]
            Phase::VerifyOffline => Err(CellError::Setup(
                "`verify: offline` needs soak built with its `node` feature (RocksDB)".into(),
            )),
            Phase::Repeat { times, phases } => {
                for i in 0..*times {
                    self.events.emit("repeat", format!("{}/{times}", i + 1));
                    Box::pin(self.run_phases(phases)).await?;
                }
                Ok(format!("{times} times"))
            }
            Phase::Chaos(c) => self.chaos(c).await,
            Phase::Upgrade(v) => self.swap_version(v, "upgrade").await,
            Phase::Downgrade(v) => self.swap_version(v, "downgrade").await,
        }
    }

    /// Runs every phase, recording each; an error ends the cell.
    pub async fn run_phases(&mut self, phases: &[Phase]) -> Result<(), CellError> {
        // Each phase's load is what the totals grew by from the end of the
        // phase before: nothing counted between two phases goes missing.
        let mut before = self.engine.as_deref().map(|e| e.stats());
        for p in phases {
            let start = self.events.t();
            self.events.emit("phase", p.to_string());
            let outcome = self.run_phase(p).await;
            let after = self.engine.as_deref().map(|e| e.stats());
            let load = match (&before, &after) {
                (Some(b), Some(a)) => {
                    let d = a.since(b);
                    (d.ops_ok() + d.errors + d.fill_sets > 0)
                        .then(|| crate::report::LoadSummary::of(&d))
                }
                _ => None,
            };
            before = after;
            let text = match &outcome {
                Ok(t) => t.clone(),
                Err(e) => format!("error: {e}"),
            };
            self.phases.push(PhaseRecord {
                phase: p.to_string(),
                start_s: start,
                end_s: self.events.t(),
                outcome: text,
                load,
                disk_bytes: self
                    .target
                    .data_dir
                    .as_deref()
                    .map(crate::telemetry::disk_usage),
            });
            self.save_ledger(false).await;
            outcome?;
        }
        Ok(())
    }

    /// After the phases: load off, the node stopped gracefully if it runs.
    pub async fn finish(&mut self) {
        self.pause_load().await;
        self.close_reads_window();
        self.save_ledger(true).await;
        if self.node.is_running() {
            if let Ok(status) = self.node.stop().await {
                self.events
                    .emit("stopped", format!("end of phases, {}", describe(status)));
            }
        }
        self.set_up(false);
    }
}
