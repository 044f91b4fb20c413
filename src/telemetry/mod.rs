//! Samplers: the node's memory, read at a fixed interval and written to the
//! cell's `samples.csv.gz` as each sample is taken (see [`crate::gzcsv`]),
//! so a run that dies keeps what it saw.

pub mod heaptrack;
pub mod jeprof;
pub mod maps;
pub mod nmt;
pub mod prometheus;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::driver::cgroup::Cgroup;

/// One sample. Byte figures are 0 when there was nothing to read.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Sample {
    /// Seconds since the cell started.
    pub t: f64,
    /// Which incarnation of the node (0, then +1 at every start).
    pub segment: u32,
    pub up: bool,
    /// Resident set size of all the node's processes.
    pub rss: u64,
    /// Proportional set size (shared pages split among their users). Read
    /// at most as often as [`PSS_BUDGET`] allows; a sample between reads
    /// carries the last one (`pss_carried`), and `samples.csv.gz` leaves it
    /// empty there.
    pub pss: u64,
    #[serde(skip)]
    pub pss_carried: bool,
    /// Anonymous resident memory (heap, not file-backed).
    pub anon: u64,
    pub cgroup: u64,
    pub cgroup_anon: u64,
    pub cgroup_file: u64,
    /// Bytes the node's data directory takes on disk.
    pub disk: u64,
    /// Kernel memory charged to the cgroup (v1: kmem usage).
    pub cgroup_kernel: u64,
    pub cgroup_shmem: u64,
    /// Socket buffers charged to the cgroup (v2).
    pub cgroup_sock: u64,
    /// Memory pressure (PSI, v2): the share of the last 10 s in which some
    /// (`full`: all) of the node's tasks stalled on memory, in percent.
    pub pressure_some: Option<f64>,
    pub pressure_full: Option<f64>,
    /// Running counts of `memory.events`: throttled over `memory.high`,
    /// and hits of `memory.max` (v1: `memory.failcnt`).
    pub events_high: u64,
    pub events_max: u64,
    /// soak's own resident memory, and the CPU seconds it and its sampler
    /// used since it started: what the harness cost beside the node.
    pub soak_rss: u64,
    pub soak_cpu_s: f64,
    pub sampler_cpu_s: f64,
    /// The CPU seconds of soak's load thread and of its fault
    /// filesystem's threads (those alive now).
    pub load_cpu_s: f64,
    pub faultfs_cpu_s: f64,
    /// Resident memory by kind of mapping, from `/proc/PID/smaps`, read
    /// with PSS (and carried between reads as it is).
    pub maps: maps::Kinds,
}

/// The header of `samples.csv.gz`; columns are only ever added at the end.
pub const SAMPLES_HEADER: &str = "t_s,segment,up,rss_bytes,pss_bytes,anon_bytes,cgroup_bytes,cgroup_anon_bytes,cgroup_file_bytes,disk_bytes,cgroup_kernel_bytes,cgroup_shmem_bytes,cgroup_sock_bytes,memory_pressure_some_avg10,memory_pressure_full_avg10,memory_events_high,memory_events_max,soak_rss_bytes,soak_cpu_s,sampler_cpu_s,load_cpu_s,faultfs_cpu_s,heap_bytes,arena_bytes,arenas,stack_bytes,other_anon_bytes,file_mapped_bytes,shared_bytes";

impl Sample {
    /// One line of `samples.csv.gz` (a figure that could not be read is empty).
    pub fn csv_line(&self) -> String {
        let opt = |v: Option<f64>| v.map(|v| format!("{v:.2}")).unwrap_or_default();
        let (pss, kinds) = if self.pss_carried {
            (String::new(), ",,,,,,".to_string())
        } else {
            let k = &self.maps;
            (
                self.pss.to_string(),
                format!(
                    "{},{},{},{},{},{},{}",
                    k.heap, k.arenas, k.arena_count, k.stacks, k.other_anon, k.file, k.shared
                ),
            )
        };
        format!(
            "{:.3},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.3},{:.3},{:.2},{:.2},{}",
            self.t,
            self.segment,
            u8::from(self.up),
            self.rss,
            pss,
            self.anon,
            self.cgroup,
            self.cgroup_anon,
            self.cgroup_file,
            self.disk,
            self.cgroup_kernel,
            self.cgroup_shmem,
            self.cgroup_sock,
            opt(self.pressure_some),
            opt(self.pressure_full),
            self.events_high,
            self.events_max,
            self.soak_rss,
            self.soak_cpu_s,
            self.sampler_cpu_s,
            self.load_cpu_s,
            self.faultfs_cpu_s,
            kinds,
        )
    }
}

