//! Changes in a figure over a run history (nightly runs of one suite, in
//! time order): a step (the figure moved to a new level at one run) or a
//! creep (from one run on, it moves a little every run: a leak that grows
//! 2% a night passes every single night's check).
//!
//! Steps are found as Hunter does (Fleming et al., "Hunter: Using Change
//! Point Detection to Hunt for Performance Regressions", ICPE 2023; now
//! Apache Otava): E-Divisive means (Matteson & James, "A Nonparametric
//! Approach for Multiple Change Point Analysis of Multivariate Data",
//! JASA 2014) places the split, and a t-test of the two sides' means
//! decides whether it is one (p < 0.001, Hunter's default, corrected for
//! the splits tried), by binary segmentation until no split is
//! significant. The t-test in place of E-Divisive's permutation test is
//! Hunter's choice: the same history always gives the same answer.
//!
//! A creep is a two-phase regression (flat, then a line from a knot;
//! Hinkley, "Inference about the intersection in two-phase regression",
//! Biometrika 1969) that fits better than the best step, with a
//! significant slope (p < 0.001, corrected for the knots tried).

/// How unlikely a change must be under "no change" to be reported.
pub const MAX_P: f64 = 0.001;
/// The fewest runs on each side of a step.
const MIN_SIDE: usize = 3;
/// The fewest runs after a creep's knot (fewer cannot reach [`MAX_P`]).
const MIN_CREEP: usize = 6;

/// A change found in a series.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// From run `at` (0-based) on, the level moved from `before` to
    /// `after` (the two sides' means).
    Step {
        at: usize,
        before: f64,
        after: f64,
        p: f64,
    },
    /// From run `at` (0-based) on, the figure moved by `per_run` each run
    /// (Sen's slope), from `from`.
    Creep {
        at: usize,
        from: f64,
        per_run: f64,
        p: f64,
    },
}

impl Change {
    pub fn at(&self) -> usize {
        match self {
            Change::Step { at, .. } | Change::Creep { at, .. } => *at,
        }
    }
}

/// The changes in `x` (a figure's values in run order), in run order.
pub fn changes(x: &[f64]) -> Vec<Change> {
    let mut out = vec![];
    segment(x, 0, &mut out);
    out.sort_by_key(Change::at);
    out
}

fn segment(x: &[f64], offset: usize, out: &mut Vec<Change>) {
    if x.len() < 2 * MIN_SIDE {
        return;
    }
    let step = best_split(x);
    if let Some(c) = creep(x, step.map(|(_, sse)| sse)) {
        let Change::Creep { at, .. } = c else {
            unreachable!()
        };
        out.push(shifted(c, offset));
        // What came before the creep may hold a change of its own.
        segment(&x[..at], offset, out);
        return;
    }
    let Some((tau, _)) = step else {
        return;
    };
    let (a, b) = x.split_at(tau);
    // The split is the best of many: its p-value is corrected for them
    // (Bonferroni), or noise would find a step in most long histories.
    let tried = (x.len() + 1 - 2 * MIN_SIDE) as f64;
    let p = (t_test_p(a, b) * tried).min(1.0);
    if p < MAX_P {
        out.push(Change::Step {
            at: offset + tau,
            before: mean(a),
            after: mean(b),
            p,
        });
        segment(a, offset, out);
        segment(b, offset + tau, out);
        return;
    }
    // One split cannot see a change that was undone (up at one run, back
    // down at a later one): the stretch between, against the runs around
    // it, as E-Divisive's end point looks for it.
    if let Some((from, to, p)) = best_stretch(x) {
        let inside = &x[from..to];
        out.push(Change::Step {
            at: offset + from,
            before: mean(&x[..from]),
            after: mean(inside),
            p,
        });
        out.push(Change::Step {
            at: offset + to,
            before: mean(inside),
            after: mean(&x[to..]),
            p,
        });
        segment(&x[..from], offset, out);
        segment(inside, offset + from, out);
        segment(&x[to..], offset + to, out);
    }
}

