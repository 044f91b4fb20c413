//! `soak run`: from a suite to a verdict, a report and an exit code.

mod assemble;
pub mod dashboard;
mod prepare;
mod resources;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rand::Rng;
use tokio::sync::watch;

use crate::cell::bus::Bus;
use crate::cell::event::{Event, Jsonl};
use crate::cell::timeline;
use crate::cell::{Cell, CellError, Context};
use crate::driver::allocator;
use crate::driver::any::AnyNode;
use crate::driver::cgroup::{self, place::Placement};
use crate::driver::Node;
use crate::exit;
use crate::model::{CellResult, Stop, Summary, Verdict};
use crate::plan::{self, CellPlan, PlanError, RunContext};
use crate::progress::Progress;
use crate::suite::{matrix, CellDef, Suite, SuiteError};
use resources::CellResources;

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
    #[command(flatten)]
    pub reach: Reach,
    /// Run each cell N times (instead of the suite's `repeat:`): the report
    /// gives each figure's median and spread over the N runs.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100))]
    pub repeat: Option<u32>,
    /// Serve the report page live while the run goes, at ADDR (host:port;
    /// without it, 127.0.0.1 and a free port), printed at the start: the
    /// current cell and phase, the charts growing, findings as they
    /// happen. Read-only; it stops with the run.
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:0")]
    pub dashboard: Option<String>,
}

impl RunOptions {
    /// A run of `suite` into `out` with every other option at its default
    /// (what `soak replay` and `soak shrink` start their runs with).
    pub fn for_suite(suite: PathBuf, out: PathBuf) -> RunOptions {
        RunOptions {
            suite,
            out,
            duration_scale: 1.0,
            seed: None,
            interval: None,
            only: vec![],
            shard: None,
            progress: None,
            heartbeat: Duration::from_secs(30),
            run_id: None,
            quiet: false,
            claim_cgroup: false,
            reach: Reach::default(),
            repeat: None,
            dashboard: None,
        }
    }

    /// The cluster image nodes run on, if the command line names one.
    pub fn kube_plan(&self) -> Option<crate::driver::kubernetes::KubePlan> {
        self.reach.kube_plan()
    }
}

/// Where image nodes run: a Docker engine, or a Kubernetes cluster
/// (`soak run`, `replay` and `shrink` take the same options).
#[derive(Debug, Clone, clap::Args)]
pub struct Reach {
    /// The Docker engine for container nodes (`unix:///PATH`,
    /// `tcp://HOST:PORT`, with TLS when `DOCKER_TLS_VERIFY` is set,
    /// `ssh://USER@HOST`); default `DOCKER_HOST`, else the local socket.
    #[arg(long, value_name = "URL")]
    pub docker_host: Option<String>,
    /// Run image nodes as Pods on the Kubernetes cluster this kubeconfig
    /// names (instead of a Docker engine).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Run image nodes as Pods on the cluster `KUBECONFIG`,
    /// `~/.kube/config` or the in-cluster service account names.
    #[arg(long)]
    pub kubernetes: bool,
    /// The namespace of the Pods and claims (with --kubeconfig or
    /// --kubernetes).
    #[arg(long, value_name = "NS", default_value = "default")]
    pub namespace: String,
    /// How soak reaches a Pod's ports: `host` (the host's network; soak
    /// runs on the Pod's machine), `port-forward` (the Pod's own network,
    /// through the API server, from anywhere), `pod-ip` (the Pod's own
    /// network at its address, from inside the cluster). The suite's
    /// `127.0.0.1:${PORT}` reaches the node whichever it is.
    #[arg(long, value_name = "HOW", value_enum, default_value = "host")]
    pub pod_network: crate::driver::kubernetes::PodNetwork,
}

impl Default for Reach {
    fn default() -> Reach {
        Reach {
            docker_host: None,
            kubeconfig: None,
            kubernetes: false,
            namespace: "default".into(),
            pod_network: Default::default(),
        }
    }
}

impl Reach {
    /// The cluster image nodes run on, if the options name one.
    pub fn kube_plan(&self) -> Option<crate::driver::kubernetes::KubePlan> {
        (self.kubernetes || self.kubeconfig.is_some()).then(|| {
            crate::driver::kubernetes::KubePlan {
                kubeconfig: self.kubeconfig.clone(),
                namespace: self.namespace.clone(),
                network: self.pod_network,
            }
        })
    }
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
    // The text too: each cell's replay.yaml keeps the suite as it was read.
    let (suite, suite_text) = Suite::load_text(&opts.suite)?;
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
    let placement = placement(&suite, &run_id, opts.claim_cgroup)?;
    let dashboard = match &opts.dashboard {
        Some(addr) => Some(start_dashboard(addr, &suite.name, &run_id, progress).await?),
        None => None,
    };
    let started = chrono::Utc::now();
    let dir = run_dir(&opts.out, &suite.name, &run_id, started)?;
    let origin = tokio::time::Instant::now();
    let seed = opts.seed.unwrap_or_else(|| rand::rng().random());
    if !opts.quiet {
        announce(&suite, opts, cells.len(), seed, &dir);
    }
    let ctx = run_context(&suite, opts, &run_id, &dir, seed)?;
    let prepared = prepare_run(&suite, opts, &ctx, &dir, &interrupt, (started, origin)).await?;
    progress.begin_run(&suite, cells.len(), opts.duration_scale);
    if let Some(d) = &dashboard {
        d.run(&dir, cells.len());
    }

