//! Suites: the YAML model, units, templates and validation.
//!
//! A suite is read in two passes. serde reads the YAML into the typed model
//! below; every value type checks itself while it is read, so a bad unit or
//! an unknown signal is reported with its line, column and path. A second
//! pass checks what spans several fields (templates, the order of phases, a
//! verify phase without a workload) and finds the line of the path it blames
//! with [`locate`].

pub mod allocator;
pub mod checks;
pub mod cluster;
pub mod emit;
pub mod faults;
pub mod locate;
pub mod matrix;
pub mod phase;
pub mod protocol;
pub mod schema;
pub mod template;
pub mod values;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use checks::{Checks, CountCheck, Severity};
pub use matrix::{CellDef, Matrix};
pub use phase::{
    Action, ChaosAction, ChaosSpec, ExecSpec, NetworkSpec, Phase, ServiceAction, ServicePhase,
};
pub use values::{Count, Dur, GrowthRate, LoadRate, Rate, Sig, Size, SizeRange};

use allocator::Profile;

/// The name of the version the node starts as (`node:` in the suite).
pub const BASE_VERSION: &str = "node";

/// A whole suite, as written.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Suite {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub node: NodeSpec,
    /// Run the node as a cluster of members, each in a network namespace
    /// of its own, with faults between them (`partition`, `kill: {
    /// member: leader }`).
    pub cluster: Option<cluster::ClusterSpec>,
    /// Processes the node needs beside it (a Kafka broker under a Kafka
    /// Streams application), started in this order before the node,
    /// ready-probed, kept running through its kills and upgrades, stopped
    /// after it; never under the node's limit.
    #[serde(default)]
    pub services: Vec<ServiceSpec>,
    #[serde(default)]
    pub limits: Limits,
    pub matrix: Option<Matrix>,
    pub workload: Option<Workload>,
    /// Other versions of the node, by name, for `upgrade` and `downgrade`
    /// phases; the node starts as `node:` describes it.
    #[serde(default)]
    pub versions: BTreeMap<String, Version>,
    pub phases: Vec<Phase>,
    #[serde(default)]
    pub checks: Checks,
    #[serde(default)]
    pub telemetry: Telemetry,
    /// Where the node's memory went: call sites from an allocator's
    /// profiler.
    #[serde(default)]
    pub memory: MemorySpec,
    /// Each cell runs this many times (`--repeat` overrides): the report
    /// gives the median and spread of its figures, and says which
    /// differences between cells are within that spread.
    pub repeat: Option<Count>,
    /// What must be made before the first cell (a build script), run
    /// once per run, in order, from the suite's folder; a step that
    /// fails is the run's environment error (exit 3), quoting its output.
    #[serde(default)]
    pub prepare: Vec<PrepareStep>,
}

/// One step of `prepare:`: a command run once per run before the cells.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PrepareStep {
    /// The argv, templated with `${SUITE_DIR}` and `${RUN_DIR}` only (no
    /// cell exists yet); never run through a shell.
    pub command: Vec<String>,
    /// Killed (its whole process group) after this long: a build's cold
    /// first run counts too.
    #[serde(default = "default_prepare_timeout")]
    pub timeout: Dur,
}

/// The variables a `prepare:` step may use.
pub const PREPARE_VARIABLES: &[&str] = &["SUITE_DIR", "RUN_DIR"];

fn default_prepare_timeout() -> Dur {
    Dur(std::time::Duration::from_secs(30 * 60))
}

/// One version of the node: its own command, and environment variables
/// added to (or replacing) the node's. Readiness, stop and metrics are the
/// node's; the data directory is the same.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Version {
    /// The argv, templated; never run through a shell. For a container,
    /// the container's command (empty: the image's own).
    #[serde(default)]
    pub command: Vec<String>,
    /// Another image, for a container node: an upgrade is an image swap
    /// on the same data.
    pub image: Option<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// Where the node's memory went, beyond the kinds of mappings soak reads
/// from every node without asking.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemorySpec {
    /// `jemalloc`: preload Debian's jemalloc with its heap profiler on
    /// (cells whose allocator is jemalloc, or that name none), and list
    /// the call stacks whose live bytes grew most after warm-up.
    /// `heaptrack`: preload Debian's heaptrack, which records every
    /// allocation of the process soak starts, under whatever allocator
    /// the cell runs (glibc's, most often), and list the same.
    pub profile: Option<MemoryProfile>,
    /// jemalloc's profiler dumps every time the node has allocated this
    /// much (rounded down to a power of two, at least 1MiB; default
    /// 256MiB): lower for a node that allocates little.
    pub dump_every: Option<values::Size>,
    /// `nmt`: turn on the JVM's Native Memory Tracking (added to the
    /// node's `JAVA_TOOL_OPTIONS`) and read its categories as series
    /// beside RSS; the gap between RSS and what it accounts for is native
    /// memory outside the JVM.
    pub jvm: Option<JvmAccount>,
    /// How often the JVM's account is read (default 10s).
    pub jvm_every: Option<Dur>,
}

/// The JVM's own account of its memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum JvmAccount {
    Nmt,
}

/// A heap profiler soak runs the node under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum MemoryProfile {
    Jemalloc,
    Heaptrack,
}

/// How soak watches the node.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Telemetry {
    /// Sampling interval of memory, disk and the Prometheus endpoint,
    /// 10ms to 60s; `soak run --interval` overrides it.
    #[serde(default = "default_interval")]
    pub interval: Dur,
}

impl Default for Telemetry {
    fn default() -> Self {
        Telemetry {
            interval: default_interval(),
        }
    }
}

fn default_interval() -> Dur {
    Dur(std::time::Duration::from_secs(1))
}

