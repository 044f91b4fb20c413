//! Histories in other tools' forms, read and written:
//!
//! - **Jepsen's log** (`INFO  jepsen.util - 3 :invoke :cas [1 4]`), as
//!   Porcupine's tests read Jepsen's etcd histories.
//! - **Jepsen's EDN**, one map an event (`{:process 0, :type :ok, :f
//!   :read, :value 3, :time 1234}`), as `history.edn` holds them and Elle
//!   and Knossos read them; several keys as `:key`, or as
//!   `jepsen.independent`'s `[key value]` tuples.
//! - **Porcupine's form**: a JSON array of its `Operation`s (`ClientId`,
//!   `Input`, `Call`, `Output`, `Return`), which a Go program decodes
//!   with `encoding/json` and checks with its key-value register model.
//! - **soak's JSON lines**: one operation a line, times in nanoseconds.
//!
//! Events pair by process: a process has one operation in flight; one
//! that never completed (or completed `:info`) has an unknown outcome.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::{History, NotAHistory, Op, Outcome, Val, F, NIL};

/// The forms a history can be written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Jepsen's EDN, one event a line (Elle, Knossos).
    Jepsen,
    /// Porcupine's operations, as JSON.
    Porcupine,
    /// soak's JSON lines, one operation a line.
    Jsonl,
}

/// Reads a history in any of the forms above, told apart by its first
/// line that says something.
pub fn read(text: &str) -> Result<History, NotAHistory> {
    let first = text.lines().map(str::trim).find(|l| !l.is_empty());
    let Some(first) = first else {
        return Err(NotAHistory {
            line: 1,
            what: "the file is empty".into(),
        });
    };
    if first.starts_with("[{\"") || first.starts_with("{\"ClientId\"") || first == "[" {
        return read_porcupine(text);
    }
    if first.starts_with("{\"") {
        return read_jsonl(text);
    }
    if first.starts_with('{') || first.starts_with('[') {
        return read_edn(text);
    }
    if text.contains("jepsen.util - ") {
        return read_jepsen_log(text);
    }
    Err(NotAHistory {
        line: text.lines().position(|l| !l.trim().is_empty()).unwrap_or(0) + 1,
        what: format!(
            "not a history: expected Jepsen's log (`INFO  jepsen.util - 0 :invoke :read nil`), EDN maps (`{{:process 0, :type :invoke, :f :read, :value nil}}`), Porcupine's JSON or soak's JSON lines; found `{}`",
            clip(first)
        ),
    })
}

fn clip(s: &str) -> String {
    if s.chars().count() > 60 {
        format!("{}…", s.chars().take(60).collect::<String>())
    } else {
        s.to_string()
    }
}

/// One event of a history as the readers find it.
#[derive(Debug, Clone, PartialEq)]
enum Ev {
    Invoke,
    Ok,
    Fail,
    Info,
}

/// Pairs events into operations.
struct Pairing {
    h: History,
    /// Per process: the operation in flight and the line it came from.
    pending: HashMap<String, (usize, usize)>,
    clients: HashMap<String, u32>,
    ops: usize,
}

/// What an event says, with names not yet interned.
struct Event<'a> {
    process: &'a str,
    ev: Ev,
    f: &'a str,
    key: Option<String>,
    value: EValue,
    time: u64,
    line: usize,
}

/// A value as written: nothing, one, or a pair (a compare-and-set's).
#[derive(Debug, Clone, PartialEq)]
enum EValue {
    Nil,
    One(String),
    Pair(Option<String>, Option<String>),
    Other(String),
}

impl Pairing {
    fn new() -> Pairing {
        Pairing {
            h: History::default(),
            pending: HashMap::new(),
            clients: HashMap::new(),
            ops: 0,
        }
    }

    fn val(&mut self, v: &Option<String>) -> Val {
        match v {
            None => NIL,
            Some(s) => self.h.values.id(s),
        }
    }

    fn bad(line: usize, what: impl Into<String>) -> NotAHistory {
        NotAHistory {
            line,
            what: what.into(),
        }
    }

