//! The resettable manual-clock server: what the conformance host, and the Python, Node and
//! dashboard client tests (as `klock-testkit serve`), replay scenarios on, one kernel config
//! after another, on one port.
//!
//! Contract: it serves what `klock serve --memory --clock manual` serves (every request
//! carries `Klock-Now`), plus `POST /v1/reset` with a whole kernel config as the body
//! (`{"reset": true}`, or 400 `BAD_REQUEST` naming what is wrong with the config). A reset
//! builds a fresh server app with that config ([`klock_server::serve::app`]) and sends every
//! later request to it; requests already in flight finish on the app they reached. The reset
//! is this kit's, not a hook in the server library: the listener is ours, and each request is
//! routed to the current app's front (its busy routes, then its router). The request guard of
//! a tokenless loopback server applies to every route; the connection counters of `/metrics`
//! are the kit's, not shown.

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Router;
use klock_server::api::Front;
use klock_server::conn::{self, ConnLimits, NetMetrics};
use klock_server::guard::RequestGuard;
use klock_server::serve::{self, ServeConfig};
use serde_json::json;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// The front every request goes to: the latest reset's.
type Current = Arc<Mutex<Front>>;

/// A running resettable server on its own runtime; stopped when dropped.
pub struct ManualServer {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    /// Dropped last: cancels what is left of the server.
    runtime: tokio::runtime::Runtime,
}

impl ManualServer {
    /// Starts one on `listen` (port 0: a free one), with the kernel's default config.
    ///
    /// # Errors
    /// The runtime cannot start, the address cannot be bound.
    pub fn start(listen: SocketAddr) -> Result<ManualServer, String> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the runtime: {e}"))?;
        let (stop, stopped) = oneshot::channel::<()>();
        let addr = runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
            let addr = listener.local_addr().map_err(|e| e.to_string())?;
            let current: Current =
                Arc::new(Mutex::new(fresh(klock_core::Config::default()).await?));
            let net = Arc::new(NetMetrics::default());
            let front = Router::new()
                .route("/v1/reset", axum::routing::post(reset))
                .fallback(forward)
                .with_state(current)
                .layer(RequestGuard::loopback(addr.ip(), Arc::clone(&net)));
            let stopped = async {
                let _ = stopped.await;
            };
            tokio::spawn(conn::serve(
                listener,
                Front::router(front),
                None,
                ConnLimits::default(),
                net,
                stopped,
            ));
            Ok::<_, String>(addr)
        })?;
        Ok(ManualServer {
            addr,
            stop: Some(stop),
            runtime,
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves until this process is stopped (Ctrl-C, or a signal that ends it).
    pub fn serve_until_interrupted(self) {
        let _ = self.runtime.block_on(tokio::signal::ctrl_c());
    }
}

impl Drop for ManualServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The app of a fresh in-memory, manual-clock server with kernel config `config`. Its other
/// settings stay `klock serve --memory --clock manual`'s, the work limits included (they
/// follow the default config, as a reset always kept them).
async fn fresh(config: klock_core::Config) -> Result<Front, String> {
    let app = serve::app(&ServeConfig {
        manual_clock: true,
        config,
        ..ServeConfig::memory()
    })
    .await?;
    Ok(app.front)
}

/// `POST /v1/reset` (module contract).
async fn reset(State(current): State<Current>, body: Bytes) -> Response {
    let refused = |message: String| {
        let error = json!({"error": {"code": 0, "name": "BAD_REQUEST", "message": message}});
        (StatusCode::BAD_REQUEST, axum::Json(error)).into_response()
    };
    let config = match serde_json::from_slice::<klock_core::Config>(&body) {
        Ok(config) => config,
        Err(e) => return refused(format!("the body is not a kernel config: {e}")),
    };
    match fresh(config).await {
        Ok(front) => {
            *current.lock().unwrap_or_else(|e| e.into_inner()) = front;
            axum::Json(json!({ "reset": true })).into_response()
        }
        Err(e) => refused(e),
    }
}

/// Every other request: to the current app.
async fn forward(State(current): State<Current>, request: Request) -> Response {
    let front = current.lock().unwrap_or_else(|e| e.into_inner()).clone();
    front.call(request).await
}
