//! Drivers run a node's life: start, readiness, signals, stop, and where its
//! memory can be read, behind one trait, [`Node`], that the engine drives.
//! `process` runs a local process tree in a cgroup; `docker` runs it as a
//! container on a local or remote Docker engine; `kubernetes` as a Pod on a
//! cluster.

pub mod allocator;
pub mod any;
pub mod cgroup;
pub mod cluster;
pub mod docker;
pub mod ended;
pub mod image;
pub mod kubernetes;
pub mod process;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;

use nix::sys::signal::Signal;

/// How an incarnation of the node ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match *self {
            Exit::Code(c) => write!(f, "exit code {c}"),
            Exit::Signal(s) => match Signal::try_from(s) {
                Ok(sig) => write!(f, "signal {}", sig.as_str()),
                Err(_) => write!(f, "signal {s}"),
            },
        }
    }
}

/// Why a node that was started is no longer running, when soak did not
/// stop it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Death {
    /// The kernel's OOM killer (the cgroup's counter went up, or the
    /// engine says `OOMKilled`).
    Oom,
    /// Anything else: a crash, an exit of its own.
    Crash,
    /// The driver can no longer see the node: its Docker engine stopped
    /// answering. Not the node's doing, and nothing to restart on.
    Lost,
}

/// Memory of a node as its engine reports it (a remote Docker engine's
/// stats), for the sampler where the node's processes cannot be read.
#[derive(Debug, Default)]
pub struct EngineMemory {
    /// The container's cgroup usage, and its anonymous and file parts.
    pub usage: std::sync::atomic::AtomicU64,
    pub anon: std::sync::atomic::AtomicU64,
    pub file: std::sync::atomic::AtomicU64,
}

impl EngineMemory {
    /// Nothing runs: every figure 0.
    pub fn clear(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        for v in [&self.usage, &self.anon, &self.file] {
            v.store(0, Relaxed);
        }
    }
}

/// What a version of the node runs: its argv and environment, rendered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Launch {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    /// The container image (the Docker driver); none for a process.
    pub image: Option<String>,
}

/// A future that resolves when the running incarnation exits.
pub type Exited = Pin<Box<dyn Future<Output = Exit> + Send + 'static>>;

/// A node as the engine drives it: one incarnation at a time, started,
/// stopped, signalled, and watched through [`Node::exited`] (a future, not
/// a poll: a death is seen as the kernel reports it).
pub trait Node: Send {
    /// Starts an incarnation and waits until it is ready; how long that
    /// took. One that exits or never gets ready is killed, with its log's
    /// last lines in the error.
    fn start(&mut self) -> impl Future<Output = Result<Duration, DriverError>> + Send;
    /// The suite's stop: its signal, the grace period, then SIGKILL.
    fn stop(&mut self) -> impl Future<Output = Result<Exit, DriverError>> + Send;
    /// Kills with `sig` and waits for the exit (SIGKILL if it lingers).
    fn kill(&mut self, sig: Signal) -> impl Future<Output = Result<Exit, DriverError>> + Send;
    /// Freezes the node (SIGSTOP, or the cgroup freezer) until `resume`.
    fn pause(&mut self) -> impl Future<Output = Result<(), DriverError>> + Send;
    fn resume(&mut self) -> impl Future<Output = Result<(), DriverError>> + Send;
    /// Resolves when the running incarnation exits; pending forever when
    /// none runs.
    fn exited(&self) -> Exited;
    /// How the running incarnation ended, if it has.
    fn exit(&self) -> Option<Exit>;
    /// After an exit soak did not cause: an OOM kill or a crash. Forgets
    /// the incarnation.
    fn death(&mut self) -> Death;
    /// Whether an incarnation runs and has not exited.
    fn running(&self) -> bool;
    /// The main process, for the allocator's proof and the sampler.
    fn pid(&self) -> Option<i32>;
    /// Sets the memory limit live; returns what the kernel holds now, as
    /// read back (`memory.max read back: N`).
    fn set_memory_limit(
        &mut self,
        bytes: u64,
    ) -> impl Future<Output = Result<String, DriverError>> + Send;
    /// What the next start runs.
    fn use_version(&mut self, launch: &Launch);
    /// Kills everything and removes what the node had (its cgroup, its
    /// containers). Idempotent.
    fn shutdown(&mut self) -> impl Future<Output = ()> + Send;
    /// What the node runs on, so that nothing above the driver asks which
    /// driver it is.
    fn info(&self) -> NodeInfo {
        NodeInfo::default()
    }
    /// The members, when the node is a cluster.
    fn cluster(&mut self) -> Option<&mut dyn Cluster> {
        None
    }
}

