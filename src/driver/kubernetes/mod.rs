//! A node as a Pod on a Kubernetes cluster (`soak run --kubeconfig`), on
//! core/v1 alone, so that a 1.20 cluster and a current one serve it alike.
//!
//! Each start creates a Pod from the version's image: the host's network
//! (the node listens on the loopback of the machine it runs on, as with
//! the Docker driver), `limits.memory` as the container's limit and
//! request, and the cell's folder on a PersistentVolumeClaim mounted at the
//! same path, so the data directory outlives every kill, restart and image
//! swap, and offline verification, disk sampling and `soak verify` read it
//! as they read a process's. The claim is bound to a volume soak makes on
//! the cell's folder (hostPath, storage class `soak`, reclaim `Retain`):
//! the cluster's node is this machine. Pods, claim and volume are labelled
//! `soak.run`, `soak.cell`, `soak.suite`, `soak.machine` for `soak
//! cleanup`.
//!
//! The death and its cause come from the container's status (`OOMKilled`,
//! the exit code; 128 + N is signal N); logs are followed into node.log
//! through the API. A graceful stop deletes the Pod with the suite's grace
//! (the kubelet sends the stop signal, then SIGKILL). A kill is a signal
//! to the node's process on the machine the Pod runs on, found by its
//! container's cgroup whatever the runtime ([`local`]), as Chaos Mesh's
//! chaos daemon does, not a Pod deletion: a deletion with grace 0 is still
//! SIGTERM and, two seconds later, SIGKILL in the kubelet (its minimum
//! grace), so the node would get its chance to flush that a SIGKILL
//! denies it. Pause is that cgroup's freezer, as a runtime's pause is.
//! Restarts are soak's: the Pod's `restartPolicy` is `Never`, and each
//! start is a new Pod on the same claim.

pub mod forward;
mod local;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{AsyncBufReadExt, StreamExt};
use k8s_openapi::api::core::v1::{
    Container, ContainerState, EnvVar, HostPathVolumeSource, ObjectReference, PersistentVolume,
    PersistentVolumeClaim, PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource,
    PersistentVolumeSpec, Pod, PodSecurityContext, PodSpec, ResourceRequirements, Volume,
    VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams, LogParams, PostParams};
use nix::sys::signal::Signal;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::driver::ended::{self, exit_of, EndWatch, Ended};
use crate::driver::image::ContainerPlan;
use crate::driver::process::{await_ready, not_ready, NotReady, Spec};
use crate::driver::{Death, DriverError, EngineMemory, Exit, Exited, Launch, Node};

/// The storage class of the volumes soak makes on cell folders.
pub const STORAGE_CLASS: &str = "soak";
/// The annotation that keeps a cell's id as written (a label value cannot
/// hold `=` or `,`).
pub const ANNOTATION_CELL: &str = "soak.cell";

pub use crate::driver::image::{KubePlan, PodNetwork};

/// A client of the cluster the plan names, checked: it answers, and soak
/// may list Pods in the namespace. Errors are the API's own words with
/// what to do.
pub async fn connect(k: &KubePlan) -> Result<kube::Client, String> {
    use kube::config::{Config, KubeConfigOptions, Kubeconfig};
    let config = match &k.kubeconfig {
        Some(p) => {
            let file = Kubeconfig::read_from(p)
                .map_err(|e| format!("cannot read the kubeconfig {}: {e}", p.display()))?;
            Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
                .await
                .map_err(|e| format!("the kubeconfig {} is not usable: {e}", p.display()))?
        }
        None => Config::infer().await.map_err(|e| {
            format!("no Kubernetes cluster named: {e}; give --kubeconfig FILE or set KUBECONFIG")
        })?,
    };
    let server = config.cluster_url.to_string();
    let client = kube::Client::try_from(config)
        .map_err(|e| format!("cannot make a client for {server}: {e}"))?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &k.namespace);
    tokio::time::timeout(
        Duration::from_secs(15),
        pods.list(&ListParams::default().limit(1)),
    )
    .await
    .map_err(|_| format!("the Kubernetes API server {server} did not answer within 15 s"))?
    .map_err(|e| match &e {
        kube::Error::Api(s) if s.code == 403 => format!(
            "the Kubernetes API server {server} forbids listing Pods in namespace `{}`: {} \
             (grant soak a Role on pods, pods/log, persistentvolumeclaims (and pods/portforward for --pod-network port-forward) and a ClusterRole on persistentvolumes (and nodes/proxy, where it reads the kubelet's stats), or name another --namespace)",
            k.namespace, s.message
        ),
        _ => format!(
            "the Kubernetes API server {server} did not answer: {}",
            crate::net::error_chain(&e)
        ),
    })?;
    Ok(client)
}

