//! Clusters: members in network namespaces of the run's own, faults
//! between them, every history checked for linearizability; and soak's
//! checker against Porcupine (the reference, built from the Go module
//! proxy) on Porcupine's own Jepsen histories and on the histories soak's
//! cluster runs record.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::soak::{
    assert_nothing_left, interrupt, labelled, soak_run, suite, wait_for_file, walk,
};
use crate::common::{install_lock, require_tool};

fn soak() -> Command {
    Command::new(env!("CARGO_BIN_EXE_soak"))
}

/// Go (>= 1.21, which fetches the toolchain a go.mod asks for): on the
/// PATH, in /usr/local/go, or Debian's, as scripts/kube finds it.
fn go() -> Command {
    let on_path = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("go"))
            .find(|g| g.is_file())
    });
    let debian = || {
        let mut debs: Vec<PathBuf> = std::fs::read_dir("/usr/lib")
            .ok()?
            .flatten()
            .map(|e| e.path().join("bin/go"))
            .filter(|g| g.is_file() && g.to_string_lossy().contains("/go-"))
            .collect();
        debs.sort();
        debs.pop()
    };
    let go = on_path
        .or_else(|| Some(PathBuf::from("/usr/local/go/bin/go")).filter(|g| g.is_file()))
        .or_else(debian)
        .unwrap_or_else(|| {
            panic!("Go is missing: the tests build Porcupine from the Go module proxy; install it from https://go.dev/dl/ (or `apt-get install golang`)")
        });
    let mut c = Command::new(go);
    c.env("GOFLAGS", "-buildvcs=false");
    c
}

/// Porcupine's module (its test data) and the Go program of
/// `tests/porcupine`, built once under `target/porcupine`.
fn porcupine() -> (PathBuf, PathBuf) {
    let here = suite("tests/porcupine");
    let out = suite("target/porcupine");
    let _lock = install_lock(&out);
    let bin = out.join("porcupine");
    if !bin.exists() {
        let built = go()
            .args(["build", "-o"])
            .arg(&bin)
            .arg(".")
            .current_dir(&here)
            .status()
            .unwrap();
        assert!(built.success(), "go build of tests/porcupine failed");
    }
    let dl = go()
        .args([
            "mod",
            "download",
            "-json",
            "github.com/anishathalye/porcupine@v1.3.1",
        ])
        .current_dir(&here)
        .output()
        .unwrap();
    assert!(
        dl.status.success(),
        "{}",
        String::from_utf8_lossy(&dl.stderr)
    );
    let info: serde_json::Value = serde_json::from_slice(&dl.stdout).unwrap();
    (PathBuf::from(info["Dir"].as_str().unwrap()), bin)
}

/// Porcupine's verdict on a history file in its form: ok, illegal, unknown.
fn porcupine_verdict(bin: &Path, file: &Path) -> String {
    let out = Command::new(bin).arg(file).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace().nth(1).unwrap().to_string()
}

/// `soak history FILE --format porcupine` into `dir`.
fn as_porcupine(history: &Path, dir: &Path) -> PathBuf {
    let name = history
        .file_name()
        .unwrap()
        .to_string_lossy()
        .replace('/', "_");
    let out = dir.join(format!("{name}.json"));
    let st = soak()
        .arg("history")
        .arg(history)
        .args(["--format", "porcupine", "-o"])
        .arg(&out)
        .status()
        .unwrap();
    assert!(st.success(), "soak history {}", history.display());
    out
}

/// soak's verdict by its exit code: 0 linearizable, 1 not.
fn soak_verdict(file: &Path) -> i32 {
    soak()
        .arg("check-history")
        .arg(file)
        .output()
        .unwrap()
        .status
        .code()
        .unwrap()
}

