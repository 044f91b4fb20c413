//! `report.html`: one file that opens offline in a browser. The tables
//! (the cells and the counts every check judged, the expected outcomes,
//! the findings, each cell's checks and events) are HTML written here, so
//! that they read without JavaScript; the charts are drawn by uPlot (MIT,
//! from npm, embedded: `vendor/uplot`, refreshed by `scripts/vendor`) and
//! soak's own page code (`page.js`) from every series at full resolution,
//! which the page carries gzipped.
//!
//! The live dashboard (`soak run --dashboard`) serves the same page with
//! no data inside: it fetches the run's data while the run goes.

pub mod data;

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use serde::Serialize;

use super::text::{finding_columns, mib_per_h};
use crate::model::{CellResult, Summary, Verdict};
use crate::units::Bytes;

const UPLOT_JS: &str = include_str!("vendor/uplot/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("vendor/uplot/uPlot.min.css");
const UPLOT_LICENSE: &str = include_str!("vendor/uplot/LICENSE");
const PAGE_JS: &str = include_str!("page.js");
const PAGE_CSS: &str = include_str!("page.css");

/// What the page's code reads: the run, and each cell's series and events.
#[derive(Debug, Clone, Serialize)]
pub struct PageData {
    pub run: String,
    pub suite: String,
    pub verdict: &'static str,
    pub duration_s: f64,
    pub cells: Vec<data::CellData>,
    /// The run is going (the dashboard): more data will come.
    pub live: bool,
    /// Where the run is, for the live page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<LiveStatus>,
    /// On the live page, after the first message: `cells` are the page's
    /// cells from this index on; those before it are as last sent (a
    /// cell done is sent once, the running one every time).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cells_from: Option<usize>,
}

/// Where a run is, as the live page shows it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LiveStatus {
    /// The progress line: cell, phase, time elapsed and left, ops/s.
    pub line: String,
    pub cells: usize,
    /// The cells done, each with its verdict and what it found.
    pub done: Vec<DoneCell>,
    pub interrupted: bool,
    /// The report folder, once the run has ended.
    pub report: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct DoneCell {
    pub id: String,
    pub verdict: &'static str,
    pub text: String,
}

impl DoneCell {
    pub fn of(c: &CellResult) -> DoneCell {
        let i = &c.integrity;
        let text = match &c.error {
            Some(e) => e.clone(),
            None => format!(
                "lost {}, lost unsynced {}, corrupted {}, OOM kills {}, restarts {}",
                i.lost,
                i.lost_unsynced,
                i.corrupted,
                c.memory.oom_kills,
                c.restarts.len()
            ),
        };
        DoneCell {
            id: c.id.clone(),
            verdict: c.verdict.as_str(),
            text,
        }
    }
}

impl data::CellData {
    /// The same with each series cut to at most `max` points (each
    /// stretch's lowest and highest kept): what the live page is sent,
    /// which stays the same size however long the run.
    pub fn thinned(mut self, max: usize) -> data::CellData {
        for g in &mut self.groups {
            for s in &mut g.series {
                *s = s.thinned(max);
            }
        }
        self
    }
}

/// The page data of a run whose files are under `dir`.
pub fn page_data(dir: &Path, s: &Summary) -> PageData {
    PageData {
        run: s.run_id.clone(),
        suite: s.suite.clone(),
        verdict: s.verdict.as_str(),
        duration_s: s.duration_s,
        cells: s.cells.iter().map(|c| data::of_cell(dir, c)).collect(),
        live: false,
        status: None,
        cells_from: None,
    }
}

/// Writes `report.html` into `dir`, from the summary and the cells' files
/// there.
pub fn write(dir: &Path, s: &Summary) -> std::io::Result<std::path::PathBuf> {
    let path = dir.join("report.html");
    std::fs::write(&path, page(s, Some(&page_data(dir, s))))?;
    Ok(path)
}

/// The data as the page carries it: JSON, gzipped, in base64.
pub fn packed(d: &PageData) -> String {
    let json = serde_json::to_vec(d).expect("page data serializes");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
    gz.write_all(&json).expect("writes to memory");
    let bytes = gz.finish().expect("writes to memory");
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The page of a finished run, its data inside.
pub fn page(s: &Summary, d: Option<&PageData>) -> String {
    let mut body = String::new();
    head(&mut body, s);
    cells_table(&mut body, s);
    expectations(&mut body, s);
    findings(&mut body, s);
    charts_section(&mut body);
    for c in &s.cells {
        cell(&mut body, c);
    }
    let data = d.map(packed).unwrap_or_default();
    document(
        &s.suite,
        s.verdict.as_str(),
        &s.soak_version,
        &body,
        Some(&data),
    )
}

/// The live page of a run going on (`soak run --dashboard`): the run's
/// head, its status and the charts, whose data it receives from the
/// dashboard as events (`/events`).
pub fn live_page(suite: &str, run_id: &str) -> String {
    let mut body = String::new();
    let _ = writeln!(
        body,
        "<header><h1>soak: {} <span class=\"verdict\" id=\"live-verdict\">running</span></h1>\n\
         <p>Run <code>{}</code>, live: this page follows the run and stops with it.</p>\n\
         <p id=\"progress\">waiting for the first cell…</p></header>\n\
         <section><h2>Cells</h2><ul id=\"status\"></ul></section>\n\
         <section><h2>Findings so far</h2><ul id=\"findings-live\"></ul></section>",
        esc(suite),
        esc(run_id)
    );
    charts_section(&mut body);
    document(suite, "running", env!("CARGO_PKG_VERSION"), &body, None)
}

fn charts_section(body: &mut String) {
    body.push_str(
        "<section id=\"charts\"><h2>Charts</h2>\n<p class=\"hint\">Drag across a chart to zoom in, \
         the wheel zooms around the pointer, shift and the wheel (or the arrow keys) pan, \
         a double click shows the whole run again. Every chart of every cell follows. \
         The lines are events: red a fault soak made, green a recovery, dark red a finding, grey \
         the rest; the bands are the phases. Hover over one to name it.</p>\n\
         <div id=\"range\"></div><div id=\"plots\"><noscript>The charts need JavaScript.</noscript></div></section>\n",
    );
}

/// The whole HTML document around a body; `data` the packed data of a
/// report, none for the live page.
fn document(title: &str, verdict: &str, version: &str, body: &str, data: Option<&str>) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <link rel=\"icon\" href=\"data:,\">\n\
         <title>soak: {title} — {verdict}</title>\n\
         <style>{UPLOT_CSS}\n{PAGE_CSS}</style>\n</head>\n<body data-live=\"{live}\">\n{body}\n\
         <footer>soak {version}. Charts drawn with uPlot 1.6.32, embedded under its licence:<pre>{licence}</pre></footer>\n\
         <script id=\"soak-data\" type=\"application/octet-stream\">{data}</script>\n\
         <script>\n{UPLOT_JS}\n</script>\n<script>\n{PAGE_JS}\n</script>\n</body></html>\n",
        title = esc(title),
        live = data.is_none(),
        version = esc(version),
        licence = esc(UPLOT_LICENSE),
        data = data.unwrap_or_default(),
    )
}

