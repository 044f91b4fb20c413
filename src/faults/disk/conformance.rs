//! The fault filesystem against the filesystem under it: every operation a
//! database makes is run on a plain directory and on the mount, and what
//! the caller sees (results, errors, contents, sizes, link counts) must be
//! the same; then what survives a power cut; then a generated stress of
//! concurrent operations compared file by file.

use super::*;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const BLOCK: usize = 4096;

/// A buffer aligned for O_DIRECT.
struct Aligned {
    ptr: *mut u8,
    len: usize,
}

impl Aligned {
    fn new(len: usize, fill: u8) -> Aligned {
        let layout = std::alloc::Layout::from_size_align(len, BLOCK).unwrap();
        // SAFETY: a non-zero layout; freed in Drop with the same one.
        let ptr = unsafe { std::alloc::alloc(layout) };
        // SAFETY: `len` bytes were just allocated at `ptr`.
        unsafe { std::ptr::write_bytes(ptr, fill, len) };
        Aligned { ptr, len }
    }
    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: `len` initialised bytes owned by self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        let layout = std::alloc::Layout::from_size_align(self.len, BLOCK).unwrap();
        // SAFETY: allocated in new() with this layout.
        unsafe { std::alloc::dealloc(self.ptr, layout) };
    }
}

fn rc(r: libc::c_int) -> String {
    if r < 0 {
        format!("error {}", std::io::Error::last_os_error())
    } else {
        "ok".into()
    }
}

fn res<T: std::fmt::Debug>(r: std::io::Result<T>) -> String {
    match r {
        Ok(v) => format!("ok {v:?}"),
        Err(e) => format!("error {e}"),
    }
}

