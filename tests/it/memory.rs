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
    assert!(
        detail.contains(&format!("{first} arenas to {last}")),
        "{detail}"
    );
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

#[test]
fn jemallocs_profile_names_the_leaking_function_first() {
    require_tool("cc", "gcc");
    common::require_file("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "libjemalloc2");
    require_tool("addr2line", "binutils");
    let run = soak_run("tests/suites/profile-leak.yaml", &[]);
    assert_eq!(run.code(), 1, "{}", run.stderr());
    let p = run.cell().memory.profile.as_ref().expect("a profile");
    let top = p.growing.first().unwrap_or_else(|| panic!("{p:?}"));
    assert!(top.frames[0].starts_with("remember_session "), "{p:?}");
    // 2 MB/s kept: the top stack's rate is that, give or take sampling.
    let mb_s = top.growth_bytes_per_hour.unwrap() / 3600.0 / 1e6;
    assert!((1.2..3.5).contains(&mb_s), "{mb_s} MB/s: {p:?}");
    // Nothing the node freed again is among the growing stacks.
    assert!(
        p.growing
            .iter()
            .all(|g| !g.frames[0].starts_with("parse_request")),
        "{p:?}"
    );
    let growth = run.check("memory_growth (rss)");
    let detail = growth.detail.as_deref().unwrap_or_default();
    assert!(
        detail.contains("grown most from remember_session"),
        "{detail}"
    );
    // The two dumps compared stay in the cell, the others were removed.
    let dumps = run.file(p.last.as_deref().unwrap());
    assert!(
        dumps.starts_with("heap_v2/"),
        "{}",
        &dumps[..40.min(dumps.len())]
    );
    let report =
        std::fs::read_to_string(run.report_dir.as_ref().unwrap().join("report.md")).unwrap();
    assert!(report.contains("### Where the memory went"), "{report}");
    assert!(
        report.contains("`remember_session (allocnode.c:"),
        "{report}"
    );
}

#[test]
fn a_profile_of_a_cell_on_glibc_says_why_there_is_none() {
    require_tool("cc", "gcc");
    let dir = tempfile::tempdir().unwrap();
    let suite = std::fs::read_to_string(suite("tests/suites/profile-leak.yaml"))
        .unwrap()
        .replace("${SUITE_DIR}", suite("tests/suites").to_str().unwrap())
        .replace("  ready:", "  allocator: glibc\n  ready:")
        .replace("wait: 15s", "wait: 4s");
    let file = dir.path().join("glibc-profile.yaml");
    std::fs::write(&file, suite).unwrap();
    let run = soak_run(file.to_str().unwrap(), &[]);
    let p = run.cell().memory.profile.as_ref().expect("a profile note");
    assert!(p.growing.is_empty());
    let note = p.note.as_deref().unwrap_or_default();
    assert!(
        note.contains("needs jemalloc, and this cell runs glibc"),
        "{note}"
    );
}

#[test]
fn heaptrack_names_the_leaking_function_of_a_node_kept_on_glibc() {
    require_tool("cc", "gcc");
    require_tool("heaptrack_print", "heaptrack");
    let run = soak_run("tests/suites/heaptrack-leak.yaml", &[]);
    assert_eq!(run.code(), 1, "{}", run.stderr());
    let p = run.cell().memory.profile.as_ref().expect("a profile");
    assert_eq!(p.tool, "heaptrack");
    let top = p.growing.first().unwrap_or_else(|| panic!("{p:?}"));
    assert!(
        top.frames[0].starts_with("remember_session (allocnode.c:"),
        "{p:?}"
    );
    // heaptrack counts every allocation: the rate is the node's 2 MB/s.
    let mb_s = top.growth_bytes_per_hour.unwrap() / 3600.0 / 1e6;
    assert!((1.6..2.4).contains(&mb_s), "{mb_s} MB/s: {p:?}");
    assert!(
        p.growing
            .iter()
            .all(|g| !g.frames[0].starts_with("parse_request")),
        "freed at once, never growth: {p:?}"
    );
    let growth = run.check("memory_growth (rss)");
    let detail = growth.detail.as_deref().unwrap_or_default();
    assert!(
        detail.contains("grown most from remember_session"),
        "{detail}"
    );
    // The record stays in the cell, and heaptrack's own tool reads it.
    let cell = run.report_dir.as_ref().unwrap().join("cells/default");
    let record = cell.join(p.last.as_deref().unwrap());
    assert!(record.to_string_lossy().ends_with(".gz"), "{record:?}");
    let printed = std::process::Command::new("heaptrack_print")
        .arg(&record)
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&printed.stdout);
    assert!(printed.contains("remember_session"), "{printed}");
    let leftovers: Vec<_> = std::fs::read_dir(cell.join("profile"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".raw.") || n.ends_with(".part"))
        .collect();
    assert!(leftovers.is_empty(), "raw records left: {leftovers:?}");
    let report =
        std::fs::read_to_string(run.report_dir.as_ref().unwrap().join("report.md")).unwrap();
    assert!(report.contains("heaptrack's record"), "{report}");
}

