//! The node's Prometheus endpoint: process, RocksDB, command and allocator
//! statistics in the text exposition format, with base units and `_total`
//! counters as Prometheus' naming conventions ask.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::alloc_stats::Allocator;
use super::store::Store;

/// Commands with their own counters; everything else counts as `other`.
pub const COMMANDS: [&str; 11] = [
    "ping", "set", "get", "del", "exists", "mget", "dbsize", "scan", "info", "flushall", "other",
];

/// Upper bounds of the latency histogram, in seconds.
pub const BUCKETS: [f64; 14] = [
    1e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 1.0,
];

#[derive(Default)]
pub struct CommandStats {
    pub count: AtomicU64,
    pub errors: AtomicU64,
    pub nanos: AtomicU64,
    pub buckets: [AtomicU64; BUCKETS.len()],
}

/// Counters shared by every connection.
pub struct Stats {
    pub commands: [CommandStats; COMMANDS.len()],
    pub connections: AtomicU64,
    pub connections_total: AtomicU64,
    pub protocol_errors_total: AtomicU64,
    pub started: Instant,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            commands: Default::default(),
            connections: AtomicU64::new(0),
            connections_total: AtomicU64::new(0),
            protocol_errors_total: AtomicU64::new(0),
            started: Instant::now(),
        }
    }
}

impl Stats {
    pub fn command_index(name: &[u8]) -> usize {
        COMMANDS
            .iter()
            .position(|c| c.as_bytes().eq_ignore_ascii_case(name))
            .unwrap_or(COMMANDS.len() - 1)
    }

    pub fn record(&self, index: usize, elapsed: Duration, error: bool) {
        let c = &self.commands[index];
        c.count.fetch_add(1, Relaxed);
        if error {
            c.errors.fetch_add(1, Relaxed);
        }
        c.nanos.fetch_add(elapsed.as_nanos() as u64, Relaxed);
        let secs = elapsed.as_secs_f64();
        if let Some(b) = BUCKETS.iter().position(|le| secs <= *le) {
            c.buckets[b].fetch_add(1, Relaxed);
        }
    }
}

/// Resident and virtual size of this process, from `/proc/self/statm`.
pub fn process_memory() -> Option<(u64, u64)> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let mut it = statm.split_whitespace().map(|v| v.parse::<u64>().ok());
    let (vsz, rss) = (it.next()??, it.next()??);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
    Some((rss * page, vsz * page))
}

fn label_value(s: &str) -> String {
    // prometheus-parse cuts label values at commas; quotes would end them.
    s.replace([',', '"', '\\', '\n'], "_")
}

struct Out(String);

/// RocksDB's own figures, from its properties.
fn rocksdb(o: &mut Out, store: &Store) {
    let props: [(&str, &str, &str); 13] = [
        (
            "rocksdb_block_cache_usage_bytes",
            "rocksdb.block-cache-usage",
            "Memory used by entries in the block cache.",
        ),
        (
            "rocksdb_block_cache_pinned_usage_bytes",
            "rocksdb.block-cache-pinned-usage",
            "Memory used by pinned block cache entries.",
        ),
        (
            "rocksdb_block_cache_capacity_bytes",
            "rocksdb.block-cache-capacity",
            "Block cache capacity.",
        ),
        (
            "rocksdb_memtables_size_bytes",
            "rocksdb.cur-size-all-mem-tables",
            "Size of active and unflushed immutable memtables.",
        ),
        (
            "rocksdb_table_readers_memory_bytes",
            "rocksdb.estimate-table-readers-mem",
            "Memory of table readers (index and filter blocks outside the block cache).",
        ),
        (
            "rocksdb_live_sst_files_size_bytes",
            "rocksdb.live-sst-files-size",
            "Size of the SST files of the current version.",
        ),
        (
            "rocksdb_total_sst_files_size_bytes",
            "rocksdb.total-sst-files-size",
            "Size of all SST files, including obsolete ones not yet deleted.",
        ),
        (
            "rocksdb_pending_compaction_bytes",
            "rocksdb.estimate-pending-compaction-bytes",
            "Estimated bytes compaction must rewrite.",
        ),
        (
            "rocksdb_running_compactions",
            "rocksdb.num-running-compactions",
            "Compactions running now.",
        ),
        (
            "rocksdb_running_flushes",
            "rocksdb.num-running-flushes",
            "Flushes running now.",
        ),
        (
            "rocksdb_estimated_keys",
            "rocksdb.estimate-num-keys",
            "Estimated number of keys.",
        ),
        (
            "rocksdb_write_stopped",
            "rocksdb.is-write-stopped",
            "1 while writes are stopped by a write stall.",
        ),
        (
            "rocksdb_delayed_write_rate_bytes_per_second",
            "rocksdb.actual-delayed-write-rate",
            "Write rate while writes are delayed (0: not delayed).",
        ),
    ];
    for (name, prop, help) in props {
        if let Some(v) = store.int_property(prop) {
            o.gauge(name, help, v);
        }
    }
}

