//! report.html of a day: a cell's files as 24 hours at one sample a second
//! leave them (86,400 samples with the smaps kinds every 10th, 86,400
//! load intervals, 12 of the node's own series changing every second, a
//! kill every hour), the page written from them, its size, and the time
//! from opening it in Chromium (Debian's, headless) to every chart drawn.
//! The peer, in the same run: the same points handed to bare uPlot (one
//! chart a group, the arrays inline, no decoding, no events; the node's
//! own figures left out, as soak's page folds them), which is the least
//! any page drawing them with it can take.
//!
//!     cargo run --example html              a synthesized day
//!     cargo run --example html -- RUN_DIR   a real run's folder (the
//!                                           book's day: bench/day.yaml)
//!
//! Three openings of each, interleaved; medians.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use soak::report::html;
use soak::report::Summary;

#[path = "../tests/it/common/browser.rs"]
#[allow(dead_code)]
mod browser;

#[path = "need.rs"]
mod need_tool;

/// What the browser driver asks of its host.
pub fn require_tool(tool: &str, package: &str) {
    need_tool::need(tool, package);
}

const DAY: usize = 86_400;

fn gz(path: &Path, text: &str) {
    let mut w = flate2::write::GzEncoder::new(
        std::fs::File::create(path).unwrap(),
        flate2::Compression::default(),
    );
    w.write_all(text.as_bytes()).unwrap();
    w.finish().unwrap();
}

/// A day of one cell's files in `cell`, as soak writes them.
fn day(cell: &Path) {
    std::fs::create_dir_all(cell).unwrap();
    let mut samples = String::from("t_s,rss_bytes,soak_rss_bytes,soak_cpu_s,pss_bytes,anon_bytes,cgroup_bytes,disk_bytes,heap_bytes,arena_bytes,arenas,stack_bytes,other_anon_bytes,file_mapped_bytes,shared_bytes\n");
    let mut latency = String::from(
        "t,ops,ops_per_s,writes,reads,errors,unavailable,p50_us,p90_us,p99_us,p999_us,max_us\n",
    );
    let mut metrics = String::from("t_s,series,value\n");
    let mut x: u64 = 0x9e3779b97f4a7c15;
    let mut noise = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % 1_000_000) as f64 / 1_000_000.0
    };
    for i in 0..DAY {
        let t = i as f64 + 0.001 * (i % 7) as f64;
        let hour = (i % 3600) as f64 / 3600.0;
        let rss = 300e6 + 200e6 * hour + 5e6 * noise() + 10.0 * i as f64;
        // PSS and the kinds come from smaps, every 10th sample.
        let smaps = |v: f64| {
            if i % 10 == 0 {
                format!("{v:.0}")
            } else {
                String::new()
            }
        };
        samples.push_str(&format!(
            "{t:.3},{rss:.0},{:.0},{:.3},{},{},{:.0},{:.0},{},{},{},{},{},{},{}\n",
            40e6 + 1e3 * noise(),
            i as f64 * 0.05,
            smaps(rss * 0.9),
            smaps(rss * 0.8),
            rss * 1.02,
            1e9 * (1.0 + 0.5 * hour),
            smaps(rss * 0.3),
            smaps(rss * 0.4),
            smaps((8 + (i / 3600) % 8) as f64),
            smaps(2e6),
            smaps(rss * 0.1),
            smaps(rss * 0.15),
            smaps(1e6),
        ));
        let ops = 20_000.0 * (0.95 + 0.1 * noise());
        latency.push_str(&format!(
            "{t:.3},{ops:.0},{ops:.1},{:.0},{:.0},0,0,{:.0},{:.0},{:.0},{:.0},{:.0}\n",
            ops / 2.0,
            ops / 2.0,
            400.0 + 100.0 * noise(),
            900.0 + 200.0 * noise(),
            3000.0 + 2000.0 * noise(),
            9000.0 + 5000.0 * noise(),
            20000.0 + 10000.0 * noise()
        ));
        for m in 0..12 {
            metrics.push_str(&format!(
                "{t:.3},node_series_{m}{{shard=\"{}\"}},{:.0}\n",
                m % 3,
                1e6 * (m as f64 + noise())
            ));
        }
    }
    gz(&cell.join("samples.csv.gz"), &samples);
    gz(&cell.join("metrics.csv.gz"), &metrics);
    std::fs::write(cell.join("latency.csv"), latency).unwrap();
    let mut events = String::new();
    for h in 0..24 {
        let at = h as f64 * 3600.0 + 1800.0;
        events.push_str(&format!(
            "{{\"t\":{at},\"kind\":\"killed\",\"detail\":\"SIGKILL (signal 9)\"}}\n"
        ));
        events.push_str(&format!("{{\"t\":{},\"kind\":\"ready\",\"detail\":\"pid 7 after 900 ms (restart after a kill)\"}}\n", at + 0.9));
        events.push_str(&format!("{{\"t\":{},\"kind\":\"read-back\",\"integrity\":{{\"lost\":0}},\"detail\":\"restart {h}: 0 lost\"}}\n", at + 5.0));
        events.push_str(&format!("{{\"t\":{},\"kind\":\"phase-finished\",\"phase\":\"run 1h\",\"start_s\":{},\"detail\":\"run 1h: done\"}}\n", (h + 1) as f64 * 3600.0, h as f64 * 3600.0));
    }
    std::fs::write(cell.join("events.jsonl"), events).unwrap();
}

