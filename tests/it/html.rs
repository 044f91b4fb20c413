//! report.html opened in a real headless Chromium, offline, as a person
//! would look at it: every cell's charts are there side by side, the
//! events are drawn on them and named on hover, a drag or the wheel zooms
//! every chart together, a finding's link shows its moment, no console
//! error, and the page asks for nothing outside its own file.

use std::time::Duration;

use serde_json::{json, Value};

use crate::common::browser::Browser;
use crate::common::soak::*;

/// The viewport rectangle of the plotting area of a cell's chart of a
/// group: (x, y, width, height).
fn over(b: &mut Browser, s: &str, cell: &str, group: &str) -> (f64, f64, f64, f64) {
    let r = b.eval(
        s,
        &format!(
            "(() => {{ const e = document.querySelector('.row[data-group=\"{group}\"] .plot[data-cell=\"{cell}\"] .u-over'); \
             e.scrollIntoView({{block: 'center'}}); const r = e.getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; }})()"
        ),
    );
    let f = |i: usize| r[i].as_f64().unwrap();
    (f(0), f(1), f(2), f(3))
}

fn range(b: &mut Browser, s: &str) -> (f64, f64) {
    let r = b.eval(s, "soak.range");
    (r[0].as_f64().unwrap(), r[1].as_f64().unwrap())
}

/// Every chart shows the same range of time.
fn charts_agree(b: &mut Browser, s: &str) -> bool {
    b.eval(
        s,
        "soak.charts.every(u => Math.abs(u.scales.x.min - soak.range[0]) < 1e-6 && Math.abs(u.scales.x.max - soak.range[1]) < 1e-6)",
    ) == json!(true)
}

