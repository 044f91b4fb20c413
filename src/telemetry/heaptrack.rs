//! heaptrack's record of a node's allocations (`memory: { profile:
//! heaptrack }`): Debian's `libheaptrack_preload.so` is put first in the
//! node's `LD_PRELOAD` and writes every allocation and free of the
//! process soak starts to `profile/heaptrack.raw.PID`, whatever allocator
//! the cell runs. Once the node is down, soak passes each raw file through
//! heaptrack's own `heaptrack_interpret` (which symbolizes it), keeps the
//! result as `heaptrack.PROGRAM.PID.gz` for `heaptrack_print` and
//! `heaptrack_gui`, and reads it as it goes: the live bytes of each call
//! stack at the end of the process's warm-up and at its end.
//!
//! heaptrack follows neither `fork` nor `exec`: its library takes itself
//! out of the environment once loaded, so a node started through a shell
//! that `exec`s it is recorded as the shell. The summary says so.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::model::{GrowingStack, ProfileSummary};

pub const PRELOAD: &str = "/usr/lib/heaptrack/libheaptrack_preload.so";
pub const INTERPRET: &str = "/usr/lib/heaptrack/libexec/heaptrack_interpret";

/// Both of heaptrack's parts soak uses are here, or the install command.
pub fn installed() -> Result<(), String> {
    for p in [PRELOAD, INTERPRET] {
        if !Path::new(p).exists() {
            return Err(format!(
                "memory.profile: heaptrack needs {p}, which is not installed: apt-get install heaptrack"
            ));
        }
    }
    Ok(())
}

/// `DUMP_HEAPTRACK_OUTPUT`: one raw file per process (`$$` is its pid).
pub fn output(dir: &Path) -> String {
    format!("{}/heaptrack.raw.$$", dir.display())
}

/// The raw files in `dir`, by pid.
fn raw_files(dir: &Path) -> Vec<(i32, PathBuf)> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return vec![];
    };
    let mut v: Vec<(i32, PathBuf)> = rd
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let pid = name.strip_prefix("heaptrack.raw.")?.parse().ok()?;
            Some((pid, e.path()))
        })
        .collect();
    v.sort();
    v
}

/// One instruction pointer, symbolized by `heaptrack_interpret`: its
/// function, file and line, then the functions inlined into it.
#[derive(Debug, Default, Clone)]
struct Ip {
    module: usize,
    frames: Vec<(usize, usize, u32)>,
}

/// What one process's interpreted record holds, read in one pass.
#[derive(Debug, Default)]
pub struct Record {
    /// The program (heaptrack's `X` line: its command line).
    pub command: String,
    strings: Vec<String>,
    ips: Vec<Ip>,
    /// Per trace: its instruction pointer and its parent trace (0: none).
    traces: Vec<(usize, usize)>,
    /// Per allocation kind: its size and trace.
    kinds: Vec<(u64, usize)>,
    live: Vec<i64>,
    /// Live bytes per trace at the first timestamp at or past `base_ms`.
    base: Option<HashMap<usize, i64>>,
    pub base_ms: u64,
    pub end_ms: u64,
}

impl Record {
    fn live_by_trace(&self) -> HashMap<usize, i64> {
        let mut m: HashMap<usize, i64> = HashMap::new();
        for (k, n) in self.live.iter().enumerate() {
            if *n != 0 {
                let (size, trace) = self.kinds[k];
                *m.entry(trace).or_default() += *n * size as i64;
            }
        }
        m
    }

    fn string(&self, i: usize) -> &str {
        i.checked_sub(1)
            .and_then(|i| self.strings.get(i))
            .map_or("??", |s| s.as_str())
    }

