//! RESP2, the orchestrator's one RESP codec: commands encoded straight
//! into a write buffer, replies parsed in place from the read buffer. The
//! load owns its sockets and pipelines through [`encode`] and [`parse`];
//! everything else that talks to a node (verification's read-back, the
//! `load` phase's fill) goes through [`Client`], a pipelining connection
//! on the same codec. Nothing here needs more than bulk strings, statuses,
//! errors, integers and flat arrays (MGET).

use std::io::Write;

/// A reply, borrowing from the read buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply<'a> {
    Status(&'a [u8]),
    Error(&'a [u8]),
    Int(i64),
    /// A bulk string, or nil.
    Bulk(Option<&'a [u8]>),
    /// A flat array of bulk strings (or nils); `None` is a nil array.
    Array(Option<Vec<Option<&'a [u8]>>>),
}

/// Bytes that are not a RESP reply the load understands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyError(pub String);

/// Appends one command (an array of bulk strings) to `out`.
pub fn encode<'a>(out: &mut Vec<u8>, args: impl ExactSizeIterator<Item = &'a [u8]>) {
    array_header(out, args.len());
    for a in args {
        bulk_arg(out, a);
    }
}

/// Appends the header of a command of `n` arguments, which the caller then
/// appends one by one with [`bulk_arg`].
pub fn array_header(out: &mut Vec<u8>, n: usize) {
    let _ = write!(out, "*{n}\r\n");
}

/// Appends one argument of a command.
pub fn bulk_arg(out: &mut Vec<u8>, arg: &[u8]) {
    let _ = write!(out, "${}\r\n", arg.len());
    out.extend_from_slice(arg);
    out.extend_from_slice(b"\r\n");
}

/// Appends `*3 $3 SET $n key $m ` and leaves the value to the caller, who
/// writes `len` bytes and then calls [`end_bulk`].
pub fn begin_set(out: &mut Vec<u8>, key: &[u8], len: usize) {
    out.extend_from_slice(b"*3\r\n$3\r\nSET\r\n");
    let _ = write!(out, "${}\r\n", key.len());
    out.extend_from_slice(key);
    let _ = write!(out, "\r\n${len}\r\n");
}

pub fn end_bulk(out: &mut Vec<u8>) {
    out.extend_from_slice(b"\r\n");
}

fn line(buf: &[u8], from: usize) -> Option<usize> {
    let rest = buf.get(from..)?;
    memchr_crlf(rest).map(|p| p + from)
}

fn memchr_crlf(b: &[u8]) -> Option<usize> {
    let mut i = 0;
    while let Some(p) = b[i..].iter().position(|c| *c == b'\r') {
        let at = i + p;
        if b.get(at + 1) == Some(&b'\n') {
            return Some(at);
        }
        if at + 1 >= b.len() {
            return None;
        }
        i = at + 1;
    }
    None
}

fn int(b: &[u8]) -> Result<i64, ReplyError> {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| ReplyError(format!("not a number: {:?}", String::from_utf8_lossy(b))))
}

/// One bulk string at `pos` (`$n\r\n...\r\n` or `$-1\r\n`): the string and
/// where the next element starts, or `None` when more bytes are needed.
#[allow(clippy::type_complexity)]
fn bulk(buf: &[u8], pos: usize) -> Result<Option<(Option<&[u8]>, usize)>, ReplyError> {
    let Some(end) = line(buf, pos + 1) else {
        return Ok(None);
    };
    let n = int(&buf[pos + 1..end])?;
    if n < 0 {
        return Ok(Some((None, end + 2)));
    }
    let start = end + 2;
    let stop = start + n as usize;
    if buf.len() < stop + 2 {
        return Ok(None);
    }
    if &buf[stop..stop + 2] != b"\r\n" {
        return Err(ReplyError("a bulk string without its CRLF".into()));
    }
    Ok(Some((Some(&buf[start..stop]), stop + 2)))
}

/// Parses one reply from the front of `buf`: the reply and the bytes it
/// used, or `None` when more bytes are needed.
pub fn parse(buf: &[u8]) -> Result<Option<(Reply<'_>, usize)>, ReplyError> {
    let Some(&kind) = buf.first() else {
        return Ok(None);
    };
    if kind == b'$' {
        return Ok(bulk(buf, 0)?.map(|(b, used)| (Reply::Bulk(b), used)));
    }
    let Some(end) = line(buf, 1) else {
        return Ok(None);
    };
    let body = &buf[1..end];
    let used = end + 2;
    match kind {
        b'+' => Ok(Some((Reply::Status(body), used))),
        b'-' => Ok(Some((Reply::Error(body), used))),
        b':' => Ok(Some((Reply::Int(int(body)?), used))),
        b'*' => {
            let n = int(body)?;
            if n < 0 {
                return Ok(Some((Reply::Array(None), used)));
            }
            let mut items = Vec::with_capacity(n as usize);
            let mut pos = used;
            for _ in 0..n {
                match buf.get(pos) {
                    None => return Ok(None),
                    Some(b'$') => {}
                    Some(other) => {
                        return Err(ReplyError(format!(
                            "an array element of type {:?}, where the load expects bulk strings",
                            *other as char
                        )))
                    }
                }
                let Some((item, next)) = bulk(buf, pos)? else {
                    return Ok(None);
                };
                items.push(item);
                pos = next;
            }
            Ok(Some((Reply::Array(Some(items)), pos)))
        }
        other => Err(ReplyError(format!(
            "a reply starting with {:?}",
            other as char
        ))),
    }
}

/// A reply that owns its bytes, as [`Client`] returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Status(Vec<u8>),
    Error(Vec<u8>),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Option<Vec<u8>>>>),
}

