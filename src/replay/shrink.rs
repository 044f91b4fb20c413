//! `soak shrink`: the smallest schedule that still fails the same check.
//!
//! Every trial is a real run of the node: the recorded cell as a suite of
//! explicit phases (see `replay::phases`) with some of its chaos actions
//! left out, each kept one at the time it came. The search is Zeller and
//! Hildebrandt's ddmin over the actions (halves, then smaller chunks and
//! their complements); when one action is left, none; then shorter waits
//! (every `run` between actions and of the suite's own halved while it
//! still fails); then the schedule found is run again for its share.
//!
//! A candidate of ddmin fails when the check fails in at least one of
//! `--tries` runs: a failure that needs a race may pass a try and fail the
//! next, and one failure is proof that the schedule can fail. Shorter
//! waits must fail every one of at least three runs: shortening a wait is
//! where a reliable failure turns into a race won now and then.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::{phases, suite_text, told, Overrides, Recorded, ReplayError, Schedule};
use crate::model::Verdict;
use crate::units::human_duration;

/// What `soak shrink` is asked.
#[derive(Debug, Clone)]
pub struct Options {
    /// Time for the whole search; a trial begun goes on to its end.
    pub budget: Duration,
    /// Runs per candidate, at most: it fails when one of them fails.
    pub tries: u32,
    /// The check to reproduce; default the first the cell failed.
    pub check: Option<String>,
    pub over: Overrides,
}

/// One trial of the search.
#[derive(Debug, Clone)]
pub struct Trial {
    pub no: usize,
    pub schedule: Schedule,
    pub tries: u32,
    pub fails: u32,
    pub secs: f64,
    /// The run's folder of the last try.
    pub dir: Option<PathBuf>,
    /// What the failing try found (its first read-back with losses), or
    /// why the try could not be judged.
    pub finding: Option<String>,
    /// What this trial asked: `original`, `subset`, `complement`,
    /// `none`, `waits`, `confirm`.
    pub step: &'static str,
    pub judge: Judge,
}

/// How a candidate's tries make its verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Judge {
    /// It fails when one of at most N tries fails (stops at the first).
    AnyOf(u32),
    /// It fails when each of N tries fails (stops at the first pass):
    /// shorter waits must not trade a failure for a race.
    AllOf(u32),
    /// All N tries run, for the share (the final schedule's).
    Count(u32),
}

impl Judge {
    fn more(self, tries: u32, fails: u32) -> bool {
        match self {
            Judge::AnyOf(n) => tries < n && fails == 0,
            Judge::AllOf(n) => tries < n && fails == tries,
            Judge::Count(n) => tries < n,
        }
    }
}

impl Trial {
    pub fn failed(&self) -> bool {
        match self.judge {
            Judge::AllOf(n) => self.fails == n,
            Judge::AnyOf(_) | Judge::Count(_) => self.fails > 0,
        }
    }
}

/// The search's end.
pub struct Outcome {
    pub check: String,
    pub actions: usize,
    pub trials: Vec<Trial>,
    /// The smallest schedule that failed, if the original did.
    pub best: Option<Schedule>,
    /// Why the search ended before it was done, if it did.
    pub cut_short: Option<String>,
    /// Failed and run tries of the smallest schedule, run again at the
    /// end (none: no time was left for it).
    pub confirmed: Option<(u32, u32)>,
    pub took: Duration,
}

struct Search<'a> {
    rec: &'a Recorded,
    opts: &'a Options,
    check: String,
    out: PathBuf,
    started: Instant,
    trials: Vec<Trial>,
    interrupt: watch::Receiver<bool>,
    cut_short: Option<String>,
}

