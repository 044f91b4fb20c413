//! Client adapters: a program of the user's that talks to their node in
//! whatever protocol it speaks, and to soak in JSON lines on its stdin and
//! stdout (the protocol is in `docs/src/protocols.md`; Maelstrom's and
//! Jepsen's client protocols are its models).
//!
//! One adapter process per load connection (Jepsen opens a client per
//! worker), so that the simplest adapter reads a line, does it, and prints
//! the answer; one that says `concurrency: N` in its `init_ok` gets up to
//! N requests in flight, answered in any order by `in_reply_to`.
//!
//! Each runs in a process group of its own, labelled with the run
//! (`SOAK_RUN_ID`, which `soak cleanup` finds), killed with its group when
//! its session ends. When it exits, what was in flight is unknown and the
//! load starts another (the node is not blamed); a line that is not the
//! protocol, or an init never answered, stops the cell (exit 3) quoting it.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};

use super::{Caps, Connecting, Outcome, Protocol, Request, Session, SessionError};
use crate::oracle::Ledger;

/// `workload.adapter`, rendered.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Spec {
    pub command: Vec<String>,
    #[serde(default)]
    pub env: Vec<(String, String)>,
    /// `HOST:PORT` of the node, told to the adapter in its `init` (the
    /// network fault proxy may stand in).
    pub target: Option<String>,
    /// Anything else the adapter is told in its `init` (`params`).
    #[serde(default)]
    pub params: BTreeMap<String, String>,
    /// Seconds the adapter has to answer its `init`.
    pub init_timeout_s: f64,
    /// What the workload asks of it (checked against its capabilities).
    pub needs: Caps,
    /// Where its stderr goes (appended).
    pub log: PathBuf,
    /// The run's label (`SOAK_RUN_ID`), for `soak cleanup`.
    pub run_id: String,
}

impl Protocol for Spec {
    fn name(&self) -> &'static str {
        "adapter"
    }

    fn caps(&self) -> Caps {
        self.needs
    }

    fn depth(&self) -> usize {
        MAX_CONCURRENCY
    }

    fn connect(&self, _t: super::Timeouts) -> Connecting {
        let spec = self.clone();
        Box::pin(async move { start(spec).await.map(|s| Box::new(s) as Box<dyn Session>) })
    }

    fn describe(&self) -> String {
        format!("the adapter `{}`", self.command.join(" "))
    }
}

/// Requests one adapter may take in flight at most, whatever it says.
const MAX_CONCURRENCY: usize = 1024;

/// What soak sends an adapter first.
#[derive(Serialize)]
struct Init<'a> {
    r#type: &'static str,
    id: u64,
    target: Option<&'a str>,
    params: &'a BTreeMap<String, String>,
}

/// An adapter's answer to `init`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InitOk {
    r#type: String,
    in_reply_to: u64,
    #[serde(default)]
    capabilities: Capabilities,
    #[serde(default = "one")]
    concurrency: usize,
}

fn one() -> usize {
    1
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Capabilities {
    #[serde(default)]
    multi_read: bool,
    #[serde(default = "yes")]
    delete: bool,
}

fn yes() -> bool {
    true
}

/// An answer to a request.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Reply {
    r#type: String,
    in_reply_to: u64,
    #[serde(default)]
    values: Option<Vec<Option<String>>>,
    #[serde(default)]
    error: Option<String>,
}

/// One adapter process and the requests in flight on it.
pub struct Adapter {
    child: tokio::process::Child,
    pgid: i32,
    stdin: tokio::process::ChildStdin,
    stdout: tokio::process::ChildStdout,
    wbuf: Vec<u8>,
    written: usize,
    rbuf: Vec<u8>,
    eof: bool,
    /// Ids in flight, and the keys each read asked for.
    pending: HashSet<u64>,
    reads: std::collections::HashMap<u64, usize>,
    command: String,
    /// Requests it takes in flight (`concurrency` in its `init_ok`).
    concurrency: usize,
}