fn c(p: &Path) -> std::ffi::CString {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn content(p: &Path) -> String {
    match std::fs::read(p) {
        Ok(b) => format!(
            "{} bytes, sum {}",
            b.len(),
            b.iter().map(|x| *x as u64).sum::<u64>()
        ),
        Err(e) => format!("error {e}"),
    }
}

/// O_DIRECT, O_DSYNC, O_SYNC, fdatasync and sync_file_range.
fn sync_and_direct(dir: &Path, note: &mut impl FnMut(&'static str, String)) {
    // O_DIRECT: aligned writes and reads.
    let p = dir.join("direct");
    let f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&p);
    note(
        "open O_DIRECT",
        f.as_ref()
            .map_or_else(|e| format!("error {e}"), |_| "ok".into()),
    );
    if let Ok(f) = f {
        let mut w = Aligned::new(4 * BLOCK, b'd');
        note("O_DIRECT write", res(f.write_at(w.bytes(), 0)));
        let mut r = Aligned::new(4 * BLOCK, 0);
        note("O_DIRECT read", res(f.read_at(r.bytes(), 0)));
        note("O_DIRECT read back", format!("{}", r.bytes() == w.bytes()));
    }
    // O_DSYNC and O_SYNC writes.
    for (name, flag) in [("dsync", libc::O_DSYNC), ("sync", libc::O_SYNC)] {
        let f = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .custom_flags(flag)
            .open(dir.join(name));
        note(
            "open O_DSYNC/O_SYNC",
            res(f.and_then(|mut f| f.write_all(b"synced write"))),
        );
    }
    // fdatasync and sync_file_range.
    let mut f = File::create(dir.join("datasync")).unwrap();
    f.write_all(&[7; 10_000]).unwrap();
    note("fdatasync", res(f.sync_data()));
    // SAFETY: a plain syscall on an open descriptor.
    note(
        "sync_file_range",
        rc(unsafe {
            libc::sync_file_range(
                f.as_raw_fd(),
                0,
                0,
                libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER,
            )
        }),
    );
}

fn space_and_mapping(dir: &Path, note: &mut impl FnMut(&'static str, String)) {
    // fallocate, a punched hole, ftruncate.
    let f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(dir.join("alloc"))
        .unwrap();
    f.write_all_at(&[1; 3 * BLOCK], 0).unwrap();
    // SAFETY: plain syscalls on an open descriptor.
    note(
        "fallocate",
        rc(unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, 8 * BLOCK as i64) }),
    );
    note("fallocate size", f.metadata().unwrap().len().to_string());
    note(
        "fallocate keep size",
        rc(unsafe {
            libc::fallocate(
                f.as_raw_fd(),
                libc::FALLOC_FL_KEEP_SIZE,
                0,
                16 * BLOCK as i64,
            )
        }),
    );
    note(
        "punch hole",
        rc(unsafe {
            libc::fallocate(
                f.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                BLOCK as i64,
                BLOCK as i64,
            )
        }),
    );
    note("after the hole", content(&dir.join("alloc")));
    note("ftruncate shorter", res(f.set_len(BLOCK as u64 + 10)));
    note("ftruncate longer", res(f.set_len(5 * BLOCK as u64)));
    note("after truncates", content(&dir.join("alloc")));
    drop(f);
    // A shared writable mapping and msync.
    let f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(dir.join("mapped"))
        .unwrap();
    f.set_len(2 * BLOCK as u64).unwrap();
    // SAFETY: a fresh mapping of a file this function holds open, used
    // only within its length and unmapped below.
    unsafe {
        let m = libc::mmap(
            std::ptr::null_mut(),
            2 * BLOCK,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        note("mmap shared", format!("{}", m != libc::MAP_FAILED));
        if m != libc::MAP_FAILED {
            std::ptr::write_bytes(m.cast::<u8>(), b'm', BLOCK + 5);
            note("msync", rc(libc::msync(m, 2 * BLOCK, libc::MS_SYNC)));
            libc::munmap(m, 2 * BLOCK);
        }
    }
    drop(f);
    note("mapped file read", content(&dir.join("mapped")));
}

fn links_and_renames(dir: &Path, note: &mut impl FnMut(&'static str, String)) {
    // Hard links.
    std::fs::write(dir.join("original"), b"linked").unwrap();
    note(
        "link",
        res(std::fs::hard_link(dir.join("original"), dir.join("second"))),
    );
    note(
        "nlink",
        std::fs::metadata(dir.join("second"))
            .map(|m| m.nlink())
            .unwrap_or(0)
            .to_string(),
    );
    std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("second"))
        .unwrap()
        .write_all(b" twice")
        .unwrap();
    note(
        "write through one name, read through the other",
        content(&dir.join("original")),
    );
    note(
        "unlink the first name",
        res(std::fs::remove_file(dir.join("original"))),
    );
    note("the second name after", content(&dir.join("second")));
    note(
        "nlink after",
        std::fs::metadata(dir.join("second"))
            .map(|m| m.nlink())
            .unwrap_or(0)
            .to_string(),
    );
    // Symlinks.
    note(
        "symlink",
        res(std::os::unix::fs::symlink("second", dir.join("sym"))),
    );
    note("readlink", res(std::fs::read_link(dir.join("sym"))));
    note("through the symlink", content(&dir.join("sym")));
    // A rename over an existing file.
    std::fs::write(dir.join("new"), b"the new one").unwrap();
    std::fs::write(dir.join("old"), b"old").unwrap();
    note(
        "rename over",
        res(std::fs::rename(dir.join("new"), dir.join("old"))),
    );
    note("after rename over", content(&dir.join("old")));
    note("the source is gone", dir.join("new").exists().to_string());
}

fn exchange_and_special_files(dir: &Path, note: &mut impl FnMut(&'static str, String)) {
    // renameat2: no replace, and an exchange.
    std::fs::write(dir.join("x"), b"x's").unwrap();
    std::fs::write(dir.join("y"), b"y's, longer").unwrap();
    let (cx, cy) = (c(&dir.join("x")), c(&dir.join("y")));
    // SAFETY: valid C strings; AT_FDCWD with absolute paths.
    unsafe {
        note(
            "rename no replace",
            rc(libc::renameat2(
                libc::AT_FDCWD,
                cx.as_ptr(),
                libc::AT_FDCWD,
                cy.as_ptr(),
                libc::RENAME_NOREPLACE,
            )),
        );
        note(
            "rename exchange",
            rc(libc::renameat2(
                libc::AT_FDCWD,
                cx.as_ptr(),
                libc::AT_FDCWD,
                cy.as_ptr(),
                libc::RENAME_EXCHANGE,
            )),
        );
    }
    note("exchanged x", content(&dir.join("x")));
    note("exchanged y", content(&dir.join("y")));
    // FIFOs and unix sockets.
    // SAFETY: a valid C string.
    note(
        "mkfifo",
        rc(unsafe { libc::mkfifo(c(&dir.join("fifo")).as_ptr(), 0o600) }),
    );
    note(
        "fifo kind",
        res(std::fs::symlink_metadata(dir.join("fifo")).map(|m| {
            use std::os::unix::fs::FileTypeExt;
            m.file_type().is_fifo()
        })),
    );
    let sock = dir.join("node.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock);
    note(
        "bind a unix socket",
        listener
            .as_ref()
            .map_or_else(|e| format!("error {e}"), |_| "ok".into()),
    );
    if let Ok(l) = listener {
        let mut client = std::os::unix::net::UnixStream::connect(&sock).unwrap();
        client.write_all(b"ping").unwrap();
        let (mut server, _) = l.accept().unwrap();
        let mut got = [0; 4];
        server.read_exact(&mut got).unwrap();
        note(
            "through the socket",
            String::from_utf8_lossy(&got).into_owned(),
        );
    }
}

fn attributes_and_locks(dir: &Path, note: &mut impl FnMut(&'static str, String)) {
    // Extended attributes.
    let x = dir.join("second");
    // SAFETY: valid C strings and buffers of the lengths given.
    unsafe {
        let (path, name) = (c(&x), c(Path::new("user.soak")));
        note(
            "setxattr",
            rc(libc::setxattr(
                path.as_ptr(),
                name.as_ptr(),
                b"v1".as_ptr().cast(),
                2,
                0,
            )),
        );
        let mut buf = [0u8; 16];
        let n = libc::getxattr(
            path.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        );
        note("getxattr", format!("{n} {:?}", &buf[..n.max(0) as usize]));
        note(
            "getxattr size",
            libc::getxattr(path.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0).to_string(),
        );
        let n = libc::listxattr(path.as_ptr(), buf.as_mut_ptr().cast(), buf.len());
        note("listxattr", format!("{n} {:?}", &buf[..n.max(0) as usize]));
        note(
            "removexattr",
            rc(libc::removexattr(path.as_ptr(), name.as_ptr())),
        );
        let n = libc::getxattr(
            path.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        );
        note("getxattr removed", rc(n as i32));
    }
    // Locks: flock, and open file description locks (fcntl).
    let a = File::create(dir.join("LOCK")).unwrap();
    let b = File::open(dir.join("LOCK")).unwrap();
    // SAFETY: plain syscalls on open descriptors.
    unsafe {
        note(
            "flock",
            rc(libc::flock(a.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB)),
        );
        note(
            "flock held",
            rc(libc::flock(b.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB)),
        );
        libc::flock(a.as_raw_fd(), libc::LOCK_UN);
        let mut lk: libc::flock = std::mem::zeroed();
        lk.l_type = libc::F_WRLCK as i16;
        lk.l_whence = libc::SEEK_SET as i16;
        note(
            "fcntl lock",
            rc(libc::fcntl(a.as_raw_fd(), libc::F_OFD_SETLK, &lk)),
        );
        lk.l_type = libc::F_RDLCK as i16;
        note(
            "fcntl lock held",
            rc(libc::fcntl(b.as_raw_fd(), libc::F_OFD_SETLK, &lk)),
        );
    }
    // statfs, and a directory fsynced.
    note(
        "statfs",
        format!(
            "{:?}",
            nix::sys::statvfs::statvfs(dir).map(|s| s.fragment_size() > 0)
        ),
    );
    note(
        "fsync a directory",
        res(File::open(dir).and_then(|d| d.sync_all())),
    );
}

/// Every operation of the conformance list on `dir`, and what each showed.
fn operations(dir: &Path) -> Vec<(&'static str, String)> {
    let mut seen = vec![];
    let mut note = |what: &'static str, v: String| seen.push((what, v));
    sync_and_direct(dir, &mut note);
    space_and_mapping(dir, &mut note);
    links_and_renames(dir, &mut note);
    exchange_and_special_files(dir, &mut note);
    attributes_and_locks(dir, &mut note);
    seen
}

#[test]
fn every_operation_a_database_makes_behaves_as_on_the_filesystem_under_it() {
    for writes in [Writes::Through, Writes::Cached] {
        let plain = tempfile::tempdir().unwrap();
        let (_dir, m) = super::tests::mounted_with(11, None, writes);
        let want = operations(plain.path());
        let got = operations(m.mountpoint());
        for (w, g) in want.iter().zip(&got) {
            assert_eq!(
                w,
                g,
                "{writes:?}: the fault filesystem differs from {:?}",
                plain.path()
            );
        }
        assert_eq!(want.len(), got.len());
        assert!(m.stats().failed.is_empty(), "{:?}", m.stats().failed);
    }
}

/// What survives a power cut: a direct or synchronous write that returned,
/// what fdatasync and msync covered, a file's data through either of its
/// names; what was written after them does not.
#[test]
fn direct_synchronous_and_mapped_writes_that_returned_survive_a_power_cut() {
    for writes in [Writes::Through, Writes::Cached] {
        let (_dir, m) = super::tests::mounted_with(12, None, writes);
        let d = m.mountpoint();
        let f = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(d.join("ib_logfile0"))
            .unwrap();
        let mut w = Aligned::new(2 * BLOCK, b'r');
        f.write_all_at(w.bytes(), 0).unwrap();
        let mut s = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .custom_flags(libc::O_DSYNC)
            .open(d.join("dsync"))
            .unwrap();
        s.write_all(b"acknowledged").unwrap();
        let mut l = File::create(d.join("a")).unwrap();
        l.write_all(b"synced").unwrap();
        std::fs::hard_link(d.join("a"), d.join("b")).unwrap();
        File::open(d.join("b")).unwrap().sync_all().unwrap();
        l.write_all(b" and not").unwrap();
        let mf = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(d.join("mapped"))
            .unwrap();
        mf.set_len(BLOCK as u64).unwrap();
        mf.sync_all().unwrap();
        // SAFETY: a fresh mapping within the file's length, unmapped here.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                BLOCK,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                mf.as_raw_fd(),
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            std::ptr::write_bytes(p.cast::<u8>(), b'x', 100);
            assert_eq!(libc::msync(p, BLOCK, libc::MS_SYNC), 0);
            libc::munmap(p, BLOCK);
        }
        let mut late = File::create(d.join("late")).unwrap();
        late.write_all(b"never synced").unwrap();
        m.power_cut(false);
        drop((f, s, l, mf, late));
        assert_eq!(
            std::fs::read(d.join("ib_logfile0")).unwrap(),
            vec![b'r'; 2 * BLOCK],
            "{writes:?}"
        );
        assert_eq!(
            std::fs::read(d.join("dsync")).unwrap(),
            b"acknowledged",
            "{writes:?}"
        );
        assert_eq!(std::fs::read(d.join("a")).unwrap(), b"synced", "{writes:?}");
        assert_eq!(std::fs::read(d.join("b")).unwrap(), b"synced", "{writes:?}");
        let mapped = std::fs::read(d.join("mapped")).unwrap();
        assert_eq!(&mapped[..100], &[b'x'; 100][..], "{writes:?}");
        assert_eq!(std::fs::read(d.join("late")).unwrap(), b"", "{writes:?}");
    }
}

/// One thread's generated operations on its own files: writes at random
/// offsets, truncates, renames between two names, fsyncs, reads.
fn stress(dir: &Path, thread: u64, steps: usize) -> Vec<String> {
    let mut rng = StdRng::seed_from_u64(thread);
    let names = [format!("t{thread}-a"), format!("t{thread}-b")];
    let mut seen = vec![];
    for step in 0..steps {
        let name = &names[rng.random_range(0..2)];
        let p = dir.join(name);
        let r = match rng.random_range(0..6) {
            0 | 1 => {
                let off = rng.random_range(0..64 * 1024u64);
                let len = rng.random_range(1..9000usize);
                let byte = (step % 251) as u8;
                OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&p)
                    .and_then(|f| f.write_all_at(&vec![byte; len], off))
                    .map(|_| String::new())
            }
            2 => OpenOptions::new()
                .write(true)
                .open(&p)
                .and_then(|f| f.set_len(rng.random_range(0..70_000)))
                .map(|_| String::new()),
            3 => {
                let other = &names[if name == &names[0] { 1 } else { 0 }];
                std::fs::rename(&p, dir.join(other)).map(|_| String::new())
            }
            4 => File::open(&p)
                .and_then(|f| f.sync_data())
                .map(|_| String::new()),
            _ => std::fs::read(&p)
                .map(|b| format!("{} {}", b.len(), b.iter().map(|x| *x as u64).sum::<u64>())),
        };
        seen.push(match r {
            Ok(s) => s,
            Err(e) => format!("error {}", e.raw_os_error().unwrap_or(0)),
        });
    }
    for n in &names {
        seen.push(content(&dir.join(n)));
    }
    seen
}

#[test]
fn a_generated_stress_from_four_threads_ends_as_on_a_plain_directory() {
    let plain = tempfile::tempdir().unwrap();
    let (_dir, m) = super::tests::mounted_with(13, None, Writes::Cached);
    let run = |dir: &Path| -> Vec<Vec<String>> {
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|t| s.spawn(move || stress(dir, t, 600)))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    };
    let want = run(plain.path());
    let got = run(m.mountpoint());
    for (t, (w, g)) in want.iter().zip(&got).enumerate() {
        for (i, (a, b)) in w.iter().zip(g).enumerate() {
            assert_eq!(a, b, "thread {t}, step {i}");
        }
    }
    // Each file synced, a tail appended: a power cut takes the tail and
    // only the tail.
    let mut synced = vec![];
    for t in 0..4 {
        for n in ["a", "b"] {
            let p = m.mountpoint().join(format!("t{t}-{n}"));
            let Ok(mut f) = OpenOptions::new().append(true).open(&p) else {
                continue;
            };
            f.sync_all().unwrap();
            synced.push((p.clone(), std::fs::read(&p).unwrap()));
            f.write_all(b"unsynced tail").unwrap();
        }
    }
    assert!(!synced.is_empty());
    m.power_cut(false);
    for (p, before) in synced {
        assert_eq!(std::fs::read(&p).unwrap(), before, "{p:?}");
    }
}
