//! Trend detection that a nightly job can fail on without crying wolf.
//!
//! - Slope: the Theil-Sen estimator, the median of all pairwise slopes
//!   (H. Theil, 1950; P. K. Sen, "Estimates of the regression coefficient
//!   based on Kendall's tau", JASA 63, 1968). Robust to outliers and to the
//!   occasional spike that a least-squares fit (Prometheus' `predict_linear`)
//!   follows.
//! - Significance: the Mann-Kendall test (Mann 1945; Kendall 1975) with the
//!   variance of S corrected for autocorrelation as in K. H. Hamed and
//!   A. R. Rao, "A modified Mann-Kendall trend test for autocorrelated
//!   data", J. Hydrology 204, 1998. Memory samples taken each second are
//!   strongly autocorrelated (a GC sawtooth, a filling cache); the plain test
//!   calls nearly any wiggle a trend.
//! - Confidence interval of the slope: Gilbert, "Statistical Methods for
//!   Environmental Pollution Monitoring", 1987, §16.5, with the corrected
//!   variance.
//!
//! Segments between restarts are tested separately and pooled (sum of S and
//! of the variances, as in the regional Kendall test), so a restart's drop
//! is never read as a trend. Within a segment, the one most evident level
//! shift (a least-squares step-plus-line fit that removes a large share of
//! the line's residual, looked for in the series and in its lower envelope
//! where a sawtooth hides it) splits the segment the same way: a step is not
//! a leak. Splitting rather than subtracting the step keeps the test honest:
//! the size of a step fitted next to a slope is uncertain, and what is left
//! of it after subtraction reads as a trend.
//!
//! Measured by `cargo run --example detector` (README table): on 30-minute
//! 1 Hz series under a 1 GiB limit, leaks of 2%/h are found at TPR ~0.96;
//! leak-free series are flagged at FPR ~0.03 (0.49 for a least-squares
//! threshold). The remaining false positives are long-period sawtooths,
//! whose ramps bias any slope estimator over a window of few cycles; the
//! issue's goal (FPR <= 0.01) is not met for them.

/// Most points per segment fed to the O(n²) statistics; longer segments
/// are thinned by a whole stride (a 1 s series of an hour stays whole; an
/// uneven stride would alias a periodic series into a slope).
pub const MAX_POINTS: usize = 3600;

/// The outcome of a trend analysis, slopes in units per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Trend {
    pub slope: f64,
    /// 95% confidence interval of the slope.
    pub low: f64,
    pub high: f64,
    /// One-sided p-value of an upward trend (Mann-Kendall, corrected).
    pub p_up: f64,
    /// Points used, over all segments.
    pub n: usize,
}

/// Standard normal CDF, by the complementary error function (W. J. Cody's
/// rational approximation via `erfc` of Numerical Recipes, |error| < 1.2e-7).
pub fn normal_cdf(z: f64) -> f64 {
    let x = -z / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.5 * x.abs());
    let y = t
        * (-x * x - 1.26551223
            + t * (1.00002368
                + t * (0.37409196
                    + t * (0.09678418
                        + t * (-0.18628806
                            + t * (0.27886807
                                + t * (-1.13520398
                                    + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))))
            .exp();
    let erfc = if x >= 0.0 { y } else { 2.0 - y };
    0.5 * erfc
}

fn thin(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    if points.len() <= MAX_POINTS {
        return points.to_vec();
    }
    let step = points.len() as f64 / MAX_POINTS as f64;
    (0..MAX_POINTS)
        .map(|i| points[(i as f64 * step) as usize])
        .collect()
}

/// The median of sorted, non-empty values.
pub fn median_sorted(v: &[f64]) -> f64 {
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Mann-Kendall S, its variance with ties, and the Hamed-Rao factor n/n*.
fn mann_kendall(pts: &[(f64, f64)], slope: f64) -> (f64, f64) {
    let n = pts.len();
    let nf = n as f64;
    let mut s = 0.0;
    for i in 0..n {
        for j in i + 1..n {
            s += (pts[j].1 - pts[i].1).signum() * f64::from(pts[j].1 != pts[i].1);
        }
    }
    // Ties: groups of equal values.
    let mut vals: Vec<f64> = pts.iter().map(|p| p.1).collect();
    vals.sort_by(|a, b| a.total_cmp(b));
    let mut ties = 0.0;
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && vals[j + 1] == vals[i] {
            j += 1;
        }
        let t = (j - i + 1) as f64;
        ties += t * (t - 1.0) * (2.0 * t + 5.0);
        i = j + 1;
    }
    let var = (nf * (nf - 1.0) * (2.0 * nf + 5.0) - ties) / 18.0;

    // Hamed-Rao: autocorrelation of the ranks of the detrended series, at
    // the lags where it is significant (|r| > 1.96/sqrt(n)).
    let detrended: Vec<f64> = pts.iter().map(|p| p.1 - slope * p.0).collect();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|a, b| detrended[*a].total_cmp(&detrended[*b]));
    // Tied values share their average rank.
    let mut rank = vec![0.0; n];
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && detrended[order[j + 1]] == detrended[order[i]] {
            j += 1;
        }
        let avg = (i + j) as f64 / 2.0 + 1.0;
        for idx in &order[i..=j] {
            rank[*idx] = avg;
        }
        i = j + 1;
    }
    let mean = (nf + 1.0) / 2.0;
    let denom: f64 = rank.iter().map(|r| (r - mean).powi(2)).sum();
    let bound = 1.96 / nf.sqrt();
    let mut sum = 0.0;
    if denom > 0.0 && n > 3 {
        for k in 1..n - 2 {
            let num: f64 = (0..n - k)
                .map(|i| (rank[i] - mean) * (rank[i + k] - mean))
                .sum();
            let r = num / denom;
            if r.abs() > bound {
                let kf = k as f64;
                sum += (nf - kf) * (nf - kf - 1.0) * (nf - kf - 2.0) * r;
            }
        }
    }
    let factor = (1.0 + 2.0 / (nf * (nf - 1.0) * (nf - 2.0)) * sum).max(1.0);
    (s, var * factor)
}

