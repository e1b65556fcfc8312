//! `klock serve`'s flags: the parser from the command line to the server library's
//! [`ServeConfig`], and the help text.
//!
//! Contract: [`parse`] gives a [`ServeConfig`] only for flags that go together (a manual clock
//! only in memory, beyond loopback only with tokens and TLS or `--insecure`, ...); every
//! refusal is a message naming the flag. [`help`] is `klock serve --help`, its list of
//! numeric kernel settings the kernel's own.

use klock_core::{Config, Policy};
use klock_raft::node::ClusterConfig;
use klock_raft::peer::PeerAccess;
use klock_server::logging::{self, LogFormat};
use klock_server::serve::{Cluster, ServeConfig, DEFAULT_SNAPSHOT_EVERY};
use klock_server::{api, dashboard, history};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

const SERVE_HELP: &str = "\
usage: klock serve [--config FILE] [--listen ADDR:PORT | --socket PATH] [--data FILE | --memory]
                   [--config NAME=VALUE]... [--tokens FILE] [--tls-cert FILE --tls-key FILE]
                   [--insecure] [--clock manual] [--snapshot-every N] [--history N]
                   [--dashboard [--dashboard-pkg DIR]] [--allow-origin ORIGIN]...
                   [--max-sessions-per-token N] [--max-sessions-per-namespace N]
                   [--idempotency-bytes N]
                   [--event-bytes N]
                   [--max-connections N] [--max-connections-per-peer N]
                   [--header-timeout-ms MS] [--idle-timeout-ms MS]
                   [--max-requests-per-connection N] [--max-request-ids N]
                   [--max-batch-items N] [--accept-log-loss] [--workers N]
                   [--log-level FILTER] [--log-format text|json]
                   [--node-id N --cluster-peers ID=URL,... --cluster-secret-file FILE [--cluster-ca FILE]]

