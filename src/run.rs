//! `soak run`: from a suite to a verdict, a report and an exit code.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicU32};
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::sync::watch;

use crate::analysis;
use crate::chaos::{Cell, CellError, Context, Events};
use crate::driver::allocator;
use crate::driver::cgroup;
use crate::driver::process::{Probe, ProcessNode, Spec};
use crate::driver::DriverError;
use crate::exit;
use crate::report::{self, CellResult, CheckResult, LoadSummary, MemorySummary, Summary, Verdict};
use crate::suite::checks::Series;
use crate::suite::LoadRate;
use crate::suite::{matrix, template, CellDef, CountCheck, Severity, Suite, SuiteError};
use crate::telemetry::{prometheus, Sample, Sampler, Scraper, Target};
use crate::verify::Integrity;
use crate::workload::{Engine, LoadConfig, LoadStats};

/// What `soak run` takes: the command line is this struct.
#[derive(Debug, Clone, clap::Args)]
pub struct RunOptions {
    pub suite: PathBuf,
    /// Folder for reports (reports/<suite>/<UTC time>-<id>/ inside it).
    #[arg(long, default_value = "reports")]
    pub out: PathBuf,
    /// Multiply every phase duration by F, for a quick trial (e.g. 0.1).
    #[arg(long, default_value_t = 1.0, value_parser = crate::cli::positive)]
    pub duration_scale: f64,
    /// Seed of the workload's and the chaos schedules' random choices;
    /// recorded in the report, so that a run can be replayed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Telemetry sampling interval (100ms to 60s); overrides the suite's
    /// `telemetry.interval` (default 1s).
    #[arg(long, value_parser = crate::cli::interval)]
    pub interval: Option<Duration>,
    /// Run only the cells whose id matches: a glob (`allocator=je*`), or
    /// without `*?[`, a part of the id (`storage=small`).
    #[arg(long, value_name = "PATTERN")]
    pub only: Option<String>,
    /// Run shard I of N: cell j (in suite order) runs on shard j % N + 1.
    #[arg(long, value_name = "I/N", value_parser = crate::suite::matrix::parse_shard)]
    pub shard: Option<(usize, usize)>,
}

/// A run that could not produce a verdict.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{0}")]
    Suite(#[from] SuiteError),
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Environment(String),
}

