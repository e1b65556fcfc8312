//! Runs the project's own vectors (`tests/vectors/` at the workspace root) through the runner:
//! every vector must pass, and there must be at least one.

use std::path::Path;

#[test]
fn project_vectors_pass() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/vectors");
    let summary = klock_conformance::run_paths(&[&dir]);
    let report = summary.lines().join("\n");
    println!("{report}");
    assert!(
        !summary.results.is_empty(),
        "no vectors found in {}",
        dir.display()
    );
    let failing: Vec<String> = summary
        .results
        .iter()
        .filter(|r| !r.passed())
        .map(|r| r.line())
        .collect();
    assert!(
        failing.is_empty(),
        "{} vector(s) failed:\n{}",
        failing.len(),
        failing.join("\n")
    );
}
