//! The linearizability checker: is there one order of a history's
//! operations, each taking effect at an instant between its invocation and
//! its completion, that a register explains?
//!
//! The method is Porcupine's (Athalye, `checker.go`), after Lowe's
//! "Testing for linearizability" (2017) and Horn and Kroening's
//! P-compositionality (2015):
//!
//! - **Per key.** A register per key, keys independent: each key's
//!   operations are checked on their own, in parallel.
//! - **Wing-Gong-Lowe search.** The call and return entries of one key, in
//!   time order, in a linked list; the search takes the first call whose
//!   operation the register can apply, lifts it out of the list and goes
//!   on from the front, and backtracks when it meets the return of an
//!   operation it has not linearized.
//! - **Memoized states.** A (set of linearized operations, register
//!   value) already explored is not explored again.
//!
//! Where soak differs, for speed and memory:
//!
//! - The set's hash is kept incrementally (Zobrist: the XOR of a random
//!   word per linearized operation), not recomputed from the whole set at
//!   each step, so a step costs the same on a short history and a long one.
//! - The memo stores a set as the first operation not yet linearized and
//!   the linearized ones after it, which can only be those invoked before
//!   that first one completed: its size follows the history's concurrency,
//!   not its length (Porcupine stores a bitset of every operation).
//! - Operations that constrain nothing are dropped before the search: a
//!   read that did not complete, a read or write that definitely failed,
//!   and, on a key without compare-and-set or append, a write whose
//!   outcome is unknown and whose value no read returned (it may always
//!   take effect last, where nothing sees it).
//!
//! - Keys are checked in rounds of growing budgets (ten thousand steps
//!   each, then ten times more for those not yet decided), and the
//!   check stops after the round that finds a violation: a history with
//!   an easy violation and a hard key is judged as fast as Porcupine
//!   judges it (it stops at the first violation), and the keys checked
//!   and the violation named do not depend on which thread was quicker.
//! - An append's register holds a hash of its string (a polynomial modulo
//!   2^61 - 1), so a key appended to thousands of times keeps no strings.
//!
//! An operation whose outcome is unknown may take effect at any time after
//! its invocation, or never: its return is placed after every other entry,
//! as Porcupine does with Jepsen's `:info`. A search that runs out of its
//! budget says "unknown", never "linearizable".

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{History, Outcome, Val, F, NIL};

/// A register value that stands for any value: the state at the start of
/// a window cut out of a history (see [`window`]).
const ANY: u64 = u64::MAX;
const NONE: u32 = u32::MAX;
/// The first round's steps a key (see the module's notes).
const FIRST_ROUND: u64 = 10_000;

/// How much a check may spend before it says "unknown".
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Search steps on one key.
    pub steps: u64,
    /// Bytes of the memo of one key.
    pub memo_bytes: usize,
    /// When the whole check stops.
    pub deadline: Option<Instant>,
}

impl Default for Budget {
    /// 200 million steps (a minute or two on one core), 1 GiB of memo a
    /// key, no deadline.
    fn default() -> Budget {
        Budget {
            steps: 200_000_000,
            memo_bytes: 1 << 30,
            deadline: None,
        }
    }
}

/// The checker's options.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub budget: Budget,
    /// Threads checking keys; 0: one a core.
    pub threads: usize,
    /// Find the smallest window of each violation (a few more searches).
    pub windows: bool,
    /// Check every key, also after a violation was found.
    pub all_keys: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            budget: Budget::default(),
            threads: 0,
            windows: true,
            all_keys: false,
        }
    }
}

/// The verdict on a history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Linearizable,
    NotLinearizable,
    /// A search ran out of its budget before it could tell.
    Unknown,
}

/// A key whose operations cannot be linearized.
#[derive(Debug, Clone)]
pub struct Violation {
    pub key: u32,
    /// The operation the search could never linearize before its return,
    /// at the deepest point it reached: usually the read that saw what it
    /// should not have (an index into the history's operations).
    pub culprit: usize,
    /// The smallest run of the key's operations, ending at the culprit's
    /// completion, that cannot be linearized from any starting value
    /// (indices, by invocation); the whole key when no shorter one was
    /// found.
    pub window: Vec<usize>,
    /// The window starts at the key's first operation, so from the
    /// register's initial value (nil).
    pub from_start: bool,
}