/// The stretch `from..to` of at least [`MIN_SIDE`] runs, with as many
/// around it, that differs most from the runs around it, if it does
/// significantly (corrected for the stretches tried).
fn best_stretch(x: &[f64]) -> Option<(usize, usize, f64)> {
    let n = x.len();
    let mut best: Option<(usize, usize, f64)> = None;
    let mut tried = 0.0;
    for from in MIN_SIDE..n.saturating_sub(2 * MIN_SIDE) + 1 {
        for to in from + MIN_SIDE..n + 1 - MIN_SIDE {
            tried += 1.0;
            let around: Vec<f64> = x[..from].iter().chain(&x[to..]).copied().collect();
            let p = t_test_p(&x[from..to], &around);
            if best.is_none_or(|b| p < b.2) {
                best = Some((from, to, p));
            }
        }
    }
    let (from, to, p) = best?;
    let p = (p * tried).min(1.0);
    (p < MAX_P).then_some((from, to, p))
}

fn shifted(c: Change, offset: usize) -> Change {
    match c {
        Change::Creep {
            at,
            from,
            per_run,
            p,
        } => Change::Creep {
            at: at + offset,
            from,
            per_run,
            p,
        },
        s => s,
    }
}

fn mean(x: &[f64]) -> f64 {
    x.iter().sum::<f64>() / x.len() as f64
}

fn sse(x: &[f64]) -> f64 {
    let m = mean(x);
    x.iter().map(|v| (v - m).powi(2)).sum()
}

/// E-Divisive means (alpha = 1): the split that most separates the two
/// sides' distributions, and the squared error of a step there.
fn best_split(x: &[f64]) -> Option<(usize, f64)> {
    let n = x.len();
    let d = |a: &[f64], b: &[f64]| -> f64 {
        let mut s = 0.0;
        for u in a {
            for v in b {
                s += (u - v).abs();
            }
        }
        s
    };
    let within = |a: &[f64]| -> f64 {
        let k = a.len() as f64;
        // Each pair once; the statistic's mean over pairs.
        let mut s = 0.0;
        for i in 0..a.len() {
            for j in i + 1..a.len() {
                s += (a[i] - a[j]).abs();
            }
        }
        s / (k * (k - 1.0) / 2.0)
    };
    (MIN_SIDE..=n - MIN_SIDE)
        .map(|tau| {
            let (a, b) = x.split_at(tau);
            let (p, q) = (a.len() as f64, b.len() as f64);
            let e = 2.0 * d(a, b) / (p * q) - within(a) - within(b);
            (tau, p * q / (p + q) * e)
        })
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(tau, _)| (tau, sse(&x[..tau]) + sse(&x[tau..])))
}

/// A creep: the best flat-then-line fit, when it fits better than the
/// best step (`step_sse`) and its slope is significant (the t-test of a
/// regression slope, corrected for the knots tried).
fn creep(x: &[f64], step_sse: Option<f64>) -> Option<Change> {
    let n = x.len();
    // The knot k: runs up to k are flat, the line rises from k + 1 on.
    let (k, fit) = (0..n.checked_sub(MIN_CREEP)? + 1)
        .map(|k| (k, hinge(x, k)))
        .min_by(|a, b| a.1.sse.total_cmp(&b.1.sse))?;
    if step_sse.is_some_and(|s| fit.sse >= s) || fit.szz == 0.0 {
        return None;
    }
    let df = n as f64 - 2.0;
    let se = (fit.sse / df / fit.szz).sqrt();
    let p = if se == 0.0 {
        0.0
    } else {
        let t = fit.slope / se;
        incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    };
    let tried = (n + 1 - MIN_CREEP) as f64;
    let p = (p * tried).min(1.0);
    (p < MAX_P).then(|| Change::Creep {
        at: k + 1,
        from: fit.level,
        per_run: fit.slope,
        p,
    })
}

/// A least-squares fit y = level + slope * max(0, i - k).
struct Hinge {
    level: f64,
    slope: f64,
    sse: f64,
    /// The spread of the regressor, for the slope's standard error.
    szz: f64,
}