/// The system under test: any process that serves the workload's protocol.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    /// The argv, templated; never run through a shell. With `image`, the
    /// container's command (empty: the image's own).
    #[serde(default)]
    pub command: Vec<String>,
    /// Run the node as a container of this image (`NAME[:TAG]`) on the
    /// Docker engine (`--docker-host`, `DOCKER_HOST`, else the local one),
    /// instead of as a local process.
    pub image: Option<String>,
    /// The user the node runs as: `NAME`, `UID`, `UID:GID` or
    /// `NAME:GROUP` (in the image, for a container; soak's own by
    /// default). Its data directory is given to that user.
    pub user: Option<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The allocator, unless the matrix has an `allocator` axis.
    pub allocator: Option<Profile>,
    pub ready: Ready,
    pub metrics: Option<MetricsSpec>,
    #[serde(default)]
    pub stop: StopSpec,
}

/// A process beside the node. It gets ports and a folder of its own, named
/// after it for every template of the suite: `${KAFKA_PORT}`,
/// `${KAFKA_PORT2}` and `${KAFKA_DIR}` for a service `kafka` (upper case,
/// `-` as `_`). Its output goes to `services/NAME.log` in the cell's
/// folder; it is labelled with the run, as the node is, for `soak cleanup`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServiceSpec {
    /// Letters, digits, `-` and `_`; unique in the suite.
    pub name: String,
    /// The argv, templated; never run through a shell. With `image:`, the
    /// container's command (without one, the image's own).
    #[serde(default)]
    pub command: Vec<String>,
    /// A container image to run it from, on the node's Docker engine (the
    /// host's network, its folder and the cell's mounted at the same path,
    /// labelled for `soak cleanup`), instead of a process.
    pub image: Option<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub ready: Ready,
    #[serde(default)]
    pub stop: StopSpec,
    /// A memory limit of its own (a cgroup beside the node's, no swap);
    /// without one a service has none of soak's.
    pub memory: Option<Size>,
}

impl ServiceSpec {
    /// The variables naming its ports and folder: `${NAME_PORT}`,
    /// `${NAME_PORT2}`, `${NAME_DIR}`.
    pub fn variables(&self) -> [String; 3] {
        service_variables(&self.name)
    }
}

/// The variables of a service called `name`.
pub fn service_variables(name: &str) -> [String; 3] {
    {
        let stem: String = name
            .chars()
            .map(|c| {
                if c == '-' {
                    '_'
                } else {
                    c.to_ascii_uppercase()
                }
            })
            .collect();
        [
            format!("{stem}_PORT"),
            format!("{stem}_PORT2"),
            format!("{stem}_DIR"),
        ]
    }
}

/// How to tell that the node serves; exactly one probe, tried every 50 ms
/// until `timeout`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Ready {
    /// `HOST:PORT` answering a RESP PING (anything but an error).
    pub resp: Option<String>,
    /// `HOST:PORT` accepting a TCP connection.
    pub tcp: Option<String>,
    /// An `http://HOST:PORT/PATH` answering a GET with 2xx (a health
    /// endpoint: Teku's `/eth/v1/node/health`, Spring's `/actuator/health`).
    pub http: Option<String>,
    /// A regex matched by a line the node logs after this start
    /// (`State transition from REBALANCING to RUNNING`).
    pub log: Option<String>,
    /// A command (argv, not run through a shell) that exits 0 when the node
    /// is ready.
    pub exec: Option<Vec<String>>,
    #[serde(default = "default_ready_timeout")]
    pub timeout: Dur,
}

impl Ready {
    /// The probes given, by name.
    pub fn given(&self) -> Vec<&'static str> {
        [
            ("resp", self.resp.is_some()),
            ("tcp", self.tcp.is_some()),
            ("http", self.http.is_some()),
            ("log", self.log.is_some()),
            ("exec", self.exec.is_some()),
        ]
        .into_iter()
        .filter(|(_, g)| *g)
        .map(|(n, _)| n)
        .collect()
    }
}

fn default_ready_timeout() -> Dur {
    Dur(std::time::Duration::from_secs(30))
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MetricsSpec {
    pub prometheus: String,
}

/// A graceful stop: this signal to the node's process group, then SIGKILL
/// after the grace period.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StopSpec {
    #[serde(default = "default_stop_signal")]
    pub signal: Sig,
    #[serde(default = "default_grace")]
    pub grace: Dur,
}

fn default_stop_signal() -> Sig {
    Sig(nix::sys::signal::Signal::SIGTERM)
}
fn default_grace() -> Dur {
    Dur(std::time::Duration::from_secs(10))
}

