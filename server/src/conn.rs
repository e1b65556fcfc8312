//! Connections: how `klock serve` accepts and keeps them, over TCP, TLS and a Unix socket
//! (issue 22 item 8). Every bound holds before any authentication, since it is about sockets.
//!
//! Contract:
//! - At most [`ConnLimits::max_total`] connections at once, and [`ConnLimits::max_per_peer`]
//!   from one IP address (TCP and TLS; a Unix socket, guarded by its file permissions, has
//!   only the total). A new connection that would pass a cap first makes room by closing the
//!   least recently used *idle* connection of that scope (no request in flight), as nginx
//!   reuses keep-alive connections when it runs out; a client whose idle keep-alive
//!   connection is closed reconnects. If every connection of the scope has a request in
//!   flight, the new one is refused: `503 TOO_MANY_CONNECTIONS` (or
//!   `TOO_MANY_CONNECTIONS_FROM_PEER`) in plain HTTP, a bare close under TLS (before any
//!   handshake work).
//! - Once a request's first byte arrives, its head must arrive within
//!   [`ConnLimits::header_timeout`], and its body within the same time of the head; a TLS
//!   handshake gets the same time. A connection with no request in flight and no byte of a
//!   new one is closed after [`ConnLimits::idle_timeout`]. A long-poll or an event stream is a
//!   request in flight: it is never idle.
//! - A connection serves at most [`ConnLimits::max_requests`] requests; the last answer says
//!   `connection: close`.
//! - Checks run on a per-connection tick (a quarter of the shorter timeout, 5 ms to 1 s): a
//!   timeout closes its connection within a tick after it passes. On the request path the
//!   cost is a few atomic operations: no lock, no allocation (the connection table's lock is
//!   taken at accept and close only).

use crate::api::{Dispatch, Front};
use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue, Request, Response};
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The bounds on connections (each a `klock serve` flag).
#[derive(Clone, Copy, Debug)]
pub struct ConnLimits {
    /// Most connections at once (`--max-connections`).
    pub max_total: usize,
    /// Most connections from one IP address (`--max-connections-per-peer`).
    pub max_per_peer: usize,
    /// Most time a request's head (and then its body, and a TLS handshake) may take
    /// (`--header-timeout-ms`).
    pub header_timeout: Duration,
    /// Most time a connection may wait with no request (`--idle-timeout-ms`).
    pub idle_timeout: Duration,
    /// Most requests one connection serves (`--max-requests-per-connection`).
    pub max_requests: u64,
}

impl Default for ConnLimits {
    /// For a small (2-core) machine: 1,024 connections, 256 per peer, 10 s for a head, 60 s
    /// idle (longer than the clients' own keep-alive expiry: Python 5 s, Node 4 s, so a
    /// client never reuses a connection the server is closing), 10,000 requests a connection.
    fn default() -> ConnLimits {
        ConnLimits {
            max_total: 1024,
            max_per_peer: 256,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_requests: 10_000,
        }
    }
}

/// What the connection layer counts (rendered into `/metrics`).
#[derive(Default)]
pub struct NetMetrics {
    open: AtomicU64,
    accepted: AtomicU64,
    closed_idle: AtomicU64,
    closed_header_timeout: AtomicU64,
    closed_body_timeout: AtomicU64,
    closed_evicted: AtomicU64,
    refused_total: AtomicU64,
    refused_per_peer: AtomicU64,
    tls_failed: AtomicU64,
    /// Requests refused by [`crate::guard`]: a Host that is not loopback, a non-JSON body.
    pub refused_host: AtomicU64,
    pub refused_content_type: AtomicU64,
    /// Requests refused for naming too many ids (`api::WorkLimits`).
    pub refused_too_many_ids: AtomicU64,
}

