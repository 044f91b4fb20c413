//! What report.html draws, read back from a cell's files at full
//! resolution: every series (the node's memory and its kinds, the
//! cgroup's, the disk, the node's own Prometheus figures, the load's
//! throughput, errors and latency percentiles, soak's own cost) and every
//! event of `events.jsonl`. Series are sent to the page delta-encoded as
//! integers (milliseconds, and the value times a scale), which gzip packs
//! to a few bytes a point.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::model::CellResult;
use crate::report::charts::{self, MEASURES, PARTS};

/// One series: its label, and its points delta-encoded.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Series {
    pub label: String,
    /// Milliseconds since the cell's start, each as the step from the one
    /// before.
    pub t: Vec<i64>,
    /// The value times `scale`, rounded, each as the step from the one
    /// before.
    pub v: Vec<i64>,
    pub scale: f64,
    /// Drawn as steps (a value held until the next row), not lines.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub steps: bool,
}

impl Series {
    pub fn new(label: impl Into<String>, points: &[(f64, f64)], scale: f64) -> Series {
        let (mut t, mut v) = (
            Vec::with_capacity(points.len()),
            Vec::with_capacity(points.len()),
        );
        let (mut last_t, mut last_v) = (0i64, 0i64);
        for &(at, value) in points {
            if !at.is_finite() || !value.is_finite() {
                continue;
            }
            let (at, value) = ((at * 1000.0).round() as i64, (value * scale).round() as i64);
            t.push(at - last_t);
            v.push(value - last_v);
            (last_t, last_v) = (at, value);
        }
        Series {
            label: label.into(),
            t,
            v,
            scale,
            steps: false,
        }
    }

    /// At most about `max` points: the series cut into `max / 2`
    /// stretches of time, each kept as its lowest and highest point in
    /// their order (a spike survives), the last point always.
    pub fn thinned(&self, max: usize) -> Series {
        let points = self.points();
        let buckets = (max / 2).max(1);
        if points.len() <= max {
            return self.clone();
        }
        let per = points.len().div_ceil(buckets);
        let mut kept = Vec::with_capacity(max + 1);
        for chunk in points.chunks(per) {
            let lo = chunk
                .iter()
                .enumerate()
                .min_by(|a, b| a.1 .1.total_cmp(&b.1 .1))
                .map(|x| x.0);
            let hi = chunk
                .iter()
                .enumerate()
                .max_by(|a, b| a.1 .1.total_cmp(&b.1 .1))
                .map(|x| x.0);
            let (Some(lo), Some(hi)) = (lo, hi) else {
                continue;
            };
            kept.push(chunk[lo.min(hi)]);
            if lo != hi {
                kept.push(chunk[lo.max(hi)]);
            }
        }
        if kept.last() != points.last() {
            kept.extend(points.last());
        }
        Series {
            steps: self.steps,
            ..Series::new(self.label.clone(), &kept, self.scale)
        }
    }

    /// The points again, as the page decodes them.
    pub fn points(&self) -> Vec<(f64, f64)> {
        let (mut t, mut v) = (0i64, 0i64);
        self.t
            .iter()
            .zip(&self.v)
            .map(|(dt, dv)| {
                t += dt;
                v += dv;
                (t as f64 / 1000.0, v as f64 / self.scale)
            })
            .collect()
    }

    pub fn len(&self) -> usize {
        self.t.len()
    }

    pub fn is_empty(&self) -> bool {
        self.t.is_empty()
    }
}

/// The unit a group's axis is in.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    Bytes,
    PerSecond,
    Millis,
    Share,
    Number,
}

/// The series drawn on one chart.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Group {
    pub id: String,
    pub title: String,
    pub unit: Unit,
    /// Drawn stacked: the parts of a whole (the memory kinds).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stacked: bool,
    pub series: Vec<Series>,
}

/// Something that happened, drawn as a line at its time.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Mark {
    pub t: f64,
    pub kind: String,
    pub text: String,
    /// fault, recovery, finding or info: its colour.
    pub class: &'static str,
}

/// A phase, drawn as a band.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Span {
    pub start: f64,
    pub end: f64,
    pub name: String,
}

/// What the page draws of one cell.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct CellData {
    pub id: String,
    pub verdict: &'static str,
    pub groups: Vec<Group>,
    pub marks: Vec<Mark>,
    pub phases: Vec<Span>,
    pub limit_bytes: Option<u64>,
    /// Seconds the cell ran (its last sample or event).
    pub end: f64,
}

/// Series of a node's own figures beyond this many are left off (a node
/// exporting thousands of label sets would make the page too large to
/// open); the page says how many.
const MAX_METRIC_SERIES: usize = 400;

