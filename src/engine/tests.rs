//! The engine's riskiest logic against a fake node, in paused time: the
//! crash-loop limit, deaths seen through the exit future and classified,
//! a refused downgrade rolled forward, a chaos schedule applied as
//! planned, and an interrupt. (The same logic runs end to end against
//! real processes in tests/run.rs.)

use std::sync::atomic::{AtomicI32, AtomicU32};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::sync::watch;

use super::event::{Bus, Event, Sink};
use super::*;
use crate::driver::{Death, DriverError, Exit, Exited, Launch, Node};
use crate::model::{Cause, Swap, SwapOutcome};
use crate::suite::Phase;

/// How an incarnation of the fake node lives.
#[derive(Debug, Clone, Copy)]
enum Life {
    /// Until soak stops or kills it.
    Long,
    /// Dies on its own after this long, as an OOM kill or a crash.
    Dies(Duration, Death),
    /// Never gets ready: the start fails.
    Refuses,
}

/// What the fake node was asked to do, for the tests to check.
#[derive(Debug, Default)]
struct Calls {
    starts: Vec<Vec<String>>,
    kills: Vec<Signal>,
    stops: usize,
}

/// The life of the next incarnation, given its argv and its number.
type Script = Box<dyn FnMut(&[String], usize) -> Life + Send>;

struct FakeNode {
    life: Script,
    launch: Launch,
    exit: Option<watch::Receiver<Option<Exit>>>,
    tx: Option<watch::Sender<Option<Exit>>>,
    death: Death,
    calls: Arc<Mutex<Calls>>,
}

impl FakeNode {
    fn new(life: impl FnMut(&[String], usize) -> Life + Send + 'static) -> FakeNode {
        FakeNode {
            life: Box::new(life),
            launch: Launch {
                argv: vec!["new".into()],
                env: vec![],
            },
            exit: None,
            tx: None,
            death: Death::Crash,
            calls: Arc::default(),
        }
    }

    fn end(&mut self, exit: Exit) -> Exit {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(Some(exit));
        }
        self.exit = None;
        exit
    }
}

impl Node for FakeNode {
    async fn start(&mut self) -> Result<Duration, DriverError> {
        let n = {
            let mut c = self.calls.lock().unwrap();
            c.starts.push(self.launch.argv.clone());
            c.starts.len()
        };
        let life = (self.life)(&self.launch.argv, n);
        tokio::time::sleep(Duration::from_millis(50)).await;
        if let Life::Refuses = life {
            return Err(DriverError::ExitedBeforeReady {
                status: "exit code 1".into(),
                log: "node.log".into(),
                tail: "refusing a newer database".into(),
            });
        }
        let (tx, rx) = watch::channel(None);
        if let Life::Dies(after, death) = life {
            self.death = death;
            let tx = tx.clone();
            tokio::spawn(async move {
                tokio::time::sleep(after).await;
                let _ = tx.send(Some(Exit::Signal(9)));
            });
        }
        self.tx = Some(tx);
        self.exit = Some(rx);
        Ok(Duration::from_millis(50))
    }

    async fn stop(&mut self) -> Result<Exit, DriverError> {
        self.calls.lock().unwrap().stops += 1;
        Ok(self.end(Exit::Code(0)))
    }

    async fn kill(&mut self, sig: Signal) -> Result<Exit, DriverError> {
        self.calls.lock().unwrap().kills.push(sig);
        Ok(self.end(Exit::Signal(sig as i32)))
    }

    fn pause(&mut self) -> Result<(), DriverError> {
        Ok(())
    }

    fn resume(&mut self) -> Result<(), DriverError> {
        Ok(())
    }

    fn exited(&self) -> Exited {
        let rx = self.exit.clone();
        Box::pin(async move {
            if let Some(mut rx) = rx {
                if let Ok(e) = rx.wait_for(|e| e.is_some()).await {
                    if let Some(e) = *e {
                        return e;
                    }
                }
            }
            std::future::pending().await
        })
    }

    fn exit(&self) -> Option<Exit> {
        self.exit.as_ref().and_then(|rx| *rx.borrow())
    }

    fn death(&mut self) -> Death {
        self.exit = None;
        self.tx = None;
        self.death
    }

    fn running(&self) -> bool {
        self.exit.is_some() && self.exit().is_none()
    }

