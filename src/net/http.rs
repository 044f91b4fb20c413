//! The orchestrator's one HTTP client: readiness probes, Prometheus
//! scrapes and the Docker engine's socket all go through [`get`].

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `http://HOST:PORT/PATH` split into the address and the path.
pub fn http_parts(url: &str) -> Option<(String, String)> {
    let rest = url.strip_prefix("http://")?;
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let addr = if host.contains(':') {
        host.to_string()
    } else {
        format!("{host}:80")
    };
    (!host.is_empty()).then(|| (addr, path.to_string()))
}

/// A GET answered with a 2xx status (HTTP/1.1, plain: nodes here listen on
/// loopback).
pub async fn get_ok(url: &str) -> bool {
    let Some((addr, path)) = http_parts(url) else {
        return false;
    };
    let Ok(mut s) = tokio::net::TcpStream::connect(addr.as_str()).await else {
        return false;
    };
    let host = addr.split(':').next().unwrap_or("");
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).await.is_err() {
        return false;
    }
    let mut buf = [0u8; 32];
    let mut n = 0;
    while n < 12 {
        match s.read(&mut buf[n..]).await {
            Ok(0) | Err(_) => break,
            Ok(k) => n += k,
        }
    }
    // "HTTP/1.1 200 OK"
    let line = String::from_utf8_lossy(&buf[..n]);
    let mut parts = line.split_whitespace();
    parts.next().is_some_and(|v| v.starts_with("HTTP/"))
        && parts
            .next()
            .is_some_and(|code| code.starts_with('2') && code.len() == 3)
}
