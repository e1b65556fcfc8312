//! `klock serve` as a library call: the whole server composed from a [`ServeConfig`].
//!
//! Contract:
//! - [`ServeConfig`] holds every flag of `klock serve` as a typed field. It is taken as given:
//!   the `klock` command's parser (`cli/src/serve_args.rs`) is what refuses combinations a
//!   server must not run with (beyond loopback without tokens, a manual clock on a data file).
//! - [`app`] builds what answers requests: opens the data file and recovers from it (or
//!   starts in memory), spawns the engine, loads the token file, and composes the API, the
//!   dashboard and CORS into one router, with the busy routes before it (`api::Front`). It
//!   logs what recovery found (crate::logging). With a [`Cluster`] (`ServeConfig.cluster`) it
//!   builds a cluster node instead: a fresh machine the consensus layer fills from its own
//!   log, an engine whose proposer that layer is ([`engine::spawn_replicated`]), and the
//!   layer's `/raft/*` routes beside the API.
//! - [`start`] also binds (TCP, TLS or a Unix socket; only a stale socket is replaced, before
//!   the data file is touched), applies the request guard of that listener, and serves in a
//!   task; the [`Server`] it returns says where it listens and stops it ([`Server::shutdown`],
//!   or on drop). A test starts one on `127.0.0.1:0` in its own process.
//! - [`serve`] is `klock serve`: [`start`], print `klock serve: listening on URL` on stdout
//!   (the line the process's starters read), serve until SIGINT (Ctrl-C) or SIGTERM, then
//!   stop: no new connections, requests in flight finish (5 s at most). Each step is logged.

use crate::api::{self, Api, WorkLimits};
use crate::applier::Applier;
use crate::auth::Auth;
use crate::conn::{self, ConnLimits, NetMetrics};
use crate::engine::{self, Clock, EngineConfig};
use crate::events::EventHub;
use crate::guard::RequestGuard;
use crate::history::History;
use crate::machine::{Machine, SessionCaps};
use crate::metrics::Metrics;
use crate::recovery::recover;
use crate::store::Store;
use klock_core::Config;
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Every flag of `klock serve`, typed. [`Default`] is `klock serve` with no flags.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// `--listen` (TCP; not used with `socket`).
    pub listen: SocketAddr,
    /// `--tokens`: the bearer token file (without it the server asks for none).
    pub tokens: Option<PathBuf>,
    /// `--tls-cert`, `--tls-key`: certificate chain and private key (PEM) to serve HTTPS.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// `--insecure`: a non-loopback listener without TLS.
    pub insecure: bool,
    /// `--socket`: a Unix socket to serve on instead of TCP.
    pub socket: Option<PathBuf>,
    /// `--data`: the redb data file; `None` is `--memory`.
    pub data: Option<PathBuf>,
    /// `--clock manual`: every request carries `Klock-Now`.
    pub manual_clock: bool,
    /// `--snapshot-every` ([`DEFAULT_SNAPSHOT_EVERY`] unless given).
    pub snapshot_every: u64,
    /// Kernel steps kept for replay (`--history N`; the parser fills in the default with
    /// `--dashboard`, and none otherwise).
    pub history: usize,
    /// `--dashboard`: the wasm package directory the page loads.
    pub dashboard: Option<PathBuf>,
    /// `--allow-origin`: browser origins that may read the server (CORS).
    pub origins: Vec<String>,
    /// The kernel's configuration: the SPEC's defaults, changed by `--config`.
    pub config: Config,
    /// `--max-sessions-per-token`, `--max-sessions-per-namespace`.
    pub caps: SessionCaps,
    /// `--idempotency-bytes`.
    pub idempotency_bytes: usize,
    /// `--event-bytes`: the byte budget of the events kept for the streams.
    pub event_bytes: usize,
    /// How much work one request may give the engine (`--max-request-ids`, `--max-batch-items`).
    pub work: WorkLimits,
    /// Connection bounds (`--max-connections`, `--header-timeout-ms`, ...).
    pub conn: ConnLimits,
    /// `--accept-log-loss`: start from a data file whose log is missing (see recovery.rs).
    pub accept_log_loss: bool,
    /// `--log-level`, `--log-format`: installed by the `klock` command (crate::logging).
    pub log: crate::logging::LogConfig,
    /// `--workers`: the runtime's worker threads, which the `klock` command starts
    /// ([`serve`] runs on its caller's runtime). Default: one per CPU ([`default_workers`]).
    pub workers: usize,
    /// `--node-id`, `--cluster-peers`, `--cluster-secret-file`: this server is a node of a
    /// replicated cluster, and this is its consensus layer (`klock-raft`); `None`: one node.
    pub cluster: Option<Arc<dyn Cluster>>,
}

