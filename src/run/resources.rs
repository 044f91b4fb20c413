//! A cell's resources: everything brought up before its first phase (the
//! node and its cgroup, the network proxy and the load, the fault
//! filesystem, telemetry), as the plan decided, as one guard. `stop` takes
//! them down in the reverse order and returns what they measured; an early
//! return or a panic drops the guard, and each part's own `Drop` takes it
//! down in the same order (fields drop in the order they are declared).

use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, AtomicU32};
use std::sync::Arc;
use std::time::Duration;

use crate::cell::bus::Bus;
use crate::cell::event::Event;
use crate::driver::any::AnyNode;
use crate::driver::cgroup::{self, place::Placement, Cgroup};
use crate::driver::Node;
use crate::faults::disk::Mounted;
use crate::faults::proxy::Proxy;
use crate::faults::{Faults, MemberDisks};
use crate::model::CgroupSummary;
use crate::plan::CellPlan;
use crate::services::Services;
use crate::telemetry::{Sample, Sampler, ScrapeStats, Scraper, Target};
use crate::workload::Load;

use super::assemble::CellMeasures;
use super::RunError;

/// The parts of a running cell, declared in the order they are taken down.
pub(super) struct CellResources {
    telemetry: Option<Telemetry>,
    pub(super) load: Option<Load>,
    pub(super) node: AnyNode,
    disk: Option<FaultFs>,
    /// A cluster's: one under each member's data directory.
    members_disks: Vec<FaultFs>,
    pub(super) proxy: Option<Arc<Proxy>>,
    /// The node's cgroup, as telemetry and the report read it.
    pub(super) cgroup: Option<Arc<Cgroup>>,
    pub(super) engine: Option<crate::model::EngineInfo>,
    /// What telemetry and the cell watch: the node's pid, cgroup and data.
    pub(super) target: Target,
    /// The services beside the node: up first, down last.
    pub(super) services: Arc<tokio::sync::Mutex<Services>>,
}

