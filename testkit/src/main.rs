//! `klock-testkit`: the test kit's programs, for the tests of other languages and for runs by
//! hand.
//!
//! ```text
//! klock-testkit serve [--listen 127.0.0.1:0]   # the resettable manual-clock server
//! klock-testkit conformance PATH...             # every vector through the HTTP API
//! klock-testkit conformance --cluster KLOCK PATH...  # ... through three-node clusters
//! klock-testkit link --to PORT                  # a link to cut, delay, freeze, restore
//! ```

use klock_testkit::{conformance, manual::ManualServer};
use std::net::SocketAddr;
use std::process::ExitCode;

const USAGE: &str = "\
usage: klock-testkit COMMAND [FLAGS]

  serve [--listen ADDR:PORT]
                the server the client tests replay scenarios on: `klock serve --memory
                --clock manual` (default 127.0.0.1:0, a free port) plus POST /v1/reset,
                whose body (a whole kernel config) starts it over with that config; prints
                `klock-testkit: listening on http://ADDR:PORT`
  conformance PATH...
                every conformance vector named (files, or directories of *.json) through the
                HTTP API of such a server, started in this process; one line per vector and
                `N passed, M failed`; exits 1 on any failure
  conformance --cluster KLOCK PATH...
                the same through a three-node cluster of the `klock` binary KLOCK for each
                vector (its config, --clock manual), through a follower; the nodes' state
                hashes must then be equal
  link --to PORT
                a TCP link to 127.0.0.1:PORT that the remote scenarios cut: prints
                `klock-testkit: link on 127.0.0.1:LPORT`, then reads one command a line on
                stdin (cut, restore, delay MS, freeze, drop-next), answering `ok` or
                `error: WHY` once it took effect; ends with stdin

Example:
  klock-testkit conformance tests/vectors";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let done = match args.first().map(String::as_str) {
        Some("serve") => serve(&args[1..]),
        Some("conformance") => run_conformance(&args[1..]),
        Some("link") => link(&args[1..]),
        Some("--help" | "-h" | "help") | None => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Some(other) => Err(format!("unknown command {other:?}")),
    };
    match done {
        Ok(code) => code,
        Err(e) => {
            eprintln!("klock-testkit: {e}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn serve(args: &[String]) -> Result<ExitCode, String> {
    let listen: SocketAddr = match args {
        [] => SocketAddr::from(([127, 0, 0, 1], 0)),
        [flag, value] if flag == "--listen" => value
            .parse()
            .map_err(|_| format!("--listen needs ADDR:PORT, got {value:?}"))?,
        _ => return Err(format!("serve takes only --listen ADDR:PORT, got {args:?}")),
    };
    let server = match ManualServer::start(listen) {
        Ok(server) => server,
        Err(e) => {
            eprintln!("klock-testkit serve: {e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    println!("klock-testkit: listening on http://{}", server.addr());
    server.serve_until_interrupted();
    Ok(ExitCode::SUCCESS)
}

fn link(args: &[String]) -> Result<ExitCode, String> {
    let target: u16 = match args {
        [flag, port] if flag == "--to" => port
            .parse()
            .map_err(|_| format!("--to needs a port number, got {port:?}"))?,
        _ => return Err(format!("link takes only --to PORT, got {args:?}")),
    };
    match klock_testkit::link_process::run(target) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => {
            eprintln!("klock-testkit link: {e}");
            Ok(ExitCode::FAILURE)
        }
    }
}

fn run_conformance(paths: &[String]) -> Result<ExitCode, String> {
    if paths.is_empty() {
        return Err(String::from(
            "conformance: name vector files or directories",
        ));
    }
    let ran = match paths {
        [flag, klock, rest @ ..] if flag == "--cluster" => {
            if rest.is_empty() {
                return Err(String::from(
                    "conformance --cluster KLOCK: name vector files or directories",
                ));
            }
            Ok(conformance::run_cluster(std::path::Path::new(klock), rest))
        }
        [flag] if flag == "--cluster" => {
            return Err(String::from("--cluster needs the klock binary to run"))
        }
        _ => conformance::run(paths),
    };
    match ran {
        Ok(summary) => {
            for line in summary.lines() {
                println!("{line}");
            }
            Ok(if summary.ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Err(e) => {
            eprintln!("klock-testkit conformance: {e}");
            Ok(ExitCode::FAILURE)
        }
    }
}