/// The cell's series and events, from its files under `dir`.
pub fn of_cell(dir: &Path, c: &CellResult) -> CellData {
    let mut groups = vec![];
    let samples = samples(dir, c);
    groups.extend(samples);
    groups.extend(load(dir, c));
    groups.extend(metrics(dir, c));
    let (mut marks, phases, last) = events(dir, c);
    let end = groups
        .iter()
        .flat_map(|g| &g.series)
        .filter_map(|s| s.points().last().map(|p| p.0))
        .fold(last, f64::max);
    marks.extend(growth_verdicts(c, end));
    CellData {
        id: c.id.clone(),
        verdict: c.verdict.as_str(),
        groups,
        marks,
        phases,
        limit_bytes: c.memory.limit_bytes,
        end,
    }
}

fn group(id: &str, title: &str, unit: Unit, series: Vec<Series>) -> Option<Group> {
    let series: Vec<Series> = series.into_iter().filter(|s| s.len() >= 2).collect();
    (!series.is_empty()).then(|| Group {
        id: id.into(),
        title: title.into(),
        unit,
        stacked: false,
        series,
    })
}

/// From `samples.csv`: the memory (RSS and its measures, the node's own
/// figures beside them), the kinds of mappings stacked, the disk, and
/// soak's own cost.
fn samples(dir: &Path, c: &CellResult) -> Vec<Group> {
    let Some(file) = charts::file(dir, c, "samples.csv") else {
        return vec![];
    };
    let mut names = vec!["rss_bytes", "soak_rss_bytes", "soak_cpu_s"];
    names.extend(MEASURES.iter().map(|m| m.0));
    let cols = charts::columns(charts::lines(&file), "t_s", &names);
    let col = |name: &str| {
        names
            .iter()
            .position(|n| *n == name)
            .map(|i| cols[i].clone())
            .unwrap_or_default()
    };
    let measure = |name: &str| {
        let label = MEASURES.iter().find(|m| m.0 == name).map_or(name, |m| m.1);
        Series::new(label, &col(name), 1.0)
    };
    let ever = |s: &Series| s.points().iter().any(|p| p.1 > 0.0);
    let mut memory = vec![Series::new("RSS", &col("rss_bytes"), 1.0)];
    memory.extend(
        ["pss_bytes", "anon_bytes", "cgroup_bytes"]
            .map(measure)
            .into_iter()
            .filter(ever),
    );
    let own = charts::file(dir, c, "metrics.csv")
        .map(|f| charts::parts(charts::lines(&f)))
        .unwrap_or_default();
    memory.extend(own.iter().map(|p| Series::new(p.label, &p.points, 1.0)));
    let kinds: Vec<Series> = MEASURES[4..]
        .iter()
        .map(|m| measure(m.0))
        .filter(ever)
        .collect();
    let cpu = col("soak_cpu_s");
    let cpu_share: Vec<(f64, f64)> = cpu
        .windows(2)
        .filter(|w| w[1].0 > w[0].0)
        .map(|w| (w[1].0, (w[1].1 - w[0].1) / (w[1].0 - w[0].0)))
        .collect();
    let mut out: Vec<Group> = vec![];
    out.extend(group("memory", "Memory", Unit::Bytes, memory));
    out.extend(
        group(
            "kinds",
            "Where the resident memory is (smaps, stacked)",
            Unit::Bytes,
            kinds,
        )
        .map(|g| Group { stacked: true, ..g }),
    );
    out.extend(group(
        "disk",
        "Data directory",
        Unit::Bytes,
        vec![measure("disk_bytes")]
            .into_iter()
            .filter(ever)
            .collect(),
    ));
    out.extend(group(
        "soak-rss",
        "soak's own memory",
        Unit::Bytes,
        vec![Series::new("soak RSS", &col("soak_rss_bytes"), 1.0)],
    ));
    out.extend(group(
        "soak-cpu",
        "soak's own CPU (share of a core)",
        Unit::Share,
        vec![Series::new("soak CPU", &cpu_share, 10_000.0)],
    ));
    out
}

