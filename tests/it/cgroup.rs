//! Memory cgroups: v1 against the real kernel (what this machine offers),
//! v2's files and placement rules against directory trees shaped like
//! cgroupfs. v2 on a real kernel: `tests/it/cgroup_v2_vm.rs`.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use soak::driver::cgroup::place::{self, How, Placement};
use soak::driver::cgroup::{self, Cgroup, Hierarchy, Limits, Version};

/// `sleep 30`, joined to the cgroup between fork and exec.
fn sleeper_in(cg: &Cgroup) -> std::process::Child {
    let fd = cg.procs_fd().unwrap();
    let raw = cgroup::raw(&fd);
    let mut cmd = Command::new("sleep");
    cmd.arg("30");
    // SAFETY: write(2) only, between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::write(raw, b"0".as_ptr().cast(), 1) != 1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().unwrap();
    drop(fd);
    child
}

/// Whichever version the kernel offers (v1 on the development machine).
#[test]
fn the_real_kernel_limits_counts_and_cleans_up() {
    let run = format!("test{}", std::process::id());
    let placement = place::place(&run, false).expect("a memory cgroup controller (run as root)");
    let name = format!("soak-{run}-0");
    let limits = Limits {
        memory: Some(64 << 20),
        high: None,
        swap: Some(0),
    };
    let mut cg = placement.create(&name, limits).unwrap();
    assert_eq!(cg.memory_limit(), Some(64 << 20));
    let mut child = sleeper_in(&cg);
    assert_eq!(cg.procs(), vec![child.id() as i32]);
    assert!(cg.memory().usage > 0);
    assert_eq!(cg.oom_kills(), 0);
    cg.set_memory_limit(48 << 20).unwrap();
    assert_eq!(cg.memory_limit(), Some(48 << 20));
    cg.remove().unwrap();
    assert!(
        child.wait().unwrap().code().is_none(),
        "the process in the cgroup was killed"
    );
    assert!(!cg.path.exists());
    cg.remove().unwrap(); // idempotent
}

fn fake_v2(root: &Path) {
    std::fs::write(
        root.join("cgroup.controllers"),
        "cpuset cpu io memory pids\n",
    )
    .unwrap();
    std::fs::write(root.join("cgroup.subtree_control"), "").unwrap();
    std::fs::write(root.join("cgroup.procs"), "").unwrap();
}

#[test]
fn v2_is_detected_and_driven_through_its_files() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    fake_v2(root);
    let mountinfo = format!(
        "41 31 0:38 / {} rw,relatime - cgroup2 cgroup2 rw\n",
        root.display()
    );
    let h = cgroup::detect_from(&mountinfo, "0::/\n").unwrap();
    assert_eq!(h.version, Version::V2);
    assert_eq!(h.own, root);

    // soak at the root of the (fake) hierarchy: node cgroups beneath it.
    let plan = place::plan(&h, "abc123", std::process::id() as i32, false).unwrap();
    assert_eq!(plan.how, How::Root);
    let placement = Placement::apply(plan, &h, std::process::id() as i32).unwrap();
    let cg = placement
        .create(
            "soak-abc123-0",
            Limits {
                memory: Some(256 << 20),
                high: Some(200 << 20),
                swap: Some(0),
            },
        )
        .unwrap();
    // The parent hands the memory controller down; the limits are v2's files.
    assert_eq!(
        std::fs::read_to_string(root.join("cgroup.subtree_control")).unwrap(),
        "+memory"
    );
    assert_eq!(
        std::fs::read_to_string(cg.path.join("memory.max")).unwrap(),
        (256u64 << 20).to_string()
    );
    // No swap accounting in this kernel (no memory.swap.max): no swap to
    // limit, and nothing written.
    assert!(!cg.path.join("memory.swap.max").exists());
    assert_eq!(cg.high_limit(), Some(200 << 20));
    cg.set_memory_limit(128 << 20).unwrap();
    assert_eq!(cg.memory_limit(), Some(128 << 20));

    // What the kernel would report.
    std::fs::write(cg.path.join("memory.current"), "104857600\n").unwrap();
    std::fs::write(
        cg.path.join("memory.stat"),
        "anon 73400320\nfile 20971520\nkernel 4194304\nshmem 1048576\nsock 8192\n",
    )
    .unwrap();
    std::fs::write(
        cg.path.join("memory.events"),
        "low 0\nhigh 7\nmax 12\noom 3\noom_kill 2\n",
    )
    .unwrap();
    std::fs::write(cg.path.join("memory.peak"), "209715200\n").unwrap();
    std::fs::write(
        cg.path.join("memory.pressure"),
        "some avg10=3.25 avg60=1.00 avg300=0.20 total=5000000\nfull avg10=1.50 avg60=0.50 avg300=0.10 total=2000000\n",
    )
    .unwrap();
    let m = cg.memory();
    assert_eq!(
        (m.usage, m.anon, m.file, m.kernel, m.shmem, m.sock),
        (104857600, 73400320, 20971520, 4194304, 1048576, 8192)
    );
    assert_eq!(cg.oom_kills(), 2);
    let e = cg.events();
    assert_eq!((e.high, e.max, e.oom, e.oom_kill), (7, 12, 3, 2));
    assert_eq!(cg.peak(), Some(209715200));
    let p = cg.pressure().unwrap();
    assert_eq!((p.some_avg10, p.full_avg10), (3.25, 1.5));

    // A real process listed in the fake cgroup is killed by kill_all.
    std::fs::write(cg.path.join("cgroup.kill"), "").unwrap();
    let mut child = Command::new("sleep").arg("30").spawn().unwrap();
    std::fs::write(cg.path.join("cgroup.procs"), format!("{}\n", child.id())).unwrap();
    // Reaped as soak's own watcher thread would, so that it does not linger as a zombie.
    let reaper = std::thread::spawn(move || child.wait().unwrap());
    cg.kill_all();
    assert!(reaper.join().unwrap().code().is_none());
    assert_eq!(
        std::fs::read_to_string(cg.path.join("cgroup.kill")).unwrap(),
        "1"
    );

    // cleanup finds soak's cgroups by their label only.
    std::fs::create_dir(root.join("not-soak")).unwrap();
    for f in [
        "memory.max",
        "memory.current",
        "memory.stat",
        "memory.events",
        "memory.high",
        "memory.peak",
        "memory.pressure",
        "cgroup.kill",
        "cgroup.procs",
    ] {
        std::fs::remove_file(cg.path.join(f)).unwrap();
    }
    std::mem::forget(cg);
    let removed = cgroup::cleanup_in(root, Version::V2, Some("abc123"), &|_| false);
    assert_eq!(removed, vec![root.join("soak-abc123-0")]);
    assert!(root.join("not-soak").exists());
}

