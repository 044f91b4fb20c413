//! `soak doctor`: what soak can do on this host, and what to install or
//! change for the rest. It only reads (the cgroup placement is planned, not
//! applied), so it is safe on a shared CI host.
//!
//! Exit 0 when `soak run suites/smoke.yaml` can run here (a memory cgroup
//! soak may use, the reference node, disk for the report), 3 otherwise.

use std::path::{Path, PathBuf};

use crate::driver::allocator::{self, Kind, Profile};
use crate::driver::cgroup::{self, place, Version};
use crate::driver::which;
use crate::exit;

/// One finding: whether it is there, what it is, and the fix if not.
struct Line {
    ok: bool,
    /// Needed by the smoke suite (else only by some suites).
    needed: bool,
    what: String,
    detail: String,
}

fn line(ok: bool, needed: bool, what: &str, detail: impl Into<String>) -> Line {
    Line {
        ok,
        needed,
        what: what.into(),
        detail: detail.into(),
    }
}

/// The first line a command prints of its version.
fn version_of(argv: &[&str]) -> Option<String> {
    let out = std::process::Command::new(argv[0])
        .args(&argv[1..])
        .stdin(std::process::Stdio::null())
        .output()
        .ok()?;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    text.lines()
        .find(|l| !l.trim().is_empty())
        .map(|l| l.trim().to_string())
}

fn package_version(package: &str) -> Option<String> {
    let out = std::process::Command::new("dpkg-query")
        .args(["-W", "-f=${Version}", package])
        .output()
        .ok()?;
    let v = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !v.is_empty()).then_some(v)
}

fn cgroups(lines: &mut Vec<Line>) {
    let h = match cgroup::detect() {
        Ok(h) => h,
        Err(e) => {
            lines.push(line(false, true, "memory cgroup", e.to_string()));
            return;
        }
    };
    let version = match h.version {
        Version::V1 => "v1",
        Version::V2 => "v2",
    };
    lines.push(line(
        true,
        true,
        "memory cgroup",
        format!(
            "cgroup {version} at {}; soak runs in {}",
            h.mount.display(),
            h.own.display()
        ),
    ));
    let claim = std::env::var("SOAK_CLAIM_CGROUP")
        .is_ok_and(|v| matches!(v.as_str(), "1" | "true" | "yes" | "on"));
    match place::plan(&h, "RUN", std::process::id() as i32, claim) {
        Ok(plan) => lines.push(line(true, true, "node cgroups", plan.to_string())),
        Err(e) => lines.push(line(false, true, "node cgroups", e.to_string())),
    }
    if h.version == Version::V2 {
        let psi =
            h.own.join("memory.pressure").exists() || Path::new("/proc/pressure/memory").exists();
        lines.push(line(
            psi,
            false,
            "memory pressure (PSI)",
            if psi {
                "sampled into samples.csv.gz".to_string()
            } else {
                "this kernel keeps none (CONFIG_PSI, or `psi=1` on the kernel command line)"
                    .to_string()
            },
        ));
    }
}

fn node(lines: &mut Vec<Line>) {
    if let Ok(p) = std::env::var("SOAK_NODE") {
        let ok = Path::new(&p).is_file() || which(&p).is_some();
        lines.push(line(ok, true, "soak-node", format!("$SOAK_NODE = {p}")));
    } else if cfg!(feature = "node") {
        lines.push(line(
            true,
            true,
            "soak-node",
            "built into soak (RocksDB 11.8): `${SOAK_NODE}` starts soak as the reference node",
        ));
    } else {
        let found = std::env::current_exe()
            .ok()
            .and_then(|e| Some(e.parent()?.join(crate::NODE_NAME)))
            .filter(|p| p.is_file())
            .or_else(|| which(crate::NODE_NAME));
        lines.push(line(
            found.is_some(),
            true,
            "soak-node",
            match found {
                Some(p) => p.display().to_string(),
                None => "not built in (soak was built without the `node` feature) and not on the PATH: `cargo build --bins`".into(),
            },
        ));
    }
}

fn allocators(lines: &mut Vec<Line>) {
    let glibc = allocator::library_version(Path::new("/lib/x86_64-linux-gnu/libc.so.6"))
        .unwrap_or_else(|| "the C library's malloc".into());
    lines.push(line(true, false, "allocator glibc", glibc));
    for kind in [Kind::Jemalloc, Kind::Mimalloc, Kind::Tcmalloc] {
        let what = format!("allocator {}", kind.as_str());
        match Profile::named(kind).find_library() {
            Ok(Some(lib)) => {
                let v = allocator::library_version(&lib).unwrap_or_default();
                lines.push(line(true, false, &what, format!("{} ({v})", lib.display())));
            }
            Ok(None) => {}
            Err(e) => lines.push(line(false, false, &what, e)),
        }
    }
}

fn tools(lines: &mut Vec<Line>) {
    let groups: [(&str, &[&str], &str, &str); 4] = [
        (
            "RocksDB tools",
            &["ldb", "sst_dump", "db_bench"],
            "rocksdb-tools",
            "cross-version upgrade suites and exec phases",
        ),
        (
            "Redis",
            &["redis-server", "redis-cli", "redis-benchmark"],
            "redis-server redis-tools",
            "redis-durability and exec phases",
        ),
        (
            "cluster network",
            &["ip", "nft", "iptables"],
            "iproute2 nftables iptables",
            "clusters: the members' namespaces, partitions and slow links",
        ),
        (
            "Python 3",
            &["python3"],
            "python3",
            "the test nodes in tests/nodes",
        ),
    ];
    for (what, names, packages, used_by) in groups {
        let missing: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| which(n).is_none())
            .collect();
        if missing.is_empty() {
            let v = packages
                .split_whitespace()
                .next()
                .and_then(package_version)
                .or_else(|| version_of(&[names[0], "--version"]))
                .unwrap_or_default();
            lines.push(line(
                true,
                false,
                what,
                format!("{} ({v})", names.join(", ")),
            ));
        } else {
            lines.push(line(
                false,
                false,
                what,
                format!(
                    "{} missing (for {used_by}): apt-get install {packages}",
                    missing.join(", ")
                ),
            ));
        }
    }
}