/// CPU seconds of a clock (`CLOCK_PROCESS_CPUTIME_ID`: this process;
/// `CLOCK_THREAD_CPUTIME_ID`: this thread).
fn cpu_seconds(clock: libc::clockid_t) -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// CPU seconds of soak's threads by name: its load thread (`soak-load`)
/// and its fault filesystem's (`fuser-*`), from /proc/self/task.
fn threads_cpu() -> (f64, f64) {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let (mut load, mut fs) = (0.0, 0.0);
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return (0.0, 0.0);
    };
    for t in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else {
            continue;
        };
        // `tid (comm) state ...`: the name may hold spaces, not `)`.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name = &stat[open + 1..close];
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        // utime and stime are the 14th and 15th fields of the line.
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        let cpu = (ticks(11) + ticks(12)) / hz;
        if name == "soak-load" {
            load += cpu;
        } else if name.starts_with("fuser") {
            fs += cpu;
        }
    }
    (load, fs)
}

/// soak's own resident memory, from /proc/self/statm.
fn own_rss() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * page_size())
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as u64
    } else {
        4096
    }
}

/// What the sampler reads from; the phase engine updates it as the node
/// restarts.
#[derive(Clone)]
pub struct Target {
    /// The node's leader pid (0: not running; [`ELSEWHERE`]: running where
    /// its processes are not this machine's to read).
    pub pid: Arc<AtomicI32>,
    pub segment: Arc<AtomicU32>,
    pub cgroup: Option<Arc<Cgroup>>,
    pub data_dir: Option<PathBuf>,
    /// Without a cgroup of soak's: read the one the node's process is in
    /// (a container's, which its engine made and remakes at each start).
    pub pid_cgroup: bool,
    /// The node's memory as its engine (or kubelet) reports it, read
    /// while the node runs elsewhere (`pid` is [`ELSEWHERE`]).
    pub engine_memory: Option<Arc<crate::driver::EngineMemory>>,
    /// A cluster's members, each read on its own; the cell's sample is
    /// then their sum (empty for one node).
    pub members: Vec<MemberWatch>,
}

/// One member of a cluster, as the sampler reads it: its cgroup (its
/// processes and the kernel's figures) and its data directory.
#[derive(Clone)]
pub struct MemberWatch {
    pub cgroup: Arc<Cgroup>,
    pub data_dir: PathBuf,
}

/// The header of `members.csv.gz` (a cluster's cells): one row per member
/// per sample.
pub const MEMBERS_HEADER: &str =
    "t_s,member,up,rss_bytes,anon_bytes,cgroup_bytes,cgroup_anon_bytes,disk_bytes";

impl Sample {
    /// One row of `members.csv.gz` for member `m` (1-based).
    pub fn member_line(&self, m: usize) -> String {
        format!(
            "{:.3},{m},{},{},{},{},{},{}",
            self.t,
            u8::from(self.up),
            self.rss,
            self.anon,
            self.cgroup,
            self.cgroup_anon,
            self.disk
        )
    }
}

/// [`Target::pid`] of a node that runs on another machine (a remote
/// engine's container, a Pod on another machine): up, with no process to
/// read.
pub const ELSEWHERE: i32 = -1;

