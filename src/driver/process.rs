//! A node as a local process tree: its own process group, its own cgroup,
//! its output in the cell's `node.log`.
//!
//! The child is forked from a thread that lives exactly as long as the child
//! and waits for it, because `PR_SET_PDEATHSIG` fires when the *thread* that
//! forked exits, not the process: a short-lived tokio worker would kill the
//! node early. With the death signal set, a SIGKILL of soak itself takes the
//! node's leader down; its cgroup (named `soak-<run>-...`) is what `soak
//! cleanup` uses to find anything else.

use std::fs::File;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

use super::cgroup::{self, Cgroup};
use super::{Death, DriverError, Exit, Exited, Launch, Node};

/// How readiness is probed.
#[derive(Debug, Clone)]
pub enum Probe {
    /// A RESP `PING` answered with anything but an error (or `-NOAUTH`).
    Resp(String),
    /// A TCP connection accepted.
    Tcp(String),
    /// An HTTP GET of this `http://` URL answered 2xx.
    Http(String),
    /// A line of the node's log, written by this start, matches the regex.
    Log(String),
    /// The command exits 0.
    Exec(Vec<String>),
}

impl std::fmt::Display for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Probe::Resp(a) => write!(f, "a RESP PING to {a} to be answered"),
            Probe::Tcp(a) => write!(f, "a TCP connect to {a} to be accepted"),
            Probe::Http(u) => write!(f, "a GET of {u} to answer 2xx"),
            Probe::Log(re) => write!(f, "a log line matching `{re}`"),
            Probe::Exec(argv) => write!(f, "`{}` to exit 0", argv.join(" ")),
        }
    }
}

/// A fully templated node definition.
#[derive(Debug, Clone)]
pub struct Spec {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub probe: Probe,
    pub ready_timeout: Duration,
    pub stop_signal: Signal,
    pub grace: Duration,
    pub log: PathBuf,
    /// The user the node runs as (`NAME`, `UID`, `UID:GID`, `NAME:GROUP`);
    /// soak's own without one. PostgreSQL refuses to run as root.
    pub user: Option<String>,
    /// The network namespace it runs in (a cluster's member); soak's own
    /// without one.
    pub netns: Option<std::sync::Arc<File>>,
}

/// The uid and gid of `user` (`NAME`, `UID`, `UID:GID`, `NAME:GROUP`).
pub fn resolve_user(user: &str) -> Result<(u32, u32), String> {
    use nix::unistd::{Group, User};
    let (u, g) = match user.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (user, None),
    };
    let found = match u.parse::<u32>() {
        Ok(uid) => User::from_uid(uid.into()).ok().flatten(),
        Err(_) => User::from_name(u).ok().flatten(),
    };
    let uid = match (u.parse::<u32>(), &found) {
        (Ok(uid), _) => uid,
        (_, Some(f)) => f.uid.as_raw(),
        _ => {
            return Err(format!(
                "there is no user {u:?} on this machine (`useradd {u}` makes one)"
            ))
        }
    };
    let gid = match g {
        Some(g) => match g.parse::<u32>() {
            Ok(gid) => gid,
            Err(_) => Group::from_name(g)
                .ok()
                .flatten()
                .ok_or_else(|| format!("there is no group {g:?} on this machine"))?
                .gid
                .as_raw(),
        },
        None => found.map(|f| f.gid.as_raw()).unwrap_or(uid),
    };
    Ok((uid, gid))
}

/// Why a start did not get ready.
#[derive(Debug, Clone, Copy)]
pub enum NotReady {
    /// The node exited first.
    Exited(Exit),
    /// The probe did not answer within the ready timeout.
    Timeout,
}

