//! The cost of soak's fault filesystem when no fault is active: soak-node
//! with its data directory on the fault filesystem against soak-node on
//! the plain folder beneath, in the same run, the filesystem both ways a
//! suite gets it: every write through to soak (suites with a full disk,
//! `limits.disk` or faults on writes) and with the kernel's writeback
//! cache (power cuts and read faults). With redis-benchmark: SET
//! and GET, 8 connections, pipeline 1 and 16, 100-byte values, and SET
//! with the WAL fsynced at each write (`--sync on`). Each pair runs three
//! times, interleaved, the median kept. Prints a markdown table for
//! docs/src/benchmarks.md.
//!
//!     cargo build --bin soak-node && cargo run --example faultfs [requests, default 100000]
//!
//! Needs root and /dev/fuse (the mount), redis-benchmark (`apt-get
//! install redis-tools`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use soak::faults::disk::{Mounted, Writes};

#[path = "need.rs"]
mod need_tool;
use need_tool::need;

const ROUNDS: usize = 3;

struct Node(Child, u16);

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    let [port] = soak::net::ports::free().expect("a free port on 127.0.0.1");
    port
}

fn soak_node() -> PathBuf {
    let exe = std::env::current_exe().expect("the example's path");
    let node = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("soak-node"))
        .expect("target/debug");
    if !node.exists() {
        eprintln!("{} is missing: cargo build --bin soak-node", node.display());
        std::process::exit(3);
    }
    node
}

fn start(dir: &Path, sync: bool) -> Node {
    let port = free_port();
    let mut node = Node(
        Command::new(soak_node())
            .args(["--data-dir", &dir.display().to_string()])
            .args(["--port", &port.to_string()])
            .args(["--sync", if sync { "on" } else { "off" }])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("soak-node starts"),
        port,
    );
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return node;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = node.0.kill();
    panic!("soak-node on {} never listened", dir.display());
}

/// redis-benchmark's requests per second for one test.
fn bench(port: u16, test: &str, pipeline: usize, requests: usize) -> f64 {
    let out = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-c", "8", "-P", &pipeline.to_string()])
        .args(["-d", "100", "-r", "100000"])
        .args(["-n", &requests.to_string(), "-t", test, "--csv", "-q"])
        .output()
        .expect("redis-benchmark runs");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find(|l| l.to_ascii_lowercase().starts_with(&format!("\"{test}\"")))
        .and_then(|l| l.split(',').nth(1))
        .and_then(|f| f.trim_matches('"').parse().ok())
        .unwrap_or_else(|| panic!("redis-benchmark said: {text}"))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    need("redis-benchmark", "redis-tools");
    let requests: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("a number of requests"))
        .unwrap_or(100_000);
    let work = tempfile::tempdir().expect("a temporary folder");
    println!(
        "| test | pipeline | WAL fsynced | direct ops/s | writes through | ratio | writeback cache | ratio |"
    );
    println!("|---|---:|---|---:|---:|---:|---:|---:|");
    for (test, pipeline, sync) in [
        ("set", 1, false),
        ("set", 16, false),
        ("get", 1, false),
        ("get", 16, false),
        ("set", 1, true),
    ] {
        let tag = format!("{test}-{pipeline}-{sync}");
        let mount = |writes: Writes| {
            let at = work.path().join(format!("{writes:?}-{tag}"));
            let fs = Mounted::mount(
                &work.path().join(format!("{writes:?}-{tag}.files")),
                &at,
                "bench",
                1,
                None,
                writes,
            )
            .expect("mount the fault filesystem (root and /dev/fuse)");
            (fs, at)
        };
        let (through_fs, through_at) = mount(Writes::Through);
        let (cached_fs, cached_at) = mount(Writes::Cached);
        let nodes = [
            start(&work.path().join(format!("plain-{tag}")), sync),
            start(&through_at, sync),
            start(&cached_at, sync),
        ];
        let n = if sync { requests / 10 } else { requests };
        if test == "get" {
            // Something to read: the keys redis-benchmark's GETs ask for.
            for node in &nodes {
                bench(node.1, "set", 16, n);
            }
        }
        let mut ops = [vec![], vec![], vec![]];
        for _ in 0..ROUNDS {
            for (node, o) in nodes.iter().zip(ops.iter_mut()) {
                o.push(bench(node.1, test, pipeline, n));
            }
        }
        let [a, b, c] = ops.map(median);
        println!(
            "| {} | {pipeline} | {} | {a:.0} | {b:.0} | {:.2} | {c:.0} | {:.2} |",
            test.to_uppercase(),
            if sync { "on" } else { "off" },
            b / a,
            c / a
        );
        drop(nodes);
        drop(through_fs);
        drop(cached_fs);
    }
}
