//! Nodes that do not speak RESP, judged through the protocols soak speaks
//! (HTTP key-value, PostgreSQL, client adapters): real etcd, PostgreSQL and
//! s3rver, and nodes and adapters of the tests' own that lose writes, lie
//! about failures, or do not speak the adapter protocol.

use crate::common;

use common::require_tool;
use common::soak::{soak_run, soak_run_env, Run};
use soak::model::{Cause, Verdict};

fn check<'a>(run: &'a Run, cell: usize, name: &str) -> &'a soak::model::CheckResult {
    let c = &run.summary().cells[cell];
    c.checks
        .iter()
        .find(|k| k.name == name)
        .unwrap_or_else(|| panic!("no {name} check in {:?}", c.checks))
}

#[test]
fn an_http_node_that_keeps_writes_in_memory_is_caught_at_every_kill() {
    let run = soak_run("tests/suites/http-lossy.yaml", &[]);
    assert_eq!(run.code(), 1, "{}", run.stderr());
    let c = run.cell();
    assert_eq!(c.restarts.len(), 2);
    for r in &c.restarts {
        assert_eq!(r.reason, Cause::Kill);
        assert!(r.lost > 0, "restart at {:.1} s blamed for nothing", r.at_s);
        assert_eq!(
            r.oracle.as_deref().map(|o| o.contains("read-back")),
            Some(true)
        );
    }
    assert_eq!(c.integrity.corrupted, 0);
    assert!(c.load.as_ref().unwrap().sets > 100);
}

#[test]
fn a_node_that_fails_writes_it_made_shows_aborted_reads_and_an_honest_one_does_not() {
    let run = soak_run("tests/suites/http-durable.yaml", &[]);
    assert_eq!(run.code(), 1, "{}", run.stderr());
    let cells = &run.summary().cells;
    let (honest, liar) = (&cells[0], &cells[1]);
    assert_eq!(honest.id, "lie=0");
    assert_eq!(honest.verdict, Verdict::Pass);
    assert_eq!(honest.integrity.aborted, 0);
    assert_eq!(honest.load.as_ref().unwrap().not_done, 0);
    // Every 7th write answered 409 after it was applied: not done, and
    // read back all the same.
    assert!(liar.load.as_ref().unwrap().not_done > 10, "{:?}", liar.load);
    assert!(liar.integrity.aborted > 0, "{:?}", liar.integrity);
    assert_eq!(liar.integrity.lost, 0, "{:?}", liar.integrity);
    let aborted = check(&run, 1, "aborted_reads");
    assert_eq!(aborted.verdict, Verdict::Fail);
    // Judged with lost_writes' limit, as the suite sets no other.
    assert_eq!(aborted.limit, serde_json::json!(0));
}

