//! `soak replay` and `soak shrink`: a cell run again from what it recorded
//! (`replay.yaml`, see `cell::timeline`), as a suite of explicit phases.
//!
//! A replay is an ordinary suite: the cell's suite as the run read it, its
//! matrix cut to that one cell, and its phases the ones that ran, each
//! chaos phase written out as the actions its seed drew (`kill` and
//! `start`, `pause`, a fault, `run` for its hold and its lifting) with
//! `run` for the waits between them, at the times they came. Durations are
//! as they ran (after `--duration-scale`), so it runs at scale 1; the run's
//! seed drives the workload again.

pub mod command;
pub mod shrink;
mod shrink_report;

use std::path::{Path, PathBuf};

use serde_norway::{Mapping, Value};

use crate::cell::timeline::{self, Step, Timeline};
use crate::model::{CellResult, Summary};
use crate::suite::emit;
use crate::suite::phase::RunFor;
use crate::suite::{Phase, Suite};

/// Why a replay or a shrink could not begin; nothing was started.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The command line or the run folder (exit 2).
    #[error("{0}")]
    Usage(String),
    /// A file soak could not read or write (exit 3).
    #[error("{0}")]
    Environment(String),
}

impl ReplayError {
    pub fn exit_code(&self) -> i32 {
        match self {
            ReplayError::Usage(_) => crate::exit::INVALID,
            ReplayError::Environment(_) => crate::exit::ENVIRONMENT,
        }
    }
}

/// A finished run's cell, with what it recorded.
pub struct Recorded {
    pub run_dir: PathBuf,
    pub result: CellResult,
    pub timeline: Timeline,
}

/// Which cell of the run to take.
#[derive(Clone, Copy, PartialEq)]
pub enum Pick {
    /// Any cell (the only one, when `--cell` is not given).
    Any,
    /// A failed cell (the only failed one, when `--cell` is not given).
    Failed,
}

/// The cell of the run in `run_dir` (reports/SUITE/RUN), with its record.
pub fn open(run_dir: &Path, cell: Option<&str>, pick: Pick) -> Result<Recorded, ReplayError> {
    let run_dir = &run_dir
        .canonicalize()
        .unwrap_or_else(|_| run_dir.to_path_buf());
    let summary_file = run_dir.join("summary.json");
    let text = std::fs::read_to_string(&summary_file).map_err(|e| {
        ReplayError::Usage(format!(
            "{}: not a run's folder ({}: {e}); give the folder `soak run` printed, reports/SUITE/TIME-ID",
            run_dir.display(),
            summary_file.display()
        ))
    })?;
    let summary: Summary = serde_json::from_str(&text).map_err(|e| {
        ReplayError::Usage(format!(
            "{}: not a summary soak can read: {e}",
            summary_file.display()
        ))
    })?;
    let ids: Vec<&str> = summary.cells.iter().map(|c| c.id.as_str()).collect();
    let result = match cell {
        Some(id) => summary.cells.iter().find(|c| c.id == id).ok_or_else(|| {
            ReplayError::Usage(format!(
                "--cell {id}: the run in {} has no such cell; its cells: {}",
                run_dir.display(),
                ids.join(", ")
            ))
        })?,
        None => {
            let candidates: Vec<&CellResult> = summary
                .cells
                .iter()
                .filter(|c| pick == Pick::Any || c.verdict == crate::model::Verdict::Fail)
                .collect();
            match (candidates.as_slice(), pick) {
                ([one], _) => one,
                ([], Pick::Failed) => summary.cells.first().ok_or_else(|| {
                    ReplayError::Usage(format!("{}: the run has no cells", run_dir.display()))
                })?,
                ([], Pick::Any) => {
                    return Err(ReplayError::Usage(format!(
                        "{}: the run has no cells",
                        run_dir.display()
                    )))
                }
                (many, _) => {
                    let ids: Vec<&str> = many.iter().map(|c| c.id.as_str()).collect();
                    return Err(ReplayError::Usage(format!(
                        "the run in {} has {} {}cells: pick one with --cell ({})",
                        run_dir.display(),
                        many.len(),
                        if pick == Pick::Failed { "failed " } else { "" },
                        ids.join(", ")
                    )));
                }
            }
        }
    };
    let file = run_dir
        .join("cells")
        .join(crate::plan::folder(&result.id))
        .join(timeline::FILE);
    let text = std::fs::read_to_string(&file).map_err(|e| {
        ReplayError::Usage(format!(
            "{}: {e}: soak {} ran this cell, and wrote no record of its phases to replay (soak records them since 0.1.0's replay); run the suite again with this soak",
            file.display(),
            summary.soak_version
        ))
    })?;
    let timeline: Timeline = serde_norway::from_str(&text)
        .map_err(|e| ReplayError::Usage(format!("{}: {e}", file.display())))?;
    if timeline.header.version != timeline::VERSION {
        return Err(ReplayError::Usage(format!(
            "{}: version {} of the record, written by soak {}; this soak reads version {}: run the suite again with this soak",
            file.display(),
            timeline.header.version,
            timeline.header.soak,
            timeline::VERSION
        )));
    }
    Ok(Recorded {
        run_dir: run_dir.to_path_buf(),
        result: result.clone(),
        timeline,
    })
}