impl Default for StopSpec {
    fn default() -> Self {
        StopSpec {
            signal: default_stop_signal(),
            grace: default_grace(),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// The hard limit: cgroup v2's `memory.max` (v1 `memory.limit_in_bytes`);
    /// past it the kernel's OOM killer kills the node.
    pub memory: Option<Size>,
    /// cgroup v2's `memory.high`: past it the kernel throttles the node and
    /// reclaims its memory instead of killing it (v2 only).
    pub high: Option<Size>,
    /// Swap on top of `memory` (`0B`: none).
    pub swap: Option<Size>,
    /// Bytes the node's data directory may hold: past them, writes that
    /// would grow it fail with ENOSPC (soak's fault filesystem).
    pub disk: Option<Size>,
}

impl Limits {
    /// Whether the node needs a memory cgroup (a run without one is then
    /// an error of the environment, not a run without limits).
    pub fn need_cgroup(&self) -> bool {
        self.memory.is_some() || self.high.is_some()
    }
}

impl Workload {
    /// The protocols given, by name (a valid suite gives one).
    pub fn protocols(&self) -> Vec<&'static str> {
        [
            ("resp", self.resp.is_some()),
            ("http", self.http.is_some()),
            ("postgres", self.postgres.is_some()),
            ("adapter", self.adapter.is_some()),
        ]
        .into_iter()
        .filter(|(_, g)| *g)
        .map(|(n, _)| n)
        .collect()
    }

    /// The problems of the protocol with the rest of the workload, each
    /// at its path: what the protocol cannot do.
    fn protocol_problems(&self) -> Vec<(String, String)> {
        let mut out = vec![];
        match self.protocols().as_slice() {
            [] => out.push(("workload".into(), "say how the load talks to the node: `resp: { target: 127.0.0.1:${PORT} }`, `http: { url: ..., write: ..., read: ... }`, `postgres: { url: postgres://USER@127.0.0.1:${PORT}/DB }` or `adapter: { command: [...] }`".into())),
            [_] => {}
            many => out.push(("workload".into(), format!("give one protocol, not {}", many.join(" and ")))),
        }
        if let Some(h) = &self.http {
            if self.mix.mget > 0.0 {
                out.push(("workload.mix.mget".into(), "HTTP reads one key a request: set mget to 0 (resp and postgres read many at once)".into()));
            }
            if self.mix.del > 0.0 && h.delete.is_none() {
                out.push(("workload.mix.del".into(), "the mix deletes, and `http` has no `delete` request: add `delete: { method: DELETE, path: ... }`, or set del to 0".into()));
            }
            if self.pipeline.is_some_and(|p| p.0 > 1) {
                out.push(("workload.pipeline".into(), "an HTTP connection has one request in flight (HTTP/1.1): raise `connections` instead".into()));
            }
        }
        if let Some(a) = &self.adapter {
            if a.command.is_empty() {
                out.push(("workload.adapter.command".into(), "the command is empty: give the adapter's argv, e.g. [python3, \"${SUITE_DIR}/adapter.py\"]".into()));
            }
        }
        if self.resp.is_some() && self.value_range().max > 512 << 20 {
            out.push((
                "workload.value_size".into(),
                "values above 512MiB are refused by RESP servers".into(),
            ));
        }
        out
    }

    /// The values' sizes, from `value_size` or `value.size`.
    pub fn value_range(&self) -> SizeRange {
        self.value_size
            .or(self.value.map(|v| v.size))
            .unwrap_or(SizeRange { min: 0, max: 0 })
    }

    /// `None` for `value_size:` (letters, as before `value:` existed).
    pub fn compressibility(&self) -> Option<f64> {
        self.value.map(|v| v.compressibility)
    }
}

/// Values' size and how much of them a codec can remove.
#[derive(Debug, Clone, Copy, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ValueSpec {
    pub size: SizeRange,
    #[serde(default)]
    pub compressibility: f64,
}

/// The load: which protocol it speaks (exactly one of `resp`, `http`,
/// `postgres` and `adapter`), the keys and values it writes, its mix and
/// rate. Every write's outcome is judged by the oracle, whatever the
/// protocol.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// Redis's protocol: `{ target: 127.0.0.1:${PORT} }`.
    pub resp: Option<RespTarget>,
    /// A key-value store behind HTTP requests (etcd's JSON gateway, S3).
    pub http: Option<protocol::HttpSpec>,
    /// A table in a PostgreSQL database.
    pub postgres: Option<protocol::PostgresSpec>,
    /// A program of yours that speaks soak's line protocol on its stdin
    /// and stdout and the node's protocol to the node.
    pub adapter: Option<protocol::AdapterSpec>,
    pub keys: Count,
    /// Which keys the load touches: uniform (default), sequential,
    /// `{ zipfian: 0.99 }`, latest.
    #[serde(default)]
    pub distribution: crate::workload::dist::Distribution,
    /// Fixed (`100B`) or a range (`100B..4KiB`), each value's size drawn
    /// in it. Or `value:`, which also says how compressible values are.
    pub value_size: Option<SizeRange>,
    /// `{ size: 512B, compressibility: 0.5 }`: the share of each value a
    /// general-purpose codec removes (db_bench's `--compression_ratio` is
    /// 1 minus it); 0 (the default) is random bytes no codec shrinks.
    /// (`value_size:` values are letters, which an entropy coder such as
    /// ZSTD shrinks by about 40% and LZ4 or Snappy barely.)
    pub value: Option<ValueSpec>,
    pub mix: Mix,
    /// Operations per second across all connections, scheduled by the
    /// clock; or `max`: each connection keeps `pipeline` requests in flight.
    pub rate: LoadRate,
    /// With `rate: max`, the requests each connection keeps in flight.
    pub pipeline: Option<Count>,
    /// Keys one MGET asks for.
    #[serde(default = "default_mget_keys")]
    pub mget_keys: Count,
    #[serde(default = "default_connections")]
    pub connections: Count,
    /// How long one request may take before it counts as failed (in doubt).
    #[serde(default = "default_timeout")]
    pub timeout: Dur,
    /// After every unclean restart (a kill, a chaos action, an OOM kill, a
    /// crash), read every key back before the load writes again, so that
    /// each death's losses are counted against it. Off for nodes too big to
    /// read back at every death: reads during the load are then the oracle.
    #[serde(default = "default_true")]
    pub readback_after_restart: bool,
    /// What a power cut may take: `strict` (the default: no acknowledged
    /// write), or `unsynced-tail-allowed` (the newest writes of each
    /// connection, as a node that acknowledges before its fsync loses
    /// them; counted as `lost_unsynced`, never a hole).
    #[serde(default)]
    pub durability: Durability,
}

/// `workload.durability`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Durability {
    #[default]
    Strict,
    UnsyncedTailAllowed,
}

fn default_true() -> bool {
    true
}

fn default_mget_keys() -> Count {
    Count(10)
}
fn default_connections() -> Count {
    Count(4)
}
fn default_timeout() -> Dur {
    Dur(std::time::Duration::from_secs(5))
}

pub use protocol::RespTarget;

