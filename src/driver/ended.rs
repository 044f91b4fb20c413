//! What the drivers of engines (Docker's, a Kubernetes cluster) share: an
//! incarnation's end as the engine reports it, published on a watch
//! channel, and the engine's exit codes.

use std::time::Duration;

use tokio::sync::watch;

use super::{Death, Exit, Exited};

/// How an incarnation ended, as its engine says.
#[derive(Debug, Clone, Copy)]
pub struct Ended {
    pub exit: Exit,
    /// The engine says `OOMKilled` (or the kernel counted a kill).
    pub oom: bool,
    /// The engine stopped answering: the end is not known.
    pub lost: bool,
}

/// Where an incarnation's end is published, once.
pub type EndWatch = watch::Receiver<Option<Ended>>;

/// A container's exit code as an exit: 128 + N is signal N, as engines
/// report a process killed by a signal.
pub fn exit_of(code: i64) -> Exit {
    if (129..=128 + 64).contains(&code) {
        Exit::Signal((code - 128) as i32)
    } else {
        Exit::Code(code as i32)
    }
}

/// The end once published, if it has been.
pub fn now(rx: Option<&EndWatch>) -> Option<Ended> {
    rx.and_then(|r| *r.borrow())
}

/// The end, waiting at most `d` for it.
pub async fn within(rx: Option<&EndWatch>, d: Duration) -> Option<Ended> {
    let mut rx = rx?.clone();
    let got = tokio::time::timeout(d, rx.wait_for(|e| e.is_some()))
        .await
        .ok()
        .and_then(|r| r.ok().and_then(|e| *e));
    got
}

/// A future of the exit: pending forever when nothing runs.
pub fn exited(rx: Option<&EndWatch>) -> Exited {
    let rx = rx.cloned();
    Box::pin(async move {
        if let Some(mut rx) = rx {
            if let Ok(e) = rx.wait_for(|e| e.is_some()).await {
                if let Some(e) = *e {
                    return e.exit;
                }
            }
        }
        std::future::pending().await
    })
}

/// A death soak did not cause, as the engine's end says it.
pub fn death(ended: Option<Ended>) -> Death {
    match ended {
        Some(e) if e.lost => Death::Lost,
        Some(e) if e.oom => Death::Oom,
        _ => Death::Crash,
    }
}

/// Runs `work` to its end on a runtime of its own, in a thread of its own:
/// a driver's `Drop`, which may run inside or outside a runtime, removes
/// what it made this way.
pub fn in_thread<F: std::future::Future<Output = ()> + Send + 'static>(work: F) {
    let _ = std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        rt.block_on(work);
    })
    .join();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exit_code_above_128_is_a_signal() {
        assert_eq!(exit_of(137), Exit::Signal(9));
        assert_eq!(exit_of(1), Exit::Code(1));
        assert_eq!(exit_of(128), Exit::Code(128));
    }
}
