//! The JSON Schema of suites (`soak schema`), for editor completion and
//! checking with yaml-language-server. Plain structs derive theirs; the
//! values soak reads by hand (units, signals, phases, matrices,
//! allocators) describe theirs here, with patterns an editor can check.

use std::borrow::Cow;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};

use super::checks::CountCheck;
use super::matrix::{Matrix, CODECS};
use super::phase::{Phase, ACTIONS, PHASES};
use super::values::{Bound, Count, Dur, GrowthRate, Rate, Sig, Size, SIGNALS};
use super::Suite;
use crate::suite::allocator::{Profile, GLIBC_OPTIONS, KINDS};

const SIZE: &str = r"^\s*[0-9][0-9_]*(\.[0-9]+)?\s*(B|KiB|MiB|GiB|TiB|KB|kB|MB|GB|TB|K|M|G|T)?\s*$";
const DURATION: &str = r"^\s*[0-9][0-9_]*(\.[0-9]+)?\s*(ms|s|sec|m|min|h)\s*$";

macro_rules! manual {
    ($ty:ty, $name:literal, |$g:ident| $body:expr) => {
        impl JsonSchema for $ty {
            fn schema_name() -> Cow<'static, str> {
                $name.into()
            }
            fn json_schema($g: &mut SchemaGenerator) -> Schema {
                let _ = &$g;
                $body
            }
        }
    };
}

