//! Charts as mermaid `xychart-beta` blocks (they render in a pull request
//! comment): a cell's RSS with its restarts and phases marked, the
//! measures beside it, and the palette the history's charts share.

use std::io::{self, Write};

use super::charts::CellChart;
use super::CellResult;
use crate::units::Bytes;

/// RSS over time as a mermaid line chart, with the limit as a second line.
pub(crate) fn chart_rss(
    w: &mut impl Write,
    id: &str,
    points: &[(f64, u64)],
    limit: Option<u64>,
) -> io::Result<()> {
    if points.len() < 2 {
        return Ok(());
    }
    const MAX: usize = 60;
    let step = (points.len() as f64 / MAX as f64).max(1.0);
    let picked: Vec<(f64, u64)> = (0..points.len().min(MAX))
        .map(|i| points[(i as f64 * step) as usize])
        .collect();
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let top = picked
        .iter()
        .map(|p| mib(p.1))
        .fold(limit.map(mib).unwrap_or(0.0), f64::max)
        * 1.1;
    let t_end = picked.last().map(|p| p.0).unwrap_or(0.0);
    writeln!(
        w,
        // Blue RSS, a grey limit: mermaid's default first colour is a
        // pale lavender that hardly shows on white.
        "```mermaid\n%%{{init: {{\"themeVariables\": {{\"xyChart\": {{\"plotColorPalette\": \"#1f77b4, #7f7f7f\"}}}}}}}}%%\nxychart-beta\n    title \"RSS of {} (MiB{})\"",
        chart_text(id),
        if limit.is_some() {
            "; flat line: the limit"
        } else {
            ""
        }
    )?;
    writeln!(w, "    x-axis \"seconds\" 0 --> {:.0}", t_end.ceil())?;
    writeln!(w, "    y-axis \"MiB\" 0 --> {:.0}", top.ceil().max(1.0))?;
    let series: Vec<String> = picked.iter().map(|p| format!("{:.1}", mib(p.1))).collect();
    writeln!(w, "    line [{}]", series.join(", "))?;
    if let Some(l) = limit {
        let flat: Vec<String> = picked.iter().map(|_| format!("{:.1}", mib(l))).collect();
        writeln!(w, "    line [{}]", flat.join(", "))?;
    }
    writeln!(w, "```\n")
}

/// Text inside a chart's quoted title: mermaid's xychart has no escape
/// for a double quote (a cell id may hold one), and a line break ends the
/// statement.
pub(crate) fn chart_text(s: &str) -> String {
    s.replace('"', "'").replace(['\n', '\r'], " ")
}

/// Colours of the lines in [`chart_parts`], in order, with their names for
/// the legend (mermaid's xychart draws none).
pub(crate) const PALETTE: &[(&str, &str)] = &[
    ("#1f77b4", "blue"),
    ("#ff7f0e", "orange"),
    ("#2ca02c", "green"),
    ("#d62728", "red"),
    ("#9467bd", "purple"),
    ("#8c564b", "brown"),
    ("#e377c2", "pink"),
    ("#7f7f7f", "grey"),
    ("#bcbd22", "olive"),
    ("#17becf", "cyan"),
];

/// Where the memory went: the node's own figures (RocksDB's, the
/// allocator's, a JVM's) beside its RSS, charted on one time axis, and
/// their peaks and last values in a table.
pub(crate) fn chart_parts(w: &mut impl Write, id: &str, chart: &CellChart) -> io::Result<()> {
    if chart.parts.is_empty() {
        return Ok(());
    }
    let rss: Vec<(f64, f64)> = chart.rss.iter().map(|&(t, b)| (t, b as f64)).collect();
    let mut lines: Vec<(&str, &[(f64, f64)])> = vec![];
    if rss.len() >= 2 {
        lines.push(("RSS", &rss));
    }
    lines.extend(chart.parts.iter().map(|p| (p.label, p.points.as_slice())));
    writeln!(
        w,
        "**Where the memory went** (the node's own figures beside its RSS):\n\n| series | peak | last |\n|---|---:|---:|"
    )?;
    for (label, points) in &lines {
        let peak = points.iter().map(|p| p.1).fold(0.0, f64::max);
        let last = points.last().map_or(0.0, |p| p.1);
        writeln!(
            w,
            "| {label} | {} | {} |",
            Bytes(peak as u64),
            Bytes(last as u64)
        )?;
    }
    writeln!(w)?;
    let in_mib: Vec<(&str, Vec<(f64, f64)>)> = lines
        .iter()
        .map(|(l, p)| (*l, p.iter().map(|&(t, b)| (t, mib(b))).collect()))
        .collect();
    chart_lines(
        w,
        &format!("Memory of {id} (MiB)"),
        "MiB",
        &in_mib,
        &[],
        Hold::Last,
    )
}