/// The consensus layer of a cluster node (`klock-raft` implements it; this crate cannot
/// depend on it). It replaces the file log and the proposer, never the machine.
pub trait Cluster: Send + Sync + fmt::Debug {
    /// Starts the layer on `state`, an applier whose machine has applied nothing (the layer
    /// restores its own snapshot and log into it), and returns its proposer (the engine's
    /// [`engine::Replicate`]) and its routes (`/raft/*`, guarded by the cluster secret),
    /// served beside the API.
    fn start(
        &self,
        state: Arc<Mutex<Applier>>,
    ) -> futures_util::future::BoxFuture<'static, Started>;
}

/// A started consensus layer: its proposer and its routes, or why it could not start.
pub type Started = Result<(Arc<dyn engine::Replicate>, axum::Router), String>;

impl Default for ServeConfig {
    fn default() -> ServeConfig {
        ServeConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 7300)),
            tokens: None,
            tls: None,
            insecure: false,
            socket: None,
            data: Some(PathBuf::from("klock.redb")),
            manual_clock: false,
            snapshot_every: DEFAULT_SNAPSHOT_EVERY,
            history: 0,
            dashboard: None,
            origins: Vec::new(),
            config: Config::default(),
            caps: SessionCaps {
                per_owner: api::DEFAULT_SESSIONS_PER_TOKEN,
                per_namespace: api::DEFAULT_SESSIONS_PER_NAMESPACE,
            },
            idempotency_bytes: crate::machine::DEFAULT_ANSWER_BYTES,
            event_bytes: crate::events::DEFAULT_BUDGET,
            work: WorkLimits::for_config(&Config::default()),
            conn: ConnLimits::default(),
            accept_log_loss: false,
            log: crate::logging::LogConfig::default(),
            workers: default_workers(),
            cluster: None,
        }
    }
}

/// How many commands a data file (or a cluster node) logs between two snapshots by default
/// (`--snapshot-every`). A snapshot holds the whole state, and each session's memory of its
/// last 4,096 ended leases makes that state large against the commands it covers: at 10,000
/// (the earlier default) the snapshots of 64 busy sessions took about a third of the engine
/// thread's time. 100,000, etcd's default too, keeps what a restart replays to about 0.4 s
/// (docs/DECISIONS.md, "Issue 23: a snapshot every 100,000 commands by default").
pub const DEFAULT_SNAPSHOT_EVERY: u64 = 100_000;

/// The most worker threads `--workers` may ask for: a typo must not start a thread per
/// request's worth of them.
pub const MAX_WORKERS: usize = 1024;

/// One worker thread per CPU this process may use (2 when that cannot be read), as tokio's
/// own default; the engine's thread comes on top.
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get().min(MAX_WORKERS))
}

impl ServeConfig {
    /// `klock serve --memory --listen 127.0.0.1:0`: in memory, on a free loopback port.
    pub fn memory() -> ServeConfig {
        ServeConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            data: None,
            ..ServeConfig::default()
        }
    }
}

/// What answers requests: the routes (API, dashboard, CORS) over a running engine, before the
/// guard of a listener.
pub struct App {
    /// The router, and the busy routes before it.
    pub front: crate::api::Front,
    /// The connection counters `/metrics` shows: the listener serving `front` counts into it.
    pub net: Arc<NetMetrics>,
    /// The engine's thread: once the front and every task serving it are dropped, it
    /// ends, and with it the hold on the data file.
    pub engine: engine::Stopped,
    /// A cluster node's consensus layer, told to leave ([`engine::Replicate::leave`]) when
    /// the server stops, before its connections close.
    pub consensus: Option<Arc<dyn engine::Replicate>>,
}