/// Bytes a directory tree takes on disk (allocated blocks, as `du`).
pub fn disk_usage(dir: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => disk_usage(&e.path()),
            Ok(m) => m.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

/// The share of a core that reading `smaps` (PSS and the kinds of
/// [`maps`]) may take: the kernel walks every page table of the process,
/// so its cost grows with the node's memory (`smaps_rollup` alone took 3 ms
/// at 130 MiB here, 46% of soak's CPU when sampled every 10 ms). After a
/// read that took d, the next waits d / PSS_BUDGET.
pub const PSS_BUDGET: f64 = 0.01;

/// The figures of `text` (`/proc/PID/status` or `smaps_rollup`) under
/// `key`, in bytes.
fn kb_field(text: &str, key: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |k| k * 1024)
}

/// The kinds of memory of the node's processes, PSS included.
fn kinds_of(pids: &[i32]) -> maps::Kinds {
    let mut k = maps::Kinds::default();
    for p in pids {
        k.add(&maps::of_pid(*p));
    }
    k
}

/// (RSS, anonymous) bytes of one process, from `/proc/PID/status`: the
/// kernel's running counts, as cheap to read for 100 GiB as for 1 MiB.
pub fn memory_of(pid: i32) -> (u64, u64) {
    std::fs::read_to_string(format!("/proc/{pid}/status")).map_or((0, 0), |text| {
        (kb_field(&text, "VmRSS:"), kb_field(&text, "RssAnon:"))
    })
}

/// Resident bytes of one process, from `/proc/PID/status` (VmRSS).
pub fn rss_of(pid: i32) -> u64 {
    memory_of(pid).0
}

pub use crate::driver::process::parent_of;

/// The leader and its descendants, from `/proc/*/stat`.
pub fn process_tree(root: i32) -> Vec<i32> {
    let mut parent_of = vec![];
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            if let Some(ppid) = self::parent_of(pid) {
                parent_of.push((pid, ppid));
            }
        }
    }
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let p = tree[i];
        tree.extend(parent_of.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    tree
}

impl Target {
    /// A sample; its PSS only when `pss` (else 0), with what reading it
    /// took; a cluster's also each member's (see [`Target::members`]).
    pub fn sample(&self, t: f64, pss: bool) -> (Sample, Vec<Sample>, Duration) {
        if !self.members.is_empty() {
            return self.sample_members(t, pss);
        }
        let (s, took) = self.sample_one(t, pss);
        (s, vec![], took)
    }

    /// Each member from its cgroup (an incarnation is its oldest pid), and
    /// the cluster as their sum (PSS and the kinds of mappings over every
    /// member's processes; memory pressure, the most of any member).
    fn sample_members(&self, t: f64, pss: bool) -> (Sample, Vec<Sample>, Duration) {
        let mut every = vec![];
        let members: Vec<Sample> = self
            .members
            .iter()
            .map(|m| {
                let pids = m.cgroup.procs();
                let s = Sample {
                    segment: pids.iter().min().map_or(0, |p| *p as u32),
                    up: !pids.is_empty(),
                    ..of_processes(t, Some(&m.cgroup), &pids, disk_usage(&m.data_dir))
                };
                every.extend(pids);
                s
            })
            .collect();
        let started = std::time::Instant::now();
        let kinds = if pss {
            kinds_of(&every)
        } else {
            maps::Kinds::default()
        };
        let mut sum = Sample {
            t,
            segment: self.segment.load(Relaxed),
            up: self.pid.load(Relaxed) != 0,
            pss: kinds.pss,
            maps: kinds,
            ..Sample::default()
        };
        for m in &members {
            sum.rss += m.rss;
            sum.anon += m.anon;
            sum.cgroup += m.cgroup;
            sum.cgroup_anon += m.cgroup_anon;
            sum.cgroup_file += m.cgroup_file;
            sum.disk += m.disk;
            sum.cgroup_kernel += m.cgroup_kernel;
            sum.cgroup_shmem += m.cgroup_shmem;
            sum.cgroup_sock += m.cgroup_sock;
            sum.pressure_some = most(sum.pressure_some, m.pressure_some);
            sum.pressure_full = most(sum.pressure_full, m.pressure_full);
            sum.events_high += m.events_high;
            sum.events_max += m.events_max;
        }
        (sum, members, started.elapsed())
    }

