//! Phases written back as suite YAML, in the words a suite uses: what
//! `soak replay` and `soak shrink` write (a cell's schedule as explicit
//! phases) must read back as the same phases (tested below).

use serde_norway::{Mapping, Value};

use super::faults::{DiskFault, IoFault, Room};
use super::phase::{ExecSpec, NetworkSpec, Phase, RunFor, ServiceAction};

pub use crate::units::exact_duration as duration;

fn s(v: impl Into<String>) -> Value {
    Value::String(v.into())
}

fn one(key: &str, v: Value) -> Value {
    let mut m = Mapping::new();
    m.insert(s(key), v);
    Value::Mapping(m)
}

fn map(entries: Vec<(&str, Value)>) -> Value {
    let mut m = Mapping::new();
    for (k, v) in entries {
        m.insert(s(k), v);
    }
    Value::Mapping(m)
}

/// The phase as a suite's `phases:` item.
pub fn phase(p: &Phase) -> Value {
    match p {
        Phase::Load => s("load"),
        Phase::Start => s("start"),
        Phase::Stop => s("stop"),
        Phase::Restart => s("restart"),
        Phase::Verify => s("verify"),
        Phase::VerifyOffline => one("verify", s("offline")),
        Phase::Run(RunFor::Time(d)) => one("run", s(duration(*d))),
        Phase::Run(RunFor::Ops { ops, max }) => one(
            "run",
            map(vec![("ops", Value::from(*ops)), ("max", s(duration(*max)))]),
        ),
        Phase::Kill(sig) => one("kill", s(sig.to_string())),
        Phase::Pause(d) => one("pause", s(duration(*d))),
        Phase::Wait(d) => one("wait", s(duration(*d))),
        Phase::Exec(e) => one("exec", exec(e)),
        Phase::Limit(size) => one("limit", s(format!("{}B", size.0))),
        Phase::Repeat { times, phases } => one(
            "repeat",
            map(vec![
                ("times", Value::from(*times)),
                (
                    "phases",
                    Value::Sequence(phases.iter().map(phase).collect()),
                ),
            ]),
        ),
        Phase::Chaos(c) => {
            let mut m = vec![
                ("during", s(duration(c.during))),
                (
                    "every",
                    s(format!(
                        "{}..{}",
                        duration(c.every_min),
                        duration(c.every_max)
                    )),
                ),
                (
                    "actions",
                    Value::Sequence(c.actions.iter().map(chaos_action).collect()),
                ),
                ("pause", s(duration(c.pause))),
                ("hold", s(duration(c.hold))),
                ("signal", s(c.signal.to_string())),
            ];
            if let Some(seed) = c.seed {
                m.push(("seed", Value::from(seed)));
            }
            one("chaos", map(m))
        }
        Phase::Upgrade(v) => one("upgrade", s(v.clone())),
        Phase::Downgrade(v) => one("downgrade", s(v.clone())),
        Phase::Network(n) => one("network", network(n)),
        Phase::Disk(d) => disk(d),
        Phase::Member(m) => m.emit(),
        Phase::Partition(p) => p.emit(),
        Phase::Heal => s("heal"),
        Phase::Service(sp) => one(
            "service",
            map(vec![
                ("name", s(sp.name.clone())),
                (
                    "action",
                    s(match sp.action {
                        ServiceAction::Kill => "kill",
                        ServiceAction::Stop => "stop",
                        ServiceAction::Start => "start",
                        ServiceAction::Restart => "restart",
                    }),
                ),
            ]),
        ),
    }
}

fn exec(e: &ExecSpec) -> Value {
    let mut m = vec![
        (
            "command",
            Value::Sequence(e.command.iter().map(|a| s(a.clone())).collect()),
        ),
        ("timeout", s(duration(e.timeout))),
        ("expect", Value::from(e.expect)),
    ];
    if let Some(t) = &e.throughput {
        let mut tm = vec![("regex", s(t.regex.clone()))];
        if let Some(min) = t.min {
            tm.push(("min", s(format!("{min}/s"))));
        }
        m.push(("throughput", map(tm)));
    }
    map(m)
}

