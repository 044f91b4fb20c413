//! The `soak` command line.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::exit;
use crate::run::{self, RunOptions};
use crate::suite::Suite;

#[derive(Parser)]
#[command(
    name = "soak",
    version,
    about = "Chaos/soak test orchestrator for stateful services",
    after_help = "Exit codes: 0 every check passed, 1 a check failed, 2 the suite or the command line is invalid, 3 the environment failed (no cgroup access, a node that never got ready)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a suite: start the node, drive the phases, verify, report.
    Run(RunOptions),
    /// Run a cell of a finished run again, as it ran: its phases, the
    /// chaos actions its seed drew at the times they came, the same
    /// workload seed (against another build with --node-command or
    /// --node-version). Exit codes as `soak run`.
    Replay(crate::replay::command::Target),
    /// Cut a failed cell's chaos schedule down to the fewest actions that
    /// still fail the same check (ddmin, then shorter waits), each trial a
    /// real run; writes shrunk.yaml and shrink.md in the run's folder and
    /// prints shrunk.yaml's path last. Exit 0 when the shrunk suite fails
    /// as the original did, 1 when the failure was not reproduced within
    /// the budget, 2 when there is nothing to shrink, 130 when interrupted
    /// (what was found is still written).
    Shrink(crate::replay::command::ShrinkArgs),
    /// Check a history for linearizability: Jepsen's log or EDN, Porcupine's
    /// JSON, soak's JSON lines or a cell's history.bin.gz. Exit 0 when it is
    /// linearizable, 1 when it is not, 2 when the file is not a history
    /// (its line named), 3 when the search ran out of its budget.
    CheckHistory(crate::history::command::CheckArgs),
    /// Write a cell's recorded history in Jepsen's EDN, Porcupine's JSON or
    /// soak's JSON lines, for Elle, Knossos, Porcupine or your own tools.
    History(crate::history::command::ExportArgs),
    /// Check suites without running anything.
    Validate {
        #[arg(required = true)]
        suites: Vec<PathBuf>,
    },
    /// Read back every key a cell's saved ledger knows, also after soak
    /// itself died: the node is started again on the cell's data (or give
    /// --target to read from a node that runs).
    Verify {
        /// The cell's folder: reports/SUITE/RUN/cells/CELL.
        cell: PathBuf,
        /// Read from this node instead of starting the cell's.
        #[arg(long)]
        target: Option<String>,
    },
    /// Read a stopped node's RocksDB data directory: checksums of every
    /// block, keys per column family, SSTs by level and by compression, the
    /// RocksDB version that wrote it; with --ledger, every key judged.
    #[cfg(feature = "node")]
    Inspect {
        /// The RocksDB data directory (the node must be stopped).
        data_dir: PathBuf,
        /// A cell's ledger.bin, to judge soak-node's keys against.
        #[arg(long)]
        ledger: Option<PathBuf>,
        /// Print the inspection as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the JSON Schema of suites (for editors: see the README), or
    /// with --summary, of the summary.json a run writes.
    Schema {
        #[arg(long)]
        summary: bool,
    },
    /// Finished runs' reports: `soak report DIR` renders DIR/report.md
    /// again from its summary.json and samples; `compare` and `merge`.
    Report(ReportArgs),
    /// What soak can do on this host (cgroups and where soak would place
    /// its own, allocators, tools, Docker, disk) and what to install or
    /// change for the rest. Exit 0 when suites/smoke.yaml can run, else 3.
    Doctor {
        /// The reports folder whose free disk to check.
        #[arg(long, default_value = "reports")]
        out: PathBuf,
    },
    /// Remove what interrupted runs left: processes and cgroups labelled by
    /// soak. Runs whose soak is still alive (on a shared host, another
    /// shell's) are left alone unless --force.
    Cleanup {
        /// Only this run id (the suffix of the report folder).
        #[arg(long)]
        run: Option<String>,
        /// Also what belongs to runs whose soak is alive.
        #[arg(long)]
        force: bool,
        /// The Docker engine whose containers to remove (as for `soak run
        /// --docker-host`); else DOCKER_HOST, else the local one.
        #[arg(long, value_name = "URL")]
        docker_host: Option<String>,
        /// Also the Pods, claims and volumes of dead runs on the cluster
        /// this kubeconfig names.
        #[arg(long, value_name = "FILE")]
        kubeconfig: Option<PathBuf>,
        /// Also those on the cluster KUBECONFIG, ~/.kube/config or the
        /// in-cluster service account names.
        #[arg(long)]
        kubernetes: bool,
        /// The namespace of the Pods and claims.
        #[arg(long, value_name = "NS", default_value = "default")]
        namespace: String,
    },
}

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
struct ReportArgs {
    #[command(subcommand)]
    command: Option<ReportCommand>,
    /// A run's report folder (reports/SUITE/RUN): its report.md,
    /// pr-comment.md, junit.xml and report.html are rendered again.
    dir: Option<PathBuf>,
    /// Write only report.html (for a run of an older soak, which had
    /// none), and print its path.
    #[arg(long)]
    html: bool,
}

