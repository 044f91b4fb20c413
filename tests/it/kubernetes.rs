//! Nodes as Pods on a real Kubernetes cluster (scripts/kube: Debian's
//! kubernetes 1.20.2, an API server, controller manager, scheduler and
//! kubelet on the Docker engine): kills through the kubelet's runtime,
//! the data kept on the claim and read back after each kill, OOM kills
//! from the Pod's status, and nothing left, not even by a killed soak.

use crate::common;

use std::process::Command;

use common::soak::*;
use common::{kube_cluster, kubectl};
use soak::model::{Cause, Verdict};

/// What of `run` is on the cluster: Pods, claims and volumes.
fn objects_of(run: &str) -> Vec<String> {
    kubectl(&[
        "get",
        "pods,pvc,pv",
        "-l",
        &format!("soak.run={run}"),
        "-o",
        "name",
    ])
    .lines()
    .map(str::to_string)
    .collect()
}

#[test]
fn the_smoke_suite_passes_with_its_node_as_a_pod_and_leaves_nothing() {
    let kubeconfig = kube_cluster();
    let run = soak_run(
        "suites/smoke-container.yaml",
        &["--duration-scale", "0.2", "--kubeconfig", &kubeconfig],
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let c = run.cell();
    assert_eq!(c.verdict, Verdict::Pass);
    assert!(c.integrity.verified > 1000, "{:?}", c.integrity);
    assert_eq!((c.integrity.lost, c.integrity.corrupted), (0, 0));
    // A SIGKILL through the kubelet's runtime, read back on the same claim
    // in a new Pod; then a graceful stop (the Pod deleted with its grace),
    // the node's own exit 0.
    let reasons: Vec<Cause> = c.restarts.iter().map(|r| r.reason).collect();
    assert_eq!(reasons, [Cause::Kill, Cause::Stop]);
    assert!(c.restarts[0].readback_s.is_some());
    assert!(
        run.stderr().contains("stopped exit code 0"),
        "{}",
        run.stderr()
    );
    // Memory from the Pod's process (the host's pid) and its cgroup.
    assert!(c.memory.peak_rss_bytes > 1 << 20, "{:?}", c.memory);
    // Its output, followed through the API.
    let log = run.file("node.log");
    assert_eq!(log.matches("soak-node ready").count(), 3, "{log}");
    let id = run_id(run.report_dir.as_ref().unwrap());
    assert!(objects_of(&id).is_empty(), "{:?}", objects_of(&id));
}

#[test]
fn a_pod_that_outgrows_its_limit_is_oom_killed_by_its_status() {
    let kubeconfig = kube_cluster();
    let run = soak_run(
        "tests/suites/oom-redis-container.yaml",
        &["--kubeconfig", &kubeconfig],
    );
    assert_eq!(run.code(), 1, "{}", run.stderr());
    let c = run.cell();
    assert!(c.memory.oom_kills >= 1, "{:?}", c.memory);
    assert!(
        c.restarts.iter().all(|r| r.reason == Cause::Oom),
        "{:?}",
        c.restarts
    );
}

/// soak SIGKILLed mid-run leaves its Pod, claim and volume; `soak cleanup
/// --kubeconfig` removes them, and only once the run is dead.
#[test]
fn soak_cleanup_removes_the_pods_claims_and_volumes_of_a_killed_soak() {
    let kubeconfig = kube_cluster();
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_soak"))
        .arg("run")
        .arg(suite("suites/smoke-container.yaml"))
        .arg("--out")
        .arg(dir.path())
        .args(["--kubeconfig", &kubeconfig])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let id = wait_until_ready(dir.path());
    let cleanup = || {
        Command::new(env!("CARGO_BIN_EXE_soak"))
            .args(["cleanup", "--kubeconfig", &kubeconfig])
            .output()
            .unwrap()
    };
    // Alive: cleanup leaves the run alone.
    assert!(cleanup().status.success());
    assert_eq!(objects_of(&id).len(), 3, "{:?}", objects_of(&id));
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(objects_of(&id).len(), 3, "nothing removed them yet");
    let out = cleanup();
    let text = String::from_utf8_lossy(&out.stdout);
    for what in ["pod", "persistentvolumeclaim", "persistentvolume"] {
        assert!(
            text.contains(&format!("removed {what} soak-{id}-0")),
            "{text}"
        );
    }
    assert!(objects_of(&id).is_empty(), "{text}");
}

#[test]
fn an_unreachable_cluster_is_an_environment_error_that_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("kubeconfig");
    std::fs::write(
        &config,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: gone\n  cluster: { server: \"https://127.0.0.1:1\" }\n\
         users:\n- name: u\n  user: { token: x }\ncontexts:\n- name: c\n  context: { cluster: gone, user: u }\ncurrent-context: c\n",
    )
    .unwrap();
    let run = soak_run(
        "suites/smoke-container.yaml",
        &["--kubeconfig", config.to_str().unwrap()],
    );
    assert_eq!(run.code(), 3, "{}", run.stderr());
    let err = run.stderr();
    assert!(
        err.contains("the Kubernetes API server https://127.0.0.1:1/ did not answer"),
        "{err}"
    );
}
