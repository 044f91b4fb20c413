//! The reports pinned: every exporter's output (report.md, pr-comment.md,
//! the GitHub step summary, junit.xml) rendered from summaries of real
//! runs kept in `tests/data/reports/`, compared with snapshots reviewed
//! by hand (`cargo insta review` after a deliberate change). Together the
//! summaries cover every section: restarts and lost writes, network and
//! disk faults, chaos, expectations and repeats, power cuts, windows,
//! upgrades, a container's OOM kills, a cell's error and an interrupted
//! run.

use std::path::Path;

use soak::report::{charts, ci, junit, markdown, Summary};

fn render(name: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/reports")
        .join(name);
    let text = std::fs::read_to_string(dir.join("summary.json")).unwrap();
    let summary: Summary = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{name}: the pinned summary no longer reads: {e}"));
    let charts = charts::of_run(&dir, &summary);
    let mut report = Vec::new();
    markdown::write(&mut report, &summary, &charts).unwrap();
    let outputs = [
        ("report.md", String::from_utf8(report).unwrap()),
        ("pr-comment.md", ci::pr_comment(&summary, &charts)),
        ("step-summary.md", ci::step_summary(&summary, &charts)),
        ("junit.xml", junit::write(&summary)),
    ];
    for (file, text) in outputs {
        insta::with_settings!({
            snapshot_path => "../data/reports/snapshots",
            prepend_module_to_snapshot => false,
            omit_expression => true,
        }, {
            insta::assert_snapshot!(format!("{name}__{file}"), text);
        });
    }
}

#[test]
fn a_run_that_lost_writes_at_its_restarts() {
    render("lost-writes");
}

#[test]
fn network_faults_and_their_recoveries() {
    render("network-faults");
}

#[test]
fn a_chaos_schedule_of_partitions_latency_full_disks_and_io_errors() {
    render("chaos-faults");
}

#[test]
fn expectations_per_cell_under_power_cuts() {
    render("expectations-power-cuts");
}

#[test]
fn repeated_cells_and_their_spread() {
    render("repeats");
}

#[test]
fn windowed_checks_with_their_charts() {
    render("windows");
}

#[test]
fn an_upgrade_and_the_refused_downgrade() {
    render("upgrade");
}

#[test]
fn a_container_killed_by_the_oom_killer() {
    render("container-oom");
}

#[test]
fn a_cell_that_stopped_with_an_error() {
    render("cell-error");
}

#[test]
fn an_interrupted_run() {
    render("interrupted");
}
