//! soak's linearizability checker against Porcupine (its named peer) on
//! the same histories: Porcupine's own Jepsen etcd and key-value test
//! histories, histories soak's runs recorded (given as arguments), and a
//! generated history of a million operations over a thousand keys (and
//! the same with one stale read planted). Each history is checked by both
//! in the same run, alternately; the times are of the search alone (both
//! programs time it after reading the file), the memory is each
//! process's peak RSS. Prints a markdown table for docs/src/benchmarks.md.
//!
//!     (cd tests/porcupine && go build -o ../../target/porcupine/porcupine .)
//!     cargo build --release --no-default-features --example linearizable --bin soak
//!     target/release/examples/linearizable [HISTORY...]
//!
//! Porcupine's module comes from the Go module proxy (`go mod download`
//! in tests/porcupine), as the tests take it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use soak::history::{formats, History, Op, Outcome, F, NIL};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A linearizable history of `ops` operations over `keys` registers,
/// `clients` per key, reads and writes of unique values, 1% of the writes
/// never completed (half of them took effect). Each operation's effect is
/// at a random point of its interval, and reads return what the register
/// held there.
fn generated(ops: usize, keys: usize, clients: usize, seed: u64) -> History {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut h = History::default();
    for k in 0..keys {
        h.keys.id(&format!("k{k}"));
    }
    // (effect time, op index) per key, then values read filled in.
    let mut effects: Vec<Vec<(u64, usize)>> = vec![Vec::new(); keys];
    let mut next_free = vec![0u64; keys * clients];
    let mut version = vec![0u64; keys];
    for _ in 0..ops {
        let k = rng.random_range(0..keys);
        let c = rng.random_range(0..clients);
        let slot = k * clients + c;
        let invoke = next_free[slot] + rng.random_range(0..2_000_000);
        let complete = invoke + rng.random_range(50_000..3_000_000);
        next_free[slot] = complete + 1;
        let at = invoke + rng.random_range(0..=(complete - invoke));
        let write = rng.random_bool(0.5);
        let (f, outcome, complete, effect) = if write {
            version[k] += 1;
            let v = h.values.id(&version[k].to_string());
            if rng.random_bool(0.01) {
                // Never completed; took effect or not.
                (
                    F::Write(v),
                    Outcome::Unknown,
                    u64::MAX,
                    rng.random_bool(0.5),
                )
            } else {
                (F::Write(v), Outcome::Ok(NIL), complete, true)
            }
        } else {
            (F::Read, Outcome::Ok(NIL), complete, true)
        };
        h.ops.push(Op {
            client: slot as u32,
            key: k as u32,
            f,
            outcome,
            invoke,
            complete,
        });
        if effect {
            effects[k].push((at, h.ops.len() - 1));
        }
    }
    for e in effects.iter_mut() {
        e.sort_unstable();
        let mut state = NIL;
        for &(_, i) in e.iter() {
            match h.ops[i].f {
                F::Write(v) => state = v,
                _ => h.ops[i].outcome = Outcome::Ok(state),
            }
        }
    }
    h
}

/// The same history with one read that returns the value before the one
/// it must: a stale read, in the middle of the history.
fn planted(mut h: History) -> History {
    let mid = h.ops.len() / 2;
    let i = (mid..h.ops.len())
        .find(|&i| {
            let o = &h.ops[i];
            o.f == F::Read
                && matches!(o.outcome, Outcome::Ok(v) if v != NIL && h.values.name(v) != "1")
        })
        .expect("a read of a later value");
    let Outcome::Ok(v) = h.ops[i].outcome else {
        unreachable!()
    };
    let older: u64 = h.values.name(v).parse::<u64>().unwrap() - 1;
    // A read long after the write of `v` completed, of the value before.
    let writer = h
        .ops
        .iter()
        .position(|o| o.key == h.ops[i].key && o.f == F::Write(v))
        .unwrap();
    let after = h.ops[writer].complete.saturating_add(1_000_000);
    h.ops[i].invoke = h.ops[i].invoke.max(after);
    h.ops[i].complete = h.ops[i].invoke + 100_000;
    h.ops[i].outcome = Outcome::Ok(h.values.id(&older.to_string()));
    h
}

/// Peak RSS and the last stdout line of a command, timed by GNU time.
fn run_timed(cmd: &mut Command) -> (String, u64) {
    let out = Command::new("/usr/bin/time")
        .arg("-f")
        .arg("maxrss %M")
        .arg(cmd.get_program())
        .args(cmd.get_args())
        .output()
        .expect("GNU time (apt-get install time)");
    let err = String::from_utf8_lossy(&out.stderr);
    let kb: u64 = err
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("maxrss ").map(|x| x.trim().parse().unwrap()))
        .unwrap_or(0);
    (String::from_utf8_lossy(&out.stdout).trim().to_string(), kb)
}

struct Row {
    name: String,
    ops: usize,
    keys: usize,
    soak: (String, f64, u64),
    porcupine: (String, f64, u64),
}