/// What the check found.
#[derive(Debug, Clone)]
pub struct Report {
    pub verdict: Verdict,
    pub ops: usize,
    pub keys: usize,
    /// Operations left out before the search (they constrain nothing).
    pub dropped: usize,
    pub violations: Vec<Violation>,
    /// Keys whose search ran out of its budget, with the reason.
    pub unknown: Vec<(u32, String)>,
    /// Keys left unchecked once a violation was found.
    pub unchecked: usize,
    /// Search steps over every key.
    pub steps: u64,
    pub took: Duration,
}

/// Checks every key of `h`.
pub fn check(h: &History, opts: &Options) -> Report {
    let began = Instant::now();
    let mut by_key: Vec<Vec<u32>> = vec![Vec::new(); h.keys.len().max(1)];
    for (i, op) in h.ops.iter().enumerate() {
        let k = op.key as usize;
        if k >= by_key.len() {
            by_key.resize(k + 1, Vec::new());
        }
        by_key[k].push(i as u32);
    }
    let mut left: Vec<usize> = (0..by_key.len())
        .filter(|&k| !by_key[k].is_empty())
        .collect();
    let mut report = Report {
        verdict: Verdict::Linearizable,
        ops: h.ops.len(),
        keys: left.len(),
        dropped: 0,
        violations: Vec::new(),
        unknown: Vec::new(),
        unchecked: 0,
        steps: 0,
        took: Duration::ZERO,
    };
    let mut round = FIRST_ROUND.min(opts.budget.steps);
    loop {
        let last = round >= opts.budget.steps;
        let budget = Budget {
            steps: round,
            ..opts.budget
        };
        let mut undecided = Vec::new();
        for (k, r, steps, dropped) in check_round(h, &by_key, &left, &budget, opts) {
            report.steps += steps;
            match r {
                KeyResult::Ok => report.dropped += dropped,
                KeyResult::Illegal(v) => {
                    report.dropped += dropped;
                    report.violations.push(v)
                }
                KeyResult::Unknown(why)
                    if last || why.contains("deadline") || why.contains("memo") =>
                {
                    report.dropped += dropped;
                    report.unknown.push((k as u32, why))
                }
                KeyResult::Unknown(_) => undecided.push(k),
            }
        }
        left = undecided;
        if left.is_empty() || (!report.violations.is_empty() && !opts.all_keys) {
            report.unchecked = left.len();
            break;
        }
        round = round.saturating_mul(10).min(opts.budget.steps);
    }
    report.verdict = if !report.violations.is_empty() {
        Verdict::NotLinearizable
    } else if !report.unknown.is_empty() {
        Verdict::Unknown
    } else {
        Verdict::Linearizable
    };
    report.took = began.elapsed();
    report
}

/// One round: the keys `left`, each within `budget`, on the check's
/// threads, the largest first; results in key order.
fn check_round(
    h: &History,
    by_key: &[Vec<u32>],
    left: &[usize],
    budget: &Budget,
    opts: &Options,
) -> Vec<(usize, KeyResult, u64, usize)> {
    let mut order = left.to_vec();
    order.sort_by_key(|&k| (std::cmp::Reverse(by_key[k].len()), k));
    // A small history is checked on this thread: starting threads would
    // cost more than checking it.
    let ops: usize = order.iter().map(|&k| by_key[k].len()).sum();
    let threads = match opts.threads {
        0 if ops < 5_000 => 1,
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
    .min(order.len().max(1));
    if threads == 1 {
        let mut out: Vec<_> = order
            .iter()
            .map(|&k| {
                let (r, steps, dropped) = check_key(h, &by_key[k], budget, opts);
                (k, r, steps, dropped)
            })
            .collect();
        out.sort_by_key(|r| r.0);
        return out;
    }
    let next = AtomicUsize::new(0);
    let late = AtomicBool::new(false);
    let results = Mutex::new(Vec::with_capacity(order.len()));
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Relaxed);
                let Some(&k) = order.get(i) else { break };
                let r = if late.load(Relaxed) {
                    (
                        KeyResult::Unknown("the check's deadline passed".into()),
                        0,
                        0,
                    )
                } else {
                    check_key(h, &by_key[k], budget, opts)
                };
                if matches!(&r.0, KeyResult::Unknown(w) if w.contains("deadline")) {
                    late.store(true, Relaxed);
                }
                results.lock().unwrap().push((k, r.0, r.1, r.2));
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|r| r.0);
    results
}

enum KeyResult {
    Ok,
    Illegal(Violation),
    Unknown(String),
}

/// An operation as the search sees it.
#[derive(Debug, Clone, Copy)]
struct P {
    kind: Kind,
    invoke: u64,
    /// `u64::MAX`: unknown, returns after everything.
    complete: u64,
    /// Its index in the history.
    src: u32,
}

