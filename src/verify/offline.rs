//! Offline verification of a RocksDB data directory while its node is
//! stopped: opened read-only with every column family, every block's
//! checksum verified, the keys counted (and, for soak-node's layout, judged
//! against the ledger), the SST files summed by level and by compression,
//! and the OPTIONS file read so that two inspections can be compared.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use rocksdb::{AsRawPtr, Options, ReadOptions, DB};

use crate::model::{Inspection, Integrity};
use crate::oracle::Ledger;

/// The compression an SST file's table properties name: `Snappy`, `LZ4`,
/// `NoCompression`... The metaindex block (written with a restart interval
/// of 1: keys whole) gives the properties block's handle; the properties
/// block is read entry by entry (its keys prefix-compressed). RocksDB 7.x
/// writes the name (`Snappy`); 9.x and later `BuiltinV2;04;`, the types
/// used in hex, which are mapped back to names.
pub fn sst_compression(path: &Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    const META: &[u8] = b"rocksdb.properties";
    // Only the file's tail (metaindex, footer) and its properties block
    // are read, not the data blocks before them.
    let mut file = std::fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let tail_at = len.saturating_sub(64 << 10);
    let mut tail = Vec::new();
    file.seek(SeekFrom::Start(tail_at)).ok()?;
    file.read_to_end(&mut tail).ok()?;
    let mut from = 0;
    let (offset, size) = loop {
        let at = from + find(&tail[from..], META)?;
        from = at + 1;
        if at >= 3 && tail[at - 3] == 0 && tail[at - 2] == META.len() as u8 {
            let mut pos = at + META.len();
            let offset = varint(&tail, &mut pos)?;
            let size = varint(&tail, &mut pos)? as usize;
            break (offset, size);
        }
    };
    let mut block = vec![0; size];
    match offset.checked_sub(tail_at) {
        Some(at) => block.copy_from_slice(tail.get(at as usize..at as usize + size)?),
        None => {
            file.seek(SeekFrom::Start(offset)).ok()?;
            file.read_exact(&mut block).ok()?;
        }
    }
    let block = &block[..];
    let restarts = u32::from_le_bytes(block.get(size - 4..)?.try_into().ok()?) as usize;
    let end = size.checked_sub(4 + 4 * restarts)?;
    let (mut pos, mut key) = (0, Vec::new());
    while pos < end {
        let shared = varint(block, &mut pos)? as usize;
        let non_shared = varint(block, &mut pos)? as usize;
        let value_len = varint(block, &mut pos)? as usize;
        key.truncate(shared);
        key.extend_from_slice(block.get(pos..pos + non_shared)?);
        pos += non_shared;
        let value = block.get(pos..pos + value_len)?;
        pos += value_len;
        if key == b"rocksdb.compression" {
            return Some(compression_name(&String::from_utf8_lossy(value)));
        }
    }
    None
}

/// `Snappy` as is; `BuiltinV2;01;` (RocksDB 9+: the compression types the
/// file's blocks use, in hex) as names; `BuiltinV2;;` (no block
/// compressed) as `NoCompression`.
fn compression_name(v: &str) -> String {
    let Some((_, types)) = v.split_once(';') else {
        return v.to_string();
    };
    let names: Vec<&str> = types
        .trim_end_matches(';')
        .as_bytes()
        .chunks(2)
        .filter_map(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok())
        .map(|t| match t {
            0 => "NoCompression",
            1 => "Snappy",
            2 => "Zlib",
            3 => "BZip2",
            4 => "LZ4",
            5 => "LZ4HC",
            6 => "Xpress",
            7 => "ZSTD",
            _ => "unknown",
        })
        .collect();
    if names.is_empty() {
        // No block of the file was compressed.
        "NoCompression".to_string()
    } else {
        names.join("+")
    }
}

