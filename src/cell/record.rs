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
    /// Each fault from when it was put in force to when it was lifted
    /// (`None`: never), in words: a partition, a member killed or paused.
    pub fault_spans: Vec<FaultSpan>,
}

/// How long after a fault is lifted a finding is still told with it.
pub const AFTERMATH_S: f64 = 10.0;

/// A fault's time in force.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultSpan {
    pub from_s: f64,
    pub to_s: Option<f64>,
    pub what: String,
    /// The member it concerns, for a member's fault (closed when the
    /// member is started or resumed).
    pub member: Option<usize>,
}

impl Recorder {
    /// The faults in force at any time between `a` and `b` (seconds), and
    /// those lifted up to [`AFTERMATH_S`] before `a`, said so: a member
    /// catching up after a partition heals still serves what it missed.
    pub fn faults_during(&self, a: f64, b: f64) -> Vec<crate::model::ActiveFault> {
        self.fault_spans
            .iter()
            .filter(|f| f.from_s <= b && f.to_s.is_none_or(|t| t >= a - AFTERMATH_S))
            .map(|f| crate::model::ActiveFault {
                what: f.what.clone(),
                from_s: f.from_s,
                to_s: f.to_s,
            })
            .collect()
    }

    fn fault_spans(&mut self, t: f64, e: &Event) {
        let open = |m: Option<usize>, f: &FaultSpan| f.to_s.is_none() && f.member == m;
        match e {
            Event::FaultSet { fault } => {
                // A partition replaces the one before it.
                if fault.starts_with("partition") {
                    for f in self
                        .fault_spans
                        .iter_mut()
                        .filter(|f| open(None, f) && f.what.starts_with("partition"))
                    {
                        f.to_s = Some(t);
                    }
                }
                self.fault_spans.push(FaultSpan {
                    from_s: t,
                    to_s: None,
                    what: fault.clone(),
                    member: None,
                });
            }
            Event::FaultLifted { fault } => {
                let partition = fault.starts_with("partition");
                for f in self
                    .fault_spans
                    .iter_mut()
                    .filter(|f| open(None, f) && f.what.starts_with("partition") == partition)
                {
                    f.to_s = Some(t);
                }
            }
            Event::Member {
                member,
                action,
                text,
            } => match action.as_str() {
                "kill" | "stop" | "pause" => self.fault_spans.push(FaultSpan {
                    from_s: t,
                    to_s: None,
                    what: format!(
                        "member {member} {} ({text})",
                        if action == "pause" { "paused" } else { "down" }
                    ),
                    member: Some(*member),
                }),
                // The member is down already (killed): its span says why.
                "power_cut" => {
                    for f in self
                        .fault_spans
                        .iter_mut()
                        .filter(|f| open(Some(*member), f))
                    {
                        f.what = format!("member {member} power cut ({text})");
                    }
                }
                _ => {
                    for f in self
                        .fault_spans
                        .iter_mut()
                        .filter(|f| open(Some(*member), f))
                    {
                        f.to_s = Some(t);
                    }
                }
            },
            Event::Killed { signal, .. } => self.fault_spans.push(FaultSpan {
                from_s: t,
                to_s: None,
                what: format!("node killed ({signal})"),
                member: Some(0),
            }),
            Event::Ready { .. } => {
                for f in self.fault_spans.iter_mut().filter(|f| open(Some(0), f)) {
                    f.to_s = Some(t);
                }
            }
            _ => {}
        }
    }
}

impl Recorder {
    /// Folds one event into the records (its fault spans too: see
    /// [`Recorder::faults_during`]).
    pub fn record(&mut self, t: f64, e: &Event) {
        self.fault_spans(t, e);
        self.fold(t, e);
    }

    /// A read-back's findings: the cell's, and the losses on the death
    /// that took them (the restart read back, or for a verify, the newest;
    /// before any restart, the node lost them running: the cell's alone).
    /// The writes in doubt a verify finds stay the cell's.
    fn read_back(
        &mut self,
        oracle: Oracle,
        restart: Option<usize>,
        integrity: &Integrity,
        first_lost: &Option<crate::model::LostWrite>,
        holes: &[crate::model::Hole],
        took_s: f64,
    ) {
        self.integrity.add(integrity);
        let r = match restart {
            Some(n) => self.restarts.get_mut(n - 1),
            None => self.restarts.last_mut(),
        };
        if let Some(r) = r {
            let mut i = *integrity;
            if oracle == Oracle::Verify {
                i.in_doubt = 0;
            }
            r.found(oracle, &i, first_lost.clone());
            r.holes.extend(holes.iter().cloned());
            if restart.is_some() {
                r.readback_s = Some(took_s);
            }
        }
    }

    fn fold(&mut self, t: f64, e: &Event) {
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
            Event::FaultSet { .. } | Event::PowerCut { .. } | Event::Member { .. } => {
                self.faults_at.push(t)
            }
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
            } => self.read_back(*oracle, *restart, integrity, first_lost, holes, *took_s),
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