/// Shares of each operation; they need not add up to 1.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Mix {
    #[serde(default)]
    pub set: f64,
    #[serde(default)]
    pub get: f64,
    #[serde(default)]
    pub del: f64,
    /// Reads of `mget_keys` keys at once.
    #[serde(default)]
    pub mget: f64,
}

/// A suite that cannot be used, with where and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuiteError {
    pub file: PathBuf,
    pub line: usize,
    pub column: usize,
    /// The path of the value at fault, e.g. `phases[2].kill`.
    pub path: String,
    pub message: String,
}

impl fmt::Display for SuiteError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if self.line > 0 {
            write!(f, ":{}:{}", self.line, self.column)?;
        }
        f.write_str(": ")?;
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for SuiteError {}

/// The top-level keys of a suite, for near-miss hints.
const TOP_KEYS: [&str; 10] = [
    "name",
    "description",
    "node",
    "limits",
    "matrix",
    "workload",
    "versions",
    "phases",
    "checks",
    "telemetry",
];

/// Whether `phases` put a fault on the data directory.
/// The disk faults of `phases`, those a chaos schedule may draw among them.
fn disk_faults_in<'a>(phases: &'a [Phase], out: &mut Vec<&'a faults::DiskFault>) {
    // A member's power cut is the same fault on its own data directory.
    static CUT: faults::DiskFault = faults::DiskFault::PowerCut { torn: false };
    let member = |m: &cluster::MemberPhase| m.cuts_power().then_some(&CUT);
    for p in phases {
        match p {
            Phase::Disk(d) => out.push(d),
            Phase::Member(m) => out.extend(member(m)),
            Phase::Chaos(c) => out.extend(c.actions.iter().filter_map(|a| match a {
                ChaosAction::Disk(d) => Some(d),
                ChaosAction::Member(m) => member(m),
                _ => None,
            })),
            Phase::Repeat { phases, .. } => disk_faults_in(phases, out),
            _ => {}
        }
    }
}

/// Whether any phase (inside a `repeat` too) sets network faults, or may
/// as a chaos action.
fn network_faults_in(phases: &[Phase]) -> bool {
    phases.iter().any(|p| match p {
        Phase::Network(_) => true,
        Phase::Chaos(c) => c.on_network(),
        Phase::Repeat { phases, .. } => network_faults_in(phases),
        _ => false,
    })
}

impl Suite {
    /// Whether the load must connect through soak's network proxy.
    pub fn uses_network_faults(&self) -> bool {
        network_faults_in(&self.phases)
    }

    /// Whether the node's data directory must be soak's fault filesystem:
    /// disk faults in the phases (a chaos `power_cut` among them), or a
    /// `limits.disk`.
    pub fn uses_disk_faults(&self) -> bool {
        self.limits.disk.is_some() || !self.disk_faults().is_empty()
    }

    /// The disk faults of the phases (inside `repeat` and chaos
    /// schedules too; a member's power cut as a power cut).
    pub fn disk_faults(&self) -> Vec<&faults::DiskFault> {
        let mut faults = vec![];
        disk_faults_in(&self.phases, &mut faults);
        faults
    }

    /// Whether the kernel may gather the node's writes before they reach
    /// the fault filesystem (its writeback cache): yes unless a fault must
    /// answer the `write()` itself, as a full disk or a failing write does.
    pub fn writes_may_be_cached(&self) -> bool {
        let mut faults = vec![];
        disk_faults_in(&self.phases, &mut faults);
        self.limits.disk.is_none() && faults.iter().all(|f| f.leaves_writes_alone())
    }

    /// Reads and validates a suite file.
    pub fn load(file: &Path) -> Result<Suite, SuiteError> {
        Suite::load_text(file).map(|(suite, _)| suite)
    }

    /// The suite and the text it was read from.
    pub fn load_text(file: &Path) -> Result<(Suite, String), SuiteError> {
        let text = std::fs::read_to_string(file).map_err(|e| SuiteError {
            file: file.to_path_buf(),
            line: 0,
            column: 0,
            path: String::new(),
            message: format!("cannot read the suite: {e}"),
        })?;
        Suite::parse(file, &text).map(|suite| (suite, text))
    }

