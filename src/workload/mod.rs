//! The built-in RESP load: open-model rate control, latency histograms, and
//! the ledger of acknowledged writes.
//!
//! Operations are scheduled by the clock (`rate` per second across all
//! connections) and each one's latency is measured from the moment it was
//! *scheduled*, not sent, so a node that stalls shows up as latency rather
//! than as a load generator that politely slows down with it (coordinated
//! omission). Each connection owns the keys `k` with `k % connections ==
//! its index`, so that the node answers the writes of one key in order.

pub mod dist;
pub mod ledger;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
use redis::aio::MultiplexedConnection;
use redis::AsyncConnectionConfig;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

pub use ledger::Ledger;
use ledger::WriteKind;

/// Most requests one connection keeps in flight; past it, scheduling waits
/// (latency still counts from the scheduled time).
const MAX_IN_FLIGHT: usize = 1024;

#[derive(Debug, Clone)]
pub struct LoadConfig {
    pub target: String,
    pub keys: usize,
    pub value_size: usize,
    pub set: f64,
    pub get: f64,
    pub del: f64,
    pub rate: f64,
    pub connections: usize,
    pub timeout: Duration,
    pub seed: u64,
    pub distribution: dist::Distribution,
}

/// Counters and latencies of the load, summed over connections.
#[derive(Debug, Clone)]
pub struct LoadStats {
    pub sets_ok: u64,
    pub gets_ok: u64,
    pub dels_ok: u64,
    /// Requests that failed (errors, timeouts, connection loss).
    pub errors: u64,
    /// Scheduled operations not sent because the node was down.
    pub unavailable: u64,
    /// GETs that returned a value no write of that key produced.
    pub corrupted_reads: u64,
    /// Latency from scheduled start to reply, in microseconds.
    pub latency_us: Histogram<u64>,
    /// Seconds the load was applied.
    pub active_s: f64,
    /// SETs acknowledged by `load` phases (not part of the rate-controlled load).
    pub fill_sets: u64,
}

impl Default for LoadStats {
    fn default() -> Self {
        LoadStats {
            sets_ok: 0,
            gets_ok: 0,
            dels_ok: 0,
            errors: 0,
            unavailable: 0,
            corrupted_reads: 0,
            latency_us: Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds"),
            active_s: 0.0,
            fill_sets: 0,
        }
    }
}

impl LoadStats {
    fn merge(&mut self, o: &LoadStats) {
        self.sets_ok += o.sets_ok;
        self.gets_ok += o.gets_ok;
        self.dels_ok += o.dels_ok;
        self.errors += o.errors;
        self.unavailable += o.unavailable;
        self.corrupted_reads += o.corrupted_reads;
        let _ = self.latency_us.add(&o.latency_us);
    }

    pub fn acknowledged_writes(&self) -> u64 {
        self.sets_ok + self.dels_ok + self.fill_sets
    }

    pub fn ops_ok(&self) -> u64 {
        self.sets_ok + self.gets_ok + self.dels_ok
    }

    /// Acknowledged operations per second of rate-controlled load.
    pub fn ops_per_s(&self) -> f64 {
        if self.active_s > 0.0 {
            self.ops_ok() as f64 / self.active_s
        } else {
            0.0
        }
    }
}

/// The load engine: connections that run between `resume` and `pause`,
/// and a gate that holds them while the node is known to be down.
pub struct Engine {
    pub cfg: LoadConfig,
    pub ledger: Arc<Ledger>,
    node_up: watch::Sender<bool>,
    stats: Arc<Mutex<LoadStats>>,
    running: Option<(watch::Sender<bool>, Vec<JoinHandle<()>>, Instant)>,
}

