//! Live progress of a run, as users of long runs expect: on a terminal, one
//! status line for the running cell, redrawn every second (the phase, the
//! suite's elapsed and remaining time, ops/s, p99, RSS against the limit,
//! restarts and losses so far); without one (a CI log), the same figures as
//! a plain heartbeat line every `--heartbeat` (30 s), so that a two-hour
//! phase is never silent. `--progress none` and `--quiet` turn it off.
//!
//! Progress is a sink of the cells' event streams, beside the console.

use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::cell::event::{Event, Sink};
use crate::plan::CellPlan;
use crate::suite::{Phase, Suite};
use crate::telemetry::Target;
use crate::units::{human_duration, Bytes};
use crate::workload::Live;

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// A live status line (stderr is a terminal).
    Tty,
    /// A heartbeat line at an interval (CI logs).
    Plain,
    None,
}

impl Mode {
    /// A terminal gets the live line, anything else the heartbeat.
    pub fn detect() -> Mode {
        if std::io::stderr().is_terminal() {
            Mode::Tty
        } else {
            Mode::Plain
        }
    }
}

/// What the status line says of the running cell.
#[derive(Default)]
struct CellState {
    id: String,
    index: usize,
    phase: String,
    started: Option<Instant>,
    restarts: usize,
    /// What the read-backs and the load's reads found so far.
    found: crate::model::Integrity,
    limit: Option<u64>,
    load: Option<Live>,
    target: Option<Target>,
    /// Operations at the last line, to give ops/s over the interval.
    last_ops: Option<(Instant, u64)>,
}

#[derive(Default)]
struct State {
    suite: String,
    cells: usize,
    /// The phases' planned time of one cell (scaled).
    planned: Duration,
    started: Option<Instant>,
    cell: CellState,
}

/// The run's progress display; cheap to clone into the cells' sinks.
#[derive(Clone)]
pub struct Progress {
    mode: Mode,
    quiet: bool,
    every: Duration,
    state: Arc<Mutex<State>>,
    bar: Option<ProgressBar>,
}

impl Progress {
    pub fn new(mode: Mode, quiet: bool, every: Duration) -> Progress {
        let mode = if quiet { Mode::None } else { mode };
        let bar = (mode == Mode::Tty).then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template("{spinner} {msg}").expect("a valid template"),
            );
            bar
        });
        Progress {
            mode,
            quiet,
            every,
            state: Arc::default(),
            bar,
        }
    }

    /// Whether events go to the console, line by line.
    pub fn console(&self) -> bool {
        !self.quiet
    }

    pub fn begin_run(&self, suite: &Suite, cells: usize, scale: f64) {
        let mut s = self.state.lock().expect("progress lock");
        s.suite = suite.name.clone();
        s.cells = cells;
        s.planned = planned(&suite.phases).mul_f64(scale);
        s.started = Some(Instant::now());
        drop(s);
        let every = match self.mode {
            Mode::Tty => Duration::from_secs(1),
            Mode::Plain => self.every,
            Mode::None => return,
        };
        let me = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            loop {
                tick.tick().await;
                let line = me.line();
                match &me.bar {
                    Some(bar) => {
                        bar.set_message(line);
                        bar.tick();
                    }
                    None if !line.is_empty() => eprintln!("soak: {line}"),
                    None => {}
                }
            }
        });
    }

    /// The console: one line per event on stderr (`[   12.3s] cell: ready
    /// pid 7 after 80 ms`), above the live line.
    pub fn console_sink(&self) -> Console {
        Console {
            bar: self.bar.clone(),
        }
    }

    /// The sink a cell's bus feeds.
    pub fn cell(&self, plan: &CellPlan, load: Option<Live>, target: Target) -> CellSink {
        let mut s = self.state.lock().expect("progress lock");
        s.cell = CellState {
            id: plan.id.clone(),
            index: plan.index,
            started: Some(Instant::now()),
            limit: plan.memory_limit(),
            last_ops: Some((Instant::now(), 0)),
            load,
            target: Some(target),
            ..CellState::default()
        };
        CellSink {
            state: self.state.clone(),
            bar: self.bar.clone(),
        }
    }

    /// The status line now.
    pub fn line(&self) -> String {
        let mut s = self.state.lock().expect("progress lock");
        let Some(run_started) = s.started else {
            return String::new();
        };
        let elapsed = run_started.elapsed();
        let (planned, cells) = (s.planned, s.cells);
        let c = &mut s.cell;
        if c.id.is_empty() {
            return String::new();
        }
        let in_cell = c.started.map(|t| t.elapsed()).unwrap_or_default();
        let done = planned * c.index as u32 + in_cell.min(planned);
        let left = (planned * cells as u32).saturating_sub(done);
        // Before its first phase a cell is starting its node; past the
        // phases' planned time (slow starts, long read-backs) the estimate
        // says so rather than "~0ms left".
        let phase = if c.phase.is_empty() {
            "none yet (starting the node)"
        } else {
            c.phase.as_str()
        };
        let left = if left.is_zero() {
            "past the planned time".to_string()
        } else {
            format!("~{} left", human_duration(round_s(left)))
        };
        let mut parts = vec![
            format!("cell {}/{cells} {}", c.index + 1, c.id),
            format!("phase {phase}"),
            format!("{} elapsed, {left}", human_duration(round_s(elapsed))),
        ];
        if let Some(load) = &c.load {
            let (ops, p99) = load.now();
            let now = Instant::now();
            let rate = match c.last_ops {
                Some((t, before)) if now > t => {
                    ops.saturating_sub(before) as f64 / (now - t).as_secs_f64()
                }
                _ => 0.0,
            };
            c.last_ops = Some((now, ops));
            parts.push(format!("{rate:.0} ops/s"));
            if let Some(p99) = p99 {
                parts.push(format!("p99 {:.1} ms", p99 as f64 / 1000.0));
            }
        }
        if let Some((what, bytes)) = c.target.as_ref().and_then(memory_now) {
            parts.push(match c.limit {
                Some(l) => format!("{what} {} of {}", Bytes(bytes), Bytes(l)),
                None => format!("{what} {}", Bytes(bytes)),
            });
        }
        parts.push(format!(
            "{} restarts, {} lost",
            c.restarts,
            c.found.lost_writes()
        ));
        if c.found.corrupted > 0 {
            parts.push(format!("{} corrupted", c.found.corrupted));
        }
        parts.join(", ")
    }

    /// Clears the live line at the end of the run.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

