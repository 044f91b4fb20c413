//! `junit.xml`: the run as JUnit XML, which CI systems (GitLab, Jenkins,
//! GitHub test reporters) show as tests. One `testsuite` per cell, one
//! `testcase` per check; a failed check is a `failure` with its measured
//! value and limit, a cell that could not run an `error`. JUnit has no
//! "warning": a check that only warns passes, its note in `system-out`.

use std::fmt::Write as _;

use super::{CellResult, CheckResult, Summary, Verdict};

/// Escapes text for an XML attribute or element.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Control characters are not allowed in XML 1.0.
            c if (c as u32) < 0x20 && !matches!(c, '\n' | '\r' | '\t') => {}
            c => out.push(c),
        }
    }
    out
}

fn message(k: &CheckResult) -> String {
    let unit = if k.unit.is_empty() || k.unit == "count" {
        String::new()
    } else {
        format!(" {}", k.unit)
    };
    format!("measured {}{unit}, limit {}{unit}", k.value, k.limit)
}

fn cell_time(c: &CellResult) -> f64 {
    c.phases.last().map(|p| p.end_s).unwrap_or(0.0)
}

pub fn write(s: &Summary) -> String {
    let failed = |c: &CellResult| {
        c.checks
            .iter()
            .filter(|k| k.verdict == Verdict::Fail)
            .count()
    };
    let errored = |c: &CellResult| usize::from(c.verdict == Verdict::Error);
    let cases = |c: &CellResult| c.checks.len() + errored(c);
    let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        x,
        "<testsuites name=\"soak: {} ({})\" tests=\"{}\" failures=\"{}\" errors=\"{}\" time=\"{:.3}\">",
        esc(&s.suite),
        esc(&s.headline()),
        s.cells.iter().map(cases).sum::<usize>(),
        s.cells.iter().map(failed).sum::<usize>(),
        s.cells.iter().map(errored).sum::<usize>(),
        s.duration_s
    );
    for c in &s.cells {
        let class = esc(&format!("{}.{}", s.suite, c.id));
        let _ = writeln!(
            x,
            "  <testsuite name=\"{}/{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" time=\"{:.3}\" timestamp=\"{}\">",
            esc(&s.suite),
            esc(&c.id),
            cases(c),
            failed(c),
            errored(c),
            cell_time(c),
            esc(s.started_at.trim_end_matches('Z'))
        );
        if c.verdict == Verdict::Error {
            let why = c.error.as_deref().unwrap_or("the cell could not run");
            let _ = writeln!(
                x,
                "    <testcase classname=\"{class}\" name=\"run\" time=\"{:.3}\">\n      <error message=\"{}\">{}</error>\n    </testcase>",
                cell_time(c),
                esc(why.lines().next().unwrap_or(why)),
                esc(why)
            );
        }
        for k in &c.checks {
            let _ = write!(
                x,
                "    <testcase classname=\"{class}\" name=\"{}\" time=\"0\"",
                esc(&k.name)
            );
            let detail = k.detail.as_deref().unwrap_or("");
            match k.verdict {
                Verdict::Fail | Verdict::Error => {
                    let _ = writeln!(
                        x,
                        ">\n      <failure message=\"{}\">{}</failure>\n    </testcase>",
                        esc(&message(k)),
                        esc(detail)
                    );
                }
                Verdict::Warn => {
                    let _ = writeln!(
                        x,
                        ">\n      <system-out>warn: {}{}{}</system-out>\n    </testcase>",
                        esc(&message(k)),
                        if detail.is_empty() { "" } else { "; " },
                        esc(detail)
                    );
                }
                Verdict::Pass => {
                    let _ = writeln!(x, "/>");
                }
            }
        }
        let _ = writeln!(x, "  </testsuite>");
    }
    x.push_str("</testsuites>\n");
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_and_control_characters_dropped() {
        assert_eq!(
            esc("a<b & \"c\" 'd'>\u{1}"),
            "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;"
        );
    }
}
