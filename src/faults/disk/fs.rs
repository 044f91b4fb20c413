//! The FUSE passthrough itself: every operation on the mount goes to the
//! backing folder, through the fault state.

use std::ffi::{CString, OsStr};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, TimeOrNow, WriteFlags,
};

use crate::suite::faults::IoOp;

use super::attr::*;
use super::state::*;
use super::{Writes, TTL};

/// The filesystem the kernel talks to.
pub(super) struct FaultFs(pub(super) Arc<Shared>);

impl FaultFs {
    /// Gives a file made for `req` to its caller (soak runs as root; the
    /// node may not).
    pub(super) fn own(&self, req: &Request, path: &Path) {
        let _ = std::os::unix::fs::lchown(path, Some(req.uid()), Some(req.gid()));
    }

    /// The backing file is opened for reading too when the node writes:
    /// a write over synced bytes reads them first, to put back at a power
    /// cut (soak runs as root, so the file's mode does not stop it).
    pub(super) fn open_flags(flags: i32) -> OpenOptions {
        let mut o = OpenOptions::new();
        match flags & libc::O_ACCMODE {
            libc::O_RDONLY => o.read(true),
            _ => o.read(true).write(true),
        };
        // O_APPEND is the kernel's to turn into offsets; O_TRUNC and
        // O_CREAT were handled by setattr and create. O_DIRECT, O_DSYNC
        // and O_SYNC are soak's to honour (a write through such a file is
        // durable when it returns): the kernel's buffers that reach soak
        // are not aligned as O_DIRECT needs (EINVAL on every write, which
        // InnoDB retries for ever), and soak keeps durability itself.
        let own = libc::O_APPEND
            | libc::O_TRUNC
            | libc::O_CREAT
            | libc::O_EXCL
            | libc::O_DIRECT
            | libc::O_SYNC
            | libc::O_DSYNC;
        o.custom_flags(flags & !own);
        o
    }

    /// Whether a write through a file opened with `flags` must be on the
    /// medium when it returns.
    fn durable(flags: OpenFlags) -> bool {
        flags.0 & (libc::O_DIRECT | libc::O_DSYNC) != 0
    }

    /// The backing path of inode `ino` as a C string, for the calls std
    /// lacks.
    fn c_path(&self, ino: INodeNo) -> Result<CString, Errno> {
        let rel = self.0.path_of(ino)?;
        CString::new(self.0.full(&rel).into_os_string().into_vec()).map_err(|_| Errno::EINVAL)
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
            Err(e) => reply.error(self.0.failed("setattr", e)),
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
            Err(e) => reply.error(self.0.failed("mkdir", e)),
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
            Err(e) => reply.error(self.0.failed("unlink", e)),
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
            Err(e) => reply.error(self.0.failed("rmdir", e)),
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
            Err(e) => reply.error(self.0.failed("symlink", e)),
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
        let r = (|| {
            let from = self.0.child(parent, name)?;
            let to = self.0.child(newparent, newname)?;
            if !flags.is_empty() {
                // RENAME_NOREPLACE and RENAME_EXCHANGE, as the filesystem
                // under it does them.
                let (a, b) = (self.0.full(&from), self.0.full(&to));
                let (ca, cb) = (
                    CString::new(a.into_os_string().into_vec()).map_err(|_| Errno::EINVAL)?,
                    CString::new(b.into_os_string().into_vec()).map_err(|_| Errno::EINVAL)?,
                );
                // SAFETY: valid C strings; AT_FDCWD with absolute paths.
                let rc = unsafe {
                    libc::renameat2(
                        libc::AT_FDCWD,
                        ca.as_ptr(),
                        libc::AT_FDCWD,
                        cb.as_ptr(),
                        flags.bits(),
                    )
                };
                if rc != 0 {
                    return Err(errno(io::Error::last_os_error()));
                }
                let mut inodes = self.0.inodes.lock().expect("inodes");
                if flags.bits() & libc::RENAME_EXCHANGE != 0 {
                    inodes.exchange(&from, &to);
                } else {
                    inodes.rename(&from, &to);
                }
                return Ok(());
            }
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
            Err(e) => reply.error(self.0.failed("rename", e)),
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
            Err(e) => reply.error(self.0.failed("open", e)),
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
            Err(e) => reply.error(self.0.failed("read", e)),
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
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let r = self
            .0
            .handle(fh)
            .and_then(|(_, f)| self.0.write(ino.0, &f, offset, data, Self::durable(flags)));
        match r {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(self.0.failed("write", e)),
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
            Err(e) => reply.error(self.0.failed("fsync", e)),
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
            Err(e) => reply.error(self.0.failed("create", e)),
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
            Err(e) => reply.error(self.0.failed("fallocate", e)),
        }
    }

    /// FIFOs, unix sockets (a `bind` in the data directory) and plain
    /// files made by name.
    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let r = (|| {
            let rel = self.0.child(parent, name)?;
            let path = self.0.full(&rel);
            let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| Errno::EINVAL)?;
            // SAFETY: a plain syscall on a path this function owns.
            let rc = unsafe { libc::mknod(c.as_ptr(), mode & !umask, libc::dev_t::from(rdev)) };
            if rc != 0 {
                return Err(errno(io::Error::last_os_error()));
            }
            self.own(req, &path);
            self.0.attr(&rel)
        })();
        match r {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(self.0.failed("mknod", e)),
        }
    }