#[test]
fn without_write_access_the_error_says_how_to_get_it() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("no-such-parent");
    let limits = Limits {
        memory: Some(1 << 20),
        ..Limits::default()
    };
    let err = Cgroup::create_in(&missing, Version::V2, "soak-x-0", limits)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("run as root") && err.contains("systemd-run --user --scope -p Delegate=yes"),
        "{err}"
    );
}

/// A directory tree shaped like a cgroup v2 hierarchy: `cgroups` are
/// (path below the root, processes in it); every cgroup but the real root
/// has a `cgroup.type`, and each is given the memory controller.
fn fake_tree(root: &Path, real_root: bool, cgroups: &[(&str, &[i32])]) {
    fake_v2(root);
    if !real_root {
        std::fs::write(root.join("cgroup.type"), "domain\n").unwrap();
    }
    for (path, procs) in cgroups {
        let dir = root.join(path);
        std::fs::create_dir_all(&dir).unwrap();
        fake_v2(&dir);
        std::fs::write(dir.join("cgroup.type"), "domain\n").unwrap();
        let list: String = procs.iter().map(|p| format!("{p}\n")).collect();
        std::fs::write(dir.join("cgroup.procs"), list).unwrap();
    }
}

fn hierarchy(mount: &Path, own: &str) -> Hierarchy {
    Hierarchy {
        version: Version::V2,
        mount: mount.to_path_buf(),
        own: mount.join(own),
    }
}

/// A CI job under systemd: soak's cgroup also holds the runner (here pid
/// 1 stands for it). soak may not hand memory down there, nor move the
/// runner; without systemd, as root, it makes a subtree of its own beneath
/// the nearest ancestor that can take it.
#[test]
fn beside_another_process_soak_uses_the_nearest_ancestor_that_can_hand_memory_down() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let me = std::process::id() as i32;
    fake_tree(
        root,
        true,
        &[
            ("system.slice", &[7]),
            ("system.slice/runner.service", &[1, me]),
        ],
    );
    let h = hierarchy(root, "system.slice/runner.service");
    let plan = place::plan(&h, "r1", me, false).unwrap();
    // system.slice holds a process too; the root can take it.
    assert_eq!(
        plan.how,
        How::Ancestor {
            ancestor: root.to_path_buf()
        }
    );
    assert_eq!(plan.parent, root.join("soak-r1"));
    let text = plan.to_string();
    assert!(text.contains("holds other processes"), "{text}");

    let placement = Placement::apply(plan, &h, me).unwrap();
    // (What the kernel lists as `memory`, a plain file holds as written.)
    for cg in ["", "soak-r1/"] {
        let control = root.join(format!("{cg}cgroup.subtree_control"));
        assert_eq!(std::fs::read_to_string(control).unwrap(), "+memory");
    }
    let cg = placement.create("soak-r1-0", Limits::default()).unwrap();
    assert_eq!(cg.path, root.join("soak-r1/soak-r1-0"));
    // The runner's cgroup was not touched.
    assert_eq!(
        std::fs::read_to_string(root.join("system.slice/runner.service/cgroup.procs")).unwrap(),
        format!("1\n{me}\n")
    );
    // As after a SIGKILL of soak: `soak cleanup` removes the run's subtree
    // (the kernel's files go with a cgroup; a plain folder's must go first).
    std::mem::forget(cg);
    std::mem::forget(placement);
    std::fs::remove_file(root.join("soak-r1/cgroup.subtree_control")).unwrap();
    let removed = cgroup::cleanup_in(root, Version::V2, Some("r1"), &|_| false);
    assert_eq!(removed, vec![root.join("soak-r1")]);
    assert!(!root.join("soak-r1").exists());
}

