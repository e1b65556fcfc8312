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
    // A vector the kernel does not meet (a second writer granted), shared with the cluster
    // run's test (cli/tests/conformance_cluster.rs).
    let wrong = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/unmet-vector.json");
    let (ok, text) = run(&[&wrong]);
    assert!(!ok, "{text}");
    assert!(
        text.contains("FAIL") && text.contains("step 4") && text.contains("0 passed, 1 failed"),
        "{text}"
    );
}