Serves the Klock kernel over HTTP (/v1, OpenAPI at /v1/openapi.json). Nothing is answered
before it is in the log on disk; a restarted server resumes where its log ends.

  --config FILE        read flags from a TOML file: each key is a flag's name without the
                       dashes (listen = \"127.0.0.1:7300\", memory = true, allow-origin = [..]),
                       kernel settings in a [kernel] table; a flag on the command line wins.
                       Unknown keys and bad values are errors naming the key
                       (example: deploy/klock.toml)
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
                       (A value NAME=VALUE with NAME in [a-z_] is a setting; anything else
                       is a config file: write ./a=b for a file named so.)
                       A data file keeps the settings it was created with and refuses
                       others. NAME is policy (wait_die, wound_wait, lanes, detect) or a number:
{numeric_fields}
  --clock manual       every request carries Klock-Now (conformance runs; needs --memory,
                       or on every node of a cluster, its leader stamps entries so)
  --snapshot-every N   store a snapshot and drop the log behind it every N commands
                       logged (default {snapshot_every}; 0 never)
  --history N          keep about the last N kernel steps in memory for replay
                       (GET /v1/ns/{ns}/history), and at most about N x 512 bytes of
                       them (large steps keep fewer); default: 200000 with --dashboard,
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
  --workers N          threads that serve connections (default: one per CPU; 1 to 1024);
                       the kernel's own thread comes on top
  --node-id N, --cluster-peers ID=URL,..., --cluster-secret-file FILE
                       run as node N of a replicated cluster (Raft): every node's id and
                       http://HOST:PORT (this node's is where it listens), and a file holding
                       the secret the nodes share (not a client token). Needs --data (the
                       node's Raft log); a new cluster is started by `klock cluster init`.
                       An https://HOST:PORT node serves TLS (--tls-cert, --tls-key, its
                       certificate naming HOST)
  --cluster-ca FILE    the CA certificates (PEM) that signed the https:// peers' certificates:
                       the only ones this node trusts when it calls a peer
  --accept-log-loss    start from a data file whose log is missing or is another file's
                       (refused otherwise): the history after its last snapshot is lost,
                       but fences and server time still never go back
  --max-sessions-per-token N, --max-sessions-per-namespace N
                       open sessions at once per bearer token and per namespace (default
                       10000 each); an open over either is 429
  --idempotency-bytes N
                       bytes of remembered idempotency answers (default 67108864); past it
                       the oldest answers are dropped and their retries are 409
  --event-bytes N      bytes of events kept for the event streams, oldest dropped first
                       (a reader behind them is told of the gap; default 67108864, 64 MiB)

  --log-level FILTER   what to log: error, warn, info (default), debug (adds one line per
                       request), trace, or directives like info,klock::request=debug
                       (default $RUST_LOG, else info); logs go to stderr
  --log-format F       text (default) or json (one object a line)

Examples:
  klock serve                                   # loopback, ./klock.redb
  klock serve --config /etc/klock/klock.toml --log-format json
  klock serve --data /var/lib/klock/klock.redb --socket /run/klock.sock
  klock serve --config policy=wound_wait --config default_ttl_ms=30000
  klock serve --listen 0.0.0.0:7300 --tokens tokens.json --tls-cert c.pem --tls-key k.pem";

/// `klock serve --help`, with the kernel's own list of numeric settings.
pub fn help() -> String {
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
    SERVE_HELP
        .replace("{numeric_fields}", &indented.join("\n"))
        .replace("{snapshot_every}", &DEFAULT_SNAPSHOT_EVERY.to_string())
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
    if !Config::NUMERIC_FIELDS.contains(&name) {
        return Err(format!(
            "--config: unknown kernel setting {name:?} (known: policy, {})",
            Config::NUMERIC_FIELDS.join(", ")
        ));
    }
    let number = value
        .parse::<u64>()
        .map_err(|_| format!("--config {name} needs a whole number, got {value:?}"))?;
    config
        .set_number(name, number)
        .map_err(|e| format!("--config: {}", e.message))
}

/// Parses `klock serve`'s flags (without the `serve`) into a [`ServeConfig`]. A
/// `--config FILE` (crate::config_file) stands for the flags its keys name, placed before the
/// command line's own, so a flag given on the command line wins.
///
/// # Errors
/// A flag is unknown, lacks its value or has a bad one, or the flags do not go together; the
/// message names the flag (and the file and key, for a value from the config file).
pub fn parse(args: &[String]) -> Result<ServeConfig, String> {
    let (file, command_line) = crate::config_file::split(args)?;
    let mut all = Vec::new();
    if let Some(path) = &file {
        let entries = crate::config_file::load(path)?;
        for entry in &entries {
            // Each value checked alone first, so a bad one is named by its key.
            read_flags(&entry.args)
                .map_err(|e| format!("config file {}: key {}: {e}", path.display(), entry.key))?;
        }
        all = crate::config_file::beneath(entries, &command_line);
    }
    all.extend(command_line);
    finish(read_flags(&all)?)
}

/// The flags read, before they are checked together.
#[derive(Default)]
struct Read {
    out: ServeConfig,
    max_ids: Option<usize>,
    max_batch_items: Option<usize>,
    dashboard: bool,
    dashboard_pkg: Option<PathBuf>,
    history: Option<usize>,
    memory: bool,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    data_given: bool,
    node_id: Option<u64>,
    peers: Option<BTreeMap<u64, String>>,
    secret_file: Option<PathBuf>,
    cluster_ca: Option<PathBuf>,
}

/// Reads each flag and its value (checking the value alone).
fn read_flags(args: &[String]) -> Result<Read, String> {
    let mut read = Read::default();
    let Read {
        out,
        max_ids,
        max_batch_items,
        dashboard,
        dashboard_pkg,
        history,
        memory,
        cert,
        key,
        data_given,
        node_id,
        peers,
        secret_file,
        cluster_ca,
    } = &mut read;
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
                *data_given = true;
                i += 2;
            }
            "--tls-cert" => {
                *cert = Some(PathBuf::from(value()?));
                i += 2;
            }
            "--tls-key" => {
                *key = Some(PathBuf::from(value()?));
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
                *memory = true;
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
                // Only settings reach here: crate::config_file::split took the file.
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
                *history =
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
                *dashboard = true;
                i += 1;
            }
            "--allow-origin" => {
                let v = value()?;
                dashboard::check_origin(v)?;
                out.origins.push(v.to_owned());
                i += 2;
            }
            "--dashboard-pkg" => {
                *dashboard_pkg = Some(PathBuf::from(value()?));
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
                *max_ids = Some(positive(flag, value()?)?);
                i += 2;
            }
            "--max-batch-items" => {
                *max_batch_items = Some(positive(flag, value()?)?);
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
            "--workers" => {
                let n = positive(flag, value()?)?;
                if n > klock_server::serve::MAX_WORKERS {
                    return Err(format!(
                        "{flag} is at most {}, got {n}",
                        klock_server::serve::MAX_WORKERS
                    ));
                }
                out.workers = n;
                i += 2;
            }
            "--accept-log-loss" => {
                out.accept_log_loss = true;
                i += 1;
            }
            "--node-id" => {
                *node_id = Some(positive(flag, value()?)? as u64);
                i += 2;
            }
            "--cluster-peers" => {
                *peers = Some(parse_peers(value()?)?);
                i += 2;
            }
            "--cluster-secret-file" => {
                *secret_file = Some(PathBuf::from(value()?));
                i += 2;
            }
            "--cluster-ca" => {
                *cluster_ca = Some(PathBuf::from(value()?));
                i += 2;
            }
            "--log-level" => {
                let v = value()?;
                logging::check_filter(v)?;
                out.log.filter = Some(v.to_owned());
                i += 2;
            }
            "--log-format" => {
                out.log.format = LogFormat::parse(value()?)?;
                i += 2;
            }
            _ => return Err(format!("unknown argument {flag:?}")),
        }
    }
    Ok(read)
}

