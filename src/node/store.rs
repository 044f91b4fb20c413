//! The node's storage: RocksDB opened with the options from the command line
//! or from a RocksDB OPTIONS file, and the properties the metrics report.

use std::path::{Path, PathBuf};

use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamilyDescriptor, DBCompactionStyle, DBCompressionType, Env,
    Options, WriteBufferManager, WriteOptions, DB,
};

use super::StorageArgs;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open RocksDB at {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: rocksdb::Error,
    },
    #[error("cannot read the RocksDB OPTIONS file {path}: {reason}")]
    OptionsFile { path: PathBuf, reason: String },
}

/// An open database and what the node needs to serve and report on it.
pub struct Store {
    pub db: DB,
    pub wal: bool,
    pub sync: bool,
    pub rocksdb_version: Option<String>,
    pub data_dir: PathBuf,
    // Kept alive for as long as the database uses them.
    _cache: Cache,
    _wbm: Option<WriteBufferManager>,
}

pub fn compression(name: &str) -> Option<DBCompressionType> {
    Some(match name {
        "none" => DBCompressionType::None,
        "snappy" => DBCompressionType::Snappy,
        "lz4" => DBCompressionType::Lz4,
        "zstd" => DBCompressionType::Zstd,
        _ => return None,
    })
}

pub fn compaction_style(name: &str) -> Option<DBCompactionStyle> {
    Some(match name {
        "level" => DBCompactionStyle::Level,
        "universal" => DBCompactionStyle::Universal,
        "fifo" => DBCompactionStyle::Fifo,
        _ => return None,
    })
}

/// The memtable size without `--write-buffer-size`: Kafka Streams'
/// `RocksDBStore` default (`WRITE_BUFFER_SIZE`), the service this node most
/// often stands for. RocksDB's own 64 MiB makes every write a walk down a
/// deeper skiplist: over nine rounds, soak-node's SETs at pipeline 16 ran
/// at a median 0.49x of redis-server's rate with it and 0.65x with 16 MiB
/// (README, `bench/node-vs-redis.sh`).
const DEFAULT_WRITE_BUFFER_SIZE: u64 = 16 << 20;

/// Applies the command-line storage flags on top of `opts`.
fn apply_flags(opts: &mut Options, s: &StorageArgs, cache: &Cache) -> Option<WriteBufferManager> {
    let write_buffer = s.write_buffer_size.unwrap_or(DEFAULT_WRITE_BUFFER_SIZE);
    opts.set_write_buffer_size(write_buffer as usize);
    if let Some(v) = s.max_write_buffer_number {
        opts.set_max_write_buffer_number(v);
    }
    if let Some(c) = &s.compression {
        opts.set_compression_type(compression(c).expect("validated by clap"));
    }
    if let Some(c) = &s.bottommost_compression {
        opts.set_bottommost_compression_type(compression(c).expect("validated by clap"));
    }
    if let Some(c) = &s.compaction_style {
        opts.set_compaction_style(compaction_style(c).expect("validated by clap"));
    }
    if let Some(v) = s.max_open_files {
        opts.set_max_open_files(v);
    }
    if let Some(v) = s.background_jobs {
        opts.set_max_background_jobs(v);
    }
    if let Some(v) = s.direct_io_for_flush_and_compaction {
        opts.set_use_direct_io_for_flush_and_compaction(v);
    }
    if let Some(v) = s.direct_reads {
        opts.set_use_direct_reads(v);
    }
    let wbm = s.db_write_buffer_size.map(|limit| {
        let wbm = if s.write_buffer_manager_charge_cache {
            WriteBufferManager::new_write_buffer_manager_with_cache(
                limit as usize,
                false,
                cache.clone(),
            )
        } else {
            WriteBufferManager::new_write_buffer_manager(limit as usize, false)
        };
        opts.set_write_buffer_manager(&wbm);
        wbm
    });

    let cache_meta = s.cache_index_and_filter_blocks.unwrap_or(false);
    let bloom_bits = s.bloom_bits.unwrap_or(10.0);
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(cache);
    table.set_cache_index_and_filter_blocks(cache_meta);
    if cache_meta {
        table.set_pin_l0_filter_and_index_blocks_in_cache(true);
    }
    if bloom_bits > 0.0 {
        table.set_bloom_filter(bloom_bits, false);
    }
    if let Some(v) = s.format_version {
        table.set_format_version(v);
    }
    opts.set_block_based_table_factory(&table);
    wbm
}