fn summary(dir: &Path) -> Summary {
    let pinned = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/reports/expectations-power-cuts/summary.json");
    let mut s: Summary = serde_json::from_str(&std::fs::read_to_string(pinned).unwrap()).unwrap();
    s.suite = "day".into();
    s.duration_s = DAY as f64;
    s.cells.truncate(1);
    let c = &mut s.cells[0];
    c.id = "day".into();
    c.files = [
        "samples.csv.gz",
        "metrics.csv.gz",
        "latency.csv",
        "events.jsonl",
    ]
    .into_iter()
    .map(|f| (f.to_string(), format!("cells/day/{f}")))
    .collect();
    let _ = dir;
    s
}

/// The peer: the same points, decoded already, each group a bare uPlot.
fn bare_page(d: &html::PageData) -> String {
    let js = include_str!("../src/report/html/vendor/uplot/uPlot.iife.min.js");
    let css = include_str!("../src/report/html/vendor/uplot/uPlot.min.css");
    let mut charts = String::new();
    // The node's own figures are folded on soak's page (drawn when
    // opened): left out here too.
    for g in d.cells[0]
        .groups
        .iter()
        .filter(|g| !g.id.starts_with("metric:"))
    {
        // One x column: each series at its own times, joined by uPlot.
        let cols: Vec<serde_json::Value> = g
            .series
            .iter()
            .map(|s| {
                let p = s.points();
                serde_json::json!([
                    p.iter().map(|p| p.0).collect::<Vec<_>>(),
                    p.iter().map(|p| p.1).collect::<Vec<_>>()
                ])
            })
            .collect();
        charts.push_str(&format!(
            "draw({}, {});\n",
            serde_json::Value::Array(cols),
            g.series.len()
        ));
    }
    format!(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><link rel=\"icon\" href=\"data:,\"><style>{css}</style></head><body data-live=\"false\">\n\
         <script>{js}</script><script>\n\
         function draw(cols, n) {{ const data = cols.length === 1 ? cols[0] : uPlot.join(cols);\n\
           const series = [{{}}]; for (let i = 0; i < n; i++) series.push({{ stroke: 'blue', spanGaps: true, points: {{ show: false }} }});\n\
           new uPlot({{ width: 1200, height: 230, scales: {{ x: {{ time: false }} }}, series }}, data, document.body); }}\n\
         {charts}\n\
         window.soak = {{ errors: [] }}; document.body.dataset.rendered = String(Math.round(performance.now()));\n\
         </script></body></html>\n"
    )
}

/// Opens `url` in a fresh page and returns the milliseconds from its
/// navigation's start to every chart drawn.
fn open(b: &mut browser::Browser, url: &str) -> f64 {
    let s = b.open(url, 1400, 1000);
    b.wait_for(
        &s,
        "document.body && document.body.dataset.rendered",
        Duration::from_secs(120),
    );
    let errors = b.eval(&s, "soak.errors");
    assert_eq!(errors, serde_json::json!([]), "{url}");
    b.eval(
        &s,
        "soak.paintedAt || Number(document.body.dataset.rendered)",
    )
    .as_f64()
    .unwrap()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let given = std::env::args().nth(1).map(std::path::PathBuf::from);
    let made = tempfile::tempdir().unwrap();
    let (dir, s) = match &given {
        Some(d) => {
            let s = soak::report::merge::load(d).unwrap_or_else(|e| panic!("{e}"));
            (d.clone(), s)
        }
        None => {
            let started = Instant::now();
            day(&made.path().join("cells/day"));
            let files: u64 = [
                "samples.csv.gz",
                "metrics.csv.gz",
                "latency.csv",
                "events.jsonl",
            ]
            .iter()
            .map(|f| {
                std::fs::metadata(made.path().join("cells/day").join(f))
                    .unwrap()
                    .len()
            })
            .sum();
            println!(
                "a day of one cell's files: {:.1} MB, made in {:.1} s",
                files as f64 / 1e6,
                started.elapsed().as_secs_f64()
            );
            (made.path().to_path_buf(), summary(made.path()))
        }
    };
    let t = Instant::now();
    let path = html::write(&dir, &s).unwrap();
    let wrote = t.elapsed().as_secs_f64();
    let size = std::fs::metadata(&path).unwrap().len();
    let data = html::page_data(&dir, &s);
    let points: usize = data
        .cells
        .iter()
        .flat_map(|c| &c.groups)
        .flat_map(|g| &g.series)
        .map(|s| s.len())
        .sum();
    let series: usize = data
        .cells
        .iter()
        .flat_map(|c| &c.groups)
        .map(|g| g.series.len())
        .sum();
    let bare = made.path().join("bare.html");
    std::fs::write(&bare, bare_page(&data)).unwrap();
    let bare_size = std::fs::metadata(&bare).unwrap().len();
    println!(
        "report.html: {:.2} MB for {points} points in {series} series ({:.1} bytes a point), written in {wrote:.2} s; bare uPlot's page of the same points: {:.1} MB",
        size as f64 / 1e6,
        size as f64 / points as f64,
        bare_size as f64 / 1e6
    );
    let mut b = browser::Browser::start();
    let (mut ours, mut peer) = (vec![], vec![]);
    for _ in 0..3 {
        ours.push(open(&mut b, &format!("file://{}", path.display())));
        peer.push(open(&mut b, &format!("file://{}", bare.display())));
    }
    let (o, p) = (median(ours.clone()), median(peer.clone()));
    println!("opened to every chart drawn (ms): report.html {ours:?}, bare uPlot {peer:?}");
    println!(
        "medians: report.html {o:.0} ms, bare uPlot {p:.0} ms: {:.2}x the peer",
        o / p
    );
}
