//! A cluster's network: a namespace per member and a hub namespace that
//! holds a bridge, joined by veth pairs, all made by the run and named
//! `soak-<run>-<cell>-...` so that `soak cleanup` finds them. Nothing is
//! added to the host's own namespace: no device, no address, no route.
//!
//! soak reaches the members from the hub: its sockets to a member's
//! address are made inside the hub's namespace ([`connect`], [`socket_for`]:
//! a socket belongs to the namespace its thread was in when it was made,
//! and stays there), and the processes it starts for the cell (an
//! adapter, an exec probe or phase) start inside it ([`enter_hub`]).
//! Partitions are nftables rules inside the members' namespaces, so
//! between members only: soak's own traffic to them is never cut (as
//! Jepsen's control node is never partitioned).

use std::fs::File;
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, RwLock};

use super::delay::Delay;

/// The first words of every namespace a run makes.
pub const PREFIX: &str = "soak-";
/// Where named namespaces live (`ip netns`).
const NETNS_DIR: &str = "/run/netns";

/// The hub of the cluster cell that runs now, and its /24: soak's sockets
/// to addresses in it are made in the hub. One cell runs at a time.
static HUB: RwLock<Option<(Arc<File>, [u8; 3])>> = RwLock::new(None);

/// The network of one cluster cell.
pub struct Network {
    hub: String,
    hub_file: Arc<File>,
    /// The first three bytes of the cell's /24.
    net: [u8; 3],
    members: Vec<MemberNet>,
    /// The delayed links in force: each one's sender (whose namespace
    /// has the rule that queues its packets) and the thread that lets
    /// them go.
    delays: Mutex<Vec<(usize, Delay)>>,
}

/// One member's namespace and address.
pub struct MemberNet {
    pub name: String,
    pub addr: Ipv4Addr,
    pub file: Arc<File>,
}

/// A directed link that drops what it carries (`from` -> `to`, 1-based
/// members), or drops a share of it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cut {
    pub from: usize,
    pub to: usize,
    /// 1.0: every packet; less: that share, at random.
    pub loss: f64,
    /// What the link's packets are held for before they go, if anything.
    pub hold: Option<super::delay::Hold>,
}

impl Cut {
    /// The link `a` -> `b` and `b` -> `a`, each losing `loss` of its
    /// packets and holding the rest for `hold`.
    pub fn both_ways(a: usize, b: usize, loss: f64, hold: Option<super::delay::Hold>) -> [Cut; 2] {
        [
            Cut {
                from: a,
                to: b,
                loss,
                hold,
            },
            Cut {
                from: b,
                to: a,
                loss,
                hold,
            },
        ]
    }
}

fn ip(args: &[&str]) -> Result<(), String> {
    ran(
        Command::new("ip").args(args),
        &format!("ip {}", args.join(" ")),
        "a cluster's network needs iproute2 (`apt-get install iproute2`)",
    )
}