#[test]
fn porcupines_jepsen_and_key_value_histories_get_porcupines_verdicts() {
    let (module, bin) = porcupine();
    let tests = std::fs::read_to_string(module.join("porcupine_test.go")).unwrap();
    let re = regex::Regex::new(r"checkJepsen\(t, (\d+), (true|false)\)").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for c in re.captures_iter(&tests) {
        let n: u32 = c[1].parse().unwrap();
        let want = &c[2] == "true";
        let log = module.join(format!("test_data/jepsen/etcd_{n:03}.log"));
        let got = soak_verdict(&log);
        assert_eq!(
            got,
            if want { 0 } else { 1 },
            "etcd_{n:03}: Porcupine's test says {want}"
        );
        // Porcupine itself, on soak's conversion of the same history.
        let p = porcupine_verdict(&bin, &as_porcupine(&log, dir.path()));
        assert_eq!(
            p,
            if want { "ok" } else { "illegal" },
            "etcd_{n:03} through soak's conversion"
        );
        checked += 1;
    }
    assert_eq!(
        checked, 102,
        "Porcupine v1.3.1 judges 102 Jepsen etcd histories"
    );
    for name in [
        "c01-ok", "c01-bad", "c10-ok", "c10-bad", "c50-ok", "c50-bad",
    ] {
        let file = module.join(format!("test_data/kv/{name}.txt"));
        let want = name.ends_with("-ok");
        assert_eq!(soak_verdict(&file), if want { 0 } else { 1 }, "{name}");
        let p = porcupine_verdict(&bin, &as_porcupine(&file, dir.path()));
        assert_eq!(
            p,
            if want { "ok" } else { "illegal" },
            "{name} through soak's conversion"
        );
    }
    // The proof that the comparison can fail: a read flipped in a history
    // Porcupine finds linearizable makes both say it is not.
    let ok = std::fs::read_to_string(module.join("test_data/jepsen/etcd_002.log")).unwrap();
    let line = ok.lines().position(|l| l.contains(":ok\t:read\t")).unwrap();
    let flipped: Vec<String> = ok
        .lines()
        .enumerate()
        .map(|(i, l)| {
            if i == line {
                let v = l.rsplit('\t').next().unwrap();
                let other = if v == "nil" {
                    "9".to_string()
                } else {
                    format!("{}9", v)
                };
                l.replacen(&format!("\t{v}"), &format!("\t{other}"), 1)
            } else {
                l.to_string()
            }
        })
        .collect();
    let bad = dir.path().join("flipped.log");
    std::fs::write(&bad, flipped.join("\n")).unwrap();
    assert_eq!(soak_verdict(&bad), 1);
    assert_eq!(
        porcupine_verdict(&bin, &as_porcupine(&bad, dir.path())),
        "illegal"
    );
}

#[test]
fn a_history_that_is_not_one_is_refused_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("empty.edn", "", ".edn:1:", "empty"),
        (
            "twice.edn",
            "{:process 0, :type :invoke, :f :read, :value nil}\n{:process 0, :type :invoke, :f :write, :value 1}\n",
            ":2:",
            "invokes again",
        ),
        ("prose.txt", "hello\n", ":1:", "not a history"),
        (
            "orphan.edn",
            "{:process 0, :type :invoke, :f :write, :value 1}\n{:process 1, :type :ok, :f :write, :value 1}\n",
            ":2:",
            "never invoked",
        ),
    ];
    for (name, text, at, says) in cases {
        let f = dir.path().join(name);
        std::fs::write(&f, text).unwrap();
        let out = soak().arg("check-history").arg(&f).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains(at) && err.contains(says), "{name}: {err}");
    }
}

