//! Nodes as containers on a real Docker engine (Debian's docker.io), with
//! the images of `containers/`: every phase, check and report as for a
//! process, the engine's word on OOM kills, an allocator preloaded inside
//! the container, and nothing left behind, not even by a killed soak.

mod common;

use std::process::Command;

use common::require_docker_images;
use common::soak::*;
use soak::model::{Cause, Verdict};

#[test]
fn the_smoke_suite_passes_with_its_node_as_a_container() {
    require_docker_images();
    let run = soak_run("suites/smoke-container.yaml", &["--duration-scale", "0.2"]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let c = run.cell();
    assert_eq!(c.verdict, Verdict::Pass);
    assert!(c.integrity.verified > 1000, "{:?}", c.integrity);
    assert_eq!(c.integrity.lost, 0);
    // The kill went through the engine and was read back after the restart.
    let reasons: Vec<Cause> = c.restarts.iter().map(|r| r.reason).collect();
    assert_eq!(reasons, [Cause::Kill, Cause::Stop]);
    assert!(c.restarts[0].readback_s.is_some());
    // Memory from the container's processes (host pids, local engine) and
    // its cgroup, which the engine made; the limit is the engine's.
    let m = &c.memory;
    assert!(m.peak_rss_bytes > 1 << 20, "{m:?}");
    assert!(m.peak_cgroup_bytes > 1 << 20, "{m:?}");
    assert_eq!(m.limit_bytes, Some(256 << 20));
    assert!(m.scrapes.as_ref().is_some_and(|s| s.ok >= 1), "{m:?}");
    // The node's output, from the engine's log stream.
    let log = run.file("node.log");
    assert_eq!(log.matches("soak-node ready").count(), 3, "{log}");
}

#[test]
fn a_container_that_outgrows_its_limit_is_oom_killed_by_the_engines_word() {
    require_docker_images();
    let run = soak_run("tests/suites/oom-redis-container.yaml", &[]);
    assert_eq!(run.code(), 1, "{}", run.stderr());
    let c = run.cell();
    assert!(c.memory.oom_kills >= 1, "{:?}", c.memory);
    assert!(!c.restarts.is_empty());
    assert!(
        c.restarts.iter().all(|r| r.reason == Cause::Oom),
        "{:?}",
        c.restarts
    );
    let check = c.checks.iter().find(|k| k.name == "oom_kills").unwrap();
    assert_eq!(check.verdict, Verdict::Fail);
}

#[test]
fn an_allocator_is_preloaded_inside_the_container_and_proven_from_its_maps() {
    require_docker_images();
    let run = soak_run("tests/suites/container-jemalloc.yaml", &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let c = run.cell();
    let alloc = c.allocator.as_deref().unwrap();
    assert!(alloc.starts_with("jemalloc"), "{alloc}");
    let events = run.file("events.jsonl");
    assert!(events.contains("is loaded in pid"), "{events}");
    // And the node's own word, from inside the container.
    let metrics = run.file("metrics.csv");
    assert!(
        metrics.contains("allocator_info{allocator=\"jemalloc\""),
        "{}",
        &metrics[..metrics.len().min(2000)]
    );
    assert_eq!(c.integrity.lost, 0);
}

#[test]
fn an_image_the_engine_lacks_is_an_environment_error_that_names_it() {
    require_docker_images();
    let dir = tempfile::tempdir().unwrap();
    let suite = dir.path().join("missing.yaml");
    std::fs::write(
        &suite,
        "name: missing\nnode:\n  image: soak-no-such-image:1\n  ready: { tcp: \"127.0.0.1:${PORT}\" }\nphases:\n  - wait: 1s\n",
    )
    .unwrap();
    let run = soak_run(suite.to_str().unwrap(), &[]);
    assert_eq!(run.code(), 3, "{}", run.stderr());
    assert!(
        run.stderr()
            .contains("the image `soak-no-such-image:1` is not on the Docker engine"),
        "{}",
        run.stderr()
    );
}

#[test]
fn an_engine_that_does_not_answer_is_an_environment_error() {
    let run = soak_run(
        "suites/smoke-container.yaml",
        &["--docker-host", "tcp://127.0.0.1:1"],
    );
    assert_eq!(run.code(), 3, "{}", run.stderr());
    let err = run.stderr();
    assert!(
        err.contains("Docker engine tcp://127.0.0.1:1 not reachable") && err.contains("refused"),
        "{err}"
    );
}

/// soak SIGKILLed mid-run leaves its container running; `soak cleanup`
/// removes it (and only because its run is dead).
#[test]
fn soak_cleanup_removes_the_containers_of_a_killed_soak() {
    require_docker_images();
    let dir = tempfile::tempdir().unwrap();
    let mut child = spawn_soak_run(
        "suites/smoke-container.yaml",
        dir.path(),
        std::process::Stdio::null(),
    );
    let events = wait_for_file(dir.path(), "events.jsonl", |e| {
        std::fs::read_to_string(e)
            .unwrap()
            .contains("\"kind\":\"ready\"")
    });
    let report_dir = events.parent().unwrap().parent().unwrap().parent().unwrap();
    let id = run_id(report_dir);
    // Alive: cleanup leaves the run's container alone.
    let out = Command::new(env!("CARGO_BIN_EXE_soak"))
        .arg("cleanup")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(containers_of(&id).len(), 1, "the live run's container went");
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(containers_of(&id).len(), 1, "nothing removed it yet");
    let out = Command::new(env!("CARGO_BIN_EXE_soak"))
        .args(["cleanup", "--run", &id])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("removed container soak-"), "{text}");
    assert!(containers_of(&id).is_empty(), "{text}");
    let procs = labelled(&id);
    assert!(procs.is_empty(), "{procs:?}");
}

/// The Teku story as images: RocksDB 7.8's image writes, soak-node's
/// image (RocksDB 11.8) takes the same data over and reads every write
/// back, and 7.8 refuses what 11.8 wrote, in its own words.
#[test]
fn an_image_upgrade_on_the_same_data_is_verified_and_the_old_image_refuses_it() {
    require_docker_images();
    common::require_tool("redis-cli", "redis-tools");
    let run = soak_run("tests/suites/cross-version-container.yaml", &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let c = run.cell();
    let first = &c.offline[0].inspection;
    assert_eq!(first.rocksdb_version.as_deref(), Some("7.8.3"), "{first:?}");
    assert!(first.compression["Snappy"].files >= 1);
    let ups = &c.upgrades;
    assert_eq!(ups[0].to, "rocksdb-11.8");
    assert_eq!(ups[0].outcome, soak::model::SwapOutcome::Verified);
    let read = ups[0].integrity.unwrap();
    assert_eq!(read.lost, 0);
    assert!(read.verified >= 3000, "{read:?}");
    assert_eq!(ups[1].outcome, soak::model::SwapOutcome::Refused);
    let reason = ups[1].reason.as_deref().unwrap();
    assert!(reason.contains("unsupported format_version"), "{reason}");
    let last = &c.offline[1].inspection;
    assert!(!last.compression.contains_key("Snappy"), "{last:?}");
    assert_eq!(last.integrity.unwrap().lost, 0);
    assert_eq!(c.engine.as_ref().map(|e| e.local), Some(true));
}

/// Debian's redis-server in a container: fsynced AOF loses nothing after a
/// SIGKILL through the engine, snapshots only lose what came after them.
#[test]
fn redis_in_a_container_with_an_aof_loses_nothing_and_with_snapshots_loses_writes() {
    require_docker_images();
    let run = soak_run(
        "suites/redis-durability-container.yaml",
        &["--duration-scale", "0.4"],
    );
    assert_eq!(run.code(), 1, "{}", run.stderr());
    let cells = &run.summary().cells;
    let (aof, snap) = (&cells[0], &cells[1]);
    assert_eq!(aof.id, "durability=aof-always");
    assert_eq!(aof.verdict, Verdict::Pass, "{:?}", aof.integrity);
    assert_eq!(aof.integrity.lost, 0);
    assert!(aof.integrity.verified > 1000);
    assert_eq!(snap.verdict, Verdict::Fail);
    assert!(snap.integrity.lost > 1000, "{:?}", snap.integrity);
}

/// soak SIGKILLed while its node runs as a container: `soak cleanup`
/// removes the container, and `soak verify` makes one again from the
/// image on the cell's data and reads every saved write back.
#[test]
fn a_killed_container_run_is_verified_from_its_saved_ledger_in_a_new_container() {
    require_docker_images();
    let dir = tempfile::tempdir().unwrap();
    let mut child = spawn_soak_run(
        "suites/smoke-container.yaml",
        dir.path(),
        std::process::Stdio::null(),
    );
    // Two ledger saves with writes in them: the load is running.
    let ledger = wait_for_file(dir.path(), "ledger.bin", |_| true);
    let first = std::fs::metadata(&ledger).unwrap().modified().unwrap();
    wait_for_file(dir.path(), "ledger.bin", |p| {
        std::fs::metadata(p).unwrap().modified().unwrap() > first
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let cell = ledger.parent().unwrap().to_path_buf();
    let id = run_id(cell.parent().unwrap().parent().unwrap());
    let cleanup = Command::new(env!("CARGO_BIN_EXE_soak"))
        .args(["cleanup", "--run", &id])
        .output()
        .unwrap();
    assert!(cleanup.status.success());
    assert!(containers_of(&id).is_empty());
    let out = Command::new(env!("CARGO_BIN_EXE_soak"))
        .arg("verify")
        .arg(&cell)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("node started on its data"), "{stderr}");
    let v: soak::verify::saved::Reverified =
        serde_json::from_str(&std::fs::read_to_string(cell.join("verify.json")).unwrap()).unwrap();
    assert!(v.started_node);
    assert_eq!((v.integrity.lost, v.integrity.corrupted), (0, 0), "{v:?}");
    assert!(v.integrity.verified > 100, "{v:?}");
    // The verifying container went with soak verify.
    assert!(containers_of(&id).is_empty());
}
