//! The kept-alive connections of the Rust client and the agent tools (`klock_client::conn`)
//! against a real `klock serve`: one client's successive requests share one connection over
//! TCP, TLS and a Unix socket; concurrent ones take their own; an idle connection the server
//! closed is replaced without an error; a request that breaks on a reused connection before
//! any answer is sent again once (a read, or a write, which carries an `Idempotency-Key`);
//! and `klock exec` makes 2 connections, not 4.
//! Connections are counted by the server (`klock_connections_accepted_total`).

mod support;

use klock_client::routes::{Acquired, Session};
use klock_client::transport::{Endpoint, Transport as Client};
use klock_core::Verdict;
use klock_testkit::link::Link;
use std::future::Future;
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;
use support::{metric, Server};

const ACCEPTED: &str = "klock_connections_accepted_total";

fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// The connections a server accepted, read over plain HTTP (the reading's own included).
fn accepted(port: u16) -> u64 {
    metric(port, ACCEPTED).unwrap() as u64
}

fn tcp_client(port: u16) -> Client {
    Client::new(Endpoint::Tcp(format!("127.0.0.1:{port}")), None)
}

/// A session holding one lease: the open and the acquire.
async fn holding(client: &Client, resource: &str) -> (Session, u64) {
    let session = Session::open(client.clone(), "default", "keepalive")
        .await
        .unwrap();
    let intents = [format!("MUTATES {resource}")];
    let answer = session
        .acquire(&intents, 60_000, Some(0), Duration::ZERO)
        .await
        .unwrap();
    let Acquired::Verdict(Verdict::Granted { leases }) = answer else {
        panic!("not granted: {answer:?}");
    };
    (session, leases[0].lease_id.0)
}

/// Open, acquire, 10 heartbeats, a reconcile, a digest, a release and a close.
async fn twenty_requests(client: &Client) {
    let (session, lease) = holding(client, "FILE:/keepalive").await;
    for _ in 0..10 {
        let renewed = session.heartbeat(&[lease]).await.unwrap();
        assert!(renewed[0].1.is_ok(), "{renewed:?}");
    }
    assert_eq!(session.reconcile(&[lease]).await.unwrap().len(), 1);
    session.digest().await.unwrap();
    assert_eq!(session.release(Some(&[lease])).await.unwrap(), 1);
    session.close().await.unwrap();
}

#[test]
fn one_client_sends_its_successive_requests_on_one_connection() {
    let s = Server::start(&["--memory"]);
    let before = accepted(s.port());
    block_on(twenty_requests(&tcp_client(s.port())));
    // The one connection of the client, and the reading's own.
    assert_eq!(accepted(s.port()) - before, 2);
}

#[test]
fn concurrent_requests_of_one_client_take_their_own_connections() {
    let s = Server::start(&["--memory"]);
    let before = accepted(s.port());
    let client = tcp_client(s.port());
    block_on(async {
        let (session, lease) = holding(&client, "FILE:/concurrent").await;
        // A long poll in flight (no event comes: it asks after the grant's ACQUIRED), and
        // heartbeats beside it: they do not wait behind it, and its answer is not mixed with
        // theirs.
        let granted = session.events(None, Duration::ZERO).await.unwrap();
        let poll = session.events(Some(&granted.next), Duration::from_secs(5));
        tokio::pin!(poll);
        let beats = async {
            for _ in 0..5 {
                let renewed = session.heartbeat(&[lease]).await.unwrap();
                assert!(renewed[0].1.is_ok(), "{renewed:?}");
            }
        };
        tokio::select! {
            batch = &mut poll => panic!("the poll ended first: {batch:?}"),
            () = beats => {}
        }
        let batch = poll.await.unwrap();
        assert!(batch.events.is_empty(), "{batch:?}");
        session.close().await.unwrap();
    });
    // The poll's connection and the heartbeats' (then the close's), and the reading's own.
    assert_eq!(accepted(s.port()) - before, 3);
}

#[test]
fn an_idle_connection_the_server_closed_is_replaced_without_an_error() {
    let s = Server::start(&["--memory", "--idle-timeout-ms", "200"]);
    let closed_idle = "klock_connections_closed_total{reason=\"idle_timeout\"}";
    let client = tcp_client(s.port());
    block_on(async {
        let (session, lease) = holding(&client, "FILE:/idle").await;
        // Wait (bounded) until the server has closed the client's idle connection.
        let mut waited = Duration::ZERO;
        while metric(s.port(), closed_idle) < Some(1.0) {
            assert!(waited < Duration::from_secs(20), "never closed for idling");
            tokio::time::sleep(Duration::from_millis(50)).await;
            waited += Duration::from_millis(50);
        }
        // A heartbeat is not sent twice when a connection breaks under it: it must not be
        // given the closed one, but a new one.
        let before = accepted(s.port());
        let renewed = session.heartbeat(&[lease]).await.unwrap();
        assert!(renewed[0].1.is_ok(), "{renewed:?}");
        assert_eq!(accepted(s.port()) - before, 2);
    });
}

