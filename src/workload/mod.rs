//! The load: open-model rate control and latency histograms, over any
//! protocol (`crate::protocol`), its writes and reads judged by the oracle
//! (`crate::oracle`) as their outcomes come in.
//!
//! Operations are scheduled by the clock (`rate` per second across all
//! connections) and each one's latency is measured from the moment it was
//! *scheduled*, not sent, so a node that stalls shows up as latency rather
//! than as a load generator that politely slows down with it (coordinated
//! omission). Each connection owns the keys `k` with `k % connections ==
//! its index`, so that the node answers the writes of one key in order.

pub mod dist;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

pub use crate::oracle::Ledger;
use crate::oracle::WriteKind;
use crate::protocol::{Outcome, Protocol, Request, Session, SessionError, Value};

#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// How requests reach the node.
    pub protocol: crate::protocol::Spec,
    pub keys: usize,
    /// Smallest and largest value, inclusive.
    pub value_size: (usize, usize),
    /// The share of each value a codec can remove (`None`: letters).
    pub compressibility: Option<f64>,
    pub set: f64,
    pub get: f64,
    pub del: f64,
    pub mget: f64,
    pub mget_keys: usize,
    /// Operations per second across all connections; `None` is a closed
    /// loop in which each connection keeps `pipeline` requests in flight.
    pub rate: Option<f64>,
    pub pipeline: usize,
    pub connections: usize,
    pub timeout: Duration,
    pub seed: u64,
    pub distribution: dist::Distribution,
    /// A cluster's members, one protocol each (their own targets); empty
    /// for one node. Connection `i` talks to member `i mod N`.
    pub members: Vec<crate::protocol::Spec>,
    /// With members: a connection whose session breaks moves on to the
    /// next member (a client with a list of endpoints), instead of
    /// staying with its own.
    pub rotate: bool,
}

/// Counters and latencies of the load, summed over connections.
#[derive(Debug, Clone)]
pub struct LoadStats {
    pub sets_ok: u64,
    pub gets_ok: u64,
    pub dels_ok: u64,
    pub mgets_ok: u64,
    /// Requests that failed (errors, timeouts, connection loss).
    pub errors: u64,
    /// Of the failed writes, those the node said definitely did not happen.
    pub not_done: u64,
    /// Client adapters that exited and were started again (their requests
    /// in flight count as errors; the node is not blamed).
    pub client_restarts: u64,
    /// Scheduled operations not sent because the node was down.
    pub unavailable: u64,
    /// GETs that returned a value no write of that key produced.
    pub corrupted_reads: u64,
    /// Keys read during the load (GET, each key of an MGET) missing or
    /// older than the newest write acknowledged before the read was sent,
    /// with no write in flight to explain it.
    pub lost_reads: u64,
    /// Keys read during the load whose acknowledged DEL came back.
    pub resurrected_reads: u64,
    /// Keys read during the load showing a write the node said failed.
    pub aborted_reads: u64,
    /// Keys read during the load that showed a write in flight (allowed).
    pub in_doubt_reads: u64,
    /// Latency from scheduled start to reply, in microseconds (from the
    /// send, in a closed loop).
    pub latency_us: Histogram<u64>,
    /// Seconds the load was applied.
    pub active_s: f64,
    /// SETs acknowledged by `load` phases (not part of the rate-controlled load).
    pub fill_sets: u64,
    /// The first error reply of a connection since its last flush (moved
    /// to the load's list of the node's error replies).
    error_reply: Option<String>,
}

/// Microseconds, three significant digits, growing to the largest value
/// recorded: a connection's counters are renewed every few milliseconds,
/// and a histogram made for an hour's latency up front (a third of a
/// megabyte, zeroed) cost the HTTP load more CPU than its JSON parsing.
fn histogram() -> Histogram<u64> {
    Histogram::new(3).expect("valid precision")
}

impl Default for LoadStats {
    fn default() -> Self {
        LoadStats {
            sets_ok: 0,
            gets_ok: 0,
            dels_ok: 0,
            mgets_ok: 0,
            errors: 0,
            not_done: 0,
            client_restarts: 0,
            unavailable: 0,
            corrupted_reads: 0,
            lost_reads: 0,
            resurrected_reads: 0,
            aborted_reads: 0,
            in_doubt_reads: 0,
            latency_us: histogram(),
            active_s: 0.0,
            fill_sets: 0,
            error_reply: None,
        }
    }
}

impl LoadStats {
    /// What happened between `earlier` (a snapshot of the same totals) and now.
    pub fn since(&self, earlier: &LoadStats) -> LoadStats {
        let mut latency_us = self.latency_us.clone();
        let _ = latency_us.subtract(&earlier.latency_us);
        LoadStats {
            sets_ok: self.sets_ok - earlier.sets_ok,
            gets_ok: self.gets_ok - earlier.gets_ok,
            dels_ok: self.dels_ok - earlier.dels_ok,
            mgets_ok: self.mgets_ok - earlier.mgets_ok,
            errors: self.errors - earlier.errors,
            not_done: self.not_done - earlier.not_done,
            client_restarts: self.client_restarts - earlier.client_restarts,
            unavailable: self.unavailable - earlier.unavailable,
            corrupted_reads: self.corrupted_reads - earlier.corrupted_reads,
            lost_reads: self.lost_reads - earlier.lost_reads,
            resurrected_reads: self.resurrected_reads - earlier.resurrected_reads,
            aborted_reads: self.aborted_reads - earlier.aborted_reads,
            in_doubt_reads: self.in_doubt_reads - earlier.in_doubt_reads,
            latency_us,
            active_s: (self.active_s - earlier.active_s).max(0.0),
            fill_sets: self.fill_sets - earlier.fill_sets,
            error_reply: None,
        }
    }

    /// Adds `other`'s counts and latencies to these.
    fn add(&mut self, other: &LoadStats) {
        self.sets_ok += other.sets_ok;
        self.gets_ok += other.gets_ok;
        self.dels_ok += other.dels_ok;
        self.mgets_ok += other.mgets_ok;
        self.errors += other.errors;
        self.not_done += other.not_done;
        self.client_restarts += other.client_restarts;
        self.unavailable += other.unavailable;
        self.corrupted_reads += other.corrupted_reads;
        self.lost_reads += other.lost_reads;
        self.resurrected_reads += other.resurrected_reads;
        self.aborted_reads += other.aborted_reads;
        self.in_doubt_reads += other.in_doubt_reads;
        let _ = self.latency_us.add(&other.latency_us);
        self.active_s += other.active_s;
        self.fill_sets += other.fill_sets;
    }

    fn is_empty(&self) -> bool {
        self.ops_ok() + self.errors + self.unavailable + self.fill_sets == 0
    }

    pub fn acknowledged_writes(&self) -> u64 {
        self.sets_ok + self.dels_ok + self.fill_sets
    }

    pub fn ops_ok(&self) -> u64 {
        self.sets_ok + self.gets_ok + self.dels_ok + self.mgets_ok
    }

    /// Acknowledged SETs and DELs of the rate-controlled load.
    pub fn writes(&self) -> u64 {
        self.sets_ok + self.dels_ok
    }

    /// GETs and MGETs answered (an MGET counts once).
    pub fn reads(&self) -> u64 {
        self.gets_ok + self.mgets_ok
    }

    /// Acknowledged operations per second of rate-controlled load.
    pub fn ops_per_s(&self) -> f64 {
        self.per_s(self.ops_ok())
    }

    pub fn per_s(&self, n: u64) -> f64 {
        if self.active_s > 0.0 {
            n as f64 / self.active_s
        } else {
            0.0
        }
    }
}