/// Trend of segments of (time in s, value) points, pooled. `None` with
/// fewer than 4 points in all or no spread in time.
pub fn trend(segments: &[Vec<(f64, f64)>]) -> Option<Trend> {
    let mut slopes = vec![];
    let segs: Vec<Vec<(f64, f64)>> = segments
        .iter()
        .filter(|s| s.len() >= 4)
        .map(|s| thin(s))
        .collect();
    for pts in &segs {
        for i in 0..pts.len() {
            for j in i + 1..pts.len() {
                let dt = pts[j].0 - pts[i].0;
                if dt > 0.0 {
                    slopes.push((pts[j].1 - pts[i].1) / dt);
                }
            }
        }
    }
    if slopes.len() < 3 {
        return None;
    }
    slopes.sort_by(|a, b| a.total_cmp(b));
    let slope = median_sorted(&slopes);
    let (mut s, mut var) = (0.0, 0.0);
    for pts in &segs {
        let (sk, vk) = mann_kendall(pts, slope);
        s += sk;
        var += vk;
    }
    let z = if var <= 0.0 {
        0.0
    } else if s > 0.0 {
        (s - 1.0) / var.sqrt()
    } else if s < 0.0 {
        (s + 1.0) / var.sqrt()
    } else {
        0.0
    };
    let p_up = 1.0 - normal_cdf(z);
    // Gilbert's interval: ranks (N' -+ C)/2 among the sorted slopes.
    let c = 1.96 * var.sqrt();
    let n_slopes = slopes.len() as f64;
    let lo_rank = ((n_slopes - c) / 2.0).floor().clamp(0.0, n_slopes - 1.0) as usize;
    let hi_rank = ((n_slopes + c) / 2.0).ceil().clamp(0.0, n_slopes - 1.0) as usize;
    Some(Trend {
        slope,
        low: slopes[lo_rank],
        high: slopes[hi_rank],
        p_up,
        n: segs.iter().map(Vec::len).sum(),
    })
}

/// The trend of the segments, each split at its most evident step: what
/// `memory_growth` judges.
pub fn growth_trend(segments: &[Vec<(f64, f64)>]) -> Option<Trend> {
    let pieces: Vec<Vec<(f64, f64)>> = segments
        .iter()
        .flat_map(|s| match step_at(s) {
            Some(k) => vec![s[..k].to_vec(), s[k..].to_vec()],
            None => vec![s.clone()],
        })
        .collect();
    trend(&pieces)
}