impl NetMetrics {
    /// The Prometheus text of these counters.
    pub fn render(&self, out: &mut String) {
        let n = |a: &AtomicU64| a.load(Relaxed);
        let _ = writeln!(
            out,
            "# HELP klock_connections_open Connections open now.\n# TYPE klock_connections_open gauge\nklock_connections_open {}",
            n(&self.open)
        );
        let _ = writeln!(
            out,
            "# HELP klock_connections_accepted_total Connections accepted (refused ones included).\n# TYPE klock_connections_accepted_total counter\nklock_connections_accepted_total {}",
            n(&self.accepted)
        );
        let _ = writeln!(
            out,
            "# HELP klock_connections_closed_total Connections the server closed, by reason.\n# TYPE klock_connections_closed_total counter"
        );
        for (reason, a) in [
            ("idle_timeout", &self.closed_idle),
            ("header_timeout", &self.closed_header_timeout),
            ("body_timeout", &self.closed_body_timeout),
            ("evicted_idle", &self.closed_evicted),
            ("too_many_connections", &self.refused_total),
            ("too_many_connections_from_peer", &self.refused_per_peer),
            ("tls_handshake", &self.tls_failed),
        ] {
            let _ = writeln!(
                out,
                "klock_connections_closed_total{{reason=\"{reason}\"}} {}",
                n(a)
            );
        }
        let _ = writeln!(
            out,
            "# HELP klock_requests_refused_total Requests refused before reaching the engine, by reason.\n# TYPE klock_requests_refused_total counter"
        );
        for (reason, a) in [
            ("host_not_allowed", &self.refused_host),
            ("unsupported_media_type", &self.refused_content_type),
            ("too_many_ids", &self.refused_too_many_ids),
        ] {
            let _ = writeln!(
                out,
                "klock_requests_refused_total{{reason=\"{reason}\"}} {}",
                n(a)
            );
        }
    }
}

/// A listener: TCP (with the peer's address) or a Unix socket.
pub trait Listener: Send + 'static {
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// The next connection and its peer's IP address (none on a Unix socket).
    fn accept(&self) -> impl Future<Output = io::Result<(Self::Io, Option<IpAddr>)>> + Send;
}

impl Listener for tokio::net::TcpListener {
    type Io = tokio::net::TcpStream;
    async fn accept(&self) -> io::Result<(Self::Io, Option<IpAddr>)> {
        let (io, peer) = tokio::net::TcpListener::accept(self).await?;
        // Answers are small and latency matters more than packets saved.
        let _ = io.set_nodelay(true);
        Ok((io, Some(peer.ip())))
    }
}

impl Listener for tokio::net::UnixListener {
    type Io = tokio::net::UnixStream;
    async fn accept(&self) -> io::Result<(Self::Io, Option<IpAddr>)> {
        let (io, _) = tokio::net::UnixListener::accept(self).await?;
        Ok((io, None))
    }
}

/// One open connection, as its task and the table see it. Times are ms since the server's
/// epoch, plus one (0: none).
struct Conn {
    peer: Option<IpAddr>,
    /// Requests in flight (from dispatch until the answer's body is done).
    busy: AtomicU32,
    /// When the connection last finished an answer (or opened).
    last: AtomicU64,
    /// When the first byte of a request not yet dispatched came (0: none).
    head: AtomicU64,
    /// When a request whose body is still arriving was dispatched (0: none).
    body: AtomicU64,
    served: AtomicU64,
    /// Asked to close as soon as it has no request in flight (eviction, shutdown).
    evict: AtomicBool,
    wake: tokio::sync::Notify,
    epoch: Instant,
}

impl Conn {
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64 + 1
    }

    /// Why it must close now, if it must.
    fn expired(&self, limits: &ConnLimits) -> Option<Close> {
        let now = self.now();
        let past =
            |since: u64, limit: Duration| since != 0 && now - since >= limit.as_millis() as u64;
        let busy = self.busy.load(Relaxed) > 0;
        if busy {
            return past(self.body.load(Relaxed), limits.header_timeout).then_some(Close::Body);
        }
        if self.evict.load(Relaxed) {
            return Some(Close::Evicted);
        }
        let head = self.head.load(Relaxed);
        if head != 0 {
            return past(head, limits.header_timeout).then_some(Close::Header);
        }
        past(self.last.load(Relaxed), limits.idle_timeout).then_some(Close::Idle)
    }
}