impl CellResources {
    /// Brings the cell's parts up in order: the node (not started: its
    /// first start is the cell's first phase) in its cgroup, the proxy and
    /// the load, the fault filesystem under the data directory, telemetry.
    /// On an error, those already up are taken down again.
    pub(super) async fn start(
        plan: &CellPlan,
        placement: Option<&Placement>,
        origin: tokio::time::Instant,
    ) -> Result<CellResources, RunError> {
        // A service that never gets ready stops the run before the node
        // starts: the environment's failure, named.
        let services = Arc::new(tokio::sync::Mutex::new(
            Services::start(&plan.services, placement)
                .await
                .map_err(RunError::Environment)?,
        ));
        let (node, cgroup, member_cgroups) = prepare_node(plan, placement).await?;
        let info = node.info();
        let (proxy, load) = start_load(plan, origin).await?;
        // With disk faults, the data directory is soak's fault filesystem;
        // the files live in a folder beside it, which telemetry reads.
        let (disk, members_disks) = match (plan.fault_fs, &plan.cluster) {
            (Some(writes), None) => (Some(mount_fault_fs(plan, &plan.data_dir, writes)?), vec![]),
            (Some(writes), Some(c)) => (
                None,
                c.members
                    .iter()
                    .map(|m| mount_fault_fs(plan, &m.data_dir, writes))
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            (None, _) => (None, vec![]),
        };
        let target = Target {
            pid: Arc::new(AtomicI32::new(0)),
            segment: Arc::new(AtomicU32::new(0)),
            cgroup: cgroup.clone(),
            data_dir: Some(
                match disk
                    .as_ref()
                    .or(members_disks.first())
                    .and_then(|d| d.mounted.as_ref())
                {
                    Some(m) => m.backing().to_path_buf(),
                    None => plan.data_dir.clone(),
                },
            ),
            pid_cgroup: plan.container.is_some(),
            engine_memory: info.engine_memory,
            members: member_watches(plan, member_cgroups, &members_disks),
        };
        if let (Some(user), None) = (&plan.node.user, &plan.container) {
            give_data_dir(&plan.data_dir, user)?;
        }
        let telemetry = Telemetry::start(plan, &target, origin)?;
        Ok(CellResources {
            telemetry: Some(telemetry),
            load,
            node,
            disk,
            members_disks,
            proxy,
            cgroup,
            engine: info.engine,
            target,
            services,
        })
    }

    /// The fault components the plan asked for, for the cell's phases.
    pub(super) fn faults(&self) -> Faults {
        let mut faults = Faults::default();
        if let Some(p) = &self.proxy {
            faults = faults.with(p.clone());
        }
        if let Some(m) = self.disk.as_ref().and_then(|d| d.mounted.clone()) {
            faults = faults.with(m);
        }
        if !self.members_disks.is_empty() {
            let each = self.members_disks.iter().filter_map(|d| d.mounted.clone());
            faults = faults.with(Arc::new(MemberDisks(each.collect())));
        }
        faults
    }

    /// What the cell's fault filesystem does not give its node, said once
    /// it is mounted (`None` without one).
    pub(super) fn fault_fs_notice(&self) -> Option<String> {
        let mounted: Vec<&FaultFs> = self.disk.iter().chain(&self.members_disks).collect();
        let first = mounted.first()?;
        first.mounted.as_ref()?;
        let at = match mounted.len() {
            1 => first.data_dir.display().to_string(),
            n => format!(
                "{} and the other {} members' data directories",
                first.data_dir.display(),
                n - 1
            ),
        };
        Some(format!(
            "under {at}; it does not give {} (soak doctor tries the rest on this host)",
            crate::faults::disk::not_given()
        ))
    }

    /// Takes the parts down in reverse order (telemetry, the load's log,
    /// the node, the fault filesystem) and returns what they measured. The
    /// kernel's counters are read before the cgroup goes with the node.
    pub(super) async fn stop(
        mut self,
        plan: &CellPlan,
        placement: Option<&Placement>,
        bus: &mut Bus,
    ) -> CellMeasures {
        let Stopped {
            mut kept,
            scrapes,
            profile: watched,
            jvm,
        } = match self.telemetry.take() {
            Some(t) => t.stop(bus).await,
            None => Stopped::default(),
        };
        let samples_taken = kept.taken();
        let members = kept.take_members();
        let samples = kept.into_samples();
        let mut history = None;
        if let Some(l) = self.load.as_mut() {
            if let Err(err) = l.close_log().await {
                bus.error(format!("latency.csv: {err}"));
            }
            history = l.finish_history();
            if let Some(e) = history.as_ref().and_then(|h| h.error.as_ref()) {
                bus.error(format!("{}: {e}", crate::history::command::FILE));
            }
        }
        let cgroup = self
            .cgroup
            .as_deref()
            .map(|c| cgroup_summary(c, &self.target.members, placement, &samples));
        let oom_kills = oom_kills(self.cgroup.as_deref(), &self.target.members, bus);
        self.node.shutdown().await;
        let services = self.services.lock().await.stop().await;
        let faults = self.faults().record();
        let said = crate::analysis::log::read(&plan.dir.join("node.log"), 8, 4);
        let profile = profile_summary(plan, watched);
        for mut d in self
            .disk
            .take()
            .into_iter()
            .chain(self.members_disks.drain(..))
        {
            d.unmount();
        }
        let load = self.load.as_ref();
        CellMeasures {
            network: faults.network,
            disk_faults: faults.disk,
            error_replies: load.map(|l| l.error_replies()).unwrap_or_default(),
            windows: load.map(|l| l.windows()).unwrap_or_default(),
            served: load.map(|l| l.served()).unwrap_or_default(),
            load: load.map(|l| l.stats()),
            samples,
            members,
            samples_taken,
            scrapes,
            cgroup,
            oom_kills,
            engine: self.engine.take(),
            log_errors: said.errors,
            oom_errors: said.out_of_memory,
            services,
            history,
            judged: None,
            profile,
            jvm,
        }
    }
}

/// soak's fault filesystem over the data directory, unmounted when
/// dropped, with the files put back where the node wrote them, so that the
/// cell's folder looks as without it (for `soak verify` and the user's own
/// tools), on every path.
struct FaultFs {
    mounted: Option<Arc<Mounted>>,
    data_dir: PathBuf,
}

impl FaultFs {
    fn unmount(&mut self) {
        let Some(m) = self.mounted.take() else {
            return;
        };
        match Arc::try_unwrap(m) {
            Ok(m) => drop(m),
            Err(m) => {
                crate::faults::disk::unmount(m.mountpoint());
            }
        }
        crate::faults::disk::restore(&self.data_dir);
    }
}

impl Drop for FaultFs {
    fn drop(&mut self) {
        self.unmount();
    }
}

/// The node, the cgroup the cell reads for its limit, and a cluster's
/// members' cgroups.
type Prepared = (AnyNode, Option<Arc<Cgroup>>, Vec<Arc<Cgroup>>);

/// The node of a cell, in its cgroup (required for a memory limit;
/// otherwise used when it can be), with `node.json` written for `soak
/// verify` should soak itself not finish.
async fn prepare_node(
    plan: &CellPlan,
    placement: Option<&Placement>,
) -> Result<Prepared, RunError> {
    if let Some(c) = &plan.cluster {
        return prepare_cluster(plan, c, placement);
    }
    let mut saved = crate::verify::saved::SavedNode::of(
        &plan.node,
        plan.load.as_ref().map(|l| l.protocol.clone()),
        plan.load
            .as_ref()
            .map(|l| l.timeout)
            .unwrap_or(Duration::from_secs(5)),
    );
    if let Some(c) = &plan.container {
        saved = saved.in_container(c);
    }
    saved
        .write(&plan.dir.join("node.json"))
        .map_err(RunError::io("node.json"))?;
    // A container's limits and cgroup are the engine's.
    let cg = match placement.filter(|_| plan.container.is_none()) {
        None => None,
        Some(p) => match p.create(&plan.cgroup_name, plan.limits) {
            Ok(cg) => Some(cg),
            Err(e) if plan.needs_cgroup => {
                return Err(RunError::Environment(format!(
                    "limits.memory needs a memory cgroup: {e}"
                )))
            }
            Err(_) => None,
        },
    };
    let view = cg.as_ref().map(|c| Arc::new(c.view()));
    let node = AnyNode::open(plan.node.clone(), plan.container.clone(), cg)
        .await
        .map_err(|e| RunError::Environment(e.to_string()))?;
    Ok((node, view, vec![]))
}

/// A cluster's members, each in its network namespace and cgroup; their
/// cgroups as telemetry reads them (the cell's is member 1's, for its
/// limit).
fn prepare_cluster(
    plan: &CellPlan,
    c: &crate::plan::ClusterPlan,
    placement: Option<&Placement>,
) -> Result<Prepared, RunError> {
    use crate::driver::process::ProcessNode;
    let net = crate::net::netns::Network::create(
        &crate::lock::run_id(),
        plan.index,
        c.members.len(),
        c.net,
    )
    .map_err(|e| RunError::Environment(format!("cannot make the cluster's network: {e}")))?;
    let mut members = Vec::with_capacity(c.members.len());
    let mut views = vec![];
    for (i, m) in c.members.iter().enumerate() {
        std::fs::create_dir_all(&m.data_dir)
            .map_err(RunError::io(m.data_dir.display().to_string()))?;
        let cg = match placement {
            None => None,
            Some(p) => match p.create(&m.cgroup_name, plan.limits) {
                Ok(cg) => Some(cg),
                Err(e) if plan.needs_cgroup => {
                    return Err(RunError::Environment(format!(
                        "limits.memory needs a memory cgroup for each member: {e}"
                    )))
                }
                Err(_) => None,
            },
        };
        views.push(cg.as_ref().map(|c| Arc::new(c.view())));
        let mut spec = m.spec.clone();
        spec.netns = Some(net.members()[i].file.clone());
        members.push(ProcessNode::new(spec, cg));
    }
    let leader = c.members.iter().filter_map(|m| m.leader.clone()).collect();
    let versions = c.members.iter().map(|m| m.versions.clone()).collect();
    let node =
        crate::driver::cluster::ClusterNode::new(members, net, leader, c.leader_timeout, versions);
    let first = views.first().cloned().flatten();
    // Telemetry reads the members one by one only if each has its cgroup.
    let each = views
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .unwrap_or_default();
    Ok((AnyNode::Cluster(node), first, each))
}

/// What telemetry reads of each member: its cgroup, and its data
/// directory (the fault filesystem's files, where it has one); none
/// without the members' cgroups.
fn member_watches(
    plan: &CellPlan,
    cgroups: Vec<Arc<Cgroup>>,
    disks: &[FaultFs],
) -> Vec<crate::telemetry::MemberWatch> {
    let Some(c) = &plan.cluster else {
        return vec![];
    };
    cgroups
        .into_iter()
        .zip(&c.members)
        .enumerate()
        .map(|(i, (cgroup, m))| crate::telemetry::MemberWatch {
            cgroup,
            data_dir: match disks.get(i).and_then(|d| d.mounted.as_ref()) {
                Some(fs) => fs.backing().to_path_buf(),
                None => m.data_dir.clone(),
            },
        })
        .collect()
}

/// What telemetry kept while the cell ran.
struct Telemetry {
    sampler: Sampler,
    scraper: Option<Scraper>,
    profile: Option<ProfileWatch>,
    jvm: Option<crate::telemetry::nmt::Watch>,
}

/// Keeps jemalloc's dumps bounded while the node runs (two per process:
/// see [`crate::telemetry::jeprof::prune`]), and notes when each
/// of the node's processes started, to find the end of its warm-up.
struct ProfileWatch {
    dir: std::path::PathBuf,
    stop: tokio::sync::watch::Sender<bool>,
    handle: tokio::task::JoinHandle<ProfileStarts>,
}

/// When each process of the node was first seen, and the last one.
#[derive(Default)]
pub(super) struct ProfileStarts {
    started: std::collections::HashMap<i32, std::time::SystemTime>,
    last: Option<i32>,
}

impl ProfileWatch {
    fn start(
        dir: &std::path::Path,
        target: &Target,
        warmup_s: f64,
        prune: bool,
    ) -> std::io::Result<ProfileWatch> {
        std::fs::create_dir_all(dir)?;
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let (pid, folder) = (target.pid.clone(), dir.to_path_buf());
        let warmup = std::time::Duration::from_secs_f64(warmup_s.max(0.0));
        let handle = tokio::spawn(async move {
            let mut seen = ProfileStarts::default();
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = stopped.changed() => break,
                    _ = tick.tick() => {
                        let p = pid.load(std::sync::atomic::Ordering::Relaxed);
                        if p > 0 {
                            seen.started.entry(p).or_insert_with(std::time::SystemTime::now);
                            seen.last = Some(p);
                        }
                        if !prune {
                            continue;
                        }
                        let (folder, started) = (folder.clone(), seen.started.clone());
                        let _ = tokio::task::spawn_blocking(move || {
                            crate::telemetry::jeprof::prune(&folder, &started, warmup)
                        })
                        .await;
                    }
                }
            }
            seen
        });
        Ok(ProfileWatch {
            dir: dir.to_path_buf(),
            stop,
            handle,
        })
    }

    async fn stop(self) -> (std::path::PathBuf, ProfileStarts) {
        let _ = self.stop.send(true);
        (self.dir, self.handle.await.unwrap_or_default())
    }
}

