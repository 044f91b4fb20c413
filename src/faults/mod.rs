//! Faults that wrap any node, whatever its driver: a network proxy between
//! the load and the node (`proxy`), and a fault filesystem under its data
//! directory (`disk`). Each is seeded from the cell's seed and counts what
//! it did, for the report.

pub mod disk;
pub mod proxy;
