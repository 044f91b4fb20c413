//! HTTP key-value: a write, a read and a delete
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
//! `connections`, and a read-back opens several sessions. The requests go
//! out on soak's own HTTP/1.1 codec ([`super::http_wire`]), written into
//! the connection's buffer and their replies parsed in place, as RESP's
//! and PostgreSQL's are: hyper's client (a request object, a header map,
//! a body stream and a channel per request) cost soak more CPU a request
//! than wrk spends in all, and on two cores that CPU is the server's.

use std::collections::VecDeque;
use std::task::{Context, Poll};

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use super::http_wire as wire;
use super::pipe::Pipe;
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
    method: String,
    path: Template,
    body: Option<Template>,
    headers: Vec<(String, Template)>,
    /// The header lines without placeholders (`Host` among them),
    /// written once.
    fixed: Vec<u8>,
}

impl Compiled {
    fn new(
        r: &RequestSpec,
        host: &str,
        common: &[(String, String)],
        write: bool,
    ) -> Result<Compiled, String> {
        let method = hyper::Method::from_bytes(r.method.to_ascii_uppercase().as_bytes())
            .map_err(|_| format!("{:?} is not an HTTP method", r.method))?
            .to_string();
        let path = Template::compile(&r.path, false)?;
        if !r.path.starts_with('/') {
            return Err(format!("{:?}: give the path from `/`", r.path));
        }
        let body = r
            .body
            .as_deref()
            .map(|b| Template::compile(b, write))
            .transpose()?;
        let (mut headers, mut fixed) = (vec![], vec![]);
        let mut own_host = false;
        for (k, v) in common
            .iter()
            .filter(|(k, _)| !r.headers.iter().any(|(own, _)| own.eq_ignore_ascii_case(k)))
            .chain(&r.headers)
        {
            hyper::header::HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| format!("{k:?} is not a header name"))?;
            if ["content-length", "transfer-encoding"].contains(&k.to_ascii_lowercase().as_str()) {
                return Err(format!("{k:?}: soak frames the body itself; leave it out"));
            }
            own_host |= k.eq_ignore_ascii_case("host");
            let t = Template::compile(v, write)?;
            if t.0.iter().all(|p| matches!(p, Piece::Text(_))) {
                if !wire::header_value_ok(v.as_bytes()) {
                    return Err(format!("{v:?} is not a header value"));
                }
                fixed.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
            } else {
                headers.push((k.clone(), t));
            }
        }
        if !own_host {
            fixed.extend_from_slice(format!("Host: {host}\r\n").as_bytes());
        }
        Ok(Compiled {
            method,
            path,
            body,
            headers,
            fixed,
        })
    }

    /// Writes the request for `key` (and the value, for a write) to
    /// `out`, or says why it cannot be made (and writes nothing).
    fn encode(
        &self,
        key: usize,
        value: Option<&super::Value>,
        out: &mut Vec<u8>,
        body: &mut Vec<u8>,
    ) -> Result<(), String> {
        let mut name = Vec::with_capacity(24);
        Ledger::write_key(&mut name, key);
        let start = out.len();
        let fail = |out: &mut Vec<u8>, why: String| {
            out.truncate(start);
            Err(why)
        };
        out.extend_from_slice(self.method.as_bytes());
        out.push(b' ');
        let path = out.len();
        self.path.render(&name, None, out);
        if out[path..].iter().any(|b| *b <= b' ' || *b == 0x7f) {
            let p = String::from_utf8_lossy(&out[path..]).into_owned();
            return fail(
                out,
                format!("the path {p:?} has spaces or controls: use ${{key.url}}"),
            );
        }
        out.extend_from_slice(b" HTTP/1.1\r\n");
        out.extend_from_slice(&self.fixed);
        for (k, t) in &self.headers {
            out.extend_from_slice(k.as_bytes());
            out.extend_from_slice(b": ");
            let v = out.len();
            t.render(&name, value, out);
            if !wire::header_value_ok(&out[v..]) {
                return fail(
                    out,
                    format!("header {k}: a value with line breaks or controls"),
                );
            }
            out.extend_from_slice(b"\r\n");
        }
        body.clear();
        if let Some(t) = &self.body {
            t.render(&name, value, body);
            out.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(body);
        Ok(())
    }

    fn is_head(&self) -> bool {
        self.method == "HEAD"
    }
}

