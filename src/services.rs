//! Services beside the node: processes a node needs (a Kafka broker under a
//! Kafka Streams application), started in the suite's order before the
//! node, each ready-probed, kept running through the node's kills and
//! upgrades, and stopped after it in the reverse order.
//!
//! Each is a process group of its own (the process driver's), never under
//! the node's limit (in a cgroup of its own when it asks for a limit),
//! labelled with the run as the node is, so that `soak cleanup` finds what a killed soak left, and dies
//! with soak (its death signal). What a service did (started, killed by a
//! `service` phase, exited on its own) is the cell's record, apart from
//! the node's restarts: a broker's death is not the node's.

use std::path::PathBuf;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::driver::any::AnyNode;
use crate::driver::docker::container::ContainerPlan;
use crate::driver::process::Spec;
use crate::driver::Node;
use crate::model::ServiceRecord;
use crate::suite::ServiceAction;

/// A service as the plan rendered it.
#[derive(Debug, Clone)]
pub struct ServicePlan {
    pub name: String,
    /// Its argv, environment, probe and stop, with its log at
    /// `services/NAME.log` in the cell's folder.
    pub spec: Spec,
    /// Its folder (`${NAME_DIR}`): `services/NAME` in the cell's folder.
    pub dir: PathBuf,
    /// Its log, relative to the cell's folder.
    pub log: String,
    /// Its memory limit (`memory:`), in a cgroup of its own called this.
    pub memory: Option<u64>,
    pub cgroup_name: String,
    /// How its containers are made, when it runs from an `image:`.
    pub container: Option<ContainerPlan>,
}

struct Service {
    process: AnyNode,
    /// Its stop's grace.
    grace: Duration,
    record: ServiceRecord,
    /// soak took it down (a `service` phase): not an exit of its own.
    down_by_soak: bool,
}

impl Service {
    /// An exit soak did not cause, noted once.
    fn note_exit(&mut self) {
        if self.down_by_soak || self.record.exited.is_some() {
            return;
        }
        if let Some(exit) = self.process.exit() {
            let exit = exit.to_string();
            self.record.exited = Some(match self.process.death() {
                crate::driver::Death::Oom => format!("{exit}, OOM-killed under its memory limit"),
                _ => exit,
            });
        }
    }
}

/// The running services of a cell.
#[derive(Default)]
pub struct Services {
    list: Vec<Service>,
}

impl std::fmt::Debug for Services {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.debug_list()
            .entries(self.list.iter().map(|s| &s.record.name))
            .finish()
    }
}

impl Services {
    /// Starts each in order and waits until it is ready. A service that
    /// does not get ready is the environment's failure (exit 3), named,
    /// with what its log said; those started before it are taken down.
    pub async fn start(
        plans: &[ServicePlan],
        placement: Option<&crate::driver::cgroup::place::Placement>,
    ) -> Result<Services, String> {
        let mut out = Services::default();
        for (i, p) in plans.iter().enumerate() {
            std::fs::create_dir_all(&p.dir).map_err(|e| {
                format!("service `{}`: cannot make {}: {e}", p.name, p.dir.display())
            })?;
            if let Some(parent) = p.spec.log.parent() {
                std::fs::create_dir_all(parent).map_err(|e| {
                    format!(
                        "service `{}`: cannot make {}: {e}",
                        p.name,
                        parent.display()
                    )
                })?;
            }
            let cgroup = match (p.memory, placement) {
                (None, _) => None,
                // A container's limit is its engine's.
                (Some(_), _) if p.container.is_some() => None,
                (Some(_), None) => {
                    return Err(format!(
                        "services[{i}].memory needs a memory cgroup, and soak has none here (see `soak doctor`)"
                    ))
                }
                (Some(m), Some(place)) => Some(
                    place
                        .create(
                            &p.cgroup_name,
                            crate::driver::cgroup::Limits {
                                memory: Some(m),
                                high: None,
                                swap: Some(0),
                            },
                        )
                        .map_err(|e| format!("services[{i}].memory: {e}"))?,
                ),
            };
            let mut process = AnyNode::open(p.spec.clone(), p.container.clone(), cgroup)
                .await
                .map_err(|e| not_ready(&p.name, i, &e))?;
            let took = match process.start().await {
                Ok(took) => took,
                Err(e) => {
                    process.shutdown().await;
                    return Err(not_ready(&p.name, i, &e));
                }
            };
            out.list.push(Service {
                process,
                grace: p.spec.grace,
                record: ServiceRecord {
                    name: p.name.clone(),
                    log: p.log.clone(),
                    ready_ms: vec![took.as_millis() as u64],
                    ..Default::default()
                },
                down_by_soak: false,
            });
        }
        Ok(out)
    }