    fn sample_one(&self, t: f64, pss: bool) -> (Sample, Duration) {
        let pid = self.pid.load(Relaxed);
        if let (Some(m), true) = (&self.engine_memory, pid <= 0) {
            return (self.sample_remote(t, pid, m), Duration::ZERO);
        }
        let pids = match (&self.cgroup, pid) {
            (Some(cg), _) => cg.procs(),
            (None, pid) if pid <= 0 => vec![],
            (None, pid) => process_tree(pid),
        };
        let found = match (&self.cgroup, pid) {
            (None, pid) if self.pid_cgroup && pid > 0 => Cgroup::of_pid(pid),
            _ => None,
        };
        let cg = self.cgroup.as_deref().or(found.as_ref());
        let disk = self.data_dir.as_deref().map(disk_usage).unwrap_or(0);
        let read = of_processes(t, cg, &pids, disk);
        let started = std::time::Instant::now();
        let kinds = if pss {
            kinds_of(&pids)
        } else {
            maps::Kinds::default()
        };
        let sample = Sample {
            t,
            segment: self.segment.load(Relaxed),
            up: pid != 0,
            pss: kinds.pss,
            maps: kinds,
            ..read
        };
        (sample, started.elapsed())
    }
}

/// What the kernel says of these processes (RSS, anonymous) and of their
/// cgroup (its memory, pressure and events), at `t`.
fn of_processes(t: f64, cg: Option<&Cgroup>, pids: &[i32], disk: u64) -> Sample {
    let mem = cg.map(|c| c.memory()).unwrap_or_default();
    let events = cg.map(|c| c.events()).unwrap_or_default();
    let pressure = cg.and_then(|c| c.pressure());
    let mems: Vec<(u64, u64)> = pids.iter().map(|p| memory_of(*p)).collect();
    Sample {
        t,
        rss: mems.iter().map(|m| m.0).sum(),
        anon: mems.iter().map(|m| m.1).sum(),
        cgroup: mem.usage,
        cgroup_anon: mem.anon,
        cgroup_file: mem.file,
        disk,
        cgroup_kernel: mem.kernel,
        cgroup_shmem: mem.shmem,
        cgroup_sock: mem.sock,
        pressure_some: pressure.map(|p| p.some_avg10),
        pressure_full: pressure.map(|p| p.full_avg10),
        events_high: events.high,
        events_max: events.max,
        ..Sample::default()
    }
}

impl Target {
    /// What a remote engine's stats say: the container's cgroup usage and
    /// its parts; the processes' RSS, PSS and anonymous memory stay 0 (the
    /// report names them missing).
    fn sample_remote(&self, t: f64, pid: i32, m: &crate::driver::EngineMemory) -> Sample {
        Sample {
            t,
            segment: self.segment.load(Relaxed),
            up: pid != 0,
            cgroup: m.usage.load(Relaxed),
            cgroup_anon: m.anon.load(Relaxed),
            cgroup_file: m.file.load(Relaxed),
            disk: self.data_dir.as_deref().map(disk_usage).unwrap_or(0),
            ..Sample::default()
        }
    }
}

/// The samples kept in memory for the analysis, in bounded memory: every
/// sample while there are fewer than [`KEEP`]; then neighbours are merged in
/// pairs, and from then on every 2 (4, 8, ...) samples taken make one. A
/// merged sample holds the most of each memory figure of those it merged
/// (so peaks, whole-run or per window, stay exact, and a trend is one of
/// maxima), and the newest of the running counts. Samples of different
/// incarnations of the node, or up and down, are never merged. A day at 1 s
/// is kept as 4-second maxima, in 6 MB. `samples.csv.gz` has every sample.
#[derive(Debug, Default)]
pub struct Kept {
    samples: Vec<Sample>,
    /// Samples taken, and merged into the next kept one.
    taken: usize,
    stride: usize,
    open: Option<(Sample, usize)>,
    /// How many it keeps before it halves them (0: [`KEEP`]).
    room: usize,
    /// A cluster's members, each kept alike, in [`KEEP`] between them.
    members: Vec<Kept>,
}

