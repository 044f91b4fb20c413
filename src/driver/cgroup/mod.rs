//! Memory cgroups, v1 and v2, written directly through cgroupfs.
//!
//! Each node gets its own cgroup, named `soak-<run id>-<cell>` so that
//! `soak cleanup` can find what an interrupted run left. Where those
//! cgroups may be made is [`place`]'s decision (on v2 it is not simply
//! beneath soak's own cgroup). The layout differs between the versions only
//! in file names and formats, which [`Version`] hides.

pub mod place;

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The prefix of every cgroup soak makes: the label `soak cleanup` looks for.
pub const PREFIX: &str = "soak-";

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Version {
    V1,
    V2,
}

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("no memory cgroup controller is mounted (looked for cgroup v2 with the memory controller, then v1 `memory`); the memory limit needs one")]
    NoController,
    #[error("cannot create the cgroup {path}: {source}. soak needs write access to the memory cgroup it runs in: run as root, or on cgroup v2 under a delegated scope: `systemd-run --user --scope -p Delegate=yes soak run ...`")]
    Create {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("limits.high needs cgroup v2 (`memory.high`); this host's memory controller is cgroup v1. Drop `high` or run where cgroup v2 has the memory controller")]
    HighNeedsV2,
    #[error("{0}")]
    NoAccess(#[from] place::NoAccess),
    #[error("cannot write {value:?} to {path}: {source}")]
    Write {
        path: PathBuf,
        value: String,
        #[source]
        source: io::Error,
    },
}

/// Where the memory controller is, for this process.
#[derive(Debug, Clone)]
pub struct Hierarchy {
    pub version: Version,
    /// Where the hierarchy is mounted: its root as this process sees it
    /// (inside a cgroup namespace, the namespace's root).
    pub mount: PathBuf,
    /// The cgroup soak itself runs in.
    pub own: PathBuf,
}

/// Reads `/proc/self/mountinfo` and `/proc/self/cgroup` to find the memory
/// controller: cgroup v2 if its root offers `memory`, else v1.
pub fn detect() -> Result<Hierarchy, CgroupError> {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let own = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    detect_from(&mountinfo, &own).ok_or(CgroupError::NoController)
}

/// The pure part of [`detect`], for tests.
pub fn detect_from(mountinfo: &str, proc_cgroup: &str) -> Option<Hierarchy> {
    let mut v1: Option<(String, String)> = None; // (mount root, mount point)
    let mut v2: Option<(String, String)> = None;
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let Some(dash) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        let (root, point) = (fields.get(3)?, fields.get(4)?);
        let fstype = fields.get(dash + 1)?;
        let opts = fields.get(dash + 3).copied().unwrap_or("");
        if *fstype == "cgroup2" {
            v2 = Some((root.to_string(), point.to_string()));
        } else if *fstype == "cgroup" && opts.split(',').any(|o| o == "memory") {
            v1 = Some((root.to_string(), point.to_string()));
        }
    }
    let own_path = |wanted_v2: bool| {
        proc_cgroup.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (id, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
            let hit = if wanted_v2 {
                id == "0" && ctrls.is_empty()
            } else {
                ctrls.split(',').any(|c| c == "memory")
            };
            hit.then(|| path.to_string())
        })
    };
    let join = |root: &str, point: &str, path: &str| {
        // Inside a cgroup namespace the mount root may be a prefix of the path.
        let rel = path
            .strip_prefix(root)
            .unwrap_or(path)
            .trim_start_matches('/');
        Path::new(point).join(rel)
    };
    if let Some((root, point)) = &v2 {
        let controllers =
            fs::read_to_string(Path::new(point).join("cgroup.controllers")).unwrap_or_default();
        if controllers.split_whitespace().any(|c| c == "memory") {
            if let Some(path) = own_path(true) {
                return Some(Hierarchy {
                    version: Version::V2,
                    mount: PathBuf::from(point),
                    own: join(root, point, &path),
                });
            }
        }
    }
    if let Some((root, point)) = &v1 {
        let path = own_path(false).unwrap_or_else(|| "/".into());
        return Some(Hierarchy {
            version: Version::V1,
            mount: PathBuf::from(point),
            own: join(root, point, &path),
        });
    }
    None
}