struct Incarnation {
    name: String,
    /// The container runtime's id (`containerd://...`).
    container: String,
    /// Its process and freezer, when it runs on this machine.
    local: Option<local::Local>,
    ended: EndWatch,
    logs: JoinHandle<()>,
    watch: JoinHandle<()>,
    /// The kubelet's stats of it, followed where its process is not this
    /// machine's to read.
    stats: Option<JoinHandle<()>>,
}

/// The node's Pods across restarts, and the claim they share.
pub struct PodNode {
    spec: Spec,
    image: String,
    plan: ContainerPlan,
    kube: KubePlan,
    client: kube::Client,
    /// The claim and volume once made (by the first start).
    claim: Option<(String, String)>,
    current: Option<Incarnation>,
    /// Pods made and not deleted yet.
    made: Vec<String>,
    starts: usize,
    /// The node's ports on this machine's loopback, with `--pod-network`
    /// other than `host` (made by the first start).
    forward: Option<forward::Forwarder>,
    /// The container's memory from the kubelet's stats, for a Pod whose
    /// process is not this machine's to read (the sampler reads it while
    /// the node's pid is `telemetry::ELSEWHERE`).
    memory: Arc<EngineMemory>,
}

fn api_error(what: &str, e: kube::Error) -> DriverError {
    DriverError::Io(format!(
        "Kubernetes API, {what}: {}",
        crate::net::error_chain(&e)
    ))
}

/// A label value Kubernetes accepts: at most 63 of `[A-Za-z0-9._-]`,
/// alphanumeric at both ends.
pub fn label_value(s: &str) -> String {
    let v: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(63)
        .collect();
    v.trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string()
}

/// The node container's end, if its status has one.
fn terminated(pod: &Pod) -> Option<Ended> {
    let s = pod.status.as_ref()?.container_statuses.as_ref()?.first()?;
    let t = s.state.as_ref()?.terminated.as_ref()?;
    Some(Ended {
        exit: exit_of(t.exit_code.into()),
        oom: t.reason.as_deref() == Some("OOMKilled"),
        lost: false,
    })
}

/// Why a Pod's container cannot start, in the cluster's words: a waiting
/// reason that will not pass by itself, or a Pod the scheduler cannot
/// place.
fn stuck(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    if let Some(s) = status.container_statuses.as_ref().and_then(|c| c.first()) {
        if let Some(w) = s.state.as_ref().and_then(|s| s.waiting.as_ref()) {
            let reason = w.reason.as_deref().unwrap_or_default();
            const FATAL: [&str; 6] = [
                "ErrImageNeverPull",
                "ErrImagePull",
                "ImagePullBackOff",
                "InvalidImageName",
                "CreateContainerConfigError",
                "CreateContainerError",
            ];
            if FATAL.contains(&reason) {
                let fix = if reason.contains("Image") {
                    "; build the image on the node's runtime (containers/build) or push it to a registry the cluster pulls from"
                } else {
                    ""
                };
                return Some(format!(
                    "{reason}: {}{fix}",
                    w.message.as_deref().unwrap_or("no message")
                ));
            }
        }
    }
    None
}

