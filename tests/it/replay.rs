//! `soak replay` and `soak shrink` on real runs of test nodes whose data
//! loss needs a given combination of chaos actions.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::require_tool;
use crate::common::soak::{soak_run, Run};

fn soak(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_soak"))
        .args(args)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn dir(run: &Run) -> String {
    run.report_dir.as_ref().unwrap().display().to_string()
}

/// No process of the run's folder left (the nodes' data is inside it).
fn nothing_left_in(dir: &str) {
    let left: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(dir))
        .collect();
    assert!(left.is_empty(), "processes left: {left:?}");
}

/// The phases of a suite file, as words (`kill`, `pause`, ...).
fn phase_words(file: &Path) -> Vec<String> {
    let suite = soak::suite::Suite::load(file).unwrap();
    suite.phases.iter().map(|p| p.word().to_string()).collect()
}

/// A run of the suite that fails, shrunk: the phases of the shrunk suite
/// that are among `words`, all its phases, and shrink's stderr.
fn shrunk(suite: &str, seed: &str, words: &[&str]) -> (Vec<String>, Vec<String>, String) {
    let run = soak_run(suite, &["--seed", seed]);
    assert_eq!(run.code(), 1, "{}", run.stderr());
    let dir = dir(&run);
    let (code, last, err) = shrink(&dir, &[]);
    assert_eq!(code, 0, "{err}");
    let all = phase_words(&last.unwrap());
    let kept = all
        .iter()
        .filter(|w| words.contains(&w.as_str()))
        .cloned()
        .collect();
    nothing_left_in(&dir);
    (kept, all, err)
}

/// `soak shrink RUN`: its exit code, the file it printed last, stderr.
fn shrink(run: &str, extra: &[&str]) -> (i32, Option<PathBuf>, String) {
    let mut args = vec!["shrink", run, "--budget", "10m"];
    args.extend_from_slice(extra);
    let out = soak(&args);
    let last = text(&out.stdout).lines().last().map(PathBuf::from);
    (out.status.code().unwrap_or(-1), last, text(&out.stderr))
}

#[test]
fn a_pause_then_a_kill_shrinks_to_those_two_and_the_shrunk_suite_fails_again() {
    let run = soak_run("tests/suites/shrink-pause-kill.yaml", &["--seed", "1"]);
    assert_eq!(run.code(), 1, "{}", run.stderr());
    assert!(run.cell().integrity.lost > 0);
    let dir = dir(&run);
    let drawn = std::fs::read_to_string(format!("{dir}/cells/default/replay.yaml")).unwrap();
    let actions = drawn.matches("- action:").count();
    assert!(actions >= 20, "{actions} actions drawn");

    let (code, last, err) = shrink(&dir, &[]);
    assert_eq!(code, 0, "{err}");
    let shrunk = last.expect("the shrunk suite's path printed last");
    assert_eq!(shrunk, Path::new(&dir).join("shrunk.yaml"));
    let words = phase_words(&shrunk);
    let acts: Vec<&str> = words
        .iter()
        .map(String::as_str)
        .filter(|w| ["kill", "pause", "restart"].contains(w))
        .collect();
    assert_eq!(acts, ["pause", "kill"], "{words:?}\n{err}");
    let report = std::fs::read_to_string(Path::new(&dir).join("shrink.md")).unwrap();
    assert!(
        report.contains(&format!("2 of {actions} actions")),
        "{report}"
    );
    assert!(report.contains("first lost"), "{report}");
    nothing_left_in(&dir);

    // The shrunk suite alone, as a user runs it: it fails as the run did.
    // The loss needs writes between the pause's end and the kill, a race
    // the shrink's confirmation reports the share of (shrink.md), so it
    // gets three runs to fail in.
    let failed = (0..3).any(|_| {
        let again = soak_run(shrunk.to_str().unwrap(), &[]);
        assert!([0, 1].contains(&again.code()), "{}", again.stderr());
        again.code() == 1 && again.cell().integrity.lost > 0
    });
    assert!(failed, "the shrunk suite passed three runs\n{report}");
}

#[test]
fn a_node_that_loses_at_every_kill_shrinks_to_one_kill() {
    let (kept, all, err) = shrunk(
        "tests/suites/shrink-every-kill.yaml",
        "2",
        &["kill", "pause"],
    );
    assert_eq!(kept, ["kill"], "{all:?}\n{err}");
    // One kill, and then no kill passes: the search tried it.
    assert!(err.contains("(none), 0 of"), "{err}");
}

#[test]
fn a_kill_during_a_disk_fault_shrinks_to_that_kill_inside_the_fault() {
    let words = ["kill", "pause", "io_errors"];
    let (kept, all, err) = shrunk("tests/suites/shrink-kill-in-fault.yaml", "1", &words);
    // The spell of I/O errors is the suite's own; one kill inside it.
    assert_eq!(kept, ["io_errors", "kill", "io_errors"], "{all:?}\n{err}");
}