#[test]
fn a_report_opens_offline_with_every_cell_charted_its_events_drawn_and_zoom() {
    let run = soak_run("tests/suites/html-report.yaml", &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let dir = run.report_dir.clone().unwrap();
    let html = dir.join("report.html");
    let text = std::fs::read_to_string(&html).expect("every run writes report.html");
    assert!(
        !text.contains("http://") || !text.contains("<script src"),
        "the page loads nothing from elsewhere"
    );
    let cells: Vec<String> = run.summary().cells.iter().map(|c| c.id.clone()).collect();
    assert_eq!(cells.len(), 2);

    let mut b = Browser::start();
    let s = b.open(&format!("file://{}", html.display()), 1400, 1000);
    b.wait_for(
        &s,
        "document.body.dataset.rendered",
        Duration::from_secs(30),
    );
    assert_eq!(
        b.eval(&s, "soak.errors"),
        json!([]),
        "the page's own errors"
    );

    // Every cell has its charts, in the same rows.
    for c in &cells {
        for group in ["memory", "kinds", "disk", "throughput", "latency"] {
            let n = b.eval(
                &s,
                &format!(
                    "document.querySelectorAll('.row[data-group=\"{group}\"] .plot[data-cell=\"{c}\"] canvas').length"
                ),
            );
            assert_eq!(n, json!(1), "cell {c} has its {group} chart");
        }
        // The kill, the pause and the restarts are among its events, and
        // listed under the cell.
        let kinds = b.eval(
            &s,
            &format!("soak.data.cells.find(c => c.id === '{c}').marks.map(m => m.kind)"),
        );
        for k in [
            "killed",
            "paused",
            "ready",
            "stopped",
            "read-back",
            "growth verdict",
        ] {
            assert!(
                kinds.as_array().unwrap().contains(&json!(k)),
                "{c}: {k} in {kinds}"
            );
        }
        let listed = b.eval(
            &s,
            &format!("document.querySelectorAll('ol.events[data-cell=\"{c}\"] li').length"),
        );
        assert_eq!(
            listed.as_u64().unwrap() as usize,
            kinds.as_array().unwrap().len()
        );
    }
    assert!(
        b.eval(&s, "soak.marksDrawn").as_u64().unwrap() > 0,
        "events drawn as lines"
    );
    // The same axes across cells: each row's charts share their y range.
    let same_y = b.eval(
        &s,
        "[...document.querySelectorAll('.row')].every(r => { const ys = soak.charts.filter(u => r.contains(u.root)).map(u => u.scales.y.max); return ys.every(y => y === ys[0]); })",
    );
    assert_eq!(same_y, json!(true));

    // A drag across the middle third of one chart zooms every chart to it.
    let (full0, full1) = range(&mut b, &s);
    let (x, y, w, h) = over(&mut b, &s, &cells[0], "memory");
    b.drag(
        &s,
        (x + w / 3.0, y + h / 2.0),
        (x + 2.0 * w / 3.0, y + h / 2.0),
    );
    let (z0, z1) = range(&mut b, &s);
    assert!(
        z0 > full0 + 0.2 * (full1 - full0) && z1 < full1 - 0.2 * (full1 - full0),
        "dragged to {z0}..{z1} of {full0}..{full1}"
    );
    assert!(charts_agree(&mut b, &s), "every chart follows the zoom");
    // The wheel zooms in further around the pointer.
    let (x, y, w, h) = over(&mut b, &s, &cells[1], "throughput");
    b.mouse(
        &s,
        "mouseWheel",
        x + w / 2.0,
        y + h / 2.0,
        json!({ "deltaX": 0, "deltaY": -120 }),
    );
    let (w0, w1) = range(&mut b, &s);
    assert!(w1 - w0 < 0.9 * (z1 - z0), "the wheel zoomed in: {w0}..{w1}");
    assert!(charts_agree(&mut b, &s));

    // Hovering over the kill names it.
    let kill = b.eval(
        &s,
        &format!(
            "soak.data.cells.find(c => c.id === '{}').marks.find(m => m.kind === 'killed').t",
            cells[0]
        ),
    );
    let kill = kill.as_f64().unwrap();
    b.eval(&s, &format!("soak.zoom({}, {})", kill - 2.0, kill + 2.0));
    let (x, y, w, h) = over(&mut b, &s, &cells[0], "memory");
    let at = b.eval(
        &s,
        &format!(
            "soak.charts.find(u => u.root.closest('.plot').dataset.cell === '{}' && u.root.closest('.row').dataset.group === 'memory').valToPos({kill}, 'x')",
            cells[0]
        ),
    );
    b.mouse(
        &s,
        "mouseMoved",
        x + at.as_f64().unwrap(),
        y + h / 2.0,
        json!({}),
    );
    let _ = w;
    let tip = b.eval(
        &s,
        &format!(
            "[...document.querySelectorAll('.plot[data-cell=\"{}\"] .tip')].filter(t => t.style.display === 'block').map(t => t.textContent).join('|')",
            cells[0]
        ),
    );
    assert!(
        tip.as_str().unwrap().contains("killed"),
        "hover over the kill: {tip}"
    );

    // A double click shows the whole run again.
    let (x, y, w, h) = over(&mut b, &s, &cells[0], "latency");
    b.mouse(
        &s,
        "mousePressed",
        x + w / 2.0,
        y + h / 2.0,
        json!({ "clickCount": 2 }),
    );
    b.mouse(
        &s,
        "mouseReleased",
        x + w / 2.0,
        y + h / 2.0,
        json!({ "clickCount": 2 }),
    );
    b.call(Some(&s), "Runtime.evaluate", json!({ "expression": "document.querySelector('.row[data-group=\"latency\"] .u-over').dispatchEvent(new MouseEvent('dblclick', {bubbles: true}))" }));
    b.wait_for(
        &s,
        "soak.range[0] === soak.start && soak.range[1] === soak.end",
        Duration::from_secs(5),
    );
    let (r0, r1) = range(&mut b, &s);
    assert!(
        r1 - r0 > 0.9 * (full1 - full0),
        "a double click shows the whole run: {r0}..{r1}"
    );

    let shots = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/screenshots");
    b.eval(&s, "window.scrollTo(0, 0)");
    b.screenshot(&s, &shots.join("report-html.png"), 1250.0, 0.75);
    assert_eq!(b.errors(), Vec::<String>::new(), "console errors");
    let elsewhere: Vec<String> = b
        .requests()
        .into_iter()
        .filter(|u| !u.starts_with("file://") && !u.starts_with("data:") && u != "about:blank")
        .collect();
    assert!(elsewhere.is_empty(), "the page asked for {elsewhere:?}");
}

/// A link from a finding takes the charts to its moment.
#[test]
fn a_findings_link_shows_its_moment_on_the_charts() {
    let run = soak_run("tests/suites/forgetful.yaml", &[]);
    let dir = run.report_dir.clone().unwrap();
    let html = dir.join("report.html");
    let lost = run.cell().integrity.lost;
    assert!(
        lost > 0,
        "the forgetful node loses writes: {}",
        run.stderr()
    );
    let mut b = Browser::start();
    let s = b.open(&format!("file://{}", html.display()), 1400, 1000);
    b.wait_for(
        &s,
        "document.body.dataset.rendered",
        Duration::from_secs(30),
    );
    let links: Value = b.eval(&s, "[...document.querySelectorAll('#findings a.moment')].map(a => [a.textContent, a.dataset.t || null])");
    let at = links
        .as_array()
        .unwrap()
        .iter()
        .find_map(|l| l[1].as_str().map(|t| t.parse::<f64>().unwrap()))
        .unwrap_or_else(|| panic!("a lost write's finding links to its moment: {links}"));
    b.eval(
        &s,
        "document.querySelector('#findings a.moment[data-t]').click()",
    );
    let (z0, z1) = range(&mut b, &s);
    assert!(
        z0 <= at && at <= z1 && z1 - z0 <= 60.0 + 1e-6,
        "the moment {at} in {z0}..{z1}"
    );
    assert!(charts_agree(&mut b, &s));
    // And the first table says how many were lost.
    let cells_table = b.eval(&s, "document.querySelector('#cells tbody').textContent");
    assert!(cells_table.as_str().unwrap().contains(&lost.to_string()));
    assert_eq!(b.errors(), Vec::<String>::new());
}

/// `soak run SUITE --dashboard` in the background: the child, the
/// dashboard's address as it printed it, its report folder's parent and
/// its run id.
struct Live {
    child: std::process::Child,
    addr: String,
    out: tempfile::TempDir,
    id: String,
    stderr: std::sync::mpsc::Receiver<String>,
}

impl Live {
    fn start(suite_file: &str) -> Live {
        let out = tempfile::tempdir().unwrap();
        let id = test_run_id();
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_soak"))
            .arg("run")
            .arg(suite(suite_file))
            .arg("--out")
            .arg(out.path())
            .args(["--run-id", &id, "--dashboard"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let addr = loop {
            let line = rx
                .recv_timeout(Duration::from_secs(60))
                .expect("soak prints the dashboard's address first");
            if let Some(rest) = line.strip_prefix("soak: dashboard at http://") {
                break rest.split('/').next().unwrap().to_string();
            }
        };
        assert!(addr.starts_with("127.0.0.1:"), "bound to loopback: {addr}");
        Live {
            child,
            addr,
            out,
            id,
            stderr: rx,
        }
    }

    /// Waits for soak's exit; its code, and that its dashboard is gone.
    fn end(mut self) -> (i32, String, Run) {
        let status = self.child.wait().unwrap();
        let err: Vec<String> = self.stderr.try_iter().collect();
        assert!(
            std::net::TcpStream::connect(&self.addr).is_err(),
            "nothing listens at {} after the run",
            self.addr
        );
        let dir = walk(self.out.path())
            .into_iter()
            .find(|p| p.ends_with("summary.json"))
            .map(|p| p.parent().unwrap().to_path_buf())
            .expect("the run wrote its summary");
        let _ = &dir;
        let run = Run {
            id: self.id.clone(),
            out: std::process::Output {
                status,
                stdout: vec![],
                stderr: vec![],
            },
            summary: None,
            report_dir: Some(dir.clone()),
            _dir: self.out,
        };
        assert_nothing_left(&run);
        (status.code().unwrap_or(-1), err.join("\n"), run)
    }
}

#[test]
fn the_dashboard_follows_a_matrix_live_and_stops_with_the_run() {
    let _beside = crate::common::beside();
    let mut b = Browser::start();
    let live = Live::start("tests/suites/html-report.yaml");
    let s = b.open(&format!("http://{}/", live.addr), 1400, 1000);
    // The first cell's charts grow while it runs.
    b.wait_for(&s, "soak.data && soak.data.cells.length === 1 && document.querySelectorAll('.plot canvas').length >= 5", Duration::from_secs(60));
    let progress = b.eval(&s, "document.getElementById('progress').textContent");
    assert!(
        progress.as_str().unwrap().contains("cell 1/2"),
        "{progress}"
    );
    let first = b
        .eval(
            &s,
            "soak.data.cells[0].groups.find(g => g.id === 'memory').series[0].t.length",
        )
        .as_u64()
        .unwrap();
    b.wait_for(
        &s,
        &format!(
            "soak.data.cells[0].groups.find(g => g.id === 'memory').series[0].t.length > {first}"
        ),
        Duration::from_secs(30),
    );
    b.wait_for(
        &s,
        "soak.data.cells.some(c => c.marks.some(m => m.kind === 'killed'))",
        Duration::from_secs(60),
    );
    b.screenshot(
        &s,
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/screenshots/dashboard.png"),
        1000.0,
        0.75,
    );
    // Then the second cell beside it, and the end.
    b.wait_for(&s, "soak.data.cells.length === 2", Duration::from_secs(120));
    b.wait_for(
        &s,
        "document.body.dataset.finished === 'true'",
        Duration::from_secs(120),
    );
    let text = b.eval(&s, "document.getElementById('status').textContent + ' | ' + document.getElementById('progress').textContent");
    let text = text.as_str().unwrap();
    assert!(
        text.contains("allocator=glibc pass") && text.contains("allocator=jemalloc pass"),
        "{text}"
    );
    assert!(
        text.contains("The run has ended") && text.contains("report.html"),
        "{text}"
    );
    // Each cell done was sent once, and the page still has both.
    let received = b.eval(
        &s,
        "soak.received.flat().filter(c => !c.endsWith(':running'))",
    );
    let received: Vec<&str> = received
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c.as_str())
        .collect();
    assert_eq!(
        received,
        ["allocator=glibc:pass", "allocator=jemalloc:pass"],
        "each cell done is sent once"
    );
    assert_eq!(
        b.eval(&s, "soak.data.cells.map(c => c.id + ':' + c.verdict + ':' + c.groups.some(g => g.id === 'memory'))"),
        json!(["allocator=glibc:pass:true", "allocator=jemalloc:pass:true"])
    );
    assert_eq!(b.eval(&s, "soak.errors"), json!([]));
    let (code, err, run) = live.end();
    assert_eq!(code, 0, "{err}");
    assert!(run.report_dir.unwrap().join("report.html").is_file());
    assert_eq!(b.errors(), Vec::<String>::new());
}

#[test]
fn the_dashboard_of_an_interrupted_run_says_so_and_stops() {
    let _beside = crate::common::beside();
    let mut b = Browser::start();
    let live = Live::start("tests/suites/html-report.yaml");
    let s = b.open(&format!("http://{}/", live.addr), 1200, 900);
    b.wait_for(
        &s,
        "soak.data && document.querySelectorAll('.plot canvas').length >= 5",
        Duration::from_secs(60),
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(live.child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    b.wait_for(
        &s,
        "document.body.dataset.finished === 'true'",
        Duration::from_secs(60),
    );
    let progress = b.eval(&s, "document.getElementById('progress').textContent");
    assert!(
        progress.as_str().unwrap().contains("interrupted"),
        "{progress}"
    );
    let (code, err, _) = live.end();
    assert_eq!(code, 130, "{err}");
    assert_eq!(b.errors(), Vec::<String>::new());
}

#[test]
fn the_dashboard_of_a_node_that_never_gets_ready_shows_why() {
    let _beside = crate::common::beside();
    let dir = tempfile::tempdir().unwrap();
    let suite = variant(
        &dir,
        "tests/suites/never-ready.yaml",
        &[("timeout: 1500ms", "timeout: 6s")],
    );
    let mut b = Browser::start();
    let live = Live::start(&suite);
    let s = b.open(&format!("http://{}/", live.addr), 1200, 900);
    b.wait_for(
        &s,
        "document.body.dataset.finished === 'true'",
        Duration::from_secs(60),
    );
    let text = b.eval(&s, "document.getElementById('status').textContent");
    assert!(
        text.as_str().unwrap().contains("did not get ready within"),
        "{text}"
    );
    assert_eq!(
        b.eval(&s, "document.getElementById('live-verdict').textContent"),
        json!("error")
    );
    let (code, err, _) = live.end();
    assert_eq!(code, 3, "{err}");
    assert_eq!(b.errors(), Vec::<String>::new());
}