impl LoadStats {
    /// The load as `summary.json` has it.
    pub fn summary(&self) -> crate::model::LoadSummary {
        crate::model::LoadSummary {
            active_s: self.active_s,
            sets: self.sets_ok,
            gets: self.gets_ok,
            dels: self.dels_ok,
            mgets: self.mgets_ok,
            fill_sets: self.fill_sets,
            errors: self.errors,
            not_done: self.not_done,
            client_restarts: self.client_restarts,
            unavailable: self.unavailable,
            corrupted_reads: self.corrupted_reads,
            ops_per_s: self.ops_per_s(),
            writes_per_s: self.per_s(self.writes()),
            reads_per_s: self.per_s(self.reads()),
            latency_us: latency(&self.latency_us),
        }
    }
}

/// The percentiles of a histogram; `None` when it is empty.
pub fn latency(h: &Histogram<u64>) -> Option<crate::model::Latency> {
    (!h.is_empty()).then(|| crate::model::Latency {
        p50: h.value_at_quantile(0.5),
        p90: h.value_at_quantile(0.9),
        p99: h.value_at_quantile(0.99),
        p999: h.value_at_quantile(0.999),
        max: h.max(),
    })
}

/// How long the load's connections may take to open: a second, so that a
/// node that is down is found out quickly.
fn load_timeouts(cfg: &LoadConfig) -> crate::protocol::Timeouts {
    crate::protocol::Timeouts {
        connect: Duration::from_secs(1),
        request: cfg.timeout,
    }
}

/// A handle on the load's totals for live progress.
#[derive(Clone)]
pub struct Live(Arc<Mutex<Shared>>);

impl Live {
    /// Acknowledged operations so far, and the p99 latency (µs) so far.
    pub fn now(&self) -> (u64, Option<u64>) {
        let s = self.0.lock().expect("stats lock");
        let h = &s.total.latency_us;
        (
            s.total.ops_ok(),
            (!h.is_empty()).then(|| h.value_at_quantile(0.99)),
        )
    }
}

/// The totals of every connection, and the same since the last interval.
#[derive(Default)]
struct Shared {
    total: LoadStats,
    interval: LoadStats,
    /// The first write a read during the load found lost, since it was
    /// last taken ([`Load::take_first_lost`]).
    first_lost: Option<crate::model::LostWrite>,
    /// The node's distinct error replies (at most [`ERROR_REPLIES`]), each
    /// with when it first came, in seconds since the load's origin.
    error_replies: Vec<(f64, String)>,
    /// The load of every window the checks asked for, as they closed.
    windows: Vec<crate::model::WindowLoad>,
    /// Each interval's writes and failures ([`Load::served`]).
    served: Vec<Served>,
}

/// An interval of the load, as `latency.csv` has it: when it ended (seconds
/// since the origin), the writes acknowledged in it and the requests that
/// failed. Kept in memory (24 bytes an interval: 2 MiB for a day at 1 s),
/// so that the cell's result is assembled from what the run measured, not
/// from files it wrote.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Served {
    pub t: f64,
    pub writes: u64,
    pub errors: u64,
}

/// The load of the windows of one length, as intervals come in.
struct Windows {
    length: f64,
    /// The start of the window open now, and its load so far.
    open: Option<(f64, LoadStats)>,
}

impl Windows {
    /// Adds an interval that ended at `t` (seconds since the origin) and
    /// lasted `span`; returns the window it closed, if any.
    fn add(&mut self, t: f64, span: f64, s: &LoadStats) -> Option<crate::model::WindowLoad> {
        // The window an interval belongs to is the one its middle is in.
        let start = ((t - span / 2.0).max(0.0) / self.length).floor() * self.length;
        let closed = match &self.open {
            Some((at, _)) if *at < start => self.close(false),
            _ => None,
        };
        let (_, acc) = self
            .open
            .get_or_insert_with(|| (start, LoadStats::default()));
        acc.add(s);
        acc.active_s += span;
        closed
    }

    /// The open window, when it covered enough (all of it, or at the end
    /// of the load, at least half).
    fn close(&mut self, last: bool) -> Option<crate::model::WindowLoad> {
        let (start, acc) = self.open.take()?;
        (!last || acc.active_s >= self.length / 2.0).then(|| crate::model::WindowLoad {
            length_s: self.length,
            start_s: start,
            end_s: start + self.length,
            load: acc.summary(),
        })
    }
}

/// Distinct error replies kept: what a node says when it refuses writes
/// (a full disk, I/O errors), not a log of every refusal.
const ERROR_REPLIES: usize = 8;