impl Engine {
    pub fn new(cfg: LoadConfig) -> Engine {
        let ledger = Arc::new(Ledger::new(
            cfg.keys,
            cfg.value_size,
            cfg.set,
            cfg.del,
            cfg.seed,
        ));
        Engine {
            cfg,
            ledger,
            node_up: watch::channel(true).0,
            stats: Arc::new(Mutex::new(LoadStats::default())),
            running: None,
        }
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
        let handles = (0..self.cfg.connections)
            .map(|i| {
                let conn = Conn {
                    index: i,
                    cfg: self.cfg.clone(),
                    ledger: self.ledger.clone(),
                    node_up: self.node_up.subscribe(),
                    stop: stop_rx.clone(),
                    stats: self.stats.clone(),
                };
                tokio::spawn(conn.run())
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
        self.stats.lock().expect("stats lock").active_s += started.elapsed().as_secs_f64();
    }

    /// Writes every key once, as fast as the node takes it: each connection
    /// pipelines SETs of its own keys, 100 at a time. Returns the keys
    /// acknowledged and the time it took.
    pub async fn fill(&mut self) -> (u64, Duration) {
        const PIPELINE: usize = 100;
        let t0 = Instant::now();
        let n = self.cfg.connections;
        let tasks: Vec<JoinHandle<u64>> = (0..n)
            .map(|i| {
                let (cfg, ledger) = (self.cfg.clone(), self.ledger.clone());
                tokio::spawn(async move {
                    let conn = Conn::connector(&cfg);
                    let Some(mut con) = conn.await else { return 0 };
                    let keys: Vec<usize> = (i..cfg.keys).step_by(n).collect();
                    let mut acked = 0;
                    for chunk in keys.chunks(PIPELINE) {
                        let mut pipe = redis::pipe();
                        let versions: Vec<(usize, u32)> = chunk
                            .iter()
                            .map(|k| (*k, ledger.next_set_version(*k)))
                            .collect();
                        for (k, v) in &versions {
                            pipe.cmd("SET")
                                .arg(Ledger::key_name(*k))
                                .arg(ledger.value(*k, *v))
                                .ignore();
                        }
                        match pipe.query_async::<()>(&mut con).await {
                            Ok(()) => {
                                for (k, v) in versions {
                                    ledger.ack(k, v);
                                }
                                acked += chunk.len() as u64;
                            }
                            // In doubt: the ledger already says so.
                            Err(_) => break,
                        }
                    }
                    acked
                })
            })
            .collect();
        let mut total = 0;
        for t in tasks {
            total += t.await.unwrap_or(0);
        }
        self.stats.lock().expect("stats lock").fill_sets += total;
        (total, t0.elapsed())
    }

    /// Totals so far (of connections that have been paused).
    pub fn stats(&self) -> LoadStats {
        self.stats.lock().expect("stats lock").clone()
    }
}

struct Conn {
    index: usize,
    cfg: LoadConfig,
    ledger: Arc<Ledger>,
    node_up: watch::Receiver<bool>,
    stop: watch::Receiver<bool>,
    stats: Arc<Mutex<LoadStats>>,
}

enum Outcome {
    SetOk,
    GetOk { corrupted: bool },
    DelOk,
    Failed,
}

impl Conn {
    async fn connector(cfg: &LoadConfig) -> Option<MultiplexedConnection> {
        let client = redis::Client::open(format!("redis://{}/", cfg.target)).ok()?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(Some(cfg.timeout));
        client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .ok()
    }

    async fn connect(&self) -> Option<MultiplexedConnection> {
        Conn::connector(&self.cfg).await
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

    async fn run(self) {
        let mut local = LoadStats::default();
        let mut rng =
            rand::rngs::SmallRng::seed_from_u64(self.cfg.seed ^ ((self.index as u64 + 1) * 0x9E37));
        let period = Duration::from_secs_f64(self.cfg.connections as f64 / self.cfg.rate);
        let total = self.cfg.set + self.cfg.get + self.cfg.del;
        let read_share = self.cfg.get / total;
        let mut stop = self.stop.clone();
        let mut chooser = self.chooser();
        let mut con: Option<MultiplexedConnection> = None;
        let mut in_flight = FuturesUnordered::new();
        // Stagger the connections' ticks across one period.
        let mut next =
            Instant::now() + period.mul_f64(self.index as f64 / self.cfg.connections as f64);
        loop {
            tokio::select! {
                biased;
                _ = stop.changed() => break,
                Some((intended, outcome)) = in_flight.next(), if !in_flight.is_empty() => {
                    record(&mut local, intended, outcome, &mut con);
                }
                _ = tokio::time::sleep_until(next), if in_flight.len() < MAX_IN_FLIGHT => {
                    let intended = next;
                    next += period;
                    if !*self.node_up.borrow() {
                        local.unavailable += 1;
                        continue;
                    }
                    if con.is_none() {
                        con = self.connect().await;
                    }
                    let read = rng.random_bool(read_share.clamp(0.0, 1.0));
                    let picked = chooser.pick(&mut rng, !read).map(|j| self.key(j));
                    let (Some(c), Some(k)) = (con.clone(), picked) else {
                        local.unavailable += 1;
                        continue;
                    };
                    let ledger = self.ledger.clone();
                    in_flight.push(op(c, ledger, k, read, intended));
                }
            }
        }
        // Let what is in flight settle (each request has its own timeout).
        while let Some((intended, outcome)) = in_flight.next().await {
            record(&mut local, intended, outcome, &mut con);
        }
        self.stats.lock().expect("stats lock").merge(&local);
    }
}

fn record(
    s: &mut LoadStats,
    intended: Instant,
    outcome: Outcome,
    con: &mut Option<MultiplexedConnection>,
) {
    let us = intended.elapsed().as_micros().clamp(1, 3_600_000_000) as u64;
    match outcome {
        Outcome::SetOk => s.sets_ok += 1,
        Outcome::DelOk => s.dels_ok += 1,
        Outcome::GetOk { corrupted } => {
            s.gets_ok += 1;
            s.corrupted_reads += u64::from(corrupted);
        }
        Outcome::Failed => {
            s.errors += 1;
            // Reconnect on the next request; a broken connection stays broken.
            *con = None;
            return;
        }
    }
    let _ = s.latency_us.record(us);
}

async fn op(
    mut con: MultiplexedConnection,
    ledger: Arc<Ledger>,
    k: usize,
    read: bool,
    intended: Instant,
) -> (Instant, Outcome) {
    let key = Ledger::key_name(k);
    if read {
        let r: redis::RedisResult<Option<Vec<u8>>> =
            redis::cmd("GET").arg(&key).query_async(&mut con).await;
        return match r {
            Ok(v) => {
                let corrupted = ledger.decode(k, v.as_deref()) == ledger::Observed::Garbage;
                (intended, Outcome::GetOk { corrupted })
            }
            Err(_) => (intended, Outcome::Failed),
        };
    }
    let v = ledger.next_version(k);
    let result = match ledger.kind(k, v) {
        WriteKind::Set => redis::cmd("SET")
            .arg(&key)
            .arg(ledger.value(k, v))
            .query_async::<redis::Value>(&mut con)
            .await
            .map(|_| Outcome::SetOk),
        WriteKind::Del => redis::cmd("DEL")
            .arg(&key)
            .query_async::<redis::Value>(&mut con)
            .await
            .map(|_| Outcome::DelOk),
    };
    match result {
        Ok(o) => {
            ledger.ack(k, v);
            (intended, o)
        }
        // The write may or may not have been applied: it stays in doubt.
        Err(_) => (intended, Outcome::Failed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_own_disjoint_keys_covering_the_space() {
        let cfg = LoadConfig {
            target: String::new(),
            keys: 10,
            value_size: 8,
            set: 1.0,
            get: 0.0,
            del: 0.0,
            rate: 10.0,
            connections: 3,
            timeout: Duration::from_secs(1),
            seed: 1,
            distribution: dist::Distribution::Uniform,
        };
        let mut seen = std::collections::BTreeSet::new();
        for index in 0..3 {
            let conn = Conn {
                index,
                cfg: cfg.clone(),
                ledger: Arc::new(Ledger::new(10, 8, 1.0, 0.0, 1)),
                node_up: watch::channel(true).1,
                stop: watch::channel(false).1,
                stats: Default::default(),
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
}
