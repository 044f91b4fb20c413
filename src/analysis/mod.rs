//! Analysis of the sampled series: robust trend per segment between
//! restarts, peaks.

use crate::telemetry::Sample;

/// Most points fed to the O(n²) slope estimator per segment; longer
/// segments are thinned evenly.
const MAX_POINTS: usize = 1500;

/// The Theil-Sen estimator: the median of the slopes between all pairs of
/// points (Theil 1950; Sen 1968). Robust to outliers up to ~29% of the
/// points, unlike least squares. `None` with fewer than 3 points or no
/// spread in time.
pub fn theil_sen(points: &[(f64, f64)]) -> Option<f64> {
    let slopes = pair_slopes(points);
    median(slopes)
}

fn pair_slopes(points: &[(f64, f64)]) -> Vec<f64> {
    let pts = thin(points);
    let mut slopes = Vec::with_capacity(pts.len() * pts.len() / 2);
    for i in 0..pts.len() {
        for j in i + 1..pts.len() {
            let dt = pts[j].0 - pts[i].0;
            if dt > 0.0 {
                slopes.push((pts[j].1 - pts[i].1) / dt);
            }
        }
    }
    slopes
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

pub fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.len() < 2 {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The growth of a series in bytes per hour: Theil-Sen slopes pooled over
/// the segments between restarts (a restart's drop is not a trend), each
/// without its first `warmup_s` seconds.
pub fn growth_per_hour(
    samples: &[Sample],
    value: impl Fn(&Sample) -> u64,
    warmup_s: f64,
) -> Option<f64> {
    let mut slopes = vec![];
    let mut segments: Vec<u32> = samples.iter().map(|s| s.segment).collect();
    segments.dedup();
    for seg in segments {
        let pts: Vec<(f64, f64)> = samples
            .iter()
            .filter(|s| s.segment == seg && s.up)
            .map(|s| (s.t, value(s) as f64))
            .collect();
        let Some(start) = pts.first().map(|p| p.0) else {
            continue;
        };
        let kept: Vec<(f64, f64)> = pts
            .into_iter()
            .filter(|p| p.0 - start >= warmup_s)
            .collect();
        if kept.len() >= 3 {
            slopes.extend(pair_slopes(&kept));
        }
    }
    median(slopes).map(|per_s| per_s * 3600.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn theil_sen_ignores_outliers() {
        let mut pts: Vec<(f64, f64)> = (0..50).map(|i| (i as f64, 2.0 * i as f64 + 1.0)).collect();
        pts[10].1 = 1e9;
        pts[30].1 = -1e9;
        assert!((theil_sen(&pts).unwrap() - 2.0).abs() < 1e-9);
        assert_eq!(theil_sen(&[(0.0, 1.0)]), None);
    }

    #[test]
    fn growth_is_per_segment() {
        // Two segments that each grow 1 byte/s, with a drop between them.
        let samples: Vec<Sample> = (0..40)
            .map(|i| Sample {
                t: i as f64,
                segment: if i < 20 { 0 } else { 1 },
                up: true,
                rss: if i < 20 { 1000 + i } else { 10 + i } as u64,
                cgroup: 0,
                cgroup_anon: 0,
                cgroup_file: 0,
                disk: 0,
            })
            .collect();
        let g = growth_per_hour(&samples, |s| s.rss, 0.0).unwrap();
        assert!((g - 3600.0).abs() < 1e-6, "{g}");
    }
}
