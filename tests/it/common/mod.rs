//! Helpers for tests that start the real binaries.
#![allow(dead_code)]

pub mod browser;
pub mod soak;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The tests share one binary and run two at a time. A test that measures
/// memory or throughput under load (the incidents) runs `alone()`: it
/// waits for every other soak run and VM boot to end and holds new ones
/// off while it lasts; those take `beside()`, which lets them run beside
/// each other. A test holding `alone()` runs its own soak runs freely.
static HOUSE: std::sync::RwLock<()> = std::sync::RwLock::new(());

thread_local! {
    static ALONE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

pub struct Alone(#[allow(dead_code)] std::sync::RwLockWriteGuard<'static, ()>);

impl Drop for Alone {
    fn drop(&mut self) {
        ALONE.with(|a| a.set(false));
    }
}

pub fn alone() -> Alone {
    after_the_clusters_build();
    let guard = HOUSE.write().unwrap_or_else(|e| e.into_inner());
    ALONE.with(|a| a.set(true));
    Alone(guard)
}

/// Waits while `scripts/kube build` holds its lock: scripts/test builds
/// the Kubernetes cluster in the background, and a Go build on both cores
/// would be in the figures of a test that measures.
fn after_the_clusters_build() {
    let home = std::env::var_os("SOAK_KUBE_HOME")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(&std::env::var_os("HOME").unwrap_or_default()).join(".cache/soak/kubernetes")
        });
    if let Ok(f) = std::fs::File::open(home.join("build.lock")) {
        // Shared: it waits for the build's exclusive lock only; released
        // when dropped.
        let _ = nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockShared);
    }
}

pub fn beside() -> Option<std::sync::RwLockReadGuard<'static, ()>> {
    if ALONE.with(|a| a.get()) {
        return None;
    }
    Some(HOUSE.read().unwrap_or_else(|e| e.into_inner()))
}

/// Fails with the command that installs a missing Debian tool, instead of
/// skipping the test.
pub fn require_tool(tool: &str, package: &str) {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false);
    assert!(
        found,
        "{tool} is missing: run `apt-get install {package}` (or scripts/deps --tests)"
    );
}

/// Builds a JVM node with its script (Maven Central's jars, javac), or
/// fails with the install command for what is missing.
pub fn build_jvm_node(script: &str) {
    require_tool("javac", "openjdk-17-jdk-headless");
    require_tool("mvn", "maven");
    let built = std::process::Command::new(soak::suite(script))
        .status()
        .unwrap();
    assert!(built.success(), "{script} failed");
}

/// One install at a time into `dir`, across threads and processes: the
/// lock is held until the file returned is dropped.
pub fn install_lock(dir: &Path) -> std::fs::File {
    std::fs::create_dir_all(dir).unwrap();
    let lock = std::fs::File::create(dir.join(".install.lock")).unwrap();
    // SAFETY: flock(2) on a descriptor `lock` owns while it is open.
    let locked = unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) };
    assert_eq!(locked, 0, "flock {}", std::io::Error::last_os_error());
    lock
}