#[test]
fn etcd_through_its_json_gateway_loses_nothing_to_kills_and_power_cuts() {
    require_tool("etcd", "etcd-server");
    let run = soak_run(
        "suites/etcd.yaml",
        &["--only", "fsync=default", "--duration-scale", "0.1"],
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let c = run.cell();
    let kills = c
        .restarts
        .iter()
        .filter(|r| r.reason == Cause::Kill)
        .count();
    let cuts = c
        .restarts
        .iter()
        .filter(|r| r.reason == Cause::PowerCut)
        .count();
    assert_eq!((kills, cuts), (20, 5));
    assert!(c.restarts.iter().all(|r| r.readback_s.is_some()));
    assert_eq!(c.integrity.harmed(), 0, "{:?}", c.integrity);
    // Read back after every restart, and more keys than one round writes.
    assert!(c.integrity.verified > 1000, "{:?}", c.integrity);
}

#[test]
fn etcd_without_fsync_does_not_start_again_after_a_power_cut_and_says_so() {
    require_tool("etcd", "etcd-server");
    let run = soak_run("tests/suites/etcd-unsafe.yaml", &["--only", "expected=yes"]);
    // The cell expects it: the suite passes, and says after which cut.
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let unrecovered = check(&run, 0, "unrecovered");
    assert_eq!(unrecovered.verdict, Verdict::Pass);
    assert_eq!(unrecovered.value, serde_json::json!(1));
    let detail = unrecovered.detail.as_deref().unwrap();
    assert!(detail.contains("after a power cut at"), "{detail}");
    assert!(detail.contains("did not get ready"), "{detail}");
    // The same cell without the expectation fails (not exit 3).
    let strict = soak_run("tests/suites/etcd-unsafe.yaml", &["--only", "expected=no"]);
    assert_eq!(strict.code(), 1, "{}", strict.stderr());
    assert_eq!(check(&strict, 0, "unrecovered").verdict, Verdict::Fail);
}

#[test]
fn postgres_loses_nothing_with_its_defaults_and_a_tail_without_synchronous_commit() {
    require_tool("pg_isready", "postgresql");
    require_tool("initdb", "postgresql");
    let run = soak_run("suites/postgres.yaml", &["--duration-scale", "0.2"]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let cells = &run.summary().cells;
    let by = |id: &str| cells.iter().find(|c| c.id == id).unwrap();
    let default = by("settings=default");
    let async_commit = by("settings=synchronous_commit-off");
    let no_fsync = by("settings=fsync-off");
    for c in [default, async_commit, no_fsync] {
        assert_eq!(c.restarts.len(), 5, "{}", c.id);
        assert!(c.restarts.iter().all(|r| r.reason == Cause::PowerCut));
        assert!(c.restarts.iter().all(|r| r.holes.is_empty()), "{}", c.id);
        assert_eq!(c.integrity.lost + c.integrity.corrupted, 0, "{}", c.id);
    }
    assert_eq!(default.integrity.lost_unsynced, 0);
    assert!(async_commit.integrity.lost_unsynced > 0);
    // fsync=off: every cut takes every write since the cluster was made.
    assert!(no_fsync.integrity.lost_unsynced > async_commit.integrity.lost_unsynced);
}

#[test]
fn postgres_with_a_password_logs_in_by_scram_and_cleartext_and_a_wrong_one_stops_its_cell() {
    require_tool("initdb", "postgresql");
    let run = soak_run("tests/suites/postgres-auth.yaml", &[]);
    assert_eq!(run.code(), 3, "{}", run.stderr());
    let cells = &run.summary().cells;
    for c in &cells[..2] {
        assert_eq!(c.verdict, Verdict::Pass, "{}: {:?}", c.id, c.error);
        assert!(c.integrity.verified > 100, "{}", c.id);
    }
    let err = cells[2].error.clone().unwrap();
    assert!(
        err.contains("refused soak") && err.contains("28P01"),
        "{err}"
    );
}

#[test]
fn s3rver_through_s3s_api_keeps_every_acknowledged_object_across_kills() {
    let s3rver = common::npm_module("s3rver@3.7.1");
    let path = format!(
        "{}:{}",
        s3rver.parent().unwrap().join(".bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run = soak_run_env(
        &[("PATH", path)],
        "suites/s3.yaml",
        &["--duration-scale", "0.3"],
    );
    // The suite expects torn objects; a short run may catch none.
    assert!(matches!(run.code(), 0 | 1), "{}", run.stderr());
    let c = run.cell();
    assert_eq!(c.restarts.len(), 11);
    assert_eq!(c.integrity.lost, 0, "{:?}", c.integrity);
    assert!(c.integrity.verified > 200, "{:?}", c.integrity);
    // What a torn object reads as: bytes no write produced.
    for r in c.restarts.iter().filter(|r| r.corrupted > 0) {
        let f = r.first_lost.as_ref().unwrap();
        assert!(
            f.read.contains("no version") || f.read.contains("error"),
            "{f:?}"
        );
    }
}

fn adapter_run(flags: &str) -> Run {
    soak_run_env(
        &[("ADAPTER_FLAGS", flags.to_string())],
        "tests/suites/adapter-http.yaml",
        &[],
    )
}

/// memcached through an adapter written from the book alone
/// (adapters/memcached.py): the read-back before the kill finds every
/// acknowledged write, the one after it finds them gone, and the suite
/// says so as it expects.
#[test]
fn memcached_through_an_adapter_from_the_book_keeps_nothing_through_a_kill() {
    require_tool("memcached", "memcached");
    let run = soak_run("suites/memcached.yaml", &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let c = &run.summary().cells[0];
    assert!(c.expectation.as_ref().unwrap().reproduced());
    assert!(c.integrity.lost >= 1000, "{:?}", c.integrity);
    assert_eq!(c.integrity.corrupted, 0, "{:?}", c.integrity);
    assert_eq!(c.restarts.len(), 1);
    assert_eq!(c.restarts[0].reason, Cause::Kill);
    let before = c.phases.iter().find(|p| p.place == Some(2)).unwrap();
    assert!(
        before.outcome.contains(" 0 lost"),
        "the read-back before the kill: {}",
        before.outcome
    );
}

#[test]
fn adapters_in_any_order_and_an_adapter_for_etcd_judge_like_the_built_in_clients() {
    let run = adapter_run("--concurrency 4");
    assert_eq!(run.code(), 0, "{}", run.stderr());
    assert!(run.cell().integrity.verified > 100);
    require_tool("etcd", "etcd-server");
    let run = soak_run("tests/suites/adapter-etcd.yaml", &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let c = run.cell();
    assert!(c.load.as_ref().unwrap().mgets > 0);
    assert_eq!(c.integrity.harmed(), 0);
}

#[test]
fn an_adapter_that_crashes_is_started_again_and_the_node_is_not_blamed() {
    let run = adapter_run("--crash-after 40");
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let c = run.cell();
    let load = c.load.as_ref().unwrap();
    assert!(load.client_restarts >= 1, "{load:?}");
    // The planned kill only: an adapter's exit is not the node's death.
    assert_eq!(c.restarts.len(), 1);
    assert_eq!(c.restarts[0].reason, Cause::Kill);
    assert_eq!(c.integrity.harmed(), 0);
}

#[test]
fn an_adapter_that_prints_garbage_stops_the_cell_quoting_the_line() {
    let run = adapter_run("--garbage-after 20");
    assert_eq!(run.code(), 3, "{}", run.stderr());
    let err = run.cell().error.clone().unwrap();
    assert!(err.contains("not the protocol"), "{err}");
    assert!(err.contains("<html>this is not json</html>"), "{err}");
}

#[test]
fn an_adapter_that_never_answers_its_init_stops_the_cell_with_the_fix() {
    let run = adapter_run("--no-init");
    assert_eq!(run.code(), 3, "{}", run.stderr());
    let err = run.cell().error.clone().unwrap();
    assert!(err.contains("did not answer its init within 3s"), "{err}");
    assert!(err.contains("init_ok"), "{err}");
}

#[test]
fn a_cell_whose_writes_nobody_judged_says_so_instead_of_passing_zero_lost() {
    let run = soak_run("tests/suites/unjudged.yaml", &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let c = run.cell();
    assert!(!c.integrity.judged());
    let report =
        std::fs::read_to_string(run.report_dir.as_ref().unwrap().join("report.md")).unwrap();
    assert!(report.contains("no writes judged"), "{report}");
    assert!(!report.contains("0 writes acknowledged"), "{report}");
}

#[test]
fn the_docs_show_the_example_adapter_whole_and_it_is_under_100_lines() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/src/protocols.md")).unwrap();
    let adapter = std::fs::read_to_string(root.join("adapters/etcd.py")).unwrap();
    let shown = doc
        .split("```python\n")
        .nth(1)
        .and_then(|b| b.split("```\n").next())
        .expect("a python block in docs/src/protocols.md");
    assert_eq!(
        shown, adapter,
        "docs/src/protocols.md shows another adapters/etcd.py"
    );
    assert!(adapter.lines().count() < 100);
}

#[test]
fn network_faults_over_http_show_as_latency_and_timeouts_never_as_lost_writes() {
    let run = soak_run("tests/suites/network-http.yaml", &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let c = run.cell();
    // Through the proxy: the run after the 50 ms latency answers in no
    // less, the blackholed run times out, the run after `clear` is clean.
    let runs: Vec<_> = c
        .phases
        .iter()
        .filter(|p| p.phase == "run 2s")
        .map(|p| p.load.clone().unwrap())
        .collect();
    assert_eq!(runs.len(), 4);
    assert!(
        runs[1].latency_us.as_ref().unwrap().p50 >= 50_000,
        "{:?}",
        runs[1]
    );
    assert!(runs[2].errors > 0, "{:?}", runs[2]);
    assert_eq!(runs[3].errors, 0, "{:?}", runs[3]);
    assert!(c.network.expect("the proxy's figures").bytes_blackholed > 0);
    assert_eq!(c.integrity.harmed(), 0);
    assert!(c.integrity.verified > 50);
}