    fn add(&mut self, e: Event) -> Result<(), NotAHistory> {
        let line = e.line;
        if e.ev == Ev::Invoke {
            if let Some((_, at)) = self.pending.get(e.process) {
                return Err(Self::bad(
                    line,
                    format!(
                        "process {} invokes again while its operation of line {at} has not completed",
                        e.process
                    ),
                ));
            }
            let f = self.f_of(&e)?;
            let n = self.clients.len() as u32;
            let client = *self.clients.entry(e.process.to_string()).or_insert(n);
            let key = self.h.keys.id(e.key.as_deref().unwrap_or("register"));
            self.h.ops.push(Op {
                client,
                key,
                f,
                outcome: Outcome::Unknown,
                invoke: e.time,
                complete: u64::MAX,
            });
            self.pending
                .insert(e.process.to_string(), (self.h.ops.len() - 1, line));
            self.ops += 1;
            return Ok(());
        }
        let Some((i, _)) = self.pending.remove(e.process) else {
            return Err(Self::bad(
                line,
                format!(
                    "process {} completes an operation it never invoked",
                    e.process
                ),
            ));
        };
        let op = self.h.ops[i];
        if e.time < op.invoke {
            return Err(Self::bad(line, "it completes before it was invoked"));
        }
        let outcome = match e.ev {
            Ev::Info => Outcome::Unknown,
            Ev::Fail => Outcome::Fail,
            _ => match op.f {
                F::Read => {
                    let v = match &e.value {
                        EValue::Nil => NIL,
                        EValue::One(s) => self.h.values.id(s),
                        other => {
                            return Err(Self::bad(
                                line,
                                format!("a read's value must be one value or nil, not {other:?}"),
                            ))
                        }
                    };
                    Outcome::Ok(v)
                }
                _ => Outcome::Ok(NIL),
            },
        };
        let op = &mut self.h.ops[i];
        op.outcome = outcome;
        if outcome != Outcome::Unknown {
            op.complete = e.time;
        }
        Ok(())
    }

    fn f_of(&mut self, e: &Event) -> Result<F, NotAHistory> {
        let line = e.line;
        Ok(match (e.f, &e.value) {
            ("read" | "get", _) => F::Read,
            ("write" | "put", EValue::One(s)) => F::Write(self.h.values.id(s)),
            ("write" | "put", EValue::Nil) => F::Delete,
            ("delete" | "del", _) => F::Delete,
            ("append", EValue::One(s)) => F::Append(self.h.values.id(s)),
            ("cas", EValue::Pair(a, b)) => F::Cas {
                from: self.val(a),
                to: self.val(b),
            },
            (f @ ("write" | "put" | "append" | "cas"), v) => {
                return Err(Self::bad(line, format!("`{f}` cannot take the value {v:?}")))
            }
            (f, _) => {
                return Err(Self::bad(
                    line,
                    format!(
                        "`:f :{f}` is not a register's operation (read, write, delete, cas; get, put, append)"
                    ),
                ))
            }
        })
    }

    fn finish(self) -> Result<History, NotAHistory> {
        if self.ops == 0 {
            return Err(Self::bad(1, "not a history: it holds no operation"));
        }
        Ok(self.h)
    }
}

/// Jepsen's log lines; other lines are left alone.
fn read_jepsen_log(text: &str) -> Result<History, NotAHistory> {
    let mut p = Pairing::new();
    for (i, l) in text.lines().enumerate() {
        let line = i + 1;
        let Some(at) = l.find("jepsen.util - ") else {
            continue;
        };
        let rest = &l[at + "jepsen.util - ".len()..];
        let mut parts = rest.split_whitespace();
        let (Some(process), Some(ty), Some(f)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(Pairing::bad(
                line,
                format!("expected `PROCESS :TYPE :F VALUE`, found `{}`", clip(rest)),
            ));
        };
        if process == ":nemesis" {
            continue;
        }
        let value_text: Vec<&str> = parts.collect();
        let value_text = value_text.join(" ");
        let ev = event_type(ty).ok_or_else(|| {
            Pairing::bad(line, format!("`{ty}` is not :invoke, :ok, :fail or :info"))
        })?;
        let value = parse_edn(&value_text)
            .map(|(v, _)| flat(&v))
            .map_err(|e| Pairing::bad(line, format!("the value `{value_text}`: {e}")))?;
        p.add(Event {
            process,
            ev,
            f: f.trim_start_matches(':'),
            key: None,
            value,
            time: line as u64,
            line,
        })?;
    }
    p.finish()
}