/// Three etcd members under partitions, a leader kill and a pause:
/// linearizable reads pass, serializable reads are found stale and tied
/// to the fault that left their member behind (a partition, or a pause
/// or a kill it had not caught up from: a member resumed 3 ms before the
/// read served its own state); Porcupine agrees on both histories.
#[test]
fn etcd_linearizable_reads_pass_and_serializable_reads_are_found_stale() {
    require_tool("etcd", "etcd-server");
    require_tool("nft", "nftables");
    let run = soak_run("suites/etcd-cluster.yaml", &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let cells = &run.summary().cells;
    let lin = cells.iter().find(|c| c.id == "reads=linearizable").unwrap();
    let ser = cells.iter().find(|c| c.id == "reads=serializable").unwrap();
    let h = lin.history.as_ref().expect("a history record");
    assert_eq!(h.verdict, "linearizable", "{h:?}");
    assert!(h.operations > 5_000, "{h:?}");
    assert_eq!(lin.integrity.lost, 0);
    let h = ser.history.as_ref().expect("a history record");
    assert_eq!(h.verdict, "not_linearizable", "{h:?}");
    assert!(!h.violations.is_empty());
    for v in &h.violations {
        assert!(v.operation.starts_with("read()"), "a stale read: {v:?}");
        // A member cut off, or one that was paused or down and has not
        // caught up yet, serves its own older state.
        assert!(
            v.faults.iter().any(|f| ["partition", "paused", "down"]
                .iter()
                .any(|w| f.what.contains(w))),
            "tied to a fault that left a member behind: {v:?}"
        );
        assert!(v.window.len() >= 2, "{v:?}");
    }
    let e = ser.expectation.as_ref().unwrap();
    assert!(e.met && e.incident, "{e:?}");
    // The slow link was in force, and held the members' packets.
    let events = std::fs::read_to_string(
        run.report_dir
            .as_ref()
            .unwrap()
            .join(&lin.files["events.jsonl"]),
    )
    .unwrap();
    assert!(
        events.contains("partition delay 100ms ±20ms between 1 and 2 (2 links delayed)"),
        "the delay is named"
    );
    let held = regex::Regex::new(r"healed \((\d+) packets held on the delayed links\)")
        .unwrap()
        .captures(&events)
        .map(|c| c[1].parse::<u64>().unwrap())
        .expect("the heal counts the packets held");
    assert!(
        held > 10,
        "raft's heartbeats went over the slow link: {held}"
    );
    // Porcupine on the same histories.
    let (_, bin) = porcupine();
    let dir = tempfile::tempdir().unwrap();
    let report = run.report_dir.as_ref().unwrap();
    for (cell, want) in [(lin, "ok"), (ser, "illegal")] {
        let file = report.join(&cell.history.as_ref().unwrap().file);
        let p = as_porcupine(&file, dir.path());
        assert_eq!(porcupine_verdict(&bin, &p), want, "{}", cell.id);
    }
}

#[test]
fn a_member_that_never_joins_is_named_with_its_log_and_nothing_is_left() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(suite("tests/suites/cluster-soak-nodes.yaml"))
        .unwrap()
        .replace(
            r#"command: ["${SOAK_NODE}","#,
            r#"command: ["sh", "-c", "if [ ${MEMBER} = 2 ]; then echo member two will not join; exec sleep 60; fi; exec \"$0\" \"$@\"", "${SOAK_NODE}","#,
        )
        .replace("timeout: 30s", "timeout: 5s");
    let path = dir.path().join("never-joins.yaml");
    std::fs::write(&path, text).unwrap();
    let run = soak_run(path.to_str().unwrap(), &[]);
    assert_eq!(run.code(), 3, "{}", run.stderr());
    let err = run.stderr();
    assert!(err.contains("member 2 to join"), "{err}");
    assert!(
        err.contains("member two will not join"),
        "its log quoted: {err}"
    );
    assert!(err.contains("members/2/node.log"), "{err}");
}

