//! The RESP server: accepts connections, answers pipelined requests in
//! order, and stops cleanly on SIGTERM.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Instant;

use rocksdb::{Direction, IteratorMode, WriteBatch, WriteOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use super::alloc_stats::Allocator;
use super::metrics::{self, Stats};
use super::resp::{self, reply};
use super::store::Store;
use super::NodeArgs;
use crate::glob::glob_match;

/// Runs the node until SIGTERM or SIGINT; returns the process exit code.
pub fn run(args: NodeArgs) -> i32 {
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = args.worker_threads {
        rt.worker_threads(n.max(1));
    }
    let rt = match rt.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("soak-node: cannot start the runtime: {e}");
            return 1;
        }
    };
    rt.block_on(serve(args))
}

async fn serve(args: NodeArgs) -> i32 {
    let store = match Store::open(&args.data_dir, &args.storage) {
        Ok(s) => Arc::new(s),
        Err(e) => {
            eprintln!("soak-node: {e}");
            return 1;
        }
    };
    let listener = match TcpListener::bind(SocketAddr::new(args.bind, args.port)).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!(
                "soak-node: cannot listen on {}:{}: {e}",
                args.bind, args.port
            );
            return 1;
        }
    };
    let stats = Arc::new(Stats::default());
    let allocator = Allocator::detect();
    let metrics_addr = match args.metrics_port {
        Some(port) => match TcpListener::bind(SocketAddr::new(args.bind, port)).await {
            Ok(l) => {
                let addr = l.local_addr().ok();
                tokio::spawn(metrics::serve(l, stats.clone(), store.clone(), allocator));
                addr
            }
            Err(e) => {
                eprintln!(
                    "soak-node: cannot listen for metrics on {}:{port}: {e}",
                    args.bind
                );
                return 1;
            }
        },
        None => None,
    };
    // Handlers first: a SIGTERM right after "ready" must still flush.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .expect("SIGINT handler");
    let resp_addr = listener.local_addr().expect("bound socket has an address");
    println!(
        "soak-node ready: resp={resp_addr} metrics={} allocator={} rocksdb={}",
        metrics_addr
            .map(|a| a.to_string())
            .unwrap_or_else(|| "off".into()),
        allocator.name(),
        store.rocksdb_version.as_deref().unwrap_or("unknown"),
    );

    let ctx = Arc::new(Ctx {
        store: store.clone(),
        stats,
        allocator,
        port: resp_addr.port(),
        check_then_write: RwLock::new(()),
    });
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((sock, _)) = accepted {
                    let _ = sock.set_nodelay(true);
                    conns.spawn(connection(sock, ctx.clone()));
                }
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    drop(listener);
    conns.shutdown().await;
    let flushed = tokio::task::spawn_blocking(move || store.flush_all()).await;
    match flushed {
        Ok(Ok(())) => {
            eprintln!("soak-node: flushed and closed");
            0
        }
        Ok(Err(e)) => {
            eprintln!("soak-node: flush at shutdown failed: {e}");
            1
        }
        Err(e) => {
            eprintln!("soak-node: flush at shutdown panicked: {e}");
            1
        }
    }
}

struct Ctx {
    store: Arc<Store>,
    stats: Arc<Stats>,
    allocator: Allocator,
    port: u16,
    /// Commands that read before they write (SET NX or XX, DEL,
    /// FLUSHALL) hold this alone, plain SETs share it: without it, two
    /// clients racing SET NX on one key were both told OK (in a test, 293
    /// to 2,937 of 5,000 keys), and SET NX is how Redis users take a lock.
    check_then_write: RwLock<()>,
}

impl Ctx {
    fn exclusive(&self) -> RwLockWriteGuard<'_, ()> {
        self.check_then_write
            .write()
            .unwrap_or_else(|e| e.into_inner())
    }

    fn shared(&self) -> RwLockReadGuard<'_, ()> {
        self.check_then_write
            .read()
            .unwrap_or_else(|e| e.into_inner())
    }
}

/// What one connection remembers between requests.
struct Conn {
    write: WriteOptions,
    /// SCAN cursors handed out: id and the last key returned.
    cursors: VecDeque<(u64, Vec<u8>)>,
    next_cursor: u64,
    id: u64,
}

