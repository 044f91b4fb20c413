//! The cell's long series files (`samples.csv.gz`, `metrics.csv.gz`): CSV
//! written line by line through gzip, so a day of samples stays small and
//! any tool reads it (`zcat`, `pandas.read_csv`, `duckdb`).
//!
//! The stream is flushed (a deflate sync flush: whole bytes up to there,
//! the dictionary kept) at most once a second, so a soak killed mid-run
//! leaves a file whose every line up to the last second decodes; reading
//! it back stops at the cut and leaves out the one line it split.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use flate2::write::GzEncoder;
use flate2::Compression;

/// How long written lines may wait in the compressor.
const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// A gzip-compressed CSV file being written.
pub struct Writer {
    out: GzEncoder<File>,
    flushed: Instant,
}

impl Writer {
    /// Creates the file and writes its header line.
    pub fn create(path: &Path, header: &str) -> io::Result<Writer> {
        let mut w = Writer {
            out: GzEncoder::new(File::create(path)?, Compression::default()),
            flushed: Instant::now(),
        };
        w.line(header)?;
        w.flush()?;
        Ok(w)
    }

    /// Writes one line (without its newline).
    pub fn line(&mut self, line: &str) -> io::Result<()> {
        self.out.write_all(line.as_bytes())?;
        self.out.write_all(b"\n")?;
        if self.flushed.elapsed() >= FLUSH_EVERY {
            self.flush()?;
        }
        Ok(())
    }

    /// Makes every line written so far readable from the file.
    pub fn flush(&mut self) -> io::Result<()> {
        self.flushed = Instant::now();
        self.out.flush()
    }

    /// Ends the stream (gzip's trailer).
    pub fn finish(self) -> io::Result<()> {
        self.out.finish()?.sync_data()
    }
}

/// The lines of a file, `.gz` or plain. A compressed stream cut short (its
/// writer was killed) ends at its last whole line.
pub fn lines(path: &Path) -> io::Result<Lines> {
    let file = File::open(path)?;
    let read: Box<dyn BufRead> = if path.extension().is_some_and(|e| e == "gz") {
        Box::new(BufReader::new(flate2::read::MultiGzDecoder::new(file)))
    } else {
        Box::new(BufReader::new(file))
    };
    Ok(Lines {
        read,
        buf: vec![],
        done: false,
    })
}

/// The whole text of a file, `.gz` or plain (see [`lines`]).
pub fn read_to_string(path: &Path) -> io::Result<String> {
    Ok(lines(path)?.fold(String::new(), |mut s, l| {
        s.push_str(&l);
        s.push('\n');
        s
    }))
}

/// Lines of a file (see [`lines`]).
pub struct Lines {
    read: Box<dyn BufRead>,
    buf: Vec<u8>,
    done: bool,
}

impl Iterator for Lines {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        if self.done {
            return None;
        }
        self.buf.clear();
        match self.read.read_until(b'\n', &mut self.buf) {
            Ok(0) | Err(_) => {
                // An error is a compressed stream cut short: what it held
                // of the line it split is left out.
                self.done = true;
                None
            }
            Ok(_) => {
                if self.buf.ends_with(b"\n") {
                    self.buf.pop();
                }
                if self.buf.ends_with(b"\r") {
                    self.buf.pop();
                }
                Some(String::from_utf8_lossy(&self.buf).into_owned())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_reads_back_whole_and_through_gzip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.csv.gz");
        let mut w = Writer::create(&path, "t_s,v").unwrap();
        for i in 0..1000 {
            w.line(&format!("{i},{}", i * i)).unwrap();
        }
        w.finish().unwrap();
        let back: Vec<String> = lines(&path).unwrap().collect();
        assert_eq!(back.len(), 1001);
        assert_eq!(back[0], "t_s,v");
        assert_eq!(back[1000], "999,998001");
        let zcat = std::process::Command::new("gzip")
            .args(["-dc"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(zcat.status.success());
        assert_eq!(
            String::from_utf8(zcat.stdout).unwrap().lines().count(),
            1001
        );
        // Plain files read the same way, a last line without its newline
        // included.
        let plain = dir.path().join("x.csv");
        std::fs::write(&plain, "a\r\nb\nc").unwrap();
        assert_eq!(lines(&plain).unwrap().collect::<Vec<_>>(), ["a", "b", "c"]);
    }

    #[test]
    fn a_writer_killed_mid_stream_leaves_every_flushed_line_readable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.csv.gz");
        let mut w = Writer::create(&path, "t_s,v").unwrap();
        for i in 0..500 {
            w.line(&format!("{i},{i}")).unwrap();
        }
        w.flush().unwrap();
        let flushed = std::fs::metadata(&path).unwrap().len();
        for i in 500..100_000 {
            w.line(&format!("{i},{i}")).unwrap();
        }
        // The writer never finishes (a killed soak): what the file holds
        // is up to the flush, and part of what followed.
        std::mem::forget(w);
        let whole = std::fs::read(&path).unwrap();
        assert!(whole.len() as u64 > flushed);
        for cut in [flushed as usize, flushed as usize + 1, whole.len() - 3] {
            std::fs::write(dir.path().join("cut.csv.gz"), &whole[..cut]).unwrap();
            let back: Vec<String> = lines(&dir.path().join("cut.csv.gz")).unwrap().collect();
            assert!(back.len() > 500, "{cut}: {}", back.len());
            for (i, l) in back.iter().skip(1).enumerate() {
                assert_eq!(*l, format!("{i},{i}"), "cut at {cut}");
            }
        }
    }
}