impl PodNode {
    pub fn new(spec: Spec, plan: ContainerPlan, kube: KubePlan, client: kube::Client) -> PodNode {
        PodNode {
            forward: None,
            memory: Default::default(),
            spec,
            image: plan.image.clone(),
            plan,
            kube,
            client,
            claim: None,
            current: None,
            made: vec![],
            starts: 0,
        }
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.kube.namespace)
    }

    fn labels(&self) -> BTreeMap<String, String> {
        self.plan
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), label_value(v)))
            .collect()
    }

    fn meta(&self, name: &str, namespaced: bool) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_string()),
            namespace: namespaced.then(|| self.kube.namespace.clone()),
            labels: Some(self.labels()),
            annotations: self
                .plan
                .labels
                .get(ANNOTATION_CELL)
                .map(|c| [(ANNOTATION_CELL.to_string(), c.clone())].into()),
            ..Default::default()
        }
    }

    /// The cell folder's volume and the claim bound to it, made once.
    async fn ensure_claim(&mut self) -> Result<String, DriverError> {
        if let Some((claim, _)) = &self.claim {
            return Ok(claim.clone());
        }
        let name = self.plan.name.clone();
        let folder = self
            .plan
            .mounts
            .first()
            .ok_or_else(|| DriverError::Io("a Pod needs the cell's folder to mount".into()))?;
        let size: BTreeMap<String, Quantity> =
            [("storage".to_string(), Quantity("1Gi".into()))].into();
        let volume = PersistentVolume {
            metadata: self.meta(&name, false),
            spec: Some(PersistentVolumeSpec {
                capacity: Some(size.clone()),
                access_modes: Some(vec!["ReadWriteOnce".into()]),
                storage_class_name: Some(STORAGE_CLASS.into()),
                persistent_volume_reclaim_policy: Some("Retain".into()),
                host_path: Some(HostPathVolumeSource {
                    path: folder.display().to_string(),
                    type_: Some("Directory".into()),
                }),
                claim_ref: Some(ObjectReference {
                    namespace: Some(self.kube.namespace.clone()),
                    name: Some(name.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let claim = PersistentVolumeClaim {
            metadata: self.meta(&name, true),
            spec: Some(PersistentVolumeClaimSpec {
                access_modes: Some(vec!["ReadWriteOnce".into()]),
                storage_class_name: Some(STORAGE_CLASS.into()),
                volume_name: Some(name.clone()),
                resources: Some(VolumeResourceRequirements {
                    requests: Some(size),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let volumes: Api<PersistentVolume> = Api::all(self.client.clone());
        let claims: Api<PersistentVolumeClaim> =
            Api::namespaced(self.client.clone(), &self.kube.namespace);
        volumes
            .create(&PostParams::default(), &volume)
            .await
            .map_err(|e| api_error("creating the cell's PersistentVolume", e))?;
        self.claim = Some((name.clone(), name.clone()));
        claims
            .create(&PostParams::default(), &claim)
            .await
            .map_err(|e| api_error("creating the cell's PersistentVolumeClaim", e))?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let c = claims
                .get(&name)
                .await
                .map_err(|e| api_error("reading the cell's claim", e))?;
            let phase = c.status.and_then(|s| s.phase).unwrap_or_default();
            if phase == "Bound" {
                return Ok(name);
            }
            if Instant::now() >= deadline {
                return Err(DriverError::Io(format!(
                    "the PersistentVolumeClaim {}/{name} did not bind to its volume within 60 s (phase {phase:?}); \
                     is the controller manager running? `kubectl describe pvc -n {} {name}` says why",
                    self.kube.namespace, self.kube.namespace
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn pod(&self, name: &str, claim: &str) -> Pod {
        let folder = self.plan.mounts[0].display().to_string();
        let mut limits: BTreeMap<String, Quantity> = BTreeMap::new();
        if let Some(m) = self.plan.memory {
            limits.insert("memory".into(), Quantity(m.to_string()));
        }
        let (uid, gid) = self
            .plan
            .user
            .as_deref()
            .and_then(|u| crate::driver::process::resolve_user(u).ok())
            .map_or((None, None), |(u, g)| (Some(u as i64), Some(g as i64)));
        Pod {
            metadata: self.meta(name, true),
            spec: Some(PodSpec {
                host_network: Some(self.kube.network == PodNetwork::Host),
                restart_policy: Some("Never".into()),
                termination_grace_period_seconds: Some(self.spec.grace.as_secs().max(1) as i64),
                security_context: Some(PodSecurityContext {
                    run_as_user: uid,
                    run_as_group: gid,
                    ..Default::default()
                }),
                containers: vec![Container {
                    name: "node".into(),
                    image: Some(self.image.clone()),
                    image_pull_policy: Some("IfNotPresent".into()),
                    args: (!self.spec.argv.is_empty()).then(|| self.spec.argv.clone()),
                    env: Some(
                        self.spec
                            .env
                            .iter()
                            .map(|(k, v)| EnvVar {
                                name: k.clone(),
                                value: Some(v.clone()),
                                ..Default::default()
                            })
                            .collect(),
                    ),
                    resources: Some(ResourceRequirements {
                        requests: (!limits.is_empty()).then(|| limits.clone()),
                        limits: (!limits.is_empty()).then_some(limits),
                        ..Default::default()
                    }),
                    volume_mounts: Some(vec![VolumeMount {
                        name: "cell".into(),
                        mount_path: folder,
                        ..Default::default()
                    }]),
                    ..Default::default()
                }],
                volumes: Some(vec![Volume {
                    name: "cell".into(),
                    persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                        claim_name: claim.to_string(),
                        read_only: Some(false),
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Creates the next Pod and waits for its container to run (or to
    /// end, or to be stuck on what will not pass: an image the node cannot
    /// pull); follows its logs and its end.
    async fn launch(&mut self) -> Result<Incarnation, DriverError> {
        let claim = self.ensure_claim().await?;
        self.starts += 1;
        let name = format!("{}-{}", self.plan.name, self.starts);
        let pods = self.pods();
        // The ended Pods of earlier starts go first: their output is in
        // node.log.
        for old in std::mem::take(&mut self.made) {
            delete_pod(&pods, &old, 0).await;
        }
        pods.create(&PostParams::default(), &self.pod(&name, &claim))
            .await
            .map_err(|e| api_error("creating the node's Pod", e))?;
        self.made.push(name.clone());
        let (container, ip, host) = self.await_container(&pods, &name).await?;
        self.reach(&name, ip).await?;
        // Its process and cgroup are read here when it runs here; else
        // the kubelet's stats say what it holds.
        let found = container.clone();
        let local = tokio::task::spawn_blocking(move || local::Local::find(&found))
            .await
            .ok()
            .flatten();
        let stats = local.is_none().then(|| {
            tokio::spawn(follow_stats(
                self.client.clone(),
                host,
                self.kube.namespace.clone(),
                name.clone(),
                self.memory.clone(),
            ))
        });
        let logs = tokio::spawn(follow_logs(
            pods.clone(),
            name.clone(),
            self.spec.log.clone(),
        ));
        let (tx, ended) = watch::channel(None);
        let watch = tokio::spawn(watch_end(pods.clone(), name.clone(), tx));
        Ok(Incarnation {
            name,
            container,
            local,
            ended,
            logs,
            watch,
            stats,
        })
    }

    /// Waits for the Pod's container to run (or to end, or to be stuck on
    /// what will not pass): its runtime id, the Pod's address and the
    /// cluster node it runs on.
    async fn await_container(
        &self,
        pods: &Api<Pod>,
        name: &str,
    ) -> Result<(String, Option<std::net::IpAddr>, String), DriverError> {
        let deadline = Instant::now() + self.spec.ready_timeout;
        loop {
            let pod = pods
                .get(name)
                .await
                .map_err(|e| api_error("reading the node's Pod", e))?;
            if let Some(why) = stuck(&pod) {
                return Err(DriverError::Io(format!(
                    "the Pod {}/{name} cannot start its container: {why}",
                    self.kube.namespace
                )));
            }
            let status = pod
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|c| c.first());
            let state = status.and_then(|s| s.state.as_ref());
            let ip = pod
                .status
                .as_ref()
                .and_then(|s| s.pod_ip.as_deref())
                .and_then(|ip| ip.parse().ok());
            // On its own network, a running container is reached at the
            // Pod's address, which the kubelet reports with it.
            let addressed = ip.is_some() || self.kube.network == PodNetwork::Host;
            let ended = state.is_some_and(|s: &ContainerState| s.terminated.is_some());
            if ended || (addressed && state.is_some_and(|s| s.running.is_some())) {
                let host = pod.spec.as_ref().and_then(|s| s.node_name.clone());
                return Ok((
                    status
                        .and_then(|s| s.container_id.clone())
                        .unwrap_or_default(),
                    ip,
                    host.unwrap_or_default(),
                ));
            }
            if Instant::now() >= deadline {
                let why = pod
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|c| c.status != "True")
                    .filter_map(|c| c.message.map(|m| format!("{}: {m}", c.type_)))
                    .collect::<Vec<_>>()
                    .join("; ");
                return Err(DriverError::Io(format!(
                    "the Pod {}/{name} did not start its container within {:?}{}",
                    self.kube.namespace,
                    self.spec.ready_timeout,
                    if why.is_empty() {
                        String::new()
                    } else {
                        format!(" ({why})")
                    }
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Points the node's ports on this machine at the Pod `name` (its own
    /// network), listening on them first if need be.
    async fn reach(&mut self, name: &str, ip: Option<std::net::IpAddr>) -> Result<(), DriverError> {
        let forwarder = match (&self.forward, self.kube.network) {
            (_, PodNetwork::Host) => return Ok(()),
            (Some(f), _) => f,
            (None, network) => {
                let way = match network {
                    PodNetwork::PortForward => forward::Way::PortForward(Box::new(self.pods())),
                    _ => forward::Way::PodIp,
                };
                let f = forward::Forwarder::start(&self.plan.ports, way)
                    .await
                    .map_err(DriverError::Io)?;
                self.forward.insert(f)
            }
        };
        forwarder.point(Some(forward::Target {
            pod: name.to_string(),
            ip,
        }));
        Ok(())
    }

    /// Forgets the running incarnation: its end and memory are no longer
    /// followed, and no connection goes to it. Returns the task following
    /// its logs, which go on to their end.
    fn take_current(&mut self) -> Option<JoinHandle<()>> {
        if let Some(f) = &self.forward {
            f.point(None);
        }
        let c = self.current.take()?;
        c.watch.abort();
        if let Some(s) = c.stats {
            s.abort();
        }
        self.memory.clear();
        Some(c.logs)
    }

    fn current(&self) -> Result<&Incarnation, DriverError> {
        self.current.as_ref().ok_or(DriverError::NotRunning)
    }

    fn ended(&self) -> Option<Ended> {
        ended::now(self.current.as_ref().map(|c| &c.ended))
    }

    async fn wait_end(&mut self, d: Duration) -> Option<Ended> {
        ended::within(self.current.as_ref().map(|c| &c.ended), d).await
    }

    /// The running container's process and freezer on this machine, for a
    /// signal or a pause.
    fn local(&self) -> Result<&local::Local, DriverError> {
        let c = self.current()?;
        c.local.as_ref().ok_or_else(|| {
            DriverError::Io(format!(
                "the Pod {}'s container ({}) does not run on this machine: soak signals and \
                 freezes a Pod's process on the machine it runs on (its cgroup beneath the \
                 kubelet's kubepods); run soak there, or use stop and start instead",
                c.name, c.container
            ))
        })
    }

    async fn remove_all(&mut self) {
        if let Some(logs) = self.take_current() {
            logs.abort();
        }
        let pods = self.pods();
        for name in std::mem::take(&mut self.made) {
            delete_pod(&pods, &name, 0).await;
        }
        if let Some((claim, volume)) = self.claim.take() {
            delete_claim(&self.client, &self.kube.namespace, &claim, &volume).await;
        }
    }
}

/// Deletes a Pod with `grace` seconds (gone already is done).
async fn delete_pod(pods: &Api<Pod>, name: &str, grace: u32) {
    let _ = pods
        .delete(
            name,
            &DeleteParams {
                grace_period_seconds: Some(grace),
                ..Default::default()
            },
        )
        .await;
}

/// Deletes a claim and its volume (the volume's data, the cell's folder,
/// stays: reclaim policy `Retain`).
pub async fn delete_claim(client: &kube::Client, namespace: &str, claim: &str, volume: &str) {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let _ = claims.delete(claim, &DeleteParams::default()).await;
    let _ = volumes.delete(volume, &DeleteParams::default()).await;
}

/// Appends the container's output to the node's log, as it comes.
async fn follow_logs(pods: Api<Pod>, name: String, path: PathBuf) {
    let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    else {
        return;
    };
    let params = LogParams {
        follow: true,
        container: Some("node".into()),
        ..Default::default()
    };
    let Ok(stream) = pods.log_stream(&name, &params).await else {
        return;
    };
    let mut lines = stream.lines();
    while let Some(Ok(line)) = lines.next().await {
        let _ = writeln!(file, "{line}");
        let _ = file.flush();
    }
}

/// Publishes the container's end, from the Pod's status (read every 200
/// ms: the watch API's events would do as well, at more code); a Pod that
/// is gone before its status said how (a graceful stop the kubelet
/// finished at once) ended as the container runtime says, and an API that
/// does not answer for 30 s lost it.
async fn watch_end(pods: Api<Pod>, name: String, tx: watch::Sender<Option<Ended>>) {
    let mut failing_since: Option<Instant> = None;
    loop {
        match pods.get_opt(&name).await {
            Ok(Some(pod)) => {
                failing_since = None;
                if let Some(e) = terminated(&pod) {
                    let _ = tx.send(Some(e));
                    return;
                }
            }
            Ok(None) => {
                // Deleted by someone else: what ended it is gone with it.
                let _ = tx.send(Some(Ended {
                    exit: Exit::Signal(Signal::SIGKILL as i32),
                    oom: false,
                    lost: false,
                }));
                return;
            }
            Err(_) => {
                let since = *failing_since.get_or_insert_with(Instant::now);
                if since.elapsed() > Duration::from_secs(30) {
                    let _ = tx.send(Some(Ended {
                        exit: Exit::Signal(Signal::SIGKILL as i32),
                        oom: false,
                        lost: true,
                    }));
                    return;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The Pod's container's memory as its kubelet's `/stats/summary` reports
/// it (through the API server's proxy to the node), every second until
/// the incarnation is forgotten. The kubelet refreshes its figures at its
/// housekeeping interval (10 s by default), so a short spike may not show.
async fn follow_stats(
    client: kube::Client,
    node: String,
    namespace: String,
    pod: String,
    m: Arc<EngineMemory>,
) {
    use std::sync::atomic::Ordering::Relaxed;
    let path = format!("/api/v1/nodes/{node}/proxy/stats/summary");
    loop {
        let req = hyper::Request::get(&path).body(vec![]);
        let text = match req {
            Ok(r) => client.request_text(r).await.ok(),
            Err(_) => None,
        };
        if let Some(text) = text {
            if let Some((usage, rss)) = stats_of(&text, &namespace, &pod) {
                m.usage.store(usage, Relaxed);
                m.anon.store(rss, Relaxed);
                m.file.store(usage.saturating_sub(rss), Relaxed);
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The node container's memory usage and RSS in a kubelet's summary.
fn stats_of(summary: &str, namespace: &str, pod: &str) -> Option<(u64, u64)> {
    let v: serde_json::Value = serde_json::from_str(summary).ok()?;
    let p = v["pods"]
        .as_array()?
        .iter()
        .find(|p| p["podRef"]["name"] == pod && p["podRef"]["namespace"] == namespace)?;
    let c = p["containers"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == "node")?;
    let m = &c["memory"];
    Some((
        m["usageBytes"].as_u64()?,
        m["rssBytes"].as_u64().unwrap_or(0),
    ))
}

impl Node for PodNode {
    fn info(&self) -> crate::driver::NodeInfo {
        crate::driver::NodeInfo {
            engine_memory: Some(self.memory.clone()),
            ..Default::default()
        }
    }

    async fn start(&mut self) -> Result<Duration, DriverError> {
        let t0 = Instant::now();
        let log_from = std::fs::metadata(&self.spec.log)
            .map(|m| m.len())
            .unwrap_or(0);
        let inc = self.launch().await?;
        self.current = Some(inc);
        let started = Instant::now();
        let waited = await_ready(&self.spec, started, log_from, || {
            self.ended().map(|e| e.exit)
        })
        .await;
        match waited {
            Ok(_) => Ok(t0.elapsed()),
            Err(why @ NotReady::Exited(_)) => {
                let oom = self.ended().is_some_and(|e| e.oom);
                if let Some(logs) = self.take_current() {
                    let _ = tokio::time::timeout(Duration::from_secs(5), logs).await;
                }
                Err(not_ready(&self.spec, log_from, why, oom))
            }
            Err(why) => {
                // What the connections to the Pod met, if they never got
                // there: the kubelet's words.
                let reach = self.forward.as_ref().and_then(|f| f.last_error());
                let _ = self.kill(Signal::SIGKILL).await;
                self.take_current();
                Err(match (not_ready(&self.spec, log_from, why, false), reach) {
                    (
                        DriverError::NeverReady {
                            timeout,
                            probe,
                            log,
                            tail,
                        },
                        Some(r),
                    ) => DriverError::NeverReady {
                        timeout,
                        probe: format!("{probe}; soak's connections to the Pod: {r}"),
                        log,
                        tail,
                    },
                    (e, _) => e,
                })
            }
        }
    }

    async fn stop(&mut self) -> Result<Exit, DriverError> {
        let name = self.current()?.name.clone();
        let grace = self.spec.grace;
        // The kubelet sends the stop signal, then SIGKILL after the grace.
        delete_pod(&self.pods(), &name, grace.as_secs().max(1) as u32).await;
        let end = self.wait_end(grace + Duration::from_secs(15)).await;
        self.take_current();
        end.map(|e| e.exit).ok_or(DriverError::NotRunning)
    }

    async fn kill(&mut self, sig: Signal) -> Result<Exit, DriverError> {
        if let Err(e) = self.local()?.signal(sig) {
            if self.wait_end(Duration::from_secs(1)).await.is_none() {
                return Err(DriverError::Io(e));
            }
        }
        let mut end = self.wait_end(Duration::from_secs(15)).await;
        if end.is_none() {
            let _ = self.local()?.signal(Signal::SIGKILL);
            end = self.wait_end(Duration::from_secs(15)).await;
        }
        self.take_current();
        end.map(|e| e.exit).ok_or(DriverError::NotRunning)
    }

    async fn pause(&mut self) -> Result<(), DriverError> {
        self.local()?.freeze(true).map_err(DriverError::Io)
    }

    async fn resume(&mut self) -> Result<(), DriverError> {
        self.local()?.freeze(false).map_err(DriverError::Io)
    }

    fn exited(&self) -> Exited {
        ended::exited(self.current.as_ref().map(|c| &c.ended))
    }

    fn exit(&self) -> Option<Exit> {
        self.ended().map(|e| e.exit)
    }

    fn death(&mut self) -> Death {
        let ended = self.ended();
        self.take_current();
        ended::death(ended)
    }

    fn running(&self) -> bool {
        self.current.is_some() && self.ended().is_none()
    }

    fn pid(&self) -> Option<i32> {
        self.current
            .as_ref()
            .and_then(|c| c.local.as_ref())
            .map(|l| l.pid())
    }

    async fn set_memory_limit(&mut self, _bytes: u64) -> Result<String, DriverError> {
        Err(DriverError::Io(
            "a Pod's memory limit cannot change while it runs (in-place resize is not in core/v1 before Kubernetes 1.33)"
                .into(),
        ))
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

impl Drop for PodNode {
    /// A last resort when the cell ends without `shutdown` (a panic):
    /// deletes what was made from a thread of its own.
    fn drop(&mut self) {
        let pods: Vec<String> = std::mem::take(&mut self.made);
        let claim = self.claim.take();
        if pods.is_empty() && claim.is_none() {
            return;
        }
        let client = self.client.clone();
        let ns = self.kube.namespace.clone();
        ended::in_thread(async move {
            let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
            for p in pods {
                delete_pod(&api, &p, 0).await;
            }
            if let Some((c, v)) = claim {
                delete_claim(&client, &ns, &c, &v).await;
            }
        });
    }
}

/// What `soak cleanup` found of soak's on a cluster.
#[derive(Debug, Clone)]
pub struct Labelled {
    pub kind: &'static str,
    pub name: String,
    pub run: String,
    pub machine: String,
}

/// Every Pod, claim (in `namespace`) and volume of soak on the cluster.
pub async fn labelled(client: &kube::Client, namespace: &str) -> Result<Vec<Labelled>, String> {
    use crate::driver::image::{LABEL_MACHINE, LABEL_RUN};
    let lp = ListParams::default().labels(LABEL_RUN);
    let err = |e: kube::Error| crate::net::error_chain(&e);
    let of = |kind: &'static str, m: &ObjectMeta| {
        let label = |k: &str| {
            m.labels
                .as_ref()
                .and_then(|l| l.get(k).cloned())
                .unwrap_or_default()
        };
        Labelled {
            kind,
            name: m.name.clone().unwrap_or_default(),
            run: label(LABEL_RUN),
            machine: label(LABEL_MACHINE),
        }
    };
    let mut out = vec![];
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    out.extend(
        pods.list(&lp)
            .await
            .map_err(err)?
            .items
            .iter()
            .map(|p| of("pod", &p.metadata)),
    );
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    out.extend(
        claims
            .list(&lp)
            .await
            .map_err(err)?
            .items
            .iter()
            .map(|c| of("persistentvolumeclaim", &c.metadata)),
    );
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    out.extend(
        volumes
            .list(&lp)
            .await
            .map_err(err)?
            .items
            .iter()
            .map(|v| of("persistentvolume", &v.metadata)),
    );
    Ok(out)
}

/// Deletes one of soak's objects, found by [`labelled`].
pub async fn remove(client: &kube::Client, namespace: &str, l: &Labelled) -> Result<(), String> {
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    let r = match l.kind {
        "pod" => Api::<Pod>::namespaced(client.clone(), namespace)
            .delete(&l.name, &dp)
            .await
            .map(|_| ()),
        "persistentvolumeclaim" => {
            Api::<PersistentVolumeClaim>::namespaced(client.clone(), namespace)
                .delete(&l.name, &dp)
                .await
                .map(|_| ())
        }
        _ => Api::<PersistentVolume>::all(client.clone())
            .delete(&l.name, &dp)
            .await
            .map(|_| ()),
    };
    match r {
        Ok(()) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(crate::net::error_chain(&e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cells_id_becomes_a_label_value_kubernetes_accepts() {
        assert_eq!(
            label_value("allocator=glibc,cache=256MiB"),
            "allocator_glibc_cache_256MiB"
        );
        assert_eq!(label_value("default"), "default");
        assert_eq!(label_value("-x-"), "x");
        assert_eq!(label_value(&"a".repeat(80)).len(), 63);
    }

    #[test]
    fn the_node_containers_memory_is_found_in_a_kubelets_summary() {
        // The shape of a 1.20 kubelet's /stats/summary, cut down.
        let summary = r#"{"node":{"nodeName":"localhost","memory":{"usageBytes":1}},
          "pods":[
            {"podRef":{"name":"soak-x-1","namespace":"other"},
             "containers":[{"name":"node","memory":{"usageBytes":5,"rssBytes":4}}]},
            {"podRef":{"name":"soak-x-1","namespace":"default"},
             "containers":[
               {"name":"sidecar","memory":{"usageBytes":7,"rssBytes":6}},
               {"name":"node","memory":{"time":"2026-12-04T15:00:00Z","availableBytes":200,
                "usageBytes":56000000,"workingSetBytes":40000000,"rssBytes":30000000}}]}]}"#;
        assert_eq!(
            stats_of(summary, "default", "soak-x-1"),
            Some((56_000_000, 30_000_000))
        );
        assert_eq!(stats_of(summary, "default", "soak-x-2"), None);
        assert_eq!(stats_of("not json", "default", "soak-x-1"), None);
    }
}