impl Telemetry {
    fn start(
        plan: &CellPlan,
        target: &Target,
        origin: tokio::time::Instant,
    ) -> Result<Telemetry, RunError> {
        let sampler = Sampler::start(
            target.clone(),
            plan.interval,
            plan.dir.join("samples.csv.gz"),
            origin,
        )
        .map_err(RunError::io("samples file"))?;
        let scraper = match &plan.scrape {
            Some(url) => Some(
                Scraper::start(
                    url.clone(),
                    plan.interval,
                    plan.dir.join("metrics.csv.gz"),
                    origin,
                    target.pid.clone(),
                )
                .map_err(RunError::io("metrics file"))?,
            ),
            None => None,
        };
        let profile = match &plan.profile {
            Ok(Some(p)) => Some(
                ProfileWatch::start(
                    &p.dir,
                    target,
                    plan.warmup_s,
                    matches!(p.tool, crate::plan::ProfileTool::Jemalloc { .. }),
                )
                .map_err(RunError::io(p.dir.display().to_string()))?,
            ),
            _ => None,
        };
        let jvm = match plan.jvm_every {
            Some(every) => Some(
                crate::telemetry::nmt::Watch::start(
                    target.clone(),
                    every,
                    plan.dir.join("nmt.csv.gz"),
                    origin,
                )
                .map_err(RunError::io("nmt file"))?,
            ),
            None => None,
        };
        Ok(Telemetry {
            sampler,
            scraper,
            profile,
            jvm,
        })
    }

