//! cgroup v2 on a real kernel: Debian's own, booted under qemu (software
//! emulation) with `cgroup_no_v1=all`, since this host's memory controller
//! may be on v1. soak and its libraries go into an initramfs with busybox;
//! one boot runs every case, and each test below reads its case's lines
//! from the serial console.
//!
//! The cases are how users start soak (issue 13), on a machine with
//! busybox as PID 1: (a) in the root cgroup; (b) in a cgroup that also
//! holds another process, as a CI job in a service is; (c) in a cgroup
//! namespace, as a container whose command is soak, and (c2) one whose init
//! runs beside soak; (d) as a user without delegation. On a Debian machine
//! with systemd as PID 1: (s) from a service, as a CI runner's job. For
//! (a)-(c) and (s): a short suite with a kill, a read-back and a live
//! `limit`; a node that outgrows its limit, OOM-killed and restarted; soak
//! SIGKILLed, then `soak cleanup`, nothing left.
//!
//! `scripts/vm` fetches the kernel and makes the Debian root (debootstrap)
//! into ~/.cache/soak/vm; qemu, busybox and cpio are Debian's packages.

use crate::common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Instant;

use soak::model::{Cause, Summary, Verdict};

fn kernel() -> PathBuf {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache"));
    let k = cache.join("soak/vm/vmlinuz");
    assert!(
        k.is_file(),
        "{} is missing: run scripts/vm (it fetches Debian's kernel for the cgroup v2 tests)",
        k.display()
    );
    k
}

/// The suites the VM runs, small enough for software emulation.
const KILL_SUITE: &str = r#"
name: vm-kill
description: soak-node under memory.max and memory.high; a kill, a read-back, a live limit.
node:
  command: ["${SOAK_NODE}", "--data-dir", "${DATA_DIR}", "--port", "${PORT}",
            "--block-cache", "8MiB", "--write-buffer-size", "4MiB"]
  ready: { resp: "127.0.0.1:${PORT}", timeout: 120s }
limits: { memory: 256MiB, high: 224MiB, swap: 0B }
workload:
  resp: { target: "127.0.0.1:${PORT}" }
  keys: 500
  value_size: 100B
  mix: { set: 0.6, get: 0.4 }
  rate: 100/s
  connections: 2
  timeout: 20s
phases:
  - run: 3s
  - kill: SIGKILL
  - start
  - verify
  - limit: 192MiB
  - run: 2s
  - verify
checks: { lost_writes: 0, corrupted_writes: 0, oom_kills: 0 }
"#;

/// A node that outgrows its limit a second after it starts: busybox `dd`
/// with a 64 MiB buffer under a 32 MiB limit.
const OOM_SUITE: &str = r#"
name: vm-oom
description: a node that outgrows its limit, OOM-killed by the kernel and restarted.
node:
  command: ["sh", "-c", "sleep 1; exec dd if=/dev/zero of=/dev/null bs=64M count=1000000"]
  ready: { exec: ["true"], timeout: 60s }
limits: { memory: 32MiB, swap: 0B }
phases:
  - wait: 6s
"#;

/// The same for a slower place (a container under emulation, where `dd`
/// took more than the 6 s to fill its buffer): the node has 40 s to
/// outgrow its limit.
fn oom_suite_slow() -> String {
    OOM_SUITE
        .replace("name: vm-oom", "name: vm-oom-slow")
        .replace("wait: 6s", "wait: 40s")
}

/// Runs long enough to be killed under.
const LONG_SUITE: &str = r#"
name: vm-long
description: soak-node with a load, for as long as it takes to kill soak.
node:
  command: ["${SOAK_NODE}", "--data-dir", "${DATA_DIR}", "--port", "${PORT}", "--block-cache", "8MiB"]
  ready: { resp: "127.0.0.1:${PORT}", timeout: 120s }
limits: { memory: 256MiB }
workload:
  resp: { target: "127.0.0.1:${PORT}" }
  keys: 200
  value_size: 100B
  mix: { set: 0.5, get: 0.5 }
  rate: 50/s
  connections: 1
phases:
  - run: 30m
"#;

/// soak-node as a container on the systemd machine's engine (systemd's
/// cgroup driver, as on most CI runners): its memory read from the
/// container's v2 cgroup, a kill through the engine, a live limit through
/// its update.
const CONTAINER_SUITE: &str = r#"
name: vm-container
description: soak-node as a container under a limit the engine sets on cgroup v2.
node:
  image: soak-node:local
  command: ["soak-node", "--data-dir", "${DATA_DIR}", "--port", "${PORT}",
            "--block-cache", "8MiB", "--write-buffer-size", "4MiB"]
  ready: { resp: "127.0.0.1:${PORT}", timeout: 180s }
limits: { memory: 256MiB, swap: 0B }
workload:
  resp: { target: "127.0.0.1:${PORT}" }
  keys: 500
  value_size: 100B
  mix: { set: 0.6, get: 0.4 }
  rate: 100/s
  connections: 2
  timeout: 20s
phases:
  - run: 3s
  - kill: SIGKILL
  - start
  - verify
  - limit: 192MiB
  - run: 2s
  - verify
checks: { lost_writes: 0, corrupted_writes: 0, oom_kills: 0 }
"#;

/// A container that outgrows the limit the engine set: the kernel kills
/// it, the engine says `OOMKilled`, soak restarts it.
const CONTAINER_OOM_SUITE: &str = r#"
name: vm-container-oom
description: a container that outgrows its limit on cgroup v2.
node:
  image: soak-node:local
  command: ["busybox", "sh", "-c", "sleep 1; exec busybox dd if=/dev/zero of=/dev/null bs=64M count=1000000"]
  ready: { exec: ["true"], timeout: 180s }