#[test]
fn a_replay_fails_the_same_way_and_passes_against_the_fixed_build() {
    let run = soak_run("tests/suites/shrink-pause-kill.yaml", &["--seed", "4"]);
    assert_eq!(run.code(), 1, "{}", run.stderr());
    let dir = dir(&run);
    let out = soak(&["replay", &dir]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let report = PathBuf::from(text(&out.stdout).trim());
    let summary = crate::common::soak::load_summary(&report.with_file_name("summary.json"));
    let cell = &summary.cells[0];
    assert!(cell.integrity.lost > 0);
    assert_eq!(cell.restarts.len(), run.cell().restarts.len());
    assert!(
        summary.description.starts_with("Replay of"),
        "{}",
        summary.description
    );

    // The same schedule against the build without the bug.
    let memnode = crate::common::soak::suite("tests/nodes/memnode.py");
    let fixed = format!(
        "python3 {} --port ${{PORT}} --journal ${{DATA_DIR}}/journal",
        memnode.display()
    );
    let out = soak(&["replay", &dir, "--node-command", &fixed]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("0 lost") || text(&out.stderr).contains("lost 0"));
    nothing_left_in(&dir);
}

#[test]
fn nothing_to_shrink_an_unknown_cell_and_an_older_run_are_refused_before_anything_starts() {
    let run = soak_run("tests/suites/chaos.yaml", &["--duration-scale", "0.5"]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let dir = dir(&run);
    let (code, _, err) = shrink(&dir, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("passed its checks: nothing to shrink"),
        "{err}"
    );
    assert!(!Path::new(&dir).join("shrink").exists());

    let out = soak(&["replay", &dir, "--cell", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--cell nope: the run in"),
        "{}",
        text(&out.stderr)
    );
    assert!(text(&out.stderr).contains("its cells: default"));

    let out = soak(&["replay", "/nonexistent/run"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("not a run's folder"));

    // A run of a soak that recorded no replay.yaml.
    std::fs::remove_file(Path::new(&dir).join("cells/default/replay.yaml")).unwrap();
    let out = soak(&["replay", &dir]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("run the suite again with this soak"),
        "{}",
        text(&out.stderr)
    );
    assert!(!Path::new(&dir).join("replays").exists());
}

#[test]
fn an_interrupted_shrink_writes_what_it_found_exits_130_and_leaves_nothing() {
    let run = soak_run("tests/suites/shrink-every-kill.yaml", &["--seed", "2"]);
    assert_eq!(run.code(), 1, "{}", run.stderr());
    let dir = dir(&run);
    let child = Command::new(env!("CARGO_BIN_EXE_soak"))
        .args(["shrink", &dir])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The second trial's node is up: Ctrl-C then.
    let trials = Path::new(&dir).join("shrink");
    crate::common::soak::wait_for_file(&trials, "trial-002.yaml", |_| true);
    let ready =
        |e: &Path| std::fs::read_to_string(e).is_ok_and(|t| t.contains("\"kind\":\"ready\""));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while crate::common::soak::walk(&trials)
        .iter()
        .filter(|p| p.ends_with("events.jsonl") && ready(p))
        .count()
        < 2
    {
        assert!(std::time::Instant::now() < deadline, "no second trial");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    let report = std::fs::read_to_string(Path::new(&dir).join("shrink.md")).unwrap();
    assert!(report.contains("cut short: interrupted"), "{report}");
    nothing_left_in(&dir);
}

/// A cluster's schedule: kills, pauses and partitions of random members,
/// of which only a kill of member 1 (Redis's primary, which keeps nothing
/// on disk) loses writes. The shrink keeps that one kill, with its member,
/// and drops every partition.
#[test]
fn a_clusters_member_faults_and_partitions_shrink_to_the_one_members_kill() {
    require_tool("redis-server", "redis-server");
    // The run's seed is pinned: the chaos's own `seed: 5` fixes its
    // actions and times, and the run's seed the members `random` draws.
    // Unpinned, about one run in eleven drew none of its six kills on
    // member 1 ((2/3)^6), lost nothing, and left nothing to shrink (a
    // fresh clone's run here on 2026-12-08). With seed 2 member 1 is
    // killed three times, the first at 2.3 s.
    let run = soak_run("tests/suites/shrink-cluster.yaml", &["--seed", "2"]);
    assert_eq!(run.code(), 1, "{}", run.stderr());
    let dir = dir(&run);
    let drawn = std::fs::read_to_string(format!("{dir}/cells/default/replay.yaml")).unwrap();
    assert!(drawn.contains("partition"), "{drawn}");
    assert!(
        run.stderr().contains("member kill member 1"),
        "{}",
        run.stderr()
    );
    let (code, last, err) = shrink(&dir, &[]);
    assert_eq!(code, 0, "{err}");
    let shrunk = last.expect("the shrunk suite's path printed last");
    let words = phase_words(&shrunk);
    let acts: Vec<&str> = words
        .iter()
        .map(String::as_str)
        .filter(|w| ["kill", "pause", "partition", "heal", "restart"].contains(w))
        .collect();
    assert_eq!(acts, ["kill"], "{words:?}\n{err}");
    let text = std::fs::read_to_string(&shrunk).unwrap();
    let suite = soak::suite::Suite::load(&shrunk).unwrap();
    let kill = suite
        .phases
        .iter()
        .find(|p| p.word() == "kill")
        .expect("the kill kept");
    assert!(
        kill.to_string().starts_with("kill member 1 "),
        "{kill}\n{text}"
    );
    nothing_left_in(&dir);
}