    pub fn parse(file: &Path, text: &str) -> Result<Suite, SuiteError> {
        let de = serde_norway::Deserializer::from_str(text);
        let suite: Suite = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let path = if path == "." { String::new() } else { path };
            let inner = e.into_inner();
            let (line, column) = inner
                .location()
                .map(|l| (l.line(), l.column()))
                .unwrap_or((0, 0));
            let (deeper, message) = explain_serde(&inner.to_string(), &path);
            // A value that named an item inside itself: point at that item.
            // So does a value whose position the parser lost (an untagged
            // enum buffers it and reports where its map began).
            let (line, column) = match locate::position(text, &deeper) {
                Some(at) if deeper != path || at.0 > line => at,
                _ => (line, column),
            };
            let path = deeper;
            SuiteError {
                file: file.to_path_buf(),
                line,
                column,
                message,
                path,
            }
        })?;
        let problems = suite.check();
        if let Some((path, message)) = problems.into_iter().next() {
            let (line, column) = locate::position(text, &path).unwrap_or((0, 0));
            return Err(SuiteError {
                file: file.to_path_buf(),
                line,
                column,
                path,
                message,
            });
        }
        Ok(suite)
    }

    /// The cells of the suite, in order (one `default` cell without a matrix).
    pub fn cells(&self) -> Vec<CellDef> {
        self.matrix.clone().unwrap_or_default().cells()
    }

    /// Checks that span fields; each problem is (path, message).
    fn check(&self) -> Vec<(String, String)> {
        let mut out = vec![];
        if self.node.command.is_empty() && self.node.image.is_none() {
            out.push(("node.command".into(), "the command is empty: give the node's argv, e.g. [\"${SOAK_NODE}\", \"--port\", \"${PORT}\"], or an `image:` to run as a container".into()));
        }
        for (name, v) in &self.versions {
            match (&v.image, &self.node.image) {
                (Some(_), None) => out.push((format!("versions.{name}.image"), "the node runs as a process: give `node.image` too to run every version as a container, or give this version a `command`".into())),
                (None, None) if v.command.is_empty() => out.push((format!("versions.{name}.command"), "the command is empty: give this version's argv".into())),
                _ => {}
            }
        }
        if let (Some(high), Some(max)) = (self.limits.high, self.limits.memory) {
            if high.0 > max.0 {
                out.push(("limits.high".into(), format!("`high` ({}) is above `memory` ({}): the node would be killed before it is ever throttled; give a `high` below `memory`", crate::units::Bytes(high.0), crate::units::Bytes(max.0))));
            }
        }
        for (i, step) in self.prepare.iter().enumerate() {
            if step.command.is_empty() {
                out.push((format!("prepare[{i}].command"), "the command is empty: give the step's argv, e.g. [\"${SUITE_DIR}/../nodes/netty/build\"]".into()));
            }
            for (j, arg) in step.command.iter().enumerate() {
                if let Err(e) = template::check(arg, PREPARE_VARIABLES) {
                    out.push((format!("prepare[{i}].command[{j}]"), format!("{e} (a prepare step runs once per run, before any cell: cell variables such as ${{PORT}} are not known yet)")));
                }
            }
        }
        out.extend(self.check_ready());
        out.extend(self.check_services());
        out.extend(cluster::problems(self));
        let cells = self.cells();
        if cells.is_empty() {
            out.push((
                "matrix.exclude".into(),
                "every cell of the matrix is excluded".into(),
            ));
        }
        if self.node.allocator.is_some() && cells.iter().any(|c| c.allocator().is_some()) {
            out.push((
                "node.allocator".into(),
                "the matrix has an `allocator` axis too: keep one of them".into(),
            ));
        }
        out.extend(self.check_templates(&cells));
        if let Some(w) = &self.workload {
            out.extend(w.problems());
        }
        let interval = self.telemetry.interval.0;
        if interval < std::time::Duration::from_millis(10)
            || interval > std::time::Duration::from_secs(60)
        {
            out.push((
                "telemetry.interval".into(),
                "the sampling interval must be between 10ms and 60s".into(),
            ));
        }
        if self.phases.is_empty() {
            out.push((
                "phases".into(),
                "a suite needs at least one phase, e.g. `- run: 30s`".into(),
            ));
        }
        // The node starts before the first phase; follow its state through them.
        let mut running = true;
        self.check_phases(&self.phases, "phases", &mut running, &mut out);
        out.extend(self.checks.problems(self));
        out.extend(self.check_expectations());
        out
    }

    /// The node's readiness probe and the URLs it is probed at.
    /// Services: names that make variables, one of each, one probe each;
    /// `service` phases name one of them.
    fn check_services(&self) -> Vec<(String, String)> {
        let mut out = vec![];
        for (i, s) in self.services.iter().enumerate() {
            let at = format!("services[{i}]");
            if s.name.is_empty()
                || !s
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                out.push((format!("{at}.name"), format!("`{}`: a service's name is letters, digits, `-` and `_` (it names its variables, e.g. `${{KAFKA_PORT}}`)", s.name)));
            }
            if self.services[..i].iter().any(|o| o.name == s.name) {
                out.push((
                    format!("{at}.name"),
                    format!("a second service `{}`: give each its own name", s.name),
                ));
            }
            if s.command.is_empty() && s.image.is_none() {
                out.push((
                    format!("{at}.command"),
                    "the command is empty: give the service's argv (or an `image:` to run)".into(),
                ));
            }
            match s.ready.given().as_slice() {
                [] => out.push((format!("{at}.ready"), "say how to tell the service is ready: `tcp: 127.0.0.1:${NAME_PORT}`, `http: ...`, `resp: ...`, `log: REGEX` or `exec: [ARGV]`".into())),
                [_] => {}
                many => out.push((format!("{at}.ready"), format!("give one readiness probe, not {}", many.join(" and ")))),
            }
            if let Some(Err(e)) = s.ready.log.as_deref().map(regex::Regex::new) {
                out.push((format!("{at}.ready.log"), format!("not a regex: {e}")));
            }
        }
        let mut phases = vec![];
        collect_service_phases(&self.phases, "phases", &mut phases);
        for (path, name) in phases {
            if !self.services.iter().any(|s| s.name == *name) {
                let known: Vec<&str> = self.services.iter().map(|s| s.name.as_str()).collect();
                out.push((format!("{path}.service.name"), if known.is_empty() {
                    format!("there is no service `{name}`: describe it under `services:`, e.g. `services: [{{ name: {name}, command: [...], ready: {{ tcp: \"127.0.0.1:${{{}}}\" }} }}]`", service_variables(name)[0])
                } else {
                    format!("there is no service `{name}`{}; services: {}", values::did_you_mean(name, known.iter().copied()), known.join(", "))
                }));
            }
        }
        out
    }

    fn check_ready(&self) -> Vec<(String, String)> {
        let mut out = vec![];
        let ready = &self.node.ready;
        match ready.given().as_slice() {
            [] => out.push(("node.ready".into(), "say how to tell the node is ready: `resp: 127.0.0.1:${PORT}`, `tcp: ...`, `http: http://127.0.0.1:${PORT}/health`, `log: REGEX` or `exec: [ARGV]`".into())),
            [_] => {}
            many => out.push(("node.ready".into(), format!("give one readiness probe, not {}", many.join(" and ")))),
        }
        if let Some(re) = &ready.log {
            if let Err(e) = regex::Regex::new(re) {
                out.push(("node.ready.log".into(), format!("not a regex: {e}")));
            }
        }
        // Templates render later: a URL is checked with its placeholders
        // filled, and said back as the author wrote it.
        let urls = [
            ("node.ready.http", ready.http.as_ref(), "/health"),
            (
                "node.metrics.prometheus",
                self.node.metrics.as_ref().map(|m| &m.prometheus),
                "/metrics",
            ),
        ];
        let placeholder = regex::Regex::new(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}").expect("regex");
        for (field, url, path) in urls {
            let Some(url) = url else { continue };
            let filled = placeholder.replace_all(url, "1");
            if crate::net::http::check_url(&filled).is_err() {
                out.push((field.into(), format!("{url:?}: give a plain http:// URL, e.g. http://127.0.0.1:${{PORT}}{path} (https is not probed)")));
            }
        }
        if ready.exec.as_ref().is_some_and(|a| a.is_empty()) {
            out.push(("node.ready.exec".into(), "the command is empty: give its argv, e.g. [\"redis-cli\", \"-p\", \"${PORT}\", \"ping\"]".into()));
        }
        out
    }

    /// The matrix's `expect:` entries, judged as checks are.
    fn check_expectations(&self) -> Vec<(String, String)> {
        let mut out = vec![];
        // Expectations are checks too, judged the same way; each problem
        // once, at the value or entry that sets it.
        if let Some(m) = &self.matrix {
            let mut expects: Vec<(String, &Checks)> = vec![];
            for (axis, values) in &m.axes {
                for (i, v) in values.iter().enumerate() {
                    if let Some(e) = &v.expect {
                        expects.push((format!("matrix.{axis}[{i}].expect"), e));
                    }
                }
            }
            for (i, inc) in m.include.iter().enumerate() {
                if let Some(e) = &inc.expect {
                    expects.push((format!("matrix.include[{i}].expect"), e));
                }
            }
            for (at, e) in expects {
                for (path, problem) in e.problems(self) {
                    let path = path.strip_prefix("checks").unwrap_or(&path).to_string();
                    out.push((format!("{at}{path}"), problem));
                }
            }
        }
        out
    }

    /// What a phase needs and does not have here: a workload, or a node
    /// that is running.
    fn precondition(&self, p: &Phase, running: bool) -> Option<String> {
        let word = p.word();
        let on_network = match p {
            Phase::Network(_) => true,
            Phase::Chaos(c) => c.on_network(),
            _ => false,
        };
        let needs_load = on_network
            || matches!(
                p,
                Phase::Load | Phase::Run(_) | Phase::Verify | Phase::VerifyOffline
            );
        let needs_running = matches!(
            p,
            Phase::Load
                | Phase::Run(_)
                | Phase::Verify
                | Phase::Kill(_)
                | Phase::Stop
                | Phase::Restart
                | Phase::Pause(_)
                | Phase::Chaos(_)
                | Phase::Disk(crate::suite::faults::DiskFault::PowerCut { .. })
        );
        if needs_load && self.workload.is_none() {
            return Some(if on_network {
                "`network` faults sit between the built-in load and the node: add a `workload:` section".into()
            } else {
                format!("`{word}` needs a workload: add a `workload:` section")
            });
        }
        (needs_running && !running).then(|| format!("the node is not running here (it was stopped or killed before): add `- start` before `{word}`"))
    }

    fn check_phases(
        &self,
        phases: &[Phase],
        at: &str,
        running: &mut bool,
        out: &mut Vec<(String, String)>,
    ) {
        for (i, p) in phases.iter().enumerate() {
            let path = format!("{at}[{i}]");
            let word = p.word();
            if let Some(problem) = self.precondition(p, *running) {
                out.push((path, problem));
                continue;
            }
            if let Some(problem) = cluster::phase_problem(self, p) {
                out.push((path, problem));
                continue;
            }
            match p {
                Phase::Start if *running => out.push((
                    path,
                    "the node is already running here (it starts before the first phase): remove this `start`, or `- stop` before it".into(),
                )),
                Phase::Limit(_) if self.limits.memory.is_none() => out.push((
                    path,
                    "`limit` changes the memory limit, and there is none: set `limits.memory` first".into(),
                )),
                Phase::Exec(e) if e.command.is_empty() => out.push((path, "the command is empty".into())),
                Phase::VerifyOffline if *running => out.push((
                    path,
                    "`verify: offline` opens the node's data directory, and the node is running here: add `- stop` before it".into(),
                )),
                Phase::Upgrade(v)
                | Phase::Downgrade(v)
                | Phase::Member(cluster::MemberPhase {
                    verb: cluster::Verb::Upgrade(v),
                    ..
                }) if v != BASE_VERSION && !self.versions.contains_key(v) => {
                    let known: Vec<&str> = self.versions.keys().map(String::as_str).collect();
                    out.push((
                        format!("{path}.{word}"),
                        if known.is_empty() {
                            format!("there is no version `{v}`: describe it under `versions:`, e.g. `versions: {{ {v}: {{ command: [...] }} }}` (`node` is the node as it starts)")
                        } else {
                            format!(
                                "there is no version `{v}`{}; versions: node, {}",
                                values::did_you_mean(v, known.iter().copied()),
                                known.join(", ")
                            )
                        },
                    ))
                }
                Phase::Chaos(c) if c.every_min > c.during => out.push((
                    path,
                    "`every` is longer than `during`: nothing would happen".into(),
                )),
                Phase::Repeat { phases, .. } => {
                    // Twice through the body shows a body that does not
                    // leave the node as it found it.
                    let sub = format!("{path}.repeat.phases");
                    let before = out.len();
                    self.check_phases(phases, &sub, running, out);
                    if out.len() == before {
                        self.check_phases(phases, &sub, running, out);
                    }
                }
                _ => {}
            }
            match p {
                Phase::Kill(_) | Phase::Stop => *running = false,
                // Either way the node runs after it (a refused downgrade
                // starts the version before again).
                Phase::Start | Phase::Upgrade(_) | Phase::Downgrade(_) => *running = true,
                _ => {}
            }
        }
    }

    /// The node's templated fields, by their paths in the suite.
    fn node_templates(&self) -> Vec<(String, &str)> {
        let mut templated: Vec<(String, &str)> = vec![];
        for (i, a) in self.node.command.iter().enumerate() {
            templated.push((format!("node.command[{i}]"), a));
        }
        for (k, v) in &self.node.env {
            templated.push((format!("node.env.{k}"), v));
        }
        if let Some(r) = &self.node.ready.resp {
            templated.push(("node.ready.resp".into(), r));
        }
        if let Some(t) = &self.node.ready.tcp {
            templated.push(("node.ready.tcp".into(), t));
        }
        if let Some(u) = &self.node.ready.http {
            templated.push(("node.ready.http".into(), u));
        }
        if let Some(re) = &self.node.ready.log {
            templated.push(("node.ready.log".into(), re));
        }
        for (i, a) in self.node.ready.exec.iter().flatten().enumerate() {
            templated.push((format!("node.ready.exec[{i}]"), a));
        }
        if let Some(m) = &self.node.metrics {
            templated.push(("node.metrics.prometheus".into(), &m.prometheus));
        }
        if let Some(image) = &self.node.image {
            templated.push(("node.image".into(), image));
        }
        for (i, s) in self.services.iter().enumerate() {
            let at = format!("services[{i}]");
            for (j, a) in s.command.iter().enumerate() {
                templated.push((format!("{at}.command[{j}]"), a));
            }
            for (k, v) in &s.env {
                templated.push((format!("{at}.env.{k}"), v));
            }
            if let Some(image) = &s.image {
                templated.push((format!("{at}.image"), image));
            }
            let r = &s.ready;
            for (f, v) in [
                ("resp", &r.resp),
                ("tcp", &r.tcp),
                ("http", &r.http),
                ("log", &r.log),
            ] {
                if let Some(v) = v {
                    templated.push((format!("{at}.ready.{f}"), v));
                }
            }
            for (j, a) in r.exec.iter().flatten().enumerate() {
                templated.push((format!("{at}.ready.exec[{j}]"), a));
            }
        }
        templated
    }

    /// Every template must render in every cell.
    fn check_templates(&self, cells: &[CellDef]) -> Vec<(String, String)> {
        let mut templated = self.node_templates();
        // Request templates also hold the key and value placeholders.
        let mut requests: Vec<(String, &str)> = vec![];
        if let Some(w) = &self.workload {
            workload_templates(w, &mut templated, &mut requests);
        }
        for (name, v) in &self.versions {
            if let Some(image) = &v.image {
                templated.push((format!("versions.{name}.image"), image));
            }
            for (i, a) in v.command.iter().enumerate() {
                templated.push((format!("versions.{name}.command[{i}]"), a));
            }
            for (k, x) in &v.env {
                templated.push((format!("versions.{name}.env.{k}"), x));
            }
        }
        let mut execs = vec![];
        collect_execs(&self.phases, "phases", &mut execs);
        for (path, e) in &execs {
            for (j, a) in e.command.iter().enumerate() {
                templated.push((format!("{path}.exec.command[{j}]"), a));
            }
        }
        let service_vars: Vec<String> = self.services.iter().flat_map(|s| s.variables()).collect();
        let mut out = vec![];
        for cell in cells {
            let vars = cell.variables();
            let mut known: Vec<&str> = template::CELL_VARIABLES.to_vec();
            let member_vars = cluster::variables(self.cluster.as_ref());
            known.extend(member_vars.iter().map(String::as_str));
            known.extend(vars.keys().map(String::as_str));
            known.extend(service_vars.iter().map(String::as_str));
            let mut with_keys = known.clone();
            with_keys.extend(crate::protocol::http::PLACEHOLDERS);
            let all = templated
                .iter()
                .map(|(p, t)| (p, *t, &known))
                .chain(requests.iter().map(|(p, t)| (p, *t, &with_keys)));
            for (path, text, known) in all {
                if let Err(e) = template::check(text, known) {
                    if !out.iter().any(|(p, _): &(String, String)| p == path) {
                        let which = if cell.params.is_empty() {
                            String::new()
                        } else {
                            format!(" (in cell {})", cell.id)
                        };
                        out.push((path.clone(), format!("{e}{which}")));
                    }
                }
            }
        }
        out
    }
}