limits: { memory: 32MiB, swap: 0B }
phases:
  - wait: 20s
"#;

/// What both machines' cases share: `SOAKVM KEY CASE TEXT` lines, and
/// `case_run NAME LAUNCHER`: the three suites and a SIGKILL of soak.
const LIB: &str = r#"
# printf, not echo: dash's echo turns the \n of a JSON string into a line break.
say() { printf 'SOAKVM %s\n' "$*"; }
# doctor NAME LAUNCHER: what soak doctor says where that case's soak runs.
doctor() {
  /bin/sh $2 soak doctor --out /tmp > /tmp/doctor-$1.log 2>&1
  say exit doctor-$1 $?
  sed "s|^|SOAKVM log doctor-$1 |" /tmp/doctor-$1.log
}
soak_cgroups() { find /sys/fs/cgroup -name 'soak-*' -type d | tr '\n' ' '; }
soak_procs() { ps -o pid,args | grep -e soak-node -e 'soak run' | grep -v grep | tr '\n' ' '; }
summary() { tr -d '\n' < "$(find "$1" -name summary.json | head -1)" 2>/dev/null; }
case_run() {
  name=$1; launch=$2
  say layout $name "$(/bin/sh $launch cat /proc/self/cgroup | tr '\n' ' ')"
  /bin/sh $launch soak run /suites/vm-kill.yaml --out /tmp/$name/kill > /tmp/$name-kill.log 2>&1
  say exit $name-kill $?
  say summary $name-kill "$(summary /tmp/$name/kill)"
  say left $name-kill "$(soak_cgroups)|$(soak_procs)"
  /bin/sh $launch soak run /suites/vm-oom.yaml --out /tmp/$name/oom > /tmp/$name-oom.log 2>&1
  say exit $name-oom $?
  say summary $name-oom "$(summary /tmp/$name/oom)"
  say left $name-oom "$(soak_cgroups)|$(soak_procs)"
  /bin/sh $launch soak run /suites/vm-long.yaml --out /tmp/$name/long > /tmp/$name-long.log 2>&1 &
  pid=$!
  n=0
  until grep -qs '"kind":"ready"' /tmp/$name/long/vm-long/*/cells/*/events.jsonl; do
    kill -0 $pid || break
    sleep 0.2; n=$((n+1)); [ $n -gt 3000 ] && break
  done
  say during $name-long "$(soak_cgroups)|$(soak_procs)"
  kill -9 $pid; wait $pid
  say killed $name-long $?
  soak cleanup > /tmp/$name-cleanup.log 2>&1
  say exit $name-cleanup $?
  say left $name-long "$(soak_cgroups)|$(soak_procs)"
  for f in /tmp/$name-*.log; do sed "s|^|SOAKVM log $name |" $f; done
}
"#;

/// PID 1 of the busybox machine: sets it up, runs the cases, powers off.
const INIT: &str = r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
mount -t cgroup2 cgroup2 /sys/fs/cgroup
ip link set lo up
export PATH=/bin:/usr/bin HOME=/tmp
. /cases/lib.sh
echo
say kernel x "$(uname -r)"
say controllers x "$(cat /sys/fs/cgroup/cgroup.controllers)"
cd /tmp

# A CI runner's service: its shell (a sleep here) stays in it all along.
mkdir /sys/fs/cgroup/ci
sh -c 'echo $$ > /sys/fs/cgroup/ci/cgroup.procs; exec sleep 100000' &
holder=$!

doctor a /cases/root
doctor b /cases/service
case_run a /cases/root
case_run b /cases/service
case_run c /cases/container

# (c2) A container whose own init runs beside soak.
CT=ct2 /bin/sh /cases/container /bin/sh /cases/beside-init soak run /suites/vm-kill.yaml --out /tmp/c2 > /tmp/c2.log 2>&1
say exit c2 $?
say left c2 "$(soak_cgroups)|$(soak_procs)|$(ls /tmp/c2 2>/dev/null)"
sed "s|^|SOAKVM log c2 |" /tmp/c2.log

# (c3) The same container with --claim-cgroup (here SOAK_CLAIM_CGROUP=1, as
# a CI template sets it): its init moves into a leaf `init`, soak's node
# cgroups go beside it.
case_run c3 /cases/claim
say init c3 "$(wc -l < /sys/fs/cgroup/ct3/init/cgroup.procs) memory:$(grep -c memory /sys/fs/cgroup/ct3/cgroup.subtree_control)"

# (d) A user without delegation.
mkdir /sys/fs/cgroup/user /tmp/d
chmod 777 /tmp/d
doctor d /cases/user
/bin/sh /cases/user soak run /suites/vm-kill.yaml --out /tmp/d/r > /tmp/d.log 2>&1
say exit d $?
say left d "$(soak_cgroups)|$(soak_procs)|$(ls /tmp/d)"
sed "s|^|SOAKVM log d |" /tmp/d.log

kill $holder
say done x ok
poweroff -f
"#;