    let mut results = vec![];
    let mut charts = BTreeMap::new();
    let mut env_error = None;
    for (index, (cell, repeat_of)) in cells.iter().enumerate() {
        if *interrupt.borrow() {
            break;
        }
        let header = cell_header(opts, &ctx, &suite_text, &cell.id, seed);
        let resolved = plan::resolve(&suite, cell, index, &ctx).map_err(|e| match e {
            PlanError::Template { field, error } => {
                RunError::Usage(PlanError::Template { field, error }.located(&opts.suite, &cell.id))
            }
            e => e.into(),
        });
        let ran = match resolved {
            Ok(p) => {
                if let Some(d) = &dashboard {
                    d.cell_started(&p.id, &p.dir);
                }
                let cell = CellRun {
                    suite: &suite,
                    plan: &p,
                    placement: placement.as_ref(),
                    header,
                };
                run_cell(cell, interrupt.clone(), progress).await
            }
            Err(e) => Err(e),
        };
        if let Some(e) = record(ran, cell, repeat_of, &dir, &mut results, &mut charts) {
            env_error.get_or_insert(e);
        }
        if let (Some(d), Some(r)) = (&dashboard, results.last()) {
            d.cell_done(r);
        }
        // Partial results survive a crash of soak itself.
        let summary = summary_of(&suite, opts, &ctx, started, origin, results.clone());
        let _ = crate::report::write_all(&dir, &summary, &charts);
    }
    let mut summary = summary_of(&suite, opts, &ctx, started, origin, results);
    summary.prepared = prepared;
    if *interrupt.borrow() {
        summary.stopped = Some(Stop::Interrupted);
    }
    crate::report::write_all(&dir, &summary, &charts).map_err(RunError::io(format!(
        "cannot write the report in {}",
        dir.display()
    )))?;
    if let Some(d) = dashboard {
        d.finish(&dir, summary.stopped.is_some()).await;
    }
    // One cell, and it never got going: that is the environment's failure.
    if let (Some(e), 1) = (env_error, summary.cells.len()) {
        return Err(e);
    }
    Ok((summary, dir))
}

/// The suite's `prepare:` steps; when one fails, the report says which,
/// with its log, and no cell runs.
async fn prepare_run(
    suite: &Suite,
    opts: &RunOptions,
    ctx: &RunContext,
    dir: &Path,
    interrupt: &watch::Receiver<bool>,
    (started, origin): (chrono::DateTime<chrono::Utc>, tokio::time::Instant),
) -> Result<Vec<crate::model::Prepared>, RunError> {
    let (prepared, ready) = prepare::run(
        &suite.prepare,
        &ctx.suite_dir,
        dir,
        interrupt.clone(),
        opts.quiet,
    )
    .await;
    if let Err(e) = ready {
        let mut summary = summary_of(suite, opts, ctx, started, origin, vec![]);
        summary.prepared = prepared;
        summary.verdict = Verdict::Error;
        let _ = crate::report::write_all(dir, &summary, &BTreeMap::new());
        return Err(e);
    }
    Ok(prepared)
}

/// Keeps a cell's result (and its chart), or the error it could not run
/// for as its result; returns that error.
fn record(
    ran: Result<CellResult, RunError>,
    cell: &CellDef,
    repeat_of: &Option<String>,
    dir: &Path,
    results: &mut Vec<CellResult>,
    charts: &mut crate::report::charts::Charts,
) -> Option<RunError> {
    let (mut result, error) = match ran {
        Ok(result) => {
            if let Some(chart) = crate::report::charts::of_cell(dir, &result) {
                charts.insert(result.id.clone(), chart);
            }
            (result, None)
        }
        Err(e) => (
            CellResult::error(&cell.id, cell.params_map(), e.to_string()),
            Some(e),
        ),
    };
    result.repeat_of.clone_from(repeat_of);
    results.push(result);
    error
}

