//! `soak-node`: the reference system under test.
//!
//! A RESP2 server over RocksDB that behaves like the RocksDB-backed services
//! soak exists for: its memory depends on the block cache, the memtables and
//! the allocator; its durability on the WAL. Every storage option is on the
//! command line, and a Prometheus endpoint reports process, RocksDB and
//! allocator statistics. soak itself never assumes this node: any server
//! that speaks RESP can be driven the same way.

pub mod alloc_stats;
pub mod metrics;
pub mod resp;
pub mod server;
pub mod store;

use std::net::IpAddr;
use std::path::PathBuf;

use clap::{Args, Parser};

fn size(s: &str) -> Result<u64, String> {
    crate::units::parse_size(s).map_err(|e| e.to_string())
}

fn on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" | "true" | "yes" | "1" => Ok(true),
        "off" | "false" | "no" | "0" => Ok(false),
        _ => Err(format!("{s:?}: write on or off")),
    }
}

const CODECS: [&str; 4] = ["none", "snappy", "lz4", "zstd"];

/// Storage options. Without `--options-file` the defaults are RocksDB's own,
/// but for the block cache and the memtable size below. `--options-file` is
/// the alternative to the other storage flags (only --block-cache, --wal
/// and --sync go with it).
#[derive(Debug, Clone, Args)]
pub struct StorageArgs {
    /// Block cache capacity (LRU), e.g. 256MiB.
    #[arg(long, value_parser = size, default_value = "32MiB", help_heading = "Storage")]
    pub block_cache: u64,
    /// Keep index and filter blocks in the block cache (charged to it) instead of the heap.
    #[arg(long, num_args = 0..=1, default_missing_value = "on", value_parser = on_off, help_heading = "Storage")]
    pub cache_index_and_filter_blocks: Option<bool>,
    /// Memtable size, e.g. 64MiB [default: 16MiB, Kafka Streams' store default;
    /// RocksDB's own is 64MiB].
    #[arg(long, value_parser = size, help_heading = "Storage")]
    pub write_buffer_size: Option<u64>,
    /// Most memtables per column family.
    #[arg(long, help_heading = "Storage")]
    pub max_write_buffer_number: Option<i32>,
    /// A db-wide limit on all memtables (RocksDB's WriteBufferManager).
    #[arg(long, value_parser = size, help_heading = "Storage")]
    pub db_write_buffer_size: Option<u64>,
    /// Charge the memtables of --db-write-buffer-size to the block cache.
    #[arg(long, requires = "db_write_buffer_size", help_heading = "Storage")]
    pub write_buffer_manager_charge_cache: bool,
    /// Compression of every level but the last.
    #[arg(long, value_parser = CODECS, help_heading = "Storage")]
    pub compression: Option<String>,
    /// Compression of the last level.
    #[arg(long, value_parser = CODECS, help_heading = "Storage")]
    pub bottommost_compression: Option<String>,
    #[arg(long, value_parser = ["level", "universal", "fifo"], help_heading = "Storage")]
    pub compaction_style: Option<String>,
    /// Most open SST files (-1: unlimited).
    #[arg(long, allow_hyphen_values = true, help_heading = "Storage")]
    pub max_open_files: Option<i32>,
    /// Bloom filter bits per key (0: no filter; 10 unless an OPTIONS file says otherwise).
    #[arg(long, help_heading = "Storage")]
    pub bloom_bits: Option<f64>,
    /// Block-based table format_version.
    #[arg(long, help_heading = "Storage")]
    pub format_version: Option<i32>,
    /// Write-ahead log: with it off, a crash loses every write not yet flushed.
    #[arg(long, value_parser = on_off, action = clap::ArgAction::Set, default_value = "on", help_heading = "Storage")]
    pub wal: bool,
    /// fsync the WAL before acknowledging each write.
    #[arg(long, value_parser = on_off, action = clap::ArgAction::Set, default_value = "off", help_heading = "Storage")]
    pub sync: bool,
    /// RocksDB background jobs (flushes and compactions).
    #[arg(long, help_heading = "Storage")]
    pub background_jobs: Option<i32>,
    /// O_DIRECT for flushes' and compactions' writes and reads
    /// (use_direct_io_for_flush_and_compaction).
    #[arg(long, value_parser = on_off, action = clap::ArgAction::Set, help_heading = "Storage")]
    pub direct_io_for_flush_and_compaction: Option<bool>,
    /// O_DIRECT for user reads (use_direct_reads): the block cache is then
    /// the only cache of the SST files.
    #[arg(long, value_parser = on_off, action = clap::ArgAction::Set, help_heading = "Storage")]
    pub direct_reads: Option<bool>,
    /// A RocksDB OPTIONS file to take database and column family options
    /// from, instead of the storage flags above.
    #[arg(long, help_heading = "Storage")]
    pub options_file: Option<PathBuf>,
}

impl StorageArgs {
    /// The storage flags given that an OPTIONS file would also set.
    pub fn flags_given(&self) -> Vec<&'static str> {
        [
            (
                self.cache_index_and_filter_blocks.is_some(),
                "--cache-index-and-filter-blocks",
            ),
            (self.write_buffer_size.is_some(), "--write-buffer-size"),
            (
                self.max_write_buffer_number.is_some(),
                "--max-write-buffer-number",
            ),
            (
                self.db_write_buffer_size.is_some(),
                "--db-write-buffer-size",
            ),
            (self.compression.is_some(), "--compression"),
            (
                self.bottommost_compression.is_some(),
                "--bottommost-compression",
            ),
            (self.compaction_style.is_some(), "--compaction-style"),
            (self.max_open_files.is_some(), "--max-open-files"),
            (self.bloom_bits.is_some(), "--bloom-bits"),
            (self.format_version.is_some(), "--format-version"),
            (self.background_jobs.is_some(), "--background-jobs"),
            (
                self.direct_io_for_flush_and_compaction.is_some(),
                "--direct-io-for-flush-and-compaction",
            ),
            (self.direct_reads.is_some(), "--direct-reads"),
        ]
        .into_iter()
        .filter_map(|(given, name)| given.then_some(name))
        .collect()
    }
}

#[derive(Debug, Clone, Parser)]
#[command(
    name = "soak-node",
    version,
    about = "A RESP server over RocksDB: the reference node under test for soak",
    after_help = "Prints `soak-node ready: resp=ADDR metrics=ADDR allocator=NAME` on stdout once it serves.\nSIGTERM or SIGINT: flush memtables and the WAL, close, exit 0."
)]
pub struct NodeArgs {
    /// Directory of the RocksDB database (created if missing).
    #[arg(long)]
    pub data_dir: PathBuf,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: IpAddr,
    /// RESP port (0: any free port, printed when ready).
    #[arg(long, default_value_t = 6379)]
    pub port: u16,
    /// Prometheus endpoint port, serving /metrics (0: any free port).
    #[arg(long)]
    pub metrics_port: Option<u16>,
    /// Threads that serve connections (default: one per core).
    #[arg(long)]
    pub worker_threads: Option<usize>,
    #[command(flatten)]
    pub storage: StorageArgs,
}