#[derive(Subcommand)]
enum ReportCommand {
    /// Join the shards of a suite (`soak run --shard I/N` on several
    /// runners) into one report. Exit 0 when every cell passed, 1 when one
    /// failed, 3 when one could not run or a shard is missing.
    Merge {
        /// The shards' report folders.
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// Where to write the merged report (default: next to the first
        /// shard's folder).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Nightly runs of a suite in time order, and where each cell's
    /// figures (peak and steady RSS, RSS growth, ops/s, p99, peak disk)
    /// changed: a step at one run, or a creep run after run. Prints
    /// markdown with a chart per figure; exit 1 when the newest runs hold
    /// a change for the worse, 0 when they do not.
    History {
        /// Runs' report folders, or folders that hold them (reports/SUITE).
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// Also write the markdown to this file.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Compare two runs cell by cell (matched by id): throughput, latency,
    /// memory, disk, integrity, verdicts and checks. Prints markdown; exit
    /// 1 when anything got worse, 0 when nothing did.
    Compare {
        /// The run to compare against: its report folder or summary.json.
        base: PathBuf,
        /// The run under judgement: its report folder or summary.json.
        head: PathBuf,
        /// How much a figure may move before it counts (`10%` or `0.1`);
        /// lost writes, OOM kills and errors count on any increase.
        #[arg(long, default_value = "10%", value_parser = fraction)]
        threshold: f64,
        /// Also write the markdown to this file.
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

/// `10%` or `0.1`.
pub fn fraction(s: &str) -> Result<f64, String> {
    let v = match s.trim().strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|p| p / 100.0),
        None => s.trim().parse::<f64>(),
    };
    match v {
        Ok(v) if (0.0..=10.0).contains(&v) => Ok(v),
        _ => Err(format!("{s:?}: give a percentage such as 10% (or 0.1)")),
    }
}

#[cfg(feature = "node")]
/// Whether this process was started as `soak-node` (through a link).
fn started_as_node() -> bool {
    std::env::args_os().next().is_some_and(|a0| {
        std::path::Path::new(&a0)
            .file_name()
            .is_some_and(|n| n == crate::NODE_NAME)
    })
}

/// Runs the command line; returns the exit code.
pub fn main() -> i32 {
    #[cfg(feature = "node")]
    if started_as_node() {
        use clap::Parser;
        return crate::node::server::run(crate::node::NodeArgs::parse());
    }
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                exit::INVALID
            } else {
                exit::PASS
            };
        }
    };
    match cli.command {
        Command::Validate { suites } => validate_command(suites),
        Command::CheckHistory(a) => crate::history::command::check_history(a),
        Command::History(a) => crate::history::command::export(a),
        Command::Schema { summary } => {
            if summary {
                let schema = schemars::schema_for!(crate::model::Summary);
                println!(
                    "{}",
                    serde_json::to_string_pretty(&schema).expect("a schema serializes")
                );
            } else {
                println!("{}", crate::suite::schema::suite_schema());
            }
            exit::PASS
        }
        Command::Cleanup {
            run,
            force,
            docker_host,
            kubeconfig,
            kubernetes,
            namespace,
        } => {
            let kube = (kubernetes || kubeconfig.is_some()).then_some(
                crate::driver::kubernetes::KubePlan {
                    kubeconfig,
                    namespace,
                    network: Default::default(),
                },
            );
            cleanup_command(run, force, docker_host, kube)
        }
        Command::Run(opts) => run_command(opts),
        Command::Replay(t) => crate::replay::command::replay(t),
        Command::Shrink(a) => crate::replay::command::shrink(a),
        Command::Doctor { out } => crate::doctor::doctor(&out),
        Command::Verify { cell, target } => verify_command(&cell, target),
        Command::Report(args) => report_command(args),
        #[cfg(feature = "node")]
        Command::Inspect {
            data_dir,
            ledger,
            json,
        } => inspect_command(&data_dir, ledger.as_deref(), json),
    }
}