/// The systemd machine's CI job: a service whose shell (and a sleep) stay
/// in its cgroup while soak runs, as a GitHub or GitLab runner's job does.
const SYSTEMD_JOB: &str = r#"#!/bin/sh
exec > /dev/ttyS0 2>&1
. /cases/lib.sh
echo
say kernel x "$(uname -r)"
say controllers x "$(cat /sys/fs/cgroup/cgroup.controllers)"
say systemd x "$(systemctl --version | head -1)"
cd /tmp
sleep 100000 &
holder=$!
doctor s /cases/root
# The README's suite as it is, as a new user on a cgroup v2 host runs it.
soak run /suites/smoke.yaml > /tmp/smoke.log 2>&1
say exit smoke $?
say summary smoke "$(summary /tmp/reports)"
sed "s|^|SOAKVM log smoke |" /tmp/smoke.log
case_run s /cases/root
# The CI job cancelled while soak runs: systemd stops the job's unit and
# kills its cgroup, where soak no longer is; the shell that started soak
# dies, and soak must stop as at a Ctrl-C (exit 130, a report) and leave
# nothing. (Here the shell is killed by hand.)
sh -c 'soak run /suites/vm-long.yaml --out /tmp/cancel > /tmp/cancel.log 2>&1; echo ended' &
shell=$!
n=0
until grep -qs '"kind":"ready"' /tmp/cancel/vm-long/*/cells/*/events.jsonl; do
  sleep 0.2; n=$((n+1)); [ $n -gt 600 ] && break
done
say during cancel "$(soak_cgroups)|$(soak_procs)"
kill -9 $shell
n=0
while pgrep -f 'soak run /suites/vm-long.yaml' > /dev/null; do
  sleep 0.2; n=$((n+1)); [ $n -gt 300 ] && break
done
say summary cancel "$(summary /tmp/cancel)"
say left cancel "$(soak_cgroups)|$(soak_procs)"
sed "s|^|SOAKVM log cancel |" /tmp/cancel.log
# A user with no systemd user manager to delegate to: systemd refuses the
# scope, soak passes it over, and nothing else is allowed either.
mkdir -p /tmp/su
chmod 777 /tmp/su
setpriv --reuid=1000 --regid=1000 --clear-groups soak run /suites/vm-kill.yaml --out /tmp/su/r > /tmp/su.log 2>&1
say exit su $?
say left su "$(soak_cgroups)|$(soak_procs)|$(ls /tmp/su)"
sed "s|^|SOAKVM log su |" /tmp/su.log
# Container cells on this host's engine (dockerd as the docker.service the
# package installs). The image: soak (answering to soak-node), the
# libraries it links, and a static busybox.
n=0
until docker info > /dev/null 2>&1; do sleep 1; n=$((n+1)); [ $n -gt 300 ] && break; done
say engine x "$(docker info --format '{{.ServerVersion}} {{.CgroupDriver}} cgroup v{{.CgroupVersion}}' 2>&1 | tr '\n' ' ')"
mkdir -p /img/usr/local/bin /img/bin /img/tmp
cp /usr/local/bin/soak /img/usr/local/bin/soak
ln -s soak /img/usr/local/bin/soak-node
cp /usr/local/lib/soak-image/busybox /img/bin/busybox
for a in sh sleep dd true; do ln -s busybox /img/bin/$a; done
for l in $(ldd /usr/local/bin/soak | grep -o '/[^ ]*'); do mkdir -p /img$(dirname $l); cp $l /img$l; done
tar -C /img -c . | docker import - soak-node:local > /tmp/docker-import.log 2>&1
say exit docker-import $?
soak run /suites/vm-container.yaml --out /tmp/dk > /tmp/docker-kill.log 2>&1
say exit docker-kill $?
say summary docker-kill "$(summary /tmp/dk)"
say left docker-kill "$(docker ps -aq | tr '\n' ' ')|$(soak_procs)"
soak run /suites/vm-container-oom.yaml --out /tmp/do > /tmp/docker-oom.log 2>&1
say exit docker-oom $?
say summary docker-oom "$(summary /tmp/do)"
say left docker-oom "$(docker ps -aq | tr '\n' ' ')|$(soak_procs)"
# A CI container job (GitHub's `container:`, GitLab's Docker executor): a
# privileged container with a cgroup namespace of its own, whose init
# (a sleep) stays in its cgroup while each step is `docker exec`ed beside
# it. Without the option: exit 3 naming it; with it, the kill suite.
mkdir -p /tmp/cj
docker run -d --name cj --privileged --cgroupns=private -v /suites:/suites:ro -v /tmp/cj:/out \
  soak-node:local busybox sleep 100000 > /tmp/cj-start.log 2>&1
docker exec cj soak run /suites/vm-kill.yaml --out /out/refused > /tmp/cj-refused.log 2>&1
say exit cj-refused $?
say left cj-refused "$(soak_cgroups)|$(soak_procs)|$(ls /tmp/cj/refused 2>/dev/null)"
docker exec cj soak run /suites/vm-kill.yaml --out /out/exec --claim-cgroup > /tmp/cj-exec.log 2>&1
say exit cj-exec $?
say summary cj-exec "$(summary /tmp/cj/exec)"
say left cj-exec "$(soak_cgroups)|$(soak_procs)"
say init cj-exec "$(docker exec cj busybox cat /sys/fs/cgroup/init/cgroup.procs | tr '\n' ' ')|$(docker exec cj busybox cat /sys/fs/cgroup/cgroup.subtree_control)"
# A later step runs as the first did: `docker exec` still works.
docker exec cj busybox true
say exit cj-later $?
docker rm -f cj > /dev/null 2>&1
# soak as the command of such a container, beside an init of its own.
docker run --rm --privileged --cgroupns=private -v /suites:/suites:ro -v /tmp/cj:/out soak-node:local \
  sh -c 'sleep 100000 & exec soak run /suites/vm-oom-slow.yaml --out /out/run --claim-cgroup' > /tmp/cj-run.log 2>&1
say exit cj-run $?
say summary cj-run "$(summary /tmp/cj/run)"
say left cj-run "$(soak_cgroups)|$(soak_procs)"
for f in /tmp/cj-*.log; do sed "s|^|SOAKVM log cj |" $f; done
for f in /tmp/docker-*.log; do sed "s|^|SOAKVM log docker |" $f; done
journalctl -u docker --no-pager 2>&1 | tail -20 | sed "s|^|SOAKVM log docker |"
kill $holder
say done x ok
echo o > /proc/sysrq-trigger
"#;

