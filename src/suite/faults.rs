//! The disk faults a suite may put on the node's data directory (soak's
//! fault filesystem, `faults::disk`): `power_cut`, `disk_full`,
//! `io_errors` and `io_delay`, each a phase.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use super::values::Dur;

/// One disk fault phase.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DiskFault {
    /// Kill the node with SIGKILL and drop every byte written since each
    /// file's last fsync, as a machine losing power would; `torn` keeps a
    /// random part of each file's unsynced tail instead (a torn write).
    PowerCut { torn: bool },
    /// Refuse growth of the data directory with ENOSPC.
    DiskFull(Room),
    /// Fail operations with EIO (`None`: lift).
    IoErrors(Option<IoFault>),
    /// Delay operations (`None`: lift).
    IoDelay(Option<IoFault>),
}

/// What `disk_full` leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Room {
    /// `disk_full: false`: the budget lifted (back to `limits.disk`, if any).
    Lifted,
    /// `disk_full: true`: nothing more may be written beyond what is there.
    None,
    /// `disk_full: 16MiB`: this much more, then ENOSPC.
    Left(u64),
}

/// File operations a fault applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IoOp {
    Read,
    Write,
    Fsync,
}

impl fmt::Display for IoOp {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(match self {
            IoOp::Read => "read",
            IoOp::Write => "write",
            IoOp::Fsync => "fsync",
        })
    }
}

/// `io_errors: { rate: 0.1, ops: [read], path: "*.sst" }` or
/// `io_delay: { delay: 20ms, ops: [fsync] }`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IoFault {
    /// The share of matching operations hit (1 for a delay unless given).
    pub rate: f64,
    #[serde(serialize_with = "secs")]
    pub delay: Duration,
    pub ops: Vec<IoOp>,
    /// A glob on the file's path inside the data directory (`*` matches
    /// `/` too), e.g. `*.sst`; none: every file.
    pub path: Option<String>,
}

impl IoFault {
    /// Whether `op` on the file at `path` (relative) is one this fault hits.
    pub fn matches(&self, op: IoOp, path: &str) -> bool {
        self.ops.contains(&op)
            && self
                .path
                .as_deref()
                .is_none_or(|p| crate::glob::glob_match(p.as_bytes(), path.as_bytes()))
    }
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl DiskFault {
    /// Whether the fault leaves `write()` calls as they are: a power cut
    /// acts after the node is dead, and faults on reads and fsyncs only.
    pub fn leaves_writes_alone(&self) -> bool {
        match self {
            DiskFault::PowerCut { .. } => true,
            DiskFault::DiskFull(_) => false,
            DiskFault::IoErrors(f) | DiskFault::IoDelay(f) => {
                f.as_ref().is_none_or(|f| !f.ops.contains(&IoOp::Write))
            }
        }
    }

    pub fn word(&self) -> &'static str {
        match self {
            DiskFault::PowerCut { .. } => "power_cut",
            DiskFault::DiskFull(_) => "disk_full",
            DiskFault::IoErrors(_) => "io_errors",
            DiskFault::IoDelay(_) => "io_delay",
        }
    }

    /// Whether this lifts a fault (`disk_full: false`, `io_errors: clear`,
    /// `io_delay: clear`) rather than puts one in force.
    pub fn is_lift(&self) -> bool {
        matches!(
            self,
            DiskFault::DiskFull(Room::Lifted)
                | DiskFault::IoErrors(None)
                | DiskFault::IoDelay(None)
        )
    }

    /// What lifts this fault, if it is one that lasts (a power cut is
    /// over once done).
    pub fn lifted(&self) -> Option<DiskFault> {
        match self {
            DiskFault::DiskFull(_) => Some(DiskFault::DiskFull(Room::Lifted)),
            DiskFault::IoErrors(_) => Some(DiskFault::IoErrors(None)),
            DiskFault::IoDelay(_) => Some(DiskFault::IoDelay(None)),
            DiskFault::PowerCut { .. } => None,
        }
    }

    /// The phase from its bare word (`- power_cut`).
    pub fn from_word(word: &str) -> Option<Result<DiskFault, String>> {
        Some(match word {
            "power_cut" => Ok(DiskFault::PowerCut { torn: false }),
            "disk_full" => Ok(DiskFault::DiskFull(Room::None)),
            "io_errors" => Err("`io_errors` needs a rate: write `- io_errors: { rate: 0.1, ops: [read] }`, or `- io_errors: clear`".into()),
            "io_delay" => Err("`io_delay` needs a delay: write `- io_delay: { delay: 20ms, ops: [fsync] }`, or `- io_delay: clear`".into()),
            _ => return None,
        })
    }

    /// The phase `word: VALUE`, read from `map`'s next value
    /// (`power_cut`'s map is read beside a member's: see
    /// `phase::power_cut_value`).
    pub fn from_map<'de, A: MapAccess<'de>>(
        word: &str,
        map: &mut A,
    ) -> Option<Result<DiskFault, A::Error>> {
        Some(match word {
            "disk_full" => map
                .next_value::<RoomRaw>()
                .map(|r| DiskFault::DiskFull(r.0)),
            "io_errors" => map
                .next_value::<FaultRaw<true>>()
                .map(|r| DiskFault::IoErrors(r.0)),
            "io_delay" => map
                .next_value::<FaultRaw<false>>()
                .map(|r| DiskFault::IoDelay(r.0)),
            _ => return None,
        })
    }
}

