//! A Pod's container as the kernel of the machine it runs on sees it,
//! whatever the kubelet's runtime (Docker's dockershim on 1.20, containerd
//! or CRI-O on a current release): its cgroup, found by the container's id
//! beneath the kubelet's `kubepods` cgroups; its first process, which soak
//! signals as `docker kill` and `crictl stop` do (the runtime's kill is a
//! signal to that process); and the cgroup freezer, which is what every
//! runtime's pause is. When soak does not run on the Pod's machine (or in
//! a cgroup namespace of its own) nothing is found, and the driver reads
//! the kubelet's stats instead.

use std::fs;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::driver::cgroup::procs_of;

/// The container's process and freezer on this machine.
#[derive(Debug)]
pub struct Local {
    pid: i32,
    /// The process itself, so that a signal never reaches another that
    /// reused its pid after it died.
    pidfd: OwnedFd,
    freezer: Freezer,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Freezer {
    /// cgroup v1: the container's folder in the `freezer` hierarchy.
    V1(PathBuf),
    /// cgroup v2: the container's cgroup (`cgroup.freeze`).
    V2(PathBuf),
}

/// The id in a container status's `runtime://ID` (`docker://`,
/// `containerd://`, `cri-o://`).
pub fn runtime_id(container: &str) -> Option<&str> {
    container
        .split_once("://")
        .map(|(_, id)| id)
        .filter(|id| id.len() >= 12 && id.bytes().all(|b| b.is_ascii_alphanumeric()))
}

impl Local {
    /// The container `container` (`runtime://ID`) on this machine, if its
    /// cgroup is here and its process runs.
    pub fn find(container: &str) -> Option<Local> {
        let id = runtime_id(container)?;
        let mounts = fs::read_to_string("/proc/self/mountinfo").ok()?;
        let (memory, freezer) = match v1_mount(&mounts, "memory") {
            Some(m) => {
                let dir = find_dir(&m, id)?;
                let rel = dir.strip_prefix(&m).ok()?.to_path_buf();
                let f = v1_mount(&mounts, "freezer")?.join(rel);
                (dir, Freezer::V1(f))
            }
            None => {
                let root = v2_mount(&mounts)?;
                let dir = find_dir(&root, id)?;
                (dir.clone(), Freezer::V2(dir))
            }
        };
        // The runtime makes the cgroup before it starts the process in it.
        let deadline = Instant::now() + Duration::from_secs(2);
        let pid = loop {
            if let Some(p) = first_process(&procs_of(&memory)) {
                break p;
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // SAFETY: pidfd_open returns a new descriptor that nothing else owns.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return None;
        }
        let pidfd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        Some(Local {
            pid,
            pidfd,
            freezer,
        })
    }

    /// The container's first process (its pid on this machine).
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Sends `sig` to the container's first process.
    pub fn signal(&self, sig: Signal) -> Result<(), String> {
        // SAFETY: a plain syscall on a descriptor this struct owns.
        let r = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.pidfd.as_raw_fd(),
                sig as i32,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        if r < 0 {
            return Err(format!(
                "signalling the Pod's process {}: {}",
                self.pid,
                std::io::Error::last_os_error()
            ));
        }
        Ok(())
    }

    /// Freezes (or thaws) every process of the container in its cgroup's
    /// freezer, and waits until the kernel says it is so.
    pub fn freeze(&self, frozen: bool) -> Result<(), String> {
        let (file, value, state, want) = match &self.freezer {
            Freezer::V1(p) => (
                p.join("freezer.state"),
                if frozen { "FROZEN" } else { "THAWED" },
                p.join("freezer.state"),
                if frozen { "FROZEN" } else { "THAWED" },
            ),
            Freezer::V2(p) => (
                p.join("cgroup.freeze"),
                if frozen { "1" } else { "0" },
                p.join("cgroup.events"),
                if frozen { "frozen 1" } else { "frozen 0" },
            ),
        };
        fs::write(&file, value)
            .map_err(|e| format!("writing {value} to {}: {e}", file.display()))?;
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let now = fs::read_to_string(&state).unwrap_or_default();
            if now.lines().any(|l| l.trim() == want) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{} still says {:?} 5 s after {value} was written",
                    state.display(),
                    now.trim()
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Where a cgroup v1 controller's hierarchy is mounted, from mountinfo.
fn v1_mount(mountinfo: &str, controller: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let mut r = right.split_whitespace();
        let (fstype, _source, opts) = (r.next()?, r.next()?, r.next().unwrap_or(""));
        if fstype != "cgroup" || !opts.split(',').any(|o| o == controller) {
            return None;
        }
        left.split_whitespace().nth(4).map(PathBuf::from)
    })
}

/// Where the cgroup v2 hierarchy is mounted (when no v1 memory is).
fn v2_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        if right.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        left.split_whitespace().nth(4).map(PathBuf::from)
    })
}