/// The workload's templated fields; the HTTP requests' go to `requests`,
/// where the key and value placeholders are known too.
fn workload_templates<'a>(
    w: &'a Workload,
    templated: &mut Vec<(String, &'a str)>,
    requests: &mut Vec<(String, &'a str)>,
) {
    if let Some(r) = &w.resp {
        templated.push(("workload.resp.target".into(), &r.target));
    }
    if let Some(h) = &w.http {
        templated.push(("workload.http.url".into(), &h.url));
        for (k, v) in &h.headers {
            requests.push((format!("workload.http.headers.{k}"), v));
        }
        let mut each = vec![
            ("write".to_string(), &h.write),
            ("read".to_string(), &h.read),
        ];
        if let Some(d) = &h.delete {
            each.push(("delete".into(), d));
        }
        for (i, s) in h.setup.iter().enumerate() {
            each.push((format!("setup[{i}]"), s));
        }
        for (name, r) in each {
            requests.push((format!("workload.http.{name}.path"), &r.path));
            if let Some(b) = &r.body {
                requests.push((format!("workload.http.{name}.body"), b));
            }
            for (k, v) in &r.headers {
                requests.push((format!("workload.http.{name}.headers.{k}"), v));
            }
        }
    }
    if let Some(p) = &w.postgres {
        templated.push(("workload.postgres.url".into(), &p.url));
    }
    if let Some(a) = &w.adapter {
        for (i, x) in a.command.iter().enumerate() {
            templated.push((format!("workload.adapter.command[{i}]"), x));
        }
        for (k, v) in &a.env {
            templated.push((format!("workload.adapter.env.{k}"), v));
        }
        for (k, v) in &a.params {
            templated.push((format!("workload.adapter.params.{k}"), v));
        }
        if let Some(t) = &a.target {
            templated.push(("workload.adapter.target".into(), t));
        }
    }
}

fn collect_execs<'a>(phases: &'a [Phase], at: &str, out: &mut Vec<(String, &'a ExecSpec)>) {
    for (i, p) in phases.iter().enumerate() {
        match p {
            Phase::Exec(e) => out.push((format!("{at}[{i}]"), e)),
            Phase::Repeat { phases, .. } => {
                collect_execs(phases, &format!("{at}[{i}].repeat.phases"), out)
            }
            _ => {}
        }
    }
}

/// Cleans serde's message: drops the location and the path prefixes that
/// serde_norway adds (both are shown apart), moves an item index that a
/// value's own error names (`allocator[1]: ...`) into the path, and adds a
/// near-miss hint to "unknown field" and a fix to YAML's tab complaint.
fn explain_serde(msg: &str, path: &str) -> (String, String) {
    let mut msg = match msg.find(" at line ") {
        Some(i) => &msg[..i],
        None => msg,
    };
    let mut path = path.to_string();
    // Leading `a.b[2]: ` words, as long as they are a path.
    while let Some((head, rest)) = msg.split_once(": ") {
        if head.is_empty() || head.contains(' ') || head.contains('`') {
            break;
        }
        if !path.starts_with(head) && head.contains('[') {
            // An item of the value at `path`, named by its own error.
            path = if path.is_empty() {
                head.to_string()
            } else {
                format!("{path}.{head}")
            };
        } else if !path.starts_with(head) {
            break;
        }
        msg = rest;
    }
    let mut msg = msg.to_string();
    if let Some(rest) = msg.strip_prefix("unknown field `") {
        if let Some((field, expected)) = rest.split_once('`') {
            let candidates: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
            let candidates = if candidates.is_empty() {
                TOP_KEYS.to_vec()
            } else {
                candidates
            };
            let hint = values::did_you_mean(field, candidates.iter().copied());
            msg = format!("{msg}{hint}");
        }
    }
    if msg.contains("cannot start any token") {
        msg.push_str(" (a tab? YAML indents with spaces only)");
    }
    (path, msg)
}

impl Workload {
    /// What is wrong with the workload's own fields; each (path, message).
    fn problems(&self) -> Vec<(String, String)> {
        let w = self;
        let mut out = vec![];
        let m = w.mix;
        if [m.set, m.get, m.del, m.mget]
            .iter()
            .any(|v| *v < 0.0 || !v.is_finite())
            || m.set + m.get + m.del + m.mget <= 0.0
        {
            out.push((
                "workload.mix".into(),
                "shares must be zero or more and not all zero, e.g. { set: 0.5, get: 0.5 }".into(),
            ));
        }
        if w.keys.0 == 0 || w.keys.0 > u32::MAX as u64 {
            out.push((
                "workload.keys".into(),
                format!("the key space needs between 1 and {} keys", u32::MAX),
            ));
        }
        if let Some(p) = w.distribution.problem() {
            out.push(("workload.distribution".into(), p));
        }
        if w.connections.0 == 0 || w.connections.0 > 1024 {
            out.push((
                "workload.connections".into(),
                "connections must be between 1 and 1024".into(),
            ));
        }
        if w.pipeline.is_some() && w.rate != LoadRate::Max {
            out.push((
                "workload.pipeline".into(),
                "`pipeline` is the closed loop's depth and needs `rate: max`; at a fixed rate, requests go out when they are scheduled".into(),
            ));
        }
        if let Some(p) = w.pipeline {
            if p.0 == 0 || p.0 > 1024 {
                out.push((
                    "workload.pipeline".into(),
                    "pipeline must be between 1 and 1024 requests in flight per connection".into(),
                ));
            }
        }
        if w.mix.mget > 0.0 && (w.mget_keys.0 == 0 || w.mget_keys.0 > 10_000) {
            out.push((
                "workload.mget_keys".into(),
                "an MGET asks for between 1 and 10000 keys".into(),
            ));
        }
        match (&w.value_size, &w.value) {
            (Some(_), Some(_)) => out.push((
                "workload.value".into(),
                "give `value_size` or `value: { size, compressibility }`, not both".into(),
            )),
            (None, None) => out.push((
                "workload".into(),
                "give the values' size: `value_size: 512B`, or `value: { size: 512B, compressibility: 0.5 }`".into(),
            )),
            _ => {}
        }
        if let Some(v) = &w.value {
            if !(0.0..0.99).contains(&v.compressibility) {
                out.push((
                    "workload.value.compressibility".into(),
                    "the share a codec can remove, from 0 (random bytes) to below 0.99, e.g. 0.5"
                        .into(),
                ));
            }
        }
        out.extend(w.protocol_problems());
        out
    }
}

/// The `service` phases, at any depth of `repeat`s, with their paths.
fn collect_service_phases<'a>(phases: &'a [Phase], at: &str, out: &mut Vec<(String, &'a String)>) {
    for (i, p) in phases.iter().enumerate() {
        match p {
            Phase::Service(s) => out.push((format!("{at}[{i}]"), &s.name)),
            Phase::Repeat { phases, .. } => {
                collect_service_phases(phases, &format!("{at}[{i}].repeat.phases"), out)
            }
            _ => {}
        }
    }
}