pub(crate) fn mib(b: f64) -> f64 {
    b / (1024.0 * 1024.0)
}

/// What a line shows between its points.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Hold {
    /// Its last value (a sampled level: memory, disk).
    Last,
    /// 0 where it has no point within a step of the grid (the load's
    /// intervals: none while nothing ran).
    Zero,
}

/// One chart of lines over the cell's time, each in its colour, named in a
/// line above it (mermaid's xychart draws no legend), with `marks` (the
/// node's restarts and faults lifted) as grey bars.
pub(crate) fn chart_lines(
    w: &mut impl Write,
    title: &str,
    unit: &str,
    lines: &[(&str, Vec<(f64, f64)>)],
    marks: &[f64],
    hold: Hold,
) -> io::Result<()> {
    let lines: Vec<&(&str, Vec<(f64, f64)>)> = lines
        .iter()
        .filter(|(_, p)| p.len() >= 2)
        .take(PALETTE.len())
        .collect();
    if lines.is_empty() {
        return Ok(());
    }
    const MAX: usize = 60;
    let t_end = lines
        .iter()
        .filter_map(|(_, p)| p.last().map(|x| x.0))
        .fold(0.0, f64::max);
    let step = t_end / (MAX - 1) as f64;
    let grid: Vec<f64> = (0..MAX).map(|i| step * i as f64).collect();
    let at = |points: &[(f64, f64)], t: f64| -> f64 {
        let i = points.partition_point(|p| p.0 <= t);
        match (hold, i.checked_sub(1).map(|i| points[i])) {
            (Hold::Last, p) => p.unwrap_or(points[0]).1,
            (Hold::Zero, Some(p)) if t - p.0 <= step.max(1.0) => p.1,
            (Hold::Zero, _) => 0.0,
        }
    };
    let top = (lines
        .iter()
        .flat_map(|(_, p)| p.iter().map(|x| x.1))
        .fold(0.0, f64::max)
        * 1.1)
        .max(1.0);
    let mut legend: Vec<String> = lines
        .iter()
        .zip(PALETTE)
        .map(|((label, _), (_, colour))| format!("{label} {colour}"))
        .collect();
    let mut palette: Vec<&str> = PALETTE.iter().take(lines.len()).map(|p| p.0).collect();
    let bars: Vec<String> = grid
        .iter()
        .map(|&t| {
            let hit = marks.iter().any(|m| *m > t - step && *m <= t);
            if hit {
                format!("{:.1}", top)
            } else {
                "0".into()
            }
        })
        .collect();
    // The bars go first, under the lines, and so take the first colour.
    let marked = marks.iter().any(|m| *m <= t_end);
    if marked {
        legend.push("grey bars: restarts and faults lifted".into());
        palette.insert(0, MARK_COLOUR);
    }
    writeln!(
        w,
        "Lines: {}.\n\n```mermaid\n%%{{init: {{\"themeVariables\": {{\"xyChart\": {{\"plotColorPalette\": \"{}\"}}}}}}}}%%\nxychart-beta\n    title \"{}\"",
        legend.join(", "),
        palette.join(", "),
        chart_text(title)
    )?;
    writeln!(w, "    x-axis \"seconds\" 0 --> {:.0}", t_end.ceil())?;
    writeln!(
        w,
        "    y-axis \"{}\" 0 --> {:.0}",
        chart_text(unit),
        top.ceil()
    )?;
    if marked {
        writeln!(w, "    bar [{}]", bars.join(", "))?;
    }
    for (_, points) in &lines {
        let series: Vec<String> = grid
            .iter()
            .map(|&t| format!("{:.1}", at(points, t)))
            .collect();
        writeln!(w, "    line [{}]", series.join(", "))?;
    }
    writeln!(w, "```\n")
}