    fn pid(&self) -> Option<i32> {
        self.exit.as_ref().map(|_| 4242)
    }

    fn set_memory_limit(&self, bytes: u64) -> Result<String, DriverError> {
        Ok(format!("memory.max read back: {bytes}"))
    }

    fn use_version(&mut self, launch: &Launch) {
        self.launch = launch.clone();
    }

    fn shutdown(&mut self) {
        self.end(Exit::Signal(9));
    }
}

/// Every event, as the console would have it.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<(f64, String)>>>);

impl Sink for Seen {
    fn event(&mut self, _cell: &str, t: f64, e: &Event) {
        self.0
            .lock()
            .unwrap()
            .push((t, format!("{} {}", e.kind(), e.text())));
    }
}

fn phases(yaml: &str) -> Vec<Phase> {
    serde_norway::from_str(yaml).expect("valid phases")
}

struct Run {
    bus: Bus,
    calls: Arc<Mutex<Calls>>,
    seen: Seen,
    result: Result<(), CellError>,
}

/// Runs `yaml`'s phases against `node`, with versions `node` (argv
/// `new`) and `old` (argv `old`); `interrupt_at` sends an interrupt then.
async fn run(mut node: FakeNode, yaml: &str, interrupt_at: Option<Duration>) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let seen = Seen::default();
    let mut bus = Bus::new("fake", tokio::time::Instant::now()).with(seen.clone());
    let (tx, rx) = watch::channel(false);
    if let Some(at) = interrupt_at {
        tokio::spawn(async move {
            tokio::time::sleep(at).await;
            let _ = tx.send(true);
        });
    } else {
        std::mem::forget(tx);
    }
    let launch = |a: &str| Launch {
        argv: vec![a.into()],
        env: vec![],
    };
    let ctx = Context {
        dir: dir.path().to_path_buf(),
        vars: Default::default(),
        run_id: "test".into(),
        seed: 7,
        scale: 1.0,
        versions: [
            ("node".into(), launch("new")),
            ("old".into(), launch("old")),
        ]
        .into(),
        readback_after_restart: true,
    };
    let target = Target {
        pid: Arc::new(AtomicI32::new(0)),
        segment: Arc::new(AtomicU32::new(0)),
        cgroup: None,
        data_dir: None,
    };
    let calls = node.calls.clone();
    let mut cell = Cell::new(&mut node, None, target, &mut bus, String::new(), rx, ctx);
    let mut result = cell.first_start().await;
    if result.is_ok() {
        result = cell.run_phases(&phases(yaml)).await;
    }
    cell.finish().await;
    Run {
        bus,
        calls,
        seen,
        result,
    }
}

#[tokio::test(start_paused = true)]
async fn a_node_that_keeps_dying_ends_the_cell_at_the_crash_loop_limit() {
    let node = FakeNode::new(|_, _| Life::Dies(Duration::from_secs(1), Death::Crash));
    let r = run(node, "- run: 10h", None).await;
    assert!(
        matches!(r.result, Err(CellError::CrashLoop(n)) if n == MAX_UNEXPECTED_RESTARTS),
        "{:?}",
        r.result
    );
    let restarts = &r.bus.recorder.restarts;
    assert_eq!(restarts.len(), MAX_UNEXPECTED_RESTARTS);
    assert!(restarts.iter().all(|r| r.reason == Cause::Crash));
    // Fifty deaths a second apart, each restarted: not ten hours.
    let last = r.seen.0.lock().unwrap().last().unwrap().0;
    assert!(last < 120.0, "{last}");
}

#[tokio::test(start_paused = true)]
async fn a_death_is_seen_when_it_happens_and_classified() {
    // The first incarnation is OOM-killed after 3 s, the second crashes
    // after 5 s, the third lives.
    let node = FakeNode::new(|_, n| match n {
        1 => Life::Dies(Duration::from_secs(3), Death::Oom),
        2 => Life::Dies(Duration::from_secs(5), Death::Crash),
        _ => Life::Long,
    });
    let r = run(node, "- run: 20s", None).await;
    r.result.unwrap();
    let causes: Vec<Cause> = r.bus.recorder.restarts.iter().map(|r| r.reason).collect();
    assert_eq!(causes, [Cause::Oom, Cause::Crash]);
    // Seen at the moment of the death (no poll interval): the first start
    // took 50 ms, so the OOM kill is at 3.05 s.
    let at = r.bus.recorder.restarts[0].at_s;
    assert!((at - 3.05).abs() < 0.001, "{at}");
    let seen = r.seen.0.lock().unwrap();
    assert!(seen.iter().any(|(_, l)| l == "oom-killed signal SIGKILL"));
    assert!(seen.iter().any(|(_, l)| l == "crashed signal SIGKILL"));
}

