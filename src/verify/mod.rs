//! Verification: read back every key the ledger knows and judge it.
//!
//! Online verification reads through the node itself with pipelined MGETs,
//! so it works with any node that speaks RESP.

#[cfg(feature = "node")]
pub mod offline;
pub mod saved;

use std::time::{Duration, Instant};

use crate::net::resp::{Client, Value};

pub use crate::model::Integrity;
use crate::model::{Hole, LostWrite};
use crate::workload::encode_mget;
use crate::workload::ledger::Observed;
use crate::workload::ledger::{KeyVerdict, Ledger};

/// Keys per MGET.
const BATCH: usize = 1000;
/// MGETs in flight at once on the one connection.
const PIPELINE: usize = 8;

impl Integrity {
    /// Counts one key's verdict.
    pub fn count(&mut self, v: KeyVerdict) {
        match v {
            KeyVerdict::Ok => self.verified += 1,
            KeyVerdict::InDoubt => self.in_doubt += 1,
            KeyVerdict::Lost => self.lost += 1,
            KeyVerdict::Corrupted => self.corrupted += 1,
            KeyVerdict::Resurrected => self.resurrected += 1,
            KeyVerdict::Untouched => {}
        }
    }
}

/// After a power cut, how to tell the writes a node may lose (the unsynced
/// tail of each load connection) from a hole.
///
/// Each connection's writes are acknowledged in order, so what a power cut
/// leaves of them must be a prefix: RocksDB's expected-state rule in its
/// crash test, where losing the tail is allowed when sync is off and a
/// hole is a bug. A write lost while a later write of the same connection
/// (acknowledged after it) was read back is a hole, counted as lost; a
/// write lost after every survivor is the tail, counted as
/// `lost_unsynced`, and settled as the key's state where `allowed`.
#[derive(Debug, Clone, Copy)]
pub struct Tails {
    /// The load's connections: connection `c` owns the keys `k % n == c`.
    pub connections: usize,
    /// `durability: unsynced-tail-allowed`.
    pub allowed: bool,
}

/// A write the read-back found missing, kept until every survivor is known.
struct Missing {
    key: usize,
    acked: u32,
    seen: Observed,
    verdict: KeyVerdict,
}

impl Tails {
    /// Sorts `missing` into the tail and the holes, counting each in `out`.
    fn judge(
        &self,
        ledger: &Ledger,
        missing: Vec<Missing>,
        survived: &[u32],
        out: &mut Integrity,
        first_lost: &mut Option<LostWrite>,
    ) -> Vec<Hole> {
        let mut holes: Vec<Hole> = vec![];
        let mut first_tail = None;
        let mut missing = missing;
        missing.sort_by_key(|m| ledger.ack_order(m.key));
        for m in missing {
            let c = m.key % self.connections.max(1);
            let order = ledger.ack_order(m.key);
            if order > survived[c] {
                out.lost_unsynced += 1;
                if self.allowed {
                    ledger.settle_lost(m.key, m.seen);
                } else if first_tail.is_none() {
                    first_tail = Some(ledger.lost_write(m.key, m.acked, m.seen));
                }
                continue;
            }
            out.count(m.verdict);
            match holes.iter_mut().find(|h| h.connection == c) {
                Some(h) => h.lost += 1,
                None => holes.push(Hole {
                    connection: c,
                    first_lost: ledger.lost_write(m.key, m.acked, m.seen),
                    survivor: String::new(),
                    lost: 1,
                }),
            }
        }
        for h in &mut holes {
            h.survivor = survivor_name(ledger, h.connection, self.connections, survived);
        }
        if first_lost.is_none() {
            *first_lost = holes.first().map(|h| h.first_lost.clone()).or(first_tail);
        }
        holes
    }
}

/// The key whose acknowledgement is connection `c`'s newest survivor.
fn survivor_name(ledger: &Ledger, c: usize, n: usize, survived: &[u32]) -> String {
    (c..ledger.keys())
        .step_by(n.max(1))
        .find(|k| ledger.ack_order(*k) == survived[c] && survived[c] > 0)
        .map(Ledger::key_name)
        .unwrap_or_default()
}