/// The dashboard of `--dashboard ADDR` (a host without a port gets a free
/// one), said on stderr.
async fn start_dashboard(
    addr: &str,
    suite: &str,
    run_id: &str,
    progress: &Progress,
) -> Result<dashboard::Dashboard, RunError> {
    let addr = match addr.parse::<std::net::IpAddr>() {
        Ok(ip) => std::net::SocketAddr::new(ip, 0).to_string(),
        Err(_) => addr.to_string(),
    };
    let d = dashboard::Dashboard::start(&addr, suite, run_id, progress.clone())
        .await
        .map_err(RunError::Usage)?;
    eprintln!(
        "soak: dashboard at http://{}/ (read-only; it stops with the run)",
        d.addr
    );
    if !d.addr.ip().is_loopback() {
        eprintln!(
            "soak: warning: the dashboard listens on {}, not on loopback: other hosts can read it",
            d.addr.ip()
        );
    }
    Ok(d)
}

/// The multi-threaded runtime of a command, or `None` (said on stderr).
pub fn runtime() -> Option<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| eprintln!("error: cannot start the runtime: {e}"))
        .ok()
}

/// Each cell's verdict and findings in a line, on stderr.
pub fn tell(summary: &Summary) {
    let found = crate::report::text::finding_columns(summary);
    for c in &summary.cells {
        let figures: String = found
            .iter()
            .map(|f| format!(", {} {}", f.heading, f.cell(c)))
            .collect();
        eprintln!(
            "soak: cell {}: {} (lost {}, corrupted {}, in doubt {}{figures}, OOM kills {}, restarts {})",
            c.id,
            c.verdict.as_str(),
            c.integrity.lost_writes(),
            c.integrity.corrupted,
            c.integrity.in_doubt,
            c.memory.oom_kills,
            c.restarts.len()
        );
        if let Some(e) = &c.error {
            eprintln!("soak: cell {}: {e}", c.id);
        }
        // Which checks made it fail, so that a CI log's tail says why.
        let failed = c.verdict == Verdict::Fail;
        for r in c
            .checks
            .iter()
            .filter(|r| failed && r.verdict == Verdict::Fail)
        {
            eprintln!(
                "soak: cell {}: {} {}",
                c.id,
                r.verdict.as_str(),
                crate::report::text::check_text(r)
            );
        }
        if let Some(e) = c.expectation.as_ref().filter(|e| !e.met) {
            eprintln!(
                "soak: cell {}: expectation {}",
                c.id,
                e.outcome().replace("**", "")
            );
        }
        if let Some(l) = c.memory.oom_error_lines.first() {
            eprintln!(
                "soak: cell {}: out of memory inside the node, {} lines of node.log: {}",
                c.id, c.memory.oom_errors, l.line
            );
        }
    }
}

/// Where the nodes' cgroups go: decided once, before anything is made,
/// and undone when the run ends (see `driver::cgroup::place`). Without a
/// limit, a node runs without a cgroup where soak may make none; so does
/// a container or a Pod, whose limit is its runtime's (soak may run where
/// it can make no cgroup at all, off the cluster's machines).
fn placement(suite: &Suite, run_id: &str, claim: bool) -> Result<Option<Placement>, RunError> {
    match cgroup::place::place(run_id, claim) {
        Ok(p) => Ok(Some(p)),
        Err(e) if suite.limits.need_cgroup() && suite.node.image.is_none() => Err(
            RunError::Environment(format!("limits.memory needs a memory cgroup: {e}")),
        ),
        Err(_) => Ok(None),
    }
}

fn announce(suite: &Suite, opts: &RunOptions, cells: usize, seed: u64, dir: &Path) {
    eprintln!(
        "soak: running {} ({}, {cells} cell{}, seed {seed}), report in {}",
        suite.name,
        opts.suite.display(),
        if cells == 1 { "" } else { "s" },
        dir.display()
    );
}

/// What a cell's `replay.yaml` starts with.
fn cell_header(
    opts: &RunOptions,
    ctx: &RunContext,
    suite_text: &str,
    cell: &str,
    seed: u64,
) -> timeline::Header {
    timeline::Header {
        version: timeline::VERSION,
        soak: env!("CARGO_PKG_VERSION").into(),
        suite_file: std::path::absolute(&opts.suite)
            .unwrap_or_else(|_| opts.suite.clone())
            .display()
            .to_string(),
        suite_dir: ctx.suite_dir.display().to_string(),
        suite_text: suite_text.to_string(),
        cell: cell.to_string(),
        seed,
        scale: opts.duration_scale,
    }
}