/// The thread the load runs on: one single-threaded runtime, so that the
/// load takes at most one core from the machine it shares with the node
/// and its connections never wait on each other's threads (a
/// multi-threaded runtime cost a quarter of the throughput at pipeline 1
/// in bench/loadgen.rs).
struct LoadThread {
    handle: tokio::runtime::Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LoadThread {
    fn start() -> LoadThread {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime for the load thread");
        let handle = rt.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("soak-load".into())
            .spawn(move || {
                let _ = rt.block_on(stopped);
            })
            .expect("the load thread starts");
        LoadThread {
            handle,
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for LoadThread {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The load engine: connections that run between `resume` and `pause`,
/// and a gate that holds them while the node is known to be down.
pub struct Load {
    pub cfg: LoadConfig,
    pub protocol: Arc<dyn Protocol>,
    /// A cluster's members' protocols (empty for one node).
    pub members: Arc<Vec<Arc<dyn Protocol>>>,
    pub ledger: Arc<Ledger>,
    /// Where every request is recorded (`history.bin.gz`), when it is.
    history: Option<Arc<crate::history::record::Recorder>>,
    /// Why a session could not go on (an adapter that does not speak the
    /// protocol): the cell stops.
    fatal: Arc<watch::Sender<Option<String>>>,
    load: LoadThread,
    node_up: watch::Sender<bool>,
    shared: Arc<Mutex<Shared>>,
    fence: watch::Sender<u64>,
    passed: Arc<watch::Sender<Vec<u64>>>,
    running: Option<(watch::Sender<bool>, Vec<JoinHandle<()>>, Instant)>,
    /// Times the load was resumed: each resumption draws new keys (the
    /// same seed drew the same ones after every restart, so a load paused
    /// for each read-back wrote the same few hundred keys all run long).
    resumed: u64,
    log: Option<(watch::Sender<bool>, JoinHandle<std::io::Result<()>>)>,
}

impl Load {
    pub fn new(cfg: LoadConfig) -> Load {
        let ledger = Arc::new(
            Ledger::new(cfg.keys, cfg.value_size, cfg.set, cfg.del, cfg.seed)
                .with_compressibility(cfg.compressibility),
        );
        let connections = cfg.connections;
        Load {
            protocol: cfg.protocol.open(),
            members: Arc::new(cfg.members.iter().map(|s| s.open()).collect()),
            history: None,
            cfg,
            ledger,
            fatal: Arc::new(watch::channel(None).0),
            load: LoadThread::start(),
            node_up: watch::channel(true).0,
            shared: Default::default(),
            fence: watch::channel(0).0,
            passed: Arc::new(watch::channel(vec![0; connections]).0),
            running: None,
            resumed: 0,
            log: None,
        }
    }

    /// Acknowledgement times in the ledger count from `origin` (the cell's
    /// start); call before the load runs.
    pub fn set_origin(&mut self, origin: std::time::Instant) {
        if let Some(l) = Arc::get_mut(&mut self.ledger) {
            l.set_origin(origin);
        }
    }

    /// Records every request from now on into `path` (times from
    /// `origin`, the cell's start); call before the load runs.
    pub fn record_history(
        &mut self,
        path: &std::path::Path,
        origin: std::time::Instant,
    ) -> std::io::Result<()> {
        self.history = Some(crate::history::record::Recorder::start(path, origin)?);
        Ok(())
    }

    /// Ends the history's file (the load stopped); what it holds.
    pub fn finish_history(&mut self) -> Option<crate::history::record::Written> {
        let rec = self.history.take()?;
        // The connections' copies are gone once the load is paused.
        Arc::into_inner(rec).map(|r| r.finish())
    }

    /// The history requests are recorded into, if they are.
    pub fn history(&self) -> Option<&crate::history::record::Recorder> {
        self.history.as_deref()
    }

    /// The protocol of member `i` (0-based), or the node's.
    pub fn protocol_of(&self, i: usize) -> Arc<dyn Protocol> {
        self.members
            .get(i)
            .cloned()
            .unwrap_or_else(|| self.protocol.clone())
    }

    /// Tells the connections whether the node is up (they hold while not).
    pub fn set_node_up(&self, up: bool) {
        self.node_up.send_replace(up);
    }

    pub fn is_running(&self) -> bool {
        self.running.is_some()
    }

    /// Starts the connections, if they are not running.
    pub fn resume(&mut self) {
        if self.running.is_some() {
            return;
        }
        let (stop_tx, stop_rx) = watch::channel(false);
        self.resumed += 1;
        let handles = (0..self.cfg.connections)
            .map(|i| {
                let conn = Conn {
                    round: self.resumed,
                    index: i,
                    cfg: self.cfg.clone(),
                    protocol: self.protocol.clone(),
                    fatal: self.fatal.clone(),
                    ledger: self.ledger.clone(),
                    node_up: self.node_up.subscribe(),
                    stop: stop_rx.clone(),
                    shared: self.shared.clone(),
                    fence: self.fence.subscribe(),
                    passed: self.passed.clone(),
                    settled: AtomicU64::new(0),
                    members: self.members.clone(),
                    opened: AtomicU64::new(0),
                    history: self
                        .history
                        .as_ref()
                        .map(|r| (r.clone(), Mutex::new(r.buf()))),
                };
                self.load.handle.spawn(conn.run())
            })
            .collect();
        self.running = Some((stop_tx, handles, Instant::now()));
    }

    /// Stops scheduling and waits for the requests in flight to settle.
    pub async fn pause(&mut self) {
        let Some((stop, handles, started)) = self.running.take() else {
            return;
        };
        let _ = stop.send(true);
        for h in handles {
            let _ = h.await;
        }
        self.shared.lock().expect("stats lock").total.active_s += started.elapsed().as_secs_f64();
    }

    /// Waits until every request sent so far is answered (or failed) and
    /// counted, so that what comes after holds none of them: after a fault
    /// is lifted, a request the fault held or failed is the fault's, not
    /// the next phase's. Bounded by the requests' timeout.
    pub async fn settle(&self) {
        if self.running.is_none() {
            return;
        }
        self.fence.send_modify(|n| *n += 1);
        let n = *self.fence.borrow();
        let mut passed = self.passed.subscribe();
        let bound = self.cfg.timeout * 2 + Duration::from_secs(1);
        let _ = tokio::time::timeout(bound, passed.wait_for(|p| p.iter().all(|&x| x >= n))).await;
    }

    /// Writes every key once, as fast as the node takes it: each connection
    /// keeps up to 100 SETs of its own keys in flight (as many as its
    /// protocol takes). Returns the keys acknowledged and the time it took.
    pub async fn fill(&mut self) -> (u64, Duration) {
        let t0 = Instant::now();
        let n = self.cfg.connections;
        let tasks: Vec<JoinHandle<u64>> = (0..n)
            .map(|i| {
                let filler = Filler {
                    index: i,
                    cfg: self.cfg.clone(),
                    ledger: self.ledger.clone(),
                    shared: self.shared.clone(),
                    protocol: match self.members.len() {
                        0 => self.protocol.clone(),
                        m => self.members[i % m].clone(),
                    },
                    fatal: self.fatal.clone(),
                    history: self.history.clone(),
                };
                self.load.handle.spawn(filler.run())
            })
            .collect();
        let mut total = 0;
        for t in tasks {
            total += t.await.unwrap_or(0);
        }
        (total, t0.elapsed())
    }

    /// Why a session could not go on, once one could not: a protocol the
    /// node (or the user's adapter) does not speak. The cell stops.
    pub fn fatal(&self) -> watch::Receiver<Option<String>> {
        self.fatal.subscribe()
    }

    /// The first write reads during the load found lost since the last
    /// call, if any.
    pub fn take_first_lost(&self) -> Option<crate::model::LostWrite> {
        self.shared.lock().expect("stats lock").first_lost.take()
    }

    /// The node's distinct error replies so far, with when each first came
    /// (seconds since the cell's origin).
    pub fn error_replies(&self) -> Vec<(f64, String)> {
        self.shared
            .lock()
            .expect("stats lock")
            .error_replies
            .clone()
    }

    /// A handle for live progress.
    pub fn live(&self) -> Live {
        Live(self.shared.clone())
    }

    /// Totals so far, to within one flush of each connection (100 ms);
    /// `active_s` includes the load running now.
    pub fn stats(&self) -> LoadStats {
        let mut s = self.shared.lock().expect("stats lock").total.clone();
        if let Some((_, _, started)) = &self.running {
            s.active_s += started.elapsed().as_secs_f64();
        }
        s
    }

    /// Writes `latency.csv` at `path`: one row per `every` with the
    /// operations and latency percentiles of that interval, `t` in seconds
    /// since `origin`. Rows are left out while nothing happens.
    ///
    /// It also keeps the load of every window of each of `windows`'
    /// lengths (from the origin; [`Load::windows`]), which windowed
    /// checks judge: exact percentiles, from the intervals' histograms.
    pub fn log_intervals(
        &mut self,
        path: &std::path::Path,
        every: Duration,
        origin: Instant,
        windows: &[Duration],
    ) {
        let mut windows: Vec<Windows> = windows
            .iter()
            .map(|w| Windows {
                length: w.as_secs_f64(),
                open: None,
            })
            .collect();
        let (stop_tx, mut stop) = watch::channel(false);
        let shared = self.shared.clone();
        let path = path.to_path_buf();
        let task = tokio::spawn(async move {
            use std::io::Write;
            let mut out = std::io::BufWriter::new(std::fs::File::create(&path)?);
            writeln!(out, "{}", IntervalRow::HEADER)?;
            out.flush()?;
            let mut tick = tokio::time::interval_at(Instant::now() + every, every);
            let mut last = Instant::now();
            loop {
                let stopping = tokio::select! {
                    _ = tick.tick() => false,
                    _ = stop.changed() => true,
                };
                let s = std::mem::take(&mut shared.lock().expect("stats lock").interval);
                let span = last.elapsed().as_secs_f64();
                last = Instant::now();
                let t = origin.elapsed().as_secs_f64();
                if !s.is_empty() {
                    let row = IntervalRow::of(t, span, &s);
                    writeln!(out, "{row}")?;
                    out.flush()?;
                    let closed: Vec<_> = windows
                        .iter_mut()
                        .filter_map(|w| w.add(t, span, &s))
                        .collect();
                    let mut kept = shared.lock().expect("stats lock");
                    kept.windows.extend(closed);
                    kept.served.push(Served {
                        t,
                        writes: row.writes,
                        errors: row.errors,
                    });
                }
                if stopping {
                    let closed: Vec<_> = windows.iter_mut().filter_map(|w| w.close(true)).collect();
                    shared.lock().expect("stats lock").windows.extend(closed);
                    return Ok(());
                }
            }
        });
        self.log = Some((stop_tx, task));
    }

    /// The load of every window [`Load::log_intervals`] was asked for,
    /// each length's in time order (complete once the log is closed).
    pub fn windows(&self) -> Vec<crate::model::WindowLoad> {
        self.shared.lock().expect("stats lock").windows.clone()
    }

    /// Every interval [`Load::log_intervals`] wrote, in time order.
    pub fn served(&self) -> Vec<Served> {
        self.shared.lock().expect("stats lock").served.clone()
    }

    /// Writes the last interval and closes `latency.csv`.
    pub async fn close_log(&mut self) -> std::io::Result<()> {
        let Some((stop, task)) = self.log.take() else {
            return Ok(());
        };
        let _ = stop.send(true);
        task.await.unwrap_or(Ok(()))
    }
}

/// One line of `latency.csv`.
/// One connection of a `load` phase: every key it owns written once, up
/// to 100 SETs in flight (as many as its protocol takes).
struct Filler {
    index: usize,
    cfg: LoadConfig,
    ledger: Arc<Ledger>,
    shared: Arc<Mutex<Shared>>,
    protocol: Arc<dyn Protocol>,
    fatal: Arc<watch::Sender<Option<String>>>,
    history: Option<Arc<crate::history::record::Recorder>>,
}

/// A fill's SETs in flight: key, version, when sent.
type FillInFlight = std::collections::HashMap<u64, (usize, u32, std::time::Instant)>;

impl Filler {
    /// Writes this connection's keys; how many were acknowledged.
    async fn run(self) -> u64 {
        const PIPELINE: usize = 100;
        let (i, n) = (self.index, self.cfg.connections);
        let mut session = match self.protocol.connect(load_timeouts(&self.cfg)).await {
            Ok(s) => s,
            Err(e) => {
                if let SessionError::Fatal(why) = e {
                    self.fatal.send_replace(Some(why));
                }
                return 0;
            }
        };
        let depth = PIPELINE.min(self.protocol.depth()).min(session.capacity());
        let mut keys = (i..self.cfg.keys).step_by(n);
        let mut in_flight = FillInFlight::default();
        let mut buf = self.history.as_ref().map(|h| h.buf());
        let (mut next_id, mut acked, mut failed) = (0u64, 0, false);
        loop {
            while !failed && in_flight.len() < depth {
                let Some(k) = keys.next() else { break };
                let v = self.ledger.next_set_version(k);
                let value = Value::new(&self.ledger, k, v);
                session.submit(next_id, Request::Set { key: k, value });
                in_flight.insert(next_id, (k, v, std::time::Instant::now()));
                next_id += 1;
            }
            if in_flight.is_empty() || session.flush().is_err() {
                break;
            }
            let wait = tokio::time::timeout(
                self.cfg.timeout,
                crate::protocol::progress(session.as_mut()),
            );
            if wait.await.is_err() {
                break;
            }
            let (now_acked, drained) =
                self.drain(session.as_mut(), &mut in_flight, &mut buf, &mut failed);
            acked += now_acked;
            match drained {
                Ok(()) => {}
                Err(SessionError::Fatal(why)) => {
                    self.fatal.send_replace(Some(why));
                    break;
                }
                Err(SessionError::Broken(_) | SessionError::ClientExited(_)) => break,
            }
            if let (Some(h), Some(b)) = (&self.history, buf.as_mut()) {
                if b.len() >= crate::history::record::CHUNK {
                    h.ship(b);
                }
            }
        }
        // What never came back may or may not have been written.
        if let (Some(h), Some(b)) = (&self.history, buf.as_mut()) {
            use crate::history::record::{Asked, Ended};
            let now = std::time::Instant::now();
            for (k, v, sent) in in_flight.values() {
                b.op(
                    i as u32,
                    *k as u64,
                    Asked::Write(*v),
                    Ended::Unknown,
                    *sent,
                    now,
                );
            }
            h.ship(b);
        }
        acked
    }

    /// Takes the outcomes that came: the ledger and the history told,
    /// the acknowledged counted.
    fn drain(
        &self,
        session: &mut dyn Session,
        in_flight: &mut FillInFlight,
        buf: &mut Option<crate::history::record::Buf>,
        failed: &mut bool,
    ) -> (u64, Result<(), SessionError>) {
        use crate::history::record::{Asked, Ended};
        let mut now_acked = 0;
        let now = std::time::Instant::now();
        let drained = session.drain(&mut |id, outcome| {
            let Some((k, v, sent)) = in_flight.remove(&id) else {
                return;
            };
            let ended = match outcome {
                Outcome::Done => {
                    self.ledger.ack(k, v);
                    now_acked += 1;
                    Ended::Ok(None)
                }
                Outcome::NotDone(_) => {
                    self.ledger.fail(k, v);
                    *failed = true;
                    Ended::Fail
                }
                // In doubt: the ledger already says so.
                _ => {
                    *failed = true;
                    Ended::Unknown
                }
            };
            if let Some(b) = buf.as_mut() {
                b.op(
                    self.index as u32,
                    k as u64,
                    Asked::Write(v),
                    ended,
                    sent,
                    now,
                );
            }
        });
        let mut sh = self.shared.lock().expect("stats lock");
        sh.total.fill_sets += now_acked;
        sh.interval.fill_sets += now_acked;
        (now_acked, drained)
    }
}

pub struct IntervalRow {
    pub t: f64,
    pub ops: u64,
    pub ops_per_s: f64,
    pub writes: u64,
    pub reads: u64,
    pub errors: u64,
    pub unavailable: u64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
}

impl IntervalRow {
    pub const HEADER: &'static str =
        "t,ops,ops_per_s,writes,reads,errors,unavailable,p50_us,p90_us,p99_us,p999_us,max_us";

    fn of(t: f64, span: f64, s: &LoadStats) -> IntervalRow {
        let h = &s.latency_us;
        let q = |p: f64| {
            if h.is_empty() {
                0
            } else {
                h.value_at_quantile(p)
            }
        };
        let ops = s.ops_ok() + s.fill_sets;
        IntervalRow {
            t,
            ops,
            ops_per_s: ops as f64 / span.max(1e-9),
            writes: s.writes() + s.fill_sets,
            reads: s.reads(),
            errors: s.errors,
            unavailable: s.unavailable,
            p50_us: q(0.5),
            p90_us: q(0.9),
            p99_us: q(0.99),
            p999_us: q(0.999),
            max_us: h.max(),
        }
    }
}

impl std::fmt::Display for IntervalRow {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "{:.3},{},{:.1},{},{},{},{},{},{},{},{},{}",
            self.t,
            self.ops,
            self.ops_per_s,
            self.writes,
            self.reads,
            self.errors,
            self.unavailable,
            self.p50_us,
            self.p90_us,
            self.p99_us,
            self.p999_us,
            self.max_us
        )
    }
}

struct Conn {
    /// Which resumption of the load this is (its keys are drawn anew).
    round: u64,
    index: usize,
    cfg: LoadConfig,
    protocol: Arc<dyn Protocol>,
    ledger: Arc<Ledger>,
    node_up: watch::Receiver<bool>,
    stop: watch::Receiver<bool>,
    shared: Arc<Mutex<Shared>>,
    /// A fence's number ([`Load::settle`]), and where each connection
    /// says which fence it has passed.
    fence: watch::Receiver<u64>,
    passed: Arc<watch::Sender<Vec<u64>>>,
    /// Requests answered or given up on a broken session, since the start.
    settled: AtomicU64,
    /// Where a session that cannot go on says why (the cell stops).
    fatal: Arc<watch::Sender<Option<String>>>,
    /// A cluster's members' protocols (empty for one node), and the
    /// sessions this connection opened so far (its member, rotating).
    members: Arc<Vec<Arc<dyn Protocol>>>,
    opened: AtomicU64,
    /// The history every request is recorded into, with this
    /// connection's records not yet shipped.
    history: Option<(
        Arc<crate::history::record::Recorder>,
        Mutex<crate::history::record::Buf>,
    )>,
}

/// A request sent and not yet answered.
struct Pending {
    /// Latency counts from here: the scheduled start, or the send in a
    /// closed loop.
    intended: Instant,
    /// When it was submitted (its timeout counts from here).
    queued: Instant,
    what: Sent,
}

enum Sent {
    /// A key and the ledger's (acknowledged, sent) for it when the read was
    /// sent: what its reply is judged against.
    Get(usize, (u32, u32)),
    Mget(Vec<(usize, (u32, u32))>),
    Write(usize, u32, WriteKind),
}

/// What one request does.
enum Plan {
    Get(usize),
    Mget(Vec<usize>),
    Write(usize),
}

/// The requests in flight on a session, by id: ids count up from `base`,
/// one slot each, so that outcomes may come in any order and the oldest
/// request (whose timeout runs out first) is at the front.
#[derive(Default)]
struct InFlight {
    base: u64,
    slots: VecDeque<Option<Pending>>,
    live: usize,
    /// Keys with a write in flight: at most one each, so that a key's
    /// writes take effect in the order they were sent whatever the
    /// protocol (an adapter that answers out of order, a client that
    /// retries), as the ledger assumes.
    writing: std::collections::HashSet<usize>,
}

impl InFlight {
    fn push(&mut self, p: Pending) -> u64 {
        if let Sent::Write(k, ..) = p.what {
            self.writing.insert(k);
        }
        let id = self.base + self.slots.len() as u64;
        self.slots.push_back(Some(p));
        self.live += 1;
        id
    }

    fn take(&mut self, id: u64) -> Option<Pending> {
        let i = usize::try_from(id.checked_sub(self.base)?).ok()?;
        let p = self.slots.get_mut(i)?.take()?;
        if let Sent::Write(k, ..) = p.what {
            self.writing.remove(&k);
        }
        self.live -= 1;
        while matches!(self.slots.front(), Some(None)) {
            self.slots.pop_front();
            self.base += 1;
        }
        Some(p)
    }

    fn oldest(&self) -> Option<&Pending> {
        self.slots.front().and_then(Option::as_ref)
    }

    /// Forgets every request (the session broke); returns how many.
    fn clear(&mut self) -> usize {
        self.writing.clear();
        self.base += self.slots.len() as u64;
        self.slots.clear();
        std::mem::take(&mut self.live)
    }
}

/// Drops a broken session: its requests in flight failed, their writes
/// in doubt (and in the history, of unknown outcome).
fn broken(
    conn: &Conn,
    session: &mut Option<Box<dyn Session>>,
    inflight: &mut InFlight,
    local: &mut LoadStats,
) {
    session.take();
    if let Some((_, buf)) = &conn.history {
        let now = Instant::now();
        let mut b = buf.lock().expect("history buffer");
        for p in inflight.slots.iter().flatten() {
            conn.record_unknown(&mut b, p, now);
        }
    }
    let n = inflight.clear() as u64;
    local.errors += n;
    conn.settled.fetch_add(n, Relaxed);
}

/// What a read saw, as the history keeps it.
fn seen_of(o: crate::oracle::Observed) -> crate::history::record::Seen {
    use crate::history::record::Seen;
    match o {
        crate::oracle::Observed::Version(v) => Seen::Version(v),
        crate::oracle::Observed::Absent => Seen::Absent,
        crate::oracle::Observed::Garbage => Seen::Garbage,
    }
}

fn rng_below(rng: &mut impl Rng, n: usize) -> usize {
    rng.random_range(0..n.max(1))
}

/// Progress of the session, or never when there is none (for `select!`).
async fn progress(session: &mut Option<Box<dyn Session>>) {
    match session {
        Some(s) => crate::protocol::progress(s.as_mut()).await,
        None => std::future::pending().await,
    }
}

impl Conn {
    /// Records request `p`, still in flight when its session broke, in the
    /// history: its outcome never known.
    fn record_unknown(&self, b: &mut crate::history::record::Buf, p: &Pending, now: Instant) {
        use crate::history::record::{Asked, Ended};
        let (client, invoke, now) = (self.index as u32, p.queued.into_std(), now.into_std());
        let mut note = |k: usize, asked| b.op(client, k as u64, asked, Ended::Unknown, invoke, now);
        match &p.what {
            Sent::Write(k, v, WriteKind::Set) => note(*k, Asked::Write(*v)),
            Sent::Write(k, v, WriteKind::Del) => note(*k, Asked::Delete(*v)),
            Sent::Get(k, _) => note(*k, Asked::Read),
            Sent::Mget(keys) => keys.iter().for_each(|(k, _)| note(*k, Asked::Read)),
        }
    }

    /// The protocol of the member this connection talks to now: its own
    /// (`i mod N`), or with `rotate`, the next one after each session.
    fn protocol(&self) -> &Arc<dyn Protocol> {
        if self.members.is_empty() {
            return &self.protocol;
        }
        let n = self.members.len();
        let hop = if self.cfg.rotate {
            self.opened.load(Relaxed) as usize
        } else {
            0
        };
        &self.members[(self.index + hop) % n]
    }

    /// Whether key `k` is this connection's own (its writes, and its reads
    /// the ledger judges).
    fn owns(&self, k: usize) -> bool {
        k % self.cfg.connections == self.index
    }

    /// The keys this connection owns (every `connections`-th from its index),
    /// chosen among by the suite's distribution.
    fn chooser(&self) -> dist::Chooser {
        let n = self.cfg.connections;
        let owned = (self.cfg.keys + n - 1 - self.index) / n;
        dist::Chooser::new(self.cfg.distribution, owned as u64)
    }

    fn key(&self, j: u64) -> usize {
        self.index + self.cfg.connections * j as usize
    }

    /// The next request of the mix, if the distribution has a key for it
    /// (`latest` has nothing to read before the first write).
    fn next_request(&self, rng: &mut impl Rng, chooser: &mut dist::Chooser) -> Option<Plan> {
        let c = &self.cfg;
        let total = c.set + c.get + c.del + c.mget;
        let x = rng.random::<f64>() * total;
        // In a cluster, reads go to any connection's keys: a read through
        // one member of what was written through another is what can be
        // stale (the history judges it; the ledger judges owners' reads).
        let read_key = |rng: &mut _, j: u64| -> usize {
            if self.members.len() < 2 {
                return self.key(j);
            }
            let n = c.connections;
            let owner = rng_below(rng, n);
            let owned = (c.keys + n - 1 - owner) / n;
            owner + n * (j as usize % owned.max(1))
        };
        if x < c.get {
            chooser
                .pick(rng, false)
                .map(|j| Plan::Get(read_key(rng, j)))
        } else if x < c.get + c.mget {
            let keys: Vec<usize> = (0..c.mget_keys)
                .filter_map(|_| chooser.pick(rng, false).map(|j| read_key(rng, j)))
                .collect();
            (!keys.is_empty()).then_some(Plan::Mget(keys))
        } else {
            chooser.pick(rng, true).map(|j| Plan::Write(self.key(j)))
        }
    }

    /// Submits a request to the session and keeps it in flight.
    fn send(
        &self,
        session: &mut dyn Session,
        inflight: &mut InFlight,
        plan: Plan,
        intended: Instant,
        now: Instant,
    ) {
        let ledger = &*self.ledger;
        let (what, request_keys) = match plan {
            Plan::Get(k) => (Sent::Get(k, ledger.snapshot(k)), vec![]),
            Plan::Mget(keys) => (
                Sent::Mget(keys.iter().map(|k| (*k, ledger.snapshot(*k))).collect()),
                keys,
            ),
            Plan::Write(k) => {
                let v = ledger.next_version(k);
                (Sent::Write(k, v, ledger.kind(k, v)), vec![])
            }
        };
        let request = match &what {
            Sent::Get(k, _) => Request::Get {
                keys: std::slice::from_ref(k),
            },
            Sent::Mget(_) => Request::Get {
                keys: &request_keys,
            },
            Sent::Write(k, v, WriteKind::Set) => Request::Set {
                key: *k,
                value: Value::new(ledger, *k, *v),
            },
            Sent::Write(k, _, WriteKind::Del) => Request::Del { key: *k },
        };
        let id = inflight.base + inflight.slots.len() as u64;
        session.submit(id, request);
        inflight.push(Pending {
            intended,
            queued: now,
            what,
        });
    }

    /// Adds what this connection counted (its counters in `local`, its
    /// latencies in `lat`) to the load's totals: after every batch of
    /// replies, so a phase's figures hold the replies that came in it.
    fn flush(
        &self,
        local: &mut LoadStats,
        lat: &mut Vec<u64>,
        first_lost: &mut Option<crate::model::LostWrite>,
    ) {
        if let Some((rec, buf)) = &self.history {
            rec.ship(&mut buf.lock().expect("history buffer"));
        }
        if local.is_empty() && lat.is_empty() && first_lost.is_none() {
            return;
        }
        let mut guard = self.shared.lock().expect("stats lock");
        let sh = &mut *guard;
        for t in [&mut sh.total, &mut sh.interval] {
            // A connection's own counts (its latencies are in `lat`).
            t.add(local);
            for us in lat.iter() {
                let _ = t.latency_us.record(*us);
            }
        }
        if sh.first_lost.is_none() {
            sh.first_lost = first_lost.take();
        }
        if let Some(e) = local.error_reply.take() {
            if sh.error_replies.len() < ERROR_REPLIES
                && !sh.error_replies.iter().any(|(_, x)| *x == e)
            {
                let t = self.ledger.now_s();
                sh.error_replies.push((t, e));
            }
        }
        *first_lost = None;
        drop(guard);
        *local = LoadStats::default();
        lat.clear();
    }

    /// Judges one key's value read during the load against the ledger as
    /// it was when the read was sent, and counts it.
    fn judge_read(
        &self,
        k: usize,
        seen: crate::oracle::Observed,
        snap: (u32, u32),
        local: &mut LoadStats,
        first_lost: &mut Option<crate::model::LostWrite>,
    ) {
        use crate::oracle::KeyVerdict as V;
        // In a cluster a member may serve a read it has not caught up on
        // (a serializable read): the history judges a cluster's reads; the
        // ledger judges them on one node, and every read-back.
        if !self.owns(k) || !self.members.is_empty() {
            return;
        }
        let verdict = self.ledger.judge_read(k, seen, snap);
        match verdict {
            V::Lost => local.lost_reads += 1,
            V::Corrupted => local.corrupted_reads += 1,
            V::Resurrected => local.resurrected_reads += 1,
            V::Aborted => local.aborted_reads += 1,
            V::InDoubt => local.in_doubt_reads += 1,
            V::Ok | V::Untouched => {}
        }
        if first_lost.is_none() && verdict.is_finding() {
            *first_lost = Some(self.ledger.lost_write(k, snap.0, seen, verdict));
        }
    }

    /// Counts one outcome against the request it ends.
    fn complete(
        &self,
        p: Pending,
        outcome: Outcome<'_>,
        now: Instant,
        local: &mut LoadStats,
        lat: &mut Vec<u64>,
        first_lost: &mut Option<crate::model::LostWrite>,
    ) {
        use crate::history::record::{Asked, Ended};
        self.settled.fetch_add(1, Relaxed);
        let mut hist = self
            .history
            .as_ref()
            .map(|(_, b)| b.lock().expect("history buffer"));
        let (client, invoke, at) = (self.index as u32, p.queued.into_std(), now.into_std());
        let mut note = |k: usize, asked: Asked, ended: Ended| {
            if let Some(b) = hist.as_mut() {
                b.op(client, k as u64, asked, ended, invoke, at);
            }
        };
        let ok = match (p.what, outcome) {
            (Sent::Write(k, v, kind), o) => {
                let asked = match kind {
                    WriteKind::Set => Asked::Write(v),
                    WriteKind::Del => Asked::Delete(v),
                };
                match o {
                    Outcome::Done => {
                        self.ledger.ack_at(k, v, now.into_std());
                        match kind {
                            WriteKind::Set => local.sets_ok += 1,
                            WriteKind::Del => local.dels_ok += 1,
                        }
                        note(k, asked, Ended::Ok(None));
                    }
                    Outcome::NotDone(e) => {
                        self.ledger.fail(k, v);
                        local.not_done += 1;
                        local.error_reply.get_or_insert_with(|| e.to_string());
                        note(k, asked, Ended::Fail);
                    }
                    Outcome::Unknown(e) => {
                        local.error_reply.get_or_insert_with(|| e.to_string());
                        note(k, asked, Ended::Unknown);
                    }
                    // An answer of the wrong shape: the node's error.
                    Outcome::Values(_) => note(k, asked, Ended::Unknown),
                }
                matches!(o, Outcome::Done)
            }
            (Sent::Get(k, snap), Outcome::Values([v])) => {
                local.gets_ok += 1;
                let seen = self.ledger.decode(k, *v);
                self.judge_read(k, seen, snap, local, first_lost);
                note(k, Asked::Read, Ended::Ok(Some(seen_of(seen))));
                true
            }
            (Sent::Mget(keys), Outcome::Values(values)) if values.len() == keys.len() => {
                local.mgets_ok += 1;
                for ((k, snap), v) in keys.into_iter().zip(values) {
                    let seen = self.ledger.decode(k, *v);
                    self.judge_read(k, seen, snap, local, first_lost);
                    note(k, Asked::Read, Ended::Ok(Some(seen_of(seen))));
                }
                true
            }
            // A read refused, failed or malformed.
            (what, o) => {
                if let Outcome::NotDone(e) | Outcome::Unknown(e) = o {
                    local.error_reply.get_or_insert_with(|| e.to_string());
                }
                let ended = match o {
                    Outcome::NotDone(_) => Ended::Fail,
                    _ => Ended::Unknown,
                };
                match what {
                    Sent::Get(k, _) => note(k, Asked::Read, ended),
                    Sent::Mget(keys) => keys.iter().for_each(|(k, _)| note(*k, Asked::Read, ended)),
                    Sent::Write(..) => unreachable!("writes are matched above"),
                }
                false
            }
        };
        if ok {
            let us = (now - p.intended).as_micros().clamp(1, 3_600_000_000) as u64;
            lat.push(us);
        } else {
            // Refused, failed or malformed: a write stays in doubt
            // (unless the node said it was not done).
            local.errors += 1;
        }
    }

    /// Queues every request due by `now` (at a fixed rate) or up to the
    /// depth (in a closed loop), and sends what the session takes.
    #[allow(clippy::too_many_arguments)]
    fn refill(
        &self,
        session: &mut Option<Box<dyn Session>>,
        inflight: &mut InFlight,
        now: Instant,
        next: &mut Instant,
        period: Option<Duration>,
        depth: usize,
        rng: &mut impl Rng,
        chooser: &mut dist::Chooser,
        local: &mut LoadStats,
    ) {
        let up = *self.node_up.borrow();
        let Some(s) = session.as_mut().filter(|_| up) else {
            match period {
                // Every tick missed while the node was down.
                Some(p) => {
                    while *next <= now {
                        local.unavailable += 1;
                        *next += p;
                    }
                }
                // A closed loop has no schedule to miss: wait.
                None => *next = now + Duration::from_millis(20),
            }
            return;
        };
        let depth = depth.min(s.capacity());
        while inflight.live < depth {
            let intended = match period {
                Some(p) if *next <= now => {
                    let at = *next;
                    *next += p;
                    at
                }
                Some(_) => break,
                None => now,
            };
            match self.next_request(rng, chooser) {
                // A key being written is read instead of written again.
                Some(Plan::Write(k)) if inflight.writing.contains(&k) => {
                    self.send(s.as_mut(), inflight, Plan::Get(k), intended, now)
                }
                Some(r) => self.send(s.as_mut(), inflight, r, intended, now),
                None => local.unavailable += 1,
            }
            if period.is_none() && inflight.live == 0 {
                *next = now + Duration::from_millis(20);
                break;
            }
        }
        if s.flush().is_err() {
            broken(self, session, inflight, local);
        }
    }

    /// Takes every outcome the session has; `false` when it broke.
    fn take_outcomes(
        &self,
        s: &mut dyn Session,
        inflight: &mut InFlight,
        local: &mut LoadStats,
        lat: &mut Vec<u64>,
        first_lost: &mut Option<crate::model::LostWrite>,
    ) -> bool {
        let now = Instant::now();
        let drained = s.drain(&mut |id, outcome| {
            if let Some(p) = inflight.take(id) {
                self.complete(p, outcome, now, local, lat, first_lost);
            }
        });
        match drained {
            Ok(()) => true,
            Err(SessionError::Broken(_)) => false,
            Err(SessionError::ClientExited(why)) => {
                local.client_restarts += 1;
                local.error_reply.get_or_insert(why);
                false
            }
            Err(SessionError::Fatal(why)) => {
                self.fatal.send_if_modified(|f| {
                    let first = f.is_none();
                    f.get_or_insert(why);
                    first
                });
                false
            }
        }
    }

    /// Opens a session, unless the last try failed within `retry`.
    async fn open(&self, last_try: &mut Option<Instant>) -> Option<Box<dyn Session>> {
        if last_try.is_some_and(|t| t.elapsed() < Duration::from_millis(20)) {
            return None;
        }
        *last_try = Some(Instant::now());
        let protocol = self.protocol().clone();
        let opened = protocol.connect(load_timeouts(&self.cfg)).await;
        self.opened.fetch_add(1, Relaxed);
        match opened {
            Ok(s) => {
                *last_try = None;
                Some(s)
            }
            Err(SessionError::Broken(_) | SessionError::ClientExited(_)) => None,
            Err(SessionError::Fatal(why)) => {
                self.fatal.send_if_modified(|f| {
                    let first = f.is_none();
                    f.get_or_insert(why);
                    first
                });
                None
            }
        }
    }

    /// At a fixed rate: the period between this connection's requests
    /// and its first, staggered across one period; in a closed loop: the
    /// depth of its pipeline.
    fn schedule(&self) -> (Option<Duration>, usize, Instant) {
        let period = self
            .cfg
            .rate
            .map(|r| Duration::from_secs_f64(self.cfg.connections as f64 / r));
        let depth = if period.is_some() {
            self.protocol.depth()
        } else {
            self.cfg.pipeline.max(1).min(self.protocol.depth())
        };
        let first = Instant::now()
            + period
                .unwrap_or_default()
                .mul_f64(self.index as f64 / self.cfg.connections as f64);
        (period, depth, first)
    }

    async fn run(self) {
        let mut local = LoadStats::default();
        let mut rng = rand::rngs::SmallRng::seed_from_u64(crate::units::mix64(
            self.cfg.seed ^ ((self.index as u64 + 1) * 0x9E37) ^ (self.round << 40),
        ));
        let mut stop = self.stop.clone();
        let mut fence = self.fence.clone();
        // The fence waited on, and how many requests must settle to pass it.
        let mut fenced: Option<(u64, u64)> = None;
        let mut chooser = self.chooser();
        let mut session: Option<Box<dyn Session>> = None;
        let mut inflight = InFlight::default();
        let mut last_try = None;
        let mut told_up = true;
        let mut lat: Vec<u64> = Vec::with_capacity(1024);
        let mut first_lost = None;
        let mut flushed = Instant::now();
        let (period, depth, mut next) = self.schedule();
        // One timer for the schedule, reset only when it moves; timeouts
        // are checked on a coarse tick (timers are not free per request).
        let tick = tokio::time::sleep_until(next);
        tokio::pin!(tick);
        let mut timeouts = tokio::time::interval(
            (self.cfg.timeout / 4).clamp(Duration::from_millis(10), Duration::from_millis(100)),
        );
        timeouts.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let in_flight = inflight.live;
            if tick.deadline() != next {
                tick.as_mut().reset(next);
            }
            tokio::select! {
                biased;
                _ = stop.changed() => break,
                _ = fence.changed() => {
                    let n = *fence.borrow_and_update();
                    fenced = Some((n, self.settled.load(Relaxed) + in_flight as u64));
                }
                _ = progress(&mut session) => {
                    let s = session.as_mut().expect("progress");
                    if !self.take_outcomes(s.as_mut(), &mut inflight, &mut local, &mut lat, &mut first_lost) {
                        broken(&self, &mut session, &mut inflight, &mut local);
                    }
                    let now = Instant::now();
                    // A closed loop sends again as soon as replies come.
                    if period.is_none() && session.is_some() {
                        self.refill(&mut session, &mut inflight, now, &mut next, period, depth, &mut rng, &mut chooser, &mut local);
                    }
                }
                _ = timeouts.tick() => {
                    let now = Instant::now();
                    let late = inflight
                        .oldest()
                        .is_some_and(|p| now >= p.queued + self.cfg.timeout);
                    // The oldest request timed out: the session is not trusted.
                    if late {
                        broken(&self, &mut session, &mut inflight, &mut local);
                    }
                    let up = *self.node_up.borrow();
                    if let Some(s) = session.as_mut().filter(|_| up != told_up) {
                        s.node_state(up);
                        told_up = up;
                    }
                }
                _ = &mut tick, if in_flight < depth.min(session.as_ref().map_or(usize::MAX, |s| s.capacity())) => {
                    let up = *self.node_up.borrow();
                    if up && session.is_none() {
                        session = self.open(&mut last_try).await;
                        told_up = true;
                    }
                    let now = Instant::now();
                    self.refill(&mut session, &mut inflight, now, &mut next, period, depth, &mut rng, &mut chooser, &mut local);
                    if period.is_none() && session.is_none() {
                        next = now + Duration::from_millis(20);
                    }
                }
            }
            // Totals are shared every 10 ms (or 256 replies): a phase's
            // figures hold the replies that came in it, give or take that.
            if lat.len() >= 256 || flushed.elapsed() >= Duration::from_millis(10) {
                self.flush(&mut local, &mut lat, &mut first_lost);
                flushed = Instant::now();
            }
            if let Some((n, _)) = fenced.filter(|(_, t)| self.settled.load(Relaxed) >= *t) {
                self.flush(&mut local, &mut lat, &mut first_lost);
                flushed = Instant::now();
                self.passed.send_modify(|p| p[self.index] = n);
                fenced = None;
            }
        }
        self.settle(
            &mut session,
            &mut inflight,
            &mut local,
            &mut lat,
            &mut first_lost,
        )
        .await;
        self.flush(&mut local, &mut lat, &mut first_lost);
    }

    /// Lets what is in flight settle, each request within its timeout.
    async fn settle(
        &self,
        session: &mut Option<Box<dyn Session>>,
        inflight: &mut InFlight,
        local: &mut LoadStats,
        lat: &mut Vec<u64>,
        first_lost: &mut Option<crate::model::LostWrite>,
    ) {
        while let Some(s) = session.as_mut() {
            let Some(oldest) = inflight.oldest() else {
                break;
            };
            let deadline = oldest.queued + self.cfg.timeout;
            let settled = tokio::time::timeout_at(deadline, async {
                crate::protocol::progress(s.as_mut()).await;
                self.take_outcomes(s.as_mut(), inflight, local, lat, first_lost)
            })
            .await;
            if !matches!(settled, Ok(true)) {
                broken(self, session, inflight, local);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(target: String, set: f64, rate: f64, connections: usize) -> LoadConfig {
        LoadConfig {
            protocol: crate::protocol::Spec::Resp(crate::protocol::resp::Spec { target }),
            keys: 10,
            value_size: (8, 8),
            compressibility: None,
            set,
            get: 1.0 - set,
            del: 0.0,
            mget: 0.0,
            mget_keys: 10,
            rate: Some(rate),
            pipeline: 1,
            connections,
            timeout: Duration::from_secs(5),
            seed: 1,
            distribution: dist::Distribution::Uniform,
            members: vec![],
            rotate: false,
        }
    }

    #[test]
    fn connections_own_disjoint_keys_covering_the_space() {
        let cfg = config(String::new(), 1.0, 10.0, 3);
        let mut seen = std::collections::BTreeSet::new();
        for index in 0..3 {
            let conn = Conn {
                round: 1,
                index,
                cfg: cfg.clone(),
                protocol: cfg.protocol.open(),
                fatal: Arc::new(watch::channel(None).0),
                ledger: Arc::new(Ledger::new(10, (8, 8), 1.0, 0.0, 1)),
                node_up: watch::channel(true).1,
                stop: watch::channel(false).1,
                shared: Default::default(),
                fence: watch::channel(0).1,
                passed: Arc::new(watch::channel(vec![0; 3]).0),
                settled: AtomicU64::new(0),
                members: Default::default(),
                opened: AtomicU64::new(0),
                history: None,
            };
            let mut rng = rand::rngs::SmallRng::seed_from_u64(index as u64);
            let mut chooser = conn.chooser();
            for _ in 0..200 {
                let k = conn.key(chooser.pick(&mut rng, true).unwrap());
                assert_eq!(k % 3, index);
                assert!(k < 10);
                seen.insert(k);
            }
        }
        assert_eq!(seen.len(), 10);
    }

    /// A node that fails the GETs it took while a fault held, and answers
    /// them late, after the fault is lifted; the GETs after the lift
    /// succeed.
    struct LateFailures {
        addr: std::net::SocketAddr,
        state: Arc<(Mutex<Gets>, std::sync::Condvar)>,
        writer: Arc<Mutex<Option<std::net::TcpStream>>>,
    }

    /// What the node did with the GETs.
    #[derive(Default)]
    struct Gets {
        lifted: bool,
        /// Taken under the fault (failed late).
        failed: u64,
        /// Taken after the lift, and answered.
        answered: u64,
    }

    impl LateFailures {
        fn start() -> LateFailures {
            use std::io::{Read, Write};
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let state = Arc::new((Mutex::new(Gets::default()), std::sync::Condvar::new()));
            let writer = Arc::new(Mutex::new(None::<std::net::TcpStream>));
            let (st, w) = (state.clone(), writer.clone());
            std::thread::spawn(move || {
                let (mut sock, _) = listener.accept().unwrap();
                *w.lock().unwrap() = Some(sock.try_clone().unwrap());
                let mut buf = vec![0u8; 1 << 16];
                let mut carry = Vec::new();
                while let Ok(n) = sock.read(&mut buf) {
                    if n == 0 {
                        return;
                    }
                    carry.extend_from_slice(&buf[..n]);
                    let gets = carry.windows(5).filter(|x| x == b"GET\r\n").count();
                    carry.drain(..carry.len().saturating_sub(4));
                    // Replies go out under the writer's lock, in order.
                    let mut out = w.lock().unwrap();
                    let (m, cv) = &*st;
                    let mut s = m.lock().unwrap();
                    if s.lifted {
                        s.answered += gets as u64;
                        let _ = out.as_mut().unwrap().write_all(&b"$-1\r\n".repeat(gets));
                    } else {
                        s.failed += gets as u64;
                    }
                    cv.notify_all();
                }
            });
            LateFailures {
                addr,
                state,
                writer,
            }
        }

        fn wait_until(&self, f: impl Fn(&Gets) -> bool) {
            let (m, cv) = &*self.state;
            let _g = cv.wait_while(m.lock().unwrap(), |s| !f(s)).unwrap();
        }

        /// Lifts the fault; the GETs it held fail 50 ms later.
        fn lift(&self) -> u64 {
            use std::io::Write;
            let out = self.writer.lock().unwrap();
            let held = {
                let mut s = self.state.0.lock().unwrap();
                s.lifted = true;
                s.failed
            };
            let w = self.writer.clone();
            let late = out.as_ref().unwrap().try_clone().unwrap();
            drop(out);
            // Hold the writer until the late replies are out, so that the
            // GETs after the lift are answered after them.
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let _g = w.lock().unwrap();
                tx.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(50));
                let _ = (&late).write_all(&b"-ERR fault\r\n".repeat(held as usize));
            });
            rx.recv().unwrap();
            held
        }
    }

    /// After a lift, `settle` holds back until the replies to what was
    /// sent before it are counted: a request the fault failed late is the
    /// fault's, and the load after the lift counts no error.
    #[test]
    fn settle_counts_the_replies_to_what_was_sent_before_it() {
        let node = LateFailures::start();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut load = Load::new(config(node.addr.to_string(), 0.0, 200.0, 1));
        load.resume();
        node.wait_until(|s| s.failed >= 3);
        let held = node.lift();
        rt.block_on(load.settle());
        let at_lift = load.stats();
        assert_eq!(at_lift.errors, held, "{:?}", at_lift.summary());
        // GETs the node takes from here on are answered after `at_lift`.
        let answered = node.state.0.lock().unwrap().answered;
        node.wait_until(|s| s.answered >= answered + 5);
        rt.block_on(load.pause());
        let after = load.stats().since(&at_lift);
        assert_eq!(after.errors, 0, "{:?}", after.summary());
        assert!(after.gets_ok >= 5, "{:?}", after.summary());
    }
}
