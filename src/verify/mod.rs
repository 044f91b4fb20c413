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
use crate::model::LostWrite;
use crate::workload::encode_mget;
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
}

/// Reads back every touched key through the node at `target`.
/// `progress` is called with (keys done, keys in all) now and then.
pub async fn online(
    target: &str,
    ledger: &Ledger,
    timeout: Duration,
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
                let verdict = ledger.judge(*k, seen);
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
    progress(keys.len(), keys.len());
    Ok(ReadBack {
        integrity: out,
        first_lost,
    })
}
