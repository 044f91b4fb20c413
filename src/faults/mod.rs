//! Faults that wrap any node, whatever its driver: a network proxy between
//! the load and the node (`proxy`), and a fault filesystem under its data
//! directory (`disk`). Each is seeded from the cell's seed and counts what
//! it did, for the report.
//!
//! Each is a component behind one trait, as toxiproxy's toxics are: the
//! fault a phase or a chaos action asks for ([`Asked`]) goes to the
//! component that takes it ([`Fault::apply`]), which says what it did; the
//! cell knows the registry ([`Faults`]), not the components. A new fault is
//! its spec in `suite`, a component here, and where the plan starts it.

pub mod disk;
pub mod proxy;

use std::sync::Arc;

use crate::suite::faults::{DiskFault, Room};
use crate::suite::NetworkSpec;

/// A fault a phase or a chaos action asks for (or the lift of one).
#[derive(Debug, Clone, Copy)]
pub enum Asked<'a> {
    Network(&'a NetworkSpec),
    Disk(&'a DiskFault),
    /// One member of a cluster's power cut (1-based), its node already
    /// killed.
    MemberCut {
        member: usize,
        torn: bool,
    },
}

impl Asked<'_> {
    /// Why no component took it: what the cell lacks.
    pub fn unavailable(&self) -> String {
        match self {
            Asked::Network(_) => {
                "`network` faults need the built-in load, which connects through soak's proxy"
                    .into()
            }
            Asked::Disk(d) => format!(
                "`{}` needs soak's fault filesystem under the data directory, which a container node does not have",
                d.word()
            ),
            Asked::MemberCut { member, .. } => format!(
                "a power cut of member {member} needs soak's fault filesystem under its data directory"
            ),
        }
    }
}

/// What a component did with a fault it took.
#[derive(Debug, Clone, PartialEq)]
pub enum Applied {
    /// In force now; the words say what and how it stands.
    Set { fault: String, text: String },
    /// Lifted.
    Lifted { fault: String, text: String },
    /// Every byte not fsynced dropped (a power cut, with the node down).
    Cut { dropped: u64 },
}

/// What the faults of a cell counted, each component filling its own.
#[derive(Debug, Clone, Default)]
pub struct Records {
    pub network: Option<crate::model::NetworkStats>,
    pub disk: Option<crate::model::DiskStats>,
}

/// A fault component.
pub trait Fault: Send + Sync {
    /// Puts `asked` in force, or lifts it; `None` when it is another
    /// component's.
    fn apply(&self, asked: Asked<'_>) -> Option<Applied>;
    /// Whether `asked` is this component's.
    fn takes(&self, asked: Asked<'_>) -> bool;
    /// Its counters, into the cell's records.
    fn record(&self, into: &mut Records);
}

/// The fault components of one cell.
#[derive(Clone, Default)]
pub struct Faults(Vec<Arc<dyn Fault>>);

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Faults({} components)", self.0.len())
    }
}

impl Faults {
    pub fn with(mut self, f: Arc<dyn Fault>) -> Faults {
        self.0.push(f);
        self
    }

    /// Gives `asked` to the component that takes it; the words of
    /// [`Asked::unavailable`] when none does.
    pub fn apply(&self, asked: Asked<'_>) -> Result<Applied, String> {
        self.0
            .iter()
            .find_map(|f| f.apply(asked))
            .ok_or_else(|| asked.unavailable())
    }

    /// Whether a component takes `asked`, without applying it.
    pub fn takes(&self, asked: Asked<'_>) -> bool {
        self.0.iter().any(|f| f.takes(asked))
    }

    pub fn record(&self) -> Records {
        let mut r = Records::default();
        for f in &self.0 {
            f.record(&mut r);
        }
        r
    }
}

impl Fault for proxy::Proxy {
    fn apply(&self, asked: Asked<'_>) -> Option<Applied> {
        let Asked::Network(n) = asked else {
            return None;
        };
        self.set(*n);
        let (fault, text) = (format!("network {n}"), format!("network: {n}"));
        Some(if n.is_clear() {
            Applied::Lifted { fault, text }
        } else {
            Applied::Set { fault, text }
        })
    }

