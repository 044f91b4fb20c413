//! soak's loads over protocols other than RESP against a named peer on the
//! same endpoint, in the same run, interleaved rounds (three unless told),
//! medians:
//!
//! - HTTP: soak's `http` load on etcd's v3 JSON gateway against `wrk`
//!   (reads: `/v3/kv/range`; writes: `/v3/kv/put`), 8 connections each,
//!   one request in flight on each. soak judges every read against its
//!   ledger (the oracle on); wrk repeats one request and checks nothing.
//! - PostgreSQL: soak's `postgres` load against `pgbench` at the same
//!   connections (8), one statement in flight on each, the same
//!   statements (`-M prepared`): point reads of the table soak made, and
//!   upserts into it.
//! - The adapter's cost: the same PostgreSQL load through
//!   `adapters/postgres.py` (psycopg2) against soak's built-in client.
//!
//!     cargo run --example protocols [seconds per run, default 5] [http|postgres] [rounds, default 3]
//!
//! For HTTP it also prints each round's ratio (soak's rate over wrk's in
//! the same round, so that the machine's noise hits both alike) and their
//! mean with a 95% confidence interval: on this 2-core machine etcd takes
//! about 90% of the CPU, so the rate is etcd's and the ratio's spread is
//! the noise's.
//!
//! Needs etcd, wrk, PostgreSQL and psycopg2 (`scripts/deps --tests`).
//! Prints markdown tables for docs/src/protocols.md.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use soak::protocol::{self, http};
use soak::workload::{dist::Distribution, Load, LoadConfig};

#[path = "need.rs"]
mod need_tool;
use need_tool::need;

const CONNECTIONS: usize = 8;
const KEYS: usize = 10_000;
const VALUE: usize = 100;
/// Interleaved rounds of each tool, unless the command line says.
const ROUNDS: usize = 3;

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_ports<const N: usize>() -> [u16; N] {
    soak::net::ports::free().expect("free ports on 127.0.0.1")
}

fn wait_for(port: u16) {
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("nothing listens on {port}");
}

/// CPU seconds used so far by this process (`libc::RUSAGE_SELF`) or by
/// its children that have been waited for (`RUSAGE_CHILDREN`: a peer
/// tool that ran to its end; the servers still run).
fn cpu(who: i32) -> f64 {
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(who, &mut u) };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    s(u.ru_utime) + s(u.ru_stime)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn config(protocol: protocol::Spec, get: f64) -> LoadConfig {
    LoadConfig {
        protocol,
        keys: KEYS,
        value_size: (VALUE, VALUE),
        compressibility: None,
        set: 1.0 - get,
        get,
        del: 0.0,
        mget: 0.0,
        mget_keys: 1,
        rate: None,
        pipeline: 1,
        connections: CONNECTIONS,
        timeout: Duration::from_secs(5),
        seed: 1,
        distribution: Distribution::Uniform,
        members: vec![],
        rotate: false,
    }
}

/// soak's closed loop for `secs` on a filled key space: acknowledged
/// operations per second, every read judged.
async fn soak(engine: &mut Load, secs: f64) -> f64 {
    let before = engine.stats();
    engine.resume();
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    engine.pause().await;
    let s = engine.stats().since(&before);
    assert_eq!(s.corrupted_reads + s.lost_reads, 0, "soak found losses");
    assert!(s.errors < 10, "soak's load had {} errors", s.errors);
    s.ops_per_s()
}