fn varint(b: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*pos)?;
        *pos += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Some(v);
        }
    }
    None
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The newest `OPTIONS-*` file of `dir`, flattened to `section.option`.
pub fn read_options(dir: &Path) -> (Option<String>, BTreeMap<String, String>) {
    let newest = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("OPTIONS-"))
        .filter(|e| !e.file_name().to_string_lossy().ends_with(".dbtmp"))
        .max_by_key(|e| {
            e.file_name()
                .to_string_lossy()
                .trim_start_matches("OPTIONS-")
                .parse::<u64>()
                .unwrap_or(0)
        });
    let Some(file) = newest else {
        return (None, BTreeMap::new());
    };
    let text = std::fs::read_to_string(file.path()).unwrap_or_default();
    let mut section = String::new();
    let mut out = BTreeMap::new();
    let mut version = None;
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line.starts_with('[') {
            section = line.trim_matches(|c| c == '[' || c == ']').to_string();
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            let (k, v) = (k.trim(), v.trim());
            if k == "rocksdb_version" {
                version = Some(v.to_string());
            }
            flatten(&mut out, format!("{section}.{k}"), v);
        }
    }
    (version, out)
}

/// One option into `out`; a struct value (`{a=1;b=2;}`) as one entry per
/// field (`key.a`, `key.b`), so that a field a newer version adds shows as
/// new rather than as a change of the whole struct.
fn flatten(out: &mut BTreeMap<String, String>, key: String, value: &str) {
    let Some(inner) = value
        .strip_prefix('{')
        .and_then(|v| v.strip_suffix('}'))
        .filter(|_| value.len() > 2)
    else {
        out.insert(key, value.to_string());
        return;
    };
    let (mut depth, mut start) = (0i32, 0);
    let mut fields = vec![];
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ';' if depth == 0 => {
                fields.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    fields.push(&inner[start..]);
    for f in fields.into_iter().filter(|f| !f.trim().is_empty()) {
        match f.split_once('=') {
            Some((k, v)) => flatten(out, format!("{key}.{}", k.trim()), v.trim()),
            None => {
                out.insert(key.clone(), value.to_string());
                return;
            }
        }
    }
}

/// Options that differ between two inspections: (option, before, after).
pub fn options_diff(
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
) -> Vec<(String, Option<String>, Option<String>)> {
    let mut keys: Vec<&String> = before.keys().chain(after.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| before.get(*k) != after.get(*k))
        .map(|k| (k.clone(), before.get(k).cloned(), after.get(k).cloned()))
        .collect()
}

/// Inspects the database in `dir` (its node stopped). With a ledger, every
/// key the ledger knows is judged as `soak-node` stores it: the RESP key
/// as the RocksDB key of the default column family, the value as is.
pub fn inspect(dir: &Path, ledger: Option<&Ledger>) -> Result<Inspection, String> {
    inspect_with(dir, ledger, true)
}

/// The live SST files by level and by compression.
fn count_files(dir: &Path, live: &[rocksdb::LiveFile], out: &mut Inspection) {
    for f in live {
        let compression = sst_compression(&dir.join(f.name.trim_start_matches('/')))
            .unwrap_or_else(|| "unknown".into());
        for g in [
            out.levels.entry(format!("L{}", f.level)).or_default(),
            out.compression.entry(compression).or_default(),
        ] {
            g.files += 1;
            g.bytes += f.size as u64;
            g.entries += f.num_entries;
        }
    }
}

/// The key space of a column family split at its SST files' first keys,
/// one range per thread.
fn key_ranges(live: &[rocksdb::LiveFile], cf_name: &str, threads: usize) -> Vec<KeyRange> {
    let mut starts: Vec<Vec<u8>> = live
        .iter()
        .filter(|f| f.column_family_name == cf_name)
        .filter_map(|f| f.start_key.clone())
        .collect();
    starts.sort();
    starts.dedup();
    let splits: Vec<Vec<u8>> = (1..threads)
        .filter_map(|t| starts.get(t * starts.len() / threads).cloned())
        .filter(|k| Some(k) != starts.first())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut bounds: Vec<KeyRange> = vec![];
    let mut lower = None;
    for s in &splits {
        bounds.push((lower.clone(), Some(s.clone())));
        lower = Some(s.clone());
    }
    bounds.push((lower, None));
    bounds
}

/// Reads every key of one range of a column family (checking each block
/// when `checksums`), judging each against the ledger where `judged` gives
/// one (and marking it seen): the keys read, what was found, RocksDB's
/// error.
fn scan_range(
    db: &DB,
    cf: &impl rocksdb::AsColumnFamilyRef,
    range: KeyRange,
    checksums: bool,
    judged: Option<(&Ledger, &Vec<AtomicBool>)>,
) -> (u64, Integrity, Option<String>) {
    let mut ro = ReadOptions::default();
    ro.set_verify_checksums(checksums);
    ro.fill_cache(false);
    ro.set_readahead_size(4 << 20);
    let (lo, hi) = range;
    if let Some(lo) = lo {
        ro.set_iterate_lower_bound(lo);
    }
    if let Some(hi) = hi {
        ro.set_iterate_upper_bound(hi);
    }
    let mut it = db.raw_iterator_cf_opt(cf, ro);
    it.seek_to_first();
    let (mut n, mut found) = (0u64, Integrity::default());
    while it.valid() {
        n += 1;
        if let Some((l, seen)) = judged {
            if let Some(k) = it
                .key()
                .and_then(Ledger::parse_key)
                .filter(|k| *k < l.keys())
            {
                seen[k].store(true, Relaxed);
                found.count(l.judge(k, l.decode(k, it.value())));
            }
        }
        it.next();
    }
    (n, found, it.status().err().map(|e| e.to_string()))
}

/// [`inspect`], with the checksum verification optional: a database whose
/// node runs can be opened read-only for its statistics, but compactions
/// delete files under a verification.
pub fn inspect_with(
    dir: &Path,
    ledger: Option<&Ledger>,
    checksums: bool,
) -> Result<Inspection, String> {
    let mut out = Inspection {
        size_bytes: crate::telemetry::disk_usage(dir),
        ..Inspection::default()
    };
    (out.rocksdb_version, out.options) = read_options(dir);
    let mut opts = Options::default();
    // Read where the page cache holds the files, no copies (the scan is
    // ~1.3x faster here). SST files are never truncated, only deleted,
    // which leaves a mapping readable.
    opts.set_allow_mmap_reads(true);
    let cfs = DB::list_cf(&opts, dir)
        .map_err(|e| format!("{}: not a RocksDB database: {e}", dir.display()))?;
    let db = DB::open_cf_for_read_only(&opts, dir, &cfs, false)
        .map_err(|e| format!("cannot open {} read-only: {e}", dir.display()))?;
    out.column_families = cfs.clone();

    // Every block of every live SST file, against its checksum.
    let live = db.live_files().map_err(|e| e.to_string())?;
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 8);
    let began = std::time::Instant::now();
    if checksums {
        let mut files: Vec<_> = live.iter().collect();
        files.sort_by_key(|f| std::cmp::Reverse(f.size));
        let paths: Vec<_> = files
            .iter()
            .map(|f| dir.join(f.name.trim_start_matches('/')))
            .collect();
        out.corruption = verify_files(&paths, threads);
        // Blob files (BlobDB) are not SSTs: RocksDB's own walk covers them.
        if out.corruption.is_none() && has_blob_files(dir) {
            out.corruption = verify_db(&db);
        }
    }
    out.checksum_s = began.elapsed().as_secs_f64();
    count_files(dir, &live, &mut out);

    let began = std::time::Instant::now();
    let seen: Option<Vec<AtomicBool>> =
        ledger.map(|l| (0..l.keys()).map(|_| AtomicBool::new(false)).collect());
    let mut found = Integrity::default();
    for cf_name in &cfs {
        let cf = db
            .cf_handle(cf_name)
            .ok_or_else(|| format!("column family {cf_name} vanished"))?;
        let bounds = key_ranges(&live, cf_name, threads);
        let judge_here = cf_name == "default";
        let results: Vec<(u64, Integrity, Option<String>)> = std::thread::scope(|scope| {
            let handles: Vec<_> = bounds
                .into_iter()
                .map(|(lo, hi)| {
                    let (db, cf, seen) = (&db, &cf, seen.as_ref());
                    scope.spawn(move || {
                        let judged = ledger.zip(seen).filter(|_| judge_here);
                        scan_range(db, cf, (lo, hi), checksums, judged)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a scan thread"))
                .collect()
        });
        let mut n = 0;
        for (count, f, err) in results {
            n += count;
            found.add(&f);
            if let Some(e) = err {
                out.corruption.get_or_insert(e);
            }
        }
        out.keys.insert(cf_name.clone(), n);
    }
    if let (Some(l), Some(seen)) = (ledger, seen) {
        for (k, s) in seen.iter().enumerate() {
            if !s.load(Relaxed) {
                found.count(l.judge(k, l.decode(k, None)));
            }
        }
        out.integrity = Some(found);
    }
    out.scan_s = began.elapsed().as_secs_f64();
    Ok(out)
}

extern "C" {
    /// src/verify/sst_verify.cc: `NULL`, or RocksDB's error (malloc'd).
    fn soak_verify_sst(path: *const libc::c_char) -> *mut libc::c_char;
}

/// Every block checksum of every file, the files shared among `threads`
/// (largest first, so that one big file does not finish last alone).
/// RocksDB verifies a whole database on one thread; a file at a time is
/// what lets the cores share the work. The first corruption, in `paths`'
/// order, is returned.
fn verify_files(paths: &[std::path::PathBuf], threads: usize) -> Option<String> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut found: Vec<(usize, String)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads.min(paths.len()))
            .map(|_| {
                scope.spawn(|| {
                    let mut bad = vec![];
                    loop {
                        let i = next.fetch_add(1, Relaxed);
                        let Some(path) = paths.get(i) else { break };
                        if let Some(e) = verify_sst(path) {
                            bad.push((i, e));
                        }
                    }
                    bad
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a checksum thread"))
            .collect()
    });
    found.sort();
    found.into_iter().next().map(|(_, e)| e)
}

/// One SST file's block checksums, by RocksDB's table reader.
fn verify_sst(path: &Path) -> Option<String> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: a NUL-terminated path in; NULL or a malloc'd C string out.
    unsafe { take_error(soak_verify_sst(c.as_ptr())) }
}

/// The database's own verification (one thread over every file).
fn verify_db(db: &DB) -> Option<String> {
    let mut err: *mut libc::c_char = std::ptr::null_mut();
    // SAFETY: the read options live across the call; the error is taken.
    unsafe {
        let ro = librocksdb_sys::rocksdb_readoptions_create();
        librocksdb_sys::rocksdb_readoptions_set_readahead_size(ro, 8 << 20);
        librocksdb_sys::rocksdb_readoptions_set_fill_cache(ro, 0);
        librocksdb_sys::rocksdb_verify_checksum_with_options(db.as_raw_ptr(), ro, &mut err);
        librocksdb_sys::rocksdb_readoptions_destroy(ro);
        take_error(err)
    }
}

/// A C error string as an owned message, freed.
///
/// # Safety
/// `err` is NULL or a string from malloc.
unsafe fn take_error(err: *mut libc::c_char) -> Option<String> {
    if err.is_null() {
        return None;
    }
    let msg = std::ffi::CStr::from_ptr(err).to_string_lossy().into_owned();
    libc::free(err as *mut libc::c_void);
    Some(msg)
}

fn has_blob_files(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .any(|e| e.path().extension().is_some_and(|x| x == "blob"))
        })
        .unwrap_or(false)
}

/// A scan's lower (inclusive) and upper (exclusive) key, open where `None`.
type KeyRange = (Option<Vec<u8>>, Option<Vec<u8>>);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_struct_option_is_compared_field_by_field() {
        let (mut old, mut new) = (BTreeMap::new(), BTreeMap::new());
        flatten(
            &mut old,
            "cf.compression_opts".into(),
            "{level=32767;enabled=false;}",
        );
        flatten(
            &mut new,
            "cf.compression_opts".into(),
            "{checksum=false;level=32767;enabled=true;nested={a=1;};}",
        );
        let diff = options_diff(&old, &new);
        let some = |s: &str| Some(s.to_string());
        assert_eq!(
            diff,
            vec![
                ("cf.compression_opts.checksum".into(), None, some("false")),
                (
                    "cf.compression_opts.enabled".into(),
                    some("false"),
                    some("true")
                ),
                ("cf.compression_opts.nested.a".into(), None, some("1")),
            ]
        );
        // Plain values, and a value that only looks like a struct, as is.
        let mut m = BTreeMap::new();
        flatten(&mut m, "k".into(), "kLZ4Compression");
        flatten(&mut m, "e".into(), "{}");
        flatten(&mut m, "odd".into(), "{no fields}");
        assert_eq!(m["k"], "kLZ4Compression");
        assert_eq!(m["e"], "{}");
        assert_eq!(m["odd"], "{no fields}");
    }
}