/// At most this many samples are kept in memory (about 6 MB).
pub const KEEP: usize = 1 << 15;

impl Kept {
    fn push(&mut self, s: Sample) {
        self.taken += 1;
        self.stride = self.stride.max(1);
        let (merged, n) = match self.open.take() {
            Some((open, n)) if mergeable(&open, &s) => (merge(open, s), n + 1),
            Some((open, _)) => {
                self.samples.push(open);
                (s, 1)
            }
            None => (s, 1),
        };
        if n >= self.stride {
            self.samples.push(merged);
        } else {
            self.open = Some((merged, n));
        }
        if self.samples.len() >= if self.room == 0 { KEEP } else { self.room } {
            self.halve();
        }
    }

    /// Keeps member `m`'s sample (0-based), beside the others.
    fn push_member(&mut self, m: usize, s: Sample, of: usize) {
        while self.members.len() <= m {
            self.members.push(Kept {
                room: (KEEP / of.max(1)).max(256),
                ..Kept::default()
            });
        }
        self.members[m].push(s);
    }

    /// Each member's samples (a cluster's), in member order.
    pub fn take_members(&mut self) -> Vec<Vec<Sample>> {
        std::mem::take(&mut self.members)
            .into_iter()
            .map(Kept::into_samples)
            .collect()
    }

    /// Merges neighbours in pairs (of one incarnation and state).
    fn halve(&mut self) {
        let mut out: Vec<Sample> = Vec::with_capacity(KEEP);
        let mut it = std::mem::take(&mut self.samples).into_iter().peekable();
        while let Some(a) = it.next() {
            match it.peek() {
                Some(b) if mergeable(&a, b) => {
                    let b = it.next().expect("peeked");
                    out.push(merge(a, b));
                }
                _ => out.push(a),
            }
        }
        self.samples = out;
        self.stride *= 2;
    }

    /// Every sample kept, the last one taken included.
    pub fn into_samples(mut self) -> Vec<Sample> {
        self.samples.extend(self.open.map(|(s, _)| s));
        self.samples
    }

    /// How many samples were taken.
    pub fn taken(&self) -> usize {
        self.taken
    }
}

fn mergeable(a: &Sample, b: &Sample) -> bool {
    a.segment == b.segment && a.up == b.up
}

/// The larger of two readings that may be missing.
fn most(x: Option<f64>, y: Option<f64>) -> Option<f64> {
    match (x, y) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, y) => x.or(y),
    }
}

/// `b` (the newer) with the most of each memory figure of the two.
fn merge(a: Sample, b: Sample) -> Sample {
    Sample {
        rss: a.rss.max(b.rss),
        pss: a.pss.max(b.pss),
        pss_carried: a.pss_carried && b.pss_carried,
        anon: a.anon.max(b.anon),
        cgroup: a.cgroup.max(b.cgroup),
        cgroup_anon: a.cgroup_anon.max(b.cgroup_anon),
        cgroup_file: a.cgroup_file.max(b.cgroup_file),
        disk: a.disk.max(b.disk),
        cgroup_kernel: a.cgroup_kernel.max(b.cgroup_kernel),
        cgroup_shmem: a.cgroup_shmem.max(b.cgroup_shmem),
        cgroup_sock: a.cgroup_sock.max(b.cgroup_sock),
        pressure_some: most(a.pressure_some, b.pressure_some),
        pressure_full: most(a.pressure_full, b.pressure_full),
        soak_rss: a.soak_rss.max(b.soak_rss),
        maps: a.maps.most(&b.maps),
        ..b
    }
}

/// A running sampler; `stop` returns the samples kept.
pub struct Sampler {
    stop: watch::Sender<bool>,
    handle: JoinHandle<()>,
    samples: Arc<Mutex<Kept>>,
}

