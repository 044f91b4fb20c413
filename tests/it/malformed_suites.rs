//! Every malformed suite under `tests/malformed/` is refused with a message
//! that names the file, line, column and path, and says how to fix it. The
//! messages are snapshots: a change to one shows in review.

use std::path::Path;

use soak::suite::Suite;

#[test]
fn malformed_suites_are_refused_with_a_clear_message() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/malformed");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 30,
        "the corpus has only {} suites",
        files.len()
    );
    for file in files {
        let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
        let rel = Path::new("tests/malformed").join(file.file_name().unwrap());
        let text = std::fs::read_to_string(&file).unwrap();
        let err = match Suite::parse(&rel, &text) {
            Ok(_) => panic!("{stem}: the suite was accepted"),
            Err(e) => e,
        };
        assert!(err.line > 0, "{stem}: no line in {err}");
        insta::with_settings!({ snapshot_path => "../malformed/snapshots", prepend_module_to_snapshot => false, omit_expression => true }, {
            insta::assert_snapshot!(stem, err.to_string());
        });
    }
}

#[test]
fn soak_validate_exits_2_on_a_malformed_suite_and_0_on_a_good_one() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_soak"))
        .arg("validate")
        .arg(root.join("tests/malformed/unknown-signal.yaml"))
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    let good = std::process::Command::new(env!("CARGO_BIN_EXE_soak"))
        .arg("validate")
        .arg(root.join("suites/smoke.yaml"))
        .output()
        .unwrap();
    assert_eq!(
        good.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&good.stderr)
    );
}
