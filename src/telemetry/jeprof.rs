//! Call sites of growth, from jemalloc's heap profiler: soak preloads
//! jemalloc with `prof:true` (sampling one allocation in every 512 KiB on
//! average, jemalloc's default), the node dumps its live sampled
//! allocations every `dump_every` bytes it allocates, and soak keeps two
//! dumps of each process: the last one before the end of its warm-up and
//! the newest. The stacks whose live bytes grew most between them are the
//! call sites of the growth.
//!
//! The dumps (`heap_v2` text, as `jeprof` reads them) stay in the cell's
//! `profile/` folder for the user's own tools. Addresses are symbolized
//! with `addr2line`, from the mappings each dump lists.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::model::{GrowingStack, ProfileSummary};

/// jemalloc's default sampling: one allocation per 2^19 bytes on average.
pub const LG_SAMPLE: u32 = 19;

/// The `MALLOC_CONF` options that turn the profiler on, dumping into
/// `dir` every `dump_every` bytes allocated (rounded to a power of two).
pub fn malloc_conf(dir: &Path, dump_every: u64) -> String {
    let lg = 63 - dump_every.max(1 << 20).leading_zeros();
    format!(
        "prof:true,prof_active:true,lg_prof_sample:{LG_SAMPLE},lg_prof_interval:{lg},prof_final:true,prof_prefix:{}/jeprof",
        dir.display()
    )
}

/// One dump file: `jeprof.PID.SEQ.i|u|f.heap`.
#[derive(Debug, Clone, PartialEq)]
pub struct Dump {
    pub path: PathBuf,
    pub pid: i32,
    pub seq: u64,
    pub final_dump: bool,
    pub modified: SystemTime,
}

/// The dumps in `dir`, oldest first within each process.
pub fn dumps(dir: &Path) -> Vec<Dump> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return vec![];
    };
    let mut out: Vec<Dump> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let rest = name.strip_prefix("jeprof.")?.strip_suffix(".heap")?;
            let mut f = rest.split('.');
            let pid = f.next()?.parse().ok()?;
            let seq = f.next()?.parse().ok()?;
            let kind = f.next()?;
            Some(Dump {
                path: e.path(),
                pid,
                seq,
                final_dump: kind == "f",
                modified: e.metadata().ok()?.modified().ok()?,
            })
        })
        .collect();
    out.sort_by_key(|d| (d.pid, d.seq, d.final_dump));
    out
}

/// The two dumps of one process that are compared: the newest written by
/// `warm` (the end of its warm-up), else its first; and its newest.
pub fn pair(dumps: &[&Dump], warm: SystemTime) -> Option<(Dump, Dump)> {
    let base = dumps
        .iter()
        .rev()
        .find(|d| d.modified <= warm && !d.final_dump)
        .or(dumps.first())?;
    let last = dumps.last()?;
    Some(((*base).clone(), (*last).clone()))
}

/// Removes every dump of `dir` but each process's pair (see [`pair`]),
/// given when each process started (`started`, by pid) and the warm-up:
/// the folder stays bounded however long the run.
pub fn prune(dir: &Path, started: &HashMap<i32, SystemTime>, warmup: Duration) {
    let all = dumps(dir);
    let mut by_pid: BTreeMap<i32, Vec<&Dump>> = BTreeMap::new();
    for d in &all {
        by_pid.entry(d.pid).or_default().push(d);
    }
    for (pid, ds) in by_pid {
        let Some(start) = started.get(&pid) else {
            continue;
        };
        let Some((base, last)) = pair(&ds, *start + warmup) else {
            continue;
        };
        for d in ds {
            if d.path != base.path && d.path != last.path {
                let _ = std::fs::remove_file(&d.path);
            }
        }
    }
}

/// A parsed dump: each stack's sampled live objects and bytes, and the
/// mappings of the process.
#[derive(Debug, Default)]
pub struct Heap {
    /// The sampling rate (bytes) from the header.
    pub rate: u64,
    pub stacks: HashMap<Vec<u64>, (u64, u64)>,
    pub maps: Vec<Object>,
}

/// A mapped object: addresses `start..end` at `offset` of `path`.
#[derive(Debug, Clone, PartialEq)]
pub struct Object {
    pub start: u64,
    pub end: u64,
    pub offset: u64,
    pub path: String,
}