impl Drop for Adapter {
    fn drop(&mut self) {
        if self.pgid > 0 {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(self.pgid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = self.child.start_kill();
    }
}

/// The first `n` characters of a line, for an error message.
fn quote(line: &[u8]) -> String {
    let text = String::from_utf8_lossy(line);
    let cut: String = text.chars().take(200).collect();
    format!("{cut:?}")
}

/// The adapter's process, in a process group of its own, its stderr into
/// its log; it dies with the thread that started it.
fn spawn(
    program: &str,
    args: &[String],
    spec: &Spec,
    log: std::fs::File,
) -> std::io::Result<tokio::process::Child> {
    let mut cmd = tokio::process::Command::new(program);
    crate::net::netns::enter_hub(&mut cmd);
    cmd.args(args)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .env("SOAK_RUN_ID", &spec.run_id)
        .env("PYTHONUNBUFFERED", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(log)
        .process_group(0)
        .kill_on_drop(true);
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork
    // and exec. The adapter dies with the thread that started it (the
    // load's, which lives as long as the load), should soak die first.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(std::io::Error::from)
        });
    }
    cmd.spawn()
}

/// What the adapter's init answer says it cannot do that the suite asks.
fn refusal(spec: &Spec, ok: &InitOk) -> Option<&'static str> {
    if spec.needs.multi_get && !ok.capabilities.multi_read {
        return Some("does not read several keys at once (`capabilities.multi_read`), which `workload.mix.mget` needs: set mget to 0, or add multi_read to the adapter");
    }
    if spec.needs.delete && !ok.capabilities.delete {
        return Some("does not delete (`capabilities.delete: false`), and `workload.mix.del` asks for deletes: set del to 0");
    }
    (ok.concurrency == 0).then_some("said `concurrency: 0`: give 1 or more")
}

async fn start(spec: Spec) -> Result<Adapter, SessionError> {
    let command = spec.command.join(" ");
    let Some((program, args)) = spec.command.split_first() else {
        return Err(SessionError::Fatal("the adapter's command is empty".into()));
    };
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&spec.log)
        .map_err(|e| SessionError::Fatal(format!("{}: {e}", spec.log.display())))?;
    let mut child = spawn(program, args, &spec, log).map_err(|e| {
        SessionError::Fatal(format!(
            "cannot start the adapter `{command}`: {e} (give its argv, e.g. [python3, ${{SUITE_DIR}}/adapter.py])"
        ))
    })?;
    let pgid = child.id().map(|p| p as i32).unwrap_or(0);
    let stdin = child.stdin.take().expect("piped");
    let stdout = child.stdout.take().expect("piped");
    let mut a = Adapter {
        child,
        pgid,
        stdin,
        stdout,
        wbuf: vec![],
        written: 0,
        rbuf: vec![],
        eof: false,
        pending: HashSet::new(),
        reads: Default::default(),
        command,
        concurrency: 1,
    };
    let init = Init {
        r#type: "init",
        id: 0,
        target: spec.target.as_deref(),
        params: &spec.params,
    };
    let line = serde_json::to_string(&init).expect("serializable") + "\n";
    let timeout = Duration::from_secs_f64(spec.init_timeout_s);
    let handshake = async {
        a.stdin.write_all(line.as_bytes()).await?;
        a.stdin.flush().await?;
        let mut reader = tokio::io::BufReader::new(&mut a.stdout);
        let mut answer = String::new();
        reader.read_line(&mut answer).await?;
        // Bytes the BufReader read past the line are the protocol's too.
        let rest = reader.buffer().to_vec();
        Ok::<_, std::io::Error>((answer, rest))
    };
    let (answer, rest) = match tokio::time::timeout(timeout, handshake).await {
        Err(_) => {
            return Err(SessionError::Fatal(format!(
                "the adapter `{}` did not answer its init within {:?}: it must print one JSON line, {{\"type\":\"init_ok\",\"in_reply_to\":0}}, on its stdout (see docs/src/protocols.md); its stderr is in {}",
                a.command,
                timeout,
                spec.log.display()
            )))
        }
        Ok(Err(e)) => {
            return Err(SessionError::Fatal(format!(
                "the adapter `{}` could not be given its init: {e}; its stderr is in {}",
                a.command,
                spec.log.display()
            )))
        }
        Ok(Ok(x)) => x,
    };
    if answer.is_empty() {
        let status = a.child.wait().await.ok();
        return Err(SessionError::Fatal(format!(
            "the adapter `{}` exited before it answered its init ({}); its stderr is in {}",
            a.command,
            status.map(|s| s.to_string()).unwrap_or_default(),
            spec.log.display()
        )));
    }
    let ok: InitOk = serde_json::from_str(answer.trim_end())
        .ok()
        .filter(|o: &InitOk| o.r#type == "init_ok" && o.in_reply_to == 0)
        .ok_or_else(|| {
            SessionError::Fatal(format!(
                "the adapter `{}` answered its init with {}, not {{\"type\":\"init_ok\",\"in_reply_to\":0,...}} (see docs/src/protocols.md)",
                a.command,
                quote(answer.trim_end().as_bytes())
            ))
        })?;
    if let Some(why) = refusal(&spec, &ok) {
        return Err(SessionError::Fatal(format!(
            "the adapter `{}` {why}",
            a.command
        )));
    }
    a.rbuf = rest;
    a.concurrency = ok.concurrency.min(MAX_CONCURRENCY);
    Ok(a)
}

