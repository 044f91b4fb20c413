//! The JVM's own account of its memory: Native Memory Tracking's
//! categories (Java Heap, Class, Thread, Code, GC, Internal, Other where
//! direct buffers go, Arena, ...), read from a running JVM through
//! HotSpot's attach mechanism, as `jcmd PID VM.native_memory summary`
//! does, without starting a JVM to ask (a `jcmd` costs a second of CPU).
//!
//! soak turns tracking on by adding `-XX:NativeMemoryTracking=summary` to
//! the node's `JAVA_TOOL_OPTIONS` (`memory: { jvm: nmt }`). What RSS holds
//! beyond the JVM's committed total is native memory outside its account
//! (RocksDB's, glibc's arenas).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The JVM flag that turns tracking on.
pub const FLAG: &str = "-XX:NativeMemoryTracking=summary";

/// The node's environment with tracking on: the flag appended to
/// `JAVA_TOOL_OPTIONS`.
pub fn with_flag(env: &mut Vec<(String, String)>) {
    match env.iter_mut().find(|(k, _)| k == "JAVA_TOOL_OPTIONS") {
        Some((_, v)) if v.contains("NativeMemoryTracking") => {}
        Some((_, v)) => *v = format!("{v} {FLAG}"),
        None => env.push(("JAVA_TOOL_OPTIONS".into(), FLAG.into())),
    }
}

/// Whether a process is a HotSpot JVM (it maps `libjvm.so`): only then
/// is it sent the SIGQUIT that starts its attach listener (any other
/// process would die of it).
pub fn is_jvm(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .is_ok_and(|m| m.lines().any(|l| l.ends_with("/libjvm.so")))
}

/// The first JVM among `pids`.
pub fn find_jvm(pids: &[i32]) -> Option<i32> {
    pids.iter().copied().find(|p| is_jvm(*p))
}

/// The pid a process has in its own pid namespace (a container's JVM
/// names its socket after that one), from `/proc/PID/status`.
fn ns_pid(pid: i32) -> i32 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            let l = s.lines().find(|l| l.starts_with("NSpid:"))?;
            l.split_whitespace().last()?.parse().ok()
        })
        .unwrap_or(pid)
}

/// Runs one diagnostic command (`VM.native_memory summary`) in the JVM
/// `pid` and returns its output; starts the JVM's attach listener first
/// when it has none.
pub fn jcmd(pid: i32, command: &str, timeout: Duration) -> Result<String, String> {
    let inner = ns_pid(pid);
    let root = PathBuf::from(format!("/proc/{pid}/root/tmp"));
    let socket = root.join(format!(".java_pid{inner}"));
    if !socket.exists() {
        start_listener(pid, inner, &socket, timeout)?;
    }
    let mut s = UnixStream::connect(&socket)
        .map_err(|e| format!("cannot connect to {}: {e}", socket.display()))?;
    s.set_read_timeout(Some(timeout)).ok();
    s.set_write_timeout(Some(timeout)).ok();
    // Protocol 1: version, command and three arguments, each ended by NUL.
    let request = format!("1\0jcmd\0{command}\0\0\0");
    s.write_all(request.as_bytes())
        .map_err(|e| format!("attach request: {e}"))?;
    let mut out = String::new();
    s.read_to_string(&mut out)
        .map_err(|e| format!("attach reply: {e}"))?;
    let (code, body) = out.split_once('\n').unwrap_or((out.as_str(), ""));
    match code.trim() {
        "0" => Ok(body.to_string()),
        c => Err(format!(
            "the JVM refused `{command}` ({c}): {}",
            body.trim()
        )),
    }
}