/// Which of the recorded chaos actions to keep, and how much to shorten
/// the waits (between actions, and the suite's own `run` phases) by.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    /// Indices into `Timeline::actions()`, in order.
    pub keep: Vec<usize>,
    /// 1: as recorded; 0.5: every wait half as long.
    pub waits: f64,
}

impl Schedule {
    pub fn all(t: &Timeline) -> Schedule {
        Schedule {
            keep: (0..t.actions().len()).collect(),
            waits: 1.0,
        }
    }
}

fn bad_record(e: impl std::fmt::Display) -> ReplayError {
    ReplayError::Usage(format!("{}: {e}", timeline::FILE))
}

/// The schedule as explicit phases.
pub fn phases(t: &Timeline, s: &Schedule) -> Result<Vec<Phase>, ReplayError> {
    let ms = std::time::Duration::from_millis;
    let run = |secs: f64| Phase::Run(RunFor::Time(std::time::Duration::from_secs_f64(secs)));
    let mut out = vec![];
    let mut index = 0;
    for step in &t.steps {
        match step {
            Step::Phase(r) => {
                let p: Phase = serde_norway::from_value(r.phase.clone()).map_err(bad_record)?;
                out.push(match p {
                    Phase::Run(RunFor::Time(d)) if s.waits < 1.0 => {
                        Phase::Run(RunFor::Time(d.mul_f64(s.waits).max(ms(1))))
                    }
                    p => p,
                });
            }
            Step::Chaos(c) => {
                let mut t = 0.0;
                for a in &c.actions {
                    let kept = s.keep.contains(&index);
                    index += 1;
                    if !kept {
                        continue;
                    }
                    let at = a.at_s * s.waits;
                    if at - t >= 0.001 {
                        out.push(run(at - t));
                    }
                    for p in &a.phases {
                        out.push(serde_norway::from_value(p.clone()).map_err(bad_record)?);
                    }
                    t = t.max(at) + a.took_s;
                }
                let tail = c.during_s * s.waits - t;
                if tail >= 0.001 {
                    out.push(run(tail));
                }
            }
        }
    }
    Ok(out)
}

/// What to change in the node for the replay: another build.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// The node's argv instead of the suite's (templated as the suite's).
    pub node_command: Option<Vec<String>>,
    /// One of the suite's `versions`: its command, image and environment.
    pub node_version: Option<String>,
    /// Where image nodes run, as `soak run` takes it.
    pub reach: crate::run::Reach,
}