enum Close {
    Idle,
    Header,
    Body,
    Evicted,
}

/// Every open connection, for the caps and for making room.
#[derive(Default)]
struct Table {
    next: u64,
    conns: HashMap<u64, Arc<Conn>>,
    per_peer: HashMap<IpAddr, usize>,
}

impl Table {
    /// Asks the least recently used idle connection (of `peer`, or any) to close; whether
    /// there was one.
    fn evict_idle(&self, peer: Option<IpAddr>) -> bool {
        let victim = self
            .conns
            .values()
            .filter(|c| peer.is_none() || c.peer == peer)
            .filter(|c| c.busy.load(Relaxed) == 0 && !c.evict.load(Relaxed))
            .min_by_key(|c| c.last.load(Relaxed));
        match victim {
            Some(c) => {
                c.evict.store(true, Relaxed);
                c.wake.notify_one();
                true
            }
            None => false,
        }
    }
}

/// The connection layer of one listener.
struct Gate {
    limits: ConnLimits,
    metrics: Arc<NetMetrics>,
    table: Mutex<Table>,
    epoch: Instant,
}

/// A connection's place in the table, given back when it closes.
struct Slot {
    gate: Arc<Gate>,
    id: u64,
    conn: Arc<Conn>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut table = self.gate.table.lock().expect("connection table");
        table.conns.remove(&self.id);
        if let Some(peer) = self.conn.peer {
            if let Some(n) = table.per_peer.get_mut(&peer) {
                *n -= 1;
                if *n == 0 {
                    table.per_peer.remove(&peer);
                }
            }
        }
        self.gate.metrics.open.fetch_sub(1, Relaxed);
    }
}