    /// `function (file:line)` per frame of a trace, innermost first.
    fn frames(&self, mut trace: usize) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(&(ip, parent)) = trace.checked_sub(1).and_then(|t| self.traces.get(t)) {
            match ip.checked_sub(1).and_then(|i| self.ips.get(i)) {
                Some(ip) if !ip.frames.is_empty() => {
                    for &(f, file, line) in &ip.frames {
                        let file = self.string(file).rsplit('/').next().unwrap_or("??");
                        out.push(match file {
                            "??" => self.string(f).to_string(),
                            _ => format!("{} ({file}:{line})", self.string(f)),
                        });
                    }
                }
                Some(ip) => out.push(format!(
                    "?? ({})",
                    self.string(ip.module).rsplit('/').next().unwrap_or("??")
                )),
                None => out.push("??".into()),
            }
            if parent >= trace {
                break;
            }
            trace = parent;
        }
        out
    }
}

fn hex(s: Option<&str>) -> Result<u64, String> {
    let s = s.ok_or("a field is missing")?;
    u64::from_str_radix(s, 16).map_err(|_| format!("`{s}` is not a hex number"))
}

/// Reads an interpreted record, keeping the live bytes per trace as they
/// were `base_ms` into the process and at its end. Memory is bounded by
/// the distinct stacks and sizes, not by the number of allocations.
pub fn read(input: impl BufRead, base_ms: u64) -> Result<Record, String> {
    let mut r = Record {
        base_ms,
        ..Record::default()
    };
    for (n, line) in input.lines().enumerate() {
        let line = line.map_err(|e| e.to_string())?;
        let at = |e: String| format!("line {}: {e}: {line}", n + 1);
        let (mode, rest) = line.split_at(line.len().min(1));
        let rest = rest.trim_start();
        let mut f = rest.split(' ');
        match mode {
            "s" => {
                // `s LEN TEXT`: the length in hex, then the string.
                let (_, text) = rest.split_once(' ').unwrap_or(("", ""));
                r.strings.push(text.to_string());
            }
            "i" => {
                let _ip = hex(f.next()).map_err(at)?;
                let module = hex(f.next()).map_err(at)? as usize;
                let rest: Vec<u64> = f
                    .map(|x| hex(Some(x)))
                    .collect::<Result<_, _>>()
                    .map_err(at)?;
                let mut frames = Vec::new();
                if let Some(&func) = rest.first() {
                    let (file, line) = (
                        rest.get(1).copied().unwrap_or(0),
                        rest.get(2).copied().unwrap_or(0),
                    );
                    frames.push((func as usize, file as usize, line as u32));
                    for c in rest.get(3..).unwrap_or_default().chunks(3) {
                        if let [func, file, line] = c {
                            frames.push((*func as usize, *file as usize, *line as u32));
                        }
                    }
                }
                r.ips.push(Ip { module, frames });
            }
            "t" => {
                let ip = hex(f.next()).map_err(at)? as usize;
                let parent = hex(f.next()).map_err(at)? as usize;
                r.traces.push((ip, parent));
            }
            "a" => {
                let size = hex(f.next()).map_err(at)?;
                let trace = hex(f.next()).map_err(at)? as usize;
                r.kinds.push((size, trace));
                r.live.push(0);
            }
            "+" | "-" => {
                let k = hex(f.next()).map_err(at)? as usize;
                let n = r
                    .live
                    .get_mut(k)
                    .ok_or_else(|| at(format!("allocation {k} was never described")))?;
                *n += if mode == "+" { 1 } else { -1 };
            }
            "c" => {
                let t = hex(f.next()).map_err(at)?;
                if r.base.is_none() && t >= base_ms {
                    r.base = Some(r.live_by_trace());
                }
                r.end_ms = r.end_ms.max(t);
            }
            "X" => r.command = rest.to_string(),
            "v" if n == 0 => {}
            _ if n == 0 => {
                return Err(format!(
                    "not a heaptrack record (its first line is `{}`)",
                    line.chars().take(40).collect::<String>()
                ))
            }
            _ => {}
        }
    }
    Ok(r)
}

