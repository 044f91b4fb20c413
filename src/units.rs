//! Human units: sizes (`256MiB`), durations (`90s`), rates (`20k/s`).
//!
//! Sizes accept binary suffixes (`KiB`, `MiB`, `GiB`, `TiB`, powers of 1024)
//! and decimal ones (`KB`, `MB`, `GB`, `TB`, powers of 1000), as RocksDB and
//! cgroups users write both and mean different things. A bare number is
//! bytes. Underscores group digits (`1_000_000`).

use std::fmt;
use std::time::Duration;

/// Why a unit string could not be read; the message says what is accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a valid {kind}: {hint}")]
pub struct UnitError {
    pub input: String,
    pub kind: &'static str,
    pub hint: String,
}

fn err(input: &str, kind: &'static str, hint: impl Into<String>) -> UnitError {
    UnitError {
        input: input.to_string(),
        kind,
        hint: hint.into(),
    }
}

/// Splits `"12.5MiB"` into (`12.5`, `"MiB"`), ignoring `_` and spaces.
fn split_number(s: &str) -> (String, String) {
    let cleaned: String = s.chars().filter(|c| *c != '_' && *c != ' ').collect();
    let idx = cleaned
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(cleaned.len());
    let (n, u) = cleaned.split_at(idx);
    (n.to_string(), u.to_string())
}

const SIZE_HINT: &str = "write a number with B, KiB, MiB, GiB or TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000), e.g. 256MiB";

/// Parses a byte size such as `256MiB`, `1.5GiB`, `64KB` or `4096`.
/// A span of hours as a person reads it: `40 s`, `12 min`, `5.2 h`, `3.1 days`.
pub fn hours(h: f64) -> String {
    let s = h * 3600.0;
    if s < 120.0 {
        format!("{s:.0} s")
    } else if s < 7200.0 {
        format!("{:.0} min", s / 60.0)
    } else if h < 72.0 {
        format!("{h:.1} h")
    } else {
        format!("{:.1} days", h / 24.0)
    }
}

pub fn parse_size(s: &str) -> Result<u64, UnitError> {
    let (num, unit) = split_number(s.trim());
    if num.is_empty() {
        return Err(err(s, "size", SIZE_HINT));
    }
    let mult: u64 = match unit.as_str() {
        "" | "B" | "b" => 1,
        "KiB" | "K" | "k" | "Ki" => 1 << 10,
        "MiB" | "M" | "Mi" => 1 << 20,
        "GiB" | "G" | "Gi" => 1 << 30,
        "TiB" | "T" | "Ti" => 1 << 40,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        other => {
            let hint = match other.to_ascii_lowercase().as_str() {
                "kib" | "kb" => "units are case-sensitive: write KiB (1024) or KB (1000)",
                "mib" | "mb" => "units are case-sensitive: write MiB (1024²) or MB (1000²)",
                "gib" | "gb" => "units are case-sensitive: write GiB (1024³) or GB (1000³)",
                _ => SIZE_HINT,
            };
            return Err(err(s, "size", hint));
        }
    };
    let value: f64 = num.parse().map_err(|_| err(s, "size", SIZE_HINT))?;
    let bytes = value * mult as f64;
    if !bytes.is_finite() || bytes > u64::MAX as f64 {
        return Err(err(s, "size", "the value is too large"));
    }
    if mult == 1 && num.contains('.') {
        return Err(err(s, "size", "a byte count must be a whole number"));
    }
    Ok(bytes.round() as u64)
}

const DURATION_HINT: &str = "write a number with ms, s, m or h, e.g. 90s or 20m";

/// Parses a duration such as `500ms`, `90s`, `20m`, `2h` or `1.5h`.
pub fn parse_duration(s: &str) -> Result<Duration, UnitError> {
    let (num, unit) = split_number(s.trim());
    if num.is_empty() {
        return Err(err(s, "duration", DURATION_HINT));
    }
    let value: f64 = num.parse().map_err(|_| err(s, "duration", DURATION_HINT))?;
    let secs = match unit.as_str() {
        "ms" => value / 1000.0,
        "s" | "sec" => value,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        "" => {
            return Err(err(
                s,
                "duration",
                "a duration needs a unit: ms, s, m or h (e.g. 30s)",
            ))
        }
        _ => return Err(err(s, "duration", DURATION_HINT)),
    };
    if !secs.is_finite() || secs > 1e9 {
        return Err(err(s, "duration", "the value is too large"));
    }
    Ok(Duration::from_secs_f64(secs))
}

const RATE_HINT: &str = "write operations per second, e.g. 20000/s, 20k/s or 1.5k/s";