fn network(n: &NetworkSpec) -> Value {
    if n.is_clear() {
        return s("clear");
    }
    let mut m = vec![];
    if !n.latency.is_zero() {
        m.push(("latency", s(duration(n.latency))));
    }
    if !n.jitter.is_zero() {
        m.push(("jitter", s(duration(n.jitter))));
    }
    if let Some(b) = n.bandwidth {
        m.push(("bandwidth", s(format!("{b}B/s"))));
    }
    if n.blackhole {
        m.push(("blackhole", Value::Bool(true)));
    }
    if n.reset {
        m.push(("reset", Value::Bool(true)));
    }
    if !n.slow_close.is_zero() {
        m.push(("slow_close", s(duration(n.slow_close))));
    }
    map(m)
}

fn io_fault(f: &Option<IoFault>) -> Value {
    let Some(f) = f else {
        return s("clear");
    };
    let mut m = vec![
        ("rate", Value::from(f.rate)),
        (
            "ops",
            Value::Sequence(f.ops.iter().map(|o| s(o.to_string())).collect()),
        ),
    ];
    if !f.delay.is_zero() {
        m.push(("delay", s(duration(f.delay))));
    }
    if let Some(p) = &f.path {
        m.push(("path", s(p.clone())));
    }
    map(m)
}

fn disk(d: &DiskFault) -> Value {
    match d {
        DiskFault::PowerCut { torn: false } => s("power_cut"),
        DiskFault::PowerCut { torn: true } => {
            one("power_cut", map(vec![("torn", Value::Bool(true))]))
        }
        DiskFault::DiskFull(Room::None) => one("disk_full", Value::Bool(true)),
        DiskFault::DiskFull(Room::Lifted) => one("disk_full", Value::Bool(false)),
        DiskFault::DiskFull(Room::Left(b)) => one("disk_full", s(format!("{b}B"))),
        DiskFault::IoErrors(f) => one("io_errors", io_fault(f)),
        DiskFault::IoDelay(f) => one("io_delay", io_fault(f)),
    }
}

/// A chaos action as a `chaos.actions` item.
fn chaos_action(a: &super::ChaosAction) -> Value {
    use super::ChaosAction;
    match a {
        ChaosAction::Kill => s("kill"),
        ChaosAction::Pause => s("pause"),
        ChaosAction::Restart => s("restart"),
        ChaosAction::Network(n) => one("network", network(n)),
        ChaosAction::Disk(d) => disk(d),
        ChaosAction::Member(m) => m.emit(),
        ChaosAction::Partition(p) => p.emit(),
        ChaosAction::Heal => s("heal"),
    }
}

