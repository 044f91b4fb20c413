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
    /// The other measures of `samples.csv` (PSS, anonymous, the cgroup's,
    /// the data directory's size), those that were ever above 0.
    pub measures: Vec<Part>,
    /// The load's intervals from `latency.csv`: operations per second and
    /// p99 in milliseconds.
    pub ops_per_s: Vec<(f64, f64)>,
    pub p99_ms: Vec<(f64, f64)>,
    /// soak's own resident bytes, and its CPU between samples as a share
    /// of one core.
    pub soak_rss: Vec<(f64, f64)>,
    pub soak_cpu: Vec<(f64, f64)>,
}

/// The measures of `samples.csv` charted beside RSS, by column.
pub const MEASURES: &[(&str, &str)] = &[
    ("pss_bytes", "PSS"),
    ("anon_bytes", "anonymous"),
    ("cgroup_bytes", "cgroup"),
    ("disk_bytes", "disk"),
];

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
    let samples =
        std::fs::read_to_string(dir.join(c.files.get("samples.csv")?)).unwrap_or_default();
    let rss = columns(&samples, "t_s", &["rss_bytes"])
        .remove(0)
        .into_iter()
        .map(|(t, v)| (t, v as u64))
        .collect();
    let names: Vec<&str> = MEASURES.iter().map(|m| m.0).collect();
    let measures = columns(&samples, "t_s", &names)
        .into_iter()
        .zip(MEASURES)
        .filter(|(points, _)| points.len() >= 2 && points.iter().any(|p| p.1 > 0.0))
        .map(|(points, (_, label))| Part { label, points })
        .collect();
    let mut own = columns(&samples, "t_s", &["soak_rss_bytes", "soak_cpu_s"]);
    let cpu = own.pop().unwrap_or_default();
    let soak_cpu = cpu
        .windows(2)
        .filter(|w| w[1].0 > w[0].0)
        .map(|w| (w[1].0, (w[1].1 - w[0].1) / (w[1].0 - w[0].0)))
        .collect();
    let soak_rss = own.pop().unwrap_or_default();
    let parts = c
        .files
        .get("metrics.csv")
        .and_then(|f| std::fs::read_to_string(dir.join(f)).ok())
        .map(|text| parts(&text))
        .unwrap_or_default();
    let latency = c
        .files
        .get("latency.csv")
        .and_then(|f| std::fs::read_to_string(dir.join(f)).ok())
        .unwrap_or_default();
    let mut load = columns(&latency, "t", &["ops_per_s", "p99_us"]);
    let p99_ms = load
        .pop()
        .unwrap_or_default()
        .into_iter()
        .map(|(t, us)| (t, us / 1000.0))
        .collect();
    let ops_per_s = load.pop().unwrap_or_default();
    Some(CellChart {
        rss,
        parts,
        measures,
        ops_per_s,
        p99_ms,
        soak_rss,
        soak_cpu,
    })
}

/// The (time, value) points of each column of `names` in a CSV file's
/// text whose time is in the column `t`; rows that do not parse are left
/// out.
fn columns(csv: &str, t: &str, names: &[&str]) -> Vec<Vec<(f64, f64)>> {
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name);
    let mut out = vec![vec![]; names.len()];
    let (Some(t), cols) = (col(t), names.iter().map(|n| col(n)).collect::<Vec<_>>()) else {
        return out;
    };
    for l in lines {
        let f: Vec<&str> = l.split(',').collect();
        let Some(at) = f.get(t).and_then(|v| v.parse::<f64>().ok()) else {
            continue;
        };
        for (c, points) in cols.iter().zip(out.iter_mut()) {
            if let Some(v) = c.and_then(|c| f.get(c)?.parse::<f64>().ok()) {
                points.push((at, v));
            }
        }
    }
    out
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

    #[test]
    fn columns_are_read_by_name_and_broken_rows_left_out() {
        let csv = "t,ops,ops_per_s,p99_us\n1.0,5,5.0,900\nbroken\n2.0,6,6.0,x\n";
        assert_eq!(
            columns(csv, "t", &["ops_per_s", "p99_us", "missing"]),
            vec![vec![(1.0, 5.0), (2.0, 6.0)], vec![(1.0, 900.0)], vec![]]
        );
    }
}