impl Sampler {
    pub fn start(
        target: Target,
        interval: Duration,
        csv: PathBuf,
        origin: tokio::time::Instant,
    ) -> std::io::Result<Sampler> {
        let mut file = crate::gzcsv::Writer::create(&csv, SAMPLES_HEADER)?;
        let mut members_file = match target.members.is_empty() {
            true => None,
            false => Some(crate::gzcsv::Writer::create(
                &csv.with_file_name("members.csv.gz"),
                MEMBERS_HEADER,
            )?),
        };
        let samples = Arc::new(Mutex::new(Kept::default()));
        let (stop, mut stopped) = watch::channel(false);
        let store = samples.clone();
        let handle = tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            // The CPU the sampling took, on the thread it ran on.
            let mut sampler_cpu_s = 0.0;
            // The last PSS read, of which incarnation, and when the next is
            // due (at once for a new incarnation).
            let (mut kinds, mut pss_of, mut pss_due) =
                (maps::Kinds::default(), None, std::time::Instant::now());
            loop {
                tokio::select! {
                    _ = stopped.changed() => break,
                    _ = tick.tick() => {
                        let target = target.clone();
                        let t = origin.elapsed().as_secs_f64();
                        let incarnation = (target.segment.load(Relaxed), target.pid.load(Relaxed));
                        let read_pss = std::time::Instant::now() >= pss_due || pss_of != Some(incarnation);
                        let took = tokio::task::spawn_blocking(move || {
                            let before = cpu_seconds(libc::CLOCK_THREAD_CPUTIME_ID);
                            let (mut s, members, pss_took) = target.sample(t, read_pss);
                            s.soak_rss = own_rss();
                            (s.load_cpu_s, s.faultfs_cpu_s) = threads_cpu();
                            (s, members, pss_took, cpu_seconds(libc::CLOCK_THREAD_CPUTIME_ID) - before)
                        })
                        .await;
                        let Ok((mut s, members, pss_took, cpu)) = took else { continue };
                        if read_pss {
                            (kinds, pss_of) = (s.maps, Some(incarnation));
                            pss_due = std::time::Instant::now() + pss_took.div_f64(PSS_BUDGET);
                        } else {
                            (s.pss, s.maps, s.pss_carried) = (kinds.pss, kinds, true);
                        }
                        sampler_cpu_s += cpu;
                        s.sampler_cpu_s = sampler_cpu_s;
                        s.soak_cpu_s = cpu_seconds(libc::CLOCK_PROCESS_CPUTIME_ID);
                        let _ = file.line(&s.csv_line());
                        if let Some(f) = members_file.as_mut() {
                            for (i, m) in members.iter().enumerate() {
                                let _ = f.line(&m.member_line(i + 1));
                            }
                        }
                        let mut kept = store.lock().expect("samples lock");
                        kept.push(s);
                        let n = members.len();
                        for (i, m) in members.into_iter().enumerate() {
                            kept.push_member(i, m, n);
                        }
                    }
                }
            }
            let _ = file.finish();
            if let Some(f) = members_file {
                let _ = f.finish();
            }
        });
        Ok(Sampler {
            stop,
            handle,
            samples,
        })
    }

    pub async fn stop(self) -> Kept {
        let _ = self.stop.send(true);
        let _ = self.handle.await;
        std::mem::take(&mut *self.samples.lock().expect("samples lock"))
    }
}

/// Every series gets a row in `metrics.csv.gz` at least once in this many
/// scrapes (a minute at the default interval).
pub const FULL_EVERY: u32 = 60;

/// What the scrapes of a run found.
#[derive(Debug, Clone, Default)]
pub struct ScrapeStats {
    pub ok: u64,
    /// Scrapes that got no answer or no 200.
    pub failed: u64,
    /// Scrapes that parsed into no series at all.
    pub empty: u64,
    pub last_error: Option<String>,
    /// The newest non-empty scrape.
    pub last: BTreeMap<String, f64>,
    /// The scrape where the node was largest (its RSS, or else the
    /// allocator's resident bytes), the newest of equals: where the
    /// allocator's figures are read. The last scrape may be of a node just
    /// restarted after an OOM kill, which holds nothing yet.
    pub largest: BTreeMap<String, f64>,
}