/// The colour of the bars that mark restarts and faults.
pub(crate) const MARK_COLOUR: &str = "#c7c7c7";

/// soak's own memory and CPU beside the node's.
fn harness_series(w: &mut impl Write, id: &str, chart: &CellChart) -> io::Result<()> {
    writeln!(
        w,
        "**soak's own memory and CPU** (the harness beside the node):\n"
    )?;
    let rss = chart.soak_rss.iter().map(|&(t, b)| (t, mib(b))).collect();
    chart_lines(
        w,
        &format!("soak's RSS while {id} ran (MiB)"),
        "MiB",
        &[("soak RSS", rss)],
        &[],
        Hold::Last,
    )?;
    let cpu = chart
        .soak_cpu
        .iter()
        .map(|&(t, c)| (t, c * 100.0))
        .collect();
    chart_lines(
        w,
        &format!("soak's CPU while {id} ran (% of a core)"),
        "%",
        &[("soak CPU", cpu)],
        &[],
        Hold::Last,
    )?;
    Ok(())
}

/// The charts of every other series a cell sampled: memory by measure
/// against the limit, the data directory, the load's throughput and p99;
/// each with the restarts and the faults lifted marked.
pub(crate) fn chart_series(
    w: &mut impl Write,
    c: &CellResult,
    chart: &CellChart,
) -> io::Result<()> {
    let marks: Vec<f64> = c
        .restarts
        .iter()
        .map(|r| r.at_s)
        .chain(c.recoveries.iter().map(|r| r.lifted_at_s))
        .collect();
    let id = &c.id;
    let mut memory: Vec<(&str, Vec<(f64, f64)>)> = vec![(
        "RSS",
        chart.rss.iter().map(|&(t, b)| (t, mib(b as f64))).collect(),
    )];
    memory.extend(
        chart
            .measures
            .iter()
            .filter(|m| m.label != "disk")
            .map(|m| {
                (
                    m.label,
                    m.points.iter().map(|&(t, b)| (t, mib(b))).collect(),
                )
            }),
    );
    if memory.len() > 1 {
        if let (Some(limit), Some(last)) = (c.memory.limit_bytes, chart.rss.last()) {
            memory.push((
                "limit",
                vec![(0.0, mib(limit as f64)), (last.0, mib(limit as f64))],
            ));
        }
        writeln!(w, "**Memory by measure:**\n")?;
        chart_lines(
            w,
            &format!("Memory of {id} (MiB)"),
            "MiB",
            &memory,
            &marks,
            Hold::Last,
        )?;
    }
    if let Some(disk) = chart.measures.iter().find(|m| m.label == "disk") {
        writeln!(w, "**The data directory:**\n")?;
        let points = disk.points.iter().map(|&(t, b)| (t, mib(b))).collect();
        chart_lines(
            w,
            &format!("Data directory of {id} (MiB)"),
            "MiB",
            &[("disk", points)],
            &marks,
            Hold::Last,
        )?;
    }
    if chart.soak_rss.len() >= 2 {
        harness_series(w, id, chart)?;
    }
    if chart.ops_per_s.len() >= 2 {
        writeln!(w, "**The load:**\n")?;
        chart_lines(
            w,
            &format!("Operations per second of {id}"),
            "ops/s",
            &[("ops/s", chart.ops_per_s.clone())],
            &marks,
            Hold::Zero,
        )?;
        chart_lines(
            w,
            &format!("p99 latency of {id} (ms)"),
            "ms",
            &[("p99", chart.p99_ms.clone())],
            &marks,
            Hold::Zero,
        )?;
    }
    Ok(())
}