const SYSTEMD_UNIT: &str = "[Unit]
Description=soak as a CI runner's job
After=dbus.service
Wants=dbus.service

[Service]
Type=oneshot
ExecStart=/bin/sh /cases/job
";

/// Launchers: each runs its arguments where its case's soak would run.
const CASES: [(&str, &str); 7] = [
    ("root", "exec \"$@\"\n"),
    (
        "service",
        "echo $$ > /sys/fs/cgroup/ci/cgroup.procs\nexec \"$@\"\n",
    ),
    (
        "container",
        // As a container runtime does: a cgroup of its own, then new
        // cgroup and mount namespaces with cgroupfs mounted afresh.
        "d=/sys/fs/cgroup/${CT:-ct}\nmkdir -p $d\necho $$ > $d/cgroup.procs\nexec /usr/bin/unshare --cgroup --mount /bin/sh /cases/in-container \"$@\"\n",
    ),
    (
        "in-container",
        "umount /sys/fs/cgroup\nmount -t cgroup2 cgroup2 /sys/fs/cgroup\nexec \"$@\"\n",
    ),
    // (Its output elsewhere: a `$(...)` around the launcher would wait
    // for the sleep to close it.)
    ("beside-init", "sleep 100000 > /dev/null 2>&1 &\nexec \"$@\"\n"),
    (
        "claim",
        "export SOAK_CLAIM_CGROUP=1 CT=ct3\nexec /bin/sh /cases/container /bin/sh /cases/beside-init \"$@\"\n",
    ),
    (
        "user",
        "echo $$ > /sys/fs/cgroup/user/cgroup.procs\nexec /usr/bin/setpriv --reuid=1000 --regid=1000 --clear-groups \"$@\"\n",
    ),
];

/// Copies `file` to the same path under `root`, with the libraries it
/// needs (from ldd).
fn install(root: &Path, file: &Path, at: &str) {
    let dest = root.join(at.trim_start_matches('/'));
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    std::fs::copy(file, &dest).unwrap_or_else(|e| panic!("copy {}: {e}", file.display()));
    let ldd = Command::new("ldd").arg(file).output().unwrap();
    for l in String::from_utf8_lossy(&ldd.stdout).lines() {
        let path = match l.split_once("=>") {
            Some((_, rhs)) => rhs.split_whitespace().next(),
            None => l.split_whitespace().next(),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            let d = root.join(p.trim_start_matches('/'));
            if !d.exists() {
                std::fs::create_dir_all(d.parent().unwrap()).unwrap();
                std::fs::copy(p, &d).unwrap();
            }
        }
    }
}

/// What the VM printed: `SOAKVM KEY CASE TEXT` lines, and everything.
struct VmRun {
    marks: BTreeMap<(String, String), String>,
    logs: BTreeMap<String, String>,
    console: String,
}

impl VmRun {
    fn get(&self, key: &str, case: &str) -> &str {
        self.marks
            .get(&(key.to_string(), case.to_string()))
            .unwrap_or_else(|| panic!("no `{key} {case}` from the VM:\n{}", self.console))
    }

    fn exit(&self, case: &str) -> i32 {
        self.get("exit", case)
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("exit of {case}: {}", self.get("exit", case)))
    }

    fn summary(&self, case: &str) -> Summary {
        serde_json::from_str(self.get("summary", case))
            .unwrap_or_else(|e| panic!("summary of {case}: {e}\n{}", self.log(case)))
    }

    /// What soak printed in a case (`a-kill` -> case `a`).
    fn log(&self, case: &str) -> &str {
        let case = case.split('-').next().unwrap_or(case);
        self.logs.get(case).map(String::as_str).unwrap_or("")
    }

    /// A run soak refused to start: exit 3, a message that says each of
    /// `says`, and nothing left (no cgroup, no process, no report folder).
    fn refused(&self, case: &str, says: &[&str]) {
        assert_eq!(self.exit(case), 3, "{}", self.log(case));
        let log = self.log(case);
        for s in says {
            assert!(log.contains(s), "no {s:?} in:\n{log}");
        }
        self.left_nothing(case);
        let report = self.get("left", case).split('|').nth(2).unwrap_or("");
        assert!(report.trim().is_empty(), "{case} made a report: {report}");
    }

    /// soak's cgroups and processes left, as `cgroups|processes`.
    fn left_nothing(&self, case: &str) {
        let left = self.get("left", case);
        let parts: Vec<&str> = left.split('|').collect();
        assert!(
            parts.iter().take(2).all(|p| p.trim().is_empty()),
            "{case} left: {left}\n{}",
            self.log(case)
        );
    }
}

/// The two machines: busybox as PID 1 (cases a-d), and Debian with
/// systemd as PID 1, soak run from a service (case s).
#[derive(Clone, Copy, PartialEq)]
enum Machine {
    Busybox,
    Systemd,
}

/// Where `scripts/vm` keeps a Debian root with systemd (debootstrap).
fn systemd_root() -> PathBuf {
    let root = kernel().with_file_name("systemd-root");
    assert!(
        root.join("lib/systemd/systemd").is_file(),
        "{} is missing: run scripts/vm (it makes a Debian root with systemd by debootstrap)",
        root.display()
    );
    root
}

/// A cpio archive (newc, as the kernel reads it) of a folder.
fn cpio(dir: &Path, out: &Path) {
    let st = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "cd {} && find . | cpio -o -H newc --quiet > {}",
            dir.display(),
            out.display()
        ))
        .status()
        .unwrap();
    assert!(st.success(), "cpio of {} failed", dir.display());
}

