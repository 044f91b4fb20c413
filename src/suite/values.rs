//! Typed suite values read from YAML: sizes, durations, rates, counts,
//! signals and growth rates. Each one fails during deserialization, so the
//! error carries the line, the column and the path of the bad value.

use std::fmt;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};

use crate::units;

pub use crate::units::{did_you_mean, distance, near_miss};

/// Accepts a YAML string or number and hands its text to `parse`.
struct TextVisitor<F>(&'static str, F);

impl<'de, T, F: Fn(&str) -> Result<T, String>> Visitor<'de> for TextVisitor<F> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.0)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        (self.1)(v).map_err(E::custom)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        (self.1)(&v.to_string()).map_err(E::custom)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        (self.1)(&v.to_string()).map_err(E::custom)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
        (self.1)(&v.to_string()).map_err(E::custom)
    }
}

macro_rules! text_value {
    ($ty:ident, $expecting:expr, $parse:expr) => {
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_any(TextVisitor($expecting, $parse))
            }
        }
    };
}

/// A byte size: `256MiB`, `64KB`, `4096`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Size(pub u64);
text_value!(Size, "a size such as 256MiB", |s: &str| units::parse_size(
    s
)
.map(Size)
.map_err(|e| e.to_string()));

/// A memory bound: a size (`340MiB`) or a share of the cell's memory limit
/// (`85%`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Bound {
    Bytes(u64),
    /// A fraction of `limits.memory`, in (0, 1].
    OfLimit(f64),
}
text_value!(
    Bound,
    "a size such as 340MiB, or a share of the memory limit such as 85%",
    |s: &str| {
        if let Some(p) = s.trim().strip_suffix('%') {
            let f: f64 = p
                .trim()
                .parse()
                .map_err(|_| format!("{s:?} is not a percentage such as 85%"))?;
            if !(f > 0.0 && f <= 100.0) {
                return Err(format!(
                    "{s:?}: a share of the limit is above 0% and at most 100%"
                ));
            }
            return Ok(Bound::OfLimit(f / 100.0));
        }
        units::parse_size(s)
            .map(Bound::Bytes)
            .map_err(|e| format!("{e}; or a share of the memory limit such as 85%"))
    }
);

impl Bound {
    /// In bytes, given the cell's memory limit (a share needs one).
    pub fn bytes(&self, limit: Option<u64>) -> Option<u64> {
        match *self {
            Bound::Bytes(b) => Some(b),
            Bound::OfLimit(f) => limit.map(|l| (l as f64 * f) as u64),
        }
    }
}

impl Serialize for Bound {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match *self {
            Bound::Bytes(b) => s.serialize_u64(b),
            Bound::OfLimit(f) => s.serialize_str(&format!("{}%", f * 100.0)),
        }
    }
}

/// A duration: `500ms`, `90s`, `20m`, `2h`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Dur(pub Duration);
text_value!(Dur, "a duration such as 90s", |s: &str| {
    units::parse_duration(s).map(Dur).map_err(|e| e.to_string())
});

impl Serialize for Dur {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.0.as_secs_f64())
    }
}

/// Operations per second: `2000/s`, `20k/s`.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize)]
pub struct Rate(pub f64);
text_value!(Rate, "a rate such as 2000/s or 20k/s", |s: &str| {
    let r = units::parse_rate(s).map_err(|e| e.to_string())?;
    if r > 0.0 {
        Ok(Rate(r))
    } else {
        Err(format!("{s:?} is not a valid rate: it must be above 0"))
    }
});

/// The load's rate: `2000/s`, or `max` for a closed loop that sends the
/// next request as soon as a reply comes back.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum LoadRate {
    #[serde(rename = "max")]
    Max,
    #[serde(untagged)]
    Fixed(f64),
}
text_value!(
    LoadRate,
    "a rate such as 2000/s or 20k/s, or max",
    |s: &str| {
        if s.trim() == "max" {
            return Ok(LoadRate::Max);
        }
        let r = units::parse_rate(s)
            .map_err(|e| format!("{e}; or write `max` for as fast as the node answers"))?;
        if r > 0.0 {
            Ok(LoadRate::Fixed(r))
        } else {
            Err(format!("{s:?} is not a valid rate: it must be above 0"))
        }
    }
);