fn event_type(t: &str) -> Option<Ev> {
    Some(match t {
        ":invoke" => Ev::Invoke,
        ":ok" => Ev::Ok,
        ":fail" => Ev::Fail,
        ":info" => Ev::Info,
        _ => return None,
    })
}

/// An EDN value, as much of it as a history needs.
#[derive(Debug, Clone, PartialEq)]
enum Edn {
    Nil,
    Bool(bool),
    Int(String),
    Str(String),
    Keyword(String),
    Vec(Vec<Edn>),
    Map(Vec<(Edn, Edn)>),
    /// Anything else (a symbol, a float, a tagged value).
    Other(String),
}

impl Edn {
    fn scalar(&self) -> Option<String> {
        match self {
            Edn::Int(s) | Edn::Str(s) | Edn::Other(s) => Some(s.clone()),
            Edn::Keyword(k) => Some(format!(":{k}")),
            Edn::Bool(b) => Some(b.to_string()),
            _ => None,
        }
    }
}

/// A value as an operation carries it.
fn flat(v: &Edn) -> EValue {
    match v {
        Edn::Nil => EValue::Nil,
        Edn::Vec(items) if items.len() == 2 => {
            let one = |e: &Edn| if *e == Edn::Nil { None } else { e.scalar() };
            EValue::Pair(one(&items[0]), one(&items[1]))
        }
        Edn::Keyword(k) => EValue::Other(format!(":{k}")),
        other => match other.scalar() {
            Some(s) => EValue::One(s),
            None => EValue::Other(format!("{other:?}")),
        },
    }
}

/// Parses one EDN value at the start of `s`; the value and the rest.
fn parse_edn(s: &str) -> Result<(Edn, &str), String> {
    let s = skip_ws(s);
    let Some(c) = s.chars().next() else {
        return Err("expected a value, found the end".into());
    };
    match c {
        '{' | '[' | '(' => {
            let close = match c {
                '{' => '}',
                '[' => ']',
                _ => ')',
            };
            let (items, rest) = parse_seq(&s[1..], close)?;
            if c != '{' {
                return Ok((Edn::Vec(items), rest));
            }
            if items.len() % 2 != 0 {
                return Err("a map with a key and no value".into());
            }
            let mut pairs = Vec::new();
            let mut it = items.into_iter();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                pairs.push((k, v));
            }
            Ok((Edn::Map(pairs), rest))
        }
        // A set (`#{...}`), or a tagged value (`#inst "..."`).
        '#' => match s[1..].strip_prefix('{') {
            Some(r) => parse_seq(r, '}').map(|(items, rest)| (Edn::Vec(items), rest)),
            None => {
                let end = s.find(char::is_whitespace).unwrap_or(s.len());
                let (v, rest) = parse_edn(&s[end..])?;
                Ok((Edn::Other(format!("{} {v:?}", &s[..end])), rest))
            }
        },
        '"' => {
            let mut out = String::new();
            let mut chars = s[1..].char_indices();
            while let Some((i, ch)) = chars.next() {
                match ch {
                    '"' => return Ok((Edn::Str(out), &s[i + 2..])),
                    '\\' => match chars.next() {
                        Some((_, 'n')) => out.push('\n'),
                        Some((_, 't')) => out.push('\t'),
                        Some((_, e)) => out.push(e),
                        None => break,
                    },
                    ch => out.push(ch),
                }
            }
            Err("a string is never closed".into())
        }
        _ => {
            let end = s
                .find(|ch: char| ch.is_whitespace() || ",{}[]()\"".contains(ch))
                .unwrap_or(s.len());
            let (tok, rest) = s.split_at(end);
            if tok.is_empty() {
                return Err(format!("unexpected `{c}`"));
            }
            let v = match tok {
                "nil" => Edn::Nil,
                "true" => Edn::Bool(true),
                "false" => Edn::Bool(false),
                t if t.starts_with(':') => Edn::Keyword(t[1..].to_string()),
                t if t
                    .trim_start_matches('-')
                    .chars()
                    .all(|c| c.is_ascii_digit()) =>
                {
                    Edn::Int(t.trim_end_matches('N').to_string())
                }
                t => Edn::Other(t.to_string()),
            };
            Ok((v, rest))
        }
    }
}