/// The `n` stacks whose live bytes grew most from the base to the end:
/// (frames, live bytes at the end, growth).
pub fn growing(r: &Record, n: usize) -> Vec<(Vec<String>, i64, i64)> {
    let empty = HashMap::new();
    let base = r.base.as_ref().unwrap_or(&empty);
    let end = r.live_by_trace();
    let mut by_stack: HashMap<Vec<String>, (i64, i64)> = HashMap::new();
    for (trace, live) in &end {
        let grew = live - base.get(trace).copied().unwrap_or(0);
        if grew <= 0 {
            continue;
        }
        let frames = crate::telemetry::jeprof::without_plumbing(r.frames(*trace));
        let e = by_stack
            .entry(frames.into_iter().take(8).collect())
            .or_default();
        e.0 += live;
        e.1 += grew;
    }
    let mut v: Vec<(Vec<String>, i64, i64)> =
        by_stack.into_iter().map(|(f, (l, g))| (f, l, g)).collect();
    v.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
    v.truncate(n);
    v
}

/// Interprets each raw file of `dir` into `heaptrack.PROGRAM.PID.gz`
/// (removing the raw file), and summarizes the process `pid` (else the
/// newest): its stacks grown most from the end of its warm-up.
pub fn summarize(
    dir: &Path,
    cell_dir: &Path,
    pid: Option<i32>,
    started: &HashMap<i32, SystemTime>,
    warmup: Duration,
) -> ProfileSummary {
    let mut s = ProfileSummary {
        tool: "heaptrack".into(),
        ..ProfileSummary::default()
    };
    let raws = raw_files(dir);
    let chosen = pid
        .filter(|p| raws.iter().any(|(r, _)| r == p))
        .or_else(|| {
            raws.iter()
                .max_by_key(|(_, f)| std::fs::metadata(f).and_then(|m| m.modified()).ok())
                .map(|(p, _)| *p)
        });
    let Some(chosen) = chosen else {
        s.note = Some(format!(
            "the node wrote no heaptrack record into {}: it never loaded {PRELOAD} (a static binary, or a runtime that does not call malloc through the dynamic linker, such as Go's, does not)",
            dir.display()
        ));
        return s;
    };
    let base_ms = if started.contains_key(&chosen) {
        warmup.as_millis() as u64
    } else {
        0
    };
    for (p, raw) in &raws {
        match interpret(raw, *p, if *p == chosen { base_ms } else { u64::MAX }) {
            Ok((kept, r)) if *p == chosen => {
                let rel = kept
                    .strip_prefix(cell_dir)
                    .unwrap_or(&kept)
                    .display()
                    .to_string();
                fill(&mut s, &r, rel);
            }
            Ok(_) => {}
            Err(e) if *p == chosen => s.note = Some(format!("{}: {e}", raw.display())),
            Err(_) => {}
        }
    }
    s
}

fn fill(s: &mut ProfileSummary, r: &Record, kept: String) {
    let from = r.base.as_ref().map_or(r.end_ms, |_| r.base_ms);
    s.seconds = r.end_ms.saturating_sub(from) as f64 / 1000.0;
    s.base = Some(kept.clone());
    s.last = Some(kept);
    if r.base.is_none() {
        s.note = Some(format!(
            "the process ran {:.1} s, not past its warm-up of {:.1} s: nothing to compare (`{}`)",
            r.end_ms as f64 / 1000.0,
            r.base_ms as f64 / 1000.0,
            r.command
        ));
        return;
    }
    let hours = s.seconds / 3600.0;
    s.growing = growing(r, 10)
        .into_iter()
        .map(|(frames, live, grew)| GrowingStack {
            frames,
            live_bytes: live.max(0) as u64,
            growth_bytes: grew,
            growth_bytes_per_hour: (hours > 0.0).then(|| grew as f64 / hours),
        })
        .collect();
    if s.growing.is_empty() {
        s.note = Some(format!(
            "no call stack of `{}` holds more live bytes at its end than after its warm-up",
            r.command
        ));
    }
}

