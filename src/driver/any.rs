//! The driver a cell's plan asks for, as one type the engine drives.

use std::time::Duration;

use nix::sys::signal::Signal;

use super::docker::container::ContainerNode;
use super::kubernetes::PodNode;
use super::process::ProcessNode;
use super::{Death, DriverError, Exit, Exited, Launch, Node};

// One per running cell: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
pub enum AnyNode {
    Process(ProcessNode),
    Container(ContainerNode),
    Pod(PodNode),
    Cluster(super::cluster::ClusterNode),
}

impl AnyNode {
    /// The driver a plan asks for: a Pod on the cluster its plan names, a
    /// container on the engine its plan names (connected first: an engine that does not answer is the
    /// environment's fault, found before anything starts), else a process
    /// group in `cgroup`. The one place that knows every driver.
    pub async fn open(
        spec: super::process::Spec,
        container: Option<super::docker::container::ContainerPlan>,
        cgroup: Option<super::cgroup::Cgroup>,
    ) -> Result<AnyNode, DriverError> {
        Ok(match container {
            Some(c) if c.kubernetes.is_some() => {
                let k = c.kubernetes.clone().expect("matched");
                let client = super::kubernetes::connect(&k)
                    .await
                    .map_err(DriverError::Engine)?;
                AnyNode::Pod(PodNode::new(spec, c, k, client))
            }
            Some(c) => {
                let engine = super::docker::engine::connect(c.host.as_deref())
                    .await
                    .map_err(|e| DriverError::Engine(e.to_string()))?;
                AnyNode::Container(ContainerNode::new(spec, c, engine))
            }
            None => AnyNode::Process(ProcessNode::new(spec, cgroup)),
        })
    }
}

/// The same call on whichever driver it is.
macro_rules! each {
    ($self:ident, $n:ident => $e:expr) => {
        match $self {
            AnyNode::Process($n) => $e,
            AnyNode::Container($n) => $e,
            AnyNode::Pod($n) => $e,
            AnyNode::Cluster($n) => $e,
        }
    };
}

impl Node for AnyNode {
    async fn start(&mut self) -> Result<Duration, DriverError> {
        each!(self, n => Node::start(n).await)
    }
    async fn stop(&mut self) -> Result<Exit, DriverError> {
        each!(self, n => Node::stop(n).await)
    }
    async fn kill(&mut self, sig: Signal) -> Result<Exit, DriverError> {
        each!(self, n => Node::kill(n, sig).await)
    }
    async fn pause(&mut self) -> Result<(), DriverError> {
        each!(self, n => Node::pause(n).await)
    }
    async fn resume(&mut self) -> Result<(), DriverError> {
        each!(self, n => Node::resume(n).await)
    }
    fn exited(&self) -> Exited {
        each!(self, n => Node::exited(n))
    }
    fn exit(&self) -> Option<Exit> {
        each!(self, n => Node::exit(n))
    }
    fn death(&mut self) -> Death {
        each!(self, n => Node::death(n))
    }
    fn running(&self) -> bool {
        each!(self, n => Node::running(n))
    }
    fn pid(&self) -> Option<i32> {
        each!(self, n => Node::pid(n))
    }
    async fn set_memory_limit(&mut self, bytes: u64) -> Result<String, DriverError> {
        each!(self, n => Node::set_memory_limit(n, bytes).await)
    }
    fn use_version(&mut self, launch: &Launch) {
        each!(self, n => Node::use_version(n, launch))
    }
    async fn shutdown(&mut self) {
        each!(self, n => Node::shutdown(n).await)
    }
    fn info(&self) -> super::NodeInfo {
        each!(self, n => Node::info(n))
    }
    fn cluster(&mut self) -> Option<&mut dyn super::Cluster> {
        each!(self, n => Node::cluster(n))
    }
}
