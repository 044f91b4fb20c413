//! Analysis of the sampled series: robust trend per segment between
//! restarts, peaks, steady states, time to the limit.

pub mod changes;
pub mod kinds;
pub mod log;
pub mod stats;
pub mod trend;

use crate::telemetry::Sample;

pub use crate::model::GROWTH_ALPHA;

/// How far past what was seen a growth is projected to the limit, as a
/// multiple of the time seen after warm-up. A fresh node's first minute is
/// mostly its caches filling; "limit reached in 8 min" from 45 s of a smoke
/// run reads as a finding and is none, while a leak seen for 10 s that hits
/// the limit 30 s later is one. Forecasts are not trusted far beyond their
/// data (Hyndman & Athanasopoulos, Forecasting: Principles and Practice,
/// 3rd ed., 5.5: prediction intervals widen with the horizon).
pub const MAX_EXTRAPOLATION: f64 = 5.0;

pub fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.len() < 2 {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    Some(trend::median_sorted(&v))
}

pub use crate::model::SeriesAnalysis;

/// The segments between restarts of one series, each without its first
/// `warmup_s` seconds, as (t, value) points.
pub fn segments(
    samples: &[Sample],
    value: impl Fn(&Sample) -> u64,
    warmup_s: f64,
) -> Vec<Vec<(f64, f64)>> {
    let mut ids: Vec<u32> = samples.iter().map(|s| s.segment).collect();
    ids.dedup();
    ids.into_iter()
        .map(|seg| {
            let pts: Vec<(f64, f64)> = samples
                .iter()
                .filter(|s| s.segment == seg && s.up)
                .map(|s| (s.t, value(s) as f64))
                .collect();
            let start = pts.first().map(|p| p.0).unwrap_or(0.0);
            pts.into_iter()
                .filter(|p| p.0 - start >= warmup_s)
                .collect::<Vec<_>>()
        })
        .filter(|p| !p.is_empty())
        .collect()
}

/// Peak, steady state, trend and time to the limit of one series.
pub fn analyse(
    samples: &[Sample],
    value: impl Fn(&Sample) -> u64 + Copy,
    warmup_s: f64,
    limit: Option<u64>,
) -> SeriesAnalysis {
    let segs = segments(samples, value, warmup_s);
    let steady = segs.last().and_then(|last| {
        let tail: Vec<f64> = last[last.len() * 3 / 4..].iter().map(|p| p.1).collect();
        median(tail).or_else(|| last.last().map(|p| p.1))
    });
    let t = trend::growth_trend(&segs);
    let slope = t.map(|t| t.slope * 3600.0);
    // Projected only from a significant growth, and not far beyond the
    // time it was seen.
    let seen_h: f64 = segs
        .iter()
        .map(|s| s.last().map_or(0.0, |l| l.0) - s.first().map_or(0.0, |f| f.0))
        .sum::<f64>()
        / 3600.0;
    let significant = t.is_some_and(|t| t.p_up < GROWTH_ALPHA);
    let hours_to_limit = match (slope, steady, limit) {
        (Some(s), Some(now), Some(l)) if s > 0.0 && significant => {
            Some(((l as f64 - now) / s).max(0.0)).filter(|h| *h <= MAX_EXTRAPOLATION * seen_h)
        }
        _ => None,
    };
    SeriesAnalysis {
        peak: samples.iter().map(value).max().unwrap_or(0),
        steady,
        slope_per_hour: slope,
        // Unbounded (a series of too few levels): none.
        slope_low_per_hour: t.map(|t| t.low * 3600.0).filter(|v| v.is_finite()),
        slope_high_per_hour: t.map(|t| t.high * 3600.0).filter(|v| v.is_finite()),
        p_growth: t.map(|t| t.p_up),
        hours_to_limit,
    }
}

/// The growth of a series in bytes per hour (Theil-Sen, pooled over the
/// segments between restarts, without warm-up).
pub fn growth_per_hour(
    samples: &[Sample],
    value: impl Fn(&Sample) -> u64 + Copy,
    warmup_s: f64,
) -> Option<f64> {
    analyse(samples, value, warmup_s, None).slope_per_hour
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn theil_sen_ignores_outliers() {
        let mut pts: Vec<(f64, f64)> = (0..50).map(|i| (i as f64, 2.0 * i as f64 + 1.0)).collect();
        pts[10].1 = 1e9;
        pts[30].1 = -1e9;
        assert!((trend::trend(&[pts]).unwrap().slope - 2.0).abs() < 1e-9);
        assert_eq!(trend::trend(&[vec![(0.0, 1.0)]]), None);
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
                pss: 0,
                anon: 0,
                cgroup: 0,
                cgroup_anon: 0,
                ..Sample::default()
            })
            .collect();
        let g = growth_per_hour(&samples, |s| s.rss, 0.0).unwrap();
        assert!((g - 3600.0).abs() < 1e-6, "{g}");
    }
}
