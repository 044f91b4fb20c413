//! Verification: read back every key the ledger knows and judge it.
//!
//! Online verification reads through the node itself, in whatever protocol
//! the suite's workload speaks (`crate::protocol`): batches of keys where
//! the protocol reads many at once (RESP's MGET), else one key a request
//! on several sessions at once. The oracle (`crate::oracle`) judges what
//! comes back.

#[cfg(feature = "node")]
pub mod offline;
pub mod saved;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::future::FutureExt;

use crate::driver::Exited;
pub use crate::model::Integrity;
use crate::oracle::{Judge, Ledger};
pub use crate::oracle::{ReadBack, Tails};
use crate::protocol::{Outcome, Protocol, Request, SessionError};

/// Requests in flight on one read-back session at most (with MGETs of a
/// thousand keys, eight of them).
const PIPELINE: usize = 8;
/// Times one batch is asked again after a read the node failed (an error
/// answer, not a broken connection) before the read-back gives up.
const RETRIES: u32 = 3;
/// How soon after the connection it closed a dying node is seen to exit.
const DEATH_SHOWS_WITHIN: Duration = Duration::from_millis(250);
/// Sessions that may end during one read-back (client adapters that
/// exited, connections a live node closed) before it fails.
const MAX_REOPENED: usize = 20;

#[derive(Debug, thiserror::Error)]
#[error("verification could not read from {target}: {reason}")]
pub struct VerifyError {
    pub target: String,
    pub reason: String,
    /// The protocol cannot go on (an adapter that does not speak it): not
    /// the node's doing.
    pub fatal: bool,
}

/// A run of keys one request asks for: `keys[start..start + len]`.
#[derive(Debug, Clone, Copy)]
struct Batch {
    start: usize,
    len: usize,
    /// Times it was asked.
    asked: u32,
}

/// The batches of keys a read-back asks for, shared by its sessions.
struct Work {
    /// Where the next batch no session has taken starts.
    next: usize,
    /// Batches to ask again: after a read the node failed, or the keys of
    /// a failed multi-key read, one a request, to find which key fails.
    again: Vec<Batch>,
    /// The first failure that ends the read-back.
    failed: Option<SessionError>,
    /// Sessions opened again during it: after a client adapter exited, or
    /// a live node closed the connection.
    reopened: usize,
}

/// Reads back every touched key through the node with `protocol`; after a
/// power cut, `tails` tells the unsynced tail from holes. `progress` is
/// called with (keys done, keys in all) now and then.
///
/// A read the node fails (an error answer, not a broken connection) is
/// asked again; a key the live node fails to read [`RETRIES`] times over
/// is unreadable, judged corrupted (s3rver, killed while it wrote an
/// object's metadata, answers 500 for that object ever after). A
/// connection the node closes is opened again and what was in flight asked
/// again, as after a failed read: a live node may drop a connection it
/// cannot allocate a reply for (Netty out of direct memory). A node that
/// died under the read-back refuses the new connection, and one that does
/// not answer within the timeout fails it; the caller finds out why.
#[allow(clippy::too_many_arguments)]
pub async fn online(
    protocol: &dyn Protocol,
    ledger: &Ledger,
    timeout: Duration,
    tails: Option<Tails>,
    node_exited: Option<Exited>,
    history: Option<&crate::history::record::Recorder>,
    progress: impl FnMut(usize, usize) + Send,
) -> Result<ReadBack, VerifyError> {
    let keys = Judge::keys(ledger);
    let per_batch = protocol.batch().max(1);
    let (depth, sessions) = sessions(protocol, keys.len().div_ceil(per_batch));
    let all = keys.len();
    let shared = Shared {
        keys: &keys,
        per_batch,
        depth,
        timeout: timeout.max(Duration::from_secs(10)),
        exited: node_exited.map(FutureExt::shared),
        judge: Mutex::new((Judge::new(ledger, tails), progress, Instant::now())),
        work: Mutex::new(Work {
            next: 0,
            again: vec![],
            failed: None,
            reopened: 0,
        }),
        ledger,
        history,
    };
    futures::future::join_all((0..sessions).map(|i| shared.session(protocol, i))).await;
    if let Some(e) = shared.work.into_inner().expect("work").failed {
        return Err(VerifyError {
            target: protocol_target(protocol),
            fatal: matches!(e, SessionError::Fatal(_)),
            reason: e.to_string(),
        });
    }
    let (judge, mut progress, _) = shared.judge.into_inner().expect("judge");
    progress(all, all);
    Ok(judge.finish())
}

