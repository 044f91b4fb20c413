//! `soak cleanup`: removes what an interrupted run left behind, found by
//! soak's own labels only: cgroups named `soak-<run id>-<cell>`, processes
//! whose environment holds `SOAK_RUN_ID`, fault filesystems mounted
//! from `soakfs-<run id>`, and a cluster's network namespaces named
//! `soak-<run id>-...` (their devices and firewall rules go with them).
//!
//! On a shared host (a CI machine running two jobs) another shell's run
//! may be alive: each run holds a lock for its whole life
//! ([`RunLock`]), which the kernel lets go of however soak dies, and
//! cleanup leaves the labels of a run whose lock is held alone (unless
//! forced).

use std::path::{Path, PathBuf};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::driver::cgroup::{self, Version};
use crate::lock::{is_alive, lock_dir};

/// What was removed.
#[derive(Debug, Default)]
pub struct Cleaned {
    pub processes: Vec<(i32, String)>,
    pub cgroups: Vec<PathBuf>,
    /// Fault filesystems unmounted: (mountpoint, run).
    pub mounts: Vec<(PathBuf, String)>,
    /// Containers removed: (name, run).
    pub containers: Vec<(String, String)>,
    /// Network namespaces removed: (name, run).
    pub namespaces: Vec<(String, String)>,
    /// Why containers were not looked for (no engine answered).
    pub containers_unchecked: Option<String>,
}

/// The run id a process was labelled with, from `/proc/PID/environ`.
pub fn run_label(pid: i32) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|b| *b == 0).find_map(|kv| {
        let kv = std::str::from_utf8(kv).ok()?;
        kv.strip_prefix("SOAK_RUN_ID=").map(str::to_string)
    })
}

/// Kills processes labelled with `run` (any run when `None`), but those of
/// runs `alive` says are alive.
pub fn kill_labelled(run: Option<&str>, alive: &dyn Fn(&str) -> bool) -> Vec<(i32, String)> {
    let me = std::process::id() as i32;
    let mut killed = vec![];
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return killed;
    };
    for e in dir.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Some(label) = run_label(pid) else {
            continue;
        };
        if run.is_none_or(|r| r == label) && !alive(&label) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            killed.push((pid, label));
        }
    }
    killed
}

fn walk(
    dir: &Path,
    depth: usize,
    version: Version,
    run: Option<&str>,
    alive: &dyn Fn(&str) -> bool,
    out: &mut Vec<PathBuf>,
) {
    if depth == 0 {
        return;
    }
    out.extend(cgroup::cleanup_in(dir, version, run, alive));
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let is_soak = e.file_name().to_string_lossy().starts_with(cgroup::PREFIX);
        if p.is_dir() && !is_soak {
            walk(&p, depth - 1, version, run, alive, out);
        }
    }
}

/// Removes soak's processes, cgroups and containers (on `docker_host`, else
/// `DOCKER_HOST`, else the local engine) of one run or of every run,
/// leaving alone those of runs whose soak is alive unless `force`.
pub fn cleanup(run: Option<&str>, force: bool, docker_host: Option<&str>) -> Cleaned {
    let alive = |r: &str| !force && is_alive(r);
    let processes = kill_labelled(run, &alive);
    // After the processes: a node must not write into the folder beneath.
    let mounts = crate::faults::disk::mounts()
        .into_iter()
        .filter(|(_, r)| run.is_none_or(|x| x == r) && !alive(r))
        .filter(|(p, _)| crate::faults::disk::unmount(p))
        .inspect(|(p, _)| crate::faults::disk::restore(p))
        .collect();
    // After the processes: a member's namespace goes when nothing is in it.
    let namespaces = crate::net::netns::leftovers()
        .into_iter()
        .filter(|(_, r)| run.is_none_or(|x| x == r) && !alive(r))
        .filter(|(n, _)| crate::net::netns::remove(n))
        .collect();
    let mut cgroups = vec![];
    if let Ok(h) = cgroup::detect() {
        // From the hierarchy's root (as this process sees it): the run may
        // have been made from another cgroup than the one this command runs
        // in, and on v2 its cgroups may sit beneath an ancestor of it.
        walk(&h.mount, 8, h.version, run, &alive, &mut cgroups);
    }
    // The locks of runs that died without removing theirs.
    if let Ok(entries) = std::fs::read_dir(lock_dir()) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(id) = name.strip_suffix(".lock") {
                if run.is_none_or(|r| r == id) && !is_alive(id) {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
    }
    let (containers, containers_unchecked) = match containers(run, &alive, docker_host) {
        Ok(c) => (c, None),
        Err(e) => (vec![], Some(e)),
    };
    Cleaned {
        processes,
        cgroups,
        mounts,
        namespaces,
        containers,
        containers_unchecked,
    }
}

/// Removes the containers of soak's runs on the engine that this machine's
/// soak made and whose run is not alive: a shared engine's containers of
/// other machines' runs are theirs. On a thread of its own, with a runtime
/// of its own, so that a run's second Ctrl-C (inside the run's runtime)
/// can call it too.
fn containers(
    run: Option<&str>,
    alive: &(dyn Fn(&str) -> bool + Sync),
    docker_host: Option<&str>,
) -> Result<Vec<(String, String)>, String> {
    std::thread::scope(|s| {
        s.spawn(|| containers_now(run, alive, docker_host))
            .join()
            .unwrap_or_else(|_| Err("the container cleanup panicked".to_string()))
    })
}

fn containers_now(
    run: Option<&str>,
    alive: &(dyn Fn(&str) -> bool + Sync),
    docker_host: Option<&str>,
) -> Result<Vec<(String, String)>, String> {
    use crate::driver::docker::{container, engine};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let e = engine::connect(docker_host)
            .await
            .map_err(|e| e.to_string())?;
        let here = container::machine();
        let mut out = vec![];
        // Every one is tried; the first failure is reported after.
        let mut failed = None;
        for c in container::labelled(&e.docker).await? {
            if run.is_none_or(|r| r == c.run) && c.machine == here && !alive(&c.run) {
                match container::remove(&e.docker, &c.id).await {
                    Ok(()) => out.push((c.name, c.run)),
                    Err(e) => {
                        failed.get_or_insert(format!("{}: {e}", c.name));
                    }
                }
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(out),
        }
    })
}

