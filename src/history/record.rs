//! The history a run records as it goes: every request of the load (and
//! of the read-backs), its client, when it was invoked and completed, and
//! how it ended, in a few bytes, to `history.bin.gz` in the cell's
//! folder.
//!
//! A connection encodes its requests into a buffer of its own ([`Buf`])
//! and ships it every few milliseconds; one thread compresses and writes
//! the chunks ([`Recorder`]). The channel between them is bounded: a
//! writer that falls behind holds the load back rather than dropping
//! operations (a history with a gap would read as lost writes) or
//! growing without bound. The file is gzip, flushed every second, so a
//! run that dies leaves a history readable up to its last second.
//!
//! A chunk is its length followed by its records, each `[tag][client]
//! [key][value][invoke - previous invoke, zigzag][complete - invoke]`, all
//! LEB128 varints but the tag; times are microseconds since the cell's
//! start (a chunk's first invoke counts from 0), read back as nanoseconds.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{History, Op, Outcome, F, NIL};

/// The file's first bytes (2: times in microseconds).
const MAGIC: &[u8; 8] = b"SOAKHIS2";
/// Chunks in flight to the writer, at most (each up to [`CHUNK`] bytes).
const QUEUE: usize = 256;
/// A buffer ships when it holds this much.
pub const CHUNK: usize = 16 << 10;

/// What a request asked, as the recorder keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked {
    Read,
    /// A write of this version of the key.
    Write(u32),
    /// A delete (this version of the key is its delete).
    Delete(u32),
}

/// What a read returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    Version(u32),
    Absent,
    /// Bytes no write of the key produced.
    Garbage,
}

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Done; a read's value.
    Ok(Option<Seen>),
    Fail,
    Unknown,
}

/// The name of a value no write produced, in a history read back.
pub const GARBAGE: &str = "corrupted";

/// One connection's records not yet shipped.
pub struct Buf {
    bytes: Vec<u8>,
    origin: Instant,
    last: u64,
    count: u64,
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

impl Buf {
    fn new(origin: Instant) -> Buf {
        Buf {
            bytes: Vec::with_capacity(CHUNK + 64),
            origin,
            last: 0,
            count: 0,
        }
    }

    /// Microseconds since the cell began: an invocation rounded down, a
    /// completion up, so that an operation's interval only widens (which
    /// can hide no anomaly wider than a microsecond, and invents none).
    fn us(&self, t: Instant, up: bool) -> u64 {
        let ns = t.saturating_duration_since(self.origin).as_nanos() as u64;
        if up {
            ns.div_ceil(1000)
        } else {
            ns / 1000
        }
    }