/// HotSpot starts its attach listener on a SIGQUIT when the file
/// `.attach_pidN` exists in its working directory or `/tmp`.
fn start_listener(
    pid: i32,
    inner: i32,
    socket: &std::path::Path,
    timeout: Duration,
) -> Result<(), String> {
    if !is_jvm(pid) {
        return Err(format!(
            "process {pid} is not a HotSpot JVM (no libjvm.so mapped)"
        ));
    }
    let trigger = PathBuf::from(format!("/proc/{pid}/cwd/.attach_pid{inner}"));
    let trigger = match std::fs::write(&trigger, b"") {
        Ok(()) => trigger,
        Err(_) => {
            let t = PathBuf::from(format!("/proc/{pid}/root/tmp/.attach_pid{inner}"));
            std::fs::write(&t, b"").map_err(|e| format!("{}: {e}", t.display()))?;
            t
        }
    };
    // SAFETY: kill has no memory preconditions; the pid is a JVM's.
    unsafe { libc::kill(pid, libc::SIGQUIT) };
    let until = Instant::now() + timeout;
    while !socket.exists() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::fs::remove_file(&trigger);
    if socket.exists() {
        Ok(())
    } else {
        Err(format!(
            "the JVM {pid} did not start its attach listener within {timeout:?} (run with -XX:+DisableAttachMechanism?)"
        ))
    }
}

/// One category of the summary: its name and committed bytes.
pub type Category = (String, u64);

