//! Offline verification of a data directory written by soak-node: a clean
//! pass, a missing key reported as lost, a flipped byte in an SST data
//! block reported with its file.

mod common;

use std::path::Path;

use common::Node;
use soak::verify::offline;
use soak::workload::Ledger;

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
}
