//! Drivers run a node's life: start, readiness, signals, stop, and where its
//! memory can be read. `process` runs a local process tree in a cgroup.

pub mod allocator;
pub mod cgroup;
pub mod process;

use std::path::{Path, PathBuf};
use std::time::Duration;

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
    #[error("the node did not get ready within {timeout:?} ({probe}); raise node.ready.timeout if it needs longer. Last lines of {log}:\n{tail}", log = log.display())]
    NeverReady {
        timeout: Duration,
        probe: String,
        log: PathBuf,
        tail: String,
    },
    #[error("the node exited ({status}) before it was ready. Last lines of {log}:\n{tail}", log = log.display())]
    ExitedBeforeReady {
        status: String,
        log: PathBuf,
        tail: String,
    },
    #[error("the node is not running")]
    NotRunning,
    #[error(transparent)]
    Cgroup(#[from] cgroup::CgroupError),
    #[error("{0}")]
    Io(String),
}