/// The HTTP protocol of one cell.
pub struct Http {
    spec: Spec,
    compiled: Result<Requests, String>,
}

#[derive(Debug, Clone)]
struct Requests {
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
        let write = Compiled::new(&spec.write, &spec.host, &spec.headers, true)
            .map_err(|e| format!("write: {e}"))?;
        if !write.body.as_ref().is_some_and(Template::uses_value)
            && !write.headers.iter().any(|(_, t)| t.uses_value())
        {
            return Err("write: the request carries no `${value}` (or `${value.base64}`, `${value.hex}`) in its body or headers".into());
        }
        Ok(Requests {
            write,
            read: Compiled::new(&spec.read, &spec.host, &spec.headers, false)
                .map_err(|e| format!("read: {e}"))?,
            delete: spec
                .delete
                .as_ref()
                .map(|d| Compiled::new(d, &spec.host, &spec.headers, false))
                .transpose()
                .map_err(|e| format!("delete: {e}"))?,
            setup: spec
                .setup
                .iter()
                .map(|s| Compiled::new(s, &spec.host, &spec.headers, false))
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
        let spec = self.spec.clone();
        let requests = self.compiled.clone();
        Box::pin(async move {
            let requests = requests.map_err(SessionError::Fatal)?;
            let mut pipe = Pipe::connect(&spec.target, t.connect).await?;
            let mut scratch = vec![];
            for s in &requests.setup {
                s.encode(0, None, &mut pipe.wbuf, &mut scratch)
                    .map_err(SessionError::Fatal)?;
                let status = tokio::time::timeout(t.request, exchange(&mut pipe, s.is_head()))
                    .await
                    .map_err(|_| SessionError::Broken("setup: no reply".into()))?
                    .map_err(|e| SessionError::Broken(format!("setup: {e}")))?;
                if status >= 500 {
                    return Err(SessionError::Broken(format!("setup answered {status}")));
                }
            }
            Ok(Box::new(Conn {
                pipe,
                spec,
                requests,
                scratch,
                pending: VecDeque::new(),
                refused: VecDeque::new(),
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

/// Sends what is in the write buffer and waits for the reply: its
/// status (a connection's setup).
async fn exchange(pipe: &mut Pipe, head: bool) -> Result<u16, SessionError> {
    pipe.send_all().await?;
    loop {
        let eof = match pipe.read_more().await {
            Ok(()) => false,
            Err(_) if !pipe.rbuf.is_empty() => true,
            Err(e) => return Err(e),
        };
        match wire::response(&pipe.rbuf, head, eof).map_err(SessionError::Broken)? {
            Some(r) => {
                let (status, len, closes) = (r.status, r.len, r.closes);
                pipe.rbuf.drain(..len);
                if closes {
                    return Err(SessionError::Broken(format!(
                        "{status}, and the server closed the connection"
                    )));
                }
                return Ok(status);
            }
            None if eof => {
                return Err(SessionError::Broken(
                    "the node closed the connection".into(),
                ))
            }
            None => {}
        }
    }
}

/// One connection: requests go out as they are submitted, one at a time
/// (the load's depth is 1: HTTP/1.1 without pipelining).
struct Conn {
    pipe: Pipe,
    spec: Spec,
    requests: Requests,
    /// A body, rendered before its length is written.
    scratch: Vec<u8>,
    /// Sent, waiting for a reply: id, kind, whether it was a HEAD.
    pending: VecDeque<(u64, Kind, bool)>,
    /// Requests that could not be made (not sent, not done), and why.
    refused: VecDeque<(u64, String)>,
}

impl Session for Conn {
    fn submit(&mut self, id: u64, request: Request<'_>) {
        let r = &self.requests;
        let (kind, compiled, key, value) = match request {
            Request::Set { key, value } => (Kind::Write, Some(&r.write), key, Some(value)),
            Request::Del { key } => (Kind::Delete, r.delete.as_ref(), key, None),
            Request::Get { keys: [k] } => (Kind::Read, Some(&r.read), *k, None),
            Request::Get { .. } => {
                self.refused
                    .push_back((id, "HTTP reads one key a request".into()));
                return;
            }
        };
        let Some(c) = compiled else {
            self.refused
                .push_back((id, "no `delete` request in the suite".into()));
            return;
        };
        match c.encode(key, value.as_ref(), &mut self.pipe.wbuf, &mut self.scratch) {
            Ok(()) => self.pending.push_back((id, kind, c.is_head())),
            Err(e) => self.refused.push_back((id, e)),
        }
    }

    fn flush(&mut self) -> Result<(), SessionError> {
        self.pipe.flush()
    }

    fn poll_progress(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.refused.is_empty() {
            return Poll::Ready(());
        }
        self.pipe.poll_progress(cx, !self.pending.is_empty())
    }

    fn drain(&mut self, done: &mut dyn FnMut(u64, Outcome<'_>)) -> Result<(), SessionError> {
        while let Some((id, why)) = self.refused.pop_front() {
            done(id, Outcome::NotDone(&why));
        }
        if self.pending.is_empty() {
            return self.flush();
        }
        let open = self.pipe.pump()?;
        let mut used = 0;
        let mut closed = false;
        while let Some(&(id, kind, head)) = self.pending.front() {
            let buf = &self.pipe.rbuf[used..];
            let Some(r) = wire::response(buf, head, !open).map_err(SessionError::Broken)? else {
                break;
            };
            used += r.len;
            self.pending.pop_front();
            judge(&self.spec, kind, r.status, r.body.bytes(), &mut |o| {
                done(id, o)
            });
            if r.closes {
                closed = true;
                break;
            }
        }
        self.pipe
            .settle(used, closed || !open, !self.pending.is_empty())
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
            let mut de = serde_json::Deserializer::from_slice(body);
            let found = serde::de::DeserializeSeed::deserialize(json_at::At(pointer), &mut de)
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

    /// The rest of the pointer to follow (`""`: here).
    pub struct At<'p>(pub &'p str);

    impl<'p> At<'p> {
        /// The next token, still escaped, and the pointer after it.
        fn split(&self) -> Option<(&'p str, At<'p>)> {
            let p = self.0.strip_prefix('/')?;
            let (token, rest) = p.split_at(p.find('/').unwrap_or(p.len()));
            Some((token, At(rest)))
        }
    }

    impl<'de> DeserializeSeed<'de> for At<'_> {
        type Value = Found;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Found, D::Error> {
            d.deserialize_any(self)
        }
    }

    /// Whether a key is the token looked for (as written in the pointer:
    /// `~1` for `/`, `~0` for `~`).
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
            Ok(if self.0.contains('~') {
                v == self.0.replace("~1", "/").replace("~0", "~")
            } else {
                v == self.0
            })
        }
    }

    impl<'de> Visitor<'de> for At<'_> {
        type Value = Found;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("JSON")
        }
        fn visit_str<E>(self, v: &str) -> Result<Found, E> {
            Ok(match self.0 {
                "" => Found::Text(v.as_bytes().to_vec()),
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
            if let Some((token, rest)) = self.split() {
                while let Some(is) = map.next_key_seed(Is(token))? {
                    if is {
                        found = map.next_value_seed(At(rest.0))?;
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
            if let Some((token, rest)) = self.split() {
                // RFC 6901: an index is `0` or has no leading zero.
                let index = token
                    .parse::<usize>()
                    .ok()
                    .filter(|_| token == "0" || !token.starts_with('0'));
                let mut i = 0;
                loop {
                    if Some(i) == index {
                        match seq.next_element_seed(At(rest.0))? {
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
                "" => Found::Other(what),
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
