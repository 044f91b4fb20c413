//! `soak cleanup`: removes what an interrupted run left behind, found by
//! soak's own labels only: cgroups named `soak-<run id>-<cell>` and
//! processes whose environment holds `SOAK_RUN_ID`.

use std::path::{Path, PathBuf};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::driver::cgroup::{self, Version};

/// What was removed.
#[derive(Debug, Default)]
pub struct Cleaned {
    pub processes: Vec<(i32, String)>,
    pub cgroups: Vec<PathBuf>,
}

/// The run id a process was labelled with, from `/proc/PID/environ`.
pub fn run_label(pid: i32) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|b| *b == 0).find_map(|kv| {
        let kv = std::str::from_utf8(kv).ok()?;
        kv.strip_prefix("SOAK_RUN_ID=").map(str::to_string)
    })
}

/// Kills processes labelled with `run` (any run when `None`).
pub fn kill_labelled(run: Option<&str>) -> Vec<(i32, String)> {
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
        if run.is_none_or(|r| r == label) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            killed.push((pid, label));
        }
    }
    killed
}

fn walk(dir: &Path, depth: usize, version: Version, run: Option<&str>, out: &mut Vec<PathBuf>) {
    if depth == 0 {
        return;
    }
    out.extend(cgroup::cleanup_in(dir, version, run));
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let is_soak = e.file_name().to_string_lossy().starts_with(cgroup::PREFIX);
        if p.is_dir() && !is_soak {
            walk(&p, depth - 1, version, run, out);
        }
    }
}

/// Removes soak's processes and cgroups (of one run, or of every run).
pub fn cleanup(run: Option<&str>) -> Cleaned {
    let processes = kill_labelled(run);
    let mut cgroups = vec![];
    if let Ok(h) = cgroup::detect() {
        // From the hierarchy's root (as this process sees it): the run may
        // have been made from another cgroup than the one this command runs
        // in, and on v2 its cgroups may sit beneath an ancestor of it.
        walk(&h.mount, 8, h.version, run, &mut cgroups);
    }
    Cleaned { processes, cgroups }
}