fn hinge(x: &[f64], k: usize) -> Hinge {
    let z: Vec<f64> = (0..x.len()).map(|i| i.saturating_sub(k) as f64).collect();
    let (mz, my) = (mean(&z), mean(x));
    let szz: f64 = z.iter().map(|v| (v - mz).powi(2)).sum();
    let szy: f64 = z.iter().zip(x).map(|(a, b)| (a - mz) * (b - my)).sum();
    let slope = if szz > 0.0 { szy / szz } else { 0.0 };
    let level = my - slope * mz;
    let sse = z
        .iter()
        .zip(x)
        .map(|(zi, yi)| (yi - level - slope * zi).powi(2))
        .sum();
    Hinge {
        level,
        slope,
        sse,
        szz,
    }
}

/// Two-sided p-value of Student's t-test that `a` and `b` have one mean,
/// with their variance pooled: under "no change" both sides come from one
/// distribution, so the test is exact for normal noise. (Welch's test,
/// which Hunter uses, gives p-values far too small when one side has 3 or
/// 4 runs: 0.45% of noise-only histories below 0.001 at a split after
/// run 4, measured.)
pub fn t_test_p(a: &[f64], b: &[f64]) -> f64 {
    let (na, nb) = (a.len() as f64, b.len() as f64);
    let df = na + nb - 2.0;
    let pooled = (sse(a) + sse(b)) / df;
    let diff = mean(a) - mean(b);
    let se = (pooled * (1.0 / na + 1.0 / nb)).sqrt();
    if se == 0.0 {
        return if diff == 0.0 { 1.0 } else { 0.0 };
    }
    let t = diff / se;
    // P(|T| > t) = I_{df / (df + t^2)}(df / 2, 1 / 2).
    incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
}

/// The regularized incomplete beta function I_x(a, b), by its continued
/// fraction (Numerical Recipes, 3rd ed., 6.4).
fn incomplete_beta(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let front =
        (ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln()).exp();
    if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_fraction(a, b, x) / a
    } else {
        1.0 - front * beta_fraction(b, a, 1.0 - x) / b
    }
}