impl RunError {
    pub fn exit_code(&self) -> i32 {
        match self {
            RunError::Suite(_) | RunError::Usage(_) => exit::INVALID,
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

/// What `${SOAK_NODE}` names: `$SOAK_NODE` when set; else soak itself,
/// through a link named `soak-node` in the run's folder (soak answers to
/// that name as the reference node: see `src/bin/soak.rs`), so the node is
/// always the one built with this soak and `cargo run --bin soak` is all a
/// fresh clone needs; without the built-in node (`--no-default-features`),
/// the `soak-node` beside soak or on the PATH.
pub fn soak_node(run_dir: &Path) -> Result<String, RunError> {
    if let Ok(p) = std::env::var("SOAK_NODE") {
        return Ok(p);
    }
    if cfg!(feature = "node") {
        let exe = std::env::current_exe().map_err(|e| {
            RunError::Environment(format!("cannot find soak's own executable: {e}"))
        })?;
        let run_dir = run_dir
            .canonicalize()
            .unwrap_or_else(|_| run_dir.to_path_buf());
        let link = run_dir.join("bin").join(crate::cli::NODE_NAME);
        if std::fs::read_link(&link).ok().as_deref() != Some(exe.as_path()) {
            let made = std::fs::create_dir_all(run_dir.join("bin"))
                .and_then(|()| std::os::unix::fs::symlink(&exe, &link));
            made.map_err(|e| {
                RunError::Environment(format!(
                    "cannot link {} to {}: {e}",
                    link.display(),
                    exe.display()
                ))
            })?;
        }
        return Ok(link.display().to_string());
    }
    if let Some(beside) = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join(crate::cli::NODE_NAME)))
        .filter(|p| p.is_file())
    {
        return Ok(beside.display().to_string());
    }
    Ok(crate::cli::NODE_NAME.into())
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

/// The cells this invocation runs, after `--only` and `--shard`.
pub fn select_cells(suite: &Suite, opts: &RunOptions) -> Result<Vec<CellDef>, RunError> {
    let mut cells = suite.cells();
    let all = cells.len();
    if let Some(p) = &opts.only {
        cells = matrix::only(cells, p);
        if cells.is_empty() {
            let ids: Vec<String> = suite.cells().into_iter().map(|c| c.id).collect();
            return Err(RunError::Usage(format!(
                "--only {p:?} matches none of the {all} cells: {}",
                ids.join(" ")
            )));
        }
    }
    if let Some((i, n)) = opts.shard {
        cells = matrix::shard(cells, i, n);
    }
    Ok(cells)
}

/// Runs a whole suite. `interrupt` turns true when the user asks to stop:
/// the run then stops its phases, cleans up and still writes the report.
pub async fn run(
    opts: &RunOptions,
    interrupt: watch::Receiver<bool>,
) -> Result<(Summary, PathBuf), RunError> {
    let suite = Suite::load(&opts.suite)?;
    let cells = select_cells(&suite, opts)?;
    let run_id = RUN_ID.get_or_init(new_run_id).clone();
    // Held while this run lives: `soak cleanup` in another shell leaves
    // this run alone.
    let _lock = crate::cleanup::lock_run(&run_id).map_err(|e| {
        RunError::Environment(format!(
            "cannot take the run's lock in {}: {e}",
            crate::cleanup::lock_dir().display()
        ))
    })?;
    // Where the nodes' cgroups go: decided once, before anything is made,
    // and undone when the run ends (see `driver::cgroup::place`). Without
    // a limit, a node runs without a cgroup where soak may make none.
    let placement = match cgroup::place::place(&run_id) {
        Ok(p) => Some(p),
        Err(e) if suite.limits.need_cgroup() => {
            return Err(RunError::Environment(format!(
                "limits.memory needs a memory cgroup: {e}"
            )))
        }
        Err(_) => None,
    };
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
        "soak: running {} ({}, {} cell{}, seed {seed}), report in {}",
        suite.name,
        opts.suite.display(),
        cells.len(),
        if cells.len() == 1 { "" } else { "s" },
        dir.display()
    );

    let mut results = vec![];
    let mut charts = BTreeMap::new();
    let mut env_error = None;
    for (index, cell) in cells.iter().enumerate() {
        if *interrupt.borrow() {
            break;
        }
        match run_cell(
            &suite,
            opts,
            placement.as_ref(),
            &run_id,
            cell,
            index,
            &dir,
            seed,
            interrupt.clone(),
        )
        .await
        {
            Ok((result, chart)) => {
                charts.insert(result.id.clone(), chart);
                results.push(result);
            }
            Err(e) => {
                results.push(error_cell(cell, &e));
                env_error.get_or_insert(e);
            }
        }
        // Partial results survive a crash of soak itself.
        let summary = summary_of(
            &suite,
            opts,
            &run_id,
            seed,
            started,
            origin,
            results.clone(),
        );
        let _ = report::write_all(&dir, &summary, &charts);
    }
    let summary = summary_of(&suite, opts, &run_id, seed, started, origin, results);
    report::write_all(&dir, &summary, &charts).map_err(|e| {
        RunError::Environment(format!("cannot write the report in {}: {e}", dir.display()))
    })?;
    // One cell, and it never got going: that is the environment's failure.
    if let (Some(e), 1) = (env_error, summary.cells.len()) {
        return Err(e);
    }
    Ok((summary, dir))
}

fn error_cell(cell: &CellDef, e: &RunError) -> CellResult {
    CellResult {
        id: cell.id.clone(),
        params: cell.params_map(),
        verdict: Verdict::Error,
        error: Some(e.to_string()),
        checks: vec![],
        integrity: Integrity::default(),
        memory: MemorySummary::default(),
        restarts: vec![],
        load: None,
        phases: vec![],
        files: BTreeMap::new(),
        seed: None,
        allocator: None,
        chaos: vec![],
        execs: vec![],
        upgrades: vec![],
        #[cfg(feature = "node")]
        offline: vec![],
        cgroup: None,
    }
}

fn summary_of(
    suite: &Suite,
    opts: &RunOptions,
    run_id: &str,
    seed: u64,
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
        seed,
        shard: opts.shard.map(|(i, n)| format!("{i}/{n}")),
        started_at: started.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        duration_s: origin.elapsed().as_secs_f64(),
        suite_file: opts.suite.display().to_string(),
        soak_version: env!("CARGO_PKG_VERSION").into(),
        cells,
        merged: vec![],
        missing_shards: vec![],
    }
}

