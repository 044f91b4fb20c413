//! The Docker driver: nodes as containers on a local or remote engine,
//! through bollard.

pub mod container;
pub mod engine;
pub mod ssh;
