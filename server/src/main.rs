//! `klock`: the control plane's command line.
//!
//! ```text
//! klock serve [--listen 127.0.0.1:7300] [--data FILE | --memory] [--clock manual]
//!             [--snapshot-every N]
//! klock conformance --spawn PATH...
//! klock exec [flags] --intent I... -- COMMAND...
//! klock mcp [flags]
//! klock status [flags]
//! klock reconcile --digest FILE [flags]
//! ```

use klock_core::{Config, Policy};
use klock_server::api::{self, Api};
use klock_server::auth::{self, Auth};
use klock_server::conn::{self, ConnLimits};
use klock_server::engine::{self, Clock, EngineConfig};
use klock_server::events::EventHub;
use klock_server::guard::{self, RequestGuard};
use klock_server::history::History;
use klock_server::machine::Machine;
use klock_server::metrics::Metrics;
use klock_server::recovery::recover;
use klock_server::store::Store;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

const USAGE: &str = "\
usage: klock COMMAND [FLAGS]   (klock COMMAND --help shows a command's flags and examples)

  serve         the control plane: the kernel behind an HTTP API, durable in a redb file
  exec          run a command holding leases, like flock(1) but shared and deadlock-free
  mcp           an MCP server on stdio for one LLM agent
  status        who holds what, queues, most contended resources, ghost agents
  reconcile     the server's truth about a session saved with --digest
  conformance   every conformance vector through the HTTP API of a server it starts
  token-hash    the sha256 a token file lists for a secret";

const SERVE_HELP: &str = "\
usage: klock serve [--listen ADDR:PORT | --socket PATH] [--data FILE | --memory]
                   [--config NAME=VALUE]... [--tokens FILE] [--tls-cert FILE --tls-key FILE]
                   [--insecure] [--clock manual] [--snapshot-every N] [--history N]
                   [--dashboard [--dashboard-pkg DIR]] [--allow-origin ORIGIN]...
                   [--max-sessions-per-token N] [--max-sessions-per-namespace N]
                   [--idempotency-bytes N]
                   [--event-bytes N]
                   [--max-connections N] [--max-connections-per-peer N]
                   [--header-timeout-ms MS] [--idle-timeout-ms MS]
                   [--max-requests-per-connection N] [--max-request-ids N]
                   [--max-batch-items N] [--accept-log-loss]

