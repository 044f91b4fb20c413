//! The plan layer: a suite, one of its cells and the run's context become a
//! fully rendered [`CellPlan`]: every template filled in, the allocator
//! found, the node's versions, the load, the limits and where the cell's
//! files go. `soak validate` resolves every cell through this same code, so
//! validation and running cannot disagree; nothing here starts anything.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::driver::allocator::{self, Profile};
use crate::driver::cgroup::Limits;
use crate::driver::docker::container::{
    ContainerPlan, LABEL_CELL, LABEL_MACHINE, LABEL_RUN, LABEL_SUITE,
};
use crate::driver::process::{Probe, Spec};
use crate::driver::Launch;
use crate::suite::{template, CellDef, LoadRate, Suite, BASE_VERSION};
use crate::workload::LoadConfig;

/// What every cell of a run shares.
#[derive(Debug, Clone)]
pub struct RunContext {
    pub run_id: String,
    /// The run's folder (absolute): cells go in `cells/<cell>` inside it.
    pub run_dir: PathBuf,
    /// The folder of the suite file, for `${SUITE_DIR}`.
    pub suite_dir: PathBuf,
    /// What `${SOAK_NODE}` names.
    pub soak_node: String,
    pub seed: u64,
    /// `--duration-scale`.
    pub scale: f64,
    /// `--interval`, over the suite's `telemetry.interval`.
    pub interval: Option<Duration>,
    /// Ports come from the kernel (a run), or are placeholders (`soak
    /// validate`, which must not depend on what is free).
    pub real_ports: bool,
    /// Whether an allocator library that is not installed is an error
    /// (a run) or left for the run to find (`soak validate`).
    pub find_libraries: bool,
    /// `--docker-host`, for container nodes.
    pub docker_host: Option<String>,
    /// `--kubeconfig` / `--kubernetes`: image nodes run as Pods there.
    pub kubernetes: Option<crate::driver::kubernetes::KubePlan>,
    /// The suite's name, for the containers' labels.
    pub suite_name: String,
}

impl RunContext {
    /// The context `soak validate` resolves cells in: placeholder ports
    /// and folders, nothing looked up on this machine.
    pub fn for_validation(suite_file: &Path) -> RunContext {
        let suite_dir = suite_file
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        RunContext {
            run_id: "validate".into(),
            run_dir: PathBuf::from("reports/validate"),
            suite_dir,
            soak_node: "soak-node".into(),
            seed: 0,
            scale: 1.0,
            interval: None,
            real_ports: false,
            find_libraries: false,
            docker_host: None,
            kubernetes: None,
            suite_name: String::new(),
        }
    }
}

/// The allocator a cell's node runs with.
#[derive(Debug, Clone)]
pub struct AllocatorPlan {
    pub profile: Profile,
    /// The library preloaded (none: glibc's own malloc, tuned).
    pub library: Option<PathBuf>,
    /// The profile and its library's package version, as reported.
    pub text: String,
}

/// A heap profiler for the cell's node (`memory.profile`).
#[derive(Debug, Clone)]
pub struct ProfilePlan {
    /// Where the dumps go: the cell's `profile/`.
    pub dir: PathBuf,
    pub tool: ProfileTool,
}

/// Which heap profiler, and its settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProfileTool {
    /// jemalloc's sampling profiler, dumping every this many bytes.
    Jemalloc { dump_every: u64 },
    /// heaptrack's record of every allocation.
    Heaptrack,
}

/// One cell, ready to run.
#[derive(Debug, Clone)]
pub struct CellPlan {
    pub id: String,
    pub params: BTreeMap<String, String>,
    /// Its place in the suite (names its cgroup).
    pub index: usize,
    /// `cells/<cell>`, relative to the run's folder.
    pub rel_dir: String,
    /// The cell's folder and its node's data directory (absolute).
    pub dir: PathBuf,
    pub data_dir: PathBuf,
    /// The template variables, as rendered into everything below.
    pub vars: BTreeMap<String, String>,
    /// The node as it first starts (the base version).
    pub node: Spec,
    /// The services started before it (`services:`), in order.
    pub services: Vec<crate::services::ServicePlan>,
    /// Every version's argv and environment; `node` is the base.
    pub versions: BTreeMap<String, Launch>,
    /// How the node's containers are made, when it runs as a container.
    pub container: Option<ContainerPlan>,
    pub allocator: Option<AllocatorPlan>,
    /// The heap profiler, or why this cell runs without the one the suite
    /// asks for.
    pub profile: Profiling,
    /// How often the JVM's Native Memory Tracking is read (`memory.jvm`).
    pub jvm_every: Option<Duration>,
    pub load: Option<LoadConfig>,
    /// The node's Prometheus endpoint, where it has one.
    pub scrape: Option<String>,
    pub limits: Limits,
    /// Whether the cell cannot run without a memory cgroup.
    pub needs_cgroup: bool,
    pub cgroup_name: String,
    pub interval: Duration,
    /// Seconds of warm-up the growth analysis leaves out (scaled).
    pub warmup_s: f64,
    pub seed: u64,
    pub scale: f64,
    pub readback_after_restart: bool,
    /// `limits.disk`: bytes the data directory may hold.
    pub disk_limit: Option<u64>,
    /// `workload.durability: unsynced-tail-allowed`.
    pub unsynced_tail_allowed: bool,
    /// Whether the data directory is soak's fault filesystem (the suite
    /// has disk faults, or `limits.disk`), and whether the kernel may
    /// cache the node's writes on their way to it.
    /// None for a container, whose data directory is the engine's.
    pub fault_fs: Option<crate::faults::disk::Writes>,
    /// Whether the load connects through soak's network proxy (the suite
    /// has `network` faults and a load).
    pub proxy: bool,
    /// The suite's checks with the cell's expectations in place of those
    /// they name: what the cell is judged by.
    pub checks: crate::suite::Checks,
    /// What the cell was expected to show (`expect:`), to say in the
    /// report whether the story it tells came true.
    pub expect: Option<crate::suite::Checks>,
    /// The members, when the node runs as a cluster.
    pub cluster: Option<ClusterPlan>,
    /// Whether every request of the load is recorded in the cell's
    /// history (a cluster, or a `linearizable` check).
    pub history: bool,
}