/// The run's folder: `OUT/SUITE/TIME-ID`, made.
fn run_dir(
    out: &Path,
    suite: &str,
    run_id: &str,
    started: chrono::DateTime<chrono::Utc>,
) -> Result<PathBuf, RunError> {
    let dir = out
        .join(suite)
        .join(format!("{}-{run_id}", started.format("%Y%m%dT%H%M%SZ")));
    std::fs::create_dir_all(&dir)
        .map_err(RunError::io(format!("cannot create {}", dir.display())))?;
    dir.canonicalize()
        .map_err(RunError::io("cannot create the run folder"))
}

/// What every cell of the run is planned with.
fn run_context(
    suite: &Suite,
    opts: &RunOptions,
    run_id: &str,
    dir: &Path,
    seed: u64,
) -> Result<RunContext, RunError> {
    Ok(RunContext {
        run_id: run_id.to_string(),
        soak_node: soak_node(dir)?,
        run_dir: dir.to_path_buf(),
        suite_dir: std::fs::canonicalize(&opts.suite)
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .unwrap_or_else(|| PathBuf::from(".")),
        seed,
        scale: opts.duration_scale,
        interval: opts.interval,
        real_ports: true,
        find_libraries: true,
        docker_host: opts.reach.docker_host.clone(),
        kubernetes: opts.kube_plan(),
        suite_name: suite.name.clone(),
    })
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
        prepared: vec![],
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

/// The `linearizable` check on the cell's history, off the runtime's
/// threads.
async fn judge_history(
    plan: &CellPlan,
    c: crate::suite::checks::LinearizableCheck,
    bus: &Bus,
) -> crate::cell::linearizable::Judged {
    let file = crate::history::command::FILE;
    let path = plan.dir.join(file);
    let rel = format!("{}/{file}", plan.rel_dir);
    let rec = bus.recorder.clone();
    tokio::task::spawn_blocking(move || {
        crate::cell::linearizable::judge(&path, &rel, &c, &|a, b| rec.faults_during(a, b))
    })
    .await
    .expect("the history check does not panic")
}

/// What one cell runs with.
struct CellRun<'a> {
    suite: &'a Suite,
    plan: &'a CellPlan,
    placement: Option<&'a Placement>,
    header: timeline::Header,
}

async fn run_cell(
    run: CellRun<'_>,
    interrupt: watch::Receiver<bool>,
    progress: &Progress,
) -> Result<CellResult, RunError> {
    let CellRun {
        suite,
        plan,
        placement,
        header,
    } = run;
    let origin = tokio::time::Instant::now();
    std::fs::create_dir_all(&plan.data_dir)
        .map_err(RunError::io("cannot create the cell folder"))?;
    let jsonl =
        Jsonl::create(&plan.dir.join("events.jsonl")).map_err(RunError::io("events file"))?;
    let mut bus = Bus::new(&plan.id, origin).with(jsonl);
    if progress.console() {
        bus = bus.with(progress.console_sink());
    }
    let mut parts = CellResources::start(plan, placement, origin).await?;
    bus = bus.with(progress.cell(
        plan,
        parts.load.as_ref().map(|l| l.live()),
        parts.target.clone(),
    ));
    bus.emit(resources::cell_event(
        plan,
        parts.cgroup.as_deref(),
        parts.engine.as_ref(),
    ));
    if let Some(text) = parts.fault_fs_notice() {
        bus.notice("fault filesystem", text);
    }
    let ctx = Context {
        dir: plan.dir.clone(),
        vars: plan.vars.clone(),
        run_id: crate::lock::run_id(),
        seed: plan.seed,
        scale: plan.scale,
        versions: plan.versions.clone(),
        readback_after_restart: plan.readback_after_restart,
        faults: parts.faults(),
        unsynced_tail_allowed: plan.unsynced_tail_allowed,
        services: parts.services.clone(),
    };
    let verify = plan.load.as_ref().map(|l| l.protocol.open());
    let remote = parts
        .engine
        .as_ref()
        .filter(|e| !e.local)
        .map(|e| e.host.clone());
    let target = parts.target.clone();
    let mut cell = Cell::new(
        &mut parts.node,
        parts.load.as_mut(),
        target,
        &mut bus,
        verify,
        interrupt,
        ctx,
    );
    cell.timeline.header = header;
    let outcome = drive(&mut cell, remote.as_deref(), plan, &suite.phases).await;
    cell.finish().await;
    drop(cell);
    let mut measured = parts.stop(plan, placement, &mut bus).await;
    if let (Some(c), Some(_)) = (plan.checks.linearizable, &measured.history) {
        measured.judged = Some(judge_history(plan, c, &bus).await);
    }
    if let Err(e) = &outcome {
        if e.never_started() && bus.recorder.restarts.is_empty() {
            bus.error(e.to_string());
            return Err(RunError::Environment(e.to_string()));
        }
    }
    Ok(assemble::assemble(plan, outcome.err(), &mut bus, measured))
}