/// soak, the suites and the case scripts, for either machine.
fn overlay(root: &Path, machine: Machine) {
    for d in ["proc", "sys", "dev", "tmp", "suites", "cases", "usr/bin"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    match machine {
        Machine::Busybox => {
            std::fs::create_dir_all(root.join("bin")).unwrap();
            std::fs::copy("/bin/busybox", root.join("bin/busybox")).unwrap();
            install(root, Path::new(env!("CARGO_BIN_EXE_soak")), "/bin/soak");
            for tool in ["unshare", "setpriv"] {
                install(
                    root,
                    &Path::new("/usr/bin").join(tool),
                    &format!("/usr/bin/{tool}"),
                );
            }
            std::fs::write(root.join("init"), INIT).unwrap();
            Command::new("chmod")
                .arg("755")
                .arg(root.join("init"))
                .status()
                .unwrap();
        }
        Machine::Systemd => {
            // Debian's own libraries are in the root already.
            let soak = root.join("usr/local/bin/soak");
            std::fs::create_dir_all(soak.parent().unwrap()).unwrap();
            std::fs::copy(env!("CARGO_BIN_EXE_soak"), &soak).unwrap();
            std::os::unix::fs::symlink("/lib/systemd/systemd", root.join("init")).unwrap();
            let units = root.join("etc/systemd/system");
            std::fs::create_dir_all(units.join("multi-user.target.wants")).unwrap();
            std::fs::write(units.join("ci-job.service"), SYSTEMD_UNIT).unwrap();
            std::os::unix::fs::symlink(
                "/etc/systemd/system/ci-job.service",
                units.join("multi-user.target.wants/ci-job.service"),
            )
            .unwrap();
            std::fs::write(root.join("cases/job"), SYSTEMD_JOB).unwrap();
            // The engine as a CI runner's: started by systemd, its
            // cgroups made through systemd. No bridge or iptables (no
            // modules in this machine), the vfs driver, and no
            // pivot_root: the machine's root is the initramfs.
            std::fs::create_dir_all(root.join("etc/docker")).unwrap();
            std::fs::write(
                root.join("etc/docker/daemon.json"),
                r#"{"iptables": false, "bridge": "none", "storage-driver": "vfs"}"#,
            )
            .unwrap();
            let dropin = units.join("docker.service.d");
            std::fs::create_dir_all(&dropin).unwrap();
            std::fs::write(
                dropin.join("vm.conf"),
                "[Service]\nEnvironment=DOCKER_RAMDISK=true\n",
            )
            .unwrap();
            let image = root.join("usr/local/lib/soak-image");
            std::fs::create_dir_all(&image).unwrap();
            std::fs::copy("/bin/busybox", image.join("busybox")).unwrap();
        }
    }
    std::fs::write(root.join("cases/lib.sh"), LIB).unwrap();
    for (name, text) in [
        ("vm-kill.yaml", KILL_SUITE),
        ("vm-oom.yaml", OOM_SUITE),
        ("vm-oom-slow.yaml", &oom_suite_slow()),
        ("vm-long.yaml", LONG_SUITE),
        ("vm-container.yaml", CONTAINER_SUITE),
        ("vm-container-oom.yaml", CONTAINER_OOM_SUITE),
    ] {
        std::fs::write(root.join("suites").join(name), text).unwrap();
    }
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("suites/smoke.yaml"),
        root.join("suites/smoke.yaml"),
    )
    .unwrap();
    for (name, text) in CASES {
        std::fs::write(root.join("cases").join(name), text).unwrap();
    }
}

