//! What a cell's containers and Pods are made with: the plan both the
//! Docker and the Kubernetes driver start from, and the labels that
//! `soak cleanup` finds them by. Neither driver imports the other.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// Labels every container of soak carries.
pub const LABEL_RUN: &str = "soak.run";
pub const LABEL_CELL: &str = "soak.cell";
pub const LABEL_SUITE: &str = "soak.suite";
pub const LABEL_MACHINE: &str = "soak.machine";

/// What a cell's containers are made with, besides the node's spec.
#[derive(Debug, Clone)]
pub struct ContainerPlan {
    /// The image the first start runs (a version swap may name another).
    pub image: String,
    /// `--docker-host`, else `DOCKER_HOST`, else the local socket.
    pub host: Option<String>,
    /// Containers are named `NAME-N`, N counting the starts.
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// Folders bind-mounted at the same path (the cell's folder).
    pub mounts: Vec<PathBuf>,
    pub user: Option<String>,
    /// `limits.memory`.
    pub memory: Option<u64>,
    /// `limits.swap`: swap allowed beyond the memory limit (none if not
    /// given).
    pub swap: Option<u64>,
    /// A Kubernetes cluster to run it on as a Pod, instead of an engine.
    pub kubernetes: Option<KubePlan>,
    /// The node's ports (`${PORT}`, `${METRICS_PORT}`, `${PORT2}`...): a
    /// Pod on a network of its own is reached at them.
    pub ports: Vec<u16>,
}

/// Which cluster, and where in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubePlan {
    /// `--kubeconfig`; without it `KUBECONFIG`, `~/.kube/config`, or the
    /// in-cluster service account.
    pub kubeconfig: Option<PathBuf>,
    /// `--namespace` (`default`).
    pub namespace: String,
    /// `--pod-network`: how soak reaches the node's ports.
    pub network: PodNetwork,
}

/// How soak reaches a Pod's ports (`--pod-network`). Whichever it is, the
/// node is at `127.0.0.1:${PORT}` for the suite, as a process is.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum PodNetwork {
    /// The host's network (`hostNetwork`): the node listens on the
    /// loopback of the machine it runs on, so soak must run there too. No
    /// hop.
    #[default]
    Host,
    /// The Pod's own network, reached through the API server and the
    /// kubelet (`kubectl port-forward`'s path): from anywhere the API is.
    PortForward,
    /// The Pod's own network, reached at the Pod's address: from inside
    /// the cluster (soak as a Job) or one of its machines.
    PodIp,
}
