//! A real headless Chromium (Debian's) driven over the DevTools protocol
//! on a pipe (`--remote-debugging-pipe`: commands on its fd 3, answers and
//! events on its fd 4, each a JSON text ended by NUL), with no library and
//! no port. The tests open pages in it as a person would: they wait for
//! the page to say it has drawn, press and drag the mouse, read what is on
//! the page, keep every console error and exception, every request the
//! page made, and take screenshots.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub struct Browser {
    child: Child,
    to: std::fs::File,
    from: mpsc::Receiver<Value>,
    next: u64,
    /// Every event received, in order.
    pub events: Vec<Value>,
    _profile: tempfile::TempDir,
}

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

impl Browser {
    pub fn start() -> Browser {
        super::require_tool("chromium", "chromium");
        let profile = tempfile::tempdir().unwrap();
        let (cmd_read, cmd_write) = pipe();
        let (out_read, out_write) = pipe();
        use std::os::fd::AsRawFd;
        let (a, b) = (cmd_read.as_raw_fd(), out_write.as_raw_fd());
        let mut command = Command::new("chromium");
        command
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--hide-scrollbars",
                "--remote-debugging-pipe",
                "--window-size=1400,1000",
                // No name resolves but loopback: a page that reached for a CDN fails.
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .env("HOME", profile.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        unsafe {
            command.pre_exec(move || {
                // Out of the way of 3 and 4 first, then onto them (dup2
                // clears close-on-exec).
                let (ha, hb) = (
                    libc::fcntl(a, libc::F_DUPFD, 10),
                    libc::fcntl(b, libc::F_DUPFD, 10),
                );
                if ha < 0 || hb < 0 || libc::dup2(ha, 3) < 0 || libc::dup2(hb, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().expect("chromium starts");
        drop(cmd_read);
        drop(out_write);
        let (tx, rx) = mpsc::channel();
        let reader = std::fs::File::from(out_read);
        std::thread::spawn(move || {
            let mut r = BufReader::new(reader);
            let mut buf = vec![];
            while r.read_until(0, &mut buf).map(|n| n > 0).unwrap_or(false) {
                buf.pop();
                if let Ok(v) = serde_json::from_slice::<Value>(&buf) {
                    if tx.send(v).is_err() {
                        return;
                    }
                }
                buf.clear();
            }
        });
        Browser {
            child,
            to: std::fs::File::from(cmd_write),
            from: rx,
            next: 0,
            events: vec![],
            _profile: profile,
        }
    }

    /// Sends a command (to a page's session, or to the browser) and waits
    /// for its answer; events that come meanwhile are kept.
    pub fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        let mut bytes = serde_json::to_vec(&msg).unwrap();
        bytes.push(0);
        self.to.write_all(&bytes).expect("chromium reads its pipe");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = self
                .from
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("chromium did not answer {method} within 60 s"));
            if v.get("id").and_then(Value::as_u64) == Some(id) {
                if let Some(e) = v.get("error") {
                    panic!("{method}: {e}");
                }
                return v["result"].clone();
            }
            self.events.push(v);
        }
    }

    /// Opens `url` in a new page of `width` x `height` and returns its
    /// session, with the console, exceptions and requests recorded.
    pub fn open(&mut self, url: &str, width: u32, height: u32) -> String {
        let target = self.call(None, "Target.createTarget", json!({ "url": "about:blank" }));
        let attached = self.call(
            None,
            "Target.attachToTarget",
            json!({ "targetId": target["targetId"], "flatten": true }),
        );
        let s = attached["sessionId"].as_str().unwrap().to_string();
        for m in [
            "Runtime.enable",
            "Page.enable",
            "Log.enable",
            "Network.enable",
        ] {
            self.call(Some(&s), m, json!({}));
        }
        self.call(
            Some(&s),
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": width, "height": height, "deviceScaleFactor": 1, "mobile": false }),
        );
        self.call(Some(&s), "Page.navigate", json!({ "url": url }));
        s
    }

    /// The value of a JavaScript expression in the page (promises awaited).
    pub fn eval(&mut self, s: &str, expr: &str) -> Value {
        let r = self.call(
            Some(s),
            "Runtime.evaluate",
            json!({ "expression": expr, "returnByValue": true, "awaitPromise": true }),
        );
        if let Some(e) = r.get("exceptionDetails") {
            panic!("{expr}: {e}");
        }
        r["result"]["value"].clone()
    }

    /// Waits until `expr` is true in the page: the page says it, the test
    /// does not guess a time. Fails after `limit`.
    pub fn wait_for(&mut self, s: &str, expr: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        // The page is asked again when something happened in it, or every
        // 50 ms while nothing did.
        let wrapped = format!(
            "new Promise(ok => {{ const t0 = Date.now(); (function f() {{ let v = false; try {{ v = !!({expr}); }} catch (e) {{}} if (v || Date.now() - t0 > 2000) ok(v); else setTimeout(f, 50); }})(); }})"
        );
        while Instant::now() < deadline {
            if self.eval(s, &wrapped) == json!(true) {
                return;
            }
        }
        panic!("the page never showed `{expr}` within {limit:?}");
    }

    /// A mouse event at (x, y) of the page's viewport.
    pub fn mouse(&mut self, s: &str, kind: &str, x: f64, y: f64, extra: Value) {
        let mut p = json!({ "type": kind, "x": x, "y": y, "button": "left", "clickCount": 1 });
        if kind == "mouseMoved" {
            p["button"] = json!("none");
        }
        if let Value::Object(m) = extra {
            for (k, v) in m {
                p[k] = v;
            }
        }
        self.call(Some(s), "Input.dispatchMouseEvent", p);
    }

    /// A drag from one point to another with the left button.
    pub fn drag(&mut self, s: &str, from: (f64, f64), to: (f64, f64)) {
        self.mouse(s, "mouseMoved", from.0, from.1, json!({}));
        self.mouse(s, "mousePressed", from.0, from.1, json!({}));
        for i in 1..=5 {
            let f = i as f64 / 5.0;
            let (x, y) = (from.0 + (to.0 - from.0) * f, from.1 + (to.1 - from.1) * f);
            self.mouse(
                s,
                "mouseMoved",
                x,
                y,
                json!({ "buttons": 1, "button": "left" }),
            );
        }
        self.mouse(s, "mouseReleased", to.0, to.1, json!({}));
    }

    /// The page's console errors, uncaught exceptions and failed loads.
    pub fn errors(&self) -> Vec<String> {
        self.events
            .iter()
            .filter_map(|e| {
                let p = &e["params"];
                match e["method"].as_str()? {
                    "Runtime.exceptionThrown" => Some(p["exceptionDetails"].to_string()),
                    "Runtime.consoleAPICalled" if p["type"] == "error" => {
                        Some(p["args"].to_string())
                    }
                    "Log.entryAdded" if p["entry"]["level"] == "error" => {
                        Some(p["entry"]["text"].to_string())
                    }
                    _ => None,
                }
            })
            .collect()
    }

    /// Every URL a page asked for.
    pub fn requests(&self) -> Vec<String> {
        self.events
            .iter()
            .filter(|e| e["method"] == "Network.requestWillBeSent")
            .filter_map(|e| e["params"]["request"]["url"].as_str().map(str::to_string))
            .collect()
    }

    /// A PNG of the page from its top, `height` CSS pixels of it (the
    /// book's size) at `scale`, written to `path`.
    pub fn screenshot(&mut self, s: &str, path: &Path, height: f64, scale: f64) {
        let width = self.eval(s, "document.documentElement.clientWidth");
        let shot = self.call(
            Some(s),
            "Page.captureScreenshot",
            json!({ "format": "png", "captureBeyondViewport": true,
                    "clip": { "x": 0, "y": 0, "width": width, "height": height, "scale": scale } }),
        );
        use base64::Engine as _;
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap())
            .unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Stopped by its PID, with every process it started: their group
        // is its own, and its number is the PID.
        unsafe {
            libc::kill(-(self.child.id() as i32), libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}