/// Builds the [`App`] of `config` (module contract).
///
/// # Errors
/// The data file cannot be opened or recovered, the kernel config is refused, or the token
/// file cannot be read or parsed.
pub async fn app(config: &ServeConfig) -> Result<App, String> {
    let kernel_config = config.config.clone();
    let hub = Arc::new(EventHub::new(config.event_bytes));
    if let Some(cluster) = &config.cluster {
        return cluster_app(config, cluster.as_ref(), hub).await;
    }
    let mut log_entries = 0;
    let (machine, store, history) = match &config.data {
        Some(path) => {
            let store = Arc::new(
                Store::open_with(path, config.accept_log_loss).map_err(|e| e.to_string())?,
            );
            let recovered = recover(&store, &kernel_config, &hub)?;
            // The data file names its log: the same across restarts and compactions, another
            // for another file.
            hub.name_log(store.id());
            if let Some(torn) = recovered.torn {
                tracing::warn!(
                    at = torn.at,
                    dropped_bytes = torn.dropped,
                    index = recovered.machine.applied(),
                    "the log ended in a torn record after byte {} ({} bytes cut, never answered); recovered to entry {}",
                    torn.at,
                    torn.dropped,
                    recovered.machine.applied()
                );
            }
            if recovered.restarted {
                tracing::info!(
                    index = recovered.machine.applied(),
                    data = %path.display(),
                    replayed = recovered.replayed,
                    "recovered entry {} from {} ({} entries replayed after the snapshot); every session has its grace to reconnect",
                    recovered.machine.applied(),
                    path.display(),
                    recovered.replayed
                );
            }
            log_entries = recovered.replayed + u64::from(recovered.restarted);
            let mut history = recovered.history;
            history.set_capacity(config.history);
            (recovered.machine, Some(store), history)
        }
        None => {
            // A memory server's log lives as long as its process: each start is a new one.
            hub.name_log(&crate::store::new_id().map_err(|e| e.to_string())?);
            let machine = Machine::new(kernel_config).map_err(|e| e.message)?;
            let history = History::new(&machine, config.history);
            (machine, None, history)
        }
    };
    let mut machine = machine;
    machine.set_answer_budget(config.idempotency_bytes);
    let metrics = Arc::new(Metrics::default());
    let clock = if config.manual_clock {
        Clock::Manual
    } else {
        Clock::monotonic(machine.last_now())
    };
    // Refusals come before the engine starts: once it has, its writer holds the data file.
    let auth = load_auth(config)?;
    let engine = engine::spawn_with_history(
        machine,
        store,
        EngineConfig {
            clock,
            snapshot_every: config.snapshot_every,
            log_entries,
            metrics: Arc::clone(&metrics),
        },
        hub,
        history,
    );
    let stopped = engine.take_stopped();
    Ok(App {
        front: routes(config, engine, auth, None),
        net: Arc::clone(&metrics.net),
        engine: stopped,
        consensus: None,
    })
}

/// The [`App`] of a cluster node: a fresh machine that `cluster` fills from its own snapshot
/// and log, and an engine whose proposer it is.
async fn cluster_app(
    config: &ServeConfig,
    cluster: &dyn Cluster,
    hub: Arc<EventHub>,
) -> Result<App, String> {
    let mut machine = Machine::new(config.config.clone()).map_err(|e| e.message)?;
    machine.set_answer_budget(config.idempotency_bytes);
    let history = History::new(&machine, config.history);
    machine.record_calls(history.capacity() > 0);
    let auth = load_auth(config)?;
    let state = Arc::new(Mutex::new(Applier::new(
        machine,
        hub,
        Arc::new(Mutex::new(history)),
    )));
    let (replicate, raft_routes) = cluster.start(Arc::clone(&state)).await?;
    let metrics = Arc::new(Metrics::default());
    let engine = engine::spawn_replicated(state, Arc::clone(&replicate), Arc::clone(&metrics));
    Ok(App {
        front: routes(config, engine, auth, Some(raft_routes)),
        net: Arc::clone(&metrics.net),
        engine: engine::Stopped::default(),
        consensus: Some(replicate),
    })
}