/// What an operation does to the register. Values are the history's
/// value numbers, or on a key appended to, hashes of the strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Read(u64),
    /// A write, or a delete (of nil), done or maybe done.
    Write(u64),
    CasOk {
        from: u64,
        to: u64,
    },
    /// Took effect, its compare failing.
    CasFail {
        from: u64,
    },
    CasMaybe {
        from: u64,
        to: u64,
    },
    /// Appends the string whose hash is `hash`: the register becomes
    /// `state * mul + hash`, `mul` being the base to the string's length.
    Append {
        hash: u64,
        mul: u64,
    },
}

/// The polynomial hash of strings, modulo the Mersenne prime 2^61 - 1;
/// the empty string (and a missing key) hash to 0.
const MOD: u64 = (1 << 61) - 1;
const BASE: u64 = 0x1f3d_5b79_a2c4_e607 % MOD;

fn mulmod(a: u64, b: u64) -> u64 {
    ((a as u128 * b as u128) % MOD as u128) as u64
}

/// A string's hash and the base to its length.
fn hash_str(s: &str) -> (u64, u64) {
    s.bytes().fold((0, 1), |(h, m), b| {
        ((mulmod(h, BASE) + b as u64 + 1) % MOD, mulmod(m, BASE))
    })
}

/// The operations of one key as the search takes them, with the
/// operations that constrain nothing left out; and how many were.
fn prepare(h: &History, idx: &[u32]) -> (Vec<P>, usize) {
    let appended = idx
        .iter()
        .any(|&i| matches!(h.ops[i as usize].f, F::Append(_)));
    // On a key appended to, a value is its string's hash; nil is "", as
    // Porcupine's key-value model reads a missing key.
    let val = |v: Val| -> u64 {
        match (appended, v) {
            (_, NIL) => 0,
            (true, v) => hash_str(h.values.name(v)).0,
            (false, v) => v as u64,
        }
    };
    let mut out = Vec::with_capacity(idx.len());
    let mut dropped = 0;
    for &i in idx {
        let op = &h.ops[i as usize];
        let complete = match op.outcome {
            Outcome::Unknown => u64::MAX,
            _ => op.complete,
        };
        let kind = match (op.f, op.outcome) {
            (F::Read, Outcome::Ok(v)) => Some(Kind::Read(val(v))),
            (F::Read, _) => None,
            (F::Write(_) | F::Delete | F::Append(_), Outcome::Fail) => None,
            (F::Write(v), _) => Some(Kind::Write(val(v))),
            (F::Delete, _) => Some(Kind::Write(0)),
            (F::Append(v), _) => {
                let (hash, mul) = hash_str(h.values.name(v));
                Some(Kind::Append { hash, mul })
            }
            (F::Cas { from, to }, Outcome::Ok(_)) => Some(Kind::CasOk {
                from: val(from),
                to: val(to),
            }),
            (F::Cas { from, .. }, Outcome::Fail) => Some(Kind::CasFail { from: val(from) }),
            (F::Cas { from, to }, Outcome::Unknown) => Some(Kind::CasMaybe {
                from: val(from),
                to: val(to),
            }),
        };
        match kind {
            Some(kind) => out.push(P {
                kind,
                invoke: op.invoke,
                complete,
                src: i,
            }),
            None => dropped += 1,
        }
    }
    dropped += drop_unseen_writes(&mut out);
    (out, dropped)
}

/// A write that may not have happened and that nothing read can always be
/// placed last, where it changes nothing: left out, on a key where no
/// compare-and-set or append could tell. How many were.
fn drop_unseen_writes(out: &mut Vec<P>) -> usize {
    let plain = !out.iter().any(|p| {
        matches!(
            p.kind,
            Kind::CasOk { .. } | Kind::CasFail { .. } | Kind::CasMaybe { .. } | Kind::Append { .. }
        )
    });
    if !plain {
        return 0;
    }
    let read: std::collections::HashSet<u64> = out
        .iter()
        .filter_map(|p| match p.kind {
            Kind::Read(v) => Some(v),
            _ => None,
        })
        .collect();
    let before = out.len();
    out.retain(|p| {
        !(p.complete == u64::MAX && matches!(p.kind, Kind::Write(v) if !read.contains(&v)))
    });
    before - out.len()
}