/// Reads a `heap_v2` dump; an error names what is wrong.
pub fn parse(text: &str) -> Result<Heap, String> {
    let mut lines = text.lines();
    let head = lines.next().unwrap_or_default();
    let rate = head
        .strip_prefix("heap_v2/")
        .and_then(|r| r.trim().parse::<u64>().ok())
        .ok_or_else(|| format!("not a jemalloc heap_v2 profile (first line `{head}`)"))?;
    let mut heap = Heap {
        rate,
        ..Heap::default()
    };
    let mut stack: Option<Vec<u64>> = None;
    let mut in_maps = false;
    for l in lines {
        if in_maps {
            heap.maps.extend(object(l));
        } else if l.starts_with("MAPPED_LIBRARIES") {
            in_maps = true;
        } else if let Some(addrs) = l.strip_prefix("@ ") {
            stack = Some(
                addrs
                    .split_whitespace()
                    .filter_map(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok())
                    .collect(),
            );
        } else if let (Some(s), Some(counts)) = (&stack, l.trim_start().strip_prefix("t*: ")) {
            // `t*: OBJECTS: BYTES [...]`
            let mut f = counts.split([':', '[']).map(str::trim);
            let objs = f.next().and_then(|v| v.parse().ok()).unwrap_or(0);
            let bytes = f.next().and_then(|v| v.parse().ok()).unwrap_or(0);
            heap.stacks.insert(s.clone(), (objs, bytes));
        }
    }
    Ok(heap)
}

fn object(line: &str) -> Option<Object> {
    let mut f = line.split_whitespace();
    let (start, end) = f.next()?.split_once('-')?;
    let perms = f.next()?;
    let offset = u64::from_str_radix(f.next()?, 16).ok()?;
    let path = f.nth(2)?;
    (perms.contains('x') && path.starts_with('/')).then(|| Object {
        start: u64::from_str_radix(start, 16).unwrap_or(0),
        end: u64::from_str_radix(end, 16).unwrap_or(0),
        offset,
        path: path.to_string(),
    })
}

impl Heap {
    /// A stack's live bytes, unsampled as jeprof does: an allocation of
    /// mean size s is sampled with probability 1 - e^(-s/rate).
    fn live(&self, stack: &[u64]) -> f64 {
        let Some(&(objs, bytes)) = self.stacks.get(stack) else {
            return 0.0;
        };
        if objs == 0 || bytes == 0 || self.rate <= 1 {
            return bytes as f64;
        }
        let mean = bytes as f64 / objs as f64;
        bytes as f64 / (1.0 - (-mean / self.rate as f64).exp())
    }
}

/// The stacks whose live bytes grew most from `base` to `last`, the
/// largest growth first (at most `n`): (stack, live, growth) bytes. A
/// growth of two sampling periods or less is left out: one sample more at
/// a dump is what an allocation freed at once looks like, when the dump
/// catches it live (a node's request buffers, 6 MB/s allocated and freed,
/// were listed so in 1 of 12 runs).
pub fn growing(base: &Heap, last: &Heap, n: usize) -> Vec<(Vec<u64>, f64, f64)> {
    let noise = 2.0 * last.rate as f64;
    let mut out: Vec<(Vec<u64>, f64, f64)> = last
        .stacks
        .keys()
        .map(|s| (s.clone(), last.live(s), last.live(s) - base.live(s)))
        .filter(|(_, _, g)| *g > noise)
        .collect();
    out.sort_by(|a, b| b.2.total_cmp(&a.2));
    out.truncate(n);
    out
}

/// The object and the address within its file of a code address.
fn locate(maps: &[Object], addr: u64) -> Option<(&Object, u64)> {
    maps.iter()
        .find(|o| (o.start..o.end).contains(&addr))
        .map(|o| (o, addr - o.start + o.offset))
}

/// Names for the frames of `stacks`, from `addr2line` (one run per
/// object); a frame it cannot name is `object+0xoffset`. The allocator's
/// own frames (jemalloc's library) are left out.
pub fn symbolize(maps: &[Object], stacks: &[Vec<u64>]) -> Vec<Vec<String>> {
    // A return address points after its call: look up the call itself.
    type Frame<'a> = (u64, Option<(&'a Object, u64)>);
    let wanted: Vec<Vec<Frame>> = stacks
        .iter()
        .map(|s| {
            s.iter()
                .enumerate()
                .map(|(i, a)| {
                    let a = if i == 0 { *a } else { a.saturating_sub(1) };
                    (a, locate(maps, a))
                })
                .filter(|(_, o)| !o.is_some_and(|(o, _)| o.path.contains("libjemalloc")))
                .collect()
        })
        .collect();
    let mut by_object: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (_, o) in wanted.iter().flatten() {
        if let Some((o, off)) = o {
            by_object.entry(o.path.as_str()).or_default().push(*off);
        }
    }
    let mut names: HashMap<(String, u64), String> = HashMap::new();
    for (path, mut offs) in by_object {
        offs.sort_unstable();
        offs.dedup();
        for (off, name) in offs.iter().zip(addr2line(path, &offs)) {
            names.insert((path.to_string(), *off), name);
        }
    }
    wanted
        .iter()
        .map(|s| {
            s.iter()
                .map(|(a, o)| match o {
                    Some((o, off)) => names
                        .get(&(o.path.clone(), *off))
                        .cloned()
                        .unwrap_or_else(|| format!("{}+{off:#x}", base_name(&o.path))),
                    None => format!("{a:#x}"),
                })
                .collect()
        })
        .collect()
}

