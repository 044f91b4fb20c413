//! A node as a container: each start creates a container from the
//! version's image on the cell's folder (bind-mounted at the same path, so
//! offline verification, disk sampling and `soak verify` read it as they
//! read a process's), on the host's network (the node listens on the
//! host's loopback), with the memory limit from `limits`, labelled so that
//! `soak cleanup` finds it. Its logs are followed into node.log; its death
//! is the engine's: the wait endpoint, then the container's state
//! (`OOMKilled`, the exit code).

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bollard::models::{ContainerCreateBody, ContainerUpdateBody, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptions, InspectContainerOptions, KillContainerOptions, LogsOptions,
    RemoveContainerOptions, StatsOptions, StopContainerOptions, WaitContainerOptions,
};
use futures::StreamExt;
use nix::sys::signal::Signal;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::engine::{self, Engine};
use crate::driver::ended::{self, exit_of, EndWatch, Ended};
use crate::driver::process::{await_ready, not_ready, NotReady, Spec};
use crate::driver::{Death, DriverError, EngineMemory, Exit, Exited, Launch, Node};

pub use crate::driver::image::{ContainerPlan, LABEL_CELL, LABEL_MACHINE, LABEL_RUN, LABEL_SUITE};

struct Incarnation {
    id: String,
    pid: i32,
    ended: EndWatch,
    logs: JoinHandle<()>,
}

/// The node's containers across restarts.
pub struct ContainerNode {
    spec: Spec,
    image: String,
    plan: ContainerPlan,
    engine: Engine,
    current: Option<Incarnation>,
    /// The containers made and not removed yet (the current one, and one
    /// that ended until the next start), removed at shutdown.
    made: Vec<String>,
    starts: usize,
    /// On a remote engine, the node's memory from the engine's stats.
    memory: Option<Arc<EngineMemory>>,
}

fn engine_error(e: impl std::fmt::Display) -> DriverError {
    DriverError::Io(format!("Docker engine: {e}"))
}

fn api(e: bollard::errors::Error) -> DriverError {
    engine_error(crate::net::error_chain(&e))
}

impl ContainerNode {
    pub fn new(spec: Spec, plan: ContainerPlan, engine: Engine) -> ContainerNode {
        let memory = (!engine.info.local).then(Arc::default);
        ContainerNode {
            spec,
            image: plan.image.clone(),
            plan,
            engine,
            current: None,
            made: vec![],
            starts: 0,
            memory,
        }
    }

    /// Where a remote engine's stats of the node's memory go (none on a
    /// local engine: the node's processes and cgroup are read here).
    pub fn engine_memory(&self) -> Option<Arc<EngineMemory>> {
        self.memory.clone()
    }

    /// What the report names of the engine.
    pub fn engine_info(&self) -> &engine::EngineInfo {
        &self.engine.info
    }

    /// A handle on the engine's API (cheap: a shared client).
    fn docker(&self) -> bollard::Docker {
        self.engine.docker.clone()
    }