/// The container's cgroup folder beneath the kubelet's: `kubepods[.slice]`
/// / QoS class / Pod / container, named by its id alone (cgroupfs) or
/// `<runtime>-<id>.scope` (systemd).
fn find_dir(root: &Path, id: &str) -> Option<PathBuf> {
    let tops = fs::read_dir(root).ok()?;
    let mut stack: Vec<(PathBuf, usize)> = tops
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("kubepods"))
        .map(|e| (e.path(), 1))
        .collect();
    while let Some((dir, depth)) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let name = e.file_name();
            let name = name.to_string_lossy();
            if names(&name, id) {
                return Some(e.path());
            }
            if depth < 4 {
                stack.push((e.path(), depth + 1));
            }
        }
    }
    None
}

/// Whether a cgroup's folder name is the container `id`'s.
fn names(folder: &str, id: &str) -> bool {
    folder == id
        || folder
            .strip_suffix(".scope")
            .and_then(|s| s.rsplit_once('-'))
            .is_some_and(|(_, s)| s == id)
}

/// The process of `procs` whose parent is not among them: the container's
/// first (the lowest such pid, should there be several).
fn first_process(procs: &[i32]) -> Option<i32> {
    procs
        .iter()
        .copied()
        .filter(|p| crate::driver::process::parent_of(*p).is_some_and(|pp| !procs.contains(&pp)))
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_container_id_is_read_from_any_runtimes_status() {
        let id = "3f1c0a9b8e7d6c5b4a39281706f5e4d3c2b1a0998877665544332211aabbccdd";
        assert_eq!(runtime_id(&format!("docker://{id}")), Some(id));
        assert_eq!(runtime_id(&format!("containerd://{id}")), Some(id));
        assert_eq!(runtime_id(&format!("cri-o://{id}")), Some(id));
        assert_eq!(runtime_id(id), None);
        assert_eq!(runtime_id("containerd://../../etc"), None);
    }

    #[test]
    fn a_containers_cgroup_is_named_by_its_id_under_either_cgroup_driver() {
        let id = "3f1c0a9b8e7d";
        assert!(names(id, id));
        assert!(names(&format!("cri-containerd-{id}.scope"), id));
        assert!(names(&format!("docker-{id}.scope"), id));
        assert!(names(&format!("crio-{id}.scope"), id));
        assert!(!names("kubepods-burstable.slice", id));
        assert!(!names(&format!("{id}0"), id));
    }

    #[test]
    fn the_hierarchies_are_found_in_mountinfo() {
        let m = "\
35 25 0:30 / /sys/fs/cgroup/unified rw,nosuid shared:10 - cgroup2 cgroup2 rw
36 25 0:31 / /sys/fs/cgroup/memory rw,nosuid shared:11 - cgroup cgroup rw,memory
37 25 0:32 / /sys/fs/cgroup/freezer rw,nosuid shared:12 - cgroup cgroup rw,freezer
";
        assert_eq!(v1_mount(m, "memory"), Some("/sys/fs/cgroup/memory".into()));
        assert_eq!(
            v1_mount(m, "freezer"),
            Some("/sys/fs/cgroup/freezer".into())
        );
        assert_eq!(v1_mount(m, "pids"), None);
        assert_eq!(v2_mount(m), Some("/sys/fs/cgroup/unified".into()));
    }
}