/// Requests in flight on a session, and how many sessions read at once.
/// A pipelining session keeps one of the node's threads busy: one a core
/// serves a node that reads on several (soak-node, redis-server's I/O
/// threads, etcd); one key a request needs more sessions still to be read
/// back in reasonable time.
fn sessions(protocol: &dyn Protocol, batches: usize) -> (usize, usize) {
    let depth = protocol.depth().clamp(1, PIPELINE);
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let sessions = if depth >= PIPELINE {
        cores.min(4)
    } else {
        16 / depth
    };
    (depth, sessions.clamp(1, batches.max(1)))
}

/// What a read-back's sessions share: the keys, the batches left, and the
/// judge with the progress callback and when it was last called.
struct Shared<'a, P> {
    keys: &'a [usize],
    per_batch: usize,
    depth: usize,
    timeout: Duration,
    /// Resolves when the node exits: a closed connection is its death, not
    /// a dropped request, when it does so soon after.
    exited: Option<futures::future::Shared<Exited>>,
    judge: Mutex<(Judge<'a>, P, Instant)>,
    work: Mutex<Work>,
    ledger: &'a Ledger,
    /// The cell's history, which the read-back's reads go into (each
    /// session a client of its own).
    history: Option<&'a crate::history::record::Recorder>,
}

/// The client number of read-back session `i` in the history: beyond any
/// load connection's.
pub const READBACK_CLIENT: u32 = 1 << 20;

