//! Where soak may make its nodes' memory cgroups, decided as container
//! runtimes and systemd decide it.
//!
//! cgroup v2 has a rule v1 does not: a cgroup other than the root may hand
//! a controller to its children (`cgroup.subtree_control`) only while it
//! holds no process itself ("no internal processes",
//! Documentation/admin-guide/cgroup-v2.rst). soak always runs in a cgroup
//! with a process in it (itself), and on a CI runner under systemd that
//! cgroup is the runner's service, which holds the runner too. So writing
//! `+memory` where soak runs fails with EBUSY everywhere but at the root,
//! which is how soak failed on most of its users' machines (issue 13).
//!
//! What soak does instead, in this order (the first that applies):
//! 1. soak runs in the root cgroup (a VM, a machine booted without systemd):
//!    the rule does not hold there; node cgroups go beneath the root.
//! 2. soak is alone in its cgroup (a delegated `systemd-run --scope`, a
//!    container whose command is soak): soak moves itself into a leaf beneath
//!    it (`soak-<run>-supervisor`), as systemd's delegation documentation
//!    asks of a delegated manager, and hands memory to its node cgroups,
//!    siblings of that leaf. At the end it moves back and tidies up.
//! 3. systemd runs: soak asks it over D-Bus for a transient scope with
//!    `Delegate=yes` holding soak alone (`busctl`, as `systemd-run --scope`
//!    does for a new command), then goes on as in 2. systemd's own tree is
//!    never written outside a delegation.
//!    With `--claim-cgroup` (a CI container job: soak `docker exec`ed
//!    beside the container's init), soak's cgroup being the root of a
//!    cgroup namespace: the other processes go into a leaf `init` first,
//!    as docker-in-docker's entrypoint moves them, and then as in 2.
//! 4. As root without systemd: a subtree `soak-<run>` beneath the nearest
//!    ancestor that can hand memory down (an empty cgroup, or the root).
//! 5. Otherwise: no access, and an error that says which command gives it.
//!
//! soak never moves a process that is not its own unless told to
//! (`--claim-cgroup`, and only in a container). [`plan`] only reads, so
//! `soak doctor` can say what `soak run` would do; [`Placement::apply`]
//! does it, and undoes it when dropped.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{lists, procs_of, write, Cgroup, CgroupError, Hierarchy, Limits, Version, PREFIX};
use crate::driver::{which, writable};

/// The name ending of the leaf soak moves itself into (strategy 2).
pub const SUPERVISOR_SUFFIX: &str = "-supervisor";

/// The leaf a claimed namespace's other processes go into: the name
/// docker-in-docker's entrypoint gives it, so that either finds the
/// other's. Not soak's: `soak cleanup` never removes it.
pub const CLAIMED_LEAF: &str = "init";

/// How soak got a place for its node cgroups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum How {
    /// cgroup v1: beneath soak's own cgroup (v1 has no such rule).
    V1,
    /// v2: soak runs in the root cgroup.
    Root,
    /// v2: soak is alone in its cgroup; it moves into `leaf` beneath it.
    Own { leaf: PathBuf },
    /// v2, `--claim-cgroup`, soak's cgroup the root of a cgroup namespace
    /// with other processes in it: they move into `others`, soak into
    /// `leaf`.
    Claim { leaf: PathBuf, others: PathBuf },
    /// v2 under systemd: a transient scope with `Delegate=yes` for soak
    /// alone, asked of the system manager or of the user's (`user`).
    SystemdScope { unit: String, user: bool },
    /// v2, root without systemd: a subtree beneath this ancestor.
    Ancestor { ancestor: PathBuf },
}

/// What `soak run` would do, or does, to get its cgroups.
#[derive(Debug, Clone)]
pub struct Plan {
    pub version: Version,
    pub how: How,
    /// Where node cgroups go (for `SystemdScope`, known only once the
    /// scope exists).
    pub parent: PathBuf,
    /// soak's own cgroup when it started.
    pub own: PathBuf,
}