fn check_key(h: &History, idx: &[u32], budget: &Budget, opts: &Options) -> (KeyResult, u64, usize) {
    let (ops, dropped) = prepare(h, idx);
    let key = h.ops[idx[0] as usize].key;
    let mut search = Search::new(&ops, 0);
    let outcome = search.run(budget);
    let mut steps = search.steps;
    let r = match outcome {
        Found::Linearizable => KeyResult::Ok,
        Found::Unknown(why) => KeyResult::Unknown(why),
        Found::Illegal(culprit) => {
            let (window, from_start, more) = if opts.windows {
                // The window search costs at most what finding the
                // violation cost: an attempt that runs out is taken as
                // linearizable, and the window shown is the smallest one
                // found by then.
                window(&ops, culprit, steps.max(50_000), budget)
            } else {
                ((0..ops.len()).collect(), true, 0)
            };
            steps += more;
            let mut window: Vec<usize> = window.into_iter().map(|i| ops[i].src as usize).collect();
            window.sort_by_key(|&i| (h.ops[i].invoke, i));
            KeyResult::Illegal(Violation {
                key,
                culprit: ops[culprit].src as usize,
                window,
                from_start,
            })
        }
    };
    (r, steps, dropped)
}

/// The smallest window of `ops` that still cannot be linearized: it ends
/// at the culprit's completion (or the key's end, if what came before
/// it alone can be linearized) and starts as late as it can, from any
/// value. Operations cut by either edge become ones whose outcome is
/// unknown (a read of them is dropped), so that what the window allows is
/// a superset of what the history allows: a window that cannot be
/// linearized proves the history cannot. Returns the window's operations
/// (indices into `ops`), whether it starts at the key's start, and the
/// steps it took.
fn window(ops: &[P], culprit: usize, total: u64, budget: &Budget) -> (Vec<usize>, bool, u64) {
    let mut steps = 0;
    let mut illegal = |s: u64, t: u64| {
        let left = total.saturating_sub(steps);
        if left == 0 {
            return false;
        }
        let p: Vec<P> = cut(ops, s, t)
            .iter()
            .map(|&i| cut_op(&ops[i], s, t))
            .collect();
        let mut search = Search::new(&p, if s == 0 { 0 } else { ANY });
        let r = search.run(&Budget {
            steps: left,
            ..*budget
        });
        steps += search.steps;
        matches!(r, Found::Illegal(_))
    };
    let c = ops[culprit];
    let mut t = c.complete;
    if !illegal(0, t) {
        t = u64::MAX;
    }
    // Start times to try: the invocations up to the culprit's, in order;
    // a later start allows more, so the windows that cannot be linearized
    // are those starting before some point.
    let mut starts: Vec<u64> = ops
        .iter()
        .map(|p| p.invoke)
        .filter(|&i| i <= c.invoke)
        .collect();
    starts.sort_unstable();
    starts.dedup();
    let (mut lo, mut hi) = (0usize, starts.len());
    // starts[lo] known illegal (the first one is the whole prefix).
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if illegal(starts[mid], t) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let s = if lo == 0 { 0 } else { starts[lo] };
    (cut(ops, s, t), s == 0, steps)
}

/// The operations of the window from `s` to `t`: those invoked by `t`
/// that had not completed before `s`, but reads cut by an edge.
fn cut(ops: &[P], s: u64, t: u64) -> Vec<usize> {
    (0..ops.len())
        .filter(|&i| {
            let p = &ops[i];
            let inside = p.invoke <= t && p.complete >= s;
            let straddles = p.invoke < s || p.complete > t;
            inside && !(straddles && matches!(p.kind, Kind::Read(_)))
        })
        .collect()
}

/// An operation of a window: one cut by its edges may or may not have
/// taken effect.
fn cut_op(p: &P, s: u64, t: u64) -> P {
    if p.invoke >= s && p.complete <= t {
        return *p;
    }
    let kind = match p.kind {
        Kind::CasOk { from, to } | Kind::CasMaybe { from, to } => Kind::CasMaybe { from, to },
        // A failed compare-and-set changed nothing: taking it as maybe
        // done allows more, which a window may.
        Kind::CasFail { from } => Kind::CasMaybe { from, to: ANY },
        k => k,
    };
    P {
        kind,
        complete: u64::MAX,
        ..*p
    }
}

/// The register: what `kind` does from `state`, or `None` if it cannot.
#[inline]
fn step(state: u64, kind: Kind) -> Option<u64> {
    match kind {
        Kind::Read(v) => (state == v || state == ANY).then_some(v),
        Kind::Write(v) => Some(v),
        Kind::CasOk { from, to } => (state == from || state == ANY).then_some(to),
        Kind::CasFail { from } => (state != from).then_some(state),
        Kind::CasMaybe { from, to } => Some(if state == from { to } else { state }),
        Kind::Append { .. } if state == ANY => Some(ANY),
        Kind::Append { hash, mul } => Some((mulmod(state, mul) + hash) % MOD),
    }
}