enum Flow {
    Continue,
    Close,
}

async fn connection(mut sock: TcpStream, ctx: Arc<Ctx>) {
    ctx.stats.connections.fetch_add(1, Relaxed);
    let id = ctx.stats.connections_total.fetch_add(1, Relaxed) + 1;
    let mut conn = Conn {
        write: ctx.store.write_options(),
        cursors: VecDeque::new(),
        next_cursor: 1,
        id,
    };
    let mut inbuf: Vec<u8> = Vec::with_capacity(16 << 10);
    let mut out: Vec<u8> = Vec::with_capacity(16 << 10);
    let mut group = Group::default();
    'conn: loop {
        let mut pos = 0;
        let mut flow = Flow::Continue;
        while matches!(flow, Flow::Continue) {
            match resp::parse(&inbuf[pos..]) {
                Ok(Some((req, used))) => {
                    pos += used;
                    if let [name, key, value] = req.as_slice() {
                        if name.eq_ignore_ascii_case(b"SET") {
                            group.put(key, value);
                            if group.batch.size_in_bytes() >= Group::MAX_BYTES {
                                group.commit(&ctx, &conn, &mut out);
                            }
                            continue;
                        }
                    }
                    // What comes after the SETs of a pipeline sees them
                    // written, and is answered after them.
                    group.commit(&ctx, &conn, &mut out);
                    if !req.is_empty() {
                        flow = execute(&ctx, &mut conn, &req, &mut out);
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    group.commit(&ctx, &conn, &mut out);
                    ctx.stats.protocol_errors_total.fetch_add(1, Relaxed);
                    reply::error(&mut out, &format!("ERR Protocol error: {}", e.0));
                    flow = Flow::Close;
                }
            }
        }
        group.commit(&ctx, &conn, &mut out);
        inbuf.drain(..pos);
        if !out.is_empty() {
            if sock.write_all(&out).await.is_err() {
                break;
            }
            out.clear();
        }
        if matches!(flow, Flow::Close) {
            break 'conn;
        }
        match sock.read_buf(&mut inbuf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    let _ = sock.shutdown().await;
    ctx.stats.connections.fetch_sub(1, Relaxed);
}

/// Group commit: the plain SETs (no NX or XX) of one read, a pipeline's,
/// go to RocksDB as one WriteBatch, with the connection's write options
/// (fsynced when the WAL is synced), and each is acknowledged only after
/// the batch is written. A batch is atomic, so every SET acknowledged is
/// as durable as it was written alone; a failed batch fails each of its
/// SETs. Anything else in the pipeline commits the SETs before it first,
/// so replies keep their order and later commands see earlier writes.
#[derive(Default)]
struct Group {
    batch: WriteBatch,
    /// When the batch's first SET arrived.
    since: Option<Instant>,
}

impl Group {
    /// A batch is written when it holds this much, pipeline or not.
    const MAX_BYTES: usize = 4 << 20;

    fn put(&mut self, key: &[u8], value: &[u8]) {
        self.since.get_or_insert_with(Instant::now);
        self.batch.put(key, value);
    }

    fn commit(&mut self, ctx: &Ctx, conn: &Conn, out: &mut Vec<u8>) {
        if self.batch.is_empty() {
            return;
        }
        let Group { batch, since } = std::mem::take(self);
        let sets = batch.len();
        let written = {
            let _shared = ctx.shared();
            write(ctx, &ctx.store.db, batch, &conn.write)
        };
        // Each SET waited from its batch's first until the batch was
        // written.
        let elapsed = since.map(|s| s.elapsed()).unwrap_or_default();
        let index = Stats::command_index(b"SET");
        for _ in 0..sets {
            match &written {
                Ok(()) => reply::simple(out, "OK"),
                Err(e) => storage_error(out, e.as_ref()),
            }
            ctx.stats.record(index, elapsed, written.is_err());
        }
    }
}

fn arity_error(out: &mut Vec<u8>, name: &[u8]) {
    reply::error(
        out,
        &format!(
            "ERR wrong number of arguments for '{}' command",
            String::from_utf8_lossy(name).to_lowercase()
        ),
    );
}

fn execute(ctx: &Ctx, conn: &mut Conn, req: &[Vec<u8>], out: &mut Vec<u8>) -> Flow {
    let start = Instant::now();
    let before = out.len();
    let name = req[0].to_ascii_uppercase();
    let args = &req[1..];
    let flow = dispatch(ctx, conn, (&name, &req[0]), args, out);
    let error = out.get(before) == Some(&b'-');
    ctx.stats
        .record(Stats::command_index(&name), start.elapsed(), error);
    flow
}

fn db_error(out: &mut Vec<u8>, e: rocksdb::Error) {
    storage_error(out, e.as_ref());
}

/// A storage error: the reply, and a line on stderr the first few times
/// it is seen (a full disk fails every write; its log says so once).
fn storage_error(out: &mut Vec<u8>, e: &str) {
    static LOGGED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    if let Ok(mut seen) = LOGGED.lock() {
        if seen.len() < 32 && !seen.iter().any(|s| s == e) {
            seen.push(e.to_string());
            eprintln!("soak-node: storage error: {e}");
        }
    }
    reply::error(out, &format!("ERR storage: {e}"));
}

/// `names`: the command upper-cased for matching, and as the client wrote it.
fn dispatch(
    ctx: &Ctx,
    conn: &mut Conn,
    names: (&[u8], &[u8]),
    args: &[Vec<u8>],
    out: &mut Vec<u8>,
) -> Flow {
    let (name, written) = names;
    let db = &ctx.store.db;
    match (name, args.len()) {
        (b"PING", 0) => reply::simple(out, "PONG"),
        (b"PING", 1) | (b"ECHO", 1) => reply::bulk(out, &args[0]),
        (b"SET", n) if n >= 2 => set(ctx, conn, args, out),
        (b"GET", 1) => match db.get_pinned(&args[0]) {
            Ok(v) => reply::opt_bulk(out, v.as_deref()),
            Err(e) => db_error(out, e),
        },
        (b"MGET", n) if n >= 1 => mget(db, args, out),
        (b"EXISTS", n) if n >= 1 => match count_present(db, args) {
            Ok(found) => reply::int(out, found),
            Err(e) => db_error(out, e),
        },
        (b"DEL", n) if n >= 1 => del(ctx, conn, args, out),
        (b"DBSIZE", 0) => {
            let n = db
                .iterator(IteratorMode::Start)
                .take_while(|r| r.is_ok())
                .count();
            reply::int(out, n as i64);
        }
        (b"SCAN", n) if n >= 1 => scan(ctx, conn, args, out),
        (b"TYPE", 1) => match db.get_pinned(&args[0]) {
            Ok(Some(_)) => reply::simple(out, "string"),
            Ok(None) => reply::simple(out, "none"),
            Err(e) => db_error(out, e),
        },
        (b"INFO", _) => {
            let section = args
                .first()
                .map(|s| String::from_utf8_lossy(s).to_lowercase());
            reply::bulk(out, info(ctx, section.as_deref()).as_bytes());
        }
        (b"FLUSHALL", _) | (b"FLUSHDB", _) => match flush_all(ctx, db, &conn.write) {
            Ok(()) => reply::simple(out, "OK"),
            Err(e) => db_error(out, e),
        },
        // Not Redis: a full compaction, answered when it is done.
        (b"COMPACT", 0) => match tokio::task::block_in_place(|| ctx.store.compact_all()) {
            Ok(()) => reply::simple(out, "OK"),
            Err(e) => storage_error(out, &e),
        },
        (b"SELECT", 1) => {
            if args[0] == b"0" {
                reply::simple(out, "OK")
            } else {
                reply::error(
                    out,
                    "ERR DB index is out of range (soak-node has only db 0)",
                )
            }
        }
        (b"QUIT", _) => {
            reply::simple(out, "OK");
            return Flow::Close;
        }
        (b"CLIENT", n) if n >= 1 => client(conn, args, out),
        (b"COMMAND", _) => match args.first().map(|a| a.to_ascii_uppercase()) {
            Some(sub) if sub == b"COUNT" => reply::int(out, 21),
            _ => reply::array(out, 0),
        },
        (b"HELLO", _) => hello(conn, args, out),
        (b"CONFIG", n) if n >= 1 => config(args, out),
        (b"PING", _)
        | (b"ECHO", _)
        | (b"SET", _)
        | (b"GET", _)
        | (b"MGET", _)
        | (b"EXISTS", _)
        | (b"DEL", _)
        | (b"DBSIZE", _)
        | (b"COMPACT", _)
        | (b"SCAN", _)
        | (b"TYPE", _)
        | (b"SELECT", _)
        | (b"CLIENT", _)
        | (b"CONFIG", _) => arity_error(out, name),
        _ => unknown(written, args, out),
    }
    Flow::Continue
}

fn mget(db: &rocksdb::DB, args: &[Vec<u8>], out: &mut Vec<u8>) {
    let values = db.multi_get(args);
    reply::array(out, values.len());
    for v in values {
        match v {
            Ok(v) => reply::opt_bulk(out, v.as_deref()),
            Err(_) => reply::null(out),
        }
    }
}

/// DEL: how many of the keys were there, all deleted in one batch.
fn del(ctx: &Ctx, conn: &Conn, args: &[Vec<u8>], out: &mut Vec<u8>) {
    let db = &ctx.store.db;
    let _alone = ctx.exclusive();
    let deleted = count_present(db, args).and_then(|found| {
        let mut batch = WriteBatch::default();
        args.iter().for_each(|k| batch.delete(k));
        write(ctx, db, batch, &conn.write).map(|()| found)
    });
    match deleted {
        Ok(found) => reply::int(out, found),
        Err(e) => db_error(out, e),
    }
}

/// Redis's words for a command it does not know.
fn unknown(written: &[u8], args: &[Vec<u8>], out: &mut Vec<u8>) {
    let shown: Vec<String> = args
        .iter()
        .take(3)
        .map(|a| format!("'{}'", String::from_utf8_lossy(a)))
        .collect();
    reply::error(
        out,
        &format!(
            "ERR unknown command '{}', with args beginning with: {}",
            String::from_utf8_lossy(written),
            shown.join(" ")
        ),
    )
}

/// How many of `keys` are present, counting repeats, as EXISTS and DEL answer.
fn count_present(db: &rocksdb::DB, keys: &[Vec<u8>]) -> Result<i64, rocksdb::Error> {
    let mut found = 0;
    for k in keys {
        if db.get_pinned(k)?.is_some() {
            found += 1;
        }
    }
    Ok(found)
}

/// With synchronous writes a put waits for fsync; it moves off the async
/// worker so that other connections keep being served meanwhile (and their
/// writes join RocksDB's group commit).
fn write(
    ctx: &Ctx,
    db: &rocksdb::DB,
    batch: WriteBatch,
    w: &WriteOptions,
) -> Result<(), rocksdb::Error> {
    if ctx.store.sync {
        tokio::task::block_in_place(|| db.write_opt(batch, w))
    } else {
        db.write_opt(batch, w)
    }
}

fn set(ctx: &Ctx, conn: &mut Conn, args: &[Vec<u8>], out: &mut Vec<u8>) {
    let db = &ctx.store.db;
    let (key, value) = (&args[0], &args[1]);
    let (mut nx, mut xx) = (false, false);
    for opt in &args[2..] {
        match opt.to_ascii_uppercase().as_slice() {
            b"NX" => nx = true,
            b"XX" => xx = true,
            b"EX" | b"PX" | b"EXAT" | b"PXAT" | b"KEEPTTL" | b"GET" => {
                return reply::error(
                    out,
                    "ERR soak-node does not support SET options other than NX and XX",
                );
            }
            _ => return reply::error(out, "ERR syntax error"),
        }
    }
    if nx && xx {
        return reply::error(out, "ERR syntax error");
    }
    let _alone = (nx || xx).then(|| ctx.exclusive());
    let _shared = (!nx && !xx).then(|| ctx.shared());
    if nx || xx {
        match db.get_pinned(key) {
            Ok(v) if v.is_some() == nx => return reply::null(out),
            Ok(_) => {}
            Err(e) => return db_error(out, e),
        }
    }
    let mut batch = WriteBatch::default();
    batch.put(key, value);
    match write(ctx, db, batch, &conn.write) {
        Ok(()) => reply::simple(out, "OK"),
        Err(e) => db_error(out, e),
    }
}

fn flush_all(ctx: &Ctx, db: &rocksdb::DB, w: &WriteOptions) -> Result<(), rocksdb::Error> {
    let _alone = ctx.exclusive();
    let first = db.iterator(IteratorMode::Start).next().transpose()?;
    let last = db.iterator(IteratorMode::End).next().transpose()?;
    if let (Some((first, _)), Some((last, _))) = (first, last) {
        let mut batch = WriteBatch::default();
        batch.delete_range(&first, &last);
        batch.delete(&last);
        write(ctx, db, batch, w)?;
    }
    Ok(())
}

const MAX_CURSORS: usize = 1024;

fn scan(ctx: &Ctx, conn: &mut Conn, args: &[Vec<u8>], out: &mut Vec<u8>) {
    let Some(cursor) = std::str::from_utf8(&args[0])
        .ok()
        .and_then(|c| c.parse::<u64>().ok())
    else {
        return reply::error(out, "ERR invalid cursor");
    };
    let (mut pattern, mut count) = (None, 10usize);
    let mut i = 1;
    while i < args.len() {
        let opt = args[i].to_ascii_uppercase();
        let Some(value) = args.get(i + 1) else {
            return reply::error(out, "ERR syntax error");
        };
        match opt.as_slice() {
            b"MATCH" => pattern = Some(value.clone()),
            b"COUNT" => match std::str::from_utf8(value).ok().and_then(|v| v.parse().ok()) {
                Some(n) if n >= 1 => count = n,
                _ => return reply::error(out, "ERR value is not an integer or out of range"),
            },
            b"TYPE" => {
                if !value.eq_ignore_ascii_case(b"string") {
                    pattern = Some(b"\x00never".to_vec());
                }
            }
            _ => return reply::error(out, "ERR syntax error"),
        }
        i += 2;
    }
    let start: Option<Vec<u8>> = if cursor == 0 {
        None
    } else {
        match conn.cursors.iter().find(|(id, _)| *id == cursor) {
            Some((_, last)) => Some(last.clone()),
            None => {
                return reply::error(
                    out,
                    "ERR invalid cursor (unknown or expired on this connection)",
                )
            }
        }
    };
    let db = &ctx.store.db;
    let mode = match &start {
        Some(k) => IteratorMode::From(k, Direction::Forward),
        None => IteratorMode::Start,
    };
    // COUNT bounds the keys examined, not the keys returned, as in Redis.
    let mut keys = vec![];
    let mut last = None;
    let mut done = true;
    let mut examined = 0;
    for item in db.iterator(mode) {
        let Ok((k, _)) = item else { break };
        if start.as_deref() == Some(&k[..]) {
            continue;
        }
        if pattern.as_deref().is_none_or(|p| glob_match(p, &k)) {
            keys.push(k.to_vec());
        }
        last = Some(k.to_vec());
        examined += 1;
        if examined >= count {
            done = false;
            break;
        }
    }
    let next = match (done, last) {
        (false, Some(last)) => {
            let id = conn.next_cursor;
            conn.next_cursor += 1;
            if conn.cursors.len() >= MAX_CURSORS {
                conn.cursors.pop_front();
            }
            conn.cursors.push_back((id, last));
            id
        }
        _ => 0,
    };
    reply::array(out, 2);
    reply::bulk(out, next.to_string().as_bytes());
    reply::array(out, keys.len());
    for k in &keys {
        reply::bulk(out, k);
    }
}

fn info(ctx: &Ctx, section: Option<&str>) -> String {
    use std::fmt::Write;
    let want = |s: &str| {
        matches!(
            section,
            None | Some("all") | Some("everything") | Some("default")
        ) || section == Some(s)
    };
    let mut o = String::new();
    if want("server") {
        let _ = write!(
            o,
            "# Server\r\nredis_version:7.0.0\r\nsoak_node_version:{}\r\nrocksdb_version:{}\r\nredis_mode:standalone\r\nprocess_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\n\r\n",
            env!("CARGO_PKG_VERSION"),
            ctx.store.rocksdb_version.as_deref().unwrap_or("unknown"),
            std::process::id(),
            ctx.port,
            ctx.stats.started.elapsed().as_secs(),
        );
    }
    if want("memory") {
        let (rss, _) = metrics::process_memory().unwrap_or((0, 0));
        let stats = ctx.allocator.stats();
        let get = |k: &str| stats.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
        let used = get("allocated").or(get("committed")).unwrap_or(0);
        let _ = write!(
            o,
            "# Memory\r\nused_memory:{used}\r\nused_memory_rss:{rss}\r\nmem_allocator:{}-{}\r\n",
            ctx.allocator.name(),
            ctx.allocator.version().unwrap_or_default(),
        );
        for (k, v) in &stats {
            let _ = write!(o, "allocator_{k}:{v}\r\n");
        }
        for (k, p) in [
            ("rocksdb_block_cache_usage", "rocksdb.block-cache-usage"),
            ("rocksdb_memtables_size", "rocksdb.cur-size-all-mem-tables"),
            (
                "rocksdb_table_readers_mem",
                "rocksdb.estimate-table-readers-mem",
            ),
        ] {
            let _ = write!(o, "{k}:{}\r\n", ctx.store.int_property(p).unwrap_or(0));
        }
        o.push_str("\r\n");
    }
    if want("keyspace") {
        let keys = ctx
            .store
            .int_property("rocksdb.estimate-num-keys")
            .unwrap_or(0);
        let _ = write!(o, "# Keyspace\r\ndb0:keys={keys},expires=0,avg_ttl=0\r\n");
    }
    o
}

fn client(conn: &mut Conn, args: &[Vec<u8>], out: &mut Vec<u8>) {
    match args[0].to_ascii_uppercase().as_slice() {
        b"ID" => reply::int(out, conn.id as i64),
        b"GETNAME" => reply::null(out),
        b"INFO" | b"LIST" => reply::bulk(
            out,
            format!("id={} name= db=0 cmd=client\n", conn.id).as_bytes(),
        ),
        _ => reply::simple(out, "OK"),
    }
}

fn hello(conn: &mut Conn, args: &[Vec<u8>], out: &mut Vec<u8>) {
    if let Some(v) = args.first() {
        if v.as_slice() != b"2" {
            return reply::error(out, "NOPROTO this server supports RESP2 only");
        }
    }
    reply::array(out, 14);
    for (k, v) in [
        ("server", "soak-node"),
        ("version", env!("CARGO_PKG_VERSION")),
    ] {
        reply::bulk(out, k.as_bytes());
        reply::bulk(out, v.as_bytes());
    }
    reply::bulk(out, b"proto");
    reply::int(out, 2);
    reply::bulk(out, b"id");
    reply::int(out, conn.id as i64);
    for (k, v) in [("mode", "standalone"), ("role", "master")] {
        reply::bulk(out, k.as_bytes());
        reply::bulk(out, v.as_bytes());
    }
    reply::bulk(out, b"modules");
    reply::array(out, 0);
}

fn config(args: &[Vec<u8>], out: &mut Vec<u8>) {
    match args[0].to_ascii_uppercase().as_slice() {
        b"GET" => {
            // redis-benchmark asks for these two before it starts.
            let known = [("save", ""), ("appendonly", "no")];
            let pattern = args
                .get(1)
                .map(|p| p.to_ascii_lowercase())
                .unwrap_or_default();
            let hits: Vec<_> = known
                .iter()
                .filter(|(k, _)| glob_match(&pattern, k.as_bytes()))
                .collect();
            reply::array(out, hits.len() * 2);
            for (k, v) in hits {
                reply::bulk(out, k.as_bytes());
                reply::bulk(out, v.as_bytes());
            }
        }
        _ => reply::simple(out, "OK"),
    }
}
