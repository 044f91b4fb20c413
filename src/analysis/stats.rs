//! The statistics helpers the trend detector is built from: the normal
//! distribution, ranks and medians, autocovariance and the long-run
//! variance, least squares. Each cites its method where it is not
//! textbook.

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

/// At most `max` of the points, every stride-th.
pub(crate) fn thin(points: &[(f64, f64)], max: usize) -> Vec<(f64, f64)> {
    let stride = points.len().div_ceil(max.max(1)).max(1);
    points.iter().step_by(stride).copied().collect()
}

/// The value of rank `k` (from 0) among `v`, which it reorders.
pub(crate) fn rank(v: &mut [f64], k: usize) -> f64 {
    *v.select_nth_unstable_by(k, f64::total_cmp).1
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

/// The autocovariance of centred values at lag `k`.
pub(crate) fn autocovariance(v: &[f64], k: usize) -> f64 {
    (0..v.len().saturating_sub(k))
        .map(|i| v[i] * v[i + k])
        .sum::<f64>()
        / v.len() as f64
}

/// The long-run variance of nearly white values (what prewhitening left):
/// a Bartlett kernel with Andrews' (1991) bandwidth for an AR(1), at least
/// their variance's worth when their autocovariance at lag 0 is positive.
pub(crate) fn long_run(white: &[f64]) -> f64 {
    let m = white.len();
    let w0 = autocovariance(white, 0);
    if w0 <= 0.0 || m < 4 {
        return w0;
    }
    let rho = (autocovariance(white, 1) / w0).clamp(-0.97, 0.97);
    let alpha = 4.0 * rho * rho / ((1.0 - rho).powi(2) * (1.0 + rho).powi(2));
    let width = (1.1447 * (alpha * m as f64).cbrt()).min(m as f64 / 2.0);
    let lags = (width.floor() as usize).min(m - 3);
    w0 + (1..=lags)
        .map(|k| 2.0 * (1.0 - k as f64 / (width + 1.0)) * autocovariance(white, k))
        .sum::<f64>()
}

/// The ranks of `v` (ties share their average), less their mean.
pub(crate) fn centred_ranks(v: &[f64]) -> Vec<f64> {
    let n = v.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|a, b| v[*a].total_cmp(&v[*b]));
    let mut rank = vec![0.0; n];
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && v[order[j + 1]] == v[order[i]] {
            j += 1;
        }
        // Ranks from 1, less their mean (n + 1)/2.
        let centred = (i + j) as f64 / 2.0 + 1.0 - (n as f64 + 1.0) / 2.0;
        for idx in &order[i..=j] {
            rank[*idx] = centred;
        }
        i = j + 1;
    }
    rank
}

/// A least-squares fit (`least_squares`).
pub(crate) struct Fit {
    /// The columns' coefficients (the intercept's is not kept).
    pub beta: Vec<f64>,
    pub residuals: Vec<f64>,
    /// The diagonal of the inverse of the centred columns' cross
    /// products: a coefficient's variance per unit of the noise's.
    pub inverse: Vec<f64>,
}

impl Fit {
    pub fn rss(&self) -> f64 {
        self.residuals.iter().map(|r| r * r).sum()
    }
}

/// Least squares of `y` on the columns (each centred, with an intercept:
/// its coefficient is not kept).
pub(crate) fn least_squares(y: &[f64], cols: &[Vec<f64>]) -> Option<Fit> {
    let n = y.len() as f64;
    let centred = |v: &[f64]| {
        let m = v.iter().sum::<f64>() / n;
        v.iter().map(|x| x - m).collect::<Vec<f64>>()
    };
    let x: Vec<Vec<f64>> = cols.iter().map(|c| centred(c)).collect();
    solve(&centred(y), &x)
}

/// Least squares of `y` on the columns as they are (no intercept but one
/// of them).
pub(crate) fn solve(y: &[f64], x: &[Vec<f64>]) -> Option<Fit> {
    let k = x.len();
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(p, q)| p * q).sum::<f64>();
    // The normal equations, augmented with the identity and the right-hand
    // side, by Gauss-Jordan with pivoting.
    let mut m: Vec<Vec<f64>> = (0..k)
        .map(|i| {
            let mut row: Vec<f64> = (0..k).map(|j| dot(&x[i], &x[j])).collect();
            row.extend((0..k).map(|j| f64::from(i == j)));
            row.push(dot(&x[i], y));
            row
        })
        .collect();
    for c in 0..k {
        let p = (c..k).max_by(|a, b| m[*a][c].abs().total_cmp(&m[*b][c].abs()))?;
        m.swap(c, p);
        if m[c][c].abs() < 1e-300 {
            return None;
        }
        let pivot = m[c].clone();
        for (_, row) in m.iter_mut().enumerate().filter(|(r, _)| *r != c) {
            let f = row[c] / pivot[c];
            for (v, p) in row.iter_mut().zip(&pivot).skip(c) {
                *v -= f * p;
            }
        }
    }
    let beta: Vec<f64> = (0..k).map(|i| m[i][2 * k] / m[i][i]).collect();
    let inverse = (0..k).map(|i| m[i][k + i] / m[i][i]).collect();
    let residuals = (0..y.len())
        .map(|i| y[i] - (0..k).map(|j| beta[j] * x[j][i]).sum::<f64>())
        .collect();
    Some(Fit {
        beta,
        residuals,
        inverse,
    })
}

/// A figure's median and range over a cell's repeats.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(values: &[f64]) -> Option<Spread> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Spread {
            median,
            min: v[0],
            max: v[n - 1],
        })
    }

    /// Whether two cells' ranges overlap: a difference between their
    /// medians that the repeats themselves show.
    pub fn overlaps(&self, other: &Spread) -> bool {
        self.min <= other.max && other.min <= self.max
    }
}