impl CellPlan {
    /// The limit the cell's memory figures are read against: the node's,
    /// or a cluster's members' sum (its figures are their sums).
    pub fn memory_limit(&self) -> Option<u64> {
        let members = self.cluster.as_ref().map_or(1, |c| c.members.len() as u64);
        self.limits.memory.map(|l| l * members)
    }
}

/// A cluster's members, each rendered with its own variables.
#[derive(Debug, Clone)]
pub struct ClusterPlan {
    /// The first three bytes of the cell's /24 (hub .1, member `i` .10+i).
    pub net: [u8; 3],
    pub members: Vec<MemberPlan>,
    pub clients: crate::suite::cluster::Clients,
    pub leader_timeout: Duration,
}

/// One member of a cluster.
#[derive(Debug, Clone)]
pub struct MemberPlan {
    pub spec: Spec,
    /// `cells/<cell>/members/<i>`, and its data directory.
    pub dir: PathBuf,
    pub data_dir: PathBuf,
    /// The leader probe, rendered for this member.
    pub leader: Option<Vec<String>>,
    /// The load's protocol, rendered for this member (its target).
    pub protocol: Option<crate::protocol::Spec>,
    /// Its Prometheus endpoint, rendered for it.
    pub scrape: Option<String>,
    pub cgroup_name: String,
    /// Each version (`upgrade: { to: v2, member: 2 }`), rendered for it.
    pub versions: BTreeMap<String, Launch>,
}

/// Member `i`'s address in `net`.
pub fn member_addr(net: [u8; 3], i: usize) -> String {
    format!("{}.{}.{}.{}", net[0], net[1], net[2], 10 + i)
}

/// The variables of member `i` (1-based) of `n`, over the cell's.
fn member_variables(
    cell: &BTreeMap<String, String>,
    c: &crate::suite::cluster::ClusterSpec,
    net: [u8; 3],
    i: usize,
    dir: &Path,
) -> Result<BTreeMap<String, String>, PlanError> {
    let n = c.members.0 as usize;
    let mut vars = cell.clone();
    vars.insert("MEMBERS".into(), n.to_string());
    for k in 1..=n {
        vars.insert(format!("MEMBER_ADDR_{k}"), member_addr(net, k));
    }
    // `${PEERS}`: each member's `peer` entry, joined.
    let mut peers = Vec::with_capacity(n);
    for k in 1..=n {
        let mut v = vars.clone();
        v.insert("MEMBER".into(), k.to_string());
        v.insert("MEMBER_ADDR".into(), member_addr(net, k));
        peers.push(
            template::render(&c.peer, &v).map_err(|error| PlanError::Template {
                field: "cluster.peer".into(),
                error,
            })?,
        );
    }
    vars.insert("PEERS".into(), peers.join(&c.separator));
    vars.insert("MEMBER".into(), i.to_string());
    vars.insert("MEMBER_ADDR".into(), member_addr(net, i));
    let mdir = dir.join("members").join(i.to_string());
    vars.insert("MEMBER_DIR".into(), mdir.display().to_string());
    vars.insert("DATA_DIR".into(), mdir.join("data").display().to_string());
    Ok(vars)
}

/// The /24 of a cluster's namespaces: one no route of this machine
/// covers, in a real run.
fn cluster_net(suite: &Suite, ctx: &RunContext) -> [u8; 3] {
    match (&suite.cluster, ctx.real_ports) {
        (Some(_), true) => crate::net::netns::free_net(),
        _ => [10, 77, 0],
    }
}

/// The members' cgroups named after the cell's, and the load's
/// connections bound to the members.
fn bind_members(
    mut cluster: Option<ClusterPlan>,
    load: Option<&mut LoadConfig>,
    cgroup_name: &str,
) -> Option<ClusterPlan> {
    let c = cluster.as_mut()?;
    for (i, m) in c.members.iter_mut().enumerate() {
        m.cgroup_name = format!("{cgroup_name}-m{}", i + 1);
    }
    if let Some(l) = load {
        l.members = c
            .members
            .iter()
            .filter_map(|m| m.protocol.clone())
            .collect();
        l.rotate = c.clients == crate::suite::cluster::Clients::RoundRobin;
    }
    cluster
}

