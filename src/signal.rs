//! soak's own signals: the first Ctrl-C (or SIGTERM) asks the run to stop
//! its phases, clean up and still write its report; the second kills what
//! this run started, and only that, and leaves at once.

use tokio::sync::watch;

/// Listens for SIGINT and SIGTERM for the rest of the process's life; the
/// receiver turns true at the first. The second cleans up the run,
/// containers on `docker_host` (the run's engine) and Pods on `kube` (its
/// cluster) included.
pub fn interrupts(
    docker_host: Option<String>,
    kube: Option<crate::driver::kubernetes::KubePlan>,
) -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut int), Ok(mut term)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) else {
            return;
        };
        let mut count = 0;
        loop {
            tokio::select! { _ = int.recv() => {}, _ = term.recv() => {} }
            count += 1;
            if count == 1 {
                eprintln!(
                    "soak: interrupted; stopping the node and writing the report (again to kill at once)"
                );
                let _ = tx.send(true);
            } else {
                eprintln!("soak: killing this run's nodes and leaving");
                if let Some(id) = crate::lock::current_run_id() {
                    crate::cleanup::cleanup(Some(&id), true, docker_host.as_deref());
                    if let Some(k) = &kube {
                        let _ = crate::cleanup::kubernetes(Some(&id), true, k);
                    }
                }
                std::process::exit(crate::exit::INTERRUPTED);
            }
        }
    });
    rx
}
