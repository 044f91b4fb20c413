//! The growth detector against an ordinary least-squares slope threshold
//! (what Prometheus' `predict_linear` alerts do), on synthetic memory
//! series whose truth is known.
//!
//!     cargo run --release --example detector [trials per class, default 500]
//!
//! Each series is a 30-minute window sampled at 1 Hz of a node under a
//! 1 GiB limit: a base level, AR(1) noise (phi 0.9, sd 0.5% of the limit;
//! "heavy": 2%) with rare spikes, and per class a GC sawtooth (period
//! 10-60 s, or 60-180 s for "long", amplitude 2-15%), a step (+2-10% at a
//! random time), a warm-up (+5-20% approached with a time constant of
//! 30-120 s, a cache filling), and/or a leak of 2% of the limit per hour.
//! Both detectors flag growth above 1% of the limit per hour; soak's also
//! needs the trend to be significant (p < 0.01).
//! Goal: true-positive rate >= 0.95 on leaks, false-positive rate <= 0.01
//! on leak-free series.

use rand::{Rng, SeedableRng};
use soak::analysis::trend;

const LIMIT: f64 = 1024.0 * 1024.0 * 1024.0;
const SECONDS: usize = 1800;
const LEAK_PER_H: f64 = 0.02 * LIMIT;
const MAX_PER_H: f64 = 0.01 * LIMIT;

#[derive(Clone, Copy)]
struct Class {
    name: &'static str,
    leak: bool,
    /// The sawtooth's range of periods, in seconds.
    saw: Option<(f64, f64)>,
    step: bool,
    heavy: bool,
    warm: bool,
}

fn gauss(rng: &mut impl Rng) -> f64 {
    // Box-Muller.
    let (u, v): (f64, f64) = (rng.random::<f64>().max(1e-12), rng.random());
    (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
}

fn series(c: Class, rng: &mut impl Rng) -> Vec<(f64, f64)> {
    let base = LIMIT * rng.random_range(0.3..0.6);
    let (lo, hi) = c.saw.unwrap_or((10.0, 60.0));
    let (period, amp, phase) = (
        rng.random_range(lo..hi),
        LIMIT * rng.random_range(0.02..0.15),
        rng.random_range(0.0..1.0),
    );
    let (step_at, step) = (
        rng.random_range(0.0..SECONDS as f64),
        LIMIT * rng.random_range(0.02..0.10),
    );
    let (warm, tau) = (
        LIMIT * rng.random_range(0.05..0.20),
        rng.random_range(30.0..120.0),
    );
    let sd = if c.heavy { 0.02 } else { 0.005 } * LIMIT;
    let mut ar = 0.0;
    (0..SECONDS)
        .map(|i| {
            let t = i as f64;
            ar = 0.9 * ar + (1.0f64 - 0.81).sqrt() * sd * gauss(rng);
            let mut v = base + ar;
            if rng.random_bool(0.01) {
                v += 0.05 * LIMIT;
            }
            if c.saw.is_some() {
                v += amp * ((t / period + phase) % 1.0);
            }
            if c.step && t >= step_at {
                v += step;
            }
            if c.warm {
                v += warm * (1.0 - (-t / tau).exp());
            }
            if c.leak {
                v += LEAK_PER_H * t / 3600.0;
            }
            (t, v)
        })
        .collect()
}

/// Least squares slope, per second.
fn ols(pts: &[(f64, f64)]) -> f64 {
    let n = pts.len() as f64;
    let (mt, mv) = (
        pts.iter().map(|p| p.0).sum::<f64>() / n,
        pts.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let cov: f64 = pts.iter().map(|p| (p.0 - mt) * (p.1 - mv)).sum();
    let var: f64 = pts.iter().map(|p| (p.0 - mt).powi(2)).sum();
    cov / var
}

/// How many series of the class each detector flags: soak's, least squares.
fn flagged(c: Class, seed: u64, trials: usize) -> [usize; 2] {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut hits = [0; 2];
    for _ in 0..trials {
        let s = series(c, &mut rng);
        let soak_says = trend::growth_trend(std::slice::from_ref(&s))
            .map(|t| trend::is_growth(&t, MAX_PER_H / 3600.0, soak::analysis::GROWTH_ALPHA))
            .unwrap_or(false);
        hits[0] += usize::from(soak_says);
        hits[1] += usize::from(ols(&s) * 3600.0 > MAX_PER_H);
    }
    hits
}

fn main() {
    let trials: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(500);
    let (short, long) = (Some((10.0, 60.0)), Some((60.0, 180.0)));
    let class = |name, leak, saw, step, heavy, warm| Class {
        name,
        leak,
        saw,
        step,
        heavy,
        warm,
    };
    let classes = [
        class("leak", true, None, false, false, false),
        class("leak + sawtooth", true, short, false, false, false),
        class("leak + long sawtooth", true, long, false, false, false),
        class("leak + step", true, None, true, false, false),
        class("leak + sawtooth + step", true, short, true, false, false),
        class("leak + warm-up", true, None, false, false, true),
        class("noise", false, None, false, false, false),
        class("heavy noise", false, None, false, true, false),
        class("sawtooth", false, short, false, false, false),
        class("long sawtooth", false, long, false, false, false),
        class("step", false, None, true, false, false),
        class("sawtooth + step", false, short, true, false, false),
        class("warm-up", false, None, false, false, true),
        class("warm-up + sawtooth", false, short, false, false, true),
    ];
    println!("Leak 2% of the limit per hour, threshold 1%/h, 30 min at 1 Hz, {trials} series per class.\n");
    println!("| series | truth | soak (cycle means, step or warm-up out, Theil-Sen + Mann-Kendall) | OLS slope threshold |");
    println!("|---|---|---:|---:|");
    let (mut tp, mut fp, mut pos, mut neg) = ([0usize; 2], [0usize; 2], 0, 0);
    for (i, c) in classes.into_iter().enumerate() {
        // Two threads, each with a seed of its own: the machine's two cores.
        let halves: Vec<[usize; 2]> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..2u64)
                .map(|w| s.spawn(move || flagged(c, 20261202 + 10 * i as u64 + w, trials / 2)))
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        let n = trials / 2 * 2;
        let hits = [halves[0][0] + halves[1][0], halves[0][1] + halves[1][1]];
        let rate = |h: usize| h as f64 / n as f64;
        let (label, what) = if c.leak {
            ("leak", "TPR")
        } else {
            ("no leak", "FPR")
        };
        println!(
            "| {} | {label} | {what} {:.3} | {what} {:.3} |",
            c.name,
            rate(hits[0]),
            rate(hits[1])
        );
        let (count, sum) = if c.leak {
            (&mut pos, &mut tp)
        } else {
            (&mut neg, &mut fp)
        };
        *count += n;
        sum[0] += hits[0];
        sum[1] += hits[1];
    }
    println!(
        "| **all** | | **TPR {:.3}, FPR {:.3}** | **TPR {:.3}, FPR {:.3}** |",
        tp[0] as f64 / pos as f64,
        fp[0] as f64 / neg as f64,
        tp[1] as f64 / pos as f64,
        fp[1] as f64 / neg as f64
    );
}
