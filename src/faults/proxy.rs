//! A network fault proxy between the load and the node: in process, one
//! per cell, seeded like every chaos choice, and counted for the report.
//!
//! The faults are toxiproxy's toxics, written for soak:
//! - `latency` (with `jitter`): every chunk from the node is delivered that
//!   much later, so a request's round trip grows by it (toxiproxy's latency
//!   toxic on its default, downstream, side). Chunks are queued with their
//!   due time and written in order when due, so a pipelined load keeps its
//!   throughput and sees the delay in its latency.
//! - `bandwidth`: at most that many bytes a second, each way, per
//!   connection.
//! - `blackhole`: bytes are accepted and never delivered, connections stay
//!   open: a partition as a client sees it (toxiproxy's `timeout` with 0).
//!   A connection that lost bytes to it stays silent after it is lifted:
//!   TCP delivers in order or not at all, and a request let through after
//!   a dropped one would take the dropped one's reply (a write the node
//!   never saw, acknowledged: the first trial of this proxy did that).
//!   Its client times out and reconnects, as through a real partition.
//! - `reset`: every connection is reset (RST), and new ones as they come
//!   (toxiproxy's `reset_peer`).
//! - `slow_close`: a close is passed on that much later.
//!
//! Faults are set on the running proxy ([`Proxy::set`]) and apply to the
//! chunks read from then on, on open connections and new ones.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// The faults in force: a `network:` phase as the suite wrote it (jitter
/// is drawn per chunk, up to that much more or less than `latency`). The
/// default is none: a plain relay.
pub use crate::suite::NetworkSpec as Toxics;

pub use crate::model::NetworkStats as ProxyStats;

#[derive(Debug, Default)]
struct Counters {
    connections: AtomicU64,
    resets: AtomicU64,
    bytes_to_node: AtomicU64,
    bytes_to_load: AtomicU64,
    bytes_blackholed: AtomicU64,
    chunks_delayed: AtomicU64,
}

/// A running proxy; dropping it closes its listener and every connection.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    toxics: watch::Sender<Toxics>,
    counters: Arc<Counters>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free port of `upstream`'s address and relays every
    /// connection to `upstream`.
    pub async fn start(upstream: SocketAddr, seed: u64) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind(SocketAddr::new(upstream.ip(), 0)).await?;
        let addr = listener.local_addr()?;
        let (toxics, rx) = watch::channel(Toxics::default());
        let counters = Arc::new(Counters::default());
        let task = tokio::spawn(accept(listener, upstream, rx, counters.clone(), seed));
        Ok(Proxy {
            addr,
            toxics,
            counters,
            task,
        })
    }

    /// Where the load connects instead of the node.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Puts `t` in force (replacing the faults before it).
    pub fn set(&self, t: Toxics) {
        self.toxics.send_replace(t);
    }

    pub fn stats(&self) -> ProxyStats {
        let c = &self.counters;
        ProxyStats {
            connections: c.connections.load(Relaxed),
            resets: c.resets.load(Relaxed),
            bytes_to_node: c.bytes_to_node.load(Relaxed),
            bytes_to_load: c.bytes_to_load.load(Relaxed),
            bytes_blackholed: c.bytes_blackholed.load(Relaxed),
            chunks_delayed: c.chunks_delayed.load(Relaxed),
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // The connections live in the accept task's JoinSet: they go with it.
        self.task.abort();
    }
}

async fn accept(
    listener: TcpListener,
    upstream: SocketAddr,
    toxics: watch::Receiver<Toxics>,
    counters: Arc<Counters>,
    seed: u64,
) {
    let mut conns = JoinSet::new();
    let mut n: u64 = 0;
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        while conns.try_join_next().is_some() {}
        n += 1;
        counters.connections.fetch_add(1, Relaxed);
        if toxics.borrow().reset {
            counters.resets.fetch_add(1, Relaxed);
            reset(&client);
            continue;
        }
        // Each connection draws its jitter from its own stream of the seed.
        let seed = seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        conns.spawn(connection(
            client,
            upstream,
            toxics.clone(),
            counters.clone(),
            seed,
        ));
    }
}

/// Drops `s` with an RST instead of a FIN.
fn reset(s: &TcpStream) {
    let _ = s.set_zero_linger();
}