Serves the Klock kernel over HTTP (/v1, OpenAPI at /v1/openapi.json). Nothing is answered
before it is in the log on disk; a restarted server resumes where its log ends.

  --listen ADDR:PORT   where to listen (default 127.0.0.1:7300; port 0 picks a free one).
                       Beyond loopback it needs --tokens, and TLS unless --insecure.
  --socket PATH        serve on a Unix socket instead (file permissions guard it); only a
                       stale socket at PATH is replaced, anything else is refused
  --tls-cert FILE, --tls-key FILE
                       serve HTTPS with this certificate chain and private key (PEM)
  --insecure           allow a non-loopback listener without TLS
  --tokens FILE        bearer tokens (JSON: name, sha256, role, namespaces, limits); without
                       it the server asks for none
  --data FILE          the redb data file (log + snapshot), created if missing
                       (default ./klock.redb)
  --memory             keep everything in memory: nothing survives a restart
  --config NAME=VALUE  a kernel setting instead of its default (docs/SPEC.md); repeat it.
                       A data file keeps the settings it was created with and refuses
                       others. NAME is policy (wait_die, wound_wait, lanes, detect) or a number:
{numeric_fields}
  --clock manual       every request carries Klock-Now (conformance runs; needs --memory)
  --snapshot-every N   store a snapshot and drop the log behind it every N entries
                       (default 10000; 0 never)
  --history N          keep about the last N kernel steps in memory for replay
                       (GET /v1/ns/{ns}/history); default: 200000 with --dashboard,
                       none otherwise (keeping it costs batch throughput)
  --dashboard          serve the dashboard page at /dashboard/ (live view: /dashboard/?live)
  --dashboard-pkg DIR  the wasm package the page's simulation and replay load (default:
                       bindings/wasm/pkg-web of the source tree this binary was built from;
                       built by bash bindings/wasm/build.sh)
  --allow-origin ORIGIN
                       let a page served from ORIGIN (exactly, e.g. http://127.0.0.1:8080)
                       read this server from a browser (CORS); repeat it. By default none.
                       Without --tokens, a TCP server answers only requests whose Host is
                       localhost, 127.0.0.1 or [::1] (403 HOST_NOT_ALLOWED);
                       a POST's body must be Content-Type: application/json (415).
  --max-connections N  connections at once (default 1024); at the cap the least recently
                       used idle one is closed, or a new one refused (503)
  --max-connections-per-peer N
                       connections from one IP address (default 256)
  --header-timeout-ms MS
                       time a request's head, its body, or a TLS handshake may take
                       (default 10000)
  --idle-timeout-ms MS close a connection idle this long (default 60000)
  --max-requests-per-connection N
                       requests one connection serves before it is closed (default 10000)
  --max-request-ids N  lease ids one heartbeat or reconcile may name (default: the kernel's
                       max_leases_per_session); 413 TOO_MANY_IDS beyond
  --max-batch-items N  lease ids and intents one batch may carry in all (default 4096)
  --accept-log-loss    start from a data file whose log is missing or is another file's
                       (refused otherwise): the history after its last snapshot is lost,
                       but fences and server time still never go back
  --max-sessions-per-token N, --max-sessions-per-namespace N
                       open sessions at once per bearer token (default 1000) and per
                       namespace (default 10000); an open over either is 429
  --idempotency-bytes N
                       bytes of remembered idempotency answers (default 67108864); past it
                       the oldest answers are dropped and their retries are 409
  --event-bytes N      bytes of events kept for the event streams, oldest dropped first
                       (a reader behind them is told of the gap; default 67108864, 64 MiB)

Examples:
  klock serve                                   # loopback, ./klock.redb
  klock serve --data /var/lib/klock/klock.redb --socket /run/klock.sock
  klock serve --config policy=wound_wait --config default_ttl_ms=30000
  klock serve --listen 0.0.0.0:7300 --tokens tokens.json --tls-cert c.pem --tls-key k.pem";

const CONFORMANCE_HELP: &str = "\
usage: klock conformance --spawn PATH...

Starts a manual-clock, in-memory `klock serve` on a free loopback port, runs every vector
named (files, or directories of *.json) through its HTTP API, stops it, and prints one line
per vector and `N passed, M failed`; exits 1 on any failure.

Example:
  klock conformance --spawn tests/vectors";

const TOKEN_HASH_HELP: &str = "\
usage: klock token-hash < SECRET

Reads a secret on standard input and prints the hex SHA-256 to put in a token file's
`sha256` field (the server never stores the secret itself).

Example:
  printf %s \"$AGENT_TOKEN\" | klock token-hash";

/// `klock serve --help`, with the kernel's own list of numeric settings.
fn serve_help() -> String {
    let mut lines = Vec::new();
    let mut line = String::new();
    for name in Config::NUMERIC_FIELDS {
        if !line.is_empty() && line.len() + 1 + name.len() > 66 {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(name);
    }
    lines.push(line);
    let indented: Vec<String> = lines.iter().map(|l| format!("{:23}{l}", "")).collect();
    SERVE_HELP.replace("{numeric_fields}", &indented.join("\n"))
}

struct ServeArgs {
    listen: SocketAddr,
    tokens: Option<PathBuf>,
    /// Certificate chain and private key (PEM) to serve HTTPS.
    tls: Option<(PathBuf, PathBuf)>,
    insecure: bool,
    /// A Unix socket to serve on instead of TCP.
    socket: Option<PathBuf>,
    data: Option<PathBuf>,
    manual_clock: bool,
    snapshot_every: u64,
    /// Kernel steps kept for replay.
    /// Kernel steps kept for replay (`--history N`; without it, the history's default with
    /// `--dashboard` and none otherwise).
    history: usize,
    /// `--dashboard`: the wasm package directory the page loads.
    dashboard: Option<PathBuf>,
    /// `--allow-origin`: browser origins that may read the server (CORS).
    origins: Vec<String>,
    /// The kernel's configuration: the SPEC's defaults, changed by `--config`.
    config: Config,
    /// `--max-sessions-per-token`, `--max-sessions-per-namespace`.
    caps: klock_server::machine::SessionCaps,
    /// `--idempotency-bytes`.
    idempotency_bytes: usize,
    /// `--event-bytes`: the byte budget of the events kept for the streams.
    event_bytes: usize,
    /// How much work one request may give the engine (`--max-request-ids`, `--max-batch-items`).
    work: api::WorkLimits,
    /// Connection bounds (`--max-connections`, `--header-timeout-ms`, ...).
    conn: ConnLimits,
    /// `--accept-log-loss`: start from a data file whose log is missing (see recovery.rs).
    accept_log_loss: bool,
}

/// Applies one `--config NAME=VALUE`: `policy`, or a numeric field, named as the kernel names
/// them (the list is the core's, so a new field needs no change here).
fn set_config(config: &mut Config, assignment: &str) -> Result<(), String> {
    let Some((name, value)) = assignment.split_once('=') else {
        return Err(format!("--config needs NAME=VALUE, got {assignment:?}"));
    };
    if name == "policy" {
        config.policy = Policy::parse(value).map_err(|e| format!("--config: {}", e.message))?;
        return Ok(());
    }
    let number = value
        .parse::<u64>()
        .map_err(|_| format!("--config {name} needs a whole number, got {value:?}"))?;
    config
        .set_number(name, number)
        .map_err(|e| format!("--config: {}", e.message))
}

fn parse_serve(args: &[String]) -> Result<ServeArgs, String> {
    let mut out = ServeArgs {
        listen: "127.0.0.1:7300".parse().expect("default address"),
        tokens: None,
        tls: None,
        insecure: false,
        socket: None,
        data: Some(PathBuf::from("klock.redb")),
        manual_clock: false,
        snapshot_every: 10_000,
        history: 0,
        dashboard: None,
        origins: Vec::new(),
        config: Config::default(),
        caps: klock_server::machine::SessionCaps {
            per_owner: klock_server::api::DEFAULT_SESSIONS_PER_TOKEN,
            per_namespace: klock_server::api::DEFAULT_SESSIONS_PER_NAMESPACE,
        },
        idempotency_bytes: klock_server::machine::DEFAULT_ANSWER_BYTES,
        event_bytes: klock_server::events::DEFAULT_BUDGET,
        work: api::WorkLimits::for_config(&Config::default()),
        conn: ConnLimits::default(),
        accept_log_loss: false,
    };
    let (mut max_ids, mut max_batch_items) = (None, None);
    let mut dashboard = false;
    let mut dashboard_pkg = None;
    let mut history = None;
    let mut memory = false;
    let (mut cert, mut key) = (None, None);
    let mut data_given = false;
    let mut i = 0;
    while i < args.len() {
        let flag = args[i].as_str();
        let value = || {
            args.get(i + 1)
                .map(String::as_str)
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match flag {
            "--listen" => {
                let v = value()?;
                out.listen = v
                    .parse()
                    .map_err(|_| format!("--listen needs ADDR:PORT, got {v:?}"))?;
                i += 2;
            }
            "--data" => {
                out.data = Some(PathBuf::from(value()?));
                data_given = true;
                i += 2;
            }
            "--tls-cert" => {
                cert = Some(PathBuf::from(value()?));
                i += 2;
            }
            "--tls-key" => {
                key = Some(PathBuf::from(value()?));
                i += 2;
            }
            "--insecure" => {
                out.insecure = true;
                i += 1;
            }
            "--socket" => {
                out.socket = Some(PathBuf::from(value()?));
                i += 2;
            }
            "--tokens" => {
                out.tokens = Some(PathBuf::from(value()?));
                i += 2;
            }
            "--memory" => {
                memory = true;
                i += 1;
            }
            "--clock" => match value()? {
                "manual" => {
                    out.manual_clock = true;
                    i += 2;
                }
                "monotonic" => i += 2,
                v => return Err(format!("--clock is manual or monotonic, got {v:?}")),
            },
            "--config" => {
                set_config(&mut out.config, value()?)?;
                i += 2;
            }
            "--snapshot-every" => {
                let v = value()?;
                out.snapshot_every = v
                    .parse()
                    .map_err(|_| format!("--snapshot-every needs a whole number, got {v:?}"))?;
                i += 2;
            }
            "--history" => {
                let v = value()?;
                history =
                    Some(v.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                        format!("--history needs a whole number above 0, got {v:?}")
                    })?);
                i += 2;
            }
            "--event-bytes" => {
                let v = value()?;
                out.event_bytes = v.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                    format!("--event-bytes needs a whole number of bytes above 0, got {v:?}")
                })?;
                i += 2;
            }
            "--dashboard" => {
                dashboard = true;
                i += 1;
            }
            "--allow-origin" => {
                let v = value()?;
                klock_server::dashboard::check_origin(v)?;
                out.origins.push(v.to_owned());
                i += 2;
            }
            "--dashboard-pkg" => {
                dashboard_pkg = Some(PathBuf::from(value()?));
                i += 2;
            }
            "--max-sessions-per-token" | "--max-sessions-per-namespace" | "--idempotency-bytes" => {
                let v = value()?;
                let n: u32 = v
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| format!("{flag} needs a whole number above 0, got {v:?}"))?;
                match flag {
                    "--max-sessions-per-token" => out.caps.per_owner = n,
                    "--max-sessions-per-namespace" => out.caps.per_namespace = n,
                    _ => out.idempotency_bytes = n as usize,
                }
                i += 2;
            }
            "--max-request-ids" => {
                max_ids = Some(positive(flag, value()?)?);
                i += 2;
            }
            "--max-batch-items" => {
                max_batch_items = Some(positive(flag, value()?)?);
                i += 2;
            }
            "--max-connections" => {
                out.conn.max_total = positive(flag, value()?)?;
                i += 2;
            }
            "--max-connections-per-peer" => {
                out.conn.max_per_peer = positive(flag, value()?)?;
                i += 2;
            }
            "--header-timeout-ms" => {
                out.conn.header_timeout = Duration::from_millis(positive(flag, value()?)? as u64);
                i += 2;
            }
            "--idle-timeout-ms" => {
                out.conn.idle_timeout = Duration::from_millis(positive(flag, value()?)? as u64);
                i += 2;
            }
            "--max-requests-per-connection" => {
                out.conn.max_requests = positive(flag, value()?)? as u64;
                i += 2;
            }
            "--accept-log-loss" => {
                out.accept_log_loss = true;
                i += 1;
            }
            _ => return Err(format!("unknown argument {flag:?}")),
        }
    }
    out.config
        .validate()
        .map_err(|e| format!("--config: {}", e.message))?;
    out.work = api::WorkLimits::for_config(&out.config);
    if let Some(n) = max_ids {
        out.work.max_ids = n;
    }
    if let Some(n) = max_batch_items {
        out.work.max_batch_items = n;
    }
    if dashboard_pkg.is_some() && !dashboard {
        return Err(String::from("--dashboard-pkg goes with --dashboard"));
    }
    // Keeping a history costs throughput (history.rs): by default only for the dashboard.
    out.history = history.unwrap_or(if dashboard {
        klock_server::history::DEFAULT_CAPACITY
    } else {
        0
    });
    if dashboard {
        out.dashboard =
            Some(dashboard_pkg.unwrap_or_else(klock_server::dashboard::default_pkg_dir));
    }
    if memory && data_given {
        return Err(String::from("--memory and --data exclude each other"));
    }
    if memory {
        out.data = None;
    }
    if out.accept_log_loss && out.data.is_none() {
        return Err(String::from(
            "--accept-log-loss goes with a data file (--data), not --memory",
        ));
    }
    if out.manual_clock && out.data.is_some() {
        return Err(String::from(
            "--clock manual needs --memory: a log of hand-set times is no history to keep",
        ));
    }
    if out.socket.is_some() && (cert.is_some() || key.is_some()) {
        return Err(String::from(
            "--socket serves plain HTTP to local users: it does not take --tls-cert",
        ));
    }
    out.tls = match (cert, key) {
        (Some(c), Some(k)) => Some((c, k)),
        (None, None) => None,
        _ => return Err(String::from("--tls-cert and --tls-key go together")),
    };
    if !out.listen.ip().is_loopback() {
        if out.tokens.is_none() {
            return Err(format!(
                "refusing to listen on {} without --tokens: beyond loopback every caller needs a bearer token",
                out.listen
            ));
        }
        if out.tls.is_none() && !out.insecure {
            return Err(format!(
                "refusing to listen on {} without TLS: give --tls-cert and --tls-key (or --insecure to send tokens in the clear)",
                out.listen
            ));
        }
    }
    Ok(out)
}