fn beta_fraction(a: f64, b: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 - qab * x / qap;
    if d.abs() < TINY {
        d = TINY;
    }
    d = 1.0 / d;
    let mut h = d;
    for m in 1..300 {
        let m = m as f64;
        let m2 = 2.0 * m;
        let aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1.0 + aa * d;
        d = if d.abs() < TINY { TINY } else { d };
        c = 1.0 + aa / c;
        c = if c.abs() < TINY { TINY } else { c };
        d = 1.0 / d;
        h *= d * c;
        let aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1.0 + aa * d;
        d = if d.abs() < TINY { TINY } else { d };
        c = 1.0 + aa / c;
        c = if c.abs() < TINY { TINY } else { c };
        d = 1.0 / d;
        let del = d * c;
        h *= del;
        if (del - 1.0).abs() < 1e-14 {
            break;
        }
    }
    h
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7, n = 9).
fn ln_gamma(x: f64) -> f64 {
    const G: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = G[0];
    let t = x + 7.5;
    for (i, g) in G.iter().enumerate().skip(1) {
        a += g / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// Synthetic nightly histories, for the tests and `cargo run --example
/// history`: `runs` values around 100 with noise of `noise` (a share of the
/// level), shaped by `kind`.
pub mod synthetic {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Kind {
        /// The same level, 0.5% noise.
        Steady,
        /// +5% from run `at` on, 1% noise.
        Step,
        /// +2% a run from run `at` on, 1% noise.
        Creep,
        /// Noise of ±10% (uniform) and one outlier run 15% high.
        Noise,
    }

    pub const KINDS: [Kind; 4] = [Kind::Steady, Kind::Step, Kind::Creep, Kind::Noise];

    /// The history, and the run (0-based) a change begins at, if any.
    pub fn history(kind: Kind, runs: usize, at: usize, seed: u64) -> (Vec<f64>, Option<usize>) {
        let mut rng = StdRng::seed_from_u64(seed);
        // Box-Muller.
        let normal = |rng: &mut StdRng| {
            let (u, v): (f64, f64) = (rng.random_range(f64::EPSILON..1.0), rng.random());
            (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
        };
        let mut out: Vec<f64> = (0..runs)
            .map(|i| {
                let (level, noise) = match kind {
                    Kind::Steady => (100.0, 0.005),
                    Kind::Step => (if i >= at { 105.0 } else { 100.0 }, 0.01),
                    Kind::Creep => (100.0 * 1.02f64.powi(i.saturating_sub(at - 1) as i32), 0.01),
                    Kind::Noise => (100.0, 0.0),
                };
                let uniform = if kind == Kind::Noise {
                    rng.random_range(-0.10..0.10)
                } else {
                    0.0
                };
                level * (1.0 + noise * normal(&mut rng) + uniform)
            })
            .collect();
        if kind == Kind::Noise {
            let i = (seed as usize * 7) % runs;
            out[i] *= 1.15;
        }
        let change = matches!(kind, Kind::Step | Kind::Creep).then_some(at);
        (out, change)
    }
}

#[cfg(test)]
mod tests {
    use super::synthetic::{history, Kind, KINDS};
    use super::*;

    #[test]
    fn the_t_distribution_is_right_where_tables_give_it() {
        // t = 2.228 at 10 degrees of freedom: two-sided p = 0.05.
        let p = incomplete_beta(5.0, 0.5, 10.0 / (10.0 + 2.228f64.powi(2)));
        assert!((p - 0.05).abs() < 5e-4, "{p}");
        assert!((ln_gamma(5.0) - 24f64.ln()).abs() < 1e-10);
        assert!(t_test_p(&[1.0, 1.0, 1.0], &[1.0, 1.0, 1.0]) == 1.0);
        // Two sides of 5 with means 1 apart and variance 2.5: t = 1 at 8
        // degrees of freedom, p = 0.347.
        let p = t_test_p(&[0.0, 1.0, 2.0, -1.0, -2.0], &[1.0, 2.0, 3.0, 0.0, -1.0]);
        assert!((p - 0.3466).abs() < 1e-3, "{p}");
    }

    /// The four histories of the issue, 20 nightlies each: the step and
    /// the creep found at the run they began, nothing in the others.
    #[test]
    fn a_step_and_a_creep_are_found_where_they_began_and_noise_stays_quiet() {
        for kind in KINDS {
            let (x, at) = history(kind, 20, 10, 1);
            let found = changes(&x);
            match kind {
                Kind::Steady | Kind::Noise => assert!(found.is_empty(), "{kind:?}: {found:?}"),
                Kind::Step => {
                    assert_eq!(found.len(), 1, "{found:?}");
                    assert!(matches!(found[0], Change::Step { at: 10, .. }), "{found:?}");
                }
                Kind::Creep => {
                    assert_eq!(found.len(), 1, "{found:?}");
                    let Change::Creep {
                        at: got, per_run, ..
                    } = found[0]
                    else {
                        panic!("{found:?}")
                    };
                    assert!(got.abs_diff(at.unwrap()) <= 1, "{found:?}");
                    assert!((1.0..4.0).contains(&per_run), "{per_run}");
                }
            }
        }
    }

    #[test]
    fn a_change_undone_is_two_steps() {
        let x: Vec<f64> = (0..20)
            .map(|i| if (7..14).contains(&i) { 110.0 } else { 100.0 } + (i % 3) as f64 * 0.3)
            .collect();
        let at: Vec<usize> = changes(&x).iter().map(Change::at).collect();
        assert_eq!(at, [7, 14]);
    }

    #[test]
    fn two_steps_are_both_found() {
        let x: Vec<f64> = (0..24)
            .map(|i| match i {
                0..8 => 100.0,
                8..16 => 120.0,
                _ => 90.0,
            } + (i % 3) as f64 * 0.5)
            .collect();
        let at: Vec<usize> = changes(&x).iter().map(Change::at).collect();
        assert_eq!(at, [8, 16]);
    }
}