/// Least squares of y = a + b t (+ d after `k`): the residual sum of squares.
fn rss(pts: &[(f64, f64)], k: Option<usize>) -> (f64, f64) {
    // Normal equations on centred time; with a step, solve the 3x3 system.
    let n = pts.len() as f64;
    let mt = pts.iter().map(|p| p.0).sum::<f64>() / n;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
    let x: Vec<f64> = pts.iter().map(|p| p.0 - mt).collect();
    let y: Vec<f64> = pts.iter().map(|p| p.1 - my).collect();
    match k {
        None => {
            let sxx: f64 = x.iter().map(|v| v * v).sum();
            let b = x.iter().zip(&y).map(|(a, c)| a * c).sum::<f64>() / sxx;
            (
                y.iter().zip(&x).map(|(c, a)| (c - b * a).powi(2)).sum(),
                0.0,
            )
        }
        Some(k) => {
            let m = (pts.len() - k) as f64;
            let s: Vec<f64> = (0..pts.len())
                .map(|i| if i >= k { 1.0 - m / n } else { -m / n })
                .collect();
            let (sxx, sss, sxs) = (
                x.iter().map(|v| v * v).sum::<f64>(),
                s.iter().map(|v| v * v).sum::<f64>(),
                x.iter().zip(&s).map(|(a, c)| a * c).sum::<f64>(),
            );
            let (sxy, ssy) = (
                x.iter().zip(&y).map(|(a, c)| a * c).sum::<f64>(),
                s.iter().zip(&y).map(|(a, c)| a * c).sum::<f64>(),
            );
            let det = sxx * sss - sxs * sxs;
            if det.abs() < 1e-12 {
                return (f64::INFINITY, 0.0);
            }
            let b = (sxy * sss - ssy * sxs) / det;
            let d = (sxx * ssy - sxs * sxy) / det;
            let r = (0..pts.len())
                .map(|i| (y[i] - b * x[i] - d * s[i]).powi(2))
                .sum();
            (r, d)
        }
    }
}

/// Where the one most evident level shift of a series is, when a shift
/// explains it far better than a line does (a cache filling at once, a
/// config reload). It is looked for in the series and, where a GC sawtooth
/// hides it, in its lower envelope (`floors`).
pub fn step_at(pts: &[(f64, f64)]) -> Option<usize> {
    let n = pts.len();
    if n < 40 {
        return None;
    }
    let (line, _) = rss(pts, None);
    if line <= 0.0 {
        return None;
    }
    let grid: Vec<usize> = (1..STEP_CANDIDATES)
        .map(|i| i * n / STEP_CANDIDATES)
        .collect();
    let (_, _, coarse) = best_step(pts, grid)?;
    let (r, _, k) = best_step(pts, around(coarse, n / STEP_CANDIDATES + 1, n))?;
    if r <= STEP_SHARE * line {
        return Some(k);
    }
    let size = n / FLOOR_BLOCKS;
    let f = floors(pts, size);
    let (fline, _) = rss(&f, None);
    let (fr, fd, fk) = best_step(&f, (2..f.len() - 1).collect())?;
    if fd <= 0.0 || fr > FLOOR_SHARE * fline {
        return None;
    }
    best_step(pts, around(fk * size, size, n)).map(|(_, _, k)| k)
}

/// Step places within `spread` of `k`, inside a series of `n`.
fn around(k: usize, spread: usize, n: usize) -> Vec<usize> {
    (k.saturating_sub(spread).max(1)..(k + spread).min(n - 1)).collect()
}

/// The step place among `places` that leaves the least residual: (residual, step, place).
fn best_step(pts: &[(f64, f64)], places: Vec<usize>) -> Option<(f64, f64, usize)> {
    places
        .into_iter()
        .filter_map(|k| {
            let (r, d) = rss(pts, Some(k));
            r.is_finite().then_some((r, d, k))
        })
        .min_by(|a, b| a.0.total_cmp(&b.0))
}

/// The lower envelope of a series: the 10th percentile of each block of
/// `size` points, at the block's mean time. A GC sawtooth's floor is flat;
/// a leak raises it.
pub fn floors(pts: &[(f64, f64)], size: usize) -> Vec<(f64, f64)> {
    pts.chunks(size.max(1))
        .filter(|c| c.len() * 2 >= size)
        .map(|c| {
            let mut v: Vec<f64> = c.iter().map(|p| p.1).collect();
            v.sort_by(|a, b| a.total_cmp(b));
            let t = c.iter().map(|p| p.0).sum::<f64>() / c.len() as f64;
            (t, v[(v.len() - 1) / 10])
        })
        .collect()
}

/// Places a step is tried at, evenly over the segment.
const STEP_CANDIDATES: usize = 60;

/// A step is taken out when it leaves at most this share of the line's residual.
const STEP_SHARE: f64 = 0.85;

/// Blocks of the lower envelope a hidden step is looked for in.
const FLOOR_BLOCKS: usize = 15;

/// A step in the lower envelope must leave at most this share of its line's residual.
const FLOOR_SHARE: f64 = 0.5;

