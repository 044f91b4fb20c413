//! `soak run`: from a suite to a verdict, a report and an exit code.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicU32};
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::sync::watch;

use crate::analysis;
use crate::chaos::{Cell, CellError, Events};
use crate::driver::cgroup::{self, Cgroup};
use crate::driver::process::{Probe, ProcessNode, Spec};
use crate::driver::DriverError;
use crate::exit;
use crate::report::{
    self, CellResult, CheckResult, Latency, LoadSummary, MemorySummary, Summary, Verdict,
};
use crate::suite::{template, CountCheck, Severity, Suite, SuiteError};
use crate::telemetry::{Sampler, Target};
use crate::verify::Integrity;
use crate::workload::{Engine, LoadConfig};

#[derive(Debug, Clone)]
pub struct RunOptions {
    pub suite: PathBuf,
    pub out: PathBuf,
    pub duration_scale: f64,
    pub seed: Option<u64>,
    /// Sampling interval of the telemetry.
    pub interval: Duration,
}

/// A run that could not produce a verdict.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{0}")]
    Suite(#[from] SuiteError),
    #[error("{0}")]
    Environment(String),
}

impl RunError {
    pub fn exit_code(&self) -> i32 {
        match self {
            RunError::Suite(_) => exit::INVALID,
            RunError::Environment(_) => exit::ENVIRONMENT,
        }
    }
}

/// A free TCP port on the loopback, as the kernel hands them out.
fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// `soak-node` next to the running `soak` (the cargo target folder or an
/// install prefix), else `$SOAK_NODE`, else `soak-node` on the PATH.
pub fn find_soak_node() -> String {
    if let Ok(p) = std::env::var("SOAK_NODE") {
        return p;
    }
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe.parent() {
            for candidate in [dir.join("soak-node"), dir.join("../soak-node")] {
                if candidate.is_file() {
                    return candidate.to_string_lossy().into_owned();
                }
            }
        }
    }
    "soak-node".into()
}

fn check_count(name: &str, c: Option<CountCheck>, value: u64) -> Option<CheckResult> {
    let c = c?;
    let ok = value <= c.max;
    Some(CheckResult {
        name: name.into(),
        verdict: match (ok, c.severity) {
            (true, _) => Verdict::Pass,
            (false, Severity::Fail) => Verdict::Fail,
            (false, Severity::Warn) => Verdict::Warn,
        },
        value: value.into(),
        limit: c.max.into(),
        unit: "count".into(),
    })
}

static RUN_ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The id of the run this process is running, once it has one.
pub fn current_run_id() -> Option<String> {
    RUN_ID.get().cloned()
}

/// A short random id that names the run's folder and its cgroups.
pub fn new_run_id() -> String {
    format!("{:06x}", rand::rng().random::<u32>() & 0xFF_FFFF)
}

/// Runs a whole suite. `interrupt` turns true when the user asks to stop:
/// the run then stops its phases, cleans up and still writes the report.
pub async fn run(
    opts: &RunOptions,
    interrupt: watch::Receiver<bool>,
) -> Result<(Summary, PathBuf), RunError> {
    let suite = Suite::load(&opts.suite)?;
    let run_id = RUN_ID.get_or_init(new_run_id).clone();
    let started = chrono::Utc::now();
    let dir = opts
        .out
        .join(&suite.name)
        .join(format!("{}-{run_id}", started.format("%Y%m%dT%H%M%SZ")));
    std::fs::create_dir_all(&dir)
        .map_err(|e| RunError::Environment(format!("cannot create {}: {e}", dir.display())))?;
    let origin = tokio::time::Instant::now();
    let seed = opts.seed.unwrap_or_else(|| rand::rng().random());
    eprintln!(
        "soak: running {} ({}), report in {}",
        suite.name,
        opts.suite.display(),
        dir.display()
    );

    let cell = run_cell(&suite, opts, &run_id, "default", 0, &dir, seed, interrupt).await;
    let (cell, chart) = match cell {
        Ok(c) => c,
        Err(e) => {
            // An environment failure before the cell ran: still leave a report.
            let summary = summary_of(
                &suite,
                opts,
                &run_id,
                started,
                origin,
                vec![error_cell("default", &e)],
            );
            let _ = report::write_all(&dir, &summary, &BTreeMap::new());
            return Err(e);
        }
    };
    let mut charts = BTreeMap::new();
    charts.insert(cell.id.clone(), chart);
    let summary = summary_of(&suite, opts, &run_id, started, origin, vec![cell]);
    report::write_all(&dir, &summary, &charts).map_err(|e| {
        RunError::Environment(format!("cannot write the report in {}: {e}", dir.display()))
    })?;
    Ok((summary, dir))
}