    fn takes(&self, asked: Asked<'_>) -> bool {
        matches!(asked, Asked::Network(_))
    }

    fn record(&self, into: &mut Records) {
        into.network = Some(self.stats());
    }
}

impl Fault for disk::Mounted {
    fn apply(&self, asked: Asked<'_>) -> Option<Applied> {
        let Asked::Disk(d) = asked else {
            return None;
        };
        match d {
            DiskFault::PowerCut { torn } => {
                return Some(Applied::Cut {
                    dropped: self.power_cut(*torn),
                })
            }
            DiskFault::DiskFull(room) => self.set_room(match room {
                Room::Lifted => None,
                Room::None => Some(0),
                Room::Left(b) => Some(*b),
            }),
            DiskFault::IoErrors(f) => self.set_errors(f.clone()),
            DiskFault::IoDelay(f) => self.set_delay(f.clone()),
        }
        let fault = d.to_string();
        let text = format!("{d} ({} used)", crate::units::Bytes(self.used()));
        Some(if d.is_lift() {
            Applied::Lifted { fault, text }
        } else {
            Applied::Set { fault, text }
        })
    }

    fn takes(&self, asked: Asked<'_>) -> bool {
        matches!(asked, Asked::Disk(_))
    }

    fn record(&self, into: &mut Records) {
        into.disk = Some(self.stats());
    }
}

/// soak's fault filesystem under each member's data directory: a power
/// cut of the cluster cuts every member; a member's cuts its own.
pub struct MemberDisks(pub Vec<Arc<disk::Mounted>>);

impl Fault for MemberDisks {
    fn apply(&self, asked: Asked<'_>) -> Option<Applied> {
        let dropped = match asked {
            Asked::Disk(DiskFault::PowerCut { torn }) => {
                self.0.iter().map(|m| m.power_cut(*torn)).sum()
            }
            Asked::MemberCut { member, torn } => {
                self.0.get(member.checked_sub(1)?)?.power_cut(torn)
            }
            _ => return None,
        };
        Some(Applied::Cut { dropped })
    }

    fn takes(&self, asked: Asked<'_>) -> bool {
        match asked {
            Asked::Disk(d) => matches!(d, DiskFault::PowerCut { .. }),
            Asked::MemberCut { member, .. } => (1..=self.0.len()).contains(&member),
            Asked::Network(_) => false,
        }
    }

    /// The members' counters added up.
    fn record(&self, into: &mut Records) {
        let mut sum = crate::model::DiskStats::default();
        for m in &self.0 {
            sum.add(m.stats());
        }
        into.disk = Some(sum);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fault goes to the component that takes it; one no component
    /// takes says what the cell lacks; the components' counters come back
    /// in the records.
    #[tokio::test]
    async fn a_fault_goes_to_its_component_and_one_without_is_refused_with_the_reason() {
        let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = proxy::Proxy::start(upstream.local_addr().unwrap(), 7)
            .await
            .unwrap();
        let faults = Faults::default().with(Arc::new(proxy));
        let slow = NetworkSpec {
            latency: std::time::Duration::from_millis(50),
            ..NetworkSpec::default()
        };
        assert_eq!(
            faults.apply(Asked::Network(&slow)),
            Ok(Applied::Set {
                fault: "network latency 50ms".into(),
                text: "network: latency 50ms".into()
            })
        );
        assert!(matches!(
            faults.apply(Asked::Network(&NetworkSpec::default())),
            Ok(Applied::Lifted { .. })
        ));
        let full = DiskFault::DiskFull(Room::None);
        assert!(!faults.takes(Asked::Disk(&full)));
        let refused = faults.apply(Asked::Disk(&full)).unwrap_err();
        assert!(
            refused.contains("`disk_full` needs soak's fault filesystem"),
            "{refused}"
        );
        let records = faults.record();
        assert_eq!(records.network.map(|n| n.connections), Some(0));
        assert!(records.disk.is_none());
    }
}
