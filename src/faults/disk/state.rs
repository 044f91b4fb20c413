//! The fault state: what every file held at its last fsync, the faults
//! set (a byte budget, EIO on a seeded share, delays), and what happened
//! under them; a power cut puts the files back from it.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};

use fuser::{Errno, FileAttr, FileHandle, INodeNo};
use rand::rngs::StdRng;
use rand::Rng;

use crate::model::DiskStats;
use crate::suite::faults::{IoFault, IoOp};

use super::attr::*;
use super::Writes;

/// What a file held at its last fsync, where writes since changed it.
#[derive(Debug, Default)]
pub(super) struct Unsynced {
    /// The file's length at its last fsync (or when first written after).
    pub(super) synced_len: u64,
    /// Bytes that writes since overwrote below `synced_len`, oldest first:
    /// put back newest first, the oldest (the synced bytes) win.
    pub(super) overwritten: Vec<(u64, Vec<u8>)>,
}

/// The faults in force.
#[derive(Debug, Default, Clone)]
pub(super) struct Faults {
    /// Bytes the data directory may hold (`limits.disk`), and the budget
    /// a `disk_full` phase set (which wins while it holds).
    pub(super) limit: Option<u64>,
    pub(super) full: Option<u64>,
    pub(super) errors: Option<IoFault>,
    pub(super) delay: Option<IoFault>,
}

impl Faults {
    pub(super) fn budget(&self) -> Option<u64> {
        self.full.or(self.limit)
    }
}

pub(super) struct Inodes {
    /// Inode number to path inside the backing folder ("" is the root).
    pub(super) paths: HashMap<u64, PathBuf>,
    pub(super) inos: HashMap<PathBuf, u64>,
    pub(super) next: u64,
}

impl Inodes {
    pub(super) fn ino_of(&mut self, rel: &Path) -> u64 {
        if let Some(i) = self.inos.get(rel) {
            return *i;
        }
        let i = self.next;
        self.next += 1;
        self.inos.insert(rel.to_path_buf(), i);
        self.paths.insert(i, rel.to_path_buf());
        i
    }

    pub(super) fn forget_path(&mut self, rel: &Path) {
        let Some(i) = self.inos.remove(rel) else {
            return;
        };
        // A file with another name (a hard link) keeps its number under
        // that name.
        match self.inos.iter().find(|(_, j)| **j == i) {
            Some((other, _)) => {
                let other = other.clone();
                self.paths.insert(i, other);
            }
            None => {
                self.paths.remove(&i);
            }
        }
    }

    /// A hard link: `rel` is another name of inode `ino`.
    pub(super) fn link(&mut self, ino: u64, rel: &Path) {
        self.inos.insert(rel.to_path_buf(), ino);
    }

    /// Gives the files of `inos` new numbers; returns the parent's number
    /// and name of each, for the kernel to forget.
    pub(super) fn renumber(&mut self, inos: &[u64]) -> Vec<(u64, std::ffi::OsString)> {
        let mut names = vec![];
        for ino in inos {
            let Some(first) = self.paths.remove(ino) else {
                continue;
            };
            // Every name of it (hard links) takes the new number.
            let rels: Vec<PathBuf> = self
                .inos
                .iter()
                .filter(|(_, i)| *i == ino)
                .map(|(p, _)| p.clone())
                .collect();
            let new = self.next;
            self.next += 1;
            self.paths.insert(new, first);
            for rel in rels {
                let parent = rel.parent().map(|p| self.ino_of(p)).unwrap_or(1);
                if let Some(name) = rel.file_name() {
                    names.push((parent, name.to_os_string()));
                }
                self.inos.insert(rel, new);
            }
        }
        names
    }

