//! What the node said about its own trouble: the lines of its log that
//! read as errors, distinct, so that a report can show "No space left on
//! device" beside the disk check that the node's own words explain; and
//! among them the node's own out-of-memory errors (a JVM's
//! `OutOfMemoryError` of any kind, an allocation failure of Rust, Go or
//! C++), which leave the process running as often as not and so are a
//! failure no kernel counter shows.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::sync::LazyLock;

use regex::Regex;

use crate::model::LogLine;

/// Words that mark a line as an error in the logs of the usual nodes
/// (RocksDB's `[ERROR]`, Redis's `# Error`, Java's exceptions, Rust's
/// panics, the C library's `strerror` texts, Java's `...Error` and
/// `...Exception` class names).
static ERROR: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(error|errors|panic|panicked|fatal|failed|failure|exception|no space left|corrupt(ion|ed)?)\b|(?-i:[a-z](Error|Exception))\b")
        .expect("a valid regex")
});

/// A node's own words for running out of memory: the JVM's
/// `OutOfMemoryError` (heap, direct buffer memory, metaspace, native
/// threads), Netty's `OutOfDirectMemoryError`, Rust's "memory allocation
/// of N bytes failed", Go's "runtime: out of memory", C++'s
/// `std::bad_alloc`, and `ENOMEM`'s text.
static OUT_OF_MEMORY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"OutOfMemoryError|OutOfDirectMemoryError|memory allocation of \d+ bytes failed|(?i:\bout of memory\b)|bad_alloc|Cannot allocate memory")
        .expect("a valid regex")
});

/// How much of a log is read: a node that logs gigabytes still gets a
/// report in seconds, its first errors shown.
const MAX_BYTES: u64 = 256 << 20;

/// Longest line kept; the rest is cut with an ellipsis.
const MAX_LINE: usize = 300;

/// What a node's log says of its trouble, read in one pass: the first
/// distinct error lines and the first distinct out-of-memory errors, each
/// with how often it (or a line differing only in its numbers) came.
#[derive(Debug, Default)]
pub struct Said {
    pub errors: Vec<LogLine>,
    pub out_of_memory: Vec<LogLine>,
}

/// Reads the log at `path` once, keeping at most `max_errors` distinct
/// error lines and `max_oom` distinct out-of-memory errors.
pub fn read(path: &Path, max_errors: usize, max_oom: usize) -> Said {
    let Ok(f) = std::fs::File::open(path) else {
        return Said::default();
    };
    let mut errors = Distinct::new(max_errors);
    let mut oom = Distinct::new(max_oom);
    let reader = BufReader::new(std::io::Read::take(f, MAX_BYTES));
    for line in reader.split(b'\n').map_while(Result::ok) {
        let line = String::from_utf8_lossy(&line);
        let line = line.trim();
        if ERROR.is_match(line) {
            errors.add(line);
        }
        if OUT_OF_MEMORY.is_match(line) {
            oom.add(line);
        }
    }
    Said {
        errors: errors.lines(),
        out_of_memory: oom.lines(),
    }
}

/// Lines distinct up to their numbers, the first `max` of them kept, each
/// counted.
struct Distinct {
    max: usize,
    seen: Vec<(String, LogLine)>,
}

impl Distinct {
    fn new(max: usize) -> Distinct {
        Distinct { max, seen: vec![] }
    }

    fn add(&mut self, line: &str) {
        let key = shape(line);
        if let Some((_, seen)) = self.seen.iter_mut().find(|(k, _)| *k == key) {
            seen.count += 1;
        } else if self.seen.len() < self.max {
            self.seen.push((
                key,
                LogLine {
                    line: cut(line),
                    count: 1,
                },
            ));
        }
    }

    fn lines(self) -> Vec<LogLine> {
        self.seen.into_iter().map(|(_, l)| l).collect()
    }
}

/// The line with every run of digits as one `#`: the same error at
/// another time, file number or offset is the same error.
fn shape(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_digits = false;
    for c in line.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('#');
            }
            in_digits = true;
        } else {
            out.push(c);
            in_digits = false;
        }
    }
    out
}

fn cut(line: &str) -> String {
    match line.char_indices().nth(MAX_LINE) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None => line.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_lines_are_distinct_up_to_their_numbers_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("node.log");
        std::fs::write(
            &log,
            "ready on 6379\n\
             2026/12/01-18:44:41 [WARN] Background IO error: No space left on device: 000073.sst\n\
             GET 17 ok\n\
             2026/12/01-18:44:42 [WARN] Background IO error: No space left on device: 000074.sst\n\
             thread 'main' panicked at src/main.rs:3:5\n\
             terrorize is not a word of ours\n",
        )
        .unwrap();
        let lines = read(&log, 8, 0).errors;
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].line.ends_with("000073.sst"));
        assert_eq!(lines[0].count, 2);
        assert!(lines[1].line.contains("panicked"));
        assert_eq!(read(&log, 1, 0).errors.len(), 1);
        assert!(read(&dir.path().join("none.log"), 8, 8).errors.is_empty());
    }

    #[test]
    fn out_of_memory_errors_are_found_whatever_the_language() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("node.log");
        std::fs::write(
            &log,
            "NettyKv: connection /127.0.0.1:39370 closed: java.lang.OutOfMemoryError: Cannot reserve 4194304 bytes of direct buffer memory (allocated: 201326593, limit: 201326592)\n\
             \tat java.base/java.nio.Bits.reserveMemory(Bits.java:178)\n\
             NettyKv: connection /127.0.0.1:39372 closed: java.lang.OutOfMemoryError: Cannot reserve 4194304 bytes of direct buffer memory (allocated: 201326593, limit: 201326592)\n\
             memory allocation of 1048576 bytes failed\n\
             fatal error: runtime: out of memory\n\
             terminate called after throwing an instance of 'std::bad_alloc'\n\
             evicted 3 keys: maxmemory reached\n",
        )
        .unwrap();
        let oom = read(&log, 0, 8).out_of_memory;
        assert_eq!(oom.len(), 4, "{oom:?}");
        assert_eq!(oom[0].count, 2);
        assert!(oom[0].line.contains("Cannot reserve 4194304 bytes"));
        // The JVM's error reads as an error too, though no word of it is
        // "error" on its own.
        assert!(read(&log, 8, 0).errors[0].line.contains("OutOfMemoryError"));
    }

    #[test]
    fn a_long_line_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("node.log");
        std::fs::write(&log, format!("error: {}\n", "é".repeat(1000))).unwrap();
        let l = &read(&log, 8, 0).errors[0];
        assert_eq!(l.line.chars().count(), MAX_LINE + 1);
    }
}