    async fn stop(self, bus: &mut Bus) -> Stopped {
        let samples = self.sampler.stop().await;
        let profile = match self.profile {
            Some(p) => Some(p.stop().await),
            None => None,
        };
        let jvm = match self.jvm {
            Some(j) => Some(j.stop().await),
            None => None,
        };
        let scrapes = match self.scraper {
            Some(s) => Some(s.stop().await),
            None => None,
        };
        // Said only when scrapes were tried: a node that never got ready
        // was never scraped, and that is its own error.
        if let Some(s) = scrapes
            .as_ref()
            .filter(|s| s.ok == 0 && s.failed + s.empty > 0)
        {
            bus.notice(
                "metrics",
                format!(
                    "no scrape of the Prometheus endpoint gave any series ({} failed, {} empty{})",
                    s.failed,
                    s.empty,
                    s.last_error
                        .as_ref()
                        .map(|e| format!("; last error: {e}"))
                        .unwrap_or_default()
                ),
            );
        }
        Stopped {
            kept: samples,
            scrapes,
            profile,
            jvm,
        }
    }
}

/// What telemetry handed over when it stopped.
#[derive(Default)]
struct Stopped {
    kept: crate::telemetry::Kept,
    scrapes: Option<ScrapeStats>,
    profile: Option<(std::path::PathBuf, ProfileStarts)>,
    jvm: Option<(Vec<crate::telemetry::nmt::Reading>, Option<String>)>,
}

