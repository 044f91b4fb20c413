//! `soak run --dashboard [ADDR]`: the report page, live, while the run
//! goes. A small read-only HTTP server (the page at `/`, its data as
//! server-sent events at `/events`, a snapshot at `/data`) bound to
//! loopback unless told otherwise. Every second it sends the run's status
//! (the progress line, the cells done with their verdicts) and the series
//! of the cell running, each cut to a bounded number of points, so a
//! day-long run costs the same as a minute's; a cell done is read once,
//! when it ends, and sent once to each page. It stops with the run: the
//! last message says the run ended and where its report is, then the
//! listener closes.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::model::{CellResult, Verdict};
use crate::progress::Progress;
use crate::report::html::{self, DoneCell, LiveStatus, PageData};

/// Points a series is cut to on the live page.
const LIVE_POINTS: usize = 1_500;
/// How often the live page is sent the run's data.
const EVERY: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Shared {
    suite: String,
    run_id: String,
    dir: PathBuf,
    cells: usize,
    done: Vec<CellResult>,
    /// What the page draws of each cell done, cut to `LIVE_POINTS`.
    done_data: Vec<html::data::CellData>,
    /// The cell running now: its id and folder.
    current: Option<(String, PathBuf)>,
    /// The run has ended: its report folder, and whether it was cut short.
    ended: Option<(PathBuf, bool)>,
}

/// The dashboard of one run; it serves until [`Dashboard::finish`] or
/// until dropped.
pub struct Dashboard {
    shared: Arc<Mutex<Shared>>,
    server: tokio::task::JoinHandle<()>,
    pub addr: SocketAddr,
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Dashboard {
    /// Binds `addr` and serves the page of the run `run_id` of `suite`.
    pub async fn start(
        addr: &str,
        suite: &str,
        run_id: &str,
        progress: Progress,
    ) -> Result<Dashboard, String> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| format!("--dashboard {addr}: cannot listen there: {e}"))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let shared = Arc::new(Mutex::new(Shared {
            suite: suite.to_string(),
            run_id: run_id.to_string(),
            ..Shared::default()
        }));
        let state = shared.clone();
        let server = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (state, progress) = (state.clone(), progress.clone());
                tokio::spawn(async move {
                    let _ = serve(stream, state, progress).await;
                });
            }
        });
        Ok(Dashboard {
            shared,
            server,
            addr,
        })
    }

    fn with(&self, f: impl FnOnce(&mut Shared)) {
        f(&mut self.shared.lock().expect("dashboard lock"));
    }

    /// The run's folder and its number of cells.
    pub fn run(&self, dir: &Path, cells: usize) {
        self.with(|s| {
            s.dir = dir.to_path_buf();
            s.cells = cells;
        });
    }

    pub fn cell_started(&self, id: &str, dir: &Path) {
        self.with(|s| s.current = Some((id.to_string(), dir.to_path_buf())));
    }

    pub fn cell_done(&self, result: &CellResult) {
        // Its files are read outside the lock the pages' messages wait on.
        let dir = self.shared.lock().expect("dashboard lock").dir.clone();
        let data = html::data::of_cell(&dir, result).thinned(LIVE_POINTS);
        self.with(|s| {
            s.current = None;
            s.done.push(result.clone());
            s.done_data.push(data);
        });
    }

    /// The run has ended: the pages are sent its end, then the server
    /// stops (within two of its messages' intervals).
    pub async fn finish(self, report: &Path, interrupted: bool) {
        self.with(|s| s.ended = Some((report.to_path_buf(), interrupted)));
        tokio::time::sleep(EVERY * 2 + Duration::from_millis(200)).await;
    }
}