impl std::fmt::Display for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let name = |p: &Path| {
            p.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        match &self.how {
            How::V1 => write!(f, "cgroup v1: node cgroups beneath soak's own cgroup"),
            How::Root => write!(f, "cgroup v2, soak runs in the root cgroup: node cgroups beneath it"),
            How::Own { leaf } => write!(
                f,
                "cgroup v2, soak is alone in its cgroup: it moves into a leaf `{}` beneath it and makes node cgroups beside that",
                name(leaf)
            ),
            How::Claim { others, .. } => write!(
                f,
                "cgroup v2, soak's cgroup is a container's (the root of a cgroup namespace) and --claim-cgroup was given: its other processes move into a leaf `{}`, soak into one of its own, and node cgroups go beside them",
                name(others)
            ),
            How::SystemdScope { unit, user } => write!(
                f,
                "cgroup v2 under systemd: soak asks the {} manager for a transient scope {unit} with Delegate=yes, moves itself into it and makes node cgroups there",
                if *user { "user's" } else { "system" }
            ),
            How::Ancestor { ancestor } => write!(
                f,
                "cgroup v2, soak's cgroup {} holds other processes: node cgroups in a subtree `{}` beneath the nearest ancestor that can hand memory down, {}",
                self.own.display(),
                name(&self.parent),
                ancestor.display()
            ),
        }
    }
}

/// soak may make no memory cgroup here: what it found, and the fix.
#[derive(Debug, Clone, thiserror::Error)]
#[error("soak may not make a memory cgroup here:\n{}\n{fix}", found.iter().map(|f| format!("  - {f}")).collect::<Vec<_>>().join("\n"))]
pub struct NoAccess {
    pub found: Vec<String>,
    pub fix: String,
}

/// The real root of the hierarchy has no `cgroup.type`; every other cgroup
/// (a cgroup namespace's root too) has one.
fn is_real_root(path: &Path) -> bool {
    !path.join("cgroup.type").exists()
}

/// The processes of a cgroup with their names, for messages.
fn describe_procs(pids: &[i32]) -> String {
    pids.iter()
        .take(5)
        .map(|p| {
            let comm = fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
            format!("{p} ({})", comm.trim())
        })
        .collect::<Vec<_>>()
        .join(", ")
        + if pids.len() > 5 { ", ..." } else { "" }
}

/// Whether systemd is the service manager here (sd_booted(3)'s test).
pub fn systemd_runs() -> bool {
    Path::new("/run/systemd/system").is_dir()
}

/// The command line soak was started with, for a message that says what
/// to run instead.
fn this_command() -> String {
    let args: Vec<String> = std::env::args().collect();
    if args.is_empty() {
        "soak run ...".into()
    } else {
        args.join(" ")
    }
}

/// Decides where node cgroups go, reading only. `me` is soak's pid;
/// `claim`: the user consents to moving the other processes of a
/// container's cgroup (`--claim-cgroup`).
pub fn plan(h: &Hierarchy, run: &str, me: i32, claim: bool) -> Result<Plan, NoAccess> {
    plan_with(h, run, me, claim, true)
}

/// [`plan`], asking systemd or not (when it would not give a scope).
fn plan_with(
    h: &Hierarchy,
    run: &str,
    me: i32,
    claim: bool,
    ask_systemd: bool,
) -> Result<Plan, NoAccess> {
    let own = h.own.clone();
    let done = |how, parent| Plan {
        version: h.version,
        how,
        parent,
        own: own.clone(),
    };
    if h.version == Version::V1 {
        if writable(&own) {
            return Ok(done(How::V1, own.clone()));
        }
        return Err(NoAccess {
            found: vec![format!(
                "{} (soak's own cgroup, v1) is not writable by uid {}",
                own.display(),
                nix::unistd::geteuid()
            )],
            fix: fix_for_no_access(),
        });
    }
    let mut found = vec![];
    let mut fix = fix_for_no_access();
    // 1. The root.
    if is_real_root(&own) {
        if writable(&own) && writable(&own.join("cgroup.subtree_control")) {
            return Ok(done(How::Root, own.clone()));
        }
        found.push(format!(
            "{} (the root cgroup, where soak runs) is not writable by uid {}",
            own.display(),
            nix::unistd::geteuid()
        ));
    } else {
        // 2. Alone in its own cgroup.
        let procs = procs_of(&own);
        let others: Vec<i32> = procs.iter().copied().filter(|p| *p != me).collect();
        let has_memory = lists(&own.join("cgroup.controllers"), "memory");
        let can_write = writable(&own)
            && writable(&own.join("cgroup.subtree_control"))
            && writable(&own.join("cgroup.procs"));
        let leaf = own.join(format!("{PREFIX}{run}{SUPERVISOR_SUFFIX}"));
        if others.is_empty() && has_memory && can_write {
            return Ok(done(How::Own { leaf }, own.clone()));
        }
        let namespace_root = own == h.mount;
        if !others.is_empty() && namespace_root && has_memory && can_write {
            if claim {
                let others = own.join(CLAIMED_LEAF);
                return Ok(done(How::Claim { leaf, others }, own.clone()));
            }
            fix = format!(
                "soak runs in a container beside its other processes (a CI job's step, `docker exec`): `{} --claim-cgroup` (or SOAK_CLAIM_CGROUP=1) moves them into a leaf `{CLAIMED_LEAF}` of the container's cgroup, as docker-in-docker does, and puts soak's node cgroups beside it\n{fix}",
                this_command()
            );
        } else if claim {
            found.push(format!(
                "--claim-cgroup is honoured only where soak's cgroup is the root of a cgroup namespace (a container) that hands it memory and lets it write; {} is not",
                own.display()
            ));
        }
        found.push(why_not_own(&own, &others, has_memory));
    }
    // 3. systemd: a delegated scope of soak's own.
    let root = nix::unistd::geteuid().is_root();
    if ask_systemd && systemd_runs() && which("busctl").is_some() {
        let user = !root;
        return Ok(Plan {
            version: h.version,
            how: How::SystemdScope {
                unit: format!("{PREFIX}{run}.scope"),
                user,
            },
            parent: PathBuf::new(),
            own,
        });
    }
    // 4. The nearest ancestor that can hand memory down.
    if let Some(ancestor) = nearest_ancestor(h, &own, &mut found) {
        let parent = ancestor.join(format!("{PREFIX}{run}"));
        return Ok(done(How::Ancestor { ancestor }, parent));
    }
    if own == h.mount && !is_real_root(&own) {
        found.push(format!(
            "{} is the root of a cgroup namespace (a container): soak cannot reach above it",
            own.display()
        ));
    }
    Err(NoAccess { found, fix })
}

