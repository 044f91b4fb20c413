//! A cell's phase runner: runs a cell's phases against its node, watches for
//! deaths soak did not cause (OOM kills, crashes) through the node's exit
//! future and restarts the node after them as a supervisor would, and says
//! what happened as typed events ([`event`]), which the recorder folds into
//! the cell's records ([`record`]). It drives any [`Node`]; it never prints.

pub mod bus;
pub mod checks;
pub mod event;
pub mod linearizable;
mod members;
pub mod record;
pub mod schedule;
#[cfg(test)]
mod tests;
pub mod timeline;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::driver::{Death, DriverError, Launch, Node};
use crate::faults::{Applied, Asked, Faults};
use crate::model::{Cause, ExecResult, Integrity, Oracle, Swap, SwapOutcome, UpgradeRecord};
use crate::suite::faults::DiskFault;
use crate::suite::{template, ChaosAction, ChaosSpec, ExecSpec, Phase};
use crate::telemetry::Target;
use crate::units::human_duration;
use crate::verify::{self, VerifyError};
use crate::workload::Load;
use bus::Bus;
use event::Event;

pub use crate::suite::BASE_VERSION;

/// Restarts after unexpected deaths allowed in one cell before it errors.
pub const MAX_UNEXPECTED_RESTARTS: usize = 50;

/// How long a failed read-back waits for the node's death to show before
/// it counts as the read-back's own failure.
const DEATH_SHOWS_WITHIN: Duration = Duration::from_secs(2);
/// Read-backs in a row the node may die under before the cell ends: a node
/// killed by every read of its data (glibc's arenas under a JVM's reads of
/// RocksDB, the seed's Teku) cannot be judged, and restarting it for the
/// crash-loop limit's fifty deaths only takes time.
pub const MAX_READBACK_DEATHS: usize = 5;

/// Why a cell stopped early.
#[derive(Debug, thiserror::Error)]
pub enum CellError {
    #[error(transparent)]
    Driver(#[from] DriverError),
    #[error(transparent)]
    Verify(#[from] VerifyError),
    #[error("{}", crate::model::INTERRUPTED)]
    Interrupted,
    #[error("the node died {0} times without soak causing it; giving up")]
    CrashLoop(usize),
    #[error("{0}")]
    Setup(String),
    /// A file or a program of the cell's own that soak could not make or
    /// start (an exec phase's log, its program): the cause kept.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// A task soak ran beside the cell (an offline inspection) panicked
    /// or was cancelled.
    #[error("a task of soak's own failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// The load's protocol cannot go on: an adapter that does not speak
    /// it, a database that refuses soak (exit 3).
    #[error("{0}")]
    Protocol(String),
    /// The node did not start again after a death or a stop: a finding of
    /// the cell (a data directory it will not start from), not the
    /// environment's failure. The cell's phases end there.
    #[error("the node did not start again after {} at {at_s:.1} s: {error}", after.said())]
    NotRecovered {
        after: Cause,
        at_s: f64,
        error: String,
    },
}

impl CellError {
    /// A node that never got going: the environment's failure (exit 3).
    pub fn never_started(&self) -> bool {
        matches!(
            self,
            CellError::Driver(
                DriverError::NeverReady { .. }
                    | DriverError::ExitedBeforeReady { .. }
                    | DriverError::Spawn { .. }
                    | DriverError::Cgroup(_)
            )
        )
    }
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
    pub versions: BTreeMap<String, Launch>,
    /// Read every key back after an unclean restart, before the load
    /// writes again (`workload.readback_after_restart`, default on).
    pub readback_after_restart: bool,
    /// The fault components the plan started (the network proxy the load
    /// connects through, the fault filesystem under the data directory).
    pub faults: Faults,
    /// `durability: unsynced-tail-allowed`: a power cut may take the
    /// unsynced tail of each connection's writes (never a hole).
    pub unsynced_tail_allowed: bool,
    /// The services beside the node, for `service` phases.
    pub services: std::sync::Arc<tokio::sync::Mutex<crate::services::Services>>,
}

/// Why the node is down, when soak took it down or saw it die.
#[derive(Debug, Clone)]
struct Down {
    cause: Cause,
    at_s: f64,
    exit: String,
}

/// The phase engine of one cell.
pub struct Cell<'a, N: Node> {
    pub node: &'a mut N,
    pub load: Option<&'a mut Load>,
    pub target: Target,
    pub bus: &'a mut Bus,
    /// The protocol read-backs go through: the node's own address, never
    /// the network fault proxy (they judge the data, not the network).
    pub verify: Option<std::sync::Arc<dyn crate::protocol::Protocol>>,
    pub interrupt: watch::Receiver<bool>,
    pub ctx: Context,
    /// The version the node runs (or ran last).
    pub version: String,
    down: Option<Down>,
    /// What reads during the load had found when the last restart began.
    reads_mark: Integrity,
    /// Read-backs in a row the node died under (a read-back that ends
    /// sets it back to 0, but the one after a restart inside a `verify`:
    /// a node whose every verify kills it is not judged by the restart's
    /// read-back passing in between).
    readback_deaths: usize,
    /// A `verify` is reading back (and restarting the node under it).
    verifying: bool,
    phase_counter: u64,
    /// Members drawn so far (`random`, `minority`, ...): each draw its own,
    /// though a chaos phase draws many within one phase.
    member_draws: u64,
    /// Each cluster member soak took down, why and when (`t`): a member
    /// that does not start again after it is the cell's `unrecovered`.
    members_down: std::collections::BTreeMap<usize, (crate::model::Cause, f64)>,
    /// How deep in `repeat`s the phase running is (0: the suite's own).
    nesting: u32,
    /// When the ledger was last saved, and how often to save it.
    saved_at: Instant,
    save_every: Duration,
    /// What ran, as explicit phases, for `soak replay` and `soak shrink`.
    pub timeline: timeline::Timeline,
}

impl<'a, N: Node> Cell<'a, N> {
    pub fn new(
        node: &'a mut N,
        load: Option<&'a mut Load>,
        target: Target,
        bus: &'a mut Bus,
        verify: Option<std::sync::Arc<dyn crate::protocol::Protocol>>,
        interrupt: watch::Receiver<bool>,
        ctx: Context,
    ) -> Cell<'a, N> {
        Cell {
            node,
            load,
            target,
            bus,
            verify,
            interrupt,
            ctx,
            version: BASE_VERSION.into(),
            down: None,
            reads_mark: Integrity::default(),
            readback_deaths: 0,
            verifying: false,
            phase_counter: 0,
            member_draws: 0,
            members_down: Default::default(),
            nesting: 0,
            saved_at: Instant::now(),
            save_every: Duration::from_secs(2),
            timeline: timeline::Timeline::default(),
        }
    }