enum Found {
    Linearizable,
    /// The operation (index into the ops) at the deepest failure.
    Illegal(usize),
    Unknown(String),
}

/// A hasher for keys that are already random words.
#[derive(Default)]
struct Passthrough(u64);

impl Hasher for Passthrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, _: &[u8]) {
        unreachable!("only u64 keys")
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// The entries of a search as a linked list (node 0 the head): each
/// node's operation id, whether it is a call, and each operation's return
/// node.
struct List {
    next: Vec<u32>,
    prev: Vec<u32>,
    id_of: Vec<u32>,
    is_call: Vec<bool>,
    ret_node: Vec<u32>,
}

/// One key's search.
struct Search<'a> {
    ops: &'a [P],
    init: u64,
    /// Operations with a completion come first (`0..finite`), by
    /// invocation; those without, after them.
    finite: usize,
    /// `id` of each operation in the order above, from its index in `ops`.
    /// For each operation with a completion (by id): the last id invoked
    /// by its completion, the furthest a linearized operation can be
    /// while it is not.
    lim: Vec<u32>,
    zobrist: Vec<u64>,
    /// Operations by id.
    by_id: Vec<usize>,
    steps: u64,
}

impl<'a> Search<'a> {
    fn new(ops: &'a [P], init: u64) -> Search<'a> {
        let mut by_id: Vec<usize> = (0..ops.len()).collect();
        by_id.sort_by_key(|&i| (ops[i].complete == u64::MAX, ops[i].invoke, i));
        let finite = by_id
            .iter()
            .take_while(|&&i| ops[i].complete != u64::MAX)
            .count();
        let invokes: Vec<u64> = by_id[..finite].iter().map(|&i| ops[i].invoke).collect();
        let lim = by_id[..finite]
            .iter()
            .map(|&i| (invokes.partition_point(|&x| x <= ops[i].complete) as u32).saturating_sub(1))
            .collect();
        let zobrist = (0..ops.len() as u64)
            .map(|i| crate::units::mix64(i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5eed))
            .collect();
        Search {
            ops,
            init,
            finite,
            lim,
            zobrist,
            by_id,
            steps: 0,
        }
    }

    fn run(&mut self, budget: &Budget) -> Found {
        let n = self.ops.len();
        if n == 0 {
            return Found::Linearizable;
        }
        let List {
            mut next,
            mut prev,
            id_of,
            is_call,
            ret_node,
        } = self.list();
        let mut lin = vec![0u64; n.div_ceil(64)];
        let mut hash = 0u64;
        let mut first = 0usize; // the first id < finite not linearized
        let mut memo = Memo::default();
        let mut calls: Vec<(u32, u64)> = Vec::new();
        let mut state = self.init;
        let mut entry = next[0];
        let mut deepest = (0usize, NONE);
        let mut s_buf: Vec<u32> = Vec::new();
        while next[0] != NONE {
            self.steps += 1;
            if self.steps.is_multiple_of(1 << 16) {
                if let Some(why) = self.over(&memo, budget) {
                    return Found::Unknown(why);
                }
            }
            let e = entry as usize;
            let id = id_of[e] as usize;
            if is_call[e] {
                let op = self.ops[self.by_id[id]];
                if let Some(ns) = step(state, op.kind) {
                    lin[id / 64] |= 1 << (id % 64);
                    hash ^= self.zobrist[id];
                    let first2 = if id == first {
                        self.next_unset(&lin, first + 1)
                    } else {
                        first
                    };
                    self.members(&lin, first2, &mut s_buf);
                    if memo.insert(hash ^ crate::units::mix64(ns), ns, first2, &s_buf) {
                        calls.push((entry, state));
                        state = ns;
                        first = first2;
                        lift(&mut next, &mut prev, e, ret_node[id] as usize);
                        entry = next[0];
                    } else {
                        lin[id / 64] &= !(1 << (id % 64));
                        hash ^= self.zobrist[id];
                        entry = next[e];
                    }
                } else {
                    entry = next[e];
                }
            } else {
                let Some((c, s)) = calls.pop() else {
                    let culprit = if deepest.1 == NONE {
                        id
                    } else {
                        deepest.1 as usize
                    };
                    return Found::Illegal(self.by_id[culprit]);
                };
                if calls.len() + 1 > deepest.0 {
                    deepest = (calls.len() + 1, id as u32);
                }
                let cid = id_of[c as usize] as usize;
                lin[cid / 64] &= !(1 << (cid % 64));
                hash ^= self.zobrist[cid];
                if cid < first {
                    first = cid;
                }
                state = s;
                unlift(&mut next, &mut prev, c as usize, ret_node[cid] as usize);
                entry = next[c as usize];
            }
        }
        Found::Linearizable
    }

    /// The call and return entries in time order, calls before returns
    /// at one time, as a linked list whose node 0 is the head.
    fn list(&self) -> List {
        let n = self.ops.len();
        let mut entries: Vec<(u64, bool, u32)> = Vec::with_capacity(2 * n);
        for (id, &i) in self.by_id.iter().enumerate() {
            entries.push((self.ops[i].invoke, false, id as u32));
            entries.push((self.ops[i].complete, true, id as u32));
        }
        entries.sort_unstable();
        let len = 2 * n + 1;
        let mut l = List {
            next: vec![NONE; len],
            prev: vec![NONE; len],
            id_of: vec![0u32; len],
            is_call: vec![false; len],
            ret_node: vec![0u32; n],
        };
        for (j, &(_, ret, id)) in entries.iter().enumerate() {
            let node = j + 1;
            l.id_of[node] = id;
            l.is_call[node] = !ret;
            if ret {
                l.ret_node[id as usize] = node as u32;
            }
            l.prev[node] = j as u32;
            l.next[j] = node as u32;
        }
        l
    }

    /// Why the search must stop, if it has spent its budget.
    fn over(&self, memo: &Memo, budget: &Budget) -> Option<String> {
        if self.steps > budget.steps {
            return Some(format!("the search took more than {} steps", budget.steps));
        }
        if memo.bytes() > budget.memo_bytes {
            return Some(format!(
                "the search's memo grew past {}",
                crate::units::Bytes(budget.memo_bytes as u64)
            ));
        }
        budget
            .deadline
            .is_some_and(|d| Instant::now() >= d)
            .then(|| "the check's deadline passed".into())
    }

    /// The first id from `from` on, among those with a completion, that is
    /// not linearized (`finite` if none).
    fn next_unset(&self, lin: &[u64], from: usize) -> usize {
        let mut i = from;
        while i < self.finite {
            let w = lin[i / 64] >> (i % 64);
            if w != u64::MAX >> (i % 64) {
                return i + (!w).trailing_zeros() as usize;
            }
            i = (i / 64 + 1) * 64;
        }
        self.finite
    }

    /// The linearized ids after `first`: those up to the furthest one
    /// that can be linearized while `first` is not, and those without a
    /// completion.
    fn members(&self, lin: &[u64], first: usize, out: &mut Vec<u32>) {
        out.clear();
        let upto = if first < self.finite {
            self.lim[first] as usize
        } else {
            self.finite.saturating_sub(1)
        };
        let mut push_range = |a: usize, b: usize| {
            // ids in [a, b) that are set
            let mut i = a;
            while i < b {
                let w = lin[i / 64] >> (i % 64);
                if w == 0 {
                    i = (i / 64 + 1) * 64;
                    continue;
                }
                let j = i + w.trailing_zeros() as usize;
                if j >= b {
                    break;
                }
                out.push(j as u32);
                i = j + 1;
            }
        };
        if first < self.finite {
            push_range(first + 1, upto + 1);
        }
        push_range(self.finite, self.ops.len());
    }
}

fn lift(next: &mut [u32], prev: &mut [u32], call: usize, ret: usize) {
    let (p, n) = (prev[call], next[call]);
    next[p as usize] = n;
    if n != NONE {
        prev[n as usize] = p;
    }
    let (p, n) = (prev[ret], next[ret]);
    next[p as usize] = n;
    if n != NONE {
        prev[n as usize] = p;
    }
}

fn unlift(next: &mut [u32], prev: &mut [u32], call: usize, ret: usize) {
    let (p, n) = (prev[ret], next[ret]);
    next[p as usize] = ret as u32;
    if n != NONE {
        prev[n as usize] = ret as u32;
    }
    let (p, n) = (prev[call], next[call]);
    next[p as usize] = call as u32;
    if n != NONE {
        prev[n as usize] = call as u32;
    }
}

/// The explored (set, value) pairs: a table from hash to the newest entry
/// of a chain in an arena of words: `[next, value (two words), first,
/// len, ids...]`.
#[derive(Default)]
struct Memo {
    heads: HashMap<u64, u32, BuildHasherDefault<Passthrough>>,
    arena: Vec<u32>,
}

impl Memo {
    fn bytes(&self) -> usize {
        self.arena.capacity() * 4 + self.heads.capacity() * 16
    }

