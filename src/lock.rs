//! A run's identity and its lock: the short id that names its folder and
//! its cgroups, and an exclusive `flock` held for the run's whole life,
//! which the kernel lets go of however soak dies. `soak cleanup` leaves
//! the things of a run whose lock is held (unless forced).

use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

use rand::Rng;

static RUN_ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The id of the run this process is running, once it has one.
pub fn current_run_id() -> Option<String> {
    RUN_ID.get().cloned()
}

/// This process's run id, made on first use.
pub fn run_id() -> String {
    RUN_ID.get_or_init(new_run_id).clone()
}

/// Names this process's run `id` (before anything used its id).
pub fn use_run_id(id: &str) {
    let _ = RUN_ID.set(id.to_string());
}

/// `--run-id`: letters and digits, 1 to 16 (it goes into cgroup names,
/// where `-` and `.` separate it from the rest).
pub fn parse_run_id(s: &str) -> Result<String, String> {
    if (1..=16).contains(&s.len()) && s.chars().all(|c| c.is_ascii_alphanumeric()) {
        Ok(s.to_string())
    } else {
        Err(format!("{s:?}: a run id is 1 to 16 letters and digits"))
    }
}

/// A short random id that names the run's folder and its cgroups.
pub fn new_run_id() -> String {
    format!("{:06x}", rand::rng().random::<u32>() & 0xFF_FFFF)
}

/// Where runs keep their locks: `/run/soak` where it can be made (root),
/// else `$XDG_RUNTIME_DIR/soak`, else `soak-<uid>` in the temp folder.
pub fn lock_dir() -> PathBuf {
    let candidates = [
        Some(PathBuf::from("/run/soak")),
        std::env::var_os("XDG_RUNTIME_DIR").map(|d| PathBuf::from(d).join("soak")),
        Some(std::env::temp_dir().join(format!("soak-{}", nix::unistd::geteuid()))),
    ];
    for dir in candidates.into_iter().flatten() {
        if std::fs::create_dir_all(&dir).is_ok() && crate::driver::writable(&dir) {
            return dir;
        }
    }
    std::env::temp_dir()
}

/// A live run's lock: an exclusive `flock` on `<lock dir>/<run>.lock`,
/// held until the process ends.
#[derive(Debug)]
pub struct RunLock {
    _file: std::fs::File,
    path: PathBuf,
}

impl Drop for RunLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn try_flock(f: &std::fs::File) -> bool {
    // SAFETY: flock(2) on a descriptor this function borrows.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// Takes the lock of run `run` for this process.
pub fn lock_run(run: &str) -> std::io::Result<RunLock> {
    use std::os::unix::fs::MetadataExt;
    let path = lock_dir().join(format!("{run}.lock"));
    loop {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)?;
        if !try_flock(&file) {
            return Err(std::io::Error::other(format!(
                "{} is held by another soak",
                path.display()
            )));
        }
        // A cleanup may have removed the file between its creation and the
        // lock (it took the lock of a run it thought dead): lock again.
        let (held, named) = (file.metadata()?, std::fs::metadata(&path));
        if named.is_ok_and(|n| n.ino() == held.ino() && n.dev() == held.dev()) {
            file.set_len(0)?;
            writeln!(file, "{}", std::process::id())?;
            return Ok(RunLock { _file: file, path });
        }
    }
}

/// Whether the soak of run `run` is alive (holds its lock).
pub fn is_alive(run: &str) -> bool {
    let path = lock_dir().join(format!("{run}.lock"));
    match std::fs::File::open(&path) {
        Ok(f) => !try_flock(&f),
        Err(_) => false,
    }
}