/// The nearest cgroup above `own` (within the mount) that can hand memory
/// to a cgroup of soak's beneath it; why each one on the way cannot goes
/// to `found`.
fn nearest_ancestor(h: &Hierarchy, own: &Path, found: &mut Vec<String>) -> Option<PathBuf> {
    let mut at = own.parent().map(Path::to_path_buf);
    while let Some(a) = at {
        if !a.starts_with(&h.mount) {
            break;
        }
        let real_root = is_real_root(&a);
        let available = real_root || lists(&a.join("cgroup.controllers"), "memory");
        let enabled = lists(&a.join("cgroup.subtree_control"), "memory");
        let empty = real_root || procs_of(&a).is_empty();
        if available
            && writable(&a)
            && (enabled || (empty && writable(&a.join("cgroup.subtree_control"))))
        {
            return Some(a);
        }
        found.push(format!(
            "{}: {}",
            a.display(),
            if !available {
                "not given the memory controller by its parent".to_string()
            } else if !writable(&a) {
                format!("not writable by uid {}", nix::unistd::geteuid())
            } else {
                format!(
                    "holds processes ({}), so it cannot hand memory down",
                    describe_procs(&procs_of(&a))
                )
            }
        ));
        if a == h.mount {
            break;
        }
        at = a.parent().map(Path::to_path_buf);
    }
    None
}

/// Why soak's own cgroup cannot hold its nodes' cgroups.
fn why_not_own(own: &Path, others: &[i32], has_memory: bool) -> String {
    if !others.is_empty() {
        format!(
            "{} (soak's own cgroup) also holds processes that are not soak's: {}; cgroup v2 lets a cgroup that holds processes hand no controller to cgroups beneath it",
            own.display(),
            describe_procs(others)
        )
    } else if !has_memory {
        format!(
            "{} (soak's own cgroup) is not given the memory controller by its parent (`memory` is not in its cgroup.controllers)",
            own.display()
        )
    } else {
        format!(
            "{} (soak's own cgroup) is not writable by uid {} (not delegated)",
            own.display(),
            nix::unistd::geteuid()
        )
    }
}

fn fix_for_no_access() -> String {
    let cmd = this_command();
    let mut fix =
        String::from("Give soak a cgroup of its own with the memory controller delegated, one of:");
    if systemd_runs() {
        fix += &format!("\n  systemd-run --user --scope -p Delegate=yes {cmd}");
    }
    if !nix::unistd::geteuid().is_root() {
        fix += &format!("\n  sudo {cmd}");
    }
    fix += "\n  in a container: soak as the container's command (alone in its cgroup), with a writable /sys/fs/cgroup (docker run --privileged --cgroupns=private ...)";
    fix
}