    /// A hard link: the new name is the same inode (as RocksDB's
    /// checkpoints and backups make them).
    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let r = (|| {
            let from = self.0.path_of(ino)?;
            let to = self.0.child(newparent, newname)?;
            std::fs::hard_link(self.0.full(&from), self.0.full(&to)).map_err(errno)?;
            self.0.inodes.lock().expect("inodes").link(ino.0, &to);
            self.0.attr(&to)
        })();
        match r {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(self.0.failed("link", e)),
        }
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let r = (|| {
            let path = self.c_path(ino)?;
            let name = CString::new(name.as_bytes()).map_err(|_| Errno::EINVAL)?;
            // SAFETY: valid C strings and a buffer of the length given.
            let rc = unsafe {
                libc::lsetxattr(
                    path.as_ptr(),
                    name.as_ptr(),
                    value.as_ptr().cast(),
                    value.len(),
                    flags,
                )
            };
            if rc != 0 {
                return Err(errno(io::Error::last_os_error()));
            }
            Ok(())
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(self.0.failed("setxattr", e)),
        }
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let r = (|| {
            let path = self.c_path(ino)?;
            let name = CString::new(name.as_bytes()).map_err(|_| Errno::EINVAL)?;
            let mut buf = vec![0u8; size as usize];
            // SAFETY: valid C strings and a buffer of the length given (a
            // length of 0 asks for the size).
            let n = unsafe {
                libc::lgetxattr(
                    path.as_ptr(),
                    name.as_ptr(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                )
            };
            if n < 0 {
                return Err(errno(io::Error::last_os_error()));
            }
            buf.truncate(n as usize);
            Ok((n as u32, buf))
        })();
        match r {
            Ok((n, _)) if size == 0 => reply.size(n),
            Ok((_, v)) => reply.data(&v),
            Err(e) => reply.error(self.0.failed("getxattr", e)),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let r = (|| {
            let path = self.c_path(ino)?;
            let mut buf = vec![0u8; size as usize];
            // SAFETY: a valid C string and a buffer of the length given (a
            // length of 0 asks for the size).
            let n = unsafe { libc::llistxattr(path.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
            if n < 0 {
                return Err(errno(io::Error::last_os_error()));
            }
            buf.truncate(n as usize);
            Ok((n as u32, buf))
        })();
        match r {
            Ok((n, _)) if size == 0 => reply.size(n),
            Ok((_, v)) => reply.data(&v),
            Err(e) => reply.error(self.0.failed("listxattr", e)),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = (|| {
            let path = self.c_path(ino)?;
            let name = CString::new(name.as_bytes()).map_err(|_| Errno::EINVAL)?;
            // SAFETY: valid C strings.
            if unsafe { libc::lremovexattr(path.as_ptr(), name.as_ptr()) } != 0 {
                return Err(errno(io::Error::last_os_error()));
            }
            Ok(())
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(self.0.failed("removexattr", e)),
        }
    }
}
