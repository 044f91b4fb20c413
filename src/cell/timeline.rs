//! What a cell did, in order, as explicit phases: each phase as it ran
//! (durations as they were, after `--duration-scale`), each chaos phase
//! with the actions its seed drew, when each came and how long it took.
//! Saved as `replay.yaml` in the cell's folder; `soak replay` runs it
//! again and `soak shrink` cuts its chaos actions down.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_norway::Value;

use crate::suite::phase::RunFor;
use crate::suite::{emit, ChaosAction, ChaosSpec, Phase};

/// The version of `replay.yaml`: a run folder written before (or after) a
/// change of it is refused with its version named.
pub const VERSION: u32 = 1;

/// The file in each cell's folder.
pub const FILE: &str = "replay.yaml";

/// What the run knew when the cell began: enough to plan it again.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Header {
    pub version: u32,
    /// The soak that ran it.
    pub soak: String,
    pub suite_file: String,
    /// The suite's folder, for `${SUITE_DIR}` (absolute).
    pub suite_dir: String,
    /// The suite as it was when the run read it.
    pub suite_text: String,
    pub cell: String,
    /// The run's seed (the workload's keys and values).
    pub seed: u64,
    /// `--duration-scale` of the run; the steps' durations have it applied.
    pub scale: f64,
}

/// The whole record.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Timeline {
    #[serde(flatten)]
    pub header: Header,
    pub steps: Vec<Step>,
}

/// One step: a phase as it ran, or a chaos phase with what it drew.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    Phase(Ran),
    Chaos(Chaos),
}

/// A phase of the suite's own.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Ran {
    /// Seconds since the cell began, and the operations the load had had
    /// acknowledged then.
    pub at_s: f64,
    pub ops: u64,
    pub phase: Value,
}

/// A chaos phase: its length and the actions it drew.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Chaos {
    pub at_s: f64,
    pub ops: u64,
    pub seed: u64,
    pub during_s: f64,
    pub actions: Vec<Drawn>,
}

/// One action a chaos schedule drew.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Drawn {
    /// `kill`, `pause`, `restart`, `network`, `disk`, `power_cut`.
    pub action: String,
    /// Seconds after its chaos phase began, and the load's acknowledged
    /// operations then.
    pub at_s: f64,
    pub ops: u64,
    /// How long it took (a kill: until the node was ready again; a fault:
    /// its hold and its lifting).
    pub took_s: f64,
    /// What it did, as explicit phases: `kill` and `start`, `pause`,
    /// `restart`, a fault, `run` for its hold, and its lifting.
    pub phases: Vec<Value>,
}

impl Timeline {
    pub fn phase(&mut self, at_s: f64, ops: u64, p: &Phase) {
        self.steps.push(Step::Phase(Ran {
            at_s,
            ops,
            phase: emit::phase(p),
        }));
    }

    pub fn chaos(&mut self, at_s: f64, ops: u64, seed: u64, during: Duration) {
        self.steps.push(Step::Chaos(Chaos {
            at_s,
            ops,
            seed,
            during_s: during.as_secs_f64(),
            actions: vec![],
        }));
    }

    /// An action of the chaos phase begun last.
    pub fn drawn(&mut self, d: Drawn) {
        if let Some(Step::Chaos(c)) = self.steps.last_mut() {
            c.actions.push(d);
        }
    }

    /// Written whole each time (a rename, so a reader never sees half).
    pub fn save(&self, dir: &Path) -> std::io::Result<()> {
        if self.header.suite_text.is_empty() {
            return Ok(());
        }
        let text = serde_norway::to_string(self).map_err(std::io::Error::other)?;
        let tmp = dir.join(format!("{FILE}.tmp"));
        std::fs::write(&tmp, format!("# What `soak replay` and `soak shrink` read: the cell's phases as they ran.\n{text}"))?;
        std::fs::rename(tmp, dir.join(FILE))
    }

    /// Every chaos action, in order.
    pub fn actions(&self) -> Vec<&Drawn> {
        self.steps
            .iter()
            .flat_map(|s| match s {
                Step::Chaos(c) => c.actions.iter().collect(),
                Step::Phase(_) => vec![],
            })
            .collect()
    }
}

/// The action's word in the report (`kill`, `power_cut`, ...).
pub fn word(a: crate::model::Action) -> String {
    serde_json::to_value(a)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// What a chaos action does, as the explicit phases that do the same:
/// its durations scaled as the cell ran them.
pub fn as_phases(
    a: &ChaosAction,
    c: &ChaosSpec,
    scale: f64,
    lift: Option<ChaosAction>,
) -> Vec<Phase> {
    let mut out = match a {
        ChaosAction::Kill => vec![Phase::Kill(c.signal), Phase::Start],
        ChaosAction::Pause => vec![Phase::Pause(c.pause.mul_f64(scale))],
        ChaosAction::Restart => vec![Phase::Restart],
        ChaosAction::Network(n) => vec![Phase::Network(*n)],
        ChaosAction::Disk(d) => vec![Phase::Disk(d.clone())],
        ChaosAction::Member(m) => vec![Phase::Member(m.clone())],
        ChaosAction::Partition(p) => vec![Phase::Partition(p.clone())],
        ChaosAction::Heal => vec![Phase::Heal],
    };
    if let Some(lift) = lift {
        out.push(Phase::Run(RunFor::Time(c.hold.mul_f64(scale))));
        out.push(match lift {
            ChaosAction::Network(n) => Phase::Network(n),
            ChaosAction::Disk(d) => Phase::Disk(d),
            ChaosAction::Heal => Phase::Heal,
            other => unreachable!("only faults are lifted, not {other:?}"),
        });
    }
    out
}
