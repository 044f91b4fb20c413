//! `soak run`: from a suite to a verdict, a report and an exit code.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicU32};
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::sync::watch;

use crate::analysis;
use crate::cell::checks::{self, Measured};
use crate::cell::event::{Bus, Event, Jsonl};
use crate::cell::record::Recorder;
use crate::cell::{Cell, CellError, Context};
use crate::driver::allocator;
use crate::driver::any::AnyNode;
use crate::driver::cgroup::{self, place::Placement, Cgroup};
use crate::driver::docker::container::ContainerNode;
use crate::driver::process::ProcessNode;
use crate::driver::Node;
use crate::exit;
use crate::model::{
    CellResult, CgroupSummary, CheckResult, Expectation, Integrity, MemorySummary, ScrapeSummary,
    Stop, Summary, Verdict,
};
use crate::plan::{self, CellPlan, PlanError, RunContext};
use crate::progress::Progress;
use crate::suite::{matrix, CellDef, Phase, Suite, SuiteError};
use crate::telemetry::{prometheus, Sample, Sampler, ScrapeStats, Scraper, Target};
use crate::workload::{Load, LoadStats};

/// What `soak run` takes: the command line is this struct.
#[derive(Debug, Clone, clap::Args)]
pub struct RunOptions {
    pub suite: PathBuf,
    /// Folder for reports (reports/<suite>/<UTC time>-<id>/ inside it).
    #[arg(long, default_value = "reports")]
    pub out: PathBuf,
    /// Multiply every phase duration by F, for a quick trial (e.g. 0.1).
    #[arg(long, default_value_t = 1.0, value_parser = crate::units::positive)]
    pub duration_scale: f64,
    /// Seed of the workload's and the chaos schedules' random choices;
    /// recorded in the report, so that a run can be replayed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Telemetry sampling interval (10ms to 60s); overrides the suite's
    /// `telemetry.interval` (default 1s).
    #[arg(long, value_parser = crate::units::interval)]
    pub interval: Option<Duration>,
    /// Run only the cells whose id matches: a glob (`allocator=je*`), or
    /// without `*?[`, a part of the id (`storage=small`). Give it again for
    /// the cells that match any of the patterns.
    #[arg(long, value_name = "PATTERN")]
    pub only: Vec<String>,
    /// Run shard I of N: cell j (in suite order) runs on shard j % N + 1.
    #[arg(long, value_name = "I/N", value_parser = crate::suite::matrix::parse_shard)]
    pub shard: Option<(usize, usize)>,
    /// How progress is shown: a live line on a terminal (`tty`), a
    /// heartbeat line every --heartbeat (`plain`, the default without a
    /// terminal), or `none`.
    #[arg(long, value_enum)]
    pub progress: Option<crate::progress::Mode>,
    /// How often the plain progress line is written.
    #[arg(long, default_value = "30s", value_parser = crate::units::heartbeat)]
    pub heartbeat: Duration,
    /// The run's id (letters and digits, up to 16), which names its folder
    /// and labels its cgroups and processes for `soak cleanup`; random when
    /// not given. A CI job may pass its own to find the run afterwards.
    #[arg(long, value_name = "ID", value_parser = crate::lock::parse_run_id)]
    pub run_id: Option<String>,
    /// Only the verdict and the report's path: no event lines, no progress.
    #[arg(long, short)]
    pub quiet: bool,
    /// In a container whose cgroup holds processes beside soak (a CI
    /// job's step run with `docker exec`): move them into a leaf `init`
    /// of the container's cgroup, as docker-in-docker does, so that soak
    /// may make its nodes' memory cgroups beside it. Honoured only when
    /// soak's cgroup is the root of a cgroup namespace.
    #[arg(long, env = "SOAK_CLAIM_CGROUP", value_parser = clap::builder::BoolishValueParser::new(), default_value_t = false, num_args = 0, default_missing_value = "true")]
    pub claim_cgroup: bool,
    /// The Docker engine for container nodes (`unix:///PATH`,
    /// `tcp://HOST:PORT`, with TLS when `DOCKER_TLS_VERIFY` is set,
    /// `ssh://USER@HOST`); default `DOCKER_HOST`, else the local socket.
    #[arg(long, value_name = "URL")]
    pub docker_host: Option<String>,
    /// Run each cell N times (instead of the suite's `repeat:`): the report
    /// gives each figure's median and spread over the N runs.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100))]
    pub repeat: Option<u32>,
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
    /// A file or folder of the run's own that soak could not make: the
    /// environment's failure too, with its cause.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

impl RunError {
    fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> RunError {
        let what = what.into();
        move |source| RunError::Io { what, source }
    }
}

impl From<PlanError> for RunError {
    fn from(e: PlanError) -> RunError {
        match e {
            PlanError::Template { .. } => RunError::Usage(e.to_string()),
            PlanError::Environment(e) => RunError::Environment(e),
        }
    }
}

impl RunError {
    pub fn exit_code(&self) -> i32 {
        match self {
            RunError::Suite(_) | RunError::Usage(_) => exit::INVALID,
            RunError::Environment(_) | RunError::Io { .. } => exit::ENVIRONMENT,
        }
    }
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
        let link = run_dir.join("bin").join(crate::NODE_NAME);
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
        .and_then(|exe| Some(exe.parent()?.join(crate::NODE_NAME)))
        .filter(|p| p.is_file())
    {
        return Ok(beside.display().to_string());
    }
    Ok(crate::NODE_NAME.into())
}

/// The cells this invocation runs, after `--only` and `--shard`.
/// Each cell `n` times, as `ID#1`..`ID#n` (once: as it is), with the id of
/// the cell each one repeats.
fn repeated(cells: Vec<CellDef>, n: u32) -> Vec<(CellDef, Option<String>)> {
    if n <= 1 {
        return cells.into_iter().map(|c| (c, None)).collect();
    }
    cells
        .into_iter()
        .flat_map(|c| {
            (1..=n).map(move |i| {
                let mut r = c.clone();
                r.id = format!("{}#{i}", c.id);
                (r, Some(c.id.clone()))
            })
        })
        .collect()
}

pub fn select_cells(suite: &Suite, opts: &RunOptions) -> Result<Vec<CellDef>, RunError> {
    let mut cells = suite.cells();
    let all = cells.len();
    if !opts.only.is_empty() {
        cells.retain(|c| opts.only.iter().any(|p| matrix::matches(c, p)));
        if cells.is_empty() {
            let ids: Vec<String> = suite.cells().into_iter().map(|c| c.id).collect();
            let p: Vec<String> = opts.only.iter().map(|p| format!("{p:?}")).collect();
            return Err(RunError::Usage(format!(
                "--only {} matches none of the {all} cells: {}",
                p.join(" --only "),
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
    progress: &Progress,
) -> Result<(Summary, PathBuf), RunError> {
    let suite = Suite::load(&opts.suite)?;
    let times = opts
        .repeat
        .unwrap_or_else(|| suite.repeat.map(|r| r.0 as u32).unwrap_or(1));
    let cells = repeated(select_cells(&suite, opts)?, times);
    if let Some(id) = &opts.run_id {
        crate::lock::use_run_id(id);
    }
    let run_id = crate::lock::run_id();
    // Held while this run lives: `soak cleanup` in another shell leaves
    // this run alone.
    let _lock = crate::lock::lock_run(&run_id).map_err(|e| {
        RunError::Environment(format!(
            "cannot take the run's lock in {}: {e}",
            crate::lock::lock_dir().display()
        ))
    })?;
    // Where the nodes' cgroups go: decided once, before anything is made,
    // and undone when the run ends (see `driver::cgroup::place`). Without
    // a limit, a node runs without a cgroup where soak may make none.
    let placement = match cgroup::place::place(&run_id, opts.claim_cgroup) {
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
        .map_err(RunError::io(format!("cannot create {}", dir.display())))?;
    let dir = dir
        .canonicalize()
        .map_err(RunError::io("cannot create the run folder"))?;
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
    let ctx = RunContext {
        run_id: run_id.clone(),
        soak_node: soak_node(&dir)?,
        run_dir: dir.clone(),
        suite_dir: std::fs::canonicalize(&opts.suite)
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .unwrap_or_else(|| PathBuf::from(".")),
        seed,
        scale: opts.duration_scale,
        interval: opts.interval,
        real_ports: true,
        find_libraries: true,
        docker_host: opts.docker_host.clone(),
        suite_name: suite.name.clone(),
    };
    progress.begin_run(&suite, cells.len(), opts.duration_scale);

    let mut results = vec![];
    let mut charts = BTreeMap::new();
    let mut env_error = None;
    for (index, (cell, repeat_of)) in cells.iter().enumerate() {
        if *interrupt.borrow() {
            break;
        }
        let ran = match plan::resolve(&suite, cell, index, &ctx) {
            Ok(p) => run_cell(&suite, &p, placement.as_ref(), interrupt.clone(), progress).await,
            Err(PlanError::Template { field, error }) => Err(RunError::Usage(
                PlanError::Template { field, error }.located(&opts.suite, &cell.id),
            )),
            Err(e) => Err(e.into()),
        };
        match ran {
            Ok(mut result) => {
                if let Some(chart) = crate::report::charts::of_cell(&dir, &result) {
                    charts.insert(result.id.clone(), chart);
                }
                result.repeat_of.clone_from(repeat_of);
                results.push(result);
            }
            Err(e) => {
                let mut result = CellResult::error(&cell.id, cell.params_map(), e.to_string());
                result.repeat_of.clone_from(repeat_of);
                results.push(result);
                env_error.get_or_insert(e);
            }
        }
        // Partial results survive a crash of soak itself.
        let summary = summary_of(&suite, opts, &ctx, started, origin, results.clone());
        let _ = crate::report::write_all(&dir, &summary, &charts);
    }
    let mut summary = summary_of(&suite, opts, &ctx, started, origin, results);
    if *interrupt.borrow() {
        summary.stopped = Some(Stop::Interrupted);
    }
    crate::report::write_all(&dir, &summary, &charts).map_err(RunError::io(format!(
        "cannot write the report in {}",
        dir.display()
    )))?;
    // One cell, and it never got going: that is the environment's failure.
    if let (Some(e), 1) = (env_error, summary.cells.len()) {
        return Err(e);
    }
    Ok((summary, dir))
}

fn summary_of(
    suite: &Suite,
    opts: &RunOptions,
    ctx: &RunContext,
    started: chrono::DateTime<chrono::Utc>,
    origin: tokio::time::Instant,
    cells: Vec<CellResult>,
) -> Summary {
    Summary {
        schema_version: crate::model::SCHEMA_VERSION,
        suite: suite.name.clone(),
        description: suite.description.clone(),
        verdict: Verdict::of_run(cells.iter().map(|c| c.verdict)),
        warned_cells: 0,
        warned_checks: 0,
        run_id: ctx.run_id.clone(),
        seed: ctx.seed,
        shard: opts.shard.map(|(i, n)| format!("{i}/{n}")),
        started_at: started.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        duration_s: origin.elapsed().as_secs_f64(),
        suite_file: opts.suite.display().to_string(),
        soak_version: env!("CARGO_PKG_VERSION").into(),
        stopped: None,
        cells,
        merged: vec![],
        missing_shards: vec![],
    }
}

/// The node of a cell, in its cgroup (required for a memory limit;
/// otherwise used when it can be), with `node.json` written for `soak
/// verify` should soak itself not finish.
async fn prepare_node(
    plan: &CellPlan,
    placement: Option<&Placement>,
) -> Result<(AnyNode, Option<Arc<Cgroup>>), RunError> {
    std::fs::create_dir_all(&plan.data_dir)
        .map_err(RunError::io("cannot create the cell folder"))?;
    let mut saved = crate::verify::saved::SavedNode::of(
        &plan.node,
        plan.load.as_ref().map(|l| l.protocol.clone()),
        plan.load
            .as_ref()
            .map(|l| l.timeout)
            .unwrap_or(Duration::from_secs(5)),
    );
    if let Some(c) = &plan.container {
        saved = saved.in_container(c);
    }
    saved
        .write(&plan.dir.join("node.json"))
        .map_err(RunError::io("node.json"))?;
    // A container's limits and cgroup are the engine's.
    if let Some(c) = &plan.container {
        // The engine first: one that does not answer is the environment's
        // fault (exit 3), found before anything starts.
        let engine = crate::driver::docker::engine::connect(c.host.as_deref())
            .await
            .map_err(|e| RunError::Environment(e.to_string()))?;
        let node = ContainerNode::new(plan.node.clone(), c.clone(), engine);
        return Ok((AnyNode::Container(node), None));
    }
    let cg = match placement.map(|p| p.create(&plan.cgroup_name, plan.limits)) {
        Some(Ok(cg)) => Some(cg),
        Some(Err(e)) if plan.needs_cgroup => {
            return Err(RunError::Environment(format!(
                "limits.memory needs a memory cgroup: {e}"
            )))
        }
        _ => None,
    };
    let view = cg.as_ref().map(|c| Arc::new(c.view()));
    Ok((
        AnyNode::Process(ProcessNode::new(plan.node.clone(), cg)),
        view,
    ))
}

/// What telemetry kept while the cell ran.
struct Telemetry {
    sampler: Sampler,
    scraper: Option<Scraper>,
}

impl Telemetry {
    fn start(
        plan: &CellPlan,
        target: &Target,
        origin: tokio::time::Instant,
    ) -> Result<Telemetry, RunError> {
        let sampler = Sampler::start(
            target.clone(),
            plan.interval,
            plan.dir.join("samples.csv.gz"),
            origin,
        )
        .map_err(RunError::io("samples file"))?;
        let scraper = match &plan.scrape {
            Some(url) => Some(
                Scraper::start(
                    url.clone(),
                    plan.interval,
                    plan.dir.join("metrics.csv.gz"),
                    origin,
                    target.pid.clone(),
                )
                .map_err(RunError::io("metrics file"))?,
            ),
            None => None,
        };
        Ok(Telemetry { sampler, scraper })
    }

    async fn stop(self, bus: &mut Bus) -> (crate::telemetry::Kept, Option<ScrapeStats>) {
        let samples = self.sampler.stop().await;
        let scrapes = match self.scraper {
            Some(s) => Some(s.stop().await),
            None => None,
        };
        // Said only when scrapes were tried: a node that never got ready
        // was never scraped, and that is its own error.
        if let Some(s) = scrapes
            .as_ref()
            .filter(|s| s.ok == 0 && s.failed + s.empty > 0)
        {
            bus.notice(
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
        (samples, scrapes)
    }
}

/// The first start, the allocator's proof, the phases, and the end.
async fn drive(
    cell: &mut Cell<'_, AnyNode>,
    remote: Option<&str>,
    plan: &CellPlan,
    phases: &[crate::suite::Phase],
) -> Result<(), CellError> {
    cell.first_start().await?;
    if let (Some(_), Some(e)) = (&plan.allocator, remote) {
        cell.bus.notice(
            "allocator",
            format!("not proven loaded: the node runs on the remote engine {e}, whose processes this machine cannot read"),
        );
    } else if let (Some(a), Some(pid)) = (&plan.allocator, cell.node.pid()) {
        allocator::prove_loaded(pid, a.profile.kind, a.library.as_deref())
            .map_err(CellError::Setup)?;
        cell.bus.emit(Event::Allocator {
            text: format!("{} is loaded in pid {pid}", a.text),
        });
    }
    cell.run_phases(phases).await
}

async fn run_cell(
    suite: &Suite,
    plan: &CellPlan,
    placement: Option<&Placement>,
    interrupt: watch::Receiver<bool>,
    progress: &Progress,
) -> Result<CellResult, RunError> {
    let (mut node, cg) = prepare_node(plan, placement).await?;
    let info = node.info();
    let engine = info.engine;
    let origin = tokio::time::Instant::now();
    let jsonl =
        Jsonl::create(&plan.dir.join("events.jsonl")).map_err(RunError::io("events file"))?;
    let mut bus = Bus::new(&plan.id, origin).with(jsonl);
    if progress.console() {
        bus = bus.with(progress.console_sink());
    }
    let target = Target {
        pid: Arc::new(AtomicI32::new(0)),
        segment: Arc::new(AtomicU32::new(0)),
        cgroup: cg.clone(),
        data_dir: Some(plan.data_dir.clone()),
        pid_cgroup: plan.container.is_some(),
        engine_memory: info.engine_memory,
    };
    let (network, mut load) = start_load(suite, plan, origin).await?;
    bus = bus.with(progress.cell(plan, load.as_ref().map(|l| l.live()), target.clone()));
    bus.emit(cell_event(plan, cg.as_deref(), engine.as_ref()));
    // With disk faults, the data directory is soak's fault filesystem;
    // the files live in a folder beside it, which telemetry reads.
    let disk = match (plan.fault_fs, &plan.container) {
        (Some(writes), None) => Some(Arc::new(mount_fault_fs(plan, writes)?)),
        _ => None,
    };
    let mut target = target;
    if let Some(d) = &disk {
        target.data_dir = Some(d.backing().to_path_buf());
    }
    if let (Some(user), None) = (&plan.node.user, &plan.container) {
        give_data_dir(&plan.data_dir, user)?;
    }
    let telemetry = Telemetry::start(plan, &target, origin)?;
    let ctx = Context {
        dir: plan.dir.clone(),
        vars: plan.vars.clone(),
        run_id: crate::lock::run_id(),
        seed: plan.seed,
        scale: plan.scale,
        versions: plan.versions.clone(),
        readback_after_restart: plan.readback_after_restart,
        network: network.clone(),
        disk: disk.clone(),
        unsynced_tail_allowed: plan.unsynced_tail_allowed,
    };
    let verify = plan.load.as_ref().map(|l| l.protocol.open());
    let mut cell = Cell::new(
        &mut node,
        load.as_mut(),
        target,
        &mut bus,
        verify,
        interrupt,
        ctx,
    );
    let remote = engine.as_ref().filter(|e| !e.local).map(|e| e.host.clone());
    let outcome = drive(&mut cell, remote.as_deref(), plan, &suite.phases).await;
    cell.finish().await;
    drop(cell);
    let (kept, scrapes) = telemetry.stop(&mut bus).await;
    let samples_taken = kept.taken();
    let samples = kept.into_samples();
    if let Some(l) = load.as_mut() {
        if let Err(err) = l.close_log().await {
            bus.error(format!("latency.csv: {err}"));
        }
    }
    // The kernel's own counters, before the cgroup goes with the node.
    let cgroup = cg
        .as_deref()
        .map(|c| cgroup_summary(c, placement, &samples));
    let oom_kills = oom_kills(cg.as_deref(), &bus);
    node.shutdown().await;
    let disk_faults = disk.map(|d| {
        let stats = d.stats();
        unmount_fault_fs(d, plan);
        stats
    });
    if let Err(e) = &outcome {
        if e.never_started() && bus.recorder.restarts.is_empty() {
            bus.error(e.to_string());
            return Err(RunError::Environment(e.to_string()));
        }
    }
    let measured = CellMeasures {
        network: network.as_ref().map(|p| p.stats()),
        disk_faults,
        error_replies: load.as_ref().map(|l| l.error_replies()).unwrap_or_default(),
        load: load.as_ref().map(|l| l.stats()),
        windows: load.as_ref().map(|l| l.windows()).unwrap_or_default(),
        samples,
        samples_taken,
        scrapes,
        cgroup,
        oom_kills,
        engine,
    };
    Ok(assemble(plan, outcome.err(), &mut bus, measured))
}

/// The cell's load, if it has one, and with `network` phases the proxy it
/// connects through (the read-backs do not: they judge the data, not the
/// network).
async fn start_load(
    suite: &Suite,
    plan: &CellPlan,
    origin: tokio::time::Instant,
) -> Result<(Option<Arc<crate::faults::proxy::Proxy>>, Option<Load>), RunError> {
    let network = match (&plan.load, uses_network(&suite.phases)) {
        (Some(l), true) => {
            let target = l.protocol.target().ok_or_else(|| {
                RunError::Environment(
                    "`network` faults need to know where the load's requests go: give the adapter a `target`".into(),
                )
            })?;
            Some(Arc::new(start_proxy(&target, plan.seed).await?))
        }
        _ => None,
    };
    let mut load_cfg = plan.load.clone();
    if let (Some(c), Some(p)) = (load_cfg.as_mut(), &network) {
        c.protocol.retarget(&p.addr().to_string());
    }
    let mut load = load_cfg.map(Load::new);
    if let Some(l) = load.as_mut() {
        l.set_origin(origin.into_std());
        l.log_intervals(
            &plan.dir.join("latency.csv"),
            plan.interval,
            origin,
            &plan.checks.windows(),
        );
    }
    Ok((network, load))
}

/// The cell's first event: its seed, allocator and where its memory is
/// counted.
fn cell_event(
    plan: &CellPlan,
    cg: Option<&Cgroup>,
    engine: Option<&crate::driver::docker::engine::EngineInfo>,
) -> Event {
    Event::Cell {
        seed: plan.seed,
        allocator: plan.allocator.as_ref().map(|a| a.text.clone()),
        cgroup: match cg {
            Some(c) => Some(c.path.display().to_string()),
            None => engine.map(|e| {
                format!(
                    "the container's, made by Docker {} at {} (cgroup v{})",
                    e.version, e.host, e.cgroup_version
                )
            }),
        },
    }
}

/// The kernel's OOM kills of the node's cgroup; a container's cgroup
/// goes with it, so its OOM kills are the engine's word (`OOMKilled`),
/// one per restart it caused.
fn oom_kills(cg: Option<&Cgroup>, bus: &Bus) -> u64 {
    let oom_restarts = bus
        .recorder
        .restarts
        .iter()
        .filter(|r| r.reason == crate::model::Cause::Oom)
        .count() as u64;
    cg.map(|c| c.oom_kills()).unwrap_or(0).max(oom_restarts)
}

/// What a node that stopped answering a read-back shows: the error, and
/// what its cgroup said (at its limit how often, its memory pressure): a
/// node that stalls at its limit while the kernel reclaims its page cache
/// instead of killing it is alive, and answers nothing.
fn unresponsive(e: &crate::verify::VerifyError, cg: Option<&CgroupSummary>) -> String {
    let mut out = format!("the node stopped answering while alive: {e}");
    if let Some(c) = cg {
        out.push_str(&format!(
            "; its cgroup: at its memory limit {} times",
            c.events_max
        ));
        if c.events_high > 0 {
            out.push_str(&format!(", over memory.high {} times", c.events_high));
        }
        if let Some(p) = c.pressure_full_avg10_max {
            out.push_str(&format!(
                ", memory pressure (all tasks stalled) up to {p:.0}% of 10 s"
            ));
        } else if let Some(p) = c.pressure_some_avg10_max {
            out.push_str(&format!(
                ", memory pressure (some tasks stalled) up to {p:.0}% of 10 s"
            ));
        }
        if let Some(peak) = c.peak_bytes {
            out.push_str(&format!(", peak {}", crate::units::Bytes(peak)));
        }
    }
    out
}

/// Gives the node's data directory to the user it runs as, after making
/// sure that user can reach it (a folder above it that only its owner may
/// enter, as `tempfile` makes them, would stop the node with a bare
/// "Permission denied").
fn give_data_dir(data_dir: &std::path::Path, user: &str) -> Result<(), RunError> {
    use std::os::unix::fs::MetadataExt;
    let (uid, gid) = crate::driver::process::resolve_user(user)
        .map_err(|e| RunError::Environment(format!("node.user: {e}")))?;
    for dir in data_dir.ancestors().skip(1) {
        let Ok(md) = std::fs::metadata(dir) else {
            continue;
        };
        let searchable = md.mode() & 0o001 != 0
            || (md.uid() == uid && md.mode() & 0o100 != 0)
            || (md.gid() == gid && md.mode() & 0o010 != 0);
        if !searchable {
            return Err(RunError::Environment(format!(
                "the node runs as {user}, who cannot enter {} (mode {:o}): `chmod o+x {}`, or give the run an --out folder {user} can reach",
                dir.display(),
                md.mode() & 0o7777,
                dir.display()
            )));
        }
    }
    std::os::unix::fs::chown(data_dir, Some(uid), Some(gid)).map_err(|e| {
        RunError::Environment(format!("cannot give {} to {user}: {e}", data_dir.display()))
    })
}

/// What the cell measured besides its records.
struct CellMeasures {
    load: Option<LoadStats>,
    /// The load of each window the windowed checks judge.
    windows: Vec<crate::model::WindowLoad>,
    /// The samples kept (see [`crate::telemetry::Kept`]), of how many taken.
    samples: Vec<Sample>,
    samples_taken: usize,
    scrapes: Option<ScrapeStats>,
    cgroup: Option<CgroupSummary>,
    oom_kills: u64,
    engine: Option<crate::model::EngineInfo>,
    network: Option<crate::model::NetworkStats>,
    disk_faults: Option<crate::model::DiskStats>,
    error_replies: Vec<(f64, String)>,
}

/// The fault filesystem over the cell's data directory; the files live in
/// `data.files` beside it while it is mounted.
fn mount_fault_fs(
    plan: &CellPlan,
    writes: crate::faults::disk::Writes,
) -> Result<crate::faults::disk::Mounted, RunError> {
    let backing = crate::faults::disk::backing_of(&plan.data_dir);
    crate::faults::disk::Mounted::mount(
        &backing,
        &plan.data_dir,
        &crate::lock::run_id(),
        plan.seed,
        plan.disk_limit,
        writes,
    )
    .map_err(|e| {
        RunError::Environment(format!(
            "cannot mount soak's fault filesystem at {} (disk faults need root and /dev/fuse; `modprobe fuse` loads it): {e}",
            plan.data_dir.display()
        ))
    })
}

/// Unmounts the fault filesystem and puts the files back where the node
/// wrote them, so that the cell's folder looks as without it (for `soak
/// verify` and the user's own tools).
fn unmount_fault_fs(d: Arc<crate::faults::disk::Mounted>, plan: &CellPlan) {
    match Arc::try_unwrap(d) {
        Ok(m) => drop(m),
        Err(d) => {
            crate::faults::disk::unmount(d.mountpoint());
        }
    }
    crate::faults::disk::restore(&plan.data_dir);
}

/// Whether any phase (inside a `repeat` too) sets network faults, or may
/// as a chaos action.
fn uses_network(phases: &[Phase]) -> bool {
    phases.iter().any(|p| match p {
        Phase::Network(_) => true,
        Phase::Chaos(c) => c.on_network(),
        Phase::Repeat { phases, .. } => uses_network(phases),
        _ => false,
    })
}

/// The proxy in front of the load's target (`HOST:PORT`).
async fn start_proxy(target: &str, seed: u64) -> Result<crate::faults::proxy::Proxy, RunError> {
    let env = |e: String| RunError::Environment(e);
    let upstream = tokio::net::lookup_host(target)
        .await
        .map_err(|e| env(format!("the load's target {target}: {e}")))?
        .next()
        .ok_or_else(|| env(format!("the load's target {target} has no address")))?;
    crate::faults::proxy::Proxy::start(upstream, seed)
        .await
        .map_err(|e| env(format!("cannot start the network proxy for {target}: {e}")))
}

fn memory_summary(plan: &CellPlan, m: &CellMeasures) -> MemorySummary {
    let (samples, limit, w) = (&m.samples, plan.limits.memory, plan.warmup_s);
    let rss = analysis::analyse(samples, |s| s.rss, w, limit);
    let pss = analysis::analyse(samples, |s| s.pss, w, limit);
    let anon = analysis::analyse(samples, |s| s.anon, w, limit);
    let cgroup = analysis::analyse(samples, |s| s.cgroup, w, limit);
    let disk = analysis::analyse(samples, |s| s.disk, w, None);
    let held_free = m
        .scrapes
        .as_ref()
        .and_then(|s| prometheus::held_free(&s.largest));
    MemorySummary {
        peak_rss_bytes: rss.peak,
        peak_pss_bytes: pss.peak,
        peak_anon_bytes: anon.peak,
        // The kernel's peak, where it keeps one: sampling misses spikes.
        peak_cgroup_bytes: cgroup
            .peak
            .max(m.cgroup.as_ref().and_then(|c| c.peak_bytes).unwrap_or(0)),
        limit_bytes: limit,
        slope_bytes_per_hour: rss.slope_per_hour,
        cgroup_slope_bytes_per_hour: cgroup.slope_per_hour,
        oom_kills: m.oom_kills,
        samples: m.samples_taken,
        peak_disk_bytes: disk.peak,
        fragmentation: m
            .scrapes
            .as_ref()
            .and_then(|s| prometheus::fragmentation(&s.largest)),
        allocator_free_bytes: held_free.map(|h| h.0),
        allocator_free_share: held_free.map(|h| h.1),
        scrapes: m.scrapes.as_ref().map(|s| ScrapeSummary {
            ok: s.ok,
            failed: s.failed,
            empty: s.empty,
            series: s.last.len(),
            last_error: s.last_error.clone(),
        }),
        rss,
        pss,
        anon,
        cgroup,
        disk,
    }
}

/// Whether a cell showed what its `expect:` said, from its checks' results.
fn expectation(expect: &crate::suite::Checks, results: &[CheckResult]) -> Expectation {
    let names = expect.names();
    let expected: Vec<&CheckResult> = results
        .iter()
        .filter(|r| {
            names
                .iter()
                .any(|n| r.name == *n || r.name.starts_with(&format!("{n} ")))
        })
        .collect();
    Expectation {
        checks: expected
            .iter()
            .map(|r| {
                let detail = r
                    .detail
                    .as_ref()
                    .map(|d| format!(", {d}"))
                    .unwrap_or_default();
                format!(
                    "{}: {} (limit {}{detail})",
                    r.name,
                    crate::report::text::value_text(&r.value, &r.unit),
                    crate::report::text::value_text(&r.limit, &r.unit)
                )
            })
            .collect(),
        incident: [
            expect.oom_kills,
            expect.crashes,
            expect.lost_writes,
            expect.corrupted_writes,
        ]
        .iter()
        .flatten()
        .any(|c| c.min.is_some_and(|m| m >= 1)),
        met: expected.iter().all(|r| r.verdict == Verdict::Pass),
    }
}

/// The cell's result: its records, what it measured, its checks and its
/// verdict.
fn assemble(
    plan: &CellPlan,
    error: Option<CellError>,
    bus: &mut Bus,
    m: CellMeasures,
) -> CellResult {
    let memory = memory_summary(plan, &m);
    // A node that did not start again, or that stopped answering once it
    // had served, is the cell's finding, not the environment's error.
    let (error, unrecovered, unresponsive) = match error {
        Some(e @ CellError::NotRecovered { .. }) => (None, Some(e.to_string()), None),
        Some(CellError::Verify(e)) if !e.fatal => {
            (None, None, Some(unresponsive(&e, m.cgroup.as_ref())))
        }
        e => (e, None, None),
    };
    // The records are complete: the cell's events are over but its verdict.
    let rec: Recorder = std::mem::take(&mut bus.recorder);
    let mut integrity: Integrity = rec.integrity;
    integrity.acknowledged = m
        .load
        .as_ref()
        .map(|l| l.acknowledged_writes())
        .unwrap_or(0);
    // Reads during the load judged every key they read: what they found
    // counts with the read-backs' findings (a key is counted once: a loss
    // marks it unknown until rewritten).
    if let Some(l) = &m.load {
        integrity.lost += l.lost_reads;
        integrity.corrupted += l.corrupted_reads;
        integrity.resurrected += l.resurrected_reads;
        integrity.aborted += l.aborted_reads;
    }
    let checks = checks::evaluate(
        &plan.checks,
        &Measured {
            integrity: &integrity,
            memory: &memory,
            restarts: &rec.restarts,
            ops_per_s: m.load.as_ref().map(|l| l.ops_per_s()),
            latency_us: m.load.as_ref().map(|l| &l.latency_us),
            execs: &rec.execs,
            upgrades: &rec.upgrades,
            phases: &rec.phases,
            windows: &m.windows,
            samples: &m.samples,
            warmup_s: plan.warmup_s,
            memory_limit: plan.limits.memory,
            unsynced_tail_allowed: plan.unsynced_tail_allowed,
            unrecovered,
            unresponsive,
        },
    );
    let verdict = checks::cell_verdict(error.is_some(), &checks);
    let expectation = plan.expect.as_ref().map(|e| expectation(e, &checks));
    bus.emit(Event::Verdict { verdict });
    let rel = &plan.rel_dir;
    let mut files: BTreeMap<String, String> = ["node.log", "samples.csv.gz", "events.jsonl"]
        .iter()
        .map(|f| (f.to_string(), format!("{rel}/{f}")))
        .collect();
    if m.load.is_some() {
        files.insert("latency.csv".into(), format!("{rel}/latency.csv"));
    }
    if plan.scrape.is_some() {
        files.insert("metrics.csv.gz".into(), format!("{rel}/metrics.csv.gz"));
    }
    for e in &rec.execs {
        files.insert(e.log.clone(), format!("{rel}/{}", e.log));
    }
    let result = CellResult {
        id: plan.id.clone(),
        params: plan.params.clone(),
        verdict,
        error: error.map(|e| e.to_string()),
        checks,
        integrity,
        memory,
        load: m.load.as_ref().map(|l| l.summary()),
        files,
        seed: Some(plan.seed),
        allocator: plan.allocator.as_ref().map(|a| a.text.clone()),
        restarts: rec.restarts,
        phases: rec.phases,
        chaos: rec.chaos,
        execs: rec.execs,
        upgrades: rec.upgrades,
        offline: rec.offline,
        cgroup: m.cgroup,
        engine: m.engine,
        expectation,
        repeat_of: None,
        network: m.network,
        disk_faults: m.disk_faults,
        recoveries: recoveries(&plan.dir.join("latency.csv"), rec.lifts, &rec.faults_at),
        error_replies: m
            .error_replies
            .into_iter()
            .map(|(at_s, reply)| crate::model::ErrorReply { at_s, reply })
            .collect(),
        log_errors: crate::analysis::log::error_lines(&plan.dir.join("node.log"), 8),
        harness: harness_cost(&m.samples, plan.interval),
    };
    result
}

/// soak's own cost over the cell, from the first to the last sample.
fn harness_cost(samples: &[Sample], interval: Duration) -> Option<crate::model::HarnessCost> {
    let (first, last) = (samples.first()?, samples.last()?);
    let span = last.t - first.t;
    (span > 0.0).then(|| crate::model::HarnessCost {
        rss_first_bytes: first.soak_rss,
        rss_last_bytes: last.soak_rss,
        rss_peak_bytes: samples.iter().map(|s| s.soak_rss).max().unwrap_or(0),
        cpu_share: (last.soak_cpu_s - first.soak_cpu_s) / span,
        sampler_cpu_share: (last.sampler_cpu_s - first.sampler_cpu_s) / span,
        interval_s: interval.as_secs_f64(),
        // A thread that ended before the last sample took its count
        // along: never below 0.
        load_cpu_share: ((last.load_cpu_s - first.load_cpu_s) / span).max(0.0),
        faultfs_cpu_share: ((last.faultfs_cpu_s - first.faultfs_cpu_s) / span).max(0.0),
    })
}

/// How soon after each lift the node served writes again: the end of the
/// first interval of `latency.csv` after it with writes acknowledged and
/// no request failed, if that came before the next fault (`faults_at`).
fn recoveries(
    latency_csv: &std::path::Path,
    mut lifts: Vec<crate::model::Recovery>,
    faults_at: &[f64],
) -> Vec<crate::model::Recovery> {
    if lifts.is_empty() {
        return lifts;
    }
    // t,ops,ops_per_s,writes,reads,errors,...
    let rows: Vec<(f64, u64, u64)> = std::fs::read_to_string(latency_csv)
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            Some((
                f.first()?.parse().ok()?,
                f.get(3)?.parse().ok()?,
                f.get(5)?.parse().ok()?,
            ))
        })
        .collect();
    for l in &mut lifts {
        let next = faults_at
            .iter()
            .copied()
            .filter(|&t| t >= l.lifted_at_s)
            .reduce(f64::min);
        l.next_fault_after_s = next.map(|t| t - l.lifted_at_s);
        l.serving_after_s = rows
            .iter()
            .take_while(|(t, _, _)| next.is_none_or(|n| *t <= n))
            .find(|(t, writes, errors)| *t > l.lifted_at_s && *writes > 0 && *errors == 0)
            .map(|(t, _, _)| t - l.lifted_at_s);
    }
    lifts
}

/// What a node's cgroup recorded, from its files and the samples.
fn cgroup_summary(
    c: &cgroup::Cgroup,
    placement: Option<&Placement>,
    samples: &[Sample],
) -> CgroupSummary {
    let events = c.events();
    let pressure = c.pressure();
    let max_of = |f: fn(&Sample) -> Option<f64>| {
        samples
            .iter()
            .filter_map(f)
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
    };
    CgroupSummary {
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