fn error_cell(id: &str, e: &RunError) -> CellResult {
    CellResult {
        id: id.into(),
        params: BTreeMap::new(),
        verdict: Verdict::Error,
        error: Some(e.to_string()),
        checks: vec![],
        integrity: Integrity::default(),
        memory: MemorySummary::default(),
        restarts: vec![],
        load: None,
        phases: vec![],
        files: BTreeMap::new(),
    }
}

fn summary_of(
    suite: &Suite,
    opts: &RunOptions,
    run_id: &str,
    started: chrono::DateTime<chrono::Utc>,
    origin: tokio::time::Instant,
    cells: Vec<CellResult>,
) -> Summary {
    let verdict = if cells.iter().any(|c| c.verdict == Verdict::Error) {
        Verdict::Error
    } else if cells.iter().any(|c| c.verdict == Verdict::Fail) {
        Verdict::Fail
    } else {
        Verdict::Pass
    };
    Summary {
        schema_version: report::SCHEMA_VERSION,
        suite: suite.name.clone(),
        description: suite.description.clone(),
        verdict,
        run_id: run_id.into(),
        started_at: started.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        duration_s: origin.elapsed().as_secs_f64(),
        suite_file: opts.suite.display().to_string(),
        soak_version: env!("CARGO_PKG_VERSION").into(),
        cells,
    }
}

fn render(text: &str, vars: &BTreeMap<String, String>) -> Result<String, RunError> {
    template::render(text, vars).map_err(RunError::Environment)
}