/// Why a connection was refused: the error's name and message.
struct Refusal(&'static str, String);

impl Gate {
    fn admit(self: &Arc<Gate>, peer: Option<IpAddr>) -> Result<Slot, Refusal> {
        let mut table = self.table.lock().expect("connection table");
        if let Some(ip) = peer {
            let from_peer = table.per_peer.get(&ip).copied().unwrap_or(0);
            if from_peer >= self.limits.max_per_peer && !table.evict_idle(Some(ip)) {
                self.metrics.refused_per_peer.fetch_add(1, Relaxed);
                return Err(Refusal(
                    "TOO_MANY_CONNECTIONS_FROM_PEER",
                    format!(
                        "{from_peer} connections from {ip} are busy; at most {} from one address (--max-connections-per-peer)",
                        self.limits.max_per_peer
                    ),
                ));
            }
        }
        if table.conns.len() >= self.limits.max_total && !table.evict_idle(None) {
            self.metrics.refused_total.fetch_add(1, Relaxed);
            return Err(Refusal(
                "TOO_MANY_CONNECTIONS",
                format!(
                    "{} connections are busy; at most {} at once (--max-connections)",
                    table.conns.len(),
                    self.limits.max_total
                ),
            ));
        }
        let conn = Arc::new(Conn {
            peer,
            busy: AtomicU32::new(0),
            last: AtomicU64::new(self.epoch.elapsed().as_millis() as u64 + 1),
            head: AtomicU64::new(0),
            body: AtomicU64::new(0),
            served: AtomicU64::new(0),
            evict: AtomicBool::new(false),
            wake: tokio::sync::Notify::new(),
            epoch: self.epoch,
        });
        table.next += 1;
        let id = table.next;
        table.conns.insert(id, Arc::clone(&conn));
        if let Some(ip) = peer {
            *table.per_peer.entry(ip).or_insert(0) += 1;
        }
        self.metrics.open.fetch_add(1, Relaxed);
        Ok(Slot {
            gate: Arc::clone(self),
            id,
            conn,
        })
    }

    /// Asks every connection to close once it has no request in flight.
    fn close_all(&self) {
        for conn in self.table.lock().expect("connection table").conns.values() {
            conn.evict.store(true, Relaxed);
            conn.wake.notify_one();
        }
    }

    fn open(&self) -> usize {
        self.table.lock().expect("connection table").conns.len()
    }
}

/// Serves `app` on `listener` within `limits` (TLS first if `tls` is given) until `shutdown`
/// completes; then lets requests in flight finish for up to 5 s.
///
/// # Errors
/// None today (accept errors, like running out of file descriptors, are waited out).
pub async fn serve<L: Listener>(
    listener: L,
    app: Front,
    tls: Option<tokio_rustls::TlsAcceptor>,
    limits: ConnLimits,
    metrics: Arc<NetMetrics>,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let gate = Arc::new(Gate {
        limits,
        metrics,
        table: Mutex::new(Table::default()),
        epoch: Instant::now(),
    });
    // Refusals being written at once; past this many a refused connection is just closed.
    let refusing = Arc::new(tokio::sync::Semaphore::new(64));
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (io, peer) = match accepted {
            Ok(found) => found,
            Err(_) => {
                // Out of descriptors or a connection reset before accept: wait a little
                // rather than spin (what axum::serve and hyper's examples do).
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        gate.metrics.accepted.fetch_add(1, Relaxed);
        let slot = match gate.admit(peer) {
            Ok(slot) => slot,
            Err(Refusal(name, message)) => {
                if let (None, Ok(permit)) = (&tls, Arc::clone(&refusing).try_acquire_owned()) {
                    tokio::spawn(async move {
                        refuse(io, refusal_bytes(name, &message)).await;
                        drop(permit);
                    });
                }
                continue;
            }
        };
        let (app, tls, gate) = (app.clone(), tls.clone(), Arc::clone(&gate));
        tokio::spawn(async move {
            let conn = Arc::clone(&slot.conn);
            match tls {
                None => serve_conn(io, conn, app, &gate.limits, &gate.metrics).await,
                Some(tls) => {
                    match tokio::time::timeout(gate.limits.header_timeout, tls.accept(io)).await {
                        Ok(Ok(io)) => serve_conn(io, conn, app, &gate.limits, &gate.metrics).await,
                        _ => {
                            gate.metrics.tls_failed.fetch_add(1, Relaxed);
                        }
                    }
                }
            }
            drop(slot);
        });
    }
    gate.close_all();
    let deadline = Instant::now() + Duration::from_secs(5);
    while gate.open() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Writes a refusal and closes, reading (and dropping) what the client sent meanwhile, so
/// the close is not a reset that loses the answer; half a second at most.
async fn refuse<I: AsyncRead + AsyncWrite + Unpin>(mut io: I, answer: Vec<u8>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let polite = async {
        io.write_all(&answer).await?;
        io.shutdown().await?;
        let mut sink = [0u8; 4096];
        let mut read = 0;
        while read < 64 << 10 {
            match io.read(&mut sink).await? {
                0 => break,
                n => read += n,
            }
        }
        Ok::<(), io::Error>(())
    };
    let _ = tokio::time::timeout(Duration::from_millis(500), polite).await;
}

/// A plain-HTTP refusal, written before closing.
fn refusal_bytes(name: &str, message: &str) -> Vec<u8> {
    let body =
        serde_json::json!({"error": {"code": 0, "name": name, "message": message}}).to_string();
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Serves one connection until it ends or must close (see the module contract).
async fn serve_conn<I>(
    io: I,
    conn: Arc<Conn>,
    app: Front,
    limits: &ConnLimits,
    metrics: &NetMetrics,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = Service {
        app,
        conn: Arc::clone(&conn),
        max_requests: limits.max_requests,
    };
    let io = TokioIo::new(Watched {
        io,
        conn: Arc::clone(&conn),
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    // Our own timers do this (hyper's header timer also runs while a connection is idle).
    builder.header_read_timeout(None);
    let served = builder.serve_connection(io, service);
    tokio::pin!(served);
    let shorter = limits.header_timeout.min(limits.idle_timeout);
    let tick = (shorter / 4).clamp(Duration::from_millis(5), Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = &mut served => return,
            () = tokio::time::sleep(tick) => {}
            () = conn.wake.notified() => {}
        }
        let counter = match conn.expired(limits) {
            None => continue,
            Some(Close::Idle) => &metrics.closed_idle,
            Some(Close::Header) => &metrics.closed_header_timeout,
            Some(Close::Body) => &metrics.closed_body_timeout,
            Some(Close::Evicted) => &metrics.closed_evicted,
        };
        counter.fetch_add(1, Relaxed);
        return; // dropping the connection closes the socket
    }
}

/// The socket, noting when a request's first byte comes while none is in flight.
struct Watched<I> {
    io: I,
    conn: Arc<Conn>,
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(())))
            && buf.filled().len() > before
            && self.conn.busy.load(Relaxed) == 0
            && self.conn.head.load(Relaxed) == 0
        {
            self.conn.head.store(self.conn.now(), Relaxed);
        }
        polled
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// A request in flight: counted from dispatch until its answer's body is done.
struct InFlight(Arc<Conn>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.last.store(self.0.now(), Relaxed);
        self.0.busy.fetch_sub(1, Relaxed);
    }
}

/// The front (router and busy routes) behind one connection, counting its requests.
#[derive(Clone)]
struct Service {
    app: Front,
    conn: Arc<Conn>,
    max_requests: u64,
}

impl hyper::service::Service<Request<Incoming>> for Service {
    type Response = Response<Answer>;
    type Error = Infallible;
    type Future = Dispatched;

    fn call(&self, request: Request<Incoming>) -> Dispatched {
        let conn = &self.conn;
        conn.busy.fetch_add(1, Relaxed);
        conn.head.store(0, Relaxed);
        let last = conn.served.fetch_add(1, Relaxed) + 1 >= self.max_requests;
        let request = if request.body().is_end_stream() {
            request.map(|body| Arriving { body, conn: None })
        } else {
            conn.body.store(conn.now(), Relaxed);
            request.map(|body| Arriving {
                body,
                conn: Some(Arc::clone(conn)),
            })
        };
        Dispatched {
            future: self.app.call(request),
            in_flight: Some(InFlight(Arc::clone(conn))),
            last,
        }
    }
}

pin_project_lite::pin_project! {
    /// The front's answer to come, holding the request's place in flight.
    struct Dispatched {
        #[pin]
        future: Dispatch,
        in_flight: Option<InFlight>,
        last: bool,
    }
}

impl Future for Dispatched {
    type Output = Result<Response<Answer>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut response = std::task::ready!(this.future.poll(cx));
        if *this.last {
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        let in_flight = this.in_flight.take();
        Poll::Ready(Ok(response.map(|body| Answer {
            body,
            _in_flight: in_flight,
        })))
    }
}

/// A request's body; once it has all arrived (or is dropped), the body timeout stops.
struct Arriving {
    body: Incoming,
    conn: Option<Arc<Conn>>,
}

impl Arriving {
    fn arrived(&mut self) {
        if let Some(conn) = self.conn.take() {
            conn.body.store(0, Relaxed);
        }
    }
}

impl Drop for Arriving {
    fn drop(&mut self) {
        self.arrived();
    }
}

impl HttpBody for Arriving {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_))))
            || self.body.is_end_stream()
        {
            self.arrived();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// An answer's body; the request stays in flight until it is done.
pub struct Answer {
    body: Body,
    _in_flight: Option<InFlight>,
}

impl HttpBody for Answer {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