    /// The load's acknowledged operations so far.
    fn ops(&self) -> u64 {
        self.load.as_deref().map_or(0, |l| l.stats().ops_ok())
    }

    fn save_timeline(&mut self) {
        if let Err(e) = self.timeline.save(&self.ctx.dir) {
            self.bus
                .notice("replay", format!("cannot write {}: {e}", timeline::FILE));
        }
    }

    fn set_up(&mut self, up: bool) {
        let pid = match up {
            true => self.node.pid().unwrap_or(crate::telemetry::ELSEWHERE),
            false => 0,
        };
        self.target.pid.store(pid, Relaxed);
        if let Some(l) = self.load.as_deref() {
            l.set_node_up(up);
        }
    }

    fn restarts(&self) -> usize {
        self.bus.recorder.restarts.len()
    }

    /// Saves the ledger to `ledger.bin` in the cell's folder (off the
    /// runtime's threads). Saved every few seconds, so that `soak verify`
    /// can judge the node's data should soak itself die; at most a
    /// twentieth of the time goes to saving, however large the ledger.
    async fn save_ledger(&mut self, complete: bool) {
        let Some(l) = self.load.as_deref() else {
            return;
        };
        let ledger = l.ledger.clone();
        let path = self.ctx.dir.join("ledger.bin");
        let began = Instant::now();
        let saved = tokio::task::spawn_blocking(move || ledger.save(&path, complete)).await;
        self.saved_at = Instant::now();
        self.save_every = (began.elapsed() * 20).max(Duration::from_secs(2));
        if let Ok(Err(err)) = saved {
            self.bus.error(format!("cannot save the ledger: {err}"));
        }
    }

    /// A start that failed says what soak's fault filesystem failed for
    /// the node meanwhile: a node that retries a refused write for ever
    /// (InnoDB did, on O_DIRECT) is then named as such, not as slow.
    fn with_disk_failures(&self, mut e: DriverError) -> DriverError {
        let Some(disk) = self.ctx.faults.record().disk else {
            return e;
        };
        if disk.failed.is_empty() {
            return e;
        }
        let mut failed: Vec<(&String, &u64)> = disk.failed.iter().collect();
        failed.sort_by(|a, b| b.1.cmp(a.1));
        let total: u64 = failed.iter().map(|(_, n)| **n).sum();
        let which: Vec<String> = failed
            .iter()
            .take(4)
            .map(|(k, n)| format!("{n} {k}"))
            .collect();
        let note = format!(
            "soak's fault filesystem under the data directory failed {total} of the node's operations ({}): if the node retries them, it makes no progress; `soak doctor` says what the filesystem supports",
            which.join(", ")
        );
        match &mut e {
            DriverError::NeverReady { probe, .. } => *probe = format!("{probe}; {note}"),
            DriverError::ExitedBeforeReady { status, .. } => *status = format!("{status}; {note}"),
            _ => {}
        }
        e
    }

    /// The first start, before the phases.
    pub async fn first_start(&mut self) -> Result<(), CellError> {
        let ready = self
            .node
            .start()
            .await
            .map_err(|e| self.with_disk_failures(e))?;
        self.set_up(true);
        self.bus.emit(Event::Ready {
            pid: self.node.pid().unwrap_or(0),
            after_ms: ready.as_millis() as u64,
            cause: None,
            down_at_s: 0.0,
            exit: String::new(),
            version: None,
        });
        Ok(())
    }

