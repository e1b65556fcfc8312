//! Where the server is, and one request to it: the transport under the friendly client and
//! under `klock exec`, `klock mcp`, `klock status` and `klock reconcile`.
//!
//! Contract:
//! - The client is made of [`Endpoint`]s ([`crate::endpoint`]: a server, or a cluster's
//!   nodes). An `https://` server needs `--ca PATH` (or `KLOCK_CA`): the PEM certificates to
//!   trust, since this client carries no system trust store.
//! - [`Transport::call`] sends one logical request and returns the JSON body of a 2xx answer,
//!   or a [`Failure`] that tells an unreachable cluster from a server that said no. Which node
//!   each attempt goes to, when to pause and when to give up are the core's
//!   ([`klock_core::client::failover`]: one [`Servers`] per transport, shared by its clones);
//!   this driver only carries out its [`Next`]. Each attempt is one HTTP/1.1 request, bounded
//!   by what is left of the call's budget, on a connection kept alive for the next ones (one
//!   [`crate::conn::Pool`] per node, shared by the clones). The budget is the reconnect timeout
//!   ([`DEFAULT_RECONNECT_TIMEOUT`], as Python's `reconnect_timeout` and Node's
//!   `reconnectTimeoutMs`) plus what the request asks the server to hold it (a long poll).
//! - Every request but a `GET` carries one `Idempotency-Key`, made once per logical request
//!   and sent again with each attempt: a node that answers a retry of a write another node
//!   already applied answers the first answer, never applying it twice (SPEC §13.7).
//! - A best-effort call ([`Transport::best_effort`]: a close or a withdrawal nobody waits
//!   for, the cleanup after a lost lease) tries each node once, without pauses, within
//!   [`BEST_EFFORT_BUDGET`] (the core's `call_once`).
//! - A certificate the handshake refuses is `Refused` with the name `CERTIFICATE` (never
//!   retried as if unreachable).

use crate::conn::Pool;
pub use crate::endpoint::Endpoint;
use crate::http::{parse, Answer};
use crate::watch::Watches;
use klock_core::client::failover::{GaveUp, Next, Outcome, Servers, LEADER_HEADER};
use klock_core::client::renewals::MAX_RENEWALS_IN_FLIGHT;
use serde_json::Value;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// A call's budget beyond what it asks the server to hold it, unless the client sets one
/// (Python's `reconnect_timeout`, Node's `reconnectTimeoutMs`: 30 s).
pub const DEFAULT_RECONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// The most a best-effort call may take (Python's `_ONCE_TIMEOUT_S`).
pub const BEST_EFFORT_BUDGET: Duration = Duration::from_secs(1);

/// Why a call did not answer with a 2xx.
#[derive(Clone, Debug)]
pub enum Failure {
    /// No answer: nothing listens, the connection broke, or the time ran out.
    Unreachable(String),
    /// The server answered with an error (`{"error": {code, name, message}}`).
    Refused {
        status: u16,
        name: String,
        message: String,
    },
}

impl Failure {
    /// The error's stable name (`UNKNOWN_SESSION`, ...), or `UNREACHABLE`.
    pub fn name(&self) -> &str {
        match self {
            Failure::Unreachable(_) => "UNREACHABLE",
            Failure::Refused { name, .. } => name,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Unreachable(why) => f.write_str(why),
            Failure::Refused {
                status,
                name,
                message,
            } if *status == 0 => write!(f, "{name}: {message}"), // refused before any answer
            Failure::Refused {
                status,
                name,
                message,
            } => {
                write!(f, "the server refused ({status} {name}): {message}")?;
                if name == "UNAUTHORIZED" {
                    f.write_str(" (give the token with --token T or $KLOCK_TOKEN)")?;
                }
                Ok(())
            }
        }
    }
}

/// One node of the client's list: where it is, and its idle kept-alive connections.
#[derive(Clone)]
struct Node {
    endpoint: Endpoint,
    pool: Pool,
}

