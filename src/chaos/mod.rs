//! The phase engine: runs a cell's phases against its node, watches for
//! deaths soak did not cause (OOM kills, crashes) and restarts the node after
//! them as a supervisor would, and records what happened.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::driver::process::{describe, Death, ProcessNode};
use crate::driver::DriverError;
use crate::report::{PhaseRecord, Restart};
use crate::suite::Phase;
use crate::telemetry::Target;
use crate::verify::{self, Integrity};
use crate::workload::Engine;

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
}

/// What the phase engine works on, and what it records.
pub struct Cell<'a> {
    pub node: &'a mut ProcessNode,
    pub engine: Option<&'a mut Engine>,
    pub target: Target,
    pub events: &'a mut Events,
    pub verify_target: String,
    pub interrupt: watch::Receiver<bool>,
    pub restarts: Vec<Restart>,
    pub integrity: Integrity,
    pub phases: Vec<PhaseRecord>,
    /// Why the node is down, when soak took it down (for the next restart).
    down_reason: Option<(&'static str, f64, String)>,
}

impl<'a> Cell<'a> {
    pub fn new(
        node: &'a mut ProcessNode,
        engine: Option<&'a mut Engine>,
        target: Target,
        events: &'a mut Events,
        verify_target: String,
        interrupt: watch::Receiver<bool>,
    ) -> Cell<'a> {
        Cell {
            node,
            engine,
            target,
            events,
            verify_target,
            interrupt,
            restarts: vec![],
            integrity: Integrity::default(),
            phases: vec![],
            down_reason: None,
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

    async fn start(&mut self) -> Result<(), CellError> {
        let (reason, at, exit) =
            self.down_reason
                .take()
                .unwrap_or(("chaos", self.events.t(), "stopped".into()));
        self.target.segment.fetch_add(1, Relaxed);
        let ready = self.node.start().await?;
        self.set_up(true);
        self.events.emit(
            "ready",
            format!(
                "pid {} after {} ms ({reason} restart)",
                self.node.pid().unwrap_or(0),
                ready.as_millis()
            ),
        );
        self.restarts.push(Restart {
            reason,
            at_s: at,
            ready_after_ms: ready.as_millis() as u64,
            exit,
        });
        Ok(())
    }

    /// If the node died on its own: record why and start it again.
    async fn supervise(&mut self) -> Result<(), CellError> {
        let Some(status) = self.node.exit_status() else {
            return Ok(());
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
        self.start().await
    }

    /// Waits `d` while supervising the node; stops early on an interrupt.
    async fn hold(&mut self, d: Duration) -> Result<(), CellError> {
        let end = Instant::now() + d;
        while Instant::now() < end {
            if *self.interrupt.borrow() {
                return Err(CellError::Interrupted);
            }
            self.supervise().await?;
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

    pub async fn run_phase(&mut self, phase: &Phase, scale: f64) -> Result<String, CellError> {
        match phase {
            Phase::Run(d) => {
                if let Some(e) = self.engine.as_deref_mut() {
                    e.resume();
                }
                self.hold(d.mul_f64(scale)).await?;
                Ok("load applied".into())
            }
            Phase::Kill(sig) => {
                self.supervise().await?;
                let at = self.events.t();
                let status = self.node.kill(sig.0).await?;
                self.set_up(false);
                self.events
                    .emit("killed", format!("{} ({})", sig, describe(status)));
                self.down_reason = Some(("chaos", at, format!("{sig} from soak")));
                Ok(format!("killed: {}", describe(status)))
            }
            Phase::Start => {
                self.start().await?;
                Ok(format!(
                    "ready after {} ms",
                    self.restarts.last().map(|r| r.ready_after_ms).unwrap_or(0)
                ))
            }
            Phase::Stop => {
                self.pause_load().await;
                self.supervise().await?;
                let at = self.events.t();
                let status = self.node.stop().await?;
                self.set_up(false);
                let how = describe(status);
                self.events.emit("stopped", how.clone());
                self.down_reason = Some(("chaos", at, format!("graceful stop, {how}")));
                Ok(format!("stopped: {how}"))
            }
            Phase::Verify => {
                self.pause_load().await;
                self.supervise().await?;
                let Some(engine) = self.engine.as_deref() else {
                    return Ok("nothing to verify".into());
                };
                let events = &mut *self.events;
                events.emit("verify", "reading back every key the ledger knows");
                let timeout = engine.cfg.timeout;
                let mut last_shown = 0;
                let found =
                    verify::online(&self.verify_target, &engine.ledger, timeout, |done, all| {
                        if all > 0 && done < all && done > last_shown {
                            last_shown = done;
                            eprintln!("           verify: {done}/{all} keys");
                        }
                    })
                    .await?;
                self.integrity.add(&found);
                let text = format!(
                    "{} as expected, {} lost, {} corrupted, {} in doubt, {} resurrected",
                    found.verified, found.lost, found.corrupted, found.in_doubt, found.resurrected
                );
                self.events.emit("verified", text.clone());
                Ok(text)
            }
        }
    }

    /// Runs every phase, recording each; an error ends the cell.
    pub async fn run_phases(&mut self, phases: &[Phase], scale: f64) -> Result<(), CellError> {
        for p in phases {
            let start = self.events.t();
            self.events.emit("phase", p.to_string());
            let outcome = self.run_phase(p, scale).await;
            let text = match &outcome {
                Ok(t) => t.clone(),
                Err(e) => format!("error: {e}"),
            };
            self.phases.push(PhaseRecord {
                phase: p.to_string(),
                start_s: start,
                end_s: self.events.t(),
                outcome: text,
            });
            outcome?;
        }
        Ok(())
    }

    /// After the phases: load off, the node stopped gracefully if it runs.
    pub async fn finish(&mut self) {
        self.pause_load().await;
        if self.node.is_running() {
            if let Ok(status) = self.node.stop().await {
                self.events
                    .emit("stopped", format!("end of phases, {}", describe(status)));
            }
        }
        self.set_up(false);
    }
}