#[test]
fn heaptrack_on_a_static_binary_says_why_there_is_no_record_and_dump_every_is_refused() {
    require_tool("cc", "gcc");
    require_tool("heaptrack_print", "heaptrack");
    let dir = tempfile::tempdir().unwrap();
    let here = suite("tests/suites");
    let here = here.to_str().unwrap();
    let path = variant(
        &dir,
        "tests/suites/heaptrack-leak.yaml",
        &[
            ("${SUITE_DIR}", here),
            ("\"-pthread\",", "\"-pthread\", \"-static\","),
            ("wait: 15s", "wait: 5s"),
        ],
    );
    let run = soak_run(&path, &[]);
    let p = run.cell().memory.profile.as_ref().expect("a profile note");
    assert!(p.growing.is_empty(), "{p:?}");
    let note = p.note.as_deref().unwrap_or_default();
    assert!(note.contains("wrote no heaptrack record"), "{note}");
    assert!(note.contains("static binary"), "{note}");
    // jemalloc's setting with heaptrack is refused at its field, not ignored.
    let text = std::fs::read_to_string(&path).unwrap().replace(
        "{ profile: heaptrack }",
        "{ profile: heaptrack, dump_every: 16MiB }",
    );
    std::fs::write(&path, text).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_soak"))
        .arg("validate")
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("memory.dump_every"), "{err}");
}

#[test]
fn a_jvms_direct_buffers_are_named_from_its_native_memory_tracking() {
    require_tool("java", "openjdk-17-jdk-headless");
    let run = soak_run("tests/suites/jvm-direct-leak.yaml", &[]);
    assert_eq!(run.code(), 1, "{}", run.stderr());
    let j = run.cell().memory.jvm.as_ref().expect("the JVM's account");
    assert!(j.readings >= 8, "{j:?}");
    let cat = |name: &str| {
        j.categories
            .iter()
            .find(|k| k.kind == name)
            .unwrap_or_else(|| panic!("no {name}: {j:?}"))
    };
    // 4 MiB/s of direct buffers, under NMT's "Other"; the heap is flat.
    let other = cat("nmt:Other");
    let mib_s = other.slope_bytes_per_hour.unwrap() / 3600.0 / 1048576.0;
    assert!((3.0..5.0).contains(&mib_s), "{other:?}");
    let heap = cat("nmt:Java Heap");
    assert!(
        heap.slope_bytes_per_hour.unwrap_or(0.0).abs() < 1e6,
        "{heap:?}"
    );
    let detail = run
        .check("memory_growth (rss)")
        .detail
        .clone()
        .unwrap_or_default();
    assert!(
        detail.contains("in the JVM's account, JVM Other +"),
        "{detail}"
    );
    // Every reading is in the cell's nmt.csv.gz; the JVM's attach socket
    // went with it.
    let csv = run.file("nmt.csv.gz");
    assert!(csv.lines().filter(|l| l.contains(",Other,")).count() >= j.readings);
    let report =
        std::fs::read_to_string(run.report_dir.as_ref().unwrap().join("report.md")).unwrap();
    assert!(report.contains("**JVM Other**"), "{report}");
}