/// Memory figures of one cgroup at one moment, in bytes.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct MemoryStat {
    pub usage: u64,
    pub anon: u64,
    pub file: u64,
    pub kernel: u64,
    pub shmem: u64,
    /// Socket buffers (v2 only).
    pub sock: u64,
}

/// How often the cgroup hit its limits, from v2's `memory.events` (v1 has
/// only `memory.failcnt`, counted as `max`, and the OOM counter).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MemoryEvents {
    /// Times usage went over `memory.high` and was throttled and reclaimed.
    pub high: u64,
    /// Times usage was about to go over `memory.max`.
    pub max: u64,
    /// Times the cgroup's OOM killer was invoked.
    pub oom: u64,
    /// Processes it killed.
    pub oom_kill: u64,
}

/// Memory pressure (PSI) of the cgroup, v2's `memory.pressure`: the share
/// of the last 10 s in which some (or all) of its tasks stalled on memory,
/// in percent, and the total stall time in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Pressure {
    pub some_avg10: f64,
    pub full_avg10: f64,
    pub some_total_us: u64,
    pub full_total_us: u64,
}

impl Pressure {
    /// Parses `some avg10=0.00 avg60=0.00 avg300=0.00 total=0` lines.
    pub fn parse(text: &str) -> Option<Pressure> {
        let mut p = Pressure::default();
        let mut seen = false;
        for line in text.lines() {
            let mut fields = line.split_whitespace();
            let kind = fields.next()?;
            let mut avg10 = 0.0;
            let mut total = 0;
            for f in fields {
                match f.split_once('=') {
                    Some(("avg10", v)) => avg10 = v.parse().ok()?,
                    Some(("total", v)) => total = v.parse().ok()?,
                    _ => {}
                }
            }
            match kind {
                "some" => (p.some_avg10, p.some_total_us) = (avg10, total),
                "full" => (p.full_avg10, p.full_total_us) = (avg10, total),
                _ => continue,
            }
            seen = true;
        }
        seen.then_some(p)
    }
}

/// A cgroup made by soak, removed (after killing what is left in it) when
/// dropped or when [`Cgroup::remove`] is called, whichever comes first.
#[derive(Debug)]
pub struct Cgroup {
    pub path: PathBuf,
    pub version: Version,
    removed: bool,
}

fn write(path: &Path, value: &str) -> Result<(), CgroupError> {
    fs::write(path, value).map_err(|source| CgroupError::Write {
        path: path.to_path_buf(),
        value: value.to_string(),
        source,
    })
}

fn read_u64(path: &Path) -> Option<u64> {
    let s = fs::read_to_string(path).ok()?;
    let s = s.trim();
    if s == "max" {
        return Some(u64::MAX);
    }
    s.parse().ok()
}

/// A `key value` line of a cgroup file (`memory.stat`, `memory.events`, ...).
fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// The limits a node's cgroup is made with.
#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    /// The hard limit: `memory.max` (v1 `memory.limit_in_bytes`).
    pub memory: Option<u64>,
    /// The throttling limit, v2's `memory.high` (v1 has none).
    pub high: Option<u64>,
    /// Swap on top of `memory` (`0`: none).
    pub swap: Option<u64>,
}

impl Cgroup {
    /// Makes `<parent>/<name>` in a tree of the given version, with the
    /// given limits. The parent must already give its children the memory
    /// controller (see [`place`]).
    pub fn create_in(
        parent: &Path,
        version: Version,
        name: &str,
        limits: Limits,
    ) -> Result<Cgroup, CgroupError> {
        let path = parent.join(name);
        fs::create_dir(&path).map_err(|source| CgroupError::Create {
            path: path.clone(),
            source,
        })?;
        let cg = Cgroup {
            path,
            version,
            removed: false,
        };
        if let Some(limit) = limits.memory {
            cg.set_memory_limit(limit)?;
        }
        if let Some(high) = limits.high {
            cg.set_high(high)?;
        }
        if let Some(swap) = limits.swap {
            cg.set_swap_limit(swap, limits.memory)?;
        }
        Ok(cg)
    }

