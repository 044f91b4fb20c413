//! PostgreSQL, on soak's own client of its wire protocol ([`wire`]): a
//! table soak creates (`k text primary key, v bytea`), autocommit upserts
//! and deletes, reads of one key (`k = $1`) or of many at once
//! (`k = ANY($1)`), prepared once per connection and pipelined on it
//! (Bind, Execute, Sync per request, up to [`DEPTH`] in flight), as the
//! RESP codec does: requests encoded into the write buffer, replies read
//! where they lie, no future or channel per request. (tokio-postgres, which
//! soak used before, spent about twice pgbench's CPU per point read on a
//! future, a channel and a row object per request; on two cores that
//! CPU is the server's.)
//!
//! Outcomes: a request's implicit transaction commits at its Sync, so a
//! write is done when ReadyForQuery follows its CommandComplete. A
//! statement the server answered with an error was rolled back, so the
//! write is definitely not done; but an error that says the connection or
//! the server went away (SQLSTATE classes 08, 57, 58 and XX: an admin
//! shutdown, a crash, an I/O error) may have come after the commit reached
//! the log, and a connection lost before ReadyForQuery leaves the commit
//! unknown.

mod wire;

use std::collections::VecDeque;
use std::task::{Context, Poll};

use serde::{Deserialize, Serialize};

use super::pipe::Pipe;
use super::{Caps, Connecting, Outcome, Protocol, Request, Session, SessionError};
use crate::oracle::Ledger;
use wire::{ErrorFields, SetupError};

/// `workload.postgres`, rendered.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Spec {
    /// `HOST:PORT` (the network fault proxy may stand in).
    pub target: String,
    pub user: String,
    #[serde(default)]
    pub password: Option<String>,
    pub dbname: String,
    /// The table soak creates and writes (a plain identifier).
    pub table: String,
}

impl Spec {
    /// Reads `postgres://USER[:PASSWORD]@HOST:PORT/DB`.
    pub fn from_url(url: &str, table: &str) -> Result<Spec, String> {
        let config: tokio_postgres::Config = url
            .parse()
            .map_err(|e| format!("{url:?} is not a PostgreSQL URL ({e}): give postgres://USER@127.0.0.1:${{PORT}}/postgres"))?;
        let host = match config.get_hosts() {
            [tokio_postgres::config::Host::Tcp(h)] => h.clone(),
            [] => "127.0.0.1".into(),
            _ => return Err(format!("{url:?}: give one TCP host (a Unix socket cannot stand behind soak's network proxy)")),
        };
        let port = config.get_ports().first().copied().unwrap_or(5432);
        let user = config
            .get_user()
            .ok_or_else(|| format!("{url:?}: give the user, postgres://USER@HOST:PORT/DB"))?
            .to_string();
        if !table.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            || table.is_empty()
            || table.starts_with(|c: char| c.is_ascii_digit())
        {
            return Err(format!(
                "table {table:?}: give a plain name of letters, digits and `_`, e.g. soak_kv"
            ));
        }
        Ok(Spec {
            target: format!("{host}:{port}"),
            password: config
                .get_password()
                .map(|p| String::from_utf8_lossy(p).into_owned()),
            dbname: config.get_dbname().unwrap_or(&user).to_string(),
            user,
            table: table.to_string(),
        })
    }
}

/// Queries in flight on one connection at most.
const DEPTH: usize = 32;

