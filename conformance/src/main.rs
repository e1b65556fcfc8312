//! `klock-conformance [--scripts DIR] PATH...`: checks the vector files and directories named
//! against the kernel, prints one line per vector and `N passed, M failed`, and exits non-zero
//! on any failure or on zero vectors. With `--scripts DIR` it also writes each passing
//! vector's resolved script (`docs/VECTORS.md`) to `DIR/<vector file name>`, for the hosts'
//! replayers; `--mutants DIR` (with `--scripts`) then writes the scripts' mutants there, each
//! a script with one recorded value changed, which every replayer must fail.

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage: klock-conformance [--scripts DIR] PATH...
  PATH           vector files, or directories of *.json vectors
  --scripts DIR  also write each vector's resolved script into DIR (created if missing)
  --mutants DIR  with --scripts: write one mutant per recorded field path into DIR";

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mut scripts: Option<PathBuf> = None;
    let mut mutants: Option<PathBuf> = None;
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
            "--mutants" => match args.next() {
                Some(dir) => mutants = Some(PathBuf::from(dir)),
                None => return usage_error("--mutants needs a directory"),
            },
            flag if flag.starts_with('-') => return usage_error(&format!("unknown option {flag}")),
            _ => paths.push(arg),
        }
    }
    if mutants.is_some() && scripts.is_none() {
        return usage_error("--mutants needs --scripts (mutants are made from the scripts)");
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
    if let (true, Some(scripts), Some(out)) = (summary.ok(), &scripts, &mutants) {
        match klock_conformance::write_mutants(scripts, out) {
            Ok(n) => eprintln!("{n} mutants written to {}", out.display()),
            Err(e) => {
                eprintln!("klock-conformance: {e}");
                return ExitCode::FAILURE;
            }
        }
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