    /// A `service` phase: kill, stop, start or restart the service called
    /// `name`; says what was done.
    pub async fn act(&mut self, name: &str, action: ServiceAction) -> Result<String, String> {
        let i = self
            .list
            .iter()
            .position(|s| s.record.name == name)
            .ok_or_else(|| format!("there is no service `{name}`"))?;
        let s = &mut self.list[i];
        s.note_exit();
        let down = |s: &mut Service, r: Result<crate::driver::Exit, _>| {
            s.down_by_soak = true;
            match r {
                Ok(exit) => Ok(exit.to_string()),
                Err(crate::driver::DriverError::NotRunning) => Ok("it was not running".to_string()),
                Err(e) => Err(format!("service `{}`: {e}", s.record.name)),
            }
        };
        let mut said = vec![];
        if matches!(action, ServiceAction::Kill) {
            let r = s.process.kill(Signal::SIGKILL).await;
            said.push(format!("killed: {}", down(s, r)?));
            s.record.kills += 1;
        }
        if matches!(action, ServiceAction::Stop | ServiceAction::Restart) {
            let r = s.process.stop().await;
            said.push(format!("stopped: {}", down(s, r)?));
            s.record.stops += 1;
        }
        if matches!(action, ServiceAction::Start | ServiceAction::Restart) {
            if s.process.running() {
                return Err(format!(
                    "service `{name}` is already running: `- service: {{ name: {name}, action: restart }}` stops it first"
                ));
            }
            let took = s
                .process
                .start()
                .await
                .map_err(|e| not_ready(name, i, &e))?;
            s.down_by_soak = false;
            s.record.ready_ms.push(took.as_millis() as u64);
            said.push(format!("ready after {} ms", took.as_millis()));
        }
        Ok(format!("{name} {}", said.join("; ")))
    }

    /// Stops them all, the last started first, and returns what each did.
    pub async fn stop(&mut self) -> Vec<ServiceRecord> {
        let mut out = vec![];
        while let Some(mut s) = self.list.pop() {
            s.note_exit();
            if s.process.running() {
                let _ =
                    tokio::time::timeout(s.grace + Duration::from_secs(15), s.process.stop()).await;
            }
            s.process.shutdown().await;
            out.push(s.record);
        }
        out.reverse();
        out
    }
}

/// A service's start that failed, in the service's words (the driver's
/// speak of the node), with the suite's field to change.
fn not_ready(name: &str, index: usize, e: &crate::driver::DriverError) -> String {
    use crate::driver::DriverError as E;
    let at = format!("services[{index}]");
    match e {
        E::NeverReady {
            timeout,
            probe,
            log,
            tail,
        } => format!(
            "service `{name}` did not get ready within {} (it waited for {probe}); raise {at}.ready.timeout if it needs longer. Last lines of {}:\n{tail}",
            crate::units::human_duration(*timeout),
            log.display()
        ),
        E::ExitedBeforeReady {
            status, log, tail, ..
        } => format!(
            "service `{name}` exited ({status}) before it was ready. Last lines of {}:\n{tail}",
            log.display()
        ),
        E::Spawn { program, source } => format!(
            "cannot start service `{name}` (`{program}`): {source} (is the path in {at}.command right, and executable?)"
        ),
        other => format!("service `{name}`: {other}"),
    }
}