    pub fn set_memory_limit(&self, bytes: u64) -> Result<(), CgroupError> {
        match self.version {
            Version::V1 => {
                // memsw must stay >= the memory limit; raise it first if present.
                let memsw = self.path.join("memory.memsw.limit_in_bytes");
                if memsw.exists() && read_u64(&memsw).unwrap_or(u64::MAX) < bytes {
                    write(&memsw, &bytes.to_string())?;
                }
                write(&self.path.join("memory.limit_in_bytes"), &bytes.to_string())
            }
            Version::V2 => write(&self.path.join("memory.max"), &bytes.to_string()),
        }
    }

    /// v2's `memory.high`: above it the kernel throttles and reclaims
    /// instead of killing. v1 has no such limit.
    pub fn set_high(&self, bytes: u64) -> Result<(), CgroupError> {
        match self.version {
            Version::V1 => Err(CgroupError::HighNeedsV2),
            Version::V2 => write(&self.path.join("memory.high"), &bytes.to_string()),
        }
    }

    /// Swap on top of the memory limit (`0`: no swap).
    pub fn set_swap_limit(&self, swap: u64, memory: Option<u64>) -> Result<(), CgroupError> {
        match self.version {
            Version::V1 => {
                let memsw = self.path.join("memory.memsw.limit_in_bytes");
                if !memsw.exists() {
                    // Without swap accounting the kernel has no such knob; with
                    // no swap configured, the limit is already swap-free.
                    return Ok(());
                }
                let memory = memory.unwrap_or(u64::MAX / 2);
                write(&memsw, &(memory.saturating_add(swap)).to_string())
            }
            Version::V2 => {
                let file = self.path.join("memory.swap.max");
                // A kernel without swap accounting has no memory.swap.max:
                // there is then no swap to limit.
                if !file.exists() && swap == 0 {
                    return Ok(());
                }
                write(&file, &swap.to_string())
            }
        }
    }

    /// Opens `cgroup.procs` for a child to join the cgroup between fork and
    /// exec (by writing `0`, which means "the writing process").
    pub fn procs_fd(&self) -> io::Result<OwnedFd> {
        let f = fs::OpenOptions::new()
            .write(true)
            .open(self.path.join("cgroup.procs"))?;
        Ok(OwnedFd::from(f))
    }

    pub fn procs(&self) -> Vec<i32> {
        procs_of(&self.path)
    }

    pub fn memory_limit(&self) -> Option<u64> {
        match self.version {
            Version::V1 => read_u64(&self.path.join("memory.limit_in_bytes")),
            Version::V2 => read_u64(&self.path.join("memory.max")),
        }
        .filter(|v| *v < (1 << 62))
    }

    /// v2's `memory.high`, where set.
    pub fn high_limit(&self) -> Option<u64> {
        match self.version {
            Version::V1 => None,
            Version::V2 => read_u64(&self.path.join("memory.high")).filter(|v| *v < (1 << 62)),
        }
    }

    /// Usage and its parts, from `memory.usage_in_bytes`/`memory.current`
    /// and `memory.stat`.
    pub fn memory(&self) -> MemoryStat {
        let stat = fs::read_to_string(self.path.join("memory.stat")).unwrap_or_default();
        match self.version {
            Version::V1 => MemoryStat {
                usage: read_u64(&self.path.join("memory.usage_in_bytes")).unwrap_or(0),
                anon: keyed(&stat, "rss").unwrap_or(0),
                file: keyed(&stat, "cache").unwrap_or(0),
                kernel: read_u64(&self.path.join("memory.kmem.usage_in_bytes")).unwrap_or(0),
                shmem: keyed(&stat, "shmem").unwrap_or(0),
                sock: 0,
            },
            Version::V2 => MemoryStat {
                usage: read_u64(&self.path.join("memory.current")).unwrap_or(0),
                anon: keyed(&stat, "anon").unwrap_or(0),
                file: keyed(&stat, "file").unwrap_or(0),
                kernel: keyed(&stat, "kernel").unwrap_or(0),
                shmem: keyed(&stat, "shmem").unwrap_or(0),
                sock: keyed(&stat, "sock").unwrap_or(0),
            },
        }
    }