    /// Starts the node again after it went down, and records the restart.
    /// After an unclean death (a kill, a chaos action, an OOM kill, a
    /// crash, or one while it started again) the load is held and every
    /// key read back before it writes again, so that each death's losses
    /// are counted against it (unless the suite says
    /// `readback_after_restart: false`). A node that dies under that
    /// read-back is restarted and read back again.
    async fn start(&mut self) -> Result<u64, CellError> {
        let mut resume = false;
        // OOM kills before the node got ready again (see below).
        let mut starting_deaths = 0;
        loop {
            let down = self.down.take().unwrap_or(Down {
                cause: Cause::Stop,
                at_s: self.bus.t(),
                exit: "stopped".into(),
            });
            // A kill while it recovered is unclean whatever took it down.
            let read_back = (down.cause.unclean() || starting_deaths > 0)
                && self.ctx.readback_after_restart
                && self.load.is_some();
            if read_back && self.load.as_deref().is_some_and(|l| l.is_running()) {
                resume = true;
                self.pause_load().await;
            }
            // What reads during the load found since the last restart is
            // that restart's.
            self.close_reads_window();
            self.target.segment.fetch_add(1, Relaxed);
            let ready = match self
                .node
                .start()
                .await
                .map_err(|e| self.with_disk_failures(e))
            {
                Ok(ready) => ready,
                // Killed for memory while it started (replaying its log,
                // filling a cache), after a death or a graceful stop alike:
                // a death like any other, not a start that failed;
                // restarts are bounded as for any death.
                Err(DriverError::ExitedBeforeReady {
                    oom: true, status, ..
                }) => {
                    starting_deaths += 1;
                    self.died_starting(down, status, starting_deaths)?;
                    continue;
                }
                // It started before: what stops it now is what the death
                // (or the stop) left, the node's own finding.
                Err(
                    e @ (DriverError::ExitedBeforeReady { .. } | DriverError::NeverReady { .. }),
                ) => {
                    let error = e.to_string();
                    self.bus.emit(Event::NotRecovered {
                        after: down.cause,
                        down_at_s: down.at_s,
                        error: error.clone(),
                    });
                    return Err(CellError::NotRecovered {
                        after: down.cause,
                        at_s: down.at_s,
                        error,
                    });
                }
                Err(e) => return Err(e.into()),
            };
            self.set_up(true);
            let after_ms = ready.as_millis() as u64;
            self.bus.emit(Event::Ready {
                pid: self.node.pid().unwrap_or(0),
                after_ms,
                cause: Some(down.cause),
                down_at_s: down.at_s,
                exit: down.exit,
                version: None,
            });
            if !read_back {
                return Ok(after_ms);
            }
            let n = self.restarts();
            let began = Instant::now();
            let tails = (down.cause == Cause::PowerCut)
                .then(|| self.tails())
                .flatten();
            match self.read_back_once(tails).await {
                Ok(found) => {
                    if !self.verifying {
                        self.readback_deaths = 0;
                    }
                    self.bus.emit(Event::ReadBack {
                        oracle: Oracle::ReadBack,
                        restart: Some(n),
                        integrity: found.integrity,
                        first_lost: found.first_lost,
                        holes: found.holes,
                        took_s: began.elapsed().as_secs_f64(),
                    });
                    if resume {
                        if let Some(l) = self.load.as_deref_mut() {
                            l.resume();
                        }
                    }
                    return Ok(after_ms);
                }
                Err(e) if self.died_within(DEATH_SHOWS_WITHIN).await => {
                    self.bus.emit(Event::ReadBackRetry {
                        error: e.to_string(),
                    });
                    self.note_death()?;
                    self.died_reading()?;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The node died under a read-back (its death already noted): the
    /// [`MAX_READBACK_DEATHS`]th in a row ends the cell, as a node that
    /// does not start again does: it never came back to be judged.
    fn died_reading(&mut self) -> Result<(), CellError> {
        self.readback_deaths += 1;
        if self.readback_deaths < MAX_READBACK_DEATHS {
            return Ok(());
        }
        let down = self.down.clone().expect("a death just noted");
        let error = format!(
            "it started, and died under {} read-backs in a row (the last: {}): what it holds could not be read",
            self.readback_deaths, down.exit
        );
        self.bus.emit(Event::NotRecovered {
            after: down.cause,
            down_at_s: down.at_s,
            error: error.clone(),
        });
        Err(CellError::NotRecovered {
            after: down.cause,
            at_s: down.at_s,
            error,
        })
    }

    /// The node was OOM-killed before it got ready again after `down`: a
    /// death of its own (the `n`th of this start, counted toward the crash
    /// loop), in the same outage: the restart is still `down`'s.
    fn died_starting(&mut self, down: Down, exit: String, n: usize) -> Result<(), CellError> {
        self.died(Cause::Oom, exit, n)?;
        self.down = Some(down);
        Ok(())
    }

    /// Tells of a death soak did not cause; too many of them, with the
    /// `unrecorded` ones no restart holds yet, end the cell.
    fn died(&mut self, cause: Cause, exit: String, unrecorded: usize) -> Result<(), CellError> {
        self.bus.emit(Event::Died { cause, exit });
        let unexpected = self.bus.recorder.unexpected_deaths() + unrecorded;
        if unexpected >= MAX_UNEXPECTED_RESTARTS {
            return Err(CellError::CrashLoop(unexpected));
        }
        Ok(())
    }

    /// If the node died on its own: records why (for the restart), and
    /// whether it did. Too many such deaths end the cell.
    fn note_death(&mut self) -> Result<bool, CellError> {
        let Some(exit) = self.node.exit() else {
            return Ok(false);
        };
        self.set_up(false);
        let cause = match self.node.death() {
            Death::Oom => Cause::Oom,
            Death::Crash => Cause::Crash,
            Death::Lost => {
                return Err(CellError::Setup(format!(
                    "lost the node ({exit}): its Docker engine stopped answering; what it ran there may still be there"
                )))
            }
        };
        let at_s = self.bus.t();
        self.died(cause, exit.to_string(), 0)?;
        self.down = Some(Down {
            cause,
            at_s,
            exit: exit.to_string(),
        });
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
        let Some(load) = self.load.as_deref() else {
            return;
        };
        let stats = load.stats();
        let now = Integrity {
            lost: stats.lost_reads,
            corrupted: stats.corrupted_reads,
            resurrected: stats.resurrected_reads,
            aborted: stats.aborted_reads,
            ..Integrity::default()
        };
        let since = Integrity {
            lost: now.lost - self.reads_mark.lost,
            corrupted: now.corrupted - self.reads_mark.corrupted,
            resurrected: now.resurrected - self.reads_mark.resurrected,
            aborted: now.aborted - self.reads_mark.aborted,
            ..Integrity::default()
        };
        self.reads_mark = now;
        let first_lost = load.take_first_lost();
        if since.harmed() > 0 {
            self.bus.emit(Event::ReadsFound {
                integrity: since,
                first_lost,
            });
        }
    }

    /// Whether the node has exited, or does within `d`.
    async fn died_within(&mut self, d: Duration) -> bool {
        if self.node.exit().is_some() {
            return true;
        }
        tokio::time::timeout(d, self.node.exited()).await.is_ok()
    }

    /// Waits `d` while supervising the node: a death is seen the moment the
    /// node's exit future resolves, and the node restarted. Stops early on
    /// an interrupt.
    async fn hold(&mut self, d: Duration) -> Result<(), CellError> {
        let end = Instant::now() + d;
        loop {
            if *self.interrupt.borrow() {
                return Err(CellError::Interrupted);
            }
            self.supervise().await?;
            if self.saved_at.elapsed() >= self.save_every {
                self.save_ledger(false).await;
                self.save_timeline();
            }
            let now = Instant::now();
            if now >= end {
                return Ok(());
            }
            let save_at = (self.load.is_some()).then(|| self.saved_at + self.save_every);
            let wake = save_at.map_or(end, |s| s.min(end));
            let mut fatal = self.load.as_deref().map(|l| l.fatal());
            if let Some(why) = fatal.as_ref().and_then(|f| f.borrow().clone()) {
                return Err(CellError::Protocol(why));
            }
            let exited = self.node.exited();
            let mut int = self.interrupt.clone();
            tokio::select! {
                _ = tokio::time::sleep_until(wake) => {}
                _ = exited => {}
                _ = int.changed() => {}
                _ = async { match fatal.as_mut() { Some(f) => { let _ = f.changed().await; } None => std::future::pending().await } } => {}
            }
        }
    }

    async fn pause_load(&mut self) {
        if let Some(l) = self.load.as_deref_mut() {
            l.pause().await;
        }
    }

    /// After a fault is lifted: the requests it held or failed settle and
    /// are counted in this phase, not in the next one (which would read
    /// them as failures after the fault).
    async fn settle_load(&self) {
        if let Some(l) = self.load.as_deref() {
            l.settle().await;
        }
    }

    /// `cause`: what asked for it, for the restart (`kill`, `chaos`).
    async fn kill(&mut self, sig: Signal, cause: Cause) -> Result<String, CellError> {
        self.supervise().await?;
        let at_s = self.bus.t();
        let exit = self.node.kill(sig).await?;
        self.set_up(false);
        self.bus.emit(Event::Killed {
            signal: sig.as_str().into(),
            exit: exit.to_string(),
        });
        self.down = Some(Down {
            cause,
            at_s,
            exit: format!("{} from soak", sig.as_str()),
        });
        Ok(format!("killed: {exit}"))
    }

    /// `cause`: what asked for it, for the restart (`stop`, `chaos`).
    async fn stop(&mut self, cause: Cause) -> Result<String, CellError> {
        self.supervise().await?;
        let at_s = self.bus.t();
        let exit = self.node.stop().await?;
        self.set_up(false);
        self.bus.emit(Event::Stopped {
            why: String::new(),
            exit: exit.to_string(),
        });
        self.down = Some(Down {
            cause,
            at_s,
            exit: format!("graceful stop, {exit}"),
        });
        Ok(format!("stopped: {exit}"))
    }

    /// Frozen for `d`, then thawed, whatever happens in between.
    async fn pause_node(&mut self, d: Duration) -> Result<String, CellError> {
        self.supervise().await?;
        self.node.pause().await?;
        self.bus.emit(Event::Paused {
            for_s: d.as_secs_f64(),
        });
        let held = self.hold(d).await;
        let _ = self.node.resume().await;
        self.bus.emit(Event::Resumed);
        held?;
        Ok("paused and resumed".into())
    }

    /// Pauses the load and reads back every key the ledger knows; what was
    /// found goes to the cell and the newest restart (`None` without a
    /// workload). A node that dies under the read-back (an OOM kill while
    /// its caches fill) is restarted as during load, and read back again
    /// from the start; the restart is counted.
    async fn read_back(&mut self) -> Result<Option<Integrity>, CellError> {
        self.pause_load().await;
        self.supervise().await?;
        if self.load.is_none() {
            return Ok(None);
        }
        self.bus.emit(Event::VerifyStarted {
            what: "reading back every key the ledger knows".into(),
        });
        let began = Instant::now();
        self.verifying = true;
        let found = self.read_back_through_deaths().await;
        self.verifying = false;
        let found = found?;
        self.readback_deaths = 0;
        self.bus.emit(Event::ReadBack {
            oracle: Oracle::Verify,
            restart: None,
            integrity: found.integrity,
            first_lost: found.first_lost,
            holes: found.holes,
            took_s: began.elapsed().as_secs_f64(),
        });
        Ok(Some(found.integrity))
    }

    /// Reads back until a pass ends, restarting a node that dies under it
    /// (each death counts toward [`MAX_READBACK_DEATHS`]).
    async fn read_back_through_deaths(&mut self) -> Result<verify::ReadBack, CellError> {
        loop {
            match self.read_back_once(None).await {
                Ok(found) => return Ok(found),
                Err(e) if self.died_within(DEATH_SHOWS_WITHIN).await => {
                    self.bus.emit(Event::ReadBackRetry {
                        error: e.to_string(),
                    });
                    if self.note_death()? {
                        self.died_reading()?;
                        self.start().await?;
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// One pass over every key the ledger knows, through the node, with
    /// the load paused; a node that dies under it is the caller's to handle.
    async fn read_back_once(
        &mut self,
        tails: Option<verify::Tails>,
    ) -> Result<verify::ReadBack, VerifyError> {
        // A cluster is read back through a member that runs.
        let up = self
            .node
            .cluster()
            .and_then(|c| (1..=c.size()).find(|&m| c.is_up(m)));
        let load = self.load.as_deref().expect("a workload to read back");
        let protocol = match up {
            Some(m) => load.protocol_of(m - 1),
            None => self.verify.clone().unwrap_or_else(|| load.protocol.clone()),
        };
        let bus = &mut *self.bus;
        let mut last = Instant::now();
        verify::online(
            &*protocol,
            &load.ledger,
            load.cfg.timeout,
            tails,
            Some(self.node.exited()),
            load.history(),
            |done, all| {
                if done < all && last.elapsed() >= Duration::from_secs(1) {
                    last = Instant::now();
                    bus.emit(Event::VerifyProgress { done, all });
                }
            },
        )
        .await
    }

    /// How a read-back after a power cut tells the tail from holes.
    fn tails(&self) -> Option<verify::Tails> {
        self.load.as_deref().map(|l| verify::Tails {
            connections: l.cfg.connections,
            allowed: self.ctx.unsynced_tail_allowed,
        })
    }

    /// Puts a fault in force, or lifts it, through the component that
    /// takes it. A power cut is one too: its node is killed first (asked
    /// before, so that a cell without the fault filesystem fails before
    /// its node is killed), the component drops every unsynced byte, and
    /// the node is started again; the read-back that follows judges the
    /// tail from the holes.
    async fn fault(&mut self, asked: Asked<'_>) -> Result<String, CellError> {
        let faults = self.ctx.faults.clone();
        let torn = match asked {
            Asked::Disk(&DiskFault::PowerCut { torn }) => {
                if !faults.takes(asked) {
                    return Err(CellError::Setup(asked.unavailable()));
                }
                self.kill(Signal::SIGKILL, Cause::PowerCut).await?;
                torn
            }
            _ => false,
        };
        match faults.apply(asked).map_err(CellError::Setup)? {
            Applied::Set { fault, text } => {
                self.bus.emit(Event::FaultSet { fault });
                Ok(text)
            }
            Applied::Lifted { fault, text } => {
                self.bus.emit(Event::FaultLifted { fault });
                Ok(text)
            }
            Applied::Cut { dropped } => {
                self.bus.emit(Event::PowerCut { dropped, torn });
                let ms = self.start().await?;
                Ok(format!(
                    "power cut: {} not fsynced dropped; ready after {ms} ms",
                    crate::units::Bytes(dropped)
                ))
            }
        }
    }

    async fn exec(&mut self, e: &ExecSpec) -> Result<String, CellError> {
        let argv = e
            .command
            .iter()
            .map(|a| template::render(a, &self.ctx.vars))
            .collect::<Result<Vec<_>, _>>()
            .map_err(CellError::Setup)?;
        let n = self.bus.recorder.execs.len() + 1;
        let log_name = format!("exec-{n}.log");
        let log = std::fs::File::create(self.ctx.dir.join(&log_name)).map_err(|source| {
            CellError::Io {
                what: format!("cannot create {log_name}"),
                source,
            }
        })?;
        let out = log.try_clone().map_err(|source| CellError::Io {
            what: format!("cannot share {log_name}"),
            source,
        })?;
        let shown = argv.join(" ");
        self.bus.emit(Event::ExecStarted {
            command: shown.clone(),
        });
        let mut cmd = tokio::process::Command::new(&argv[0]);
        crate::net::netns::enter_hub(&mut cmd);
        cmd.args(&argv[1..])
            .env("SOAK_RUN_ID", &self.ctx.run_id)
            .stdin(std::process::Stdio::null())
            .stdout(out)
            .stderr(log)
            .process_group(0)
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|source| CellError::Io {
            what: format!("exec `{}`", argv[0]),
            source,
        })?;
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
        let mut text = match code {
            Some(c) if c == e.expect => format!("exit code {c} as expected"),
            Some(c) => format!("exit code {c}, expected {}; see {log_name}", e.expect),
            None => format!(
                "timed out after {} or died by a signal; see {log_name}",
                human_duration(e.timeout)
            ),
        };
        if let Some(v) = throughput {
            text = format!("{text}; {v:.0} ops/s");
        }
        if let Some(re) = &unmatched {
            text = format!("{text}; the regex `{re}` matched nothing in {log_name}");
        }
        self.bus.emit(Event::ExecFinished {
            text: text.clone(),
            result: ExecResult {
                command: shown,
                expected: e.expect,
                code,
                log: log_name,
                took_s,
                throughput,
                throughput_min: e.throughput.as_ref().and_then(|t| t.min),
                unmatched,
            },
        });
        Ok(text)
    }

    /// The data directory inspected offline (see `verify::offline`), when
    /// it holds a RocksDB database; `running`: statistics only, no
    /// checksum verification under a live node's compactions.
    #[cfg(feature = "node")]
    async fn inspect(&mut self, running: bool) -> Option<crate::model::Inspection> {
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
                self.bus.notice("inspect", e);
                None
            }
        }
    }

    #[cfg(not(feature = "node"))]
    async fn inspect(&mut self, _running: bool) -> Option<crate::model::Inspection> {
        None
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
        let ledger = self.load.as_deref().map(|l| l.ledger.clone());
        self.bus.emit(Event::VerifyStarted {
            what: "offline: reading the data directory with RocksDB".into(),
        });
        let at_s = self.bus.t();
        let inspection = tokio::task::spawn_blocking(move || {
            crate::verify::offline::inspect(&dir, ledger.as_deref())
        })
        .await?
        .map_err(CellError::Setup)?;
        let mut found = inspection.integrity.unwrap_or_default();
        if let Some(c) = &inspection.corruption {
            self.bus.emit(Event::Corruption { text: c.clone() });
            found.corrupted += 1;
        }
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
        self.bus.emit(Event::OfflineVerified {
            text: text.clone(),
            record: Box::new(crate::model::OfflineRecord { at_s, inspection }),
        });
        Ok(text)
    }

    /// Points the node at a version, and rewrites `node.json` so that
    /// `soak verify` starts this version.
    fn use_version(&mut self, name: &str) -> Result<(), CellError> {
        let launch = self
            .ctx
            .versions
            .get(name)
            .cloned()
            .ok_or_else(|| CellError::Setup(format!("no version `{name}`")))?;
        self.node.use_version(&launch);
        self.version = name.to_string();
        let path = self.ctx.dir.join("node.json");
        if let Ok(mut saved) = crate::verify::saved::SavedNode::read(&path) {
            saved.argv = launch.argv;
            saved.env = launch.env;
            if let (Some(c), Some(image)) = (saved.container.as_mut(), launch.image) {
                c.image = image;
            }
            let _ = saved.write(&path);
        }
        Ok(())
    }

    /// `upgrade` / `downgrade`: the load paused, a graceful stop, the swap,
    /// a start, and a read-back through the new version. A version that
    /// refuses to start (it exits or never gets ready) is recorded with its
    /// reason, and the version before it is started again for the phases
    /// after. For a downgrade that is often what the suite expects; for an
    /// upgrade it is the finding, and its own check fails (`checks.rs`):
    /// the release cannot open the database it would be given, which is
    /// no error of the environment.
    async fn swap_version(&mut self, to: &str, kind: Swap) -> Result<String, CellError> {
        self.pause_load().await;
        self.supervise().await?;
        let from = self.version.clone();
        let at_s = self.bus.t();
        if self.node.running() {
            let exit = self.node.stop().await?;
            self.set_up(false);
            self.bus.emit(Event::Stopped {
                why: format!("for the {} to {to}", kind.as_str()),
                exit: exit.to_string(),
            });
        }
        self.use_version(to)?;
        self.bus.emit(Event::Swap {
            swap: kind.as_str().into(),
            from: from.clone(),
            to: to.to_string(),
        });
        self.target.segment.fetch_add(1, Relaxed);
        let mut record = UpgradeRecord {
            kind,
            from: from.clone(),
            to: to.to_string(),
            at_s,
            outcome: SwapOutcome::Verified,
            reason: None,
            ready_after_ms: None,
            integrity: None,
            before: self.inspect(false).await,
            after: None,
            options_changed: vec![],
        };
        let (ready, exit, version) = match self.node.start().await {
            Ok(ready) => {
                record.ready_after_ms = Some(ready.as_millis() as u64);
                (ready, format!("{} from {from}", kind.as_str()), to)
            }
            Err(e) if e.is_refusal() => {
                let reason = e.to_string();
                self.bus.emit(Event::Refused {
                    to: to.to_string(),
                    reason: reason.clone(),
                });
                record.outcome = SwapOutcome::Refused;
                record.reason = Some(reason);
                self.use_version(&from)?;
                let ready = self.node.start().await?;
                (ready, format!("{to} refused; {from} started again"), &*from)
            }
            Err(e) => return Err(e.into()),
        };
        self.set_up(true);
        self.bus.emit(Event::Ready {
            pid: self.node.pid().unwrap_or(0),
            after_ms: ready.as_millis() as u64,
            cause: Some(kind.cause()),
            down_at_s: at_s,
            exit,
            version: Some(version.to_string()),
        });
        let read = self.read_back().await;
        record.integrity = read.as_ref().ok().copied().flatten();
        let text = read.map(|found| found.map(|f| f.to_string()).unwrap_or_default());
        record.after = self.inspect(true).await;
        #[cfg(feature = "node")]
        if let (Some(b), Some(a)) = (&record.before, &record.after) {
            record.options_changed = crate::verify::offline::options_diff(&b.options, &a.options)
                .into_iter()
                .filter(|(k, _, _)| !k.starts_with("Version.options_file_version"))
                .collect();
        }
        let outcome = match record.outcome {
            SwapOutcome::Refused => format!(
                "{to} refused to start ({}); {from} runs again; {}",
                record.reason.as_deref().unwrap_or(""),
                text.as_deref().unwrap_or("")
            ),
            SwapOutcome::Verified => format!("{from} -> {to}; {}", text.as_deref().unwrap_or("")),
        };
        self.bus.emit(Event::Swapped {
            record: Box::new(record),
        });
        text?;
        Ok(outcome)
    }

    async fn chaos(&mut self, c: &ChaosSpec) -> Result<String, CellError> {
        let seed = c
            .seed
            .unwrap_or_else(|| crate::units::mix64(self.ctx.seed ^ self.phase_counter));
        let plan = schedule::plan(c, seed, self.ctx.scale);
        self.bus.emit(Event::ChaosPlanned {
            seed,
            actions: plan.len(),
        });
        if let Some(l) = self.load.as_deref_mut() {
            l.resume();
        }
        let start = Instant::now();
        let ops = self.ops();
        self.timeline
            .chaos(self.bus.t(), ops, seed, c.during.mul_f64(self.ctx.scale));
        for p in &plan {
            let now = start.elapsed();
            if p.at > now {
                self.hold(p.at - now).await?;
            }
            let hold = c.hold.mul_f64(self.ctx.scale);
            let lift = p.action.lift();
            let (began, ops) = (start.elapsed(), self.ops());
            self.bus.emit(Event::ChaosAction {
                seed,
                at_s: p.at.as_secs_f64(),
                action: p.action.kind(),
                fault: lift
                    .is_some()
                    .then(|| format!("{} for {}", p.action, human_duration(hold))),
            });
            let ran = self.chaos_act(&p.action, c).await?;
            if let Some(lift) = lift.clone() {
                // Lifted even when the hold is cut short, so that an
                // interrupted run leaves no fault in force.
                let held = self.hold(hold).await;
                // The lift is an action of its own (a fault's off, or a
                // heal), run as any other.
                self.chaos_act(&lift, c).await?;
                held?;
            }
            // What ran, with the members a cluster's action chose.
            let phases = match ran {
                Some(mut ran) => {
                    if lift.is_some() {
                        ran.push(Phase::Run(crate::suite::phase::RunFor::Time(hold)));
                        ran.push(Phase::Heal);
                    }
                    ran
                }
                None => timeline::as_phases(&p.action, c, self.ctx.scale, lift),
            };
            self.timeline.drawn(timeline::Drawn {
                action: timeline::word(p.action.kind()),
                at_s: began.as_secs_f64(),
                ops,
                took_s: (start.elapsed() - began).as_secs_f64(),
                phases: phases.iter().map(crate::suite::emit::phase).collect(),
            });
        }
        let during = c.during.mul_f64(self.ctx.scale);
        let now = start.elapsed();
        if during > now {
            self.hold(during - now).await?;
        }
        Ok(format!("seed {seed}, {} actions", plan.len()))
    }

    /// Does one chaos action; for a cluster's, the phases it ran, with
    /// the members it chose (what a replay does again).
    async fn chaos_act(
        &mut self,
        a: &ChaosAction,
        c: &ChaosSpec,
    ) -> Result<Option<Vec<Phase>>, CellError> {
        match a {
            ChaosAction::Kill => {
                self.kill(c.signal.0, Cause::Chaos).await?;
                self.start().await?;
            }
            ChaosAction::Pause => {
                self.pause_node(c.pause.mul_f64(self.ctx.scale)).await?;
            }
            ChaosAction::Restart => {
                self.stop(Cause::Chaos).await?;
                self.start().await?;
            }
            ChaosAction::Network(n) => {
                self.fault(Asked::Network(n)).await?;
            }
            ChaosAction::Disk(d) => {
                self.fault(Asked::Disk(d)).await?;
            }
            ChaosAction::Member(m) => return self.chaos_member(m).await.map(Some),
            ChaosAction::Partition(p) => {
                let (_, ran) = self.partition_resolved(p).await?;
                return Ok(Some(vec![Phase::Partition(ran)]));
            }
            ChaosAction::Heal => {
                self.heal().await?;
                return Ok(Some(vec![Phase::Heal]));
            }
        }
        Ok(None)
    }

    async fn limit(&mut self, bytes: u64) -> Result<String, CellError> {
        let read = self.node.set_memory_limit(bytes).await?;
        let text = format!("memory limit {} ({read})", crate::units::Bytes(bytes));
        self.bus.emit(Event::Limit {
            bytes,
            text: text.clone(),
        });
        Ok(text)
    }

    async fn fill(&mut self) -> Result<String, CellError> {
        self.supervise().await?;
        let Some(l) = self.load.as_deref_mut() else {
            return Ok("no workload".into());
        };
        l.pause().await;
        let (keys, took) = l.fill().await;
        let e = Event::Loaded {
            keys,
            took_s: took.as_secs_f64(),
        };
        let text = e.text();
        self.bus.emit(e);
        Ok(text)
    }

    /// Runs one phase, its durations already scaled (`Phase::scaled`).
    async fn run_phase(&mut self, phase: &Phase) -> Result<String, CellError> {
        self.phase_counter += 1;
        match phase {
            Phase::Load => self.fill().await,
            Phase::Run(crate::suite::phase::RunFor::Time(d)) => {
                if let Some(l) = self.load.as_deref_mut() {
                    l.resume();
                }
                self.hold(*d).await?;
                Ok("load applied".into())
            }
            Phase::Run(crate::suite::phase::RunFor::Ops { ops, max }) => {
                let want = *ops;
                let Some(l) = self.load.as_deref_mut() else {
                    return Err(CellError::Setup("`run: { ops }` needs a workload".into()));
                };
                l.resume();
                let from = l.stats().ops_ok();
                let end = Instant::now() + *max;
                loop {
                    let done = self.load.as_deref().map_or(0, |l| l.stats().ops_ok()) - from;
                    if done >= want {
                        return Ok(format!("{done} operations acknowledged"));
                    }
                    let left = end.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(format!(
                            "ran out of time: {done} of {want} operations acknowledged in {}",
                            human_duration(*max)
                        ));
                    }
                    self.hold(left.min(Duration::from_millis(100))).await?;
                }
            }
            Phase::Wait(d) => {
                self.pause_load().await;
                self.hold(*d).await?;
                Ok("waited".into())
            }
            Phase::Kill(sig) => self.kill(sig.0, Cause::Kill).await,
            Phase::Network(n) => self.fault(Asked::Network(n)).await,
            Phase::Disk(d) => self.fault(Asked::Disk(d)).await,
            Phase::Start => {
                let ms = self.start().await?;
                Ok(format!("ready after {ms} ms"))
            }
            Phase::Stop => {
                self.pause_load().await;
                self.stop(Cause::Stop).await
            }
            Phase::Restart => {
                let stopped = self.stop(Cause::Restart).await?;
                let ms = self.start().await?;
                Ok(format!("{stopped}; ready after {ms} ms"))
            }
            Phase::Pause(d) => self.pause_node(*d).await,
            Phase::Exec(e) => self.exec(e).await,
            Phase::Service(s) => {
                let done = self.ctx.services.lock().await.act(&s.name, s.action).await;
                done.map_err(CellError::Setup)
            }
            Phase::Limit(size) => self.limit(size.0).await,
            Phase::Verify => Ok(match self.read_back().await? {
                Some(found) => found.to_string(),
                None => "nothing to verify".into(),
            }),
            #[cfg(feature = "node")]
            Phase::VerifyOffline => self.verify_offline().await,
            #[cfg(not(feature = "node"))]
            Phase::VerifyOffline => Err(CellError::Setup(
                "`verify: offline` needs soak built with its `node` feature (RocksDB)".into(),
            )),
            Phase::Repeat { times, phases } => {
                for i in 0..*times {
                    self.bus.emit(Event::Repeat {
                        round: i + 1,
                        times: *times,
                    });
                    self.nesting += 1;
                    let r = Box::pin(self.run_phases(phases)).await;
                    self.nesting -= 1;
                    r?;
                }
                Ok(format!("{times} times"))
            }
            Phase::Chaos(c) => self.chaos(c).await,
            Phase::Member(m) => self.member_phase(m).await,
            Phase::Partition(p) => self.partition(p).await,
            Phase::Heal => self.heal().await,
            Phase::Upgrade(v) => self.swap_version(v, Swap::Upgrade).await,
            Phase::Downgrade(v) => self.swap_version(v, Swap::Downgrade).await,
        }
    }

    /// Runs every phase, recording each; an error ends the cell.
    pub async fn run_phases(&mut self, phases: &[Phase]) -> Result<(), CellError> {
        // Each phase's load is what the totals grew by from the end of the
        // phase before: nothing counted between two phases goes missing.
        let mut before = self.load.as_deref().map(|l| l.stats());
        for (i, p) in phases.iter().enumerate() {
            let start_s = self.bus.t();
            // As it runs: its durations scaled (the events keep the
            // suite's words).
            let ran = p.scaled(self.ctx.scale);
            if !matches!(p, Phase::Repeat { .. } | Phase::Chaos(_)) {
                let ops = self.ops();
                self.timeline.phase(start_s, ops, &ran);
            }
            self.bus.emit(Event::PhaseStarted {
                phase: p.to_string(),
            });
            let outcome = self.run_phase(&ran).await;
            if outcome.is_ok() && p.lifts_fault() {
                self.settle_load().await;
            }
            let after = self.load.as_deref().map(|l| l.stats());
            let load = match (&before, &after) {
                (Some(b), Some(a)) => {
                    let d = a.since(b);
                    (d.ops_ok() + d.errors + d.fill_sets > 0).then(|| d.summary())
                }
                _ => None,
            };
            before = after;
            self.bus.emit(Event::PhaseFinished {
                phase: p.to_string(),
                place: (self.nesting == 0).then_some(i as u32 + 1),
                start_s,
                outcome: match &outcome {
                    Ok(t) => t.clone(),
                    Err(e) => format!("error: {e}"),
                },
                ok: outcome.is_ok(),
                load,
                disk_bytes: self
                    .target
                    .data_dir
                    .as_deref()
                    .map(crate::telemetry::disk_usage),
            });
            self.save_ledger(false).await;
            self.save_timeline();
            outcome?;
        }
        Ok(())
    }

    /// After the phases: load off, the node stopped gracefully if it runs.
    pub async fn finish(&mut self) {
        self.pause_load().await;
        self.close_reads_window();
        self.save_ledger(true).await;
        self.save_timeline();
        if self.node.running() {
            if let Ok(exit) = self.node.stop().await {
                self.bus.emit(Event::Stopped {
                    why: "end of phases".into(),
                    exit: exit.to_string(),
                });
            }
        }
        self.set_up(false);
    }
}
