//! Suites: the YAML model, units, templates and validation.
//!
//! A suite is read in two passes. serde reads the YAML into the typed model
//! below; every value type checks itself while it is read, so a bad unit or
//! an unknown signal is reported with its line, column and path. A second
//! pass checks what spans several fields (templates, the order of phases, a
//! verify phase without a workload) and finds the line of the path it blames
//! with [`locate`].

pub mod locate;
pub mod template;
pub mod values;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

pub use values::{Count, Dur, GrowthRate, Rate, Sig, Size};

/// A whole suite, as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Suite {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub node: NodeSpec,
    #[serde(default)]
    pub limits: Limits,
    pub workload: Option<Workload>,
    pub phases: Vec<Phase>,
    #[serde(default)]
    pub checks: Checks,
}

/// The system under test: any process that serves the workload's protocol.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    /// The argv, templated; never run through a shell.
    pub command: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub ready: Ready,
    pub metrics: Option<MetricsSpec>,
    #[serde(default)]
    pub stop: StopSpec,
}

/// How to tell that the node serves: a RESP PING answered, or a TCP connect.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ready {
    pub resp: Option<String>,
    pub tcp: Option<String>,
    #[serde(default = "default_ready_timeout")]
    pub timeout: Dur,
}

fn default_ready_timeout() -> Dur {
    Dur(std::time::Duration::from_secs(30))
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsSpec {
    pub prometheus: String,
}

/// A graceful stop: this signal to the node's process group, then SIGKILL
/// after the grace period.
#[derive(Debug, Clone, Deserialize)]
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

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    pub memory: Option<Size>,
    pub swap: Option<Size>,
}

/// The built-in RESP load.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    pub resp: RespTarget,
    pub keys: Count,
    pub value_size: Size,
    pub mix: Mix,
    pub rate: Rate,
    #[serde(default = "default_connections")]
    pub connections: Count,
    /// How long one request may take before it counts as failed (in doubt).
    #[serde(default = "default_timeout")]
    pub timeout: Dur,
}

fn default_connections() -> Count {
    Count(4)
}
fn default_timeout() -> Dur {
    Dur(std::time::Duration::from_secs(5))
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RespTarget {
    pub target: String,
}

/// Shares of each operation; they need not add up to 1.
#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Mix {
    #[serde(default)]
    pub set: f64,
    #[serde(default)]
    pub get: f64,
    #[serde(default)]
    pub del: f64,
}

/// One step of a suite.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Drive the workload for this long.
    Run(#[serde(serialize_with = "ser_dur")] std::time::Duration),
    /// Send a signal to the node's process group and wait for it to die.
    Kill(Sig),
    /// Start the node again and wait until it is ready.
    Start,
    /// Stop the node gracefully (the suite's stop signal, then SIGKILL).
    Stop,
    /// Read back every key the ledger knows and classify it.
    Verify,
}

fn ser_dur<S: serde::Serializer>(d: &std::time::Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

pub const PHASES: [&str; 5] = ["run", "kill", "start", "stop", "verify"];

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Phase::Run(d) => write!(f, "run {}", crate::report::human_duration(*d)),
            Phase::Kill(s) => write!(f, "kill {s}"),
            Phase::Start => f.write_str("start"),
            Phase::Stop => f.write_str("stop"),
            Phase::Verify => f.write_str("verify"),
        }
    }
}

