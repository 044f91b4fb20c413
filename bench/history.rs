//! How well `soak report history` finds changes in nightly histories:
//! synthetic histories of 20 runs of four kinds (steady; a step of +5% at
//! one run; a creep of +2% a run from one run on; noise of ±10% with one outlier
//! run), 500 of each with the change at a run drawn from 7 to 15, judged by
//! soak's method and by its named peer, comparing each night with the one
//! before at a 10% threshold (what `soak report compare` does for a pair
//! of runs). Prints a markdown table for docs/src/benchmarks.md.
//!
//!     cargo run --release --example history [histories per kind, default 500]

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use soak::analysis::changes::synthetic::{history, Kind, KINDS};
use soak::analysis::changes::{changes, Change};

const RUNS: usize = 20;

#[derive(Default)]
struct Tally {
    found: usize,
    missed: usize,
    /// Histories with a change reported where there was none (or more
    /// than the one there was, or at the wrong run).
    false_alarms: usize,
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("a number of histories"))
        .unwrap_or(500);
    let mut rng = StdRng::seed_from_u64(2026);
    println!("| history ({RUNS} runs) | method | found at the right run | missed | false alarms |");
    println!("|---|---|---:|---:|---:|");
    for kind in KINDS {
        let (mut soak, mut peer) = (Tally::default(), Tally::default());
        for seed in 0..n {
            let at = rng.random_range(6..15);
            let (x, change) = history(kind, RUNS, at, seed * 31 + kind as u64);
            // soak: a change of the right kind within a run of where it
            // began (two for a creep, whose first steps hide in the noise).
            let found = changes(&x);
            let right = |c: &Change| match (kind, c) {
                (Kind::Step, Change::Step { at: a, .. }) => a.abs_diff(at) <= 1,
                (Kind::Creep, Change::Creep { at: a, .. }) => a.abs_diff(at) <= 2,
                _ => false,
            };
            judge(
                &mut soak,
                change.is_some(),
                found.iter().filter(|c| right(c)).count(),
                found.len(),
            );
            // The peer: night over night, more than 10%.
            let jumps: Vec<usize> = (1..RUNS)
                .filter(|&i| (x[i] / x[i - 1] - 1.0).abs() > 0.10)
                .collect();
            let hits = jumps
                .iter()
                .filter(|&&i| i.abs_diff(at) <= 1 && change.is_some())
                .count()
                .min(1);
            judge(&mut peer, change.is_some(), hits, jumps.len());
        }
        let label = match kind {
            Kind::Steady => "steady (0.5% noise)",
            Kind::Step => "step of +5% (1% noise)",
            Kind::Creep => "creep of +2% a run (1% noise)",
            Kind::Noise => "noise (±10%, one night +15%)",
        };
        for (method, t) in [
            ("soak report history", &soak),
            ("night over night, 10%", &peer),
        ] {
            let (found, missed) = match kind {
                Kind::Step | Kind::Creep => (t.found.to_string(), t.missed.to_string()),
                _ => ("-".into(), "-".into()),
            };
            println!(
                "| {label} | {method} | {found} | {missed} | {} |",
                t.false_alarms
            );
        }
    }
}

/// One history: `hits` changes at the right place among `reported`.
fn judge(t: &mut Tally, has_change: bool, hits: usize, reported: usize) {
    if has_change {
        if hits > 0 {
            t.found += 1;
        } else {
            t.missed += 1;
        }
    }
    if reported > hits.min(1) {
        t.false_alarms += 1;
    }
}
