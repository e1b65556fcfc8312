//! Connections, transport and bounded work (issue 22 items 5, 8, 11, 12), against servers in
//! this process on free loopback ports (Unix sockets: cli/tests/net.rs).

mod support;

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use support::{closed_by_server, metric, on, open, Agent, Server};

/// Sends `head` (and `body`) on a new connection; the whole answer as text.
fn exchange(port: u16, head: &str, body: &[u8]) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    let _ = s.write_all(body);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// The error name of a whole answer's JSON body.
fn error_name(answer: &str) -> String {
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    let v: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    v["error"]["name"].as_str().unwrap_or_default().to_owned()
}

fn status_of(answer: &str) -> u16 {
    answer
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

// ---- item 5: Host and Content-Type -----------------------------------------------------------

#[test]
fn without_tokens_only_loopback_host_names_are_answered() {
    let s = Server::start(&["--memory"]);
    let port = s.port();
    let get = |host: &str| {
        exchange(
            port,
            &format!("GET /v1/health HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n"),
            b"",
        )
    };
    // Any port, or none: a loopback forwarder or an ssh tunnel presents its own.
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("LOCALHOST:{port}"),
        format!("[::1]:{port}"),
        format!("127.0.0.1:{}", port.wrapping_add(1)),
        String::from("localhost"),
    ] {
        let answer = get(&host);
        assert_eq!(status_of(&answer), 200, "{host}: {answer}");
    }
    // A rebound name (a page of evil.example whose name now points at 127.0.0.1), names that
    // merely start like a loopback one, and no Host at all.
    for host in [
        format!("evil.example:{port}"),
        format!("localhost.evil.example:{port}"),
        String::from("127.0.0.1.evil.example"),
        format!("[::1]evil:{port}"),
    ] {
        let answer = get(&host);
        assert_eq!(
            (status_of(&answer), error_name(&answer).as_str()),
            (403, "HOST_NOT_ALLOWED"),
            "{host}: {answer}"
        );
    }
    let answer = exchange(port, "GET /v1/health HTTP/1.0\r\n\r\n", b"");
    assert_eq!(error_name(&answer), "HOST_NOT_ALLOWED", "{answer}");
    // A rebound page cannot open a session either; nothing was opened.
    let body = br#"{"agent_id": "page"}"#;
    let answer = exchange(
        port,
        &format!(
            "POST /v1/ns/default/sessions HTTP/1.1\r\nhost: evil.example:{port}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        ),
        body,
    );
    assert_eq!(status_of(&answer), 403, "{answer}");
    let (_, stats) = s.get("/v1/ns/default/stats");
    assert_eq!(stats["active_sessions"], 0, "{stats}");
    // The metric counts them.
    let metrics = support_metrics(port);
    assert!(
        metrics.contains("klock_requests_refused_total{reason=\"host_not_allowed\"} 6"),
        "{metrics}"
    );
}

fn support_metrics(port: u16) -> String {
    let answer = klock_testkit::http_client::request(port, "GET", "/metrics", &[], b"").unwrap();
    String::from_utf8_lossy(&answer.raw).into_owned()
}

#[test]
fn with_tokens_the_host_is_not_checked() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.json");
    let file = json!({"tokens": [{"name": "a", "sha256": support::sha256_of("s3cret"), "role": "admin", "namespaces": ["*"]}]});
    std::fs::write(&tokens, file.to_string()).unwrap();
    let s = Server::start(&["--memory", "--tokens", tokens.to_str().unwrap()]);
    let answer = exchange(
        s.port(),
        "GET /v1/version HTTP/1.1\r\nhost: klock.internal\r\nauthorization: Bearer s3cret\r\nconnection: close\r\n\r\n",
        b"",
    );
    assert_eq!(status_of(&answer), 200, "{answer}");
}