/// A phase is a bare word (`start`, `kill`) or a one-key map (`run: 20s`,
/// `kill: SIGTERM`), read by hand so that each form gets its own message.
impl<'de> Deserialize<'de> for Phase {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Phase;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(
                    f,
                    "a phase: one of {} (e.g. `- run: 20s` or `- start`)",
                    PHASES.join(", ")
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Phase, E> {
                match v {
                    "start" => Ok(Phase::Start),
                    "stop" => Ok(Phase::Stop),
                    "verify" => Ok(Phase::Verify),
                    "kill" => Ok(Phase::Kill(Sig(nix::sys::signal::Signal::SIGKILL))),
                    "run" => Err(E::custom("`run` needs a duration: write `- run: 30s`")),
                    other => Err(E::custom(format!(
                        "unknown phase `{other}`{}; phases: {}",
                        values::did_you_mean(other, PHASES),
                        PHASES.join(", ")
                    ))),
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Phase, A::Error> {
                let Some(key) = map.next_key::<String>()? else {
                    return Err(de::Error::custom(
                        "an empty map is not a phase: write e.g. `- run: 30s`",
                    ));
                };
                let phase = match key.as_str() {
                    "run" => Phase::Run(map.next_value::<Dur>()?.0),
                    "kill" => Phase::Kill(map.next_value::<Sig>()?),
                    "verify" => {
                        let what: String = map.next_value()?;
                        if what != "acknowledged-writes" {
                            return Err(de::Error::custom(format!(
                                "`verify: {what}`: the only verification is `acknowledged-writes` (or a bare `- verify`)"
                            )));
                        }
                        Phase::Verify
                    }
                    "start" | "stop" => {
                        return Err(de::Error::custom(format!(
                            "`{key}` takes no value: write `- {key}`"
                        )))
                    }
                    other => {
                        return Err(de::Error::custom(format!(
                            "unknown phase `{other}`{}; phases: {}",
                            values::did_you_mean(other, PHASES),
                            PHASES.join(", ")
                        )))
                    }
                };
                if let Some(extra) = map.next_key::<String>()? {
                    return Err(de::Error::custom(format!(
                        "one phase per list item: `{extra}` must start its own `- {extra}: ...` line"
                    )));
                }
                Ok(phase)
            }
        }
        d.deserialize_any(V)
    }
}

/// What a check does when its limit is exceeded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    #[default]
    Fail,
    Warn,
}

/// A count limit: `lost_writes: 0` or `lost_writes: { max: 0, severity: warn }`.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct CountCheck {
    pub max: u64,
    pub severity: Severity,
}