/// The check to reproduce: the one asked, which the cell must have
/// failed, or the first it failed.
pub fn target(rec: &Recorded, asked: Option<&str>) -> Result<String, ReplayError> {
    let r = &rec.result;
    let failed: Vec<&str> = r
        .checks
        .iter()
        .filter(|c| c.verdict == Verdict::Fail)
        .map(|c| c.name.as_str())
        .collect();
    if r.verdict != Verdict::Fail || failed.is_empty() {
        return Err(ReplayError::Usage(format!(
            "cell {} of {} {}: nothing to shrink",
            r.id,
            rec.run_dir.display(),
            match (r.verdict, &r.error) {
                (Verdict::Error, Some(e)) => format!("ended in an error, not a failed check ({e})"),
                (Verdict::Error, None) => "ended in an error, not a failed check".into(),
                _ => "passed its checks".into(),
            }
        )));
    }
    match asked {
        Some(c) if failed.contains(&c) => Ok(c.to_string()),
        Some(c) => Err(ReplayError::Usage(format!(
            "--check {c}: cell {} did not fail it; it failed {}",
            r.id,
            failed.join(", ")
        ))),
        None => Ok(failed[0].to_string()),
    }
}

/// The first read-back of the run that found writes lost or corrupted:
/// its own words (`restart 3: ... first lost soak:2 ...`).
fn finding(cell_dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(cell_dir.join("events.jsonl")).ok()?;
    text.lines().find_map(|l| {
        let v: serde_json::Value = serde_json::from_str(l).ok()?;
        if v["kind"] != "read-back" {
            return None;
        }
        let i = &v["integrity"];
        let bad: u64 = ["lost", "corrupted", "lost_unsynced"]
            .iter()
            .map(|k| i[k].as_u64().unwrap_or(0))
            .sum();
        (bad > 0).then(|| v["detail"].as_str().unwrap_or_default().to_string())
    })
}

impl Search<'_> {
    fn left(&self) -> Duration {
        self.opts.budget.saturating_sub(self.started.elapsed())
    }

    /// One run of the trial's suite, judged into `trial`.
    async fn try_once(&self, file: &Path, trial: &mut Trial) {
        let mut opts = self.opts.over.run_options(
            file.to_path_buf(),
            self.out.clone(),
            self.rec.timeline.header.seed,
        );
        opts.quiet = true;
        let progress = crate::progress::Progress::new(
            crate::progress::Mode::None,
            true,
            Duration::from_secs(3600),
        );
        let (summary, dir) = match crate::run::run(&opts, self.interrupt.clone(), &progress).await {
            Ok(ran) => ran,
            Err(e) => {
                trial.finding = Some(format!("error: {e}"));
                return;
            }
        };
        let cell = summary.cells.first();
        let failed = cell.is_some_and(|c| {
            c.checks
                .iter()
                .any(|k| k.name == self.check && k.verdict == Verdict::Fail)
        });
        let cell_dir = cell.map(|c| dir.join("cells").join(crate::plan::folder(&c.id)));
        if failed {
            trial.fails += 1;
            trial.finding = cell_dir.as_deref().and_then(finding).or_else(|| {
                cell.and_then(|c| c.checks.iter().find(|k| k.name == self.check))
                    .map(|k| format!("{} = {} (limit {})", k.name, k.value, k.limit))
            });
        } else if let Some(e) = cell.and_then(|c| c.error.clone()) {
            trial.finding = Some(format!("error: {e}"));
        }
        // The trial's data is not needed to judge it again.
        if let Some(d) = cell_dir {
            let _ = std::fs::remove_dir_all(d.join("data"));
        }
        trial.dir = Some(dir);
    }

    /// Runs the schedule up to `tries` times; `None` when the budget or
    /// the user stopped the search first.
    async fn test(
        &mut self,
        s: &Schedule,
        step: &'static str,
        judge: Judge,
    ) -> Result<Option<bool>, ReplayError> {
        // Each schedule is judged once a way (an interrupted trial ends
        // the search, so every trial recorded here was judged whole).
        if let Some(t) = self
            .trials
            .iter()
            .find(|t| t.schedule == *s && t.judge == judge)
        {
            return Ok(Some(t.failed()));
        }
        if *self.interrupt.borrow() {
            self.cut_short.get_or_insert("interrupted".into());
            return Ok(None);
        }
        if self.left().is_zero() {
            self.cut_short.get_or_insert(format!(
                "the budget of {} ran out",
                human_duration(self.opts.budget)
            ));
            return Ok(None);
        }
        let no = self.trials.len() + 1;
        let t = &self.rec.timeline;
        let description = format!(
            "soak shrink trial {no} of {} cell {}: {}.",
            self.rec.run_dir.display(),
            t.header.cell,
            told(s, t.actions().len())
        );
        let text = suite_text(t, &phases(t, s)?, &self.opts.over, &description)?;
        let file = self.out.join(format!("trial-{no:03}.yaml"));
        std::fs::write(&file, text).map_err(|e| {
            ReplayError::Environment(format!("cannot write {}: {e}", file.display()))
        })?;
        let began = Instant::now();
        let mut trial = Trial {
            no,
            schedule: s.clone(),
            tries: 0,
            fails: 0,
            secs: 0.0,
            dir: None,
            finding: None,
            step,
            judge,
        };
        while judge.more(trial.tries, trial.fails) {
            trial.tries += 1;
            self.try_once(&file, &mut trial).await;
            if *self.interrupt.borrow() {
                break;
            }
        }
        trial.secs = began.elapsed().as_secs_f64();
        let failed = trial.failed();
        let smallest = self
            .trials
            .iter()
            .chain([&trial])
            .filter(|t| t.failed())
            .map(|t| t.schedule.keep.len())
            .min()
            .unwrap_or(t.actions().len());
        eprintln!(
            "soak shrink: trial {no} ({step}), {}: {} ({} of {} tries, {:.1} s); smallest failing so far: {} actions; {} left",
            told(s, t.actions().len()),
            if failed { "fails" } else { "passes" },
            trial.fails,
            trial.tries,
            trial.secs,
            smallest,
            human_duration(self.left())
        );
        self.trials.push(trial);
        if *self.interrupt.borrow() {
            self.cut_short.get_or_insert("interrupted".into());
            return Ok(None);
        }
        Ok(Some(failed))
    }
}