    /// Adds the pair; `false` if it was there.
    fn insert(&mut self, key: u64, value: u64, first: usize, rest: &[u32]) -> bool {
        let (lo, hi) = (value as u32, (value >> 32) as u32);
        let head = self.heads.get(&key).copied().unwrap_or(NONE);
        let mut at = head;
        while at != NONE {
            let a = at as usize;
            let len = self.arena[a + 4] as usize;
            if self.arena[a + 1] == lo
                && self.arena[a + 2] == hi
                && self.arena[a + 3] as usize == first
                && len == rest.len()
                && self.arena[a + 5..a + 5 + len] == *rest
            {
                return false;
            }
            at = self.arena[a];
        }
        let new = self.arena.len() as u32;
        self.arena
            .extend_from_slice(&[head, lo, hi, first as u32, rest.len() as u32]);
        self.arena.extend_from_slice(rest);
        self.heads.insert(key, new);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Op, Outcome};

    /// A history of one key from `(client, f, outcome, invoke, complete)`.
    fn history(ops: &[(u32, F, Outcome, u64, u64)]) -> History {
        let mut h = History::default();
        h.keys.id("x");
        for v in 1..10 {
            h.values.id(&v.to_string());
        }
        for &(client, f, outcome, invoke, complete) in ops {
            h.ops.push(Op {
                client,
                key: 0,
                f,
                outcome,
                invoke,
                complete,
            });
        }
        h
    }