fn boot(machine: Machine) -> VmRun {
    common::require_tool("qemu-system-x86_64", "qemu-system-x86");
    common::require_tool("cpio", "cpio");
    common::require_file("/bin/busybox", "busybox-static");
    let kernel = kernel();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    overlay(&root, machine);
    // A suite soak refuses would only show as a timeout in the VM.
    let check = Command::new(env!("CARGO_BIN_EXE_soak"))
        .arg("validate")
        .args(
            [
                "vm-kill.yaml",
                "vm-oom.yaml",
                "vm-long.yaml",
                "vm-container.yaml",
                "vm-container-oom.yaml",
            ]
            .map(|f| root.join("suites").join(f)),
        )
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let initrd = tmp.path().join("initrd.cpio");
    cpio(&root, &initrd);
    if machine == Machine::Systemd {
        // The kernel unpacks archives one after the other: Debian's root
        // first, soak's files over it.
        let base = tmp.path().join("base.cpio");
        cpio(&systemd_root(), &base);
        let mut both = std::fs::read(&base).unwrap();
        both.extend(std::fs::read(&initrd).unwrap());
        std::fs::write(&initrd, both).unwrap();
    }
    let _beside = common::beside();
    let started = Instant::now();
    // `-cpu max`: soak is built for SSE4.2 and PCLMUL, which qemu's
    // default CPU lacks. KVM aborted on this host: software emulation.
    // The console goes to a file as it comes, to follow a run (`tail -f`)
    // and to read after a failure: target/tmp/cgroup-v2-*.log.
    let name = match machine {
        Machine::Busybox => "busybox",
        Machine::Systemd => "systemd",
    };
    let console_file = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cgroup-v2-{name}.log"));
    let console_out = std::fs::File::create(&console_file).unwrap();
    // The systemd machine's root (with Docker) is unpacked into memory.
    let memory = match machine {
        Machine::Busybox => "2048",
        Machine::Systemd => "3072",
    };
    let status = Command::new("timeout")
        .args(["1200", "qemu-system-x86_64", "-accel", "tcg", "-cpu", "max"])
        .args([
            "-smp",
            "2",
            "-m",
            memory,
            "-nographic",
            "-no-reboot",
            "-kernel",
        ])
        .arg(&kernel)
        .arg("-initrd")
        .arg(&initrd)
        .args([
            "-append",
            "console=ttyS0 cgroup_no_v1=all loglevel=1 panic=-1 systemd.show_status=0",
        ])
        .stdin(Stdio::null())
        .stdout(console_out)
        .status()
        .expect("qemu-system-x86_64");
    let console = std::fs::read_to_string(&console_file)
        .unwrap_or_default()
        .replace('\r', "");
    assert!(
        status.success() || console.contains("SOAKVM done"),
        "qemu: {status} (console: {})",
        console_file.display()
    );
    let mut marks = BTreeMap::new();
    let mut logs: BTreeMap<String, String> = BTreeMap::new();
    for line in console.lines() {
        // The firmware's escape codes may precede the first line.
        let Some(rest) = line.find("SOAKVM ").map(|i| &line[i + "SOAKVM ".len()..]) else {
            continue;
        };
        let mut f = rest.splitn(3, ' ');
        let (key, case, text) = (
            f.next().unwrap_or(""),
            f.next().unwrap_or(""),
            f.next().unwrap_or(""),
        );
        if key == "log" {
            let l = logs.entry(case.to_string()).or_default();
            l.push_str(text);
            l.push('\n');
        } else {
            marks.insert((key.to_string(), case.to_string()), text.to_string());
        }
    }
    let vm = VmRun {
        marks,
        logs,
        console,
    };
    assert_eq!(
        vm.get("done", "x"),
        "ok",
        "the VM did not finish (console: {})",
        console_file.display()
    );
    // What the cases ran with, printed past the test harness's capture.
    let layouts: Vec<String> = vm
        .marks
        .iter()
        .filter(|((k, _), _)| k == "layout")
        .map(|((_, case), text)| format!("{case}: {}", text.trim()))
        .collect();
    let _ = writeln!(
        std::io::stderr(),
        "cgroup v2 VM ({name}{}): Linux {} ({}), controllers: {}, {:.0} s under qemu; soak started in {}",
        vm.marks
            .get(&("systemd".to_string(), "x".to_string()))
            .map(|v| format!(", {v}"))
            .unwrap_or_default(),
        vm.get("kernel", "x"),
        std::fs::read_to_string(kernel.with_file_name("kernel.txt"))
            .unwrap_or_default()
            .trim(),
        vm.get("controllers", "x"),
        started.elapsed().as_secs_f64(),
        layouts.join("; "),
    );
    vm
}

/// One boot of each machine, which every test reads from. A boot that
/// fails fails its tests with its message, and is not tried again by each.
fn booted(cell: &'static OnceLock<Result<VmRun, String>>, machine: Machine) -> &'static VmRun {
    let run = cell.get_or_init(|| {
        std::panic::catch_unwind(|| boot(machine)).map_err(|e| {
            e.downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        })
    });
    match run {
        Ok(vm) => vm,
        Err(e) => panic!("the cgroup v2 VM failed: {e}"),
    }
}

fn vm() -> &'static VmRun {
    static VM: OnceLock<Result<VmRun, String>> = OnceLock::new();
    booted(&VM, Machine::Busybox)
}

fn systemd_vm() -> &'static VmRun {
    static VM: OnceLock<Result<VmRun, String>> = OnceLock::new();
    booted(&VM, Machine::Systemd)
}

/// A case's kill suite passed under memory.max with its live limit; its
/// OOM suite recorded the kernel's kills and restarted the node; soak
/// SIGKILLed and `soak cleanup` left nothing.
fn case_passes(vm: &VmRun, case: &str) {
    let log = vm.log(case);
    // The kill suite.
    assert_eq!(vm.exit(&format!("{case}-kill")), 0, "{log}");
    let s = vm.summary(&format!("{case}-kill"));
    let c = &s.cells[0];
    assert_eq!(c.verdict, Verdict::Pass, "{c:?}");
    assert_eq!(c.integrity.lost, 0);
    assert!(c.integrity.verified > 0, "{c:?}");
    assert_eq!(c.restarts[0].reason, Cause::Kill);
    let cg = c.cgroup.as_ref().unwrap();
    assert_eq!(cg.version, "v2", "{cg:?}");
    assert_eq!(cg.high_bytes, Some(224u64 << 20), "{cg:?}");
    assert!(cg.peak_bytes.unwrap() > 1 << 20, "{cg:?}");
    assert!(cg.pressure_some_avg10_max.is_some(), "{cg:?}");
    let limit = c
        .phases
        .iter()
        .find(|p| p.phase.starts_with("limit"))
        .unwrap();
    assert!(
        limit
            .outcome
            .contains(&format!("memory.max read back: {}", 192u64 << 20)),
        "{limit:?}"
    );
    vm.left_nothing(&format!("{case}-kill"));
    // The OOM suite: the kernel's kills, counted from memory.events.
    let s = vm.summary(&format!("{case}-oom"));
    let c = &s.cells[0];
    assert!(c.memory.oom_kills >= 1, "{c:?}\n{log}");
    assert!(c.cgroup.as_ref().unwrap().oom_kills >= 1, "{c:?}");
    assert_eq!(c.restarts[0].reason, Cause::Oom, "{c:?}");
    // Each restart followed one of the kernel's kills, none was guessed.
    assert!(c.restarts.iter().all(|r| r.reason == Cause::Oom), "{c:?}");
    vm.left_nothing(&format!("{case}-oom"));
    // SIGKILL of soak, then soak cleanup.
    let during = vm.get("during", &format!("{case}-long"));
    assert!(
        during.contains("soak-"),
        "no cgroup while it ran: {during}\n{log}"
    );
    assert_eq!(vm.exit(&format!("{case}-cleanup")), 0, "{log}");
    vm.left_nothing(&format!("{case}-long"));
}

