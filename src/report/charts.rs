//! The series a cell's charts are drawn from, read back from the cell's
//! files: the node's RSS (`samples.csv`) and, where the node exports them,
//! the figures of its own memory (`metrics.csv`): RocksDB's block cache,
//! memtables and table readers, the allocator's allocated and free bytes,
//! a JVM's heap and direct buffers. Charted beside RSS, they show where
//! the memory went.
//!
//! The figures are found by their Prometheus names (any node may export
//! them; labels are ignored), so a node that exports none gets the RSS
//! chart alone.

use std::collections::BTreeMap;
use std::path::Path;

use super::{CellResult, Summary};

/// A node's own memory figures that are charted beside RSS, by metric
/// name, with the label the chart gives them.
pub const PARTS: &[(&str, &str)] = &[
    ("rocksdb_block_cache_usage_bytes", "block cache"),
    ("rocksdb_block_cache_pinned_usage_bytes", "pinned blocks"),
    ("rocksdb_memtables_size_bytes", "memtables"),
    ("rocksdb_table_readers_memory_bytes", "table readers"),
    ("jvm_heap_used_bytes", "JVM heap"),
    ("jvm_nonheap_used_bytes", "JVM non-heap"),
    ("jvm_direct_used_bytes", "direct buffers"),
    ("allocator_allocated_bytes", "allocated"),
    ("allocator_free_bytes", "held free"),
];

/// One series of a node's own figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Part {
    pub label: &'static str,
    /// (seconds since the cell's start, bytes)
    pub points: Vec<(f64, f64)>,
}

/// What a cell's charts are drawn from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CellChart {
    /// (seconds since the cell's start, RSS bytes)
    pub rss: Vec<(f64, u64)>,
    /// The node's own figures, in the order of [`PARTS`]; only those it
    /// exported at least twice.
    pub parts: Vec<Part>,
}

/// The charts of every cell, by cell id.
pub type Charts = BTreeMap<String, CellChart>;

/// The charts of every cell of a run, from the files the summary names
/// (relative to `dir`); a cell without samples gets no chart.
pub fn of_run(dir: &Path, s: &Summary) -> Charts {
    s.cells
        .iter()
        .filter_map(|c| Some((c.id.clone(), of_cell(dir, c)?)))
        .collect()
}

/// The chart of one cell, from its files (relative to `dir`).
pub fn of_cell(dir: &Path, c: &CellResult) -> Option<CellChart> {
    let rss = rss_series(&dir.join(c.files.get("samples.csv")?));
    let parts = c
        .files
        .get("metrics.csv")
        .and_then(|f| std::fs::read_to_string(dir.join(f)).ok())
        .map(|text| parts(&text))
        .unwrap_or_default();
    Some(CellChart { rss, parts })
}

fn rss_series(file: &Path) -> Vec<(f64, u64)> {
    let Ok(text) = std::fs::read_to_string(file) else {
        return vec![];
    };
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name);
    let (Some(t), Some(rss)) = (col("t_s"), col("rss_bytes")) else {
        return vec![];
    };
    lines
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            Some((f.get(t)?.parse().ok()?, f.get(rss)?.parse().ok()?))
        })
        .collect()
}

/// The charted figures in `metrics.csv` (`t_s,series,value`). A name
/// exported under several label sets (one per column family, say) is
/// summed per scrape.
fn parts(metrics_csv: &str) -> Vec<Part> {
    let mut by_name: BTreeMap<&str, BTreeMap<u64, (f64, f64)>> = BTreeMap::new();
    for line in metrics_csv.lines().skip(1) {
        let mut f = line.splitn(3, ',');
        let (Some(t), Some(series), Some(v)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let name = series.split('{').next().unwrap_or(series);
        let Some(&(known, _)) = PARTS.iter().find(|(n, _)| *n == name) else {
            continue;
        };
        let (Ok(t), Ok(v)) = (t.parse::<f64>(), v.trim().parse::<f64>()) else {
            continue;
        };
        if !v.is_finite() {
            continue;
        }
        // Scrapes are keyed by their time to the millisecond.
        let at = by_name
            .entry(known)
            .or_default()
            .entry((t * 1000.0).round() as u64)
            .or_insert((t, 0.0));
        at.1 += v;
    }
    PARTS
        .iter()
        .filter_map(|(name, label)| {
            let points: Vec<(f64, f64)> = by_name.get(name)?.values().copied().collect();
            (points.len() >= 2).then_some(Part { label, points })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nodes_own_figures_are_found_by_name_and_summed_over_labels() {
        let csv = "t_s,series,value\n\
            1.0,rocksdb_block_cache_usage_bytes,100\n\
            1.0,rocksdb_memtables_size_bytes{cf=\"a\"},10\n\
            1.0,rocksdb_memtables_size_bytes{cf=\"b\"},5\n\
            1.0,allocator_info{allocator=\"glibc\";version=\"2.36\"},1\n\
            1.0,jvm_heap_used_bytes,NaN\n\
            2.0,rocksdb_block_cache_usage_bytes,200\n\
            2.0,rocksdb_memtables_size_bytes{cf=\"a\"},20\n\
            2.0,rocksdb_memtables_size_bytes{cf=\"b\"},6\n\
            2.0,allocator_allocated_bytes{allocator=\"glibc\"},7\n";
        let p = parts(csv);
        assert_eq!(
            p,
            vec![
                Part {
                    label: "block cache",
                    points: vec![(1.0, 100.0), (2.0, 200.0)]
                },
                Part {
                    label: "memtables",
                    points: vec![(1.0, 15.0), (2.0, 26.0)]
                },
            ]
        );
        assert!(parts("t_s,series,value\nbroken\n").is_empty());
    }
}