/// The items of a sequence up to `close`, and what follows it.
fn parse_seq(s: &str, close: char) -> Result<(Vec<Edn>, &str), String> {
    let mut items = Vec::new();
    let mut rest = s;
    loop {
        rest = skip_ws(rest);
        if let Some(r) = rest.strip_prefix(close) {
            return Ok((items, r));
        }
        if rest.is_empty() {
            return Err(format!("a sequence is never closed with `{close}`"));
        }
        let (v, r) = parse_edn(rest)?;
        items.push(v);
        rest = r;
    }
}

fn skip_ws(s: &str) -> &str {
    let mut s = s;
    loop {
        s = s.trim_start_matches(|c: char| c.is_whitespace() || c == ',');
        if let Some(r) = s.strip_prefix(';') {
            s = r.find('\n').map_or("", |i| &r[i..]);
        } else {
            return s;
        }
    }
}

/// EDN maps, one an event (or a vector of them).
fn read_edn(text: &str) -> Result<History, NotAHistory> {
    let mut p = Pairing::new();
    let mut rest = text;
    let mut index = 0u64;
    let line_of = |rest: &str| text[..text.len() - rest.len()].matches('\n').count() + 1;
    loop {
        rest = skip_ws(rest);
        if rest.is_empty() {
            break;
        }
        // A history may be one vector of maps.
        if let Some(r) = rest.strip_prefix('[') {
            rest = r;
            continue;
        }
        if let Some(r) = rest.strip_prefix(']') {
            rest = r;
            continue;
        }
        let line = line_of(rest);
        let (v, r) = parse_edn(rest).map_err(|e| Pairing::bad(line, e))?;
        rest = r;
        let Edn::Map(pairs) = v else {
            return Err(Pairing::bad(
                line,
                "expected a map `{:process .. :type .. :f .. :value ..}`",
            ));
        };
        index += 1;
        edn_event(&mut p, &pairs, line, index)?;
    }
    p.finish()
}

fn edn_event(
    p: &mut Pairing,
    pairs: &[(Edn, Edn)],
    line: usize,
    index: u64,
) -> Result<(), NotAHistory> {
    let get = |k: &str| {
        pairs
            .iter()
            .find(|(key, _)| *key == Edn::Keyword(k.into()))
            .map(|(_, v)| v)
    };
    let process = match get("process") {
        Some(Edn::Keyword(k)) if k == "nemesis" => return Ok(()),
        Some(v) => v
            .scalar()
            .ok_or_else(|| Pairing::bad(line, "`:process` must be a number"))?,
        None => return Err(Pairing::bad(line, "the event has no `:process`")),
    };
    let ty = match get("type") {
        Some(Edn::Keyword(k)) => format!(":{k}"),
        _ => {
            return Err(Pairing::bad(
                line,
                "the event has no `:type` (:invoke, :ok, :fail, :info)",
            ))
        }
    };
    let ev = event_type(&ty).ok_or_else(|| {
        Pairing::bad(
            line,
            format!("`:type {ty}` is not :invoke, :ok, :fail or :info"),
        )
    })?;
    let f = match get("f") {
        Some(Edn::Keyword(k)) => k.clone(),
        _ => return Err(Pairing::bad(line, "the event has no `:f`")),
    };
    let time = match get("time") {
        Some(Edn::Int(t)) => t
            .parse::<u64>()
            .map_err(|_| Pairing::bad(line, format!("`:time {t}` is not a time in nanoseconds")))?,
        _ => index,
    };
    let raw = get("value").cloned().unwrap_or(Edn::Nil);
    let (key, value) = match get("key") {
        Some(k) => (k.scalar(), flat(&raw)),
        None => independent(&f, &raw),
    };
    p.add(Event {
        process: &process,
        ev,
        f: &f,
        key,
        value,
        time,
        line,
    })
}

