//! The phases that act on a cluster's members: one member killed,
//! stopped, started or paused (`kill: { member: leader }`), and the
//! members cut apart (`partition`, `heal`). A target such as `leader` or
//! `random` is resolved when the phase runs; the events and the timeline
//! name the members it chose, so that a replay does the same.

use std::collections::BTreeSet;
use std::time::Duration;

use rand::seq::SliceRandom;
use rand::SeedableRng;

use super::event::Event;
use super::{Cell, CellError};
use crate::driver::{DriverError, MemberOp, Node};
use crate::faults::{Applied, Asked};
use crate::model::Cause;
use crate::net::netns::Cut;
use crate::suite::cluster::{MemberPhase, Partition, Target, Verb};
use nix::sys::signal::Signal;

/// What `CellError::Setup` says of a member phase in a cell that is not
/// a cluster.
const NOT_A_CLUSTER: &str =
    "this phase acts on a cluster's members: give the suite a `cluster: { members: 3, ... }` section";

/// The links a partition cuts among members `1..=n`, for a chosen leader
/// and an order drawn from the seed (`order`: the members shuffled).
pub fn cuts(p: &Partition, n: usize, chosen: &[usize], order: &[usize]) -> Vec<Cut> {
    let mut out = Vec::new();
    // Every pair of members in different sides, both ways.
    let split = |sides: &[BTreeSet<usize>], out: &mut Vec<Cut>| {
        for a in 1..=n {
            for b in (a + 1)..=n {
                let side = |m: usize| sides.iter().position(|s| s.contains(&m));
                if side(a) != side(b) {
                    out.extend(Cut::both_ways(a, b, 1.0, None));
                }
            }
        }
    };
    match p {
        Partition::Isolate(_) => {
            let alone: BTreeSet<usize> = chosen.iter().copied().collect();
            let rest: BTreeSet<usize> = (1..=n).filter(|m| !alone.contains(m)).collect();
            // Isolating everyone cuts every link.
            let sides: Vec<BTreeSet<usize>> = if rest.is_empty() {
                alone.iter().map(|&m| BTreeSet::from([m])).collect()
            } else {
                vec![alone, rest]
            };
            split(&sides, &mut out);
        }
        Partition::Halves => {
            let minority: BTreeSet<usize> = order[..(n - 1) / 2].iter().copied().collect();
            let majority: BTreeSet<usize> = order[(n - 1) / 2..].iter().copied().collect();
            split(&[minority, majority], &mut out);
        }
        Partition::Groups(groups) => {
            let mut sides: Vec<BTreeSet<usize>> = groups
                .iter()
                .map(|(_, m)| m.iter().copied().collect())
                .collect();
            // Members no group names form one more group.
            let rest: BTreeSet<usize> = (1..=n)
                .filter(|m| !sides.iter().any(|s| s.contains(m)))
                .collect();
            if !rest.is_empty() {
                sides.push(rest);
            }
            split(&sides, &mut out);
        }
        Partition::Bridge => bridge(n, order, &mut out),
        Partition::Ring => ring(n, order, &mut out),
        Partition::Drop { .. } => {
            if let [from, to] = chosen {
                out.push(Cut {
                    from: *from,
                    to: *to,
                    loss: 1.0,
                    hold: None,
                });
            }
        }
        Partition::Loss { between, rate } => {
            out.extend(Cut::both_ways(between.0, between.1, *rate, None))
        }
        Partition::Delay {
            between,
            by,
            jitter,
        } => {
            let hold = crate::net::delay::Hold {
                by: *by,
                jitter: *jitter,
            };
            out.extend(Cut::both_ways(between.0, between.1, 0.0, Some(hold)))
        }
    }
    out
}

/// Two halves, each hearing the member in the middle (`order[n / 2]`).
fn bridge(n: usize, order: &[usize], out: &mut Vec<Cut>) {
    for &a in &order[..n / 2] {
        for &b in &order[n / 2 + 1..] {
            out.extend(Cut::both_ways(a, b, 1.0, None));
        }
    }
}

/// Each member hearing only its neighbours in `order`, as a ring.
fn ring(n: usize, order: &[usize], out: &mut Vec<Cut>) {
    let place = |m: usize| order.iter().position(|&x| x == m).unwrap_or(0);
    for a in 1..=n {
        for b in (a + 1)..=n {
            let d = place(a).abs_diff(place(b));
            if d != 1 && d != n - 1 {
                out.extend(Cut::both_ways(a, b, 1.0, None));
            }
        }
    }
}

