//! Offline verification of a data directory written by soak-node: a clean
//! pass, a missing key reported as lost, a flipped byte in an SST data
//! block reported with its file.

use crate::common;

use std::path::Path;

use common::Node;
use soak::oracle::Ledger;
use soak::verify::offline;

const KEYS: usize = 3000;

/// Writes every key through soak-node (Snappy), acknowledged in the ledger,
/// then stops the node gracefully (memtables flushed to SSTs).
fn written(dir: &Path) -> Ledger {
    let ledger = Ledger::new(KEYS, (200, 400), 1.0, 0.0, 5);
    let node = Node::start(dir, &["--compression", "snappy"], &[]);
    let client = redis::Client::open(node.url()).unwrap();
    let mut con = client.get_connection().unwrap();
    let mut pipe = redis::pipe();
    let mut versions = vec![];
    for k in 0..KEYS {
        let v = ledger.next_set_version(k);
        pipe.cmd("SET")
            .arg(Ledger::key_name(k))
            .arg(ledger.value(k, v))
            .ignore();
        versions.push((k, v));
    }
    pipe.query::<()>(&mut con).unwrap();
    for (k, v) in versions {
        ledger.ack(k, v);
    }
    assert!(node.sigterm().success());
    ledger
}

#[test]
fn a_clean_database_passes_with_every_key_and_its_sst_statistics() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = written(dir.path());
    let i = offline::inspect(dir.path(), Some(&ledger)).unwrap();
    assert_eq!(i.corruption, None);
    // The same from the command line, with the ledger a run saves.
    let saved = dir.path().join("..").join(format!(
        "ledger-{}.bin",
        dir.path().file_name().unwrap().to_string_lossy()
    ));
    ledger.save(&saved, true).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_soak"))
        .arg("inspect")
        .arg(dir.path())
        .arg("--ledger")
        .arg(&saved)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&saved);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains(&format!("ledger: {KEYS} as expected, 0 lost")),
        "{text}"
    );
    assert_eq!(i.keys["default"], KEYS as u64);
    let found = i.integrity.unwrap();
    assert_eq!(
        (found.verified, found.lost, found.corrupted),
        (KEYS as u64, 0, 0)
    );
    // The SSTs soak-node wrote with Snappy, counted as such.
    let snappy = &i.compression["Snappy"];
    assert!(
        snappy.files >= 1 && snappy.entries == KEYS as u64,
        "{:?}",
        i.compression
    );
    assert_eq!(
        i.levels.values().map(|g| g.files).sum::<u64>(),
        snappy.files
    );
    assert_eq!(i.rocksdb_version.as_deref().map(|v| &v[..3]), Some("11."));
    assert_eq!(
        i.options["CFOptions \"default\".compression"],
        "kSnappyCompression"
    );
}

#[test]
fn a_key_the_node_never_kept_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = written(dir.path());
    // The ledger says one more write was acknowledged than the node holds.
    let k = 17;
    let v = ledger.next_set_version(k);
    ledger.ack(k, v);
    let found = offline::inspect(dir.path(), Some(&ledger))
        .unwrap()
        .integrity
        .unwrap();
    assert_eq!(found.lost, 1, "{found:?}");
    assert_eq!(found.verified, KEYS as u64 - 1);
}

#[test]
fn a_flipped_byte_in_an_sst_data_block_is_reported_with_its_file() {
    let dir = tempfile::tempdir().unwrap();
    written(dir.path());
    let sst = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "sst"))
        .unwrap();
    let mut bytes = std::fs::read(&sst).unwrap();
    // Data blocks come first in an SST file.
    bytes[100] ^= 0x40;
    std::fs::write(&sst, bytes).unwrap();
    let i = offline::inspect(dir.path(), None).unwrap();
    let c = i.corruption.expect("the flipped byte is found");
    let name = sst.file_name().unwrap().to_string_lossy().into_owned();
    assert!(c.contains(&name), "{c}");
    assert!(c.to_lowercase().contains("corruption"), "{c}");
    // `soak inspect` says the same and exits 1.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_soak"))
        .arg("inspect")
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&name));
}

/// `ldb` of Debian's RocksDB 7.8 (rocksdb-tools) on `dir`.
fn ldb(dir: &Path, args: &[&str], stdin: Option<&[u8]>) -> std::process::Output {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("ldb")
        .arg(format!("--db={}", dir.display()))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    if let Some(b) = stdin {
        input.write_all(b).unwrap();
    }
    drop(input);
    child.wait_with_output().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_database_written_by_rocksdb_7_8_is_served_by_soak_node_and_the_downgrade_is_refused() {
    common::require_tool("ldb", "rocksdb-tools");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path();
    // Written by Debian's RocksDB 7.8: every key through `ldb load`, then
    // compacted into SST files.
    let ledger = Ledger::new(KEYS, (100, 300), 1.0, 0.0, 11);
    let mut lines = Vec::new();
    for k in 0..KEYS {
        let v = ledger.next_set_version(k);
        lines.extend_from_slice(Ledger::key_name(k).as_bytes());
        lines.extend_from_slice(b" ==> ");
        lines.extend_from_slice(&ledger.value(k, v));
        lines.push(b'\n');
        ledger.ack(k, v);
    }
    let load = ldb(db, &["--create_if_missing", "load"], Some(&lines));
    assert!(load.status.success(), "{load:?}");
    assert!(ldb(db, &["compact"], None).status.success());

    // Read offline by soak's RocksDB 11.8: all there, written by 7.8.
    let before = offline::inspect(db, Some(&ledger)).unwrap();
    assert_eq!(before.rocksdb_version.as_deref(), Some("7.8.3"));
    assert_eq!(before.corruption, None);
    let found = before.integrity.unwrap();
    assert_eq!((found.verified, found.lost), (KEYS as u64, 0), "{found:?}");
    assert!(
        before.compression.keys().all(|c| c != "unknown"),
        "{:?}",
        before.compression
    );

    // Opened and served by soak-node (RocksDB 11.8), read back over RESP.
    let node = Node::start(db, &[], &[]);
    let online = soak::verify::online(
        &soak::protocol::resp::Spec {
            target: node.resp.clone(),
        },
        &ledger,
        std::time::Duration::from_secs(5),
        None,
        None,
        None,
        |_, _| {},
    )
    .await
    .unwrap()
    .integrity;
    assert_eq!(
        (online.verified, online.lost, online.corrupted),
        (KEYS as u64, 0, 0)
    );
    // New writes by 11.8: flushed at the stop into an SST of its format.
    let client = redis::Client::open(node.url()).unwrap();
    let mut con = client.get_connection().unwrap();
    redis::cmd("SET")
        .arg("after:upgrade")
        .arg("x")
        .query::<()>(&mut con)
        .unwrap();
    drop(con);
    assert!(node.sigterm().success());
    let after = offline::inspect(db, None).unwrap();
    assert!(after.rocksdb_version.as_deref().unwrap().starts_with("11."));
    let changed = offline::options_diff(&before.options, &after.options);
    assert!(
        changed
            .iter()
            .any(|(k, _, _)| k == "Version.rocksdb_version"),
        "{changed:?}"
    );

    // The downgrade: 7.8 refuses the database once 11.8 wrote to it, and
    // says why (before any new write, 7.8 still read it all).
    let back = ldb(db, &["--ignore_unknown_options", "scan"], None);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&back.stdout),
        String::from_utf8_lossy(&back.stderr)
    );
    assert!(!back.status.success(), "{said}");
    assert!(said.contains("unsupported format_version"), "{said}");
}