/// The categories of a `VM.native_memory summary`, and its committed
/// total; an error when tracking is off.
pub fn parse(text: &str) -> Result<(u64, Vec<Category>), String> {
    if text.contains("Native memory tracking is not enabled") {
        return Err(format!(
            "Native Memory Tracking is off in the JVM: start it with {FLAG} (`memory: {{ jvm: nmt }}` adds it to JAVA_TOOL_OPTIONS)"
        ));
    }
    let committed = |l: &str| -> Option<u64> {
        let v = l.split("committed=").nth(1)?;
        let n: String = v.chars().take_while(|c| c.is_ascii_digit()).collect();
        let n: u64 = n.parse().ok()?;
        let unit = &v[n.to_string().len()..];
        Some(match unit {
            u if u.starts_with("KB") => n << 10,
            u if u.starts_with("MB") => n << 20,
            u if u.starts_with("GB") => n << 30,
            _ => n,
        })
    };
    let total = text
        .lines()
        .find(|l| l.trim_start().starts_with("Total:"))
        .and_then(committed)
        .ok_or_else(|| "not a Native Memory Tracking summary (no `Total:` line)".to_string())?;
    let cats = text
        .lines()
        .filter_map(|l| {
            let rest = l.trim_start().strip_prefix('-')?;
            let (name, figures) = rest.split_once('(')?;
            Some((name.trim().to_string(), committed(figures)?))
        })
        .collect();
    Ok((total, cats))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUMMARY: &str = "
Native Memory Tracking:

(Omitting categories weighting less than 1KB)

Total: reserved=1463413KB, committed=93945KB
       malloc: 20049KB #23170
       mmap:   reserved=1443364KB, committed=73896KB

-                 Java Heap (reserved=262144KB, committed=16384KB)
                            (mmap: reserved=262144KB, committed=16384KB) 
 
-                     Class (reserved=1048680KB, committed=360KB)
                            (classes #565)
-                    Thread (reserved=17486KB, committed=721KB)
-                     Other (reserved=10240KB, committed=10240KB)
                            (malloc=10240KB #10) 
";

    #[test]
    fn a_summary_is_read_by_category() {
        let (total, cats) = parse(SUMMARY).unwrap();
        assert_eq!(total, 93945 << 10);
        assert_eq!(cats.len(), 4);
        assert_eq!(cats[0], ("Java Heap".to_string(), 16384 << 10));
        assert_eq!(cats[3], ("Other".to_string(), 10240 << 10));
        let off = parse("Native memory tracking is not enabled\n").unwrap_err();
        assert!(off.contains(FLAG), "{off}");
    }

    #[test]
    fn the_flag_joins_the_tool_options() {
        let mut env = vec![("JAVA_TOOL_OPTIONS".to_string(), "-Xmx1g".to_string())];
        with_flag(&mut env);
        assert_eq!(env[0].1, format!("-Xmx1g {FLAG}"));
        let mut none = vec![];
        with_flag(&mut none);
        assert_eq!(
            none,
            vec![("JAVA_TOOL_OPTIONS".to_string(), FLAG.to_string())]
        );
    }

    #[test]
    fn this_process_is_not_a_jvm() {
        assert!(!is_jvm(std::process::id() as i32));
        let e = jcmd(
            std::process::id() as i32,
            "VM.version",
            Duration::from_millis(50),
        );
        assert!(e.unwrap_err().contains("not a HotSpot JVM"));
    }
}

/// One reading of the JVM's account.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    /// Seconds since the cell started, and the node's incarnation.
    pub t: f64,
    pub segment: u32,
    /// The JVM's RSS at the reading, and the committed total NMT accounts.
    pub rss: u64,
    pub total: u64,
    pub categories: Vec<Category>,
}

/// At most this many readings are kept in memory (every other one is let
/// go when full; `nmt.csv.gz` has them all).
const KEEP: usize = 4096;

/// Reads the account every `every` while the node runs, into `nmt.csv.gz`.
pub struct Watch {
    stop: tokio::sync::watch::Sender<bool>,
    handle: tokio::task::JoinHandle<(Vec<Reading>, Option<String>)>,
}

/// The header of `nmt.csv.gz`: one row per category per reading, and the
/// rows `Total` (NMT's committed total) and `RSS` (the JVM's).
pub const HEADER: &str = "t_s,segment,category,committed_bytes";

impl Watch {
    pub fn start(
        target: super::Target,
        every: Duration,
        csv: PathBuf,
        origin: tokio::time::Instant,
    ) -> std::io::Result<Watch> {
        let mut file = crate::gzcsv::Writer::create(&csv, HEADER)?;
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let handle = tokio::spawn(async move {
            let (mut kept, mut error): (Vec<Reading>, Option<String>) = (vec![], None);
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = stopped.changed() => break,
                    _ = tick.tick() => {
                        let target = target.clone();
                        let t = origin.elapsed().as_secs_f64();
                        let read = tokio::task::spawn_blocking(move || read(&target, t)).await;
                        match read {
                            Ok(Ok(Some(r))) => {
                                for (c, b) in r.categories.iter().chain([
                                    &("Total".to_string(), r.total),
                                    &("RSS".to_string(), r.rss),
                                ]) {
                                    let _ = file.line(&format!("{:.3},{},{},{b}", r.t, r.segment, c.replace(',', " ")));
                                }
                                kept.push(r);
                                if kept.len() >= KEEP {
                                    kept = kept.into_iter().step_by(2).collect();
                                }
                            }
                            Ok(Ok(None)) => {}
                            Ok(Err(e)) => error = Some(e),
                            Err(_) => {}
                        }
                    }
                }
            }
            let _ = file.finish();
            (kept, error)
        });
        Ok(Watch { stop, handle })
    }

    /// The readings kept, and the last error of a reading that failed.
    pub async fn stop(self) -> (Vec<Reading>, Option<String>) {
        let _ = self.stop.send(true);
        self.handle.await.unwrap_or_default()
    }
}

/// One reading of the node's JVM; none while the node is down.
fn read(target: &super::Target, t: f64) -> Result<Option<Reading>, String> {
    use std::sync::atomic::Ordering::Relaxed;
    let pid = target.pid.load(Relaxed);
    if pid <= 0 {
        return Ok(None);
    }
    let pids = match &target.cgroup {
        Some(cg) => cg.procs(),
        None => super::process_tree(pid),
    };
    let Some(jvm) = find_jvm(&pids) else {
        return Err(format!(
            "memory.jvm: none of the node's processes ({}) is a HotSpot JVM",
            pids.iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    };
    let text = jcmd(jvm, "VM.native_memory summary", Duration::from_secs(5))?;
    let (total, categories) = parse(&text)?;
    Ok(Some(Reading {
        t,
        segment: target.segment.load(Relaxed),
        rss: super::rss_of(jvm),
        total,
        categories,
    }))
}
