//! `klock`: the control plane's command line. It parses arguments and composes: `serve` is
//! the server library's [`klock_server::serve::serve`], the agent tools are `klock-agent`'s.
//!
//! ```text
//! klock --version
//! klock serve [--config FILE] [--listen 127.0.0.1:7300] [--data FILE | --memory] ...
//! klock backup [--server URL | --socket PATH] FILE
//! klock restore --data FILE BACKUP
//! klock token-hash < SECRET
//! klock exec [flags] --intent I... -- COMMAND...
//! klock elect NAME [flags] -- COMMAND...
//! klock mcp [flags]
//! klock status [flags]
//! klock reconcile --digest FILE [flags]
//! klock cluster init|status|add|voters|remove --node URL --cluster-secret-file FILE ...
//! ```

mod allocator;

/// mimalloc for `klock serve` (glibc's malloc/free took about 15 % of the server's CPU per
/// request, issue 23), the C library's for the short-lived tools, whose start mimalloc's
/// arena made dearer (issue 27): allocator.rs.
#[global_allocator]
static GLOBAL: allocator::ByCommand = allocator::ByCommand;

use klock_cli::serve_args;
use klock_server::auth;
use std::process::ExitCode;

/// `println!` that ignores a closed standard output (`klock --help | head -1`): the reader
/// has what it wanted, and a panic there would print a backtrace hint for nothing.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

const USAGE: &str = "\
usage: klock COMMAND [FLAGS]   (klock COMMAND --help shows a command's flags and examples)

  serve         the control plane: the kernel behind an HTTP API, durable in a redb file
  backup        an online backup of a running server into a file (admin token)
  restore       a new data file from a backup, for klock serve --data
  exec          run a command holding leases, like flock(1) but shared and deadlock-free
  elect         run a command only while this process leads an election
  mcp           an MCP server on stdio for one LLM agent
  status        who holds what, queues, most contended resources, ghost agents
  reconcile     the server's truth about a session saved with --digest
  token-hash    the sha256 a token file lists for a secret
  cluster       a replicated cluster's membership and status (klock serve --node-id)

klock --version (or -V) prints the version and the git commit it was built from.";

const BACKUP_HELP: &str = "\
usage: klock backup [--server URL | --socket PATH] [--token T] FILE

Writes an online backup of a running server to FILE (readable by its owner only): the state
after the last committed entry, taken while the server keeps serving (GET /v1/backup). A
server with a token file needs an admin token ($KLOCK_TOKEN, or --token).

  --server URL     the server, http://HOST:PORT (default $KLOCK_SERVER, else http://127.0.0.1:7300)
  --socket PATH    the server's Unix socket instead (default $KLOCK_SOCKET)
  --token T        bearer token (default $KLOCK_TOKEN, which `ps` does not show: prefer it)

Restore with: klock restore --data NEW.redb FILE, then klock serve --data NEW.redb

Example:
  KLOCK_TOKEN=$ADMIN klock backup --server http://127.0.0.1:7300 klock-$(date +%F).backup";

const RESTORE_HELP: &str = "\
usage: klock restore --data FILE BACKUP

Makes the new data file FILE (and FILE.log) from BACKUP, a file `klock backup` wrote; FILE
must not exist. The state is the backup's, with fences, log indexes and server time moved
past anything the server it came from can have issued since it was taken (a fence is never
given out twice). Then serve it with klock serve --data FILE and the backup's kernel
settings (a different --config is refused, naming each setting).

Example:
  klock restore --data /var/lib/klock/klock.redb klock-2026-11-28.backup";

const TOKEN_HASH_HELP: &str = "\
usage: klock token-hash < SECRET

Reads a secret on standard input and prints the hex SHA-256 to put in a token file's
`sha256` field (the server never stores the secret itself).

Example:
  printf %s \"$AGENT_TOKEN\" | klock token-hash";

