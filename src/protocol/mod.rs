//! Protocols: how the load and the read-back talk to a node.
//!
//! One [`Protocol`] per suite (`workload.resp`, `http`, `postgres` or
//! `adapter`) opens [`Session`]s, one per load connection. A session takes
//! requests (a write of a value, a delete, a read of one key or of several)
//! and ends each in one of Jepsen's three outcomes ([`Outcome`]): done,
//! definitely not done, or unknown. Both the load (`workload`) and
//! the read-back (`verify`) drive sessions and hand what comes back
//! to the oracle (`crate::oracle`), which never sees a protocol; so a new
//! protocol touches this folder and the suite only.
//!
//! A session is polled, not awaited per request: the load keeps hundreds of
//! requests in flight on one connection, and the codecs (RESP, HTTP/1.1,
//! PostgreSQL's wire protocol) encode requests into one write buffer and
//! parse every reply in the read buffer in one pass ([`Session::drain`]),
//! judging values where they lie, on one pipe ([`pipe`]). An adapter's
//! session speaks JSON lines to a child process.

pub mod adapter;
pub mod http;
mod http_wire;
mod pipe;
pub mod postgres;
pub mod resp;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::oracle::Ledger;

/// A value to write, made from the ledger where the codec writes it (the
/// ledger derives every value from its key and version; nothing stores it).
#[derive(Clone, Copy)]
pub struct Value<'a> {
    ledger: &'a Ledger,
    key: usize,
    version: u32,
}

impl<'a> Value<'a> {
    pub fn new(ledger: &'a Ledger, key: usize, version: u32) -> Value<'a> {
        Value {
            ledger,
            key,
            version,
        }
    }

    pub fn len(&self) -> usize {
        self.ledger.value_len(self.key, self.version)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends the value's bytes to `out`.
    pub fn write_into(&self, out: &mut Vec<u8>) {
        self.ledger.value_into(self.key, self.version, out)
    }

    pub fn to_vec(&self) -> Vec<u8> {
        self.ledger.value(self.key, self.version)
    }
}

/// What one request does, to keys named by number ([`key_name`]).
#[derive(Clone, Copy)]
pub enum Request<'a> {
    Set {
        key: usize,
        value: Value<'a>,
    },
    Del {
        key: usize,
    },
    /// Reads one key, or several at once where the protocol can
    /// ([`Caps::multi_get`]).
    Get {
        keys: &'a [usize],
    },
}

impl Request<'_> {
    pub fn is_write(&self) -> bool {
        !matches!(self, Request::Get { .. })
    }
}

/// The name of key `k` on the wire (`soak:K`).
pub fn key_name(k: usize) -> String {
    Ledger::key_name(k)
}

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome<'a> {
    /// A write done: the node acknowledged it.
    Done,
    /// A read answered: one value per key asked, in the order asked
    /// (`None`: the key is missing).
    Values(&'a [Option<&'a [u8]>]),
    /// Definitely not done: the node said so (Jepsen's `:fail`). A write
    /// that is read back all the same is an aborted read.
    NotDone(&'a str),
    /// It may or may not have happened (Jepsen's `:info`): a timeout, a
    /// reset, an error that does not say. A write stays in doubt.
    Unknown(&'a str),
}

/// Why a session cannot go on.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SessionError {
    /// Gone (a closed connection, a timeout): what was in flight is
    /// unknown, and another session may be opened.
    #[error("{0}")]
    Broken(String),
    /// The client side went away (an adapter that exited): what was in
    /// flight is unknown, the node is not to blame, and another session
    /// (a new adapter) is opened, in a read-back too.
    #[error("{0}")]
    ClientExited(String),
    /// The peer does not speak the protocol (an adapter that prints
    /// garbage, or never answers its init): the cell stops with exit 3.
    #[error("{0}")]
    Fatal(String),
}

/// What a protocol can ask of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Caps {
    /// Reads of several keys in one request (RESP's MGET, SQL's `= ANY`).
    pub multi_get: bool,
    /// Deletes.
    pub delete: bool,
}

