//! Where the memory was, kind by kind: the kinds of mappings of every
//! node (`smaps`), and a JVM's own account (Native Memory Tracking), each
//! a series with its trend.

use crate::model::{JvmAccountSummary, KindGrowth};
use crate::telemetry::nmt::Reading;
use crate::telemetry::Sample;

/// A series' first value after warm-up and its last one.
fn ends(segs: &[Vec<(f64, f64)>]) -> (Option<u64>, Option<u64>) {
    let first = segs.first().and_then(|s| s.first()).map(|p| p.1 as u64);
    let last = segs.last().and_then(|s| s.last()).map(|p| p.1 as u64);
    (first, last)
}

/// Each kind of mapping's figures and trend, from the samples where
/// `smaps` was read (not those that carried a reading).
pub fn of_mappings(samples: &[Sample], w: f64) -> Vec<KindGrowth> {
    use crate::telemetry::maps::KINDS;
    let read: Vec<Sample> = samples.iter().filter(|s| !s.pss_carried).copied().collect();
    let ends = |value: fn(&crate::telemetry::maps::Kinds) -> u64| {
        ends(&super::segments(&read, |s| value(&s.maps), w))
    };
    KINDS
        .iter()
        .map(|(kind, label, value)| {
            let a = super::analyse(&read, |s| value(&s.maps), w, None);
            let (first, last) = ends(*value);
            let (count_first, count_last) = if *kind == "arenas" {
                ends(|k| k.arena_count)
            } else {
                (None, None)
            };
            KindGrowth {
                kind: kind.to_string(),
                label: label.to_string(),
                peak_bytes: a.peak,
                first_bytes: first.unwrap_or(0),
                last_bytes: last.unwrap_or(0),
                slope_bytes_per_hour: a.slope_per_hour,
                p_growth: a.p_growth,
                count_first,
                count_last,
            }
        })
        .filter(|k| k.peak_bytes > 0)
        .collect()
}

/// Each member of a cluster's resident memory (RSS of its processes) and
/// its trend, from its own samples (an incarnation is a segment).
pub fn of_members(members: &[Vec<Sample>], w: f64) -> Vec<KindGrowth> {
    members
        .iter()
        .enumerate()
        .map(|(i, samples)| {
            let a = super::analyse(samples, |s| s.rss, w, None);
            let (first, last) = ends(&super::segments(samples, |s| s.rss, w));
            KindGrowth {
                kind: format!("member:{}", i + 1),
                label: format!("member {}", i + 1),
                peak_bytes: a.peak,
                first_bytes: first.unwrap_or(0),
                last_bytes: last.unwrap_or(0),
                slope_bytes_per_hour: a.slope_per_hour,
                p_growth: a.p_growth,
                count_first: None,
                count_last: None,
            }
        })
        .collect()
}

/// Each category of the JVM's account, its committed total, and what RSS
/// holds beyond it ("outside the JVM's account": native memory of
/// libraries, glibc's arenas), from the readings after each start's
/// warm-up.
pub fn jvm_account(readings: &[Reading], error: Option<String>, w: f64) -> JvmAccountSummary {
    let mut names: Vec<String> = vec![];
    for r in readings {
        for (c, _) in &r.categories {
            if !names.contains(c) {
                names.push(c.clone());
            }
        }
    }
    let series = |value: &dyn Fn(&Reading) -> Option<u64>| -> Vec<Vec<(f64, f64)>> {
        let mut segs: Vec<Vec<(f64, f64)>> = vec![];
        let (mut seg, mut start) = (None, 0.0);
        for r in readings {
            if seg != Some(r.segment) {
                (seg, start) = (Some(r.segment), r.t);
                segs.push(vec![]);
            }
            if r.t - start >= w {
                if let (Some(v), Some(s)) = (value(r), segs.last_mut()) {
                    s.push((r.t, v as f64));
                }
            }
        }
        segs.retain(|s| !s.is_empty());
        segs
    };
    let growth = |kind: &str, label: String, value: &dyn Fn(&Reading) -> Option<u64>| {
        let segs = series(value);
        let t = super::trend::growth_trend(&segs);
        let peak = readings.iter().filter_map(value).max().unwrap_or(0);
        let (first, last) = ends(&segs);
        KindGrowth {
            kind: kind.to_string(),
            label,
            peak_bytes: peak,
            first_bytes: first.unwrap_or(0),
            last_bytes: last.unwrap_or(0),
            slope_bytes_per_hour: t.map(|t| t.slope * 3600.0),
            p_growth: t.map(|t| t.p_up),
            count_first: None,
            count_last: None,
        }
    };
    let mut categories: Vec<KindGrowth> = names
        .iter()
        .map(|n| {
            growth(&format!("nmt:{n}"), format!("JVM {n}"), &|r: &Reading| {
                r.categories.iter().find(|(c, _)| c == n).map(|(_, b)| *b)
            })
        })
        .collect();
    categories.push(growth(
        "nmt:total",
        "JVM committed (all of NMT)".into(),
        &|r: &Reading| Some(r.total),
    ));
    categories.push(growth(
        "nmt:outside",
        "outside the JVM's account (RSS - committed)".into(),
        &|r: &Reading| Some(r.rss.saturating_sub(r.total)),
    ));
    JvmAccountSummary {
        readings: readings.len(),
        categories: if readings.is_empty() {
            vec![]
        } else {
            categories
        },
        note: if readings.is_empty() {
            Some(error.unwrap_or_else(|| {
                "no reading of the JVM's account was taken (the node was never up at a reading)"
                    .into()
            }))
        } else {
            None
        },
    }
}