/// Runs `c`: Ok if it exits 0, else what it said on stderr, under `what`.
fn ran(c: &mut Command, what: &str, missing: &str) -> Result<(), String> {
    let out = c
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `{what}` ({e}): {missing}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{what}`: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A /24 in 10.77.0.0/16 that no route of soak's own namespace covers, so
/// that soak's redirection of its sockets into the hub cannot take
/// traffic meant for a real network.
pub fn free_net() -> [u8; 3] {
    let routes = std::fs::read_to_string("/proc/net/route").unwrap_or_default();
    let taken: Vec<(u32, u32)> = routes
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let dest = u32::from_str_radix(f.get(1)?, 16).ok()?.swap_bytes();
            let mask = u32::from_str_radix(f.get(7)?, 16).ok()?.swap_bytes();
            (mask != 0).then_some((dest, mask))
        })
        .collect();
    for third in 0..=255u8 {
        let cand = u32::from_be_bytes([10, 77, third, 0]);
        let clash = taken
            .iter()
            .any(|&(d, m)| cand & m == d & m || d & 0xffff_ff00 == cand);
        if !clash {
            return [10, 77, third];
        }
    }
    [10, 77, 0]
}

fn open_ns(name: &str) -> Result<Arc<File>, String> {
    File::open(format!("{NETNS_DIR}/{name}"))
        .map(Arc::new)
        .map_err(|e| format!("cannot open the namespace {name}: {e}"))
}

impl Network {
    /// Makes the hub and `n` members' namespaces for cell `cell` of run
    /// `run`, on the /24 `net` ([`free_net`]); on an error, removes what
    /// it made.
    pub fn create(run: &str, cell: usize, n: usize, net: [u8; 3]) -> Result<Network, String> {
        if n == 0 || n > 200 {
            return Err(format!("a cluster has 1 to 200 members, not {n}"));
        }
        let hub = format!("{PREFIX}{run}-{cell}-hub");
        let names: Vec<String> = (1..=n)
            .map(|i| format!("{PREFIX}{run}-{cell}-m{i}"))
            .collect();
        let made = Made(std::iter::once(&hub).chain(&names).cloned().collect());
        let a = |last: u8| format!("{}.{}.{}.{last}", net[0], net[1], net[2]);
        ip(&["netns", "add", &hub])?;
        ip(&["-n", &hub, "link", "set", "lo", "up"])?;
        ip(&["-n", &hub, "link", "add", "br0", "type", "bridge"])?;
        ip(&[
            "-n",
            &hub,
            "addr",
            "add",
            &format!("{}/24", a(1)),
            "dev",
            "br0",
        ])?;
        ip(&["-n", &hub, "link", "set", "br0", "up"])?;
        let mut members = Vec::with_capacity(n);
        for (i, name) in names.iter().enumerate() {
            let i = i + 1;
            let addr = a(10 + i as u8);
            let veth = format!("m{i}");
            ip(&["netns", "add", name])?;
            ip(&["-n", name, "link", "set", "lo", "up"])?;
            ip(&[
                "-n", &hub, "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns",
                name,
            ])?;
            ip(&["-n", &hub, "link", "set", &veth, "master", "br0", "up"])?;
            ip(&[
                "-n",
                name,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                "eth0",
            ])?;
            ip(&["-n", name, "link", "set", "eth0", "up"])?;
            members.push(MemberNet {
                name: name.clone(),
                addr: addr.parse().expect("an address"),
                file: open_ns(name)?,
            });
        }
        let hub_file = open_ns(&hub)?;
        *HUB.write().unwrap() = Some((hub_file.clone(), net));
        std::mem::forget(made);
        Ok(Network {
            hub,
            hub_file,
            net,
            members,
            delays: Mutex::new(vec![]),
        })
    }

    pub fn members(&self) -> &[MemberNet] {
        &self.members
    }

    /// soak's own address in the hub.
    pub fn hub_addr(&self) -> Ipv4Addr {
        Ipv4Addr::new(self.net[0], self.net[1], self.net[2], 1)
    }

    pub fn hub_file(&self) -> &Arc<File> {
        &self.hub_file
    }

    /// Puts exactly `cuts` in force (every earlier one lifted): each
    /// member's namespace drops what comes to it over a cut link, and
    /// holds what it sends over a delayed one. Returns how many packets
    /// the delays it lifted held.
    pub fn set_cuts(&self, cuts: &[Cut]) -> Result<u64, String> {
        for (i, m) in self.members.iter().enumerate() {
            let mut rules = String::new();
            for c in cuts.iter().filter(|c| c.to == i + 1) {
                let from = self
                    .members
                    .get(c.from - 1)
                    .ok_or_else(|| format!("no member {}", c.from))?;
                if c.loss >= 1.0 {
                    rules.push_str(&format!("    ip saddr {} drop\n", from.addr));
                } else if c.loss > 0.0 {
                    let pct = (c.loss * 100.0).round().clamp(1.0, 99.0) as u32;
                    rules.push_str(&format!(
                        "    ip saddr {} numgen random mod 100 < {pct} drop\n",
                        from.addr
                    ));
                }
            }
            let script = format!(
                "table inet soak {{}}\ndelete table inet soak\ntable inet soak {{\n  chain input {{\n    type filter hook input priority 0; policy accept;\n{rules}  }}\n}}\n"
            );
            nft(&m.name, &script)?;
        }
        self.set_delays(cuts)
    }

    /// Puts exactly the delays of `cuts` in force: a queue per delayed
    /// link, bound by a thread of soak's ([`Delay`]), and a rule in the
    /// sender's namespace that queues what goes to the receiver.
    fn set_delays(&self, cuts: &[Cut]) -> Result<u64, String> {
        let mut delays = self.delays.lock().unwrap();
        let mut senders: Vec<usize> = delays.iter().map(|d| d.0).collect();
        senders.sort_unstable();
        senders.dedup();
        for m in senders {
            iptables(&self.members[m - 1].name, &["-F", "OUTPUT"])?;
        }
        // Those still held go now.
        let lifted = delays
            .drain(..)
            .map(|(_, d)| {
                let held = d.held.clone();
                drop(d);
                held.load(std::sync::atomic::Ordering::Relaxed)
            })
            .sum();
        for c in cuts {
            let Some(hold) = c.hold else { continue };
            let (Some(from), Some(to)) = (self.members.get(c.from - 1), self.members.get(c.to - 1))
            else {
                return Err(format!("no member {} or {}", c.from, c.to));
            };
            let queue = c.to as u16;
            let delay = Delay::start(&from.file, queue, hold).map_err(|e| {
                format!(
                    "cannot delay what member {} sends to member {}: {e}",
                    c.from, c.to
                )
            })?;
            delays.push((c.from, delay));
            iptables(
                &from.name,
                &[
                    "-A",
                    "OUTPUT",
                    "-d",
                    &format!("{}/32", to.addr),
                    "-j",
                    "NFQUEUE",
                    "--queue-num",
                    &queue.to_string(),
                    "--queue-bypass",
                ],
            )?;
        }
        Ok(lifted)
    }

    /// Removes the namespaces (their devices and rules go with them).
    /// Idempotent.
    pub fn teardown(&mut self) {
        let mut hub = HUB.write().unwrap();
        if hub
            .as_ref()
            .is_some_and(|(f, _)| Arc::ptr_eq(f, &self.hub_file))
        {
            *hub = None;
        }
        drop(hub);
        // The threads that hold packets stop before their namespaces go.
        if let Ok(mut d) = self.delays.lock() {
            d.clear();
        }
        for name in std::iter::once(&self.hub).chain(self.members.iter().map(|m| &m.name)) {
            remove(name);
        }
        self.members.clear();
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// Namespaces made so far, removed if `create` fails before it forgets them.
struct Made(Vec<String>);

impl Drop for Made {
    fn drop(&mut self) {
        for n in &self.0 {
            remove(n);
        }
    }
}

/// Runs iptables on the mangle table inside namespace `name` (nftables'
/// own `queue` statement is not in every kernel; iptables' NFQUEUE target
/// is, through nft's compatibility layer).
fn iptables(name: &str, args: &[&str]) -> Result<(), String> {
    ran(
        Command::new("ip")
            .args(["netns", "exec", name, "iptables", "-w", "-t", "mangle"])
            .args(args),
        &format!("iptables -t mangle {}` in `{name}", args.join(" ")),
        "slow links need iptables (`apt-get install iptables`)",
    )
}

/// Runs nft's `script` inside namespace `name`.
fn nft(name: &str, script: &str) -> Result<(), String> {
    let mut child = Command::new("ip")
        .args(["netns", "exec", name, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run `ip netns exec {name} nft`: {e}"))?;
    if let Some(mut i) = child.stdin.take() {
        let _ = i.write_all(script.as_bytes());
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    Err(
        if err.contains("No such file")
            || err.contains("nft: not found")
            || err.contains("exec of \"nft\" failed")
        {
            "partitions need nftables (`apt-get install nftables`)".to_string()
        } else {
            format!("nft in {name}: {}", err.trim())
        },
    )
}

/// Removes namespace `name` (its devices and rules go with it).
pub fn remove(name: &str) -> bool {
    ip(&["netns", "del", name]).is_ok()
}

/// The namespaces soak's runs made, with their run ids.
pub fn leftovers() -> Vec<(String, String)> {
    let Ok(dir) = std::fs::read_dir(NETNS_DIR) else {
        return vec![];
    };
    dir.flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let run = name.strip_prefix(PREFIX)?.split('-').next()?.to_string();
            (!run.is_empty()).then_some((name, run))
        })
        .collect()
}

/// Runs `f` on this thread inside namespace `ns`, then back in soak's own.
fn inside<T>(ns: &File, f: impl FnOnce() -> T) -> std::io::Result<T> {
    let home = File::open("/proc/thread-self/ns/net")?;
    // SAFETY: setns(2) on descriptors this function holds open; it moves
    // only this thread, and the thread is moved back before returning.
    if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let r = f();
    // SAFETY: as above.
    if unsafe { libc::setns(home.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        // A thread left in the hub would make every later socket there.
        panic!(
            "cannot return to soak's own network namespace: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(r)
}

/// The hub to make a socket to `addr` in, if `addr` is a member's.
fn hub_for(addr: &SocketAddr) -> Option<Arc<File>> {
    let SocketAddr::V4(a) = addr else {
        return None;
    };
    let hub = HUB.read().unwrap();
    let (f, net) = hub.as_ref()?;
    (a.ip().octets()[..3] == net[..]).then(|| f.clone())
}

/// A TCP socket to reach `addr`: in the hub when `addr` is a member's,
/// else in soak's own namespace.
pub fn socket_for(addr: &SocketAddr) -> std::io::Result<tokio::net::TcpSocket> {
    let make = || match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
    };
    match hub_for(addr) {
        Some(hub) => inside(&hub, make)?,
        None => make(),
    }
}

/// Connects to `target` (`HOST:PORT`), from the hub for a member's address.
pub async fn connect(target: &str) -> std::io::Result<tokio::net::TcpStream> {
    let mut last = None;
    for addr in tokio::net::lookup_host(target).await? {
        match socket_for(&addr)?.connect(addr).await {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{target} has no address"),
        )
    }))
}

/// Makes `cmd` start inside the hub, while a cluster cell runs, so that
/// a program soak starts for the cell (an adapter, an exec probe or
/// phase) reaches the members as soak does.
pub fn enter_hub(cmd: &mut tokio::process::Command) {
    let Some((hub, _)) = HUB.read().unwrap().clone() else {
        return;
    };
    let fd = hub.as_raw_fd();
    // SAFETY: setns(2) is async-signal-safe; `hub` is kept open by the
    // closure until the command is dropped.
    unsafe {
        cmd.pre_exec(move || {
            let _keep = &hub;
            if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Moves the calling thread into `ns` for good (a thread that only forks
/// a member's process and waits for it).
pub fn enter(ns: &File) -> std::io::Result<()> {
    // SAFETY: setns(2) on a descriptor the caller holds open.
    if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