#[tokio::test(start_paused = true)]
async fn a_refused_downgrade_is_recorded_and_rolled_forward() {
    let node = FakeNode::new(|argv, _| {
        if argv[0] == "old" {
            Life::Refuses
        } else {
            Life::Long
        }
    });
    let r = run(node, "- downgrade: old\n- run: 5s", None).await;
    r.result.unwrap();
    let up = &r.bus.recorder.upgrades;
    assert_eq!(up.len(), 1);
    assert_eq!(up[0].kind, Swap::Downgrade);
    assert_eq!(up[0].outcome, SwapOutcome::Refused);
    assert!(up[0]
        .reason
        .as_deref()
        .unwrap()
        .contains("refusing a newer database"));
    // The new version started again and ran the rest of the phases.
    let starts = r.calls.lock().unwrap().starts.clone();
    assert_eq!(starts, [vec!["new"], vec!["old"], vec!["new"]]);
    assert_eq!(r.bus.recorder.restarts[0].reason, Cause::Downgrade);
    assert_eq!(r.bus.recorder.phases.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_refused_upgrade_ends_the_cell() {
    let node = FakeNode::new(|argv, _| {
        if argv[0] == "old" {
            Life::Refuses
        } else {
            Life::Long
        }
    });
    let r = run(node, "- upgrade: old\n- run: 5s", None).await;
    assert!(
        matches!(r.result, Err(CellError::Driver(_))),
        "{:?}",
        r.result
    );
    assert_eq!(r.bus.recorder.phases.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_chaos_schedule_is_applied_as_planned() {
    let yaml = "- chaos: { during: 10m, every: 20s..1m, actions: [kill, restart], seed: 11 }";
    let node = FakeNode::new(|_, _| Life::Long);
    let r = run(node, yaml, None).await;
    r.result.unwrap();
    let Phase::Chaos(spec) = &phases(yaml)[0] else {
        unreachable!()
    };
    let plan = schedule::plan(spec, 11, 1.0);
    assert!(plan.len() >= 10, "{}", plan.len());
    let done = &r.bus.recorder.chaos;
    assert_eq!(done.len(), plan.len());
    for (p, d) in plan.iter().zip(done) {
        assert_eq!((d.seed, d.action), (11, p.action));
        assert!((d.at_s - p.at.as_secs_f64()).abs() < 1e-9);
    }
    let kills = plan.iter().filter(|p| p.action == Action::Kill).count();
    let restarts = plan.len() - kills;
    let calls = r.calls.lock().unwrap();
    assert_eq!(calls.kills.len(), kills);
    // Each restart action stops once; the end of the phases stops once.
    assert_eq!(calls.stops, restarts + 1);
    let causes = &r.bus.recorder.restarts;
    assert_eq!(causes.len(), plan.len());
    assert!(causes.iter().all(|r| r.reason == Cause::Chaos));
}

#[tokio::test(start_paused = true)]
async fn an_interrupt_stops_a_long_phase_at_once() {
    let node = FakeNode::new(|_, _| Life::Long);
    let r = run(
        node,
        "- run: 2h\n- kill: SIGKILL",
        Some(Duration::from_secs(30)),
    )
    .await;
    assert!(
        matches!(r.result, Err(CellError::Interrupted)),
        "{:?}",
        r.result
    );
    let phase = &r.bus.recorder.phases[0];
    assert!((phase.end_s - 30.0).abs() < 0.5, "{}", phase.end_s);
    assert!(r.calls.lock().unwrap().kills.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_live_limit_is_read_back_and_said() {
    let node = FakeNode::new(|_, _| Life::Long);
    let r = run(node, "- limit: 64MiB", None).await;
    r.result.unwrap();
    assert!(
        r.bus.recorder.phases[0]
            .outcome
            .contains("read back: 67108864"),
        "{}",
        r.bus.recorder.phases[0].outcome
    );
}
