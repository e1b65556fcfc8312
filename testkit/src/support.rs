//! What the HTTP test files share beyond the server ([`crate::server::Server`]): an open
//! session and calls on its routes, a metric, a self-signed certificate and a client trusting
//! it, and a bearer token's digest as `klock token-hash` prints it.

use crate::http_client::request;
use crate::server::Server;
use serde_json::{json, Value};

/// An open session: its namespace, id, token and resume secret.
pub struct Agent {
    pub ns: String,
    pub id: u64,
    pub token: String,
    /// Empty from a server that answers none (the isolation tests run on old code too).
    pub secret: String,
}

impl Agent {
    /// The session an open's (or a resume's) answer `v` in namespace `ns` describes.
    pub fn of(ns: &str, v: &Value) -> Agent {
        Agent {
            ns: ns.to_owned(),
            id: v["session_id"].as_u64().unwrap(),
            token: v["session_token"].as_str().unwrap().to_owned(),
            secret: v["resume_secret"].as_str().unwrap_or_default().to_owned(),
        }
    }
}

/// A call on a session's route (`/v1/ns/{ns}/sessions/{id}/{what}`) with its session token.
pub fn on(s: &Server, a: &Agent, method: &str, what: &str, body: Value) -> (u16, Value) {
    s.call(
        method,
        &format!("/v1/ns/{}/sessions/{}/{what}", a.ns, a.id),
        &[("klock-session-token", &a.token)],
        &body.to_string(),
    )
}

/// A metric's value from `/metrics` (`None`: the server has no such series).
pub fn metric(port: u16, name: &str) -> Option<f64> {
    let answer = request(port, "GET", "/metrics", &[], b"").unwrap();
    let text = String::from_utf8(answer.raw).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// A self-signed certificate for `localhost` and its key, written as PEM into `dir`: the
/// certificate (for a client's roots) and the two files (for `--tls-cert`, `--tls-key`).
pub fn self_signed(
    dir: &std::path::Path,
) -> (
    rcgen::CertifiedKey<rcgen::KeyPair>,
    std::path::PathBuf,
    std::path::PathBuf,
) {
    let certified = rcgen::generate_simple_self_signed(vec![String::from("localhost")]).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, certified.cert.pem()).unwrap();
    std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
    (certified, cert, key)
}

/// A TLS client configuration that trusts `certified` only.
pub fn trusting(
    certified: &rcgen::CertifiedKey<rcgen::KeyPair>,
) -> std::sync::Arc<rustls::ClientConfig> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(certified.cert.der().clone()).unwrap();
    std::sync::Arc::new(
        rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

/// Opens a session for `agent` in `ns` (asserting 200).
pub fn open(s: &Server, ns: &str, agent: &str) -> Agent {
    let (status, v) = s.call(
        "POST",
        &format!("/v1/ns/{ns}/sessions"),
        &[],
        &json!({ "agent_id": agent }).to_string(),
    );
    assert_eq!(status, 200, "{v}");
    Agent::of(ns, &v)
}

/// The digest a `--tokens` file holds for `secret`: what `klock token-hash` prints (the same
/// functions; `cli/tests/cli_help.rs` checks the command's output against it).
pub fn sha256_of(secret: &str) -> String {
    klock_server::auth::hex(&klock_server::auth::digest(secret))
}

/// Waits until the other end closes `s` (EOF or reset), reading whatever comes first;
/// false if it stays open for `limit` (a bound for a failing test, not a timing claim).
pub fn closed_by_server(s: &mut std::net::TcpStream, limit: std::time::Duration) -> bool {
    s.set_read_timeout(Some(limit)).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match std::io::Read::read(s, &mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}
