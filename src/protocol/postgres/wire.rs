//! PostgreSQL's frontend/backend protocol (version 3), as much of it as
//! soak speaks: the startup and its authentication (trust, password, MD5,
//! SCRAM-SHA-256, the hashes from `postgres-protocol`), a simple query,
//! and the extended protocol's Parse, Bind, Execute and Sync, encoded
//! straight into the write buffer; replies are read where they lie.

use postgres_protocol::authentication::{md5_hash, sasl};

use super::super::pipe::Pipe;
use super::super::SessionError;

/// One backend message: its tag and body, at `start..end` of a buffer.
pub struct Message<'a> {
    pub tag: u8,
    pub body: &'a [u8],
}

/// The message at the start of `buf`, and its length with the header,
/// once all of it is there.
pub fn message(buf: &[u8]) -> Result<Option<(Message<'_>, usize)>, String> {
    if buf.len() < 5 {
        return Ok(None);
    }
    let len = i32::from_be_bytes(buf[1..5].try_into().expect("4 bytes"));
    if len < 4 {
        return Err(format!("a message {:?} of length {len}", buf[0] as char));
    }
    let end = 1 + len as usize;
    if buf.len() < end {
        return Ok(None);
    }
    Ok(Some((
        Message {
            tag: buf[0],
            body: &buf[5..end],
        },
        end,
    )))
}

/// An error's (or a notice's) fields that soak reports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ErrorFields {
    /// The SQLSTATE, five characters.
    pub code: String,
    pub severity: String,
    pub message: String,
}

impl ErrorFields {
    pub fn parse(body: &[u8]) -> ErrorFields {
        let mut out = ErrorFields::default();
        let mut rest = body;
        while let [kind, tail @ ..] = rest {
            if *kind == 0 {
                break;
            }
            let end = tail.iter().position(|b| *b == 0).unwrap_or(tail.len());
            let text = String::from_utf8_lossy(&tail[..end]).into_owned();
            match kind {
                b'C' => out.code = text,
                b'V' => out.severity = text,
                b'S' if out.severity.is_empty() => out.severity = text,
                b'M' => out.message = text,
                _ => {}
            }
            rest = tail.get(end + 1..).unwrap_or_default();
        }
        out
    }

    /// `ERROR 42P01: relation "t" does not exist`.
    pub fn text(&self) -> String {
        format!("{} {}: {}", self.severity, self.code, self.message)
    }
}

/// Starts a message with tag `tag` (0: none, as the startup has); returns
/// where its length goes, for [`end`].
pub fn begin(out: &mut Vec<u8>, tag: u8) -> usize {
    if tag != 0 {
        out.push(tag);
    }
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    at
}

/// Writes the length of the message begun at `at`.
pub fn end(out: &mut [u8], at: usize) {
    let len = (out.len() - at) as i32;
    out[at..at + 4].copy_from_slice(&len.to_be_bytes());
}

pub fn cstr(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(s);
    out.push(0);
}

/// Parse: prepares `query` as statement `name`, its parameters' types
/// left to the server.
pub fn parse(out: &mut Vec<u8>, name: &str, query: &str) {
    let at = begin(out, b'P');
    cstr(out, name.as_bytes());
    cstr(out, query.as_bytes());
    out.extend_from_slice(&0i16.to_be_bytes());
    end(out, at);
}

/// A simple query (no parameters, its results in text).
pub fn query(out: &mut Vec<u8>, sql: &str) {
    let at = begin(out, b'Q');
    cstr(out, sql.as_bytes());
    end(out, at);
}

/// Execute of the unnamed portal, all rows, then Sync: the request's
/// implicit transaction commits at the Sync, and ReadyForQuery says so.
pub const EXECUTE_SYNC: &[u8] = b"E\0\0\0\x09\0\0\0\0\0S\0\0\0\x04";

pub const SYNC: &[u8] = b"S\0\0\0\x04";