#[allow(clippy::too_many_arguments)]
async fn run_cell(
    suite: &Suite,
    opts: &RunOptions,
    run_id: &str,
    id: &str,
    index: usize,
    run_dir: &Path,
    seed: u64,
    interrupt: watch::Receiver<bool>,
) -> Result<(CellResult, Vec<(f64, u64)>), RunError> {
    let env_err = |what: &str, e: std::io::Error| RunError::Environment(format!("{what}: {e}"));
    let cell_dir = run_dir.join("cells").join(id);
    let data_dir = cell_dir.join("data");
    std::fs::create_dir_all(&data_dir).map_err(|e| env_err("cannot create the cell folder", e))?;
    let cell_dir = cell_dir
        .canonicalize()
        .map_err(|e| env_err("cell folder", e))?;
    let data_dir = cell_dir.join("data");

    let mut vars = BTreeMap::new();
    vars.insert(
        "PORT".to_string(),
        free_port()
            .map_err(|e| env_err("no free port", e))?
            .to_string(),
    );
    vars.insert(
        "METRICS_PORT".to_string(),
        free_port()
            .map_err(|e| env_err("no free port", e))?
            .to_string(),
    );
    vars.insert("DATA_DIR".to_string(), data_dir.display().to_string());
    vars.insert("CELL_DIR".to_string(), cell_dir.display().to_string());
    vars.insert("SOAK_NODE".to_string(), find_soak_node());

    let argv = suite
        .node
        .command
        .iter()
        .map(|a| render(a, &vars))
        .collect::<Result<Vec<_>, _>>()?;
    let mut env: Vec<(String, String)> = suite
        .node
        .env
        .iter()
        .map(|(k, v)| Ok((k.clone(), render(v, &vars)?)))
        .collect::<Result<_, RunError>>()?;
    // The label `soak cleanup` finds the node's processes by.
    env.push(("SOAK_RUN_ID".into(), run_id.into()));
    let probe = match (&suite.node.ready.resp, &suite.node.ready.tcp) {
        (Some(r), _) => Probe::Resp(render(r, &vars)?),
        (_, Some(t)) => Probe::Tcp(render(t, &vars)?),
        _ => unreachable!("validated: one probe"),
    };
    let log = cell_dir.join("node.log");
    let spec = Spec {
        argv,
        env,
        probe,
        ready_timeout: suite.node.ready.timeout.0,
        stop_signal: suite.node.stop.signal.0,
        grace: suite.node.stop.grace.0,
        log: log.clone(),
    };

    // The cgroup: required for a memory limit; otherwise used when it can be.
    let memory_limit = suite.limits.memory.map(|s| s.0);
    let cgroup_name = format!("{}{run_id}-{index}", cgroup::PREFIX);
    let cg = match cgroup::detect() {
        Ok(h) => match Cgroup::create(
            &h,
            &cgroup_name,
            memory_limit,
            suite.limits.swap.map(|s| s.0),
        ) {
            Ok(cg) => Some(cg),
            Err(e) if memory_limit.is_some() => {
                return Err(RunError::Environment(format!(
                    "limits.memory needs a cgroup: {e}"
                )))
            }
            Err(_) => None,
        },
        Err(e) if memory_limit.is_some() => {
            return Err(RunError::Environment(format!(
                "limits.memory needs a cgroup: {e}"
            )))
        }
        Err(_) => None,
    };
    let cg_view = cg.as_ref().map(|c| Arc::new(c.view()));
    let mut node = ProcessNode::new(spec, cg);

    let origin = tokio::time::Instant::now();
    let mut events = Events::create(&cell_dir.join("events.jsonl"), id, origin)
        .map_err(|e| env_err("events file", e))?;
    events.emit(
        "cell",
        format!(
            "seed {seed}, cgroup {}",
            cg_view
                .as_ref()
                .map(|c| c.path.display().to_string())
                .unwrap_or_else(|| "none".into())
        ),
    );
    let target = Target {
        pid: Arc::new(AtomicI32::new(0)),
        segment: Arc::new(AtomicU32::new(0)),
        cgroup: cg_view.clone(),
    };
    let mut engine = match &suite.workload {
        Some(w) => Some(Engine::new(LoadConfig {
            target: render(&w.resp.target, &vars)?,
            keys: w.keys.0 as usize,
            value_size: w.value_size.0 as usize,
            set: w.mix.set,
            get: w.mix.get,
            del: w.mix.del,
            rate: w.rate.0,
            connections: w.connections.0 as usize,
            timeout: w.timeout.0,
            seed,
        })),
        None => None,
    };
    let verify_target = engine
        .as_ref()
        .map(|e| e.cfg.target.clone())
        .unwrap_or_default();

    let sampler = Sampler::start(
        target.clone(),
        opts.interval,
        cell_dir.join("samples.csv"),
        origin,
    )
    .map_err(|e| env_err("samples file", e))?;
    let mut cell = Cell::new(
        &mut node,
        engine.as_mut(),
        target,
        &mut events,
        verify_target,
        interrupt,
    );
    let outcome = match cell.first_start().await {
        Ok(()) => cell.run_phases(&suite.phases, opts.duration_scale).await,
        Err(e) => Err(e),
    };
    cell.finish().await;
    let (restarts, integrity_found, phases) = (
        std::mem::take(&mut cell.restarts),
        cell.integrity,
        std::mem::take(&mut cell.phases),
    );
    drop(cell);
    let samples = sampler.stop().await;
    let oom_kills = cg_view.as_ref().map(|c| c.oom_kills()).unwrap_or(0);
    node.shutdown();

    // A node that never got ready is the environment's failure (exit 3).
    if let Err(CellError::Driver(
        e @ (DriverError::NeverReady { .. }
        | DriverError::ExitedBeforeReady { .. }
        | DriverError::Spawn { .. }
        | DriverError::Cgroup(_)),
    )) = &outcome
    {
        if restarts.is_empty() {
            events.emit("error", e.to_string());
            return Err(RunError::Environment(e.to_string()));
        }
    }

    let load = engine.as_ref().map(|e| e.stats());
    let mut integrity = integrity_found;
    integrity.acknowledged = load.as_ref().map(|l| l.acknowledged_writes()).unwrap_or(0);
    integrity.corrupted += load.as_ref().map(|l| l.corrupted_reads).unwrap_or(0);

    let warmup = suite
        .checks
        .memory_growth
        .as_ref()
        .map(|g| g.warmup.0.as_secs_f64() * opts.duration_scale)
        .unwrap_or(10.0);
    let memory = MemorySummary {
        peak_rss_bytes: samples.iter().map(|s| s.rss).max().unwrap_or(0),
        peak_cgroup_bytes: samples.iter().map(|s| s.cgroup).max().unwrap_or(0),
        limit_bytes: memory_limit,
        slope_bytes_per_hour: analysis::growth_per_hour(&samples, |s| s.rss, warmup),
        cgroup_slope_bytes_per_hour: analysis::growth_per_hour(&samples, |s| s.cgroup, warmup),
        oom_kills,
        samples: samples.len(),
    };

    let c = &suite.checks;
    let mut checks: Vec<CheckResult> = [
        check_count(
            "lost_writes",
            c.lost_writes,
            integrity.lost + integrity.resurrected,
        ),
        check_count("corrupted_writes", c.corrupted_writes, integrity.corrupted),
        check_count("oom_kills", c.oom_kills, oom_kills),
    ]
    .into_iter()
    .flatten()
    .collect();
    if let Some(g) = &c.memory_growth {
        let slope = match g.series {
            crate::suite::Series::Rss => memory.slope_bytes_per_hour,
            crate::suite::Series::Cgroup => memory.cgroup_slope_bytes_per_hour,
        };
        let verdict = match slope {
            Some(s) if s > g.max.0 => match g.severity {
                Severity::Fail => Verdict::Fail,
                Severity::Warn => Verdict::Warn,
            },
            _ => Verdict::Pass,
        };
        checks.push(CheckResult {
            name: format!(
                "memory_growth ({})",
                serde_json::to_value(g.series)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from))
                    .unwrap_or_default()
            ),
            verdict,
            value: slope
                .map(serde_json::Value::from)
                .unwrap_or(serde_json::Value::Null),
            limit: g.max.0.into(),
            unit: "bytes/h".into(),
        });
    }

    let error = match &outcome {
        Err(e) => Some(e.to_string()),
        Ok(()) => None,
    };
    let verdict = if error.is_some() {
        Verdict::Error
    } else if checks.iter().any(|c| c.verdict == Verdict::Fail) {
        Verdict::Fail
    } else {
        Verdict::Pass
    };
    events.emit("verdict", verdict.as_str());

    let load = load.map(|l| LoadSummary {
        active_s: l.active_s,
        sets: l.sets_ok,
        gets: l.gets_ok,
        dels: l.dels_ok,
        errors: l.errors,
        unavailable: l.unavailable,
        corrupted_reads: l.corrupted_reads,
        ops_per_s: if l.active_s > 0.0 {
            l.ops_ok() as f64 / l.active_s
        } else {
            0.0
        },
        latency_us: Latency {
            p50: l.latency_us.value_at_quantile(0.5),
            p90: l.latency_us.value_at_quantile(0.9),
            p99: l.latency_us.value_at_quantile(0.99),
            p999: l.latency_us.value_at_quantile(0.999),
            max: l.latency_us.max(),
        },
    });
    let rel = |name: &str| format!("cells/{id}/{name}");
    let files = ["node.log", "samples.csv", "events.jsonl"]
        .iter()
        .map(|f| (f.to_string(), rel(f)))
        .collect();
    let chart = samples.iter().map(|s| (s.t, s.rss)).collect();
    Ok((
        CellResult {
            id: id.into(),
            params: BTreeMap::new(),
            verdict,
            error,
            checks,
            integrity,
            memory,
            restarts,
            load,
            phases,
            files,
        },
        chart,
    ))
}
