//! Running `soak run` as a user does, and checking what it left.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use soak::model::{CellResult, Summary};

pub fn suite(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(name)
}

pub struct Run {
    pub id: String,
    pub out: Output,
    pub summary: Option<Summary>,
    pub report_dir: Option<PathBuf>,
    pub _dir: tempfile::TempDir,
}

impl Run {
    pub fn code(&self) -> i32 {
        self.out.status.code().unwrap_or(-1)
    }
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }
    /// The summary through soak's typed model: a renamed or retyped field
    /// fails to compile or to load.
    pub fn summary(&self) -> &Summary {
        self.summary
            .as_ref()
            .unwrap_or_else(|| panic!("no summary.json; stderr:\n{}", self.stderr()))
    }
    pub fn cell(&self) -> &CellResult {
        &self.summary().cells[0]
    }
    /// The first cell's check `name`.
    pub fn check(&self, name: &str) -> &soak::model::CheckResult {
        let checks = &self.cell().checks;
        checks
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no check {name}: {checks:?}"))
    }
    /// Checks the first cell's service `name` after a suite that killed the node
    /// once and the service once (a `service` phase): the node's only
    /// restart is its planned kill, and the service was killed once, never
    /// exited by itself, and was ready twice (with the cell, and after).
    pub fn service_killed_once_beside_a_kill(&self, name: &str) {
        let c = self.cell();
        let reasons: Vec<soak::model::Cause> = c.restarts.iter().map(|r| r.reason).collect();
        assert_eq!(reasons, [soak::model::Cause::Kill]);
        let s = &c.services[0];
        assert_eq!(
            (s.name.as_str(), s.kills, s.exited.as_deref()),
            (name, 1, None)
        );
        assert_eq!(s.ready_ms.len(), 2, "{s:?}");
    }
    /// A file of the first cell, by its name in `files` or its path
    /// relative to the cell's folder.
    pub fn file(&self, name: &str) -> String {
        let dir = self.report_dir.as_ref().expect("a report folder");
        let cell = self.cell().files["events.jsonl"].as_str();
        let cell_dir = dir.join(Path::new(cell).parent().unwrap());
        soak::gzcsv::read_to_string(&cell_dir.join(name))
            .unwrap_or_else(|e| panic!("{}: {e}", cell_dir.join(name).display()))
    }
}

/// A summary.json through soak's typed model.
pub fn load_summary(path: &Path) -> Summary {
    let text = std::fs::read_to_string(path).unwrap();
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} does not load as soak's model: {e}", path.display()))
}

/// A run id of the test's own, so that what a run left is found even when
/// it failed before it made its report folder.
pub fn test_run_id() -> String {
    format!("t{:x}", rand::random::<u32>())
}

pub fn soak_run(suite_file: &str, extra: &[&str]) -> Run {
    soak_run_in(&[], suite_file, extra)
}

/// `soak run` started by a wrapper command (`unshare ...`, which ends by
/// running its arguments).
#[allow(dead_code)]
pub fn soak_run_in(wrapper: &[&str], suite_file: &str, extra: &[&str]) -> Run {
    soak_run_with(wrapper, &[], suite_file, extra)
}

/// `soak run` with variables added to its environment (which its nodes
/// and adapters inherit).
#[allow(dead_code)]
pub fn soak_run_env(env: &[(&str, String)], suite_file: &str, extra: &[&str]) -> Run {
    soak_run_with(&[], env, suite_file, extra)
}

/// Both: a wrapper command and variables.
#[allow(dead_code)]
pub fn soak_run_with(
    wrapper: &[&str],
    env: &[(&str, String)],
    suite_file: &str,
    extra: &[&str],
) -> Run {
    let _beside = super::beside();
    let dir = tempfile::tempdir().unwrap();
    // Open to every user, as a reports folder is: a node that runs as
    // another user (PostgreSQL as `postgres`) must reach its data.
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let id = test_run_id();
    let mut cmd = match wrapper.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(env!("CARGO_BIN_EXE_soak"));
            c
        }
        None => Command::new(env!("CARGO_BIN_EXE_soak")),
    };
    let out = cmd
        .envs(env.iter().map(|(k, v)| (k, v)))
        .arg("run")
        .arg(suite(suite_file))
        .arg("--out")
        .arg(dir.path())
        .args(["--run-id", &id])
        .args(extra)
        .output()
        .unwrap();
    // reports/<suite>/<time>-<id>/summary.json
    let report_dir = walk(dir.path())
        .into_iter()
        .find(|p| p.ends_with("summary.json"))
        .map(|p| p.parent().unwrap().to_path_buf());
    let summary = report_dir
        .as_ref()
        .map(|d| load_summary(&d.join("summary.json")));
    let run = Run {
        id,
        out,
        summary,
        report_dir,
        _dir: dir,
    };
    assert_nothing_left(&run);
    run
}

