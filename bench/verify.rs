//! soak's offline verification against Debian's RocksDB 7.8 tools on the
//! same database, in the same run: checksums against `sst_dump
//! --command=verify`, the full scan against `ldb scan`.
//!
//!     cargo run --example verify [keys, default 2000000]
//!
//! The database is written by Debian's `db_bench` 7.8 (fillseq, 300-byte
//! values, Snappy) and compacted, so that both RocksDB versions read it.
//! Each tool runs three times, interleaved; medians. The page cache is warm
//! for all of them (the first, unmeasured pass warms it).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use soak::verify::offline;

#[path = "need.rs"]
mod need_tool;
use need_tool::need;

fn timed(mut cmd: Command) -> f64 {
    let t = Instant::now();
    let st = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("the tool runs");
    assert!(st.success(), "{cmd:?} failed");
    t.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    for t in ["db_bench", "ldb", "sst_dump"] {
        need(t, "rocksdb-tools");
    }
    let keys: u64 = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("a key count"))
        .unwrap_or(2_000_000);
    let dir = tempfile::tempdir().expect("a temporary folder");
    let db = dir.path().join("db");
    let fill = Command::new("db_bench")
        .arg(format!("--db={}", db.display()))
        .args(["--benchmarks=fillseq,compact", "--value_size=300"])
        .arg(format!("--num={keys}"))
        .args(["--compression_type=snappy", "--use_existing_db=0"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("db_bench runs");
    assert!(fill.success());
    let size = soak::telemetry::disk_usage(&db);
    let dbs = db.display().to_string();
    let sst_dump = || {
        let mut c = Command::new("sst_dump");
        c.arg(format!("--file={dbs}")).arg("--command=verify");
        c
    };
    let ldb = || {
        let mut c = Command::new("ldb");
        c.arg(format!("--db={dbs}")).arg("scan");
        c
    };
    let soak = |db: &Path| offline::inspect(db, None).expect("soak reads the database");
    // Warm the page cache for everyone.
    let first = soak(&db);
    let (mut ck, mut sc, mut sd, mut ls) = (vec![], vec![], vec![], vec![]);
    for _ in 0..3 {
        let i = soak(&db);
        assert!(i.corruption.is_none());
        ck.push(i.checksum_s);
        sc.push(i.scan_s);
        sd.push(timed(sst_dump()));
        ls.push(timed(ldb()));
    }
    let (ck, sc, sd, ls) = (median(ck), median(sc), median(sd), median(ls));
    println!(
        "{} keys, {:.0} MB on disk, {} SST files, written by RocksDB {}",
        first.keys.values().sum::<u64>(),
        size as f64 / 1e6,
        first.levels.values().map(|g| g.files).sum::<u64>(),
        first.rocksdb_version.as_deref().unwrap_or("?")
    );
    println!();
    println!("| what | Debian RocksDB 7.8 tool | its time | soak | soak's time | speed-up |");
    println!("|---|---|---:|---|---:|---:|");
    println!(
        "| checksums of every block | `sst_dump --command=verify` | {sd:.2} s | RocksDB's table reader, one SST file per core at a time | {ck:.2} s | {:.2}x |",
        sd / ck
    );
    println!(
        "| every key and value | `ldb scan` | {ls:.2} s | read-only full scan | {sc:.2} s | {:.2}x |",
        ls / sc
    );
}
