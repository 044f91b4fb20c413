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
//! Then a second table, file I/O with no node (`faultfs files` prints only
//! it): 4 KiB writes buffered with an fdatasync every 16, 4 KiB writes with
//! O_DIRECT, and O_DIRECT reads of what was written, on the plain folder
//! and on both mounts: MiB/s, the median of three rounds.
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

/// A block-aligned buffer, as O_DIRECT needs.
struct Aligned(*mut u8, std::alloc::Layout);

impl Aligned {
    fn new(len: usize) -> Aligned {
        let layout = std::alloc::Layout::from_size_align(len, 4096).expect("a layout");
        // SAFETY: a non-zero layout, freed in Drop.
        Aligned(unsafe { std::alloc::alloc_zeroed(layout) }, layout)
    }
    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: the allocation's length, zeroed at birth.
        unsafe { std::slice::from_raw_parts_mut(self.0, self.1.size()) }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: allocated in new() with this layout.
        unsafe { std::alloc::dealloc(self.0, self.1) }
    }
}

/// MiB/s of one file workload in `dir`: `kind` is "buffered" (4 KiB writes,
/// fdatasync every 16), "direct write" or "direct read".
fn file_io(dir: &Path, kind: &str, mib: usize) -> f64 {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let p = dir.join("io");
    let direct = kind != "buffered";
    let mut o = std::fs::OpenOptions::new();
    o.create(true).read(true).write(true);
    if direct {
        o.custom_flags(libc::O_DIRECT);
    }
    let f = o.open(&p).expect("open");
    let mut buf = Aligned::new(4096);
    buf.bytes().fill(7);
    let blocks = mib * 256;
    let t = std::time::Instant::now();
    for i in 0..blocks {
        let off = (i * 4096) as u64;
        if kind == "direct read" {
            f.read_exact_at(buf.bytes(), off).expect("read");
        } else {
            f.write_all_at(buf.bytes(), off).expect("write");
            if !direct && i % 16 == 15 {
                f.sync_data().expect("fdatasync");
            }
        }
    }
    mib as f64 / t.elapsed().as_secs_f64()
}

fn files_table(work: &Path) {
    println!();
    println!("| file I/O | plain MiB/s | writes through | ratio | writeback cache | ratio |");
    println!("|---|---:|---:|---:|---:|---:|");
    let through = Mounted::mount(
        &work.join("t.files"),
        &work.join("t"),
        "bench",
        1,
        None,
        Writes::Through,
    )
    .expect("mount the fault filesystem (root and /dev/fuse)");
    let cached = Mounted::mount(
        &work.join("c.files"),
        &work.join("c"),
        "bench",
        1,
        None,
        Writes::Cached,
    )
    .expect("mount the fault filesystem (root and /dev/fuse)");
    let plain = work.join("plain-files");
    std::fs::create_dir_all(&plain).expect("a folder");
    let dirs = [plain.clone(), work.join("t"), work.join("c")];
    for kind in ["buffered", "direct write", "direct read"] {
        let mut rates = [vec![], vec![], vec![]];
        for _ in 0..ROUNDS {
            for (d, r) in dirs.iter().zip(rates.iter_mut()) {
                r.push(file_io(d, kind, 64));
            }
        }
        let [a, b, c] = rates.map(median);
        println!(
            "| {kind} | {a:.0} | {b:.0} | {:.2} | {c:.0} | {:.2} |",
            b / a,
            c / a
        );
    }
    drop((through, cached));
}

fn main() {
    let work = tempfile::tempdir().expect("a temporary folder");
    if std::env::args().nth(1).as_deref() == Some("files") {
        files_table(work.path());
        return;
    }
    need("redis-benchmark", "redis-tools");
    let requests: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("a number of requests"))
        .unwrap_or(100_000);
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
    files_table(work.path());
}