/// A flag's whole number above 0.
fn positive(flag: &str, v: &str) -> Result<usize, String> {
    v.parse()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("{flag} needs a whole number above 0, got {v:?}"))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let help = |text: &str| {
        println!("{text}");
        ExitCode::SUCCESS
    };
    match args.first().map(String::as_str) {
        Some("serve") if wants_help(&args[1..]) => return help(&serve_help()),
        Some("conformance") if wants_help(&args[1..]) => return help(CONFORMANCE_HELP),
        Some("token-hash") if wants_help(&args[1..]) => return help(TOKEN_HASH_HELP),
        Some("serve") => {}
        Some("conformance") => return conformance(&args[1..]),
        Some("token-hash") => return token_hash(),
        Some("exec") => return exec(&args[1..]),
        Some("mcp") => return mcp(&args[1..]),
        Some("status") => return overview("status", &args[1..]),
        Some("reconcile") => return overview("reconcile", &args[1..]),
        Some("--help" | "-h" | "help") | None => return help(USAGE),
        Some(other) => {
            eprintln!("klock: unknown command {other:?}\n{USAGE}");
            return ExitCode::from(2);
        }
    }
    let serve = match parse_serve(&args[1..]) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("klock serve: {e}\n(klock serve --help shows every flag)");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("klock serve: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(serve)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("klock serve: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: ServeArgs) -> Result<(), String> {
    // Before the data file is touched: a wrong --socket must change nothing.
    if let Some(path) = &args.socket {
        remove_stale_socket(path)?;
    }
    let config = args.config.clone();
    let hub = Arc::new(EventHub::new(args.event_bytes));
    let mut log_entries = 0;
    let (machine, store, history) = match &args.data {
        Some(path) => {
            let store =
                Arc::new(Store::open_with(path, args.accept_log_loss).map_err(|e| e.to_string())?);
            let recovered = recover(&store, &config, &hub)?;
            if let Some(torn) = recovered.torn {
                eprintln!(
                    "klock serve: the log ended in a torn record after byte {} ({} bytes cut, never answered); recovered to entry {}",
                    torn.at,
                    torn.dropped,
                    recovered.machine.applied()
                );
            }
            if recovered.restarted {
                eprintln!(
                    "klock serve: recovered {} from {} ({} entries replayed after the snapshot); every session has its grace to reconnect",
                    recovered.machine.applied(),
                    path.display(),
                    recovered.replayed
                );
            }
            log_entries = recovered.replayed + u64::from(recovered.restarted);
            let mut history = recovered.history;
            history.set_capacity(args.history);
            (recovered.machine, Some(store), history)
        }
        None => {
            let machine = Machine::new(config).map_err(|e| e.message)?;
            let history = History::new(&machine, args.history);
            (machine, None, history)
        }
    };
    let mut machine = machine;
    machine.set_answer_budget(args.idempotency_bytes);
    let metrics = Arc::new(Metrics::default());
    let clock = if args.manual_clock {
        Clock::Manual
    } else {
        Clock::monotonic(machine.last_now())
    };
    let engine = engine::spawn_with_history(
        machine,
        store,
        EngineConfig {
            clock,
            snapshot_every: args.snapshot_every,
            log_entries,
            metrics: Arc::clone(&metrics),
        },
        hub,
        history,
    );
    let auth = match &args.tokens {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read the token file {}: {e}", path.display()))?;
            Auth::from_json(&text)?
        }
        None => Auth::open(),
    };
    let auth = Arc::new(auth);
    let mut app = api::router(Api {
        engine,
        auth: Arc::clone(&auth),
        caps: args.caps,
        work: args.work,
    });
    if let Some(pkg) = &args.dashboard {
        app = app.merge(klock_server::dashboard::router(pkg.clone(), auth));
    }
    if !args.origins.is_empty() {
        let origins = klock_server::dashboard::Origins(Arc::new(args.origins.clone()));
        app = app.layer(axum::middleware::from_fn_with_state(
            origins,
            klock_server::dashboard::cors,
        ));
    }
    let dashboard_note = |base: &str| {
        if args.dashboard.is_some() {
            eprintln!("klock serve: dashboard at {base}/dashboard/?live");
        }
    };
    raise_fd_limit(args.conn.max_total);
    let net = Arc::clone(&metrics.net);
    let stop = || async {
        let _ = tokio::signal::ctrl_c().await;
    };
    // Host names are checked only where a browser's page could reach a tokenless server.
    let guarded = |app: axum::Router, check: RequestGuard| {
        app.layer(axum::middleware::from_fn_with_state(check, guard::guard))
    };
    if let Some(path) = &args.socket {
        let listener = tokio::net::UnixListener::bind(path)
            .map_err(|e| format!("cannot listen on {}: {e}", path.display()))?;
        println!("klock serve: listening on unix:{}", path.display());
        let app = guarded(app, RequestGuard::any_host(Arc::clone(&net)));
        return conn::serve(listener, app, None, args.conn, net, stop())
            .await
            .map_err(|e| format!("server error: {e}"));
    }
    let tls = match &args.tls {
        None => None,
        Some((cert, key)) => {
            let _ = rustls::crypto::ring::default_provider().install_default();
            let config = axum_server::tls_rustls::RustlsConfig::from_pem_file(cert, key)
                .await
                .map_err(|e| format!("cannot load the TLS certificate or key: {e}"))?;
            Some(tokio_rustls::TlsAcceptor::from(config.get_inner()))
        }
    };
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let check = if args.tokens.is_some() {
        RequestGuard::any_host(Arc::clone(&net))
    } else {
        RequestGuard::loopback(local.ip(), Arc::clone(&net))
    };
    let app = guarded(app, check);
    println!("klock serve: listening on {scheme}://{local}");
    dashboard_note(&format!("{scheme}://{local}"));
    conn::serve(listener, app, tls, args.conn, net, stop())
        .await
        .map_err(|e| format!("server error: {e}"))
}