fn round_s(d: Duration) -> Duration {
    Duration::from_secs(d.as_secs())
}

/// The node's memory now: its process tree's RSS (a cluster's: every
/// member's), or on a remote engine the container's usage as the engine
/// reports it.
fn memory_now(t: &Target) -> Option<(&'static str, u64)> {
    use std::sync::atomic::Ordering::Relaxed;
    let pid = t.pid.load(Relaxed);
    if pid == 0 {
        return None;
    }
    if !t.members.is_empty() {
        let pids = t.members.iter().flat_map(|m| m.cgroup.procs());
        return Some(("RSS", pids.map(crate::telemetry::rss_of).sum()));
    }
    Some(match &t.engine_memory {
        Some(m) if pid < 0 => ("memory", m.usage.load(Relaxed)),
        _ if pid < 0 => return None,
        _ => (
            "RSS",
            crate::telemetry::process_tree(pid)
                .into_iter()
                .map(crate::telemetry::rss_of)
                .sum(),
        ),
    })
}

/// The planned time of a list of phases: what they hold the node for.
pub fn planned(phases: &[Phase]) -> Duration {
    phases
        .iter()
        .map(|p| match p {
            Phase::Run(r) => r.most(),
            Phase::Wait(d) | Phase::Pause(d) => *d,
            Phase::Chaos(c) => c.during,
            Phase::Repeat { times, phases } => {
                planned(phases) * (*times).min(u32::MAX as u64) as u32
            }
            _ => Duration::ZERO,
        })
        .sum()
}

/// Feeds one cell's events to the status line; prints nothing itself but
/// keeps the live line below the console's lines.
pub struct CellSink {
    state: Arc<Mutex<State>>,
    bar: Option<ProgressBar>,
}

impl Sink for CellSink {
    fn event(&mut self, _cell: &str, _t: f64, e: &Event) {
        let mut s = self.state.lock().expect("progress lock");
        let c = &mut s.cell;
        match e {
            Event::PhaseStarted { phase } => c.phase = phase.clone(),
            Event::Ready { cause: Some(_), .. } => c.restarts += 1,
            Event::ReadBack { integrity, .. } | Event::ReadsFound { integrity, .. } => {
                c.found.add(integrity)
            }
            Event::VerifyProgress { done, all } => {
                c.phase = format!("verify ({done}/{all} keys)");
            }
            _ => {}
        }
        drop(s);
        if let Some(bar) = &self.bar {
            bar.tick();
        }
    }
}

/// One line per event on stderr.
pub struct Console {
    bar: Option<ProgressBar>,
}

impl Sink for Console {
    fn event(&mut self, cell: &str, t: f64, e: &Event) {
        if let Event::PhaseFinished { .. } | Event::VerifyProgress { .. } = e {
            return;
        }
        let line = format!("[{t:>7.1}s] {cell}: {} {}", e.kind(), e.text());
        match &self.bar {
            Some(bar) => bar.suspend(|| eprintln!("{line}")),
            None => eprintln!("{line}"),
        }
    }
}