/// What the heap profiler found, read once the node is down (its last
/// dump is written as it exits), or why the cell has no profile.
fn profile_summary(
    plan: &CellPlan,
    watched: Option<(std::path::PathBuf, ProfileStarts)>,
) -> Option<crate::model::ProfileSummary> {
    use crate::telemetry::jeprof;
    let warmup = std::time::Duration::from_secs_f64(plan.warmup_s.max(0.0));
    match (&plan.profile, watched) {
        (Err(why), _) => Some(crate::model::ProfileSummary {
            tool: "jemalloc".into(),
            note: Some(why.clone()),
            ..Default::default()
        }),
        (Ok(Some(p)), Some((dir, seen))) if p.tool == crate::plan::ProfileTool::Heaptrack => {
            Some(crate::telemetry::heaptrack::summarize(
                &dir,
                &plan.dir,
                seen.last,
                &seen.started,
                warmup,
            ))
        }
        (Ok(Some(_)), Some((dir, seen))) => {
            jeprof::prune(&dir, &seen.started, warmup);
            Some(jeprof::summarize(
                &dir,
                &plan.dir,
                seen.last,
                &seen.started,
                warmup,
            ))
        }
        _ => None,
    }
}

/// The cell's load, if it has one, and with `network` phases the proxy it
/// connects through (the read-backs do not: they judge the data, not the
/// network).
async fn start_load(
    plan: &CellPlan,
    origin: tokio::time::Instant,
) -> Result<(Option<Arc<crate::faults::proxy::Proxy>>, Option<Load>), RunError> {
    let network = match (&plan.load, plan.proxy) {
        (Some(l), true) => {
            let target = l.protocol.target().ok_or_else(|| {
                RunError::Environment(
                    "`network` faults need to know where the load's requests go: give the adapter a `target`".into(),
                )
            })?;
            Some(Arc::new(start_proxy(&target, plan.seed).await?))
        }
        _ => None,
    };
    let mut load_cfg = plan.load.clone();
    if let (Some(c), Some(p)) = (load_cfg.as_mut(), &network) {
        c.protocol.retarget(&p.addr().to_string());
    }
    let mut load = load_cfg.map(Load::new);
    if let Some(l) = load.as_mut() {
        l.set_origin(origin.into_std());
        if plan.history {
            let path = plan.dir.join(crate::history::command::FILE);
            l.record_history(&path, origin.into_std()).map_err(|e| {
                RunError::Environment(format!("cannot write {}: {e}", path.display()))
            })?;
        }
        l.log_intervals(
            &plan.dir.join("latency.csv"),
            plan.interval,
            origin,
            &plan.checks.windows(),
        );
    }
    Ok((network, load))
}

