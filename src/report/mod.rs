//! The result model of a run and its exporters: `summary.json` (a stable,
//! versioned contract) and `report.md` (GitHub-flavoured, charts as mermaid
//! `xychart-beta` so they render in a pull request comment).

mod attribution;
pub mod charts;
pub mod ci;
pub mod compare;
pub mod history;
pub mod html;
pub mod junit;
pub mod linearizable;
pub mod markdown;
pub mod merge;
mod mermaid;
pub(crate) mod text;

use std::path::Path;

pub use crate::model::*;

pub use crate::units::human_duration;

/// Writes `summary.json`, `report.md`, `pr-comment.md` and `junit.xml`
/// into `dir`, replacing them.
pub fn write_all(dir: &Path, summary: &Summary, charts: &charts::Charts) -> std::io::Result<()> {
    let mut counted = summary.clone();
    counted.tally();
    let json = serde_json::to_string_pretty(&counted).map_err(std::io::Error::other)?;
    std::fs::write(dir.join("summary.json"), json + "\n")?;
    write_rendered(dir, summary, charts)
}

/// Writes what is rendered from a summary, `report.md`, `pr-comment.md`,
/// `junit.xml` and `report.html`, into `dir`, replacing them.
pub fn write_rendered(
    dir: &Path,
    summary: &Summary,
    charts: &charts::Charts,
) -> std::io::Result<()> {
    let mut md = Vec::new();
    markdown::write(&mut md, summary, charts)?;
    std::fs::write(dir.join("junit.xml"), junit::write(summary))?;
    let link = ci::artifacts_link();
    std::fs::write(
        dir.join("pr-comment.md"),
        ci::pr_comment_linked(summary, charts, link.as_deref()),
    )?;
    std::fs::write(dir.join("report.md"), md)?;
    html::write(dir, summary).map(|_| ())
}