/// `jepsen.independent`'s `[key value]` tuples: a compare-and-set's
/// value is a pair itself, so `[k [a b]]` is keyed and `[a b]` is not.
fn independent(f: &str, v: &Edn) -> (Option<String>, EValue) {
    match v {
        Edn::Vec(items) if items.len() == 2 => {
            let keyed = match f {
                "cas" => matches!(items[1], Edn::Vec(_)),
                _ => true,
            };
            if keyed {
                (items[0].scalar(), flat(&items[1]))
            } else {
                (None, flat(v))
            }
        }
        _ => (None, flat(v)),
    }
}

/// An operation as soak's JSON lines write it.
#[derive(Debug, Serialize, Deserialize)]
struct Line {
    client: u32,
    key: String,
    f: String,
    #[serde(default)]
    value: serde_json::Value,
    #[serde(rename = "type")]
    ty: String,
    invoke_ns: u64,
    complete_ns: Option<u64>,
}

fn json_val(v: Val, h: &History) -> serde_json::Value {
    if v == NIL {
        serde_json::Value::Null
    } else {
        serde_json::Value::String(h.values.name(v).to_string())
    }
}

/// soak's JSON lines: one operation a line.
pub fn write_jsonl(h: &History, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    for op in &h.ops {
        let (f, value) = match op.f {
            F::Read => (
                "read",
                match op.outcome {
                    Outcome::Ok(v) => json_val(v, h),
                    _ => serde_json::Value::Null,
                },
            ),
            F::Write(v) => ("write", json_val(v, h)),
            F::Delete => ("delete", serde_json::Value::Null),
            F::Cas { from, to } => (
                "cas",
                serde_json::json!([json_val(from, h), json_val(to, h)]),
            ),
            F::Append(v) => ("append", json_val(v, h)),
        };
        let line = Line {
            client: op.client,
            key: h.keys.name(op.key).to_string(),
            f: f.into(),
            value,
            ty: match op.outcome {
                Outcome::Ok(_) => "ok",
                Outcome::Fail => "fail",
                Outcome::Unknown => "info",
            }
            .into(),
            invoke_ns: op.invoke,
            complete_ns: (op.complete != u64::MAX).then_some(op.complete),
        };
        serde_json::to_writer(&mut *out, &line)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

fn read_jsonl(text: &str) -> Result<History, NotAHistory> {
    let mut h = History::default();
    for (i, l) in text.lines().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        let line = i + 1;
        let o: Line = serde_json::from_str(l).map_err(|e| Pairing::bad(line, format!("{e}")))?;
        let mut val = |v: &serde_json::Value| -> Result<Val, NotAHistory> {
            Ok(match v {
                serde_json::Value::Null => NIL,
                serde_json::Value::String(s) => h.values.id(s),
                serde_json::Value::Number(n) => h.values.id(&n.to_string()),
                other => return Err(Pairing::bad(line, format!("`{other}` is not a value"))),
            })
        };
        let outcome = match o.ty.as_str() {
            "ok" => Outcome::Ok(NIL),
            "fail" => Outcome::Fail,
            "info" => Outcome::Unknown,
            t => {
                return Err(Pairing::bad(
                    line,
                    format!("`type` is ok, fail or info, not `{t}`"),
                ))
            }
        };
        let (f, outcome) = match o.f.as_str() {
            "read" => (
                F::Read,
                if outcome == Outcome::Ok(NIL) {
                    Outcome::Ok(val(&o.value)?)
                } else {
                    outcome
                },
            ),
            "write" => (F::Write(val(&o.value)?), outcome),
            "delete" => (F::Delete, outcome),
            "append" => (F::Append(val(&o.value)?), outcome),
            "cas" => match o.value.as_array().map(|a| a.as_slice()) {
                Some([a, b]) => (
                    F::Cas {
                        from: val(a)?,
                        to: val(b)?,
                    },
                    outcome,
                ),
                _ => return Err(Pairing::bad(line, "a cas's value is [from, to]")),
            },
            f => {
                return Err(Pairing::bad(
                    line,
                    format!("`f` is read, write, delete, cas or append, not `{f}`"),
                ))
            }
        };
        let complete = match (o.complete_ns, outcome) {
            (_, Outcome::Unknown) => u64::MAX,
            (Some(c), _) if c >= o.invoke_ns => c,
            (Some(_), _) => return Err(Pairing::bad(line, "it completes before it was invoked")),
            (None, _) => {
                return Err(Pairing::bad(
                    line,
                    "an ok or fail operation needs `complete_ns`",
                ))
            }
        };
        let key = h.keys.id(&o.key);
        h.ops.push(Op {
            client: o.client,
            key,
            f,
            outcome,
            invoke: o.invoke_ns,
            complete,
        });
    }
    if h.ops.is_empty() {
        return Err(Pairing::bad(1, "not a history: it holds no operation"));
    }
    Ok(h)
}

/// Porcupine's `Operation`, with a key-value register's input and output.
#[derive(Debug, Serialize, Deserialize)]
#[allow(non_snake_case)]
struct POp {
    ClientId: u32,
    Input: PInput,
    Call: i64,
    Output: POutput,
    Return: i64,
}

#[derive(Debug, Serialize, Deserialize)]
#[allow(non_snake_case)]
struct PInput {
    /// read, write, delete, cas, append
    Op: String,
    Key: String,
    Value: Option<String>,
    From: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
#[allow(non_snake_case)]
struct POutput {
    /// A read's value (`None`: the key is missing).
    Value: Option<String>,
    /// A compare-and-set's: whether it swapped.
    Ok: bool,
    /// The outcome is not known.
    Unknown: bool,
}

/// Porcupine's form: definitely failed reads and writes are left out (they
/// did not happen); an operation of unknown outcome returns after every
/// other one, as Porcupine's own tests do with Jepsen's `:info`.
pub fn write_porcupine(h: &History, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    let end = h
        .ops
        .iter()
        .flat_map(|o| [o.invoke, o.complete])
        .filter(|&t| t != u64::MAX)
        .max()
        .unwrap_or(0) as i64
        + 1;
    let name = |v: Val| (v != NIL).then(|| h.values.name(v).to_string());
    let ops: Vec<POp> = h
        .ops
        .iter()
        .filter(|o| o.outcome != Outcome::Fail || matches!(o.f, F::Cas { .. }))
        .map(|o| {
            let (op, value, from) = match o.f {
                F::Read => ("read", None, None),
                F::Write(v) => ("write", name(v), None),
                F::Delete => ("delete", None, None),
                F::Cas { from, to } => ("cas", name(to), name(from)),
                F::Append(v) => ("append", name(v), None),
            };
            let unknown = o.outcome == Outcome::Unknown;
            POp {
                ClientId: o.client,
                Input: PInput {
                    Op: op.into(),
                    Key: h.keys.name(o.key).to_string(),
                    Value: value,
                    From: from,
                },
                Call: o.invoke as i64,
                Output: POutput {
                    Value: match o.outcome {
                        Outcome::Ok(v) if o.f == F::Read => name(v),
                        _ => None,
                    },
                    Ok: matches!(o.outcome, Outcome::Ok(_)),
                    Unknown: unknown,
                },
                Return: if unknown { end } else { o.complete as i64 },
            }
        })
        .collect();
    serde_json::to_writer(&mut *out, &ops)?;
    out.write_all(b"\n")
}

fn read_porcupine(text: &str) -> Result<History, NotAHistory> {
    let ops: Vec<POp> =
        serde_json::from_str(text).map_err(|e| Pairing::bad(e.line(), e.to_string()))?;
    let mut h = History::default();
    for (i, o) in ops.iter().enumerate() {
        let val = |h: &mut History, v: &Option<String>| v.as_ref().map_or(NIL, |s| h.values.id(s));
        let f = match o.Input.Op.as_str() {
            "read" => F::Read,
            "write" => F::Write(val(&mut h, &o.Input.Value)),
            "delete" => F::Delete,
            "append" => F::Append(val(&mut h, &o.Input.Value)),
            "cas" => F::Cas {
                from: val(&mut h, &o.Input.From),
                to: val(&mut h, &o.Input.Value),
            },
            other => {
                return Err(Pairing::bad(
                    1,
                    format!("operation {i}: `{other}` is not read, write, delete, cas or append"),
                ))
            }
        };
        let outcome = if o.Output.Unknown {
            Outcome::Unknown
        } else if f == F::Read {
            Outcome::Ok(val(&mut h, &o.Output.Value))
        } else if matches!(f, F::Cas { .. }) && !o.Output.Ok {
            Outcome::Fail
        } else {
            Outcome::Ok(NIL)
        };
        if o.Return < o.Call || o.Call < 0 {
            return Err(Pairing::bad(
                1,
                format!("operation {i} returns before its call"),
            ));
        }
        let key = h.keys.id(&o.Input.Key);
        h.ops.push(Op {
            client: o.ClientId,
            key,
            f,
            outcome,
            invoke: o.Call as u64,
            complete: if outcome == Outcome::Unknown {
                u64::MAX
            } else {
                o.Return as u64
            },
        });
    }
    if h.ops.is_empty() {
        return Err(Pairing::bad(1, "not a history: it holds no operation"));
    }
    Ok(h)
}

/// A value in EDN: a number as itself, nil, else a string.
fn edn_value(h: &History, v: Val) -> String {
    if v == NIL {
        return "nil".into();
    }
    let s = h.values.name(v);
    if !s.is_empty()
        && s.trim_start_matches('-')
            .chars()
            .all(|c| c.is_ascii_digit())
        && s != "-"
    {
        s.to_string()
    } else {
        format!("{s:?}")
    }
}

/// Jepsen's EDN: an invocation and a completion an operation, in time
/// order, with `:time` in nanoseconds; several keys as
/// `jepsen.independent`'s `[key value]` tuples.
pub fn write_edn(h: &History, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    let keyed = h.keys.len() > 1;
    let mut events: Vec<(u64, bool, usize)> = Vec::with_capacity(2 * h.ops.len());
    for (i, o) in h.ops.iter().enumerate() {
        events.push((o.invoke, false, i));
        if o.complete != u64::MAX {
            events.push((o.complete, true, i));
        }
    }
    events.sort_unstable();
    let mut s = String::new();
    for (index, (time, done, i)) in events.into_iter().enumerate() {
        let o = &h.ops[i];
        let (f, value) = match (o.f, done, o.outcome) {
            (F::Read, true, Outcome::Ok(v)) => ("read", edn_value(h, v)),
            (F::Read, _, _) => ("read", "nil".into()),
            (F::Write(v), _, _) => ("write", edn_value(h, v)),
            (F::Delete, _, _) => ("write", "nil".into()),
            (F::Cas { from, to }, _, _) => (
                "cas",
                format!("[{} {}]", edn_value(h, from), edn_value(h, to)),
            ),
            (F::Append(v), _, _) => ("append", edn_value(h, v)),
        };
        let ty = match (done, o.outcome) {
            (false, _) => ":invoke",
            (true, Outcome::Ok(_)) => ":ok",
            (true, Outcome::Fail) => ":fail",
            (true, Outcome::Unknown) => ":info",
        };
        let value = if keyed {
            format!("[{:?} {value}]", h.keys.name(o.key))
        } else {
            value
        };
        s.clear();
        let _ = writeln!(
            s,
            "{{:index {index}, :type {ty}, :f :{f}, :value {value}, :process {}, :time {time}}}",
            o.client
        );
        out.write_all(s.as_bytes())?;
    }
    // Operations that never completed: Jepsen ends them `:info` when the
    // test ends.
    Ok(())
}

/// Writes `h` in `format`.
pub fn write(h: &History, format: Format, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    match format {
        Format::Jepsen => write_edn(h, out),
        Format::Porcupine => write_porcupine(h, out),
        Format::Jsonl => write_jsonl(h, out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::check::{check, Options, Verdict};

    #[test]
    fn jepsens_log_reads_as_porcupine_reads_it() {
        let log = "INFO  jepsen.util - 0\t:invoke\t:read\tnil\n\
                   INFO  jepsen.util - 1\t:invoke\t:write\t4\n\
                   INFO  jepsen.util - 0\t:ok\t:read\tnil\n\
                   some other line\n\
                   INFO  jepsen.util - 1\t:ok\t:write\t4\n\
                   INFO  jepsen.util - 2\t:invoke\t:cas\t[4 1]\n\
                   INFO  jepsen.util - 2\t:fail\t:cas\t[4 1]\n\
                   INFO  jepsen.util - 3\t:invoke\t:write\t2\n\
                   INFO  jepsen.util - 3\t:info\t:write\t:timed-out\n";
        let h = read(log).unwrap();
        assert_eq!(h.ops.len(), 4);
        assert_eq!(h.describe(&h.ops[0]), "read() -> nil");
        assert_eq!(h.describe(&h.ops[2]), "cas(4, 1) -> fail");
        assert_eq!(h.ops[3].outcome, Outcome::Unknown);
        // cas(4, 1) failing while the register holds 4 cannot be.
        assert_eq!(
            check(&h, &Options::default()).verdict,
            Verdict::NotLinearizable
        );
    }

    #[test]
    fn edn_with_independent_keys_and_every_form_round_trips() {
        let edn = "[{:process 0, :type :invoke, :f :write, :value [\"a\" 1], :time 10}\n\
                    {:process 1, :type :invoke, :f :read, :value [\"b\" nil], :time 11}\n\
                    {:process 0, :type :ok, :f :write, :value [\"a\" 1], :time 20}\n\
                    {:process 1, :type :ok, :f :read, :value [\"b\" nil], :time 21}\n\
                    {:process :nemesis, :type :info, :f :start, :value nil}\n\
                    {:process 2, :type :invoke, :f :cas, :value [\"a\" [1 2]], :time 30, :error [:x \"y\"]}\n\
                    {:process 2, :type :ok, :f :cas, :value [\"a\" [1 2]], :time 40}]";
        let h = read(edn).unwrap();
        assert_eq!(h.ops.len(), 3);
        assert_eq!(h.keys.len(), 2);
        assert_eq!(h.describe(&h.ops[2]), "cas(1, 2) -> ok");
        for format in [Format::Jepsen, Format::Porcupine, Format::Jsonl] {
            let mut out = Vec::new();
            write(&h, format, &mut out).unwrap();
            let again = read(std::str::from_utf8(&out).unwrap()).unwrap();
            let words = |h: &History| {
                let mut v: Vec<String> = h
                    .ops
                    .iter()
                    .map(|o| format!("{} {}", h.keys.name(o.key), h.describe(o)))
                    .collect();
                v.sort();
                v
            };
            assert_eq!(words(&again), words(&h), "{format:?}");
        }
    }

    #[test]
    fn what_is_not_a_history_is_named_by_its_line() {
        let cases = [
            ("", 1, "empty"),
            ("hello\nworld\n", 1, "not a history"),
            ("{:process 0, :type :ok, :f :read, :value 1}\n", 1, "never invoked"),
            ("{:process 0, :type :invoke, :f :read, :value nil}\n{:process 0, :type :invoke, :f :read, :value nil}\n", 2, "invokes again"),
            ("{:process 0, :type :invoke, :f :frob, :value nil}\n", 1, "not a register's operation"),
            ("{:process 0, :type :invoke, :f :read\n", 1, "never closed"),
            ("{:process 0, :type :sent, :f :read, :value nil}\n", 1, ":sent"),
            ("INFO  jepsen.util - 0\t:invoke\t:read\t[1\n", 1, "never closed"),
            ("{\"client\":0,\"key\":\"k\",\"f\":\"read\",\"type\":\"ok\",\"invoke_ns\":5,\"complete_ns\":3}\n", 1, "before it was invoked"),
        ];
        for (text, line, says) in cases {
            let e = read(text).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.what.contains(says), "{text:?}: {e}");
        }
    }
}
