//! PostgreSQL, on tokio-postgres: a table soak creates (`k text primary
//! key, v bytea`), autocommit upserts and deletes, reads of one key or of
//! many at once (`k = ANY($1)`), prepared once per connection and
//! pipelined on it (tokio-postgres sends a query as soon as it is asked,
//! without waiting for the one before).
//!
//! Outcomes: a statement the server answered with an error was rolled
//! back (autocommit), so the write is definitely not done; but an error
//! that says the connection or the server went away (SQLSTATE classes 08,
//! 57, 58 and XX: an admin shutdown, a crash, an I/O error) may have
//! come after the commit reached the log, and a connection lost during a
//! commit leaves the commit unknown.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::stream::{FuturesUnordered, StreamExt};
use serde::{Deserialize, Serialize};

use super::{Caps, Connecting, Outcome, Protocol, Request, Session, SessionError};
use crate::oracle::Ledger;

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
        let timeout = t.request;
        let spec = self.clone();
        Box::pin(async move {
            let (host, port) = spec
                .target
                .rsplit_once(':')
                .and_then(|(h, p)| Some((h.to_string(), p.parse::<u16>().ok()?)))
                .ok_or_else(|| {
                    SessionError::Fatal(format!("{:?} is not HOST:PORT", spec.target))
                })?;
            let mut config = tokio_postgres::Config::new();
            config
                .host(&host)
                .port(port)
                .user(&spec.user)
                .dbname(&spec.dbname)
                .connect_timeout(t.connect);
            if let Some(p) = &spec.password {
                config.password(p);
            }
            let (client, connection) = config
                .connect(tokio_postgres::NoTls)
                .await
                .map_err(|e| refused(&spec, e))?;
            tokio::spawn(async move {
                let _ = connection.await;
            });
            let t = &spec.table;
            let create =
                format!("CREATE TABLE IF NOT EXISTS {t} (k text PRIMARY KEY, v bytea NOT NULL)");
            let prepare = async {
                if let Err(e) = client.batch_execute(&create).await {
                    // Another connection created it at the same moment.
                    let raced = e.code().is_some_and(|c| {
                        c == &tokio_postgres::error::SqlState::UNIQUE_VIOLATION
                            || c == &tokio_postgres::error::SqlState::DUPLICATE_TABLE
                    });
                    if !raced {
                        return Err(e);
                    }
                }
                Ok(Statements {
                    upsert: client
                        .prepare(&format!(
                            "INSERT INTO {t} (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v"
                        ))
                        .await?,
                    delete: client
                        .prepare(&format!("DELETE FROM {t} WHERE k = $1"))
                        .await?,
                    read: client
                        .prepare(&format!("SELECT k, v FROM {t} WHERE k = ANY($1)"))
                        .await?,
                })
            };
            let statements = tokio::time::timeout(timeout, prepare)
                .await
                .map_err(|_| SessionError::Broken("no answer while preparing".into()))?
                .map_err(|e| refused(&spec, e))?;
            Ok(Box::new(Pg {
                client: Arc::new(client),
                statements: Arc::new(statements),
                running: FuturesUnordered::new(),
                done: VecDeque::new(),
            }) as Box<dyn Session>)
        })
    }

    fn describe(&self) -> String {
        format!("postgres://{}@{}/{}", self.user, self.target, self.dbname)
    }
}

/// Why a connection could not be had: fatal when retrying cannot help (a
/// wrong password, no such database, no right to create the table).
fn refused(spec: &Spec, e: tokio_postgres::Error) -> SessionError {
    let code = e.code().map(|c| c.code().to_string()).unwrap_or_default();
    let text = crate::net::error_chain(&e);
    match code.get(..2) {
        Some("28") | Some("3D") | Some("42") => SessionError::Fatal(format!(
            "PostgreSQL at {} refused soak ({code}): {text}",
            spec.target
        )),
        _ => SessionError::Broken(text),
    }
}

struct Statements {
    upsert: tokio_postgres::Statement,
    delete: tokio_postgres::Statement,
    read: tokio_postgres::Statement,
}

enum Answer {
    Write(Result<u64, tokio_postgres::Error>),
    Read(
        Vec<String>,
        Result<Vec<tokio_postgres::Row>, tokio_postgres::Error>,
    ),
}

type Running = Pin<Box<dyn Future<Output = (u64, Answer)> + Send>>;

struct Pg {
    client: Arc<tokio_postgres::Client>,
    statements: Arc<Statements>,
    running: FuturesUnordered<Running>,
    done: VecDeque<(u64, Answer)>,
}

/// Whether an error leaves a write's fate unknown.
fn unknown(e: &tokio_postgres::Error) -> bool {
    match e.code() {
        None => true,
        Some(c) => matches!(c.code().get(..2), Some("08" | "57" | "58" | "XX")),
    }
}

impl Session for Pg {
    fn submit(&mut self, id: u64, request: Request<'_>) {
        let (client, st) = (self.client.clone(), self.statements.clone());
        let fut: Running = match request {
            Request::Set { key, value } => {
                let (k, v) = (Ledger::key_name(key), value.to_vec());
                Box::pin(async move {
                    (
                        id,
                        Answer::Write(client.execute(&st.upsert, &[&k, &v]).await),
                    )
                })
            }
            Request::Del { key } => {
                let k = Ledger::key_name(key);
                Box::pin(
                    async move { (id, Answer::Write(client.execute(&st.delete, &[&k]).await)) },
                )
            }
            Request::Get { keys } => {
                let names: Vec<String> = keys.iter().map(|k| Ledger::key_name(*k)).collect();
                Box::pin(async move {
                    let rows = client.query(&st.read, &[&names]).await;
                    (id, Answer::Read(names, rows))
                })
            }
        };
        self.running.push(fut);
    }

    fn flush(&mut self) -> Result<(), SessionError> {
        Ok(())
    }

    fn poll_progress(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        while let Poll::Ready(Some(answer)) = self.running.poll_next_unpin(cx) {
            self.done.push_back(answer);
        }
        if self.done.is_empty() {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    }

    fn drain(&mut self, done: &mut dyn FnMut(u64, Outcome<'_>)) -> Result<(), SessionError> {
        let mut broken = None;
        while let Some((id, answer)) = self.done.pop_front() {
            match answer {
                Answer::Write(Ok(_)) => done(id, Outcome::Done),
                Answer::Write(Err(e)) | Answer::Read(_, Err(e)) => {
                    let text = crate::net::error_chain(&e);
                    if e.is_closed() || e.code().is_none() {
                        broken.get_or_insert(text.clone());
                    }
                    if unknown(&e) {
                        done(id, Outcome::Unknown(&text))
                    } else {
                        done(id, Outcome::NotDone(&text))
                    }
                }
                Answer::Read(names, Ok(rows)) => {
                    let mut by_key: std::collections::HashMap<String, Vec<u8>> = rows
                        .into_iter()
                        .filter_map(|r| Some((r.try_get(0).ok()?, r.try_get(1).ok()?)))
                        .collect();
                    let values: Vec<Option<Vec<u8>>> =
                        names.iter().map(|n| by_key.remove(n)).collect();
                    let borrowed: Vec<Option<&[u8]>> =
                        values.iter().map(|v| v.as_deref()).collect();
                    done(id, Outcome::Values(&borrowed));
                }
            }
        }
        match broken {
            Some(e) => Err(SessionError::Broken(e)),
            None => Ok(()),
        }
    }
}
