//! Where a process's resident memory is, by kind of mapping, from
//! `/proc/PID/smaps`: no cooperation from the node, any language.
//!
//! Each mapping's `Rss:` goes to one kind:
//!
//! - **heap**: `[heap]`, the `brk` heap (glibc's main arena);
//! - **arenas**: glibc's other malloc arenas. glibc reserves each arena's
//!   heap as one 64 MiB region aligned to 64 MiB (`HEAP_MAX_SIZE` on 64-bit),
//!   read-write at its start and inaccessible (`---p`) beyond what it has
//!   used; such a region is counted as an arena (`arenas` counts them);
//! - **stacks**: `[stack]`, and anonymous mappings just above a small
//!   inaccessible guard (a thread's stack under pthread's guard page);
//! - **shared**: shared memory (`/dev/shm`, System V segments, memfd,
//!   shared anonymous mappings);
//! - **file**: mappings of files (the program, its libraries, mapped data
//!   such as RocksDB's or Kafka's index files), and the kernel's `[vdso]`;
//! - **other anonymous**: every other private anonymous mapping: large
//!   `malloc`s that glibc maps on their own, jemalloc's and mimalloc's
//!   extents, a JVM's heap and metaspace, a Go runtime's arenas.
//!
//! The JVM's own account of its native memory is [`super::nmt`]'s.

use serde::Serialize;

/// glibc's `HEAP_MAX_SIZE` on 64-bit: each non-main arena heap's region.
pub const ARENA_REGION: u64 = 64 << 20;

/// A guard this small or smaller below an anonymous mapping makes it a
/// thread's stack.
const GUARD_MAX: u64 = 1 << 20;

/// Resident bytes by kind of mapping, summed over the node's processes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Kinds {
    pub pss: u64,
    pub heap: u64,
    pub arenas: u64,
    /// How many glibc arena heaps (64 MiB regions) there are.
    pub arena_count: u64,
    pub stacks: u64,
    pub other_anon: u64,
    pub file: u64,
    pub shared: u64,
}

/// A kind's key, how reports name it, and its figure.
pub type Kind = (&'static str, &'static str, fn(&Kinds) -> u64);

/// The kinds, as reports name them, with the figure of each.
pub const KINDS: &[Kind] = &[
    ("heap", "heap (brk)", |k| k.heap),
    ("arenas", "glibc arenas", |k| k.arenas),
    ("stacks", "thread stacks", |k| k.stacks),
    ("other_anon", "other anonymous", |k| k.other_anon),
    ("file", "file-backed", |k| k.file),
    ("shared", "shared memory", |k| k.shared),
];

impl Kinds {
    /// Adds another process's figures.
    pub fn add(&mut self, o: &Kinds) {
        self.pss += o.pss;
        self.heap += o.heap;
        self.arenas += o.arenas;
        self.arena_count += o.arena_count;
        self.stacks += o.stacks;
        self.other_anon += o.other_anon;
        self.file += o.file;
        self.shared += o.shared;
    }

    /// The most of each figure of the two.
    pub fn most(&self, o: &Kinds) -> Kinds {
        Kinds {
            pss: self.pss.max(o.pss),
            heap: self.heap.max(o.heap),
            arenas: self.arenas.max(o.arenas),
            arena_count: self.arena_count.max(o.arena_count),
            stacks: self.stacks.max(o.stacks),
            other_anon: self.other_anon.max(o.other_anon),
            file: self.file.max(o.file),
            shared: self.shared.max(o.shared),
        }
    }
}

/// One mapping of `smaps`.
#[derive(Debug, Clone, PartialEq)]
struct Mapping {
    start: u64,
    end: u64,
    /// `rw-p`, `---p`, `r--s`, ...
    perms: String,
    path: String,
    rss: u64,
    pss: u64,
}

impl Mapping {
    fn size(&self) -> u64 {
        self.end - self.start
    }
    fn anon(&self) -> bool {
        self.path.is_empty()
    }
    fn inaccessible(&self) -> bool {
        self.perms.starts_with("---")
    }
    fn shared(&self) -> bool {
        self.perms.ends_with('s')
    }
}

/// The mappings of an `smaps` text (unreadable lines are skipped).
fn mappings(text: &str) -> Vec<Mapping> {
    let mut out: Vec<Mapping> = vec![];
    for line in text.lines() {
        if let Some(m) = header(line) {
            out.push(m);
            continue;
        }
        let Some(last) = out.last_mut() else { continue };
        let kb = |v: &str| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok();
        if let Some(v) = line.strip_prefix("Rss:").and_then(kb) {
            last.rss = v * 1024;
        } else if let Some(v) = line.strip_prefix("Pss:").and_then(kb) {
            last.pss = v * 1024;
        }
    }
    out
}

/// `start-end perms offset dev inode [path]`, or None for a field line.
fn header(line: &str) -> Option<Mapping> {
    let mut f = line.splitn(6, ' ');
    let (start, end) = f.next()?.split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    let perms = f.next()?;
    if perms.len() != 4 {
        return None;
    }
    let (_offset, _dev, _inode) = (f.next()?, f.next()?, f.next()?);
    Some(Mapping {
        start,
        end,
        perms: perms.to_string(),
        path: f.next().unwrap_or("").trim().to_string(),
        rss: 0,
        pss: 0,
    })
}

