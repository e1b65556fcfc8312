//! Where the server is, and one request to it: the transport under the friendly client and
//! under `klock exec`, `klock mcp`, `klock status` and `klock reconcile`.
//!
//! Contract: [`Endpoint::parse`] reads a server URL; [`Endpoint::choose`] turns `--server URL` / `--socket PATH` (or `KLOCK_SERVER` /
//! `KLOCK_SOCKET`, or the default `http://127.0.0.1:7300`) into an endpoint. An `https://`
//! server needs `--ca PATH` (or `KLOCK_CA`): the PEM certificates to trust, since this client
//! carries no system trust store. [`Transport::call`] sends one HTTP/1.1 request, bounded in
//! time, on a connection the client keeps alive for the next ones (its clones share them:
//! [`crate::conn`]), and returns the JSON body of a 2xx answer, or a [`Failure`] that tells an
//! unreachable server from one that said no; a certificate the handshake refuses is `Refused`
//! with the name `CERTIFICATE` (never retried as if unreachable).

use crate::conn::Pool;
use crate::http::parse;
use serde_json::Value;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Where `klock serve` listens.
#[derive(Clone, Debug)]
pub enum Endpoint {
    /// `host:port` over TCP.
    Tcp(String),
    /// `host:port` over TLS; `host` is the name the certificate must carry.
    Tls { addr: String, host: String },
    /// A Unix socket (`klock serve --socket PATH`).
    Unix(PathBuf),
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Tcp(addr) => write!(f, "http://{addr}"),
            Endpoint::Tls { addr, .. } => write!(f, "https://{addr}"),
            Endpoint::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

impl Endpoint {
    /// The endpoint from the flags, else the environment, else the default.
    ///
    /// # Errors
    /// Both flags given, or a URL that is not `http://HOST:PORT`.
    pub fn choose(server: Option<String>, socket: Option<PathBuf>) -> Result<Endpoint, String> {
        // Flags win over the environment as a pair, so `--socket` overrides $KLOCK_SERVER.
        let (server, socket) = if server.is_some() || socket.is_some() {
            (server, socket)
        } else {
            (
                std::env::var("KLOCK_SERVER").ok(),
                std::env::var_os("KLOCK_SOCKET").map(PathBuf::from),
            )
        };
        match (server, socket) {
            (Some(_), Some(_)) => Err(String::from(
                "give --server URL or --socket PATH, not both (or only one of $KLOCK_SERVER and $KLOCK_SOCKET)",
            )),
            (None, Some(path)) => Ok(Endpoint::Unix(path)),
            (Some(url), None) => Endpoint::parse(&url).map_err(|e| format!("--server: {e}")),
            (None, None) => Ok(Endpoint::Tcp(String::from("127.0.0.1:7300"))),
        }
    }

    /// The endpoint of a server URL: `http://HOST:PORT` or `https://HOST:PORT` (a trailing
    /// `/` is allowed; a bare `HOST:PORT` is taken as `http://`).
    ///
    /// # Errors
    /// Anything else (a path, no port, an empty host); the message shows the URL.
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let (tls, rest) = match url.strip_prefix("https://") {
            Some(rest) => (true, rest),
            None => (false, url.strip_prefix("http://").unwrap_or(url)),
        };
        let addr = rest.trim_end_matches('/');
        if addr.is_empty() || addr.contains('/') || !addr.contains(':') {
            return Err(format!(
                "a server URL is http://HOST:PORT or https://HOST:PORT (like http://127.0.0.1:7300), got {url:?}"
            ));
        }
        if !tls {
            return Ok(Endpoint::Tcp(addr.to_owned()));
        }
        let host = addr[..addr.rfind(':').unwrap_or(addr.len())]
            .trim_start_matches('[')
            .trim_end_matches(']');
        Ok(Endpoint::Tls {
            addr: addr.to_owned(),
            host: host.to_owned(),
        })
    }
}

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

/// A server and the bearer token to show it.
#[derive(Clone)]
pub struct Transport {
    pub endpoint: Endpoint,
    token: Option<String>,
    /// For an `https://` endpoint: what trusts its certificate.
    tls: Option<tokio_rustls::TlsConnector>,
    /// The CA bundle it was made from, for a command started with this connection.
    ca: Option<PathBuf>,
    /// Its idle kept-alive connections, shared by its clones.
    pool: Pool,
}

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transport")
            .field("endpoint", &self.endpoint)
            .field("ca", &self.ca)
            .finish_non_exhaustive()
    }
}

/// A TLS connector trusting the PEM certificates in `ca` only.
fn connector(ca: &Path) -> Result<tokio_rustls::TlsConnector, String> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let bad = |why: String| format!("--ca {}: {why}", ca.display());
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