    fn body(&self) -> ContainerCreateBody {
        let binds = self
            .plan
            .mounts
            .iter()
            .map(|m| format!("{0}:{0}", m.display()))
            .collect();
        let memory = self.plan.memory.map(|b| b as i64);
        // The engine's swap limit is memory and swap together.
        let memory_swap = memory.map(|m| m + self.plan.swap.unwrap_or(0) as i64);
        ContainerCreateBody {
            image: Some(self.image.clone()),
            cmd: (!self.spec.argv.is_empty()).then(|| self.spec.argv.clone()),
            env: Some(
                self.spec
                    .env
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect(),
            ),
            user: self.plan.user.clone(),
            labels: Some(self.plan.labels.clone().into_iter().collect()),
            stop_signal: Some(self.spec.stop_signal.as_str().to_string()),
            stop_timeout: Some(self.spec.grace.as_secs().max(1) as i64),
            host_config: Some(HostConfig {
                network_mode: Some("host".into()),
                binds: Some(binds),
                memory,
                memory_swap,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Creates and starts the next container; follows its logs and its
    /// end.
    async fn launch(&mut self) -> Result<Incarnation, DriverError> {
        self.starts += 1;
        let name = format!("{}-{}", self.plan.name, self.starts);
        let body = self.body();
        let image = self.image.clone();
        let log_path = self.spec.log.clone();
        let docker = self.docker();
        // The ended containers of earlier starts go first: their output is
        // in node.log, and each holds a copy of the image's files (with
        // the vfs driver, hundreds of MiB per restart of a chaos run).
        for old in self.made.drain(..) {
            let _ = remove(&docker, &old).await;
        }
        let host = self.engine.info.host.clone();
        let created = docker
            .create_container(
                Some(CreateContainerOptions {
                    name: Some(name.clone()),
                    ..Default::default()
                }),
                body,
            )
            .await
            .map_err(|e| match &e {
                bollard::errors::Error::DockerResponseServerError {
                    status_code: 404, ..
                } => DriverError::Io(format!(
                    "the image `{image}` is not on the Docker engine {host}: build it (containers/build) or pull it"
                )),
                _ => api(e),
            })?;
        let id = created.id;
        self.made.push(id.clone());
        docker.start_container(&id, None).await.map_err(api)?;
        let logs = tokio::spawn(follow_logs(docker.clone(), id.clone(), log_path));
        if let Some(m) = &self.memory {
            tokio::spawn(follow_stats(docker.clone(), id.clone(), m.clone()));
        }
        let pid = docker
            .inspect_container(&id, None::<InspectContainerOptions>)
            .await
            .map_err(api)?
            .state
            .and_then(|s| s.pid)
            .unwrap_or(0) as i32;
        // On a local engine the kernel's own count of OOM kills, followed
        // from here: the engine's `OOMKilled` is missed on cgroup v2 when
        // the kill and the exit race in it.
        let oom_watch = (self.engine.info.local && pid > 0)
            .then(|| crate::driver::cgroup::Cgroup::of_pid(pid))
            .flatten()
            .and_then(|c| c.watch_oom_kills());
        let (tx, ended) = watch::channel(None);
        tokio::spawn(watch_end(docker.clone(), id.clone(), oom_watch, tx));
        Ok(Incarnation {
            id,
            pid,
            ended,
            logs,
        })
    }

    /// The running container's id.
    fn current_id(&self) -> Result<String, DriverError> {
        self.current
            .as_ref()
            .map(|c| c.id.clone())
            .ok_or(DriverError::NotRunning)
    }

    fn ended(&self) -> Option<Ended> {
        ended::now(self.current.as_ref().map(|c| &c.ended))
    }

    /// Waits for the current incarnation's end, at most `d`.
    async fn wait_end(&mut self, d: Duration) -> Option<Ended> {
        ended::within(self.current.as_ref().map(|c| &c.ended), d).await
    }

    async fn remove_all(&mut self) {
        let docker = self.docker();
        if let Some(c) = self.current.take() {
            c.logs.abort();
        }
        for id in self.made.drain(..) {
            let _ = remove(&docker, &id).await;
        }
    }
}

/// Appends the container's output to the node's log, as it comes.
async fn follow_logs(docker: bollard::Docker, id: String, path: PathBuf) {
    let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    else {
        return;
    };
    let mut stream = docker.logs(
        &id,
        Some(LogsOptions {
            follow: true,
            stdout: true,
            stderr: true,
            ..Default::default()
        }),
    );
    while let Some(Ok(out)) = stream.next().await {
        let _ = file.write_all(&out.into_bytes());
        let _ = file.flush();
    }
}

/// The container's memory as the engine's stats stream reports it, until
/// the container ends.
async fn follow_stats(docker: bollard::Docker, id: String, m: Arc<EngineMemory>) {
    use std::sync::atomic::Ordering::Relaxed;
    let mut stream = docker.stats(
        &id,
        Some(StatsOptions {
            stream: true,
            one_shot: false,
        }),
    );
    while let Some(Ok(s)) = stream.next().await {
        let Some(ms) = s.memory_stats else { continue };
        let stats = ms.stats.unwrap_or_default();
        // v2 names, then v1's.
        let of = |a: &str, b: &str| stats.get(a).or_else(|| stats.get(b)).copied();
        m.usage.store(ms.usage.unwrap_or(0), Relaxed);
        m.anon.store(of("anon", "rss").unwrap_or(0), Relaxed);
        m.file.store(of("file", "cache").unwrap_or(0), Relaxed);
    }
    m.clear();
}

/// Publishes the container's end: the engine's wait, then its state, and
/// on a local engine the kernel's count of OOM kills in its cgroup.
async fn watch_end(
    docker: bollard::Docker,
    id: String,
    oom_watch: Option<crate::driver::cgroup::OomWatch>,
    tx: watch::Sender<Option<Ended>>,
) {
    let mut wait = docker.wait_container(&id, None::<WaitContainerOptions>);
    // Any answer (bollard returns a non-zero exit as an error) or the end
    // of the stream means the container is no longer running.
    let _ = wait.next().await;
    let state = docker
        .inspect_container(&id, None::<InspectContainerOptions>)
        .await
        .ok()
        .and_then(|i| i.state);
    let engine_says_oom = state.as_ref().and_then(|s| s.oom_killed).unwrap_or(false);
    // The engine removes the cgroup right after the end: its count is
    // final then.
    let kernel_says_oom = match oom_watch {
        Some(w) if !engine_says_oom => w.final_count(Duration::from_secs(10)).await > 0,
        _ => false,
    };
    let ended = match state {
        Some(s) => Ended {
            exit: exit_of(s.exit_code.unwrap_or(-1)),
            oom: engine_says_oom || kernel_says_oom,
            lost: false,
        },
        // The engine went away (or the container was removed under it).
        None => Ended {
            exit: Exit::Signal(Signal::SIGKILL as i32),
            oom: false,
            lost: true,
        },
    };
    let _ = tx.send(Some(ended));
}

impl Node for ContainerNode {
    fn info(&self) -> crate::driver::NodeInfo {
        crate::driver::NodeInfo {
            engine: Some(self.engine_info().clone()),
            engine_memory: self.engine_memory(),
        }
    }
    async fn start(&mut self) -> Result<Duration, DriverError> {
        let t0 = Instant::now();
        let log_from = std::fs::metadata(&self.spec.log)
            .map(|m| m.len())
            .unwrap_or(0);
        let inc = self.launch().await?;
        self.current = Some(inc);
        // The ready timeout is the node's: it counts from the container's
        // start, not from its creation (the engine copying the image's
        // files takes seconds with the vfs driver on a busy machine).
        let started = Instant::now();
        let waited = await_ready(&self.spec, started, log_from, || {
            self.ended().map(|e| e.exit)
        })
        .await;
        match waited {
            Ok(_) => Ok(t0.elapsed()),
            Err(why @ NotReady::Exited(_)) => {
                let oom = self.ended().is_some_and(|e| e.oom);
                // The log stream ends with the container: its last lines
                // are in node.log once it has.
                if let Some(c) = self.current.take() {
                    let _ = tokio::time::timeout(Duration::from_secs(5), c.logs).await;
                }
                Err(not_ready(&self.spec, log_from, why, oom))
            }
            Err(why) => {
                let _ = self.kill(Signal::SIGKILL).await;
                self.current = None;
                Err(not_ready(&self.spec, log_from, why, false))
            }
        }
    }

    async fn stop(&mut self) -> Result<Exit, DriverError> {
        let id = self.current_id()?;
        let grace = self.spec.grace;
        let docker = self.docker();
        // The engine sends the stop signal, then SIGKILL after the grace.
        docker
            .stop_container(
                &id,
                Some(StopContainerOptions {
                    t: Some(grace.as_secs().max(1) as i32),
                    ..Default::default()
                }),
            )
            .await
            .or_else(|e| match self.ended() {
                // It ended on its own just before: that end is the answer.
                Some(_) => Ok(()),
                None => Err(api(e)),
            })?;
        let end = self.wait_end(grace + Duration::from_secs(10)).await;
        self.current = None;
        end.map(|e| e.exit).ok_or(DriverError::NotRunning)
    }

    async fn kill(&mut self, sig: Signal) -> Result<Exit, DriverError> {
        let id = self.current_id()?;
        let docker = self.docker();
        let send = |s: Signal| {
            let docker = docker.clone();
            let id = id.clone();
            async move {
                docker
                    .kill_container(
                        &id,
                        Some(KillContainerOptions {
                            signal: s.as_str().to_string(),
                        }),
                    )
                    .await
            }
        };
        if let Err(e) = send(sig).await {
            // It ended on its own just before: that end is the answer.
            if self.wait_end(Duration::from_secs(1)).await.is_none() {
                return Err(api(e));
            }
        }
        let mut end = self.wait_end(Duration::from_secs(10)).await;
        if end.is_none() {
            let _ = send(Signal::SIGKILL).await;
            end = self.wait_end(Duration::from_secs(10)).await;
        }
        self.current = None;
        end.map(|e| e.exit).ok_or(DriverError::NotRunning)
    }

    async fn pause(&mut self) -> Result<(), DriverError> {
        let id = self.current_id()?;
        let docker = self.docker();
        docker.pause_container(&id).await.map_err(api)
    }

    async fn resume(&mut self) -> Result<(), DriverError> {
        let id = self.current_id()?;
        let docker = self.docker();
        docker.unpause_container(&id).await.map_err(api)
    }

    fn exited(&self) -> Exited {
        ended::exited(self.current.as_ref().map(|c| &c.ended))
    }

    fn exit(&self) -> Option<Exit> {
        self.ended().map(|e| e.exit)
    }

    fn death(&mut self) -> Death {
        let ended = self.ended();
        self.current = None;
        ended::death(ended)
    }

    fn running(&self) -> bool {
        self.current.is_some() && self.ended().is_none()
    }

    /// The container's pid on this machine; none on a remote engine,
    /// whose pids are another machine's (the sampler then reads the
    /// engine's stats).
    fn pid(&self) -> Option<i32> {
        if !self.engine.info.local {
            return None;
        }
        self.current.as_ref().map(|c| c.pid).filter(|p| *p > 0)
    }

    async fn set_memory_limit(&mut self, bytes: u64) -> Result<String, DriverError> {
        let id = self.current_id()?;
        let docker = self.docker();
        // Swap moves with it: a limit the node can swap past is no limit.
        docker
            .update_container(
                &id,
                ContainerUpdateBody {
                    memory: Some(bytes as i64),
                    memory_swap: Some((bytes + self.plan.swap.unwrap_or(0)) as i64),
                    ..Default::default()
                },
            )
            .await
            .map_err(api)?;
        self.plan.memory = Some(bytes);
        let now = docker
            .inspect_container(&id, None::<InspectContainerOptions>)
            .await
            .map_err(api)?
            .host_config
            .and_then(|h| h.memory);
        // On a local engine the kernel's own figure too: the container's
        // cgroup (memory.max on v2, memory.limit_in_bytes on v1).
        let kernel = match (self.engine.info.local, self.pid()) {
            (true, Some(pid)) => crate::driver::cgroup::Cgroup::of_pid(pid)
                .and_then(|c| c.memory_limit())
                .map(|k| format!("; the container's cgroup reads {k}"))
                .unwrap_or_default(),
            _ => String::new(),
        };
        match now {
            Some(n) if n == bytes as i64 => Ok(format!("HostConfig.Memory read back: {n}{kernel}")),
            now => Err(DriverError::Io(format!(
                "the memory limit was set to {bytes} bytes, and the engine reads {now:?}"
            ))),
        }
    }

    fn use_version(&mut self, launch: &Launch) {
        self.spec.argv = launch.argv.clone();
        self.spec.env = launch.env.clone();
        if let Some(image) = &launch.image {
            self.image = image.clone();
        }
    }

    async fn shutdown(&mut self) {
        self.remove_all().await;
    }
}

impl Drop for ContainerNode {
    /// A last resort when the cell ends without `shutdown` (a panic):
    /// removes what was made from a thread of its own.
    fn drop(&mut self) {
        let docker = self.docker();
        let ids: Vec<String> = self.made.drain(..).collect();
        if ids.is_empty() {
            return;
        }
        ended::in_thread(async move {
            for id in ids {
                let _ = remove(&docker, &id).await;
            }
        });
    }
}

/// The machine a container's soak ran on (`soak.machine`): its hostname.
pub fn machine() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

/// A container soak made, as its labels say.
#[derive(Debug, Clone)]
pub struct Labelled {
    pub id: String,
    pub name: String,
    pub run: String,
    pub machine: String,
}

/// Every container of soak on the engine, but a kubelet's (a Pod's labels
/// are its sandbox's: the cluster collects them once its Pod is deleted).
pub async fn labelled(docker: &bollard::Docker) -> Result<Vec<Labelled>, String> {
    let filters: HashMap<String, Vec<String>> =
        [("label".to_string(), vec![LABEL_RUN.to_string()])].into();
    let list = docker
        .list_containers(Some(bollard::query_parameters::ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        }))
        .await
        .map_err(|e| crate::net::error_chain(&e))?;
    Ok(list
        .into_iter()
        .filter(|c| {
            !c.labels
                .as_ref()
                .is_some_and(|l| l.contains_key("io.kubernetes.pod.name"))
        })
        .map(|c| {
            let label = |k: &str| {
                c.labels
                    .as_ref()
                    .and_then(|l| l.get(k).cloned())
                    .unwrap_or_default()
            };
            Labelled {
                run: label(LABEL_RUN),
                machine: label(LABEL_MACHINE),
                name: c
                    .names
                    .as_ref()
                    .and_then(|n| n.first().cloned())
                    .unwrap_or_default()
                    .trim_start_matches('/')
                    .to_string(),
                id: c.id.clone().unwrap_or_default(),
            }
        })
        .collect())
}

/// Removes a container, whatever its state.
pub async fn remove(docker: &bollard::Docker, id: &str) -> Result<(), String> {
    let removed = docker
        .remove_container(
            id,
            Some(RemoveContainerOptions {
                force: true,
                v: true,
                ..Default::default()
            }),
        )
        .await;
    match removed {
        Ok(()) => Ok(()),
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(()),
        // Another request of this soak is removing it (a second Ctrl-C
        // while the first one's cleanup runs): done once it is gone.
        Err(e) if e.to_string().contains("already in progress") => {
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            while std::time::Instant::now() < deadline {
                match docker
                    .inspect_container(id, None::<InspectContainerOptions>)
                    .await
                {
                    Err(bollard::errors::Error::DockerResponseServerError {
                        status_code: 404,
                        ..
                    }) => return Ok(()),
                    Err(e) => return Err(crate::net::error_chain(&e)),
                    Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
            Err(format!("container {id} is still being removed after 60 s"))
        }
        Err(e) => Err(crate::net::error_chain(&e)),
    }
}