/// A server (or a cluster's nodes) and the bearer token to show it.
#[derive(Clone)]
pub struct Transport {
    /// The nodes, by position in the list the core's [`Servers`] counts in; shared by clones.
    nodes: Arc<[Node]>,
    /// The node calls start at, and whether the last call found none: one per client.
    servers: Arc<Mutex<Servers>>,
    /// The zero of the milliseconds the core counts in.
    origin: Instant,
    /// A call's budget beyond what it asks the server to hold it.
    reconnect_timeout: Duration,
    /// Calls are best effort: each node once ([`Transport::best_effort`]).
    once: bool,
    token: Option<String>,
    /// For `https://` endpoints: what trusts their certificates.
    tls: Option<tokio_rustls::TlsConnector>,
    /// The CA bundle it was made from, for a command started with this connection.
    ca: Option<PathBuf>,
    /// The namespace event streams its sessions share ([`crate::watch`]): one per namespace
    /// for the transport and its clones.
    watches: Watches,
    /// Turns for the keepers' renewals, shared by the clones: at most the core's
    /// [`MAX_RENEWALS_IN_FLIGHT`] heartbeats in flight at once.
    renewals: Arc<Semaphore>,
}

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transport")
            .field("servers", &self.servers_text())
            .field("ca", &self.ca)
            .finish_non_exhaustive()
    }
}

