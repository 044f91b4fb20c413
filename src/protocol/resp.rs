//! RESP (Redis's protocol): SET, DEL, GET and MGET pipelined on one TCP
//! connection, replies in the order sent, on soak's own codec
//! (`crate::net::resp`): commands are encoded straight into the write
//! buffer (a value is generated there, never copied), replies judged where
//! they lie in the read buffer.
//!
//! An error reply is "not done" when its code says the command was refused
//! before it ran (Redis's `OOM`, `READONLY`, `MISCONF`, `LOADING`...), and
//! unknown otherwise: a storage engine's `ERR` after its log write may
//! still come back after a restart ("when in doubt, indefinite", as
//! Maelstrom's error codes put it).

use std::collections::VecDeque;
use std::task::{Context, Poll};

use serde::{Deserialize, Serialize};

use super::pipe::Pipe;
use super::{Caps, Connecting, Outcome, Protocol, Request, Session, SessionError};
use crate::net::resp;
use crate::oracle::Ledger;

/// Error codes (the reply's first word) of commands Redis refuses before
/// running them: the write definitely did not happen.
pub const NOT_DONE: &[&str] = &[
    "OOM",
    "READONLY",
    "MISCONF",
    "LOADING",
    "BUSY",
    "MASTERDOWN",
    "NOREPLICAS",
    "NOAUTH",
    "NOPERM",
    "WRONGTYPE",
];

/// `workload.resp`, rendered.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Spec {
    /// `HOST:PORT`.
    pub target: String,
}

/// Requests in flight on one connection at most (past it, the load waits;
/// latency still counts from the scheduled time).
const DEPTH: usize = 1024;

impl Protocol for Spec {
    fn name(&self) -> &'static str {
        "resp"
    }

    fn caps(&self) -> Caps {
        Caps {
            multi_get: true,
            delete: true,
        }
    }

    fn depth(&self) -> usize {
        DEPTH
    }

    fn connect(&self, t: super::Timeouts) -> Connecting {
        let target = self.target.clone();
        Box::pin(async move {
            Ok(Box::new(Link {
                pipe: Pipe::connect(&target, t.connect).await?,
                pending: VecDeque::new(),
                key: Vec::with_capacity(24),
            }) as Box<dyn Session>)
        })
    }

    fn describe(&self) -> String {
        self.target.clone()
    }
}

/// What a reply answers.
#[derive(Clone, Copy)]
enum Asked {
    Get,
    Mget(usize),
    Write,
}

/// One connection: a socket, its buffers, and the requests in flight.
struct Link {
    pipe: Pipe,
    pending: VecDeque<(u64, Asked)>,
    key: Vec<u8>,
}

/// Whether an error reply says the command was refused before it ran.
pub fn refused(error: &[u8]) -> bool {
    let code = error.split(|b| *b == b' ').next().unwrap_or_default();
    NOT_DONE.iter().any(|c| c.as_bytes() == code)
}

/// Appends an MGET of `keys` (by number) to `out`.
pub fn encode_mget(out: &mut Vec<u8>, keys: &[usize]) {
    let mut key = Vec::with_capacity(24);
    resp::array_header(out, keys.len() + 1);
    resp::bulk_arg(out, b"MGET");
    for k in keys {
        key.clear();
        Ledger::write_key(&mut key, *k);
        resp::bulk_arg(out, &key);
    }
}

impl Session for Link {
    fn submit(&mut self, id: u64, request: Request<'_>) {
        let out = &mut self.pipe.wbuf;
        self.key.clear();
        let asked = match request {
            Request::Get { keys: [k] } => {
                Ledger::write_key(&mut self.key, *k);
                resp::encode(out, [&b"GET"[..], &self.key].into_iter());
                Asked::Get
            }
            Request::Get { keys } => {
                encode_mget(out, keys);
                Asked::Mget(keys.len())
            }
            Request::Set { key, value } => {
                Ledger::write_key(&mut self.key, key);
                resp::begin_set(out, &self.key, value.len());
                value.write_into(out);
                resp::end_bulk(out);
                Asked::Write
            }
            Request::Del { key } => {
                Ledger::write_key(&mut self.key, key);
                resp::encode(out, [&b"DEL"[..], &self.key].into_iter());
                Asked::Write
            }
        };
        self.pending.push_back((id, asked));
    }

    fn flush(&mut self) -> Result<(), SessionError> {
        self.pipe.flush()
    }

    fn poll_progress(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.pipe.poll_progress(cx, !self.pending.is_empty())
    }

    fn drain(&mut self, done: &mut dyn FnMut(u64, Outcome<'_>)) -> Result<(), SessionError> {
        if self.pending.is_empty() {
            return self.flush();
        }
        let open = self.pipe.pump()?;
        let mut used = 0;
        while !self.pending.is_empty() {
            let parsed =
                resp::parse(&self.pipe.rbuf[used..]).map_err(|e| SessionError::Broken(e.0))?;
            let Some((reply, n)) = parsed else {
                break;
            };
            used += n;
            let (id, asked) = self.pending.pop_front().expect("checked");
            match (asked, reply) {
                (Asked::Write, resp::Reply::Error(e)) => {
                    let text = String::from_utf8_lossy(e);
                    if refused(e) {
                        done(id, Outcome::NotDone(&text))
                    } else {
                        done(id, Outcome::Unknown(&text))
                    }
                }
                (_, resp::Reply::Error(e)) => {
                    done(id, Outcome::Unknown(&String::from_utf8_lossy(e)))
                }
                (Asked::Write, _) => done(id, Outcome::Done),
                (Asked::Get, resp::Reply::Bulk(v)) => done(id, Outcome::Values(&[v])),
                (Asked::Mget(n), resp::Reply::Array(Some(values))) if values.len() == n => {
                    done(id, Outcome::Values(&values))
                }
                (_, other) => done(
                    id,
                    Outcome::Unknown(&format!("a reply of the wrong shape: {other:?}")),
                ),
            }
        }
        self.pipe.settle(used, !open, !self.pending.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_errors_redis_raises_before_running_a_command_are_not_done() {
        assert!(refused(
            b"OOM command not allowed when used memory > 'maxmemory'."
        ));
        assert!(refused(
            b"READONLY You can't write against a read only replica."
        ));
        assert!(!refused(b"ERR IO error: No space left on device"));
        assert!(!refused(b"OOMX"));
    }
}