impl<P: FnMut(usize, usize) + Send> Shared<'_, P> {
    /// The next batch to ask for: one to ask again first.
    fn take(&self) -> Option<Batch> {
        let mut w = self.work.lock().expect("work");
        if let Some(b) = w.again.pop() {
            return Some(b);
        }
        let start = w.next;
        (start < self.keys.len()).then(|| {
            let len = self.per_batch.min(self.keys.len() - start);
            w.next += len;
            Batch {
                start,
                len,
                asked: 0,
            }
        })
    }

    fn fail(&self, e: SessionError) {
        self.work.lock().expect("work").failed.get_or_insert(e);
    }

    /// Whether the node exits within [`DEATH_SHOWS_WITHIN`] (at once if it
    /// already has); never, where it is not watched (`soak verify`).
    async fn died_soon(&self) -> bool {
        match &self.exited {
            Some(exited) => tokio::time::timeout(DEATH_SHOWS_WITHIN, exited.clone())
                .await
                .is_ok(),
            None => false,
        }
    }

    fn failed(&self) -> bool {
        self.work.lock().expect("work").failed.is_some()
    }

    /// Judges the values a batch read.
    fn judge(&self, asked: &[usize], values: &[Option<&[u8]>]) {
        let mut j = self.judge.lock().expect("judge");
        let (judge, progress, last) = &mut *j;
        for (k, v) in asked.iter().zip(values) {
            judge.key(*k, *v);
        }
        if last.elapsed() >= Duration::from_secs(1) {
            *last = Instant::now();
            progress(judge.judged(), self.keys.len());
        }
    }

    /// The reads of a batch, into the history.
    fn record(
        &self,
        buf: &mut crate::history::record::Buf,
        index: usize,
        asked: &[usize],
        values: &[Option<&[u8]>],
        invoked: std::time::Instant,
        now: std::time::Instant,
    ) {
        use crate::history::record::{Asked, Ended, Seen};
        for (k, v) in asked.iter().zip(values) {
            let seen = match self.ledger.decode(*k, *v) {
                crate::oracle::Observed::Version(x) => Seen::Version(x),
                crate::oracle::Observed::Absent => Seen::Absent,
                crate::oracle::Observed::Garbage => Seen::Garbage,
            };
            let client = READBACK_CLIENT + index as u32;
            buf.op(
                client,
                *k as u64,
                Asked::Read,
                Ended::Ok(Some(seen)),
                invoked,
                now,
            );
        }
    }

    /// A batch whose read failed: a multi-key one is asked again a key a
    /// request, to find which key fails; a key that failed [`RETRIES`]
    /// times over is unreadable.
    fn again(&self, b: Batch, why: &str) {
        if b.len > 1 {
            let mut w = self.work.lock().expect("work");
            w.again.extend((0..b.len).map(|i| Batch {
                start: b.start + i,
                len: 1,
                asked: 0,
            }));
        } else if b.asked > RETRIES {
            self.judge
                .lock()
                .expect("judge")
                .0
                .unreadable(self.keys[b.start], why);
        } else {
            self.work.lock().expect("work").again.push(b);
        }
    }

    /// Keeps as many batches in flight on `s` as the depth allows (noting
    /// when each was sent if the history is recorded).
    fn submit(
        &self,
        s: &mut dyn crate::protocol::Session,
        in_flight: &mut std::collections::HashMap<u64, Batch>,
        sent: &mut std::collections::HashMap<u64, std::time::Instant>,
        next_id: &mut u64,
        recording: bool,
    ) {
        while in_flight.len() < self.depth.min(s.capacity()) {
            let Some(mut b) = self.take() else { break };
            b.asked += 1;
            s.submit(
                *next_id,
                Request::Get {
                    keys: &self.keys[b.start..b.start + b.len],
                },
            );
            in_flight.insert(*next_id, b);
            if recording {
                sent.insert(*next_id, std::time::Instant::now());
            }
            *next_id += 1;
        }
    }

    /// One session's loop: connect, keep batches in flight, judge what
    /// comes back, until no batch is left or the read-back failed.
    async fn session(&self, protocol: &dyn Protocol, index: usize) {
        let mut session = None;
        let mut in_flight: std::collections::HashMap<u64, Batch> = Default::default();
        let mut sent: std::collections::HashMap<u64, std::time::Instant> = Default::default();
        let mut buf = self.history.map(|h| h.buf());
        let mut next_id = 0u64;
        loop {
            if self.failed() {
                return;
            }
            let s = match session.as_mut() {
                Some(s) => s,
                None => match protocol
                    .connect(crate::protocol::Timeouts {
                        connect: Duration::from_secs(5),
                        request: self.timeout,
                    })
                    .await
                {
                    Ok(s) => session.insert(s),
                    Err(e) => return self.fail(e),
                },
            };
            self.submit(
                s.as_mut(),
                &mut in_flight,
                &mut sent,
                &mut next_id,
                buf.is_some(),
            );
            if in_flight.is_empty() {
                return;
            }
            let timeout = self.timeout;
            let waited = match s.flush() {
                Ok(()) => tokio::time::timeout(timeout, crate::protocol::progress(s.as_mut()))
                    .await
                    .map_err(|_| SessionError::Broken(format!("no reply within {timeout:?}"))),
                Err(e) => Err(e),
            };
            let timed_out = waited.is_err();
            let mut retry: Vec<(Batch, String)> = vec![];
            let now = std::time::Instant::now();
            let drained = waited.and_then(|()| {
                s.drain(&mut |id, outcome| {
                    let Some(b) = in_flight.remove(&id) else {
                        return;
                    };
                    let invoked = sent.remove(&id);
                    let asked = &self.keys[b.start..b.start + b.len];
                    match outcome {
                        Outcome::Values(values) if values.len() == asked.len() => {
                            if let (Some(buf), Some(at)) = (buf.as_mut(), invoked) {
                                self.record(buf, index, asked, values, at, now);
                            }
                            self.judge(asked, values)
                        }
                        Outcome::Values(values) => retry.push((
                            b,
                            format!(
                                "a read of {} keys returned {} values",
                                asked.len(),
                                values.len()
                            ),
                        )),
                        Outcome::NotDone(e) | Outcome::Unknown(e) => {
                            retry.push((b, format!("a read failed: {e}")))
                        }
                        Outcome::Done => retry.push((b, "a read answered as a write".into())),
                    }
                })
            });
            for (b, why) in retry {
                self.again(b, &why);
            }
            if let (Some(h), Some(b)) = (self.history, buf.as_mut()) {
                h.ship(b);
            }
            let ended = match drained {
                Ok(()) => continue,
                Err(e @ SessionError::ClientExited(_)) => e,
                Err(e @ SessionError::Broken(_)) if !timed_out => e,
                Err(e) => return self.fail(e),
            };
            session = None;
            if !self
                .reopen(ended, in_flight.drain().map(|(_, b)| b).collect())
                .await
            {
                return;
            }
        }
    }

    /// A session that ended under the read-back: whether another may be
    /// opened to read what it was asked (a few times over, not forever).
    /// After an adapter exited, as it was asked; after the node closed the
    /// connection, as after a failed read, so that a key that always
    /// breaks it ends unreadable. A node that died fails the read-back
    /// (its caller restarts it).
    async fn reopen(&self, ended: SessionError, in_flight: Vec<Batch>) -> bool {
        let fault = matches!(ended, SessionError::Broken(_));
        if fault && self.died_soon().await {
            self.fail(ended);
            return false;
        }
        {
            let mut w = self.work.lock().expect("work");
            w.reopened += 1;
            if w.reopened > MAX_REOPENED {
                w.failed.get_or_insert(if fault {
                    SessionError::Broken(format!(
                        "{ended}; the node closed {MAX_REOPENED} connections during one read-back"
                    ))
                } else {
                    SessionError::Fatal(format!(
                        "{ended}; {MAX_REOPENED} adapters exited during one read-back"
                    ))
                });
                return false;
            }
            if !fault {
                w.again.extend(in_flight);
                return true;
            }
        }
        for b in in_flight {
            self.again(b, &ended.to_string());
        }
        true
    }
}

/// Where a protocol's requests go, for messages.
fn protocol_target(p: &dyn Protocol) -> String {
    format!("{} ({})", p.describe(), p.name())
}