/// Each member, rendered with its own variables.
fn cluster_plan(
    suite: &Suite,
    vars: &BTreeMap<String, String>,
    node: &Spec,
    dir: &Path,
    net: [u8; 3],
    load: Option<&LoadConfig>,
    ctx: &RunContext,
) -> Result<Option<ClusterPlan>, PlanError> {
    let cgroup_name = format!("{}{}", crate::driver::cgroup::PREFIX, ctx.run_id);
    let Some(c) = &suite.cluster else {
        return Ok(None);
    };
    let n = c.members.0 as usize;
    let mut members = Vec::with_capacity(n);
    for i in 1..=n {
        let v = member_variables(vars, c, net, i, dir)?;
        let r = Renderer { vars: &v };
        let mdir = dir.join("members").join(i.to_string());
        let mut env = rendered_env(&r, "node", &suite.node.env)?;
        // The allocator's and the label, as the cell's node has them.
        env.extend(
            node.env
                .iter()
                .filter(|(k, _)| !suite.node.env.contains_key(k))
                .cloned(),
        );
        let base = Launch {
            argv: r.argv("node.command", &suite.node.command)?,
            env: env.clone(),
            image: None,
        };
        let spec = Spec {
            argv: base.argv.clone(),
            env,
            probe: probe(&suite.node.ready, "node.ready", &r)?,
            log: mdir.join("node.log"),
            ..node.clone()
        };
        let protocol = match (&suite.workload, load) {
            (Some(w), Some(_)) => Some(protocol_spec(w, &r, dir, &ctx.run_id)?),
            _ => None,
        };
        members.push(MemberPlan {
            versions: versions(suite, &base, &r)?,
            spec,
            data_dir: mdir.join("data"),
            dir: mdir,
            leader: (c.leader.as_ref())
                .map(|l| r.argv("cluster.leader.exec", &l.exec))
                .transpose()?,
            protocol,
            scrape: (suite.node.metrics.as_ref())
                .map(|m| r.url("node.metrics.prometheus", &m.prometheus))
                .transpose()?,
            // Named by `resolve` after the cell's cgroup.
            cgroup_name: format!("{cgroup_name}-m{i}"),
        });
    }
    Ok(Some(ClusterPlan {
        net,
        members,
        clients: c.clients,
        leader_timeout: c
            .leader
            .as_ref()
            .map_or(Duration::from_secs(5), |l| l.timeout.0),
    }))
}

/// A cell that cannot be planned.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// A template that does not render (a suite error: exit 2).
    #[error("{field}: {error}")]
    Template { field: String, error: String },
    /// Something this machine lacks (exit 3).
    #[error("{0}")]
    Environment(String),
}

impl PlanError {
    /// The error as the suite's author reads it: for a template, the file,
    /// line and column of the field, then the field and the fix.
    pub fn located(&self, file: &Path, cell: &str) -> String {
        match self {
            PlanError::Template { field, error } => {
                let text = std::fs::read_to_string(file).unwrap_or_default();
                let (line, column) = crate::suite::locate::position(&text, field).unwrap_or((0, 0));
                crate::suite::SuiteError {
                    file: file.into(),
                    line,
                    column,
                    path: field.clone(),
                    message: format!("{error} (cell {cell})"),
                }
                .to_string()
            }
            PlanError::Environment(e) => format!("{}: cell {cell}: {e}", file.display()),
        }
    }
}

struct Renderer<'a> {
    vars: &'a BTreeMap<String, String>,
}

impl Renderer<'_> {
    fn one(&self, field: &str, text: &str) -> Result<String, PlanError> {
        template::render(text, self.vars).map_err(|error| PlanError::Template {
            field: field.into(),
            error,
        })
    }

    /// A template that must render to a URL soak can GET.
    fn url(&self, field: &str, text: &str) -> Result<String, PlanError> {
        let url = self.one(field, text)?;
        crate::net::http::check_url(&url).map_err(|error| PlanError::Template {
            field: field.into(),
            error: format!("{error}, e.g. http://127.0.0.1:${{PORT}}/health"),
        })?;
        Ok(url)
    }

    /// A request template: the suite's variables filled in, the key and
    /// value placeholders kept for each request.
    fn request(&self, field: &str, text: &str) -> Result<String, PlanError> {
        let mut vars = self.vars.clone();
        for p in crate::protocol::http::PLACEHOLDERS {
            vars.insert(p.to_string(), format!("${{{p}}}"));
        }
        template::render(text, &vars).map_err(|error| PlanError::Template {
            field: field.into(),
            error,
        })
    }

    fn argv(&self, field: &str, argv: &[String]) -> Result<Vec<String>, PlanError> {
        argv.iter()
            .enumerate()
            .map(|(i, a)| self.one(&format!("{field}[{i}]"), a))
            .collect()
    }
}