impl Adapter {
    fn fatal(&self, line: &[u8], why: &str) -> SessionError {
        SessionError::Fatal(format!(
            "the adapter `{}` printed a line that is not the protocol ({why}): {}",
            self.command,
            quote(line)
        ))
    }

    /// Judges one line of the adapter's stdout.
    fn line(
        &mut self,
        line: &[u8],
        done: &mut dyn FnMut(u64, Outcome<'_>),
    ) -> Result<(), SessionError> {
        let reply: Reply =
            serde_json::from_slice(line).map_err(|e| self.fatal(line, &e.to_string()))?;
        let id = reply.in_reply_to;
        if !self.pending.remove(&id) {
            return Err(self.fatal(line, &format!("no request {id} is waiting for an answer")));
        }
        let asked = self.reads.remove(&id);
        let error = reply.error.as_deref().unwrap_or("(no error given)");
        match (reply.r#type.as_str(), asked, reply.values) {
            ("ok", None, None) => done(id, Outcome::Done),
            ("ok", Some(n), Some(values)) if values.len() == n => {
                let decoded: Result<Vec<Option<Vec<u8>>>, _> = values
                    .iter()
                    .map(|v| {
                        v.as_deref()
                            .map(|b| base64::engine::general_purpose::STANDARD.decode(b))
                            .transpose()
                    })
                    .collect();
                let decoded = decoded
                    .map_err(|e| self.fatal(line, &format!("a value is not base64: {e}")))?;
                let borrowed: Vec<Option<&[u8]>> = decoded.iter().map(|v| v.as_deref()).collect();
                done(id, Outcome::Values(&borrowed))
            }
            ("ok", Some(n), values) => {
                return Err(self.fatal(
                    line,
                    &format!(
                        "a read of {n} keys needs `values` with {n} entries, got {}",
                        values.map_or("none".into(), |v| v.len().to_string())
                    ),
                ))
            }
            ("ok", None, Some(_)) => {
                return Err(self.fatal(line, "a write's answer has no `values`"))
            }
            ("fail", _, _) => done(id, Outcome::NotDone(error)),
            ("info", _, _) => done(id, Outcome::Unknown(error)),
            (other, _, _) => {
                return Err(self.fatal(
                    line,
                    &format!(
                    "`type` is {other:?}: give ok, fail (definitely not done) or info (unknown)"
                ),
                ))
            }
        }
        Ok(())
    }
}

impl Session for Adapter {
    fn submit(&mut self, id: u64, request: Request<'_>) {
        let mut line = serde_json::Map::new();
        line.insert("id".into(), id.into());
        match request {
            Request::Set { key, value } => {
                line.insert("type".into(), "write".into());
                line.insert("key".into(), Ledger::key_name(key).into());
                let v = base64::engine::general_purpose::STANDARD.encode(value.to_vec());
                line.insert("value".into(), v.into());
            }
            Request::Del { key } => {
                line.insert("type".into(), "delete".into());
                line.insert("key".into(), Ledger::key_name(key).into());
            }
            Request::Get { keys } => {
                line.insert("type".into(), "read".into());
                let names: Vec<serde_json::Value> =
                    keys.iter().map(|k| Ledger::key_name(*k).into()).collect();
                line.insert("keys".into(), names.into());
                self.reads.insert(id, keys.len());
            }
        }
        self.pending.insert(id);
        serde_json::to_writer(&mut self.wbuf, &line).expect("serializable");
        self.wbuf.push(b'\n');
    }