/// `soak report`: render a run's report again, its page alone, or compare,
/// join and follow runs.
fn report_command(args: ReportArgs) -> i32 {
    match args {
        ReportArgs {
            command:
                Some(ReportCommand::Compare {
                    base,
                    head,
                    threshold,
                    out,
                }),
            ..
        } => compare_command(&base, &head, threshold, out.as_deref()),
        ReportArgs {
            command: Some(ReportCommand::History { dirs, out }),
            ..
        } => history_command(&dirs, out.as_deref()),
        ReportArgs {
            command: Some(ReportCommand::Merge { dirs, out }),
            ..
        } => merge_command(&dirs, out.as_deref()),
        ReportArgs {
            command: None,
            dir: Some(dir),
            html: true,
        } => match crate::report::merge::html(&dir) {
            Ok(path) => {
                println!("soak: {}", path.display());
                exit::PASS
            }
            Err(e) => report_error(e),
        },
        ReportArgs {
            command: None,
            dir: Some(dir),
            ..
        } => match crate::report::merge::render(&dir) {
            Ok(_) => {
                println!("soak: {}", dir.join("report.md").display());
                exit::PASS
            }
            Err(e) => report_error(e),
        },
        ReportArgs {
            command: None,
            dir: None,
            ..
        } => {
            eprintln!("error: give a run's report folder (soak report reports/SUITE/RUN), or `soak report compare` / `soak report merge`");
            exit::INVALID
        }
    }
}

/// `soak validate`: every cell of each suite resolved as a run resolves it.
fn validate_command(suites: Vec<std::path::PathBuf>) -> i32 {
    let mut code = exit::PASS;
    for s in suites {
        // Every cell resolved as a run resolves it (placeholder
        // ports and folders): validation and running cannot disagree.
        let planned = Suite::load(&s)
            .map_err(|e| e.to_string())
            .and_then(|suite| {
                let ctx = crate::plan::RunContext::for_validation(&s);
                let cells = suite.cells();
                for (i, c) in cells.iter().enumerate() {
                    crate::plan::resolve(&suite, c, i, &ctx).map_err(|e| e.located(&s, &c.id))?;
                }
                Ok((suite, cells.len()))
            });
        match planned {
            Ok((suite, cells)) => println!(
                "{}: ok ({}, {cells} cell{}, {} phases)",
                s.display(),
                suite.name,
                if cells == 1 { "" } else { "s" },
                suite.phases.len()
            ),
            Err(e) => {
                eprintln!("error: {e}");
                code = exit::INVALID;
            }
        }
    }
    code
}

