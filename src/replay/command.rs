//! The command lines of `soak replay` and `soak shrink`.

use std::path::PathBuf;
use std::time::Duration;

use super::{open, shrink, Overrides, Pick, ReplayError};
use crate::exit;

/// Which cell, and which build of the node.
#[derive(Debug, Clone, clap::Args)]
pub struct Target {
    /// The run's report folder: reports/SUITE/TIME-ID (what `soak run`
    /// printed, without report.md).
    pub run: PathBuf,
    /// The cell (its id, as in the report); needed when the run has more
    /// than one (for `shrink`: more than one failed).
    #[arg(long, value_name = "ID")]
    pub cell: Option<String>,
    /// Run another build of the node: this command instead of the suite's
    /// `node.command`, quoted as a shell would (no shell runs it), with
    /// the suite's templates (`${PORT}`, `${DATA_DIR}`, ...).
    #[arg(long, value_name = "COMMAND")]
    pub node_command: Option<String>,
    /// Run one of the suite's `versions:` as the node (its command, image
    /// and environment).
    #[arg(long, value_name = "NAME", conflicts_with = "node_command")]
    pub node_version: Option<String>,
    #[command(flatten)]
    pub reach: crate::run::Reach,
}

impl Target {
    fn overrides(&self) -> Result<Overrides, ReplayError> {
        Ok(Overrides {
            node_command: self
                .node_command
                .as_deref()
                .map(Overrides::parse_command)
                .transpose()
                .map_err(ReplayError::Usage)?,
            node_version: self.node_version.clone(),
            reach: self.reach.clone(),
        })
    }
}

/// `soak shrink`'s own options.
#[derive(Debug, Clone, clap::Args)]
pub struct ShrinkArgs {
    #[command(flatten)]
    pub target: Target,
    /// Time for the whole search (a trial begun runs to its end).
    #[arg(long, default_value = "30m", value_parser = budget)]
    pub budget: Duration,
    /// Runs per candidate schedule: it fails when one of them fails.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub tries: u32,
    /// The check to reproduce (default: the first the cell failed).
    #[arg(long, value_name = "NAME")]
    pub check: Option<String>,
}

fn budget(s: &str) -> Result<Duration, String> {
    match crate::units::parse_duration(s) {
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) => Err("a budget above 0, e.g. 30m".into()),
        Err(e) => Err(e.to_string()),
    }
}

fn failed(e: ReplayError) -> i32 {
    eprintln!("error: {e}");
    e.exit_code()
}

/// `soak replay RUN [--cell ID]`: the exit code of the run it starts.
pub fn replay(t: Target) -> i32 {
    let over = match t.overrides() {
        Ok(o) => o,
        Err(e) => return failed(e),
    };
    let rec = match open(&t.run, t.cell.as_deref(), Pick::Any) {
        Ok(r) => r,
        Err(e) => return failed(e),
    };
    let Some(rt) = crate::run::runtime() else {
        return exit::ENVIRONMENT;
    };
    rt.block_on(async move {
        let rx = crate::signal::interrupts(over.reach.docker_host.clone(), over.reach.kube_plan());
        let progress = crate::progress::Progress::new(
            crate::progress::Mode::detect(),
            false,
            Duration::from_secs(30),
        );
        let ran = super::replay(&rec, &over, rx, &progress).await;
        progress.finish();
        match ran {
            Ok((summary, dir)) => {
                crate::run::tell(&summary);
                eprintln!("soak: verdict {}", summary.headline());
                println!("{}", dir.join("report.md").display());
                exit::of_summary(&summary)
            }
            Err(e) => failed(e),
        }
    })
}

/// `soak shrink RUN [--cell ID] [--budget 30m] [--tries N]`.
pub fn shrink(a: ShrinkArgs) -> i32 {
    let over = match a.target.overrides() {
        Ok(o) => o,
        Err(e) => return failed(e),
    };
    let rec = match open(&a.target.run, a.target.cell.as_deref(), Pick::Failed) {
        Ok(r) => r,
        Err(e) => return failed(e),
    };
    // Nothing to shrink is said before anything starts.
    if let Err(e) = shrink::target(&rec, a.check.as_deref()) {
        return failed(e);
    }
    let opts = shrink::Options {
        budget: a.budget,
        tries: a.tries,
        check: a.check,
        over,
    };
    let Some(rt) = crate::run::runtime() else {
        return exit::ENVIRONMENT;
    };
    rt.block_on(async move {
        let rx = crate::signal::interrupts(
            opts.over.reach.docker_host.clone(),
            opts.over.reach.kube_plan(),
        );
        match super::shrink_run(&rec, &opts, rx).await {
            Ok(code) => code,
            Err(e) => failed(e),
        }
    })
}