#[test]
fn a_mutation_whose_body_is_not_json_is_refused_415_and_does_nothing() {
    let s = Server::start(&["--memory"]);
    let port = s.port();
    let body = br#"{"agent_id": "page"}"#;
    let post = |content_type: Option<&str>| {
        let kind = content_type.map_or(String::new(), |k| format!("content-type: {k}\r\n"));
        exchange(
            port,
            &format!(
                "POST /v1/ns/default/sessions HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n{kind}content-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            ),
            body,
        )
    };
    // What a page may send cross-origin without asking: text/plain, a form, multipart; and a
    // body that names no type.
    for kind in [
        Some("text/plain"),
        Some("text/plain;charset=UTF-8"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        Some("application/jsonp"),
        None,
    ] {
        let answer = post(kind);
        assert_eq!(
            (status_of(&answer), error_name(&answer).as_str()),
            (415, "UNSUPPORTED_MEDIA_TYPE"),
            "{kind:?}: {answer}"
        );
    }
    let (_, stats) = s.get("/v1/ns/default/stats");
    assert_eq!(stats["active_sessions"], 0, "nothing was opened: {stats}");
    // JSON, with parameters and in any case, is fine.
    for kind in ["application/json", "Application/JSON; charset=utf-8"] {
        let answer = post(Some(kind));
        assert_eq!(status_of(&answer), 200, "{kind}: {answer}");
    }
    // A POST with no body needs no Content-Type (suspend carries none), but a non-JSON one
    // is refused even then.
    let a = open(&s, "default", "a");
    let suspend = |kind: &str| {
        exchange(
            port,
            &format!(
                "POST /v1/ns/default/sessions/{}/suspend HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nklock-session-token: {}\r\n{kind}content-length: 0\r\nconnection: close\r\n\r\n",
                a.id, a.token
            ),
            b"",
        )
    };
    assert_eq!(status_of(&suspend("content-type: text/plain\r\n")), 415);
    assert_eq!(status_of(&suspend("")), 200);
}

// ---- item 8: connections ---------------------------------------------------------------------

/// Many idle connections (and half-sent requests) neither stop a holder's heartbeat nor stay
/// open past the timeouts.
#[test]
fn idle_and_slow_connections_are_closed_and_a_holder_keeps_its_lease() {
    let s = Server::start(&[
        "--memory",
        "--idle-timeout-ms",
        "1500",
        "--header-timeout-ms",
        "1000",
        // All of them come from 127.0.0.1: room for them all (the caps have their own test).
        "--max-connections-per-peer",
        "1000",
    ]);
    let port = s.port();
    let holder = open(&s, "default", "holder");
    let (status, v) = on(
        &s,
        &holder,
        "POST",
        "acquire",
        json!({"intents": ["MUTATES FILE:/held"]}),
    );
    assert_eq!(status, 200, "{v}");
    let lease = v["leases"][0]["lease_id"].as_u64().unwrap();
    // 300 connections that send nothing, and 20 that send half a request head.
    let mut idle: Vec<TcpStream> = (0..300)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    let mut slow: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
            c.write_all(b"GET /v1/health HTTP/1.1\r\nhost: 127.0")
                .unwrap();
            c
        })
        .collect();
    // And 5 that send a whole head, then a body that never ends.
    let mut trickled: Vec<TcpStream> = (0..5)
        .map(|_| {
            let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
            let head = format!(
                "POST /v1/ns/default/sessions HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{{\"agent"
            );
            c.write_all(head.as_bytes()).unwrap();
            c
        })
        .collect();
    // The holder's heartbeat still goes through, on a connection of its own.
    for _ in 0..5 {
        let (status, v) = on(
            &s,
            &holder,
            "POST",
            "heartbeat",
            json!({"lease_ids": [lease]}),
        );
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["results"][0]["status"], "OK", "{v}");
    }
    // Every idle and slow connection is closed by the server (the bound only ends a failing
    // run: on the old code they stayed open forever).
    for c in slow
        .iter_mut()
        .chain(idle.iter_mut())
        .chain(trickled.iter_mut())
    {
        assert!(
            closed_by_server(c, Duration::from_secs(20)),
            "a connection stayed open"
        );
    }
    let metrics = support_metrics(port);
    assert!(
        metrics.contains("klock_connections_closed_total{reason=\"idle_timeout\"} 300"),
        "{metrics}"
    );
    assert!(
        metrics.contains("klock_connections_closed_total{reason=\"header_timeout\"} 20"),
        "{metrics}"
    );
    assert!(
        metrics.contains("klock_connections_closed_total{reason=\"body_timeout\"} 5"),
        "{metrics}"
    );
}