/// The cell's first event: its seed, allocator and where its memory is
/// counted.
pub(super) fn cell_event(
    plan: &CellPlan,
    cg: Option<&Cgroup>,
    engine: Option<&crate::driver::docker::engine::EngineInfo>,
) -> Event {
    Event::Cell {
        seed: plan.seed,
        allocator: plan.allocator.as_ref().map(|a| a.text.clone()),
        cgroup: match cg {
            Some(c) => Some(c.path.display().to_string()),
            None => engine.map(|e| {
                format!(
                    "the container's, made by Docker {} at {} (cgroup v{})",
                    e.version, e.host, e.cgroup_version
                )
            }),
        },
    }
}

/// The kernel's OOM kills of the node's cgroup; a container's cgroup
/// goes with it, so its OOM kills are the engine's word (`OOMKilled`),
/// one per restart it caused.
fn oom_kills(cg: Option<&Cgroup>, members: &[crate::telemetry::MemberWatch], bus: &Bus) -> u64 {
    let oom_restarts = bus
        .recorder
        .restarts
        .iter()
        .filter(|r| r.reason == crate::model::Cause::Oom)
        .count() as u64;
    let kernel = match members.is_empty() {
        true => cg.map(|c| c.oom_kills()).unwrap_or(0),
        false => members.iter().map(|m| m.cgroup.oom_kills()).sum(),
    };
    kernel.max(oom_restarts)
}

/// Gives the node's data directory to the user it runs as, after making
/// sure that user can reach it (a folder above it that only its owner may
/// enter, as `tempfile` makes them, would stop the node with a bare
/// "Permission denied").
fn give_data_dir(data_dir: &std::path::Path, user: &str) -> Result<(), RunError> {
    use std::os::unix::fs::MetadataExt;
    let (uid, gid) = crate::driver::process::resolve_user(user)
        .map_err(|e| RunError::Environment(format!("node.user: {e}")))?;
    for dir in data_dir.ancestors().skip(1) {
        let Ok(md) = std::fs::metadata(dir) else {
            continue;
        };
        let searchable = md.mode() & 0o001 != 0
            || (md.uid() == uid && md.mode() & 0o100 != 0)
            || (md.gid() == gid && md.mode() & 0o010 != 0);
        if !searchable {
            return Err(RunError::Environment(format!(
                "the node runs as {user}, who cannot enter {} (mode {:o}): `chmod o+x {}`, or give the run an --out folder {user} can reach",
                dir.display(),
                md.mode() & 0o7777,
                dir.display()
            )));
        }
    }
    std::os::unix::fs::chown(data_dir, Some(uid), Some(gid)).map_err(|e| {
        RunError::Environment(format!("cannot give {} to {user}: {e}", data_dir.display()))
    })
}