impl<N: Node> Cell<'_, N> {
    /// The next draw's generator: from the seed, the phase and how many
    /// draws came before (a chaos phase's actions are one phase).
    fn rng(&mut self) -> rand::rngs::SmallRng {
        self.member_draws += 1;
        rand::rngs::SmallRng::seed_from_u64(crate::units::mix64(
            self.ctx.seed
                ^ self.phase_counter.wrapping_mul(0x9e37_79b9)
                ^ (self.member_draws.wrapping_mul(0x85eb_ca6b) << 17)
                ^ 0xc1u64,
        ))
    }

    /// The members `t` names, now (1-based, in order).
    async fn resolve(&mut self, t: Target) -> Result<Vec<usize>, CellError> {
        let mut rng = self.rng();
        let c = self
            .node
            .cluster()
            .ok_or_else(|| CellError::Setup(NOT_A_CLUSTER.into()))?;
        let n = c.size();
        let mut all: Vec<usize> = (1..=n).collect();
        all.shuffle(&mut rng);
        let mut got = match t {
            Target::One(m) if m >= 1 && m <= n => vec![m],
            Target::One(m) => {
                return Err(CellError::Setup(format!(
                    "there is no member {m}: the cluster has {n}"
                )))
            }
            Target::Random => vec![all[0]],
            Target::Leader => vec![c.leader().await.map_err(CellError::Setup)?],
            Target::Minority => all[..(n - 1) / 2].to_vec(),
            Target::Majority => all[..n / 2 + 1].to_vec(),
            Target::All => all,
        };
        got.sort_unstable();
        Ok(got)
    }

    /// A member phase: the members it targets, each in turn.
    pub(super) async fn member_phase(&mut self, p: &MemberPhase) -> Result<String, CellError> {
        let members = self.resolve(p.member).await?;
        let mut said = Vec::new();
        match &p.verb {
            Verb::Kill(sig) => {
                for &m in &members {
                    said.push(self.member_op(m, MemberOp::Kill(sig.0), "kill").await?);
                }
            }
            Verb::Stop => {
                for &m in &members {
                    said.push(self.member_op(m, MemberOp::Stop, "stop").await?);
                }
            }
            Verb::Start => {
                for &m in &members {
                    said.push(self.member_op(m, MemberOp::Start, "start").await?);
                }
            }
            Verb::Restart => {
                for &m in &members {
                    said.push(self.member_op(m, MemberOp::Stop, "stop").await?);
                    said.push(self.member_op(m, MemberOp::Start, "start").await?);
                }
            }
            Verb::Pause(d) => return self.pause_members(&members, *d).await,
            &Verb::PowerCut { torn } => return self.cut_members(&members, torn).await,
            // One member at a time, each ready before the next.
            Verb::Upgrade(v) => {
                for &m in &members {
                    said.push(self.member_op(m, MemberOp::Stop, "stop").await?);
                    if let Some(d) = self.members_down.get_mut(&m) {
                        d.0 = Cause::Upgrade;
                    }
                    said.push(
                        self.member_op(m, MemberOp::Use(v.clone()), "upgrade")
                            .await?,
                    );
                    said.push(self.member_op(m, MemberOp::Start, "start").await?);
                }
            }
        }
        Ok(said.join("; "))
    }

    /// Does `op` to member `m` (a start of one that runs, or a stop of
    /// one that does not, is said and skipped) and tells of it.
    async fn member_op(&mut self, m: usize, op: MemberOp, word: &str) -> Result<String, CellError> {
        self.supervise().await?;
        let c = self
            .node
            .cluster()
            .ok_or_else(|| CellError::Setup(NOT_A_CLUSTER.into()))?;
        let up = c.is_up(m);
        let down = match &op {
            MemberOp::Kill(_) => Some(Cause::Kill),
            MemberOp::Stop => Some(Cause::Stop),
            _ => None,
        };
        let start = matches!(op, MemberOp::Start);
        let text = match (&op, up) {
            (MemberOp::Start, true) => "already running".to_string(),
            (MemberOp::Kill(_) | MemberOp::Stop, false) => "not running".to_string(),
            _ => match c.act(m, op).await {
                Ok(text) => text,
                // A member soak took down that does not come back.
                Err(e) if start && self.members_down.contains_key(&m) => {
                    let (after, at) = self.members_down[&m];
                    return Err(self.not_recovered(after, at, e));
                }
                Err(e) => return Err(e.into()),
            },
        };
        match (down, start) {
            (Some(cause), _) if up => {
                self.members_down.insert(m, (cause, self.bus.t()));
            }
            (_, true) => {
                self.members_down.remove(&m);
            }
            _ => {}
        }
        self.bus.emit(Event::Member {
            member: m,
            action: word.into(),
            text: text.clone(),
        });
        Ok(format!("member {m}: {text}"))
    }

    /// Cuts the power of `members` together: each killed, then each one's
    /// unsynced writes dropped, then each started again (a member that
    /// was not running is cut too: its files lose what it never synced).
    async fn cut_members(&mut self, members: &[usize], torn: bool) -> Result<String, CellError> {
        let faults = self.ctx.faults.clone();
        if let Some(&m) = members.first() {
            let asked = Asked::MemberCut { member: m, torn };
            if !faults.takes(asked) {
                return Err(CellError::Setup(asked.unavailable()));
            }
        }
        let mut said = Vec::new();
        let down_at_s = self.bus.t();
        for &m in members {
            said.push(
                self.member_op(m, MemberOp::Kill(Signal::SIGKILL), "kill")
                    .await?,
            );
        }
        for &m in members {
            let dropped = match faults.apply(Asked::MemberCut { member: m, torn }) {
                Ok(Applied::Cut { dropped }) => dropped,
                Ok(_) => 0,
                Err(e) => return Err(CellError::Setup(e)),
            };
            let text = format!(
                "{} not fsynced dropped{}",
                crate::units::Bytes(dropped),
                if torn { " (torn)" } else { "" }
            );
            self.bus.emit(Event::Member {
                member: m,
                action: "power_cut".into(),
                text: text.clone(),
            });
            said.push(format!("member {m}: power cut, {text}"));
        }
        let c = self
            .node
            .cluster()
            .ok_or_else(|| CellError::Setup(NOT_A_CLUSTER.into()))?;
        let started = c.start_together(members).await;
        for (m, r) in started {
            let text = r.map_err(|e| self.not_recovered(Cause::PowerCut, down_at_s, e))?;
            self.members_down.remove(&m);
            self.bus.emit(Event::Member {
                member: m,
                action: "start".into(),
                text: text.clone(),
            });
            said.push(format!("member {m}: {text}"));
        }
        Ok(said.join("; "))
    }

    /// A member that does not start again after it went down (`after`, at
    /// `down_at_s`): what it was left with is the cell's finding, as for
    /// one node ([`Event::NotRecovered`]); another error is the driver's.
    fn not_recovered(&mut self, after: Cause, down_at_s: f64, e: DriverError) -> CellError {
        match e {
            e @ (DriverError::ExitedBeforeReady { .. } | DriverError::NeverReady { .. }) => {
                let error = e.to_string();
                self.bus.emit(Event::NotRecovered {
                    after,
                    down_at_s,
                    error: error.clone(),
                });
                CellError::NotRecovered {
                    after,
                    at_s: down_at_s,
                    error,
                }
            }
            e => e.into(),
        }
    }

    /// Freezes `members` for `d`, then thaws them, whatever happens in
    /// between (the rest of the cluster and the load go on).
    async fn pause_members(&mut self, members: &[usize], d: Duration) -> Result<String, CellError> {
        self.supervise().await?;
        for &m in members {
            self.member_op(m, MemberOp::Pause, "pause").await?;
        }
        let held = self.hold(d).await;
        for &m in members {
            if let Some(c) = self.node.cluster() {
                if c.is_up(m) {
                    let _ = c.act(m, MemberOp::Resume).await;
                    self.bus.emit(Event::Member {
                        member: m,
                        action: "resume".into(),
                        text: "SIGCONT".into(),
                    });
                }
            }
        }
        held?;
        Ok(format!(
            "member{} {} paused for {} and resumed",
            if members.len() == 1 { "" } else { "s" },
            members
                .iter()
                .map(|m| m.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            crate::units::human_duration(d)
        ))
    }

    /// Puts a partition in force (the one before it lifted).
    pub(super) async fn partition(&mut self, p: &Partition) -> Result<String, CellError> {
        Ok(self.partition_resolved(p).await?.0)
    }

    /// A chaos schedule's member action: the members it chose, each killed
    /// and started again (or paused, stopped, restarted, started); the
    /// phases that did it, naming them.
    pub(super) async fn chaos_member(
        &mut self,
        m: &MemberPhase,
    ) -> Result<Vec<crate::suite::Phase>, CellError> {
        use crate::suite::Phase;
        let members = self.resolve(m.member).await?;
        let mut ran = Vec::new();
        for n in members {
            let one = |verb| {
                Phase::Member(MemberPhase {
                    verb,
                    member: Target::One(n),
                })
            };
            match &m.verb {
                &Verb::Kill(sig) => {
                    self.member_op(n, MemberOp::Kill(sig.0), "kill").await?;
                    self.member_op(n, MemberOp::Start, "start").await?;
                    ran.extend([one(Verb::Kill(sig)), one(Verb::Start)]);
                }
                &Verb::Pause(d) => {
                    self.pause_members(&[n], d).await?;
                    ran.push(one(Verb::Pause(d)));
                }
                verb => {
                    let phase = MemberPhase {
                        verb: verb.clone(),
                        member: Target::One(n),
                    };
                    self.member_phase(&phase).await?;
                    ran.push(Phase::Member(phase));
                }
            }
        }
        Ok(ran)
    }

    /// Puts a partition in force; what it did in words, and the partition
    /// with the members it chose (a replay makes the same cut).
    pub(super) async fn partition_resolved(
        &mut self,
        p: &Partition,
    ) -> Result<(String, Partition), CellError> {
        let (chosen, n) = match p {
            Partition::Isolate(t) => {
                let m = self.resolve(*t).await?;
                (m, self.cluster_size()?)
            }
            Partition::Drop { from, to } => {
                let a = self.resolve(*from).await?;
                let b = self.resolve(*to).await?;
                (vec![a[0], b[0]], self.cluster_size()?)
            }
            _ => (vec![], self.cluster_size()?),
        };
        if let Some(&m) = p.named().iter().find(|&&m| m == 0 || m > n) {
            return Err(CellError::Setup(format!(
                "there is no member {m}: the cluster has {n}"
            )));
        }
        let mut order: Vec<usize> = (1..=n).collect();
        order.shuffle(&mut self.rng());
        let cut = cuts(p, n, &chosen, &order);
        let c = self
            .node
            .cluster()
            .ok_or_else(|| CellError::Setup(NOT_A_CLUSTER.into()))?;
        c.set_cuts(&cut).map_err(CellError::Setup)?;
        let fault = format!("partition {}", describe(p, &chosen, &order, n));
        self.bus.emit(Event::FaultSet {
            fault: fault.clone(),
        });
        let delayed = cut.iter().filter(|c| c.hold.is_some()).count();
        Ok((
            match delayed {
                0 => format!("{fault} ({} links cut)", cut.len()),
                d => format!("{fault} ({d} links delayed)"),
            },
            resolved(p, &chosen, &order, n),
        ))
    }

    fn cluster_size(&mut self) -> Result<usize, CellError> {
        Ok(self
            .node
            .cluster()
            .ok_or_else(|| CellError::Setup(NOT_A_CLUSTER.into()))?
            .size())
    }

    /// Lifts every partition.
    pub(super) async fn heal(&mut self) -> Result<String, CellError> {
        let c = self
            .node
            .cluster()
            .ok_or_else(|| CellError::Setup(NOT_A_CLUSTER.into()))?;
        let held = c.set_cuts(&[]).map_err(CellError::Setup)?;
        let text = match held {
            0 => "healed".to_string(),
            n => format!("healed ({n} packets held on the delayed links)"),
        };
        self.bus.emit(Event::FaultLifted {
            fault: format!("partition {text}"),
        });
        Ok(text)
    }
}