/// An event stream of `a`'s session, once its answer's head has come: a connection with a
/// request in flight for as long as it stays open.
fn event_stream(port: u16, a: &Agent) -> TcpStream {
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let head = format!(
        "GET /v1/ns/{}/sessions/{}/events HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\naccept: text/event-stream\r\nklock-session-token: {}\r\n\r\n",
        a.ns, a.id, a.token
    );
    c.write_all(head.as_bytes()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        assert_eq!(
            c.read(&mut byte).unwrap(),
            1,
            "{}",
            String::from_utf8_lossy(&got)
        );
        got.push(byte[0]);
    }
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    c
}

fn health(port: u16) -> String {
    exchange(
        port,
        &format!("GET /v1/health HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nconnection: close\r\n\r\n"),
        b"",
    )
}

/// At the cap, an idle connection makes room for a new one; when every connection is busy
/// (event streams), a new one is refused by name, and one from a busy peer too.
#[test]
fn the_connection_caps_make_room_from_idle_ones_and_refuse_by_name() {
    let s = Server::start(&["--memory", "--max-connections", "8"]);
    let port = s.port();
    let a = open(&s, "default", "a");
    // 8 idle connections fill the cap; a request still goes through (an idle one is closed).
    let idle: Vec<TcpStream> = (0..8)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    let (status, v) = on(&s, &a, "POST", "heartbeat", json!({}));
    assert_eq!(status, 200, "{v}");
    // At least that one: the metrics request may find the cap still full (the heartbeat's
    // connection not yet seen closed) and make room the same way.
    let evicted = metric(
        port,
        "klock_connections_closed_total{reason=\"evicted_idle\"}",
    );
    assert!(evicted >= Some(1.0), "{evicted:?}");
    // 8 event streams keep every connection busy (each evicts an idle one on its way in).
    let streams: Vec<TcpStream> = (0..8).map(|_| event_stream(port, &a)).collect();
    let answer = health(port);
    assert_eq!(
        (status_of(&answer), error_name(&answer).as_str()),
        (503, "TOO_MANY_CONNECTIONS"),
        "{answer}"
    );
    drop((idle, streams));

    // Per peer: every test connection comes from 127.0.0.1.
    let s = Server::start(&["--memory", "--max-connections-per-peer", "4"]);
    let port = s.port();
    let a = open(&s, "default", "a");
    let _streams: Vec<TcpStream> = (0..4).map(|_| event_stream(port, &a)).collect();
    let answer = health(port);
    assert_eq!(
        (status_of(&answer), error_name(&answer).as_str()),
        (503, "TOO_MANY_CONNECTIONS_FROM_PEER"),
        "{answer}"
    );
}