/// The fault filesystem over the cell's data directory; the files live in
/// `data.files` beside it while it is mounted.
fn mount_fault_fs(
    plan: &CellPlan,
    data_dir: &std::path::Path,
    writes: crate::faults::disk::Writes,
) -> Result<FaultFs, RunError> {
    std::fs::create_dir_all(data_dir).map_err(RunError::io(data_dir.display().to_string()))?;
    let backing = crate::faults::disk::backing_of(data_dir);
    crate::faults::disk::Mounted::mount(
        &backing,
        data_dir,
        &crate::lock::run_id(),
        plan.seed,
        plan.disk_limit,
        writes,
    )
    .map(|m| FaultFs {
        mounted: Some(Arc::new(m)),
        data_dir: data_dir.to_path_buf(),
    })
    .map_err(|e| {
        RunError::Environment(format!(
            "cannot mount soak's fault filesystem at {} (disk faults need root and /dev/fuse; `modprobe fuse` loads it): {e}",
            data_dir.display()
        ))
    })
}

/// The proxy in front of the load's target (`HOST:PORT`).
async fn start_proxy(target: &str, seed: u64) -> Result<crate::faults::proxy::Proxy, RunError> {
    let env = |e: String| RunError::Environment(e);
    let upstream = tokio::net::lookup_host(target)
        .await
        .map_err(|e| env(format!("the load's target {target}: {e}")))?
        .next()
        .ok_or_else(|| env(format!("the load's target {target} has no address")))?;
    crate::faults::proxy::Proxy::start(upstream, seed)
        .await
        .map_err(|e| env(format!("cannot start the network proxy for {target}: {e}")))
}

/// What a node's cgroup recorded, from its files and the samples.
/// The node's cgroup; a cluster's, the member's that came nearest its
/// limit (the largest peak), with the kernel's counts of every member.
fn cgroup_summary(
    c: &cgroup::Cgroup,
    members: &[crate::telemetry::MemberWatch],
    placement: Option<&Placement>,
    samples: &[Sample],
) -> CgroupSummary {
    let Some(top) = members.iter().max_by_key(|m| m.cgroup.peak()) else {
        return cgroup_summary_of(c, placement, samples);
    };
    let mut summary = cgroup_summary_of(&top.cgroup, placement, samples);
    let (mut high, mut max, mut oom, mut oom_kill) = (0, 0, 0, 0);
    for m in members {
        let e = m.cgroup.events();
        (high, max, oom, oom_kill) = (
            high + e.high,
            max + e.max,
            oom + e.oom,
            oom_kill + e.oom_kill,
        );
    }
    summary.events_high = high;
    summary.events_max = max;
    summary.events_oom = oom;
    summary.oom_kills = oom_kill;
    summary
}

fn cgroup_summary_of(
    c: &cgroup::Cgroup,
    placement: Option<&Placement>,
    samples: &[Sample],
) -> CgroupSummary {
    let events = c.events();
    let pressure = c.pressure();
    let max_of = |f: fn(&Sample) -> Option<f64>| {
        samples
            .iter()
            .filter_map(f)
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
    };
    CgroupSummary {
        version: match c.version {
            cgroup::Version::V1 => "v1".into(),
            cgroup::Version::V2 => "v2".into(),
        },
        path: c.path.display().to_string(),
        placement: placement.map(|p| p.plan.to_string()).unwrap_or_default(),
        peak_bytes: c.peak(),
        high_bytes: c.high_limit(),
        events_high: events.high,
        events_max: events.max,
        events_oom: events.oom,
        oom_kills: events.oom_kill,
        pressure_some_avg10_max: max_of(|s| s.pressure_some),
        pressure_full_avg10_max: max_of(|s| s.pressure_full),
        pressure_some_stall_s: pressure.map(|p| p.some_total_us as f64 / 1e6),
        pressure_full_stall_s: pressure.map(|p| p.full_total_us as f64 / 1e6),
    }
}
