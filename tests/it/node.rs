//! soak-node, driven as its users drive it: redis-cli, the `redis` crate,
//! SIGKILL and restart, the metrics endpoint under each allocator.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use common::{require_file, require_tool, Node};

fn cli(node: &Node, args: &[&str]) -> String {
    require_tool("redis-cli", "redis-tools");
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &node.port.to_string()])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "redis-cli {args:?}: {out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .trim_end()
        .to_string()
}

#[test]
fn redis_cli_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), &[], &[]);
    assert_eq!(cli(&node, &["PING"]), "PONG");
    assert_eq!(cli(&node, &["SET", "greeting", "hello world"]), "OK");
    assert_eq!(cli(&node, &["GET", "greeting"]), "hello world");
    assert_eq!(cli(&node, &["SET", "b", "2"]), "OK");
    assert_eq!(
        cli(&node, &["MGET", "greeting", "missing", "b"]),
        "hello world\n\n2"
    );
    assert_eq!(
        cli(&node, &["EXISTS", "greeting", "missing", "b", "b"]),
        "3"
    );
    assert_eq!(cli(&node, &["DBSIZE"]), "2");
    assert_eq!(cli(&node, &["DEL", "b", "missing"]), "1");
    assert_eq!(cli(&node, &["GET", "b"]), "");
    for i in 0..25 {
        cli(&node, &["SET", &format!("user:{i:02}"), "x"]);
    }
    // redis-cli --scan follows the cursor to the end.
    let scanned = cli(&node, &["--scan", "--pattern", "user:*"]);
    let mut keys: Vec<&str> = scanned.lines().collect();
    keys.sort();
    assert_eq!(keys.len(), 25, "{scanned}");
    assert_eq!(keys[0], "user:00");
    let info = cli(&node, &["INFO"]);
    for field in [
        "# Server",
        "rocksdb_version:",
        "# Memory",
        "used_memory_rss:",
        "# Keyspace",
        "db0:keys=",
    ] {
        assert!(info.contains(field), "INFO lacks {field}: {info}");
    }
    assert_eq!(cli(&node, &["FLUSHALL"]), "OK");
    assert_eq!(cli(&node, &["DBSIZE"]), "0");
    assert!(cli(&node, &["NOSUCH", "x"]).contains("unknown command"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_crate_pipelines_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), &[], &[]);
    let client = redis::Client::open(node.url()).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();

    // One pipeline: 500 SETs then 500 GETs, answered in order.
    let mut pipe = redis::pipe();
    for i in 0..500 {
        pipe.set(format!("k{i}"), format!("v{i}")).ignore();
    }
    for i in 0..500 {
        pipe.get(format!("k{i}"));
    }
    let got: Vec<String> = pipe.query_async(&mut con).await.unwrap();
    assert_eq!(got, (0..500).map(|i| format!("v{i}")).collect::<Vec<_>>());

    // Concurrent requests on the multiplexed connection each get their own reply.
    let mut tasks = vec![];
    for t in 0..8 {
        let mut con = con.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..200 {
                let key = format!("t{t}:{i}");
                let _: () = redis::cmd("SET")
                    .arg(&key)
                    .arg(i)
                    .query_async(&mut con)
                    .await
                    .unwrap();
                let v: i64 = redis::cmd("GET")
                    .arg(&key)
                    .query_async(&mut con)
                    .await
                    .unwrap();
                assert_eq!(v, i);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let n: i64 = redis::cmd("DBSIZE").query_async(&mut con).await.unwrap();
    assert_eq!(n, 500 + 8 * 200);
}

/// SET NX is a lock for Redis users: of clients racing to create a key,
/// exactly one is told OK, and its value is the one stored. Two
/// connections pipeline SET NX over the same keys at once (two worker
/// threads in the node), in a few rounds: before the node held a lock
/// across the check and the write, one round in three had no key with
/// two winners, and the others had 393 to 2,937 of 5,000.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_nx_has_one_winner_per_key_under_a_race() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), &[], &[]);
    const KEYS: usize = 5_000;
    let client = redis::Client::open(node.url()).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    for round in 0..4 {
        let keys: Vec<String> = (0..KEYS).map(|i| format!("lock{round}:{i}")).collect();
        let race = |who: &'static str| {
            let (url, keys) = (node.url(), keys.clone());
            tokio::spawn(async move {
                let client = redis::Client::open(url).unwrap();
                let mut con = client.get_multiplexed_async_connection().await.unwrap();
                let mut pipe = redis::pipe();
                for k in &keys {
                    pipe.cmd("SET").arg(k).arg(who).arg("NX");
                }
                let won: Vec<Option<String>> = pipe.query_async(&mut con).await.unwrap();
                won.into_iter().map(|r| r.is_some()).collect::<Vec<bool>>()
            })
        };
        let (a, b) = (race("a"), race("b"));
        let (a, b) = (a.await.unwrap(), b.await.unwrap());
        let stored: Vec<String> = redis::cmd("MGET")
            .arg(&keys)
            .query_async(&mut con)
            .await
            .unwrap();
        let both: Vec<&String> = keys
            .iter()
            .zip(a.iter().zip(&b))
            .filter(|(_, (a, b))| **a && **b)
            .map(|(k, _)| k)
            .collect();
        assert!(
            both.is_empty(),
            "{} keys had two winners, e.g. {}",
            both.len(),
            both[0]
        );
        for (i, k) in keys.iter().enumerate() {
            let winner = match (a[i], b[i]) {
                (true, _) => "a",
                (_, true) => "b",
                _ => panic!("{k}: nobody won"),
            };
            assert_eq!(
                stored[i], winner,
                "{k}: the winner's value is not the one stored"
            );
        }
    }
}

