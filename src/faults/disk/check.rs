//! What the fault filesystem can do on this host, tried on a mount of its
//! own: `soak doctor` prints it, so that what a database needs and the
//! filesystem cannot give is said before a run, never met as a hang.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use super::{Mounted, Writes};

/// One capability and whether it worked (with the error if not).
pub type Capability = (&'static str, Result<(), String>);

fn os(r: libc::c_int) -> Result<(), String> {
    if r < 0 {
        Err(std::io::Error::last_os_error().to_string())
    } else {
        Ok(())
    }
}

fn io<T>(r: std::io::Result<T>) -> Result<(), String> {
    r.map(|_| ()).map_err(|e| e.to_string())
}

/// An O_DIRECT write of one aligned block, read back.
fn direct(dir: &Path) -> Result<(), String> {
    let f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(dir.join("direct"))
        .map_err(|e| e.to_string())?;
    let layout = std::alloc::Layout::from_size_align(4096, 4096).expect("a layout");
    // SAFETY: a non-zero layout, filled before use, freed below.
    let p = unsafe { std::alloc::alloc_zeroed(layout) };
    // SAFETY: 4096 bytes at `p`, allocated above.
    let buf = unsafe { std::slice::from_raw_parts_mut(p, 4096) };
    let r = f.write_all_at(buf, 0).and_then(|_| f.read_exact_at(buf, 0));
    // SAFETY: allocated above with this layout.
    unsafe { std::alloc::dealloc(p, layout) };
    io(r)
}

/// Tries each capability a database may need on a fresh mount under
/// `scratch` (removed after).
pub fn capabilities(scratch: &Path) -> Result<Vec<Capability>, String> {
    let m = Mounted::mount(
        &scratch.join("backing"),
        &scratch.join("data"),
        "doctor",
        0,
        None,
        Writes::Cached,
    )
    .map_err(|e| format!("cannot mount it: {e} (it needs root and /dev/fuse)"))?;
    let d = m.mountpoint().to_path_buf();
    let mut out: Vec<Capability> = vec![("O_DIRECT", direct(&d))];
    out.push((
        "O_DSYNC",
        io(OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .custom_flags(libc::O_DSYNC)
            .open(d.join("dsync"))
            .and_then(|mut f| f.write_all(b"x"))),
    ));
    std::fs::write(d.join("file"), b"x").map_err(|e| e.to_string())?;
    out.push((
        "hard links",
        io(std::fs::hard_link(d.join("file"), d.join("link"))),
    ));
    let fifo = std::ffi::CString::new(d.join("fifo").into_os_string().into_encoded_bytes())
        .expect("no NUL in a path soak made");
    // SAFETY: a valid C string.
    out.push(("FIFOs", os(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) })));
    out.push((
        "unix sockets",
        io(std::os::unix::net::UnixListener::bind(d.join("s.sock"))),
    ));
    let path = std::ffi::CString::new(d.join("file").into_os_string().into_encoded_bytes())
        .expect("no NUL in a path soak made");
    // SAFETY: valid C strings and a 1-byte value.
    out.push((
        "extended attributes",
        os(unsafe {
            libc::setxattr(
                path.as_ptr(),
                c"user.soak".as_ptr(),
                b"1".as_ptr().cast(),
                1,
                0,
            )
        }),
    ));
    let lock = File::create(d.join("LOCK")).map_err(|e| e.to_string())?;
    // SAFETY: a plain syscall on an open descriptor.
    out.push((
        "flock",
        os(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }),
    ));
    let mapped = OpenOptions::new()
        .read(true)
        .write(true)
        .open(d.join("file"))
        .map_err(|e| e.to_string())?;
    // SAFETY: a fresh shared mapping of one byte of an open file, written
    // within its length, synced and unmapped here.
    out.push(("shared mmap", unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            1,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            mapped.as_raw_fd(),
            0,
        );
        if p == libc::MAP_FAILED {
            Err(std::io::Error::last_os_error().to_string())
        } else {
            *p.cast::<u8>() = b'y';
            let r = os(libc::msync(p, 1, libc::MS_SYNC));
            libc::munmap(p, 1);
            r
        }
    }));
    out.push((
        "writeback cache",
        if m.stats().writeback_cache {
            Ok(())
        } else {
            Err("the kernel did not grant it: every write is a round trip to soak".into())
        },
    ));
    out.push(("O_TMPFILE", tmpfile(&d)));
    out.push(("reflinks", reflink(&d)));
    drop((lock, mapped));
    drop(m);
    Ok(out)
}

/// An unnamed file in `dir` (`open(O_TMPFILE)`), written to.
fn tmpfile(dir: &Path) -> Result<(), String> {
    io(OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_TMPFILE)
        .open(dir)
        .and_then(|mut f| f.write_all(b"x")))
}

/// A copy that shares the source's blocks (`ioctl(FICLONE)`, as `cp
/// --reflink` and some databases' checkpoints do).
fn reflink(dir: &Path) -> Result<(), String> {
    let src = File::open(dir.join("file")).map_err(|e| e.to_string())?;
    let dst = File::create(dir.join("clone")).map_err(|e| e.to_string())?;
    // FICLONE is _IOW(0x94, 9, int).
    const FICLONE: libc::c_ulong = 0x4004_9409;
    // SAFETY: a plain ioctl between two descriptors open here.
    os(unsafe { libc::ioctl(dst.as_raw_fd(), FICLONE, src.as_raw_fd()) })
}

/// The capabilities the filesystem gives no node on any host, and how a
/// node meets each (tried all the same, so that `soak doctor` shows it).
pub const BY_DESIGN: &[(&str, &str)] = &[
    (
        "O_TMPFILE",
        "open fails with EOPNOTSUPP; most programs then make a named file",
    ),
    (
        "reflinks",
        "FICLONE fails with EOPNOTSUPP; cp --reflink=auto copies instead",
    ),
];

/// Whether capability `c` is one the filesystem gives no node anywhere.
pub fn by_design(c: &str) -> bool {
    BY_DESIGN.iter().any(|(name, _)| *name == c)
}

/// What the filesystem gives no node, on any host, as the node meets it:
/// said when a cell mounts it, beside what `soak doctor` found.
pub fn not_given() -> String {
    BY_DESIGN
        .iter()
        .map(|(name, how)| format!("{name} ({how})"))
        .collect::<Vec<_>>()
        .join(" and ")
}