    fn verdict(ops: &[(u32, F, Outcome, u64, u64)]) -> Verdict {
        check(&history(ops), &Options::default()).verdict
    }

    use Outcome::{Fail, Ok as Done, Unknown};
    const R: F = F::Read;
    fn w(v: Val) -> F {
        F::Write(v)
    }

    #[test]
    fn a_read_of_the_last_completed_write_is_linearizable_and_a_stale_one_is_not() {
        let fresh = [
            (0, w(1), Done(0), 0, 10),
            (1, w(2), Done(0), 20, 30),
            (2, R, Done(2), 40, 50),
        ];
        assert_eq!(verdict(&fresh), Verdict::Linearizable);
        let stale = [
            (0, w(1), Done(0), 0, 10),
            (1, w(2), Done(0), 20, 30),
            (2, R, Done(1), 40, 50),
        ];
        let h = history(&stale);
        let r = check(&h, &Options::default());
        assert_eq!(r.verdict, Verdict::NotLinearizable);
        let v = &r.violations[0];
        assert_eq!(v.culprit, 2, "the stale read is named");
        // The window: the second write and the read suffice (from any
        // value, write 2 then read 1 cannot be).
        assert_eq!(v.window, vec![1, 2]);
        assert!(!v.from_start);
    }

    #[test]
    fn a_read_concurrent_with_a_write_may_see_either_value() {
        for seen in [1, 2] {
            let ops = [
                (0, w(1), Done(0), 0, 10),
                (1, w(2), Done(0), 20, 40),
                (2, R, Done(seen), 25, 35),
            ];
            assert_eq!(verdict(&ops), Verdict::Linearizable, "read {seen}");
        }
        // But not both orders at once: two reads, the first seeing the
        // new value, the second (after it) the old one.
        let ops = [
            (0, w(1), Done(0), 0, 10),
            (1, w(2), Done(0), 20, 60),
            (2, R, Done(2), 25, 30),
            (3, R, Done(1), 35, 40),
        ];
        assert_eq!(verdict(&ops), Verdict::NotLinearizable);
    }

    #[test]
    fn a_write_of_unknown_outcome_may_happen_late_or_never() {
        // Never: the read after it sees the value before.
        let never = [
            (0, w(1), Done(0), 0, 10),
            (1, w(2), Unknown, 20, u64::MAX),
            (2, R, Done(1), 100, 110),
        ];
        assert_eq!(verdict(&never), Verdict::Linearizable);
        // Late: a read long after it first sees the old value, then the new.
        let late = [
            (0, w(1), Done(0), 0, 10),
            (1, w(2), Unknown, 20, u64::MAX),
            (2, R, Done(1), 100, 110),
            (2, R, Done(2), 200, 210),
        ];
        assert_eq!(verdict(&late), Verdict::Linearizable);
        // But not before its invocation.
        let early = [
            (0, w(1), Done(0), 0, 10),
            (2, R, Done(2), 12, 15),
            (1, w(2), Unknown, 20, u64::MAX),
        ];
        assert_eq!(verdict(&early), Verdict::NotLinearizable);
    }