/// The kinds of one process's `smaps` text.
pub fn classify(text: &str) -> Kinds {
    let maps = mappings(text);
    let mut k = Kinds::default();
    let mut i = 0;
    while i < maps.len() {
        let m = &maps[i];
        k.pss += m.pss;
        if let Some((count, next)) = arena(&maps, i) {
            k.arena_count += count;
            for m in &maps[i..next] {
                k.arenas += m.rss;
            }
            k.pss += maps[i + 1..next].iter().map(|m| m.pss).sum::<u64>();
            i = next;
            continue;
        }
        let p = m.path.as_str();
        let shm = m.shared()
            && (m.anon()
                || p.starts_with("/dev/shm/")
                || p.starts_with("/SYSV")
                || p.starts_with("/memfd:")
                || p.starts_with("/dev/zero"));
        *match p {
            _ if shm => &mut k.shared,
            "[heap]" => &mut k.heap,
            "[stack]" => &mut k.stacks,
            "" if stack(&maps, i) => &mut k.stacks,
            "" => &mut k.other_anon,
            _ if p.starts_with("[anon") => &mut k.other_anon,
            _ => &mut k.file,
        } += m.rss;
        i += 1;
    }
    k
}

/// A glibc arena heap starting at `maps[i]`: a private anonymous
/// read-write mapping aligned to 64 MiB, with the inaccessible rest of its
/// region after it, together one to four whole regions (two full heaps
/// side by side merge into one mapping). Gives the regions counted and the
/// index after the group.
fn arena(maps: &[Mapping], i: usize) -> Option<(u64, usize)> {
    let m = &maps[i];
    if !m.anon()
        || m.shared()
        || !m.perms.starts_with("rw")
        || !m.start.is_multiple_of(ARENA_REGION)
    {
        return None;
    }
    let mut end = m.end;
    let mut next = i + 1;
    if let Some(rest) = maps.get(i + 1) {
        if rest.anon() && rest.inaccessible() && rest.start == m.end {
            end = rest.end;
            next = i + 2;
        }
    }
    let size = end - m.start;
    (size.is_multiple_of(ARENA_REGION) && (1..=4).contains(&(size / ARENA_REGION)))
        .then_some((size / ARENA_REGION, next))
}

/// A thread's stack: an anonymous read-write mapping just above a small
/// inaccessible guard.
fn stack(maps: &[Mapping], i: usize) -> bool {
    let m = &maps[i];
    i > 0 && m.perms.starts_with("rw") && {
        let g = &maps[i - 1];
        g.anon() && g.inaccessible() && g.end == m.start && g.size() <= GUARD_MAX
    }
}

/// The kinds of one process, from `/proc/PID/smaps` (all 0 when it cannot
/// be read: the process is gone, or not ours to read).
pub fn of_pid(pid: i32) -> Kinds {
    std::fs::read_to_string(format!("/proc/{pid}/smaps"))
        .map(|t| classify(&t))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(start: u64, end: u64, perms: &str, path: &str, rss_kb: u64) -> String {
        format!(
            "{start:x}-{end:x} {perms} 00000000 00:00 0                          {path}\nSize: {} kB\nRss: {rss_kb} kB\nPss: {rss_kb} kB\n",
            (end - start) / 1024
        )
    }

    #[test]
    fn kinds_of_a_glibc_process_with_threads() {
        let a = 0x7f00_0000_0000u64; // 64 MiB aligned
        let text = [
            map(0x55_0000, 0x56_0000, "r-xp", "/usr/bin/node", 40),
            map(0x60_0000, 0x90_0000, "rw-p", "[heap]", 3000),
            // An arena: 5 MiB used of its 64 MiB region.
            map(a, a + (5 << 20), "rw-p", "", 5000),
            map(a + (5 << 20), a + ARENA_REGION, "---p", "", 0),
            // A second, full arena merged with a third's start.
            map(
                a + ARENA_REGION,
                a + 3 * ARENA_REGION - (1 << 20),
                "rw-p",
                "",
                70000,
            ),
            map(
                a + 3 * ARENA_REGION - (1 << 20),
                a + 3 * ARENA_REGION,
                "---p",
                "",
                0,
            ),
            // A thread's stack under its 4 KiB guard.
            map(0x7f10_0000_0000, 0x7f10_0000_1000, "---p", "", 0),
            map(0x7f10_0000_1000, 0x7f10_0080_1000, "rw-p", "", 24),
            // A large malloc of its own.
            map(0x7f20_0010_0000, 0x7f20_0410_0000, "rw-p", "", 65536),
            map(
                0x7f30_0000_0000,
                0x7f30_0100_0000,
                "rw-s",
                "/dev/shm/seg",
                100,
            ),
            map(
                0x7f40_0000_0000,
                0x7f40_0001_0000,
                "r--p",
                "/data/000001.sst",
                64,
            ),
            map(0x7ffc_0000_0000, 0x7ffc_0002_1000, "rw-p", "[stack]", 132),
        ]
        .concat();
        let k = classify(&text);
        assert_eq!(k.heap, 3000 * 1024);
        assert_eq!((k.arenas, k.arena_count), (75000 * 1024, 3));
        assert_eq!(k.stacks, (24 + 132) * 1024);
        assert_eq!(k.other_anon, 65536 * 1024);
        assert_eq!(k.shared, 100 * 1024);
        assert_eq!(k.file, (40 + 64) * 1024);
        assert_eq!(
            k.pss,
            (40 + 3000 + 75000 + 24 + 65536 + 100 + 64 + 132) * 1024
        );
    }

    #[test]
    fn an_aligned_mapping_of_another_size_is_not_an_arena() {
        let a = 0x7f00_0000_0000u64;
        let text = [
            map(a, a + (100 << 20), "rw-p", "", 1000),
            map(a + (100 << 20), a + (101 << 20), "---p", "", 0),
        ]
        .concat();
        let k = classify(&text);
        assert_eq!((k.arenas, k.arena_count, k.other_anon), (0, 0, 1000 * 1024));
    }

    #[test]
    fn this_process_is_read() {
        let k = of_pid(std::process::id() as i32);
        assert!(k.file > 0, "{k:?}");
        assert!(k.pss > 0, "{k:?}");
    }
}
