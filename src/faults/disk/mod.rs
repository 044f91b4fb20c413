//! The fault filesystem: a FUSE passthrough that soak mounts over a cell's
//! data directory (the files live in a backing folder beside it), and that
//! keeps, for every file, what was written since its last fsync: the
//! length it had then and the bytes that writes overwrote. A power cut
//! then puts every file back as it was at its last fsync, as a machine
//! that lost power would find it (RocksDB's crash test drops unsynced
//! data the same way; Jepsen uses lazyfs for it). Metadata (creates,
//! renames, unlinks) is taken as durable at once, as a journalling
//! filesystem mostly makes it; only file data can be lost.
//!
//! The same filesystem refuses growth past a byte budget with ENOSPC
//! (`disk_full`, `limits.disk`), fails reads, writes or fsyncs with EIO on
//! a seeded share of them (`io_errors`), and delays them (`io_delay`).
//!
//! It runs in soak's process, outside the node's cgroup: what it keeps is
//! never counted as the node's memory. The mount is labelled with the run
//! (`soak-<run id>` as its source), so that `soak cleanup` finds it after
//! soak itself was killed.

mod attr;
mod check;
#[cfg(test)]
mod conformance;
mod fs;
mod mount;
mod state;
#[cfg(test)]
mod tests;

use std::time::Duration;

pub use check::{by_design, capabilities, not_given, Capability};
pub use mount::{backing_of, mounts, restore, unmount, Mounted, SOURCE_PREFIX};

/// How long the kernel may keep names and attributes. Short, because a
/// power cut changes files behind its back (their inodes are invalidated
/// then too).
pub(super) const TTL: Duration = Duration::from_secs(1);

/// How the node's writes reach soak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writes {
    /// Each `write()` is a request to soak, so that ENOSPC and EIO reach
    /// the write that caused them, as ext4 refuses a write it has no room
    /// for. `disk_full`, `limits.disk` and faults on writes need it; it
    /// costs a round trip per write.
    Through,
    /// The kernel's writeback cache gathers writes in its pages and sends
    /// them in batches (at fsync, close, or when it writes back), which is
    /// what makes unsynced appends cheap. A power cut first has the kernel
    /// send what it holds, then drops it with the rest of the unsynced
    /// bytes: what a power cut loses is the same.
    Cached,
}