/// The page's data now: the cells done from the `from`th on (those before
/// it the page has), and the one running; and how many cells are done.
fn data_now(shared: &Mutex<Shared>, progress: &Progress, from: usize) -> (PageData, usize) {
    let s = shared.lock().expect("dashboard lock");
    let from = from.min(s.done_data.len());
    let mut cells = s.done_data[from..].to_vec();
    if let Some((id, dir)) = &s.current {
        let files = [
            "events.jsonl",
            "samples.csv.gz",
            "latency.csv",
            "metrics.csv.gz",
        ]
        .into_iter()
        .map(|f| (f.to_string(), dir.join(f).display().to_string()))
        .collect();
        let running = CellResult {
            id: id.clone(),
            verdict: Verdict::Pass,
            files,
            ..CellResult::default()
        };
        let mut d = html::data::of_cell(&s.dir, &running).thinned(LIVE_POINTS);
        d.verdict = "running";
        cells.push(d);
    }
    let status = LiveStatus {
        line: match &s.ended {
            Some(_) => String::new(),
            None => progress.line(),
        },
        cells: s.cells,
        done: s.done.iter().map(DoneCell::of).collect(),
        interrupted: s.ended.as_ref().is_some_and(|e| e.1),
        report: s.ended.as_ref().map(|e| e.0.display().to_string()),
    };
    let verdict = match &s.ended {
        None => "running",
        Some(_) if s.done.iter().any(|c| c.verdict == Verdict::Fail) => "fail",
        Some(_) if s.done.iter().any(|c| c.verdict == Verdict::Error) => "error",
        Some(_) if s.done.iter().any(|c| c.verdict == Verdict::Warn) => "warn",
        Some(_) => "pass",
    };
    let page = PageData {
        run: s.run_id.clone(),
        suite: s.suite.clone(),
        verdict,
        duration_s: 0.0,
        cells,
        live: s.ended.is_none(),
        status: Some(status),
        cells_from: (from > 0).then_some(from),
    };
    (page, s.done_data.len())
}

/// One connection: a GET of `/`, `/data` or `/events`; anything else is
/// refused. Read-only.
async fn serve(
    mut stream: TcpStream,
    shared: Arc<Mutex<Shared>>,
    progress: Progress,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; 8192];
    let mut len = 0;
    let path = loop {
        let n = stream.read(&mut buf[len..]).await?;
        if n == 0 {
            return Ok(());
        }
        len += n;
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf[..len]) {
            Ok(httparse::Status::Complete(_)) => {
                if req.method != Some("GET") {
                    return respond(
                        &mut stream,
                        "405 Method Not Allowed",
                        "text/plain",
                        b"read-only\n",
                    )
                    .await;
                }
                break req.path.unwrap_or("/").to_string();
            }
            Ok(httparse::Status::Partial) if len < buf.len() => continue,
            _ => {
                return respond(
                    &mut stream,
                    "400 Bad Request",
                    "text/plain",
                    b"bad request\n",
                )
                .await
            }
        }
    };
    match path.split('?').next().unwrap_or("/") {
        "/" => {
            let (suite, run_id) = {
                let s = shared.lock().expect("dashboard lock");
                (s.suite.clone(), s.run_id.clone())
            };
            let page = html::live_page(&suite, &run_id);
            respond(
                &mut stream,
                "200 OK",
                "text/html; charset=utf-8",
                page.as_bytes(),
            )
            .await
        }
        "/data" => {
            let json = serde_json::to_vec(&data_now(&shared, &progress, 0).0)
                .map_err(std::io::Error::other)?;
            respond(&mut stream, "200 OK", "application/json", &json).await
        }
        "/events" => events(stream, shared, progress).await,
        _ => respond(&mut stream, "404 Not Found", "text/plain", b"not found\n").await,
    }
}

async fn respond(
    stream: &mut TcpStream,
    status: &str,
    kind: &str,
    body: &[u8],
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    stream.shutdown().await
}

/// Server-sent events: the data every second (after the first, only the
/// cells done since the last and the one running), until the run has
/// ended (its last message says so) or the page goes away.
async fn events(
    mut stream: TcpStream,
    shared: Arc<Mutex<Shared>>,
    progress: Progress,
) -> std::io::Result<()> {
    stream
        .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n")
        .await?;
    let mut tick = tokio::time::interval(EVERY);
    let mut sent = 0;
    loop {
        tick.tick().await;
        let (shared2, progress2) = (shared.clone(), progress.clone());
        // Reading the running cell's files is blocking work.
        let (data, done) =
            tokio::task::spawn_blocking(move || data_now(&shared2, &progress2, sent))
                .await
                .map_err(std::io::Error::other)?;
        sent = done;
        let json = serde_json::to_string(&data).map_err(std::io::Error::other)?;
        stream
            .write_all(format!("data: {json}\n\n").as_bytes())
            .await?;
        if !data.live {
            return stream.shutdown().await;
        }
    }
}