impl Overrides {
    /// A run of `suite` into `out` as the overrides place it, with the
    /// recorded seed.
    pub fn run_options(&self, suite: PathBuf, out: PathBuf, seed: u64) -> crate::run::RunOptions {
        let mut opts = crate::run::RunOptions::for_suite(suite, out);
        opts.seed = Some(seed);
        opts.reach = self.reach.clone();
        opts
    }

    /// `--node-command` split as a shell would, without running one.
    pub fn parse_command(s: &str) -> Result<Vec<String>, String> {
        match shlex::split(s) {
            Some(v) if !v.is_empty() => Ok(v),
            _ => Err(format!(
                "--node-command {s:?}: give a command, quoted as a shell would (no shell runs it)"
            )),
        }
    }

    pub fn describe(&self) -> Option<String> {
        match (&self.node_command, &self.node_version) {
            (Some(c), _) => Some(format!("the node command `{}`", c.join(" "))),
            (None, Some(v)) => Some(format!("the node's version `{v}`")),
            (None, None) => None,
        }
    }
}

fn key(k: &str) -> Value {
    Value::String(k.into())
}

/// `${SUITE_DIR}` made the suite's own folder, in every string.
fn pin_suite_dir(v: &mut Value, dir: &str) {
    match v {
        Value::String(s) if s.contains("${SUITE_DIR}") => *s = s.replace("${SUITE_DIR}", dir),
        Value::Sequence(items) => items.iter_mut().for_each(|i| pin_suite_dir(i, dir)),
        Value::Mapping(m) => m.iter_mut().for_each(|(_, v)| pin_suite_dir(v, dir)),
        Value::Tagged(t) => pin_suite_dir(&mut t.value, dir),
        _ => {}
    }
}

/// The suite's id of a cell: without the `#N` of one of its `--repeat`
/// runs.
fn base_id(cell: &str) -> &str {
    cell.rsplit_once('#').map_or(
        cell,
        |(base, n)| {
            if n.parse::<u32>().is_ok() {
                base
            } else {
                cell
            }
        },
    )
}

/// The matrix cut to the one cell: each axis to the cell's value, the
/// `include` entries that are about it, no `exclude`.
fn one_cell(root: &mut Mapping, suite: &Suite, cell: &str) -> Result<(), ReplayError> {
    let Some(matrix) = &suite.matrix else {
        return Ok(());
    };
    let cell = base_id(cell);
    let def = suite
        .cells()
        .into_iter()
        .find(|c| c.id == cell)
        .ok_or_else(|| {
            ReplayError::Usage(format!(
                "the suite no longer has the cell {cell}: the record's suite text names other cells"
            ))
        })?;
    let Some(Value::Mapping(m)) = root.get_mut(key("matrix")) else {
        return Ok(());
    };
    for (axis, values) in &matrix.axes {
        let Some((_, mine)) = def.params.iter().find(|(a, _)| a == axis) else {
            m.remove(key(axis));
            continue;
        };
        let at = values.iter().position(|v| v.name == mine.name);
        if let (Some(at), Some(Value::Sequence(seq))) = (at, m.get_mut(key(axis))) {
            let entry = seq[at].clone();
            *seq = vec![entry];
        }
    }
    m.remove(key("exclude"));
    if let Some(Value::Sequence(inc)) = m.get_mut(key("include")) {
        let about: Vec<bool> = matrix
            .include
            .iter()
            .map(|i| {
                i.params.iter().all(|(a, v)| {
                    def.params
                        .iter()
                        .any(|(da, dv)| da == a && dv.name == v.name)
                })
            })
            .collect();
        let mut i = 0;
        inc.retain(|_| {
            i += 1;
            about.get(i - 1).copied().unwrap_or(false)
        });
        if inc.is_empty() {
            m.remove(key("include"));
        }
    }
    Ok(())
}