/// A Bind of statement `name` to the unnamed portal, its parameters
/// written by `params` (each through [`param`]) in the formats given
/// (0 text, 1 binary), every result column in binary.
pub fn bind(out: &mut Vec<u8>, name: &[u8], formats: &[i16], params: impl FnOnce(&mut Vec<u8>)) {
    let at = begin(out, b'B');
    out.push(0);
    cstr(out, name);
    out.extend_from_slice(&(formats.len() as i16).to_be_bytes());
    for f in formats {
        out.extend_from_slice(&f.to_be_bytes());
    }
    out.extend_from_slice(&(formats.len() as i16).to_be_bytes());
    params(out);
    out.extend_from_slice(&1i16.to_be_bytes());
    out.extend_from_slice(&1i16.to_be_bytes());
    end(out, at);
}

/// One parameter's bytes, as `write` puts them.
pub fn param(out: &mut Vec<u8>, write: impl FnOnce(&mut Vec<u8>)) {
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    write(out);
    let len = (out.len() - at - 4) as i32;
    out[at..at + 4].copy_from_slice(&len.to_be_bytes());
}

/// A DataRow's columns: `None` for NULL.
pub fn columns(body: &[u8]) -> Result<Vec<Option<&[u8]>>, String> {
    let bad = || "a DataRow cut short".to_string();
    let n = i16::from_be_bytes(body.get(..2).ok_or_else(bad)?.try_into().expect("2"));
    let mut out = Vec::with_capacity(n.max(0) as usize);
    let mut at = 2;
    for _ in 0..n {
        let len = i32::from_be_bytes(body.get(at..at + 4).ok_or_else(bad)?.try_into().expect("4"));
        at += 4;
        if len < 0 {
            out.push(None);
        } else {
            let v = body.get(at..at + len as usize).ok_or_else(bad)?;
            at += len as usize;
            out.push(Some(v));
        }
    }
    Ok(out)
}

/// Who soak is to the server.
pub struct Login<'a> {
    pub user: &'a str,
    pub password: Option<&'a str>,
    pub dbname: &'a str,
}

/// How a setup step failed: the server's error, or the connection.
pub enum SetupError {
    Server(ErrorFields),
    Link(SessionError),
}

impl From<SessionError> for SetupError {
    fn from(e: SessionError) -> SetupError {
        SetupError::Link(e)
    }
}

/// The next whole message of a setup step (owned: the buffer moves on).
async fn next(pipe: &mut Pipe) -> Result<(u8, Vec<u8>), SessionError> {
    loop {
        match message(&pipe.rbuf).map_err(SessionError::Broken)? {
            Some((m, n)) => {
                let out = (m.tag, m.body.to_vec());
                pipe.rbuf.drain(..n);
                return Ok(out);
            }
            None => pipe.read_more().await?,
        }
    }
}