fn etcd_spec(port: u16) -> protocol::Spec {
    let req = |path: &str, body: &str| http::RequestSpec {
        method: "POST".into(),
        path: path.into(),
        body: Some(body.into()),
        headers: vec![],
    };
    protocol::Spec::Http(Box::new(http::Spec {
        target: format!("127.0.0.1:{port}"),
        host: format!("127.0.0.1:{port}"),
        headers: vec![("content-type".into(), "application/json".into())],
        write: req(
            "/v3/kv/put",
            r#"{"key":"${key.base64}","value":"${value.base64}"}"#,
        ),
        read: req("/v3/kv/range", r#"{"key":"${key.base64}"}"#),
        delete: None,
        value: http::Extract::Json {
            pointer: "/kvs/0/value".into(),
            decode: http::Decode::Base64,
        },
        status: http::Statuses::default(),
        setup: vec![],
    }))
}

/// wrk's requests per second: POSTs to `path` of `body` (a Lua
/// expression of `key`, the base64 of `soak:N`) for keys drawn uniformly
/// from soak's key space, as soak's load draws them (one hot key would
/// make etcd's work lighter than soak's). The requests are made in Lua's
/// `init`, so drawing one costs wrk a table lookup.
fn wrk(port: u16, path: &str, body: &str, secs: f64, dir: &Path) -> f64 {
    let script = dir.join("post.lua");
    std::fs::write(
        &script,
        format!(
            r#"local chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local function b64(s)
  return ((s:gsub(".", function(x)
    local r, b = "", x:byte()
    for i = 8, 1, -1 do r = r .. (b % 2 ^ i - b % 2 ^ (i - 1) > 0 and "1" or "0") end
    return r
  end) .. "0000"):gsub("%d%d%d?%d?%d?%d?", function(x)
    if #x < 6 then return "" end
    local c = 0
    for i = 1, 6 do c = c + (x:sub(i, i) == "1" and 2 ^ (6 - i) or 0) end
    return chars:sub(c + 1, c + 1)
  end) .. ({{"", "==", "="}})[#s % 3 + 1])
end
local requests = {{}}
function init(args)
  for n = 0, {keys} do
    local key = b64("soak:" .. n)
    requests[n] = wrk.format("POST", "{path}", {{["Content-Type"] = "application/json"}}, {body})
  end
end
function request()
  return requests[math.random(0, {keys})]
end
"#,
            keys = KEYS - 1,
        ),
    )
    .unwrap();
    let out = Command::new("wrk")
        .args(["-t1", &format!("-c{CONNECTIONS}"), &format!("-d{secs}s")])
        .arg("-s")
        .arg(&script)
        .arg(format!("http://127.0.0.1:{port}"))
        .output()
        .expect("wrk runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !text.contains("Non-2xx"),
        "wrk's requests were refused, its figure would be of errors: {text}"
    );
    text.lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no figure from wrk: {text}"))
}

/// The mean of paired ratios and its 95% confidence interval (Student's
/// t for few rounds).
fn mean_ci(r: &[f64]) -> (f64, f64, f64) {
    let n = r.len() as f64;
    let mean = r.iter().sum::<f64>() / n;
    if r.len() < 2 {
        return (mean, mean, mean);
    }
    let sd = (r.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
    // t(0.975, n - 1) for n - 1 = 1..=30, then the normal's.
    const T: [f64; 30] = [
        12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23, 2.20, 2.18, 2.16, 2.14, 2.13,
        2.12, 2.11, 2.10, 2.09, 2.09, 2.08, 2.07, 2.07, 2.06, 2.06, 2.06, 2.05, 2.05, 2.05, 2.04,
    ];
    let t = T.get(r.len() - 2).copied().unwrap_or(1.96);
    let half = t * sd / n.sqrt();
    (mean, mean - half, mean + half)
}

async fn http_vs_wrk(secs: f64, rounds: usize) {
    need("etcd", "etcd-server");
    need("wrk", "wrk");
    let dir = tempfile::tempdir().unwrap();
    let [port, peer] = free_ports();
    let _etcd = Server(
        Command::new("etcd")
            .args(["--name", "bench", "--data-dir"])
            .arg(dir.path().join("etcd"))
            .arg(format!("--listen-client-urls=http://127.0.0.1:{port}"))
            .arg(format!("--advertise-client-urls=http://127.0.0.1:{port}"))
            .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
            .arg(format!(
                "--initial-advertise-peer-urls=http://127.0.0.1:{peer}"
            ))
            .arg(format!("--initial-cluster=bench=http://127.0.0.1:{peer}"))
            .args(["--log-level", "error"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd starts"),
    );
    wait_for(port);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut reads = Load::new(config(etcd_spec(port), 1.0));
    let (filled, _) = reads.fill().await;
    assert_eq!(filled, KEYS as u64, "etcd took every key");
    let mut writes = Load::new(config(etcd_spec(port), 0.0));
    // A valid base64 value of VALUE bytes ("aaa" is "YWFh"): etcd's
    // gateway answers 400 to anything else, and wrk counts those too.
    let value = format!("{}YQ==", "YWFh".repeat(VALUE / 3));
    let mut ratios = vec![];
    println!("\n| etcd v3 gateway | wrk ops/s | soak ops/s | soak / wrk | wrk CPU µs/op | soak CPU µs/op |\n|---|---:|---:|---:|---:|---:|");
    for (name, engine, path, body) in [
        (
            "range (read)",
            &mut reads,
            "/v3/kv/range",
            r#"'{"key":"' .. key .. '"}'"#.to_string(),
        ),
        (
            "put (write)",
            &mut writes,
            "/v3/kv/put",
            format!(r#"'{{"key":"' .. key .. '","value":"{value}"}}'"#),
        ),
    ] {
        let (mut theirs, mut ours, mut their_cpu, mut our_cpu) = (vec![], vec![], 0.0, 0.0);
        for _ in 0..rounds {
            let before = cpu(libc::RUSAGE_CHILDREN);
            theirs.push(wrk(port, path, &body, secs, dir.path()));
            their_cpu += cpu(libc::RUSAGE_CHILDREN) - before;
            let before = cpu(libc::RUSAGE_SELF);
            ours.push(soak(engine, secs).await);
            our_cpu += cpu(libc::RUSAGE_SELF) - before;
        }
        let ops = |v: &[f64]| v.iter().sum::<f64>() * secs;
        let (per_theirs, per_ours) = (their_cpu / ops(&theirs) * 1e6, our_cpu / ops(&ours) * 1e6);
        let paired: Vec<f64> = ours.iter().zip(&theirs).map(|(o, t)| o / t).collect();
        ratios.push((name, paired));
        let (t, o) = (median(theirs), median(ours));
        println!(
            "| {name} | {t:.0} | {o:.0} | {:.2}x | {per_theirs:.1} | {per_ours:.1} |",
            o / t
        );
    }
    println!("\n| etcd v3 gateway | rounds | soak / wrk, each round | mean | 95% CI |\n|---|---:|---|---:|---|");
    for (name, r) in ratios {
        let (mean, low, high) = mean_ci(&r);
        let each: Vec<String> = r.iter().map(|x| format!("{x:.2}")).collect();
        println!(
            "| {name} | {} | {} | {mean:.3}x | [{low:.3}, {high:.3}] |",
            r.len(),
            each.join(" ")
        );
    }
}

/// A PostgreSQL cluster of the benchmark's own, as `postgres`.
struct Postgres {
    _server: Server,
    port: u16,
    _dir: tempfile::TempDir,
}

fn postgres() -> Postgres {
    let bin = Path::new("/usr/lib/postgresql/15/bin");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let as_postgres = |program: &Path| {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=postgres", "--regid=postgres", "--init-groups"])
            .arg(program);
        c
    };
    let ok = as_postgres(&bin.join("initdb"))
        .arg("-D")
        .arg(&data)
        .args(["-U", "soak", "-A", "trust", "--no-sync"])
        .stdout(Stdio::null())
        .status()
        .expect("initdb runs");
    assert!(ok.success(), "initdb failed");
    let [port] = free_ports();
    let server = Server(
        as_postgres(&bin.join("postgres"))
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string()])
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-c", "unix_socket_directories="])
            .args(["-c", "max_connections=50"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("postgres starts"),
    );
    wait_for(port);
    std::thread::sleep(Duration::from_secs(1));
    Postgres {
        _server: server,
        port,
        _dir: dir,
    }
}

/// Each load its own table: a load judges what it reads against its own
/// ledger, so another's writes to its keys would be "corrupted".
fn pg_spec(port: u16, table: &str) -> protocol::Spec {
    protocol::Spec::Postgres(
        protocol::postgres::Spec::from_url(
            &format!("postgres://soak@127.0.0.1:{port}/postgres"),
            table,
        )
        .unwrap(),
    )
}

fn adapter_spec(port: u16, table: &str, dir: &Path) -> protocol::Spec {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    protocol::Spec::Adapter(protocol::adapter::Spec {
        command: vec![
            "/usr/bin/python3".into(),
            root.join("adapters/postgres.py").display().to_string(),
        ],
        env: vec![],
        target: Some(format!("127.0.0.1:{port}")),
        params: [("table".to_string(), table.to_string())].into(),
        init_timeout_s: 10.0,
        needs: protocol::Caps {
            multi_get: false,
            delete: false,
        },
        log: dir.join("adapter.log"),
        run_id: "bench".into(),
    })
}

/// pgbench's transactions per second of `script`, one statement each.
fn pgbench(port: u16, script: &str, secs: f64, dir: &Path) -> f64 {
    let file = dir.join("bench.sql");
    std::fs::write(&file, script).unwrap();
    let out = Command::new("pgbench")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "soak"])
        .args(["-n", "-M", "prepared", &format!("-c{CONNECTIONS}"), "-j1"])
        .args(["-T", &format!("{}", secs.ceil() as u64)])
        .arg("-f")
        .arg(&file)
        .arg("postgres")
        .output()
        .expect("pgbench runs");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("tps = "))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "no figure from pgbench: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

async fn postgres_vs_pgbench_and_the_adapter(secs: f64) {
    need("pgbench", "postgresql-client");
    need("setpriv", "util-linux");
    let pg = postgres();
    let dir = tempfile::tempdir().unwrap();
    let mut reads = Load::new(config(pg_spec(pg.port, "kv_reads"), 1.0));
    let (filled, _) = reads.fill().await;
    assert_eq!(filled, KEYS as u64);
    let mut writes = Load::new(config(pg_spec(pg.port, "kv_writes"), 0.0));
    let value = "a".repeat(VALUE);
    let read_sql = format!(
        "\\set k random(0, {})\nSELECT v FROM kv_reads WHERE k = 'soak:' || :k;\n",
        KEYS - 1
    );
    let write_sql = format!(
        "\\set k random(0, {})\nINSERT INTO kv_pgbench (k, v) VALUES ('soak:' || :k, '{value}') ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v;\n",
        KEYS - 1
    );
    let mut peer = Load::new(config(pg_spec(pg.port, "kv_pgbench"), 0.0));
    peer.fill().await;
    println!(
        "\n| PostgreSQL 15 | pgbench tps | soak ops/s | soak / pgbench |\n|---|---:|---:|---:|"
    );
    for (name, engine, sql) in [
        ("point read", &mut reads, &read_sql),
        ("upsert", &mut writes, &write_sql),
    ] {
        let (mut theirs, mut ours) = (vec![], vec![]);
        for _ in 0..ROUNDS {
            theirs.push(pgbench(pg.port, sql, secs, dir.path()));
            ours.push(soak(engine, secs).await);
        }
        let (t, o) = (median(theirs), median(ours));
        println!("| {name} | {t:.0} | {o:.0} | {:.2}x |", o / t);
    }
    let mut through_adapter = [
        Load::new(config(
            adapter_spec(pg.port, "kv_adapter_reads", dir.path()),
            1.0,
        )),
        Load::new(config(
            adapter_spec(pg.port, "kv_adapter_writes", dir.path()),
            0.0,
        )),
    ];
    let (filled, _) = through_adapter[0].fill().await;
    assert_eq!(filled, KEYS as u64);
    println!(
        "\n| PostgreSQL 15 | built-in ops/s | adapters/postgres.py ops/s | adapter / built-in |\n|---|---:|---:|---:|"
    );
    for (name, builtin, adapter) in [("point read", &mut reads, 0), ("upsert", &mut writes, 1)] {
        let (mut theirs, mut ours) = (vec![], vec![]);
        for _ in 0..ROUNDS {
            theirs.push(soak(builtin, secs).await);
            ours.push(soak(&mut through_adapter[adapter], secs).await);
        }
        let (t, o) = (median(theirs), median(ours));
        println!("| {name} | {t:.0} | {o:.0} | {:.2}x |", o / t);
    }
}

#[tokio::main]
async fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("seconds per run"))
        .unwrap_or(5.0);
    let only = std::env::args().nth(2);
    let rounds: usize = std::env::args()
        .nth(3)
        .map(|a| a.parse().expect("rounds"))
        .unwrap_or(ROUNDS);
    if only.as_deref().is_none_or(|o| o == "http") {
        http_vs_wrk(secs, rounds).await;
    }
    if only.as_deref().is_none_or(|o| o == "postgres") {
        postgres_vs_pgbench_and_the_adapter(secs).await;
    }
}