/// The suite text of `phases` for the recorded cell: the run's suite cut
/// to the cell, `${SUITE_DIR}` pinned, `repeat` gone, the overrides made.
pub fn suite_text(
    t: &Timeline,
    phases: &[Phase],
    over: &Overrides,
    description: &str,
) -> Result<String, ReplayError> {
    let h = &t.header;
    let file = PathBuf::from(&h.suite_file);
    let suite = Suite::parse(&file, &h.suite_text)
        .map_err(|e| ReplayError::Usage(format!("the suite the run read no longer parses: {e}")))?;
    let mut root: Value = serde_norway::from_str(&h.suite_text).map_err(bad_record)?;
    let Value::Mapping(m) = &mut root else {
        return Err(bad_record("the suite text is not a map"));
    };
    one_cell(m, &suite, &h.cell)?;
    m.remove(key("repeat"));
    m.insert(key("description"), Value::String(description.into()));
    m.insert(
        key("phases"),
        Value::Sequence(phases.iter().map(emit::phase).collect()),
    );
    if let Some(v) = &over.node_version {
        let version = suite.versions.get(v).ok_or_else(|| {
            let names: Vec<&str> = suite.versions.keys().map(String::as_str).collect();
            ReplayError::Usage(format!(
                "--node-version {v}: the suite has no such version under `versions:`{}",
                if names.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", names.join(", "))
                }
            ))
        })?;
        let Some(Value::Mapping(node)) = m.get_mut(key("node")) else {
            return Err(bad_record("the suite has no `node:` map"));
        };
        if !version.command.is_empty() {
            node.insert(
                key("command"),
                serde_norway::to_value(&version.command).map_err(bad_record)?,
            );
        }
        if let Some(image) = &version.image {
            node.insert(key("image"), Value::String(image.clone()));
        }
        if !version.env.is_empty() {
            let env = node
                .entry(key("env"))
                .or_insert_with(|| Value::Mapping(Mapping::new()));
            if let Value::Mapping(env) = env {
                for (k, v) in &version.env {
                    env.insert(key(k), Value::String(v.clone()));
                }
            }
        }
    }
    if let Some(c) = &over.node_command {
        let Some(Value::Mapping(node)) = m.get_mut(key("node")) else {
            return Err(bad_record("the suite has no `node:` map"));
        };
        node.insert(
            key("command"),
            serde_norway::to_value(c).map_err(bad_record)?,
        );
    }
    pin_suite_dir(&mut root, &h.suite_dir);
    let text = serde_norway::to_string(&root).map_err(bad_record)?;
    // What is written must be a suite of the one cell, or nothing runs.
    let again = Suite::parse(Path::new("replay.yaml"), &text)
        .map_err(|e| bad_record(format!("the replay's suite does not parse: {e}")))?;
    let ids: Vec<String> = again.cells().into_iter().map(|c| c.id).collect();
    if ids != [base_id(&h.cell)] {
        return Err(ReplayError::Usage(format!(
            "cannot cut the suite's matrix to the cell {} alone (it gives {}): replay it with `soak run {} --only` instead",
            h.cell,
            ids.join(", "),
            h.suite_file
        )));
    }
    Ok(text)
}

/// How a schedule is told in messages: `12 of 24 actions, waits x0.5`.
pub fn told(s: &Schedule, of: usize) -> String {
    let waits = if s.waits < 1.0 {
        format!(", waits x{}", s.waits)
    } else {
        String::new()
    };
    format!("{} of {of} actions{waits}", s.keep.len())
}

