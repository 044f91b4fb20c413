//! soak: a chaos/soak test orchestrator for stateful services.
//!
//! The modules follow the data flow of a run (see `DESIGN.md` in the
//! project's shared folder): a `suite` is parsed, its node is started by a
//! `driver`, a `workload` runs against it in any `protocol`, `telemetry`
//! samples it, a `cell` runs the phases, `verify` reads the writes
//! back, the `oracle` judges every acknowledged write, `analysis` turns
//! the series into trends and `report` writes the verdict. `run` ties them
//! together; `node` is the reference system under test (`soak-node`).

// serde_json::json! nests one macro call per level; the phase schema
// (suite/schema.rs) is deeper than the default allows.
#![recursion_limit = "256"]

pub mod analysis;
pub mod cell;
pub mod cleanup;
pub mod cli;
pub mod doctor;
pub mod driver;
pub mod exit;
pub mod faults;
pub mod glob;
pub mod gzcsv;
pub mod history;
pub mod lock;
pub mod model;
pub mod net;
#[cfg(feature = "node")]
pub mod node;
pub mod oracle;
pub mod plan;
pub mod progress;
pub mod protocol;
pub mod replay;
pub mod report;
pub mod run;
pub mod services;
pub mod signal;
pub mod suite;
pub mod telemetry;
pub mod units;
pub mod verify;
pub mod workload;

/// The name soak answers to as the reference node (`${SOAK_NODE}`).
pub const NODE_NAME: &str = "soak-node";
