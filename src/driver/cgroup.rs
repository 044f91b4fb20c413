//! Memory cgroups, v1 and v2, written directly through cgroupfs.
//!
//! Each node gets its own cgroup, made beneath the cgroup soak runs in (as
//! `/proc/self/cgroup` names it), named `soak-<run id>-<cell>` so that
//! `soak cleanup` can find what an interrupted run left. The layout differs
//! between the versions only in file names and formats, which
//! [`Version`] hides; tests point [`Cgroup::create_in`] at a directory tree
//! shaped like cgroupfs to check the v2 logic where the kernel offers v1.

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
    /// The cgroup soak itself runs in; node cgroups are made beneath it.
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
                    own: join(root, point, &path),
                });
            }
        }
    }
    if let Some((root, point)) = &v1 {
        let path = own_path(false).unwrap_or_else(|| "/".into());
        return Some(Hierarchy {
            version: Version::V1,
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

impl Cgroup {
    /// Makes `<own cgroup>/<name>` with the given limits.
    pub fn create(
        h: &Hierarchy,
        name: &str,
        memory: Option<u64>,
        swap: Option<u64>,
    ) -> Result<Cgroup, CgroupError> {
        if h.version == Version::V2 {
            enable_memory_controller(&h.own)?;
        }
        Cgroup::create_in(&h.own, h.version, name, memory, swap)
    }

    /// Makes `<parent>/<name>` in a tree of the given version.
    pub fn create_in(
        parent: &Path,
        version: Version,
        name: &str,
        memory: Option<u64>,
        swap: Option<u64>,
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
        if let Some(limit) = memory {
            cg.set_memory_limit(limit)?;
        }
        if let Some(swap) = swap {
            cg.set_swap_limit(swap, memory)?;
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
            Version::V2 => write(&self.path.join("memory.swap.max"), &swap.to_string()),
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
        fs::read_to_string(self.path.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    pub fn memory_limit(&self) -> Option<u64> {
        match self.version {
            Version::V1 => read_u64(&self.path.join("memory.limit_in_bytes")),
            Version::V2 => read_u64(&self.path.join("memory.max")),
        }
        .filter(|v| *v < (1 << 62))
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
            },
            Version::V2 => MemoryStat {
                usage: read_u64(&self.path.join("memory.current")).unwrap_or(0),
                anon: keyed(&stat, "anon").unwrap_or(0),
                file: keyed(&stat, "file").unwrap_or(0),
                kernel: keyed(&stat, "kernel").unwrap_or(0),
                shmem: keyed(&stat, "shmem").unwrap_or(0),
            },
        }
    }

    /// How many processes the kernel's OOM killer has killed in this cgroup.
    pub fn oom_kills(&self) -> u64 {
        let (file, key) = match self.version {
            Version::V1 => ("memory.oom_control", "oom_kill"),
            Version::V2 => ("memory.events", "oom_kill"),
        };
        let text = fs::read_to_string(self.path.join(file)).unwrap_or_default();
        keyed(&text, key).unwrap_or(0)
    }

    /// SIGKILLs every process in the cgroup until it is empty (5 s at most).
    pub fn kill_all(&self) {
        let kill = self.path.join("cgroup.kill");
        if self.version == Version::V2 && kill.exists() {
            let _ = fs::write(&kill, "1");
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let procs = self.procs();
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

    /// A handle for reading the same cgroup that never removes it, for
    /// samplers that run beside the owner.
    pub fn view(&self) -> Cgroup {
        Cgroup {
            path: self.path.clone(),
            version: self.version,
            removed: true,
        }
    }

    /// Kills what is left and removes the cgroup. Idempotent.
    pub fn remove(&mut self) -> io::Result<()> {
        if self.removed {
            return Ok(());
        }
        self.kill_all();
        remove_dir_retrying(&self.path)?;
        self.removed = true;
        Ok(())
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let _ = self.remove();
    }
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

/// On v2 a child gets the memory controller only if the parent lists it in
/// `cgroup.subtree_control`.
fn enable_memory_controller(parent: &Path) -> Result<(), CgroupError> {
    let control = parent.join("cgroup.subtree_control");
    let current = fs::read_to_string(&control).unwrap_or_default();
    if current.split_whitespace().any(|c| c == "memory") {
        return Ok(());
    }
    write(&control, "+memory")
}

/// Removes cgroups named `soak-<run>...` beneath `parent` (all soak
/// cgroups when `run` is `None`), killing their processes first. Returns
/// the paths removed.
pub fn cleanup_in(parent: &Path, version: Version, run: Option<&str>) -> Vec<PathBuf> {
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
        if wanted && e.path().is_dir() {
            let mut cg = Cgroup {
                path: e.path(),
                version,
                removed: false,
            };
            if cg.remove().is_ok() {
                removed.push(e.path());
            }
        }
    }
    removed
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
