//! The ledger of writes: for every key, the newest acknowledged version,
//! the newest version sent, the newest version that definitely failed,
//! when the newest was acknowledged, and its place in the order of all
//! acknowledgements, in 18 bytes.
//!
//! Values are derived from (key, version), so the ledger never stores them:
//! a value read back is decoded, regenerated and compared byte for byte.
//! Whether version `v` of key `k` was a SET or a DEL is also derived (from a
//! hash of the seed, `k` and `v`), so the mix of writes costs no memory.
//! Each key is written by one load connection only, whose requests the node
//! answers in order; so "newest acknowledged" is well defined, and every
//! version in `(acked, sent]` is a write whose fate is unknown: in doubt.

use std::sync::atomic::{AtomicU16, AtomicU32, Ordering::Relaxed};

/// Flag: the key's state is unknown (a loss was already reported); it is
/// skipped until the next acknowledged write.
const UNKNOWN: u16 = 1 << 15;
/// The other 15 bits of a key's flags: the second (since the ledger's
/// origin, modulo 2^15 = 9.1 hours) its newest write was acknowledged in,
/// so that a lost write can be found in the node's log.
const ACK_SECONDS: u16 = UNKNOWN - 1;

/// What a write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteKind {
    Set,
    Del,
}

pub struct Ledger {
    acked: Vec<AtomicU32>,
    sent: Vec<AtomicU32>,
    /// The newest version of each key whose write definitely did not
    /// happen (the node said so: Jepsen's `:fail`): reading it back is an
    /// aborted read. Only the newest is kept, so an older failed write
    /// read back is judged as in doubt, never wrongly as aborted.
    failed: Vec<AtomicU32>,
    flags: Vec<AtomicU16>,
    /// The place of each key's newest acknowledgement in the order of all
    /// of them (0: before this ledger began, or settled by a read-back).
    /// Each connection acknowledges its writes in order, so a power cut
    /// that loses an acknowledged write must lose every later one of the
    /// same connection: a later one read back is a hole (see
    /// `crate::oracle::Tails`). Not saved: `soak verify` judges losses as lost.
    order: Vec<AtomicU32>,
    clock: AtomicU32,
    /// Acknowledgement times count from here (the cell's start).
    origin: std::time::Instant,
    seed: u64,
    /// Share of writes that are SETs (the rest are DELs), in 1/2^32.
    set_share: u64,
    /// Values are between these sizes (inclusive), each one's size derived
    /// from its key and version.
    pub value_min: usize,
    pub value_max: usize,
    /// The share of each value's filler that a general-purpose codec can
    /// remove (as db_bench's `--compression_ratio` is 1 minus it): random
    /// bytes, (1 - c) of the filler, repeated to the value's length.
    /// `None`: letters (`value_size:`, and ledgers of earlier versions),
    /// which an entropy coder shrinks a little and LZ codecs barely.
    pub compressibility: Option<f64>,
    /// Loaded from a run that did not finish: writes may have been sent
    /// and acknowledged after the ledger was saved (see [`Ledger::judge`]).
    stale: bool,
}

/// The first bytes of a saved ledger: version 4 adds each key's newest
/// failed write; version 3 adds the values' compressibility to the header;
/// version 2 keeps 2 bytes of flags a key; version 1 (1 byte of flags)
/// still loads.
const MAGIC: &[u8; 8] = b"SOAKLDG4";
const MAGIC_V3: &[u8; 8] = b"SOAKLDG3";
const MAGIC_V2: &[u8; 8] = b"SOAKLDG2";
const MAGIC_V1: &[u8; 8] = b"SOAKLDG1";

pub use crate::units::mix64;

/// What a value read back says about its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observed {
    Absent,
    /// A well-formed value of this key at this version.
    Version(u32),
    /// Bytes that no write of this key ever produced.
    Garbage,
}

use crate::model::LostWrite;

/// The verdict on one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyVerdict {
    /// Never written, or skipped after an earlier loss.
    Untouched,
    Ok,
    /// A write in flight at a failure explains what was read.
    InDoubt,
    /// Acknowledged, then missing or older.
    Lost,
    /// The value matches no version of the key.
    Corrupted,
    /// An acknowledged delete came back.
    Resurrected,
    /// A write the node said definitely failed was read back (Elle's
    /// aborted read).
    Aborted,
}

impl KeyVerdict {
    /// Its name in the records: `lost`, `corrupted`, `in doubt`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            KeyVerdict::Untouched => "untouched",
            KeyVerdict::Ok => "as expected",
            KeyVerdict::InDoubt => "in doubt",
            KeyVerdict::Lost => "lost",
            KeyVerdict::Corrupted => "corrupted",
            KeyVerdict::Resurrected => "resurrected",
            KeyVerdict::Aborted => "aborted",
        }
    }

    /// Lost, corrupted, resurrected or aborted: what a check fails on.
    pub fn is_finding(self) -> bool {
        matches!(
            self,
            KeyVerdict::Lost
                | KeyVerdict::Corrupted
                | KeyVerdict::Resurrected
                | KeyVerdict::Aborted
        )
    }
}