/// One thing soak changed to get its place, undone in reverse order.
#[derive(Debug)]
enum Undo {
    /// Take `memory` out of this `cgroup.subtree_control` again.
    Disable(PathBuf),
    /// Move soak back into this cgroup.
    MoveBack { pid: i32, to: PathBuf },
    /// Remove this cgroup and the cgroups beneath it, killing what is in
    /// them (the run's subtree of node cgroups).
    RemoveTree(PathBuf),
    /// Remove this cgroup if it is empty, never killing (soak's own leaf:
    /// should soak not have left it, it stays).
    Rmdir(PathBuf),
}

/// The place soak got, and what it changed to get it. Dropping it undoes
/// the changes (after the node cgroups beneath it are gone).
#[derive(Debug)]
pub struct Placement {
    pub plan: Plan,
    undo: Vec<Undo>,
}

fn enable_memory(cgroup: &Path, undo: Option<&mut Vec<Undo>>) -> Result<(), CgroupError> {
    let control = cgroup.join("cgroup.subtree_control");
    if lists(&control, "memory") {
        return Ok(());
    }
    write(&control, "+memory")?;
    if let Some(undo) = undo {
        undo.push(Undo::Disable(cgroup.to_path_buf()));
    }
    Ok(())
}

fn move_into(pid: i32, cgroup: &Path) -> Result<(), CgroupError> {
    write(&cgroup.join("cgroup.procs"), &pid.to_string())
}

/// Moves every process of `own` but soak into `others` (made if missing):
/// again while new ones appear (a CI step forking), for at most 5 s.
///
/// They are not moved back when soak ends: a process the container
/// started meanwhile may be among them, `docker exec` works again once
/// soak has taken memory off the container's cgroup, and
/// docker-in-docker (or the next soak) finds them where it would have
/// put them itself.
fn claim(own: &Path, others: &Path, me: i32) -> Result<(), CgroupError> {
    if !others.is_dir() {
        fs::create_dir(others).map_err(|source| CgroupError::Create {
            path: others.to_path_buf(),
            source,
        })?;
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left: Vec<i32> = procs_of(own).into_iter().filter(|p| *p != me).collect();
        if left.is_empty() {
            return Ok(());
        }
        for pid in left {
            // A process that has exited meanwhile is not an error.
            if let Err(e) = move_into(pid, others) {
                if Path::new(&format!("/proc/{pid}")).exists() && Instant::now() > deadline {
                    return Err(e);
                }
            }
        }
        if Instant::now() > deadline {
            return Err(CgroupError::NoAccess(NoAccess {
                found: vec![format!(
                    "{}: processes kept appearing in it while soak moved them into `{CLAIMED_LEAF}` for 5 s",
                    own.display()
                )],
                fix: fix_for_no_access(),
            }));
        }
    }
}