/// Zeller and Hildebrandt's ddmin over `c`, which fails: the smallest
/// subset it finds that `test` says fails (1-minimal: no one action of it
/// can go). `test` answers `None` when the search must stop.
pub async fn ddmin<E>(
    mut c: Vec<usize>,
    test: &mut impl AsyncFnMut(Vec<usize>, &'static str) -> Result<Option<bool>, E>,
) -> Result<Vec<usize>, E> {
    let mut n = 2;
    while c.len() >= 2 {
        let chunks = split(&c, n);
        let mut reduced = false;
        for ch in &chunks {
            match test(ch.clone(), "subset").await? {
                None => return Ok(c),
                Some(true) => {
                    c = ch.clone();
                    n = 2;
                    reduced = true;
                    break;
                }
                Some(false) => {}
            }
        }
        // With two chunks, each one's complement is the other.
        if !reduced && n > 2 {
            for ch in &chunks {
                let rest: Vec<usize> = c.iter().copied().filter(|i| !ch.contains(i)).collect();
                match test(rest.clone(), "complement").await? {
                    None => return Ok(c),
                    Some(true) => {
                        c = rest;
                        n = (n - 1).max(2);
                        reduced = true;
                        break;
                    }
                    Some(false) => {}
                }
            }
        }
        if !reduced {
            if n >= c.len() {
                break;
            }
            n = (2 * n).min(c.len());
        }
    }
    Ok(c)
}

/// `c` in `n` chunks as even as can be, in order.
fn split(c: &[usize], n: usize) -> Vec<Vec<usize>> {
    let n = n.min(c.len()).max(1);
    let mut out = vec![];
    let mut start = 0;
    for i in 0..n {
        let end = start + (c.len() - start) / (n - i);
        out.push(c[start..end].to_vec());
        start = end;
    }
    out
}

/// The whole search: the original, ddmin, shorter waits, none.
pub async fn search(
    rec: &Recorded,
    opts: &Options,
    check: String,
    out: PathBuf,
    interrupt: watch::Receiver<bool>,
) -> Result<Outcome, ReplayError> {
    std::fs::create_dir_all(&out)
        .map_err(|e| ReplayError::Environment(format!("cannot create {}: {e}", out.display())))?;
    let all = Schedule::all(&rec.timeline);
    let actions = all.keep.len();
    let mut s = Search {
        rec,
        opts,
        check: check.clone(),
        out,
        started: Instant::now(),
        trials: vec![],
        interrupt,
        cut_short: None,
    };
    let any = Judge::AnyOf(opts.tries);
    let best = match s.test(&all, "original", any).await? {
        Some(true) => {
            let mut test = async |keep: Vec<usize>, step| {
                s.test(&Schedule { keep, waits: 1.0 }, step, any).await
            };
            let mut best = Schedule {
                keep: ddmin(all.keep.clone(), &mut test).await?,
                waits: 1.0,
            };
            if best.keep.len() == 1 {
                let none = Schedule {
                    keep: vec![],
                    waits: 1.0,
                };
                if s.test(&none, "none", any).await? == Some(true) {
                    best = none;
                }
            }
            while best.waits > 1.0 / 16.0 {
                let shorter = Schedule {
                    keep: best.keep.clone(),
                    waits: best.waits / 2.0,
                };
                match s
                    .test(&shorter, "waits", Judge::AllOf(opts.tries.max(3)))
                    .await?
                {
                    Some(true) => best = shorter,
                    _ => break,
                }
            }
            Some(best)
        }
        _ => None,
    };
    // The share of the schedule found: it failed once to be kept.
    let confirmed = match &best {
        Some(b) => s
            .test(b, "confirm", Judge::Count(opts.tries.max(3)))
            .await?
            .and_then(|_| s.trials.last().map(|t| (t.fails, t.tries))),
        None => None,
    };
    Ok(Outcome {
        confirmed,
        check,
        actions,
        took: s.started.elapsed(),
        trials: s.trials,
        best,
        cut_short: s.cut_short,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ddmin against a predicate, with the trials it took.
    fn shrink_by(n: usize, fails: impl Fn(&[usize]) -> bool) -> (Vec<usize>, usize) {
        let mut trials = 0;
        let mut test = async |keep: Vec<usize>, _| {
            trials += 1;
            Ok::<_, ()>(Some(fails(&keep)))
        };
        let all: Vec<usize> = (0..n).collect();
        let found = futures::executor::block_on(ddmin(all, &mut test)).unwrap();
        (found, trials)
    }

    #[test]
    fn ddmin_finds_the_two_actions_that_fail_together() {
        let (found, trials) = shrink_by(24, |k| k.contains(&5) && k.contains(&17));
        assert_eq!(found, vec![5, 17]);
        assert!(trials <= 60, "{trials} trials");
    }

    #[test]
    fn ddmin_keeps_an_order_and_cuts_a_lone_culprit_to_one() {
        // A pause (even) followed by a kill (odd) within 3 actions.
        let pair = |k: &[usize]| {
            k.windows(2)
                .any(|w| w[0] % 2 == 0 && w[1] % 2 == 1 && w[1] - w[0] <= 3)
        };
        let (found, _) = shrink_by(24, pair);
        assert_eq!(found.len(), 2);
        assert!(pair(&found));
        let (found, trials) = shrink_by(30, |k| !k.is_empty());
        assert_eq!(found.len(), 1);
        assert!(trials <= 10, "{trials} trials");
    }

    #[test]
    fn ddmin_stops_when_told_and_gives_what_failed_last() {
        let mut calls = 0;
        let mut test = async |keep: Vec<usize>, _| {
            calls += 1;
            Ok::<_, ()>(if calls > 2 {
                None
            } else {
                Some(keep.contains(&9))
            })
        };
        let all: Vec<usize> = (0..16).collect();
        let found = futures::executor::block_on(ddmin(all, &mut test)).unwrap();
        assert_eq!(found, (8..16).collect::<Vec<_>>());
    }

    #[test]
    fn chunks_cover_in_order_and_evenly() {
        assert_eq!(split(&[1, 2, 3, 4, 5], 2), vec![vec![1, 2], vec![3, 4, 5]]);
        assert_eq!(split(&[1, 2, 3], 5), vec![vec![1], vec![2], vec![3]]);
        let c: Vec<usize> = (0..24).collect();
        let parts = split(&c, 5);
        assert_eq!(parts.concat(), c);
        assert!(parts.iter().all(|p| (4..=5).contains(&p.len())));
    }
}
