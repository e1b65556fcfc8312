//! The cluster's HTTP client: requests from one node (or `klock cluster`) to a peer's
//! `/raft/*` routes.
//!
//! Contract:
//! - A [`Peer`] is one peer's address (`http://HOST:PORT`, or `https://HOST:PORT`: TLS, the
//!   peer's certificate checked against the CA bundle of [`PeerAccess`] for the name `HOST`)
//!   and its idle keep-alive HTTP/1.1 connections. A request takes an idle connection, or
//!   opens one when none is idle, and gives it back once answered (a failed one is dropped):
//!   concurrent requests (a follower forwarding many clients' writes) each have a connection
//!   of their own instead of waiting for each other's round trip, and a connection is never
//!   shared by two requests at once; at most [`MAX_IDLE`] stay open idle. An `https://` peer without a CA bundle to trust is
//!   refused by name when the peer is made, never reached unchecked.
//! - Every request carries the cluster secret in [`SECRET_HEADER`] and a JSON body; it gives
//!   up after its timeout. The answer is its status and body; a transport failure, a timeout,
//!   a certificate the handshake refuses, or a refused secret (401) is an error naming the
//!   peer. [`Peer::send`], which relays a client's request to the leader's client API, returns
//!   the peer's answer whatever its status (a 401 is the client's token refused).

use axum::body::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderMap, HeaderValue};
use hyper::StatusCode;
use hyper_util::rt::TokioIo;
use klock_client::transport::trusting;
use rustls::pki_types::ServerName;
use std::path::Path;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use tokio_rustls::TlsConnector;

/// Most idle connections kept to one peer: enough for a follower's forwarded writes under
/// load (each in flight has its own), not one per request of a burst forever.
const MAX_IDLE: usize = 32;

/// The header a node's request carries the cluster secret in.
pub const SECRET_HEADER: &str = "klock-cluster-secret";

/// What a node (or `klock cluster`) shows and trusts when it calls a peer: the cluster
/// secret, and the CA bundle that signed the certificates of `https://` peers.
#[derive(Clone)]
pub struct PeerAccess {
    secret: Arc<str>,
    tls: Option<TlsConnector>,
}

impl PeerAccess {
    /// Access with `secret`, trusting the PEM certificates in `ca` (if given) for `https://`
    /// peers.
    ///
    /// # Errors
    /// `ca` cannot be read, or holds no PEM certificate.
    pub fn new(secret: Arc<str>, ca: Option<&Path>) -> Result<PeerAccess, String> {
        let tls = ca
            .map(|ca| trusting(ca).map_err(|e| format!("BAD_CLUSTER_CA: {e}")))
            .transpose()?;
        Ok(PeerAccess { secret, tls })
    }

    /// The cluster secret.
    pub fn secret(&self) -> &Arc<str> {
        &self.secret
    }
}

/// How a peer is reached.
enum Link {
    Plain,
    /// TLS, checking the certificate for `name`.
    Tls {
        connector: TlsConnector,
        name: ServerName<'static>,
    },
}

/// One peer and the connection to it (module contract).
pub struct Peer {
    /// `HOST:PORT`.
    addr: String,
    link: Link,
    secret: Arc<str>,
    /// The idle connections (module contract).
    idle: Mutex<Vec<SendRequest<Full<Bytes>>>>,
}

impl Peer {
    /// The peer at `url` (`http://HOST:PORT` or `https://HOST:PORT`, with no path).
    ///
    /// # Errors
    /// An address that is neither, or an `https://` one while `access` trusts no CA bundle.
    pub fn new(url: &str, access: &PeerAccess) -> Result<Peer, String> {
        let bad = || format!("BAD_PEER: {url} is not http://HOST:PORT or https://HOST:PORT");
        let (tls, addr) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
            (Some(addr), _) => (false, addr.trim_end_matches('/')),
            (_, Some(addr)) => (true, addr.trim_end_matches('/')),
            _ => return Err(bad()),
        };
        if addr.is_empty() || addr.contains('/') || !addr.contains(':') {
            return Err(bad());
        }
        let link = if tls {
            let Some(connector) = access.tls.clone() else {
                return Err(format!(
                    "CLUSTER_CA_MISSING: {url} is https://: give the CA bundle that signed the \
                     nodes' certificates (klock serve --cluster-ca FILE, klock cluster --ca FILE)"
                ));
            };
            let host = addr[..addr.rfind(':').unwrap_or(addr.len())]
                .trim_start_matches('[')
                .trim_end_matches(']');
            let name = ServerName::try_from(host.to_owned())
                .map_err(|e| format!("BAD_PEER: {url}: {host:?} is not a server name: {e}"))?;
            Link::Tls { connector, name }
        } else {
            Link::Plain
        };
        Ok(Peer {
            addr: addr.to_owned(),
            link,
            secret: Arc::clone(&access.secret),
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
        let mut headers = HeaderMap::new();
        if !body.is_empty() {
            headers.insert(
                hyper::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
        }
        if let Some((name, value)) = header {
            let value = HeaderValue::try_from(value)
                .map_err(|e| format!("a request to {}: {e}", self.addr))?;
            headers.insert(name, value);
        }
        let (status, _, body) = self
            .send(method, path, headers, Bytes::from(body), timeout)
            .await?;
        if status == StatusCode::UNAUTHORIZED {
            return Err(format!(
                "CLUSTER_SECRET_REFUSED: {} refused this node's cluster secret",
                self.addr
            ));
        }
        Ok((status, body))
    }

    /// Sends `method path` with `headers` (and the cluster secret) and `body`, and returns
    /// the answer's status, headers and body, whatever its status: a client's request relayed
    /// to the leader's client API ([`klock_server::relay`]) gets the leader's answer, a 401
    /// included.
    ///
    /// # Errors
    /// The peer cannot be reached or does not answer within `timeout`.
    pub async fn send(
        &self,
        method: hyper::Method,
        path: &str,
        headers: HeaderMap,
        body: Bytes,
        timeout: Duration,
    ) -> Result<(StatusCode, HeaderMap, Bytes), String> {
        let mut request = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, &self.addr)
            .header(SECRET_HEADER, &*self.secret)
            .body(Full::new(body))
            .map_err(|e| format!("a request to {}: {e}", self.addr))?;
        request.headers_mut().extend(headers);
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
            let (head, body) = response.into_parts();
            let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
            Ok::<_, String>((sender, head.status, head.headers, body))
        })
        .await;
        match answer {
            Ok(Ok((sender, status, headers, body))) => {
                // Kept for the next request: the connection stays open between them (up to
                // MAX_IDLE of them; a burst's extra connections close).
                let mut idle = lock(&self.idle);
                if idle.len() < MAX_IDLE {
                    idle.push(sender);
                }
                drop(idle);
                Ok((status, headers, body))
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
        match &self.link {
            Link::Plain => handshake(tcp).await,
            Link::Tls { connector, name } => {
                let tls = connector
                    .connect(name.clone(), tcp)
                    .await
                    .map_err(|e| format!("TLS with the peer failed: {e}"))?;
                handshake(tls).await
            }
        }
    }
}

/// HTTP/1.1 over `io`, driven by a task of its own until either side closes it (a failure
/// shows as the next request's error, which reconnects).
async fn handshake<I>(io: I) -> Result<SendRequest<Full<Bytes>>, String>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| format!("cannot connect: {e}"))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