impl<'de> Deserialize<'de> for CountCheck {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // A bare number or a map, each read with its own message.
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Full {
            max: Count,
            #[serde(default)]
            severity: Severity,
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = CountCheck;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a limit such as 0, or { max: 0, severity: warn }")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<CountCheck, E> {
                Ok(CountCheck {
                    max: v,
                    severity: Severity::Fail,
                })
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<CountCheck, E> {
                u64::try_from(v)
                    .map(|max| CountCheck {
                        max,
                        severity: Severity::Fail,
                    })
                    .map_err(|_| E::custom("a limit cannot be negative"))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<CountCheck, E> {
                let n: String = v.chars().filter(|c| *c != '_').collect();
                n.parse()
                    .map(|max| CountCheck {
                        max,
                        severity: Severity::Fail,
                    })
                    .map_err(|_| E::custom(format!("{v:?} is not a whole number")))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<CountCheck, A::Error> {
                let f = Full::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(CountCheck {
                    max: f.max.0,
                    severity: f.severity,
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// Which memory series a growth check reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Series {
    /// Resident set size of the node's whole process tree.
    #[default]
    Rss,
    /// The node's cgroup memory usage (includes page cache).
    Cgroup,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GrowthCheck {
    /// The largest acceptable slope, e.g. `20MiB/h`.
    pub max: GrowthRate,
    #[serde(default)]
    pub series: Series,
    /// Samples this soon after each (re)start are left out of the slope.
    #[serde(default = "default_warmup", skip_serializing)]
    pub warmup: Dur,
    #[serde(default)]
    pub severity: Severity,
}

fn default_warmup() -> Dur {
    Dur(std::time::Duration::from_secs(10))
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checks {
    pub lost_writes: Option<CountCheck>,
    pub corrupted_writes: Option<CountCheck>,
    pub oom_kills: Option<CountCheck>,
    pub memory_growth: Option<GrowthCheck>,
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
const TOP_KEYS: [&str; 7] = [
    "name",
    "description",
    "node",
    "limits",
    "workload",
    "phases",
    "checks",
];

impl Suite {
    /// Reads and validates a suite file.
    pub fn load(file: &Path) -> Result<Suite, SuiteError> {
        let text = std::fs::read_to_string(file).map_err(|e| SuiteError {
            file: file.to_path_buf(),
            line: 0,
            column: 0,
            path: String::new(),
            message: format!("cannot read the suite: {e}"),
        })?;
        Suite::parse(file, &text)
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
            SuiteError {
                file: file.to_path_buf(),
                line,
                column,
                message: explain_serde(&inner.to_string(), &path),
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

    /// Checks that span fields; each problem is (path, message).
    fn check(&self) -> Vec<(String, String)> {
        let mut out = vec![];
        if self.node.command.is_empty() {
            out.push(("node.command".into(), "the command is empty: give the node's argv, e.g. [\"${SOAK_NODE}\", \"--port\", \"${PORT}\"]".into()));
        }
        match (&self.node.ready.resp, &self.node.ready.tcp) {
            (None, None) => out.push(("node.ready".into(), "say how to tell the node is ready: `resp: 127.0.0.1:${PORT}` or `tcp: 127.0.0.1:${PORT}`".into())),
            (Some(_), Some(_)) => out.push(("node.ready".into(), "give one readiness probe, `resp` or `tcp`, not both".into())),
            _ => {}
        }
        let vars = template::CELL_VARIABLES;
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
        if let Some(m) = &self.node.metrics {
            templated.push(("node.metrics.prometheus".into(), &m.prometheus));
        }
        if let Some(w) = &self.workload {
            templated.push(("workload.resp.target".into(), &w.resp.target));
        }
        for (path, text) in templated {
            if let Err(e) = template::check(text, vars) {
                out.push((path, e));
            }
        }
        if let Some(w) = &self.workload {
            let m = w.mix;
            if [m.set, m.get, m.del]
                .iter()
                .any(|v| *v < 0.0 || !v.is_finite())
                || m.set + m.get + m.del <= 0.0
            {
                out.push((
                    "workload.mix".into(),
                    "shares must be zero or more and not all zero, e.g. { set: 0.5, get: 0.5 }"
                        .into(),
                ));
            }
            if w.keys.0 == 0 {
                out.push((
                    "workload.keys".into(),
                    "the key space needs at least 1 key".into(),
                ));
            }
            if w.connections.0 == 0 || w.connections.0 > 1024 {
                out.push((
                    "workload.connections".into(),
                    "connections must be between 1 and 1024".into(),
                ));
            }
            if w.keys.0 > u32::MAX as u64 {
                out.push(("workload.keys".into(), format!("at most {} keys", u32::MAX)));
            }
        }
        if self.phases.is_empty() {
            out.push((
                "phases".into(),
                "a suite needs at least one phase, e.g. `- run: 30s`".into(),
            ));
        }
        // The node starts before the first phase; follow its state through them.
        let mut running = true;
        for (i, p) in self.phases.iter().enumerate() {
            let path = format!("phases[{i}]");
            match p {
                Phase::Run(_) | Phase::Verify if self.workload.is_none() => out.push((
                    path,
                    format!("`{}` needs a workload: add a `workload:` section", phase_word(p)),
                )),
                Phase::Run(_) | Phase::Verify | Phase::Kill(_) | Phase::Stop if !running => out.push((
                    path,
                    format!("the node is not running here (it was stopped or killed before): add `- start` before `{}`", phase_word(p)),
                )),
                Phase::Start if running => out.push((
                    path,
                    "the node is already running here (it starts before the first phase): remove this `start` or put `- stop` before it".into(),
                )),
                _ => {}
            }
            match p {
                Phase::Kill(_) | Phase::Stop => running = false,
                Phase::Start => running = true,
                _ => {}
            }
        }
        out
    }
}

fn phase_word(p: &Phase) -> &'static str {
    match p {
        Phase::Run(_) => "run",
        Phase::Kill(_) => "kill",
        Phase::Start => "start",
        Phase::Stop => "stop",
        Phase::Verify => "verify",
    }
}

/// Adds a near-miss hint to serde's "unknown field" messages.
fn explain_serde(msg: &str, path: &str) -> String {
    // serde_norway appends " at line L column C"; the location is shown apart.
    let msg = match msg.find(" at line ") {
        Some(i) => &msg[..i],
        None => msg,
    };
    let msg = msg.trim_start_matches(&format!("{path}: ")).to_string();
    if let Some(rest) = msg.strip_prefix("unknown field `") {
        if let Some((field, expected)) = rest.split_once('`') {
            let candidates: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
            let candidates = if candidates.is_empty() {
                TOP_KEYS.to_vec()
            } else {
                candidates
            };
            let hint = values::did_you_mean(field, candidates.iter().copied());
            return format!("{msg}{hint}");
        }
    }
    msg
}
