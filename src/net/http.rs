//! The orchestrator's one HTTP client, hyper's: readiness probes and
//! Prometheus scrapes go through [`Http`]. Plain `http://` only: nodes
//! serve their health and metrics on loopback (or a namespace of the run's
//! own), and the Docker engine is reached through bollard, on the same
//! hyper.

use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::Uri;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};

/// A URL soak can GET: `http://HOST[:PORT][/PATH]`.
pub fn check_url(url: &str) -> Result<Uri, String> {
    let uri: Uri = url
        .parse()
        .map_err(|e| format!("{url:?} is not a URL: {e}"))?;
    if uri.scheme_str() != Some("http") {
        return Err(format!(
            "{url:?}: give a plain http:// URL (https is not spoken to nodes)"
        ));
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("{url:?}: no host"));
    }
    Ok(uri)
}

/// What a GET brought back.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub body: Bytes,
}

/// hyper's connector, through [`super::netns::connect`]: a cluster's
/// member is reached from the hub.
#[derive(Clone, Copy, Default)]
pub struct Connector;

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<tokio::net::TcpStream>;
    type Error = std::io::Error;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        Box::pin(async move {
            let host = uri.host().unwrap_or_default().trim_matches(['[', ']']);
            let target = format!("{host}:{}", uri.port_u16().unwrap_or(80));
            let s = tokio::time::timeout(Duration::from_secs(5), super::netns::connect(&target))
                .await
                .map_err(|_| {
                    std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no connection to {target} within 5 s"),
                    )
                })??;
            let _ = s.set_nodelay(true);
            Ok(TokioIo::new(s))
        })
    }
}

/// A client that keeps its connection to a node between requests (a
/// scraper asks every second). Used within the tokio runtime that made it.
#[derive(Clone)]
pub struct Http {
    client: Client<Connector, Empty<Bytes>>,
}

impl Default for Http {
    fn default() -> Self {
        let connector = Connector;
        Http {
            client: Client::builder(TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(30))
                .pool_max_idle_per_host(1)
                .build(connector),
        }
    }
}

impl Http {
    /// GET `url`, the whole body, within `timeout`.
    pub async fn get(&self, url: &str, timeout: Duration) -> Result<Response, String> {
        let uri = check_url(url)?;
        let work = async {
            let response = self
                .client
                .get(uri)
                .await
                .map_err(|e| format!("{url}: {}", super::error_chain(&e)))?;
            let status = response.status().as_u16();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| format!("{url}: reading the body: {e}"))?
                .to_bytes();
            Ok(Response { status, body })
        };
        tokio::time::timeout(timeout, work)
            .await
            .map_err(|_| format!("{url}: no answer within {timeout:?}"))?
    }
}

/// A GET answered with a 2xx status within 5 s: the `http` readiness probe.
pub async fn get_ok(url: &str) -> bool {
    Http::default()
        .get(url, Duration::from_secs(5))
        .await
        .is_ok_and(|r| (200..300).contains(&r.status))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server that answers each connection's first request with `answer`.
    async fn server(answer: &'static [u8]) -> String {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let mut buf = vec![0u8; 4096];
                let mut got = 0;
                while !buf[..got].windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf[got..]).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got += n,
                    }
                }
                let _ = s.write_all(answer).await;
            }
        });
        format!("http://{addr}/health")
    }

    #[tokio::test]
    async fn a_probe_is_ready_on_2xx_only() {
        let ok = server(b"HTTP/1.1 204 No Content\r\n\r\n").await;
        let down = server(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n").await;
        assert!(get_ok(&ok).await);
        assert!(!get_ok(&down).await);
        assert!(!get_ok("http://127.0.0.1:1/health").await);
    }

    #[tokio::test]
    async fn a_chunked_body_arrives_whole() {
        let url = server(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
        )
        .await;
        let r = Http::default()
            .get(&url, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!((r.status, &r.body[..]), (200, &b"hello world"[..]));
    }

    #[test]
    fn only_plain_http_urls_with_a_host() {
        assert!(check_url("http://127.0.0.1:9100/metrics").is_ok());
        assert!(check_url("http://localhost").is_ok());
        for bad in [
            "https://x/metrics",
            "127.0.0.1:80/x",
            "http:///x",
            "ftp://x",
        ] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
    }
}
