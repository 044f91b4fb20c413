//! What a cell leaves for `soak verify`: the node's definition
//! (`node.json`) next to the ledger (`ledger.bin`), so that a run whose
//! soak died (killed, out of memory, a lost CI runner) can still be checked:
//! the node is started again on its data and every key the ledger knows is
//! read back.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde::{Deserialize, Serialize};

use crate::driver::any::AnyNode;
use crate::driver::docker::container::ContainerPlan;
use crate::driver::process::{Probe, Spec};
use crate::driver::Node;

/// `node.json`: the templated node definition of a cell.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SavedNode {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    /// `resp`, `tcp`, `http`, `log` or `exec`.
    pub probe: String,
    /// The address, URL or regex of the probe.
    pub probe_address: String,
    /// The argv of an `exec` probe.
    #[serde(default)]
    pub probe_argv: Vec<String>,
    pub ready_timeout_s: f64,
    pub stop_signal: String,
    pub grace_s: f64,
    /// Where the workload's RESP requests went, in a `node.json` written
    /// before protocols other than RESP (a read-back goes there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// How the workload talked to the node (and a read-back does).
    #[serde(default)]
    pub protocol: Option<crate::protocol::Spec>,
    pub request_timeout_s: f64,
    /// A container node: its image and how its containers were made.
    #[serde(default)]
    pub container: Option<SavedContainer>,
    /// The user a process node runs as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// How a cell's containers were made, to make one again on its data.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SavedContainer {
    pub image: String,
    pub host: Option<String>,
    pub labels: std::collections::BTreeMap<String, String>,
    pub mounts: Vec<PathBuf>,
    pub user: Option<String>,
    pub memory: Option<u64>,
    #[serde(default)]
    pub swap: Option<u64>,
    /// The cluster it ran on as a Pod: its kubeconfig (none: inferred)
    /// and namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<(Option<PathBuf>, String)>,
    /// How soak reached the Pod's ports, and which they were.
    #[serde(default)]
    pub pod_network: crate::driver::kubernetes::PodNetwork,
    #[serde(default)]
    pub ports: Vec<u16>,
}

impl SavedNode {
    pub fn of(
        spec: &Spec,
        protocol: Option<crate::protocol::Spec>,
        request_timeout: Duration,
    ) -> SavedNode {
        let (probe, probe_address, probe_argv) = match &spec.probe {
            Probe::Resp(a) => ("resp", a.clone(), vec![]),
            Probe::Tcp(a) => ("tcp", a.clone(), vec![]),
            Probe::Http(u) => ("http", u.clone(), vec![]),
            Probe::Log(re) => ("log", re.clone(), vec![]),
            Probe::Exec(argv) => ("exec", String::new(), argv.clone()),
        };
        SavedNode {
            argv: spec.argv.clone(),
            env: spec.env.clone(),
            probe: probe.into(),
            probe_address,
            probe_argv,
            ready_timeout_s: spec.ready_timeout.as_secs_f64(),
            stop_signal: spec.stop_signal.as_str().into(),
            grace_s: spec.grace.as_secs_f64(),
            target: None,
            protocol,
            request_timeout_s: request_timeout.as_secs_f64(),
            container: None,
            user: spec.user.clone(),
        }
    }

    /// The same, for a node that runs as a container of `image`.
    pub fn in_container(mut self, plan: &ContainerPlan) -> SavedNode {
        self.container = Some(SavedContainer {
            image: plan.image.clone(),
            host: plan.host.clone(),
            labels: plan.labels.clone(),
            mounts: plan.mounts.clone(),
            user: plan.user.clone(),
            memory: plan.memory,
            swap: plan.swap,
            kubernetes: plan
                .kubernetes
                .as_ref()
                .map(|k| (k.kubeconfig.clone(), k.namespace.clone())),
            pod_network: plan
                .kubernetes
                .as_ref()
                .map(|k| k.network)
                .unwrap_or_default(),
            ports: plan.ports.clone(),
        });
        self
    }

    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let json = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        std::fs::write(path, json + "\n")
    }

    pub fn read(path: &Path) -> Result<SavedNode, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The node's definition again, logging to `log`.
    pub fn spec(&self, log: PathBuf) -> Result<Spec, String> {
        let probe = match self.probe.as_str() {
            "resp" => Probe::Resp(self.probe_address.clone()),
            "tcp" => Probe::Tcp(self.probe_address.clone()),
            "http" => Probe::Http(self.probe_address.clone()),
            "log" => Probe::Log(self.probe_address.clone()),
            "exec" => Probe::Exec(self.probe_argv.clone()),
            other => return Err(format!("unknown probe {other:?} in node.json")),
        };
        Ok(Spec {
            argv: self.argv.clone(),
            env: self.env.clone(),
            probe,
            ready_timeout: Duration::from_secs_f64(self.ready_timeout_s),
            stop_signal: Signal::from_str(&self.stop_signal)
                .map_err(|_| format!("unknown stop signal {:?} in node.json", self.stop_signal))?,
            grace: Duration::from_secs_f64(self.grace_s),
            log,
            user: self.user.clone(),
            netns: None,
        })
    }
}

