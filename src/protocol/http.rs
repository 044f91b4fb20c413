//! HTTP key-value, on soak's hyper client: a write, a read and a delete
//! request, each a method, a path, headers and a body made from templates
//! of the key and the value (`${key}`, `${value.base64}`...), and where a
//! read's value is in the reply (the body, or a JSON pointer, decoded).
//! Which statuses mean done, missing, not done or unknown is the suite's
//! to say; by default 2xx is done, 404 is missing on a read (and done on a
//! delete), other 4xx are definitely not done, and 5xx, timeouts and
//! resets are unknown.
//!
//! One request is in flight on a connection at a time (HTTP/1.1 without
//! pipelining, as `wrk` and most clients do): concurrency is the load's
//! `connections`, and a read-back opens several sessions.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use base64::Engine as _;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use serde::{Deserialize, Serialize};

use super::{Caps, Connecting, Outcome, Protocol, Request, Session, SessionError};
use crate::oracle::Ledger;

/// The placeholders a request template may hold besides the suite's own.
pub const PLACEHOLDERS: &[&str] = &[
    "key",
    "key.base64",
    "key.hex",
    "key.url",
    "value",
    "value.base64",
    "value.hex",
];

/// `workload.http`, rendered (templates keep their key and value
/// placeholders).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Spec {
    /// `HOST:PORT` the connections go to (the network fault proxy may
    /// stand in).
    pub target: String,
    /// The `Host` header: the URL's own authority.
    pub host: String,
    /// Headers of every request (a request's own replace them by name).
    pub headers: Vec<(String, String)>,
    pub write: RequestSpec,
    pub read: RequestSpec,
    pub delete: Option<RequestSpec>,
    /// Where a read's value is.
    pub value: Extract,
    pub status: Statuses,
    /// Requests made once on each new connection before the load's (a
    /// bucket created; any status but 5xx is fine).
    pub setup: Vec<RequestSpec>,
}

/// One request's template.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RequestSpec {
    pub method: String,
    pub path: String,
    pub body: Option<String>,
    pub headers: Vec<(String, String)>,
}

/// Where a read's value is in its reply.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum Extract {
    /// The whole body.
    Body { decode: Decode },
    /// The string at a JSON pointer (RFC 6901) in the body; a pointer
    /// that points at nothing is a missing key (etcd's range reply has no
    /// `kvs` then).
    Json { pointer: String, decode: Decode },
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Decode {
    #[default]
    None,
    Base64,
    Hex,
}

/// Ranges of status codes, inclusive.
pub type StatusSet = Vec<(u16, u16)>;

/// What a reply's status means.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Statuses {
    pub done: StatusSet,
    pub missing: StatusSet,
    pub not_done: StatusSet,
    pub unknown: StatusSet,
}

impl Default for Statuses {
    fn default() -> Self {
        Statuses {
            done: vec![(200, 299)],
            missing: vec![(404, 404)],
            not_done: vec![(400, 499)],
            unknown: vec![(500, 599)],
        }
    }
}

/// Parses `2xx`, `404` or `400-499`.
pub fn parse_status(s: &str) -> Result<(u16, u16), String> {
    let s = s.trim();
    let bad = || format!("{s:?} is not a status: give 404, 4xx or 400-499");
    if let Some(d) = s.strip_suffix("xx") {
        let d: u16 = d.parse().map_err(|_| bad())?;
        if !(1..=5).contains(&d) {
            return Err(bad());
        }
        return Ok((d * 100, d * 100 + 99));
    }
    let (a, b) = s.split_once('-').unwrap_or((s, s));
    let (a, b): (u16, u16) = (
        a.trim().parse().map_err(|_| bad())?,
        b.trim().parse().map_err(|_| bad())?,
    );
    if !(100..=599).contains(&a) || !(100..=599).contains(&b) || a > b {
        return Err(bad());
    }
    Ok((a, b))
}

fn within(set: &StatusSet, status: u16) -> bool {
    set.iter().any(|(a, b)| (*a..=*b).contains(&status))
}

/// A piece of a template.
#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Text(String),
    Key(Encoding),
    Value(Encoding),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Encoding {
    Raw,
    Base64,
    Hex,
    Url,
}

/// A template compiled: text, keys and values in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Template(Vec<Piece>);