/// The startup: protocol 3.0, the user and database, then whatever
/// authentication the server asks for, until it is ready for queries.
pub async fn startup(pipe: &mut Pipe, login: &Login<'_>) -> Result<(), SetupError> {
    let out = &mut pipe.wbuf;
    let at = begin(out, 0);
    out.extend_from_slice(&196608i32.to_be_bytes());
    for (k, v) in [("user", login.user), ("database", login.dbname)] {
        cstr(out, k.as_bytes());
        cstr(out, v.as_bytes());
    }
    out.push(0);
    end(out, at);
    pipe.send_all().await?;
    let password = || {
        login.password.map(str::as_bytes).ok_or_else(|| {
            SetupError::Server(ErrorFields {
                code: "28000".into(),
                severity: "FATAL".into(),
                message: format!(
                    "the server asks user {:?} for a password: give it in the URL, postgres://USER:PASSWORD@HOST:PORT/DB",
                    login.user
                ),
            })
        })
    };
    let mut scram: Option<sasl::ScramSha256> = None;
    let bad =
        |what: &str| SessionError::Broken(format!("a startup reply soak cannot read: {what}"));
    loop {
        let (tag, body) = next(pipe).await?;
        match tag {
            b'R' => {
                let kind = i32::from_be_bytes(
                    body.get(..4)
                        .ok_or_else(|| bad("R"))?
                        .try_into()
                        .expect("4"),
                );
                let data = &body[4..];
                let out = &mut pipe.wbuf;
                match kind {
                    0 => continue,
                    3 => {
                        let at = begin(out, b'p');
                        cstr(out, password()?);
                        end(out, at);
                    }
                    5 => {
                        let salt: [u8; 4] = data.get(..4).ok_or_else(|| bad("MD5 salt"))?.try_into().expect("4");
                        let hash = md5_hash(login.user.as_bytes(), password()?, salt);
                        let at = begin(out, b'p');
                        cstr(out, hash.as_bytes());
                        end(out, at);
                    }
                    10 => {
                        let s = sasl::ScramSha256::new(password()?, sasl::ChannelBinding::unsupported());
                        let at = begin(out, b'p');
                        cstr(out, sasl::SCRAM_SHA_256.as_bytes());
                        out.extend_from_slice(&(s.message().len() as i32).to_be_bytes());
                        out.extend_from_slice(s.message());
                        end(out, at);
                        scram = Some(s);
                    }
                    11 | 12 => {
                        let s = scram.as_mut().ok_or_else(|| bad("SASL out of turn"))?;
                        if kind == 11 {
                            s.update(data).map_err(|e| bad(&e.to_string()))?;
                            let at = begin(out, b'p');
                            out.extend_from_slice(s.message());
                            end(out, at);
                        } else {
                            s.finish(data).map_err(|e| bad(&e.to_string()))?;
                            continue;
                        }
                    }
                    other => {
                        return Err(SetupError::Link(SessionError::Fatal(format!(
                            "the server asks for authentication method {other}, which soak does not speak (it speaks trust, password, md5 and scram-sha-256)"
                        ))))
                    }
                }
                pipe.send_all().await?;
            }
            b'E' => return Err(SetupError::Server(ErrorFields::parse(&body))),
            b'Z' => return Ok(()),
            _ => {}
        }
    }
}

/// Sends what is in the write buffer and reads until ReadyForQuery: the
/// first error the server raised on the way, if any.
pub async fn round_trip(pipe: &mut Pipe) -> Result<Option<ErrorFields>, SessionError> {
    pipe.send_all().await?;
    let mut error = None;
    loop {
        let (tag, body) = next(pipe).await?;
        match tag {
            b'E' => {
                error.get_or_insert(ErrorFields::parse(&body));
            }
            b'Z' => return Ok(error),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_response_gives_its_code_severity_and_message() {
        let body = b"SERROR\0VERROR\0C42P01\0Mrelation \"t\" does not exist\0P15\0\0";
        let e = ErrorFields::parse(body);
        assert_eq!(e.code, "42P01");
        assert_eq!(e.text(), "ERROR 42P01: relation \"t\" does not exist");
    }

    #[test]
    fn a_bind_holds_its_statement_formats_and_parameters() {
        let mut out = vec![];
        bind(&mut out, b"up", &[0, 1], |o| {
            param(o, |o| o.extend_from_slice(b"soak:1"));
            param(o, |o| o.extend_from_slice(b"\x00\x01"));
        });
        let (m, n) = message(&out).unwrap().unwrap();
        assert_eq!((m.tag, n), (b'B', out.len()));
        assert_eq!(
            m.body,
            b"\0up\0\0\x02\0\0\0\x01\0\x02\0\0\0\x06soak:1\0\0\0\x02\x00\x01\0\x01\0\x01"
        );
    }

    #[test]
    fn a_data_row_gives_its_columns_and_nulls() {
        let body = b"\0\x02\0\0\0\x02ab\xff\xff\xff\xff";
        assert_eq!(columns(body).unwrap(), vec![Some(&b"ab"[..]), None]);
        assert!(columns(b"\0\x01\0\0\0\x09ab").is_err());
    }
}
