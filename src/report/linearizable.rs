//! A cell's history in the report: what the linearizability checker
//! found, and for each key it could not linearize, the operation that
//! could not be, the smallest window around it as a timeline (a mermaid
//! gantt chart: a row per client, the faults in force as bars of their
//! own), and the faults in words.

use std::io::{self, Write};

use crate::model::{CellResult, HistoryViolation};

/// The cell's history part, if it has a history record.
pub fn section(w: &mut impl Write, c: &CellResult) -> io::Result<()> {
    let Some(h) = &c.history else {
        return Ok(());
    };
    let verdict = match h.verdict.as_str() {
        "linearizable" => "linearizable".to_string(),
        "not_linearizable" => format!(
            "**not linearizable**: {} of {} keys{}",
            h.violating_keys,
            h.keys,
            if h.unchecked_keys > 0 {
                format!(" ({} not checked once one was found)", h.unchecked_keys)
            } else {
                String::new()
            }
        ),
        _ => format!(
            "unknown ({})",
            h.unknown
                .as_deref()
                .unwrap_or("the search ran out of its budget")
        ),
    };
    writeln!(
        w,
        "**History:** {} operations on {} keys by {} clients, {verdict}; checked in {:.1} s. [{}]({}) (`soak history` exports it for Jepsen's and Porcupine's tools).\n",
        h.operations, h.keys, h.clients, h.seconds, h.file, h.file
    )?;
    for v in &h.violations {
        violation(w, v)?;
    }
    Ok(())
}

/// Words that stay whole in a gantt chart's task name.
fn task(s: &str) -> String {
    s.replace([':', ';', '#'], " ")
}

fn violation(w: &mut impl Write, v: &HistoryViolation) -> io::Result<()> {
    writeln!(
        w,
        "Key `{}`: `{}` by client {} at {:.3} s cannot be linearized.",
        v.key, v.operation, v.client, v.invoke_s
    )?;
    if v.faults.is_empty() {
        writeln!(
            w,
            "No fault was in force then, nor lifted in the 10 s before.\n"
        )?;
    } else {
        let f: Vec<String> = v.faults.iter().map(|f| f.to_string()).collect();
        writeln!(w, "Faults then: {}.\n", f.join("; "))?;
    }
    let start = v
        .window
        .iter()
        .map(|o| o.invoke_s)
        .fold(v.invoke_s, f64::min);
    let start = v.faults.iter().map(|f| f.from_s).fold(start, f64::min);
    let end = v
        .window
        .iter()
        .filter_map(|o| o.complete_s)
        .fold(v.complete_s, f64::max)
        .max(start + 0.001);
    let ms = |s: f64| (s * 1000.0).round() as i64;
    writeln!(w, "```mermaid\ngantt\n    title key {} (seconds since the cell began)\n    dateFormat x\n    axisFormat %M:%S.%L", task(&v.key))?;
    if !v.faults.is_empty() {
        writeln!(w, "    section faults")?;
        for (i, f) in v.faults.iter().enumerate() {
            let b = f.to_s.unwrap_or(end).max(f.from_s + 0.001);
            writeln!(
                w,
                "    {} :crit, f{i}, {}, {}",
                task(&f.what),
                ms(f.from_s),
                ms(b)
            )?;
        }
    }
    let mut clients: Vec<u32> = v.window.iter().map(|o| o.client).collect();
    clients.dedup();
    clients.sort_unstable();
    clients.dedup();
    for c in clients {
        writeln!(w, "    section client {c}")?;
        for (i, o) in v.window.iter().enumerate().filter(|(_, o)| o.client == c) {
            let done = o.complete_s.unwrap_or(end).max(o.invoke_s + 0.001);
            let name = if o.culprit {
                format!("{} (cannot be linearized)", task(&o.operation))
            } else {
                task(&o.operation)
            };
            let tag = if o.culprit { "crit, " } else { "" };
            writeln!(w, "    {name} :{tag}o{i}, {}, {}", ms(o.invoke_s), ms(done))?;
        }
    }
    writeln!(w, "```\n")
}
