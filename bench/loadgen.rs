//! soak's RESP load generator against redis-benchmark, on the same
//! redis-server, in the same run: 8 connections, pipeline 1 and 16,
//! 100-byte values, SET and GET, each run three times, interleaved, the
//! median kept. soak runs in its closed loop (`rate: max`, `pipeline: N`)
//! with the ledger on: every SET is recorded, every GET's value decoded
//! and checked against it; and again with every request also recorded in
//! a history (`history.bin.gz`, as a cluster or a `linearizable` check
//! records it), in the same rounds, to show what recording costs.
//!
//!     cargo run --release --no-default-features --example loadgen [seconds per soak run, default 4]
//!
//! Needs redis-server and redis-benchmark (`apt-get install redis-server
//! redis-tools`). Prints a markdown table for docs/src/benchmarks.md.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use soak::workload::{dist::Distribution, Load, LoadConfig};

#[path = "need.rs"]
mod need_tool;
use need_tool::need;

const CONNECTIONS: usize = 8;
const KEYS: usize = 100_000;
const VALUE: usize = 100;
const ROUNDS: usize = 3;

struct Redis(Child);

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    let [port] = soak::net::ports::free().expect("a free port on 127.0.0.1");
    port
}

/// redis-benchmark's requests per second for one test.
fn redis_benchmark(port: u16, test: &str, pipeline: usize) -> f64 {
    let requests = if pipeline == 1 { 200_000 } else { 2_000_000 };
    let out = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-c", &CONNECTIONS.to_string(), "-P", &pipeline.to_string()])
        .args(["-d", &VALUE.to_string(), "-r", &KEYS.to_string()])
        .args(["-n", &requests.to_string(), "-t", test, "--csv", "-q"])
        .output()
        .expect("redis-benchmark runs");
    let text = String::from_utf8_lossy(&out.stdout);
    // "test","rps",...: the line of the test, its second field.
    text.lines()
        .find(|l| l.to_ascii_lowercase().starts_with(&format!("\"{test}\"")))
        .and_then(|l| l.split(',').nth(1))
        .and_then(|v| v.trim_matches('"').parse().ok())
        .unwrap_or_else(|| panic!("no figure from redis-benchmark: {text}"))
}

/// soak's closed loop for `secs`, after filling the keys (for GETs).
async fn soak(
    port: u16,
    test: &str,
    pipeline: usize,
    secs: f64,
    history: Option<&std::path::Path>,
) -> f64 {
    let cfg = LoadConfig {
        protocol: soak::protocol::Spec::Resp(soak::protocol::resp::Spec {
            target: format!("127.0.0.1:{port}"),
        }),
        keys: KEYS,
        value_size: (VALUE, VALUE),
        compressibility: None,
        set: if test == "set" { 1.0 } else { 0.0 },
        get: if test == "get" { 1.0 } else { 0.0 },
        del: 0.0,
        mget: 0.0,
        mget_keys: 1,
        rate: None,
        pipeline,
        connections: CONNECTIONS,
        timeout: Duration::from_secs(5),
        seed: 1,
        distribution: Distribution::Uniform,
        members: vec![],
        rotate: false,
    };
    let mut engine = Load::new(cfg);
    if let Some(h) = history {
        engine
            .record_history(h, std::time::Instant::now())
            .expect("a history file");
    }
    if test == "get" {
        engine.fill().await;
    }
    engine.resume();
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    engine.pause().await;
    let s = engine.stats();
    if let Some(w) = engine.finish_history() {
        assert!(w.error.is_none(), "{:?}", w.error);
        assert!(
            w.ops >= s.ops_ok(),
            "every request recorded: {} of {}",
            w.ops,
            s.ops_ok()
        );
    }
    assert_eq!(s.errors, 0, "soak's load had errors");
    assert_eq!(s.corrupted_reads, 0, "soak read values it never wrote");
    s.ops_per_s()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    need("redis-server", "redis-server");
    need("redis-benchmark", "redis-tools");
    let secs: f64 = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("seconds per soak run"))
        .unwrap_or(4.0);
    let port = free_port();
    let dir = tempfile::tempdir().expect("a temporary folder");
    let _redis = Redis(
        Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server starts"),
    );
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let history = dir.path().join("history.bin.gz");
    println!("| test | pipeline | redis-benchmark ops/s | soak ops/s | ratio | soak, history recorded | ratio | with / without |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for pipeline in [1, 16] {
        for test in ["set", "get"] {
            let (mut theirs, mut ours, mut recorded) = (vec![], vec![], vec![]);
            for _ in 0..ROUNDS {
                theirs.push(redis_benchmark(port, test, pipeline));
                ours.push(soak(port, test, pipeline, secs, None).await);
                recorded.push(soak(port, test, pipeline, secs, Some(&history)).await);
            }
            let (t, o, r) = (median(theirs), median(ours), median(recorded));
            println!(
                "| {} | {pipeline} | {t:.0} | {o:.0} | {:.2}x | {r:.0} | {:.2}x | {:.3} |",
                test.to_uppercase(),
                o / t,
                r / t,
                r / o
            );
        }
    }
}
