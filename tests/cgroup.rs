//! Memory cgroups: v1 against the real kernel (what this machine offers),
//! v2 against a directory tree shaped like cgroupfs.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use soak::driver::cgroup::{self, Cgroup, Hierarchy, Version};

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
    let h = cgroup::detect().expect("a memory cgroup controller (run as root)");
    let name = format!("soak-test-{}", std::process::id());
    let mut cg = Cgroup::create(&h, &name, Some(64 << 20), Some(0)).unwrap();
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

    let cg = Cgroup::create(
        &Hierarchy {
            version: Version::V2,
            own: root.to_path_buf(),
        },
        "soak-abc123-0",
        Some(256 << 20),
        Some(0),
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
    assert_eq!(
        std::fs::read_to_string(cg.path.join("memory.swap.max")).unwrap(),
        "0"
    );
    cg.set_memory_limit(128 << 20).unwrap();
    assert_eq!(cg.memory_limit(), Some(128 << 20));

    // What the kernel would report.
    std::fs::write(cg.path.join("memory.current"), "104857600\n").unwrap();
    std::fs::write(
        cg.path.join("memory.stat"),
        "anon 73400320\nfile 20971520\nkernel 4194304\nshmem 1048576\n",
    )
    .unwrap();
    std::fs::write(
        cg.path.join("memory.events"),
        "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\n",
    )
    .unwrap();
    let m = cg.memory();
    assert_eq!(
        (m.usage, m.anon, m.file, m.kernel, m.shmem),
        (104857600, 73400320, 20971520, 4194304, 1048576)
    );
    assert_eq!(cg.oom_kills(), 2);

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
        "memory.swap.max",
        "memory.current",
        "memory.stat",
        "memory.events",
        "cgroup.kill",
        "cgroup.procs",
    ] {
        std::fs::remove_file(cg.path.join(f)).unwrap();
    }
    std::mem::forget(cg);
    let removed = cgroup::cleanup_in(root, Version::V2, Some("abc123"));
    assert_eq!(removed, vec![root.join("soak-abc123-0")]);
    assert!(root.join("not-soak").exists());
}

#[test]
fn without_write_access_the_error_says_how_to_get_it() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("no-such-parent");
    let err = Cgroup::create_in(&missing, Version::V2, "soak-x-0", Some(1 << 20), None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("run as root") && err.contains("systemd-run --user --scope -p Delegate=yes"),
        "{err}"
    );
}