fn render(text: &str, vars: &BTreeMap<String, String>) -> Result<String, RunError> {
    template::render(text, vars).map_err(RunError::Environment)
}

/// A folder-safe name for a cell id.
fn folder(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "=,.-_".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
async fn run_cell(
    suite: &Suite,
    opts: &RunOptions,
    placement: Option<&cgroup::place::Placement>,
    run_id: &str,
    def: &CellDef,
    index: usize,
    run_dir: &Path,
    seed: u64,
    interrupt: watch::Receiver<bool>,
) -> Result<(CellResult, Vec<(f64, u64)>), RunError> {
    let id = def.id.as_str();
    let env_err = |what: &str, e: std::io::Error| RunError::Environment(format!("{what}: {e}"));
    let rel_dir = format!("cells/{}", folder(id));
    let cell_dir = run_dir.join(&rel_dir);
    std::fs::create_dir_all(cell_dir.join("data"))
        .map_err(|e| env_err("cannot create the cell folder", e))?;
    let cell_dir = cell_dir
        .canonicalize()
        .map_err(|e| env_err("cell folder", e))?;
    let data_dir = cell_dir.join("data");

    let mut vars = def.variables();
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
    vars.insert("SOAK_NODE".to_string(), soak_node(run_dir)?);
    let suite_dir = std::fs::canonicalize(&opts.suite)
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("."));
    vars.insert("SUITE_DIR".to_string(), suite_dir.display().to_string());

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
    // The allocator: the matrix's, else the node's, else whatever the node links.
    let profile = def.allocator().or(suite.node.allocator.as_ref()).cloned();
    let library = match &profile {
        Some(p) => p.find_library().map_err(RunError::Environment)?,
        None => None,
    };
    if let Some(p) = &profile {
        env.extend(p.environment(library.as_deref()));
    }
    let allocator_text = profile.as_ref().map(|p| {
        let version = library
            .as_deref()
            .and_then(allocator::library_version)
            .or_else(|| {
                (p.kind == allocator::Kind::Glibc)
                    .then(|| {
                        allocator::library_version(Path::new("/lib/x86_64-linux-gnu/libc.so.6"))
                    })
                    .flatten()
            });
        match version {
            Some(v) => format!("{} ({v})", p.name),
            None => p.name.clone(),
        }
    });
    // The label `soak cleanup` finds the node's processes by.
    env.push(("SOAK_RUN_ID".into(), run_id.into()));
    let ready = &suite.node.ready;
    let probe = if let Some(r) = &ready.resp {
        Probe::Resp(render(r, &vars)?)
    } else if let Some(t) = &ready.tcp {
        Probe::Tcp(render(t, &vars)?)
    } else if let Some(u) = &ready.http {
        Probe::Http(render(u, &vars)?)
    } else if let Some(re) = &ready.log {
        Probe::Log(render(re, &vars)?)
    } else if let Some(argv) = &ready.exec {
        Probe::Exec(
            argv.iter()
                .map(|a| render(a, &vars))
                .collect::<Result<_, _>>()?,
        )
    } else {
        unreachable!("validated: one probe")
    };
    // Each version: its argv, and the node's environment with its own
    // variables added or replacing.
    let mut versions = BTreeMap::new();
    versions.insert(
        crate::chaos::BASE_VERSION.to_string(),
        (argv.clone(), env.clone()),
    );
    for (name, v) in &suite.versions {
        let vargv = v
            .command
            .iter()
            .map(|a| render(a, &vars))
            .collect::<Result<Vec<_>, _>>()?;
        let mut venv = env.clone();
        for (k, x) in &v.env {
            let x = render(x, &vars)?;
            venv.retain(|(ek, _)| ek != k);
            venv.push((k.clone(), x));
        }
        versions.insert(name.clone(), (vargv, venv));
    }
    let spec = Spec {
        argv,
        env,
        probe,
        ready_timeout: suite.node.ready.timeout.0,
        stop_signal: suite.node.stop.signal.0,
        grace: suite.node.stop.grace.0,
        log: cell_dir.join("node.log"),
    };

    // The cgroup: required for a memory limit; otherwise used when it can be.
    let memory_limit = suite.limits.memory.map(|s| s.0);
    let cgroup_name = format!("{}{run_id}-{index}", cgroup::PREFIX);
    let limits = cgroup::Limits {
        memory: memory_limit,
        high: suite.limits.high.map(|s| s.0),
        swap: suite.limits.swap.map(|s| s.0),
    };
    let cg = match placement.map(|p| p.create(&cgroup_name, limits)) {
        Some(Ok(cg)) => Some(cg),
        Some(Err(e)) if suite.limits.need_cgroup() => {
            return Err(RunError::Environment(format!(
                "limits.memory needs a memory cgroup: {e}"
            )))
        }
        _ => None,
    };
    let cg_view = cg.as_ref().map(|c| Arc::new(c.view()));
    // For `soak verify` of this cell, should soak itself not finish.
    let workload_target = match &suite.workload {
        Some(w) => Some(render(&w.resp.target, &vars)?),
        None => None,
    };
    crate::verify::saved::SavedNode::of(
        &spec,
        workload_target,
        suite
            .workload
            .as_ref()
            .map(|w| w.timeout.0)
            .unwrap_or(Duration::from_secs(5)),
    )
    .write(&cell_dir.join("node.json"))
    .map_err(|e| env_err("node.json", e))?;
    let mut node = ProcessNode::new(spec, cg);

    let origin = tokio::time::Instant::now();
    let mut events = Events::create(&cell_dir.join("events.jsonl"), id, origin)
        .map_err(|e| env_err("events file", e))?;
    events.emit(
        "cell",
        format!(
            "seed {seed}, allocator {}, cgroup {}",
            allocator_text.as_deref().unwrap_or("as linked"),
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
        data_dir: Some(data_dir.clone()),
    };
    let mut engine = match &suite.workload {
        Some(w) => Some(Engine::new(LoadConfig {
            target: render(&w.resp.target, &vars)?,
            keys: w.keys.0 as usize,
            value_size: (w.value_size.min as usize, w.value_size.max as usize),
            set: w.mix.set,
            get: w.mix.get,
            del: w.mix.del,
            mget: w.mix.mget,
            mget_keys: w.mget_keys.0 as usize,
            rate: match w.rate {
                LoadRate::Fixed(r) => Some(r),
                LoadRate::Max => None,
            },
            pipeline: w.pipeline.map(|p| p.0 as usize).unwrap_or(1),
            connections: w.connections.0 as usize,
            timeout: w.timeout.0,
            seed,
            distribution: w.distribution,
        })),
        None => None,
    };
    if let Some(e) = engine.as_mut() {
        e.set_origin(origin.into_std());
    }
    let verify_target = engine
        .as_ref()
        .map(|e| e.cfg.target.clone())
        .unwrap_or_default();
    let ctx = Context {
        dir: cell_dir.clone(),
        vars,
        run_id: run_id.into(),
        seed,
        scale: opts.duration_scale,
        versions,
    };

    let interval = opts.interval.unwrap_or(suite.telemetry.interval.0);
    if let Some(e) = engine.as_mut() {
        e.log_intervals(&cell_dir.join("latency.csv"), interval, origin);
    }
    let sampler = Sampler::start(
        target.clone(),
        interval,
        cell_dir.join("samples.csv"),
        origin,
    )
    .map_err(|e| env_err("samples file", e))?;
    let scraper = match &suite.node.metrics {
        Some(m) => Some(
            Scraper::start(
                render(&m.prometheus, &ctx.vars)?,
                interval,
                cell_dir.join("metrics.csv"),
                origin,
                target.pid.clone(),
            )
            .map_err(|e| env_err("metrics file", e))?,
        ),
        None => None,
    };
    let mut cell = Cell::new(
        &mut node,
        engine.as_mut(),
        target,
        &mut events,
        verify_target,
        interrupt,
        ctx,
    );
    cell.readback_after_restart = suite
        .workload
        .as_ref()
        .is_none_or(|w| w.readback_after_restart);
    let mut outcome = cell.first_start().await;
    if outcome.is_ok() {
        if let (Some(p), Some(pid)) = (&profile, cell.node.pid()) {
            outcome =
                allocator::prove_loaded(pid, p.kind, library.as_deref()).map_err(CellError::Setup);
            if outcome.is_ok() {
                cell.events.emit(
                    "allocator",
                    format!(
                        "{} is loaded in pid {pid}",
                        allocator_text.as_deref().unwrap_or_default()
                    ),
                );
            }
        }
    }
    if outcome.is_ok() {
        outcome = cell.run_phases(&suite.phases).await;
    }
    cell.finish().await;
    let restarts = std::mem::take(&mut cell.restarts);
    let phases = std::mem::take(&mut cell.phases);
    let execs = std::mem::take(&mut cell.execs);
    let chaos = std::mem::take(&mut cell.chaos);
    let upgrades = std::mem::take(&mut cell.upgrades);
    #[cfg(feature = "node")]
    let offline = std::mem::take(&mut cell.offline);
    let integrity_found = cell.integrity;
    drop(cell);
    let samples = sampler.stop().await;
    if let Some(e) = engine.as_mut() {
        if let Err(err) = e.close_log().await {
            events.emit("error", format!("latency.csv: {err}"));
        }
    }
    let scrapes = match scraper {
        Some(s) => Some(s.stop().await),
        None => None,
    };
    if let Some(s) = &scrapes {
        // Said only when scrapes were tried: a node that never got ready
        // was never scraped, and that is its own error.
        if s.ok == 0 && s.failed + s.empty > 0 {
            events.emit(
                "metrics",
                format!(
                    "no scrape of the Prometheus endpoint gave any series ({} failed, {} empty{})",
                    s.failed,
                    s.empty,
                    s.last_error
                        .as_ref()
                        .map(|e| format!("; last error: {e}"))
                        .unwrap_or_default()
                ),
            );
        }
    }
    let oom_kills = cg_view.as_ref().map(|c| c.oom_kills()).unwrap_or(0);
    // The kernel's own counters, before the cgroup goes with the node.
    let cgroup_summary = cg_view
        .as_deref()
        .map(|c| cgroup_summary(c, placement, &samples));
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
    // Reads during the load judged every key they read: what they found
    // lost, corrupted or resurrected counts with the read-backs' findings
    // (a key is counted once: a loss marks it unknown until rewritten).
    if let Some(l) = &load {
        integrity.lost += l.lost_reads;
        integrity.corrupted += l.corrupted_reads;
        integrity.resurrected += l.resurrected_reads;
    }

    let warmup = suite
        .checks
        .memory_growth
        .as_ref()
        .map(|g| g.warmup.0.as_secs_f64() * opts.duration_scale)
        .unwrap_or(10.0);
    let rss = analysis::analyse(&samples, |s| s.rss, warmup, memory_limit);
    let pss = analysis::analyse(&samples, |s| s.pss, warmup, memory_limit);
    let anon = analysis::analyse(&samples, |s| s.anon, warmup, memory_limit);
    let cgroup_series = analysis::analyse(&samples, |s| s.cgroup, warmup, memory_limit);
    let disk = analysis::analyse(&samples, |s| s.disk, warmup, None);
    let memory = MemorySummary {
        peak_rss_bytes: rss.peak,
        peak_pss_bytes: pss.peak,
        peak_anon_bytes: anon.peak,
        // The kernel's peak, where it keeps one: sampling misses spikes.
        peak_cgroup_bytes: cgroup_series.peak.max(
            cgroup_summary
                .as_ref()
                .and_then(|c| c.peak_bytes)
                .unwrap_or(0),
        ),
        limit_bytes: memory_limit,
        slope_bytes_per_hour: rss.slope_per_hour,
        cgroup_slope_bytes_per_hour: cgroup_series.slope_per_hour,
        oom_kills,
        samples: samples.len(),
        peak_disk_bytes: disk.peak,
        fragmentation: scrapes
            .as_ref()
            .and_then(|s| prometheus::fragmentation(&s.last)),
        scrapes: scrapes.as_ref().map(|s| report::ScrapeSummary {
            ok: s.ok,
            failed: s.failed,
            empty: s.empty,
            series: s.last.len(),
            last_error: s.last_error.clone(),
        }),
        rss,
        pss,
        anon,
        cgroup: cgroup_series,
        disk,
    };
    let crashes = restarts.iter().filter(|r| r.reason == "crash").count() as u64;
    let max_restart_ms = restarts.iter().map(|r| r.ready_after_ms).max();
    let checks = evaluate(
        suite,
        &integrity,
        &memory,
        crashes,
        max_restart_ms,
        load.as_ref(),
        &samples,
        &execs,
        &phases,
    );

    let error = outcome.as_ref().err().map(|e| e.to_string());
    let verdict = if error.is_some() {
        Verdict::Error
    } else if checks.iter().any(|c| c.verdict == Verdict::Fail) {
        Verdict::Fail
    } else if checks.iter().any(|c| c.verdict == Verdict::Warn) {
        Verdict::Warn
    } else {
        Verdict::Pass
    };
    events.emit("verdict", verdict.as_str());

    let load = load.as_ref().map(LoadSummary::of);
    let mut files: BTreeMap<String, String> = ["node.log", "samples.csv", "events.jsonl"]
        .iter()
        .map(|f| (f.to_string(), format!("{rel_dir}/{f}")))
        .collect();
    if engine.is_some() {
        files.insert("latency.csv".into(), format!("{rel_dir}/latency.csv"));
    }
    for e in &execs {
        files.insert(e.log.clone(), format!("{rel_dir}/{}", e.log));
    }
    let exec_results = execs.clone();
    let chart = samples.iter().map(|s| (s.t, s.rss)).collect();
    Ok((
        CellResult {
            id: id.into(),
            params: def.params_map(),
            verdict,
            error,
            checks,
            integrity,
            memory,
            restarts,
            load,
            phases,
            files,
            seed: Some(seed),
            allocator: allocator_text,
            chaos: chaos
                .into_iter()
                .map(|(s, p)| report::ChaosRecord {
                    seed: s,
                    at_s: p.at.as_secs_f64(),
                    action: p.action,
                })
                .collect(),
            execs: exec_results,
            upgrades,
            #[cfg(feature = "node")]
            offline,
            cgroup: cgroup_summary,
        },
        chart,
    ))
}

/// What a node's cgroup recorded, from its files and the samples.
fn cgroup_summary(
    c: &cgroup::Cgroup,
    placement: Option<&cgroup::place::Placement>,
    samples: &[Sample],
) -> report::CgroupSummary {
    let events = c.events();
    let pressure = c.pressure();
    let max_of = |f: fn(&Sample) -> Option<f64>| {
        samples
            .iter()
            .filter_map(f)
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
    };
    report::CgroupSummary {
        version: match c.version {
            cgroup::Version::V1 => "v1".into(),
            cgroup::Version::V2 => "v2".into(),
        },
        path: c.path.display().to_string(),
        placement: placement.map(|p| p.plan.to_string()).unwrap_or_default(),
        peak_bytes: c.peak(),
        high_bytes: c.high_limit(),
        events_high: events.high,
        events_max: events.max,
        events_oom: events.oom,
        oom_kills: events.oom_kill,
        pressure_some_avg10_max: max_of(|s| s.pressure_some),
        pressure_full_avg10_max: max_of(|s| s.pressure_full),
        pressure_some_stall_s: pressure.map(|p| p.some_total_us as f64 / 1e6),
        pressure_full_stall_s: pressure.map(|p| p.full_total_us as f64 / 1e6),
    }
}

pub use crate::analysis::GROWTH_ALPHA;

fn verdict_of(ok: bool, severity: Severity) -> Verdict {
    match (ok, severity) {
        (true, _) => Verdict::Pass,
        (false, Severity::Fail) => Verdict::Fail,
        (false, Severity::Warn) => Verdict::Warn,
    }
}

fn check_count(name: &str, c: Option<CountCheck>, value: u64) -> Option<CheckResult> {
    let c = c?;
    Some(CheckResult {
        name: name.into(),
        verdict: verdict_of(value <= c.max, c.severity),
        value: value.into(),
        limit: c.max.into(),
        detail: None,
        unit: "count".into(),
    })
}

fn series_name(s: Series) -> &'static str {
    match s {
        Series::Rss => "rss",
        Series::Pss => "pss",
        Series::Anon => "anon",
        Series::Cgroup => "cgroup",
    }
}