/// What every request may take beyond what it asks the server to wait.
const SLACK: Duration = Duration::from_secs(10);

impl Transport {
    /// A client; `token` (else `KLOCK_TOKEN`) goes out as `Authorization: Bearer`.
    pub fn new(endpoint: Endpoint, token: Option<String>) -> Transport {
        let token = token.or_else(|| std::env::var("KLOCK_TOKEN").ok());
        Transport {
            endpoint,
            token,
            tls: None,
            ca: None,
            pool: Pool::default(),
        }
    }

    /// The client trusting the CA bundle `ca` (else `KLOCK_CA`) for an `https://` endpoint.
    ///
    /// # Errors
    /// An `https://` endpoint without a bundle, a bundle for a plain one, or a file that is
    /// not a PEM bundle of certificates.
    pub fn with_ca(mut self, ca: Option<PathBuf>) -> Result<Transport, String> {
        let tls = matches!(self.endpoint, Endpoint::Tls { .. });
        let ca = match ca {
            Some(ca) if !tls => {
                return Err(format!(
                    "--ca {} is for an https:// server, and {} is not one",
                    ca.display(),
                    self.endpoint
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
                    self.endpoint
                ));
            };
            self.tls = Some(connector(&ca)?);
            self.ca = Some(ca);
        }
        Ok(self)
    }

    /// The CA bundle an `https://` endpoint is trusted with.
    pub fn ca(&self) -> Option<&Path> {
        self.ca.as_deref()
    }

    /// The bearer token this client shows, if any.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// Sends one request and returns the JSON of a 2xx answer. `waits` is how long the
    /// server may hold it (a long poll); the whole exchange is bounded by that plus a slack.
    ///
    /// # Errors
    /// [`Failure::Unreachable`] without an answer, [`Failure::Refused`] for a 4xx or 5xx.
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
        let body = body.map(Value::to_string).unwrap_or_default();
        // The Host a tokenless server checks (a browser's page would send its own name); a
        // Unix socket is out of a browser's reach and checks none.
        let host = match &self.endpoint {
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
        head.push_str("\r\n");
        head.push_str(&body);
        // A read is safe to send again after a kept-alive connection broke under it; this
        // client sends no Idempotency-Key, so nothing else is.
        let exchange = self.pool.send(
            &self.endpoint,
            self.tls.as_ref(),
            head.as_bytes(),
            method == "GET",
        );
        let unreachable = |why: String| {
            Failure::Unreachable(format!(
                "cannot reach the Klock server at {}: {why} (is `klock serve` running there? point to it with --server URL or --socket PATH)",
                self.endpoint
            ))
        };
        let bytes = match tokio::time::timeout(waits + SLACK, exchange).await {
            Err(_) => return Err(unreachable(format!("no answer to {method} {path} in time"))),
            Ok(Err(e)) => {
                if let Some(refused) = refused_certificate(&e) {
                    // Waiting does not fix a certificate: say so now, never retried.
                    return Err(Failure::Refused {
                        status: 0,
                        name: String::from("CERTIFICATE"),
                        message: format!(
                            "the TLS certificate of {} was refused ({refused}); give the CA that signed it with --ca PATH",
                            self.endpoint
                        ),
                    });
                }
                return Err(unreachable(e.to_string()));
            }
            Ok(Ok(bytes)) => bytes,
        };
        let answer = parse(&bytes)
            .ok_or_else(|| unreachable(format!("{method} {path}: the answer is not HTTP")))?;
        if (200..300).contains(&answer.status) {
            let now = answer.header("klock-now").and_then(|v| v.parse().ok());
            return Ok((answer.body, now));
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked() {
        let tcp = Endpoint::parse("http://127.0.0.1:9/").unwrap();
        assert_eq!(tcp.to_string(), "http://127.0.0.1:9");
        let tls = Endpoint::parse("https://localhost:9/").unwrap();
        assert_eq!(tls.to_string(), "https://localhost:9");
        assert!(matches!(&tls, Endpoint::Tls { host, .. } if host == "localhost"));
        assert!(Transport::new(tls, None)
            .with_ca(None)
            .is_err_and(|e| e.contains("--ca")));
        assert!(Transport::new(Endpoint::parse("http://x:1").unwrap(), None)
            .with_ca(Some(PathBuf::from("/nonexistent.pem")))
            .is_err_and(|e| e.contains("https://")));
        assert!(Endpoint::parse("http://x/v1")
            .unwrap_err()
            .contains("HOST:PORT"));
        assert!(Endpoint::parse("localhost")
            .unwrap_err()
            .contains("HOST:PORT"));
    }
}