/// `soak run SUITE --out OUT` in the background.
pub fn spawn_soak_run(
    suite_file: &str,
    out: &Path,
    stderr: std::process::Stdio,
) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_soak"))
        .arg("run")
        .arg(suite(suite_file))
        .arg("--out")
        .arg(out)
        .stderr(stderr)
        .spawn()
        .unwrap()
}

/// Waits until the run writing under `out` has its node ready; its run id.
#[allow(dead_code)]
pub fn wait_until_ready(out: &Path) -> String {
    let events = wait_for_file(out, "events.jsonl", |e| {
        std::fs::read_to_string(e)
            .unwrap()
            .contains("\"kind\":\"ready\"")
    });
    run_id(events.parent().unwrap().parent().unwrap().parent().unwrap())
}

/// The first file named `name` under `dir` that `ready` accepts, within
/// 120 s (a Pod's first start on a cluster beside thirty other tests took
/// more than 30).
pub fn wait_for_file(dir: &Path, name: &str, ready: impl Fn(&Path) -> bool) -> PathBuf {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        if let Some(f) = walk(dir)
            .into_iter()
            .find(|p| p.ends_with(name) && ready(p))
        {
            return f;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no {name} under {} within 120 s",
            dir.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

pub fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// The run id of a report folder (`<UTC time>-<id>`).
pub fn run_id(report_dir: &Path) -> String {
    let name = report_dir.file_name().unwrap().to_string_lossy();
    name.rsplit('-').next().unwrap().to_string()
}

/// The processes labelled with run `id` (`SOAK_RUN_ID`).
pub fn labelled(id: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
        .filter(|pid| soak::cleanup::run_label(*pid).as_deref() == Some(id))
        .collect()
}

/// Ctrl-C of a `soak run` in the background: it must stop with 130.
pub fn interrupt(mut child: std::process::Child, report_dir: &Path, dir: tempfile::TempDir) -> Run {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let summary = std::fs::read_to_string(report_dir.join("summary.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    Run {
        id: run_id(report_dir),
        out: Output {
            status,
            stdout: vec![],
            stderr: vec![],
        },
        summary,
        report_dir: Some(report_dir.to_path_buf()),
        _dir: dir,
    }
}

/// No process labelled with the run, no cgroup, fault filesystem,
/// container or network namespace of the run.
pub fn assert_nothing_left(run: &Run) {
    if let Some(dir) = &run.report_dir {
        assert_eq!(run_id(dir), run.id);
    }
    let id = run.id.clone();
    let procs = labelled(&id);
    assert!(procs.is_empty(), "processes of run {id} left: {procs:?}");
    if let Ok(h) = soak::driver::cgroup::detect() {
        let left: Vec<_> = std::fs::read_dir(&h.own)
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("soak-{id}"))
            })
            .map(|e| e.path())
            .collect();
        assert!(left.is_empty(), "cgroups of run {id} left: {left:?}");
    }
    let mounts: Vec<_> = soak::faults::disk::mounts()
        .into_iter()
        .filter(|(_, r)| *r == id)
        .collect();
    assert!(
        mounts.is_empty(),
        "fault filesystems of run {id} left: {mounts:?}"
    );
    let containers = containers_of(&id);
    assert!(
        containers.is_empty(),
        "containers of run {id} left: {containers:?}"
    );
    let namespaces: Vec<_> = soak::net::netns::leftovers()
        .into_iter()
        .filter(|(_, r)| *r == id)
        .collect();
    assert!(
        namespaces.is_empty(),
        "network namespaces of run {id} left: {namespaces:?}"
    );
}

/// The containers labelled with run `id`, as the docker CLI (a client soak
/// did not write) lists them; none where no engine answers. A kubelet's
/// containers (a Pod's labels are its sandbox's) are the cluster's to
/// collect once soak deleted the Pod: its Pods are checked in the cluster.
pub fn containers_of(id: &str) -> Vec<String> {
    let out = Command::new("docker")
        .args(["ps", "-a", "--filter", &format!("label=soak.run={id}")])
        .args(["--format", "{{.ID}} {{.Label \"io.kubernetes.pod.name\"}}"])
        .output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
                [id] => Some(id.to_string()),
                _ => None,
            })
            .collect(),
        _ => vec![],
    }
}

/// A suite of the repository with some of its text replaced (a smaller
/// data set for a shortened run, another version's flags), written
/// beside its schema-less copy in `dir`.
pub fn variant(dir: &tempfile::TempDir, suite: &str, edits: &[(&str, &str)]) -> String {
    let mut text = std::fs::read_to_string(self::suite(suite)).unwrap();
    for (from, to) in edits {
        assert!(text.contains(from), "{suite} has no {from:?}");
        text = text.replace(from, to);
    }
    let path = dir
        .path()
        .join(std::path::Path::new(suite).file_name().unwrap());
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}