/// `soak cleanup`: what it removed, a line each.
fn cleanup_command(
    run: Option<String>,
    force: bool,
    docker_host: Option<String>,
    kube: Option<crate::driver::kubernetes::KubePlan>,
) -> i32 {
    let cleaned = crate::cleanup::cleanup(run.as_deref(), force, docker_host.as_deref());
    let (objects, objects_unchecked) = match &kube {
        Some(k) => match crate::cleanup::kubernetes(run.as_deref(), force, k) {
            Ok(o) => (o, None),
            Err(e) => (vec![], Some(e)),
        },
        None => (vec![], None),
    };
    for (what, run) in &objects {
        println!("removed {what} (run {run})");
    }
    for (pid, label) in &cleaned.processes {
        println!("killed process {pid} (run {label})");
    }
    for cg in &cleaned.cgroups {
        println!("removed cgroup {}", cg.display());
    }
    for (name, run) in &cleaned.containers {
        println!("removed container {name} (run {run})");
    }
    for (path, run) in &cleaned.mounts {
        println!("unmounted {} (run {run})", path.display());
    }
    for (name, run) in &cleaned.namespaces {
        println!("removed network namespace {name} (run {run})");
    }
    if cleaned.processes.is_empty()
        && cleaned.cgroups.is_empty()
        && cleaned.mounts.is_empty()
        && cleaned.namespaces.is_empty()
        && cleaned.containers.is_empty()
        && objects.is_empty()
    {
        println!("nothing to clean up");
    }
    if let Some(why) = &cleaned.containers_unchecked {
        println!("containers not checked: {why}");
    }
    if let Some(why) = &objects_unchecked {
        println!("Kubernetes objects not checked: {why}");
    }
    exit::PASS
}

/// `soak report merge`: the shards' reports as one.
fn merge_command(dirs: &[std::path::PathBuf], out: Option<&std::path::Path>) -> i32 {
    match crate::report::merge::merge(dirs, out) {
        Ok((merged, dir)) => {
            println!(
                "soak: merged {} cells: {}",
                merged.cells.len(),
                dir.join("report.md").display()
            );
            for missing in &merged.missing_shards {
                eprintln!("soak: shard {missing} is missing: its cells are not in the report");
            }
            let charts = crate::report::charts::of_run(&dir, &merged);
            if let Err(e) = crate::report::ci::publish(&merged, &charts) {
                eprintln!("soak: cannot write the CI job summary: {e}");
            }
            exit::of_verdict(merged.verdict)
        }
        Err(e) => report_error(e),
    }
}

#[cfg(feature = "node")]
fn inspect_command(dir: &std::path::Path, ledger: Option<&std::path::Path>, json: bool) -> i32 {
    use crate::units::Bytes;
    let ledger = match ledger.map(crate::oracle::Ledger::load).transpose() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::INVALID;
        }
    };
    let i = match crate::verify::offline::inspect(dir, ledger.as_ref()) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::INVALID;
        }
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&i).unwrap_or_default());
    } else {
        println!(
            "{}: {} on disk, written by RocksDB {}",
            dir.display(),
            Bytes(i.size_bytes),
            i.rocksdb_version.as_deref().unwrap_or("?")
        );
        println!(
            "checksums: {} ({:.2} s)",
            i.corruption.as_deref().unwrap_or("every block verified"),
            i.checksum_s
        );
        for (cf, n) in &i.keys {
            println!("keys in {cf}: {n} ({:.2} s)", i.scan_s);
        }
        for (what, groups) in [("level", &i.levels), ("compression", &i.compression)] {
            for (k, g) in groups {
                println!(
                    "SSTs at {what} {k}: {} files, {}, {} entries",
                    g.files,
                    Bytes(g.bytes),
                    g.entries
                );
            }
        }
        if let Some(f) = &i.integrity {
            println!("ledger: {f}");
        }
    }
    let bad = i.corruption.is_some()
        || i.integrity
            .is_some_and(|f| f.lost + f.corrupted + f.resurrected > 0);
    if bad {
        exit::CHECK_FAILED
    } else {
        exit::PASS
    }
}