    /// `renameat2(RENAME_EXCHANGE)`: `a` and `b`, with everything under
    /// them, trade places.
    pub(super) fn exchange(&mut self, a: &Path, b: &Path) {
        let moved: Vec<(PathBuf, u64)> = self
            .inos
            .iter()
            .filter(|(p, _)| p.starts_with(a) || p.starts_with(b))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        for (p, _) in &moved {
            self.inos.remove(p);
        }
        for (p, i) in moved {
            let (from, to) = if p.starts_with(a) { (a, b) } else { (b, a) };
            let rest = p.strip_prefix(from).expect("filtered");
            let q = if rest.as_os_str().is_empty() {
                to.to_path_buf()
            } else {
                to.join(rest)
            };
            self.inos.insert(q.clone(), i);
            self.paths.insert(i, q);
        }
    }

    /// A rename: `from` and everything under it move to `to`.
    pub(super) fn rename(&mut self, from: &Path, to: &Path) {
        self.forget_path(to);
        let moved: Vec<(PathBuf, u64)> = self
            .inos
            .iter()
            .filter(|(p, _)| p.starts_with(from))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        for (p, i) in moved {
            // (`join("")` would add a slash.)
            let rest = p.strip_prefix(from).expect("filtered");
            let q = if rest.as_os_str().is_empty() {
                to.to_path_buf()
            } else {
                to.join(rest)
            };
            self.inos.remove(&p);
            self.inos.insert(q.clone(), i);
            self.paths.insert(i, q);
        }
    }
}

/// The state the mount and soak share.
pub struct Shared {
    pub(super) backing: PathBuf,
    pub(super) inodes: Mutex<Inodes>,
    pub(super) handles: RwLock<HashMap<u64, (u64, Arc<File>)>>,
    pub(super) next_fh: AtomicU64,
    pub(super) unsynced: Mutex<HashMap<u64, Unsynced>>,
    pub(super) faults: RwLock<Faults>,
    /// Bytes the files take on disk (their blocks, as `du` counts), kept
    /// as they change.
    pub(super) used: AtomicU64,
    pub(super) rng: Mutex<StdRng>,
    pub(super) stats: Mutex<DiskStats>,
    /// Held shared by every write and fsync, and alone by a power cut: a
    /// write of the killed node still on its way finishes before the cut,
    /// not after it.
    pub(super) gate: RwLock<()>,
    /// Whether the kernel granted the writeback cache asked for.
    pub(super) cached: AtomicBool,
    pub(super) wants: Writes,
}

impl Shared {
    pub(super) fn full(&self, rel: &Path) -> PathBuf {
        if rel.as_os_str().is_empty() {
            self.backing.clone()
        } else {
            self.backing.join(rel)
        }
    }

    pub(super) fn path_of(&self, ino: INodeNo) -> Result<PathBuf, Errno> {
        self.inodes
            .lock()
            .expect("inodes")
            .paths
            .get(&ino.0)
            .cloned()
            .ok_or(Errno::ENOENT)
    }

    pub(super) fn child(&self, parent: INodeNo, name: &OsStr) -> Result<PathBuf, Errno> {
        Ok(self.path_of(parent)?.join(name))
    }

    pub(super) fn attr(&self, rel: &Path) -> Result<FileAttr, Errno> {
        let md = std::fs::symlink_metadata(self.full(rel)).map_err(errno)?;
        let ino = self.inodes.lock().expect("inodes").ino_of(rel);
        Ok(attr_of(ino, &md))
    }

    pub(super) fn handle(&self, fh: FileHandle) -> Result<(u64, Arc<File>), Errno> {
        self.handles
            .read()
            .expect("handles")
            .get(&fh.0)
            .cloned()
            .ok_or(Errno::EBADF)
    }

    pub(super) fn add_handle(&self, ino: u64, f: File) -> u64 {
        let fh = self.next_fh.fetch_add(1, Relaxed);
        self.handles
            .write()
            .expect("handles")
            .insert(fh, (ino, Arc::new(f)));
        fh
    }

