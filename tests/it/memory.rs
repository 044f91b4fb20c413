//! Where the memory went: growth attributed to kinds of mappings (from
//! `smaps`, with no cooperation from the node), on a C node whose growth
//! is in a known place.

use crate::common;

use common::require_tool;
use common::soak::*;
use soak::model::Verdict;

fn kind<'a>(run: &'a Run, name: &str) -> &'a soak::model::KindGrowth {
    let kinds = &run.cell().memory.kinds;
    kinds
        .iter()
        .find(|k| k.kind == name)
        .unwrap_or_else(|| panic!("no kind {name} in {kinds:?}"))
}

#[test]
fn growth_from_new_threads_under_glibc_is_named_as_its_arenas() {
    require_tool("cc", "gcc");
    let run = soak_run("tests/suites/arenas-grow.yaml", &[]);
    assert_eq!(run.code(), 1, "{}", run.stderr());
    let growth = run.check("memory_growth (rss)");
    assert_eq!(growth.verdict, Verdict::Fail, "{growth:?}");
    let detail = growth.detail.as_deref().unwrap_or_default();
    assert!(detail.contains("of which glibc arenas +"), "{detail}");
    // One arena per new thread, up to the 12 it started.
    let arenas = kind(&run, "arenas");
    let (first, last) = (arenas.count_first.unwrap(), arenas.count_last.unwrap());
    assert!(first < last && (10..=12).contains(&last), "{arenas:?}");
    assert!(detail.contains(&format!("{first} arenas to {last}")), "{detail}");
    // The main heap did not carry it.
    let heap = kind(&run, "heap");
    assert!(heap.last_bytes < 4 << 20, "{heap:?}");
    // Each kind is a series of the cell's samples.
    let samples = run.file("samples.csv.gz");
    let header: Vec<&str> = samples.lines().next().unwrap().split(',').collect();
    let col = header.iter().position(|h| *h == "arenas").unwrap();
    let most = samples
        .lines()
        .skip(1)
        .filter_map(|l| l.split(',').nth(col)?.parse::<u64>().ok())
        .max();
    assert_eq!(most, Some(last), "{header:?}");
}

#[test]
fn a_leak_on_one_thread_is_named_as_the_heap_not_the_arenas() {
    require_tool("cc", "gcc");
    let run = soak_run("tests/suites/heap-leak.yaml", &[]);
    assert_eq!(run.code(), 1, "{}", run.stderr());
    let growth = run.check("memory_growth (rss)");
    let detail = growth.detail.as_deref().unwrap_or_default();
    assert!(detail.contains("of which heap (brk) +"), "{detail}");
    // 4 MB/s kept: the heap's slope is that, give or take.
    let heap = kind(&run, "heap");
    let mib_s = heap.slope_bytes_per_hour.unwrap() / 3600.0 / 1048576.0;
    assert!((3.0..4.5).contains(&mib_s), "{heap:?}");
    assert!(run.cell().memory.kinds.iter().all(|k| k.kind != "arenas"));
}