    #[test]
    fn failed_reads_and_writes_did_not_happen_and_a_failed_cas_compared_unequal() {
        let failed_write_read = [
            (0, w(1), Done(0), 0, 10),
            (1, w(2), Fail, 20, 30),
            (2, R, Done(2), 40, 50),
        ];
        assert_eq!(verdict(&failed_write_read), Verdict::NotLinearizable);
        let cas_failed = [
            (0, w(1), Done(0), 0, 10),
            (1, F::Cas { from: 1, to: 3 }, Fail, 20, 30),
        ];
        assert_eq!(verdict(&cas_failed), Verdict::NotLinearizable, "it held 1");
        let cas = [
            (0, w(1), Done(0), 0, 10),
            (1, F::Cas { from: 1, to: 3 }, Done(0), 20, 30),
            (1, F::Cas { from: 1, to: 4 }, Fail, 40, 50),
            (2, R, Done(3), 60, 70),
        ];
        assert_eq!(verdict(&cas), Verdict::Linearizable);
    }

    #[test]
    fn deletes_write_nil_and_the_register_starts_at_nil() {
        let ops = [
            (0, R, Done(NIL), 0, 5),
            (0, w(1), Done(0), 10, 20),
            (1, F::Delete, Done(0), 30, 40),
            (2, R, Done(NIL), 50, 60),
        ];
        assert_eq!(verdict(&ops), Verdict::Linearizable);
        let resurrected = [
            (0, w(1), Done(0), 10, 20),
            (1, F::Delete, Done(0), 30, 40),
            (2, R, Done(1), 50, 60),
        ];
        assert_eq!(verdict(&resurrected), Verdict::NotLinearizable);
    }

    #[test]
    fn keys_are_independent() {
        let mut h = history(&[(0, w(1), Done(0), 0, 10)]);
        h.keys.id("y");
        // y read nil after x was written: fine, another register.
        h.ops.push(Op {
            client: 1,
            key: 1,
            f: R,
            outcome: Done(NIL),
            invoke: 20,
            complete: 30,
        });
        assert_eq!(
            check(&h, &Options::default()).verdict,
            Verdict::Linearizable
        );
    }

    #[test]
    fn a_search_past_its_budget_is_unknown_never_linearizable() {
        // Many concurrent writes of unknown outcome, all read: the search
        // must try their orders.
        let mut ops = Vec::new();
        for c in 0..40u32 {
            ops.push((c, w(c % 9 + 1), Unknown, c as u64, u64::MAX));
        }
        for c in 0..40u32 {
            ops.push((
                100 + c,
                R,
                Done(c % 9 + 1),
                1000 + 2 * c as u64,
                1001 + 2 * c as u64,
            ));
        }
        let mut opts = Options::default();
        opts.budget.steps = 1000;
        let r = check(&history(&ops), &opts);
        assert_eq!(r.verdict, Verdict::Unknown, "{:?}", r.violations);
        assert!(r.unknown[0].1.contains("steps"), "{:?}", r.unknown);
    }

    #[test]
    fn an_unknown_write_that_nothing_read_is_left_out() {
        let ops = [
            (0, w(1), Done(0), 0, 10),
            (1, w(7), Unknown, 20, u64::MAX),
            (2, R, Done(1), 40, 50),
        ];
        let r = check(&history(&ops), &Options::default());
        assert_eq!(r.verdict, Verdict::Linearizable);
        assert_eq!(r.dropped, 1);
    }

    #[test]
    fn appends_concatenate_and_a_missing_key_reads_empty() {
        let mut h = History::default();
        h.keys.id("k");
        let (a, b, ab, empty) = (h.values.id("a"), h.values.id("b"), h.values.id("ab"), NIL);
        let mut push = |f, outcome, invoke, complete| {
            h.ops.push(Op {
                client: 0,
                key: 0,
                f,
                outcome,
                invoke,
                complete,
            })
        };
        push(R, Done(empty), 0, 1);
        push(F::Append(a), Done(0), 2, 3);
        push(F::Append(b), Done(0), 4, 5);
        push(R, Done(ab), 6, 7);
        assert_eq!(
            check(&h, &Options::default()).verdict,
            Verdict::Linearizable
        );
        h.ops[3].outcome = Done(a);
        assert_eq!(
            check(&h, &Options::default()).verdict,
            Verdict::NotLinearizable
        );
    }
}
