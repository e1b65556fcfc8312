//! The test kit itself: the link cuts and restores, delays, freezes (holding what it reads
//! until restored), drops a kept connection's next request, and runs as `klock-testkit link`
//! driven over stdin; the resettable server starts over with the config it is given and refuses a
//! bad one by name, and an in-process server killed on its data file lets the next one open it.

use klock_testkit::http_client::request;
use klock_testkit::link::Link;
use klock_testkit::manual::ManualServer;
use klock_testkit::server::Server;
use klock_testkit::support::open;
use serde_json::json;
use std::io::{BufRead, BufReader};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A request through `port` on a connection of its own: the status, or the error.
fn health(port: u16) -> Result<u16, String> {
    request(port, "GET", "/v1/health", &[], b"").map(|a| a.status)
}

#[test]
fn a_link_forwards_and_cut_closes_every_connection_until_restored() {
    let s = Server::start(&["--memory"]);
    let link = Link::open(s.port()).unwrap();
    assert_eq!(health(link.port()), Ok(200));
    // A kept-alive connection through the link, then the cut.
    let mut kept = TcpStream::connect(("127.0.0.1", link.port())).unwrap();
    kept.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let head = "GET /v1/health HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n";
    kept.write_all(head.as_bytes()).unwrap();
    let mut buf = [0u8; 512];
    assert!(kept.read(&mut buf).unwrap() > 0);
    link.cut();
    let mut rest = Vec::new();
    let read = kept.read_to_end(&mut rest);
    assert!(
        matches!(read, Ok(0)) || read.is_err(),
        "the kept connection is closed: {read:?} {rest:?}"
    );
    assert!(health(link.port()).is_err(), "a new connection is closed");
    // The server itself stayed up.
    assert_eq!(health(s.port()), Ok(200));
    link.restore();
    assert_eq!(health(link.port()), Ok(200));
}