    /// The highest usage the kernel recorded: v2's `memory.peak` (Linux
    /// 5.19+), v1's `memory.max_usage_in_bytes`. Exact, where sampling can
    /// miss a short spike.
    pub fn peak(&self) -> Option<u64> {
        match self.version {
            Version::V1 => read_u64(&self.path.join("memory.max_usage_in_bytes")),
            Version::V2 => read_u64(&self.path.join("memory.peak")),
        }
    }

    pub fn events(&self) -> MemoryEvents {
        match self.version {
            Version::V1 => {
                let oom =
                    fs::read_to_string(self.path.join("memory.oom_control")).unwrap_or_default();
                MemoryEvents {
                    high: 0,
                    max: read_u64(&self.path.join("memory.failcnt")).unwrap_or(0),
                    oom: keyed(&oom, "oom_kill").unwrap_or(0),
                    oom_kill: keyed(&oom, "oom_kill").unwrap_or(0),
                }
            }
            Version::V2 => {
                let text = fs::read_to_string(self.path.join("memory.events")).unwrap_or_default();
                let get = |k| keyed(&text, k).unwrap_or(0);
                MemoryEvents {
                    high: get("high"),
                    max: get("max"),
                    oom: get("oom"),
                    oom_kill: get("oom_kill"),
                }
            }
        }
    }

    /// Memory pressure, where the kernel keeps it (v2 with PSI).
    pub fn pressure(&self) -> Option<Pressure> {
        match self.version {
            Version::V1 => None,
            Version::V2 => {
                Pressure::parse(&fs::read_to_string(self.path.join("memory.pressure")).ok()?)
            }
        }
    }

    /// How many processes the kernel's OOM killer has killed in this cgroup.
    pub fn oom_kills(&self) -> u64 {
        self.events().oom_kill
    }

    /// SIGKILLs every process in the cgroup until it is empty (5 s at most).
    pub fn kill_all(&self) {
        kill_all_in(&self.path, self.version);
    }

    /// The memory cgroup a process is in, to read and never remove: a
    /// container's, which its engine made (v1: the `memory` controller's
    /// hierarchy; v2: the unified one, when it has the memory controller).
    pub fn of_pid(pid: i32) -> Option<Cgroup> {
        let text = fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        let v1 = text.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            controllers
                .split(',')
                .any(|c| c == "memory")
                .then(|| PathBuf::from(format!("/sys/fs/cgroup/memory{path}")))
        });
        let found = match v1 {
            Some(p) => Some((p, Version::V1)),
            None => text
                .lines()
                .find_map(|l| l.strip_prefix("0::"))
                .map(|path| (PathBuf::from(format!("/sys/fs/cgroup{path}")), Version::V2)),
        };
        let (path, version) = found?;
        let probe = match version {
            Version::V1 => "memory.usage_in_bytes",
            Version::V2 => "memory.current",
        };
        path.join(probe).exists().then_some(Cgroup {
            path,
            version,
            removed: true,
        })
    }

    /// Follows the kernel's count of OOM kills in this cgroup until the
    /// cgroup goes away (v2: `memory.events`, whose changes the kernel
    /// announces to poll(2)). For a container, whose engine may miss an
    /// OOM kill on cgroup v2 (the kill and the exit race in the engine),
    /// and whose cgroup is gone soon after it ends. `None` on v1.
    pub fn watch_oom_kills(&self) -> Option<OomWatch> {
        if self.version != Version::V2 {
            return None;
        }
        let file = fs::File::open(self.path.join("memory.events")).ok()?;
        // The parent's counter is hierarchical (cgroup v2's default) and
        // outlives the container's cgroup: if the engine removes that one
        // before the watcher thread has read the kill (seen on a busy,
        // emulated machine), a rise in the parent's during the container's
        // life is the kill.
        let parent = self.path.parent().and_then(|p| {
            let f = fs::File::open(p.join("memory.events")).ok()?;
            let at_start = read_oom_kills(&f)?;
            Some((f, at_start))
        });
        let kills = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (done_tx, done) = tokio::sync::oneshot::channel();
        let (k, st) = (kills.clone(), stop.clone());
        std::thread::Builder::new()
            .name("soak-oom-watch".into())
            .spawn(move || {
                use std::sync::atomic::Ordering::Relaxed;
                while !st.load(Relaxed) {
                    // A removed cgroup's file no longer reads.
                    let Some(v) = read_oom_kills(&file) else {
                        break;
                    };
                    k.fetch_max(v, Relaxed);
                    let mut fds = [nix::poll::PollFd::new(
                        std::os::fd::AsFd::as_fd(&file),
                        nix::poll::PollFlags::POLLPRI,
                    )];
                    // Woken by a change or the cgroup's removal; the
                    // timeout only rechecks `stop`.
                    if nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(1000u16)).is_err() {
                        break;
                    }
                }
                let _ = done_tx.send(());
            })
            .ok()?;
        Some(OomWatch {
            kills,
            stop,
            done,
            parent,
        })
    }

    /// A handle for reading the same cgroup that never removes it, for
    /// samplers that run beside the owner.
    pub fn view(&self) -> Cgroup {
        Cgroup {
            path: self.path.clone(),
            version: self.version,
            removed: true,
        }
    }

    /// Kills what is left in it and beneath it, and removes it with every
    /// cgroup beneath it. Idempotent.
    pub fn remove(&mut self) -> io::Result<()> {
        if self.removed {
            return Ok(());
        }
        remove_tree(&self.path, self.version)?;
        self.removed = true;
        Ok(())
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let _ = self.remove();
    }
}

