//! Nodes as containers on a real Docker engine (Debian's docker.io), with
//! the images of `containers/`: every phase, check and report as for a
//! process, the engine's word on OOM kills, an allocator preloaded inside
//! the container, and nothing left behind, not even by a killed soak.

use crate::common;

use std::process::Command;

use common::require_docker_images;
use common::soak::*;
use soak::model::{Cause, Verdict};

#[test]
fn the_smoke_suite_passes_with_its_node_as_a_container() {
    require_docker_images();
    let run = soak_run("suites/smoke-container.yaml", &["--duration-scale", "0.2"]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let c = run.cell();
    assert_eq!(c.verdict, Verdict::Pass);
    assert!(c.integrity.verified > 1000, "{:?}", c.integrity);
    assert_eq!(c.integrity.lost, 0);
    // The kill went through the engine and was read back after the restart.
    let reasons: Vec<Cause> = c.restarts.iter().map(|r| r.reason).collect();
    assert_eq!(reasons, [Cause::Kill, Cause::Stop]);
    assert!(c.restarts[0].readback_s.is_some());
    // Memory from the container's processes (host pids, local engine) and
    // its cgroup, which the engine made; the limit is the engine's.
    let m = &c.memory;
    assert!(m.peak_rss_bytes > 1 << 20, "{m:?}");
    assert!(m.peak_cgroup_bytes > 1 << 20, "{m:?}");
    assert_eq!(m.limit_bytes, Some(256 << 20));
    assert!(m.scrapes.as_ref().is_some_and(|s| s.ok >= 1), "{m:?}");
    // The node's output, from the engine's log stream.
    let log = run.file("node.log");
    assert_eq!(log.matches("soak-node ready").count(), 3, "{log}");
}

#[test]
fn a_container_that_outgrows_its_limit_is_oom_killed_by_the_engines_word() {
    require_docker_images();
    let run = soak_run("tests/suites/oom-redis-container.yaml", &[]);
    assert_eq!(run.code(), 1, "{}", run.stderr());
    let c = run.cell();
    assert!(c.memory.oom_kills >= 1, "{:?}", c.memory);
    assert!(!c.restarts.is_empty());
    assert!(
        c.restarts.iter().all(|r| r.reason == Cause::Oom),
        "{:?}",
        c.restarts
    );
    let check = c.checks.iter().find(|k| k.name == "oom_kills").unwrap();
    assert_eq!(check.verdict, Verdict::Fail);
}

#[test]
fn an_allocator_is_preloaded_inside_the_container_and_proven_from_its_maps() {
    require_docker_images();
    let run = soak_run("tests/suites/container-jemalloc.yaml", &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let c = run.cell();
    let alloc = c.allocator.as_deref().unwrap();
    assert!(alloc.starts_with("jemalloc"), "{alloc}");
    let events = run.file("events.jsonl");
    assert!(events.contains("is loaded in pid"), "{events}");
    // And the node's own word, from inside the container.
    let metrics = run.file("metrics.csv.gz");
    assert!(
        metrics.contains("allocator_info{allocator=\"jemalloc\""),
        "{}",
        &metrics[..metrics.len().min(2000)]
    );
    assert_eq!(c.integrity.lost, 0);
}

#[test]
fn an_image_the_engine_lacks_is_an_environment_error_that_names_it() {
    require_docker_images();
    let dir = tempfile::tempdir().unwrap();
    let suite = dir.path().join("missing.yaml");
    std::fs::write(
        &suite,
        "name: missing\nnode:\n  image: soak-no-such-image:1\n  ready: { tcp: \"127.0.0.1:${PORT}\" }\nphases:\n  - wait: 1s\n",
    )
    .unwrap();
    let run = soak_run(suite.to_str().unwrap(), &[]);
    assert_eq!(run.code(), 3, "{}", run.stderr());
    assert!(
        run.stderr()
            .contains("the image `soak-no-such-image:1` is not on the Docker engine"),
        "{}",
        run.stderr()
    );
}

#[test]
fn an_engine_that_does_not_answer_is_an_environment_error() {
    let run = soak_run(
        "suites/smoke-container.yaml",
        &["--docker-host", "tcp://127.0.0.1:1"],
    );
    assert_eq!(run.code(), 3, "{}", run.stderr());
    let err = run.stderr();
    assert!(
        err.contains("Docker engine tcp://127.0.0.1:1 not reachable") && err.contains("refused"),
        "{err}"
    );
}

/// soak SIGKILLed mid-run leaves its container running; `soak cleanup`
/// removes it (and only because its run is dead).
#[test]
fn soak_cleanup_removes_the_containers_of_a_killed_soak() {
    require_docker_images();
    let dir = tempfile::tempdir().unwrap();
    let mut child = spawn_soak_run(
        "suites/smoke-container.yaml",
        dir.path(),
        std::process::Stdio::null(),
    );
    let id = wait_until_ready(dir.path());
    // Alive: cleanup leaves the run's container alone.
    let out = Command::new(env!("CARGO_BIN_EXE_soak"))
        .arg("cleanup")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(containers_of(&id).len(), 1, "the live run's container went");
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(containers_of(&id).len(), 1, "nothing removed it yet");
    let out = Command::new(env!("CARGO_BIN_EXE_soak"))
        .args(["cleanup", "--run", &id])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("removed container soak-"), "{text}");
    assert!(containers_of(&id).is_empty(), "{text}");
    let procs = labelled(&id);
    assert!(procs.is_empty(), "{procs:?}");
}

/// Ctrl-C twice: the second kills the run's node and removes its container
/// at once (from inside the run's own runtime), and soak leaves with 130.
#[test]
fn a_second_ctrl_c_removes_the_runs_container_and_leaves() {
    use std::io::BufRead;
    require_docker_images();
    let dir = tempfile::tempdir().unwrap();
    let mut child = spawn_soak_run(
        "suites/smoke-container.yaml",
        dir.path(),
        std::process::Stdio::piped(),
    );
    let id = wait_until_ready(dir.path());
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    while !said.contains("soak: interrupted") {
        assert!(stderr.read_line(&mut said).unwrap() > 0, "{said}");
    }
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let status = child.wait().unwrap();
    std::io::Read::read_to_string(&mut stderr, &mut said).unwrap();
    assert_eq!(status.code(), Some(130), "{said}");
    assert!(said.contains("killing this run's nodes"), "{said}");
    assert!(!said.contains("panicked"), "{said}");
    assert!(containers_of(&id).is_empty(), "{said}");
    assert!(labelled(&id).is_empty());
}

/// The Teku story as images: RocksDB 7.8's image writes, soak-node's
/// image (RocksDB 11.8) takes the same data over and reads every write
/// back, and 7.8 refuses what 11.8 wrote, in its own words.
#[test]
fn an_image_upgrade_on_the_same_data_is_verified_and_the_old_image_refuses_it() {
    require_docker_images();
    common::require_tool("redis-cli", "redis-tools");
    let run = soak_run("tests/suites/cross-version-container.yaml", &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let c = run.cell();
    let first = &c.offline[0].inspection;
    assert_eq!(first.rocksdb_version.as_deref(), Some("7.8.3"), "{first:?}");
    assert!(first.compression["Snappy"].files >= 1);
    let ups = &c.upgrades;
    assert_eq!(ups[0].to, "rocksdb-11.8");
    assert_eq!(ups[0].outcome, soak::model::SwapOutcome::Verified);
    let read = ups[0].integrity.unwrap();
    assert_eq!(read.lost, 0);
    assert!(read.verified >= 3000, "{read:?}");
    assert_eq!(ups[1].outcome, soak::model::SwapOutcome::Refused);
    let reason = ups[1].reason.as_deref().unwrap();
    assert!(reason.contains("unsupported format_version"), "{reason}");
    let last = &c.offline[1].inspection;
    assert!(!last.compression.contains_key("Snappy"), "{last:?}");
    assert_eq!(last.integrity.unwrap().lost, 0);
    assert_eq!(c.engine.as_ref().map(|e| e.local), Some(true));
}

/// Debian's redis-server in a container: fsynced AOF loses nothing after a
/// SIGKILL through the engine, snapshots only lose what came after them.
#[test]
fn redis_in_a_container_with_an_aof_loses_nothing_and_with_snapshots_loses_writes() {
    require_docker_images();
    let run = soak_run(
        "suites/redis-durability-container.yaml",
        &["--duration-scale", "0.4"],
    );
    assert_eq!(run.code(), 1, "{}", run.stderr());
    let cells = &run.summary().cells;
    let (aof, snap) = (&cells[0], &cells[1]);
    assert_eq!(aof.id, "durability=aof-always");
    assert_eq!(aof.verdict, Verdict::Pass, "{:?}", aof.integrity);
    assert_eq!(aof.integrity.lost, 0);
    assert!(aof.integrity.verified > 1000);
    assert_eq!(snap.verdict, Verdict::Fail);
    assert!(snap.integrity.lost > 1000, "{:?}", snap.integrity);
}

/// soak SIGKILLed while its node runs as a container: `soak cleanup`
/// removes the container, and `soak verify` makes one again from the
/// image on the cell's data and reads every saved write back.
#[test]
fn a_killed_container_run_is_verified_from_its_saved_ledger_in_a_new_container() {
    require_docker_images();
    let dir = tempfile::tempdir().unwrap();
    let mut child = spawn_soak_run(
        "suites/smoke-container.yaml",
        dir.path(),
        std::process::Stdio::null(),
    );
    // Two ledger saves with writes in them: the load is running.
    let ledger = wait_for_file(dir.path(), "ledger.bin", |_| true);
    let first = std::fs::metadata(&ledger).unwrap().modified().unwrap();
    wait_for_file(dir.path(), "ledger.bin", |p| {
        std::fs::metadata(p).unwrap().modified().unwrap() > first
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let cell = ledger.parent().unwrap().to_path_buf();
    let id = run_id(cell.parent().unwrap().parent().unwrap());
    let cleanup = Command::new(env!("CARGO_BIN_EXE_soak"))
        .args(["cleanup", "--run", &id])
        .output()
        .unwrap();
    assert!(cleanup.status.success());
    assert!(containers_of(&id).is_empty());
    let out = Command::new(env!("CARGO_BIN_EXE_soak"))
        .arg("verify")
        .arg(&cell)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("node started on its data"), "{stderr}");
    let v: soak::verify::saved::Reverified =
        serde_json::from_str(&std::fs::read_to_string(cell.join("verify.json")).unwrap()).unwrap();
    assert!(v.started_node);
    assert_eq!((v.integrity.lost, v.integrity.corrupted), (0, 0), "{v:?}");
    assert!(v.integrity.verified > 100, "{v:?}");
    // The verifying container went with soak verify.
    assert!(containers_of(&id).is_empty());
}

/// A second Docker engine in a network namespace of its own, listening on
/// TCP at its own address, as another machine's engine would; it has the
/// image soak-node:local. Everything it ran goes when it is dropped.
struct RemoteEngine {
    ns: String,
    veth: String,
    dir: tempfile::TempDir,
    exec_root: String,
    /// 10.251.N.2
    addr: String,
    dockerd: Option<std::process::Child>,
    tls: bool,
}

/// An sshd in a [`RemoteEngine`]'s namespace whose sessions reach that
/// engine (`DOCKER_HOST` set for them), and a home for the client with a
/// key it accepts.
struct SshAccess {
    sshd: std::process::Child,
    dir: tempfile::TempDir,
}

impl SshAccess {
    fn start(engine: &RemoteEngine) -> SshAccess {
        common::require_tool("ssh", "openssh-client");
        common::require_file("/usr/sbin/sshd", "openssh-server");
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let home = d.join("home");
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        std::fs::create_dir_all("/run/sshd").unwrap();
        let keygen = |path: &std::path::Path| {
            let ok = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(path)
                .status()
                .unwrap();
            assert!(ok.success());
        };
        keygen(&d.join("host_key"));
        keygen(&home.join(".ssh/id_ed25519"));
        std::fs::copy(home.join(".ssh/id_ed25519.pub"), d.join("authorized_keys")).unwrap();
        std::fs::write(
            d.join("sshd_config"),
            format!(
                "ListenAddress {addr}:22\nHostKey {d}/host_key\nAuthorizedKeysFile {d}/authorized_keys\n\
                 PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n\
                 UsePAM no\nStrictModes no\nPidFile {d}/sshd.pid\nLogLevel VERBOSE\n\
                 SetEnv DOCKER_HOST={engine}\n",
                addr = engine.addr,
                d = d.display(),
                engine = engine.socket(),
            ),
        )
        .unwrap();
        let log = std::fs::File::create(d.join("sshd.log")).unwrap();
        let sshd = Command::new("nsenter")
            .arg(format!("--net=/var/run/netns/{}", engine.ns))
            .args(["/usr/sbin/sshd", "-D", "-e", "-f"])
            .arg(d.join("sshd_config"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let access = SshAccess { sshd, dir };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !access.log().contains("Server listening") {
            assert!(
                std::time::Instant::now() < deadline,
                "sshd did not start: {}",
                access.log()
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        access
    }

    /// The client's home (bound over /root for soak: ssh reads the user's
    /// home from the password database, not from `$HOME`).
    fn home(&self) -> std::path::PathBuf {
        self.dir.path().join("home")
    }

    /// The engine's host key in the client's known hosts, as a user who
    /// has logged in there once has it.
    fn trust(&self, engine: &RemoteEngine) {
        let key = std::fs::read_to_string(self.dir.path().join("host_key.pub")).unwrap();
        std::fs::write(
            self.home().join(".ssh/known_hosts"),
            format!("{} {}", engine.addr, key),
        )
        .unwrap();
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sshd.log")).unwrap_or_default()
    }

    /// The ssh clients to this engine that are running, one per line.
    fn clients(&self, engine: &RemoteEngine) -> String {
        let out = Command::new("pgrep")
            .args([
                "-af",
                &format!("[s]sh .*{} docker system dial-stdio", engine.addr),
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A command that runs soak with this home's ssh keys and known hosts.
    fn wrapper(&self) -> Vec<String> {
        vec![
            "unshare".into(),
            "--mount".into(),
            "sh".into(),
            "-c".into(),
            format!(
                "mount --bind {} /root && exec \"$@\"",
                self.home().display()
            ),
            "sh".into(),
        ]
    }
}

impl Drop for SshAccess {
    fn drop(&mut self) {
        let _ = self.sshd.kill();
        let _ = self.sshd.wait();
    }
}

impl RemoteEngine {
    fn start() -> RemoteEngine {
        RemoteEngine::start_with(false)
    }

    /// Listening on TCP with TLS, clients verified by a CA of the test's
    /// own (certificates in `certs()`, as `DOCKER_CERT_PATH` expects).
    fn start_tls() -> RemoteEngine {
        RemoteEngine::start_with(true)
    }

    fn start_with(tls: bool) -> RemoteEngine {
        common::require_tool("ip", "iproute2");
        common::require_tool("nsenter", "util-linux");
        let n = 1 + rand::random::<u8>() % 250;
        let tag = format!("{:x}", rand::random::<u32>());
        let ns = format!("soakeng{tag}");
        let veth = format!("se{tag}");
        let addr = format!("10.251.{n}.2");
        let sh = |cmd: &str| {
            let ok = Command::new("sh").arg("-c").arg(cmd).status().unwrap();
            assert!(ok.success(), "{cmd}");
        };
        sh(&format!("ip netns add {ns}"));
        let mut engine = RemoteEngine {
            dockerd: None,
            ns: ns.clone(),
            veth: veth.clone(),
            dir: tempfile::tempdir().unwrap(),
            exec_root: format!("/run/se{tag}"),
            addr: addr.clone(),
            tls,
        };
        sh(&format!(
            "ip link add {veth} type veth peer name {veth}n && ip link set {veth}n netns {ns} \
             && ip addr add 10.251.{n}.1/24 dev {veth} && ip link set {veth} up \
             && ip -n {ns} addr add {addr}/24 dev {veth}n && ip -n {ns} link set {veth}n up \
             && ip -n {ns} link set lo up"
        ));
        // nsenter, not `ip netns exec`: that one mounts a sysfs of its own,
        // without the cgroup hierarchies dockerd needs.
        let log = std::fs::File::create(engine.dir.path().join("dockerd.log")).unwrap();
        let mut tls_args = vec![];
        if tls {
            common::require_tool("openssl", "openssl");
            let d = engine.certs();
            std::fs::create_dir_all(&d).unwrap();
            sh(&format!(
                "cd {d} && openssl req -x509 -newkey rsa:2048 -nodes -keyout ca-key.pem -out ca.pem -days 2 -subj /CN=soak-test-ca 2>/dev/null \
                 && openssl req -newkey rsa:2048 -nodes -keyout server-key.pem -out server.csr -subj /CN=engine 2>/dev/null \
                 && printf 'subjectAltName=IP:{addr}\\nextendedKeyUsage=serverAuth\\n' > server.ext \
                 && openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -out server-cert.pem -days 2 -extfile server.ext 2>/dev/null \
                 && openssl req -newkey rsa:2048 -nodes -keyout key.pem -out client.csr -subj /CN=soak 2>/dev/null \
                 && printf 'extendedKeyUsage=clientAuth\\n' > client.ext \
                 && openssl x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -out cert.pem -days 2 -extfile client.ext 2>/dev/null",
                d = d.display()
            ));
            tls_args = vec![
                "--tlsverify".to_string(),
                format!("--tlscacert={}/ca.pem", d.display()),
                format!("--tlscert={}/server-cert.pem", d.display()),
                format!("--tlskey={}/server-key.pem", d.display()),
            ];
        }
        let dockerd = Command::new("nsenter")
            .arg(format!("--net=/var/run/netns/{ns}"))
            .args([
                "dockerd",
                "--iptables=false",
                "--bridge=none",
                "--storage-driver=vfs",
            ])
            .arg(format!("--host={}", engine.host()))
            .arg(format!("--host={}", engine.socket()))
            .args(&tls_args)
            .arg(format!("--data-root={}/data", engine.dir.path().display()))
            .arg(format!("--exec-root={}", engine.exec_root))
            .arg(format!(
                "--pidfile={}/dockerd.pid",
                engine.dir.path().display()
            ))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        engine.dockerd = Some(dockerd);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !engine.docker(&["info"]).status.success() {
            assert!(
                std::time::Instant::now() < deadline,
                "the second dockerd did not start: {}",
                engine.log()
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        // The environment only for the loading side: `docker save` talks
        // to the local engine.
        let env: Vec<String> = engine
            .client_env()
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let load = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "docker save soak-node:local | env {} docker {} -H {} load >/dev/null",
                env.join(" "),
                if tls { "--tlsverify" } else { "" },
                engine.host()
            ))
            .status()
            .unwrap();
        assert!(load.success());
        engine
    }

    fn host(&self) -> String {
        let port = if self.tls { 2376 } else { 2375 };
        format!("tcp://{}:{port}", self.addr)
    }

    /// Its socket, for what runs on its machine (an ssh session).
    fn socket(&self) -> String {
        format!("unix://{}/docker.sock", self.dir.path().display())
    }

    fn certs(&self) -> std::path::PathBuf {
        self.dir.path().join("certs")
    }

    /// What a client (soak, the docker CLI) needs in its environment.
    fn client_env(&self) -> Vec<(String, String)> {
        if self.tls {
            vec![
                ("DOCKER_TLS_VERIFY".into(), "1".into()),
                (
                    "DOCKER_CERT_PATH".into(),
                    self.certs().display().to_string(),
                ),
            ]
        } else {
            vec![]
        }
    }

    fn docker(&self, args: &[&str]) -> std::process::Output {
        let mut cmd = Command::new("docker");
        if self.tls {
            cmd.arg("--tlsverify");
        }
        cmd.arg("-H")
            .arg(self.host())
            .args(args)
            .envs(self.client_env())
            .output()
            .unwrap()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("dockerd.log")).unwrap_or_default()
    }

    /// SIGKILL of the engine (dockerd and its containerd): it stops
    /// answering, as a machine that went away.
    fn kill_engine(&self) {
        let pid = std::fs::read_to_string(self.dir.path().join("dockerd.pid")).unwrap();
        // Its containerd by the pid file dockerd keeps for it, read first:
        // the engine's own stop would not come.
        let containerd = self.containerd_pid();
        let _ = Command::new("kill")
            .args(["-KILL", pid.trim()])
            .args(containerd)
            .status();
    }

    /// The engine's containerd (dockerd starts it and names its pid in
    /// its exec root), while it runs.
    fn containerd_pid(&self) -> Option<String> {
        let f = std::path::Path::new(&self.exec_root).join("containerd/containerd.pid");
        std::fs::read_to_string(f)
            .ok()
            .map(|p| p.trim().to_string())
            .filter(|p| !p.is_empty())
    }

    /// A suite of soak-node on this engine's address.
    fn suite(&self, dir: &std::path::Path, run: &str) -> std::path::PathBuf {
        let path = dir.join("remote.yaml");
        std::fs::write(
            &path,
            format!(
                r#"name: remote
node:
  image: soak-node:local
  command: ["soak-node", "--data-dir", "${{DATA_DIR}}", "--bind", "{a}", "--port", "${{PORT}}",
            "--block-cache", "8MiB"]
  ready: {{ resp: "{a}:${{PORT}}", timeout: 30s }}
limits: {{ memory: 256MiB }}
workload:
  resp: {{ target: "{a}:${{PORT}}" }}
  keys: 2_000
  value_size: 256B
  mix: {{ set: 0.6, get: 0.4 }}
  rate: 500/s
  connections: 2
phases:
  - run: {run}
  - kill: SIGKILL
  - start
  - verify
checks:
  lost_writes: 0
"#,
                a = self.addr
            ),
        )
        .unwrap();
        path
    }
}

impl Drop for RemoteEngine {
    fn drop(&mut self) {
        let containerd = self.containerd_pid();
        if let Some(mut d) = self.dockerd.take() {
            let _ = d.kill();
            let _ = d.wait();
        }
        if let Some(pid) = containerd {
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
        }
        // Everything in the namespace (dockerd, containerd, its shims and
        // containers), then what they mounted, then the namespace.
        let _ = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "ip netns pids {ns} | xargs -r kill -KILL; \
                 sleep 0.5; grep -o ' {d}[^ ]*\\| {er}[^ ]*' /proc/mounts | sort -r | xargs -r -n1 umount -l; \
                 ip link del {v} 2>/dev/null; ip netns del {ns}; rm -rf {er}",
                ns = self.ns,
                er = self.exec_root,
                d = self.dir.path().display(),
                v = self.veth
            ))
            .status();
    }
}

/// Nodes on another machine's engine (a dockerd in a network namespace of
/// its own, reached over TCP): the cell passes, its memory is the engine's
/// stats, and the report says which series a remote engine cannot give.
#[test]
fn a_cell_on_a_remote_engine_passes_with_memory_from_the_engines_stats() {
    require_docker_images();
    let remote = RemoteEngine::start();
    let dir = tempfile::tempdir().unwrap();
    let suite = remote.suite(dir.path(), "3s");
    let run = soak_run(suite.to_str().unwrap(), &["--docker-host", &remote.host()]);
    assert_eq!(run.code(), 0, "{}\n{}", run.stderr(), remote.log());
    let c = run.cell();
    assert_eq!(c.integrity.lost, 0);
    assert!(c.integrity.verified > 100, "{:?}", c.integrity);
    let e = c.engine.as_ref().unwrap();
    assert!(!e.local && e.host == remote.host(), "{e:?}");
    assert_eq!(e.api, "1.41");
    assert!(c.memory.peak_cgroup_bytes > 1 << 20, "{:?}", c.memory);
    assert_eq!(c.memory.peak_rss_bytes, 0);
    let report =
        std::fs::read_to_string(run.report_dir.as_ref().unwrap().join("report.md")).unwrap();
    assert!(report.contains("RSS, PSS and anonymous memory of its processes are missing"));
    // Its containers went with the run, from the remote engine too.
    let left = remote.docker(&[
        "ps",
        "-aq",
        "--filter",
        &format!("label=soak.run={}", run.id),
    ]);
    assert!(
        left.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&left.stdout)
    );
}

/// An engine on another machine reached over ssh, as `docker -H ssh://`
/// reaches it: the user's keys and known hosts, `docker system dial-stdio`
/// there. A host key soak has never seen is refused (exit 3, ssh's own
/// words); once known, the cell passes on that engine, and no ssh is left.
#[test]
fn a_cell_on_an_engine_reached_over_ssh_passes() {
    require_docker_images();
    let remote = RemoteEngine::start();
    let ssh = SshAccess::start(&remote);
    let host = format!("ssh://root@{}", remote.addr);
    let dir = tempfile::tempdir().unwrap();
    let suite = remote.suite(dir.path(), "3s");
    let wrapper = ssh.wrapper();
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();

    let refused = soak_run_in(&wrapper, suite.to_str().unwrap(), &["--docker-host", &host]);
    assert_eq!(refused.code(), 3, "{}", refused.stderr());
    assert!(
        refused.stderr().contains(&host)
            && refused.stderr().contains("Host key verification failed"),
        "{}",
        refused.stderr()
    );
    assert_nothing_left(&refused);

    ssh.trust(&remote);
    let run = soak_run_in(&wrapper, suite.to_str().unwrap(), &["--docker-host", &host]);
    assert_eq!(run.code(), 0, "{}\n{}", run.stderr(), ssh.log());
    let c = run.cell();
    assert_eq!(c.integrity.lost, 0);
    assert!(c.integrity.verified > 100, "{:?}", c.integrity);
    let e = c.engine.as_ref().unwrap();
    assert!(!e.local && e.host == host, "{e:?}");
    assert!(c.memory.peak_cgroup_bytes > 1 << 20, "{:?}", c.memory);
    assert!(
        ssh.log().contains("Accepted publickey for root"),
        "{}",
        ssh.log()
    );
    let left = remote.docker(&[
        "ps",
        "-aq",
        "--filter",
        &format!("label=soak.run={}", run.id),
    ]);
    assert!(
        left.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&left.stdout)
    );
    assert_eq!(ssh.clients(&remote), "");

    // soak SIGKILLed: its ssh children go with it, its container stays
    // until `soak cleanup` (over ssh too) removes it.
    let out = dir.path().join("killed");
    let mut child = Command::new(wrapper[0])
        .args(&wrapper[1..])
        .arg(env!("CARGO_BIN_EXE_soak"))
        .arg("run")
        .arg(&suite)
        .arg("--out")
        .arg(&out)
        .args(["--docker-host", &host])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let id = wait_until_ready(&out);
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !ssh.clients(&remote).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "ssh outlived soak: {}",
            ssh.clients(&remote)
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let on_remote = |id: &str| {
        remote
            .docker(&["ps", "-aq", "--filter", &format!("label=soak.run={id}")])
            .stdout
    };
    assert!(!on_remote(&id).is_empty(), "the container went with soak");
    let cleaned = Command::new(wrapper[0])
        .args(&wrapper[1..])
        .arg(env!("CARGO_BIN_EXE_soak"))
        .args(["cleanup", "--run", &id, "--docker-host", &host])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&cleaned.stdout);
    assert!(text.contains("removed container soak-"), "{text}");
    assert!(on_remote(&id).is_empty(), "{text}");
    assert_eq!(ssh.clients(&remote), "");
}

/// The remote engine goes away in the middle of a run: the cell ends with
/// the environment's exit code, and the report is still written and says
/// what happened.
#[test]
fn an_engine_that_goes_away_mid_run_is_exit_3_with_a_report() {
    require_docker_images();
    let remote = RemoteEngine::start();
    let dir = tempfile::tempdir().unwrap();
    let suite = remote.suite(dir.path(), "60s");
    let out = dir.path().join("out");
    let mut child = Command::new(env!("CARGO_BIN_EXE_soak"))
        .arg("run")
        .arg(&suite)
        .arg("--out")
        .arg(&out)
        .args(["--docker-host", &remote.host()])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let events = wait_for_file(&out, "events.jsonl", |e| {
        std::fs::read_to_string(e)
            .unwrap()
            .contains("\"kind\":\"phase-started\"")
    });
    remote.kill_engine();
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(3), "{stderr}");
    let report_dir = events.parent().unwrap().parent().unwrap().parent().unwrap();
    let summary = load_summary(&report_dir.join("summary.json"));
    let c = &summary.cells[0];
    assert_eq!(c.verdict, Verdict::Error);
    let err = c.error.as_deref().unwrap();
    assert!(err.contains("Docker engine stopped answering"), "{err}");
    let report = std::fs::read_to_string(report_dir.join("report.md")).unwrap();
    assert!(
        report.contains("Docker engine stopped answering"),
        "{report}"
    );
}

/// A container that exits before it is ready: exit 3, with the last lines
/// it printed (from the engine's log stream) in the error.
#[test]
fn a_container_that_exits_before_ready_is_an_environment_error_with_its_output() {
    require_docker_images();
    let dir = tempfile::tempdir().unwrap();
    let suite = dir.path().join("exits.yaml");
    std::fs::write(
        &suite,
        "name: exits\nnode:\n  image: soak-node:local\n  command: [\"soak-node\", \"--no-such-flag\"]\n  ready: { tcp: \"127.0.0.1:${PORT}\", timeout: 30s }\nphases:\n  - wait: 1s\n",
    )
    .unwrap();
    let run = soak_run(suite.to_str().unwrap(), &[]);
    assert_eq!(run.code(), 3, "{}", run.stderr());
    let err = run.stderr();
    assert!(
        err.contains("before it was ready") && err.contains("--no-such-flag"),
        "{err}"
    );
}

/// `pause` freezes the container through the engine, and the stall shows
/// as latency; `limit` lowers its memory limit live, read back from the
/// engine.
#[test]
fn a_container_is_paused_and_its_limit_changed_live_through_the_engine() {
    require_docker_images();
    let run = soak_run("tests/suites/container-pause-limit.yaml", &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let c = run.cell();
    let lat = c.load.as_ref().unwrap().latency_us.clone().unwrap();
    assert!(lat.max >= 900_000, "{lat:?}");
    assert!(c.restarts.is_empty(), "{:?}", c.restarts);
    let limit = c
        .phases
        .iter()
        .find(|p| p.phase.starts_with("limit"))
        .unwrap();
    assert!(
        limit
            .outcome
            .contains(&format!("HostConfig.Memory read back: {}", 192u64 << 20)),
        "{limit:?}"
    );
    assert!(
        limit
            .outcome
            .contains(&format!("the container's cgroup reads {}", 192u64 << 20)),
        "{limit:?}"
    );
}

/// The same over TLS, as a remote engine is exposed in practice
/// (`DOCKER_TLS_VERIFY` and `DOCKER_CERT_PATH`, client certificates).
#[test]
fn a_cell_on_a_remote_engine_over_tls_passes() {
    require_docker_images();
    let remote = RemoteEngine::start_tls();
    let dir = tempfile::tempdir().unwrap();
    let suite = remote.suite(dir.path(), "2s");
    let id = format!("t{:x}", rand::random::<u32>());
    let out = Command::new(env!("CARGO_BIN_EXE_soak"))
        .arg("run")
        .arg(&suite)
        .arg("--out")
        .arg(dir.path())
        .args(["--run-id", &id, "--docker-host", &remote.host()])
        .envs(remote.client_env())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}\n{}", remote.log());
    assert!(stderr.contains("verdict pass"), "{stderr}");
    // Without the certificates the engine refuses soak: exit 3.
    let out = Command::new(env!("CARGO_BIN_EXE_soak"))
        .arg("run")
        .arg(&suite)
        .arg("--out")
        .arg(dir.path())
        .args(["--docker-host", &remote.host()])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let left = remote.docker(&["ps", "-aq", "--filter", &format!("label=soak.run={id}")]);
    assert!(left.stdout.is_empty());
}

/// A service from an image (Debian's redis-server in soak-redis:local)
/// beside a process node: started through the engine before the node,
/// kept through its kill, killed and started again through the engine,
/// its output in services/cache.log, and its containers removed after the
/// run (the harness checks nothing labelled with the run is left).
#[test]
fn a_service_from_an_image_runs_on_the_engine_beside_a_process_node() {
    require_docker_images();
    common::require_tool("redis-cli", "redis-tools");
    let run = soak_run("tests/suites/service-container.yaml", &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let c = run.cell();
    run.service_killed_once_beside_a_kill("cache");
    assert!(c.execs.iter().all(|e| e.code == Some(0)), "{:?}", c.execs);
    let log = run.file("services/cache.log");
    assert_eq!(
        log.matches("Ready to accept connections").count(),
        2,
        "{log}"
    );
}