/// Parses a rate in operations per second: `20000/s`, `20k/s`, `1.5k/s`, `2M/s`.
pub fn parse_rate(s: &str) -> Result<f64, UnitError> {
    let t = s.trim();
    let Some(body) = t.strip_suffix("/s") else {
        return Err(err(s, "rate", RATE_HINT));
    };
    let (num, unit) = split_number(body);
    let value: f64 = num.parse().map_err(|_| err(s, "rate", RATE_HINT))?;
    let mult = match unit.as_str() {
        "" => 1.0,
        "k" | "K" => 1e3,
        "M" => 1e6,
        _ => return Err(err(s, "rate", RATE_HINT)),
    };
    Ok(value * mult)
}

/// Displays a byte count the way people read it: `256.0 MiB`.
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0 as f64;
        let units = ["B", "KiB", "MiB", "GiB", "TiB"];
        let mut v = b;
        let mut i = 0;
        while v >= 1024.0 && i + 1 < units.len() {
            v /= 1024.0;
            i += 1;
        }
        if i == 0 {
            write!(f, "{} B", self.0)
        } else {
            write!(f, "{v:.1} {}", units[i])
        }
    }
}

/// `90s`, `12m 5s`, `2h 3m`, `450ms`.
pub fn human_duration(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 1.0 {
        return format!("{}ms", d.as_millis());
    }
    let total = d.as_secs();
    let (h, m, sec) = (total / 3600, (total % 3600) / 60, total % 60);
    match (h, m) {
        (0, 0) if s.fract() > 0.0 && s < 10.0 => format!("{s:.1}s"),
        (0, 0) => format!("{sec}s"),
        (0, _) if sec == 0 => format!("{m}m"),
        (0, _) => format!("{m}m {sec}s"),
        _ if m == 0 => format!("{h}h"),
        _ => format!("{h}h {m}m"),
    }
}

/// splitmix64: a fast, well-mixed hash of one word.
pub fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Edit distance with adjacent transpositions (optimal string alignment),
/// for "did you mean" hints: `PROT` is one edit from `PORT`.
pub fn distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    d[0] = (0..=b.len()).collect();
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            d[i][j] = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
            }
        }
    }
    d[a.len()][b.len()]
}

/// The candidate nearest to `word`, if it is near enough to be a typo.
pub fn near_miss<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let lw = word.to_ascii_lowercase();
    candidates
        .into_iter()
        .map(|c| (distance(&lw, &c.to_ascii_lowercase()), c))
        .filter(|(d, c)| *d <= (c.len() / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// ", did you mean X?" or nothing.
pub fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    near_miss(word, candidates)
        .map(|c| format!("; did you mean `{c}`?"))
        .unwrap_or_default()
}

pub fn positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!("{s:?}: give a number above 0, e.g. 0.1")),
    }
}

pub fn interval(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s).map_err(|e| e.to_string())?;
    if d < Duration::from_millis(10) || d > Duration::from_secs(60) {
        return Err(format!("{s:?}: the interval must be between 10ms and 60s"));
    }
    Ok(d)
}

/// `--heartbeat`: at least a second.
pub fn heartbeat(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s).map_err(|e| e.to_string())?;
    if d < Duration::from_secs(1) {
        return Err(format!("{s:?}: the heartbeat must be at least 1s"));
    }
    Ok(d)
}

/// `1.5s`, `250ms`, `0.125ms`: exact to the microsecond, as a suite
/// writes it (what replay and shrink emit reads back as itself).
pub fn exact_duration(d: Duration) -> String {
    let us = d.as_micros();
    if us.is_multiple_of(1_000_000) {
        format!("{}s", us / 1_000_000)
    } else if us.is_multiple_of(1000) {
        format!("{}ms", us / 1000)
    } else {
        format!("{}ms", us as f64 / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("256MiB").unwrap(), 256 << 20);
        assert_eq!(parse_size("1.5GiB").unwrap(), 3 << 29);
        assert_eq!(parse_size("64KB").unwrap(), 64_000);
        assert_eq!(parse_size("1_000_000").unwrap(), 1_000_000);
        assert_eq!(parse_size("0").unwrap(), 0);
        assert!(parse_size("12mib")
            .unwrap_err()
            .hint
            .contains("case-sensitive"));
        assert!(parse_size("MiB").is_err());
        assert!(parse_size("1.5").is_err());
        assert!(parse_size("12 parsecs").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1.5h").unwrap(), Duration::from_secs(5400));
        assert!(parse_duration("30")
            .unwrap_err()
            .hint
            .contains("needs a unit"));
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("20k/s").unwrap(), 20_000.0);
        assert_eq!(parse_rate("1_500/s").unwrap(), 1500.0);
        assert!(parse_rate("20k").is_err());
    }

    #[test]
    fn bytes_display() {
        assert_eq!(Bytes(268435456).to_string(), "256.0 MiB");
        assert_eq!(Bytes(12).to_string(), "12 B");
    }
}
