//! The fault filesystem: a FUSE passthrough that soak mounts over a cell's
//! data directory (the files live in a backing folder beside it), and that
//! keeps, for every file, what was written since its last fsync: the
//! length it had then and the bytes that writes overwrote. A power cut
//! then puts every file back as it was at its last fsync, as a machine
//! that lost power would find it (RocksDB's crash test drops unsynced
//! data the same way; Jepsen uses lazyfs for it). Metadata (creates,
//! renames, unlinks) is taken as durable at once, as a journalling
//! filesystem mostly makes it; only file data can be lost.
//!
//! The same filesystem refuses growth past a byte budget with ENOSPC
//! (`disk_full`, `limits.disk`), fails reads, writes or fsyncs with EIO on
//! a seeded share of them (`io_errors`), and delays them (`io_delay`).
//!
//! It runs in soak's process, outside the node's cgroup: what it keeps is
//! never counted as the node's memory. The mount is labelled with the run
//! (`soak-<run id>` as its source), so that `soak cleanup` finds it after
//! soak itself was killed.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request,
    TimeOrNow, WriteFlags,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::model::DiskStats;
use crate::suite::faults::{IoFault, IoOp};

/// How long the kernel may keep names and attributes. Short, because a
/// power cut changes files behind its back (their inodes are invalidated
/// then too).
const TTL: Duration = Duration::from_secs(1);

/// How the node's writes reach soak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writes {
    /// Each `write()` is a request to soak, so that ENOSPC and EIO reach
    /// the write that caused them, as ext4 refuses a write it has no room
    /// for. `disk_full`, `limits.disk` and faults on writes need it; it
    /// costs a round trip per write.
    Through,
    /// The kernel's writeback cache gathers writes in its pages and sends
    /// them in batches (at fsync, close, or when it writes back), which is
    /// what makes unsynced appends cheap. A power cut first has the kernel
    /// send what it holds, then drops it with the rest of the unsynced
    /// bytes: what a power cut loses is the same.
    Cached,
}

/// What a file held at its last fsync, where writes since changed it.
#[derive(Debug, Default)]
struct Unsynced {
    /// The file's length at its last fsync (or when first written after).
    synced_len: u64,
    /// Bytes that writes since overwrote below `synced_len`, oldest first:
    /// put back newest first, the oldest (the synced bytes) win.
    overwritten: Vec<(u64, Vec<u8>)>,
}

/// The faults in force.
#[derive(Debug, Default, Clone)]
struct Faults {
    /// Bytes the data directory may hold (`limits.disk`), and the budget
    /// a `disk_full` phase set (which wins while it holds).
    limit: Option<u64>,
    full: Option<u64>,
    errors: Option<IoFault>,
    delay: Option<IoFault>,
}

impl Faults {
    fn budget(&self) -> Option<u64> {
        self.full.or(self.limit)
    }
}

struct Inodes {
    /// Inode number to path inside the backing folder ("" is the root).
    paths: HashMap<u64, PathBuf>,
    inos: HashMap<PathBuf, u64>,
    next: u64,
}

impl Inodes {
    fn ino_of(&mut self, rel: &Path) -> u64 {
        if let Some(i) = self.inos.get(rel) {
            return *i;
        }
        let i = self.next;
        self.next += 1;
        self.inos.insert(rel.to_path_buf(), i);
        self.paths.insert(i, rel.to_path_buf());
        i
    }

    fn forget_path(&mut self, rel: &Path) {
        if let Some(i) = self.inos.remove(rel) {
            self.paths.remove(&i);
        }
    }

    /// Gives the files of `inos` new numbers; returns the parent's number
    /// and name of each, for the kernel to forget.
    fn renumber(&mut self, inos: &[u64]) -> Vec<(u64, std::ffi::OsString)> {
        let mut names = vec![];
        for ino in inos {
            let Some(rel) = self.paths.remove(ino) else {
                continue;
            };
            self.inos.remove(&rel);
            let parent = rel.parent().map(|p| self.ino_of(p)).unwrap_or(1);
            if let Some(name) = rel.file_name() {
                names.push((parent, name.to_os_string()));
            }
            self.ino_of(&rel);
        }
        names
    }