/// `systemd-run --scope -p Delegate=yes soak run ...`, or a container
/// whose command is soak: soak is alone in its cgroup, moves itself into a
/// leaf beneath it, hands memory to its siblings, and moves back at the end.
#[test]
fn alone_in_its_cgroup_soak_moves_into_a_leaf_and_back() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let me = std::process::id() as i32;
    fake_tree(root, true, &[("job.scope", &[me])]);
    let h = hierarchy(root, "job.scope");
    let plan = place::plan(&h, "r2", me, false).unwrap();
    let leaf = root.join("job.scope/soak-r2-supervisor");
    assert_eq!(plan.how, How::Own { leaf: leaf.clone() });
    let mut placement = Placement::apply(plan, &h, me).unwrap();
    assert_eq!(
        std::fs::read_to_string(leaf.join("cgroup.procs")).unwrap(),
        me.to_string()
    );
    assert_eq!(
        std::fs::read_to_string(root.join("job.scope/cgroup.subtree_control")).unwrap(),
        "+memory"
    );
    assert_eq!(placement.parent(), root.join("job.scope"));
    placement.release();
    // Back where it was, and memory handed back.
    assert_eq!(
        std::fs::read_to_string(root.join("job.scope/cgroup.procs")).unwrap(),
        me.to_string()
    );
    assert_eq!(
        std::fs::read_to_string(root.join("job.scope/cgroup.subtree_control")).unwrap(),
        "-memory"
    );
    // A leaf of a live soak is never killed by cleanup, only removed once empty.
    assert!(cgroup::cleanup_in(&root.join("job.scope"), Version::V2, None, &|_| false).is_empty());
}

/// A container that runs soak beside its own init: the namespace's root
/// holds both, and nothing above it can be reached. No access, and the
/// error says why and what to do.
#[test]
fn in_a_container_beside_other_processes_the_error_says_what_to_do() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let me = std::process::id() as i32;
    fake_tree(root, false, &[]);
    std::fs::write(root.join("cgroup.procs"), format!("1\n{me}\n")).unwrap();
    let h = hierarchy(root, "");
    let err = place::plan(&h, "r3", me, false).unwrap_err().to_string();
    assert!(
        err.contains("also holds processes that are not soak's: 1 ("),
        "{err}"
    );
    assert!(err.contains("root of a cgroup namespace"), "{err}");
    assert!(err.contains("soak as the container's command"), "{err}");
}

/// The same container with `--claim-cgroup`: soak plans to move the init
/// into a leaf `init` (as docker-in-docker does) and itself into its own;
/// without the option, the error names it. Outside a container the option
/// changes nothing, and the error says why.
#[test]
fn in_a_container_beside_other_processes_claim_cgroup_is_the_way_out() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let me = std::process::id() as i32;
    fake_tree(root, false, &[]);
    std::fs::write(root.join("cgroup.procs"), format!("1\n{me}\n")).unwrap();
    let h = hierarchy(root, "");
    let err = place::plan(&h, "r4", me, false).unwrap_err().to_string();
    assert!(err.contains("--claim-cgroup"), "{err}");
    assert!(err.contains("SOAK_CLAIM_CGROUP=1"), "{err}");
    let plan = place::plan(&h, "r4", me, true).unwrap();
    assert_eq!(
        plan.how,
        How::Claim {
            leaf: root.join("soak-r4-supervisor"),
            others: root.join("init"),
        }
    );
    assert!(plan.to_string().contains("--claim-cgroup"), "{plan}");

    // A CI job's service (not a namespace's root): not honoured.
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    fake_tree(root, true, &[("runner.service", &[1, me])]);
    let h = hierarchy(root, "runner.service");
    let plan = place::plan(&h, "r5", me, true).unwrap();
    assert!(!matches!(plan.how, How::Claim { .. }), "{plan}");
}