fn main() -> ExitCode {
    klock_server::about::set_commit(env!("KLOCK_BUILD_COMMIT"));
    let args: Vec<String> = std::env::args().skip(1).collect();
    let help = |text: &str| {
        out!("{text}");
        ExitCode::SUCCESS
    };
    match args.first().map(String::as_str) {
        Some("--version" | "-V") => return help(&klock_server::about::long_version()),
        Some("serve") if wants_help(&args[1..]) => return help(&serve_args::help()),
        Some("backup") if wants_help(&args[1..]) => return help(BACKUP_HELP),
        Some("restore") if wants_help(&args[1..]) => return help(RESTORE_HELP),
        Some("backup") => return backup(&args[1..]),
        Some("restore") => return restore(&args[1..]),
        Some("token-hash") if wants_help(&args[1..]) => return help(TOKEN_HASH_HELP),
        Some("serve") => {}
        Some("token-hash") => return token_hash(),
        Some("exec") => return exec("exec", &args[1..]),
        Some("elect") => return exec("elect", &args[1..]),
        Some("mcp") => return mcp(&args[1..]),
        Some("status") => return overview("status", &args[1..]),
        Some("reconcile") => return overview("reconcile", &args[1..]),
        Some("cluster") => return cluster(&args[1..]),
        Some("--help" | "-h" | "help") | None => return help(USAGE),
        Some(other) => {
            eprintln!("klock: unknown command {other:?}\n{USAGE}");
            return ExitCode::from(2);
        }
    }
    let serve = match serve_args::parse(&args[1..]) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("klock serve: {e}\n(klock serve --help shows every flag)");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = klock_server::logging::init(&serve.log) {
        eprintln!("klock serve: {e}");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(serve.workers)
        .thread_name("klock-worker")
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("klock serve: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(klock_server::serve::serve(serve)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("klock serve: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Reads a secret on standard input and prints the SHA-256 a token file lists for it.
fn token_hash() -> ExitCode {
    let mut secret = String::new();
    if let Err(e) = std::io::Read::read_to_string(&mut std::io::stdin(), &mut secret) {
        eprintln!("klock token-hash: cannot read the secret: {e}");
        return ExitCode::FAILURE;
    }
    let secret = secret.trim_end_matches(['\n', '\r']);
    if secret.is_empty() {
        eprintln!("klock token-hash: give the secret on standard input\n{TOKEN_HASH_HELP}");
        return ExitCode::from(2);
    }
    out!("{}", auth::hex(&auth::digest(secret)));
    ExitCode::SUCCESS
}

/// A runtime for one agent tool. `klock exec` and `klock elect` run on this thread alone: a
/// few requests and a command to wait for need no workers, whose start and cross-thread
/// hand-offs (about 70 context switches a run) were a measured part of their cost
/// (docs/DECISIONS.md, "A lean transport"). The others keep two workers (`klock mcp`'s stdin
/// read blocks one).
fn tool_runtime(tool: &str) -> Result<tokio::runtime::Runtime, ExitCode> {
    let mut builder = if matches!(tool, "exec" | "elect") {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut workers = tokio::runtime::Builder::new_multi_thread();
        workers.worker_threads(2);
        workers
    };
    builder.enable_all().build().map_err(|e| {
        eprintln!("klock {tool}: cannot start the runtime: {e}");
        ExitCode::FAILURE
    })
}

fn wants_help(args: &[String]) -> bool {
    let flags = args.split(|a| a == "--").next().unwrap_or_default();
    flags.iter().any(|a| a == "--help" || a == "-h")
}

/// `klock exec`, or `klock elect` (the same run, for one election's lease).
fn exec(tool: &str, args: &[String]) -> ExitCode {
    use klock_agent::{elect, exec};
    if wants_help(args) {
        let text = if tool == "elect" {
            elect::help()
        } else {
            exec::help()
        };
        out!("{text}");
        return ExitCode::SUCCESS;
    }
    let parsed = if tool == "elect" {
        elect::parse(args)
    } else {
        exec::parse(args)
    };
    let parsed = match parsed {
        Ok(p) => p,
        Err(e) => {
            eprintln!("klock {tool}: {e}\n(klock {tool} --help shows every flag)");
            return ExitCode::from(exec::EXIT_USAGE);
        }
    };
    match tool_runtime(tool) {
        Ok(runtime) => ExitCode::from(runtime.block_on(exec::run(parsed))),
        Err(code) => code,
    }
}

fn overview(tool: &str, args: &[String]) -> ExitCode {
    use klock_agent::overview;
    if wants_help(args) {
        let text = if tool == "status" {
            overview::STATUS_HELP
        } else {
            overview::RECONCILE_HELP
        };
        out!("{}", overview::help(text));
        return ExitCode::SUCCESS;
    }
    let runtime = match tool_runtime(tool) {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    let done = runtime.block_on(async {
        if tool == "status" {
            overview::status(args).await
        } else {
            overview::reconcile(args).await
        }
    });
    match done {
        Ok(text) => {
            use std::io::Write as _;
            let _ = write!(std::io::stdout(), "{text}");
            ExitCode::SUCCESS
        }
        Err((code, message)) => {
            eprintln!("klock {tool}: {message}\n(klock {tool} --help shows every flag)");
            ExitCode::from(code)
        }
    }
}

fn mcp(args: &[String]) -> ExitCode {
    use klock_agent::sidecar;
    if wants_help(args) {
        out!("{}", sidecar::help());
        return ExitCode::SUCCESS;
    }
    let (parsed, notices) = match sidecar::parse(args) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("klock mcp: {e}\n(klock mcp --help shows every flag)");
            return ExitCode::from(2);
        }
    };
    let runtime = match tool_runtime("mcp") {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    let served = runtime.block_on(sidecar::run(parsed, notices));
    // The MCP transport's read of stdin may still block a worker (a host that signals without
    // closing stdin): exit without waiting for it (issue 22, item 21).
    runtime.shutdown_background();
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("klock mcp: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `klock cluster`: one request to a node's `/raft/*` routes (klock_cli::cluster).
fn cluster(args: &[String]) -> ExitCode {
    if wants_help(args) || args.is_empty() {
        out!("{}", klock_cli::cluster::HELP);
        return ExitCode::SUCCESS;
    }
    let runtime = match tool_runtime("cluster") {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    match runtime.block_on(klock_cli::cluster::run(args)) {
        Ok(text) => {
            out!("{text}");
            ExitCode::SUCCESS
        }
        Err(klock_cli::cluster::Failed::Usage(e)) => {
            eprintln!("klock cluster: {e}\n(klock cluster --help shows every flag)");
            ExitCode::from(2)
        }
        Err(klock_cli::cluster::Failed::Request(e)) => {
            eprintln!("klock cluster: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `klock backup`: fetches `GET /v1/backup` and writes it to FILE whole.
fn backup(args: &[String]) -> ExitCode {
    use klock_agent::args::{Connection, Flags};
    let usage = |message: String| {
        eprintln!("klock backup: {message}\n(klock backup --help shows every flag)");
        ExitCode::from(2)
    };
    let mut flags = Flags::new(args);
    let mut connection = Connection::default();
    let mut file = None;
    while let Some((flag, inline)) = flags.next_flag() {
        let taken = match flag {
            "--server" | "--socket" | "--token" => connection.take(&mut flags, flag, inline),
            f if f.starts_with('-') => return usage(format!("unknown flag {f:?}")),
            path if file.is_none() => {
                file = Some(std::path::PathBuf::from(path));
                Ok(true)
            }
            extra => return usage(format!("one FILE only, got {extra:?} too")),
        };
        if let Err(e) = taken {
            return usage(e);
        }
    }
    let Some(file) = file else {
        return usage(String::from("give the FILE to write the backup to"));
    };
    let client = match connection.client() {
        Ok(client) => client,
        Err(e) => return usage(e),
    };
    let runtime = match tool_runtime("backup") {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    let wait = std::time::Duration::from_secs(120);
    let answer = runtime.block_on(client.call("GET", "/v1/backup", None, None, wait));
    let body = match answer {
        Ok(body) => body,
        Err(e) => {
            eprintln!("klock backup: {e}");
            return ExitCode::FAILURE;
        }
    };
    let bytes = body.to_string().into_bytes();
    let checked = klock_server::backup::Backup::decode(&bytes)
        .and_then(|backup| klock_server::backup::write_private(&file, &bytes).map(|()| backup));
    match checked {
        Ok(backup) => {
            out!(
                "klock backup: wrote {} ({} bytes): the state after entry {}, hash {:016x}",
                file.display(),
                bytes.len(),
                backup.snapshot.applied,
                backup.snapshot.hash
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("klock backup: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `klock restore --data FILE BACKUP`.
fn restore(args: &[String]) -> ExitCode {
    let usage = |message: &str| {
        eprintln!("klock restore: {message}\n{RESTORE_HELP}");
        ExitCode::from(2)
    };
    let (mut data, mut backup) = (None, None);
    let mut i = 0;
    while i < args.len() {
        match (args[i].as_str(), args.get(i + 1)) {
            ("--data", Some(v)) => {
                data = Some(std::path::PathBuf::from(v));
                i += 2;
            }
            ("--data", None) => return usage("--data needs a value"),
            (f, _) if f.starts_with('-') => return usage(&format!("unknown flag {f:?}")),
            (path, _) if backup.is_none() => {
                backup = Some(std::path::PathBuf::from(path));
                i += 1;
            }
            (extra, _) => return usage(&format!("one BACKUP only, got {extra:?} too")),
        }
    }
    let (Some(data), Some(backup)) = (data, backup) else {
        return usage("give --data FILE (the new data file) and the BACKUP file");
    };
    match klock_server::backup::restore(&backup, &data) {
        Ok(r) => {
            out!(
                "klock restore: wrote {} from the state after entry {} (hash {:016x}), taken {} ms ago; \
                 fences start at {}, log indexes at {}, server time at {} ms. Serve it with: \
                 klock serve --data {}",
                data.display(),
                r.applied,
                r.hash,
                r.age_ms,
                r.next_fence,
                r.next_index,
                r.server_time_ms,
                data.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("klock restore: {e}");
            ExitCode::FAILURE
        }
    }
}