/// A TLS connector trusting only the PEM certificates in the file `ca` (this client carries
/// no system trust store). Also what a cluster node trusts its `https://` peers with
/// (`klock-raft`).
///
/// # Errors
/// `PATH: why`: the file cannot be read, or holds no PEM certificate.
pub fn trusting(ca: &Path) -> Result<tokio_rustls::TlsConnector, String> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let bad = |why: String| format!("{}: {why}", ca.display());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).map_err(|e| bad(e.to_string()))? {
        let cert = cert.map_err(|e| bad(e.to_string()))?;
        roots.add(cert).map_err(|e| bad(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(bad(String::from("no PEM certificate in it")));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// The certificate error behind a failed TLS handshake, if that is what it is.
fn refused_certificate(e: &std::io::Error) -> Option<&rustls::Error> {
    let inner = e.get_ref()?.downcast_ref::<rustls::Error>()?;
    matches!(
        inner,
        rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented
    )
    .then_some(inner)
}

/// What every attempt may take beyond what it asks the server to wait.
const SLACK: Duration = Duration::from_secs(10);

/// Whole milliseconds of a duration, saturating.
fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A fresh `Idempotency-Key`: 128 bits from the standard library's randomly seeded hasher
/// over a process-wide counter. It needs to be unique, not secret (the server scopes a key to
/// the bearer token, the session and the route, so another client cannot reach its answer).
fn idempotency_key() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static MADE: AtomicU64 = AtomicU64::new(0);
    let n = MADE.fetch_add(1, Ordering::Relaxed);
    let half = |salt: u64| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(n);
        h.write_u64(salt);
        h.finish()
    };
    format!("{:016x}{:016x}", half(0), half(1))
}

/// A `Retry-After` in whole seconds, in milliseconds.
fn retry_after_ms(answer: &Answer) -> Option<u64> {
    let seconds: u64 = answer.header("retry-after")?.trim().parse().ok()?;
    Some(seconds.saturating_mul(1_000))
}

/// A 2xx answer as the caller sees it.
struct Answered {
    body: Value,
    /// `Klock-Now`: the server's time of the command the request made.
    now: Option<u64>,
    /// `Klock-Index`: the log index of that command's entry.
    index: Option<u64>,
    /// The node that answered, by position in the list.
    node: usize,
}

/// A server's answer as the caller sees it: a 2xx's JSON and headers, else its error.
fn answered(answer: Answer, node: usize) -> Result<Answered, Failure> {
    if (200..300).contains(&answer.status) {
        let number = |name: &str| answer.header(name).and_then(|v| v.parse().ok());
        return Ok(Answered {
            now: number("klock-now"),
            index: number("klock-index"),
            body: answer.body,
            node,
        });
    }
    let error = &answer.body["error"];
    let text = |v: &Value| v.as_str().map(str::to_owned);
    Err(Failure::Refused {
        status: answer.status,
        name: text(&error["name"]).unwrap_or_else(|| String::from("HTTP_ERROR")),
        message: text(&error["message"])
            .unwrap_or_else(|| String::from_utf8_lossy(&answer.raw).into_owned()),
    })
}

impl Transport {
    /// A client of one server; `token` (else `KLOCK_TOKEN`) goes out as `Authorization:
    /// Bearer`.
    pub fn new(endpoint: Endpoint, token: Option<String>) -> Transport {
        Transport::of(vec![endpoint], Servers::new(1).expect("one server"), token)
    }

    /// A client of a cluster's nodes (or of one server, a list of one), as [`Transport::new`].
    ///
    /// # Errors
    /// No endpoint.
    pub fn nodes(endpoints: Vec<Endpoint>, token: Option<String>) -> Result<Transport, String> {
        let servers = Servers::new(endpoints.len())
            .map_err(|_| String::from("no server URL: give --server URL[,URL...]"))?;
        Ok(Transport::of(endpoints, servers, token))
    }

    fn of(endpoints: Vec<Endpoint>, servers: Servers, token: Option<String>) -> Transport {
        let token = token.or_else(|| std::env::var("KLOCK_TOKEN").ok());
        let nodes = endpoints
            .into_iter()
            .map(|endpoint| Node {
                endpoint,
                pool: Pool::default(),
            })
            .collect();
        Transport {
            nodes,
            servers: Arc::new(Mutex::new(servers)),
            origin: Instant::now(),
            reconnect_timeout: DEFAULT_RECONNECT_TIMEOUT,
            once: false,
            token,
            tls: None,
            ca: None,
            watches: Watches::default(),
            renewals: Arc::new(Semaphore::new(MAX_RENEWALS_IN_FLIGHT)),
        }
    }

    /// The client with this budget for each call (beyond what the call asks the server to
    /// hold it): how long it tries the nodes, pauses included, before it gives up unreachable.
    pub fn with_reconnect_timeout(mut self, budget: Duration) -> Transport {
        self.reconnect_timeout = budget;
        self
    }

    /// The same client (its nodes, connections and preferred node shared) making best-effort
    /// calls: each node tried once, without pauses, within [`BEST_EFFORT_BUDGET`]. For what
    /// nobody waits on (a close after a drop, a withdrawal) or what must not hold up a
    /// program that already knows its server is gone (the cleanup after a lost lease).
    pub fn best_effort(&self) -> Transport {
        Transport {
            once: true,
            ..self.clone()
        }
    }

    /// The client trusting the CA bundle `ca` (else `KLOCK_CA`) for `https://` endpoints.
    ///
    /// # Errors
    /// An `https://` endpoint without a bundle, a bundle for plain ones only, or a file that
    /// is not a PEM bundle of certificates.
    pub fn with_ca(mut self, ca: Option<PathBuf>) -> Result<Transport, String> {
        let tls = self
            .nodes
            .iter()
            .any(|n| matches!(n.endpoint, Endpoint::Tls { .. }));
        let ca = match ca {
            Some(ca) if !tls => {
                return Err(format!(
                    "--ca {} is for an https:// server, and {} is not one",
                    ca.display(),
                    self.servers_text()
                ))
            }
            Some(ca) => Some(ca),
            None if tls => std::env::var_os("KLOCK_CA")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            None => None,
        };
        if tls {
            let Some(ca) = ca else {
                return Err(format!(
                    "{}: give the CA certificates to trust with --ca PATH (or $KLOCK_CA); this client has no system trust store",
                    self.servers_text()
                ));
            };
            self.tls = Some(trusting(&ca).map_err(|e| format!("--ca {e}"))?);
            self.ca = Some(ca);
        }
        Ok(self)
    }

    /// The endpoints, in the order given.
    pub fn endpoints(&self) -> impl Iterator<Item = &Endpoint> {
        self.nodes.iter().map(|n| &n.endpoint)
    }

    /// The endpoints as words: `http://a:1, http://b:2`.
    pub fn servers_text(&self) -> String {
        let urls: Vec<String> = self.endpoints().map(Endpoint::to_string).collect();
        urls.join(", ")
    }

    /// The CA bundle `https://` endpoints are trusted with.
    pub fn ca(&self) -> Option<&Path> {
        self.ca.as_deref()
    }

    /// The namespace event streams of this client ([`crate::watch`]).
    pub(crate) fn watches(&self) -> &Watches {
        &self.watches
    }

    /// Waits for a renewal's turn (the core's [`klock_core::client::renewals`]); the renewal
    /// is sent while the permit is held.
    pub(crate) async fn renewal_turn(&self) -> tokio::sync::OwnedSemaphorePermit {
        self.renewals
            .clone()
            .acquire_owned()
            .await
            .expect("the renewals' semaphore is never closed")
    }

    /// The bearer token this client shows, if any.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// Sends one request and returns the JSON of a 2xx answer. `waits` is how long the
    /// server may hold it (a long poll): each attempt is bounded by that plus a slack, the
    /// whole call by that plus the reconnect timeout.
    ///
    /// # Errors
    /// [`Failure::Unreachable`] when no node answered within the budget, [`Failure::Refused`]
    /// for a 4xx or 5xx answer.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        session_token: Option<&str>,
        body: Option<&Value>,
        waits: Duration,
    ) -> Result<Value, Failure> {
        let (body, _) = self
            .call_at(method, path, session_token, body, waits)
            .await?;
        Ok(body)
    }

    /// Milliseconds on the clock the core's rules count in.
    fn now_ms(&self) -> u64 {
        ms(self.origin.elapsed())
    }

    /// [`Transport::call`], and the server's time of the command it made (`Klock-Now`), to
    /// tell how far away an `expires_at` is.
    ///
    /// # Errors
    /// As [`Transport::call`].
    pub async fn call_at(
        &self,
        method: &str,
        path: &str,
        session_token: Option<&str>,
        body: Option<&Value>,
        waits: Duration,
    ) -> Result<(Value, Option<u64>), Failure> {
        let request = Request {
            method,
            path,
            session_token,
            body: body.map(Value::to_string).unwrap_or_default(),
            // One key per logical request: every attempt, on any node, carries the same.
            key: (method != "GET").then(idempotency_key),
        };
        let answered = self.exchange(&request, waits).await?;
        Ok((answered.body, answered.now))
    }

    /// A `POST` of `body` to `path` as [`Transport::call`] sends it, and the log index of the
    /// command it made (`Klock-Index`; `None` from a server that does not say): event ids
    /// start with it, so a reader of events knows where that command's begin.
    ///
    /// # Errors
    /// As [`Transport::call`].
    pub async fn post_indexed(
        &self,
        path: &str,
        body: &Value,
    ) -> Result<(Value, Option<u64>), Failure> {
        let request = Request {
            method: "POST",
            path,
            session_token: None,
            body: body.to_string(),
            key: Some(idempotency_key()),
        };
        let answered = self.exchange(&request, Duration::ZERO).await?;
        Ok((answered.body, answered.index))
    }

    /// A `GET` of `path` as [`Transport::call`] sends it, and which node answered (its
    /// position in the list): a reader that resumes a stream must know when the node changed
    /// (the core's `watch` rules).
    ///
    /// # Errors
    /// As [`Transport::call`].
    pub async fn get_from(&self, path: &str, waits: Duration) -> Result<(Value, usize), Failure> {
        let request = Request {
            method: "GET",
            path,
            session_token: None,
            body: String::new(),
            key: None,
        };
        let answered = self.exchange(&request, waits).await?;
        Ok((answered.body, answered.node))
    }

    /// Sends `request` (module contract): a 2xx answer, with the node that gave it.
    async fn exchange(&self, request: &Request<'_>, waits: Duration) -> Result<Answered, Failure> {
        let started = Instant::now();
        let mut attempts = {
            let servers = self.servers.lock().expect("servers lock");
            if self.once {
                let budget = BEST_EFFORT_BUDGET.min(self.reconnect_timeout);
                servers.call_once(self.now_ms(), ms(budget.saturating_add(waits)))
            } else {
                let budget = self.reconnect_timeout.saturating_add(waits);
                servers.call(self.now_ms(), ms(budget))
            }
        };
        loop {
            let limit = attempts.attempt_limit_ms(self.now_ms(), ms(waits + SLACK));
            let at = attempts.node();
            let node = &self.nodes[at];
            let attempt = self
                .attempt(node, request, Duration::from_millis(limit))
                .await;
            let (outcome, why) = match &attempt {
                Ok(answer) if answer.status == 429 => (
                    Outcome::Busy {
                        retry_after_ms: retry_after_ms(answer),
                    },
                    None,
                ),
                Ok(answer) if answer.status == 503 => (
                    Outcome::Unavailable {
                        retry_after_ms: retry_after_ms(answer),
                    },
                    Some(format!(
                        "{} answered 503 {}",
                        node.endpoint,
                        answer.body["error"]["name"]
                            .as_str()
                            .unwrap_or("UNAVAILABLE")
                    )),
                ),
                Ok(_) => (Outcome::Answered, None),
                Err(Failure::Unreachable(why)) => (Outcome::Unreachable, Some(why.clone())),
                // A refused certificate: waiting does not fix it, nor does another node.
                Err(refused) => return Err(refused.clone()),
            };
            let next = {
                let mut servers = self.servers.lock().expect("servers lock");
                let next = attempts.after(&mut servers, outcome, self.now_ms());
                // A follower's answer names the leader: the next calls go there if it is ours.
                if let (Next::Done, Ok(answer)) = (next, &attempt) {
                    if let Some(leader) = answer.header(LEADER_HEADER) {
                        let urls: Vec<String> = self.endpoints().map(Endpoint::to_string).collect();
                        servers.led_by(leader, urls.iter().map(String::as_str));
                    }
                }
                next
            };
            match next {
                Next::Done | Next::GiveUp(GaveUp::Busy) => {
                    return answered(attempt.expect("an answer"), at);
                }
                Next::Retry { after_ms, .. } => {
                    tokio::time::sleep(Duration::from_millis(after_ms)).await;
                }
                Next::GiveUp(GaveUp::Unreachable) => {
                    let why = why.unwrap_or_default();
                    return Err(Failure::Unreachable(format!(
                        "cannot reach the Klock server at {}: {why} (tried for {:.1} s, reconnect timeout {} ms; is `klock serve` running there? point to it with --server URL[,URL...] or --socket PATH)",
                        self.servers_text(),
                        started.elapsed().as_secs_f64(),
                        ms(self.reconnect_timeout),
                    )));
                }
            }
        }
    }

    /// One attempt of `request` on `node`, bounded by `limit`: the node's answer, whatever
    /// its status, or why there was none.
    async fn attempt(
        &self,
        node: &Node,
        request: &Request<'_>,
        limit: Duration,
    ) -> Result<Answer, Failure> {
        let Request {
            method,
            path,
            session_token,
            body,
            key,
        } = request;
        // The Host a tokenless server checks (a browser's page would send its own name); a
        // Unix socket is out of a browser's reach and checks none.
        let host = match &node.endpoint {
            Endpoint::Tcp(addr) | Endpoint::Tls { addr, .. } => addr.as_str(),
            Endpoint::Unix(_) => "localhost",
        };
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
            body.len()
        );
        if let Some(token) = &self.token {
            head.push_str(&format!("authorization: Bearer {token}\r\n"));
        }
        if let Some(token) = session_token {
            head.push_str(&format!("klock-session-token: {token}\r\n"));
        }
        if let Some(key) = key {
            head.push_str(&format!("idempotency-key: {key}\r\n"));
        }
        head.push_str("\r\n");
        head.push_str(body);
        let exchange = node
            .pool
            .send(&node.endpoint, self.tls.as_ref(), head.as_bytes());
        // Which node failed, when there are several to tell apart.
        let unreachable = |why: String| match self.nodes.len() {
            1 => Failure::Unreachable(why),
            _ => Failure::Unreachable(format!("{}: {why}", node.endpoint)),
        };
        let bytes = match tokio::time::timeout(limit, exchange).await {
            Err(_) => return Err(unreachable(format!("no answer to {method} {path} in time"))),
            Ok(Err(e)) => {
                if let Some(refused) = refused_certificate(&e) {
                    return Err(Failure::Refused {
                        status: 0,
                        name: String::from("CERTIFICATE"),
                        message: format!(
                            "the TLS certificate of {} was refused ({refused}); give the CA that signed it with --ca PATH",
                            node.endpoint
                        ),
                    });
                }
                return Err(unreachable(e.to_string()));
            }
            Ok(Ok(bytes)) => bytes,
        };
        parse(&bytes).ok_or_else(|| unreachable(format!("{method} {path}: the answer is not HTTP")))
    }
}

/// One logical request, as each attempt sends it.
struct Request<'a> {
    method: &'a str,
    path: &'a str,
    session_token: Option<&'a str>,
    body: String,
    key: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_goes_with_https_and_a_list_is_not_empty() {
        let tls = Endpoint::parse("https://localhost:9/").unwrap();
        assert!(Transport::new(tls, None)
            .with_ca(None)
            .is_err_and(|e| e.contains("--ca")));
        assert!(Transport::new(Endpoint::parse("http://x:1").unwrap(), None)
            .with_ca(Some(PathBuf::from("/nonexistent.pem")))
            .is_err_and(|e| e.contains("https://")));
        assert!(Transport::nodes(Vec::new(), None).is_err());
    }

    #[test]
    fn idempotency_keys_differ() {
        let keys: std::collections::BTreeSet<String> =
            (0..1_000).map(|_| idempotency_key()).collect();
        assert_eq!(keys.len(), 1_000);
        assert!(keys.iter().all(|k| k.len() == 32));
    }
}