/// Why `soak verify` could not judge a cell.
#[derive(Debug, thiserror::Error)]
pub enum ReverifyError {
    /// Not a cell's folder, or its files are damaged (exit 2).
    #[error("{0}")]
    Invalid(String),
    /// The node would not start, or could not be read from (exit 3).
    #[error("{0}")]
    Environment(String),
}

/// What `soak verify` found (`verify.json`).
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Reverified {
    pub integrity: super::Integrity,
    /// The first write found lost (or corrupted, or resurrected).
    pub first_lost: Option<crate::model::LostWrite>,
    /// The ledger was saved while the run went on: keys may hold writes
    /// made after it, judged in doubt rather than corrupt.
    pub stale_ledger: bool,
    pub keys_known: usize,
    pub target: String,
    /// Whether soak started the node for the read-back.
    pub started_node: bool,
}

/// Reads back every key of the cell's saved ledger: through `target`, or
/// through the node started again from `node.json` on its data, then
/// stopped. Writes `verify.json` into the folder.
pub async fn reverify(dir: &Path, target: Option<String>) -> Result<Reverified, ReverifyError> {
    use crate::oracle::Ledger;
    let ledger_path = dir.join("ledger.bin");
    if !ledger_path.exists() {
        return Err(ReverifyError::Invalid(format!(
            "{} has no ledger.bin: give the folder of a cell with a workload, e.g. reports/SUITE/RUN/cells/CELL",
            dir.display()
        )));
    }
    let ledger = Ledger::load(&ledger_path).map_err(|e| ReverifyError::Invalid(e.to_string()))?;
    let saved = SavedNode::read(&dir.join("node.json")).map_err(ReverifyError::Invalid)?;
    let mut protocol = saved.protocol.clone().or_else(|| {
        saved
            .target
            .clone()
            .map(|target| crate::protocol::Spec::Resp(crate::protocol::resp::Spec { target }))
    });
    let own = protocol.as_ref().and_then(|p| p.target());
    let (target, mut node) = match (target, &mut protocol) {
        // Another address: the node is the user's to have started.
        (Some(t), Some(p)) if own.as_deref() != Some(t.as_str()) => {
            p.retarget(&t);
            (t, None)
        }
        (_, Some(p)) => {
            let t = p.target().unwrap_or_else(|| p.open().describe());
            let spec = saved
                .spec(dir.join("verify-node.log"))
                .map_err(ReverifyError::Invalid)?;
            let container = saved.container.as_ref().map(|c| ContainerPlan {
                image: c.image.clone(),
                host: c.host.clone(),
                name: format!("soak-verify-{:x}", rand::random::<u32>()),
                labels: c.labels.clone(),
                mounts: c.mounts.clone(),
                user: c.user.clone(),
                memory: c.memory,
                swap: c.swap,
                kubernetes: c.kubernetes.as_ref().map(|(kubeconfig, namespace)| {
                    crate::driver::kubernetes::KubePlan {
                        kubeconfig: kubeconfig.clone(),
                        namespace: namespace.clone(),
                        network: c.pod_network,
                    }
                }),
                ports: c.ports.clone(),
            });
            let mut node = AnyNode::open(spec, container, None)
                .await
                .map_err(|e| ReverifyError::Environment(e.to_string()))?;
            let ready = Node::start(&mut node)
                .await
                .map_err(|e| ReverifyError::Environment(e.to_string()))?;
            eprintln!(
                "soak verify: node started on its data (pid {}, ready after {} ms)",
                Node::pid(&node).unwrap_or(0),
                ready.as_millis()
            );
            (t, Some(node))
        }
        (_, None) => {
            return Err(ReverifyError::Invalid(
                "node.json names no workload protocol: give the node's address with --target HOST:PORT (RESP)".into(),
            ))
        }
    };
    let protocol = protocol.expect("matched above").open();
    let timeout = Duration::from_secs_f64(saved.request_timeout_s);
    let keys_known = (0..ledger.keys()).filter(|k| ledger.is_touched(*k)).count();
    let read = super::online(
        &*protocol,
        &ledger,
        timeout,
        None,
        None,
        None,
        |done, all| {
            if done < all {
                eprintln!("soak verify: {done}/{all} keys");
            }
        },
    )
    .await;
    if let Some(n) = node.as_mut() {
        let _ = Node::stop(n).await;
        Node::shutdown(n).await;
    }
    let read = read.map_err(|e| ReverifyError::Environment(e.to_string()))?;
    let out = Reverified {
        integrity: read.integrity,
        first_lost: read.first_lost,
        stale_ledger: ledger.is_stale(),
        keys_known,
        target,
        started_node: node.is_some(),
    };
    let json = serde_json::to_string_pretty(&out).unwrap_or_default();
    let _ = std::fs::write(dir.join("verify.json"), json + "\n");
    Ok(out)
}