impl Ledger {
    pub fn new(
        keys: usize,
        (value_min, value_max): (usize, usize),
        set: f64,
        del: f64,
        seed: u64,
    ) -> Ledger {
        let share = if set + del > 0.0 {
            set / (set + del)
        } else {
            1.0
        };
        Ledger {
            acked: (0..keys).map(|_| AtomicU32::new(0)).collect(),
            sent: (0..keys).map(|_| AtomicU32::new(0)).collect(),
            failed: (0..keys).map(|_| AtomicU32::new(0)).collect(),
            flags: (0..keys).map(|_| AtomicU16::new(0)).collect(),
            order: (0..keys).map(|_| AtomicU32::new(0)).collect(),
            clock: AtomicU32::new(0),
            origin: std::time::Instant::now(),
            seed,
            set_share: (share * (1u64 << 32) as f64) as u64,
            value_min,
            value_max: value_max.max(value_min),
            compressibility: None,
            stale: false,
        }
    }

    /// Values whose filler a codec can shrink by `c` (0 to below 1).
    pub fn with_compressibility(mut self, c: Option<f64>) -> Ledger {
        self.compressibility = c.map(|c| c.clamp(0.0, 0.99));
        self
    }

    /// Writes the ledger to `path` (through a temporary file and a rename,
    /// so a reader never sees half of it). `complete` says that no write
    /// can follow: the run is over. Safe while the load runs: each key's
    /// acknowledged version is read before its sent one.
    pub fn save(&self, path: &std::path::Path, complete: bool) -> std::io::Result<()> {
        use std::io::Write;
        let tmp = path.with_extension("tmp");
        let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&tmp)?);
        out.write_all(MAGIC)?;
        out.write_all(&[u8::from(complete)])?;
        for n in [
            self.seed,
            self.set_share,
            self.value_min as u64,
            self.value_max as u64,
            self.keys() as u64,
            // -1: letters.
            self.compressibility.unwrap_or(-1.0).to_bits(),
        ] {
            out.write_all(&n.to_le_bytes())?;
        }
        for a in &self.acked {
            out.write_all(&a.load(Relaxed).to_le_bytes())?;
        }
        for s in &self.sent {
            out.write_all(&s.load(Relaxed).to_le_bytes())?;
        }
        for f in &self.flags {
            out.write_all(&f.load(Relaxed).to_le_bytes())?;
        }
        for f in &self.failed {
            out.write_all(&f.load(Relaxed).to_le_bytes())?;
        }
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&tmp, path)
    }

    /// Reads a ledger [`Ledger::save`] wrote. One saved before its run was
    /// complete is judged as stale: the node may hold newer writes.
    pub fn load(path: &std::path::Path) -> std::io::Result<Ledger> {
        let bytes = std::fs::read(path)?;
        let bad = |why: &str| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{} is not a soak ledger: {why}", path.display()),
            )
        };
        let magic = bytes.get(..8).unwrap_or_default();
        // Bytes of flags a key, header words, and whether the failed
        // versions follow the flags.
        let (flag_bytes, words, with_failed) = match magic {
            m if m == MAGIC => (2, 6, true),
            m if m == MAGIC_V3 => (2, 6, false),
            m if m == MAGIC_V2 => (2, 5, false),
            m if m == MAGIC_V1 => (1, 5, false),
            _ => return Err(bad("no SOAKLDG4 (or 3, 2, 1) header")),
        };
        let head = 9 + 8 * words;
        if bytes.len() < head {
            return Err(bad("its header is cut short"));
        }
        let complete = bytes[8] == 1;
        let word = |i: usize| u64::from_le_bytes(bytes[9 + 8 * i..17 + 8 * i].try_into().unwrap());
        let (seed, set_share, value_min, value_max, keys) =
            (word(0), word(1), word(2), word(3), word(4) as usize);
        let compressibility = (words > 5)
            .then(|| f64::from_bits(word(5)))
            .filter(|c| (0.0..1.0).contains(c));
        let body = &bytes[head..];
        let per_key = 8 + flag_bytes + if with_failed { 4 } else { 0 };
        if body.len() != keys * per_key {
            return Err(bad(&format!(
                "{keys} keys need {} bytes after the header, and it has {}",
                keys * per_key,
                body.len()
            )));
        }
        let flags_end = keys * (8 + flag_bytes);
        let u32s = |from: usize| -> Vec<AtomicU32> {
            body[from..from + keys * 4]
                .chunks_exact(4)
                .map(|c| AtomicU32::new(u32::from_le_bytes(c.try_into().unwrap())))
                .collect()
        };
        Ok(Ledger {
            acked: u32s(0),
            sent: u32s(keys * 4),
            failed: if with_failed {
                u32s(flags_end)
            } else {
                (0..keys).map(|_| AtomicU32::new(0)).collect()
            },
            flags: if flag_bytes == 2 {
                body[keys * 8..flags_end]
                    .chunks_exact(2)
                    .map(|c| AtomicU16::new(u16::from_le_bytes([c[0], c[1]])))
                    .collect()
            } else {
                // Version 1 had only the unknown flag, in bit 0.
                body[keys * 8..flags_end]
                    .iter()
                    .map(|f| AtomicU16::new(if f & 1 == 1 { UNKNOWN } else { 0 }))
                    .collect()
            },
            order: (0..keys).map(|_| AtomicU32::new(0)).collect(),
            clock: AtomicU32::new(0),
            origin: std::time::Instant::now(),
            seed,
            set_share,
            value_min: value_min as usize,
            value_max: value_max as usize,
            compressibility,
            stale: !complete,
        })
    }

    /// Whether this ledger came from a run that did not finish.
    pub fn is_stale(&self) -> bool {
        self.stale
    }

    pub fn keys(&self) -> usize {
        self.acked.len()
    }

    /// Bytes the ledger holds per key.
    pub const BYTES_PER_KEY: usize = 18;

    /// Acknowledgement times count from `origin` (the cell's start).
    pub fn set_origin(&mut self, origin: std::time::Instant) {
        self.origin = origin;
    }

    /// The one key format: key `k` is `soak:K` on the wire and on disk.
    pub const KEY_PREFIX: &'static [u8] = b"soak:";

    pub fn key_name(k: usize) -> String {
        let mut out = Vec::with_capacity(24);
        Self::write_key(&mut out, k);
        String::from_utf8(out).expect("ASCII")
    }

    /// Appends key `k`'s name to `out`.
    pub fn write_key(out: &mut Vec<u8>, k: usize) {
        use std::io::Write;
        out.extend_from_slice(Self::KEY_PREFIX);
        let _ = write!(out, "{k}");
    }

    /// The key number of a name in the one format, if it is one.
    pub fn parse_key(name: &[u8]) -> Option<usize> {
        let digits = name.strip_prefix(Self::KEY_PREFIX)?;
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(digits).ok()?.parse().ok()
    }

    /// Whether version `v` of key `k` is a SET or a DEL.
    pub fn kind(&self, k: usize, v: u32) -> WriteKind {
        let h = mix64(self.seed ^ ((k as u64) << 32) ^ v as u64) & 0xFFFF_FFFF;
        if h < self.set_share {
            WriteKind::Set
        } else {
            WriteKind::Del
        }
    }

    /// The value of version `v` of key `k`: a header that names both, then
    /// filler derived from them: `value_min..=value_max` bytes in all (at
    /// least the header), the size derived from the key and version too.
    pub fn value(&self, k: usize, v: u32) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.value_len(k, v));
        self.value_into(k, v, &mut out);
        out
    }

    fn value_state(&self, k: usize, v: u32) -> u64 {
        mix64(self.seed ^ 0xA5A5 ^ ((k as u64) << 32) ^ v as u64)
    }

    fn header_len(k: usize, v: u32) -> usize {
        fn digits(mut n: u64) -> usize {
            let mut d = 1;
            while n >= 10 {
                n /= 10;
                d += 1;
            }
            d
        }
        digits(k as u64) + digits(v as u64) + 2
    }

    /// The length of [`Ledger::value`]`(k, v)`, without making it.
    pub fn value_len(&self, k: usize, v: u32) -> usize {
        let size = if self.value_max > self.value_min {
            let span = (self.value_max - self.value_min + 1) as u64;
            self.value_min + (self.value_state(k, v) % span) as usize
        } else {
            self.value_min
        };
        size.max(Self::header_len(k, v))
    }

    /// Whether `bytes` is [`Ledger::value`]`(k, v)`: compared as it is
    /// generated, eight bytes of filler per hash, without a copy (every
    /// read during the load goes through here).
    pub fn is_value(&self, k: usize, v: u32, bytes: &[u8]) -> bool {
        use std::io::Write;
        if bytes.len() != self.value_len(k, v) {
            return false;
        }
        if self.compressibility.is_some() {
            return bytes == self.value(k, v);
        }
        let mut header = [0u8; 32];
        let mut cursor = &mut header[..];
        if write!(cursor, "{k}:{v}:").is_err() {
            return false;
        }
        let h = 32 - cursor.len();
        if bytes.len() < h || bytes[..h] != header[..h] {
            return false;
        }
        let mut state = self.value_state(k, v);
        for chunk in bytes[h..].chunks(8) {
            state = mix64(state);
            let want = state.to_le_bytes();
            if chunk.iter().zip(want).any(|(b, w)| *b != b'a' + w % 26) {
                return false;
            }
        }
        true
    }

    /// Appends [`Ledger::value`]`(k, v)` to `out`, eight bytes of filler
    /// per hash (every write of the load goes through here).
    pub fn value_into(&self, k: usize, v: u32, out: &mut Vec<u8>) {
        use std::io::Write;
        let start = out.len();
        let size = self.value_len(k, v);
        out.reserve(size);
        let _ = write!(out, "{k}:{v}:");
        let mut state = self.value_state(k, v);
        if let Some(c) = self.compressibility {
            // Random bytes, (1 - c) of the filler, then repeated: what a
            // codec can remove is the repetition.
            let filler = size.saturating_sub(out.len() - start);
            let random = ((filler as f64 * (1.0 - c)).ceil() as usize).max(1);
            let from = out.len();
            while out.len() - from < random.min(filler) {
                state = mix64(state);
                let n = (random.min(filler) - (out.len() - from)).min(8);
                out.extend_from_slice(&state.to_le_bytes()[..n]);
            }
            while out.len() - start < size {
                let i = out.len() - from;
                out.push(out[from + i % random]);
            }
            return;
        }
        while out.len() - start < size {
            state = mix64(state);
            let want = state.to_le_bytes().map(|b| b'a' + b % 26);
            let n = (size - (out.len() - start)).min(8);
            out.extend_from_slice(&want[..n]);
        }
    }

    /// Reads a value back: which version of key `k` it is, if any.
    pub fn decode(&self, k: usize, value: Option<&[u8]>) -> Observed {
        let Some(value) = value else {
            return Observed::Absent;
        };
        let mut parts = value.splitn(3, |b| *b == b':');
        let (Some(kk), Some(vv)) = (parts.next(), parts.next()) else {
            return Observed::Garbage;
        };
        let parse = |b: &[u8]| std::str::from_utf8(b).ok()?.parse::<u64>().ok();
        match (parse(kk), parse(vv)) {
            (Some(kk), Some(v)) if kk == k as u64 && v <= u32::MAX as u64 => {
                if self.is_value(k, v as u32, value) {
                    Observed::Version(v as u32)
                } else {
                    Observed::Garbage
                }
            }
            _ => Observed::Garbage,
        }
    }

    /// Takes the next version of key `k` for a write about to be sent.
    pub fn next_version(&self, k: usize) -> u32 {
        self.sent[k].fetch_add(1, Relaxed) + 1
    }

    /// Takes the next version of key `k` that is a SET (skipped versions
    /// are never sent; they only widen the key's in-doubt span until acked).
    pub fn next_set_version(&self, k: usize) -> u32 {
        loop {
            let v = self.next_version(k);
            if self.kind(k, v) == WriteKind::Set {
                return v;
            }
        }
    }

    /// The node acknowledged version `v` of key `k`.
    pub fn ack(&self, k: usize, v: u32) {
        self.ack_at(k, v, std::time::Instant::now());
    }

    /// The node acknowledged version `v` of key `k` at `now`.
    pub fn ack_at(&self, k: usize, v: u32, now: std::time::Instant) {
        self.acked[k].fetch_max(v, Relaxed);
        let place = self.clock.fetch_add(1, Relaxed).wrapping_add(1);
        self.order[k].store(place, Relaxed);
        let s = now.saturating_duration_since(self.origin).as_secs() as u16 & ACK_SECONDS;
        self.flags[k].store(s, Relaxed);
    }

    /// The node said version `v` of key `k` definitely did not happen
    /// (Jepsen's `:fail`; a write whose fate is unknown is left in doubt).
    pub fn fail(&self, k: usize, v: u32) {
        self.failed[k].fetch_max(v, Relaxed);
    }

    /// Whether version `v` of key `k` is a write the node said failed.
    fn is_failed(&self, k: usize, v: u32) -> bool {
        v > 0 && self.failed[k].load(Relaxed) == v
    }

    /// Whether every version in `(a, s]` that deletes key `k` is a failed
    /// write: then nothing but an aborted delete explains the key missing.
    fn only_failed_deletes(&self, k: usize, a: u32, s: u32) -> bool {
        let mut dels = (a + 1..=s).filter(|v| !self.present_after(k, *v));
        matches!((dels.next(), dels.next()), (Some(d), None) if self.is_failed(k, d))
    }

    /// When the newest acknowledged write of key `k` was acknowledged, in
    /// seconds since the origin: the latest second at or before `now_s`
    /// that the 15 bits kept allow (exact for runs under 9.1 hours).
    pub fn acked_at(&self, k: usize, now_s: f64) -> f64 {
        let kept = f64::from(self.flags[k].load(Relaxed) & ACK_SECONDS);
        let wrap = f64::from(ACK_SECONDS) + 1.0;
        let whole = ((now_s - kept) / wrap).floor().max(0.0);
        kept + whole * wrap
    }

    /// Seconds since the origin.
    pub fn now_s(&self) -> f64 {
        self.origin.elapsed().as_secs_f64()
    }

    /// The newest acknowledged and the newest sent version of key `k`:
    /// what a read about to be sent must be judged against.
    pub fn snapshot(&self, k: usize) -> (u32, u32) {
        (self.acked[k].load(Relaxed), self.sent[k].load(Relaxed))
    }

    /// The place of key `k`'s newest acknowledgement among all of them.
    pub fn ack_order(&self, k: usize) -> u32 {
        self.order[k].load(Relaxed)
    }

    /// A read-back after a power cut found key `k` at `seen`, older than
    /// its acknowledged version, and the suite allows losing the unsynced
    /// tail: that is the key's state now.
    pub fn settle_lost(&self, k: usize, seen: Observed) {
        let v = match seen {
            Observed::Version(v) => v,
            _ => 0,
        };
        self.flags[k].fetch_and(!UNKNOWN, Relaxed);
        self.order[k].store(0, Relaxed);
        self.settle(k, v);
    }

    pub fn is_touched(&self, k: usize) -> bool {
        self.sent[k].load(Relaxed) > 0 && self.flags[k].load(Relaxed) & UNKNOWN == 0
    }

    fn present_after(&self, k: usize, v: u32) -> bool {
        v > 0 && self.kind(k, v) == WriteKind::Set
    }

    /// Judges what was read for key `k`, and settles the ledger on it: after
    /// a verification, what was read is the key's known state.
    pub fn judge(&self, k: usize, seen: Observed) -> KeyVerdict {
        if !self.is_touched(k) {
            return KeyVerdict::Untouched;
        }
        let a = self.acked[k].load(Relaxed);
        let s = self.sent[k].load(Relaxed);
        let expect_present = self.present_after(k, a);
        let verdict = match seen {
            Observed::Garbage => KeyVerdict::Corrupted,
            // Sent after a stale ledger was saved.
            Observed::Version(v) if v > s && self.stale && self.present_after(k, v) => {
                KeyVerdict::InDoubt
            }
            Observed::Version(v) if v > s => KeyVerdict::Corrupted,
            Observed::Version(v) if v == a && expect_present => KeyVerdict::Ok,
            Observed::Version(v) if v > a && self.is_failed(k, v) && self.present_after(k, v) => {
                KeyVerdict::Aborted
            }
            Observed::Version(v) if v > a && self.present_after(k, v) => KeyVerdict::InDoubt,
            // Not a SET at that version: no write of ours produced it.
            Observed::Version(v) if v >= a => KeyVerdict::Corrupted,
            Observed::Version(_) if a > 0 && !expect_present => KeyVerdict::Resurrected,
            Observed::Version(_) => KeyVerdict::Lost,
            Observed::Absent if !expect_present => KeyVerdict::Ok,
            Observed::Absent if !self.stale && self.only_failed_deletes(k, a, s) => {
                KeyVerdict::Aborted
            }
            Observed::Absent if (a + 1..=s).any(|v| !self.present_after(k, v)) => {
                KeyVerdict::InDoubt
            }
            // A DEL may have followed after a stale ledger was saved.
            Observed::Absent if self.stale && self.set_share < 1 << 32 => KeyVerdict::InDoubt,
            Observed::Absent => KeyVerdict::Lost,
        };
        // A write in flight makes the key in doubt whichever allowed state
        // was found: the count says how many writes a failure caught.
        let verdict = if verdict == KeyVerdict::Ok && s > a {
            KeyVerdict::InDoubt
        } else {
            verdict
        };
        match (verdict, seen) {
            (KeyVerdict::Ok | KeyVerdict::InDoubt, Observed::Version(v)) => self.settle(k, v),
            (KeyVerdict::Ok, Observed::Absent) => self.settle(k, a),
            (KeyVerdict::InDoubt, Observed::Absent) => {
                let d = (a + 1..=s)
                    .rev()
                    .find(|v| !self.present_after(k, *v))
                    .unwrap_or(a);
                self.settle(k, d)
            }
            _ => {
                self.flags[k].fetch_or(UNKNOWN, Relaxed);
            }
        }
        verdict
    }

    /// Key `k` could not be read at all: a finding if it held an
    /// acknowledged write (marked unknown until rewritten, as a loss is).
    pub fn judge_unreadable(&self, k: usize) -> bool {
        if !self.is_touched(k) || self.acked[k].load(Relaxed) == 0 {
            return false;
        }
        self.flags[k].fetch_or(UNKNOWN, Relaxed);
        true
    }

    /// Judges a read during the load: `seen` for key `k`, against
    /// `(acked, sent)` as they were when the read was sent (see
    /// [`Ledger::snapshot`]). Missing, or older than the newest write
    /// acknowledged before the read was sent, is lost, unless a write then
    /// in flight explains it (in doubt). Unlike [`Ledger::judge`] it settles
    /// nothing (a read during the load may see a write in flight that a
    /// later death takes back), but a loss marks the key unknown until its
    /// next acknowledged write, so that each loss is counted once.
    pub fn judge_read(&self, k: usize, seen: Observed, (a, s): (u32, u32)) -> KeyVerdict {
        if self.flags[k].load(Relaxed) & UNKNOWN != 0 {
            return KeyVerdict::Untouched;
        }
        let present_after = |v: u32| self.present_after(k, v);
        // A write sent after the read (a client that retries, a proxy that
        // replays) may be seen too: anything up to what is sent by now.
        let now_sent = self.sent[k].load(Relaxed).max(s);
        let in_flight = |v: u32| v > a && v <= now_sent;
        let verdict = match seen {
            Observed::Garbage => KeyVerdict::Corrupted,
            Observed::Version(v) if v == a && present_after(a) => KeyVerdict::Ok,
            Observed::Version(v) if in_flight(v) && present_after(v) && self.is_failed(k, v) => {
                KeyVerdict::Aborted
            }
            Observed::Version(v) if in_flight(v) && present_after(v) => KeyVerdict::InDoubt,
            Observed::Version(v) if v >= a => KeyVerdict::Corrupted,
            // Older than an acknowledged DEL: no write in flight explains it.
            Observed::Version(_) if a > 0 && !present_after(a) => KeyVerdict::Resurrected,
            Observed::Version(_) => KeyVerdict::Lost,
            Observed::Absent if !present_after(a) => KeyVerdict::Ok,
            Observed::Absent if self.only_failed_deletes(k, a, now_sent) => KeyVerdict::Aborted,
            Observed::Absent if (a + 1..=now_sent).any(|v| !present_after(v)) => {
                KeyVerdict::InDoubt
            }
            Observed::Absent => KeyVerdict::Lost,
        };
        if verdict.is_finding() {
            self.flags[k].fetch_or(UNKNOWN, Relaxed);
        }
        verdict
    }

    /// What a developer needs to find a lost write of key `k` in their
    /// node's log: the version acknowledged (`acked`), when, what was
    /// read instead, and what the oracle found it (`found`).
    pub fn lost_write(&self, k: usize, acked: u32, seen: Observed, found: KeyVerdict) -> LostWrite {
        LostWrite {
            key: Self::key_name(k),
            acked_version: acked,
            acked_at_s: self.acked_at(k, self.now_s()),
            read: match seen {
                Observed::Absent => "nothing".into(),
                Observed::Version(v) => format!("version {v}"),
                Observed::Garbage => "bytes of no version".into(),
            },
            found: found.as_str().into(),
        }
    }

    /// The key is known to be at version `v`; writes after it start at `v + 1`.
    fn settle(&self, k: usize, v: u32) {
        self.acked[k].store(v, Relaxed);
        self.sent[k].store(v, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger() -> Ledger {
        Ledger::new(100, (64, 64), 0.8, 0.2, 7)
    }

    fn set_version(l: &Ledger, k: usize, from: u32) -> u32 {
        (from..).find(|v| l.kind(k, *v) == WriteKind::Set).unwrap()
    }

    #[test]
    fn values_round_trip_and_detect_corruption() {
        let l = ledger();
        let v = l.value(5, 3);
        assert_eq!(v.len(), 64);
        assert_eq!(l.decode(5, Some(&v)), Observed::Version(3));
        assert_eq!(l.decode(6, Some(&v)), Observed::Garbage);
        let mut flipped = v.clone();
        flipped[40] ^= 1;
        assert_eq!(l.decode(5, Some(&flipped)), Observed::Garbage);
        assert_eq!(l.decode(5, None), Observed::Absent);
    }

    #[test]
    fn compressible_values_repeat_their_random_part_and_survive_a_save() {
        let l = Ledger::new(50, (1024, 1024), 1.0, 0.0, 9).with_compressibility(Some(0.75));
        let v = l.value(7, 2);
        assert_eq!(v.len(), 1024);
        assert_eq!(l.decode(7, Some(&v)), Observed::Version(2));
        // The random part is a quarter of the filler, then the same again.
        let header = "7:2:".len();
        let random = ((1024 - header) as f64 * 0.25).ceil() as usize;
        assert_eq!(
            v[header..header + random],
            v[header + random..header + 2 * random]
        );
        let mut flipped = v.clone();
        flipped[900] ^= 1;
        assert_eq!(l.decode(7, Some(&flipped)), Observed::Garbage);
        // Not letters: the whole byte range.
        assert!(v[header..].iter().any(|b| !b.is_ascii_lowercase()));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger");
        l.save(&path, true).unwrap();
        let back = Ledger::load(&path).unwrap();
        assert_eq!(back.compressibility, Some(0.75));
        assert_eq!(back.value(7, 2), v);
        // Without `value:`, letters, as ledgers of earlier versions hold.
        let letters = Ledger::new(50, (64, 64), 1.0, 0.0, 9);
        letters.save(&path, true).unwrap();
        let back = Ledger::load(&path).unwrap();
        assert_eq!(back.compressibility, None);
        assert!(back.value(3, 1)[4..].iter().all(u8::is_ascii_lowercase));
    }

    #[test]
    fn a_size_range_gives_values_across_it_that_still_decode() {
        let l = Ledger::new(1000, (100, 4096), 1.0, 0.0, 3);
        let sizes: Vec<usize> = (0..1000).map(|k| l.value(k, 1).len()).collect();
        assert!(sizes.iter().all(|s| (100..=4096).contains(s)));
        // Spread over the range, not stuck at one end.
        assert!(sizes.iter().any(|s| *s < 500) && sizes.iter().any(|s| *s > 3700));
        for k in [0, 17, 999] {
            assert_eq!(l.decode(k, Some(&l.value(k, 1))), Observed::Version(1));
        }
    }

    #[test]
    fn a_saved_ledger_loads_as_it_was_and_is_stale_until_the_run_completes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.bin");
        let l = Ledger::new(50, (10, 90), 1.0, 0.0, 9);
        for k in 0..40 {
            let v = l.next_set_version(k);
            if k < 30 {
                l.ack(k, v);
            }
        }
        l.save(&path, false).unwrap();
        let back = Ledger::load(&path).unwrap();
        assert!(back.is_stale());
        assert_eq!((back.keys(), back.value_min, back.value_max), (50, 10, 90));
        assert_eq!(back.value(7, 1), l.value(7, 1));
        // Acknowledged and there: ok; acknowledged and gone: lost; sent
        // and not acknowledged: in doubt.
        assert_eq!(back.judge(3, Observed::Version(1)), KeyVerdict::Ok);
        assert_eq!(back.judge(4, Observed::Absent), KeyVerdict::Lost);
        assert_eq!(back.judge(35, Observed::Absent), KeyVerdict::InDoubt);
        // Written after the save: newer than the ledger knows, not garbage.
        assert_eq!(back.judge(5, Observed::Version(3)), KeyVerdict::InDoubt);
        // A key first written after the save is not the ledger's to judge.
        assert_eq!(back.judge(45, Observed::Version(1)), KeyVerdict::Untouched);
        // A complete ledger is exact: a version never sent is corrupt.
        l.save(&path, true).unwrap();
        let exact = Ledger::load(&path).unwrap();
        assert!(!exact.is_stale());
        assert_eq!(exact.judge(5, Observed::Version(3)), KeyVerdict::Corrupted);
        std::fs::write(&path, b"SOAKLDG1 short").unwrap();
        assert!(Ledger::load(&path).is_err());
    }

    #[test]
    fn classifies_lost_in_doubt_and_resurrected() {
        let l = ledger();
        // Acknowledged SET, then read back: ok.
        let k = 1;
        let v = set_version(&l, k, 1);
        while l.next_version(k) < v {}
        l.ack(k, v);
        assert_eq!(l.judge(k, Observed::Version(v)), KeyVerdict::Ok);
        // Acknowledged SET, then missing: lost; then skipped until rewritten.
        let k = 2;
        let v = set_version(&l, k, 1);
        while l.next_version(k) < v {}
        l.ack(k, v);
        assert_eq!(l.judge(k, Observed::Absent), KeyVerdict::Lost);
        assert_eq!(l.judge(k, Observed::Absent), KeyVerdict::Untouched);
        // A write in flight at a crash: either value is allowed.
        let k = 3;
        let v1 = set_version(&l, k, 1);
        while l.next_version(k) < v1 {}
        l.ack(k, v1);
        let v2 = set_version(&l, k, v1 + 1);
        while l.next_version(k) < v2 {}
        assert_eq!(l.judge(k, Observed::Version(v2)), KeyVerdict::InDoubt);
        // Settled at v2: the old value is now a loss.
        assert_eq!(l.judge(k, Observed::Version(v1)), KeyVerdict::Lost);
        // In flight but not applied: still in doubt, and settled at the old value.
        let k = 5;
        let v1 = set_version(&l, k, 1);
        while l.next_version(k) < v1 {}
        l.ack(k, v1);
        l.next_version(k);
        assert_eq!(l.judge(k, Observed::Version(v1)), KeyVerdict::InDoubt);
        assert_eq!(l.judge(k, Observed::Version(v1)), KeyVerdict::Ok);
        // An acknowledged DEL that came back.
        let k = 4;
        let s = set_version(&l, k, 1);
        let d = (s + 1..).find(|v| l.kind(k, *v) == WriteKind::Del).unwrap();
        while l.next_version(k) < d {}
        l.ack(k, d);
        assert_eq!(l.judge(k, Observed::Version(s)), KeyVerdict::Resurrected);
    }

    #[test]
    fn reads_during_load_are_judged_against_the_ledger_as_it_was_when_sent() {
        let l = ledger();
        let k = 7;
        let v1 = set_version(&l, k, 1);
        while l.next_version(k) < v1 {}
        l.ack(k, v1);
        // Read sent with v1 acknowledged: v1 is right, nothing is lost.
        let snap = l.snapshot(k);
        assert_eq!(l.judge_read(k, Observed::Version(v1), snap), KeyVerdict::Ok);
        assert_eq!(l.judge_read(k, Observed::Absent, snap), KeyVerdict::Lost);
        // Counted once: unknown until the next acknowledged write.
        assert_eq!(
            l.judge_read(k, Observed::Absent, snap),
            KeyVerdict::Untouched
        );
        let v2 = set_version(&l, k, v1 + 1);
        while l.next_version(k) < v2 {}
        l.ack(k, v2);
        let snap = l.snapshot(k);
        assert_eq!(
            l.judge_read(k, Observed::Version(v1), snap),
            KeyVerdict::Lost
        );
        // A write in flight when the read was sent explains either value;
        // the read settles nothing.
        let v3 = set_version(&l, k, v2 + 1);
        while l.next_version(k) < v3 {}
        let k2 = 8;
        let w1 = set_version(&l, k2, 1);
        while l.next_version(k2) < w1 {}
        l.ack(k2, w1);
        let w2 = set_version(&l, k2, w1 + 1);
        while l.next_version(k2) < w2 {}
        let snap = l.snapshot(k2);
        assert_eq!(
            l.judge_read(k2, Observed::Version(w2), snap),
            KeyVerdict::InDoubt
        );
        assert_eq!(
            l.judge_read(k2, Observed::Version(w1), snap),
            KeyVerdict::Ok
        );
        // A version never written is corruption; an acknowledged DEL that
        // comes back is a resurrection.
        assert_eq!(
            l.judge_read(k2, Observed::Version(w2 + 50), snap),
            KeyVerdict::Corrupted
        );
        let k3 = 9;
        let s = set_version(&l, k3, 1);
        let d = (s + 1..)
            .find(|v| l.kind(k3, *v) == WriteKind::Del)
            .unwrap();
        while l.next_version(k3) < d {}
        l.ack(k3, d);
        assert_eq!(
            l.judge_read(k3, Observed::Version(s), l.snapshot(k3)),
            KeyVerdict::Resurrected
        );
        assert_eq!(
            l.judge_read(k3, Observed::Absent, l.snapshot(k3)),
            KeyVerdict::Untouched
        );
    }

    #[test]
    fn a_failed_write_read_back_is_an_aborted_read_and_an_unknown_one_is_in_doubt() {
        let l = ledger();
        let k = 11;
        let v1 = set_version(&l, k, 1);
        while l.next_version(k) < v1 {}
        l.ack(k, v1);
        // The node said v2 failed, and it is read back: aborted.
        let v2 = set_version(&l, k, v1 + 1);
        while l.next_version(k) < v2 {}
        l.fail(k, v2);
        let snap = l.snapshot(k);
        assert_eq!(
            l.judge_read(k, Observed::Version(v2), snap),
            KeyVerdict::Aborted
        );
        // Not the failed write: the one before is no finding (in doubt, as
        // the versions between the two were sent too).
        let k = 12;
        let w1 = set_version(&l, k, 1);
        while l.next_version(k) < w1 {}
        l.ack(k, w1);
        let w2 = set_version(&l, k, w1 + 1);
        while l.next_version(k) < w2 {}
        l.fail(k, w2);
        assert!(!l.judge(k, Observed::Version(w1)).is_finding());
        // Unknown (not failed): either value is allowed.
        let k = 13;
        let u1 = set_version(&l, k, 1);
        while l.next_version(k) < u1 {}
        l.ack(k, u1);
        let u2 = set_version(&l, k, u1 + 1);
        while l.next_version(k) < u2 {}
        assert_eq!(l.judge(k, Observed::Version(u2)), KeyVerdict::InDoubt);
        // A failed DEL, and the key gone: the delete happened after all.
        let k = 14;
        let s1 = set_version(&l, k, 1);
        while l.next_version(k) < s1 {}
        l.ack(k, s1);
        let d = (s1 + 1..)
            .find(|v| l.kind(k, *v) == WriteKind::Del)
            .unwrap();
        while l.next_version(k) < d {}
        l.fail(k, d);
        assert_eq!(l.judge(k, Observed::Absent), KeyVerdict::Aborted);
        // And saved: `soak verify` judges it the same.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.bin");
        let m = ledger();
        let k = 15;
        let x1 = set_version(&m, k, 1);
        while m.next_version(k) < x1 {}
        m.fail(k, x1);
        m.save(&path, true).unwrap();
        let back = Ledger::load(&path).unwrap();
        assert_eq!(back.judge(k, Observed::Version(x1)), KeyVerdict::Aborted);
    }

    #[test]
    fn a_lost_write_says_when_it_was_acknowledged() {
        let mut l = ledger();
        l.set_origin(std::time::Instant::now() - std::time::Duration::from_secs(40));
        let k = 3;
        let v = set_version(&l, k, 1);
        while l.next_version(k) < v {}
        l.ack(k, v);
        let lost = l.lost_write(k, v, Observed::Absent, KeyVerdict::Lost);
        assert_eq!(lost.key, "soak:3");
        assert_eq!(lost.acked_version, v);
        assert!((40.0..41.5).contains(&lost.acked_at_s), "{lost}");
        assert_eq!(lost.read, "nothing");
        // 15 bits of seconds: a run past 9.1 hours reads the latest match.
        assert_eq!(
            l.acked_at(k, 40.0 + 32768.0 * 2.0 + 5.0),
            40.0 + 32768.0 * 2.0
        );
    }

    #[test]
    fn a_key_name_reads_back_as_its_number_and_nothing_else_does() {
        for k in [0, 7, 123_456] {
            assert_eq!(Ledger::parse_key(Ledger::key_name(k).as_bytes()), Some(k));
        }
        for other in [&b"soak:"[..], b"soak:-1", b"soak:1x", b"key:1", b"soak: 1"] {
            assert_eq!(Ledger::parse_key(other), None, "{other:?}");
        }
    }
}