/// The run `soak replay` starts: the cell again, as it ran (with the
/// overrides), its report in `RUN/replays/`.
pub async fn replay(
    rec: &Recorded,
    over: &Overrides,
    interrupt: tokio::sync::watch::Receiver<bool>,
    progress: &crate::progress::Progress,
) -> Result<(Summary, PathBuf), ReplayError> {
    let t = &rec.timeline;
    let all = Schedule::all(t);
    let phases = phases(t, &all)?;
    let mut description = format!(
        "Replay of {} cell {} (seed {}, --duration-scale {}): its {} phases as they ran, {} chaos actions at the times they came.",
        rec.run_dir.display(),
        t.header.cell,
        t.header.seed,
        t.header.scale,
        phases.len(),
        all.keep.len()
    );
    if let Some(o) = over.describe() {
        description.push_str(&format!(" Against {o}."));
    }
    let text = suite_text(t, &phases, over, &description)?;
    let out = rec.run_dir.join("replays");
    std::fs::create_dir_all(&out)
        .map_err(|e| ReplayError::Environment(format!("cannot create {}: {e}", out.display())))?;
    let file = out.join(format!(
        "{}-{}.yaml",
        crate::plan::folder(&t.header.cell),
        chrono::Utc::now().format("%Y%m%dT%H%M%SZ")
    ));
    std::fs::write(&file, text)
        .map_err(|e| ReplayError::Environment(format!("cannot write {}: {e}", file.display())))?;
    eprintln!(
        "soak: replaying {} cell {}: {} phases, {} chaos actions; the suite is {}",
        rec.run_dir.display(),
        t.header.cell,
        phases.len(),
        all.keep.len(),
        file.display()
    );
    let mut opts = over.run_options(file, out, t.header.seed);
    opts.progress = Some(crate::progress::Mode::None);
    crate::run::run(&opts, interrupt, progress)
        .await
        .map_err(|e| match e.exit_code() {
            crate::exit::INVALID => ReplayError::Usage(e.to_string()),
            _ => ReplayError::Environment(e.to_string()),
        })
}