/// Runs `heaptrack_interpret` on one raw file, writing its output gzipped
/// beside it and reading it as it comes.
fn interpret(raw: &Path, pid: i32, base_ms: u64) -> Result<(PathBuf, Record), String> {
    let mut child = std::process::Command::new(INTERPRET)
        .stdin(std::fs::File::open(raw).map_err(|e| e.to_string())?)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run {INTERPRET}: {e}"))?;
    let dir = raw.parent().unwrap_or(Path::new("."));
    let part = dir.join(format!("heaptrack.{pid}.gz.part"));
    let out = std::fs::File::create(&part).map_err(|e| e.to_string())?;
    let stdout = child.stdout.take().expect("piped");
    let tee = Tee {
        inner: std::io::BufReader::new(stdout),
        copy: flate2::write::GzEncoder::new(out, flate2::Compression::fast()),
    };
    let mut reader = std::io::BufReader::new(tee);
    let record = read(&mut reader, base_ms);
    let tee = reader.into_inner();
    let status = child.wait().map_err(|e| e.to_string())?;
    tee.copy
        .finish()
        .and_then(|mut f| f.flush())
        .map_err(|e| e.to_string())?;
    let record = match (record, status.success()) {
        (Ok(r), true) => r,
        (Err(e), _) => {
            let _ = std::fs::remove_file(&part);
            return Err(e);
        }
        (Ok(_), false) => {
            let _ = std::fs::remove_file(&part);
            return Err(format!("heaptrack_interpret ended with {status}"));
        }
    };
    let program = record
        .command
        .split(' ')
        .next()
        .and_then(|p| p.rsplit('/').next())
        .filter(|p| !p.is_empty())
        .unwrap_or("node")
        .to_string();
    let kept = dir.join(format!("heaptrack.{program}.{pid}.gz"));
    std::fs::rename(&part, &kept).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(raw);
    Ok((kept, record))
}

/// Reads through `inner`, copying every byte read into `copy`.
struct Tee<R, W> {
    inner: R,
    copy: W,
}

impl<R: std::io::Read, W: Write> std::io::Read for Tee<R, W> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.copy.write_all(&buf[..n])?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// heaptrack_interpret's output, cut down: `keep` (traces 2) keeps its
    /// 4 KiB blocks, `churn` (trace 3) frees each at once.
    const RECORD: &str = "v 10400 3
X ./node leak
s 6 ./node
s 4 main
s 6 node.c
s 4 keep
s 5 churn
i 1000 1 2 3 10
t 1 0
i 1010 1 4 3 20
t 2 1
i 1020 1 5 3 30
t 3 1
a 1000 2
a 1000 3
c 0
+ 0
+ 1
- 1
c 3e8
+ 0
+ 1
- 1
+ 0
c 7d0
";

    #[test]
    fn live_bytes_are_compared_from_the_end_of_warm_up() {
        let r = read(RECORD.as_bytes(), 1000).unwrap();
        assert_eq!(r.command, "./node leak");
        let g = growing(&r, 5);
        assert_eq!(g.len(), 1, "{g:?}");
        assert_eq!(g[0].0, ["keep (node.c:32)", "main (node.c:16)"]);
        // 3 blocks live at the end, 1 at 1 s: 2 blocks grown.
        assert_eq!((g[0].1, g[0].2), (3 * 4096, 2 * 4096));
        assert_eq!(r.end_ms, 2000);
    }

    #[test]
    fn what_is_not_a_record_is_refused_at_its_line() {
        let e = read("heap_v2/524288\n".as_bytes(), 0).unwrap_err();
        assert!(e.contains("not a heaptrack record"), "{e}");
        let e = read("v 10400 3\n+ 5\n".as_bytes(), 0).unwrap_err();
        assert!(
            e.contains("line 2: allocation 5 was never described"),
            "{e}"
        );
    }
}
