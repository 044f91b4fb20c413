//! Every chart a real report holds renders with the real mermaid (from the
//! npm registry, installed under `target/lint-tools/` the first time) in
//! headless Chromium (Debian's `chromium`): a parse error in any fails.
//! The smoke suite, shortened, has both kinds: RSS against the limit, and
//! the node's own memory figures beside it; report.md, pr-comment.md and
//! the job summary are all read.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::soak::*;

const MERMAID: &str = "mermaid@11.17.2";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// mermaid's browser build, installed once.
fn mermaid_js() -> PathBuf {
    common::npm_module(MERMAID).join("dist/mermaid.min.js")
}

/// The ```mermaid blocks of a markdown text.
fn charts_in(md: &str) -> Vec<String> {
    md.split("```mermaid\n")
        .skip(1)
        .filter_map(|rest| rest.split_once("\n```").map(|(c, _)| c.to_string()))
        .collect()
}

/// What mermaid says of each chart: `ok` or `error: ...`, in order.
fn render(charts: &[String]) -> Vec<String> {
    common::require_tool("chromium", "chromium");
    let dir = tempfile::tempdir().unwrap();
    let list = serde_json::to_string(charts).unwrap();
    std::fs::write(
        dir.path().join("charts.js"),
        format!("const CHARTS = {list};\n"),
    )
    .unwrap();
    let page = std::fs::read_to_string(root().join("tests/lint/mermaid.html"))
        .unwrap()
        .replace("MERMAID_JS", &format!("file://{}", mermaid_js().display()))
        .replace(
            "CHARTS_JS",
            &format!("file://{}", dir.path().join("charts.js").display()),
        );
    let html = dir.path().join("page.html");
    std::fs::write(&html, page).unwrap();
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--allow-file-access-from-files",
            "--virtual-time-budget=60000",
            "--dump-dom",
        ])
        .arg(format!("file://{}", html.display()))
        .env("HOME", dir.path())
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&out.stdout);
    let result = dom
        .split_once("<pre id=\"out\">")
        .and_then(|(_, r)| r.split_once("</pre>"))
        .map(|(r, _)| r.to_string())
        .unwrap_or_default();
    let mut lines = result.lines();
    assert_eq!(
        lines.next(),
        Some("done"),
        "the page did not finish: {result}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    lines.map(str::to_string).collect()
}

#[test]
fn every_chart_of_a_real_report_renders_in_mermaid() {
    let dir = tempfile::tempdir().unwrap();
    let step = dir.path().join("step-summary.md");
    let summary_env = format!("GITHUB_STEP_SUMMARY={}", step.display());
    let run = soak_run_in(
        &["env", &summary_env],
        "suites/smoke.yaml",
        &["--duration-scale", "0.2"],
    );
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let report_dir = run.report_dir.as_ref().unwrap();
    let mut charts = vec![];
    for (file, at_least) in [
        (report_dir.join("report.md"), 2),
        (report_dir.join("pr-comment.md"), 1),
        (step, 1),
    ] {
        let found = charts_in(&std::fs::read_to_string(&file).unwrap());
        assert!(
            found.len() >= at_least,
            "{}: {} charts",
            file.display(),
            found.len()
        );
        charts.extend(found);
    }
    // And the charts of a history made of this run: eight nightlies.
    let nights = tempfile::tempdir().unwrap();
    for i in 0..8 {
        let mut s = run.summary().clone();
        s.run_id = format!("night{i}");
        s.started_at = format!("2026-11-0{}T02:00:00+00:00", i + 1);
        s.cells[0].memory.peak_rss_bytes += i * 1048576;
        let d = nights.path().join(&s.run_id);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("summary.json"), serde_json::to_string(&s).unwrap()).unwrap();
    }
    let history = std::process::Command::new(env!("CARGO_BIN_EXE_soak"))
        .args(["report", "history"])
        .arg(nights.path())
        .output()
        .unwrap();
    let found = charts_in(&String::from_utf8_lossy(&history.stdout));
    assert!(
        found.len() >= 3,
        "{}",
        String::from_utf8_lossy(&history.stdout)
    );
    charts.extend(found);
    for title in [
        "title \"RSS of default",
        "title \"Memory of default",
        "title \"Data directory of default",
        "title \"Operations per second of default",
        "title \"p99 latency of default",
        "title \"soak's RSS while default ran",
        "title \"soak's CPU while default ran",
        "title \"peak RSS (MiB)",
    ] {
        assert!(charts.iter().any(|c| c.contains(title)), "no chart {title}");
    }
    // The smoke suite's kill and restart are marked.
    assert!(charts.iter().any(|c| c.contains("    bar [")));
    let verdicts = render(&charts);
    assert_eq!(verdicts.len(), charts.len());
    for (chart, verdict) in charts.iter().zip(&verdicts) {
        assert_eq!(verdict, "ok", "{chart}");
    }
}

/// The renderer does find a broken chart (a quote inside a title).
#[test]
fn a_broken_chart_is_an_error() {
    let good = "xychart-beta\n    title \"RSS of a'b (MiB)\"\n    x-axis \"seconds\" 0 --> 9\n    y-axis \"MiB\" 0 --> 17\n    line [0.0, 15.0, 15.1]";
    let bad = good.replace("a'b", "a\"b");
    let verdicts = render(&[good.to_string(), bad]);
    assert_eq!(verdicts[0], "ok");
    assert!(
        verdicts[1].starts_with("error: Parse error"),
        "{}",
        verdicts[1]
    );
}

/// A linearizability violation's timeline (a gantt chart: the faults and
/// each client's operations in the window) renders too.
#[test]
fn a_violations_timeline_renders_in_mermaid() {
    use soak::model::{ActiveFault, CellResult, HistoryRecord, HistoryViolation, WindowOp};
    let op = |client, operation: &str, invoke_s, complete_s, culprit| WindowOp {
        client,
        operation: operation.into(),
        invoke_s,
        complete_s,
        culprit,
    };
    let cell = CellResult {
        history: Some(HistoryRecord {
            verdict: "not_linearizable".into(),
            operations: 12_000,
            keys: 300,
            clients: 6,
            file: "cells/x/history.bin.gz".into(),
            violating_keys: 1,
            violations: vec![HistoryViolation {
                key: "soak:194".into(),
                operation: "read() -> 4".into(),
                client: 3,
                invoke_s: 13.323,
                complete_s: 13.324,
                window: vec![
                    op(2, "write(6) -> ok", 12.408, Some(12.409), false),
                    op(5, "write(7) -> unknown", 12.5, None, false),
                    op(3, "read() -> 4", 13.323, Some(13.324), true),
                ],
                faults: vec![ActiveFault {
                    what: "partition isolate 1 (leader)".into(),
                    from_s: 7.2,
                    to_s: Some(15.3),
                }],
            }],
            ..HistoryRecord::default()
        }),
        ..CellResult::default()
    };
    let mut md = Vec::new();
    soak::report::linearizable::section(&mut md, &cell).unwrap();
    let md = String::from_utf8(md).unwrap();
    assert!(md.contains("**not linearizable**: 1 of 300 keys"), "{md}");
    assert!(
        md.contains("partition isolate 1 (leader) from 7.2 s to 15.3 s"),
        "{md}"
    );
    let charts = charts_in(&md);
    assert_eq!(charts.len(), 1, "{md}");
    assert!(charts[0].contains("read() -> 4 (cannot be linearized) :crit"));
    assert_eq!(render(&charts), ["ok"], "{}", charts[0]);
}