/// Checks the flags together and fills in what depends on several.
fn finish(read: Read) -> Result<ServeConfig, String> {
    let Read {
        mut out,
        max_ids,
        max_batch_items,
        dashboard,
        dashboard_pkg,
        history,
        memory,
        cert,
        key,
        data_given,
        node_id,
        peers,
        secret_file,
        cluster_ca,
    } = read;
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
        history::DEFAULT_CAPACITY
    } else {
        0
    });
    if dashboard {
        out.dashboard = Some(dashboard_pkg.unwrap_or_else(dashboard::default_pkg_dir));
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
    // A cluster node keeps its Raft log in --data whatever its clock (checked in `cluster`).
    if out.manual_clock && out.data.is_some() && node_id.is_none() {
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
    out.cluster = cluster(&out, node_id, peers, secret_file, cluster_ca)?;
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

/// `--cluster-peers 1=http://HOST:PORT,2=...`.
fn parse_peers(v: &str) -> Result<BTreeMap<u64, String>, String> {
    let mut peers = BTreeMap::new();
    for item in v.split(',') {
        let (id, url) = item
            .split_once('=')
            .ok_or_else(|| format!("--cluster-peers needs ID=URL items, got {item:?}"))?;
        let id: u64 = id
            .trim()
            .parse()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("--cluster-peers: {id:?} is not a node id above 0"))?;
        if peers.insert(id, url.trim().to_owned()).is_some() {
            return Err(format!("--cluster-peers names node {id} twice"));
        }
    }
    Ok(peers)
}

/// The cluster node the cluster flags describe (all three or none), checked against the
/// rest: a node keeps its Raft log in `--data` and listens on TCP.
fn cluster(
    out: &ServeConfig,
    node_id: Option<u64>,
    peers: Option<BTreeMap<u64, String>>,
    secret_file: Option<PathBuf>,
    ca: Option<PathBuf>,
) -> Result<Option<Arc<dyn Cluster>>, String> {
    let (id, peers, secret_file) = match (node_id, peers, secret_file) {
        (None, None, None) if ca.is_some() => {
            return Err(String::from(
                "--cluster-ca is for a cluster node (--node-id ...)",
            ))
        }
        (None, None, None) => return Ok(None),
        (Some(id), Some(peers), Some(file)) => (id, peers, file),
        _ => {
            return Err(String::from(
                "--node-id, --cluster-peers and --cluster-secret-file go together",
            ))
        }
    };
    let data = out
        .data
        .clone()
        .ok_or_else(|| String::from("a cluster node needs --data (its Raft log), not --memory"))?;
    if out.socket.is_some() {
        return Err(String::from(
            "a cluster node listens on TCP, where its peers reach it: it does not take --socket",
        ));
    }
    // The node's own URL says how its peers reach it: TLS exactly when it serves TLS. (A node
    // missing from the peers is refused by name below, by `ClusterConfig::new`.)
    let own = peers.get(&id).map_or("", String::as_str);
    match (own.starts_with("https://"), out.tls.is_some()) {
        (true, false) => {
            return Err(format!(
                "node {id} is {own} in --cluster-peers: an https:// node serves TLS, give --tls-cert and --tls-key"
            ))
        }
        (false, true) if !own.is_empty() => {
            return Err(format!(
                "node {id} serves TLS (--tls-cert) but is {own} in --cluster-peers: make it https://"
            ))
        }
        _ => {}
    }
    if ca.is_some() && !peers.values().any(|url| url.starts_with("https://")) {
        return Err(String::from(
            "--cluster-ca is the CA of https:// peers, and --cluster-peers names none",
        ));
    }
    let secret = std::fs::read_to_string(&secret_file).map_err(|e| {
        format!(
            "cannot read the cluster secret file {}: {e}",
            secret_file.display()
        )
    })?;
    let secret = secret.trim();
    if secret.len() < 16 {
        return Err(format!(
            "the cluster secret in {} is shorter than 16 characters",
            secret_file.display()
        ));
    }
    let access = PeerAccess::new(Arc::from(secret), ca.as_deref())?;
    let mut config = ClusterConfig::new(id, peers, access, data)?;
    config.snapshot_every = out.snapshot_every;
    // The leader stamps each entry with its request's Klock-Now (conformance runs through a
    // cluster): every node of one cluster must be started so.
    config.manual_clock = out.manual_clock;
    Ok(Some(Arc::new(config)))
}

/// A flag's whole number above 0.
fn positive(flag: &str, v: &str) -> Result<usize, String> {
    v.parse()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("{flag} needs a whole number above 0, got {v:?}"))
}
