//! `klock-conformance PATH...`: runs the vector files and directories named, prints one line
//! per vector and `N passed, M failed`, and exits non-zero on any failure or on zero vectors.

use std::process::ExitCode;

fn main() -> ExitCode {
    let paths: Vec<String> = std::env::args().skip(1).collect();
    if paths.is_empty() || paths.iter().any(|p| p == "-h" || p == "--help") {
        eprintln!(
            "usage: klock-conformance PATH...   (vector files, or directories of *.json vectors)"
        );
        return ExitCode::from(2);
    }
    let summary = klock_conformance::run_paths(&paths);
    for line in summary.lines() {
        println!("{line}");
    }
    if summary.results.is_empty() {
        eprintln!("no vectors found in {}", paths.join(" "));
    }
    if summary.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