/// Raises the soft limit on open files to the hard one, as Go's runtime does: each
/// connection is a descriptor, and a soft limit of 1,024 would stop accepting below
/// `--max-connections`. Says so if even the hard limit is too low.
fn raise_fd_limit(connections: usize) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct given.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    // Room for the data files, the runtime and a margin.
    if (limit.rlim_cur as u128) < connections as u128 + 64 {
        eprintln!(
            "klock serve: the limit on open files ({}) is below --max-connections ({connections}) plus a margin; \
             new connections will wait when it runs out (raise it with ulimit -n)",
            limit.rlim_cur
        );
    }
}

fn remove_stale_socket(path: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::FileTypeExt;
    let shown = path.display();
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("SOCKET_PATH_UNUSABLE: cannot inspect {shown}: {e}")),
    };
    if !meta.file_type().is_socket() {
        let kind = if meta.is_file() {
            "a regular file"
        } else if meta.is_dir() {
            "a directory"
        } else if meta.file_type().is_symlink() {
            "a symbolic link"
        } else {
            "not a socket"
        };
        return Err(format!(
            "SOCKET_PATH_NOT_A_SOCKET: refusing --socket {shown}: it is {kind}, and only a stale \
             socket is ever replaced; choose another path"
        ));
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err(format!(
            "SOCKET_IN_USE: refusing --socket {shown}: a server answers on it; stop it first \
             or choose another path"
        )),
        // Nothing listens: a socket left by a server that is gone.
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => std::fs::remove_file(path)
            .map_err(|e| {
                format!("SOCKET_PATH_UNUSABLE: cannot remove the stale socket {shown}: {e}")
            }),
        Err(e) => Err(format!(
            "SOCKET_PATH_UNUSABLE: refusing --socket {shown}: cannot tell whether a server \
             answers on it ({e})"
        )),
    }
}