/// The Docker engine `DOCKER_HOST` names, else the local socket: its
/// version, API, kernel and cgroup version, through the driver's own
/// connection.
fn docker(lines: &mut Vec<Line>) {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    match rt.block_on(crate::driver::docker::engine::connect(None)) {
        Ok(e) => {
            let i = &e.info;
            lines.push(line(
                true,
                false,
                "Docker engine",
                format!(
                    "{}: Docker {}, API {}, kernel {}, cgroup v{}",
                    i.host, i.version, i.api, i.kernel, i.cgroup_version
                ),
            ))
        }
        Err(e) => lines.push(line(
            false,
            false,
            "Docker engine",
            format!("{e} (needed for container nodes only)"),
        )),
    }
}

fn disk(lines: &mut Vec<Line>, reports: &Path) {
    // The folder, or the nearest folder above it that exists.
    let mut at = reports.to_path_buf();
    while !at.exists() {
        match at.parent() {
            Some(p) if !p.as_os_str().is_empty() => at = p.to_path_buf(),
            _ => {
                at = PathBuf::from(".");
                break;
            }
        }
    }
    match nix::sys::statvfs::statvfs(&at) {
        Ok(s) => {
            let free = s.blocks_available() * s.fragment_size();
            let ok = free >= 512 << 20;
            lines.push(line(
                ok,
                true,
                "disk",
                format!(
                    "{} free under {}{}",
                    crate::units::Bytes(free),
                    reports.display(),
                    if ok {
                        ""
                    } else {
                        " (a run needs at least 512 MiB; long suites several GiB)"
                    }
                ),
            ));
        }
        Err(e) => lines.push(line(false, true, "disk", format!("{}: {e}", at.display()))),
    }
}

/// The fault filesystem (power cuts, full disks, I/O errors), tried on a
/// scratch mount: what a database on it could not do.
fn fault_filesystem(lines: &mut Vec<Line>) {
    let what = "fault filesystem";
    let scratch = std::env::temp_dir().join(format!("soak-doctor-{}", std::process::id()));
    let caps = crate::faults::disk::capabilities(&scratch);
    let _ = std::fs::remove_dir_all(&scratch);
    match caps {
        Ok(caps) => {
            let missing: Vec<String> = caps
                .iter()
                .filter(|(c, _)| !crate::faults::disk::by_design(c))
                .filter_map(|(c, r)| r.as_ref().err().map(|e| format!("{c}: {e}")))
                .collect();
            let have: Vec<&str> = caps
                .iter()
                .filter(|(_, r)| r.is_ok())
                .map(|(c, _)| *c)
                .collect();
            let detail = if missing.is_empty() {
                format!(
                    "{}; not given anywhere: {}",
                    have.join(", "),
                    crate::faults::disk::not_given()
                )
            } else {
                format!(
                    "{}; not on it: {} (a node that needs these fails on power_cut, disk_full, io_errors, io_delay or limits.disk cells)",
                    have.join(", "),
                    missing.join("; ")
                )
            };
            lines.push(line(missing.is_empty(), false, what, detail));
        }
        Err(e) => lines.push(line(
            false,
            false,
            what,
            format!("{e} (needed for power_cut, disk_full, io_errors, io_delay and limits.disk)"),
        )),
    }
}

/// Runs the checks and prints them; returns the exit code.
pub fn doctor(reports: &Path) -> i32 {
    let uname = nix::sys::utsname::uname().ok();
    println!(
        "soak {} on Linux {} ({}), uid {}",
        env!("CARGO_PKG_VERSION"),
        uname
            .as_ref()
            .map(|u| u.release().to_string_lossy().into_owned())
            .unwrap_or_default(),
        uname
            .as_ref()
            .map(|u| u.machine().to_string_lossy().into_owned())
            .unwrap_or_default(),
        nix::unistd::geteuid()
    );
    let mut lines = vec![];
    cgroups(&mut lines);
    node(&mut lines);
    disk(&mut lines, reports);
    fault_filesystem(&mut lines);
    allocators(&mut lines);
    tools(&mut lines);
    docker(&mut lines);
    for l in &lines {
        let mark = match (l.ok, l.needed) {
            (true, _) => "ok     ",
            (false, true) => "MISSING",
            (false, false) => "missing",
        };
        let mut detail = l.detail.lines();
        println!("{mark} {:<22} {}", l.what, detail.next().unwrap_or(""));
        for more in detail {
            println!("{:<30} {more}", "");
        }
    }
    let blocking: Vec<&str> = lines
        .iter()
        .filter(|l| l.needed && !l.ok)
        .map(|l| l.what.as_str())
        .collect();
    if blocking.is_empty() {
        println!("\nsoak run suites/smoke.yaml can run here.");
        exit::PASS
    } else {
        println!(
            "\nsoak run suites/smoke.yaml cannot run here: {} (see above).",
            blocking.join(", ")
        );
        exit::ENVIRONMENT
    }
}
