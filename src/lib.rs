//! soak: a chaos/soak test orchestrator for stateful services.
//!
//! The modules follow the data flow of a run (see `DESIGN.md` in the
//! project's shared folder): a `suite` is parsed, its node is started by a
//! `driver`, a `workload` runs against it, `telemetry` samples it, `chaos`
//! runs the phases, `verify` reads the writes back, `analysis` turns the
//! series into trends and `report` writes the verdict. `run` ties them
//! together; `node` is the reference system under test (`soak-node`).

pub mod analysis;
pub mod chaos;
pub mod cleanup;
pub mod cli;
pub mod doctor;
pub mod driver;
pub mod exit;
pub mod glob;
#[cfg(feature = "node")]
pub mod node;
pub mod report;
pub mod run;
pub mod suite;
pub mod telemetry;
pub mod units;
pub mod verify;
pub mod workload;