/// The token file's grants (or none without `--tokens`).
fn load_auth(config: &ServeConfig) -> Result<Arc<Auth>, String> {
    let auth = match &config.tokens {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read the token file {}: {e}", path.display()))?;
            Auth::from_json(&text)?
        }
        None => Auth::open(),
    };
    Ok(Arc::new(auth))
}

/// The API over `engine`, the dashboard, a cluster node's `/raft/*` routes, and CORS.
fn routes(
    config: &ServeConfig,
    engine: engine::EngineHandle,
    auth: Arc<Auth>,
    raft: Option<axum::Router>,
) -> crate::api::Front {
    let api = Api {
        engine,
        auth: Arc::clone(&auth),
        caps: config.caps,
        work: config.work,
    };
    api::front(api, |mut router| {
        if let Some(pkg) = &config.dashboard {
            router = router.merge(crate::dashboard::router(pkg.clone(), auth));
        }
        if let Some(raft) = raft {
            router = router.merge(raft);
        }
        if !config.origins.is_empty() {
            let origins = crate::dashboard::Origins(Arc::new(config.origins.clone()));
            router = router.layer(axum::middleware::from_fn_with_state(
                origins,
                crate::dashboard::cors,
            ));
        }
        router
    })
}

/// Where a server listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Bound {
    /// TCP, with or without TLS.
    Tcp { addr: SocketAddr, tls: bool },
    /// A Unix socket.
    Unix(PathBuf),
}

impl fmt::Display for Bound {
    /// `http://ADDR`, `https://ADDR` or `unix:PATH`, as `klock serve` prints it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Bound::Tcp { addr, tls } => {
                write!(f, "{}://{addr}", if *tls { "https" } else { "http" })
            }
            Bound::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// A server serving in a task of the current runtime: stopped by [`Server::shutdown`] or,
/// without waiting, when dropped.
pub struct Server {
    bound: Bound,
    stop: Option<oneshot::Sender<()>>,
    served: Option<JoinHandle<std::io::Result<()>>>,
    engine: engine::Stopped,
}

impl Server {
    /// Where it listens.
    pub fn bound(&self) -> &Bound {
        &self.bound
    }

    /// The engine's thread, to wait for after the runtime serving this server is
    /// dropped (taken once): then the data file is closed.
    pub fn take_engine(&mut self) -> engine::Stopped {
        std::mem::take(&mut self.engine)
    }