/// RocksDB reads OPTIONS files only from a database directory, by their
/// name, so a user's file is copied into a scratch directory first.
fn load_options_file(
    path: &Path,
    cache: &Cache,
) -> Result<(Options, Vec<ColumnFamilyDescriptor>), StoreError> {
    let fail = |reason: String| StoreError::OptionsFile {
        path: path.to_path_buf(),
        reason,
    };
    let scratch = std::env::temp_dir().join(format!("soak-node-options-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).map_err(|e| fail(e.to_string()))?;
    let copied =
        std::fs::copy(path, scratch.join("OPTIONS-000001")).map_err(|e| fail(e.to_string()));
    let loaded = copied.and_then(|_| {
        let env = Env::new().map_err(|e| fail(e.to_string()))?;
        Options::load_latest(&scratch, env, false, cache.clone()).map_err(|e| fail(e.to_string()))
    });
    let _ = std::fs::remove_dir_all(&scratch);
    loaded
}

impl Store {
    pub fn open(data_dir: &Path, s: &StorageArgs) -> Result<Store, StoreError> {
        let cache = Cache::new_lru_cache(s.block_cache as usize);
        // An OPTIONS file is an alternative to the flags: it carries the
        // options of every column family, which the flags cannot.
        let (mut opts, mut descriptors, wbm) = match &s.options_file {
            Some(p) => {
                let given = s.flags_given();
                if !given.is_empty() {
                    return Err(StoreError::OptionsFile {
                        path: p.clone(),
                        reason: format!(
                            "--options-file and {} are alternatives: put the option in the file",
                            given.join(", ")
                        ),
                    });
                }
                let (opts, cfs) = load_options_file(p, &cache)?;
                (opts, cfs, None)
            }
            None => {
                let mut opts = Options::default();
                let wbm = apply_flags(&mut opts, s, &cache);
                (opts, vec![], wbm)
            }
        };
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);

        // A database may hold column families (written by another tool or
        // version); all of them must be named to open it.
        if let Ok(existing) = DB::list_cf(&opts, data_dir) {
            for cf in existing {
                if !descriptors.iter().any(|d| d.name() == cf) {
                    descriptors.push(ColumnFamilyDescriptor::new(&cf, opts.clone()));
                }
            }
        }
        let db = DB::open_cf_descriptors(&opts, data_dir, descriptors).map_err(|source| {
            StoreError::Open {
                path: data_dir.to_path_buf(),
                source,
            }
        })?;
        let rocksdb_version = read_options_version(data_dir);
        Ok(Store {
            db,
            wal: s.wal,
            sync: s.sync,
            rocksdb_version,
            data_dir: data_dir.to_path_buf(),
            _cache: cache,
            _wbm: wbm,
        })
    }

    /// Write options for one connection (`WriteOptions` is not `Sync`).
    pub fn write_options(&self) -> WriteOptions {
        let mut w = WriteOptions::default();
        w.disable_wal(!self.wal);
        w.set_sync(self.sync);
        w
    }

    pub fn int_property(&self, name: &str) -> Option<u64> {
        self.db.property_int_value(name).ok().flatten()
    }

    /// A full manual compaction of every column family, the bottommost
    /// level rewritten too: afterwards every file is in the current
    /// compression and table format (what `COMPACT` asks for, to measure
    /// a database's size once a migration has run its course). The
    /// memtables are flushed first, so the write-ahead log goes too. The
    /// default column family is reached without a handle: a database
    /// created by this process has none for it (`cf_handle("default")` is
    /// `None`), and COMPACT once returned at once there, compacting nothing.
    ///
    /// A compaction that fails in the background (no space for its
    /// output, say) is an error here too: RocksDB's manual compaction
    /// returns nothing, so the count of background errors is compared,
    /// and the reason read from RocksDB's LOG.
    pub fn compact_all(&self) -> Result<(), String> {
        let errors = || self.int_property("rocksdb.background-errors").unwrap_or(0);
        let before = errors();
        let mut co = rocksdb::CompactOptions::default();
        co.set_bottommost_level_compaction(rocksdb::BottommostLevelCompaction::Force);
        co.set_exclusive_manual_compaction(true);
        let e = |e: rocksdb::Error| e.to_string();
        self.db.flush().map_err(e)?;
        self.db.compact_range_opt(None::<&[u8]>, None::<&[u8]>, &co);
        for name in DB::list_cf(&Options::default(), &self.data_dir).map_err(e)? {
            if name == rocksdb::DEFAULT_COLUMN_FAMILY_NAME {
                continue;
            }
            if let Some(cf) = self.db.cf_handle(&name) {
                self.db.flush_cf(cf).map_err(e)?;
                self.db
                    .compact_range_cf_opt(cf, None::<&[u8]>, None::<&[u8]>, &co);
            }
        }
        if errors() > before {
            let why = self
                .last_background_error()
                .or_else(|| self.short_of_space())
                .unwrap_or_else(|| "see RocksDB's LOG".into());
            return Err(format!("the compaction failed in the background: {why}"));
        }
        Ok(())
    }

    /// The newest background error RocksDB's LOG names (`Background IO
    /// error IO error: No space left on device: ...`, or a compaction's
    /// `Compaction error: ...`).
    fn last_background_error(&self) -> Option<String> {
        let log = std::fs::read_to_string(self.data_dir.join("LOG")).ok()?;
        log.lines().rev().find_map(|l| {
            ["] Background ", "Compaction error: "]
                .iter()
                .find_map(|m| l.split_once(m).map(|(_, r)| r.trim().to_string()))
        })
    }

    /// When the LOG names no error (on a full disk its own lines may not
    /// be written either), the filesystem's figures can: less free than
    /// the database's table files, which a full compaction writes anew
    /// beside the old, is no space for its output.
    fn short_of_space(&self) -> Option<String> {
        let tables = self.int_property("rocksdb.total-sst-files-size")?;
        let fs = nix::sys::statvfs::statvfs(&self.data_dir).ok()?;
        let free = fs.blocks_available() * fs.fragment_size();
        let size = fs.blocks() * fs.fragment_size();
        (free < tables).then(|| {
            let mib = |b: u64| b as f64 / (1 << 20) as f64;
            format!(
                "No space left on device, by the filesystem's figures: {:.1} MiB free of {:.1} MiB, \
                 less than the {:.1} MiB of tables the compaction writes anew (RocksDB's LOG names no error)",
                mib(free),
                mib(size),
                mib(tables)
            )
        })
    }

    /// Flushes memtables and the WAL so that a clean stop leaves nothing to
    /// replay and nothing to lose, even with the WAL off.
    pub fn flush_all(&self) -> Result<(), rocksdb::Error> {
        self.db.flush()?;
        if self.wal {
            self.db.flush_wal(true)?;
        }
        Ok(())
    }
}

/// The running RocksDB's version, as it wrote it into the newest OPTIONS
/// file of the database (`rocksdb_version=11.8.1`).
fn read_options_version(dir: &Path) -> Option<String> {
    let newest = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("OPTIONS-") && !n.ends_with(".dbtmp"))
        .max_by_key(|n| n[8..].parse::<u64>().unwrap_or(0))?;
    let text = std::fs::read_to_string(dir.join(newest)).ok()?;
    text.lines()
        .find_map(|l| l.trim().strip_prefix("rocksdb_version="))
        .map(str::to_string)
}