impl Reply<'_> {
    pub fn to_value(&self) -> Value {
        match self {
            Reply::Status(s) => Value::Status(s.to_vec()),
            Reply::Error(e) => Value::Error(e.to_vec()),
            Reply::Int(i) => Value::Int(*i),
            Reply::Bulk(b) => Value::Bulk(b.map(<[u8]>::to_vec)),
            Reply::Array(a) => Value::Array(
                a.as_ref()
                    .map(|items| items.iter().map(|i| i.map(<[u8]>::to_vec)).collect()),
            ),
        }
    }
}

/// Why a [`Client`] got no answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot connect: {0}")]
    Connect(std::io::Error),
    #[error("no connection within {0:?}")]
    ConnectTimeout(std::time::Duration),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("no reply within {0:?}")]
    Timeout(std::time::Duration),
    #[error("the node closed the connection with {0} replies outstanding")]
    Closed(usize),
    #[error("not RESP: {0}")]
    Protocol(String),
}

/// One pipelining connection to a node.
pub struct Client {
    stream: tokio::net::TcpStream,
    rbuf: Vec<u8>,
    reply_timeout: std::time::Duration,
}

impl Client {
    pub async fn connect(
        target: &str,
        connect_timeout: std::time::Duration,
        reply_timeout: std::time::Duration,
    ) -> Result<Client, ClientError> {
        let stream = tokio::time::timeout(connect_timeout, super::netns::connect(target))
            .await
            .map_err(|_| ClientError::ConnectTimeout(connect_timeout))?
            .map_err(ClientError::Connect)?;
        let _ = stream.set_nodelay(true);
        Ok(Client {
            stream,
            rbuf: Vec::with_capacity(64 * 1024),
            reply_timeout,
        })
    }

    /// Sends `commands` (encoded, `count` of them) and reads one reply per
    /// command, in order. Writing and reading go on together, so a large
    /// pipeline cannot wedge against a node that answers while it reads.
    pub async fn pipeline(
        &mut self,
        commands: &[u8],
        count: usize,
    ) -> Result<Vec<Value>, ClientError> {
        let timeout = self.reply_timeout;
        tokio::time::timeout(timeout, self.exchange(commands, count))
            .await
            .map_err(|_| ClientError::Timeout(timeout))?
    }