    /// The TCP address it listens on (`None` on a Unix socket).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        match self.bound {
            Bound::Tcp { addr, .. } => Some(addr),
            Bound::Unix(_) => None,
        }
    }

    /// Stops accepting, lets the requests in flight finish (5 s at most, as on Ctrl-C), and
    /// waits for that.
    ///
    /// # Errors
    /// The serving task failed.
    pub async fn shutdown(mut self) -> Result<(), String> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.served.take() {
            Some(served) => served
                .await
                .map_err(|e| format!("server task: {e}"))?
                .map_err(|e| format!("server error: {e}")),
            None => Ok(()),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

type Serving = Pin<Box<dyn Future<Output = std::io::Result<()>> + Send>>;

/// Builds the app of `config`, binds its listener and returns the serving future, which ends
/// once `stop` completes and the connections are closed.
async fn bind(
    config: ServeConfig,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<(Bound, Serving, engine::Stopped), String> {
    // Before the data file is touched: a wrong --socket must change nothing.
    if let Some(path) = &config.socket {
        remove_stale_socket(path)?;
    }
    let App {
        front,
        net,
        engine,
        consensus,
    } = app(&config).await?;
    // A cluster node leaves its cluster once told to stop, while it still serves.
    let stop = async move {
        stop.await;
        if let Some(consensus) = consensus {
            consensus.leave().await;
        }
    };
    raise_fd_limit(config.conn.max_total);
    // Host names are checked only where a browser's page could reach a tokenless server.
    let guarded = |check: RequestGuard| front.guarded(check);
    if let Some(path) = &config.socket {
        let listener = tokio::net::UnixListener::bind(path)
            .map_err(|e| format!("cannot listen on {}: {e}", path.display()))?;
        let app = guarded(RequestGuard::any_host(Arc::clone(&net)));
        let serving = conn::serve(listener, app, None, config.conn, net, stop);
        let bound = Bound::Unix(path.clone());
        log_start(&bound, &config);
        return Ok((bound, Box::pin(serving), engine));
    }
    let tls = match &config.tls {
        None => None,
        Some((cert, key)) => {
            let _ = rustls::crypto::ring::default_provider().install_default();
            let tls = axum_server::tls_rustls::RustlsConfig::from_pem_file(cert, key)
                .await
                .map_err(|e| format!("cannot load the TLS certificate or key: {e}"))?;
            Some(tokio_rustls::TlsAcceptor::from(tls.get_inner()))
        }
    };
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    let check = if config.tokens.is_some() {
        RequestGuard::any_host(Arc::clone(&net))
    } else {
        RequestGuard::loopback(local.ip(), Arc::clone(&net))
    };
    let bound = Bound::Tcp {
        addr: local,
        tls: tls.is_some(),
    };
    let serving = conn::serve(listener, guarded(check), tls, config.conn, net, stop);
    log_start(&bound, &config);
    Ok((bound, Box::pin(serving), engine))
}

/// The lifecycle line of a server that listens: where, and in which mode.
fn log_start(bound: &Bound, config: &ServeConfig) {
    let data = config
        .data
        .as_ref()
        .map_or(String::from("memory"), |p| p.display().to_string());
    tracing::info!(
        address = %bound,
        data = %data,
        tokens = config.tokens.is_some(),
        clock = if config.manual_clock { "manual" } else { "monotonic" },
        version = %crate::about::long_version(),
        "listening on {bound} ({}, {})",
        if config.data.is_some() { "durable" } else { "in memory" },
        if config.tokens.is_some() { "bearer tokens" } else { "no tokens" },
    );
}

/// Starts a server on the current runtime (module contract).
///
/// # Errors
/// As [`app`]; the socket path is unusable or taken; the TLS files cannot be loaded; the
/// address cannot be bound.
pub async fn start(config: ServeConfig) -> Result<Server, String> {
    let (stop, stopped) = oneshot::channel::<()>();
    let (bound, serving, engine) = bind(config, async {
        let _ = stopped.await;
    })
    .await?;
    Ok(Server {
        bound,
        stop: Some(stop),
        served: Some(tokio::spawn(serving)),
        engine,
    })
}

/// `klock serve`: serves until SIGINT (Ctrl-C) or SIGTERM (module contract).
///
/// # Errors
/// As [`start`], and a failure of the server while serving.
pub async fn serve(config: ServeConfig) -> Result<(), String> {
    let dashboard = config.dashboard.is_some();
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("cannot watch for SIGTERM: {e}"))?;
    // The process ends when serving does: every answer given was durable, so the writer
    // thread is not waited for.
    let (bound, serving, _engine) = bind(config, async move {
        let signal = tokio::select! {
            _ = tokio::signal::ctrl_c() => "SIGINT",
            _ = terminate.recv() => "SIGTERM",
        };
        tracing::info!(
            signal,
            "{signal}: shutting down (no new connections; requests in flight get up to 5 s)"
        );
    })
    .await?;
    println!("klock serve: listening on {bound}");
    if dashboard && matches!(bound, Bound::Tcp { .. }) {
        tracing::info!(url = %format!("{bound}/dashboard/?live"), "dashboard at {bound}/dashboard/?live");
    }
    let served = serving.await.map_err(|e| format!("server error: {e}"));
    tracing::info!("stopped");
    served
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
        tracing::warn!(
            limit = limit.rlim_cur,
            max_connections = connections,
            "the limit on open files ({}) is below --max-connections ({connections}) plus a margin; \
             new connections will wait when it runs out (raise it with ulimit -n or LimitNOFILE=)",
            limit.rlim_cur
        );
    }
}

fn remove_stale_socket(path: &Path) -> Result<(), String> {
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
