//! `klock-testkit conformance` runs vectors through a server it starts itself, and fails a
//! vector whose expectations the server does not meet (so a green run means something).

use std::process::Command;

fn run(paths: &[&std::path::Path]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_klock-testkit"))
        .arg("conformance")
        .args(paths)
        .output()
        .expect("run klock-testkit conformance");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.success(), text)
}

#[test]
fn every_vector_passes_through_http() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/vectors");
    let (ok, text) = run(&[&dir]);
    let last = text.lines().last().unwrap_or_default().to_owned();
    assert!(ok, "{text}");
    assert!(
        last.ends_with("passed, 0 failed") && !last.starts_with("0 "),
        "{last}"
    );
}

#[test]
fn a_vector_the_server_does_not_meet_fails() {
    let dir = tempfile::tempdir().unwrap();
    let wrong = dir.path().join("wrong.json");
    std::fs::write(
        &wrong,
        r#"{"name": "a second writer is not granted", "spec": "docs/SPEC.md §4", "config": {},
            "steps": [
              {"now": 0, "do": "open", "agent": "a", "as": "A"},
              {"now": 0, "do": "open", "agent": "b", "as": "B"},
              {"now": 1, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/x"], "expect": {"verdict": "GRANTED", "events": [{"event": "ACQUIRED"}]}},
              {"now": 2, "do": "acquire", "session": "B", "intents": ["MUTATES FILE:/x"], "expect": {"verdict": "GRANTED", "events": [{"event": "ACQUIRED"}]}}
            ]}"#,
    )
    .unwrap();
    let (ok, text) = run(&[&wrong]);
    assert!(!ok, "{text}");
    assert!(
        text.contains("FAIL") && text.contains("step 4") && text.contains("0 passed, 1 failed"),
        "{text}"
    );
}