/// The decision a `memory_growth` check makes: growth faster than `max`
/// (per second) that is also a significant upward trend at level `alpha`.
pub fn is_growth(t: &Trend, max_per_s: f64, alpha: f64) -> bool {
    t.slope > max_per_s && t.p_up < alpha
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(n: usize, mut f: impl FnMut(f64) -> f64) -> Vec<(f64, f64)> {
        (0..n).map(|i| (i as f64, f(i as f64))).collect()
    }

    #[test]
    fn normal_cdf_known_values() {
        assert!((normal_cdf(0.0) - 0.5).abs() < 1e-7);
        assert!((normal_cdf(1.96) - 0.975).abs() < 1e-4);
        assert!((normal_cdf(-2.326) - 0.01).abs() < 1e-4);
    }

    #[test]
    fn a_clean_line_is_a_significant_trend_with_a_tight_interval() {
        let t = trend(&[series(200, |x| 100.0 + 2.0 * x)]).unwrap();
        assert!((t.slope - 2.0).abs() < 1e-9);
        assert!(t.low <= 2.0 && t.high >= 2.0);
        assert!(t.p_up < 1e-6, "{t:?}");
    }

    #[test]
    fn flat_noise_is_not_a_trend() {
        // A deterministic pseudo-random flat series.
        let mut x: u64 = 7;
        let t = trend(&[series(600, |_| {
            x = crate::workload::ledger::mix64(x);
            (x % 1000) as f64
        })])
        .unwrap();
        assert!(t.p_up > 0.01, "{t:?}");
        assert!(t.low <= 0.0 && t.high >= 0.0, "{t:?}");
    }

    #[test]
    fn a_sawtooth_biases_the_slope_little_and_a_leak_under_it_is_found() {
        // GC-like: climbs 5/s for 120 s, drops, again; 1800 s in all.
        let saw = series(1800, |x| 1000.0 + (x % 120.0) * 5.0);
        let t = growth_trend(std::slice::from_ref(&saw)).unwrap();
        // Theil-Sen is not zero on a sawtooth (the pairwise slopes are
        // skewed), but under 1% of the ramp; bench/detector.rs measures
        // what that costs in false positives.
        assert!(t.slope.abs() < 0.05, "{t:?}");
        let leak: Vec<(f64, f64)> = saw.iter().map(|(t, v)| (*t, v + 0.5 * t)).collect();
        let t = growth_trend(&[leak]).unwrap();
        assert!(is_growth(&t, 0.25, 0.01), "{t:?}");
    }

    #[test]
    fn a_one_off_step_is_not_growth_and_a_leak_across_it_is() {
        let mut x: u64 = 11;
        let mut noise = move || {
            x = crate::workload::ledger::mix64(x);
            (x % 1000) as f64 / 1000.0
        };
        // Flat at 100 with noise of 1, a step of +20 at 700 s of 1800.
        let step = series(1800, |t| {
            100.0 + noise() + if t >= 700.0 { 20.0 } else { 0.0 }
        });
        assert_eq!(step_at(&step), Some(700));
        // Growth above 0.005/s (1.8%/h of a limit of 1000) is a leak.
        let t = growth_trend(std::slice::from_ref(&step)).unwrap();
        assert!(!is_growth(&t, 0.005, 0.01), "{t:?}");
        // The same step hidden under a sawtooth of amplitude 30.
        let saw: Vec<(f64, f64)> = step
            .iter()
            .map(|(t, v)| (*t, v + (t % 90.0) / 3.0))
            .collect();
        assert!(step_at(&saw).is_some_and(|k| k.abs_diff(700) < 120));
        let t = growth_trend(std::slice::from_ref(&saw)).unwrap();
        assert!(!is_growth(&t, 0.005, 0.01), "{t:?}");
        // A leak of 0.01/s across the step is still found.
        let leak: Vec<(f64, f64)> = step.iter().map(|(t, v)| (*t, v + 0.01 * t)).collect();
        let t = growth_trend(&[leak]).unwrap();
        assert!(is_growth(&t, 0.005, 0.01), "{t:?}");
        assert!((t.slope - 0.01).abs() < 0.002, "{t:?}");
    }

    #[test]
    fn restarts_split_segments() {
        let a = series(100, |x| 500.0 + x);
        let b: Vec<(f64, f64)> = series(100, |x| 10.0 + x)
            .into_iter()
            .map(|(t, v)| (t + 100.0, v))
            .collect();
        let t = trend(&[a, b]).unwrap();
        assert!((t.slope - 1.0).abs() < 1e-9, "{t:?}");
    }
}