/// A member that soak killed and that does not start again is the cell's
/// `unrecovered` finding (exit 1, its log quoted), not the environment's
/// error: as for one node.
#[test]
fn a_killed_member_that_does_not_come_back_is_unrecovered() {
    require_tool("nft", "nftables");
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(suite("tests/suites/cluster-soak-nodes.yaml"))
        .unwrap()
        .replace(
            r#"command: ["${SOAK_NODE}","#,
            r#"command: ["sh", "-c", "if [ ${MEMBER} = 2 ] && [ -e ${MEMBER_DIR}/ran ]; then echo member two refuses its data; exit 3; fi; touch ${MEMBER_DIR}/ran; exec \"$0\" \"$@\"", "${SOAK_NODE}","#,
        );
    let path = dir.path().join("no-comeback.yaml");
    std::fs::write(&path, text).unwrap();
    let run = soak_run(path.to_str().unwrap(), &[]);
    assert_eq!(run.code(), 1, "{}", run.stderr());
    let check = run.check("unrecovered");
    assert_eq!(check.verdict, soak::model::Verdict::Fail, "{check:?}");
    let said = check.detail.clone().unwrap_or_default();
    assert!(said.contains("after the planned kill"), "{said}");
    assert!(said.contains("member 2"), "{said}");
    assert!(said.contains("member two refuses its data"), "{said}");
}

#[test]
fn cluster_mistakes_are_refused_at_their_line() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::read_to_string(suite("tests/suites/cluster-soak-nodes.yaml")).unwrap();
    let cases = [
        (
            "partition: { isolate: 3 }",
            "partition: { isolate: 4 }",
            "no member 4",
        ),
        (
            "partition: { isolate: 3 }",
            "partition: { groups: { a: [1], b: [2, 5] } }",
            "no member 5",
        ),
        (
            "partition: { isolate: 3 }",
            "partition: { delay: { between: [1, 4], by: 100ms } }",
            "no member 4",
        ),
        (
            "partition: { isolate: 3 }",
            "partition: { delay: { between: [1, 2], by: 100ms, jitter: 1s } }",
            "`jitter` is at most `by`",
        ),
        (
            "kill: { member: 2 }",
            "upgrade: { to: v9, member: 2 }",
            "there is no version `v9`",
        ),
        (
            "kill: { member: 2 }",
            "upgrade: { member: 2 }",
            "needs its version",
        ),
        (
            "kill: { member: 2 }",
            "kill: { member: leader }",
            "needs a way to find the leader",
        ),
        (
            "partition: { isolate: 3 }",
            "partition: { isolate: 3, heal: 1 }",
            "one partition per phase",
        ),
        (
            "cluster:\n  members: 3",
            "cluster:\n  members: 3\n  bogus: 1",
            "unknown field `bogus`",
        ),
        (
            "kill: { member: 2 }",
            "power_cut: { member: 4 }",
            "no member 4",
        ),
        (
            "kill: { member: 2 }",
            "power_cut: { member: 2, signal: SIGKILL }",
            "unknown field `signal`",
        ),
        (
            "kill: { member: 2 }",
            "io_errors: { rate: 0.1 }",
            "not done for clusters yet",
        ),
        (
            "ready: {",
            "image: soak-node:local\n  ready: {",
            "not done for clusters yet",
        ),
    ];
    let located = regex::Regex::new(r"bad\.yaml:\d+:\d+").unwrap();
    for (from, to, says) in cases {
        let path = dir.path().join("bad.yaml");
        std::fs::write(&path, base.replace(from, to)).unwrap();
        let out = soak().arg("validate").arg(&path).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{to}: {err}");
        assert!(err.contains(says), "{to}: {err}");
        // file:line:column
        assert!(located.is_match(&err), "{to}: {err}");
    }
    // A member phase without a cluster.
    let smoke = std::fs::read_to_string(suite("suites/smoke.yaml")).unwrap();
    let path = dir.path().join("bad.yaml");
    std::fs::write(
        &path,
        smoke.replace("  - kill: SIGKILL", "  - kill: { member: 2 }"),
    )
    .unwrap();
    let out = soak().arg("validate").arg(&path).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("the suite has none"), "{err}");
}

/// The namespaces of run `id`.
fn namespaces_of(id: &str) -> Vec<String> {
    soak::net::netns::leftovers()
        .into_iter()
        .filter(|(_, r)| r == id)
        .map(|(n, _)| n)
        .collect()
}

