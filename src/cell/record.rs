//! The recorder: folds a cell's events into its records (restarts with
//! what each death took, phases, chaos actions, execs, swaps, offline
//! inspections, and what the read-backs found). The records are what the
//! events said, so `summary.json` and `events.jsonl` cannot disagree.

use super::event::Event;
use crate::model::{
    ChaosRecord, ExecResult, Integrity, OfflineRecord, Oracle, PhaseRecord, Restart, UpgradeRecord,
};

#[derive(Debug, Default, Clone)]
pub struct Recorder {
    pub restarts: Vec<Restart>,
    pub phases: Vec<PhaseRecord>,
    pub chaos: Vec<ChaosRecord>,
    pub execs: Vec<ExecResult>,
    pub upgrades: Vec<UpgradeRecord>,
    pub offline: Vec<OfflineRecord>,
    /// Faults lifted, when (their recovery is measured after the cell).
    pub lifts: Vec<crate::model::Recovery>,
    /// When faults were put in force (chaos actions, power cuts, network
    /// and disk faults), seconds since the cell started: a recovery is
    /// measured up to the next one.
    pub faults_at: Vec<f64>,
    /// What the read-backs (after restarts, `verify` phases, offline
    /// verification) found; the load's own reads are added at the end.
    pub integrity: Integrity,
}

impl Recorder {
    pub fn record(&mut self, t: f64, e: &Event) {
        match e {
            Event::Ready {
                cause: Some(cause),
                down_at_s,
                after_ms,
                exit,
                ..
            } => self
                .restarts
                .push(Restart::new(*cause, *down_at_s, *after_ms, exit.clone())),
            Event::PhaseFinished {
                phase,
                place,
                start_s,
                outcome,
                load,
                disk_bytes,
                ..
            } => self.phases.push(PhaseRecord {
                phase: phase.clone(),
                place: *place,
                start_s: *start_s,
                end_s: t,
                outcome: outcome.clone(),
                load: load.clone(),
                disk_bytes: *disk_bytes,
            }),
            Event::FaultLifted { fault } => self.lifts.push(crate::model::Recovery {
                fault: fault.clone(),
                lifted_at_s: t,
                serving_after_s: None,
                next_fault_after_s: None,
            }),
            Event::FaultSet { .. } | Event::PowerCut { .. } => self.faults_at.push(t),
            Event::ChaosAction {
                seed,
                at_s,
                action,
                fault,
            } => {
                self.faults_at.push(t);
                self.chaos.push(ChaosRecord {
                    seed: *seed,
                    at_s: *at_s,
                    action: *action,
                    fault: fault.clone(),
                })
            }
            Event::ExecFinished { result, .. } => self.execs.push(result.clone()),
            Event::Swapped { record } => self.upgrades.push((**record).clone()),
            Event::OfflineVerified { record, .. } => {
                let mut found = record.inspection.integrity.unwrap_or_default();
                if record.inspection.corruption.is_some() {
                    found.corrupted += 1;
                }
                self.integrity.add(&found);
                self.offline.push((**record).clone());
            }
            Event::ReadBack {
                oracle,
                restart,
                integrity,
                first_lost,
                holes,
                took_s,
            } => {
                self.integrity.add(integrity);
                // The losses go on the death that took them: the restart
                // read back, or for a verify, the newest (before any
                // restart, the node lost them running: the cell's alone).
                // The writes in doubt a verify finds stay the cell's.
                let r = match restart {
                    Some(n) => self.restarts.get_mut(n - 1),
                    None => self.restarts.last_mut(),
                };
                if let Some(r) = r {
                    let mut i = *integrity;
                    if *oracle == Oracle::Verify {
                        i.in_doubt = 0;
                    }
                    r.found(*oracle, &i, first_lost.clone());
                    r.holes.extend(holes.iter().cloned());
                    if restart.is_some() {
                        r.readback_s = Some(*took_s);
                    }
                }
            }
            Event::ReadsFound {
                integrity,
                first_lost,
            } => {
                if let Some(r) = self.restarts.last_mut() {
                    r.found(Oracle::Reads, integrity, first_lost.clone());
                }
            }
            _ => {}
        }
    }

    /// Deaths soak did not cause, so far.
    pub fn unexpected_deaths(&self) -> usize {
        self.restarts
            .iter()
            .filter(|r| r.reason.unexpected())
            .count()
    }
}
