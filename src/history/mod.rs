//! Histories: every request a client made of a system, with when it was
//! invoked, when it completed and how (Jepsen's `:ok`, `:fail`, `:info`),
//! and the checker that says whether some order of them, one at a time,
//! explains every result (linearizability).
//!
//! The model is Jepsen's and Porcupine's: a history is a set of
//! operations on keys, each a register (read, write, delete,
//! compare-and-set; append for Porcupine's key-value histories). Values
//! and keys are interned as numbers, so an operation is a few words and a
//! million of them fit in tens of megabytes.
//!
//! - [`check`]: the linearizability checker (per key, Wing-Gong-Lowe
//!   search with memoized states).
//! - [`formats`]: Jepsen's log and EDN, Porcupine's JSON and soak's JSON
//!   lines, read and written.
//! - [`record`]: the compact file a run writes as it goes.
//! - [`command`]: `soak check-history` and `soak history`.

pub mod check;
pub mod command;
pub mod formats;
pub mod record;

use std::collections::HashMap;

/// A value's number; [`NIL`] is "no value" (a missing key, Jepsen's `nil`).
pub type Val = u32;
/// The absent value.
pub const NIL: Val = 0;

/// What an operation asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum F {
    /// Reads the key; the value read is in [`Outcome::Ok`].
    Read,
    Write(Val),
    /// Removes the key: a write of [`NIL`].
    Delete,
    /// Writes `to` if the key holds `from`.
    Cas {
        from: Val,
        to: Val,
    },
    /// Appends to the key's string (Porcupine's key-value histories).
    Append(Val),
}

/// How an operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It happened; for a read, the value it returned.
    Ok(Val),
    /// It definitely did not happen (Jepsen's `:fail`), except a
    /// compare-and-set, which took effect with its compare failing (as
    /// Porcupine's etcd model reads Jepsen's histories).
    Fail,
    /// It may or may not have happened (`:info`, a timeout, a node that
    /// died): it may take effect at any time after its invocation, or
    /// never.
    Unknown,
}

/// One operation of a history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Op {
    /// The client (Jepsen's process) that made it.
    pub client: u32,
    pub key: u32,
    pub f: F,
    pub outcome: Outcome,
    /// When it was invoked and when it completed, in nanoseconds (or in
    /// lines, for histories without times). `complete` is `u64::MAX` for
    /// an operation that never completed.
    pub invoke: u64,
    pub complete: u64,
}

/// Names of keys or values, interned.
#[derive(Debug, Clone, Default)]
pub struct Names {
    names: Vec<String>,
    ids: HashMap<String, u32>,
}

impl Names {
    /// Values: number 0 is `nil`.
    pub fn values() -> Names {
        let mut n = Names::default();
        n.id("nil");
        n
    }

    pub fn id(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.ids.get(name) {
            return i;
        }
        let i = self.names.len() as u32;
        self.names.push(name.to_string());
        self.ids.insert(name.to_string(), i);
        i
    }

    pub fn name(&self, id: u32) -> &str {
        self.names.get(id as usize).map_or("?", |s| s.as_str())
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The id of `name`, if it has one.
    pub fn get(&self, name: &str) -> Option<u32> {
        self.ids.get(name).copied()
    }
}

/// A history: its operations and the names of its keys and values.
#[derive(Debug, Clone)]
pub struct History {
    pub ops: Vec<Op>,
    pub keys: Names,
    pub values: Names,
}

impl Default for History {
    fn default() -> History {
        History {
            ops: Vec::new(),
            keys: Names::default(),
            values: Names::values(),
        }
    }
}

impl History {
    /// An operation in words: `write(3)`, `read() -> nil`, `cas(1, 2) -> fail`.
    pub fn describe(&self, op: &Op) -> String {
        let v = |x: Val| self.values.name(x).to_string();
        let f = match op.f {
            F::Read => "read()".to_string(),
            F::Write(x) => format!("write({})", v(x)),
            F::Delete => "delete()".to_string(),
            F::Cas { from, to } => format!("cas({}, {})", v(from), v(to)),
            F::Append(x) => format!("append({})", v(x)),
        };
        match (op.f, op.outcome) {
            (F::Read, Outcome::Ok(x)) => format!("{f} -> {}", v(x)),
            (_, Outcome::Ok(_)) => format!("{f} -> ok"),
            (_, Outcome::Fail) => format!("{f} -> fail"),
            (_, Outcome::Unknown) => format!("{f} -> unknown"),
        }
    }

    /// The number of distinct clients.
    pub fn clients(&self) -> u32 {
        let c: std::collections::HashSet<u32> = self.ops.iter().map(|o| o.client).collect();
        c.len() as u32
    }
}

/// Why a file is not a history: its line (1-based) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {what}")]
pub struct NotAHistory {
    pub line: usize,
    pub what: String,
}