/// What soak does to one member of a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberOp {
    Kill(Signal),
    Stop,
    Start,
    Pause,
    Resume,
    /// The member's next start runs this version (`versions:`).
    Use(String),
}

pub type Boxed<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A cluster's members (1-based), for the faults that act on them.
pub trait Cluster: Send {
    fn size(&self) -> usize;
    /// Whether member `m` runs.
    fn is_up(&self, m: usize) -> bool;
    fn member_pid(&self, m: usize) -> Option<i32>;
    /// The member the suite's leader probe names.
    fn leader(&mut self) -> Boxed<'_, Result<usize, String>>;
    /// Does `op` to member `m`; what happened, in words.
    fn act(&mut self, m: usize, op: MemberOp) -> Boxed<'_, Result<String, DriverError>>;
    /// Starts these members together (those that do not run), for
    /// members that wait for each other to form a quorum; each one's
    /// outcome in words, in order.
    fn start_together<'a>(
        &'a mut self,
        ms: &'a [usize],
    ) -> Boxed<'a, Vec<(usize, Result<String, DriverError>)>>;
    /// Puts exactly these cut (and delayed) links in force between the
    /// members; how many packets the delays it lifted held.
    fn set_cuts(&mut self, cuts: &[crate::net::netns::Cut]) -> Result<u64, String>;
    /// The member whose death [`Node::death`] told of last.
    fn last_dead(&self) -> Option<usize>;
}

/// What a driver tells of where its node runs.
#[derive(Debug, Clone, Default)]
pub struct NodeInfo {
    /// The Docker engine a container runs on (its version, kernel,
    /// cgroup version, whether it is this machine's).
    pub engine: Option<crate::model::EngineInfo>,
    /// The engine's memory figures of the container, for when soak cannot
    /// read its cgroup itself (a remote engine, a Pod on another machine).
    pub engine_memory: Option<std::sync::Arc<EngineMemory>>,
}

/// The path of `tool` on the PATH.
pub fn which(tool: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// Whether this process may write `path` (access(2): read-only mounts too).
pub fn writable(path: &Path) -> bool {
    nix::unistd::access(path, nix::unistd::AccessFlags::W_OK).is_ok()
}

/// What went wrong while driving a node; all of these are failures of the
/// environment or of the node's start, reported with exit code 3.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error(
        "cannot start `{program}`: {source} (is the path in node.command right, and executable?)"
    )]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the node did not get ready within {timeout:?} (it waited for {probe}); raise node.ready.timeout if it needs longer. Last lines of {log}:\n{tail}", log = log.display())]
    NeverReady {
        timeout: Duration,
        probe: String,
        log: PathBuf,
        tail: String,
    },
    #[error("the node exited ({status}{}) before it was ready. Last lines of {log}:\n{tail}", if *oom { ", OOM-killed under its memory limit" } else { "" }, log = log.display())]
    ExitedBeforeReady {
        status: String,
        /// The kernel killed it for memory (its cgroup, or the engine,
        /// says so): a finding about the node, not a start that failed.
        oom: bool,
        log: PathBuf,
        tail: String,
    },
    #[error("the node is not running")]
    NotRunning,
    #[error(transparent)]
    Cgroup(#[from] cgroup::CgroupError),
    #[error("{0}")]
    Io(String),
    /// The container engine the plan names did not answer.
    #[error("{0}")]
    Engine(String),
}

impl DriverError {
    /// The node started and ended its own start: it exited or never got
    /// ready. What a version swap records as a refusal, where a program
    /// that cannot be run is the suite's error.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            DriverError::NeverReady { .. } | DriverError::ExitedBeforeReady { .. }
        )
    }
}