/// Phases as the YAML text of a `phases:` list's items (for messages).
pub fn phases_text(phases: &[Phase]) -> String {
    serde_norway::to_string(&Value::Sequence(phases.iter().map(phase).collect()))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::cluster::{MemberPhase, Partition, Target, Verb};
    use crate::suite::faults::IoOp;
    use crate::suite::phase::{ServicePhase, ThroughputParse};
    use crate::suite::{ChaosAction, ChaosSpec, Sig, Size};
    use nix::sys::signal::Signal;
    use std::time::Duration;

    fn every_phase() -> Vec<Phase> {
        let ms = Duration::from_millis;
        let io = |rate, delay| IoFault {
            rate,
            delay,
            ops: vec![IoOp::Write, IoOp::Fsync],
            path: Some("*.log".into()),
        };
        vec![
            Phase::Load,
            Phase::Start,
            Phase::Stop,
            Phase::Restart,
            Phase::Verify,
            Phase::VerifyOffline,
            Phase::Run(RunFor::Time(Duration::from_micros(1_234_567))),
            Phase::Run(RunFor::Time(ms(3000))),
            Phase::Run(RunFor::Ops {
                ops: 5000,
                max: ms(90_250),
            }),
            Phase::Kill(Sig(Signal::SIGKILL)),
            Phase::Kill(Sig(Signal::SIGTERM)),
            Phase::Pause(ms(200)),
            Phase::Wait(ms(1500)),
            Phase::Exec(ExecSpec {
                command: vec!["sh".into(), "-c".into(), "echo ${DATA_DIR}".into()],
                timeout: ms(30_000),
                expect: 3,
                throughput: Some(ThroughputParse {
                    regex: "([0-9.]+) ops/sec".into(),
                    min: Some(1500.0),
                }),
            }),
            Phase::Limit(Size(128 << 20)),
            Phase::Upgrade("v2".into()),
            Phase::Downgrade("v1".into()),
            Phase::Network(NetworkSpec {
                latency: ms(50),
                jitter: ms(10),
                bandwidth: Some(1 << 20),
                blackhole: true,
                reset: true,
                slow_close: ms(1000),
            }),
            Phase::Network(NetworkSpec::default()),
            Phase::Disk(DiskFault::PowerCut { torn: false }),
            Phase::Disk(DiskFault::PowerCut { torn: true }),
            Phase::Disk(DiskFault::DiskFull(Room::None)),
            Phase::Disk(DiskFault::DiskFull(Room::Lifted)),
            Phase::Disk(DiskFault::DiskFull(Room::Left(16 << 20))),
            Phase::Disk(DiskFault::IoErrors(Some(io(0.25, Duration::ZERO)))),
            Phase::Disk(DiskFault::IoErrors(None)),
            Phase::Disk(DiskFault::IoDelay(Some(io(1.0, ms(20))))),
            Phase::Disk(DiskFault::IoDelay(None)),
            Phase::Service(ServicePhase {
                name: "kafka".into(),
                action: ServiceAction::Restart,
            }),
            Phase::Repeat {
                times: 3,
                phases: vec![Phase::Run(RunFor::Time(ms(500))), Phase::Restart],
            },
            Phase::Member(MemberPhase {
                verb: Verb::Kill(Sig(Signal::SIGTERM)),
                member: Target::Leader,
            }),
            Phase::Member(MemberPhase {
                verb: Verb::Pause(ms(1500)),
                member: Target::One(2),
            }),
            Phase::Member(MemberPhase {
                verb: Verb::Start,
                member: Target::All,
            }),
            Phase::Member(MemberPhase {
                verb: Verb::Upgrade("v2".into()),
                member: Target::All,
            }),
            Phase::Member(MemberPhase {
                verb: Verb::Stop,
                member: Target::Random,
            }),
            Phase::Member(MemberPhase {
                verb: Verb::Restart,
                member: Target::Minority,
            }),
            Phase::Partition(Partition::Isolate(Target::Leader)),
            Phase::Partition(Partition::Isolate(Target::One(3))),
            Phase::Partition(Partition::Halves),
            Phase::Partition(Partition::Bridge),
            Phase::Partition(Partition::Ring),
            Phase::Partition(Partition::Groups(vec![
                ("a".into(), vec![1]),
                ("b".into(), vec![2, 3]),
            ])),
            Phase::Partition(Partition::Drop {
                from: Target::One(1),
                to: Target::Leader,
            }),
            Phase::Partition(Partition::Loss {
                between: (1, 2),
                rate: 0.25,
            }),
            Phase::Partition(Partition::Delay {
                between: (1, 3),
                by: Duration::from_millis(200),
                jitter: Duration::from_millis(20),
            }),
            Phase::Heal,
            Phase::Chaos(ChaosSpec {
                during: ms(10_000),
                every_min: ms(300),
                every_max: ms(700),
                actions: vec![
                    ChaosAction::Kill,
                    ChaosAction::Pause,
                    ChaosAction::Restart,
                    ChaosAction::Network(NetworkSpec {
                        blackhole: true,
                        ..NetworkSpec::default()
                    }),
                    ChaosAction::Disk(DiskFault::DiskFull(Room::None)),
                    ChaosAction::Disk(DiskFault::PowerCut { torn: false }),
                ],
                seed: Some(7),
                pause: ms(150),
                hold: ms(900),
                signal: Sig(Signal::SIGKILL),
            }),
        ]
    }

    #[test]
    fn every_phase_written_reads_back_as_itself() {
        for p in every_phase() {
            let text = phases_text(std::slice::from_ref(&p));
            let back: Vec<Phase> = serde_norway::from_str(&text)
                .unwrap_or_else(|e| panic!("{p} written as {text} does not read back: {e}"));
            assert_eq!(back, vec![p.clone()], "written as {text}");
        }
    }

    #[test]
    fn durations_are_exact_and_short() {
        assert_eq!(duration(Duration::from_secs(20)), "20s");
        assert_eq!(duration(Duration::from_millis(250)), "250ms");
        assert_eq!(duration(Duration::from_micros(812_345)), "812.345ms");
    }
}