    fn flush(&mut self) -> Result<(), SessionError> {
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        self.write_some(&mut cx)
    }

    fn poll_progress(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.write_some(cx).is_err() {
            return Poll::Ready(());
        }
        if self.eof {
            return Poll::Ready(());
        }
        let mut chunk = [0u8; 16 << 10];
        let mut got = false;
        loop {
            let mut buf = ReadBuf::new(&mut chunk);
            match Pin::new(&mut self.stdout).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if buf.filled().is_empty() => {
                    self.eof = true;
                    return Poll::Ready(());
                }
                Poll::Ready(Ok(())) => {
                    self.rbuf.extend_from_slice(buf.filled());
                    got = true;
                }
                Poll::Ready(Err(_)) => {
                    self.eof = true;
                    return Poll::Ready(());
                }
                Poll::Pending => break,
            }
        }
        if got || self.rbuf.contains(&b'\n') {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    fn drain(&mut self, done: &mut dyn FnMut(u64, Outcome<'_>)) -> Result<(), SessionError> {
        let mut used = 0;
        while let Some(nl) = self.rbuf[used..].iter().position(|b| *b == b'\n') {
            let line = self.rbuf[used..used + nl].to_vec();
            used += nl + 1;
            let line = line.strip_suffix(b"\r").unwrap_or(&line);
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            self.line(line, done)?;
        }
        self.rbuf.drain(..used);
        if self.eof {
            let status = self
                .child
                .try_wait()
                .ok()
                .flatten()
                .map(|s| s.to_string())
                .unwrap_or_else(|| "closed its stdout".into());
            return Err(SessionError::ClientExited(format!(
                "the adapter `{}` exited ({status}) with {} requests in flight",
                self.command,
                self.pending.len()
            )));
        }
        Ok(())
    }

    fn capacity(&self) -> usize {
        self.concurrency
    }

    fn node_state(&mut self, up: bool) {
        let line = serde_json::json!({ "type": "node", "up": up });
        serde_json::to_writer(&mut self.wbuf, &line).expect("serializable");
        self.wbuf.push(b'\n');
        let _ = self.flush();
    }
}

impl Adapter {
    fn write_some(&mut self, cx: &mut Context<'_>) -> Result<(), SessionError> {
        while self.written < self.wbuf.len() {
            match Pin::new(&mut self.stdin).poll_write(cx, &self.wbuf[self.written..]) {
                Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => {
                    self.eof = true;
                    return Err(SessionError::ClientExited(format!(
                        "the adapter `{}` stopped reading its stdin",
                        self.command
                    )));
                }
                Poll::Ready(Ok(n)) => self.written += n,
                Poll::Pending => return Ok(()),
            }
        }
        self.wbuf.clear();
        self.written = 0;
        Ok(())
    }
}