manual!(Size, "Size", |g| json_schema!({
    "description": "A size: B, KiB, MiB, GiB, TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000), e.g. 256MiB",
    "anyOf": [{ "type": "integer", "minimum": 0 }, { "type": "string", "pattern": SIZE }]
}));
manual!(Bound, "Bound", |g| json_schema!({
    "description": "A size (e.g. 340MiB) or a share of the cell's memory limit (e.g. 85%)",
    "anyOf": [{ "type": "integer", "minimum": 0 }, { "type": "string", "pattern": SIZE },
              { "type": "string", "pattern": r"^\s*[0-9]+(\.[0-9]+)?\s*%\s*$" }]
}));
manual!(Dur, "Duration", |g| json_schema!({
    "description": "A duration: ms, s, m or h, e.g. 90s",
    "type": "string", "pattern": DURATION
}));
manual!(Rate, "Rate", |g| json_schema!({
    "description": "Operations per second, e.g. 20000/s or 20k/s",
    "type": "string", "pattern": r"^\s*[0-9][0-9_]*(\.[0-9]+)?\s*(k|K|M)?/s\s*$"
}));
manual!(
    crate::workload::dist::Distribution,
    "Distribution",
    |g| json_schema!({
        "description": "Which keys the load touches: uniform, sequential, latest (or { latest: THETA }), { zipfian: THETA } with THETA in (0, 1)",
        "anyOf": [
            { "enum": ["uniform", "sequential", "latest", "zipfian"] },
            { "type": "object", "properties": { "zipfian": { "type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1 } }, "required": ["zipfian"], "additionalProperties": false },
            { "type": "object", "properties": { "latest": { "type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1 } }, "required": ["latest"], "additionalProperties": false }
        ]
    })
);
manual!(super::values::LoadRate, "LoadRate", |g| json_schema!({
    "description": "Operations per second, e.g. 20000/s or 20k/s; or max, for a closed loop",
    "anyOf": [{ "const": "max" }, { "type": "string", "pattern": r"^\s*[0-9][0-9_]*(\.[0-9]+)?\s*(k|K|M)?/s\s*$" }]
}));
manual!(super::values::SizeRange, "SizeRange", |g| json_schema!({
    "description": "A size such as 100B, or a range MIN..MAX such as 100B..4KiB",
    "anyOf": [{ "type": "integer", "minimum": 0 }, { "type": "string", "pattern": r"^\s*[0-9][0-9_]*(\.[0-9]+)?\s*(B|KiB|MiB|GiB|TiB|KB|kB|MB|GB|TB|K|M|G|T)?\s*(\.\.\s*[0-9][0-9_]*(\.[0-9]+)?\s*(B|KiB|MiB|GiB|TiB|KB|kB|MB|GB|TB|K|M|G|T)?\s*)?$" }]
}));
manual!(Count, "Count", |g| json_schema!({
    "description": "A whole number; `_` may group digits (100_000)",
    "anyOf": [{ "type": "integer", "minimum": 0 }, { "type": "string", "pattern": r"^[0-9][0-9_]*$" }]
}));
manual!(GrowthRate, "GrowthRate", |g| json_schema!({
    "description": "A size per hour, minute or second, e.g. 20MiB/h",
    "type": "string", "pattern": r"^\s*[0-9][0-9_]*(\.[0-9]+)?\s*(B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)?\s*/(h|m|min|s)\s*$"
}));
manual!(Sig, "Signal", |g| {
    let mut names: Vec<String> = SIGNALS.iter().map(|s| s.to_string()).collect();
    names.extend(
        SIGNALS
            .iter()
            .map(|s| s.trim_start_matches("SIG").to_string()),
    );
    json_schema!({ "description": "A signal name", "enum": names })
});
manual!(CountCheck, "CountCheck", |g| json_schema!({
    "description": "The most allowed (a number), a bound such as \">= 1\" or \"<= 3\", or { max, min, severity }",
    "anyOf": [
        { "type": "integer", "minimum": 0 },
        { "type": "string", "pattern": "^\\s*(<=|>=|==|<|>|=)?\\s*[0-9_]+\\s*$" },
        { "type": "object", "additionalProperties": false, "minProperties": 1,
          "properties": { "max": { "type": "integer", "minimum": 0 }, "min": { "type": "integer", "minimum": 0 },
                          "severity": { "enum": ["fail", "warn"] } } }
    ]
}));
manual!(Profile, "Allocator", |g| {
    let options = |kind: &str| -> serde_json::Value {
        if kind == "glibc" {
            let props: serde_json::Map<String, serde_json::Value> = GLIBC_OPTIONS
                .iter()
                .chain(["name"].iter())
                .map(|o| (o.to_string(), serde_json::json!({})))
                .collect();
            serde_json::json!({ "type": "object", "additionalProperties": false, "properties": props })
        } else if kind == "custom" {
            serde_json::json!({ "type": "object", "required": ["preload"], "properties": { "preload": { "type": "string" }, "name": { "type": "string" } } })
        } else {
            serde_json::json!({ "type": "object", "description": "settings passed to the allocator (MALLOC_CONF, MIMALLOC_*, TCMALLOC_*)" })
        }
    };
    let props: serde_json::Map<String, serde_json::Value> =
        KINDS.iter().map(|k| (k.to_string(), options(k))).collect();
    json_schema!({
        "description": "An allocator: a name, or a one-key map of its settings",
        "anyOf": [
            { "enum": ["glibc", "jemalloc", "mimalloc", "tcmalloc"] },
            { "type": "object", "minProperties": 1, "maxProperties": 1, "additionalProperties": false, "properties": props }
        ]
    })
});
manual!(Matrix, "Matrix", |g| {
    let profile = g.subschema_for::<Profile>();
    let checks = g.subschema_for::<super::Checks>();
    json_schema!({
        "description": "Axes, each a list of values (a word, a number, or a map of fields; `name` names it in cell ids). Fields called compression or *_compression take RocksDB's codecs. A value or an include may say what its cells must show: `expect:`, checks in place of the suite's (e.g. { oom_kills: \">= 1\" } where an incident must reproduce).",
        "type": "object",
        "properties": {
            "allocator": { "type": "array", "minItems": 1, "items": { "anyOf": [
                profile,
                { "type": "object", "required": ["expect"], "properties": { "expect": checks } }
            ] } },
            "include": { "type": "array", "items": { "type": "object", "properties": { "expect": checks } } },
            "exclude": { "type": "array", "items": { "type": "object" } }
        },
        "additionalProperties": {
            "type": "array", "minItems": 1,
            "items": { "anyOf": [
                { "type": ["string", "number", "boolean"] },
                { "type": "object", "properties": { "compression": { "enum": CODECS }, "bottommost_compression": { "enum": CODECS }, "expect": checks },
                  "additionalProperties": { "type": ["string", "number", "boolean"] } }
            ] }
        }
    })
});
manual!(Phase, "Phase", |g| {
    let (dur, sig, size) = (
        g.subschema_for::<Dur>(),
        g.subschema_for::<Sig>(),
        g.subschema_for::<Size>(),
    );
    let (count, phase) = (g.subschema_for::<Count>(), g.subschema_for::<Phase>());
    let argv = serde_json::json!({ "type": "array", "items": { "type": "string" }, "minItems": 1 });
    let io_ops = serde_json::json!({ "type": "array", "minItems": 1, "items": { "enum": ["read", "write", "fsync"] } });
    let throughput = serde_json::json!({
        "description": "A regex whose first group is an ops/s figure in the output, e.g. '([0-9.]+) ops/sec'; or { regex, min }",
        "anyOf": [{ "type": "string" }, { "type": "object", "additionalProperties": false, "required": ["regex"],
            "properties": { "regex": { "type": "string" }, "min": { "type": "string", "pattern": r"^\s*[0-9][0-9_]*(\.[0-9]+)?\s*(k|K|M)?/s\s*$" } } }]
    });
    let network = serde_json::json!({ "description": "faults between the load and the node (soak's proxy): latency (added to every reply), jitter, bandwidth (e.g. 1MiB/s), blackhole, reset, slow_close; or `clear`",
                    "anyOf": [{ "enum": ["clear", "none"] }, { "type": "object", "additionalProperties": false,
                    "properties": { "latency": dur, "jitter": dur,
                        "bandwidth": { "type": "string", "pattern": r"^\s*[0-9][0-9_]*(\.[0-9]+)?\s*(B|KiB|MiB|GiB|KB|MB|GB)?/s\s*$" },
                        "blackhole": { "type": "boolean" }, "reset": { "type": "boolean" }, "slow_close": dur } }] });
    let disk_full = serde_json::json!({ "description": "ENOSPC on writes that grow the data directory: `true` (now), a size of room left (e.g. 16MiB), or `false` (space back)",
                    "anyOf": [{ "type": "boolean" }, size] });
    let io_errors = serde_json::json!({ "description": "EIO on a share of the operations: { rate: 0.1, ops: [read, write, fsync], path: \"*.sst\" }, or `clear`",
                    "anyOf": [{ "enum": ["clear", "none"] }, { "type": "object", "additionalProperties": false, "required": ["rate"],
                    "properties": { "rate": { "type": "number", "exclusiveMinimum": 0, "maximum": 1 }, "delay": dur, "ops": io_ops, "path": { "type": "string" } } }] });
    let io_delay = serde_json::json!({ "description": "a delay on the operations: { delay: 20ms, ops: [read, write, fsync], path: \"*.log\" }, or `clear`",
                    "anyOf": [{ "enum": ["clear", "none"] }, { "type": "object", "additionalProperties": false, "required": ["delay"],
                    "properties": { "rate": { "type": "number", "exclusiveMinimum": 0, "maximum": 1 }, "delay": dur, "ops": io_ops, "path": { "type": "string" } } }] });
    let member = serde_json::json!({ "description": "a member: a number (1 is the first), random, leader, minority, majority or all",
                    "anyOf": [{ "type": "integer", "minimum": 1 }, { "enum": crate::suite::cluster::TARGETS }] });
    let power_cut = serde_json::json!({ "description": "SIGKILL, and every byte not fsynced dropped from the data directory (soak's fault filesystem), then a start; `torn: true` keeps a random part of each file's unsynced tail; in a cluster, `member: M` cuts those members (together), and without it every member",
                    "type": "object", "additionalProperties": false, "properties": { "torn": { "type": "boolean" }, "member": member } });
    let on_member = |extra: serde_json::Value| {
        serde_json::json!({ "type": "object", "additionalProperties": false, "required": ["member"],
                    "description": "one member of a cluster", "properties": extra })
    };
    let start_member = on_member(serde_json::json!({ "member": member }));
    let kill_member = on_member(serde_json::json!({ "member": member, "signal": sig }));
    let pause_member = on_member(serde_json::json!({ "member": member, "for": dur }));
    let partition = serde_json::json!({
        "description": "the members cut apart (the partition before lifted): halves, bridge, ring, or { isolate: leader }, { groups: { a: [1], b: [2, 3] } }, { drop: { from: 1, to: 2 } }, { loss: { between: [1, 2], rate: 20% } }, { delay: { between: [1, 2], by: 200ms, jitter: 20ms } }",
        "anyOf": [
            { "enum": ["halves", "bridge", "ring"] },
            { "type": "object", "minProperties": 1, "maxProperties": 1, "additionalProperties": false, "properties": {
                "isolate": member,
                "groups": { "anyOf": [{ "type": "object", "additionalProperties": { "type": "array", "items": { "type": "integer", "minimum": 1 } } },
                                      { "type": "array", "items": { "type": "array", "items": { "type": "integer", "minimum": 1 } } }] },
                "drop": { "type": "object", "additionalProperties": false, "required": ["from", "to"], "properties": { "from": member, "to": member } },
                "loss": { "type": "object", "additionalProperties": false, "required": ["between", "rate"],
                          "properties": { "between": { "type": "array", "items": { "type": "integer", "minimum": 1 }, "minItems": 2, "maxItems": 2 }, "rate": { "type": "string" } } },
                "delay": { "type": "object", "additionalProperties": false, "required": ["between", "by"],
                           "properties": { "between": { "type": "array", "items": { "type": "integer", "minimum": 1 }, "minItems": 2, "maxItems": 2 }, "by": dur, "jitter": dur } }
            } }
        ]
    });
    let chaos_action = serde_json::json!({
        "description": "a chaos action: a word, or a fault that soak holds for the schedule's `hold` and then lifts",
        "anyOf": [
            { "enum": ACTIONS.iter().filter(|a| !matches!(**a, "network" | "io_errors" | "io_delay")).collect::<Vec<_>>() },
            { "type": "object", "minProperties": 1, "maxProperties": 1, "additionalProperties": false,
              "properties": { "network": network, "power_cut": power_cut, "disk_full": disk_full, "io_errors": io_errors, "io_delay": io_delay,
                              "kill": kill_member, "pause": pause_member, "stop": start_member, "start": start_member,
                              "restart": start_member, "partition": partition } }
        ]
    });
    json_schema!({
        "description": format!("A phase: {}", PHASES.join(", ")),
        "anyOf": [
            { "enum": ["load", "start", "stop", "restart", "verify", "kill", "power_cut", "disk_full", "heal"] },
            { "type": "object", "minProperties": 1, "maxProperties": 1, "additionalProperties": false,
              "properties": {
                "run": { "description": "a duration (30s), or until the load has had this many operations acknowledged: { ops: 1000000, max: 10m }",
                        "anyOf": [dur, { "type": "object", "additionalProperties": false, "required": ["ops"],
                                         "properties": { "ops": count, "max": dur } }] },
                "pause": { "anyOf": [dur, pause_member] }, "wait": dur, "kill": { "anyOf": [sig, kill_member] }, "limit": size,
                "start": start_member, "stop": start_member, "restart": start_member,
                "partition": partition,
                "load": { "const": "all" },
                "verify": { "enum": ["acknowledged-writes", "online", "offline"] },
                "upgrade": { "description": "a name under `versions:`; for a cluster's members, { to: NAME, member: M } (one member at a time)",
                             "anyOf": [{ "type": "string" }, on_member(serde_json::json!({ "member": member, "to": { "type": "string" } }))] },
                "downgrade": { "type": "string", "description": "a name under `versions:`" },
                "network": network,
                "service": { "type": "object", "additionalProperties": false, "required": ["name", "action"],
                    "description": "kill, stop, start or restart one of the suite's services",
                    "properties": { "name": { "type": "string", "description": "a name under `services:`" },
                                    "action": { "enum": ["kill", "stop", "start", "restart"] } } },
                "power_cut": power_cut,
                "disk_full": disk_full,
                "io_errors": io_errors,
                "io_delay": io_delay,
                "exec": { "anyOf": [argv, { "type": "object", "additionalProperties": false, "required": ["command"],
                    "properties": { "command": argv, "timeout": dur, "expect": { "type": "integer" },
                        "throughput": throughput } }] },
                "repeat": { "type": "object", "additionalProperties": false, "required": ["times", "phases"],
                    "properties": { "times": count, "phases": { "type": "array", "items": phase } } },
                "chaos": { "type": "object", "additionalProperties": false, "required": ["during", "every"],
                    "properties": {
                        "during": dur,
                        "every": { "type": "string", "description": "MIN..MAX between actions, e.g. 30s..2m" },
                        "actions": { "type": "array", "minItems": 1, "items": chaos_action },
                        "seed": count, "pause": dur, "hold": dur, "signal": sig
                    } }
              } }
        ]
    })
});

/// The schema of a whole suite, as pretty JSON.
pub fn suite_schema() -> String {
    let schema = schemars::schema_for!(Suite);
    serde_json::to_string_pretty(&schema).expect("a schema serializes")
}