/// Probes every 50 ms until the node is ready (how long since `t0`), it
/// exits (`exited` says so), or the ready timeout passes. The caller
/// cleans up and makes the error with [`not_ready`].
pub async fn await_ready(
    spec: &Spec,
    t0: Instant,
    log_from: u64,
    exited: impl Fn() -> Option<Exit>,
) -> Result<Duration, NotReady> {
    let deadline = t0 + spec.ready_timeout;
    loop {
        if let Some(e) = exited() {
            return Err(NotReady::Exited(e));
        }
        if probe(&spec.probe, &spec.log, log_from).await {
            return Ok(t0.elapsed());
        }
        if Instant::now() >= deadline {
            return Err(NotReady::Timeout);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The error of a start that did not get ready, with the last lines this
/// start wrote to the node's log; `oom`: the kernel killed it for memory.
pub fn not_ready(spec: &Spec, log_from: u64, why: NotReady, oom: bool) -> DriverError {
    let tail = tail_from(&spec.log, log_from, 20);
    match why {
        NotReady::Exited(e) => DriverError::ExitedBeforeReady {
            status: e.to_string(),
            oom,
            log: spec.log.clone(),
            tail,
        },
        NotReady::Timeout => DriverError::NeverReady {
            timeout: spec.ready_timeout,
            probe: spec.probe.to_string(),
            log: spec.log.clone(),
            tail,
        },
    }
}

/// One live incarnation of the node.
struct Running {
    pid: i32,
    exit: watch::Receiver<Option<ExitStatus>>,
}

/// The node's process tree across restarts, and its cgroup.
pub struct ProcessNode {
    pub spec: Spec,
    pub cgroup: Option<Cgroup>,
    current: Option<Running>,
    oom_seen: u64,
}

impl From<ExitStatus> for Exit {
    fn from(status: ExitStatus) -> Exit {
        match (status.code(), status.signal()) {
            (Some(c), _) => Exit::Code(c),
            (_, Some(s)) => Exit::Signal(s),
            _ => Exit::Code(-1),
        }
    }
}

/// The last `n` lines of a log file.
pub fn tail(path: &std::path::Path, n: usize) -> String {
    tail_from(path, 0, n)
}

/// The last `n` lines of a log file written after byte `from` (what this
/// start of the node wrote, not its earlier incarnations), a run of lines
/// that differ only in their digits (a retry every few seconds, with its
/// time) counted as one, so that the quote reaches back to its cause.
pub fn tail_from(path: &std::path::Path, from: u64, n: usize) -> String {
    let lines = collapse_repeats(&written_from(path, from));
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// What a log file holds after byte `from`.
fn written_from(path: &std::path::Path, from: u64) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    String::from_utf8_lossy(text.get(from as usize..).unwrap_or_default()).into_owned()
}

/// Lines, with each run of three or more that differ only in digits kept
/// as its first and last and a line saying how many were between.
fn collapse_repeats(text: &str) -> Vec<String> {
    let shape = |l: &str| -> String { l.chars().filter(|c| !c.is_ascii_digit()).collect() };
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let s = shape(lines[i]);
        let mut j = i + 1;
        while j < lines.len() && shape(lines[j]) == s {
            j += 1;
        }
        out.push(lines[i].to_string());
        if j - i > 2 {
            out.push(format!(
                "[... {} more lines like the one above ...]",
                j - i - 2
            ));
        }
        if j - i > 1 {
            out.push(lines[j - 1].to_string());
        }
        i = j;
    }
    out
}

impl ProcessNode {
    pub fn new(spec: Spec, cgroup: Option<Cgroup>) -> ProcessNode {
        ProcessNode {
            spec,
            cgroup,
            current: None,
            oom_seen: 0,
        }
    }

    /// How long a stop waits after the stop signal before SIGKILL.
    pub fn grace(&self) -> Duration {
        self.spec.grace
    }

    pub fn pid(&self) -> Option<i32> {
        self.current.as_ref().map(|r| r.pid)
    }

    /// Every process of the node: the cgroup's, or the process group's.
    pub fn pids(&self) -> Vec<i32> {
        match (&self.cgroup, &self.current) {
            (Some(cg), _) => cg.procs(),
            (None, Some(r)) => group_members(r.pid),
            (None, None) => vec![],
        }
    }

    fn spawn(&mut self) -> Result<(), DriverError> {
        let spec = self.spec.clone();
        let log = File::options()
            .create(true)
            .append(true)
            .open(&spec.log)
            .map_err(|e| DriverError::Io(format!("cannot open {}: {e}", spec.log.display())))?;
        let procs_fd = match &self.cgroup {
            Some(cg) => Some(cg.procs_fd().map_err(|e| {
                DriverError::Io(format!(
                    "cannot open {}/cgroup.procs: {e}",
                    cg.path.display()
                ))
            })?),
            None => None,
        };
        let user = match &spec.user {
            Some(u) => Some(resolve_user(u).map_err(DriverError::Io)?),
            None => None,
        };
        let (pid_tx, pid_rx) = std::sync::mpsc::channel();
        let (exit_tx, exit_rx) = watch::channel(None);
        let parent = std::process::id() as i32;
        std::thread::Builder::new()
            .name("soak-node-watch".into())
            .spawn(move || {
                // This thread only forks the node and waits for it: it
                // enters the member's namespace for good, and the child
                // is born there, whatever user it then becomes.
                if let Some(ns) = &spec.netns {
                    if let Err(e) = crate::net::netns::enter(ns) {
                        let _ = pid_tx.send(Err(e));
                        return;
                    }
                }
                let mut cmd = Command::new(&spec.argv[0]);
                cmd.args(&spec.argv[1..])
                    .envs(spec.env.iter().map(|(k, v)| (k, v)))
                    .stdin(Stdio::null())
                    .process_group(0);
                if let Some((uid, gid)) = user {
                    // Set before the hook below runs (std drops the
                    // supplementary groups too), so the death signal
                    // set there is not cleared by the change of user.
                    cmd.uid(uid).gid(gid);
                }
                match log.try_clone() {
                    Ok(out) => {
                        cmd.stdout(out).stderr(log);
                    }
                    Err(_) => {
                        cmd.stdout(Stdio::null()).stderr(Stdio::null());
                    }
                }
                let fd = procs_fd.as_ref().map(cgroup::raw);
                // SAFETY: between fork and exec only async-signal-safe calls:
                // write(2), prctl(2), getppid(2).
                unsafe {
                    cmd.pre_exec(move || {
                        if let Some(fd) = fd {
                            if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                                return Err(std::io::Error::last_os_error());
                            }
                        }
                        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0
                        {
                            return Err(std::io::Error::last_os_error());
                        }
                        if libc::getppid() != parent {
                            // soak died between fork and prctl.
                            libc::_exit(1);
                        }
                        Ok(())
                    });
                }
                match cmd.spawn() {
                    Ok(mut child) => {
                        drop(procs_fd);
                        let _ = pid_tx.send(Ok(child.id() as i32));
                        if let Ok(status) = child.wait() {
                            let _ = exit_tx.send(Some(status));
                        }
                    }
                    Err(e) => {
                        let _ = pid_tx.send(Err(e));
                    }
                }
            })
            .map_err(|e| DriverError::Io(format!("cannot start a thread: {e}")))?;
        let pid = pid_rx
            .recv()
            .map_err(|_| DriverError::Io("the spawning thread died".into()))?
            .map_err(|source| DriverError::Spawn {
                program: self.spec.argv[0].clone(),
                source,
            })?;
        self.oom_seen = self.cgroup.as_ref().map(|c| c.oom_kills()).unwrap_or(0);
        self.current = Some(Running { pid, exit: exit_rx });
        Ok(())
    }

    /// Starts the node and waits until its probe answers; returns how long
    /// that took. A node that exits or times out is killed and its log's
    /// last lines go into the error.
    pub async fn start(&mut self) -> Result<Duration, DriverError> {
        let t0 = Instant::now();
        let log_from = std::fs::metadata(&self.spec.log)
            .map(|m| m.len())
            .unwrap_or(0);
        self.spawn()?;
        let waited = await_ready(&self.spec, t0, log_from, || {
            self.exit_status().map(Exit::from)
        })
        .await;
        match waited {
            Ok(took) => Ok(took),
            Err(why @ NotReady::Exited(_)) => {
                let oom = self.classify_death() == Death::Oom;
                Err(not_ready(&self.spec, log_from, why, oom))
            }
            Err(why) => {
                self.kill_now().await;
                Err(not_ready(&self.spec, log_from, why, false))
            }
        }
    }

    /// The exit status if the current incarnation has exited.
    pub fn exit_status(&self) -> Option<ExitStatus> {
        self.current.as_ref().and_then(|r| *r.exit.borrow())
    }

    pub fn is_running(&self) -> bool {
        self.current.is_some() && self.exit_status().is_none()
    }

    /// After an exit soak did not cause: OOM kill or crash?
    pub fn classify_death(&mut self) -> Death {
        let now = self.cgroup.as_ref().map(|c| c.oom_kills()).unwrap_or(0);
        let oom = now > self.oom_seen;
        self.oom_seen = now;
        self.current = None;
        if oom {
            Death::Oom
        } else {
            Death::Crash
        }
    }

    /// Waits for the current incarnation to exit, up to `timeout`.
    pub async fn wait(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let r = self.current.as_mut()?;
        let mut rx = r.exit.clone();
        let waited = tokio::time::timeout(timeout, rx.wait_for(|s| s.is_some())).await;
        match waited {
            Ok(Ok(s)) => *s,
            _ => None,
        }
    }

    /// Sends a signal to the node's whole process group.
    pub fn signal(&self, sig: Signal) -> Result<(), DriverError> {
        let Some(r) = &self.current else {
            return Err(DriverError::NotRunning);
        };
        if self.exit_status().is_some() {
            return Err(DriverError::NotRunning);
        }
        killpg(Pid::from_raw(r.pid), sig).map_err(|e| DriverError::Io(format!("kill({sig}): {e}")))
    }

    /// Kills with `sig` and waits for the exit (SIGKILL after 30 s if the
    /// signal was not fatal). Also kills whatever else is left in the cgroup.
    pub async fn kill(&mut self, sig: Signal) -> Result<ExitStatus, DriverError> {
        self.signal(sig)?;
        let status = match self.wait(Duration::from_secs(30)).await {
            Some(s) => s,
            None => {
                let _ = self.signal(Signal::SIGKILL);
                self.wait(Duration::from_secs(10))
                    .await
                    .ok_or_else(|| DriverError::Io("the node survived SIGKILL for 10 s".into()))?
            }
        };
        self.reap_rest();
        self.current = None;
        Ok(status)
    }

    /// The suite's stop: its signal, the grace period, then SIGKILL.
    pub async fn stop(&mut self) -> Result<ExitStatus, DriverError> {
        if !self.is_running() {
            self.current = None;
            return Err(DriverError::NotRunning);
        }
        let _ = self.signal(self.spec.stop_signal);
        let status = match self.wait(self.spec.grace).await {
            Some(s) => s,
            None => {
                let _ = self.signal(Signal::SIGKILL);
                self.wait(Duration::from_secs(10))
                    .await
                    .unwrap_or(ExitStatus::from_raw(9))
            }
        };
        self.reap_rest();
        self.current = None;
        Ok(status)
    }

    async fn kill_now(&mut self) {
        let _ = self.signal(Signal::SIGKILL);
        let _ = self.wait(Duration::from_secs(10)).await;
        self.reap_rest();
        self.current = None;
    }

    /// Processes of the node that outlived its leader.
    fn reap_rest(&self) {
        if let Some(cg) = &self.cgroup {
            cg.kill_all();
        } else if let Some(r) = &self.current {
            let _ = killpg(Pid::from_raw(r.pid), Signal::SIGKILL);
        }
    }

    /// Kills everything and removes the cgroup. Idempotent; also run on drop.
    pub fn shutdown(&mut self) {
        if let Some(r) = &self.current {
            if r.exit.borrow().is_none() {
                let _ = killpg(Pid::from_raw(r.pid), Signal::SIGKILL);
                let mut rx = r.exit.clone();
                let deadline = Instant::now() + Duration::from_secs(10);
                while rx.borrow_and_update().is_none() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
        self.current = None;
        if let Some(cg) = &mut self.cgroup {
            let _ = cg.remove();
        }
    }
}

impl Drop for ProcessNode {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Members of a process group, from `/proc/*/stat`.
fn group_members(pgid: i32) -> Vec<i32> {
    let mut out = vec![];
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // Fields after the command name (which may hold spaces) are after ')'.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.get(2).and_then(|p| p.parse::<i32>().ok()) == Some(pgid) {
            out.push(pid);
        }
    }
    out
}

/// One readiness attempt. `log` and `from`: the node's log, and where
/// this start's lines begin.
pub async fn probe(p: &Probe, log: &std::path::Path, from: u64) -> bool {
    let limit = match p {
        Probe::Exec(_) => Duration::from_secs(10),
        _ => Duration::from_secs(1),
    };
    let attempt = async {
        match p {
            Probe::Http(url) => crate::net::http::get_ok(url).await,
            Probe::Log(re) => {
                let Ok(re) = regex::Regex::new(re) else {
                    return false;
                };
                written_from(log, from).lines().any(|l| re.is_match(l))
            }
            Probe::Exec(argv) => {
                let Some((program, args)) = argv.split_first() else {
                    return false;
                };
                let mut cmd = tokio::process::Command::new(program);
                crate::net::netns::enter_hub(&mut cmd);
                cmd.args(args)
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .kill_on_drop(true)
                    .status()
                    .await
                    .is_ok_and(|s| s.success())
            }
            Probe::Tcp(addr) => crate::net::netns::connect(addr).await.is_ok(),
            Probe::Resp(addr) => {
                let Ok(mut s) = crate::net::netns::connect(addr).await else {
                    return false;
                };
                if s.write_all(b"*1\r\n$4\r\nPING\r\n").await.is_err() {
                    return false;
                }
                let mut buf = [0u8; 64];
                match s.read(&mut buf).await {
                    Ok(n) if n > 0 => {
                        let reply = &buf[..n];
                        // -LOADING and the like mean "up, not serving yet".
                        !reply.starts_with(b"-") || reply.starts_with(b"-NOAUTH")
                    }
                    _ => false,
                }
            }
        }
    };
    tokio::time::timeout(limit, attempt).await.unwrap_or(false)
}

impl Node for ProcessNode {
    async fn start(&mut self) -> Result<Duration, DriverError> {
        ProcessNode::start(self).await
    }

    async fn stop(&mut self) -> Result<Exit, DriverError> {
        ProcessNode::stop(self).await.map(Exit::from)
    }

    async fn kill(&mut self, sig: Signal) -> Result<Exit, DriverError> {
        ProcessNode::kill(self, sig).await.map(Exit::from)
    }

    async fn pause(&mut self) -> Result<(), DriverError> {
        self.signal(Signal::SIGSTOP)
    }

    async fn resume(&mut self) -> Result<(), DriverError> {
        self.signal(Signal::SIGCONT)
    }

    fn exited(&self) -> Exited {
        let rx = self.current.as_ref().map(|r| r.exit.clone());
        Box::pin(async move {
            if let Some(mut rx) = rx {
                if let Ok(s) = rx.wait_for(|s| s.is_some()).await {
                    if let Some(s) = *s {
                        return Exit::from(s);
                    }
                }
            }
            std::future::pending().await
        })
    }

    fn exit(&self) -> Option<Exit> {
        self.exit_status().map(Exit::from)
    }

    fn death(&mut self) -> Death {
        self.classify_death()
    }

    fn running(&self) -> bool {
        self.is_running()
    }

    fn pid(&self) -> Option<i32> {
        ProcessNode::pid(self)
    }

    async fn set_memory_limit(&mut self, bytes: u64) -> Result<String, DriverError> {
        let Some(cg) = &self.cgroup else {
            return Err(DriverError::Io(
                "`limit` needs the node's cgroup, and it has none".into(),
            ));
        };
        cg.set_memory_limit(bytes)?;
        // What the kernel holds now, read back from its file.
        let file = match cg.version {
            cgroup::Version::V1 => "memory.limit_in_bytes",
            cgroup::Version::V2 => "memory.max",
        };
        match cg.memory_limit() {
            Some(now) if now == bytes => Ok(format!("{file} read back: {now}")),
            now => Err(DriverError::Io(format!(
                "the memory limit was set to {bytes} bytes, and {file} reads {now:?}"
            ))),
        }
    }

    fn use_version(&mut self, launch: &Launch) {
        self.spec.argv = launch.argv.clone();
        self.spec.env = launch.env.clone();
    }

    async fn shutdown(&mut self) {
        ProcessNode::shutdown(self)
    }
}

/// A process's parent, from `/proc/PID/stat` (after the command's `)`,
/// which may itself hold spaces and parentheses).
pub fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::collapse_repeats;

    #[test]
    fn a_retry_logged_every_few_seconds_is_quoted_once_so_its_cause_stays_in_view() {
        let log = "newRaft [peers: [], term: 0]\n\
                   10:48:21 E | publish error: request timed out\n\
                   10:48:28 E | publish error: request timed out\n\
                   10:48:35 E | publish error: request timed out\n\
                   10:48:42 E | publish error: request timed out\n\
                   stopped\n\
                   stopped\n";
        assert_eq!(
            collapse_repeats(log),
            [
                "newRaft [peers: [], term: 0]",
                "10:48:21 E | publish error: request timed out",
                "[... 2 more lines like the one above ...]",
                "10:48:42 E | publish error: request timed out",
                "stopped",
                "stopped",
            ]
        );
    }
}