#[test]
fn the_kernel_gives_cgroup_v2_with_the_memory_controller() {
    let vm = vm();
    assert!(
        vm.get("controllers", "x")
            .split_whitespace()
            .any(|c| c == "memory"),
        "{}",
        vm.console
    );
}

/// `soak doctor` where each case's soak runs: what it would do, and
/// whether a suite can run.
#[test]
fn soak_doctor_says_where_soak_would_place_its_cgroups() {
    let vm = vm();
    for (case, code, says) in [
        ("doctor-a", 0, "soak runs in the root cgroup"),
        ("doctor-b", 0, "holds other processes"),
        ("doctor-d", 3, "not writable by uid 1000"),
    ] {
        let log = vm.logs.get(case).cloned().unwrap_or_default();
        assert_eq!(vm.exit(case), code, "{log}");
        assert!(log.contains("cgroup v2 at /sys/fs/cgroup"), "{log}");
        assert!(log.contains(says), "{log}");
    }
    let vm = systemd_vm();
    let log = vm.logs.get("doctor-s").cloned().unwrap_or_default();
    assert_eq!(vm.exit("doctor-s"), 0, "{log}");
    assert!(log.contains("transient scope"), "{log}");
}

/// (a) soak in the root cgroup.
#[test]
fn from_the_root_cgroup() {
    assert_eq!(vm().get("layout", "a").trim(), "0::/");
    case_passes(vm(), "a");
    let s = vm().summary("a-kill");
    let placement = &s.cells[0].cgroup.as_ref().unwrap().placement;
    assert!(placement.contains("root cgroup"), "{placement}");
}

/// (b) soak in a cgroup that also holds another process, as a CI job in a
/// systemd service: node cgroups in a subtree beneath the root.
#[test]
fn from_a_cgroup_that_also_holds_another_process() {
    assert_eq!(vm().get("layout", "b").trim(), "0::/ci");
    case_passes(vm(), "b");
    let s = vm().summary("b-kill");
    let cg = s.cells[0].cgroup.as_ref().unwrap();
    assert!(cg.path.starts_with("/sys/fs/cgroup/soak-"), "{cg:?}");
    assert!(cg.placement.contains("holds other processes"), "{cg:?}");
}

/// (c) soak as a container's command, in a cgroup namespace of its own:
/// it moves into a leaf and hands memory to its node cgroups.
#[test]
fn from_a_cgroup_namespace_as_a_containers_command() {
    assert_eq!(vm().get("layout", "c").trim(), "0::/");
    case_passes(vm(), "c");
    let s = vm().summary("c-kill");
    let placement = &s.cells[0].cgroup.as_ref().unwrap().placement;
    assert!(placement.contains("alone in its cgroup"), "{placement}");
}

/// (c2) A container whose init runs beside soak: soak cannot reach above
/// the namespace and may not move the init: exit 3, nothing left.
#[test]
fn in_a_container_beside_its_init_it_exits_3_and_says_why() {
    vm().refused(
        "c2",
        &["not soak's", "--claim-cgroup", "SOAK_CLAIM_CGROUP=1"],
    );
}

/// (c3) The same container with `--claim-cgroup`: its init moves into a
/// leaf `init` and stays there, soak's node cgroups go beside it, the
/// kill, OOM and cleanup cases pass, and the container's cgroup hands
/// memory down no more once soak is gone (so that `docker exec` works).
#[test]
fn in_a_container_beside_its_init_it_claims_the_cgroup_when_told() {
    case_passes(vm(), "c3");
    let s = vm().summary("c3-kill");
    let placement = &s.cells[0].cgroup.as_ref().unwrap().placement;
    assert!(placement.contains("--claim-cgroup"), "{placement}");
    let init = vm().get("init", "c3");
    let mut parts = init.split_whitespace();
    let moved: usize = parts.next().unwrap().parse().unwrap();
    assert!(moved >= 1, "no process in ct3/init: {init}");
    assert_eq!(parts.next(), Some("memory:0"), "{init}\n{}", vm().log("c3"));
}

/// A CI container job on the systemd machine's engine: `docker exec` of
/// soak beside the container's init refuses (exit 3, naming the option)
/// and passes with `--claim-cgroup`, after which a later step's `docker
/// exec` still works; soak as a container's command beside an init of its
/// own counts the kernel's OOM kills. Nothing is left.
#[test]
fn in_a_ci_container_job_soak_claims_the_containers_cgroup() {
    let vm = systemd_vm();
    let log = vm.log("cj");
    assert_eq!(vm.exit("cj-refused"), 3, "{log}");
    for says in ["--claim-cgroup", "not soak's"] {
        assert!(log.contains(says), "no {says:?} in:\n{log}");
    }
    vm.left_nothing("cj-refused");
    assert_eq!(vm.exit("cj-exec"), 0, "{log}");
    let c = &vm.summary("cj-exec").cells[0];
    assert_eq!(c.verdict, Verdict::Pass, "{c:?}");
    assert!(c.integrity.verified > 0, "{c:?}");
    let cg = c.cgroup.as_ref().unwrap();
    assert!(cg.placement.contains("--claim-cgroup"), "{cg:?}");
    assert_eq!(cg.version, "v2", "{cg:?}");
    vm.left_nothing("cj-exec");
    let init = vm.get("init", "cj-exec");
    let (moved, control) = init.split_once('|').unwrap();
    // The container's init (pid 1 in its namespace) was moved, and
    // memory was taken off the container's cgroup when soak ended.
    assert!(moved.split_whitespace().any(|p| p == "1"), "{init}");
    assert!(!control.contains("memory"), "{init}");
    assert_eq!(vm.exit("cj-later"), 0, "{log}");
    assert_eq!(vm.exit("cj-run"), 0, "{log}");
    let c = &vm.summary("cj-run").cells[0];
    assert!(c.cgroup.as_ref().unwrap().oom_kills >= 1, "{c:?}\n{log}");
    vm.left_nothing("cj-run");
}