#[test]
fn a_link_drops_the_next_request_of_each_open_connection_and_forwards_new_ones() {
    let s = Server::start(&["--memory"]);
    let link = Link::open(s.port()).unwrap();
    let opening = |agent: &str| {
        let body = json!({ "agent_id": agent }).to_string();
        format!(
            "POST /v1/ns/default/sessions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    let mut kept = TcpStream::connect(("127.0.0.1", link.port())).unwrap();
    kept.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    kept.write_all(opening("first").as_bytes()).unwrap();
    // The answer is kept alive: read until its JSON body is whole.
    let mut got = Vec::new();
    let first = loop {
        let mut buf = [0u8; 4096];
        let n = kept.read(&mut buf).unwrap();
        assert!(n > 0, "closed before a whole answer: {got:?}");
        got.extend_from_slice(&buf[..n]);
        match klock_testkit::http_client::parse(&got) {
            Some(answer) if !answer.body.is_null() => break answer,
            _ => {}
        }
    };
    let first_id = first.body["session_id"].as_u64().unwrap();
    link.drop_next_requests();
    // The kept connection is still open until it sends: then it closes with no answer.
    kept.write_all(opening("dropped").as_bytes()).unwrap();
    let mut rest = Vec::new();
    let read = kept.read_to_end(&mut rest);
    // Closed (EOF or reset), not timed out waiting.
    let closed = match &read {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    };
    assert!(
        closed,
        "the kept connection closed unanswered: {read:?} {rest:?}"
    );
    // A new connection is forwarded, and the dropped request never reached the server: the
    // next session's id follows the first one's.
    let body = json!({ "agent_id": "next" }).to_string();
    let next = request(
        link.port(),
        "POST",
        "/v1/ns/default/sessions",
        &[],
        body.as_bytes(),
    )
    .unwrap();
    assert_eq!(next.body["session_id"].as_u64(), Some(first_id + 1));
}

/// Sends a health request on `conn` (kept alive); the first bytes of its answer, or the error
/// (a timeout while nothing comes).
fn ask_health(conn: &mut TcpStream) -> std::io::Result<String> {
    let head = "GET /v1/health HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n";
    conn.write_all(head.as_bytes())?;
    let mut buf = [0u8; 512];
    let n = conn.read(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

#[test]
fn a_delayed_link_answers_late_until_restored() {
    let s = Server::start(&["--memory"]);
    let link = Link::open(s.port()).unwrap();
    link.delay(Duration::from_millis(1000));
    let started = Instant::now();
    assert_eq!(health(link.port()), Ok(200));
    // The request, then the answer, each a second late.
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(2000), "{took:?}");
    link.restore();
    let started = Instant::now();
    assert_eq!(health(link.port()), Ok(200));
    let took = started.elapsed();
    assert!(took < Duration::from_millis(1000), "{took:?}");
}

#[test]
fn a_frozen_link_holds_what_it_reads_until_restored_and_a_cut_drops_it() {
    let s = Server::start(&["--memory"]);
    let link = Link::open(s.port()).unwrap();
    let mut kept = TcpStream::connect(("127.0.0.1", link.port())).unwrap();
    kept.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    assert!(ask_health(&mut kept).unwrap().starts_with("HTTP/1.1 200"));
    link.freeze();
    // Nothing comes back, and nothing closes: the request waits in the link.
    kept.set_read_timeout(Some(Duration::from_millis(1000)))
        .unwrap();
    let frozen = ask_health(&mut kept).unwrap_err();
    assert!(
        matches!(
            frozen.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
        "{frozen:?}"
    );
    // A new connection is taken but answered no more than the kept one.
    let mut new = TcpStream::connect(("127.0.0.1", link.port())).unwrap();
    new.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    assert!(ask_health(&mut new).is_err());
    // The restore delivers what was held: both answers come.
    link.restore();
    for conn in [&mut kept, &mut new] {
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut buf = [0u8; 512];
        let n = conn.read(&mut buf).unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &buf[..n]);
    }
    // A cut during a freeze drops what it holds and closes the connection.
    link.freeze();
    kept.write_all(b"GET /v1/health HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        .unwrap();
    link.cut();
    let mut rest = Vec::new();
    let read = kept.read_to_end(&mut rest);
    assert!(matches!(read, Ok(0)) || read.is_err(), "{read:?} {rest:?}");
    link.restore();
    assert_eq!(health(link.port()), Ok(200));
}

#[test]
fn the_link_process_takes_its_commands_on_stdin_and_names_a_bad_one() {
    let s = Server::start(&["--memory"]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_klock-testkit"))
        .args(["link", "--to", &s.port().to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut control = child.stdin.take().unwrap();
    let mut answers = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    answers.read_line(&mut line).unwrap();
    let port: u16 = line
        .trim()
        .strip_prefix("klock-testkit: link on 127.0.0.1:")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{line:?}"));
    let mut command = |text: &str| {
        writeln!(control, "{text}").unwrap();
        let mut answer = String::new();
        answers.read_line(&mut answer).unwrap();
        answer.trim().to_owned()
    };
    assert_eq!(health(port), Ok(200));
    assert_eq!(command("cut"), "ok");
    assert!(health(port).is_err());
    assert!(command("thaw").starts_with("error: unknown command \"thaw\""));
    assert!(health(port).is_err(), "a bad command leaves the link cut");
    assert_eq!(command("restore"), "ok");
    assert_eq!(health(port), Ok(200));
    // The end of stdin ends it.
    drop(control);
    assert!(child.wait().unwrap().success());
}

#[test]
fn the_manual_server_starts_over_with_each_config_and_refuses_a_bad_one() {
    let server = ManualServer::start(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
    let port = server.addr().port();
    let now = [("klock-now", "0")];
    let open = |agent: &str| {
        let body = json!({ "agent_id": agent }).to_string();
        request(
            port,
            "POST",
            "/v1/ns/default/sessions",
            &now,
            body.as_bytes(),
        )
        .unwrap()
    };
    assert_eq!(open("a").body["session_id"], 1);
    assert_eq!(open("b").body["session_id"], 2);
    // Without Klock-Now the manual clock refuses: the kit serves `--clock manual`.
    let body = json!({ "agent_id": "c" }).to_string();
    let refused = request(
        port,
        "POST",
        "/v1/ns/default/sessions",
        &[],
        body.as_bytes(),
    )
    .unwrap();
    assert_eq!(refused.status, 400, "{:?}", refused.body);
    // A reset with a whole config starts over: session ids begin again.
    let mut config = serde_json::to_value(klock_core::Config::default()).unwrap();
    config["default_ttl_ms"] = json!(1234);
    let reset = request(
        port,
        "POST",
        "/v1/reset",
        &now,
        config.to_string().as_bytes(),
    )
    .unwrap();
    assert_eq!((reset.status, &reset.body), (200, &json!({"reset": true})));
    let a = open("a");
    assert_eq!(a.body["session_id"], 1, "{:?}", a.body);
    // A body that is not a kernel config is refused by name, and changes nothing.
    let bad = request(port, "POST", "/v1/reset", &now, br#"{"policy": "fifo"}"#).unwrap();
    assert_eq!(bad.status, 400);
    assert_eq!(bad.body["error"]["name"], "BAD_REQUEST", "{:?}", bad.body);
    assert_eq!(open("b").body["session_id"], 2);
}

#[test]
fn an_in_process_server_killed_on_its_data_file_lets_the_next_one_open_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("k.redb");
    let data = data.to_str().unwrap();
    let s = Server::start(&["--data", data]);
    let a = open(&s, "default", "ann");
    s.kill();
    let s = Server::start(&["--data", data]);
    let (status, v) = s.call(
        "POST",
        &format!("/v1/ns/default/sessions/{}/heartbeat", a.id),
        &[("klock-session-token", &a.token)],
        "{}",
    );
    assert_eq!(status, 200, "the session survived: {v}");
    // And a refusal is the message `klock serve` prints.
    let err = Server::try_start(&["--memory", "--data", data]).err();
    assert_eq!(
        err.as_deref(),
        Some("--memory and --data exclude each other")
    );
}
