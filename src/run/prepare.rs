//! A suite's `prepare:` steps: what must be made before its first cell (a
//! JVM node's build script), run once per run, in order, from the suite's
//! folder, each with its output in `RUN/prepare-N.log` and its time in the
//! report. A step that fails (or outlives its timeout) is the run's
//! environment error, exit 3, quoting the end of its output; nothing it
//! started outlives it (its own process group, killed on timeout, on an
//! interrupt, and when soak itself dies).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use tokio::sync::watch;

use super::RunError;
use crate::model::Prepared;
use crate::suite::{template, PrepareStep};

/// How many lines of a failed step's output its error quotes.
const QUOTED_LINES: usize = 15;

/// Runs every step in order: the steps as they ran (the last one stopped
/// when the run was interrupted, or the one that failed), and the failure.
pub async fn run(
    steps: &[PrepareStep],
    suite_dir: &Path,
    run_dir: &Path,
    mut interrupt: watch::Receiver<bool>,
    quiet: bool,
) -> (Vec<Prepared>, Result<(), RunError>) {
    let vars = BTreeMap::from([
        ("SUITE_DIR".to_string(), suite_dir.display().to_string()),
        ("RUN_DIR".to_string(), run_dir.display().to_string()),
    ]);
    let mut done = vec![];
    for (i, step) in steps.iter().enumerate() {
        let argv = step
            .command
            .iter()
            .map(|a| template::render(a, &vars))
            .collect::<Result<Vec<_>, _>>();
        let argv = match argv {
            Ok(argv) => argv,
            Err(e) => {
                return (
                    done,
                    Err(RunError::Usage(format!("prepare[{i}].command: {e}"))),
                )
            }
        };
        let log = if steps.len() == 1 {
            "prepare.log".to_string()
        } else {
            format!("prepare-{}.log", i + 1)
        };
        let shown = argv.join(" ");
        if !quiet {
            eprintln!("soak: prepare: {shown} (output in {log})");
        }
        let began = Instant::now();
        let code = match one(&argv, suite_dir, &run_dir.join(&log), step, &mut interrupt).await {
            Ok(code) => code,
            Err(e) => return (done, Err(e)),
        };
        let p = Prepared {
            command: shown,
            took_s: began.elapsed().as_secs_f64(),
            code,
            log,
        };
        // Interrupted: the step was stopped, the run says so and runs no
        // cell.
        if *interrupt.borrow() {
            done.push(p);
            break;
        }
        if code != Some(0) {
            let e = RunError::Environment(failed(&p, step, run_dir));
            done.push(p);
            return (done, Err(e));
        }
        if !quiet {
            eprintln!("soak: prepare: done in {:.1} s", p.took_s);
        }
        done.push(p);
    }
    (done, Ok(()))
}

/// One step: its exit code, or `None` when it was killed (timeout,
/// interrupt) or died by a signal.
async fn one(
    argv: &[String],
    cwd: &Path,
    log: &Path,
    step: &PrepareStep,
    interrupt: &mut watch::Receiver<bool>,
) -> Result<Option<i32>, RunError> {
    let out = std::fs::File::create(log)
        .map_err(RunError::io(format!("cannot create {}", log.display())))?;
    let err = out
        .try_clone()
        .map_err(RunError::io(format!("cannot share {}", log.display())))?;
    let mut cmd = tokio::process::Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .current_dir(cwd)
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .kill_on_drop(true);
    // The step dies with soak: a build left running by a killed soak
    // would hold its jars and CPU.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|e| {
        RunError::Environment(format!(
            "the suite's prepare step `{}` could not start: {e}",
            argv[0]
        ))
    })?;
    let pid = child.id();
    let ended = tokio::select! {
        st = child.wait() => st.ok().and_then(|s| s.code()),
        _ = tokio::time::sleep(step.timeout.0) => None,
        _ = interrupt.wait_for(|stop| *stop) => None,
    };
    if let Some(pid) = pid {
        // The group too: whatever the step started (Maven's JVM) goes with it.
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let _ = child.wait().await;
    Ok(ended)
}

/// The error of a step that failed: its command, how it ended and the end
/// of its output.
fn failed(p: &Prepared, step: &PrepareStep, run_dir: &Path) -> String {
    let how = match p.code {
        Some(c) => format!("exited with code {c}"),
        None if p.took_s + 0.5 >= step.timeout.0.as_secs_f64() => format!(
            "was killed after its timeout of {} (raise prepare[].timeout)",
            crate::units::human_duration(step.timeout.0)
        ),
        None => "died by a signal".to_string(),
    };
    let log = run_dir.join(&p.log);
    let tail = crate::driver::process::tail(&log, QUOTED_LINES);
    format!(
        "the suite's prepare step `{}` {how} after {:.1} s, before any cell ran; last lines of {}:\n{}",
        p.command,
        p.took_s,
        log.display(),
        tail.trim_end()
    )
}