/// Asks systemd for a transient scope with `Delegate=yes` holding `pid`,
/// and waits until the process is in it; returns the scope's cgroup.
fn systemd_scope(h: &Hierarchy, unit: &str, user: bool, pid: i32) -> Result<PathBuf, CgroupError> {
    let mut cmd = std::process::Command::new("busctl");
    if user {
        cmd.arg("--user");
    }
    cmd.args([
        "call",
        "org.freedesktop.systemd1",
        "/org/freedesktop/systemd1",
        "org.freedesktop.systemd1.Manager",
        "StartTransientUnit",
        "ssa(sv)a(sa(sv))",
        unit,
        "fail",
        "3",
        "PIDs",
        "au",
        "1",
        &pid.to_string(),
        "Delegate",
        "b",
        "true",
        "Description",
        "s",
        "soak run (its nodes' memory cgroups)",
        "0",
    ]);
    let failed = |why: String| {
        CgroupError::NoAccess(NoAccess {
            found: vec![format!(
                "systemd refused a transient scope {unit} with Delegate=yes: {why}"
            )],
            fix: fix_for_no_access(),
        })
    };
    let out = cmd.output().map_err(|e| failed(format!("busctl: {e}")))?;
    if !out.status.success() {
        return Err(failed(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let own = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        if let Some(path) = own
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .filter(|p| p.ends_with(unit))
        {
            return Ok(h.mount.join(path.trim_start_matches('/')));
        }
        if Instant::now() > deadline {
            return Err(failed(
                "soak was not moved into the scope within 10 s".into(),
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Placement {
    /// Does what the plan says. `me` is soak's pid.
    pub fn apply(plan: Plan, h: &Hierarchy, me: i32) -> Result<Placement, CgroupError> {
        let mut p = Placement {
            plan: plan.clone(),
            undo: vec![],
        };
        match &plan.how {
            How::V1 => {}
            How::Root => enable_memory(&plan.own, None)?,
            How::Own { leaf } => p.own_cgroup(&plan.own, leaf, me)?,
            How::Claim { leaf, others } => {
                claim(&plan.own, others, me)?;
                p.own_cgroup(&plan.own, leaf, me)?;
            }
            How::SystemdScope { unit, user } => {
                let parent = nix::unistd::getppid();
                let scope = systemd_scope(h, unit, *user, me)?;
                // Out of its unit, soak would outlive a CI job stopped by
                // stopping the unit (systemd kills the unit's cgroup):
                // its parent's death now stops it as a Ctrl-C does.
                // SAFETY: prctl(2) with integer arguments.
                unsafe {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong);
                }
                if nix::unistd::getppid() != parent {
                    let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGTERM);
                }
                let leaf = scope.join(format!(
                    "{}{SUPERVISOR_SUFFIX}",
                    unit.trim_end_matches(".scope")
                ));
                p.own_cgroup(&scope, &leaf, me)?;
                p.plan.parent = scope;
            }
            How::Ancestor { ancestor } => {
                // Left on: the ancestor is empty or the root, and other
                // runs may rely on it.
                enable_memory(ancestor, None)?;
                fs::create_dir(&plan.parent).map_err(|source| CgroupError::Create {
                    path: plan.parent.clone(),
                    source,
                })?;
                p.undo.push(Undo::RemoveTree(plan.parent.clone()));
                enable_memory(&plan.parent, None)?;
            }
        }
        Ok(p)
    }

    /// Strategy 2: soak moves into `leaf` beneath `own`, then `own` hands
    /// memory to its children.
    fn own_cgroup(&mut self, own: &Path, leaf: &Path, me: i32) -> Result<(), CgroupError> {
        fs::create_dir(leaf).map_err(|source| CgroupError::Create {
            path: leaf.to_path_buf(),
            source,
        })?;
        self.undo.push(Undo::Rmdir(leaf.to_path_buf()));
        move_into(me, leaf)?;
        self.undo.push(Undo::MoveBack {
            pid: me,
            to: own.to_path_buf(),
        });
        enable_memory(own, Some(&mut self.undo))
    }

    /// Where node cgroups go.
    pub fn parent(&self) -> &Path {
        &self.plan.parent
    }

    /// Makes a node's cgroup here.
    pub fn create(&self, name: &str, limits: Limits) -> Result<Cgroup, CgroupError> {
        Cgroup::create_in(&self.plan.parent, self.plan.version, name, limits)
    }

    /// Undoes what [`Placement::apply`] changed. Idempotent.
    pub fn release(&mut self) {
        while let Some(u) = self.undo.pop() {
            let _ = match u {
                Undo::Disable(cg) => write(&cg.join("cgroup.subtree_control"), "-memory"),
                Undo::MoveBack { pid, to } => move_into(pid, &to),
                Undo::RemoveTree(cg) => super::remove_tree(&cg, self.plan.version)
                    .map_err(|source| CgroupError::Create { path: cg, source }),
                Undo::Rmdir(cg) => {
                    fs::remove_dir(&cg).map_err(|source| CgroupError::Create { path: cg, source })
                }
            };
        }
    }
}

impl Drop for Placement {
    fn drop(&mut self) {
        self.release();
    }
}

/// Plans and applies: where this process's node cgroups go.
/// A systemd that refuses the scope (no D-Bus in a container that mounts
/// /run/systemd, a user manager without delegation) is passed over for
/// what soak can do without it; both reasons are said if that fails too.
pub fn place(run: &str, claim: bool) -> Result<Placement, CgroupError> {
    let h = super::detect()?;
    let me = std::process::id() as i32;
    let first = plan(&h, run, me, claim)?;
    let asked_systemd = matches!(first.how, How::SystemdScope { .. });
    match Placement::apply(first, &h, me) {
        Err(CgroupError::NoAccess(refused)) if asked_systemd => {
            match plan_with(&h, run, me, claim, false) {
                Ok(without) => Placement::apply(without, &h, me),
                Err(mut e) => {
                    e.found.extend(refused.found);
                    Err(e.into())
                }
            }
        }
        other => other,
    }
}
