//! soak's integration tests: one binary, a module per topic (RocksDB,
//! which soak-node links, is linked once instead of once per topic).
//! Run one topic with `cargo test --test it run::`, one test by its name.
//! Tests that measure memory under load run alone (`common::alone`).

mod common;

mod book;
mod cgroup;
mod cgroup_v2_vm;
mod charts;
mod cluster;
mod docker;
mod faultfs;
mod html;
mod incidents;
mod kubernetes;
mod ledger;
mod malformed_suites;
mod memory;
mod node;
mod offline;
mod protocols;
mod replay;
mod reports;
mod run;
mod schema;
mod templates;