/// (d) A user without delegation: exit 3 with the command to run instead.
#[test]
fn as_a_user_without_delegation_it_exits_3_with_the_command_to_run() {
    vm().refused(
        "d",
        &[
            "not writable by uid 1000",
            "sudo soak run /suites/vm-kill.yaml",
        ],
    );
}

/// A user under systemd with no user manager to delegate to: soak asks
/// systemd, is refused, passes it over, and exits 3 naming both and the
/// command that would give it a delegated scope.
#[test]
fn a_user_whom_systemd_refuses_a_scope_exits_3_with_both_reasons() {
    systemd_vm().refused(
        "su",
        &[
            "systemd refused a transient scope",
            "not writable by uid 1000",
            "systemd-run --user --scope -p Delegate=yes soak run /suites/vm-kill.yaml",
        ],
    );
}

/// A CI job cancelled while soak runs in its own scope: the shell that
/// started soak dies, and soak stops as at a Ctrl-C, with a report, and
/// leaves no cgroup and no process.
#[test]
fn a_cancelled_ci_job_stops_soak_outside_its_unit() {
    let vm = systemd_vm();
    let during = vm.get("during", "cancel");
    assert!(
        during.contains(".scope/soak-"),
        "{during}\n{}",
        vm.log("cancel")
    );
    let s = vm.summary("cancel");
    assert_eq!(s.cells[0].error.as_deref(), Some("interrupted"), "{s:?}");
    vm.left_nothing("cancel");
}

/// The README's first suite, unchanged, on the cgroup v2 machine with
/// systemd, from a CI job's service: what a new user on such a host runs.
#[test]
fn the_readme_smoke_suite_passes_on_a_cgroup_v2_host_with_systemd() {
    let vm = systemd_vm();
    assert_eq!(vm.exit("smoke"), 0, "{}", vm.log("smoke"));
    let s = vm.summary("smoke");
    let c = &s.cells[0];
    assert_eq!(c.verdict, Verdict::Pass, "{c:?}");
    assert_eq!(c.integrity.lost, 0, "{c:?}");
    assert!(c.integrity.verified > 1000, "{c:?}");
    assert_eq!(c.cgroup.as_ref().unwrap().version, "v2", "{c:?}");
    assert_eq!(c.restarts.len(), 2, "{c:?}");
}

/// (s) A CI job under systemd: soak started from a service whose cgroup
/// also holds the job's shell. soak asks systemd for a delegated scope of
/// its own over D-Bus and makes its node cgroups there.
#[test]
fn from_a_systemd_service_through_a_delegated_scope() {
    let vm = systemd_vm();
    assert_eq!(
        vm.get("layout", "s").trim(),
        "0::/system.slice/ci-job.service"
    );
    case_passes(vm, "s");
    let s = vm.summary("s-kill");
    let cg = s.cells[0].cgroup.as_ref().unwrap();
    let path = &cg.path;
    assert!(
        path.starts_with("/sys/fs/cgroup/system.slice/soak-") && path.contains(".scope/soak-"),
        "{cg:?}"
    );
    assert!(cg.placement.contains("transient scope"), "{cg:?}");
}

/// Container cells on a cgroup v2 host whose engine makes its cgroups
/// through systemd (as most CI runners' engines do): the node's memory is
/// read from the container's v2 cgroup and its processes, the engine's
/// OOM kill is counted as the kernel's, and no container is left.
#[test]
fn container_cells_on_a_cgroup_v2_host_with_systemds_cgroup_driver() {
    let vm = systemd_vm();
    let log = vm.log("docker");
    let engine = vm.get("engine", "x");
    assert!(engine.contains("systemd cgroup v2"), "{engine}\n{log}");
    assert_eq!(vm.exit("docker-import"), 0, "{log}");
    assert_eq!(vm.exit("docker-kill"), 0, "{log}");
    let s = vm.summary("docker-kill");
    let c = &s.cells[0];
    assert_eq!(c.verdict, Verdict::Pass, "{c:?}");
    assert_eq!(c.integrity.lost, 0);
    assert!(c.integrity.verified > 0, "{c:?}");
    assert_eq!(c.restarts[0].reason, Cause::Kill);
    let e = c.engine.as_ref().unwrap();
    assert!(e.local && e.cgroup_version == "2", "{e:?}");
    assert!(c.memory.peak_cgroup_bytes > 1 << 20, "{:?}", c.memory);
    assert!(c.memory.peak_rss_bytes > 1 << 20, "{:?}", c.memory);
    let limit = c
        .phases
        .iter()
        .find(|p| p.phase.starts_with("limit"))
        .unwrap();
    assert!(
        limit
            .outcome
            .contains(&format!("the container's cgroup reads {}", 192u64 << 20)),
        "{limit:?}"
    );
    vm.left_nothing("docker-kill");
    let s = vm.summary("docker-oom");
    let c = &s.cells[0];
    assert!(c.memory.oom_kills >= 1, "{c:?}\n{log}");
    assert!(!c.restarts.is_empty(), "{c:?}");
    assert!(c.restarts.iter().all(|r| r.reason == Cause::Oom), "{c:?}");
    vm.left_nothing("docker-oom");
}