/// Every check of the suite against what the cell measured.
#[allow(clippy::too_many_arguments)]
fn evaluate(
    suite: &Suite,
    integrity: &Integrity,
    memory: &MemorySummary,
    crashes: u64,
    max_restart_ms: Option<u64>,
    load: Option<&LoadStats>,
    samples: &[Sample],
    execs: &[crate::chaos::ExecResult],
    phases: &[report::PhaseRecord],
) -> Vec<CheckResult> {
    let c = &suite.checks;
    let mut out: Vec<CheckResult> = [
        check_count(
            "lost_writes",
            c.lost_writes,
            integrity.lost + integrity.resurrected,
        ),
        check_count("corrupted_writes", c.corrupted_writes, integrity.corrupted),
        check_count("oom_kills", c.oom_kills, memory.oom_kills),
        check_count("crashes", c.crashes, crashes),
    ]
    .into_iter()
    .flatten()
    .collect();
    let opt = |v: Option<f64>| {
        v.map(serde_json::Value::from)
            .unwrap_or(serde_json::Value::Null)
    };
    if let Some(g) = &c.memory_growth {
        let a = match g.series {
            Series::Rss => &memory.rss,
            Series::Pss => &memory.pss,
            Series::Anon => &memory.anon,
            Series::Cgroup => &memory.cgroup,
        };
        // Fails only on growth above the limit that is also a significant
        // trend (analysis::trend): warm-up and sawtooth are not leaks.
        let growing = match (a.slope_per_hour, a.p_growth) {
            (Some(s), Some(p)) => s > g.max.0 && p < GROWTH_ALPHA,
            _ => false,
        };
        let mib = |v: Option<f64>| {
            v.map(|v| format!("{:+.1}", v / 1048576.0))
                .unwrap_or_else(|| "n/a".into())
        };
        out.push(CheckResult {
            name: format!("memory_growth ({})", series_name(g.series)),
            verdict: verdict_of(!growing, g.severity),
            value: opt(a.slope_per_hour),
            limit: g.max.0.into(),
            unit: "bytes/h".into(),
            detail: Some(format!(
                "95% CI [{}, {}] MiB/h, p = {}{}",
                mib(a.slope_low_per_hour),
                mib(a.slope_high_per_hour),
                a.p_growth
                    .map(|p| format!("{p:.2e}"))
                    .unwrap_or_else(|| "n/a".into()),
                a.hours_to_limit
                    .map(|h| format!(", the limit reached in {}", crate::units::hours(h)))
                    .unwrap_or_default()
            )),
        });
    }
    if let Some(p) = &c.peak_memory {
        let peak = match p.series {
            Series::Rss => memory.peak_rss_bytes,
            Series::Pss => memory.peak_pss_bytes,
            Series::Anon => memory.peak_anon_bytes,
            Series::Cgroup => memory.peak_cgroup_bytes,
        };
        out.push(CheckResult {
            name: format!("peak_memory ({})", series_name(p.series)),
            verdict: verdict_of(peak <= p.max.0, p.severity),
            value: peak.into(),
            limit: p.max.0.into(),
            detail: None,
            unit: "bytes".into(),
        });
    }
    if let Some(max) = c.disk.as_ref().and_then(|d| d.max.map(|m| (m, d.severity))) {
        let (max, severity) = max;
        let peak = samples.iter().map(|s| s.disk).max().unwrap_or(0);
        out.push(CheckResult {
            name: "disk".into(),
            verdict: verdict_of(peak <= max.0, severity),
            value: peak.into(),
            limit: max.0.into(),
            detail: None,
            unit: "bytes".into(),
        });
    }
    if let Some((ratio, severity)) = c
        .disk
        .as_ref()
        .and_then(|d| d.max_growth.map(|r| (r, d.severity)))
    {
        let sizes: Vec<u64> = phases
            .iter()
            .filter_map(|p| p.disk_bytes)
            .filter(|b| *b > 0)
            .collect();
        let growth = match (sizes.first(), sizes.last()) {
            (Some(a), Some(b)) => Some(*b as f64 / *a as f64),
            _ => None,
        };
        out.push(CheckResult {
            name: "disk growth".into(),
            verdict: verdict_of(growth.is_some_and(|g| g <= ratio), severity),
            value: growth
                .map(|g| serde_json::Value::from((g * 1000.0).round() / 1000.0))
                .unwrap_or(serde_json::Value::Null),
            limit: ratio.into(),
            detail: match (sizes.first(), sizes.last()) {
                (Some(a), Some(b)) => Some(format!(
                    "{} after the first phase, {} at the end",
                    crate::units::Bytes(*a),
                    crate::units::Bytes(*b)
                )),
                _ => Some("no phase left data to compare".into()),
            },
            unit: "x".into(),
        });
    }
    if let (Some(t), Some(l)) = (&c.throughput, load) {
        let rate = l.ops_per_s();
        out.push(CheckResult {
            name: "throughput".into(),
            verdict: verdict_of(rate >= t.min.0, t.severity),
            value: ((rate * 10.0).round() / 10.0).into(),
            limit: t.min.0.into(),
            detail: None,
            unit: "ops/s".into(),
        });
    }
    if let (Some(t), Some(l)) = (&c.latency, load) {
        let us = l.latency_us.value_at_quantile(t.percentile / 100.0);
        let limit_us = t.max.0.as_micros() as u64;
        out.push(CheckResult {
            name: format!("latency (p{})", t.percentile),
            verdict: verdict_of(!l.latency_us.is_empty() && us <= limit_us, t.severity),
            value: (us as f64 / 1000.0).into(),
            limit: (limit_us as f64 / 1000.0).into(),
            detail: None,
            unit: "ms".into(),
        });
    }
    if let Some(r) = &c.restart_time {
        let limit = r.max.0.as_millis() as u64;
        out.push(CheckResult {
            name: "restart_time".into(),
            verdict: verdict_of(max_restart_ms.is_none_or(|m| m <= limit), r.severity),
            value: max_restart_ms
                .map(serde_json::Value::from)
                .unwrap_or(serde_json::Value::Null),
            limit: limit.into(),
            detail: None,
            unit: "ms".into(),
        });
    }
    for (i, e) in execs.iter().enumerate() {
        out.push(CheckResult {
            name: format!("exec[{}] {}", i + 1, e.command),
            verdict: if e.code == Some(e.expected) {
                Verdict::Pass
            } else {
                Verdict::Fail
            },
            value: e
                .code
                .map(serde_json::Value::from)
                .unwrap_or(serde_json::Value::Null),
            limit: e.expected.into(),
            detail: None,
            unit: "exit code".into(),
        });
        if let Some(min) = e.throughput_min {
            out.push(CheckResult {
                name: format!("exec[{}] throughput", i + 1),
                verdict: if e.throughput.is_some_and(|v| v >= min) {
                    Verdict::Pass
                } else {
                    Verdict::Fail
                },
                value: e
                    .throughput
                    .map(serde_json::Value::from)
                    .unwrap_or(serde_json::Value::Null),
                limit: min.into(),
                detail: e
                    .unmatched
                    .as_ref()
                    .map(|re| format!("`{re}` matched nothing in {}", e.log)),
                unit: "ops/s".into(),
            });
        }
    }
    out
}