/// A cluster's run started in the background; its run id once its
/// members are ready.
fn started(dir: &Path, stderr: std::process::Stdio) -> (std::process::Child, String, PathBuf) {
    let _beside = crate::common::beside();
    let child = soak()
        .arg("run")
        .arg(suite("tests/suites/cluster-soak-nodes.yaml"))
        .arg("--out")
        .arg(dir)
        .stderr(stderr)
        .spawn()
        .unwrap();
    let events = wait_for_file(dir, "events.jsonl", |e| {
        std::fs::read_to_string(e)
            .unwrap()
            .contains("\"kind\":\"member\"")
    });
    let report = events.ancestors().nth(3).unwrap().to_path_buf();
    let id = crate::common::soak::run_id(&report);
    (child, id, report)
}

#[test]
fn an_interrupted_cluster_run_stops_with_130_and_leaves_nothing() {
    require_tool("nft", "nftables");
    let dir = tempfile::tempdir().unwrap();
    let (child, id, report) = started(dir.path(), std::process::Stdio::null());
    assert!(
        !namespaces_of(&id).is_empty(),
        "the run made its namespaces"
    );
    let run = interrupt(child, &report, dir);
    assert_nothing_left(&run);
}

#[test]
fn a_killed_soak_leaves_namespaces_that_soak_cleanup_removes() {
    require_tool("nft", "nftables");
    let dir = tempfile::tempdir().unwrap();
    let (mut child, id, _) = started(dir.path(), std::process::Stdio::null());
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!namespaces_of(&id).is_empty(), "a SIGKILL leaves them");
    let out = soak().args(["cleanup", "--run", &id]).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("removed network namespace"), "{said}");
    assert!(namespaces_of(&id).is_empty());
    assert!(labelled(&id).is_empty());
    assert!(walk(dir.path()).iter().any(|p| p.ends_with("events.jsonl")));
}