#[derive(Debug, thiserror::Error)]
#[error("verification could not read from {target}: {reason}")]
pub struct VerifyError {
    pub target: String,
    pub reason: String,
}

/// What a read-back found: the counts, and the first write lost (or
/// corrupted, or resurrected), for a developer to look up.
#[derive(Debug, Clone, Default)]
pub struct ReadBack {
    pub integrity: Integrity,
    pub first_lost: Option<LostWrite>,
    /// After a power cut, the connections whose losses were not a tail.
    pub holes: Vec<Hole>,
}

/// Reads back every touched key through the node at `target`; after a
/// power cut, `tails` tells the unsynced tail from holes.
/// `progress` is called with (keys done, keys in all) now and then.
pub async fn online(
    target: &str,
    ledger: &Ledger,
    timeout: Duration,
    tails: Option<Tails>,
    mut progress: impl FnMut(usize, usize),
) -> Result<ReadBack, VerifyError> {
    let fail = |reason: String| VerifyError {
        target: target.to_string(),
        reason,
    };
    let mut con = Client::connect(
        target,
        Duration::from_secs(5),
        timeout.max(Duration::from_secs(10)),
    )
    .await
    .map_err(|e| fail(e.to_string()))?;
    let keys: Vec<usize> = (0..ledger.keys())
        .filter(|k| ledger.is_touched(*k))
        .collect();
    let mut out = Integrity::default();
    let mut first_lost = None;
    let mut missing = vec![];
    let mut survived = vec![0u32; tails.map_or(0, |t| t.connections.max(1))];
    let mut last_report = Instant::now();
    let mut wbuf = Vec::new();
    for group in keys.chunks(BATCH * PIPELINE) {
        let batches: Vec<&[usize]> = group.chunks(BATCH).collect();
        wbuf.clear();
        for batch in &batches {
            encode_mget(&mut wbuf, batch);
        }
        let replies = con
            .pipeline(&wbuf, batches.len())
            .await
            .map_err(|e| fail(e.to_string()))?;
        for (batch, reply) in batches.iter().zip(replies) {
            let values = match reply {
                Value::Array(Some(values)) => values,
                Value::Error(e) => {
                    return Err(fail(format!(
                        "MGET answered {:?}",
                        String::from_utf8_lossy(&e)
                    )))
                }
                other => return Err(fail(format!("MGET answered {other:?}"))),
            };
            if values.len() != batch.len() {
                return Err(fail(format!(
                    "MGET of {} keys returned {} values",
                    batch.len(),
                    values.len()
                )));
            }
            for (k, v) in batch.iter().zip(values) {
                let seen = ledger.decode(*k, v.as_deref());
                let acked = ledger.snapshot(*k).0;
                let order = ledger.ack_order(*k);
                let verdict = ledger.judge(*k, seen);
                if let Some(t) = tails {
                    let c = *k % t.connections.max(1);
                    match verdict {
                        // The newest acknowledged write read back (a DEL
                        // read as nothing says less: not counted).
                        KeyVerdict::Ok if seen == Observed::Version(acked) => {
                            survived[c] = survived[c].max(order);
                        }
                        KeyVerdict::Lost | KeyVerdict::Resurrected => {
                            missing.push(Missing {
                                key: *k,
                                acked,
                                seen,
                                verdict,
                            });
                            continue;
                        }
                        _ => {}
                    }
                }
                if first_lost.is_none()
                    && matches!(
                        verdict,
                        KeyVerdict::Lost | KeyVerdict::Corrupted | KeyVerdict::Resurrected
                    )
                {
                    first_lost = Some(ledger.lost_write(*k, acked, seen));
                }
                out.count(verdict);
            }
        }
        if last_report.elapsed() > Duration::from_secs(1) {
            progress(
                out.verified as usize + out.in_doubt as usize + out.lost as usize,
                keys.len(),
            );
            last_report = Instant::now();
        }
    }
    let holes = match tails {
        Some(t) => t.judge(ledger, missing, &survived, &mut out, &mut first_lost),
        None => vec![],
    };
    progress(keys.len(), keys.len());
    Ok(ReadBack {
        integrity: out,
        first_lost,
        holes,
    })
}