impl fmt::Display for DiskFault {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let ops = |x: &IoFault| {
            let ops: Vec<String> = x.ops.iter().map(|o| o.to_string()).collect();
            let on = x
                .path
                .as_deref()
                .map(|p| format!(" on {p}"))
                .unwrap_or_default();
            format!("{}{on}", ops.join("/"))
        };
        match self {
            DiskFault::PowerCut { torn: false } => f.write_str("power cut"),
            DiskFault::PowerCut { torn: true } => f.write_str("power cut (torn writes)"),
            DiskFault::DiskFull(Room::Lifted) => f.write_str("disk space back"),
            DiskFault::DiskFull(Room::None) => f.write_str("disk full"),
            DiskFault::DiskFull(Room::Left(b)) => {
                write!(f, "disk full after {}", crate::units::Bytes(*b))
            }
            DiskFault::IoErrors(None) => f.write_str("I/O errors cleared"),
            DiskFault::IoErrors(Some(x)) => {
                write!(f, "I/O errors on {:.0}% of {}", x.rate * 100.0, ops(x))
            }
            DiskFault::IoDelay(None) => f.write_str("I/O delay cleared"),
            DiskFault::IoDelay(Some(x)) => write!(
                f,
                "I/O delay {} on {}",
                crate::units::human_duration(x.delay),
                ops(x)
            ),
        }
    }
}

struct RoomRaw(Room);

impl<'de> Deserialize<'de> for RoomRaw {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RoomRaw;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "`true` (full now), `false` (space back), or the room left, e.g. `16MiB`",
                )
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<RoomRaw, E> {
                Ok(RoomRaw(if v { Room::None } else { Room::Lifted }))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RoomRaw, E> {
                crate::units::parse_size(v)
                    .map(|b| RoomRaw(Room::Left(b)))
                    .map_err(|e| E::custom(format!("`disk_full: {v}`: {e}; or write `true` (full now) or `false` (space back)")))
            }
        }
        d.deserialize_any(V)
    }
}

/// `ERRORS`: `io_errors` (a rate is required) rather than `io_delay` (a
/// delay is).
struct FaultRaw<const ERRORS: bool>(Option<IoFault>);

impl<'de, const ERRORS: bool> Deserialize<'de> for FaultRaw<ERRORS> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Raw {
            rate: Option<f64>,
            delay: Option<Dur>,
            ops: Option<Vec<IoOp>>,
            path: Option<String>,
        }
        struct V<const ERRORS: bool>;
        impl<'de, const ERRORS: bool> Visitor<'de> for V<ERRORS> {
            type Value = FaultRaw<ERRORS>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                if ERRORS {
                    f.write_str(
                        "`{ rate: 0.1, ops: [read, write, fsync], path: \"*.sst\" }`, or `clear`",
                    )
                } else {
                    f.write_str(
                        "`{ delay: 20ms, ops: [read, write, fsync], path: \"*.log\" }`, or `clear`",
                    )
                }
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<FaultRaw<ERRORS>, E> {
                match v {
                    "clear" | "none" => Ok(FaultRaw(None)),
                    other => Err(E::custom(format!(
                        "`{other}`: write `clear` to lift the fault, or a map such as `{{ {} }}`",
                        if ERRORS { "rate: 0.1" } else { "delay: 20ms" }
                    ))),
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<FaultRaw<ERRORS>, A::Error> {
                let r = Raw::deserialize(de::value::MapAccessDeserializer::new(map))?;
                let rate = match (ERRORS, r.rate) {
                    (true, None) => return Err(de::Error::custom("`io_errors` needs `rate`: the share of operations that fail, e.g. `rate: 0.1`")),
                    (_, Some(x)) if !(x > 0.0 && x <= 1.0) => return Err(de::Error::custom(format!("`rate: {x}`: a share above 0 and at most 1, e.g. 0.1"))),
                    (_, x) => x.unwrap_or(1.0),
                };
                let delay = match (ERRORS, r.delay) {
                    (false, None) => {
                        return Err(de::Error::custom(
                            "`io_delay` needs `delay`, e.g. `delay: 20ms`",
                        ))
                    }
                    (_, d) => d.map(|d| d.0).unwrap_or_default(),
                };
                let ops = r.ops.unwrap_or_else(|| {
                    if ERRORS {
                        vec![IoOp::Read, IoOp::Write]
                    } else {
                        vec![IoOp::Read, IoOp::Write, IoOp::Fsync]
                    }
                });
                if ops.is_empty() {
                    return Err(de::Error::custom(
                        "`ops` is empty: give at least one of read, write, fsync",
                    ));
                }
                Ok(FaultRaw(Some(IoFault {
                    rate,
                    delay,
                    ops,
                    path: r.path,
                })))
            }
        }
        d.deserialize_any(V::<ERRORS>)
    }
}
