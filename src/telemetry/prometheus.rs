//! Scraping a node's Prometheus endpoint: the numeric series of its
//! scrapes go to the cell's `metrics.csv.gz` (`t_s,series,value`; which
//! rows, see [`super::Scraper`]).
//!
//! Through the one HTTP client ([`crate::net::http`]). `prometheus-parse`
//! drops names with `:`, cuts label values at commas and skips lines it
//! cannot read, silently; so a scrape that yields no series is an event,
//! not a quiet gap.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::net::http::{check_url, Http};

/// The endpoint to scrape: a URL without a path means `/metrics`.
pub fn endpoint(url: &str) -> Result<String, String> {
    let uri = check_url(url)?;
    Ok(if uri.path() == "/" && !url.ends_with('/') {
        format!("{url}/metrics")
    } else {
        url.to_string()
    })
}

/// One scrape: the text of the endpoint.
pub async fn fetch(http: &Http, url: &str, timeout: Duration) -> Result<String, String> {
    let r = http.get(url, timeout).await?;
    if r.status != 200 {
        return Err(format!("{url}: HTTP status {}", r.status));
    }
    Ok(String::from_utf8_lossy(&r.body).into_owned())
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

fn find(series: &BTreeMap<String, f64>, prefix: &str) -> Option<f64> {
    series
        .iter()
        .find(|(k, _)| k.starts_with(prefix))
        .map(|(_, v)| *v)
}

/// Resident over allocated, the same way for every allocator: the
/// process's RSS (`process_resident_memory_bytes`) over the bytes the
/// program has allocated (`allocator_allocated_bytes`, as soak-node reports
/// for glibc, jemalloc, mimalloc and tcmalloc alike). A node without a
/// process figure gives its own resident figure (`allocator_resident_bytes`:
/// the JVM node's direct-buffer pools).
pub fn fragmentation(series: &BTreeMap<String, f64>) -> Option<f64> {
    let allocated = find(series, "allocator_allocated_bytes").filter(|a| *a > 0.0)?;
    Some(resident(series)? / allocated)
}

/// The node's resident bytes: its process's RSS, or else the allocator's
/// own resident figure.
pub fn resident(series: &BTreeMap<String, f64>) -> Option<f64> {
    find(series, "process_resident_memory_bytes")
        .or_else(|| find(series, "allocator_resident_bytes"))
}

/// The bytes the allocator holds free (`allocator_free_bytes`: glibc's
/// free chunks in its arenas, jemalloc's dirty pages, a pool's unused
/// chunk space), and their share of what it holds (free + allocated).
pub fn held_free(series: &BTreeMap<String, f64>) -> Option<(u64, f64)> {
    let free = find(series, "allocator_free_bytes")?;
    let allocated = find(series, "allocator_allocated_bytes").unwrap_or(0.0);
    (free + allocated > 0.0).then(|| (free as u64, free / (free + allocated)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_and_series() {
        assert_eq!(
            endpoint("http://127.0.0.1:9100").unwrap(),
            "http://127.0.0.1:9100/metrics"
        );
        assert_eq!(
            endpoint("http://127.0.0.1:9100/m").unwrap(),
            "http://127.0.0.1:9100/m"
        );
        assert!(endpoint("https://x/metrics").is_err());
        let text = "# TYPE a_bytes gauge\na_bytes{allocator=\"jemalloc\"} 42\n# TYPE h histogram\nh_bucket{le=\"0.1\"} 3\nh_bucket{le=\"+Inf\"} 5\nh_sum 1.5\nh_count 5\nprocess_resident_memory_bytes 100\nallocator_allocated_bytes{allocator=\"jemalloc\"} 50\n";
        let s = series(text);
        assert_eq!(s["a_bytes{allocator=\"jemalloc\"}"], 42.0);
        assert_eq!(s["h_bucket{le=\"0.1\"}"], 3.0);
        assert_eq!(fragmentation(&s), Some(2.0));
        assert_eq!(held_free(&s), None);
        let pool = series(
            "allocator_resident_bytes 128\nallocator_allocated_bytes 8\nallocator_free_bytes 120\n",
        );
        assert_eq!(fragmentation(&pool), Some(16.0));
        assert_eq!(held_free(&pool), Some((120, 120.0 / 128.0)));
    }
}