/// Scrapes a Prometheus endpoint at an interval into `metrics.csv.gz`
/// (`t_s,series,value`). A series gets a row where its value changed; every
/// series gets one at the first scrape, at every [`FULL_EVERY`]th and at the
/// first after a gap (the node down, a scrape failed). So a series holds
/// the value of its last row until its next, which is never more than
/// [`FULL_EVERY`] scrapes on. Measured on `suites/smoke.yaml` (234 series,
/// 45 s): every row of every scrape is 16.8 KB/s, gzip takes it to 0.84 KB/s
/// (72 MB a day), changed rows only to 0.3 KB/s (26 MB a day).
pub struct Scraper {
    stop: watch::Sender<bool>,
    handle: JoinHandle<ScrapeStats>,
}

impl Scraper {
    pub fn start(
        url: String,
        interval: Duration,
        csv: PathBuf,
        origin: tokio::time::Instant,
        up: Arc<AtomicI32>,
    ) -> std::io::Result<Scraper> {
        let mut file = crate::gzcsv::Writer::create(&csv, "t_s,series,value")?;
        let (stop, mut stopped) = watch::channel(false);
        // A bad URL fails every scrape, and the report shows why.
        let url = prometheus::endpoint(&url).unwrap_or(url);
        let http = crate::net::http::Http::default();
        let handle = tokio::spawn(async move {
            let mut stats = ScrapeStats::default();
            // The bits of each series' last written value, and how many
            // scrapes ago every series was last written (None: a gap since).
            let mut written: std::collections::HashMap<String, u64> = Default::default();
            let mut since_full: Option<u32> = None;
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = stopped.changed() => break,
                    _ = tick.tick() => {
                        // Only while the node is up: a refused connection
                        // during a restart is not the endpoint's fault.
                        if up.load(std::sync::atomic::Ordering::Relaxed) == 0 {
                            since_full = None;
                            continue;
                        }
                        let t = origin.elapsed().as_secs_f64();
                        match prometheus::fetch(&http, &url, interval.max(Duration::from_secs(2))).await {
                            Ok(text) => {
                                let series = prometheus::series(&text);
                                if series.is_empty() {
                                    stats.empty += 1;
                                    since_full = None;
                                    continue;
                                }
                                stats.ok += 1;
                                let full = since_full.is_none_or(|n| n + 1 >= FULL_EVERY);
                                since_full = if full { Some(0) } else { since_full.map(|n| n + 1) };
                                for (k, v) in &series {
                                    let bits = v.to_bits();
                                    match written.get_mut(k) {
                                        Some(b) if *b == bits && !full => continue,
                                        Some(b) => *b = bits,
                                        None => {
                                            written.insert(k.clone(), bits);
                                        }
                                    }
                                    let _ = file.line(&format!("{t:.3},{},{v}", k.replace(',', ";")));
                                }
                                let resident = |s| prometheus::resident(s).unwrap_or(0.0);
                                if resident(&series) >= resident(&stats.largest) {
                                    stats.largest = series.clone();
                                }
                                stats.last = series;
                            }
                            Err(e) => {
                                since_full = None;
                                stats.failed += 1;
                                stats.last_error = Some(e);
                            }
                        }
                    }
                }
            }
            let _ = file.finish();
            stats
        });
        Ok(Scraper { stop, handle })
    }

    pub async fn stop(self) -> ScrapeStats {
        let _ = self.stop.send(true);
        self.handle.await.unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn samples_csv_has_as_many_fields_as_its_header_and_reads_this_process() {
        let dir = tempfile::tempdir().unwrap();
        let csv = dir.path().join("samples.csv.gz");
        let target = Target {
            pid: Arc::new(AtomicI32::new(std::process::id() as i32)),
            segment: Arc::new(AtomicU32::new(0)),
            cgroup: None,
            pid_cgroup: false,
            engine_memory: None,
            members: vec![],
            data_dir: Some(dir.path().to_path_buf()),
        };
        let sampler = Sampler::start(
            target,
            Duration::from_millis(100),
            csv.clone(),
            tokio::time::Instant::now(),
        )
        .unwrap();
        tokio::time::sleep(Duration::from_millis(350)).await;
        let samples = sampler.stop().await.into_samples();
        assert!(samples.len() >= 2);
        assert!(
            samples
                .iter()
                .all(|s| s.rss > 0 && s.pss > 0 && s.anon > 0 && s.disk > 0),
            "{samples:?}"
        );
        let text = crate::gzcsv::read_to_string(&csv).unwrap();
        assert_eq!(text.lines().count(), samples.len() + 1);
        let widths: Vec<usize> = text.lines().map(|l| l.split(',').count()).collect();
        assert!(widths.iter().all(|w| *w == widths[0]), "{text}");
    }

    #[test]
    fn a_day_of_samples_is_kept_in_bounded_memory_with_its_peaks_and_restarts() {
        let mut kept = Kept::default();
        let n = 86_400 * 2;
        for i in 0..n {
            kept.push(Sample {
                t: i as f64,
                segment: u32::from(i >= n - 100),
                up: true,
                // A 1-sample spike in the middle of a slow rise.
                rss: if i == 50_001 {
                    9_000
                } else {
                    1_000 + i as u64 / 100
                },
                events_max: i as u64,
                ..Sample::default()
            });
        }
        assert_eq!(kept.taken(), n);
        let s = kept.into_samples();
        assert!(s.len() <= KEEP && s.len() > KEEP / 4, "{}", s.len());
        assert_eq!(s.iter().map(|x| x.rss).max(), Some(9_000));
        let last = s.last().unwrap();
        assert_eq!((last.t, last.events_max), ((n - 1) as f64, (n - 1) as u64));
        // The node's last incarnation, 100 samples, is its own.
        let restarted = s.iter().position(|x| x.segment == 1).unwrap();
        assert_eq!(s[restarted - 1].t, (n - 101) as f64);
        assert!(s.windows(2).all(|w| w[0].t < w[1].t));
        // The trend of the maxima is the rise: 1 per 100 s.
        let first = s.iter().find(|x| x.t > 1000.0).unwrap();
        let slope = (s[restarted - 1].rss - first.rss) as f64 / (s[restarted - 1].t - first.t);
        assert!((slope - 0.01).abs() < 0.001, "{slope}");
    }

    /// A Prometheus endpoint on 127.0.0.1 whose `steady` holds 1 and whose
    /// `moving` is the number of the scrape; `scrapes` counts them.
    async fn endpoint(scrapes: Arc<AtomicU32>) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/metrics", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let n = scrapes.fetch_add(1, Relaxed) + 1;
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let body = format!("steady 1\nmoving {n}\n");
                let _ = conn
                    .write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        )
                        .as_bytes(),
                    )
                    .await;
            }
        });
        url
    }

    #[tokio::test]
    async fn metrics_get_a_row_where_a_series_changed_and_every_series_every_sixtieth_scrape() {
        let dir = tempfile::tempdir().unwrap();
        let csv = dir.path().join("metrics.csv.gz");
        let scrapes = Arc::new(AtomicU32::new(0));
        let url = endpoint(scrapes.clone()).await;
        let up = Arc::new(AtomicI32::new(1));
        let scraper = Scraper::start(
            url,
            Duration::from_millis(1),
            csv.clone(),
            tokio::time::Instant::now(),
            up,
        )
        .unwrap();
        while scrapes.load(Relaxed) < 2 * FULL_EVERY + 5 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let stats = scraper.stop().await;
        let text = crate::gzcsv::read_to_string(&csv).unwrap();
        let rows = |name: &str| {
            text.lines()
                .filter(|l| l.split(',').nth(1) == Some(name))
                .count() as u64
        };
        assert_eq!(rows("moving"), stats.ok, "{text}");
        assert_eq!(
            rows("steady"),
            stats.ok.div_ceil(FULL_EVERY as u64),
            "{text}"
        );
        assert!(stats.ok > 2 * FULL_EVERY as u64);
    }
}
