//! Nodes as Pods on a real Kubernetes cluster (scripts/kube: an API
//! server, controller manager, scheduler and kubelet of the current
//! release on containerd, or with SOAK_KUBE_VERSION=1.20.2 Debian's 1.20
//! on the Docker engine): kills of the Pod's process on this machine, the
//! data kept on the claim and read back after each kill, OOM kills from
//! the Pod's status, and nothing left, not even by a killed soak.

use crate::common;

use std::process::Command;

use common::soak::*;
use common::{kube_cluster, kubectl, KUBE_NET};
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
    let run = soak_run_in(
        &KUBE_NET,
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

/// The Pod on a network of its own, reached at its address through CNI's
/// bridge (`--pod-network pod-ip`, as soak inside the cluster reaches
/// it): the same suite, the same kills and read-backs, nothing lost. The
/// node listens on every address of its Pod (`--bind 0.0.0.0`), as a
/// service on a Pod network must: on 127.0.0.1 alone it is refused, and
/// soak says so.
#[test]
fn the_smoke_suite_passes_with_its_pod_reached_at_its_own_address() {
    let kubeconfig = kube_cluster();
    let dir = tempfile::tempdir().unwrap();
    let suite = variant(
        &dir,
        "suites/smoke-container.yaml",
        &[(
            "\"--port\", \"${PORT}\"",
            "\"--bind\", \"0.0.0.0\", \"--port\", \"${PORT}\"",
        )],
    );
    let run = soak_run_in(
        &KUBE_NET,
        &suite,
        &[
            "--duration-scale",
            "0.2",
            "--kubeconfig",
            &kubeconfig,
            "--pod-network",
            "pod-ip",
        ],
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let c = run.cell();
    assert!(c.integrity.verified > 1000, "{:?}", c.integrity);
    assert_eq!((c.integrity.lost, c.integrity.corrupted), (0, 0));
    let reasons: Vec<Cause> = c.restarts.iter().map(|r| r.reason).collect();
    assert_eq!(reasons, [Cause::Kill, Cause::Stop]);
    // Its process and cgroup are this machine's: read here.
    assert!(c.memory.peak_rss_bytes > 1 << 20, "{:?}", c.memory);
    let id = run_id(run.report_dir.as_ref().unwrap());
    assert!(objects_of(&id).is_empty(), "{:?}", objects_of(&id));
}

/// soak off the cluster's machines, as on a laptop or a CI runner: none
/// of the kubelet's cgroups in sight (soak runs in a mount namespace with
/// an empty /sys/fs/cgroup) and no Docker engine (DOCKER_HOST names
/// none), the node's ports forwarded through the API server and the
/// kubelet (`--pod-network port-forward`), its memory from the kubelet's
/// `/stats/summary`. A graceful stop and a start on the same claim, every
/// acknowledged write read back through the forward.
#[test]
fn a_pod_off_soaks_machine_is_reached_by_port_forward_and_measured_by_its_kubelet() {
    let kubeconfig = kube_cluster();
    let run = soak_run_with(
        &[
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            "mount -t tmpfs elsewhere /sys/fs/cgroup && exec \"$@\"",
            "sh",
        ],
        &[("DOCKER_HOST", "unix:///nonexistent/docker.sock".to_string())],
        "tests/suites/remote-pod.yaml",
        &["--kubeconfig", &kubeconfig, "--pod-network", "port-forward"],
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let c = run.cell();
    assert!(c.integrity.verified > 1000, "{:?}", c.integrity);
    assert_eq!((c.integrity.lost, c.integrity.corrupted), (0, 0));
    let load = c.load.as_ref().unwrap();
    assert!(load.sets + load.gets > 10_000, "{load:?}");
    // The kubelet's figures of the container, none of its processes'.
    assert!(c.memory.peak_cgroup_bytes > 1 << 20, "{:?}", c.memory);
    assert_eq!(c.memory.peak_rss_bytes, 0, "{:?}", c.memory);
    // Scraped through the forward too.
    assert!(
        c.memory.scrapes.as_ref().is_some_and(|s| s.ok > 0),
        "{:?}",
        c.memory.scrapes
    );
    let log = run.file("node.log");
    assert_eq!(log.matches("soak-node ready").count(), 2, "{log}");
    let id = run_id(run.report_dir.as_ref().unwrap());
    assert!(objects_of(&id).is_empty(), "{:?}", objects_of(&id));
}

#[test]
fn a_pod_that_outgrows_its_limit_is_oom_killed_by_its_status() {
    let kubeconfig = kube_cluster();
    let run = soak_run_in(
        &KUBE_NET,
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
    let mut child = Command::new(KUBE_NET[0])
        .args(&KUBE_NET[1..])
        .arg(env!("CARGO_BIN_EXE_soak"))
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

/// The upgrade as an image swap on the same claim: RocksDB 7.8's image
/// writes, soak-node's (11.8) reads every write back in a new Pod on the
/// same data, and the 7.8 image refuses what 11.8 wrote.
#[test]
fn an_image_swap_on_the_same_claim_is_verified_and_the_old_image_refuses_it() {
    let kubeconfig = kube_cluster();
    common::require_tool("redis-cli", "redis-tools");
    let run = soak_run_in(
        &KUBE_NET,
        "tests/suites/cross-version-container.yaml",
        &["--kubeconfig", &kubeconfig],
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let c = run.cell();
    let ups = &c.upgrades;
    assert_eq!(ups[0].to, "rocksdb-11.8");
    assert_eq!(ups[0].outcome, soak::model::SwapOutcome::Verified);
    let read = ups[0].integrity.unwrap();
    assert_eq!(read.lost, 0);
    assert!(read.verified >= 3000, "{read:?}");
    assert_eq!(ups[1].outcome, soak::model::SwapOutcome::Refused);
    // Read offline from the claim's folder at the end.
    let last = &c.offline[1].inspection;
    assert_eq!(last.integrity.unwrap().lost, 0);
}

/// An image the node cannot pull: the cell errors with the kubelet's own
/// words and the fix, and nothing is left.
#[test]
fn an_image_the_cluster_cannot_pull_is_an_error_in_the_kubelets_words() {
    let kubeconfig = kube_cluster();
    let dir = tempfile::tempdir().unwrap();
    let suite = variant(
        &dir,
        "suites/smoke-container.yaml",
        &[("image: soak-node:local", "image: soak-nosuch:local")],
    );
    let run = soak_run_in(&KUBE_NET, &suite, &["--kubeconfig", &kubeconfig]);
    assert_eq!(run.code(), 3, "{}", run.stderr());
    let err = run.stderr();
    assert!(
        err.contains("cannot start its container: ErrImagePull"),
        "{err}"
    );
    assert!(err.contains("containers/build"), "{err}");
    let id = run_id(run.report_dir.as_ref().unwrap());
    assert!(objects_of(&id).is_empty(), "{:?}", objects_of(&id));
}

/// A user the cluster's RBAC gives nothing: exit 3 before anything
/// starts, in the API server's words, with what to grant.
#[test]
fn a_namespace_soak_may_not_use_is_an_environment_error_with_the_fix() {
    let kubeconfig = kube_cluster();
    let pki = std::path::Path::new(&kubeconfig)
        .parent()
        .unwrap()
        .join("pki");
    let dir = tempfile::tempdir().unwrap();
    let (key, crt) = (dir.path().join("u.key"), dir.path().join("u.crt"));
    let csr = dir.path().join("u.csr");
    let openssl = |args: &[&std::ffi::OsStr]| {
        let st = Command::new("openssl").args(args).output().unwrap();
        assert!(
            st.status.success(),
            "{}",
            String::from_utf8_lossy(&st.stderr)
        );
    };
    openssl(&[
        "req".as_ref(),
        "-newkey".as_ref(),
        "rsa:2048".as_ref(),
        "-nodes".as_ref(),
        "-subj".as_ref(),
        "/CN=nobody".as_ref(),
        "-keyout".as_ref(),
        key.as_os_str(),
        "-out".as_ref(),
        csr.as_os_str(),
    ]);
    let ext = dir.path().join("u.ext");
    std::fs::write(&ext, "extendedKeyUsage=clientAuth\n").unwrap();
    openssl(&[
        "x509".as_ref(),
        "-req".as_ref(),
        "-in".as_ref(),
        csr.as_os_str(),
        "-CA".as_ref(),
        pki.join("ca.crt").as_os_str(),
        "-CAkey".as_ref(),
        pki.join("ca.key").as_os_str(),
        "-CAcreateserial".as_ref(),
        "-days".as_ref(),
        "1".as_ref(),
        "-extfile".as_ref(),
        ext.as_os_str(),
        "-out".as_ref(),
        crt.as_os_str(),
    ]);
    let admin = std::fs::read_to_string(&kubeconfig).unwrap();
    let config = dir.path().join("nobody.kubeconfig");
    std::fs::write(
        &config,
        admin
            .replace(
                &pki.join("admin.crt").display().to_string(),
                &crt.display().to_string(),
            )
            .replace(
                &pki.join("admin.key").display().to_string(),
                &key.display().to_string(),
            ),
    )
    .unwrap();
    let run = soak_run_in(
        &KUBE_NET,
        "suites/smoke-container.yaml",
        &[
            "--kubeconfig",
            config.to_str().unwrap(),
            "--namespace",
            "soak-forbidden",
        ],
    );
    assert_eq!(run.code(), 3, "{}", run.stderr());
    let err = run.stderr();
    assert!(
        err.contains("forbids listing Pods in namespace `soak-forbidden`")
            && err.contains("User \"nobody\" cannot list resource \"pods\"")
            && err.contains("grant soak a Role"),
        "{err}"
    );
}

/// A live limit cannot change a running Pod's: refused at the phase's
/// line before anything starts; the freezer's pause runs.
#[test]
fn a_live_limit_on_a_pod_is_refused_at_its_line_and_a_pause_runs() {
    let kubeconfig = kube_cluster();
    let run = soak_run_in(
        &KUBE_NET,
        "tests/suites/container-pause-limit.yaml",
        &["--kubeconfig", &kubeconfig],
    );
    assert_eq!(run.code(), 2, "{}", run.stderr());
    assert!(
        run.stderr()
            .contains("container-pause-limit.yaml:23:5: phases[3]: a live `limit` cannot change a running Pod's memory limit"),
        "{}",
        run.stderr()
    );
    let dir = tempfile::tempdir().unwrap();
    let suite = variant(
        &dir,
        "tests/suites/container-pause-limit.yaml",
        &[("  - limit: 192MiB\n", "")],
    );
    let run = soak_run_in(&KUBE_NET, &suite, &["--kubeconfig", &kubeconfig]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let c = run.cell();
    assert!(
        c.phases
            .iter()
            .any(|p| p.phase.starts_with("pause") && p.outcome.contains("resumed")),
        "{:?}",
        c.phases
    );
}

/// soak as a Job: the template, rendered for two shards of a two-cell
/// suite, passes the real kubectl's client-side dry run; both Jobs run the
/// image of soak itself (containers/soak) on the cluster, each its shard,
/// with its nodes' memory cgroups beneath the Job's Pod; their reports
/// merge into one with both cells.
#[test]
fn the_job_template_runs_two_shards_on_the_cluster_and_their_reports_merge() {
    kube_cluster();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let template =
        std::fs::read_to_string(root.join("templates/kubernetes/soak-shard-job.yaml")).unwrap();
    let reports = tempfile::tempdir().unwrap();
    let run = format!("t{}", std::process::id());
    let dir = tempfile::tempdir().unwrap();
    for shard in ["1", "2"] {
        let job = template
            .replace("${SHARD}", shard)
            .replace("${SHARDS}", "2")
            .replace("${SUITE}", "user-suites/sharded.yaml")
            .replace("${REPORTS}", reports.path().to_str().unwrap())
            .replace("${SUITES}", root.join("tests/suites").to_str().unwrap())
            .replace("${IMAGE}", "soak:local")
            .replace("${RUN}", &run);
        assert!(!job.contains("${"), "{job}");
        let file = dir.path().join(format!("job-{shard}.yaml"));
        std::fs::write(&file, job).unwrap();
        let file = file.to_str().unwrap();
        kubectl(&["apply", "--dry-run=client", "-f", file]);
        kubectl(&["apply", "-f", file]);
    }
    let label = format!("soak.job={run}");
    kubectl(&[
        "wait",
        "--for=condition=complete",
        "job",
        "-l",
        &label,
        "--timeout=180s",
    ]);
    kubectl(&["delete", "job", "-l", &label, "--cascade=true"]);
    let shards: Vec<std::path::PathBuf> = std::fs::read_dir(reports.path().join("sharded"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(shards.len(), 2, "{shards:?}");
    let merged = reports.path().join("merged");
    let out = Command::new(env!("CARGO_BIN_EXE_soak"))
        .args(["report", "merge"])
        .args(&shards)
        .arg("--out")
        .arg(&merged)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: soak::model::Summary =
        serde_json::from_str(&std::fs::read_to_string(merged.join("summary.json")).unwrap())
            .unwrap();
    let mut ids: Vec<&str> = summary.cells.iter().map(|c| c.id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["allocator=glibc", "allocator=jemalloc"]);
    assert_eq!(summary.verdict, Verdict::Pass);
    // Each node ran under its limit in a cgroup beneath the Job's Pod.
    for c in &summary.cells {
        let cg = c.cgroup.as_ref().unwrap();
        assert!(cg.path.contains("/kubepods/"), "{cg:?}");
    }
}
