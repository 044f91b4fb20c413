//! `soak schema` describes the suites soak accepts: every suite in
//! `suites/` is valid under it, and typical mistakes are not.

use std::path::Path;

fn schema() -> serde_json::Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_soak"))
        .arg("schema")
        .output()
        .unwrap();
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).unwrap()
}

fn as_json(yaml: &str) -> serde_json::Value {
    let v: serde_norway::Value = serde_norway::from_str(yaml).unwrap();
    serde_json::to_value(v).unwrap()
}

#[test]
fn suites_validate_against_the_schema_and_mistakes_do_not() {
    let schema = schema();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut checked = 0;
    for dir in ["suites", "tests/suites"] {
        for e in std::fs::read_dir(root.join(dir)).unwrap().flatten() {
            if e.path().extension().is_none_or(|x| x != "yaml") {
                continue;
            }
            let text = std::fs::read_to_string(e.path()).unwrap();
            let errors: Vec<String> = validator
                .iter_errors(&as_json(&text))
                .map(|e| format!("{} at {}", e, e.instance_path()))
                .collect();
            assert!(errors.is_empty(), "{}: {errors:?}", e.path().display());
            checked += 1;
        }
    }
    assert!(checked >= 4);
    for bad in [
        "unknown-top-key",
        "unknown-node-key",
        "bad-duration",
        "bad-size-unit",
        "unknown-signal",
        "unknown-phase",
        "unknown-allocator",
        "unknown-compression",
        "chaos-unknown-action",
        "mix-unknown-op",
    ] {
        let text =
            std::fs::read_to_string(root.join(format!("tests/malformed/{bad}.yaml"))).unwrap();
        assert!(
            !validator.is_valid(&as_json(&text)),
            "the schema accepts tests/malformed/{bad}.yaml"
        );
    }
}

/// Editors read `suites/soak-suite.schema.json`; it must be what `soak
/// schema` prints (regenerate: `soak schema > suites/soak-suite.schema.json`).
#[test]
fn the_committed_schema_is_current() {
    let committed = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("suites/soak-suite.schema.json"),
    )
    .unwrap();
    let committed: serde_json::Value = serde_json::from_str(&committed).unwrap();
    assert!(committed == schema(), "suites/soak-suite.schema.json is stale: run `cargo run -q --bin soak -- schema > suites/soak-suite.schema.json`");
}

fn summary_schema() -> serde_json::Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_soak"))
        .args(["schema", "--summary"])
        .output()
        .unwrap();
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `summary.schema.json` is the contract of summary.json for users' own
/// tools; it must be what `soak schema --summary` prints.
#[test]
fn the_committed_summary_schema_is_current() {
    let committed =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("summary.schema.json"))
            .unwrap();
    let committed: serde_json::Value = serde_json::from_str(&committed).unwrap();
    assert!(committed == summary_schema(), "summary.schema.json is stale: run `cargo run -q --bin soak -- schema --summary > summary.schema.json`");
}

/// A summary.json written by soak before the engine's redesign (from the
/// run of tests/suites/durable-chaos-reads.yaml, issue 14) still loads
/// through the typed model, and is valid under the committed schema.
#[test]
fn a_summary_of_an_older_soak_still_loads_and_validates() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("tests/data/summary-issue14.json")).unwrap();
    let s: soak::model::Summary = serde_json::from_str(&text).unwrap();
    assert_eq!(s.cells.len(), 1);
    assert!(!s.cells[0].restarts.is_empty());
    let schema = summary_schema();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&value)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
}