/// An npm package's folder, installed under `target/lint-tools/npm` the
/// first time (`spec` is `name@version`).
#[allow(dead_code)]
pub fn npm_module(spec: &str) -> std::path::PathBuf {
    let npm = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/lint-tools/npm");
    let name = spec.rsplit_once('@').map_or(spec, |(n, _)| n);
    let module = npm.join("node_modules").join(name);
    // One install at a time into the prefix, across threads and test
    // binaries: two at once (both tests of tests/it/charts.rs on a fresh
    // clone) failed with ENOTEMPTY as each rewrote the other's
    // node_modules. The lock is released when the file is dropped.
    let _lock = install_lock(&npm);
    if !module.join("package.json").exists() {
        require_tool("npm", "nodejs");
        let out = std::process::Command::new("npm")
            .args(["install", "--silent", "--no-audit", "--no-fund", "--prefix"])
            .arg(&npm)
            .arg(spec)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "npm install {spec} failed (the npm registry must be reachable; npm's log is in ~/.npm/_logs): {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    module
}

/// A tool from crates.io (`cargo install --locked`), installed under
/// `target/lint-tools/cargo` the first time, one install at a time; its
/// path.
pub fn cargo_tool(name: &str, version: &str, args: &[&str]) -> std::path::PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/lint-tools/cargo");
    let bin = root.join("bin").join(name);
    let _lock = install_lock(&root);
    let installed = Command::new(&bin)
        .arg("--version")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(version));
    if !installed {
        let out = Command::new(env!("CARGO"))
            .args(["install", "--locked", "--quiet", "--root"])
            .arg(&root)
            .arg(format!("{name}@{version}"))
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cargo install {name}@{version} failed (crates.io must be reachable): {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    bin
}

pub fn require_file(path: &str, package: &str) {
    assert!(
        Path::new(path).exists(),
        "{path} is missing: run `apt-get install {package}` (or scripts/deps --tests)"
    );
}

/// A soak-node child process, killed (SIGKILL) when dropped.
pub struct Node {
    pub child: Child,
    pub resp: String,
    pub metrics: Option<String>,
    pub port: u16,
    pub ready_line: String,
    // Held open: a node that writes to a closed pipe would fail.
    _stdout: BufReader<std::process::ChildStdout>,
}

impl Node {
    pub fn start(data_dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Node {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_soak-node"));
        cmd.arg("--data-dir")
            .arg(data_dir)
            .args(["--port", "0", "--metrics-port", "0"])
            .args(extra)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().expect("spawn soak-node");
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        let mut stdout = BufReader::new(stdout);
        stdout.read_line(&mut line).unwrap();
        assert!(
            line.starts_with("soak-node ready:"),
            "soak-node did not get ready; it printed {line:?}, exit {:?}",
            child.try_wait()
        );
        let field = |name: &str| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(name))
                .map(str::to_string)
        };
        let resp = field("resp=").unwrap();
        let metrics = field("metrics=").filter(|m| m != "off");
        let port = resp.rsplit(':').next().unwrap().parse().unwrap();
        Node {
            child,
            resp,
            metrics,
            port,
            ready_line: line.trim().to_string(),
            _stdout: stdout,
        }
    }

    pub fn url(&self) -> String {
        format!("redis://{}/", self.resp)
    }

    pub fn sigkill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// SIGTERM, then the exit status (within 30 s).
    pub fn sigterm(mut self) -> std::process::ExitStatus {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        for _ in 0..300 {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("soak-node did not exit within 30 s of SIGTERM");
    }

    /// GET /metrics over plain HTTP.
    pub fn scrape(&self) -> String {
        let addr = self.metrics.as_ref().expect("metrics endpoint");
        let mut s = TcpStream::connect(addr).unwrap();
        write!(s, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        let (head, body) = body.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        body.to_string()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A Docker engine that answers, and the images of `containers/` built
/// from this build's soak-node (once per test binary; the engine's build
/// cache makes it quick when nothing changed). Fails with what to do.
pub fn require_docker_images() {
    static BUILT: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let info = Command::new("docker").arg("info").output();
        if !info.is_ok_and(|o| o.status.success()) {
            return Err("no Docker engine answers: run scripts/test (it starts one), or `apt-get install docker.io` and `dockerd --iptables=false --bridge=none --storage-driver=vfs &`".into());
        }
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let out = Command::new(root.join("containers/build"))
            .arg(env!("CARGO_BIN_EXE_soak-node"))
            .output()
            .map_err(|e| format!("containers/build: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "containers/build failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(())
    });
    if let Err(e) = built {
        panic!("{e}");
    }
}

/// The test cluster (scripts/kube: a real API server, controller manager,
/// scheduler and kubelet on the Docker engine, built once and cached under
/// ~/.cache/soak/kubernetes), started if it is not running; its
/// kubeconfig's path. The images of `containers/` are built first.
#[allow(dead_code)]
pub fn kube_cluster() -> String {
    require_docker_images();
    static STARTED: std::sync::OnceLock<Result<String, String>> = std::sync::OnceLock::new();
    let started = STARTED.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let out = Command::new(root.join("scripts/kube"))
            .arg("start")
            .output()
            .map_err(|e| format!("scripts/kube: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "scripts/kube start failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        Ok(stdout.lines().last().unwrap_or_default().trim().to_string())
    });
    match started {
        Ok(k) => k.clone(),
        Err(e) => panic!("{e}"),
    }
}

/// The wrapper that runs a command on the test cluster's network
/// (`scripts/kube exec`: its namespace on a current release), where its
/// hostNetwork Pods listen on 127.0.0.1: soak runs there as on the
/// cluster's machine. Its PID is the command's (the script execs it).
#[allow(dead_code)]
pub const KUBE_NET: [&str; 2] = [concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/kube"), "exec"];

/// `kubectl` of the test cluster's build, with its kubeconfig
/// (`scripts/kube kubectl`).
#[allow(dead_code)]
pub fn kubectl(args: &[&str]) -> String {
    kube_cluster();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(root.join("scripts/kube"))
        .arg("kubectl")
        .args(args)
        .output()
        .expect("scripts/kube kubectl");
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