/// A value size: fixed (`100B`) or a range (`100B..4KiB`), inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SizeRange {
    pub min: u64,
    pub max: u64,
}
text_value!(
    SizeRange,
    "a size such as 100B, or a range such as 100B..4KiB",
    |s: &str| {
        let (a, b) = s.split_once("..").unwrap_or((s, s));
        let min = units::parse_size(a).map_err(|e| e.to_string())?;
        let max = units::parse_size(b).map_err(|e| e.to_string())?;
        if min > max {
            return Err(format!(
                "`{s}`: the range's first size is larger than its second; write MIN..MAX, e.g. 100B..4KiB"
            ));
        }
        Ok(SizeRange { min, max })
    }
);

/// A whole number, where `1_000_000` is allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Count(pub u64);
text_value!(Count, "a whole number such as 100_000", |s: &str| {
    let clean: String = s.chars().filter(|c| *c != '_').collect();
    clean
        .parse()
        .map(Count)
        .map_err(|_| format!("{s:?} is not a whole number (write e.g. 100_000)"))
});

/// A growth rate in bytes per hour: `20MiB/h`, `1MiB/m`, `10KiB/s`.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize)]
pub struct GrowthRate(pub f64);
text_value!(GrowthRate, "a growth rate such as 20MiB/h", |s: &str| {
    let hint = || {
        format!("{s:?} is not a valid growth rate: write a size per hour, minute or second, e.g. 20MiB/h")
    };
    let (size, per) = s.trim().rsplit_once('/').ok_or_else(hint)?;
    let bytes = units::parse_size(size).map_err(|e| e.to_string())? as f64;
    let factor = match per {
        "h" => 1.0,
        "m" | "min" => 60.0,
        "s" => 3600.0,
        _ => return Err(hint()),
    };
    Ok(GrowthRate(bytes * factor))
});

pub const SIGNALS: [&str; 12] = [
    "SIGKILL", "SIGTERM", "SIGINT", "SIGQUIT", "SIGHUP", "SIGABRT", "SIGSEGV", "SIGUSR1",
    "SIGUSR2", "SIGSTOP", "SIGCONT", "SIGBUS",
];

/// A signal by name: `SIGKILL`, `KILL`, `sigterm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sig(pub Signal);

pub fn parse_signal(s: &str) -> Result<Signal, String> {
    let up = s.trim().to_ascii_uppercase();
    let full = if up.starts_with("SIG") {
        up.clone()
    } else {
        format!("SIG{up}")
    };
    if SIGNALS.contains(&full.as_str()) {
        if let Ok(sig) = full.parse::<Signal>() {
            return Ok(sig);
        }
    }
    Err(format!(
        "unknown signal `{s}`{}; signals: {}",
        did_you_mean(&full, SIGNALS),
        SIGNALS.join(", ")
    ))
}
text_value!(Sig, "a signal name such as SIGKILL", |s: &str| {
    parse_signal(s).map(Sig)
});

impl Serialize for Sig {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0.as_str())
    }
}

impl fmt::Display for Sig {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.0.as_str())
    }
}

/// A YAML scalar (word, number, boolean) as text; `None` for a list or map.
pub fn scalar(v: &serde_norway::Value) -> Option<String> {
    match v {
        serde_norway::Value::String(s) => Some(s.clone()),
        serde_norway::Value::Number(n) => Some(n.to_string()),
        serde_norway::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_misses() {
        assert_eq!(
            near_miss("jemaloc", ["glibc", "jemalloc", "mimalloc"]),
            Some("jemalloc")
        );
        assert_eq!(near_miss("zzz", ["glibc", "jemalloc"]), None);
        assert!(parse_signal("SIGKIL")
            .unwrap_err()
            .contains("did you mean `SIGKILL`"));
        assert_eq!(parse_signal("kill").unwrap(), Signal::SIGKILL);
    }
}
