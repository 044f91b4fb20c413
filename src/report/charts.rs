//! The series a cell's charts are drawn from, read back from the cell's
//! files: the node's RSS (`samples.csv.gz`) and, where the node exports
//! them, the figures of its own memory (`metrics.csv.gz`): RocksDB's block cache,
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
    // Where the resident memory is, from smaps (telemetry::maps).
    ("heap_bytes", "heap (brk)"),
    ("arena_bytes", "glibc arenas"),
    ("stack_bytes", "thread stacks"),
    ("other_anon_bytes", "other anonymous"),
    ("file_mapped_bytes", "file-backed"),
    ("shared_bytes", "shared memory"),
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
    let samples = file(dir, c, "samples.csv")?;
    let mut names = vec!["rss_bytes", "soak_rss_bytes", "soak_cpu_s"];
    names.extend(MEASURES.iter().map(|m| m.0));
    let mut read = columns(lines(&samples), "t_s", &names).into_iter();
    let mut next = || read.next().unwrap_or_default();
    let rss = next().into_iter().map(|(t, v)| (t, v as u64)).collect();
    let soak_rss = next();
    let cpu = next();
    let measures = MEASURES
        .iter()
        .map(|(_, label)| Part {
            label,
            points: next(),
        })
        .filter(|p| p.points.len() >= 2 && p.points.iter().any(|p| p.1 > 0.0))
        .collect();
    let soak_cpu = cpu
        .windows(2)
        .filter(|w| w[1].0 > w[0].0)
        .map(|w| (w[1].0, (w[1].1 - w[0].1) / (w[1].0 - w[0].0)))
        .collect();
    let parts = file(dir, c, "metrics.csv")
        .map(|f| parts(lines(&f)))
        .unwrap_or_default();
    let latency = file(dir, c, "latency.csv").map(|f| lines(&f));
    let mut load = columns(latency.into_iter().flatten(), "t", &["ops_per_s", "p99_us"]);
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

/// The path of a cell's file `name`, compressed (`NAME.gz`, since soak
/// 0.1's long runs) or as older runs wrote it.
pub(crate) fn file(dir: &Path, c: &CellResult, name: &str) -> Option<std::path::PathBuf> {
    c.files
        .get(&format!("{name}.gz"))
        .or_else(|| c.files.get(name))
        .map(|f| dir.join(f))
}

/// The lines of a file; none when it cannot be read.
pub(crate) fn lines(path: &Path) -> impl Iterator<Item = String> {
    crate::gzcsv::lines(path).into_iter().flatten()
}

/// The (time, value) points of each column of `names` in a CSV file's
/// lines whose time is in the column `t`; rows that do not parse are left
/// out.
pub(crate) fn columns(
    mut lines: impl Iterator<Item = String>,
    t: &str,
    names: &[&str],
) -> Vec<Vec<(f64, f64)>> {
    let first = lines.next().unwrap_or_default();
    let header: Vec<&str> = first.split(',').collect();
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

/// The charted figures in the lines of `metrics.csv.gz` (`t_s,series,value`,
/// a scrape's rows together). A series holds its value until its next row
/// (see [`crate::telemetry::Scraper`]); a name exported under several
/// label sets (one per column family, say) is summed over them at every
/// scrape that changed one of them.
pub(crate) fn parts(lines: impl Iterator<Item = String>) -> Vec<Part> {
    // Per charted name: each series' value, and the name's points.
    let mut current: Vec<BTreeMap<String, f64>> = vec![BTreeMap::new(); PARTS.len()];
    let mut points: Vec<Vec<(f64, f64)>> = vec![vec![]; PARTS.len()];
    // The scrape being read: its time, and the names it changed.
    let mut scrape: Option<(f64, Vec<bool>)> = None;
    let close = |scrape: &mut Option<(f64, Vec<bool>)>,
                 points: &mut Vec<Vec<(f64, f64)>>,
                 current: &Vec<BTreeMap<String, f64>>| {
        if let Some((t, touched)) = scrape.take() {
            for (i, _) in touched.iter().enumerate().filter(|(_, on)| **on) {
                points[i].push((t, current[i].values().sum()));
            }
        }
    };
    for line in lines.skip(1) {
        let mut f = line.splitn(3, ',');
        let (Some(t), Some(series), Some(v)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let name = series.split('{').next().unwrap_or(series);
        let Some(i) = PARTS.iter().position(|(n, _)| *n == name) else {
            continue;
        };
        let (Ok(t), Ok(v)) = (t.parse::<f64>(), v.trim().parse::<f64>()) else {
            continue;
        };
        if !v.is_finite() {
            continue;
        }
        // A scrape's rows share their time to the millisecond.
        if scrape
            .as_ref()
            .is_some_and(|(at, _)| (at - t).abs() >= 0.0005)
        {
            close(&mut scrape, &mut points, &current);
        }
        scrape
            .get_or_insert_with(|| (t, vec![false; PARTS.len()]))
            .1[i] = true;
        match current[i].get_mut(series) {
            Some(held) => *held = v,
            None => {
                current[i].insert(series.to_string(), v);
            }
        }
    }
    close(&mut scrape, &mut points, &current);
    PARTS
        .iter()
        .zip(points)
        .filter(|(_, points)| points.len() >= 2)
        .map(|((_, label), points)| Part { label, points })
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
            2.0,allocator_allocated_bytes{allocator=\"glibc\"},7\n\
            3.0,rocksdb_memtables_size_bytes{cf=\"b\"},9\n";
        let p = parts(csv.lines().map(String::from));
        assert_eq!(
            p,
            vec![
                Part {
                    label: "block cache",
                    points: vec![(1.0, 100.0), (2.0, 200.0)]
                },
                // cf a held 20 at 3 s: only b had a row.
                Part {
                    label: "memtables",
                    points: vec![(1.0, 15.0), (2.0, 26.0), (3.0, 29.0)]
                },
            ]
        );
        assert!(parts(["t_s,series,value", "broken"].map(String::from).into_iter()).is_empty());
    }

    #[test]
    fn columns_are_read_by_name_and_broken_rows_left_out() {
        let csv = "t,ops,ops_per_s,p99_us\n1.0,5,5.0,900\nbroken\n2.0,6,6.0,x\n";
        assert_eq!(
            columns(
                csv.lines().map(String::from),
                "t",
                &["ops_per_s", "p99_us", "missing"]
            ),
            vec![vec![(1.0, 5.0), (2.0, 6.0)], vec![(1.0, 900.0)], vec![]]
        );
    }
}