/// Text for HTML.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn verdict_class(v: Verdict) -> &'static str {
    v.as_str()
}

fn head(w: &mut String, s: &Summary) {
    let _ = writeln!(
        w,
        "<header><h1>soak: {} <span class=\"verdict {}\">{}</span></h1>\n\
         <p>Run <code>{}</code> of <code>{}</code> (seed {}), started {}, took {}; soak {}.</p>",
        esc(&s.suite),
        verdict_class(s.verdict),
        s.verdict.as_str(),
        esc(&s.run_id),
        esc(&s.suite_file),
        s.seed,
        esc(&s.started_at),
        super::human_duration(std::time::Duration::from_secs_f64(s.duration_s)),
        esc(&s.soak_version)
    );
    if let Some(stop) = &s.stopped {
        let _ = writeln!(
            w,
            "<p class=\"warn\">The run was stopped: {}.</p>",
            esc(&format!("{stop:?}"))
        );
    }
    if !s.description.is_empty() {
        let _ = writeln!(w, "<blockquote>{}</blockquote>", esc(&s.description));
    }
    w.push_str("<p id=\"progress\"></p></header>\n");
}

/// The cells, and every count a check judged (the same columns as
/// report.md's first table).
fn cells_table(w: &mut String, s: &Summary) {
    let found = finding_columns(s);
    w.push_str("<section><h2>Cells</h2><table id=\"cells\"><thead><tr><th>cell</th><th>verdict</th><th>acknowledged</th><th>lost</th><th>corrupted</th><th>in doubt</th>");
    for f in &found {
        let _ = write!(w, "<th>{}</th>", esc(f.heading));
    }
    w.push_str("<th>OOM kills</th><th>restarts</th><th>peak RSS</th><th>RSS growth</th><th>ops/s</th><th>p99</th></tr></thead><tbody>\n");
    for c in &s.cells {
        let (ops, p99) = super::text::ops_and_p99(c);
        let _ = write!(
            w,
            "<tr><td><a href=\"#cell-{id}\"><code>{id}</code></a></td><td class=\"{vc}\">{v}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>",
            c.integrity.acknowledged,
            c.integrity.lost_writes(),
            c.integrity.corrupted,
            c.integrity.in_doubt,
            id = esc(&c.id),
            vc = verdict_class(c.verdict),
            v = c.verdict.as_str(),
        );
        for f in &found {
            let _ = write!(w, "<td>{}</td>", esc(&f.cell(c)));
        }
        let _ = writeln!(
            w,
            "<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            c.memory.oom_kills,
            c.restarts.len(),
            Bytes(c.memory.peak_rss_bytes),
            esc(&mib_per_h(c.memory.slope_bytes_per_hour)),
            ops,
            esc(&p99)
        );
    }
    w.push_str("</tbody></table></section>\n");
}

