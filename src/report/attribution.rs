//! "Where the memory went": a cell's resident memory by kind of mapping
//! (which kind carried the growth), and the call stacks whose live bytes
//! grew most, where a heap profile was taken.

use std::io::{self, Write};

use super::text::{mib_per_h, table_text};
use super::CellResult;
use crate::units::Bytes;

/// The section, when there is anything to say.
pub fn section(w: &mut impl Write, c: &CellResult) -> io::Result<()> {
    let m = &c.memory;
    if m.kinds.is_empty() && m.members.is_empty() && m.profile.is_none() && m.jvm.is_none() {
        return Ok(());
    }
    writeln!(w, "### Where the memory went\n")?;
    if !m.members.is_empty() {
        let growing = crate::model::KindGrowth::fastest(&m.members).map(|k| k.kind.as_str());
        writeln!(
            w,
            "Resident memory by member (`members.csv.gz`; the figures above are their sum):\n"
        )?;
        table(w, "member", &m.members, growing)?;
    }
    if !m.kinds.is_empty() {
        kinds(w, c)?;
    }
    if let Some(why) = m.rss.slope_per_hour.and_then(|s| m.attribution(s)) {
        writeln!(w, "RSS grew {}, {why}.\n", mib_per_h(m.rss.slope_per_hour))?;
    }
    if let Some(j) = &m.jvm {
        jvm(w, j)?;
    }
    if let Some(p) = &m.profile {
        // The dumps are named from the cell's folder; links from the run's.
        let folder = c
            .files
            .get("samples.csv.gz")
            .and_then(|f| std::path::Path::new(f).parent())
            .map(|d| format!("{}/", d.display()))
            .unwrap_or_default();
        profile(w, p, &folder)?;
    }
    Ok(())
}

fn kinds(w: &mut impl Write, c: &CellResult) -> io::Result<()> {
    let m = &c.memory;
    let growing = m.growing_kind().map(|k| k.kind.as_str());
    writeln!(
        w,
        "Resident memory by kind of mapping (`/proc/PID/smaps`), after warm-up and at the end:\n"
    )?;
    table(w, "kind", &m.kinds, growing)
}

/// Rows of figures after warm-up, at the end, at the peak, and their
/// growth; the one in `growing` in bold.
fn table(
    w: &mut impl Write,
    head: &str,
    rows: &[crate::model::KindGrowth],
    growing: Option<&str>,
) -> io::Result<()> {
    writeln!(w, "| {head} | after warm-up | at the end | peak | growth |")?;
    writeln!(w, "|---|---:|---:|---:|---:|")?;
    for k in rows {
        let name = match (k.count_first, k.count_last) {
            (Some(a), Some(b)) => format!("{} ({a} → {b})", k.label),
            _ => k.label.clone(),
        };
        let name = if growing == Some(k.kind.as_str()) {
            format!("**{name}**")
        } else {
            name
        };
        writeln!(
            w,
            "| {name} | {} | {} | {} | {} |",
            Bytes(k.first_bytes),
            Bytes(k.last_bytes),
            Bytes(k.peak_bytes),
            mib_per_h(k.slope_bytes_per_hour)
        )?;
    }
    writeln!(w)
}

fn profile(w: &mut impl Write, p: &crate::model::ProfileSummary, folder: &str) -> io::Result<()> {
    if p.growing.is_empty() {
        return writeln!(
            w,
            "**Call sites** ({}'s heap profile): {}.\n",
            p.tool,
            p.note
                .as_deref()
                .unwrap_or("no call stack grew between the two dumps")
        );
    }
    let (base, last) = (
        p.base.as_deref().unwrap_or(""),
        p.last.as_deref().unwrap_or(""),
    );
    if base == last {
        // One record of every allocation (heaptrack's), compared from the
        // end of warm-up to its end.
        writeln!(
            w,
            "**Call sites** whose live bytes grew most ({}'s record [{base}]({folder}{base}), over the {:.0} s after warm-up; innermost frame first):\n",
            p.tool, p.seconds
        )?;
    } else {
        writeln!(
            w,
            "**Call sites** whose live bytes grew most ({}'s heap profile, [{base}]({folder}{base}) to [{last}]({folder}{last}), {:.0} s apart; innermost frame first):\n",
            p.tool, p.seconds
        )?;
    }
    writeln!(w, "| growth | rate | live at the end | stack |")?;
    writeln!(w, "|---:|---:|---:|---|")?;
    for g in &p.growing {
        let stack: Vec<String> = g
            .frames
            .iter()
            .take(5)
            .map(|f| format!("`{}`", table_text(f)))
            .collect();
        writeln!(
            w,
            "| {} | {} | {} | {} |",
            Bytes(g.growth_bytes.max(0) as u64),
            mib_per_h(g.growth_bytes_per_hour),
            Bytes(g.live_bytes),
            stack.join(" ← ")
        )?;
    }
    writeln!(w)
}

/// The JVM's account: its categories that held at least 1 MiB, or grew.
fn jvm(w: &mut impl Write, j: &crate::model::JvmAccountSummary) -> io::Result<()> {
    if let Some(note) = &j.note {
        return writeln!(
            w,
            "**The JVM's account** (Native Memory Tracking): {note}.\n"
        );
    }
    writeln!(
        w,
        "**The JVM's account** (Native Memory Tracking, committed bytes, {} readings):\n",
        j.readings
    )?;
    writeln!(
        w,
        "| category | after warm-up | at the end | peak | growth |"
    )?;
    writeln!(w, "|---|---:|---:|---:|---:|")?;
    for k in j
        .categories
        .iter()
        .filter(|k| k.peak_bytes >= 1 << 20 || k.grew() || k.kind.starts_with("nmt:outside"))
    {
        let label = if k.grew() && k.kind != "nmt:total" {
            format!("**{}**", k.label)
        } else {
            k.label.clone()
        };
        writeln!(
            w,
            "| {label} | {} | {} | {} | {} |",
            Bytes(k.first_bytes),
            Bytes(k.last_bytes),
            Bytes(k.peak_bytes),
            mib_per_h(k.slope_bytes_per_hour)
        )?;
    }
    writeln!(w)
}