/// A keep-alive connection serves at most --max-requests-per-connection requests.
#[test]
fn a_connection_serves_a_bounded_number_of_requests() {
    let s = Server::start(&["--memory", "--max-requests-per-connection", "3"]);
    let port = s.port();
    let c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut reader = BufReader::new(c.try_clone().unwrap());
    let mut writer = c;
    let mut closes = Vec::new();
    for _ in 0..3 {
        let head = format!("GET /v1/health HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n\r\n");
        writer.write_all(head.as_bytes()).unwrap();
        let (mut line, mut length, mut close) = (String::new(), 0usize, false);
        reader.read_line(&mut line).unwrap();
        assert!(line.starts_with("HTTP/1.1 200"), "{line}");
        loop {
            line.clear();
            reader.read_line(&mut line).unwrap();
            let l = line.trim_end().to_ascii_lowercase();
            if l.is_empty() {
                break;
            }
            if let Some(v) = l.strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
            close |= l == "connection: close";
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        closes.push(close);
    }
    assert_eq!(closes, [false, false, true]);
    let mut rest = Vec::new();
    assert_eq!(
        reader.read_to_end(&mut rest).unwrap(),
        0,
        "closed after the third"
    );
}

// ---- item 11: bounded work per request -------------------------------------------------------

/// The state hash (manual clock: it changes only when a command is applied).
fn state_hash(s: &Server) -> Value {
    let (status, v) = s.call("GET", "/v1/state/hash", &[("klock-now", "5")], "");
    assert_eq!(status, 200, "{v}");
    v
}

#[test]
fn lists_over_the_id_bound_are_refused_by_name_and_change_nothing() {
    // The default bound: what one session can hold (max_leases_per_session, 1,024).
    let s = Server::start(&["--memory", "--clock", "manual"]);
    let now = [("klock-now", "1")];
    let (status, v) = s.call(
        "POST",
        "/v1/ns/default/sessions",
        &now,
        &json!({"agent_id": "a"}).to_string(),
    );
    assert_eq!(status, 200, "{v}");
    let (sid, token) = (
        v["session_id"].as_u64().unwrap(),
        v["session_token"].as_str().unwrap().to_owned(),
    );
    let path = |what: &str| format!("/v1/ns/default/sessions/{sid}/{what}");
    let headers = [("klock-now", "2"), ("klock-session-token", token.as_str())];
    let (status, v) = s.call(
        "POST",
        &path("acquire"),
        &headers,
        &json!({"intents": ["MUTATES FILE:/x"]}).to_string(),
    );
    assert_eq!(status, 200, "{v}");
    let lease = v["leases"][0]["lease_id"].as_u64().unwrap();
    let ids =
        |n: usize| -> Vec<u64> { std::iter::once(lease).chain(1_000_000..).take(n).collect() };
    let later = [("klock-now", "3"), ("klock-session-token", token.as_str())];
    let before = state_hash(&s);
    for what in ["heartbeat", "reconcile"] {
        let (status, v) = s.call(
            "POST",
            &path(what),
            &later,
            &json!({"lease_ids": ids(1025)}).to_string(),
        );
        assert_eq!(
            (status, v["error"]["name"].as_str()),
            (413, Some("TOO_MANY_IDS")),
            "{what}: {v}"
        );
    }
    let batch = |ops: Vec<Value>| {
        s.call(
            "POST",
            "/v1/ns/default/batch",
            &later,
            &json!({"operations": ops}).to_string(),
        )
    };
    let op = |kind: &str, n: usize| json!({"op": kind, "session": sid, "token": token, "lease_ids": ids(n)});
    // One operation over the bound, or a whole batch over its own (4,096 ids and intents).
    let (status, v) = batch(vec![op("heartbeat", 1025)]);
    assert_eq!(
        (status, v["error"]["name"].as_str()),
        (413, Some("TOO_MANY_IDS")),
        "{v}"
    );
    let (status, v) = batch(vec![
        op("reconcile", 1024),
        op("reconcile", 1024),
        op("reconcile", 1024),
        op("reconcile", 1024),
        op("heartbeat", 1),
    ]);
    assert_eq!(
        (status, v["error"]["name"].as_str()),
        (413, Some("TOO_MANY_IDS")),
        "{v}"
    );
    assert_eq!(state_hash(&s), before, "a refused request changed nothing");
    let metrics = support_metrics(s.port());
    assert!(
        metrics.contains("klock_requests_refused_total{reason=\"too_many_ids\"} 4"),
        "{metrics}"
    );
    // At the bounds: accepted.
    for what in ["heartbeat", "reconcile"] {
        let (status, v) = s.call(
            "POST",
            &path(what),
            &later,
            &json!({"lease_ids": ids(1024)}).to_string(),
        );
        assert_eq!(status, 200, "{what}: {v}");
    }
    let (status, v) = batch(vec![
        op("reconcile", 1024),
        op("reconcile", 1024),
        op("reconcile", 1024),
        op("heartbeat", 1024),
    ]);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["results"].as_array().unwrap().len(), 4, "{v}");

    // The bound is a flag.
    let s = Server::start(&["--memory", "--max-request-ids", "3"]);
    let a = open(&s, "default", "a");
    let (status, v) = on(
        &s,
        &a,
        "POST",
        "reconcile",
        json!({"lease_ids": [1, 2, 3, 4]}),
    );
    assert_eq!(
        (status, v["error"]["name"].as_str()),
        (413, Some("TOO_MANY_IDS")),
        "{v}"
    );
    let (status, _) = on(&s, &a, "POST", "reconcile", json!({"lease_ids": [1, 2, 3]}));
    assert_eq!(status, 200);
}

// ---- item 12: --socket never deletes what is not a stale socket -------------------------------