/// Commands and connections served.
fn commands(o: &mut Out, stats: &Stats) {
    o.family("soak_node_commands_total", "counter", "Commands served.");
    for (i, c) in stats.commands.iter().enumerate() {
        let _ = writeln!(
            o.0,
            "soak_node_commands_total{{command=\"{}\"}} {}",
            COMMANDS[i],
            c.count.load(Relaxed)
        );
    }
    o.family(
        "soak_node_command_errors_total",
        "counter",
        "Commands answered with an error.",
    );
    for (i, c) in stats.commands.iter().enumerate() {
        let _ = writeln!(
            o.0,
            "soak_node_command_errors_total{{command=\"{}\"}} {}",
            COMMANDS[i],
            c.errors.load(Relaxed)
        );
    }
    o.family(
        "soak_node_command_duration_seconds",
        "histogram",
        "Time to execute a command, from parsed request to reply.",
    );
    for (i, c) in stats.commands.iter().enumerate() {
        let cmd = COMMANDS[i];
        let mut cumulative = 0;
        for (b, le) in BUCKETS.iter().enumerate() {
            cumulative += c.buckets[b].load(Relaxed);
            let _ = writeln!(o.0, "soak_node_command_duration_seconds_bucket{{command=\"{cmd}\",le=\"{le}\"}} {cumulative}");
        }
        let count = c.count.load(Relaxed);
        let _ = writeln!(
            o.0,
            "soak_node_command_duration_seconds_bucket{{command=\"{cmd}\",le=\"+Inf\"}} {count}"
        );
        let _ = writeln!(
            o.0,
            "soak_node_command_duration_seconds_sum{{command=\"{cmd}\"}} {}",
            c.nanos.load(Relaxed) as f64 / 1e9
        );
        let _ = writeln!(
            o.0,
            "soak_node_command_duration_seconds_count{{command=\"{cmd}\"}} {count}"
        );
    }
    o.gauge(
        "soak_node_connections",
        "Open client connections.",
        stats.connections.load(Relaxed),
    );
    o.family(
        "soak_node_connections_total",
        "counter",
        "Client connections accepted.",
    );
    let _ = writeln!(
        o.0,
        "soak_node_connections_total {}",
        stats.connections_total.load(Relaxed)
    );
    o.family(
        "soak_node_protocol_errors_total",
        "counter",
        "Connections closed for malformed RESP.",
    );
    let _ = writeln!(
        o.0,
        "soak_node_protocol_errors_total {}",
        stats.protocol_errors_total.load(Relaxed)
    );
}

impl Out {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }
    fn gauge(&mut self, name: &str, help: &str, value: impl std::fmt::Display) {
        self.family(name, "gauge", help);
        let _ = writeln!(self.0, "{name} {value}");
    }
}

/// Renders every metric in the Prometheus text format.
pub fn render(stats: &Stats, store: &Store, allocator: Allocator) -> String {
    let mut o = Out(String::with_capacity(16 << 10));
    if let Some((rss, vsz)) = process_memory() {
        o.gauge(
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            rss,
        );
        o.gauge(
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            vsz,
        );
    }
    o.gauge(
        "soak_node_uptime_seconds",
        "Seconds since the node started.",
        stats.started.elapsed().as_secs_f64(),
    );

    rocksdb(&mut o, store);
    commands(&mut o, stats);
    let name = allocator.name();
    let version = label_value(&allocator.version().unwrap_or_default());
    o.family(
        "allocator_info",
        "gauge",
        "The allocator serving malloc in this process.",
    );
    let _ = writeln!(
        o.0,
        "allocator_info{{allocator=\"{name}\",version=\"{version}\"}} 1"
    );
    for (stat, value) in allocator.stats() {
        o.gauge_labelled(&format!("allocator_{stat}_bytes"), name, value);
    }
    o.0
}

impl Out {
    fn gauge_labelled(&mut self, metric: &str, allocator: &str, value: u64) {
        self.family(
            metric,
            "gauge",
            "Allocator statistic, as the allocator reports it.",
        );
        let _ = writeln!(self.0, "{metric}{{allocator=\"{allocator}\"}} {value}");
    }
}

/// Serves `GET /metrics` over plain HTTP/1.1, one response per connection.
pub async fn serve(
    listener: TcpListener,
    stats: Arc<Stats>,
    store: Arc<Store>,
    allocator: Allocator,
) {
    loop {
        let Ok((mut sock, _)) = listener.accept().await else {
            continue;
        };
        let (stats, store) = (stats.clone(), store.clone());
        tokio::spawn(async move {
            let mut buf = Vec::with_capacity(1024);
            let mut chunk = [0u8; 1024];
            // Read the request head, bounded so a stray client cannot grow it.
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 16 << 10 {
                match tokio::time::timeout(Duration::from_secs(5), sock.read(&mut chunk)).await {
                    Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                    _ => return,
                }
            }
            let line = buf.split(|b| *b == b'\n').next().unwrap_or_default();
            let path = line.split(|b| *b == b' ').nth(1).unwrap_or_default();
            let (status, body) = if path == b"/metrics" || path.starts_with(b"/metrics?") {
                let body = tokio::task::spawn_blocking(move || render(&stats, &store, allocator))
                    .await
                    .unwrap_or_default();
                ("200 OK", body)
            } else {
                (
                    "404 Not Found",
                    "not found: the metrics are at /metrics\n".to_string(),
                )
            };
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = sock.write_all(head.as_bytes()).await;
            let _ = sock.write_all(body.as_bytes()).await;
            let _ = sock.shutdown().await;
        });
    }
}
