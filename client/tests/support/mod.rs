//! What the client's tests share: a real `klock serve` process on a free loopback port (the
//! test kit's [`Server::spawn`]), and reads of the server's own view of a resource.

#![allow(dead_code)] // each test file uses its own part

use klock_client::routes::resource_state;
use klock_client::{Client, Error, TimedOut};
use klock_testkit::server::Server;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The `klock` binary: `$KLOCK_BIN`, else the one built beside these tests (the workspace's
/// `cargo nextest run` builds it for the `klock` command's own tests).
pub fn klock() -> PathBuf {
    if let Some(bin) = std::env::var_os("KLOCK_BIN").filter(|v| !v.is_empty()) {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().expect("the test's own path");
    // target/debug/deps/TEST -> target/debug/klock
    let bin = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|debug| debug.join("klock"))
        .expect("the test runs from target/debug/deps");
    assert!(
        bin.exists(),
        "no klock binary at {}: build it (cargo build -p klock-cli) or set KLOCK_BIN",
        bin.display()
    );
    bin
}

/// `klock serve --memory` with these flags besides.
pub fn server(args: &[&str]) -> Server {
    let mut all = vec!["--memory"];
    all.extend_from_slice(args);
    Server::spawn(&klock(), &all)
}

/// `klock serve --memory --tokens FILE` (every limit at its default), where FILE, written in
/// `dir`, lists one `agent` token: `secret`, for the namespaces `namespaces`.
pub fn token_server(dir: &std::path::Path, secret: &str, namespaces: &[&str]) -> Server {
    let tokens = token_file(dir, secret, namespaces);
    server(&["--tokens", tokens.to_str().expect("a UTF-8 path")])
}

/// The token file [`token_server`] serves with, written in `dir`: one `agent` token, `secret`,
/// for the namespaces `namespaces`.
pub fn token_file(dir: &std::path::Path, secret: &str, namespaces: &[&str]) -> PathBuf {
    use std::io::Write;
    let mut hash = std::process::Command::new(klock())
        .arg("token-hash")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run klock token-hash");
    hash.stdin
        .take()
        .expect("its stdin")
        .write_all(secret.as_bytes())
        .expect("write the secret");
    let hash = hash.wait_with_output().expect("klock token-hash");
    let hash = String::from_utf8(hash.stdout).expect("a hex digest");
    let file = serde_json::json!({"tokens": [{
        "name": "test", "sha256": hash.trim(), "role": "agent", "namespaces": namespaces,
    }]});
    let tokens = dir.join("tokens.json");
    std::fs::write(&tokens, file.to_string()).expect("write the token file");
    tokens
}

/// The server's `/metrics`, read with the bearer `token` if the server takes tokens.
fn metrics(server: &Server, token: Option<&str>) -> String {
    let bearer = token.map(|token| format!("Bearer {token}"));
    let headers: Vec<(&str, &str)> = bearer
        .iter()
        .map(|bearer| ("authorization", bearer.as_str()))
        .collect();
    let answer =
        klock_testkit::http_client::request(server.port(), "GET", "/metrics", &headers, b"")
            .expect("read /metrics");
    String::from_utf8(answer.raw).expect("UTF-8 metrics")
}

/// A gauge or counter of the server's `/metrics` (summed over its labels), read with the
/// bearer `token` if the server takes tokens.
pub fn metric(server: &Server, token: Option<&str>, name: &str) -> f64 {
    let text = metrics(server, token);
    let series: Vec<f64> = text
        .lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with([' ', '{']))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    assert!(!series.is_empty(), "{name} is not in /metrics: {text}");
    series.iter().sum()
}

/// A counter of the server's `/metrics` summed over the series whose labels contain `label`
/// (like `heartbeat"`), read with the bearer `token` if the server takes tokens; 0 when none.
pub fn metric_where(server: &Server, token: Option<&str>, name: &str, label: &str) -> f64 {
    metrics(server, token)
        .lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') && rest.contains(label))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

pub fn url(server: &Server) -> String {
    format!("http://127.0.0.1:{}", server.port())
}

/// The lease ids the server says hold `resource` in the client's namespace.
pub async fn holders(client: &Client, resource: &str) -> Vec<u64> {
    let (state, _) = resource_state(client.transport(), client.namespace(), resource)
        .await
        .expect("read the resource's state");
    state.holders.iter().map(|h| h.lease_id.0).collect()
}

/// Polls `done` every 20 ms until it holds, for at most `bound`; whether it did.
pub async fn eventually<F, Fut>(bound: Duration, mut done: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let until = Instant::now() + bound;
    loop {
        if done().await {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether `e` is a timeout for this reason.
pub fn timed_out(e: &Error, reason: TimedOut) -> bool {
    matches!(e, Error::Timeout { why, .. } if *why == reason)
}

/// How many acquire requests the server has answered (its `klock_http_requests_total`).
pub fn acquires(server: &Server) -> u64 {
    let answer =
        klock_testkit::http_client::request(server.port(), "GET", "/metrics", &[], b"").unwrap();
    let text = String::from_utf8(answer.raw).unwrap();
    text.lines()
        .filter(|l| l.starts_with("klock_http_requests_total{") && l.contains("/acquire\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}
