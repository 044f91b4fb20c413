//! The oracle: the one place where acknowledged writes are judged.
//!
//! The [`Ledger`] records every write the load sends and how it ended:
//! each request ends as Jepsen's three outcomes say, done (acknowledged),
//! definitely not done ([`Ledger::fail`]), or unknown (left in doubt). The
//! load judges its reads against the ledger as it was when each read was
//! sent ([`Ledger::judge_read`]); a read-back judges every key the ledger
//! knows with a [`Judge`], which after a power cut also tells the unsynced
//! tail of each connection from a hole ([`Tails`]). Nothing here knows a
//! protocol: values come in as bytes (or nothing), from whatever client
//! read them (see the `protocol` module).

pub mod ledger;

pub use crate::model::Integrity;
use crate::model::{Hole, LostWrite};
pub use ledger::{KeyVerdict, Ledger, Observed, WriteKind};

impl Integrity {
    /// Counts one key's verdict.
    pub fn count(&mut self, v: KeyVerdict) {
        match v {
            KeyVerdict::Ok => self.verified += 1,
            KeyVerdict::InDoubt => self.in_doubt += 1,
            KeyVerdict::Lost => self.lost += 1,
            KeyVerdict::Corrupted => self.corrupted += 1,
            KeyVerdict::Resurrected => self.resurrected += 1,
            KeyVerdict::Aborted => self.aborted += 1,
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
                    first_tail = Some(ledger.lost_write(m.key, m.acked, m.seen, KeyVerdict::Lost));
                }
                continue;
            }
            out.count(m.verdict);
            match holes.iter_mut().find(|h| h.connection == c) {
                Some(h) => h.lost += 1,
                None => holes.push(Hole {
                    connection: c,
                    first_lost: ledger.lost_write(m.key, m.acked, m.seen, m.verdict),
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

/// What a read-back found: the counts, and the first write lost (or
/// corrupted, resurrected, aborted), for a developer to look up.
#[derive(Debug, Clone, Default)]
pub struct ReadBack {
    pub integrity: Integrity,
    pub first_lost: Option<LostWrite>,
    /// After a power cut, the connections whose losses were not a tail.
    pub holes: Vec<Hole>,
}

/// A read-back's judgement, key by key, in any order: every key the
/// ledger knows is read once ([`Judge::keys`]) and handed to
/// [`Judge::key`] with what was read; [`Judge::finish`] sorts the losses
/// after a power cut into tails and holes.
pub struct Judge<'a> {
    ledger: &'a Ledger,
    tails: Option<Tails>,
    out: Integrity,
    first_lost: Option<LostWrite>,
    missing: Vec<Missing>,
    /// Per connection, the newest acknowledgement read back.
    survived: Vec<u32>,
    judged: usize,
}

impl<'a> Judge<'a> {
    pub fn new(ledger: &'a Ledger, tails: Option<Tails>) -> Judge<'a> {
        Judge {
            ledger,
            tails,
            out: Integrity::default(),
            first_lost: None,
            missing: vec![],
            survived: vec![0u32; tails.map_or(0, |t| t.connections.max(1))],
            judged: 0,
        }
    }

    /// The keys to read back: every key the ledger saw written.
    pub fn keys(ledger: &Ledger) -> Vec<usize> {
        (0..ledger.keys())
            .filter(|k| ledger.is_touched(*k))
            .collect()
    }

    /// Keys judged so far.
    pub fn judged(&self) -> usize {
        self.judged
    }

    /// Judges key `k`, read back as `value` (`None`: missing).
    pub fn key(&mut self, k: usize, value: Option<&[u8]>) {
        let ledger = self.ledger;
        self.judged += 1;
        let seen = ledger.decode(k, value);
        let acked = ledger.snapshot(k).0;
        let order = ledger.ack_order(k);
        let verdict = ledger.judge(k, seen);
        if let Some(t) = self.tails {
            let c = k % t.connections.max(1);
            match verdict {
                // The newest acknowledged write read back (a DEL read as
                // nothing says less: not counted).
                KeyVerdict::Ok if seen == Observed::Version(acked) => {
                    self.survived[c] = self.survived[c].max(order);
                }
                // After a cut, a key missing whose delete failed is in the
                // tail as much as aborted: the acknowledged SET before the
                // delete was lost unsynced, and nothing says the delete ran.
                // Sorted with the losses: aborted only where it is a hole.
                KeyVerdict::Lost | KeyVerdict::Resurrected | KeyVerdict::Aborted
                    if verdict != KeyVerdict::Aborted || seen == Observed::Absent =>
                {
                    self.missing.push(Missing {
                        key: k,
                        acked,
                        seen,
                        verdict,
                    });
                    return;
                }
                _ => {}
            }
        }
        if self.first_lost.is_none() && verdict.is_finding() {
            self.first_lost = Some(ledger.lost_write(k, acked, seen, verdict));
        }
        self.out.count(verdict);
    }

    /// Key `k` could not be read back from a live node (it failed every
    /// time, saying `why`): its data is damaged, counted as corrupted.
    pub fn unreadable(&mut self, k: usize, why: &str) {
        let ledger = self.ledger;
        self.judged += 1;
        if ledger.judge_unreadable(k) {
            self.out.corrupted += 1;
            if self.first_lost.is_none() {
                let mut lost = ledger.lost_write(
                    k,
                    ledger.snapshot(k).0,
                    Observed::Garbage,
                    KeyVerdict::Corrupted,
                );
                let why: String = why.chars().take(120).collect();
                lost.read = format!("an error every time ({why})");
                self.first_lost = Some(lost);
            }
        }
    }

    /// The counts, the first loss, and after a power cut the holes.
    pub fn finish(mut self) -> ReadBack {
        let holes = match self.tails {
            Some(t) => t.judge(
                self.ledger,
                std::mem::take(&mut self.missing),
                &self.survived,
                &mut self.out,
                &mut self.first_lost,
            ),
            None => vec![],
        };
        ReadBack {
            integrity: self.out,
            first_lost: self.first_lost,
            holes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oracle::ledger::WriteKind;

    /// Acknowledges a SET of `k`, then has its next DEL fail.
    fn set_then_failed_del(l: &Ledger, k: usize) {
        let s = (1..).find(|v| l.kind(k, *v) == WriteKind::Set).unwrap();
        while l.next_version(k) < s {}
        l.ack(k, s);
        let d = (s + 1..).find(|v| l.kind(k, *v) == WriteKind::Del).unwrap();
        while l.next_version(k) < d {}
        l.fail(k, d);
    }

    fn acked_set(l: &Ledger, k: usize) -> u32 {
        let s = (1..).find(|v| l.kind(k, *v) == WriteKind::Set).unwrap();
        while l.next_version(k) < s {}
        l.ack(k, s);
        s
    }

    fn read_back(l: &Ledger, survivor: usize, gone: usize) -> Integrity {
        let tails = Tails {
            connections: 1,
            allowed: true,
        };
        let mut judge = Judge::new(l, Some(tails));
        let v = l.snapshot(survivor).0;
        judge.key(survivor, Some(&l.value(survivor, v)));
        judge.key(gone, None);
        judge.finish().integrity
    }

    /// A power cut that takes a SET in the unsynced tail leaves its key
    /// missing; a DEL of it that failed afterwards (the node was down) does
    /// not make that an aborted read. Where a later write of the same
    /// connection survived, the missing key is a hole, and the failed DEL
    /// is what explains it: aborted.
    #[test]
    fn a_key_missing_after_a_cut_is_the_tail_before_it_is_a_failed_delete() {
        let l = Ledger::new(10, (64, 64), 0.5, 0.5, 3);
        acked_set(&l, 1);
        set_then_failed_del(&l, 2);
        let tail = read_back(&l, 1, 2);
        assert_eq!((tail.lost_unsynced, tail.aborted, tail.lost), (1, 0, 0));

        let l = Ledger::new(10, (64, 64), 0.5, 0.5, 3);
        set_then_failed_del(&l, 2);
        acked_set(&l, 1);
        let hole = read_back(&l, 1, 2);
        assert_eq!((hole.lost_unsynced, hole.aborted, hole.lost), (0, 1, 0));
    }
}
