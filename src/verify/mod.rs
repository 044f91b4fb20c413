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
/// Client adapters that may exit during one read-back before it fails.
const MAX_CLIENT_RESTARTS: usize = 20;

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
    /// Client adapters that exited during it.
    client_restarts: usize,
}

/// Reads back every touched key through the node with `protocol`; after a
/// power cut, `tails` tells the unsynced tail from holes. `progress` is
/// called with (keys done, keys in all) now and then.
///
/// A read the node fails (an error answer, not a broken connection) is
/// asked again; a key the live node fails to read [`RETRIES`] times over
/// is unreadable, judged corrupted (s3rver, killed while it wrote an
/// object's metadata, answers 500 for that object ever after). A session
/// that breaks fails the read-back: the node may have died under it.
pub async fn online(
    protocol: &dyn Protocol,
    ledger: &Ledger,
    timeout: Duration,
    tails: Option<Tails>,
    progress: impl FnMut(usize, usize) + Send,
) -> Result<ReadBack, VerifyError> {
    let target = protocol_target(protocol);
    let fail = |reason: String| VerifyError {
        target: target.clone(),
        reason,
        fatal: false,
    };
    let keys = Judge::keys(ledger);
    let per_batch = protocol.batch().max(1);
    let batches = keys.len().div_ceil(per_batch);
    // A pipelining session keeps one of the node's threads busy: one a
    // core serves a node that reads on several (soak-node, redis-server's
    // I/O threads, etcd); one key a request needs more sessions still to
    // be read back in reasonable time.
    let depth = protocol.depth().clamp(1, PIPELINE);
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let sessions = if depth >= PIPELINE {
        cores.min(4)
    } else {
        16 / depth
    }
    .clamp(1, batches.max(1));
    let timeout = timeout.max(Duration::from_secs(10));
    let judge = Mutex::new((Judge::new(ledger, tails), progress, Instant::now()));
    let work = Mutex::new(Work {
        next: 0,
        again: vec![],
        failed: None,
        client_restarts: 0,
    });
    let all = keys.len();
    let take = || {
        let mut w = work.lock().expect("work");
        if let Some(b) = w.again.pop() {
            return Some(b);
        }
        let start = w.next;
        (start < keys.len()).then(|| {
            let len = per_batch.min(keys.len() - start);
            w.next += len;
            Batch {
                start,
                len,
                asked: 0,
            }
        })
    };
    let one = |_: usize| async {
        let mut session = None;
        let mut in_flight: std::collections::HashMap<u64, Batch> = Default::default();
        let mut next_id = 0u64;
        loop {
            if work.lock().expect("work").failed.is_some() {
                return;
            }
            let s = match session.as_mut() {
                Some(s) => s,
                None => match protocol
                    .connect(crate::protocol::Timeouts {
                        connect: Duration::from_secs(5),
                        request: timeout,
                    })
                    .await
                {
                    Ok(s) => session.insert(s),
                    Err(e) => {
                        work.lock().expect("work").failed.get_or_insert(e);
                        return;
                    }
                },
            };
            while in_flight.len() < depth.min(s.capacity()) {
                let Some(mut b) = take() else { break };
                b.asked += 1;
                s.submit(
                    next_id,
                    Request::Get {
                        keys: &keys[b.start..b.start + b.len],
                    },
                );
                in_flight.insert(next_id, b);
                next_id += 1;
            }
            if in_flight.is_empty() {
                return;
            }
            let sent = s.flush();
            let waited = match sent {
                Ok(()) => tokio::time::timeout(timeout, crate::protocol::progress(s.as_mut()))
                    .await
                    .map_err(|_| SessionError::Broken(format!("no reply within {timeout:?}"))),
                Err(e) => Err(e),
            };
            let mut retry: Vec<(Batch, String)> = vec![];
            let drained = waited.and_then(|()| {
                s.drain(&mut |id, outcome| {
                    let Some(b) = in_flight.remove(&id) else {
                        return;
                    };
                    let asked = &keys[b.start..b.start + b.len];
                    match outcome {
                        Outcome::Values(values) if values.len() == asked.len() => {
                            let mut j = judge.lock().expect("judge");
                            let (judge, progress, last) = &mut *j;
                            for (k, v) in asked.iter().zip(values) {
                                judge.key(*k, *v);
                            }
                            if last.elapsed() >= Duration::from_secs(1) {
                                *last = Instant::now();
                                progress(judge.judged(), all);
                            }
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
                if b.len > 1 {
                    // Which of its keys fails: each alone.
                    let mut w = work.lock().expect("work");
                    w.again.extend((0..b.len).map(|i| Batch {
                        start: b.start + i,
                        len: 1,
                        asked: 0,
                    }));
                } else if b.asked > RETRIES {
                    judge
                        .lock()
                        .expect("judge")
                        .0
                        .unreadable(keys[b.start], &why);
                } else {
                    work.lock().expect("work").again.push(b);
                }
            }
            match drained {
                Ok(()) => {}
                // An adapter that exited: another one reads what it was
                // asked (a few times over, not forever).
                Err(SessionError::ClientExited(why)) => {
                    session = None;
                    let mut w = work.lock().expect("work");
                    w.client_restarts += 1;
                    if w.client_restarts > MAX_CLIENT_RESTARTS {
                        w.failed.get_or_insert(SessionError::Fatal(format!(
                            "{why}; {MAX_CLIENT_RESTARTS} adapters exited during one read-back"
                        )));
                        return;
                    }
                    let lost: Vec<Batch> = in_flight.drain().map(|(_, b)| b).collect();
                    w.again.extend(lost);
                }
                // A session that broke fails the read-back: the node may
                // have died under it, which the caller finds out (and
                // restarts it, and reads back again from the start).
                Err(e) => {
                    work.lock().expect("work").failed.get_or_insert(e);
                    return;
                }
            }
        }
    };
    futures::future::join_all((0..sessions).map(one)).await;
    if let Some(e) = work.into_inner().expect("work").failed {
        let fatal = matches!(e, SessionError::Fatal(_));
        return Err(VerifyError {
            fatal,
            ..fail(e.to_string())
        });
    }
    let (judge, mut progress, _) = judge.into_inner().expect("judge");
    progress(all, all);
    Ok(judge.finish())
}

/// Where a protocol's requests go, for messages.
fn protocol_target(p: &dyn Protocol) -> String {
    format!("{} ({})", p.describe(), p.name())
}
