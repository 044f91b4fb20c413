//! RESP2, the server side: an incremental request parser and reply encoders.
//!
//! Requests are multibulk arrays of bulk strings (what every client library
//! sends) or inline commands (what a person types into `nc`/`telnet`), as in
//! Redis. Limits follow Redis so that garbage on the socket is refused with an
//! error instead of growing a buffer without bound.

/// Largest bulk string accepted in a request (Redis' `proto-max-bulk-len`).
pub const MAX_BULK_LEN: usize = 512 << 20;
/// Most arguments in one request.
pub const MAX_MULTIBULK_LEN: usize = 1 << 20;
/// Longest inline request line.
pub const MAX_INLINE_LEN: usize = 64 << 10;

/// A request that cannot be parsed; the connection is answered and closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub String);

/// One parsed request: the command name and its arguments, as bytes.
pub type Request = Vec<Vec<u8>>;

/// Parses one request from the front of `buf`.
///
/// Returns `Ok(None)` when more bytes are needed, or the request and how many
/// bytes it used. An empty inline line yields an empty request, which callers
/// skip, as Redis does.
pub fn parse(buf: &[u8]) -> Result<Option<(Request, usize)>, ProtocolError> {
    if buf.is_empty() {
        return Ok(None);
    }
    if buf[0] == b'*' {
        parse_multibulk(buf)
    } else {
        parse_inline(buf)
    }
}

fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|p| p + from)
}

fn parse_int(bytes: &[u8]) -> Option<i64> {
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

fn parse_multibulk(buf: &[u8]) -> Result<Option<(Request, usize)>, ProtocolError> {
    let Some(end) = find_crlf(buf, 1) else {
        if buf.len() > MAX_INLINE_LEN {
            return Err(ProtocolError("too big mbulk count string".into()));
        }
        return Ok(None);
    };
    let count = parse_int(&buf[1..end])
        .filter(|n| *n <= MAX_MULTIBULK_LEN as i64)
        .ok_or_else(|| ProtocolError("invalid multibulk length".into()))?;
    let mut pos = end + 2;
    if count <= 0 {
        return Ok(Some((Vec::new(), pos)));
    }
    let mut args = Vec::with_capacity(count as usize);
    for _ in 0..count {
        if pos >= buf.len() {
            return Ok(None);
        }
        if buf[pos] != b'$' {
            return Err(ProtocolError(format!(
                "expected '$', got '{}'",
                (buf[pos] as char).escape_default()
            )));
        }
        let Some(end) = find_crlf(buf, pos + 1) else {
            if buf.len() - pos > 32 {
                return Err(ProtocolError("invalid bulk length".into()));
            }
            return Ok(None);
        };
        let len = parse_int(&buf[pos + 1..end])
            .filter(|n| *n >= 0 && *n <= MAX_BULK_LEN as i64)
            .ok_or_else(|| ProtocolError("invalid bulk length".into()))? as usize;
        let start = end + 2;
        if buf.len() < start + len + 2 {
            return Ok(None);
        }
        if &buf[start + len..start + len + 2] != b"\r\n" {
            return Err(ProtocolError("bulk string not terminated by CRLF".into()));
        }
        args.push(buf[start..start + len].to_vec());
        pos = start + len + 2;
    }
    Ok(Some((args, pos)))
}

fn parse_inline(buf: &[u8]) -> Result<Option<(Request, usize)>, ProtocolError> {
    let Some(nl) = buf.iter().position(|b| *b == b'\n') else {
        if buf.len() > MAX_INLINE_LEN {
            return Err(ProtocolError("too big inline request".into()));
        }
        return Ok(None);
    };
    let line = &buf[..nl];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let args = line
        .split(|b| b.is_ascii_whitespace())
        .filter(|w| !w.is_empty())
        .map(|w| w.to_vec())
        .collect();
    Ok(Some((args, nl + 1)))
}

/// Reply encoders: each appends one RESP2 value to `out`.
pub mod reply {
    use std::io::Write;

    pub fn simple(out: &mut Vec<u8>, s: &str) {
        out.push(b'+');
        out.extend_from_slice(s.as_bytes());
        out.extend_from_slice(b"\r\n");
    }

    /// An error reply; `msg` starts with its code (`ERR ...`, `NOPROTO ...`).
    pub fn error(out: &mut Vec<u8>, msg: &str) {
        out.push(b'-');
        // CR and LF would end the reply early and desynchronise the client.
        out.extend(
            msg.bytes()
                .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
        );
        out.extend_from_slice(b"\r\n");
    }

    pub fn int(out: &mut Vec<u8>, n: i64) {
        let _ = write!(out, ":{n}\r\n");
    }

    pub fn bulk(out: &mut Vec<u8>, data: &[u8]) {
        let _ = write!(out, "${}\r\n", data.len());
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
    }

    pub fn null(out: &mut Vec<u8>) {
        out.extend_from_slice(b"$-1\r\n");
    }

    pub fn opt_bulk(out: &mut Vec<u8>, data: Option<&[u8]>) {
        match data {
            Some(d) => bulk(out, d),
            None => null(out),
        }
    }

    pub fn array(out: &mut Vec<u8>, len: usize) {
        let _ = write!(out, "*{len}\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multibulk_whole_and_split() {
        let req = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n";
        let (args, used) = parse(req).unwrap().unwrap();
        assert_eq!(
            args,
            vec![b"SET".to_vec(), b"k".to_vec(), b"hello".to_vec()]
        );
        assert_eq!(used, req.len());
        for cut in 0..req.len() {
            assert_eq!(parse(&req[..cut]).unwrap(), None, "cut at {cut}");
        }
    }

    #[test]
    fn pipelined_requests_parse_in_order() {
        let buf = b"*1\r\n$4\r\nPING\r\nPING\r\n*2\r\n$3\r\nGET\r\n$1\r\nx\r\n";
        let mut pos = 0;
        let mut names = vec![];
        while let Some((args, used)) = parse(&buf[pos..]).unwrap() {
            names.push(args[0].clone());
            pos += used;
        }
        assert_eq!(
            names,
            vec![b"PING".to_vec(), b"PING".to_vec(), b"GET".to_vec()]
        );
        assert_eq!(pos, buf.len());
    }

    #[test]
    fn inline_commands() {
        let (args, used) = parse(b"SET  a b\r\nrest").unwrap().unwrap();
        assert_eq!(args, vec![b"SET".to_vec(), b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(used, 10);
        let (args, _) = parse(b"\n").unwrap().unwrap();
        assert!(args.is_empty());
    }

    #[test]
    fn garbage_is_a_protocol_error() {
        assert!(parse(b"*x\r\n").is_err());
        assert!(parse(b"*2\r\n:1\r\n").is_err());
        assert!(parse(b"*1\r\n$-5\r\n").is_err());
        assert!(parse(b"*1\r\n$99999999999\r\n").is_err());
        assert!(parse(b"*1\r\n$2\r\nabXY").is_err());
        assert!(parse(&vec![b'a'; MAX_INLINE_LEN + 1]).is_err());
    }

    #[test]
    fn error_replies_cannot_break_framing() {
        let mut out = vec![];
        reply::error(&mut out, "ERR bad\r\nthing");
        assert_eq!(out, b"-ERR bad  thing\r\n");
    }
}
