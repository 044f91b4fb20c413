//! Scraping a node's Prometheus endpoint: every numeric series of every
//! scrape goes to the cell's `metrics.csv` (`t_s,series,value`) as it comes.
//!
//! Plain HTTP/1.1 over a TCP socket (nodes serve metrics on loopback), with
//! `Content-Length`, chunked or close-delimited bodies. `prometheus-parse`
//! drops names with `:`, cuts label values at commas and skips lines it
//! cannot read, silently; so a scrape that yields no series is an event,
//! not a quiet gap.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `http://host:port/path` into ("host:port", "/path").
pub fn split_url(url: &str) -> Result<(String, String), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url:?}: only http:// endpoints can be scraped"))?;
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/metrics"),
    };
    if host.is_empty() {
        return Err(format!("{url:?}: no host"));
    }
    Ok((host.to_string(), path.to_string()))
}

fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = vec![];
    loop {
        let Some(nl) = body.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size_text = String::from_utf8_lossy(&body[..nl]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .unwrap_or(0);
        body = &body[nl + 2..];
        if size == 0 || body.len() < size {
            out.extend_from_slice(&body[..size.min(body.len())]);
            return out;
        }
        out.extend_from_slice(&body[..size]);
        body = body.get(size + 2..).unwrap_or_default();
    }
}

/// One scrape: the text of the endpoint.
pub async fn fetch(url: &str, timeout: Duration) -> Result<String, String> {
    let (host, path) = split_url(url)?;
    let work = async {
        let mut s = tokio::net::TcpStream::connect(&host)
            .await
            .map_err(|e| format!("connect {host}: {e}"))?;
        let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: text/plain\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut raw = vec![];
        s.read_to_end(&mut raw).await.map_err(|e| e.to_string())?;
        let split = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .ok_or("no HTTP header")?;
        let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
        if !head.starts_with("http/1.") || head.split_whitespace().nth(1).is_none_or(|c| c != "200")
        {
            return Err(format!("{url}: {}", head.lines().next().unwrap_or("")));
        }
        let body = &raw[split + 4..];
        let body = if head.contains("transfer-encoding: chunked") {
            dechunk(body)
        } else {
            body.to_vec()
        };
        Ok(String::from_utf8_lossy(&body).into_owned())
    };
    tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| format!("{url}: no answer within {timeout:?}"))?
}

/// Every numeric series of a scrape, named `name{label="value",...}`.
pub fn series(text: &str) -> BTreeMap<String, f64> {
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let Ok(scrape) = prometheus_parse::Scrape::parse(lines) else {
        return BTreeMap::new();
    };
    let mut out = BTreeMap::new();
    for s in scrape.samples {
        let labels = |extra: Option<(&str, String)>| {
            let mut l: Vec<String> = s
                .labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{v}\""))
                .collect();
            if let Some((k, v)) = extra {
                l.push(format!("{k}=\"{v}\""));
            }
            l.sort();
            if l.is_empty() {
                String::new()
            } else {
                format!("{{{}}}", l.join(","))
            }
        };
        use prometheus_parse::Value;
        match &s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => {
                out.insert(format!("{}{}", s.metric, labels(None)), *v);
            }
            Value::Histogram(buckets) => {
                for b in buckets {
                    out.insert(
                        format!(
                            "{}_bucket{}",
                            s.metric,
                            labels(Some(("le", b.less_than.to_string())))
                        ),
                        b.count,
                    );
                }
            }
            Value::Summary(qs) => {
                for q in qs {
                    out.insert(
                        format!(
                            "{}{}",
                            s.metric,
                            labels(Some(("quantile", q.quantile.to_string())))
                        ),
                        q.count,
                    );
                }
            }
        }
    }
    out
}

/// Resident over allocated, from the allocator's own statistics where the
/// node reports them (`allocator_resident_bytes`/`allocator_allocated_bytes`,
/// as soak-node does), else the process RSS over allocated.
pub fn fragmentation(series: &BTreeMap<String, f64>) -> Option<f64> {
    let find = |prefix: &str| {
        series
            .iter()
            .find(|(k, _)| k.starts_with(prefix))
            .map(|(_, v)| *v)
    };
    let allocated = find("allocator_allocated_bytes").filter(|a| *a > 0.0)?;
    let resident =
        find("allocator_resident_bytes").or_else(|| find("process_resident_memory_bytes"))?;
    Some(resident / allocated)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_chunks_and_series() {
        assert_eq!(
            split_url("http://127.0.0.1:9100/metrics").unwrap(),
            ("127.0.0.1:9100".into(), "/metrics".into())
        );
        assert!(split_url("https://x/metrics").is_err());
        assert_eq!(
            dechunk(b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"),
            b"hello world"
        );
        let text = "# TYPE a_bytes gauge\na_bytes{allocator=\"jemalloc\"} 42\n# TYPE h histogram\nh_bucket{le=\"0.1\"} 3\nh_bucket{le=\"+Inf\"} 5\nh_sum 1.5\nh_count 5\nprocess_resident_memory_bytes 100\nallocator_allocated_bytes{allocator=\"jemalloc\"} 50\n";
        let s = series(text);
        assert_eq!(s["a_bytes{allocator=\"jemalloc\"}"], 42.0);
        assert_eq!(s["h_bucket{le=\"0.1\"}"], 3.0);
        assert_eq!(fragmentation(&s), Some(2.0));
    }
}
