//! RESP2, the client side of the load: commands encoded straight into a
//! write buffer, replies parsed in place from the read buffer. The load
//! needs nothing more than bulk strings, statuses, errors, integers and
//! flat arrays (MGET), and owning the socket lets one task pipeline
//! requests and read replies without a hop through another task.

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
    let _ = write!(out, "*{}\r\n", args.len());
    for a in args {
        let _ = write!(out, "${}\r\n", a.len());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
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