/// One connection's requests in flight, to one node.
///
/// The caller submits requests (never more than [`Protocol::depth`] in
/// flight), waits on [`Session::poll_progress`], then collects outcomes
/// with [`Session::drain`]. Every request submitted gets exactly one
/// outcome, unless the session breaks: then every request without one is
/// unknown, and the caller counts them so.
pub trait Session: Send {
    /// Queues a request under the caller's `id`.
    fn submit(&mut self, id: u64, request: Request<'_>);

    /// Sends what was submitted, as far as the peer takes it now.
    fn flush(&mut self) -> Result<(), SessionError>;

    /// Ready when [`Session::drain`] has something to do: bytes to read or
    /// to write, a request finished, or the session broke.
    fn poll_progress(&mut self, cx: &mut Context<'_>) -> Poll<()>;

    /// Hands every outcome that is in to `done`, with its request's id.
    fn drain(&mut self, done: &mut dyn FnMut(u64, Outcome<'_>)) -> Result<(), SessionError>;

    /// The node went down (`false`) or is up again: an adapter is told.
    fn node_state(&mut self, _up: bool) {}

    /// Requests this session takes in flight, if fewer than its
    /// protocol's [`Protocol::depth`] (an adapter says how many it takes).
    fn capacity(&self) -> usize {
        usize::MAX
    }
}

/// Waits until `s` has progress to drain.
pub async fn progress(s: &mut dyn Session) {
    std::future::poll_fn(|cx| s.poll_progress(cx)).await
}

/// How long opening a session may take.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// A connection: short for the load (a node that is down is found out
    /// quickly), longer for a read-back (a node that has just started
    /// takes its connections in a burst).
    pub connect: Duration,
    pub request: Duration,
}

pub type Connecting = Pin<Box<dyn Future<Output = Result<Box<dyn Session>, SessionError>> + Send>>;

/// A protocol, configured for one cell's node.
pub trait Protocol: Send + Sync {
    /// `resp`, `http`, `postgres`, `adapter`.
    fn name(&self) -> &'static str;

    fn caps(&self) -> Caps;

    /// Requests one session keeps in flight at most.
    fn depth(&self) -> usize;

    /// Keys a read-back asks for in one request.
    fn batch(&self) -> usize {
        if self.caps().multi_get {
            1000
        } else {
            1
        }
    }

    /// Opens a session: within `t.connect`; `t.request` bounds what a
    /// request made while opening it (a table created) may take.
    fn connect(&self, t: Timeouts) -> Connecting;

    /// Where its requests go, for messages: `127.0.0.1:6379`, a URL, the
    /// adapter's command.
    fn describe(&self) -> String;
}

/// A protocol as the plan renders it: what `node.json` keeps for `soak
/// verify`, and what [`Spec::open`] turns into a [`Protocol`].
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum Spec {
    Resp(resp::Spec),
    Http(Box<http::Spec>),
    Postgres(postgres::Spec),
    Adapter(adapter::Spec),
}

impl Spec {
    pub fn open(&self) -> Arc<dyn Protocol> {
        match self {
            Spec::Resp(s) => Arc::new(s.clone()),
            Spec::Http(s) => Arc::new(http::Http::new((**s).clone())),
            Spec::Postgres(s) => Arc::new(s.clone()),
            Spec::Adapter(s) => Arc::new(s.clone()),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Spec::Resp(_) => "resp",
            Spec::Http(_) => "http",
            Spec::Postgres(_) => "postgres",
            Spec::Adapter(_) => "adapter",
        }
    }

    /// Where requests go (`HOST:PORT`), where the network fault proxy may
    /// stand in: `None` for an adapter without a `target`.
    pub fn target(&self) -> Option<String> {
        match self {
            Spec::Resp(s) => Some(s.target.clone()),
            Spec::Http(s) => Some(s.target.clone()),
            Spec::Postgres(s) => Some(s.target.clone()),
            Spec::Adapter(s) => s.target.clone(),
        }
    }

    /// The same, with requests going to `addr` (the network fault proxy,
    /// `soak verify --target`).
    pub fn retarget(&mut self, addr: &str) {
        match self {
            Spec::Resp(s) => s.target = addr.into(),
            Spec::Http(s) => s.target = addr.into(),
            Spec::Postgres(s) => s.target = addr.into(),
            Spec::Adapter(s) => s.target = Some(addr.into()),
        }
    }
}