/// The kernel's OOM kills in a cgroup, followed as they happen
/// ([`Cgroup::watch_oom_kills`]).
pub struct OomWatch {
    kills: std::sync::Arc<std::sync::atomic::AtomicU64>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    done: tokio::sync::oneshot::Receiver<()>,
    /// The parent cgroup's `memory.events`, and its `oom_kill` at the start.
    parent: Option<(fs::File, u64)>,
}

impl OomWatch {
    /// The kills counted once the cgroup is gone (its processes ended and
    /// its owner removed it), or after `limit` if it stays.
    pub async fn final_count(mut self, limit: std::time::Duration) -> u64 {
        let _ = tokio::time::timeout(limit, &mut self.done).await;
        let own = self.kills.load(std::sync::atomic::Ordering::Relaxed);
        if own > 0 {
            return own;
        }
        self.parent
            .as_ref()
            .and_then(|(f, at_start)| Some(read_oom_kills(f)?.saturating_sub(*at_start)))
            .unwrap_or(0)
    }
}

impl Drop for OomWatch {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// `oom_kill` of an open `memory.events`, read afresh.
fn read_oom_kills(f: &fs::File) -> Option<u64> {
    use std::os::unix::fs::FileExt;
    let mut buf = [0u8; 1024];
    let n = f.read_at(&mut buf, 0).ok()?;
    keyed(&String::from_utf8_lossy(&buf[..n]), "oom_kill")
}

/// The processes listed in a cgroup's `cgroup.procs`.
pub fn procs_of(path: &Path) -> Vec<i32> {
    fs::read_to_string(path.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// SIGKILLs every process in a cgroup until it is empty (5 s at most);
/// on v2 through `cgroup.kill`, which also takes the cgroups beneath it.
fn kill_all_in(path: &Path, version: Version) {
    let kill = path.join("cgroup.kill");
    if version == Version::V2 && kill.exists() {
        let _ = fs::write(&kill, "1");
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let procs = procs_of(path);
        if procs.is_empty() || Instant::now() > deadline {
            return;
        }
        let mut alive = false;
        for pid in procs {
            let r = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
            alive |= r != Err(nix::errno::Errno::ESRCH);
        }
        if !alive {
            // Still listed but gone: the kernel is letting go of them.
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Kills the processes of a cgroup and of every cgroup beneath it, and
/// removes them, deepest first.
fn remove_tree(path: &Path, version: Version) -> io::Result<()> {
    kill_all_in(path, version);
    if let Ok(entries) = fs::read_dir(path) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&e.path(), version)?;
            }
        }
    }
    remove_dir_retrying(path)
}

/// rmdir fails with EBUSY until the kernel has let go of the dead tasks.
fn remove_dir_retrying(path: &Path) -> io::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match fs::remove_dir(path) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Whether `controller` is listed in a `cgroup.controllers` or
/// `cgroup.subtree_control` file.
pub fn lists(file: &Path, controller: &str) -> bool {
    fs::read_to_string(file)
        .unwrap_or_default()
        .split_whitespace()
        .any(|c| c == controller)
}

/// The run id in a name soak gave (`soak-<run>`, `soak-<run>-0`,
/// `soak-<run>.scope`, `soak-<run>-supervisor`).
pub fn run_of(name: &str) -> Option<&str> {
    let rest = name.strip_prefix(PREFIX)?;
    let end = rest.find(['-', '.']).unwrap_or(rest.len());
    (end > 0).then(|| &rest[..end])
}

/// Removes cgroups named `soak-<run>...` beneath `parent` (all soak
/// cgroups when `run` is `None`), killing their processes first. Returns
/// the paths removed. A soak's own leaf (`...-supervisor`) holds soak
/// itself while its run lives: it is never killed, only removed once empty.
/// Cgroups of runs `alive` says are alive are left alone.
pub fn cleanup_in(
    parent: &Path,
    version: Version,
    run: Option<&str>,
    alive: &dyn Fn(&str) -> bool,
) -> Vec<PathBuf> {
    let mut removed = vec![];
    let Ok(entries) = fs::read_dir(parent) else {
        return removed;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let wanted = match run {
            Some(id) => name.starts_with(&format!("{PREFIX}{id}")),
            None => name.starts_with(PREFIX),
        };
        if !wanted || !e.path().is_dir() {
            continue;
        }
        if run_of(&name).is_some_and(alive) {
            continue;
        }
        if name.ends_with(place::SUPERVISOR_SUFFIX) {
            if procs_of(&e.path()).is_empty() && fs::remove_dir(e.path()).is_ok() {
                removed.push(e.path());
            }
            continue;
        }
        if remove_tree(&e.path(), version).is_ok() {
            removed.push(e.path());
        }
    }
    if !removed.is_empty() {
        release_claimed(parent);
    }
    removed
}

/// A container's cgroup a killed soak claimed (`--claim-cgroup`) keeps the
/// memory controller handed down, and while it does, `docker exec` cannot
/// put a process in it (cgroup v2's no-internal-process rule): with only
/// the claimed leaf left beneath it, memory is taken off again. Anything
/// else beneath it (a docker-in-docker engine's cgroups) leaves it on.
fn release_claimed(parent: &Path) {
    let children: Vec<String> = fs::read_dir(parent)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let control = parent.join("cgroup.subtree_control");
    if children == [place::CLAIMED_LEAF] && lists(&control, "memory") {
        let _ = write(&control, "-memory");
    }
}

/// The raw fd number, for a `pre_exec` closure.
pub fn raw(fd: &OwnedFd) -> i32 {
    fd.as_raw_fd()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

    #[test]
    fn finds_v1_memory_beneath_own_cgroup() {
        let h = detect_from(MOUNTINFO, "4:memory:/ci/job1\n0::/\n").unwrap();
        assert_eq!(h.version, Version::V1);
        assert_eq!(h.own, PathBuf::from("/sys/fs/cgroup/memory/ci/job1"));
    }

    #[test]
    fn pressure_lines_parse() {
        let p = Pressure::parse(
            "some avg10=1.50 avg60=0.20 avg300=0.00 total=123456\nfull avg10=0.75 avg60=0.10 avg300=0.00 total=6543\n",
        )
        .unwrap();
        assert_eq!(p.some_avg10, 1.5);
        assert_eq!(p.full_avg10, 0.75);
        assert_eq!((p.some_total_us, p.full_total_us), (123456, 6543));
        assert_eq!(Pressure::parse(""), None);
    }

    #[test]
    fn keyed_lines() {
        assert_eq!(
            keyed("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", "oom_kill"),
            Some(3)
        );
        assert_eq!(
            keyed("low 0\nhigh 0\nmax 2\noom 1\noom_kill 1\n", "oom_kill"),
            Some(1)
        );
    }
}
