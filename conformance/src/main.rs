//! `klock-conformance [--scripts DIR] PATH...`: checks the vector files and directories named
//! against the kernel, prints one line per vector and `N passed, M failed`, and exits non-zero
//! on any failure or on zero vectors. With `--scripts DIR` it also writes each passing
//! vector's resolved script (`docs/VECTORS.md`) to `DIR/<vector file name>`, for the hosts'
//! replayers.

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage: klock-conformance [--scripts DIR] PATH...
  PATH           vector files, or directories of *.json vectors
  --scripts DIR  also write each vector's resolved script into DIR (created if missing)";

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mut scripts: Option<PathBuf> = None;
    let mut paths = Vec::new();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            "--scripts" => match args.next() {
                Some(dir) => scripts = Some(PathBuf::from(dir)),
                None => return usage_error("--scripts needs a directory"),
            },
            flag if flag.starts_with('-') => {
                return usage_error(&format!("unknown option {flag}"))
            }
            _ => paths.push(arg),
        }
    }
    if paths.is_empty() {
        return usage_error("name at least one vector file or directory");
    }
    let summary = match &scripts {
        Some(dir) => klock_conformance::resolve_paths(&paths, dir),
        None => klock_conformance::run_paths(&paths),
    };
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

fn usage_error(why: &str) -> ExitCode {
    eprintln!("klock-conformance: {why}\n{USAGE}");
    ExitCode::from(2)
}