async fn write_keys(url: &str, n: usize) {
    let client = redis::Client::open(url).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        let mut pipe = redis::pipe();
        for i in chunk {
            pipe.set(format!("key:{i}"), format!("value:{i}")).ignore();
        }
        // Every SET in the pipeline is acknowledged when this returns.
        let () = pipe.query_async(&mut con).await.unwrap();
    }
}

async fn count_present(url: &str, n: usize) -> usize {
    let client = redis::Client::open(url).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let mut present = 0;
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let keys: Vec<String> = chunk.iter().map(|i| format!("key:{i}")).collect();
        let values: Vec<Option<String>> = redis::cmd("MGET")
            .arg(&keys)
            .query_async(&mut con)
            .await
            .unwrap();
        for (i, v) in chunk.iter().zip(values) {
            if let Some(v) = v {
                assert_eq!(v, format!("value:{i}"), "corrupted value");
                present += 1;
            }
        }
    }
    present
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_sigkill_with_the_wal() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), &[], &[]);
    write_keys(&node.url(), 10_000).await;
    node.sigkill();
    let node = Node::start(dir.path(), &[], &[]);
    assert_eq!(count_present(&node.url(), 10_000).await, 10_000);
}

/// The proof that the test above can fail: without the WAL, writes still in
/// the memtable die with the process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_are_lost_on_sigkill_without_the_wal() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), &["--wal", "off"], &[]);
    write_keys(&node.url(), 10_000).await;
    node.sigkill();
    let node = Node::start(dir.path(), &["--wal", "off"], &[]);
    let present = count_present(&node.url(), 10_000).await;
    assert!(
        present < 10_000,
        "all {present} writes survived without a WAL"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_flushes_so_nothing_is_lost_even_without_the_wal() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), &["--wal", "off"], &[]);
    write_keys(&node.url(), 10_000).await;
    let status = node.sigterm();
    assert!(status.success(), "exit after SIGTERM: {status}");
    let node = Node::start(dir.path(), &["--wal", "off"], &[]);
    assert_eq!(count_present(&node.url(), 10_000).await, 10_000);
}