    async fn exchange(&mut self, commands: &[u8], count: usize) -> Result<Vec<Value>, ClientError> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut rd, mut wr) = self.stream.split();
        let rbuf = &mut self.rbuf;
        let write = async {
            wr.write_all(commands).await?;
            wr.flush().await.map_err(ClientError::from)
        };
        let read = async {
            let mut replies = Vec::with_capacity(count);
            while replies.len() < count {
                let mut used = 0;
                while replies.len() < count {
                    match parse(&rbuf[used..]).map_err(|e| ClientError::Protocol(e.0))? {
                        Some((reply, n)) => {
                            replies.push(reply.to_value());
                            used += n;
                        }
                        None => break,
                    }
                }
                rbuf.drain(..used);
                if replies.len() < count {
                    rbuf.reserve(64 * 1024);
                    if rd.read_buf(rbuf).await? == 0 {
                        return Err(ClientError::Closed(count - replies.len()));
                    }
                }
            }
            Ok(replies)
        };
        let ((), replies) = tokio::try_join!(write, read)?;
        Ok(replies)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_reply_the_load_meets_and_waits_for_partial_ones() {
        let cases: Vec<(&[u8], Reply)> = vec![
            (b"+OK\r\n", Reply::Status(b"OK")),
            (b"-ERR no\r\n", Reply::Error(b"ERR no")),
            (b":42\r\n", Reply::Int(42)),
            (b"$3\r\na\r\n\r\n", Reply::Bulk(Some(b"a\r\n"))),
            (b"$-1\r\n", Reply::Bulk(None)),
            (b"*-1\r\n", Reply::Array(None)),
            (
                b"*2\r\n$1\r\nx\r\n$-1\r\n",
                Reply::Array(Some(vec![Some(b"x"), None])),
            ),
        ];
        for (bytes, want) in cases {
            let (got, used) = parse(bytes).unwrap().unwrap();
            assert_eq!(got, want);
            assert_eq!(used, bytes.len());
            for cut in 0..bytes.len() {
                assert_eq!(
                    parse(&bytes[..cut]).unwrap(),
                    None,
                    "{bytes:?} cut at {cut}"
                );
            }
        }
        assert!(parse(b"?what\r\n").is_err());
        assert!(parse(b"*1\r\n:1\r\n").is_err());
    }

    /// A peer that answers with `answer` one byte at a time once it has
    /// read `expect` bytes, then closes.
    async fn peer(expect: usize, answer: &'static [u8]) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut got = vec![0u8; expect];
            s.read_exact(&mut got).await.unwrap();
            for b in answer {
                s.write_all(&[*b]).await.unwrap();
                s.flush().await.unwrap();
            }
        });
        addr
    }

    #[tokio::test]
    async fn a_client_reads_one_reply_per_command_however_the_bytes_arrive() {
        let mut cmds = vec![];
        encode(&mut cmds, [&b"SET"[..], b"k", b"v"].into_iter());
        encode(&mut cmds, [&b"MGET"[..], b"k", b"x"].into_iter());
        let addr = peer(cmds.len(), b"+OK\r\n*2\r\n$1\r\nv\r\n$-1\r\n").await;
        let second = std::time::Duration::from_secs(5);
        let mut c = Client::connect(&addr, second, second).await.unwrap();
        let replies = c.pipeline(&cmds, 2).await.unwrap();
        assert_eq!(
            replies,
            vec![
                Value::Status(b"OK".to_vec()),
                Value::Array(Some(vec![Some(b"v".to_vec()), None]))
            ]
        );
    }

    #[tokio::test]
    async fn a_client_says_how_many_replies_a_closed_connection_owed() {
        let mut cmds = vec![];
        encode(&mut cmds, [&b"GET"[..], b"a"].into_iter());
        encode(&mut cmds, [&b"GET"[..], b"b"].into_iter());
        let addr = peer(cmds.len(), b"$-1\r\n").await;
        let second = std::time::Duration::from_secs(5);
        let mut c = Client::connect(&addr, second, second).await.unwrap();
        let err = c.pipeline(&cmds, 2).await.unwrap_err();
        assert!(matches!(err, ClientError::Closed(1)), "{err}");
    }

    #[test]
    fn encodes_commands_as_arrays_of_bulk_strings() {
        let mut out = vec![];
        encode(&mut out, [&b"GET"[..], b"k"].into_iter());
        begin_set(&mut out, b"k", 2);
        out.extend_from_slice(b"vv");
        end_bulk(&mut out);
        assert_eq!(
            out,
            b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nvv\r\n"
        );
    }
}
