//! The phase runner's riskiest logic against a fake node, in paused time: the
//! crash-loop limit, deaths seen through the exit future and classified,
//! a refused downgrade or upgrade and the version before started again, a
//! chaos schedule applied as planned, and an interrupt; and, with a fake
//! RESP node on loopback, an OOM kill in the middle of a read-back. (The
//! same logic runs end to end against real processes in tests/it/run.rs.)

use std::sync::atomic::{AtomicI32, AtomicU32};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::sync::watch;

use super::bus::Bus;
use super::event::{Event, Sink};
use super::*;
use crate::driver::{Death, DriverError, Exit, Exited, Launch, Node};
use crate::model::{Cause, Swap, SwapOutcome};
use crate::suite::Phase;

/// How an incarnation of the fake node lives.
#[derive(Debug, Clone)]
enum Life {
    /// Until soak stops or kills it.
    Long,
    /// Dies on its own after this long, as an OOM kill or a crash.
    Dies(Duration, Death),
    /// Dies the moment it is told to.
    DiesWhen(Arc<tokio::sync::Notify>, Death),
    /// Never gets ready: the start fails.
    Refuses,
    /// OOM-killed before it gets ready.
    OomStarting,
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
                ..Default::default()
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
        if let Life::Refuses | Life::OomStarting = life {
            let oom = matches!(life, Life::OomStarting);
            return Err(DriverError::ExitedBeforeReady {
                status: if oom { "signal 9" } else { "exit code 1" }.into(),
                oom,
                log: "node.log".into(),
                tail: "refusing a newer database".into(),
            });
        }
        let (tx, rx) = watch::channel(None);
        match life {
            Life::Dies(after, death) => {
                self.death = death;
                let tx = tx.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(after).await;
                    let _ = tx.send(Some(Exit::Signal(9)));
                });
            }
            Life::DiesWhen(told, death) => {
                self.death = death;
                let tx = tx.clone();
                tokio::spawn(async move {
                    told.notified().await;
                    let _ = tx.send(Some(Exit::Signal(9)));
                });
            }
            _ => {}
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

    async fn pause(&mut self) -> Result<(), DriverError> {
        Ok(())
    }

    async fn resume(&mut self) -> Result<(), DriverError> {
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

    async fn set_memory_limit(&mut self, bytes: u64) -> Result<String, DriverError> {
        Ok(format!("memory.max read back: {bytes}"))
    }

    fn use_version(&mut self, launch: &Launch) {
        self.launch = launch.clone();
    }

    async fn shutdown(&mut self) {
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

impl Seen {
    /// How many events told of `text`.
    fn count(&self, text: &str) -> usize {
        let seen = self.0.lock().unwrap();
        seen.iter().filter(|(_, e)| e.contains(text)).count()
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
async fn run(node: FakeNode, yaml: &str, interrupt_at: Option<Duration>) -> Run {
    run_with(node, yaml, interrupt_at, None, String::new()).await
}

/// As [`run`], with a workload whose ledger is read back through
/// `verify_target`.
async fn run_with(
    mut node: FakeNode,
    yaml: &str,
    interrupt_at: Option<Duration>,
    load: Option<&mut crate::workload::Load>,
    verify_target: String,
) -> Run {
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
        ..Default::default()
    };
    let ctx = Context {
        faults: crate::faults::Faults::default(),
        unsynced_tail_allowed: false,
        services: Default::default(),
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
        pid_cgroup: false,
        engine_memory: None,
        members: vec![],
    };
    let calls = node.calls.clone();
    let verify: Option<Arc<dyn crate::protocol::Protocol>> =
        Some(Arc::new(crate::protocol::resp::Spec {
            target: verify_target,
        }));
    let mut cell = Cell::new(&mut node, load, target, &mut bus, verify, rx, ctx);
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

/// Killed for memory again while it restarts after an OOM kill (the
/// incident's cache refilling as it replays): the same outage, one
/// restart from the first death, not a start that failed.
#[tokio::test(start_paused = true)]
async fn an_oom_kill_while_restarting_is_the_same_outage_not_a_failed_start() {
    let node = FakeNode::new(|_, n| match n {
        1 => Life::Dies(Duration::from_secs(3), Death::Oom),
        2 => Life::OomStarting,
        _ => Life::Long,
    });
    let r = run(node, "- run: 10s", None).await;
    assert!(r.result.is_ok(), "{:?}", r.result);
    assert_eq!(r.calls.lock().unwrap().starts.len(), 3);
    let restarts = &r.bus.recorder.restarts;
    assert_eq!(restarts.len(), 1, "{restarts:?}");
    assert_eq!(restarts[0].reason, Cause::Oom);
    // Down since the first kill, at 3 s (and the first start's 50 ms).
    assert!((restarts[0].at_s - 3.05).abs() < 0.01, "{restarts:?}");
    assert_eq!(r.seen.count("oom-killed"), 2, "{:?}", r.seen.0);
}

/// Killed for memory while it starts after a graceful restart: a death
/// in the planned restart's outage, not a start that failed.
#[tokio::test(start_paused = true)]
async fn an_oom_kill_while_starting_after_a_graceful_restart_is_a_death() {
    let node = FakeNode::new(|_, n| match n {
        2 => Life::OomStarting,
        _ => Life::Long,
    });
    let r = run(node, "[run: 1s, restart, run: 1s]", None).await;
    assert!(r.result.is_ok(), "{:?}", r.result);
    assert_eq!(r.calls.lock().unwrap().starts.len(), 3);
    let restarts = &r.bus.recorder.restarts;
    assert_eq!(restarts.len(), 1, "{restarts:?}");
    assert_eq!(restarts[0].reason, Cause::Restart);
    assert_eq!(r.seen.count("oom-killed"), 1, "{:?}", r.seen.0);
}

/// A node that is OOM-killed every time it starts again is a crash loop,
/// bounded like any other.
#[tokio::test(start_paused = true)]
async fn a_node_oom_killed_at_every_restart_ends_at_the_crash_loop_limit() {
    let node = FakeNode::new(|_, n| match n {
        1 => Life::Dies(Duration::from_secs(3), Death::Oom),
        _ => Life::OomStarting,
    });
    let r = run(node, "- run: 10s", None).await;
    assert!(
        matches!(r.result, Err(CellError::CrashLoop(n)) if n == MAX_UNEXPECTED_RESTARTS),
        "{:?}",
        r.result
    );
    // The first start, then one start again per death.
    assert_eq!(
        r.calls.lock().unwrap().starts.len(),
        MAX_UNEXPECTED_RESTARTS + 1
    );
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

/// A downgrade refused is often what the suite expects, an upgrade
/// refused is its finding (the check is in `checks.rs`); both are recorded
/// with the node's words, never the environment's error, and the version
/// before runs the phases after.
#[tokio::test(start_paused = true)]
async fn a_refused_swap_is_recorded_and_the_version_before_runs_on() {
    for kind in [Swap::Downgrade, Swap::Upgrade] {
        let node = FakeNode::new(|argv, _| {
            if argv[0] == "old" {
                Life::Refuses
            } else {
                Life::Long
            }
        });
        let r = run(node, &format!("- {kind}: old\n- run: 5s"), None).await;
        r.result.unwrap();
        let up = &r.bus.recorder.upgrades;
        assert_eq!(up.len(), 1);
        assert_eq!((up[0].kind, up[0].outcome), (kind, SwapOutcome::Refused));
        assert!(up[0]
            .reason
            .as_deref()
            .unwrap()
            .contains("refusing a newer database"));
        let starts = r.calls.lock().unwrap().starts.clone();
        assert_eq!(starts, [vec!["new"], vec!["old"], vec!["new"]]);
        assert_eq!(r.bus.recorder.restarts[0].reason, kind.cause());
        assert_eq!(r.bus.recorder.phases.len(), 2);
    }
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
        assert_eq!((d.seed, d.action), (11, p.action.kind()));
        assert!((d.at_s - p.at.as_secs_f64()).abs() < 1e-9);
    }
    let kills = plan
        .iter()
        .filter(|p| p.action == ChaosAction::Kill)
        .count();
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

/// A RESP load of `keys` keys whose every key has one acknowledged write,
/// for a read-back to judge.
fn acked_load(keys: usize) -> crate::workload::Load {
    let load = crate::workload::Load::new(crate::workload::LoadConfig {
        protocol: crate::protocol::Spec::Resp(crate::protocol::resp::Spec {
            target: String::new(),
        }),
        keys,
        value_size: (16, 64),
        compressibility: None,
        set: 1.0,
        get: 0.0,
        del: 0.0,
        mget: 0.0,
        mget_keys: 1,
        rate: Some(1.0),
        pipeline: 1,
        connections: 1,
        timeout: Duration::from_secs(5),
        seed: 3,
        distribution: crate::workload::dist::Distribution::Uniform,
        members: vec![],
        rotate: false,
    });
    for k in 0..keys {
        let v = load.ledger.next_set_version(k);
        load.ledger.ack(k, v);
    }
    load
}

/// A node that answers MGETs of the ledger's keys with what the ledger
/// holds, except on its first connection: there it is OOM-killed as the
/// read-back's first request arrives (the node is told to die, then the
/// connection drops), as a node whose caches fill under a read-back is.
async fn dies_under_first_read_back(
    ledger: Arc<crate::oracle::Ledger>,
    die: Arc<tokio::sync::Notify>,
) -> String {
    dies_under_read_backs(ledger, die, |n| n == 1).await
}

/// The same node, killed by the read-backs whose connection's number
/// (from 1) `kills` says.
async fn dies_under_read_backs(
    ledger: Arc<crate::oracle::Ledger>,
    die: Arc<tokio::sync::Notify>,
    kills: fn(usize) -> bool,
) -> String {
    use crate::net::resp;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let mut n = 0;
        while let Ok((mut s, _)) = listener.accept().await {
            let mut buf = vec![];
            let mut chunk = [0u8; 65536];
            n += 1;
            if kills(n) {
                let _ = s.read(&mut chunk).await;
                die.notify_one();
                continue;
            }
            let ledger = ledger.clone();
            tokio::spawn(async move {
                loop {
                    // A request is an array of bulk strings: a reply's
                    // shape too, so soak's own parser reads it.
                    match resp::parse(&buf) {
                        Ok(Some((resp::Reply::Array(Some(args)), used))) => {
                            let args: Vec<Vec<u8>> =
                                args.iter().map(|a| a.unwrap().to_vec()).collect();
                            buf.drain(..used);
                            let mut out = vec![];
                            resp::array_header(&mut out, args.len() - 1);
                            for name in &args[1..] {
                                let k = crate::oracle::Ledger::parse_key(name).unwrap();
                                let (v, _) = ledger.snapshot(k);
                                resp::bulk_arg(&mut out, &ledger.value(k, v));
                            }
                            if s.write_all(&out).await.is_err() {
                                return;
                            }
                        }
                        Ok(None) => match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        },
                        _ => return,
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test]
async fn an_oom_kill_during_a_read_back_is_a_restart_and_the_read_back_starts_again() {
    let die = Arc::new(tokio::sync::Notify::new());
    let told = die.clone();
    let node = FakeNode::new(move |_, n| match n {
        1 => Life::DiesWhen(told.clone(), Death::Oom),
        _ => Life::Long,
    });
    let mut load = acked_load(2000);
    let ledger = load.ledger.clone();
    let target = dies_under_first_read_back(ledger, die).await;
    let r = run_with(node, "- verify", None, Some(&mut load), target).await;
    r.result.unwrap();
    // The death is the cell's one restart, put down to the kernel.
    let restarts = &r.bus.recorder.restarts;
    assert_eq!(restarts.len(), 1, "{restarts:?}");
    assert_eq!(restarts[0].reason, Cause::Oom);
    // The read-back began again on the restarted node and read every key.
    assert_eq!(
        r.seen.count("the node died during the read-back"),
        1,
        "{:?}",
        r.seen.0
    );
    // Twice every key: the restart's own read-back, then the verify's.
    assert!(restarts[0].readback_s.is_some(), "{restarts:?}");
    assert_eq!(restarts[0].lost, 0);
    let i = r.bus.recorder.integrity;
    assert_eq!((i.verified, i.lost, i.corrupted), (4000, 0, 0), "{i:?}");
}

/// A node OOM-killed by every read of its data (glibc's arenas under a
/// JVM's reads of RocksDB, the seed's Teku): each death under a read-back
/// is a restart, and the fifth in a row ends the cell as a node that did
/// not come back to be judged, not after the crash loop's fifty.
#[tokio::test]
async fn a_node_killed_by_every_read_back_ends_the_cell_after_five() {
    use tokio::io::AsyncReadExt;
    let die = Arc::new(tokio::sync::Notify::new());
    let told = die.clone();
    let node = FakeNode::new(move |_, _| Life::DiesWhen(told.clone(), Death::Oom));
    let mut load = acked_load(500);
    // Every read-back's one request kills the node, which drops it.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let _ = s.read(&mut [0u8; 65536]).await;
            die.notify_one();
        }
    });
    let r = run_with(node, "[verify, run: 1s]", None, Some(&mut load), target).await;
    let Err(CellError::NotRecovered { after, error, .. }) = &r.result else {
        panic!("{:?}", r.result);
    };
    assert_eq!(*after, Cause::Oom);
    assert!(
        error.contains(&format!(
            "died under {MAX_READBACK_DEATHS} read-backs in a row"
        )),
        "{error}"
    );
    // The verify's read-back and four after restarts, each a death.
    assert_eq!(r.calls.lock().unwrap().starts.len(), MAX_READBACK_DEATHS);
    assert_eq!(
        r.seen.count("oom-killed"),
        MAX_READBACK_DEATHS,
        "{:?}",
        r.seen.0
    );
    assert_eq!(r.seen.count("not-recovered"), 1, "{:?}", r.seen.0);
}

/// A node that every `verify` kills while the read-back after its restart
/// passes (glibc's Teku: the restart's read-back fits, the next full read
/// does not): the deaths under the verify count in a row all the same,
/// and the fifth ends the cell, not the crash loop's fiftieth.
#[tokio::test]
async fn a_verify_that_kills_the_node_each_time_ends_after_five_though_restarts_read_back() {
    let die = Arc::new(tokio::sync::Notify::new());
    let told = die.clone();
    let node = FakeNode::new(move |_, _| Life::DiesWhen(told.clone(), Death::Oom));
    let mut load = acked_load(500);
    let ledger = load.ledger.clone();
    // Odd connections are the verify's (killed), even ones the restart's.
    let target = dies_under_read_backs(ledger, die, |n| n % 2 == 1).await;
    let r = run_with(node, "- verify", None, Some(&mut load), target).await;
    let Err(CellError::NotRecovered { error, .. }) = &r.result else {
        panic!("{:?}", r.result);
    };
    assert!(error.contains("read-backs in a row"), "{error}");
    assert_eq!(
        r.seen.count("oom-killed"),
        MAX_READBACK_DEATHS,
        "{:?}",
        r.seen.0
    );
}