/// From `latency.csv`: throughput (operations, writes, reads, errors and
/// unavailable answers a second) and the latency percentiles.
fn load(dir: &Path, c: &CellResult) -> Vec<Group> {
    let Some(file) = charts::file(dir, c, "latency.csv") else {
        return vec![];
    };
    let names = [
        "ops_per_s",
        "writes",
        "reads",
        "errors",
        "unavailable",
        "p50_us",
        "p90_us",
        "p99_us",
        "p999_us",
        "max_us",
    ];
    let cols = charts::columns(charts::lines(&file), "t", &names);
    // A count of an interval over the interval's length (the first one
    // from the load's start, about a second).
    let rate = |i: usize| -> Vec<(f64, f64)> {
        let mut prev: Option<f64> = None;
        cols[i]
            .iter()
            .map(|&(t, n)| {
                let span = prev.map_or(1.0, |p| (t - p).max(1e-3));
                prev = Some(t);
                (t, n / span)
            })
            .collect()
    };
    let ms =
        |i: usize| -> Vec<(f64, f64)> { cols[i].iter().map(|&(t, us)| (t, us / 1000.0)).collect() };
    let mut through = vec![Series::new("operations", &cols[0], 100.0)];
    for (i, label) in [
        (1, "writes"),
        (2, "reads"),
        (3, "errors"),
        (4, "unavailable"),
    ] {
        let s = Series::new(label, &rate(i), 100.0);
        if i < 3 || s.points().iter().any(|p| p.1 > 0.0) {
            through.push(s);
        }
    }
    let latency = [(5, "p50"), (6, "p90"), (7, "p99"), (8, "p99.9"), (9, "max")]
        .into_iter()
        .map(|(i, label)| Series::new(label, &ms(i), 1000.0))
        .collect();
    [
        group(
            "throughput",
            "Throughput (a second)",
            Unit::PerSecond,
            through,
        ),
        group("latency", "Latency", Unit::Millis, latency),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// From `metrics.csv`: every figure the node exported that changed, one
/// chart per metric name, a series per label set (held until its next
/// row), except those already drawn beside RSS.
fn metrics(dir: &Path, c: &CellResult) -> Vec<Group> {
    let Some(file) = charts::file(dir, c, "metrics.csv") else {
        return vec![];
    };
    let mut by_series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for line in charts::lines(&file).skip(1) {
        let mut f = line.splitn(3, ',');
        let (Some(t), Some(series), Some(v)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let (Ok(t), Ok(v)) = (t.parse::<f64>(), v.trim().parse::<f64>()) else {
            continue;
        };
        if v.is_finite() && (by_series.len() < MAX_METRIC_SERIES || by_series.contains_key(series))
        {
            by_series
                .entry(series.to_string())
                .or_default()
                .push((t, v));
        }
    }
    let mut by_name: BTreeMap<String, Vec<Series>> = BTreeMap::new();
    for (series, points) in by_series {
        let name = series.split('{').next().unwrap_or(&series).to_string();
        if PARTS.iter().any(|p| p.0 == name) || points.iter().all(|p| p.1 == points[0].1) {
            continue;
        }
        let scale = if points.iter().all(|p| p.1.fract() == 0.0) {
            1.0
        } else {
            1000.0
        };
        let label = series
            .strip_prefix(&name)
            .filter(|l| !l.is_empty())
            .unwrap_or(&name);
        let mut s = Series::new(label, &points, scale);
        s.steps = true;
        by_name.entry(name).or_default().push(s);
    }
    by_name
        .into_iter()
        .filter_map(|(name, series)| {
            let unit = if name.ends_with("_bytes") {
                Unit::Bytes
            } else {
                Unit::Number
            };
            group(&format!("metric:{name}"), &name, unit, series)
        })
        .collect()
}

/// The kinds of events drawn, and their class (the colour of their line).
/// The rest (the cell's start, progress, the verdict) are left to the
/// event list.
fn class_of(kind: &str, e: &serde_json::Value) -> Option<&'static str> {
    let harmed = |k: &str| {
        e.get(k)
            .map(|i| {
                ["lost", "corrupted", "lost_unsynced", "resurrected"]
                    .iter()
                    .any(|f| i.get(f).and_then(|v| v.as_u64()).unwrap_or(0) > 0)
            })
            .unwrap_or(false)
    };
    Some(match kind {
        "member" => match e.get("action").and_then(|a| a.as_str()) {
            Some("start" | "resume") => "recovery",
            _ => "fault",
        },
        "killed" | "power-cut" | "fault-set" | "paused" | "chaos-action" | "stopped" => "fault",
        "ready" | "fault-lifted" | "resumed" | "swapped" | "loaded" => "recovery",
        "died" | "not-recovered" | "corruption" | "error" | "refused" => "finding",
        "read-back" | "reads-found" if harmed("integrity") => "finding",
        "read-back" | "reads-found" | "swap" | "exec-started" | "exec-finished" | "limit"
        | "offline-verified" | "notice" | "allocator" => "info",
        _ => return None,
    })
}

/// The verdicts of the growth checks (memory and disk), drawn where the
/// series they judge end: a trend is known only once the run is over.
fn growth_verdicts(c: &CellResult, end: f64) -> Vec<Mark> {
    c.checks
        .iter()
        .filter(|r| r.name.starts_with("memory_growth") || r.name.starts_with("disk_growth"))
        .map(|r| Mark {
            t: end,
            kind: "growth verdict".into(),
            text: format!(
                "{} {}: {}",
                r.name,
                r.verdict.as_str(),
                crate::report::text::check_text(r)
            ),
            class: if r.verdict == crate::model::Verdict::Pass {
                "info"
            } else {
                "finding"
            },
        })
        .collect()
}

/// The events of `events.jsonl`: those drawn, the phases as spans, and the
/// time of the last.
fn events(dir: &Path, c: &CellResult) -> (Vec<Mark>, Vec<Span>, f64) {
    let (mut marks, mut phases, mut last) = (vec![], vec![], 0.0f64);
    let Some(file) = c.files.get("events.jsonl").map(|f| dir.join(f)) else {
        return (marks, phases, last);
    };
    let text = std::fs::read_to_string(file).unwrap_or_default();
    for line in text.lines() {
        let Ok(e) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let (Some(t), Some(kind)) = (
            e.get("t").and_then(|t| t.as_f64()),
            e.get("kind").and_then(|k| k.as_str()),
        ) else {
            continue;
        };
        last = last.max(t);
        let detail = e.get("detail").and_then(|d| d.as_str()).unwrap_or_default();
        if kind == "phase-finished" {
            phases.push(Span {
                start: e.get("start_s").and_then(|s| s.as_f64()).unwrap_or(t),
                end: t,
                name: e
                    .get("phase")
                    .and_then(|p| p.as_str())
                    .unwrap_or(detail)
                    .to_string(),
            });
        }
        // A died event says why in its cause: an OOM kill is its own kind.
        let kind = match (kind, e.get("cause").and_then(|c| c.as_str())) {
            ("died", Some("oom")) => "oom-killed",
            _ => kind,
        };
        if let Some(class) = class_of(kind, &e) {
            marks.push(Mark {
                t,
                kind: kind.to_string(),
                text: detail.to_string(),
                class: if kind == "oom-killed" {
                    "finding"
                } else {
                    class
                },
            });
        }
    }
    (marks, phases, last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_series_comes_back_as_it_went_at_its_scale() {
        let points = [(0.5, 100.0), (1.501, 250.0), (2.5, 90.0), (3.0, f64::NAN)];
        let s = Series::new("x", &points, 1.0);
        assert_eq!(s.t, vec![500, 1001, 999]);
        assert_eq!(s.v, vec![100, 150, -160]);
        assert_eq!(s.points(), points[..3].to_vec());
        let ms = Series::new("p99", &[(1.0, 1.2345), (2.0, 0.5)], 1000.0);
        assert_eq!(ms.points(), vec![(1.0, 1.235), (2.0, 0.5)]);
    }

    #[test]
    fn a_thinned_series_keeps_its_spike_and_its_last_point() {
        let mut points: Vec<(f64, f64)> = (0..10_000).map(|i| (i as f64, 100.0)).collect();
        points[5_123].1 = 9_000.0;
        points[9_999].1 = 7.0;
        let s = Series::new("x", &points, 1.0).thinned(200);
        let kept = s.points();
        assert!(kept.len() <= 202, "{}", kept.len());
        assert!(kept.contains(&(5_123.0, 9_000.0)));
        assert_eq!(kept.last(), Some(&(9_999.0, 7.0)));
        assert!(kept.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn an_event_is_drawn_by_what_it_did() {
        let v = |s: &str| serde_json::from_str::<serde_json::Value>(s).unwrap();
        assert_eq!(class_of("power-cut", &v("{}")), Some("fault"));
        assert_eq!(class_of("ready", &v("{}")), Some("recovery"));
        assert_eq!(
            class_of("read-back", &v(r#"{"integrity":{"lost":0}}"#)),
            Some("info")
        );
        assert_eq!(
            class_of("read-back", &v(r#"{"integrity":{"lost_unsynced":3}}"#)),
            Some("finding")
        );
        assert_eq!(class_of("verdict", &v("{}")), None);
    }

    #[test]
    fn a_growth_verdict_is_drawn_where_its_series_end_and_a_failed_one_is_a_finding() {
        use crate::model::{CheckResult, Verdict};
        let check = |name: &str, verdict| CheckResult {
            name: name.into(),
            verdict,
            value: 40.0e6.into(),
            limit: 30.0e6.into(),
            unit: "bytes/h".into(),
            detail: Some("95% CI [+35.0, +41.0] MiB/h".into()),
        };
        let c = CellResult {
            checks: vec![
                check("memory_growth (rss)", Verdict::Fail),
                check("disk_growth", Verdict::Pass),
                check("lost_writes", Verdict::Fail),
            ],
            ..Default::default()
        };
        let marks = growth_verdicts(&c, 3_600.0);
        assert_eq!(marks.len(), 2, "{marks:?}");
        assert!(marks.iter().all(|m| m.t == 3_600.0));
        assert_eq!(marks[0].class, "finding");
        assert!(
            marks[0].text.starts_with("memory_growth (rss) fail"),
            "{}",
            marks[0].text
        );
        assert!(marks[0].text.contains("MiB/h"), "{}", marks[0].text);
        assert_eq!(marks[1].class, "info");
    }
}