/// Frames of allocation plumbing (a language's allocator shims, C++'s
/// `operator new`, containers' growth): left out at the top of a stack so
/// that it starts at the code that wanted the memory.
const PLUMBING: &[&str] = &[
    "malloc",
    "calloc",
    "realloc",
    "posix_memalign",
    "aligned_alloc",
    "__libc_",
    "operator new",
    "__rust_alloc",
    "__rust_realloc",
    "__rdl_",
    "__rg_",
    "alloc::",
    "<alloc::",
    "std::allocator",
    "__gnu_cxx::new_allocator",
    "std::__new_allocator",
    "hashbrown::raw::",
    "<hashbrown::",
    "core::ptr::",
    "std::vector<",
    "std::_Vector_base",
    "os::malloc",
    "AllocateHeap",
];

/// `frames` without the allocation plumbing at their top (all of them
/// if nothing else is left).
pub fn without_plumbing(frames: Vec<String>) -> Vec<String> {
    let skip = frames
        .iter()
        .take_while(|f| PLUMBING.iter().any(|p| f.starts_with(p)))
        .count();
    if skip == frames.len() {
        frames
    } else {
        frames.into_iter().skip(skip).collect()
    }
}

fn base_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// `function (file:line)` for each offset of `path`, from `addr2line`;
/// `object+0xoffset` where it knows no name.
fn addr2line(path: &str, offs: &[u64]) -> Vec<String> {
    let fallback = || {
        offs.iter()
            .map(|o| format!("{}+{o:#x}", base_name(path)))
            .collect::<Vec<_>>()
    };
    let out = std::process::Command::new("addr2line")
        .args(["-f", "-C", "-e", path])
        .args(offs.iter().map(|o| format!("{o:#x}")))
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output();
    let Some(out) = out.ok().filter(|o| o.status.success()) else {
        return fallback();
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() != 2 * offs.len() {
        return fallback();
    }
    offs.iter()
        .zip(lines.chunks(2))
        .map(|(o, l)| {
            let place = l[1].rsplit('/').next().unwrap_or(l[1]);
            let place = place.split(" (").next().unwrap_or(place);
            match (l[0], place.starts_with("??")) {
                ("??", _) => format!("{}+{o:#x}", base_name(path)),
                (f, true) => f.to_string(),
                (f, false) => format!("{f} ({place})"),
            }
        })
        .collect()
}

/// Compares the pair of dumps of the process that ran last (`pid`, else
/// the one with the newest dump) in `dir` (the cell's `profile/`).
pub fn summarize(
    dir: &Path,
    cell_dir: &Path,
    pid: Option<i32>,
    started: &HashMap<i32, SystemTime>,
    warmup: Duration,
) -> ProfileSummary {
    let mut s = ProfileSummary {
        tool: "jemalloc".into(),
        ..ProfileSummary::default()
    };
    let all = dumps(dir);
    let pid = pid
        .filter(|p| all.iter().any(|d| d.pid == *p))
        .or_else(|| all.iter().max_by_key(|d| d.modified).map(|d| d.pid));
    let Some(pid) = pid else {
        s.note = Some(format!(
            "the node wrote no heap profile into {}: did it load jemalloc (a static binary, or a runtime with its own allocator, does not)?",
            dir.display()
        ));
        return s;
    };
    let mine: Vec<&Dump> = all.iter().filter(|d| d.pid == pid).collect();
    let warm = started
        .get(&pid)
        .map_or(SystemTime::UNIX_EPOCH, |t| *t + warmup);
    let Some((base, last)) = pair(&mine, warm) else {
        return s;
    };
    let rel = |p: &Path| p.strip_prefix(cell_dir).unwrap_or(p).display().to_string();
    s.base = Some(rel(&base.path));
    s.last = Some(rel(&last.path));
    s.seconds = last
        .modified
        .duration_since(base.modified)
        .unwrap_or_default()
        .as_secs_f64();
    if base.path == last.path {
        s.note = Some(
            "one dump only: the node allocated too little to dump twice (lower memory.dump_every)"
                .into(),
        );
        return s;
    }
    let read = |d: &Dump| {
        std::fs::read_to_string(&d.path)
            .map_err(|e| e.to_string())
            .and_then(|t| parse(&t))
            .map_err(|e| format!("{}: {e}", d.path.display()))
    };
    let (b, l) = match (read(&base), read(&last)) {
        (Ok(b), Ok(l)) => (b, l),
        (Err(e), _) | (_, Err(e)) => {
            s.note = Some(e);
            return s;
        }
    };
    let hours = s.seconds / 3600.0;
    let top = growing(&b, &l, 10);
    let stacks: Vec<Vec<u64>> = top.iter().map(|t| t.0.clone()).collect();
    let names = symbolize(&l.maps, &stacks);
    s.growing = top
        .iter()
        .zip(names)
        .map(|((_, live, growth), frames)| GrowingStack {
            frames: without_plumbing(frames).into_iter().take(8).collect(),
            live_bytes: *live as u64,
            growth_bytes: *growth as i64,
            growth_bytes_per_hour: (hours > 0.0).then(|| growth / hours),
        })
        .collect();
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const DUMP: &str = "heap_v2/524288
  t*: 3: 3000 [0: 0]
  t0: 3: 3000 [0: 0]
@ 0x1010 0x2020
  t*: 2: 2048 [0: 0]
  t0: 2: 2048 [0: 0]
@ 0x1010 0x2030
  t*: 1: 1048576 [0: 0]

MAPPED_LIBRARIES:
00001000-00003000 r-xp 00000000 08:01 42 /usr/bin/node
7f0000000000-7f0000100000 r-xp 00010000 08:01 43 /usr/lib/libjemalloc.so.2
";

    #[test]
    fn a_dump_is_read_with_its_mappings() {
        let h = parse(DUMP).unwrap();
        assert_eq!(h.rate, 524288);
        assert_eq!(h.stacks[&vec![0x1010, 0x2020]], (2, 2048));
        assert_eq!(h.stacks[&vec![0x1010, 0x2030]], (1, 1048576));
        assert_eq!(h.maps.len(), 2);
        assert_eq!(locate(&h.maps, 0x7f0000000010).unwrap().1, 0x10010);
        assert!(parse("heap_v1\n")
            .unwrap_err()
            .contains("not a jemalloc heap_v2"));
    }

    #[test]
    fn small_sampled_allocations_weigh_more() {
        let h = parse(DUMP).unwrap();
        // 1 KiB objects are sampled about once in 512: each stands for ~512.
        let small = h.live(&[0x1010, 0x2020]);
        assert!((small / 2048.0 - 512.5).abs() < 1.0, "{small}");
        // A 1 MiB object is nearly always sampled.
        let big = h.live(&[0x1010, 0x2030]);
        assert!(big < 1.2 * 1048576.0, "{big}");
    }

    #[test]
    fn growth_is_ranked_between_two_dumps() {
        let base = parse(DUMP).unwrap();
        let more = DUMP.replace("t*: 2: 2048", "t*: 20: 20480");
        let last = parse(&more).unwrap();
        let g = growing(&base, &last, 5);
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].0, vec![0x1010, 0x2020]);
        // One sample more of a stack is not growth.
        let one = DUMP.replace("t*: 2: 2048", "t*: 3: 3072");
        assert!(
            growing(&base, &parse(&one).unwrap(), 5).is_empty(),
            "{DUMP}"
        );
    }

    #[test]
    fn allocation_plumbing_is_left_off_the_top() {
        let f = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let got = without_plumbing(f(&[
            "__rust_alloc",
            "alloc::raw_vec::grow",
            "node::cache::insert",
            "main",
        ]));
        assert_eq!(got, f(&["node::cache::insert", "main"]));
        assert_eq!(without_plumbing(f(&["malloc"])), f(&["malloc"]));
    }

    #[test]
    fn the_conf_rounds_the_dump_interval_to_a_power_of_two() {
        let c = malloc_conf(Path::new("/c/profile"), 100 << 20);
        assert!(c.contains("lg_prof_interval:26"), "{c}");
        assert!(c.ends_with("prof_prefix:/c/profile/jeprof"), "{c}");
    }
}
