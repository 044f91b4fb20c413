//! Seeded chaos schedules: the same seed gives the same actions at the same
//! offsets, so a failure found at night can be replayed with `--seed`.

use std::time::Duration;

use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::suite::{ChaosAction, ChaosSpec};

/// One planned action, `at` after the chaos phase began.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Planned {
    #[serde(serialize_with = "secs")]
    pub at: Duration,
    pub action: ChaosAction,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// The actions of a chaos phase: gaps drawn uniformly from `every`
/// (scaled), actions uniformly from `actions`, until `during` (scaled) ends.
pub fn plan(spec: &ChaosSpec, seed: u64, scale: f64) -> Vec<Planned> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let during = spec.during.mul_f64(scale);
    let (lo, hi) = (
        spec.every_min.mul_f64(scale).as_secs_f64(),
        spec.every_max.mul_f64(scale).as_secs_f64(),
    );
    let mut out = vec![];
    let mut t = 0.0;
    loop {
        t += if hi > lo {
            rng.random_range(lo..=hi)
        } else {
            lo
        };
        if t >= during.as_secs_f64() || lo <= 0.0 {
            return out;
        }
        let action = spec.actions[rng.random_range(0..spec.actions.len())].clone();
        out.push(Planned {
            at: Duration::from_secs_f64(t),
            action,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::Sig;

    fn spec() -> ChaosSpec {
        ChaosSpec {
            during: Duration::from_secs(600),
            every_min: Duration::from_secs(20),
            every_max: Duration::from_secs(60),
            actions: vec![ChaosAction::Kill, ChaosAction::Pause, ChaosAction::Restart],
            seed: None,
            pause: Duration::from_secs(5),
            hold: Duration::from_secs(5),
            signal: Sig(nix::sys::signal::Signal::SIGKILL),
        }
    }

    #[test]
    fn same_seed_same_plan_other_seed_other_plan() {
        let a = plan(&spec(), 42, 1.0);
        assert_eq!(a, plan(&spec(), 42, 1.0));
        assert_ne!(a, plan(&spec(), 43, 1.0));
        assert!(a.len() >= 600 / 60 && a.len() <= 600 / 20);
        assert!(a.windows(2).all(|w| {
            let gap = (w[1].at - w[0].at).as_secs_f64();
            (20.0..=60.0 + 1e-9).contains(&gap)
        }));
        let scaled = plan(&spec(), 42, 0.1);
        assert_eq!(scaled.len(), a.len());
        assert_eq!(scaled[0].action, a[0].action);
    }
}