    /// Records one request; `complete` is `None` when it never completed.
    pub fn op(
        &mut self,
        client: u32,
        key: u64,
        asked: Asked,
        ended: Ended,
        invoke: Instant,
        complete: Instant,
    ) {
        let (f, value) = match asked {
            Asked::Read => (0u8, 0),
            Asked::Write(v) => (1, v),
            Asked::Delete(v) => (2, v),
        };
        let (outcome, seen, value) = match ended {
            Ended::Ok(Some(Seen::Version(v))) => (0u8, 0u8, v),
            Ended::Ok(Some(Seen::Absent)) => (0, 1, 0),
            Ended::Ok(Some(Seen::Garbage)) => (0, 2, 0),
            Ended::Ok(None) => (0, 0, value),
            Ended::Fail => (1, 0, value),
            Ended::Unknown => (2, 0, value),
        };
        let invoke = self.us(invoke, false);
        if self.bytes.is_empty() {
            // A chunk's first time is whole: chunks of several
            // connections interleave in the file.
            self.last = 0;
        }
        self.bytes.push(f | (outcome << 2) | (seen << 4));
        varint(&mut self.bytes, client as u64);
        varint(&mut self.bytes, key);
        varint(&mut self.bytes, value as u64);
        varint(&mut self.bytes, zigzag(invoke as i64 - self.last as i64));
        self.last = invoke;
        if outcome != 2 {
            let took = self.us(complete, true).saturating_sub(invoke);
            varint(&mut self.bytes, took);
        }
        self.count += 1;
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// What a recorder wrote.
#[derive(Debug, Clone, Default)]
pub struct Written {
    pub ops: u64,
    pub bytes: u64,
    pub path: PathBuf,
    /// Why the file could not be written, if it could not.
    pub error: Option<String>,
}

/// The writer of a cell's history.
pub struct Recorder {
    tx: Option<SyncSender<(Vec<u8>, u64)>>,
    origin: Instant,
    thread: Option<std::thread::JoinHandle<Written>>,
}

impl Recorder {
    /// Starts writing to `path`; times count from `origin`.
    pub fn start(path: &Path, origin: Instant) -> std::io::Result<Arc<Recorder>> {
        let file = std::fs::File::create(path)?;
        let (tx, rx) = sync_channel(QUEUE);
        let path = path.to_path_buf();
        let thread = std::thread::Builder::new()
            .name("soak-history".into())
            .spawn(move || write_chunks(file, rx, path))?;
        Ok(Arc::new(Recorder {
            tx: Some(tx),
            origin,
            thread: Some(thread),
        }))
    }

    /// A buffer for one connection.
    pub fn buf(&self) -> Buf {
        Buf::new(self.origin)
    }

    /// Ships `buf`'s records (blocking while the writer is [`QUEUE`]
    /// chunks behind).
    pub fn ship(&self, buf: &mut Buf) {
        if buf.bytes.is_empty() {
            return;
        }
        let bytes = std::mem::replace(&mut buf.bytes, Vec::with_capacity(CHUNK + 64));
        let n = std::mem::take(&mut buf.count);
        if let Some(tx) = &self.tx {
            let _ = tx.send((bytes, n));
        }
    }

    /// Ends the file; what it holds.
    pub fn finish(mut self) -> Written {
        self.tx.take();
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn write_chunks(file: std::fs::File, rx: Receiver<(Vec<u8>, u64)>, path: PathBuf) -> Written {
    let mut w = Written {
        path,
        ..Written::default()
    };
    let mut gz = flate2::write::GzEncoder::new(
        std::io::BufWriter::with_capacity(256 << 10, file),
        flate2::Compression::fast(),
    );
    let mut failed = gz.write_all(MAGIC).err();
    let mut flushed = Instant::now();
    let mut head = Vec::with_capacity(20);
    loop {
        let got = rx.recv_timeout(Duration::from_secs(1));
        match got {
            Ok((bytes, n)) => {
                if failed.is_none() {
                    head.clear();
                    varint(&mut head, bytes.len() as u64);
                    failed = gz.write_all(&head).and_then(|_| gz.write_all(&bytes)).err();
                    w.ops += n;
                    w.bytes += (head.len() + bytes.len()) as u64;
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        }
        if flushed.elapsed() >= Duration::from_secs(1) && failed.is_none() {
            failed = gz.flush().err();
            flushed = Instant::now();
        }
    }
    if failed.is_none() {
        failed = gz.finish().and_then(|mut b| b.flush()).err();
    }
    w.error = failed.map(|e| e.to_string());
    w
}

fn get_varint(b: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    let mut shift = 0;
    loop {
        let byte = *b.get(*at)?;
        *at += 1;
        v |= ((byte & 0x7f) as u64) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
        shift += 7;
        if shift > 63 {
            return None;
        }
    }
}

/// What reading a recorded history found besides its operations.
#[derive(Debug, Clone, Default)]
pub struct ReadNotes {
    /// The file ended inside a chunk (the run died while writing it):
    /// the operations before it were read.
    pub truncated: bool,
}

/// Reads a history a run recorded; `key_name` names key numbers.
pub fn read(
    path: &Path,
    key_name: impl Fn(u64) -> String,
) -> std::io::Result<(History, ReadNotes)> {
    let file = std::fs::File::open(path)?;
    let mut raw = Vec::new();
    let mut notes = ReadNotes::default();
    // A run that died leaves the gzip stream without its end: what was
    // flushed is read, and the rest said.
    if let Err(e) =
        flate2::read::GzDecoder::new(std::io::BufReader::new(file)).read_to_end(&mut raw)
    {
        if raw.len() < MAGIC.len() {
            return Err(e);
        }
        notes.truncated = true;
    }
    if raw.get(..MAGIC.len()) != Some(MAGIC) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{} is not a history soak recorded", path.display()),
        ));
    }
    let mut h = History::default();
    let garbage = h.values.id(GARBAGE);
    let mut keys: std::collections::HashMap<u64, u32> = Default::default();
    let mut at = MAGIC.len();
    while at < raw.len() {
        let Some(len) = get_varint(&raw, &mut at) else {
            notes.truncated = true;
            break;
        };
        let end = at + len as usize;
        if end > raw.len() {
            notes.truncated = true;
            break;
        }
        let mut last: Option<u64> = None;
        while at < end {
            let Some(op) = read_op(&raw[..end], &mut at, &mut last) else {
                notes.truncated = true;
                at = end;
                break;
            };
            let (client, key, tag, value, invoke, took) = op;
            let k = *keys.entry(key).or_insert_with(|| h.keys.id(&key_name(key)));
            let f = match tag & 3 {
                0 => F::Read,
                1 => F::Write(h.values.id(&value.to_string())),
                _ => F::Delete,
            };
            let outcome = match (tag >> 2) & 3 {
                0 if f == F::Read => Outcome::Ok(match (tag >> 4) & 3 {
                    0 => h.values.id(&value.to_string()),
                    1 => NIL,
                    _ => garbage,
                }),
                0 => Outcome::Ok(NIL),
                1 => Outcome::Fail,
                _ => Outcome::Unknown,
            };
            h.ops.push(Op {
                client: client as u32,
                key: k,
                f,
                outcome,
                invoke: invoke * 1000,
                complete: took.map_or(u64::MAX, |t| (invoke + t) * 1000),
            });
        }
    }
    Ok((h, notes))
}

type RawOp = (u64, u64, u8, u64, u64, Option<u64>);

fn read_op(b: &[u8], at: &mut usize, last: &mut Option<u64>) -> Option<RawOp> {
    let tag = *b.get(*at)?;
    *at += 1;
    let client = get_varint(b, at)?;
    let key = get_varint(b, at)?;
    let value = get_varint(b, at)?;
    let d = get_varint(b, at)?;
    let d = ((d >> 1) as i64) ^ -((d & 1) as i64);
    let invoke = (last.unwrap_or(0) as i64 + d) as u64;
    *last = Some(invoke);
    let took = if (tag >> 2) & 3 != 2 {
        Some(get_varint(b, at)?)
    } else {
        None
    };
    Some((client, key, tag, value, invoke, took))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_history_reads_back_as_it_was_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.bin.gz");
        let origin = Instant::now();
        let rec = Recorder::start(&path, origin).unwrap();
        let at = |ms: u64| origin + Duration::from_millis(ms);
        let mut a = rec.buf();
        let mut b = rec.buf();
        a.op(0, 7, Asked::Write(1), Ended::Ok(None), at(10), at(12));
        b.op(
            1,
            7,
            Asked::Read,
            Ended::Ok(Some(Seen::Version(1))),
            at(13),
            at(14),
        );
        a.op(0, 7, Asked::Delete(2), Ended::Unknown, at(20), at(20));
        b.op(
            1,
            8,
            Asked::Read,
            Ended::Ok(Some(Seen::Absent)),
            at(5),
            at(30),
        );
        b.op(
            1,
            8,
            Asked::Read,
            Ended::Ok(Some(Seen::Garbage)),
            at(31),
            at(32),
        );
        a.op(0, 8, Asked::Write(3), Ended::Fail, at(40), at(41));
        rec.ship(&mut a);
        rec.ship(&mut b);
        let written = Arc::into_inner(rec).unwrap().finish();
        assert_eq!(written.ops, 6);
        assert!(written.error.is_none());
        let (h, notes) = read(&path, |k| format!("soak:{k}")).unwrap();
        assert!(!notes.truncated);
        let mut words: Vec<String> = h
            .ops
            .iter()
            .map(|o| {
                format!(
                    "{} {} {}..{}",
                    h.keys.name(o.key),
                    h.describe(o),
                    o.invoke / 1_000_000,
                    if o.complete == u64::MAX {
                        "?".into()
                    } else {
                        (o.complete / 1_000_000).to_string()
                    }
                )
            })
            .collect();
        words.sort();
        assert_eq!(
            words,
            [
                "soak:7 delete() -> unknown 20..?",
                "soak:7 read() -> 1 13..14",
                "soak:7 write(1) -> ok 10..12",
                "soak:8 read() -> corrupted 31..32",
                "soak:8 read() -> nil 5..30",
                "soak:8 write(3) -> fail 40..41",
            ]
        );
    }

    #[test]
    fn a_history_cut_short_reads_up_to_where_it_ends() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.bin.gz");
        let origin = Instant::now();
        let rec = Recorder::start(&path, origin).unwrap();
        let mut a = rec.buf();
        for i in 0..1000u64 {
            a.op(0, i, Asked::Write(1), Ended::Ok(None), origin, origin);
            if a.len() >= CHUNK {
                rec.ship(&mut a);
            }
        }
        rec.ship(&mut a);
        Arc::into_inner(rec).unwrap().finish();
        let whole = std::fs::read(&path).unwrap();
        std::fs::write(&path, &whole[..whole.len() / 2]).unwrap();
        let (h, notes) = read(&path, |k| k.to_string()).unwrap();
        assert!(notes.truncated);
        assert!(h.ops.len() < 1000, "{}", h.ops.len());
    }
}