impl Protocol for Spec {
    fn name(&self) -> &'static str {
        "postgres"
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
        let spec = self.clone();
        Box::pin(async move {
            let mut pipe = Pipe::connect(&spec.target, t.connect).await?;
            let setup = async {
                let login = wire::Login {
                    user: &spec.user,
                    password: spec.password.as_deref(),
                    dbname: &spec.dbname,
                };
                wire::startup(&mut pipe, &login).await?;
                let t = &spec.table;
                wire::query(
                    &mut pipe.wbuf,
                    &format!(
                        "CREATE TABLE IF NOT EXISTS {t} (k text PRIMARY KEY, v bytea NOT NULL)"
                    ),
                );
                if let Some(e) = wire::round_trip(&mut pipe).await? {
                    // Another connection created it at the same moment:
                    // PostgreSQL says so as a duplicate table (42P07), a
                    // duplicate row type (42710, "type ... already
                    // exists") or a unique violation in its catalog
                    // (23505), whichever of the two got there first.
                    if !RACED.contains(&e.code.as_str()) {
                        return Err(SetupError::Server(e));
                    }
                }
                for (name, sql) in [
                    (UPSERT, format!("INSERT INTO {t} (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v")),
                    (DELETE, format!("DELETE FROM {t} WHERE k = $1")),
                    (READ, format!("SELECT v FROM {t} WHERE k = $1")),
                    (READ_MANY, format!("SELECT k, v FROM {t} WHERE k = ANY($1::text[])")),
                ] {
                    wire::parse(&mut pipe.wbuf, std::str::from_utf8(name).expect("ASCII"), &sql);
                }
                pipe.wbuf.extend_from_slice(wire::SYNC);
                match wire::round_trip(&mut pipe).await? {
                    Some(e) => Err(SetupError::Server(e)),
                    None => Ok(()),
                }
            };
            match tokio::time::timeout(t.connect + t.request, setup).await {
                Err(_) => {
                    return Err(SessionError::Broken(
                        "no answer while logging in and preparing".into(),
                    ))
                }
                Ok(Err(SetupError::Link(e))) => return Err(e),
                Ok(Err(SetupError::Server(e))) => return Err(refused(&spec, &e)),
                Ok(Ok(())) => {}
            }
            Ok(Box::new(Link {
                pipe,
                pending: VecDeque::new(),
            }) as Box<dyn Session>)
        })
    }

    fn describe(&self) -> String {
        format!("postgres://{}@{}/{}", self.user, self.target, self.dbname)
    }
}

/// What `CREATE TABLE IF NOT EXISTS` answers when another connection
/// created the table at the same moment.
const RACED: &[&str] = &["23505", "42P07", "42710"];

/// The prepared statements' names.
const UPSERT: &[u8] = b"soak_upsert";
const DELETE: &[u8] = b"soak_delete";
const READ: &[u8] = b"soak_read";
const READ_MANY: &[u8] = b"soak_read_many";

/// Why a connection could not be had: fatal when retrying cannot help (a
/// wrong password, no such database, no right to create the table).
fn refused(spec: &Spec, e: &ErrorFields) -> SessionError {
    let text = e.text();
    match e.code.get(..2) {
        Some("28") | Some("3D") | Some("42") => SessionError::Fatal(format!(
            "PostgreSQL at {} refused soak: {text}",
            spec.target
        )),
        _ => SessionError::Broken(text),
    }
}

/// What a request asked.
enum Asked {
    Write,
    Read,
    /// The keys, to put the rows (which come in any order) in order.
    ReadMany(Vec<usize>),
}

/// One connection, its buffers, and the requests in flight.
struct Link {
    pipe: Pipe,
    pending: VecDeque<(u64, Asked)>,
}

/// Whether an error leaves a write's fate unknown.
fn unknown(code: &str) -> bool {
    matches!(code.get(..2), Some("08" | "57" | "58" | "XX") | None)
}

/// What one request's replies (up to its ReadyForQuery) said.
struct Reply<'a> {
    error: Option<ErrorFields>,
    completed: bool,
    rows: Vec<&'a [u8]>,
}

/// The replies to the first request in `buf`, and their length, once its
/// ReadyForQuery is there.
fn reply(buf: &[u8]) -> Result<Option<(Reply<'_>, usize)>, String> {
    let mut out = Reply {
        error: None,
        completed: false,
        rows: Vec::new(),
    };
    let mut at = 0;
    loop {
        let Some((m, n)) = wire::message(&buf[at..])? else {
            return Ok(None);
        };
        at += n;
        match m.tag {
            b'D' => out.rows.push(m.body),
            b'C' => out.completed = true,
            b'E' => {
                out.error.get_or_insert_with(|| ErrorFields::parse(m.body));
            }
            b'Z' => return Ok(Some((out, at))),
            // BindComplete, a notice, a parameter's new value, a notification.
            b'2' | b'N' | b'S' | b'A' => {}
            other => {
                return Err(format!(
                    "a message soak did not ask for: {:?}",
                    other as char
                ))
            }
        }
    }
}