    /// Applies `io_delay` and `io_errors` to `op` on inode `ino`: `Err`
    /// when this one fails.
    pub(super) fn inject(&self, op: IoOp, ino: u64) -> Result<(), Errno> {
        let faults = {
            let f = self.faults.read().expect("faults");
            if f.errors.is_none() && f.delay.is_none() {
                return Ok(());
            }
            f.clone()
        };
        let rel = self
            .inodes
            .lock()
            .expect("inodes")
            .paths
            .get(&ino)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let Some(d) = faults.delay.as_ref().filter(|d| d.matches(op, &rel)) {
            if d.rate >= 1.0 || self.rng.lock().expect("rng").random::<f64>() < d.rate {
                self.stats.lock().expect("stats").delayed += 1;
                std::thread::sleep(d.delay);
            }
        }
        if let Some(e) = faults.errors.as_ref().filter(|e| e.matches(op, &rel)) {
            if self.rng.lock().expect("rng").random::<f64>() < e.rate {
                let mut s = self.stats.lock().expect("stats");
                match op {
                    IoOp::Read => s.read_errors += 1,
                    IoOp::Write => s.write_errors += 1,
                    IoOp::Fsync => s.fsync_errors += 1,
                }
                return Err(Errno::EIO);
            }
        }
        Ok(())
    }

    /// Takes `grow` more bytes of the budget, or refuses with ENOSPC.
    pub(super) fn reserve(&self, grow: u64) -> Result<(), Errno> {
        if grow == 0 {
            return Ok(());
        }
        let budget = self.faults.read().expect("faults").budget();
        let before = self.used.fetch_add(grow, Relaxed);
        if budget.is_some_and(|b| before + grow > b) {
            self.used.fetch_sub(grow, Relaxed);
            self.stats.lock().expect("stats").refused_writes += 1;
            return Err(Errno::ENOSPC);
        }
        Ok(())
    }

    /// `reserved` was taken for an operation that added `grew`.
    pub(super) fn correct(&self, reserved: u64, grew: u64) {
        if grew > reserved {
            self.used.fetch_add(grew - reserved, Relaxed);
        } else {
            self.shrink(reserved - grew);
        }
    }

    pub(super) fn shrink(&self, by: u64) {
        let _ = self
            .used
            .fetch_update(Relaxed, Relaxed, |u| Some(u.saturating_sub(by)));
    }

    /// Counts an operation failed for the node (a missing or existing
    /// name, or an attribute a file lacks, is an answer, not a failure),
    /// and returns its error.
    pub(super) fn failed(&self, op: &str, e: Errno) -> Errno {
        let answer = [
            Errno::ENOENT,
            Errno::EEXIST,
            Errno::ENODATA,
            Errno::ERANGE,
            Errno::ENOTEMPTY,
        ];
        if !answer.contains(&e) {
            let name = nix::errno::Errno::from_raw(e.code());
            *self
                .stats
                .lock()
                .expect("stats")
                .failed
                .entry(format!("{op} {name:?}"))
                .or_default() += 1;
        }
        e
    }

    /// Writes `data` at `offset` of inode `ino` (open as `f`). A
    /// `durable` write (the file open with O_DIRECT, O_DSYNC or O_SYNC)
    /// is on the medium when it returns, as an fdatasync would leave it.
    pub(super) fn write(
        &self,
        ino: u64,
        f: &File,
        offset: u64,
        data: &[u8],
        durable: bool,
    ) -> Result<u32, Errno> {
        self.inject(IoOp::Write, ino)?;
        let _gate = self.gate.read().expect("gate");
        // With the writeback cache no budget can be in force (it is only
        // granted to cells without one): the blocks are not counted.
        let counted = !self.cached.load(Relaxed);
        let md = f.metadata().map_err(errno)?;
        let (len, before) = (md.len(), allocated(&md));
        let end = offset + data.len() as u64;
        // What the write may add, at most: blocks past what the file has
        // (RocksDB preallocates its WAL, so most appends add none).
        let estimate = if counted {
            round_up(end.saturating_sub(len.max(before)))
        } else {
            0
        };
        self.reserve(estimate)?;
        if durable {
            // Whatever the file held unsynced is taken as synced with it
            // (an fdatasync's effect; a cut can only lose less).
            self.unsynced.lock().expect("unsynced").remove(&ino);
        } else {
            let mut unsynced = self.unsynced.lock().expect("unsynced");
            let u = unsynced.entry(ino).or_insert_with(|| Unsynced {
                synced_len: len,
                overwritten: vec![],
            });
            if offset < u.synced_len {
                let upto = end.min(u.synced_len);
                let mut old = vec![0; (upto - offset) as usize];
                let n = f.read_at(&mut old, offset).map_err(errno)?;
                old.truncate(n);
                u.overwritten.push((offset, old));
            }
        }
        let written = f.write_all_at(data, offset).map(|_| data.len());
        if counted {
            let after = f.metadata().map_or(before + estimate, |m| allocated(&m));
            self.correct(estimate, after.saturating_sub(before));
        }
        match written {
            Ok(n) => {
                let mut s = self.stats.lock().expect("stats");
                s.writes += 1;
                s.bytes_written += n as u64;
                Ok(n as u32)
            }
            Err(e) => Err(errno(e)),
        }
    }