    /// A rename: `from` and everything under it move to `to`.
    fn rename(&mut self, from: &Path, to: &Path) {
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
    backing: PathBuf,
    inodes: Mutex<Inodes>,
    handles: RwLock<HashMap<u64, (u64, Arc<File>)>>,
    next_fh: AtomicU64,
    unsynced: Mutex<HashMap<u64, Unsynced>>,
    faults: RwLock<Faults>,
    /// Bytes the files take on disk (their blocks, as `du` counts), kept
    /// as they change.
    used: AtomicU64,
    rng: Mutex<StdRng>,
    stats: Mutex<DiskStats>,
    /// Held shared by every write and fsync, and alone by a power cut: a
    /// write of the killed node still on its way finishes before the cut,
    /// not after it.
    gate: RwLock<()>,
    /// Whether the kernel granted the writeback cache asked for.
    cached: AtomicBool,
    wants: Writes,
}

impl Shared {
    fn full(&self, rel: &Path) -> PathBuf {
        if rel.as_os_str().is_empty() {
            self.backing.clone()
        } else {
            self.backing.join(rel)
        }
    }

    fn path_of(&self, ino: INodeNo) -> Result<PathBuf, Errno> {
        self.inodes
            .lock()
            .expect("inodes")
            .paths
            .get(&ino.0)
            .cloned()
            .ok_or(Errno::ENOENT)
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<PathBuf, Errno> {
        Ok(self.path_of(parent)?.join(name))
    }

    fn attr(&self, rel: &Path) -> Result<FileAttr, Errno> {
        let md = std::fs::symlink_metadata(self.full(rel)).map_err(errno)?;
        let ino = self.inodes.lock().expect("inodes").ino_of(rel);
        Ok(attr_of(ino, &md))
    }

    fn handle(&self, fh: FileHandle) -> Result<(u64, Arc<File>), Errno> {
        self.handles
            .read()
            .expect("handles")
            .get(&fh.0)
            .cloned()
            .ok_or(Errno::EBADF)
    }

    fn add_handle(&self, ino: u64, f: File) -> u64 {
        let fh = self.next_fh.fetch_add(1, Relaxed);
        self.handles
            .write()
            .expect("handles")
            .insert(fh, (ino, Arc::new(f)));
        fh
    }

    /// Applies `io_delay` and `io_errors` to `op` on inode `ino`: `Err`
    /// when this one fails.
    fn inject(&self, op: IoOp, ino: u64) -> Result<(), Errno> {
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
    fn reserve(&self, grow: u64) -> Result<(), Errno> {
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
    fn correct(&self, reserved: u64, grew: u64) {
        if grew > reserved {
            self.used.fetch_add(grew - reserved, Relaxed);
        } else {
            self.shrink(reserved - grew);
        }
    }

    fn shrink(&self, by: u64) {
        let _ = self
            .used
            .fetch_update(Relaxed, Relaxed, |u| Some(u.saturating_sub(by)));
    }

    fn write(&self, ino: u64, f: &File, offset: u64, data: &[u8]) -> Result<u32, Errno> {
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
        {
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

    fn fsync(&self, ino: u64, f: &File, datasync: bool) -> Result<(), Errno> {
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

/// Bytes of disk a file takes (its blocks), as `du` and soak's disk
/// figures count them.
fn allocated(md: &std::fs::Metadata) -> u64 {
    md.blocks() * 512
}

/// Up to whole 4 KiB blocks.
fn round_up(b: u64) -> u64 {
    b.div_ceil(4096) * 4096
}

fn errno(e: io::Error) -> Errno {
    Errno::from(e)
}

fn kind_of(ft: std::fs::FileType) -> FileType {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_dir() {
        FileType::Directory
    } else if ft.is_symlink() {
        FileType::Symlink
    } else if ft.is_fifo() {
        FileType::NamedPipe
    } else if ft.is_socket() {
        FileType::Socket
    } else if ft.is_block_device() {
        FileType::BlockDevice
    } else if ft.is_char_device() {
        FileType::CharDevice
    } else {
        FileType::RegularFile
    }
}

fn time(s: i64, ns: i64) -> SystemTime {
    if s >= 0 {
        UNIX_EPOCH + Duration::new(s as u64, ns as u32)
    } else {
        UNIX_EPOCH
    }
}

fn attr_of(ino: u64, md: &std::fs::Metadata) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: md.size(),
        blocks: md.blocks(),
        atime: time(md.atime(), md.atime_nsec()),
        mtime: time(md.mtime(), md.mtime_nsec()),
        ctime: time(md.ctime(), md.ctime_nsec()),
        crtime: time(md.ctime(), md.ctime_nsec()),
        kind: kind_of(md.file_type()),
        perm: (md.permissions().mode() & 0o7777) as u16,
        nlink: md.nlink() as u32,
        uid: md.uid(),
        gid: md.gid(),
        rdev: md.rdev() as u32,
        blksize: md.blksize() as u32,
        flags: 0,
    }
}

fn to_time(t: TimeOrNow) -> SystemTime {
    match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    }
}

/// The filesystem the kernel talks to.
struct FaultFs(Arc<Shared>);

impl FaultFs {
    /// Gives a file made for `req` to its caller (soak runs as root; the
    /// node may not).
    fn own(&self, req: &Request, path: &Path) {
        let _ = std::os::unix::fs::lchown(path, Some(req.uid()), Some(req.gid()));
    }

    /// The backing file is opened for reading too when the node writes:
    /// a write over synced bytes reads them first, to put back at a power
    /// cut (soak runs as root, so the file's mode does not stop it).
    fn open_flags(flags: i32) -> OpenOptions {
        let mut o = OpenOptions::new();
        match flags & libc::O_ACCMODE {
            libc::O_RDONLY => o.read(true),
            _ => o.read(true).write(true),
        };
        // O_APPEND is the kernel's to turn into offsets; O_TRUNC and
        // O_CREAT were handled by setattr and create.
        o.custom_flags(flags & !(libc::O_APPEND | libc::O_TRUNC | libc::O_CREAT | libc::O_EXCL));
        o
    }
}

impl Filesystem for FaultFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        // A kernel without it gets every write through (slower, the same).
        if self.0.wants == Writes::Cached
            && config
                .add_capabilities(InitFlags::FUSE_WRITEBACK_CACHE)
                .is_ok()
        {
            self.0.cached.store(true, Relaxed);
            // The kernel then keeps files' times itself and sends them to
            // soak before each fsync that follows a change: at a whole
            // second's granularity they change once a second, not at
            // every write (an fsync per write would otherwise cost a
            // third round trip).
            let _ = config.set_time_granularity(Duration::from_secs(1));
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.0.child(parent, name).and_then(|p| self.0.attr(&p)) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        if let Some(Ok((_, f))) = fh.map(|h| self.0.handle(h)) {
            match f.metadata() {
                Ok(md) => return reply.attr(&TTL, &attr_of(ino.0, &md)),
                Err(e) => return reply.error(errno(e)),
            }
        }
        match self.0.path_of(ino).and_then(|p| self.0.attr(&p)) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let r = (|| -> Result<FileAttr, Errno> {
            let rel = self.0.path_of(ino)?;
            let path = self.0.full(&rel);
            if let Some(m) = mode {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(m))
                    .map_err(errno)?;
            }
            if uid.is_some() || gid.is_some() {
                std::os::unix::fs::lchown(&path, uid, gid).map_err(errno)?;
            }
            if let Some(size) = size {
                let f = match fh.map(|h| self.0.handle(h)) {
                    Some(Ok((_, f))) => f,
                    _ => Arc::new(OpenOptions::new().write(true).open(&path).map_err(errno)?),
                };
                let before = allocated(&f.metadata().map_err(errno)?);
                // Extending makes a sparse file: no blocks, nothing to
                // reserve.
                f.set_len(size).map_err(errno)?;
                let after = f.metadata().map_or(before, |m| allocated(&m));
                self.0.correct(0, after.saturating_sub(before));
                self.0.shrink(before.saturating_sub(after));
                // A truncation is metadata: durable at once, and what was
                // cut off no longer needs putting back.
                if let Some(u) = self.0.unsynced.lock().expect("unsynced").get_mut(&ino.0) {
                    u.synced_len = u.synced_len.min(size);
                    u.overwritten.retain(|(off, _)| *off < size);
                }
            }
            // With the writeback cache the kernel keeps a file's times
            // itself and sends them at every fsync: they are not kept.
            let cached = self.0.cached.load(Relaxed);
            if (atime.is_some() || mtime.is_some()) && !cached {
                let f = File::options()
                    .write(true)
                    .open(&path)
                    .or_else(|_| File::open(&path));
                if let Ok(f) = f {
                    let mut t = std::fs::FileTimes::new();
                    if let Some(a) = atime {
                        t = t.set_accessed(to_time(a));
                    }
                    if let Some(m) = mtime {
                        t = t.set_modified(to_time(m));
                    }
                    let _ = f.set_times(t);
                }
            }
            self.0.attr(&rel)
        })();
        match r {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self
            .0
            .path_of(ino)
            .and_then(|p| std::fs::read_link(self.0.full(&p)).map_err(errno))
        {
            Ok(t) => reply.data(t.as_os_str().as_encoded_bytes()),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let r = (|| {
            let rel = self.0.child(parent, name)?;
            let path = self.0.full(&rel);
            std::fs::create_dir(&path).map_err(errno)?;
            let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode & !umask));
            self.own(req, &path);
            self.0.attr(&rel)
        })();
        match r {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = (|| {
            let rel = self.0.child(parent, name)?;
            let path = self.0.full(&rel);
            let md = std::fs::symlink_metadata(&path).map_err(errno)?;
            std::fs::remove_file(&path).map_err(errno)?;
            if md.nlink() <= 1 {
                self.0.shrink(allocated(&md));
            }
            let mut inodes = self.0.inodes.lock().expect("inodes");
            if let Some(i) = inodes.inos.get(&rel).copied() {
                self.0.unsynced.lock().expect("unsynced").remove(&i);
            }
            inodes.forget_path(&rel);
            Ok(())
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = (|| {
            let rel = self.0.child(parent, name)?;
            std::fs::remove_dir(self.0.full(&rel)).map_err(errno)?;
            self.0.inodes.lock().expect("inodes").forget_path(&rel);
            Ok(())
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let r = (|| {
            let rel = self.0.child(parent, link_name)?;
            let path = self.0.full(&rel);
            std::os::unix::fs::symlink(target, &path).map_err(errno)?;
            self.own(req, &path);
            self.0.attr(&rel)
        })();
        match r {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if !flags.is_empty() {
            return reply.error(Errno::EINVAL);
        }
        let r = (|| {
            let from = self.0.child(parent, name)?;
            let to = self.0.child(newparent, newname)?;
            let replaced = std::fs::symlink_metadata(self.0.full(&to)).ok();
            std::fs::rename(self.0.full(&from), self.0.full(&to)).map_err(errno)?;
            if let Some(md) = replaced.filter(|m| m.is_file() && m.nlink() <= 1) {
                self.0.shrink(allocated(&md));
            }
            let mut inodes = self.0.inodes.lock().expect("inodes");
            if let Some(i) = inodes.inos.get(&to).copied() {
                self.0.unsynced.lock().expect("unsynced").remove(&i);
            }
            inodes.rename(&from, &to);
            Ok(())
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let r = (|| {
            let rel = self.0.path_of(ino)?;
            let f = Self::open_flags(flags.0)
                .open(self.0.full(&rel))
                .map_err(errno)?;
            Ok(self.0.add_handle(ino.0, f))
        })();
        match r {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let r = (|| {
            self.0.inject(IoOp::Read, ino.0)?;
            let (_, f) = self.0.handle(fh)?;
            let mut buf = vec![0; size as usize];
            let mut n = 0;
            while n < buf.len() {
                match f.read_at(&mut buf[n..], offset + n as u64) {
                    Ok(0) => break,
                    Ok(k) => n += k,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(errno(e)),
                }
            }
            buf.truncate(n);
            self.0.stats.lock().expect("stats").reads += 1;
            Ok(buf)
        })();
        match r {
            Ok(b) => reply.data(&b),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let r = self
            .0
            .handle(fh)
            .and_then(|(_, f)| self.0.write(ino.0, &f, offset, data));
        match r {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.0.handles.write().expect("handles").remove(&fh.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self
            .0
            .handle(fh)
            .and_then(|(_, f)| self.0.fsync(ino.0, &f, datasync))
        {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.0.path_of(ino) {
            Ok(_) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let r = (|| {
            let rel = self.0.path_of(ino)?;
            let mut entries = vec![
                (ino.0, FileType::Directory, ".".into()),
                (ino.0, FileType::Directory, "..".into()),
            ];
            for e in std::fs::read_dir(self.0.full(&rel)).map_err(errno)? {
                let e = e.map_err(errno)?;
                let kind = e.file_type().map(kind_of).unwrap_or(FileType::RegularFile);
                let child = rel.join(e.file_name());
                let i = self.0.inodes.lock().expect("inodes").ino_of(&child);
                entries.push((i, kind, e.file_name()));
            }
            Ok(entries)
        })();
        match r {
            Ok(entries) => {
                for (i, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset as usize)
                {
                    if reply.add(INodeNo(ino), (i + 1) as u64, kind, name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let Ok(s) = nix::sys::statvfs::statvfs(&self.0.backing) else {
            return reply.error(Errno::EIO);
        };
        let bsize = s.fragment_size().max(1);
        let (mut blocks, mut bfree, mut bavail) =
            (s.blocks(), s.blocks_free(), s.blocks_available());
        // Under a budget, the disk is as large as the budget.
        if let Some(b) = self.0.faults.read().expect("faults").budget() {
            let left = b.saturating_sub(self.0.used.load(Relaxed)) / bsize;
            blocks = blocks.min(b / bsize);
            bfree = bfree.min(left);
            bavail = bavail.min(left);
        }
        reply.statfs(
            blocks,
            bfree,
            bavail,
            s.files(),
            s.files_free(),
            bsize as u32,
            s.name_max() as u32,
            bsize as u32,
        );
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        match self.0.path_of(ino) {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let r = (|| {
            let rel = self.0.child(parent, name)?;
            let path = self.0.full(&rel);
            let mut o = Self::open_flags(flags);
            o.create(true).mode(mode & !umask);
            if flags & libc::O_EXCL != 0 {
                o.create_new(true);
            }
            let existed = path.exists();
            let f = o.open(&path).map_err(errno)?;
            if flags & libc::O_TRUNC != 0 {
                let before = allocated(&f.metadata().map_err(errno)?);
                f.set_len(0).map_err(errno)?;
                self.0.shrink(before);
            }
            if !existed {
                self.own(req, &path);
            }
            let a = self.0.attr(&rel)?;
            let fh = self.0.add_handle(a.ino.0, f);
            Ok((a, fh))
        })();
        match r {
            Ok((a, fh)) => {
                reply.created(&TTL, &a, Generation(0), FileHandle(fh), FopenFlags::empty())
            }
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let r = (|| {
            let (_, f) = self.0.handle(fh)?;
            let before = allocated(&f.metadata().map_err(errno)?);
            // At most the range asked for (less where blocks exist).
            let grow = round_up((offset + length).saturating_sub(before).min(length));
            self.0.reserve(grow)?;
            use std::os::fd::AsRawFd;
            let rc = unsafe {
                // SAFETY: a plain syscall on a descriptor this handle owns.
                libc::fallocate(f.as_raw_fd(), mode, offset as i64, length as i64)
            };
            let e = (rc != 0).then(io::Error::last_os_error);
            let after = f.metadata().map_or(before, |m| allocated(&m));
            self.0.correct(grow, after.saturating_sub(before));
            e.map_or(Ok(()), |e| Err(errno(e)))
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }
}

/// A mounted fault filesystem; unmounted when dropped.
pub struct Mounted {
    shared: Arc<Shared>,
    session: Option<fuser::BackgroundSession>,
    notifier: fuser::Notifier,
    mountpoint: PathBuf,
}

/// The mount source that labels soak's mounts with their run.
pub const SOURCE_PREFIX: &str = "soakfs-";

impl Mounted {
    /// Mounts the files of `backing` at `mountpoint` (both folders, made if
    /// missing), with the cell's `seed` for the faults' choices and a byte
    /// `limit` for the whole cell (`limits.disk`). `limit` needs
    /// [`Writes::Through`].
    pub fn mount(
        backing: &Path,
        mountpoint: &Path,
        run_id: &str,
        seed: u64,
        limit: Option<u64>,
        writes: Writes,
    ) -> io::Result<Mounted> {
        std::fs::create_dir_all(backing)?;
        std::fs::create_dir_all(mountpoint)?;
        let used = crate::telemetry::disk_usage(backing);
        let mut inodes = Inodes {
            paths: HashMap::new(),
            inos: HashMap::new(),
            next: 2,
        };
        inodes.paths.insert(1, PathBuf::new());
        inodes.inos.insert(PathBuf::new(), 1);
        let shared = Arc::new(Shared {
            backing: backing.canonicalize()?,
            inodes: Mutex::new(inodes),
            handles: RwLock::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            unsynced: Mutex::new(HashMap::new()),
            faults: RwLock::new(Faults {
                limit,
                ..Faults::default()
            }),
            used: AtomicU64::new(used),
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            stats: Mutex::new(DiskStats::default()),
            gate: RwLock::new(()),
            cached: AtomicBool::new(false),
            wants: writes,
        });
        let mut config = fuser::Config::default();
        config.mount_options = vec![
            MountOption::FSName(format!("{SOURCE_PREFIX}{run_id}")),
            MountOption::Subtype("soak".into()),
            MountOption::DefaultPermissions,
        ];
        config.acl = fuser::SessionACL::All;
        config.n_threads = Some(4);
        config.clone_fd = true;
        let session = fuser::spawn_mount(FaultFs(shared.clone()), mountpoint, &config)?;
        let notifier = session.notifier();
        Ok(Mounted {
            shared,
            session: Some(session),
            notifier,
            mountpoint: mountpoint.to_path_buf(),
        })
    }

    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// The folder that holds the files.
    pub fn backing(&self) -> &Path {
        &self.shared.backing
    }

    /// Puts a power cut's loss on every file (see [`Shared::power_cut`]);
    /// the node must be dead. Returns the bytes dropped.
    pub fn power_cut(&self, torn: bool) -> u64 {
        let cached = self.shared.cached.load(Relaxed);
        if cached {
            self.write_back();
        }
        let (changed, dropped) = self.shared.power_cut(torn);
        for ino in &changed {
            let _ = self.notifier.inval_inode(INodeNo(*ino), 0, 0);
        }
        if cached {
            // With the writeback cache the kernel keeps its own idea of a
            // cached file's size and never takes soak's: the files cut
            // shorter get new inode numbers, so that the next lookup
            // starts from what is on disk.
            for (parent, name) in self
                .shared
                .inodes
                .lock()
                .expect("inodes")
                .renumber(&changed)
            {
                let _ = self.notifier.inval_entry(INodeNo(parent), &name);
            }
        }
        dropped
    }

    /// Has the kernel send every page of the node's writes it still holds
    /// (they then count as unsynced writes, as they are): closing a file
    /// writes its dirty pages back and waits for them.
    fn write_back(&self) {
        let files: Vec<PathBuf> = self
            .shared
            .inodes
            .lock()
            .expect("inodes")
            .inos
            .keys()
            .cloned()
            .collect();
        for rel in files {
            let backing = self.shared.full(&rel);
            if std::fs::symlink_metadata(&backing).is_ok_and(|m| m.is_file()) {
                drop(File::open(self.mountpoint.join(&rel)));
            }
        }
    }

    /// `disk_full`: the budget becomes what is used now plus `room`
    /// (`None`: lifted, back to the cell's limit).
    pub fn set_room(&self, room: Option<u64>) {
        let used = self.shared.used.load(Relaxed);
        self.shared.faults.write().expect("faults").full = room.map(|r| used + r);
    }

    pub fn set_errors(&self, f: Option<IoFault>) {
        let reads = f.as_ref().is_some_and(|f| f.ops.contains(&IoOp::Read));
        self.shared.faults.write().expect("faults").errors = f;
        if reads {
            self.drop_page_cache();
        }
    }

    pub fn set_delay(&self, f: Option<IoFault>) {
        let reads = f.as_ref().is_some_and(|f| f.ops.contains(&IoOp::Read));
        self.shared.faults.write().expect("faults").delay = f;
        if reads {
            self.drop_page_cache();
        }
    }

    /// Drops the kernel's cached pages of every file, so that reads reach
    /// the faults at least once (a file the node keeps open would
    /// otherwise be read from memory, as on a real disk).
    fn drop_page_cache(&self) {
        let inos: Vec<u64> = self
            .shared
            .inodes
            .lock()
            .expect("inodes")
            .paths
            .keys()
            .copied()
            .collect();
        for ino in inos {
            let _ = self.notifier.inval_inode(INodeNo(ino), 0, 0);
        }
    }

    /// Bytes the files take on disk, as soak counts them for the budget.
    pub fn used(&self) -> u64 {
        self.shared.used.load(Relaxed)
    }

    pub fn unsynced_bytes(&self) -> u64 {
        self.shared.unsynced_bytes()
    }

    pub fn stats(&self) -> DiskStats {
        DiskStats {
            writeback_cache: self.shared.cached.load(Relaxed),
            ..self.shared.stats.lock().expect("stats").clone()
        }
    }
}

impl std::fmt::Debug for Mounted {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.debug_struct("Mounted")
            .field("mountpoint", &self.mountpoint)
            .field("backing", &self.shared.backing)
            .finish()
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            if s.umount_and_join().is_err() {
                unmount(&self.mountpoint);
            }
        }
    }
}

/// Detaches the mount at `path` (idempotent: a path that is no mount is
/// left alone).
pub fn unmount(path: &Path) -> bool {
    nix::mount::umount2(path, nix::mount::MntFlags::MNT_DETACH).is_ok()
}

/// Where the files of a fault filesystem mounted at `mountpoint` live:
/// `data.files` beside `data`.
pub fn backing_of(mountpoint: &Path) -> PathBuf {
    let mut name = mountpoint.file_name().unwrap_or_default().to_os_string();
    name.push(".files");
    mountpoint.with_file_name(name)
}

/// After the unmount: the files back where the node wrote them (the
/// mountpoint, empty now), so that `soak verify` and the user's own tools
/// find them there.
pub fn restore(mountpoint: &Path) {
    let backing = backing_of(mountpoint);
    if backing.is_dir() && std::fs::remove_dir(mountpoint).is_ok() {
        let _ = std::fs::rename(&backing, mountpoint);
    }
}

/// soak's fault filesystems mounted on this machine: (mountpoint, run id).
pub fn mounts() -> Vec<(PathBuf, String)> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return vec![];
    };
    text.lines()
        .filter_map(|l| {
            // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - TYPE SOURCE SUPER
            let (left, right) = l.split_once(" - ")?;
            let mountpoint = left.split(' ').nth(4)?;
            let mut r = right.split(' ');
            let fstype = r.next()?;
            let source = r.next()?;
            let run = source.strip_prefix(SOURCE_PREFIX)?;
            (fstype == "fuse" || fstype == "fuse.soak")
                .then(|| (PathBuf::from(unescape(mountpoint)), run.to_string()))
        })
        .collect()
}

/// mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn mounted(seed: u64, limit: Option<u64>) -> (tempfile::TempDir, Mounted) {
        mounted_with(seed, limit, Writes::Through)
    }

    fn mounted_with(seed: u64, limit: Option<u64>, writes: Writes) -> (tempfile::TempDir, Mounted) {
        let dir = tempfile::tempdir().unwrap();
        let m = Mounted::mount(
            &dir.path().join("backing"),
            &dir.path().join("data"),
            "test",
            seed,
            limit,
            writes,
        )
        .expect("mount the fault filesystem (needs root and /dev/fuse)");
        (dir, m)
    }

    fn read(p: &Path) -> Vec<u8> {
        let mut v = vec![];
        File::open(p).unwrap().read_to_end(&mut v).unwrap();
        v
    }

    #[test]
    fn a_power_cut_drops_what_was_written_after_the_last_fsync() {
        for writes in [Writes::Through, Writes::Cached] {
            let (_dir, m) = mounted_with(1, None, writes);
            let p = m.mountpoint().join("wal.log");
            let mut f = File::create(&p).unwrap();
            f.write_all(b"synced-").unwrap();
            f.sync_data().unwrap();
            f.write_all(b"lost").unwrap();
            // An overwrite of synced bytes is put back too.
            f.write_all_at(b"SYN", 0).unwrap();
            let other = m.mountpoint().join("never-synced");
            std::fs::write(&other, b"gone").unwrap();
            assert_eq!(read(&p), b"SYNced-lost");
            // The node dies with the file open and its last writes, with
            // the writeback cache, still in the kernel's pages.
            let dropped = m.power_cut(false);
            drop(f);
            assert_eq!(m.shared.cached.load(Relaxed), writes == Writes::Cached);
            if writes == Writes::Through {
                assert_eq!(dropped, 4 + 3 + 4);
            } else {
                // The kernel sends whole pages: the cut puts back at least
                // the bytes written.
                assert!(dropped >= 4 + 3 + 4, "{dropped}");
            }
            assert_eq!(std::fs::metadata(&p).unwrap().len(), 7, "{writes:?}");
            assert_eq!(read(&p), b"synced-", "{writes:?}");
            assert_eq!(read(&other), b"", "metadata survives, data does not");
            let s = m.stats();
            assert_eq!((s.power_cuts, s.files_cut), (1, 2));
            // Nothing more to lose now, and nothing comes back later.
            assert_eq!(m.power_cut(false), 0);
            assert_eq!(read(&p), b"synced-", "{writes:?}");
        }
    }

    #[test]
    fn renames_keep_their_unsynced_state_and_unlinks_their_durability() {
        let (_dir, m) = mounted(2, None);
        let tmp = m.mountpoint().join("CURRENT.tmp");
        std::fs::write(&tmp, b"MANIFEST-1\n").unwrap();
        File::open(&tmp).unwrap().sync_all().unwrap();
        std::fs::rename(&tmp, m.mountpoint().join("CURRENT")).unwrap();
        std::fs::create_dir(m.mountpoint().join("sub")).unwrap();
        std::fs::write(m.mountpoint().join("sub/x"), b"unsynced").unwrap();
        std::fs::rename(m.mountpoint().join("sub"), m.mountpoint().join("sub2")).unwrap();
        std::fs::write(m.mountpoint().join("gone"), b"x").unwrap();
        std::fs::remove_file(m.mountpoint().join("gone")).unwrap();
        m.power_cut(false);
        assert_eq!(read(&m.mountpoint().join("CURRENT")), b"MANIFEST-1\n");
        assert_eq!(read(&m.mountpoint().join("sub2/x")), b"");
        assert!(!m.mountpoint().join("gone").exists());
        let mut names: Vec<String> = std::fs::read_dir(m.mountpoint())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["CURRENT", "sub2"]);
    }

    #[test]
    fn a_torn_power_cut_keeps_part_of_the_tail_the_same_way_for_a_seed() {
        let cut = |seed| {
            let (_dir, m) = mounted(seed, None);
            let p = m.mountpoint().join("log");
            let mut f = File::create(&p).unwrap();
            f.write_all(&[b'a'; 100]).unwrap();
            f.sync_all().unwrap();
            f.write_all(&[b'b'; 1000]).unwrap();
            drop(f);
            m.power_cut(true);
            read(&p).len()
        };
        let (a, b) = (cut(7), cut(7));
        assert_eq!(a, b);
        assert!((100..=1100).contains(&a));
        let lens: Vec<usize> = (0..8).map(cut).collect();
        assert!(lens.iter().any(|l| *l != lens[0]), "{lens:?}");
    }

    #[test]
    fn a_full_disk_refuses_growth_with_enospc_until_space_returns() {
        let (_dir, m) = mounted(3, Some(64 * 1024));
        let p = m.mountpoint().join("f");
        let mut f = File::create(&p).unwrap();
        f.write_all(&[0; 60 * 1024]).unwrap();
        let e = f.write_all(&[0; 8 * 1024]).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
        // Overwrites in place take no room.
        f.write_all_at(&[1; 1024], 0).unwrap();
        drop(f);
        // `disk_full: true`: full now, even under the limit.
        std::fs::remove_file(&p).unwrap();
        m.set_room(Some(0));
        let e = std::fs::write(m.mountpoint().join("g"), b"x").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        // Space comes back as on a real disk: by deleting, or the fault
        // lifted.
        std::fs::write(m.mountpoint().join("h"), b"").unwrap();
        m.set_room(None);
        std::fs::write(m.mountpoint().join("g"), b"x").unwrap();
        assert_eq!(m.stats().refused_writes, 2);
        let vfs = nix::sys::statvfs::statvfs(m.mountpoint()).unwrap();
        assert!(vfs.blocks() * vfs.fragment_size() <= 64 * 1024);
    }

    #[test]
    fn io_errors_hit_their_share_of_the_matching_files_only() {
        let (_dir, m) = mounted(4, None);
        std::fs::write(m.mountpoint().join("1.sst"), b"table").unwrap();
        std::fs::write(m.mountpoint().join("LOG"), b"log").unwrap();
        m.set_errors(Some(IoFault {
            rate: 0.5,
            delay: Duration::ZERO,
            ops: vec![IoOp::Read],
            path: Some("*.sst".into()),
        }));
        let mut failed = 0;
        for _ in 0..200 {
            match std::fs::read(m.mountpoint().join("1.sst")) {
                Ok(b) => assert_eq!(b, b"table"),
                Err(e) => {
                    assert_eq!(e.raw_os_error(), Some(libc::EIO));
                    failed += 1;
                }
            }
            assert_eq!(std::fs::read(m.mountpoint().join("LOG")).unwrap(), b"log");
        }
        // A read of the file may be more than one read of the filesystem.
        assert!((30..200).contains(&failed), "{failed} of 200 failed");
        assert!(m.stats().read_errors >= failed);
        m.set_errors(None);
        assert_eq!(
            std::fs::read(m.mountpoint().join("1.sst")).unwrap(),
            b"table"
        );
    }

    #[test]
    fn io_delay_holds_the_operations_it_names() {
        let (_dir, m) = mounted(5, None);
        let p = m.mountpoint().join("f");
        let f = File::create(&p).unwrap();
        m.set_delay(Some(IoFault {
            rate: 1.0,
            delay: Duration::from_millis(50),
            ops: vec![IoOp::Fsync],
            path: None,
        }));
        let t = std::time::Instant::now();
        f.sync_all().unwrap();
        assert!(t.elapsed() >= Duration::from_millis(50));
        assert_eq!(m.stats().delayed, 1);
    }

    #[test]
    fn the_mount_is_labelled_with_its_run_and_gone_when_dropped() {
        let (dir, m) = mounted(6, None);
        let at = m.mountpoint().canonicalize().unwrap();
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert!(
            mounts().contains(&(at.clone(), "test".into())),
            "{at:?} in {:?}: {info}",
            mounts()
        );
        drop(m);
        assert!(!mounts().iter().any(|(p, _)| *p == at));
        drop(dir);
    }
}
