//! HTTP/1.1 on the wire, as much as a key-value load needs: a request
//! encoded straight into the write buffer, a response parsed where it lies
//! in the read buffer (httparse for the head, hyper's own parser), its
//! body framed by `Content-Length`, chunks, or the end of the connection.

/// How the response's body is framed.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Framing {
    None,
    Length(usize),
    Chunked,
    /// Until the server closes.
    Close,
}

/// A response parsed: its status, where its body lies (or the body
/// decoded from chunks), and whether the server closes after it.
#[derive(Debug, PartialEq)]
pub struct Response<'a> {
    pub status: u16,
    pub body: Body<'a>,
    /// Bytes of the buffer it took.
    pub len: usize,
    pub closes: bool,
}

#[derive(Debug, PartialEq)]
pub enum Body<'a> {
    InPlace(&'a [u8]),
    Decoded(Vec<u8>),
}

impl Body<'_> {
    pub fn bytes(&self) -> &[u8] {
        match self {
            Body::InPlace(b) => b,
            Body::Decoded(b) => b,
        }
    }
}

/// Headers a response may have at most.
const HEADERS: usize = 64;

/// The first whole response in `buf` (`None`: not all there yet; with
/// `eof`, the server has closed, which ends a body framed by the close).
/// Interim 1xx responses are skipped. `head` says the request was a HEAD.
pub fn response(buf: &[u8], head: bool, eof: bool) -> Result<Option<Response<'_>>, String> {
    let mut at = 0;
    loop {
        let mut headers = [httparse::EMPTY_HEADER; HEADERS];
        let mut r = httparse::Response::new(&mut headers);
        let n = match r.parse(&buf[at..]) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(e) => {
                return Err(format!(
                    "not an HTTP response ({e}): {:?}",
                    String::from_utf8_lossy(&buf[at..buf.len().min(at + 100)])
                ))
            }
        };
        let status = r.code.unwrap_or_default();
        let start = at + n;
        if (100..200).contains(&status) && status != 101 {
            at = start;
            continue;
        }
        let mut framing = Framing::Close;
        let mut closes = r.version == Some(0);
        for h in r.headers.iter() {
            let v = h.value;
            if h.name.eq_ignore_ascii_case("content-length") && framing != Framing::Chunked {
                let len = std::str::from_utf8(v)
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                    .ok_or_else(|| {
                        format!("a Content-Length of {:?}", String::from_utf8_lossy(v))
                    })?;
                framing = Framing::Length(len);
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                if v.to_ascii_lowercase().ends_with(b"chunked") {
                    framing = Framing::Chunked;
                }
            } else if h.name.eq_ignore_ascii_case("connection") {
                let v = v.to_ascii_lowercase();
                if v.windows(5).any(|w| w == b"close") {
                    closes = true;
                } else if v.windows(10).any(|w| w == b"keep-alive") {
                    closes = false;
                }
            }
        }
        if head || status == 204 || status == 304 {
            framing = Framing::None;
        }
        let rest = &buf[start..];
        let (body, used) = match framing {
            Framing::None => (Body::InPlace(&rest[..0]), 0),
            Framing::Length(len) if rest.len() >= len => (Body::InPlace(&rest[..len]), len),
            Framing::Length(_) => return Ok(None),
            Framing::Chunked => match chunks(rest)? {
                Some((b, used)) => (Body::Decoded(b), used),
                None => return Ok(None),
            },
            Framing::Close if eof => {
                closes = true;
                (Body::InPlace(rest), rest.len())
            }
            Framing::Close => return Ok(None),
        };
        return Ok(Some(Response {
            status,
            body,
            len: start + used,
            closes,
        }));
    }
}

/// A chunked body, decoded, and the bytes it took with its trailers.
fn chunks(buf: &[u8]) -> Result<Option<(Vec<u8>, usize)>, String> {
    let mut out = vec![];
    let mut at = 0;
    loop {
        let Some(eol) = find_crlf(&buf[at..]) else {
            return Ok(None);
        };
        let line = &buf[at..at + eol];
        let hex = line.split(|b| *b == b';').next().unwrap_or_default();
        let size = std::str::from_utf8(hex)
            .ok()
            .and_then(|s| usize::from_str_radix(s.trim(), 16).ok())
            .ok_or_else(|| format!("a chunk size of {:?}", String::from_utf8_lossy(line)))?;
        at += eol + 2;
        if size == 0 {
            // Trailers, up to an empty line.
            loop {
                let Some(eol) = find_crlf(&buf[at..]) else {
                    return Ok(None);
                };
                at += eol + 2;
                if eol == 0 {
                    return Ok(Some((out, at)));
                }
            }
        }
        if buf.len() < at + size + 2 {
            return Ok(None);
        }
        out.extend_from_slice(&buf[at..at + size]);
        at += size + 2;
    }
}

fn find_crlf(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\r\n")
}

/// Whether `v` may stand in a header's value (no line breaks, no
/// controls but tab).
pub fn header_value_ok(v: &[u8]) -> bool {
    v.iter().all(|b| *b == b'\t' || *b >= 0x20 && *b != 0x7f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_is_framed_by_its_length_its_chunks_or_the_close() {
        let r = response(
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcHTTP",
            false,
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (r.status, r.body.bytes(), r.len, r.closes),
            (200, &b"abc"[..], 41, false)
        );
        assert_eq!(
            response(
                b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nab",
                false,
                false
            )
            .unwrap(),
            None
        );
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=1\r\nabc\r\n2\r\nde\r\n0\r\nT: v\r\n\r\n";
        let r = response(chunked, false, false).unwrap().unwrap();
        assert_eq!((r.body.bytes(), r.len), (&b"abcde"[..], chunked.len()));
        assert_eq!(
            response(&chunked[..chunked.len() - 2], false, false).unwrap(),
            None
        );
        let close = b"HTTP/1.0 200 OK\r\n\r\nall of it";
        assert_eq!(response(close, false, false).unwrap(), None);
        let r = response(close, false, true).unwrap().unwrap();
        assert_eq!((r.body.bytes(), r.closes), (&b"all of it"[..], true));
    }

    #[test]
    fn interim_responses_heads_and_closes() {
        let r = response(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", false, false)
            .unwrap()
            .unwrap();
        assert_eq!((r.status, r.closes), (404, true));
        let r = response(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", true, false)
            .unwrap()
            .unwrap();
        assert_eq!(r.body.bytes(), b"");
        let e = response(b"<html>hello</html>\r\n\r\n", false, false).unwrap_err();
        assert!(e.contains("not an HTTP response"), "{e}");
        assert!(response(
            b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
            false,
            false
        )
        .is_err());
    }
}