impl Session for Link {
    fn submit(&mut self, id: u64, request: Request<'_>) {
        let out = &mut self.pipe.wbuf;
        let key = |k: usize| move |o: &mut Vec<u8>| Ledger::write_key(o, k);
        let asked = match request {
            Request::Set { key: k, value } => {
                wire::bind(out, UPSERT, &[0, 1], |o| {
                    wire::param(o, key(k));
                    wire::param(o, |o| value.write_into(o));
                });
                Asked::Write
            }
            Request::Del { key: k } => {
                wire::bind(out, DELETE, &[0], |o| wire::param(o, key(k)));
                Asked::Write
            }
            Request::Get { keys: [k] } => {
                wire::bind(out, READ, &[0], |o| wire::param(o, key(*k)));
                Asked::Read
            }
            Request::Get { keys } => {
                // A text[] in its text form: the names need no quotes.
                wire::bind(out, READ_MANY, &[0], |o| {
                    wire::param(o, |o| {
                        o.push(b'{');
                        for (i, k) in keys.iter().enumerate() {
                            if i > 0 {
                                o.push(b',');
                            }
                            Ledger::write_key(o, *k);
                        }
                        o.push(b'}');
                    })
                });
                Asked::ReadMany(keys.to_vec())
            }
        };
        out.extend_from_slice(wire::EXECUTE_SYNC);
        self.pending.push_back((id, asked));
    }

    fn flush(&mut self) -> Result<(), SessionError> {
        self.pipe.flush()
    }

    fn poll_progress(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.pipe.poll_progress(cx, !self.pending.is_empty())
    }

