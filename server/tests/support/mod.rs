//! What the HTTP test files share: a real `klock serve` on a free loopback port (killed on
//! drop), one JSON request to it, an open session, and a bearer token's digest as
//! `klock token-hash` prints it. Each file uses its own part of it.
#![allow(dead_code)]

use klock_server::http_client::{request, Spawned};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

/// A real `klock serve` on a free loopback port (killed on drop), and requests to it.
pub struct Server(pub Spawned);

impl Server {
    pub fn start(args: &[&str]) -> Server {
        let program = std::path::Path::new(env!("CARGO_BIN_EXE_klock"));
        Server(Spawned::start(program, args).expect("start klock serve"))
    }

    pub fn port(&self) -> u16 {
        self.0.port
    }

    /// One request; returns the status and the JSON body (every answer of the API is JSON).
    pub fn call(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> (u16, Value) {
        let answer = request(self.port(), method, path, headers, body.as_bytes()).unwrap();
        assert!(!answer.body.is_null(), "not JSON: {answer:?}");
        (answer.status, answer.body)
    }

    /// A GET with no headers.
    pub fn get(&self, path: &str) -> (u16, Value) {
        self.call("GET", path, &[], "")
    }

    /// One request; the raw answer (status line, headers and body), for what is not JSON.
    pub fn raw(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port())).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(40))).unwrap();
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1:{}\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
            self.port(),
            body.len()
        );
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        s.write_all(req.as_bytes()).unwrap();
        let _ = s.write_all(body);
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        out
    }

    pub fn kill(self) {
        self.0.kill();
    }
}

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

/// The digest a `--tokens` file holds for `secret`, from `klock token-hash`.
pub fn sha256_of(secret: &str) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_klock"))
        .arg("token-hash")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(secret.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}