/// Three ZooKeeper servers (Debian's, through the kazoo adapter) under a
/// leader kill, the leader isolated and a majority split: nothing lost,
/// the history linearizable. (It once read as a loss: a connection had two
/// writes of one key in flight and the adapter let the later land first;
/// the load now never does that.)
#[test]
fn a_zookeeper_ensemble_loses_nothing_under_leader_kills_and_partitions() {
    require_tool("java", "openjdk-17-jdk-headless");
    require_tool("nft", "nftables");
    crate::common::require_file("/usr/share/java/zookeeper.jar", "zookeeper");
    let run = soak_run("suites/zookeeper-ensemble.yaml", &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let c = run.cell();
    assert_eq!((c.integrity.lost, c.integrity.corrupted), (0, 0));
    let h = c.history.as_ref().unwrap();
    assert_eq!(h.verdict, "linearizable", "{h:?}");
    assert!(h.operations > 5_000, "{h:?}");
    let kinds: Vec<&str> = c.phases.iter().map(|p| p.phase.as_str()).collect();
    assert!(
        kinds.iter().any(|p| p.starts_with("kill member leader")),
        "{kinds:?}"
    );
}

/// Redis with two replicas and three Sentinels: the primary cut off goes
/// on acknowledging writes that the failover loses, found by the
/// read-back and by the history, which blames the partition; with
/// `min-replicas-to-write 1` far fewer are lost (or none).
#[test]
fn a_partitioned_redis_primary_loses_what_it_acknowledged_alone() {
    require_tool("redis-sentinel", "redis-sentinel");
    require_tool("nft", "nftables");
    let run = soak_run("suites/redis-sentinel.yaml", &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let cells = &run.summary().cells;
    let none = cells.iter().find(|c| c.id == "replicas=none").unwrap();
    let one = cells.iter().find(|c| c.id == "replicas=one").unwrap();
    let h = none.history.as_ref().unwrap();
    assert_eq!(h.verdict, "not_linearizable", "{h:?}");
    assert!(none.integrity.lost >= 1);
    // min-replicas-to-write narrows the window to 2 s: some runs lose a
    // few writes in it, some none. Whatever it loses is the partition's.
    for c in [none, one] {
        let h = c.history.as_ref().unwrap();
        assert!(
            h.verdict == "linearizable"
                || h.violations
                    .iter()
                    .any(|v| v.faults.iter().any(|f| f.what.contains("partition"))),
            "{}: {h:?}",
            c.id
        );
    }
    assert!(
        one.integrity.lost * 3 < none.integrity.lost,
        "min-replicas-to-write loses far fewer: {} against {}",
        one.integrity.lost,
        none.integrity.lost
    );
}

/// Round trips (connect, a byte there and back) from namespace `from` to
/// `addr:7000`, the median of five, in milliseconds; it waits for the
/// listener first.
fn round_trip_ms(from: &str, addr: &str) -> f64 {
    let code = format!(
        r#"
import socket, time
def once():
    t = time.monotonic()
    c = socket.create_connection(("{addr}", 7000), timeout=10)
    c.sendall(b"x"); c.recv(1); c.close()
    return (time.monotonic() - t) * 1000
deadline = time.monotonic() + 20
while True:
    try:
        once(); break
    except OSError:
        if time.monotonic() > deadline: raise
        time.sleep(0.05)
print(sorted(once() for _ in range(5))[2])
"#
    );
    let out = Command::new("ip")
        .args(["netns", "exec", from, "python3", "-c", &code])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// `partition: { delay: ... }` as the network does it: what member 1 and
/// member 2 send each other is held for the delay (each way, so a round
/// trip of connect and a byte costs four of them); member 3 is as near as
/// before; lifting it takes the delay away. Real namespaces, real packets
/// through netfilter's queue.
#[test]
fn a_delayed_link_holds_its_packets_and_no_other() {
    use soak::net::delay::Hold;
    use soak::net::netns::{free_net, Cut, Network};
    require_tool("iptables", "iptables");
    let run = format!("delaytest{}", std::process::id());
    let net = Network::create(&run, 0, 3, free_net()).unwrap();
    let m: Vec<(String, String)> = net
        .members()
        .iter()
        .map(|m| (m.name.clone(), m.addr.to_string()))
        .collect();
    let echo = |i: usize| {
        Command::new("ip")
            .args(["netns", "exec", &m[i].0, "python3", "-c"])
            .arg(format!(
                "import socket\ns = socket.create_server(('{}', 7000))\nwhile True:\n    c, _ = s.accept(); c.sendall(c.recv(1)); c.close()",
                m[i].1
            ))
            .spawn()
            .unwrap()
    };
    let mut servers = [echo(1), echo(2)];
    let before = round_trip_ms(&m[0].0, &m[1].1);
    let hold = Some(Hold {
        by: std::time::Duration::from_millis(150),
        jitter: std::time::Duration::ZERO,
    });
    net.set_cuts(&[
        Cut {
            from: 1,
            to: 2,
            loss: 0.0,
            hold,
        },
        Cut {
            from: 2,
            to: 1,
            loss: 0.0,
            hold,
        },
    ])
    .unwrap();
    let delayed = round_trip_ms(&m[0].0, &m[1].1);
    let other = round_trip_ms(&m[0].0, &m[2].1);
    let held = net.set_cuts(&[]).unwrap();
    let after = round_trip_ms(&m[0].0, &m[1].1);
    for s in &mut servers {
        s.kill().unwrap();
        s.wait().unwrap();
    }
    drop(net);
    assert!(namespaces_of(&run).is_empty(), "the namespaces are gone");
    eprintln!("round trip 1->2: {before:.2} ms, delayed {delayed:.1} ms ({held} packets held), 1->3 {other:.2} ms, healed {after:.2} ms");
    // A round trip: SYN, SYN-ACK, the byte, its echo: four packets held.
    assert!(
        delayed >= 4.0 * 150.0,
        "delayed {delayed} ms (before {before} ms)"
    );
    assert!(held >= 4, "{held} packets held");
    assert!(other < 150.0, "member 3 is not delayed: {other} ms");
    assert!(after < 150.0, "healed: {after} ms");
}

/// `upgrade: { to: v2, member: all }` on a three-member etcd under load:
/// each member stopped, started as v2 and ready before the next one
/// stops; the history linearizable and nothing acknowledged lost.
#[test]
fn a_rolling_upgrade_of_etcd_goes_one_member_at_a_time_and_loses_nothing() {
    require_tool("etcd", "etcd-server");
    require_tool("nft", "nftables");
    let run = soak_run("tests/suites/etcd-rolling-upgrade.yaml", &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let cell = run.cell();
    assert_eq!(cell.integrity.lost, 0);
    assert_eq!(
        cell.history.as_ref().map(|h| h.verdict.as_str()),
        Some("linearizable")
    );
    let dir = run.report_dir.as_ref().unwrap().join("cells/default");
    for m in 1..=3 {
        let mark = std::fs::read_to_string(dir.join(format!("members/{m}/started-as")));
        assert_eq!(mark.ok().as_deref(), Some("v2\n"), "member {m} runs v2");
    }
    // One at a time: stop, upgrade, start of member 1, then of 2, then of 3.
    let events = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
    let order: Vec<(u64, String)> = events
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["kind"] == "member")
        .map(|e| {
            (
                e["member"].as_u64().unwrap(),
                e["action"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want: Vec<(u64, String)> = (1..=3)
        .flat_map(|m| ["stop", "upgrade", "start"].map(|a| (m, a.to_string())))
        .collect();
    assert_eq!(order, want);
}

/// Power cuts of a cluster's members, each on soak's fault filesystem: one
/// member, a majority together, then every member at once, under load.
/// With its defaults etcd fsyncs its log before it acknowledges: nothing
/// acknowledged is lost, the history stays linearizable, and every fault
/// filesystem is gone after. With `--unsafe-no-fsync` the first member cut
/// loses raft entries the leader counted as its own and never rejoins:
/// the expected `unrecovered`, in etcd's own words.
#[test]
fn etcd_members_lose_their_power_and_only_unsynced_members_do_not_come_back() {
    require_tool("etcd", "etcd-server");
    require_tool("nft", "nftables");
    let run = soak_run("suites/etcd-cluster-power-cut.yaml", &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let cells = &run.summary().cells;
    let safe = cells.iter().find(|c| c.id == "fsync=default").unwrap();
    assert_eq!(safe.integrity.lost, 0, "{:?}", safe.integrity);
    assert_eq!(
        safe.history.as_ref().map(|h| h.verdict.as_str()),
        Some("linearizable")
    );
    let disk = safe
        .disk_faults
        .as_ref()
        .expect("the fault filesystems counted");
    // 1 + 2 members, then the 3 of the whole cluster.
    assert_eq!(disk.power_cuts, 6, "{disk:?}");
    assert!(disk.fsyncs > 100, "etcd synced through soak: {disk:?}");
    let report = run.report_dir.as_ref().unwrap();
    let events = std::fs::read_to_string(report.join(&safe.files["events.jsonl"])).unwrap();
    let cuts: Vec<u64> = events
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["kind"] == "member" && e["action"] == "power_cut")
        .map(|e| e["member"].as_u64().unwrap())
        .collect();
    assert_eq!(cuts.len(), 3, "member 1, then a majority: {cuts:?}");
    assert_eq!(cuts[0], 1);
    // The members' files are back where etcd wrote them, nothing mounted.
    let dir = report.join("cells/fsync=default");
    for m in 1..=3 {
        assert!(dir.join(format!("members/{m}/data/member/wal")).is_dir());
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(&run.id), "a fault filesystem left mounted");
    let unsafe_ = cells
        .iter()
        .find(|c| c.id == "fsync=unsafe-no-fsync")
        .unwrap();
    let e = unsafe_.expectation.as_ref().unwrap();
    assert!(e.met, "{e:?}");
    let unrecovered = unsafe_
        .checks
        .iter()
        .find(|c| c.name == "unrecovered")
        .unwrap();
    let said = unrecovered.detail.clone().unwrap_or_default();
    assert!(said.contains("after a power cut"), "{said}");
    // Either a member whose unsynced raft log was taken while its leader
    // kept it panics as it starts again (in etcd's words), or the cut of
    // every member took the configuration itself: each starts with no
    // voters and none ever gets ready. Which one depends on what each had
    // synced at the cut; both are etcd without fsync, and soak says which.
    if said.contains("the node exited") {
        assert!(
            said.contains("raft log corrupted, truncated, or lost"),
            "etcd's words: {said}"
        );
    } else {
        assert!(
            said.contains("did not join either") && said.contains("voters=()"),
            "every member up, none ready, and etcd's empty configuration quoted: {said}"
        );
    }
}

/// Telemetry reads every member of a cluster: one member of three leaks,
/// the cell's memory (their sum) grows, and the finding names the member.
#[test]
fn a_leaking_member_is_named_in_the_growth_finding() {
    require_tool("nft", "nftables");
    let run = soak_run("tests/suites/cluster-leak.yaml", &[]);
    assert_eq!(run.code(), 1, "memory_growth fails: {}", run.stderr());
    let growth = run.check("memory_growth (rss)");
    assert_eq!(growth.verdict, soak::model::Verdict::Fail, "{growth:?}");
    let detail = growth.detail.clone().unwrap_or_default();
    assert!(detail.contains("of which member 2 "), "{detail}");
    let members = &run.cell().memory.members;
    assert_eq!(members.len(), 3, "{members:?}");
    let slope = |m: usize| members[m - 1].slope_bytes_per_hour.unwrap_or(0.0) / 1048576.0;
    // 6 MiB/s is about 21,600 MiB/h.
    assert!(slope(2) > 10_000.0, "member 2: {} MiB/h", slope(2));
    for m in [1, 3] {
        assert!(slope(m) < 1_000.0, "member {m}: {} MiB/h", slope(m));
    }
    // Each member's own rows.
    let csv = run.file("members.csv.gz");
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("t_s,member,up,rss_bytes,anon_bytes,cgroup_bytes,cgroup_anon_bytes,disk_bytes")
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    for m in ["1", "2", "3"] {
        assert!(rows.iter().filter(|r| r[1] == m).count() > 20, "member {m}");
    }
    let report =
        std::fs::read_to_string(run.report_dir.as_ref().unwrap().join("report.md")).unwrap();
    assert!(report.contains("| **member 2** |"), "the by-member table");
}

/// `clients: round_robin`: a connection whose member dies moves on to the
/// next member and is served there; bound `per_member`, it fails for as
/// long as its member is down.
#[test]
fn round_robin_clients_move_on_from_a_dead_member_and_bound_ones_do_not() {
    require_tool("nft", "nftables");
    let failed = |run: &crate::common::soak::Run| {
        let l = run.cell().load.as_ref().expect("a load");
        (l.errors + l.unavailable, l.sets)
    };
    let rr = soak_run("tests/suites/cluster-round-robin.yaml", &[]);
    assert_eq!(rr.code(), 0, "{}", rr.stderr());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("per-member.yaml");
    let text = std::fs::read_to_string(suite("tests/suites/cluster-round-robin.yaml")).unwrap();
    std::fs::write(
        &path,
        text.replace("clients: round_robin", "clients: per_member")
            .replace("${SUITE_DIR}", &suite("tests/suites").display().to_string()),
    )
    .unwrap();
    let pm = soak_run(path.to_str().unwrap(), &[]);
    let ((rr_failed, rr_sets), (pm_failed, pm_sets)) = (failed(&rr), failed(&pm));
    // Member 1's connection, 100 requests a second, 4 s down.
    assert!(
        pm_failed > 100,
        "bound to the dead member: {pm_failed} failed"
    );
    assert!(
        rr_failed * 10 < pm_failed,
        "round robin {rr_failed} failed, per member {pm_failed}"
    );
    assert!(
        rr_sets > pm_sets,
        "round robin {rr_sets} writes, per member {pm_sets}"
    );
}