fn sample(
    samples: &[prometheus_parse::Sample],
    name: &str,
    label: Option<(&str, &str)>,
) -> Option<f64> {
    samples
        .iter()
        .find(|s| s.metric == name && label.is_none_or(|(k, v)| s.labels.get(k) == Some(v)))
        .map(|s| match s.value {
            prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => f64::NAN,
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_report_allocator_statistics_under_each_allocator() {
    let allocators = [
        ("glibc", None, None),
        (
            "jemalloc",
            Some("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"),
            Some("libjemalloc2"),
        ),
        (
            "mimalloc",
            Some("/usr/lib/x86_64-linux-gnu/libmimalloc.so.2"),
            Some("libmimalloc2.0"),
        ),
        (
            "tcmalloc",
            Some("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"),
            Some("libtcmalloc-minimal4"),
        ),
    ];
    for (name, lib, package) in allocators {
        if let (Some(lib), Some(package)) = (lib, package) {
            require_file(lib, package);
        }
        let dir = tempfile::tempdir().unwrap();
        let env: Vec<(&str, &str)> = lib.map(|l| ("LD_PRELOAD", l)).into_iter().collect();
        let node = Node::start(dir.path(), &["--block-cache", "48MiB"], &env);
        assert!(
            node.ready_line.contains(&format!("allocator={name}")),
            "{}",
            node.ready_line
        );
        write_keys(&node.url(), 2_000).await;
        let body = node.scrape();
        let lines = body.lines().map(|l| Ok(l.to_string()));
        let scrape = prometheus_parse::Scrape::parse(lines).unwrap();
        let s = &scrape.samples;
        assert_eq!(
            sample(s, "allocator_info", Some(("allocator", name))),
            Some(1.0),
            "{name}: {body}"
        );
        let stats: Vec<_> = s
            .iter()
            .filter(|x| x.metric.starts_with("allocator_") && x.metric.ends_with("_bytes"))
            .collect();
        assert!(
            stats.len() >= 3,
            "{name}: too few allocator statistics: {body}"
        );
        for stat in &stats {
            assert_eq!(stat.labels.get("allocator"), Some(name), "{}", stat.metric);
        }
        let main_stat = if name == "mimalloc" {
            "allocator_committed_bytes"
        } else {
            "allocator_allocated_bytes"
        };
        let v = sample(s, main_stat, Some(("allocator", name))).unwrap_or(0.0);
        assert!(v > 1e6, "{name}: {main_stat} = {v}");
        assert!(sample(s, "process_resident_memory_bytes", None).unwrap() > 1e6);
        assert_eq!(
            sample(s, "rocksdb_block_cache_capacity_bytes", None),
            Some(48.0 * 1024.0 * 1024.0)
        );
        assert!(sample(s, "rocksdb_memtables_size_bytes", None).unwrap() > 0.0);
        assert!(sample(s, "rocksdb_estimated_keys", None).unwrap() > 0.0);
        assert_eq!(
            sample(s, "soak_node_commands_total", Some(("command", "set"))),
            Some(2000.0)
        );
    }
}

#[test]
fn garbage_on_the_socket_gets_an_error_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), &[], &[]);
    for garbage in [
        &b"*3\r\n$3\r\nSET\r\n:1\r\n"[..],
        b"*-x\r\n",
        b"*1\r\n$999999999999\r\n",
        &[0xffu8; 70_000][..],
    ] {
        let mut s = TcpStream::connect(&node.resp).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = s.write_all(garbage);
        let mut reply = Vec::new();
        let _ = s.read_to_end(&mut reply);
        let reply = String::from_utf8_lossy(&reply);
        assert!(
            reply.starts_with("-ERR Protocol error"),
            "{garbage:?} got {reply:?}"
        );
    }
    // Unknown inline words are a command error; the connection stays usable.
    let mut s = TcpStream::connect(&node.resp).unwrap();
    s.write_all(b"gibberish there\r\nPING\r\n").unwrap();
    let mut buf = [0u8; 256];
    let mut got = String::new();
    while !got.contains("+PONG") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed early: {got}");
        got.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(got.starts_with("-ERR unknown command 'gibberish'"), "{got}");
    assert_eq!(cli(&node, &["PING"]), "PONG");
}

#[test]
fn options_file_is_an_alternative_to_flags() {
    let first = tempfile::tempdir().unwrap();
    let node = Node::start(
        first.path(),
        &["--compression", "zstd", "--write-buffer-size", "8MiB"],
        &[],
    );
    assert!(node.sigterm().success());
    let options = std::fs::read_dir(first.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("OPTIONS-")
        })
        .max()
        .unwrap();
    let text = std::fs::read_to_string(&options).unwrap();
    assert!(text.contains("compression=kZSTD"), "{text}");

    let second = tempfile::tempdir().unwrap();
    let file = options.to_str().unwrap();
    let node = Node::start(second.path(), &["--options-file", file], &[]);
    assert_eq!(cli(&node, &["SET", "a", "1"]), "OK");
    // Flags that the file would also set are refused, not silently merged.
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_soak-node"))
        .args(["--port", "0", "--data-dir"])
        .arg(tempfile::tempdir().unwrap().path())
        .args(["--options-file", file, "--compression", "lz4"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr)
        .contains("--options-file and --compression are alternatives"));
    assert!(node.sigterm().success());
    let written = std::fs::read_dir(second.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("OPTIONS-")
        })
        .max()
        .unwrap();
    let text = std::fs::read_to_string(written).unwrap();
    assert!(
        text.contains("compression=kZSTD") && text.contains("write_buffer_size=8388608"),
        "{text}"
    );
}