fn verify_command(cell: &std::path::Path, target: Option<String>) -> i32 {
    use crate::verify::saved::{reverify, ReverifyError};
    let Some(rt) = crate::run::runtime() else {
        return exit::ENVIRONMENT;
    };
    match rt.block_on(reverify(cell, target)) {
        Ok(r) => {
            let i = r.integrity;
            println!(
                "{}: {} keys known to the ledger{}; {i}",
                cell.display(),
                r.keys_known,
                if r.stale_ledger {
                    " (saved while the run went on: newer writes count as in doubt)"
                } else {
                    ""
                },
            );
            if let Some(first) = &r.first_lost {
                println!("first lost: {first}");
            }
            if i.lost + i.corrupted + i.resurrected == 0 {
                exit::PASS
            } else {
                exit::CHECK_FAILED
            }
        }
        Err(e @ ReverifyError::Invalid(_)) => {
            eprintln!("error: {e}");
            exit::INVALID
        }
        Err(e @ ReverifyError::Environment(_)) => {
            eprintln!("error: {e}");
            exit::ENVIRONMENT
        }
    }
}

fn run_command(opts: RunOptions) -> i32 {
    let Some(rt) = crate::run::runtime() else {
        return exit::ENVIRONMENT;
    };
    rt.block_on(async move {
        let rx = crate::signal::interrupts(opts.reach.docker_host.clone(), opts.kube_plan());
        let progress = crate::progress::Progress::new(
            opts.progress.unwrap_or_else(crate::progress::Mode::detect),
            opts.quiet,
            opts.heartbeat,
        );
        let ran = run::run(&opts, rx, &progress).await;
        progress.finish();
        match ran {
            Ok((summary, dir)) => {
                println!("{}", dir.join("report.md").display());
                crate::run::tell(&summary);
                eprintln!("soak: verdict {}", summary.headline());
                let charts = crate::report::charts::of_run(&dir, &summary);
                if let Err(e) = crate::report::ci::publish(&summary, &charts) {
                    eprintln!("soak: cannot write the CI job summary: {e}");
                }
                exit::of_summary(&summary)
            }
            Err(e) => {
                eprintln!("error: {e}");
                e.exit_code()
            }
        }
    })
}

fn compare_command(
    base: &std::path::Path,
    head: &std::path::Path,
    threshold: f64,
    out: Option<&std::path::Path>,
) -> i32 {
    use crate::report::compare;
    let (base, head) = match (compare::load(base), compare::load(head)) {
        (Ok(b), Ok(h)) => (b, h),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("error: {e}");
            return exit::INVALID;
        }
    };
    let cmp = compare::compare(&base.summary, &head.summary, threshold);
    let md = compare::markdown(&base, &head, &cmp, threshold);
    print!("{md}");
    if let Some(out) = out {
        if let Err(e) = std::fs::write(out, &md) {
            eprintln!("error: cannot write {}: {e}", out.display());
            return exit::ENVIRONMENT;
        }
    }
    if cmp.regressions() > 0 {
        exit::CHECK_FAILED
    } else {
        exit::PASS
    }
}

fn history_command(dirs: &[PathBuf], out: Option<&std::path::Path>) -> i32 {
    use crate::report::history;
    let runs = match history::load(dirs) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::INVALID;
        }
    };
    let (found, series) = history::find(&runs);
    let md = history::markdown(&runs, &found, &series);
    print!("{md}");
    if let Some(out) = out {
        if let Err(e) = std::fs::write(out, &md) {
            eprintln!("error: cannot write {}: {e}", out.display());
            return exit::ENVIRONMENT;
        }
    }
    if history::regressed(&found) {
        exit::CHECK_FAILED
    } else {
        exit::PASS
    }
}

fn report_error(e: crate::report::merge::ReportError) -> i32 {
    use crate::report::merge::ReportError;
    eprintln!("error: {e}");
    match e {
        ReportError::Invalid(_) => exit::INVALID,
        ReportError::Environment(_) => exit::ENVIRONMENT,
    }
}