impl Template {
    /// Compiles `text`; `value` says whether `${value...}` may appear.
    pub fn compile(text: &str, value: bool) -> Result<Template, String> {
        let mut out = vec![];
        let mut rest = text;
        while let Some(i) = rest.find("${") {
            let (before, after) = rest.split_at(i);
            let end = after
                .find('}')
                .ok_or_else(|| format!("unclosed `${{` in {text:?}"))?;
            let name = &after[2..end];
            let piece = match name {
                "key" => Piece::Key(Encoding::Raw),
                "key.base64" => Piece::Key(Encoding::Base64),
                "key.hex" => Piece::Key(Encoding::Hex),
                "key.url" => Piece::Key(Encoding::Url),
                "value" | "value.base64" | "value.hex" if !value => {
                    return Err(format!(
                        "`${{{name}}}` has no value here: only a write's body and headers carry the value"
                    ))
                }
                "value" => Piece::Value(Encoding::Raw),
                "value.base64" => Piece::Value(Encoding::Base64),
                "value.hex" => Piece::Value(Encoding::Hex),
                other => {
                    return Err(format!(
                        "unknown placeholder `${{{other}}}`{}; a request may use {}",
                        crate::units::did_you_mean(other, PLACEHOLDERS.iter().copied()),
                        PLACEHOLDERS
                            .iter()
                            .map(|p| format!("${{{p}}}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                }
            };
            if !before.is_empty() {
                out.push(Piece::Text(before.to_string()));
            }
            out.push(piece);
            rest = &after[end + 1..];
        }
        if !rest.is_empty() {
            out.push(Piece::Text(rest.to_string()));
        }
        Ok(Template(out))
    }

    /// Renders the template for `key` (and the value, for a write).
    fn render(&self, key: &[u8], value: Option<&super::Value>, out: &mut Vec<u8>) {
        let mut scratch = vec![];
        for p in &self.0 {
            match p {
                Piece::Text(t) => out.extend_from_slice(t.as_bytes()),
                Piece::Key(e) => encode(*e, key, out),
                Piece::Value(e) => {
                    if let Some(v) = value {
                        if *e == Encoding::Raw {
                            v.write_into(out);
                        } else {
                            scratch.clear();
                            v.write_into(&mut scratch);
                            encode(*e, &scratch, out);
                        }
                    }
                }
            }
        }
    }

    fn uses_value(&self) -> bool {
        self.0.iter().any(|p| matches!(p, Piece::Value(_)))
    }
}

fn encode(e: Encoding, bytes: &[u8], out: &mut Vec<u8>) {
    match e {
        Encoding::Raw => out.extend_from_slice(bytes),
        Encoding::Base64 => {
            let s = base64::engine::general_purpose::STANDARD.encode(bytes);
            out.extend_from_slice(s.as_bytes());
        }
        Encoding::Hex => {
            for b in bytes {
                out.extend_from_slice(format!("{b:02x}").as_bytes());
            }
        }
        Encoding::Url => {
            for b in bytes {
                if b.is_ascii_alphanumeric() || b"-._~".contains(b) {
                    out.push(*b);
                } else {
                    out.extend_from_slice(format!("%{b:02X}").as_bytes());
                }
            }
        }
    }
}

/// A request's template, compiled.
#[derive(Debug, Clone)]
struct Compiled {
    method: hyper::Method,
    path: Template,
    body: Option<Template>,
    headers: Vec<(hyper::header::HeaderName, Template)>,
    /// The headers without placeholders, made once.
    fixed: hyper::HeaderMap,
}

impl Compiled {
    fn new(r: &RequestSpec, common: &[(String, String)], write: bool) -> Result<Compiled, String> {
        let method = hyper::Method::from_bytes(r.method.to_ascii_uppercase().as_bytes())
            .map_err(|_| format!("{:?} is not an HTTP method", r.method))?;
        let path = Template::compile(&r.path, false)?;
        if !r.path.starts_with('/') {
            return Err(format!("{:?}: give the path from `/`", r.path));
        }
        let body = r
            .body
            .as_deref()
            .map(|b| Template::compile(b, write))
            .transpose()?;
        let (mut headers, mut fixed) = (vec![], hyper::HeaderMap::new());
        for (k, v) in common
            .iter()
            .filter(|(k, _)| !r.headers.iter().any(|(own, _)| own.eq_ignore_ascii_case(k)))
            .chain(&r.headers)
        {
            let name = hyper::header::HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| format!("{k:?} is not a header name"))?;
            let t = Template::compile(v, write)?;
            if t.0.iter().all(|p| matches!(p, Piece::Text(_))) {
                let value = hyper::header::HeaderValue::from_str(v)
                    .map_err(|_| format!("{v:?} is not a header value"))?;
                fixed.append(name, value);
            } else {
                headers.push((name, t));
            }
        }
        Ok(Compiled {
            method,
            path,
            body,
            headers,
            fixed,
        })
    }

    fn build(
        &self,
        host: &hyper::header::HeaderValue,
        key: usize,
        value: Option<&super::Value>,
    ) -> Result<hyper::Request<Full<Bytes>>, String> {
        let mut name = Vec::with_capacity(24);
        Ledger::write_key(&mut name, key);
        let mut path = Vec::with_capacity(64);
        self.path.render(&name, None, &mut path);
        let mut body = vec![];
        if let Some(t) = &self.body {
            t.render(&name, value, &mut body);
        }
        let mut req = hyper::Request::new(Full::new(Bytes::from(body)));
        *req.method_mut() = self.method.clone();
        *req.uri_mut() = hyper::Uri::from_maybe_shared(Bytes::from(path))
            .map_err(|e| format!("cannot make the request: {e}"))?;
        let headers = req.headers_mut();
        headers.clone_from(&self.fixed);
        if !headers.contains_key(hyper::header::HOST) {
            headers.insert(hyper::header::HOST, host.clone());
        }
        for (k, v) in &self.headers {
            let mut out = vec![];
            v.render(&name, value, &mut out);
            let v = hyper::header::HeaderValue::from_maybe_shared(Bytes::from(out))
                .map_err(|e| format!("cannot make the request: {e}"))?;
            headers.append(k, v);
        }
        Ok(req)
    }
}

/// The HTTP protocol of one cell.
pub struct Http {
    spec: Spec,
    compiled: Result<Requests, String>,
}

#[derive(Debug, Clone)]
struct Requests {
    /// The `Host` header.
    host: hyper::header::HeaderValue,
    write: Compiled,
    read: Compiled,
    delete: Option<Compiled>,
    setup: Vec<Compiled>,
}

impl Http {
    pub fn new(spec: Spec) -> Http {
        let compiled = Http::compile(&spec);
        Http { spec, compiled }
    }

    /// Compiles every template: what `soak validate` checks.
    pub fn compile_check(spec: &Spec) -> Result<(), String> {
        Http::compile(spec).map(|_| ())
    }

    fn compile(spec: &Spec) -> Result<Requests, String> {
        let write =
            Compiled::new(&spec.write, &spec.headers, true).map_err(|e| format!("write: {e}"))?;
        if !write.body.as_ref().is_some_and(Template::uses_value)
            && !write.headers.iter().any(|(_, t)| t.uses_value())
        {
            return Err("write: the request carries no `${value}` (or `${value.base64}`, `${value.hex}`) in its body or headers".into());
        }
        Ok(Requests {
            host: hyper::header::HeaderValue::from_str(&spec.host)
                .map_err(|_| format!("{:?} is not a host", spec.host))?,
            write,
            read: Compiled::new(&spec.read, &spec.headers, false)
                .map_err(|e| format!("read: {e}"))?,
            delete: spec
                .delete
                .as_ref()
                .map(|d| Compiled::new(d, &spec.headers, false))
                .transpose()
                .map_err(|e| format!("delete: {e}"))?,
            setup: spec
                .setup
                .iter()
                .map(|s| Compiled::new(s, &spec.headers, false))
                .collect::<Result<_, _>>()
                .map_err(|e| format!("setup: {e}"))?,
        })
    }
}

impl Protocol for Http {
    fn name(&self) -> &'static str {
        "http"
    }

    fn caps(&self) -> Caps {
        Caps {
            multi_get: false,
            delete: self.spec.delete.is_some(),
        }
    }

    fn depth(&self) -> usize {
        1
    }

    fn connect(&self, t: super::Timeouts) -> Connecting {
        let timeout = t.request;
        let spec = self.spec.clone();
        let requests = self.compiled.clone();
        Box::pin(async move {
            let requests = requests.map_err(SessionError::Fatal)?;
            let target = spec.target.clone();
            let stream = tokio::time::timeout(t.connect, tokio::net::TcpStream::connect(&target))
                .await
                .map_err(|_| {
                    SessionError::Broken(format!(
                        "no connection to {target} within {:?}",
                        t.connect
                    ))
                })?
                .map_err(|e| SessionError::Broken(format!("cannot connect to {target}: {e}")))?;
            let _ = stream.set_nodelay(true);
            let (mut sender, mut conn) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                    .await
                    .map_err(|e| SessionError::Broken(format!("{target}: {e}")))?;
            for s in &requests.setup {
                let req = s
                    .build(&requests.host, 0, None)
                    .map_err(SessionError::Fatal)?;
                let work = async {
                    sender.ready().await?;
                    let r = sender.send_request(req).await?;
                    let status = r.status().as_u16();
                    let _ = r.into_body().collect().await;
                    Ok::<u16, hyper::Error>(status)
                };
                // The connection is driven here, as the session drives it
                // later: no task of its own, no wake-up across tasks.
                let work = async {
                    tokio::select! {
                        r = work => r.map_err(|e| format!("setup: {e}")),
                        r = &mut conn => Err(match r {
                            Ok(()) => "setup: the node closed the connection".to_string(),
                            Err(e) => format!("setup: {e}"),
                        }),
                    }
                };
                let status = tokio::time::timeout(timeout, work)
                    .await
                    .map_err(|_| SessionError::Broken("setup: no reply".into()))?
                    .map_err(SessionError::Broken)?;
                if status >= 500 {
                    return Err(SessionError::Broken(format!("setup answered {status}")));
                }
            }
            Ok(Box::new(Conn {
                sender,
                conn: Some(conn),
                spec,
                requests,
                queue: VecDeque::new(),
                in_flight: None,
                done: VecDeque::new(),
                broken: None,
            }) as Box<dyn Session>)
        })
    }

    fn describe(&self) -> String {
        format!("http://{}", self.spec.host)
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Write,
    Delete,
    Read,
}

type Reply = Result<(u16, Bytes), String>;
/// A request made from its template, or why it could not be.
type Built = Result<hyper::Request<Full<Bytes>>, String>;
type Exchange = Pin<Box<dyn Future<Output = Reply> + Send>>;

type Connection = hyper::client::conn::http1::Connection<
    hyper_util::rt::TokioIo<tokio::net::TcpStream>,
    Full<Bytes>,
>;

struct Conn {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    /// The connection's I/O, polled in [`Session::poll_progress`] (`None`
    /// once it ended).
    conn: Option<Connection>,
    spec: Spec,
    requests: Requests,
    queue: VecDeque<(u64, Kind, Built)>,
    in_flight: Option<(u64, Kind, Exchange)>,
    done: VecDeque<(u64, Kind, Reply)>,
    broken: Option<String>,
}

impl Session for Conn {
    fn submit(&mut self, id: u64, request: Request<'_>) {
        let host = &self.requests.host;
        let (kind, built) = match request {
            Request::Set { key, value } => (
                Kind::Write,
                self.requests.write.build(host, key, Some(&value)),
            ),
            Request::Del { key } => (
                Kind::Delete,
                match &self.requests.delete {
                    Some(d) => d.build(host, key, None),
                    None => Err("no `delete` request in the suite".into()),
                },
            ),
            Request::Get { keys } => (
                Kind::Read,
                match keys {
                    [k] => self.requests.read.build(host, *k, None),
                    _ => Err("HTTP reads one key a request".into()),
                },
            ),
        };
        self.queue.push_back((id, kind, built));
    }

    fn flush(&mut self) -> Result<(), SessionError> {
        match &self.broken {
            Some(e) => Err(SessionError::Broken(e.clone())),
            None => Ok(()),
        }
    }

    fn poll_progress(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            if let Some(conn) = self.conn.as_mut() {
                if let Poll::Ready(r) = Pin::new(conn).poll(cx) {
                    self.conn = None;
                    if let Err(e) = r {
                        self.broken.get_or_insert(crate::net::error_chain(&e));
                    }
                }
            }
            if self.broken.is_some() {
                return Poll::Ready(());
            }
            if let Some((id, kind, exchange)) = self.in_flight.as_mut() {
                match exchange.as_mut().poll(cx) {
                    Poll::Ready(r) => {
                        self.done.push_back((*id, *kind, r));
                        self.in_flight = None;
                        continue;
                    }
                    Poll::Pending => break,
                }
            }
            if self.queue.is_empty() {
                break;
            }
            match self.sender.poll_ready(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => {
                    self.broken = Some(e.to_string());
                    return Poll::Ready(());
                }
                Poll::Pending => break,
            }
            let (id, kind, built) = self.queue.pop_front().expect("checked");
            match built {
                Ok(req) => {
                    let sent = self.sender.send_request(req);
                    let exchange: Exchange = Box::pin(async move {
                        let r = sent.await.map_err(|e| crate::net::error_chain(&e))?;
                        let status = r.status().as_u16();
                        let body = r
                            .into_body()
                            .collect()
                            .await
                            .map_err(|e| format!("reading the body: {e}"))?
                            .to_bytes();
                        Ok((status, body))
                    });
                    self.in_flight = Some((id, kind, exchange));
                }
                Err(e) => self.done.push_back((id, kind, Err(format!("!{e}")))),
            }
        }
        if self.done.is_empty() {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    }

    fn drain(&mut self, done: &mut dyn FnMut(u64, Outcome<'_>)) -> Result<(), SessionError> {
        while let Some((id, kind, reply)) = self.done.pop_front() {
            let (status, body) = match reply {
                Ok(r) => r,
                // A request that could not be made: not sent, not done.
                Err(e) if e.starts_with('!') => {
                    done(id, Outcome::NotDone(&e[1..]));
                    continue;
                }
                Err(e) => {
                    self.broken = Some(e);
                    break;
                }
            };
            judge(&self.spec, kind, status, &body, &mut |o| done(id, o));
        }
        self.flush()
    }
}

/// What a reply says: its status read by the suite's `status`, a read's
/// value found where the suite's `value` says.
fn judge(spec: &Spec, kind: Kind, status: u16, body: &[u8], done: &mut dyn FnMut(Outcome<'_>)) {
    let s = &spec.status;
    let why = || {
        let text = String::from_utf8_lossy(&body[..body.len().min(200)]);
        format!("{status} {}", text.trim())
    };
    match kind {
        Kind::Read if within(&s.missing, status) => done(Outcome::Values(&[None])),
        Kind::Read if within(&s.done, status) => match extract(&spec.value, body) {
            Ok(v) => done(Outcome::Values(&[v.as_deref()])),
            Err(e) => done(Outcome::Unknown(&format!("{status}: {e}"))),
        },
        Kind::Delete if within(&s.missing, status) => done(Outcome::Done),
        Kind::Write | Kind::Delete if within(&s.done, status) => done(Outcome::Done),
        _ if within(&s.not_done, status) => done(Outcome::NotDone(&why())),
        _ => done(Outcome::Unknown(&why())),
    }
}

/// The value in a read's reply body (`None`: a JSON pointer to nothing).
fn extract(e: &Extract, body: &[u8]) -> Result<Option<Vec<u8>>, String> {
    let (raw, decode) = match e {
        Extract::Body { decode } => (body.to_vec(), *decode),
        Extract::Json { pointer, decode } => {
            let tokens: Vec<String> = pointer
                .split('/')
                .skip(1)
                .map(|t| t.replace("~1", "/").replace("~0", "~"))
                .collect();
            let mut de = serde_json::Deserializer::from_slice(body);
            let found = serde::de::DeserializeSeed::deserialize(json_at::At(&tokens), &mut de)
                .and_then(|f| de.end().map(|_| f))
                .map_err(|err| {
                    format!(
                        "the reply is not JSON ({err}): {:?}",
                        String::from_utf8_lossy(&body[..body.len().min(100)])
                    )
                })?;
            match found {
                json_at::Found::Nothing => return Ok(None),
                json_at::Found::Text(s) => (s, *decode),
                json_at::Found::Other(what) => {
                    return Err(format!(
                        "{pointer} is {what}, not a string: point at the value"
                    ))
                }
            }
        }
    };
    Ok(Some(match decode {
        Decode::None => raw,
        Decode::Base64 => base64::engine::general_purpose::STANDARD
            .decode(&raw)
            .map_err(|err| format!("the value is not base64: {err}"))?,
        Decode::Hex => {
            let text = std::str::from_utf8(&raw).map_err(|_| "the value is not hex".to_string())?;
            if text.len() % 2 == 1 {
                return Err("the value is not hex: an odd length".into());
            }
            (0..text.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&text[i..i + 2], 16))
                .collect::<Result<_, _>>()
                .map_err(|_| "the value is not hex".to_string())?
        }
    }))
}

/// What a JSON pointer points at, found while the reply is parsed: the
/// rest of the document is skipped, not built into a tree (a read's reply
/// is parsed once per request, in the load's hot path).
mod json_at {
    use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
    use std::fmt;

    pub enum Found {
        Nothing,
        Text(Vec<u8>),
        /// Something else: what it is, for the message.
        Other(&'static str),
    }

    /// The pointer's tokens still to follow.
    pub struct At<'p>(pub &'p [String]);

    impl<'de> DeserializeSeed<'de> for At<'_> {
        type Value = Found;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Found, D::Error> {
            d.deserialize_any(self)
        }
    }

    /// Whether a key is the token looked for.
    struct Is<'p>(&'p str);

    impl<'de> DeserializeSeed<'de> for Is<'_> {
        type Value = bool;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
            d.deserialize_str(self)
        }
    }

    impl<'de> Visitor<'de> for Is<'_> {
        type Value = bool;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a key")
        }
        fn visit_str<E>(self, v: &str) -> Result<bool, E> {
            Ok(v == self.0)
        }
    }

    impl<'de> Visitor<'de> for At<'_> {
        type Value = Found;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("JSON")
        }
        fn visit_str<E>(self, v: &str) -> Result<Found, E> {
            Ok(match self.0 {
                [] => Found::Text(v.as_bytes().to_vec()),
                _ => Found::Nothing,
            })
        }
        fn visit_unit<E>(self) -> Result<Found, E> {
            Ok(Found::Nothing)
        }
        fn visit_bool<E>(self, _: bool) -> Result<Found, E> {
            Ok(self.leaf("a boolean"))
        }
        fn visit_i64<E>(self, _: i64) -> Result<Found, E> {
            Ok(self.leaf("a number"))
        }
        fn visit_u64<E>(self, _: u64) -> Result<Found, E> {
            Ok(self.leaf("a number"))
        }
        fn visit_f64<E>(self, _: f64) -> Result<Found, E> {
            Ok(self.leaf("a number"))
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Found, A::Error> {
            let mut found = self.leaf("an object");
            if let [token, rest @ ..] = self.0 {
                while let Some(is) = map.next_key_seed(Is(token))? {
                    if is {
                        found = map.next_value_seed(At(rest))?;
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok(found)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Found, A::Error> {
            let mut found = self.leaf("an array");
            if let [token, rest @ ..] = self.0 {
                // RFC 6901: an index is `0` or has no leading zero.
                let index = token
                    .parse::<usize>()
                    .ok()
                    .filter(|_| token == "0" || !token.starts_with('0'));
                let mut i = 0;
                loop {
                    if Some(i) == index {
                        match seq.next_element_seed(At(rest))? {
                            Some(f) => found = f,
                            None => break,
                        }
                    } else if seq.next_element::<IgnoredAny>()?.is_none() {
                        break;
                    }
                    i += 1;
                }
            }
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(found)
        }
    }

    impl At<'_> {
        /// A value that is not a string: the answer if the pointer ends
        /// here, nothing if it goes on.
        fn leaf(&self, what: &'static str) -> Found {
            match self.0 {
                [] => Found::Other(what),
                _ => Found::Nothing,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_render_keys_and_values_in_each_encoding() {
        let ledger = Ledger::new(10, (8, 8), 1.0, 0.0, 1);
        let value = super::super::Value::new(&ledger, 3, 1);
        let t = Template::compile(
            r#"{"key":"${key.base64}","value":"${value.base64}","k":"${key}","u":"${key.url}","h":"${key.hex}"}"#,
            true,
        )
        .unwrap();
        let mut out = vec![];
        t.render(b"soak:3", Some(&value), &mut out);
        let json: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(json["key"], "c29hazoz");
        assert_eq!(json["k"], "soak:3");
        assert_eq!(json["u"], "soak%3A3");
        assert_eq!(json["h"], "736f616b3a33");
        let v = base64::engine::general_purpose::STANDARD
            .decode(json["value"].as_str().unwrap())
            .unwrap();
        assert_eq!(v, ledger.value(3, 1));
        let e = Template::compile("/x/${kye}", false).unwrap_err();
        assert!(e.contains("did you mean `key`"), "{e}");
        let e = Template::compile("/x/${value}", false).unwrap_err();
        assert!(e.contains("no value here"), "{e}");
    }

    #[test]
    fn statuses_are_codes_classes_or_ranges() {
        assert_eq!(parse_status("2xx").unwrap(), (200, 299));
        assert_eq!(parse_status("404").unwrap(), (404, 404));
        assert_eq!(parse_status("400-499").unwrap(), (400, 499));
        for bad in ["6xx", "42", "500-400", "abc"] {
            assert!(parse_status(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_value_is_found_in_the_body_or_at_a_json_pointer() {
        let body = br#"{"kvs":[{"key":"a2V5","value":"dmFs"}]}"#;
        let at = Extract::Json {
            pointer: "/kvs/0/value".into(),
            decode: Decode::Base64,
        };
        assert_eq!(extract(&at, body).unwrap(), Some(b"val".to_vec()));
        // etcd's range of a missing key has no `kvs`.
        assert_eq!(extract(&at, br#"{"header":{}}"#).unwrap(), None);
        assert!(extract(&at, b"<html>").is_err());
        // Found while parsing: other members before and after, the second
        // element, an escaped key and string, and the rest still checked.
        let deep = Extract::Json {
            pointer: "/r/1/a~1b".into(),
            decode: Decode::None,
        };
        let body =
            br#"{"x":[1,{"y":null}],"r":[{"a/b":"no"},{"z":true,"a/b":"\u0041\"q"}],"t":{}}"#;
        assert_eq!(extract(&deep, body).unwrap(), Some(b"A\"q".to_vec()));
        assert_eq!(extract(&deep, br#"{"r":[{}]}"#).unwrap(), None);
        assert_eq!(extract(&deep, br#"{"r":[{},{"a/b":null}]}"#).unwrap(), None);
        let e = extract(&deep, br#"{"r":[{},{"a/b":7}]}"#).unwrap_err();
        assert!(e.contains("is a number, not a string"), "{e}");
        assert!(extract(&deep, br#"{"r":[{},{"a/b":"v"}]} trailing"#).is_err());
        assert!(extract(&deep, br#"{"r":[{},{"a/b":"v"}"#).is_err());
        let whole = Extract::Body {
            decode: Decode::None,
        };
        assert_eq!(extract(&whole, b"abc").unwrap(), Some(b"abc".to_vec()));
    }

    #[test]
    fn statuses_end_requests_in_the_three_outcomes() {
        let spec = Spec {
            target: String::new(),
            host: String::new(),
            headers: vec![],
            write: RequestSpec {
                method: "PUT".into(),
                path: "/".into(),
                body: None,
                headers: vec![],
            },
            read: RequestSpec {
                method: "GET".into(),
                path: "/".into(),
                body: None,
                headers: vec![],
            },
            delete: None,
            value: Extract::Body {
                decode: Decode::None,
            },
            status: Statuses::default(),
            setup: vec![],
        };
        let mut seen = vec![];
        for (kind, status) in [
            (Kind::Write, 201),
            (Kind::Write, 409),
            (Kind::Write, 503),
            (Kind::Read, 404),
            (Kind::Read, 200),
            (Kind::Delete, 404),
        ] {
            judge(&spec, kind, status, b"v", &mut |o| {
                seen.push(match o {
                    Outcome::Done => "done".to_string(),
                    Outcome::Values([None]) => "missing".into(),
                    Outcome::Values(v) => format!("{:?}", v[0].map(|b| b.to_vec())),
                    Outcome::NotDone(_) => "not done".into(),
                    Outcome::Unknown(_) => "unknown".into(),
                })
            });
        }
        assert_eq!(
            seen,
            [
                "done",
                "not done",
                "unknown",
                "missing",
                "Some([118])",
                "done"
            ]
        );
    }
}
