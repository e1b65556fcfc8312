//! The cluster's HTTP client: requests from one node (or `klock cluster`) to a peer's
//! `/raft/*` routes.
//!
//! Contract:
//! - A [`Peer`] is one peer's address (`http://HOST:PORT`; `https` is refused by name: TLS
//!   between nodes is not built yet) and its idle keep-alive HTTP/1.1 connections. A request
//!   takes an idle connection, or opens one when none is idle, and gives it back once
//!   answered (a failed one is dropped): concurrent requests (a follower forwarding many
//!   clients' writes) each have a connection of their own instead of waiting for each
//!   other's round trip, and a connection is never shared by two requests at once.
//! - Every request carries the cluster secret in [`SECRET_HEADER`] and a JSON body; it gives
//!   up after its timeout. The answer is its status and body; a transport failure, a timeout
//!   or a refused secret (401) is an error naming the peer.

use axum::body::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::StatusCode;
use hyper_util::rt::TokioIo;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

/// The header a node's request carries the cluster secret in.
pub const SECRET_HEADER: &str = "klock-cluster-secret";

/// One peer and the connection to it (module contract).
pub struct Peer {
    /// `HOST:PORT`.
    addr: String,
    secret: Arc<str>,
    /// The idle connections (module contract).
    idle: Mutex<Vec<SendRequest<Full<Bytes>>>>,
}

impl Peer {
    /// The peer at `url` (`http://HOST:PORT`, with no path).
    ///
    /// # Errors
    /// An address that is not `http://HOST:PORT`.
    pub fn new(url: &str, secret: Arc<str>) -> Result<Peer, String> {
        let addr = match url.strip_prefix("http://") {
            Some(addr) => addr.trim_end_matches('/'),
            None if url.starts_with("https://") => {
                return Err(format!(
                    "CLUSTER_TLS_UNSUPPORTED: {url}: the nodes of a cluster talk plain HTTP for \
                     now (keep them on a private network or loopback)"
                ))
            }
            None => return Err(format!("BAD_PEER: {url} is not http://HOST:PORT")),
        };
        if addr.is_empty() || addr.contains('/') || !addr.contains(':') {
            return Err(format!("BAD_PEER: {url} is not http://HOST:PORT"));
        }
        Ok(Peer {
            addr: addr.to_owned(),
            secret,
            idle: Mutex::new(Vec::new()),
        })
    }

    /// POSTs `body` (JSON) to `path`, with `header` if given, and returns the answer's status
    /// and body (module contract).
    ///
    /// # Errors
    /// The peer cannot be reached or does not answer within `timeout`, or refused the secret.
    pub async fn post(
        &self,
        path: &str,
        header: Option<(&'static str, String)>,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<(StatusCode, Bytes), String> {
        self.request(hyper::Method::POST, path, header, body, timeout)
            .await
    }

    /// GETs `path` (see [`Peer::post`]).
    ///
    /// # Errors
    /// As [`Peer::post`].
    pub async fn get(&self, path: &str, timeout: Duration) -> Result<(StatusCode, Bytes), String> {
        self.request(hyper::Method::GET, path, None, Vec::new(), timeout)
            .await
    }

    async fn request(
        &self,
        method: hyper::Method,
        path: &str,
        header: Option<(&'static str, String)>,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<(StatusCode, Bytes), String> {
        let mut builder = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, &self.addr)
            .header(SECRET_HEADER, &*self.secret);
        if !body.is_empty() {
            builder = builder.header(hyper::header::CONTENT_TYPE, "application/json");
        }
        if let Some((name, value)) = header {
            builder = builder.header(name, value);
        }
        let request = builder
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| format!("a request to {}: {e}", self.addr))?;
        let answer = tokio::time::timeout(timeout, async {
            let mut sender = match self.take_idle() {
                Some(sender) => sender,
                None => self.connect().await?,
            };
            sender.ready().await.map_err(|e| e.to_string())?;
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| e.to_string())?;
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            Ok::<_, String>((sender, status, body))
        })
        .await;
        match answer {
            Ok(Ok((sender, status, body))) => {
                // Kept for the next request: the connection stays open between them.
                lock(&self.idle).push(sender);
                if status == StatusCode::UNAUTHORIZED {
                    return Err(format!(
                        "CLUSTER_SECRET_REFUSED: {} refused this node's cluster secret",
                        self.addr
                    ));
                }
                Ok((status, body))
            }
            Ok(Err(e)) => Err(format!("{}: {e}", self.addr)),
            Err(_) => Err(format!(
                "{}: no answer within {} ms",
                self.addr,
                timeout.as_millis()
            )),
        }
    }

    /// An idle connection still open, if there is one (the closed ones are dropped).
    fn take_idle(&self) -> Option<SendRequest<Full<Bytes>>> {
        let mut idle = lock(&self.idle);
        while let Some(sender) = idle.pop() {
            if !sender.is_closed() {
                return Some(sender);
            }
        }
        None
    }

    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, String> {
        let tcp = tokio::net::TcpStream::connect(&self.addr)
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        let _ = tcp.set_nodelay(true);
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        // Drives the connection until either side closes it; a failure shows as the next
        // request's error, which reconnects.
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(sender)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