/// The partition with the members it chose: the same cut, drawn from no
/// seed and asking no leader probe.
fn resolved(p: &Partition, chosen: &[usize], order: &[usize], n: usize) -> Partition {
    let sorted = |m: &[usize]| {
        let mut m = m.to_vec();
        m.sort_unstable();
        m
    };
    match p {
        Partition::Isolate(_) if chosen.len() == 1 => Partition::Isolate(Target::One(chosen[0])),
        Partition::Isolate(_) => {
            let rest: Vec<usize> = (1..=n).filter(|m| !chosen.contains(m)).collect();
            Partition::Groups(vec![("a".into(), sorted(chosen)), ("b".into(), rest)])
        }
        Partition::Halves => Partition::Groups(vec![
            ("minority".into(), sorted(&order[..(n - 1) / 2])),
            ("majority".into(), sorted(&order[(n - 1) / 2..])),
        ]),
        Partition::Drop { .. } => Partition::Drop {
            from: Target::One(chosen[0]),
            to: Target::One(chosen[1]),
        },
        other => other.clone(),
    }
}

/// A partition in words, with the members it chose.
fn describe(p: &Partition, chosen: &[usize], order: &[usize], n: usize) -> String {
    let list = |m: &[usize]| {
        let mut m = m.to_vec();
        m.sort_unstable();
        m.iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    };
    match p {
        Partition::Isolate(t) => format!("isolate {} ({t})", list(chosen)),
        Partition::Halves => format!(
            "{} | {}",
            list(&order[..(n - 1) / 2]),
            list(&order[(n - 1) / 2..])
        ),
        Partition::Bridge => format!(
            "bridge {} | {} | {}",
            list(&order[..n / 2]),
            order[n / 2],
            list(&order[n / 2 + 1..])
        ),
        Partition::Ring => format!(
            "ring {}",
            order
                .iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(" - ")
        ),
        Partition::Drop { .. } => format!("drop {} -> {}", chosen[0], chosen[1]),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(c: &[Cut]) -> BTreeSet<(usize, usize)> {
        c.iter()
            .filter(|c| c.loss >= 1.0)
            .map(|c| (c.from, c.to))
            .collect()
    }

    #[test]
    fn isolating_the_leader_cuts_it_from_every_other_member_both_ways() {
        let c = pairs(&cuts(
            &Partition::Isolate(Target::Leader),
            3,
            &[2],
            &[1, 2, 3],
        ));
        assert_eq!(c, BTreeSet::from([(2, 1), (1, 2), (2, 3), (3, 2)]));
    }

    #[test]
    fn halves_split_a_minority_from_a_majority() {
        let c = pairs(&cuts(&Partition::Halves, 5, &[], &[4, 1, 2, 3, 5]));
        // Minority {4, 1} from majority {2, 3, 5}: 2 x 3 links, both ways.
        assert_eq!(c.len(), 12);
        assert!(c.contains(&(4, 2)) && c.contains(&(5, 1)));
        assert!(!c.contains(&(4, 1)) && !c.contains(&(2, 3)));
    }

    #[test]
    fn a_bridge_keeps_the_middle_member_in_both_halves() {
        let c = pairs(&cuts(&Partition::Bridge, 5, &[], &[1, 2, 3, 4, 5]));
        assert!(c.contains(&(1, 4)) && c.contains(&(5, 2)));
        assert!(!c.iter().any(|&(a, b)| a == 3 || b == 3), "{c:?}");
    }

    #[test]
    fn a_ring_keeps_neighbours_only() {
        let c = pairs(&cuts(&Partition::Ring, 5, &[], &[1, 2, 3, 4, 5]));
        assert!(!c.contains(&(1, 2)) && !c.contains(&(5, 1)));
        assert!(c.contains(&(1, 3)) && c.contains(&(2, 4)));
    }

    #[test]
    fn groups_and_one_way_drops_and_loss() {
        let g = Partition::Groups(vec![("a".into(), vec![1]), ("b".into(), vec![2])]);
        // Member 3 is in no group: a group of its own.
        assert_eq!(pairs(&cuts(&g, 3, &[], &[1, 2, 3])).len(), 6);
        let d = cuts(
            &Partition::Drop {
                from: Target::One(1),
                to: Target::One(2),
            },
            3,
            &[1, 2],
            &[1, 2, 3],
        );
        assert_eq!(pairs(&d), BTreeSet::from([(1, 2)]));
        let l = cuts(
            &Partition::Loss {
                between: (1, 3),
                rate: 0.2,
            },
            3,
            &[],
            &[1, 2, 3],
        );
        assert_eq!(l.len(), 2);
        assert!(l.iter().all(|c| c.loss == 0.2));
    }
}