fn expectations(w: &mut String, s: &Summary) {
    if s.cells.iter().all(|c| c.expectation.is_none()) {
        return;
    }
    w.push_str("<section><h2>Expected outcomes</h2><table id=\"expectations\"><thead><tr><th>cell</th><th>expected (measured, limit)</th><th>outcome</th></tr></thead><tbody>\n");
    for c in &s.cells {
        if let Some(e) = &c.expectation {
            let _ = writeln!(
                w,
                "<tr><td><code>{}</code></td><td>{}</td><td>{}</td></tr>",
                esc(&c.id),
                esc(&e.checks.join("; ")),
                esc(&e.outcome().replace("**", ""))
            );
        }
    }
    w.push_str("</tbody></table></section>\n");
}

/// The event kinds that show a check's finding on the chart, by check.
fn moment_kinds(check: &str) -> &'static [&'static str] {
    match check {
        "lost_writes" | "unsynced_writes" | "corrupted_writes" | "aborted_reads" => {
            &["read-back", "reads-found", "corruption"]
        }
        "oom_kills" | "out_of_memory" => &["oom-killed"],
        "crashes" => &["died", "oom-killed"],
        "unrecovered" => &["not-recovered"],
        _ => &[],
    }
}

/// The failed and warned checks of every cell, each with a link to its
/// moment on the charts: the first event that showed it, or for a trend
/// (memory growth) the whole run.
fn findings(w: &mut String, s: &Summary) {
    let mut items = String::new();
    for c in &s.cells {
        for r in c.checks.iter().filter(|r| r.verdict != Verdict::Pass) {
            let at = first_moment(c, moment_kinds(r.name.split(' ').next().unwrap_or("")));
            let link = match at {
                Some(t) => format!(
                    " <a class=\"moment\" href=\"#\" data-cell=\"{}\" data-t=\"{t:.3}\">at {t:.1} s on the charts</a>",
                    esc(&c.id)
                ),
                None => format!(
                    " <a class=\"moment\" href=\"#\" data-cell=\"{}\">on the charts</a>",
                    esc(&c.id)
                ),
            };
            let _ = writeln!(
                items,
                "<li><code>{}</code> {} {}: {}{}</li>",
                esc(&c.id),
                r.verdict.as_str(),
                esc(&r.name),
                esc(&super::text::check_text(r)),
                link
            );
        }
        if let Some(e) = &c.error {
            let _ = writeln!(
                items,
                "<li><code>{}</code> error: {}</li>",
                esc(&c.id),
                esc(e)
            );
        }
    }
    if items.is_empty() {
        w.push_str("<section><h2>Findings</h2><p id=\"findings\">No check failed or warned.</p></section>\n");
    } else {
        let _ = writeln!(
            w,
            "<section><h2>Findings</h2><ul id=\"findings\">\n{items}</ul></section>"
        );
    }
}

/// The time of the cell's first event of one of `kinds` that found
/// something (a read-back that found nothing is not a moment).
fn first_moment(c: &CellResult, kinds: &[&str]) -> Option<f64> {
    c.restarts
        .iter()
        .filter(|r| {
            kinds.contains(&"read-back")
                && (r.lost + r.corrupted + r.resurrected + r.lost_unsynced) > 0
        })
        .map(|r| r.at_s)
        .chain(
            c.restarts
                .iter()
                .filter(|r| kinds.contains(&"oom-killed") && r.reason == crate::model::Cause::Oom)
                .map(|r| r.at_s),
        )
        .reduce(f64::min)
}

fn cell(w: &mut String, c: &CellResult) {
    let _ = writeln!(
        w,
        "<section class=\"cell\" id=\"cell-{id}\"><h2><code>{id}</code> <span class=\"verdict {vc}\">{v}</span></h2>",
        id = esc(&c.id),
        vc = verdict_class(c.verdict),
        v = c.verdict.as_str()
    );
    if let Some(e) = &c.error {
        let _ = writeln!(
            w,
            "<p class=\"warn\">The cell did not run to its end: {}</p>",
            esc(e)
        );
    }
    if !c.checks.is_empty() {
        w.push_str("<table class=\"checks\"><thead><tr><th>check</th><th>verdict</th><th>measured</th><th>limit</th><th>detail</th></tr></thead><tbody>\n");
        for r in &c.checks {
            let _ = writeln!(
                w,
                "<tr><td>{}</td><td class=\"{}\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&r.name),
                verdict_class(r.verdict),
                r.verdict.as_str(),
                esc(&super::text::value_text(&r.value, &r.unit)),
                esc(&super::text::value_text(&r.limit, &r.unit)),
                esc(r.detail.as_deref().unwrap_or(""))
            );
        }
        w.push_str("</tbody></table>\n");
    }
    let i = &c.integrity;
    let _ = writeln!(
        w,
        "<p class=\"integrity\">{} writes acknowledged; {} verified, {} lost, {} lost unsynced, {} corrupted, {} in doubt, {} resurrected.</p>",
        i.acknowledged, i.verified, i.lost, i.lost_unsynced, i.corrupted, i.in_doubt, i.resurrected
    );
    let _ = writeln!(
        w,
        "<details><summary>Events</summary><ol class=\"events\" data-cell=\"{}\"></ol></details></section>",
        esc(&c.id)
    );
}