/// A folder-safe name for a cell id.
pub fn folder(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "=,.-_".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The cell's variables: the matrix's, and where it runs.
fn variables(
    def: &CellDef,
    ctx: &RunContext,
    dir: &Path,
    data_dir: &Path,
) -> Result<BTreeMap<String, String>, PlanError> {
    let mut vars = def.variables();
    // Ports for the node: `${PORT}`, `${METRICS_PORT}`, and more for nodes
    // that need several (etcd's peers, a broker's controller).
    let ports = if ctx.real_ports {
        crate::net::ports::free()
            .map_err(|e| PlanError::Environment(format!("no free port on 127.0.0.1: {e}")))?
    } else {
        [6379, 9100, 6380, 6381, 6382]
    };
    for (name, port) in NODE_PORTS.iter().zip(ports) {
        vars.insert(name.to_string(), port.to_string());
    }
    vars.insert("DATA_DIR".into(), data_dir.display().to_string());
    vars.insert("CELL_DIR".into(), dir.display().to_string());
    vars.insert("SOAK_NODE".into(), ctx.soak_node.clone());
    vars.insert("SUITE_DIR".into(), ctx.suite_dir.display().to_string());
    // Where `prepare:` steps built what the node runs.
    vars.insert("RUN_DIR".into(), ctx.run_dir.display().to_string());
    Ok(vars)
}

/// The variables of the node's ports (`${PORT}`...), each given a free port.
const NODE_PORTS: [&str; 5] = ["PORT", "METRICS_PORT", "PORT2", "PORT3", "PORT4"];

fn probe(ready: &crate::suite::Ready, at: &str, r: &Renderer) -> Result<Probe, PlanError> {
    Ok(if let Some(a) = &ready.resp {
        Probe::Resp(r.one(&format!("{at}.resp"), a)?)
    } else if let Some(a) = &ready.tcp {
        Probe::Tcp(r.one(&format!("{at}.tcp"), a)?)
    } else if let Some(u) = &ready.http {
        Probe::Http(r.url(&format!("{at}.http"), u)?)
    } else if let Some(re) = &ready.log {
        Probe::Log(r.one(&format!("{at}.log"), re)?)
    } else if let Some(argv) = &ready.exec {
        Probe::Exec(r.argv(&format!("{at}.exec"), argv)?)
    } else {
        unreachable!("validated: one probe")
    })
}

/// The node's environment: the suite's, the allocator's (with its heap
/// profiler's options), the JVM's tracking flag, and the label `soak
/// cleanup` finds its processes by.
fn node_env(
    suite: &Suite,
    r: &Renderer,
    allocator: Option<&AllocatorPlan>,
    profile: Option<&ProfilePlan>,
    run_id: &str,
) -> Result<Vec<(String, String)>, PlanError> {
    let mut env = rendered_env(r, "node", &suite.node.env)?;
    if let Some(a) = allocator {
        env.extend(a.profile.environment(a.library.as_deref()));
    }
    if let Some(p) = profile {
        profiled_env(&mut env, p);
    }
    if suite.memory.jvm.is_some() {
        crate::telemetry::nmt::with_flag(&mut env);
    }
    env.push(("SOAK_RUN_ID".into(), run_id.to_string()));
    Ok(env)
}

/// An `env:` map rendered, its errors at `{at}.env.NAME`.
fn rendered_env(
    r: &Renderer,
    at: &str,
    env: &BTreeMap<String, String>,
) -> Result<Vec<(String, String)>, PlanError> {
    env.iter()
        .map(|(k, v)| Ok((k.clone(), r.one(&format!("{at}.env.{k}"), v)?)))
        .collect()
}

/// Each service's ports and folder, as variables every template sees:
/// `${KAFKA_PORT}`, `${KAFKA_PORT2}`, `${KAFKA_DIR}`.
fn service_variables(
    suite: &Suite,
    ctx: &RunContext,
    dir: &Path,
    vars: &mut BTreeMap<String, String>,
) -> Result<(), PlanError> {
    for (i, s) in suite.services.iter().enumerate() {
        let [port, port2, folder] = s.variables();
        let ports = loop {
            let p: [u16; 2] = if ctx.real_ports {
                crate::net::ports::free().map_err(|e| {
                    PlanError::Environment(format!("no free port on 127.0.0.1: {e}"))
                })?
            } else {
                [7000 + 2 * i as u16, 7001 + 2 * i as u16]
            };
            // Not one of the node's or an earlier service's.
            let used = |x: u16| vars.values().any(|v| *v == x.to_string());
            if !p.iter().any(|x| used(*x)) || !ctx.real_ports {
                break p;
            }
        };
        vars.insert(port, ports[0].to_string());
        vars.insert(port2, ports[1].to_string());
        vars.insert(
            folder,
            dir.join("services").join(&s.name).display().to_string(),
        );
    }
    Ok(())
}

/// The services as they start, rendered.
fn service_plans(
    suite: &Suite,
    def: &CellDef,
    r: &Renderer,
    dir: &Path,
    ctx: &RunContext,
    cgroup_name: &str,
) -> Result<Vec<crate::services::ServicePlan>, PlanError> {
    let run_id = &ctx.run_id;
    let mut out = vec![];
    for (i, s) in suite.services.iter().enumerate() {
        let at = format!("services[{i}]");
        let mut env = rendered_env(r, &at, &s.env)?;
        env.push(("SOAK_RUN_ID".into(), run_id.to_string()));
        let log = format!("services/{}.log", s.name);
        out.push(crate::services::ServicePlan {
            name: s.name.clone(),
            spec: Spec {
                argv: r.argv(&format!("{at}.command"), &s.command)?,
                env,
                probe: probe(&s.ready, &format!("{at}.ready"), r)?,
                ready_timeout: s.ready.timeout.0,
                stop_signal: s.stop.signal.0,
                grace: s.stop.grace.0,
                log: dir.join(&log),
                user: None,
                netns: None,
            },
            dir: dir.join("services").join(&s.name),
            log,
            memory: s.memory.map(|m| m.0),
            cgroup_name: format!("{cgroup_name}-{}", s.name),
            container: s
                .image
                .as_ref()
                .map(|i| r.one(&format!("{at}.image"), i))
                .transpose()?
                .map(|image| ContainerPlan {
                    name: format!("{cgroup_name}-{}", s.name),
                    memory: s.memory.map(|m| m.0),
                    swap: s.memory.map(|_| 0),
                    // Services run on the node's Docker engine, even when
                    // the node is a Pod.
                    kubernetes: None,
                    ..container_plan(suite, def, 0, ctx, dir, &image)
                }),
        });
    }
    Ok(out)
}

/// The allocator: the matrix's, else the node's, else whatever the node
/// links (none).
fn allocator_plan(
    suite: &Suite,
    def: &CellDef,
    ctx: &RunContext,
) -> Result<Option<AllocatorPlan>, PlanError> {
    let Some(profile) = def.allocator().or(suite.node.allocator.as_ref()).cloned() else {
        return Ok(None);
    };
    let library = if ctx.find_libraries {
        profile.find_library().map_err(PlanError::Environment)?
    } else {
        None
    };
    let version = library
        .as_deref()
        .and_then(allocator::library_version)
        .or_else(|| {
            (profile.kind == allocator::Kind::Glibc)
                .then(|| allocator::library_version(Path::new("/lib/x86_64-linux-gnu/libc.so.6")))
                .flatten()
        });
    let text = match version {
        Some(v) => format!("{} ({v})", profile.name),
        None => profile.name.clone(),
    };
    Ok(Some(AllocatorPlan {
        profile,
        library,
        text,
    }))
}

/// The heap profiler the suite asks for (`memory.profile`) and the
/// allocator it needs: jemalloc's profiler for a cell on jemalloc, or on
/// no allocator of its own (jemalloc is then preloaded). A cell on another
/// allocator runs without it, and says why.
fn profile_plan(
    suite: &Suite,
    ctx: &RunContext,
    dir: &Path,
    allocator: Option<AllocatorPlan>,
) -> Result<(Option<AllocatorPlan>, Profiling), PlanError> {
    let Some(asked) = suite.memory.profile else {
        return Ok((allocator, Ok(None)));
    };
    if suite.node.image.is_some() {
        return Err(PlanError::Template {
            field: "memory.profile".into(),
            error: "a heap profile needs the node to run as a process of this machine, where \
                    soak preloads the profiler and reads what it writes: leave `memory.profile` \
                    out for a container or a Pod"
                .into(),
        });
    }
    if asked == crate::suite::MemoryProfile::Heaptrack {
        return heaptrack_plan(suite, ctx, dir, allocator);
    }
    let plan = ProfilePlan {
        dir: dir.join("profile"),
        tool: ProfileTool::Jemalloc {
            dump_every: suite.memory.dump_every.map_or(256 << 20, |s| s.0),
        },
    };
    match allocator {
        Some(a) if a.profile.kind != allocator::Kind::Jemalloc => {
            let why = format!(
                "memory.profile: jemalloc needs jemalloc, and this cell runs {}: no call sites \
                 here (its kinds of memory are still read from smaps)",
                a.profile.name
            );
            Ok((Some(a), Err(why)))
        }
        Some(a) => Ok((Some(a), Ok(Some(plan)))),
        None => {
            let profile = allocator::Profile::named(allocator::Kind::Jemalloc);
            let library = if ctx.find_libraries {
                profile.find_library().map_err(PlanError::Environment)?
            } else {
                None
            };
            let a = AllocatorPlan {
                text: format!("{} (preloaded for memory.profile)", profile.name),
                profile,
                library,
            };
            Ok((Some(a), Ok(Some(plan))))
        }
    }
}

/// heaptrack for a cell on any allocator: it wraps `malloc` and passes
/// each call on to the allocator the cell runs. `dump_every` is
/// jemalloc's, refused here rather than ignored.
fn heaptrack_plan(
    suite: &Suite,
    ctx: &RunContext,
    dir: &Path,
    allocator: Option<AllocatorPlan>,
) -> Result<(Option<AllocatorPlan>, Profiling), PlanError> {
    if suite.memory.dump_every.is_some() {
        return Err(PlanError::Template {
            field: "memory.dump_every".into(),
            error: "dump_every sets how often jemalloc's profiler dumps; heaptrack records \
                    every allocation as it happens: leave dump_every out"
                .into(),
        });
    }
    if ctx.find_libraries {
        crate::telemetry::heaptrack::installed().map_err(PlanError::Environment)?;
    }
    let plan = ProfilePlan {
        dir: dir.join("profile"),
        tool: ProfileTool::Heaptrack,
    };
    Ok((allocator, Ok(Some(plan))))
}

/// A cell's heap profiler, none, or why it runs without the one asked for.
pub type Profiling = Result<Option<ProfilePlan>, String>;

/// How often the JVM's account is read, when the suite asks for it
/// (default 10 s, at most every 200 ms).
fn jvm_every(m: &crate::suite::MemorySpec) -> Option<Duration> {
    m.jvm.map(|_| {
        m.jvm_every
            .map_or(Duration::from_secs(10), |d| d.0)
            .max(Duration::from_millis(200))
    })
}

/// jemalloc's profiler options added to the node's `MALLOC_CONF`, or
/// heaptrack's library put first in its `LD_PRELOAD` (before the
/// allocator's, whose `malloc` it then calls) and where it writes.
fn profiled_env(env: &mut Vec<(String, String)>, p: &ProfilePlan) {
    match p.tool {
        ProfileTool::Jemalloc { dump_every } => {
            let conf = crate::telemetry::jeprof::malloc_conf(&p.dir, dump_every);
            add_to_var(env, "MALLOC_CONF", conf, |old, new| format!("{old},{new}"));
        }
        ProfileTool::Heaptrack => {
            env.push((
                "DUMP_HEAPTRACK_OUTPUT".into(),
                crate::telemetry::heaptrack::output(&p.dir),
            ));
            let lib = crate::telemetry::heaptrack::PRELOAD.to_string();
            add_to_var(env, "LD_PRELOAD", lib, |old, new| format!("{new}:{old}"));
        }
    }
}

/// Sets `key` to `value`, or where the environment has it already, to
/// `join(what it had, value)`.
fn add_to_var(
    env: &mut Vec<(String, String)>,
    key: &str,
    value: String,
    join: impl Fn(&str, &str) -> String,
) {
    match env.iter_mut().find(|(k, _)| k == key) {
        Some((_, v)) => *v = join(v, &value),
        None => env.push((key.into(), value)),
    }
}

/// Each version: its argv, and the node's environment with its own
/// variables added or replacing.
fn versions(
    suite: &Suite,
    base: &Launch,
    r: &Renderer,
) -> Result<BTreeMap<String, Launch>, PlanError> {
    let mut out = BTreeMap::new();
    out.insert(BASE_VERSION.to_string(), base.clone());
    for (name, v) in &suite.versions {
        let argv = r.argv(&format!("versions.{name}.command"), &v.command)?;
        let mut env = base.env.clone();
        for (k, x) in &v.env {
            let x = r.one(&format!("versions.{name}.env.{k}"), x)?;
            env.retain(|(ek, _)| ek != k);
            env.push((k.clone(), x));
        }
        let image = match &v.image {
            Some(i) => Some(r.one(&format!("versions.{name}.image"), i)?),
            None => base.image.clone(),
        };
        out.insert(name.clone(), Launch { argv, env, image });
    }
    Ok(out)
}

fn load_config(
    suite: &Suite,
    r: &Renderer,
    seed: u64,
    dir: &Path,
    run_id: &str,
) -> Result<Option<LoadConfig>, PlanError> {
    let Some(w) = &suite.workload else {
        return Ok(None);
    };
    Ok(Some(LoadConfig {
        protocol: protocol_spec(w, r, dir, run_id)?,
        keys: w.keys.0 as usize,
        value_size: (w.value_range().min as usize, w.value_range().max as usize),
        compressibility: w.compressibility(),
        set: w.mix.set,
        get: w.mix.get,
        del: w.mix.del,
        mget: w.mix.mget,
        mget_keys: w.mget_keys.0 as usize,
        rate: match w.rate {
            LoadRate::Fixed(r) => Some(r),
            LoadRate::Max => None,
        },
        pipeline: w.pipeline.map(|p| p.0 as usize).unwrap_or(1),
        connections: w.connections.0 as usize,
        timeout: w.timeout.0,
        seed,
        distribution: w.distribution,
        members: vec![],
        rotate: false,
    }))
}

/// The workload's protocol, rendered for the cell.
fn protocol_spec(
    w: &crate::suite::Workload,
    r: &Renderer,
    dir: &Path,
    run_id: &str,
) -> Result<crate::protocol::Spec, PlanError> {
    use crate::protocol::{self as p, Spec};
    if let Some(resp) = &w.resp {
        return Ok(Spec::Resp(p::resp::Spec {
            target: r.one("workload.resp.target", &resp.target)?,
        }));
    }
    if let Some(pg) = &w.postgres {
        let url = r.one("workload.postgres.url", &pg.url)?;
        return p::postgres::Spec::from_url(&url, &pg.table)
            .map(Spec::Postgres)
            .map_err(|e| template_error("workload.postgres.url", e));
    }
    if let Some(a) = &w.adapter {
        return adapter_spec(w, a, r, dir, run_id).map(Spec::Adapter);
    }
    let Some(h) = &w.http else {
        unreachable!("validated: one protocol");
    };
    http_spec(h, r).map(|h| Spec::Http(Box::new(h)))
}

fn template_error(field: &str, error: String) -> PlanError {
    PlanError::Template {
        field: field.into(),
        error,
    }
}

fn adapter_spec(
    w: &crate::suite::Workload,
    a: &crate::suite::protocol::AdapterSpec,
    r: &Renderer,
    dir: &Path,
    run_id: &str,
) -> Result<crate::protocol::adapter::Spec, PlanError> {
    let mut env = vec![];
    for (k, v) in &a.env {
        env.push((k.clone(), r.one(&format!("workload.adapter.env.{k}"), v)?));
    }
    let mut params = BTreeMap::new();
    for (k, v) in &a.params {
        params.insert(
            k.clone(),
            r.one(&format!("workload.adapter.params.{k}"), v)?,
        );
    }
    Ok(crate::protocol::adapter::Spec {
        command: r.argv("workload.adapter.command", &a.command)?,
        env,
        target: a
            .target
            .as_ref()
            .map(|t| r.one("workload.adapter.target", t))
            .transpose()?,
        params,
        init_timeout_s: a.init_timeout.0.as_secs_f64(),
        needs: crate::protocol::Caps {
            multi_get: w.mix.mget > 0.0,
            delete: w.mix.del > 0.0,
        },
        log: dir.join("adapter.log"),
        run_id: run_id.to_string(),
    })
}

/// One of the HTTP protocol's requests, its templates checked.
fn http_request(
    r: &Renderer,
    prefix: &str,
    name: &str,
    q: &crate::suite::protocol::HttpRequest,
    method: &str,
) -> Result<crate::protocol::http::RequestSpec, PlanError> {
    let at = |f: &str| format!("workload.http.{name}.{f}");
    let path = r.request(&at("path"), &q.path)?;
    let path = if path.starts_with('/') || path.is_empty() {
        format!("{prefix}{path}")
    } else {
        return Err(template_error(
            &at("path"),
            format!("{path:?}: give the path from `/`"),
        ));
    };
    let mut headers = vec![];
    for (k, v) in &q.headers {
        headers.push((k.clone(), r.request(&at(&format!("headers.{k}")), v)?));
    }
    Ok(crate::protocol::http::RequestSpec {
        method: q.method.clone().unwrap_or_else(|| method.into()),
        path: if path.is_empty() { "/".into() } else { path },
        body: q
            .body
            .as_ref()
            .map(|b| r.request(&at("body"), b))
            .transpose()?,
        headers,
    })
}

fn http_spec(
    h: &crate::suite::protocol::HttpSpec,
    r: &Renderer,
) -> Result<crate::protocol::http::Spec, PlanError> {
    use crate::protocol::http as p;
    let url = r.one("workload.http.url", &h.url)?;
    let uri = crate::net::http::check_url(&url).map_err(|e| {
        template_error(
            "workload.http.url",
            format!("{e}, e.g. http://127.0.0.1:${{PORT}}"),
        )
    })?;
    let authority = uri.authority().map(|a| a.to_string()).unwrap_or_default();
    let target = if uri.port().is_some() {
        authority.clone()
    } else {
        format!("{authority}:80")
    };
    let prefix = uri.path().trim_end_matches('/').to_string();
    let request = |name: &str, q, method| http_request(r, &prefix, name, q, method);
    let mut headers = vec![];
    for (k, v) in &h.headers {
        headers.push((
            k.clone(),
            r.request(&format!("workload.http.headers.{k}"), v)?,
        ));
    }
    let defaults = p::Statuses::default();
    let set = |given: &Option<Vec<crate::suite::protocol::Status>>, d: &p::StatusSet| {
        given
            .as_ref()
            .map(|v| v.iter().map(|s| (s.0, s.1)).collect())
            .unwrap_or_else(|| d.clone())
    };
    let spec = p::Spec {
        target,
        host: authority,
        headers,
        write: request("write", &h.write, "PUT")?,
        read: request("read", &h.read, "GET")?,
        delete: h
            .delete
            .as_ref()
            .map(|d| request("delete", d, "DELETE"))
            .transpose()?,
        value: match &h.value.json {
            Some(pointer) => p::Extract::Json {
                pointer: pointer.clone(),
                decode: h.value.decode,
            },
            None => p::Extract::Body {
                decode: h.value.decode,
            },
        },
        status: p::Statuses {
            done: set(&h.status.done, &defaults.done),
            missing: set(&h.status.missing, &defaults.missing),
            not_done: set(&h.status.not_done, &defaults.not_done),
            unknown: set(&h.status.unknown, &defaults.unknown),
        },
        setup: h
            .setup
            .iter()
            .enumerate()
            .map(|(i, s)| request(&format!("setup[{i}]"), s, "PUT"))
            .collect::<Result<_, _>>()?,
    };
    if let Err(e) = p::Http::compile_check(&spec) {
        let (part, _) = e.split_once(':').unwrap_or(("write", ""));
        let field = if part.starts_with("setup") {
            "workload.http.setup".to_string()
        } else {
            format!("workload.http.{part}")
        };
        return Err(template_error(&field, e));
    }
    if let Some(ptr) = &h.value.json {
        if !ptr.is_empty() && !ptr.starts_with('/') {
            return Err(template_error(
                "workload.http.value.json",
                format!("{ptr:?} is not a JSON pointer: give one from `/`, e.g. /kvs/0/value"),
            ));
        }
    }
    Ok(spec)
}

/// Resolves one cell of `suite` in `ctx`.
/// How the fault filesystem takes the node's writes: through the kernel's
/// writeback cache unless a fault must answer the `write()` itself.
fn fault_fs_writes(suite: &Suite) -> crate::faults::disk::Writes {
    if suite.writes_may_be_cached() {
        crate::faults::disk::Writes::Cached
    } else {
        crate::faults::disk::Writes::Through
    }
}

/// What a Pod cannot do, refused at the suite's line: a live `limit`.
fn refuse_for_pods(suite: &Suite) -> Result<(), PlanError> {
    match live_limit(&suite.phases, "phases") {
        Some(field) => Err(PlanError::Template {
            field,
            error: "a live `limit` cannot change a running Pod's memory limit (in-place resize \
                    is not in core/v1 before Kubernetes 1.33): leave it out, or run the node \
                    on a Docker engine (without --kubeconfig)"
                .into(),
        }),
        None => Ok(()),
    }
}

/// Where a `limit` phase is, `phases[2]` or `phases[1].repeat.phases[0]`.
fn live_limit(phases: &[crate::suite::Phase], at: &str) -> Option<String> {
    use crate::suite::Phase;
    phases.iter().enumerate().find_map(|(i, p)| match p {
        Phase::Limit(_) => Some(format!("{at}[{i}]")),
        Phase::Repeat { phases, .. } => live_limit(phases, &format!("{at}[{i}].repeat.phases")),
        _ => None,
    })
}

/// The container of a cell whose node is an image: named and labelled
/// for `soak cleanup`, the cell's folder mounted, the suite's limits.
fn container_plan(
    suite: &Suite,
    def: &CellDef,
    index: usize,
    ctx: &RunContext,
    dir: &Path,
    image: &str,
) -> ContainerPlan {
    ContainerPlan {
        image: image.to_string(),
        host: ctx.docker_host.clone(),
        name: format!("soak-{}-{index}", ctx.run_id),
        labels: [
            (LABEL_RUN.to_string(), ctx.run_id.clone()),
            (LABEL_CELL.to_string(), def.id.clone()),
            (LABEL_SUITE.to_string(), ctx.suite_name.clone()),
            (
                LABEL_MACHINE.to_string(),
                crate::driver::docker::container::machine(),
            ),
        ]
        .into(),
        mounts: vec![dir.to_path_buf()],
        // soak's own user by default, so that the node's files in the cell
        // folder are soak's to read, verify and remove.
        user: Some(
            suite
                .node
                .user
                .clone()
                .unwrap_or_else(|| format!("{}:{}", nix::unistd::getuid(), nix::unistd::getgid())),
        ),
        memory: suite.limits.memory.map(|s| s.0),
        swap: suite.limits.swap.map(|s| s.0),
        kubernetes: ctx.kubernetes.clone(),
        ports: vec![],
    }
}

/// The node as it first starts (the base version), as a process.
fn node_spec(suite: &Suite, base: &Launch, r: &Renderer, dir: &Path) -> Result<Spec, PlanError> {
    Ok(Spec {
        argv: base.argv.clone(),
        env: base.env.clone(),
        probe: probe(&suite.node.ready, "node.ready", r)?,
        ready_timeout: suite.node.ready.timeout.0,
        stop_signal: suite.node.stop.signal.0,
        grace: suite.node.stop.grace.0,
        log: dir.join("node.log"),
        // A container's user is its plan's.
        user: suite.node.user.clone().filter(|_| base.image.is_none()),
        netns: None,
    })
}

pub fn resolve(
    suite: &Suite,
    def: &CellDef,
    index: usize,
    ctx: &RunContext,
) -> Result<CellPlan, PlanError> {
    let rel_dir = format!("cells/{}", folder(&def.id));
    let dir = ctx.run_dir.join(&rel_dir);
    let data_dir = dir.join("data");
    let mut vars = variables(def, ctx, &dir, &data_dir)?;
    service_variables(suite, ctx, &dir, &mut vars)?;
    let (cell_vars, net) = (vars.clone(), cluster_net(suite, ctx));
    // A cluster's cell-wide fields (the load's target, the metrics) see
    // member 1's variables; each member is rendered with its own.
    if let Some(c) = &suite.cluster {
        vars = member_variables(&vars, c, net, 1, &dir)?;
    }
    let r = Renderer { vars: &vars };
    let (allocator, profile) = profile_plan(suite, ctx, &dir, allocator_plan(suite, def, ctx)?)?;
    let profiled = profile.as_ref().ok().and_then(|p| p.as_ref());
    let env = node_env(suite, &r, allocator.as_ref(), profiled, &ctx.run_id)?;
    let base = Launch {
        argv: r.argv("node.command", &suite.node.command)?,
        env,
        image: (suite.node.image.as_ref())
            .map(|i| r.one("node.image", i))
            .transpose()?,
    };
    let container = base.image.as_ref().map(|image| ContainerPlan {
        ports: NODE_PORTS
            .iter()
            .filter_map(|k| vars.get(*k)?.parse().ok())
            .collect(),
        ..container_plan(suite, def, index, ctx, &dir, image)
    });
    if container.as_ref().is_some_and(|c| c.kubernetes.is_some()) {
        refuse_for_pods(suite)?;
    }
    let node = node_spec(suite, &base, &r, &dir)?;
    let scrape = (suite.node.metrics.as_ref())
        .map(|m| r.url("node.metrics.prometheus", &m.prometheus))
        .transpose()?;
    // The growth analysis leaves out the first check's warm-up (10 s
    // without one), scaled as the phases are.
    let warmup_s = suite
        .checks
        .memory_growth
        .first()
        .map_or(10.0, |g| g.warmup.0.as_secs_f64() * ctx.scale);
    let in_container = container.is_some();
    let cgroup_name = format!("{}{}-{index}", crate::driver::cgroup::PREFIX, ctx.run_id);
    let mut load = load_config(suite, &r, ctx.seed, &dir, &ctx.run_id)?;
    let cluster = cluster_plan(suite, &cell_vars, &node, &dir, net, load.as_ref(), ctx)?;
    let cluster = bind_members(cluster, load.as_mut(), &cgroup_name);
    let checks = match &def.expect {
        Some(e) => suite.checks.overlaid(e),
        None => suite.checks.clone(),
    };
    let w = suite.workload.as_ref();
    Ok(CellPlan {
        id: def.id.clone(),
        params: def.params_map(),
        index,
        rel_dir,
        versions: versions(suite, &base, &r)?,
        container,
        // Every request recorded where a check or a cluster needs it.
        history: load.is_some() && (cluster.is_some() || checks.linearizable.is_some()),
        load,
        cluster,
        scrape,
        node,
        services: service_plans(suite, def, &r, &dir, ctx, &cgroup_name)?,
        allocator,
        profile,
        jvm_every: jvm_every(&suite.memory),
        limits: Limits {
            memory: suite.limits.memory.map(|s| s.0),
            high: suite.limits.high.map(|s| s.0),
            swap: suite.limits.swap.map(|s| s.0),
        },
        needs_cgroup: suite.limits.need_cgroup(),
        cgroup_name,
        interval: ctx.interval.unwrap_or(suite.telemetry.interval.0),
        warmup_s,
        seed: ctx.seed,
        scale: ctx.scale,
        readback_after_restart: w.is_none_or(|w| w.readback_after_restart),
        unsynced_tail_allowed: w
            .is_some_and(|w| w.durability == crate::suite::Durability::UnsyncedTailAllowed),
        proxy: suite.workload.is_some() && suite.uses_network_faults(),
        fault_fs: (suite.uses_disk_faults() && !in_container).then(|| fault_fs_writes(suite)),
        disk_limit: suite.limits.disk.map(|d| d.0),
        checks,
        expect: def.expect.clone(),
        dir,
        data_dir,
        vars,
    })
}