/// The Pods, claims and volumes of dead runs on the cluster `kube`
/// names, made from this machine (a run elsewhere may be alive: its lock
/// is not here), as (what, run); an error when the cluster cannot be
/// asked.
pub fn kubernetes(
    run: Option<&str>,
    force: bool,
    kube: &crate::driver::kubernetes::KubePlan,
) -> Result<Vec<(String, String)>, String> {
    use crate::driver::kubernetes as k;
    let alive = |r: &str| !force && is_alive(r);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    std::thread::scope(|s| {
        s.spawn(|| {
            rt.block_on(async {
                let client = k::connect(kube).await?;
                let here = crate::driver::docker::container::machine();
                let mut out = vec![];
                let mut failed = None;
                // Pods first: a claim in use is not deleted until they go.
                for o in k::labelled(&client, &kube.namespace).await? {
                    if run.is_none_or(|r| r == o.run)
                        && (o.machine == k::label_value(&here) || force)
                        && !alive(&o.run)
                    {
                        match k::remove(&client, &kube.namespace, &o).await {
                            Ok(()) => out.push((format!("{} {}", o.kind, o.name), o.run)),
                            Err(e) => {
                                failed.get_or_insert(format!("{} {}: {e}", o.kind, o.name));
                            }
                        }
                    }
                }
                match failed {
                    Some(e) => Err(e),
                    None => Ok(out),
                }
            })
        })
        .join()
        .unwrap_or_else(|_| Err("the Kubernetes cleanup panicked".to_string()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::cgroup::run_of;
    use crate::lock::lock_run;

    #[test]
    fn run_ids_are_read_from_every_name_soak_gives() {
        assert_eq!(run_of("soak-abc123-0"), Some("abc123"));
        assert_eq!(run_of("soak-abc123"), Some("abc123"));
        assert_eq!(run_of("soak-abc123.scope"), Some("abc123"));
        assert_eq!(run_of("soak-abc123-supervisor"), Some("abc123"));
        assert_eq!(run_of("soak-"), None);
        assert_eq!(run_of("system.slice"), None);
    }

    #[test]
    fn a_run_is_alive_while_its_lock_is_held() {
        let run = format!("unit{}", std::process::id());
        assert!(!is_alive(&run));
        let lock = lock_run(&run).unwrap();
        assert!(is_alive(&run));
        // A second soak cannot take the same run.
        assert!(lock_run(&run).is_err());
        drop(lock);
        assert!(!is_alive(&run));
    }

    #[test]
    fn cleanup_removes_the_lock_a_dead_run_left_and_keeps_a_live_one() {
        let dead = format!("dead{}", std::process::id());
        let live = format!("live{}", std::process::id());
        let stale = lock_dir().join(format!("{dead}.lock"));
        std::fs::write(&stale, "1\n").unwrap();
        let lock = lock_run(&live).unwrap();
        cleanup(Some(&dead), false, None);
        cleanup(Some(&live), false, None);
        assert!(!stale.exists());
        assert!(is_alive(&live));
        drop(lock);
    }
}
