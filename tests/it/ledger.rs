//! The ledger's memory at the size of a night's soak: 10 million keys,
//! every one written and acknowledged, measured as the growth of a
//! process's resident memory. The tests share one binary, and others
//! allocate beside this one: the test runs itself again, alone, in a
//! process of its own (`SOAK_LEDGER_ALONE`), and reads the figure it
//! prints.

use soak::oracle::Ledger;

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .unwrap()
        .trim()
        .trim_end_matches(" kB")
        .trim()
        .parse()
        .unwrap();
    kb * 1024
}

#[test]
fn ten_million_keys_take_18_bytes_a_key() {
    if std::env::var_os("SOAK_LEDGER_ALONE").is_none() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "ledger::ten_million_keys_take_18_bytes_a_key"])
            .args(["--nocapture", "--test-threads", "1"])
            .env("SOAK_LEDGER_ALONE", "1")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        eprint!("{stderr}");
        assert!(
            out.status.success() && stderr.contains("bytes/key"),
            "the measurement alone failed: {}{stderr}",
            String::from_utf8_lossy(&out.stdout)
        );
        return;
    }
    const KEYS: usize = 10_000_000;
    let before = rss_bytes();
    let ledger = Ledger::new(KEYS, (100, 100), 0.9, 0.1, 42);
    for k in 0..KEYS {
        let v = ledger.next_version(k);
        ledger.ack(k, v);
    }
    assert!((0..KEYS).step_by(9973).all(|k| ledger.is_touched(k)));
    let grown = rss_bytes() - before;
    eprintln!(
        "ledger of {KEYS} keys: {:.1} MiB resident, {:.2} bytes/key",
        grown as f64 / 1048576.0,
        grown as f64 / KEYS as f64
    );
    // 18 bytes a key: the acknowledged, the sent and the newest failed
    // version, 2 bytes of flags and acknowledgement time, and the place of
    // the acknowledgement in the order of all of them (and a page or two
    // of rounding).
    assert!(
        grown <= (Ledger::BYTES_PER_KEY * KEYS) as u64 + (1 << 20),
        "{grown} bytes"
    );
    // And it was really there: at least the bytes a key it is made of
    // but the failed versions (zero pages until a write fails).
    assert!(grown >= 14 * KEYS as u64 * 9 / 10, "{grown} bytes");
}