fn conformance(args: &[String]) -> ExitCode {
    let Some(("--spawn", paths)) = args.split_first().map(|(f, rest)| (f.as_str(), rest)) else {
        eprintln!("klock conformance: the only mode is --spawn PATH...\n{CONFORMANCE_HELP}");
        return ExitCode::from(2);
    };
    if paths.is_empty() {
        eprintln!("klock conformance: name vector files or directories\n{CONFORMANCE_HELP}");
        return ExitCode::from(2);
    }
    match klock_server::conformance::run(paths) {
        Ok(summary) => {
            for line in summary.lines() {
                println!("{line}");
            }
            if summary.ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("klock conformance: {e}");
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
    println!("{}", auth::hex(&auth::digest(secret)));
    ExitCode::SUCCESS
}

/// A runtime for one agent tool.
fn tool_runtime(tool: &str) -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("klock {tool}: cannot start the runtime: {e}");
            ExitCode::FAILURE
        })
}

fn wants_help(args: &[String]) -> bool {
    let flags = args.split(|a| a == "--").next().unwrap_or_default();
    flags.iter().any(|a| a == "--help" || a == "-h")
}

fn exec(args: &[String]) -> ExitCode {
    use klock_server::agent::exec;
    if wants_help(args) {
        println!("{}", exec::help());
        return ExitCode::SUCCESS;
    }
    let parsed = match exec::parse(args) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("klock exec: {e}\n(klock exec --help shows every flag)");
            return ExitCode::from(exec::EXIT_USAGE);
        }
    };
    match tool_runtime("exec") {
        Ok(runtime) => ExitCode::from(runtime.block_on(exec::run(parsed))),
        Err(code) => code,
    }
}

fn overview(tool: &str, args: &[String]) -> ExitCode {
    use klock_server::agent::overview;
    if wants_help(args) {
        let text = if tool == "status" {
            overview::STATUS_HELP
        } else {
            overview::RECONCILE_HELP
        };
        println!("{}", overview::help(text));
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
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err((code, message)) => {
            eprintln!("klock {tool}: {message}\n(klock {tool} --help shows every flag)");
            ExitCode::from(code)
        }
    }
}

fn mcp(args: &[String]) -> ExitCode {
    use klock_server::agent::sidecar;
    if wants_help(args) {
        println!("{}", sidecar::help());
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
