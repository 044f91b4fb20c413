//! The documented exit codes of `soak`.

/// Every check passed.
pub const PASS: i32 = 0;
/// A check failed: the node under test misbehaved.
pub const CHECK_FAILED: i32 = 1;
/// The suite or the command line is invalid; nothing was started.
pub const INVALID: i32 = 2;
/// The environment failed: no cgroup access, Docker unreachable, a node
/// that never became ready.
pub const ENVIRONMENT: i32 = 3;
/// The run was interrupted (Ctrl-C or SIGTERM) and stopped early; its
/// report was still written.
pub const INTERRUPTED: i32 = 130;

use crate::model::{Summary, Verdict};

/// The exit code of a verdict: a warning passes; an error is the
/// environment's.
pub fn of_verdict(v: Verdict) -> i32 {
    match v {
        Verdict::Pass | Verdict::Warn => PASS,
        Verdict::Fail => CHECK_FAILED,
        Verdict::Error => ENVIRONMENT,
    }
}

/// The exit code of a run: interrupted, else its verdict's.
pub fn of_summary(s: &Summary) -> i32 {
    if s.interrupted() {
        INTERRUPTED
    } else {
        of_verdict(s.verdict)
    }
}