    pub(super) fn fsync(&self, ino: u64, f: &File, datasync: bool) -> Result<(), Errno> {
        self.inject(IoOp::Fsync, ino)?;
        let _gate = self.gate.read().expect("gate");
        // Forgotten first: a write after the fsync began may not be in it,
        // and is then taken as synced (a power cut can only lose less).
        self.unsynced.lock().expect("unsynced").remove(&ino);
        let r = if datasync {
            f.sync_data()
        } else {
            f.sync_all()
        };
        self.stats.lock().expect("stats").fsyncs += 1;
        r.map_err(errno)
    }

    /// The power cut: every file back to what it held at its last fsync
    /// (or, `torn`, a random part of what followed kept). The node must
    /// be dead already. Returns the inodes changed and the bytes dropped.
    pub fn power_cut(&self, torn: bool) -> (Vec<u64>, u64) {
        let _gate = self.gate.write().expect("gate");
        let all: Vec<(u64, Unsynced)> = self.unsynced.lock().expect("unsynced").drain().collect();
        let mut dropped = 0;
        let mut files = 0;
        let mut changed = vec![];
        for (ino, u) in all {
            let Some(rel) = self.inodes.lock().expect("inodes").paths.get(&ino).cloned() else {
                continue; // unlinked since: the unlink was durable
            };
            let Ok(f) = OpenOptions::new().write(true).open(self.full(&rel)) else {
                continue;
            };
            let (len, before) = f
                .metadata()
                .map(|m| (m.len(), allocated(&m)))
                .unwrap_or((u.synced_len, 0));
            let keep = if torn && len > u.synced_len {
                self.rng
                    .lock()
                    .expect("rng")
                    .random_range(0..=len - u.synced_len)
            } else {
                0
            };
            let new_len = (u.synced_len + keep).min(len);
            if new_len < len {
                let _ = f.set_len(new_len);
                dropped += len - new_len;
                let after = f.metadata().map_or(before, |m| allocated(&m));
                self.shrink(before.saturating_sub(after));
            }
            for (off, old) in u.overwritten.iter().rev() {
                let _ = f.write_all_at(old, *off);
                dropped += old.len() as u64;
            }
            let _ = f.sync_all();
            files += 1;
            changed.push(ino);
        }
        let mut s = self.stats.lock().expect("stats");
        s.power_cuts += 1;
        s.bytes_dropped += dropped;
        s.files_cut += files;
        (changed, dropped)
    }

    /// Unsynced bytes now: what a power cut would drop at most.
    pub fn unsynced_bytes(&self) -> u64 {
        let unsynced = self.unsynced.lock().expect("unsynced");
        let inodes = self.inodes.lock().expect("inodes");
        unsynced
            .iter()
            .map(|(ino, u)| {
                let len = inodes
                    .paths
                    .get(ino)
                    .and_then(|p| std::fs::metadata(self.full(p)).ok())
                    .map_or(0, |m| m.len());
                len.saturating_sub(u.synced_len)
                    + u.overwritten
                        .iter()
                        .map(|(_, b)| b.len() as u64)
                        .sum::<u64>()
            })
            .sum()
    }
}