#[test]
fn a_request_broken_on_a_reused_connection_is_sent_again_once() {
    let s = Server::start(&["--memory"]);
    let link = Link::open(s.port()).unwrap();
    let client = tcp_client(link.port());
    block_on(async {
        let (session, lease) = holding(&client, "FILE:/broken").await;
        let before = accepted(s.port());
        // The server "closed" the kept connection as the read left: it is sent again on a new
        // connection.
        link.drop_next_requests();
        session.digest().await.unwrap();
        assert_eq!(accepted(s.port()) - before, 2, "one new connection");
        // The same for a heartbeat, a write: it carries an Idempotency-Key, so sending it again
        // is safe (had the server read it, the repeat would be answered as the first was).
        link.drop_next_requests();
        let before = accepted(s.port());
        let renewed = session.heartbeat(&[lease]).await.unwrap();
        assert!(renewed[0].1.is_ok(), "{renewed:?}");
        assert_eq!(accepted(s.port()) - before, 2, "one new connection");
    });
}

#[test]
fn klock_exec_makes_two_connections() {
    let s = Server::start(&["--memory"]);
    let before = accepted(s.port());
    let status = std::process::Command::new(support::klock())
        .args([
            "exec",
            "--server",
            &format!("http://127.0.0.1:{}", s.port()),
        ])
        .args(["--intent", "MUTATES FILE:/exec", "--", "true"])
        .env_remove("KLOCK_TOKEN")
        .status()
        .unwrap();
    assert!(status.success());
    // Open, acquire and close on one; the event long poll on its own (or on the same one, when
    // it starts after the acquire); the reading's own. Each on a new one made 4 (or 3).
    let made = accepted(s.port()) - before - 1;
    assert!((1..=2).contains(&made), "{made} connections");
}

/// `GET /metrics` over TLS with `config`: the connections accepted.
fn accepted_over_tls(port: u16, config: &std::sync::Arc<rustls::ClientConfig>) -> u64 {
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(config.clone(), name).unwrap();
    let tcp = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    counted(
        rustls::StreamOwned::new(conn, tcp),
        &format!("localhost:{port}"),
    )
}

/// The connections accepted, from `GET /metrics` on `stream` (closed after the answer).
fn counted(mut stream: impl Read + Write, host: &str) -> u64 {
    let head = format!("GET /metrics HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    let mut got = Vec::new();
    // A peer that closes without close_notify after the whole answer: the bytes are there.
    let _ = stream.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got);
    text.lines()
        .find_map(|l| l.strip_prefix(ACCEPTED)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {ACCEPTED} in {text}"))
}

#[test]
fn a_tls_client_sends_its_successive_requests_on_one_connection() {
    let dir = tempfile::tempdir().unwrap();
    let (certified, cert, key) = support::self_signed(dir.path());
    let s = Server::start(&[
        "--memory",
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]);
    let endpoint = Endpoint::choose(Some(format!("https://localhost:{}", s.port())), None);
    let client = Client::nodes(endpoint.unwrap(), None)
        .unwrap()
        .with_ca(Some(cert.clone()))
        .unwrap();
    let config = support::trusting(&certified);
    let before = accepted_over_tls(s.port(), &config);
    block_on(twenty_requests(&client));
    assert_eq!(accepted_over_tls(s.port(), &config) - before, 2);
}

#[test]
fn a_unix_socket_client_sends_its_successive_requests_on_one_connection() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("k.sock");
    let mut server = Killed(
        std::process::Command::new(support::klock())
            .args(["serve", "--memory", "--socket", socket.to_str().unwrap()])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(server.0.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(line.contains("unix:"), "{line}");
    let count = |socket: &Path| {
        let stream = std::os::unix::net::UnixStream::connect(socket).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        counted(stream, "localhost")
    };
    let before = count(&socket);
    let client = Client::new(Endpoint::Unix(socket.clone()), None);
    block_on(twenty_requests(&client));
    assert_eq!(count(&socket) - before, 2);
}

/// A server process, killed when the test ends (a failed one too).
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