async fn connection(
    mut client: TcpStream,
    upstream: SocketAddr,
    mut toxics: watch::Receiver<Toxics>,
    counters: Arc<Counters>,
    seed: u64,
) {
    let Ok(mut server) = async {
        crate::net::netns::socket_for(&upstream)?
            .connect(upstream)
            .await
    }
    .await
    else {
        // The node is down: the load sees what it would see without us.
        reset(&client);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let was_reset = {
        let (cr, cw) = client.split();
        let (sr, sw) = server.split();
        let lost = AtomicBool::new(false);
        let up = pipe(
            cr,
            sw,
            &toxics,
            &counters.bytes_to_node,
            &counters,
            &lost,
            None,
        );
        let down = pipe(
            sr,
            cw,
            &toxics,
            &counters.bytes_to_load,
            &counters,
            &lost,
            Some(seed),
        );
        let mut watch = toxics.clone();
        tokio::select! {
            _ = async { tokio::join!(up, down) } => false,
            _ = watch.wait_for(|t| t.reset) => true,
        }
    };
    if was_reset || toxics.borrow_and_update().reset {
        counters.resets.fetch_add(1, Relaxed);
        reset(&client);
        reset(&server);
    }
}

/// Relays one direction: chunks are read as they come and queued with the
/// time they are due, and written in order when due. The direction with a
/// seed (from the node) is the one `latency` delays. `lost` is shared by
/// both directions: once either dropped bytes, neither delivers any more.
async fn pipe(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    toxics: &watch::Receiver<Toxics>,
    delivered: &AtomicU64,
    counters: &Counters,
    lost: &AtomicBool,
    delayed: Option<u64>,
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let read = async move {
        let mut rng = StdRng::seed_from_u64(delayed.unwrap_or(0));
        let mut buf = vec![0u8; 16 * 1024];
        let mut last_due = Instant::now();
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let t = *toxics.borrow();
            if t.blackhole || lost.load(Relaxed) {
                lost.store(true, Relaxed);
                counters.bytes_blackholed.fetch_add(n as u64, Relaxed);
                continue;
            }
            let delay = match delayed {
                Some(_) => delay(&t, &mut rng),
                None => Duration::ZERO,
            };
            if !delay.is_zero() {
                counters.chunks_delayed.fetch_add(1, Relaxed);
            }
            // In order: a chunk is never due before the one read before it.
            let due = (Instant::now() + delay).max(last_due);
            last_due = due;
            if tx.send((due, buf[..n].to_vec())).is_err() {
                break;
            }
        }
    };
    let write = async {
        while let Some((due, bytes)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            // A chunk takes its size over the bandwidth to pass.
            let bandwidth = toxics.borrow().bandwidth;
            if let Some(rate) = bandwidth.filter(|r| *r > 0) {
                tokio::time::sleep(Duration::from_secs_f64(bytes.len() as f64 / rate as f64)).await;
            }
            if to.write_all(&bytes).await.is_err() {
                break;
            }
            delivered.fetch_add(bytes.len() as u64, Relaxed);
        }
        let slow = toxics.borrow().slow_close;
        if !slow.is_zero() {
            tokio::time::sleep(slow).await;
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(read, write);
}

/// `latency` plus a uniform draw in `-jitter..=jitter`, never below zero.
fn delay(t: &Toxics, rng: &mut StdRng) -> Duration {
    if t.jitter.is_zero() {
        return t.latency;
    }
    let j = t.jitter.as_secs_f64();
    let d = t.latency.as_secs_f64() + rng.random_range(-j..=j);
    Duration::from_secs_f64(d.max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server; returns its address and a count of bytes it got.
    async fn echo() -> (SocketAddr, Arc<AtomicU64>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let got = Arc::new(AtomicU64::new(0));
        let g = got.clone();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = l.accept().await.unwrap();
                let g = g.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        g.fetch_add(n as u64, Relaxed);
                        if s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        (addr, got)
    }

    async fn round_trip(s: &mut TcpStream, msg: &[u8]) -> Vec<u8> {
        s.write_all(msg).await.unwrap();
        let mut back = vec![0u8; msg.len()];
        s.read_exact(&mut back).await.unwrap();
        back
    }

    /// Waits for a condition the proxy's counters reach, however long the
    /// machine takes (the test harness' timeout is the bound).
    async fn until(f: impl Fn() -> bool) {
        while !f() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn a_plain_relay_and_latency_added_to_the_replies() {
        let (node, _) = echo().await;
        let p = Proxy::start(node, 1).await.unwrap();
        let mut s = TcpStream::connect(p.addr()).await.unwrap();
        assert_eq!(round_trip(&mut s, b"PING").await, b"PING");
        assert_eq!(p.stats().chunks_delayed, 0);

        p.set(Toxics {
            latency: Duration::from_millis(40),
            ..Toxics::default()
        });
        let t = std::time::Instant::now();
        assert_eq!(round_trip(&mut s, b"PONG").await, b"PONG");
        // The reply comes that much later: the round trip grows by it.
        assert!(
            t.elapsed() >= Duration::from_millis(40),
            "{:?}",
            t.elapsed()
        );
        let st = p.stats();
        assert_eq!(st.chunks_delayed, 1);
        assert_eq!((st.bytes_to_node, st.bytes_to_load), (8, 8));
        assert_eq!(st.connections, 1);
    }

    #[tokio::test]
    async fn a_blackhole_swallows_bytes_and_silences_the_connection_for_good() {
        let (node, got) = echo().await;
        let p = Proxy::start(node, 2).await.unwrap();
        let mut s = TcpStream::connect(p.addr()).await.unwrap();
        assert_eq!(round_trip(&mut s, b"a").await, b"a");
        p.set(Toxics {
            blackhole: true,
            ..Toxics::default()
        });
        s.write_all(b"lost").await.unwrap();
        until(|| p.stats().bytes_blackholed == 4).await;
        assert_eq!(got.load(Relaxed), 1, "the node got nothing more");
        // Lifted: that connection stays silent (a later request must not
        // take the lost one's reply); a new one carries bytes again.
        p.set(Toxics::default());
        s.write_all(b"late").await.unwrap();
        until(|| p.stats().bytes_blackholed == 8).await;
        assert_eq!(got.load(Relaxed), 1);
        let mut fresh = TcpStream::connect(p.addr()).await.unwrap();
        assert_eq!(round_trip(&mut fresh, b"back").await, b"back");
    }

    #[tokio::test]
    async fn a_reset_resets_open_connections_and_refuses_new_ones() {
        let (node, _) = echo().await;
        let p = Proxy::start(node, 3).await.unwrap();
        let mut s = TcpStream::connect(p.addr()).await.unwrap();
        assert_eq!(round_trip(&mut s, b"x").await, b"x");
        p.set(Toxics {
            reset: true,
            ..Toxics::default()
        });
        let mut buf = [0u8; 1];
        let e = s.read(&mut buf).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset);
        let mut n = TcpStream::connect(p.addr()).await.unwrap();
        let e = n.read(&mut buf).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset);
        assert_eq!(p.stats().resets, 2);
    }

    #[tokio::test]
    async fn bandwidth_caps_bytes_per_second() {
        let (node, _) = echo().await;
        let p = Proxy::start(node, 4).await.unwrap();
        p.set(Toxics {
            bandwidth: Some(256 * 1024),
            ..Toxics::default()
        });
        let mut s = TcpStream::connect(p.addr()).await.unwrap();
        let msg = vec![7u8; 64 * 1024];
        let t = std::time::Instant::now();
        assert_eq!(round_trip(&mut s, &msg).await, msg);
        // 64 KiB at 256 KiB/s: a quarter of a second to pass one way (the
        // way back overlaps it).
        assert!(
            t.elapsed() >= Duration::from_millis(240),
            "{:?}",
            t.elapsed()
        );
    }

    #[test]
    fn jitter_is_drawn_from_the_seed_and_never_negative() {
        let t = Toxics {
            latency: Duration::from_millis(5),
            jitter: Duration::from_millis(10),
            ..Toxics::default()
        };
        let draw = |seed| {
            let mut r = StdRng::seed_from_u64(seed);
            (0..100).map(|_| delay(&t, &mut r)).collect::<Vec<_>>()
        };
        assert_eq!(draw(9), draw(9));
        assert!(draw(9).iter().all(|d| *d <= Duration::from_millis(15)));
        assert!(draw(9).iter().any(|d| d.is_zero()));
    }
}