fn compare(name: &str, file: &Path, dir: &Path, porcupine: &Path) -> Row {
    let soak_bin = root().join("target/release/soak");
    let text = std::fs::read_to_string(file).unwrap();
    let h = formats::read(&text).expect("a history");
    let pfile = dir.join(format!("{name}.porcupine.json"));
    let mut f = std::fs::File::create(&pfile).unwrap();
    formats::write_porcupine(&h, &mut f).unwrap();
    // soak, through its command (its JSON output has the search's time).
    let (out, soak_kb) = run_timed(
        Command::new(&soak_bin)
            .args(["check-history", "--json"])
            .arg(file),
    );
    let j: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|_| panic!("{name}: {out}"));
    let soak = (
        j["verdict"].as_str().unwrap().to_string(),
        j["seconds"].as_f64().unwrap(),
        soak_kb,
    );
    let (out, p_kb) = run_timed(
        Command::new(porcupine)
            .args(["-timeout", "600s"])
            .arg(&pfile),
    );
    let mut w = out.split_whitespace().skip(1);
    let verdict = w.next().unwrap().to_string();
    let secs: f64 = w
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{name}: Porcupine said {out:?}"));
    Row {
        name: name.into(),
        ops: h.ops.len(),
        keys: h.keys.len(),
        soak,
        porcupine: (verdict, secs, p_kb),
    }
}

fn porcupine_module() -> PathBuf {
    let out = Command::new("go")
        .args([
            "mod",
            "download",
            "-json",
            "github.com/anishathalye/porcupine@v1.3.1",
        ])
        .current_dir(root().join("tests/porcupine"))
        .output()
        .expect("go");
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    PathBuf::from(j["Dir"].as_str().unwrap())
}

fn main() {
    let porcupine = root().join("target/porcupine/porcupine");
    assert!(porcupine.exists(), "build Porcupine first: (cd tests/porcupine && go build -o ../../target/porcupine/porcupine .)");
    let dir = tempfile::tempdir().unwrap();
    let module = porcupine_module();
    let mut rows = Vec::new();
    // Porcupine's own histories, the Jepsen ones summed.
    let mut jepsen = (0.0, 0.0, 0, 0);
    for n in 0..103 {
        let f = module.join(format!("test_data/jepsen/etcd_{n:03}.log"));
        if std::fs::metadata(&f).map(|m| m.len()).unwrap_or(0) == 0 {
            continue;
        }
        let r = compare(&format!("etcd_{n:03}"), &f, dir.path(), &porcupine);
        assert_eq!(
            r.soak.0 == "linearizable",
            r.porcupine.0 == "ok",
            "etcd_{n:03}: soak {} porcupine {}",
            r.soak.0,
            r.porcupine.0
        );
        jepsen.0 += r.soak.1;
        jepsen.1 += r.porcupine.1;
        jepsen.2 += 1;
        jepsen.3 += r.ops;
    }
    println!("Jepsen etcd histories: {} of them, {} operations, soak {:.3} s, Porcupine {:.3} s in all: {:.1}x", jepsen.2, jepsen.3, jepsen.0, jepsen.1, jepsen.1 / jepsen.0.max(1e-9));
    for name in [
        "c01-ok", "c01-bad", "c10-ok", "c10-bad", "c50-ok", "c50-bad",
    ] {
        rows.push(compare(
            name,
            &module.join(format!("test_data/kv/{name}.txt")),
            dir.path(),
            &porcupine,
        ));
    }
    for (i, f) in std::env::args().skip(1).enumerate() {
        let path = PathBuf::from(&f);
        let jsonl = dir.path().join(format!("recorded-{i}.jsonl"));
        let st = Command::new(root().join("target/release/soak"))
            .arg("history")
            .arg(&path)
            .args(["--format", "jsonl", "-o"])
            .arg(&jsonl)
            .status()
            .unwrap();
        assert!(st.success());
        rows.push(compare(
            &format!("recorded-{i}"),
            &jsonl,
            dir.path(),
            &porcupine,
        ));
    }
    let began = Instant::now();
    let big = generated(1_000_000, 1000, 3, 7);
    eprintln!("generated in {:.1} s", began.elapsed().as_secs_f64());
    for (name, h) in [
        ("1M-ops-1000-keys", big.clone()),
        ("1M-ops-1000-keys-one-stale-read", planted(big)),
    ] {
        let f = dir.path().join("big.jsonl");
        let mut out = std::io::BufWriter::new(std::fs::File::create(&f).unwrap());
        formats::write_jsonl(&h, &mut out).unwrap();
        drop(out);
        rows.push(compare(name, &f, dir.path(), &porcupine));
    }
    println!("| history | operations | keys | soak | s | peak RSS | Porcupine | s | peak RSS | Porcupine / soak |");
    println!("|---|---:|---:|---|---:|---:|---|---:|---:|---:|");
    for r in rows {
        println!(
            "| {} | {} | {} | {} | {:.3} | {} MiB | {} | {:.3} | {} MiB | {:.1}x |",
            r.name,
            r.ops,
            r.keys,
            r.soak.0,
            r.soak.1,
            r.soak.2 / 1024,
            r.porcupine.0,
            r.porcupine.1,
            r.porcupine.2 / 1024,
            r.porcupine.1 / r.soak.1.max(1e-6)
        );
    }
}