    fn drain(&mut self, done: &mut dyn FnMut(u64, Outcome<'_>)) -> Result<(), SessionError> {
        let open = self.pipe.pump()?;
        let buf = &self.pipe.rbuf;
        let mut used = 0;
        let mut broken = None;
        while let Some((id, asked)) = self.pending.front() {
            let Some((r, n)) = reply(&buf[used..]).map_err(SessionError::Broken)? else {
                break;
            };
            used += n;
            if let Some(e) = r.error {
                let text = e.text();
                if unknown(&e.code) {
                    done(*id, Outcome::Unknown(&text))
                } else {
                    done(*id, Outcome::NotDone(&text))
                }
            } else if !r.completed {
                done(
                    *id,
                    Outcome::Unknown("no CommandComplete before ReadyForQuery"),
                )
            } else {
                match judge(asked, &r.rows) {
                    Ok(None) => done(*id, Outcome::Done),
                    Ok(Some(values)) => done(*id, Outcome::Values(&values)),
                    Err(e) => {
                        done(*id, Outcome::Unknown(&e));
                    }
                }
            }
            self.pending.pop_front();
        }
        // Replies to nothing: a FATAL before the server closes (an admin
        // shutdown, a crash), or a protocol error.
        if self.pending.is_empty() {
            while let Some((m, n)) = wire::message(&buf[used..]).map_err(SessionError::Broken)? {
                used += n;
                match m.tag {
                    b'N' | b'S' | b'A' => {}
                    b'E' => {
                        broken.get_or_insert(ErrorFields::parse(m.body).text());
                    }
                    other => {
                        broken.get_or_insert(format!("a reply to no request: {:?}", other as char));
                    }
                }
            }
        }
        self.pipe.rbuf.drain(..used);
        if let Some(e) = broken {
            return Err(SessionError::Broken(e));
        }
        if !open {
            return Err(SessionError::Broken(
                "the node closed the connection".into(),
            ));
        }
        Ok(())
    }
}

/// A finished request's rows: `None` for a write, the values in the order
/// asked for a read.
fn judge<'a>(asked: &Asked, rows: &[&'a [u8]]) -> Result<Option<Vec<Option<&'a [u8]>>>, String> {
    match asked {
        Asked::Write => Ok(None),
        Asked::Read => {
            let mut value = None;
            for row in rows {
                value = wire::columns(row)?.first().copied().flatten();
            }
            Ok(Some(vec![value]))
        }
        Asked::ReadMany(keys) => {
            let mut values = vec![None; keys.len()];
            let at: std::collections::HashMap<usize, usize> =
                keys.iter().enumerate().map(|(i, k)| (*k, i)).collect();
            for row in rows {
                let cols = wire::columns(row)?;
                let (Some(Some(k)), Some(v)) = (cols.first(), cols.get(1)) else {
                    return Err("a row without its key".into());
                };
                let i = Ledger::parse_key(k)
                    .and_then(|k| at.get(&k))
                    .ok_or_else(|| {
                        format!(
                            "a row of a key not asked for: {:?}",
                            String::from_utf8_lossy(k)
                        )
                    })?;
                values[*i] = *v;
            }
            Ok(Some(values))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A backend message: its tag and body, framed.
    fn msg(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        out.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
        out.extend_from_slice(body);
        out
    }

    fn row(cols: &[Option<&[u8]>]) -> Vec<u8> {
        let mut b = (cols.len() as i16).to_be_bytes().to_vec();
        for c in cols {
            match c {
                Some(v) => {
                    b.extend_from_slice(&(v.len() as i32).to_be_bytes());
                    b.extend_from_slice(v);
                }
                None => b.extend_from_slice(&(-1i32).to_be_bytes()),
            }
        }
        msg(b'D', &b)
    }

    #[test]
    fn a_request_is_answered_at_its_ready_for_query_and_not_before() {
        let mut buf = [msg(b'2', b""), msg(b'C', b"INSERT 0 1\0")].concat();
        // CommandComplete alone: the commit comes at the Sync.
        assert!(reply(&buf).unwrap().is_none());
        buf.extend(msg(b'N', b"SNOTICE\0Mhello\0\0"));
        buf.extend(msg(b'Z', b"I"));
        buf.extend(msg(b'2', b""));
        let (r, n) = reply(&buf).unwrap().unwrap();
        assert!(r.completed && r.error.is_none());
        assert_eq!(n, buf.len() - 5, "the next request's reply is left");
    }

    #[test]
    fn an_error_after_the_command_is_the_requests_outcome() {
        let buf = [
            msg(b'2', b""),
            msg(b'C', b"INSERT 0 1\0"),
            msg(b'E', b"SERROR\0C40001\0Mcould not serialize\0\0"),
            msg(b'Z', b"I"),
        ]
        .concat();
        let (r, _) = reply(&buf).unwrap().unwrap();
        assert_eq!(r.error.unwrap().code, "40001");
        assert!(!unknown("40001"), "rolled back: definitely not done");
        assert!(unknown("57P01") && unknown("08006") && unknown("XX000"));
        assert!(
            reply(&msg(b'T', b"")).is_err(),
            "a message soak did not ask for"
        );
    }

    #[test]
    fn rows_come_back_in_the_order_asked_missing_keys_none() {
        let rows = [
            row(&[Some(b"soak:7"), Some(b"seven")]),
            row(&[Some(b"soak:3"), Some(b"three")]),
        ];
        let bodies: Vec<&[u8]> = rows.iter().map(|r| &r[5..]).collect();
        let values = judge(&Asked::ReadMany(vec![3, 5, 7]), &bodies)
            .unwrap()
            .unwrap();
        assert_eq!(values, vec![Some(&b"three"[..]), None, Some(&b"seven"[..])]);
        let stray = row(&[Some(b"soak:9"), Some(b"nine")]);
        assert!(judge(&Asked::ReadMany(vec![3]), &[&stray[5..]]).is_err());
        let one = row(&[Some(b"v")]);
        assert_eq!(
            judge(&Asked::Read, &[&one[5..]]).unwrap().unwrap(),
            vec![Some(&b"v"[..])]
        );
        assert_eq!(judge(&Asked::Read, &[]).unwrap().unwrap(), vec![None]);
        assert_eq!(judge(&Asked::Write, &[]).unwrap(), None);
    }
}