/// `soak shrink`: the search, then `shrunk.yaml` and `shrink.md` in the
/// run's folder. Returns the exit code: 0 when the shrunk suite failed as
/// the original did, 1 when the failure was not reproduced.
pub async fn shrink_run(
    rec: &Recorded,
    opts: &shrink::Options,
    interrupt: tokio::sync::watch::Receiver<bool>,
) -> Result<i32, ReplayError> {
    let check = shrink::target(rec, opts.check.as_deref())?;
    let t = &rec.timeline;
    let actions = t.actions().len();
    if actions == 0 {
        return Err(ReplayError::Usage(format!(
            "cell {} of {} ran no chaos phase: there are no actions to shrink (its explicit phases are the schedule; `soak replay` runs them again)",
            t.header.cell,
            rec.run_dir.display()
        )));
    }
    eprintln!(
        "soak shrink: cell {} of {}: {actions} chaos actions, check `{check}`; a schedule fails when it fails in 1 of {} tries; budget {}",
        t.header.cell,
        rec.run_dir.display(),
        opts.tries,
        crate::units::human_duration(opts.budget)
    );
    let out = rec.run_dir.join("shrink");
    let outcome = shrink::search(rec, opts, check, out, interrupt).await?;
    let write = |name: &str, text: &str| {
        let file = rec.run_dir.join(name);
        std::fs::write(&file, text)
            .map(|()| file.clone())
            .map_err(|e| ReplayError::Environment(format!("cannot write {}: {e}", file.display())))
    };
    // Kept only if it fails again: a schedule that failed once in the
    // search and never in the runs after it was a race won once.
    let best = outcome
        .best
        .as_ref()
        .filter(|_| outcome.confirmed.is_none_or(|(fails, _)| fails > 0));
    let shrunk = match best {
        Some(best) => {
            let description = format!(
                "Shrunk by soak shrink from {} cell {}: {} of its {} chaos actions, waits x{}, still failing `{}`.",
                rec.run_dir.display(),
                t.header.cell,
                best.keep.len(),
                actions,
                best.waits,
                outcome.check
            );
            Some(suite_text(t, &phases(t, best)?, &opts.over, &description)?)
        }
        None => None,
    };
    let report = shrink_report::render(rec, opts, &outcome, shrunk.as_deref());
    let report_file = write("shrink.md", &report)?;
    eprintln!("soak shrink: report {}", report_file.display());
    let interrupted = outcome.cut_short.as_deref() == Some("interrupted");
    match shrunk {
        Some(text) => {
            let file = write("shrunk.yaml", &text)?;
            let best = outcome.best.as_ref().map_or(0, |b| b.keep.len());
            eprintln!(
                "soak shrink: {actions} actions -> {best} in {} trials, {}{}",
                outcome.trials.len(),
                crate::units::human_duration(outcome.took),
                outcome
                    .confirmed
                    .map(|(f, t)| format!("; it failed {f} of {t} runs after the search"))
                    .unwrap_or_default()
            );
            println!("{}", file.display());
            Ok(if interrupted {
                crate::exit::INTERRUPTED
            } else {
                crate::exit::PASS
            })
        }
        None => {
            eprintln!(
                "soak shrink: the recorded schedule did not fail `{}` again{}",
                outcome.check,
                outcome
                    .cut_short
                    .as_deref()
                    .map(|w| format!(" ({w})"))
                    .unwrap_or_default()
            );
            Ok(if interrupted {
                crate::exit::INTERRUPTED
            } else {
                crate::exit::CHECK_FAILED
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MATRIX: &str = r#"
name: m
node:
  command: ["node", "--port", "${PORT}", "--cache", "${storage.cache}", "--dir", "${SUITE_DIR}/x"]
  ready: { resp: "127.0.0.1:${PORT}" }
matrix:
  allocator: [glibc, jemalloc, { glibc: { arena_max: 2, name: glibc-arena2 } }]
  storage:
    - { name: small, cache: 8MiB }
    - { name: large, cache: 64MiB }
  exclude:
    - { allocator: jemalloc, storage: large }
  include:
    - { allocator: glibc, storage: small, expect: { oom_kills: 0 } }
workload:
  resp: { target: "127.0.0.1:${PORT}" }
  keys: 100
  value_size: 8B
  mix: { set: 1.0 }
  rate: 10/s
  connections: 1
phases:
  - run: 1s
repeat: 3
"#;

    fn timeline(cell: &str) -> Timeline {
        Timeline {
            header: timeline::Header {
                version: timeline::VERSION,
                suite_file: "/s/m.yaml".into(),
                suite_dir: "/s".into(),
                suite_text: MATRIX.into(),
                cell: cell.into(),
                ..timeline::Header::default()
            },
            steps: vec![],
        }
    }

    #[test]
    fn a_replay_is_a_suite_of_the_one_cell_with_its_suite_folder_pinned() {
        let phases = vec![
            Phase::Run(RunFor::Time(std::time::Duration::from_millis(1500))),
            Phase::Verify,
        ];
        for cell in [
            "allocator=glibc,storage=small",
            "allocator=glibc-arena2,storage=large",
            "allocator=jemalloc,storage=small#2",
        ] {
            let text = suite_text(&timeline(cell), &phases, &Overrides::default(), "d").unwrap();
            let suite = Suite::parse(Path::new("r.yaml"), &text).unwrap();
            let ids: Vec<String> = suite.cells().into_iter().map(|c| c.id).collect();
            assert_eq!(ids, [base_id(cell)], "{text}");
            assert_eq!(suite.phases, phases);
            assert!(suite.repeat.is_none());
            assert!(
                text.contains("/s/x") && !text.contains("SUITE_DIR"),
                "{text}"
            );
        }
    }

    #[test]
    fn another_build_replaces_the_node_command() {
        let over = Overrides {
            node_command: Some(Overrides::parse_command("fixed --port '${PORT}'").unwrap()),
            ..Overrides::default()
        };
        let text = suite_text(
            &timeline("allocator=glibc,storage=small"),
            &[Phase::Verify],
            &over,
            "d",
        )
        .unwrap();
        let suite = Suite::parse(Path::new("r.yaml"), &text).unwrap();
        assert_eq!(suite.node.command, ["fixed", "--port", "${PORT}"]);
        let e = suite_text(
            &timeline("allocator=glibc,storage=small"),
            &[],
            &Overrides {
                node_version: Some("v9".into()),
                ..Overrides::default()
            },
            "d",
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("--node-version v9: the suite has no such version"),
            "{e}"
        );
    }
}
