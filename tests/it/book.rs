//! The reference in `docs/` is an mdBook: it builds with mdbook (from
//! crates.io, installed under `target/lint-tools/` the first time), every
//! link of the book and of the README leads to a file that exists and to a
//! heading that exists in it, and every suite they show is one soak
//! accepts (a fragment, such as a `workload:` alone, inside the smoke
//! suite).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common;

const MDBOOK: &str = "0.5.4";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The README and every page of the book.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md")];
    let mut book: Vec<PathBuf> = std::fs::read_dir(root().join("docs/src"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    book.sort();
    pages.extend(book);
    pages
}

/// Lines outside fenced code blocks, with their numbers.
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

/// A heading's anchor as mdBook and GitHub make it: lower case, letters,
/// digits, `-` and `_` kept, spaces made `-`, the rest dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

fn anchors(page: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(page).unwrap();
    prose(&text)
        .into_iter()
        .filter_map(|(_, l)| l.strip_prefix('#'))
        .map(|l| anchor(l.trim_start_matches('#')))
        .collect()
}

/// The targets of `[text](target)` links on a line (inline code left out).
fn links(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut code = false;
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'`' => code = !code,
            b']' if !code && bytes.get(i + 1) == Some(&b'(') => {
                if let Some(end) = line[i + 2..].find(')') {
                    out.push(line[i + 2..i + 2 + end].to_string());
                    i += end + 2;
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

#[test]
fn the_book_builds_with_mdbook_and_every_page_is_in_its_summary() {
    let mdbook = common::cargo_tool("mdbook", MDBOOK, &["--no-default-features"]);
    let out = tempfile::tempdir().unwrap();
    let built = Command::new(&mdbook)
        .arg("build")
        .arg(root().join("docs"))
        .arg("--dest-dir")
        .arg(out.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&built.stderr);
    assert!(built.status.success(), "mdbook build docs: {stderr}");
    assert!(
        !stderr.contains("WARN") && !stderr.contains("ERROR"),
        "mdbook build docs: {stderr}"
    );
    let summary = std::fs::read_to_string(root().join("docs/src/SUMMARY.md")).unwrap();
    for page in pages().iter().skip(1) {
        let name = page.file_name().unwrap().to_str().unwrap();
        if name == "SUMMARY.md" {
            continue;
        }
        assert!(
            summary.contains(&format!("({name})")),
            "docs/src/{name} is not in docs/src/SUMMARY.md, so the book leaves it out"
        );
        let html = out.path().join(name.replace(".md", ".html"));
        assert!(html.is_file(), "mdbook made no {}", html.display());
    }
}

#[test]
fn every_link_of_the_readme_and_the_book_leads_to_a_file_and_a_heading_that_exist() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let shown = page.strip_prefix(root()).unwrap().display().to_string();
        for (n, line) in prose(&text) {
            for target in links(line) {
                if target.starts_with("http://") || target.starts_with("https://") {
                    continue;
                }
                checked += 1;
                let (file, fragment) = target.split_once('#').unwrap_or((&target, ""));
                let file = if file.is_empty() {
                    page.clone()
                } else {
                    page.parent().unwrap().join(file)
                };
                if !file.exists() {
                    broken.push(format!("{shown}:{n}: {target}: no file {}", file.display()));
                } else if !fragment.is_empty()
                    && file.extension().is_some_and(|e| e == "md")
                    && !anchors(&file).iter().any(|a| a == fragment)
                {
                    broken.push(format!("{shown}:{n}: {target}: no heading #{fragment}"));
                }
            }
        }
    }
    assert!(
        checked > 30,
        "only {checked} links found: is the parser blind?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// `workload` names one protocol: a fragment's protocol replaces smoke's.
const PROTOCOLS: [&str; 4] = ["resp", "http", "postgres", "adapter"];

fn merge(base: &mut serde_norway::Value, over: &serde_norway::Value) {
    use serde_norway::Value;
    match (base, over) {
        (Value::Mapping(b), Value::Mapping(o)) => {
            if o.keys()
                .any(|k| PROTOCOLS.iter().any(|p| k.as_str() == Some(p)))
            {
                b.retain(|k, _| !PROTOCOLS.iter().any(|p| k.as_str() == Some(p)));
            }
            for (k, v) in o {
                match b.get_mut(k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (b, o) => *b = o.clone(),
    }
}

#[test]
fn every_suite_and_fragment_the_readme_and_the_book_show_is_valid() {
    let smoke: serde_norway::Value =
        serde_norway::from_str(&std::fs::read_to_string(root().join("suites/smoke.yaml")).unwrap())
            .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut shown = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let name = page.strip_prefix(root()).unwrap().display().to_string();
        let mut block: Option<(usize, String)> = None;
        for (i, line) in text.lines().enumerate() {
            match &mut block {
                None if line.trim() == "```yaml" => block = Some((i + 1, String::new())),
                Some((start, yaml)) if line.trim() == "```" => {
                    let at = format!("{name}:{start}");
                    let value: serde_norway::Value = serde_norway::from_str(yaml)
                        .unwrap_or_else(|e| panic!("{at}: not YAML: {e}"));
                    let suite = if value.get("name").is_some() {
                        value
                    } else {
                        let mut s = smoke.clone();
                        merge(&mut s, &value);
                        s
                    };
                    let file = dir
                        .path()
                        .join(format!("{}-{start}.yaml", name.replace('/', "-")));
                    std::fs::write(&file, serde_norway::to_string(&suite).unwrap()).unwrap();
                    let out = Command::new(env!("CARGO_BIN_EXE_soak"))
                        .arg("validate")
                        .arg(&file)
                        .output()
                        .unwrap();
                    assert!(
                        out.status.success(),
                        "the suite at {at} is refused: {}{}",
                        String::from_utf8_lossy(&out.stdout),
                        String::from_utf8_lossy(&out.stderr)
                    );
                    shown += 1;
                    block = None;
                }
                Some((_, yaml)) => {
                    yaml.push_str(line);
                    yaml.push('\n');
                }
                None => {}
            }
        }
    }
    assert!(shown >= 7, "only {shown} YAML blocks found");
}
