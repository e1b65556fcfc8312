//! Event streams under load and across restarts (issue 22, items 9, 10, 14, 15, 16), each on a
//! server in this process: an SSE stream holds one of its token's waiting slots until it
//! closes; a publish wakes only the readers of the streams it concerns; retained event bytes
//! stay within `--event-bytes` (the server process's RSS: cli/tests/events.rs); rings no session needs are freed, and a reader behind them learns of the gap; after a
//! restart from a snapshot the watch carries every session and a reader from before the
//! snapshot learns of the gap; a retried held acquire answers its ended ticket's outcome.

mod support;

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use support::{metric, on, open, sha256_of, Agent, Server};

/// Opens an SSE stream; returns the status and the reader, past the answer's head.
fn sse(port: u16, path: &str, headers: &[(&str, &str)]) -> (u16, BufReader<TcpStream>) {
    let (status, _, reader) = sse_with_head(port, path, headers);
    (status, reader)
}

/// Opens an SSE stream; returns the status, the answer's headers (names lowercased) and the
/// reader, past the answer's head.
fn sse_with_head(
    port: u16,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, Vec<(String, String)>, BufReader<TcpStream>) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut req = format!(
        "GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\naccept: text/event-stream\r\n"
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes()).unwrap();
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let status = line.split(' ').nth(1).unwrap().parse().unwrap();
    let mut head = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line).unwrap();
        if line == "\r\n" || line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.trim_end().split_once(':') {
            head.push((name.to_ascii_lowercase(), value.trim().to_owned()));
        }
    }
    (status, head, reader)
}

/// The next SSE event of a stream: (event name, id).
fn next_event(reader: &mut BufReader<TcpStream>) -> (String, String) {
    let (mut name, mut id, mut line) = (String::new(), String::new(), String::new());
    loop {
        line.clear();
        assert!(reader.read_line(&mut line).unwrap() > 0, "the stream ended");
        let l = line.trim_end();
        if let Some(v) = l.strip_prefix("event: ") {
            name = v.to_owned();
        } else if let Some(v) = l.strip_prefix("id: ") {
            id = v.to_owned();
        } else if l.is_empty() && !name.is_empty() {
            return (name, id);
        }
    }
}

#[test]
fn an_sse_stream_holds_a_waiting_slot_of_its_token_until_it_closes() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens.json");
    let tokens = json!({"tokens": [
        {"name": "bot", "sha256": sha256_of("bot-secret"), "role": "agent", "namespaces": ["team"], "max_long_polls": 2},
    ]});
    std::fs::write(&file, tokens.to_string()).unwrap();
    let s = Server::start(&["--memory", "--tokens", file.to_str().unwrap()]);
    let bot = ("authorization", "Bearer bot-secret");
    let (status, v) = s.call(
        "POST",
        "/v1/ns/team/sessions",
        &[bot],
        r#"{"agent_id": "a"}"#,
    );
    assert_eq!(status, 200, "{v}");
    let a = Agent::of("team", &v);
    let with_token = [bot, ("klock-session-token", a.token.as_str())];
    let events = format!("/v1/ns/team/sessions/{}/events", a.id);
    let (first, watching) = sse(s.port(), "/v1/ns/team/watch", &[bot]);
    let (second, _following) = sse(s.port(), &events, &with_token);
    assert_eq!((first, second), (200, 200));
    // Both slots are held by open streams: a third stream, or a long-poll, is refused by name.
    let (third, mut refused) = sse(s.port(), "/v1/ns/team/watch", &[bot]);
    assert_eq!(third, 429, "a third stream was let in");
    let mut body = String::new();
    refused.read_to_string(&mut body).unwrap();
    assert!(body.contains("TOO_MANY_WAITS"), "{body}");
    let (status, v) = s.call("GET", "/v1/ns/team/watch?wait_ms=0", &[bot], "");
    assert_eq!(
        (status, v["error"]["name"].as_str()),
        (429, Some("TOO_MANY_WAITS")),
        "{v}"
    );
    // The client closes one stream: its slot is free once the server notices (at the latest
    // at its next write to it, so events are made in the namespace meanwhile).
    drop(watching);
    let mut freed = false;
    for attempt in 0..50 {
        let body = json!({"intents": [format!("MUTATES FILE:/n{attempt}")], "ttl_ms": 20});
        let (status, v) = s.call(
            "POST",
            &format!("/v1/ns/team/sessions/{}/acquire", a.id),
            &with_token,
            &body.to_string(),
        );
        assert_eq!(status, 200, "{v}");
        let (status, _) = s.call("GET", "/v1/ns/team/watch?wait_ms=0", &[bot], "");
        if status == 200 {
            freed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(freed, "the closed stream's slot was never freed");
}

#[test]
fn a_publish_wakes_only_the_readers_of_the_streams_it_concerns() {
    let s = Server::start(&["--memory"]);
    // Wait-die: only an older session waits, so each waiter is opened before its holder.
    let a = open(&s, "default", "ann");
    let c = open(&s, "default", "cid");
    let b = open(&s, "default", "bob");
    let path = format!("/v1/ns/default/sessions/{}/events", a.id);
    let token = [("klock-session-token", a.token.as_str())];
    let mut readers: Vec<_> = (0..3).map(|_| sse(s.port(), &path, &token).1).collect();
    let (status, _other) = sse(s.port(), "/v1/ns/elsewhere/watch", &[]);
    assert_eq!(status, 200);
    assert_eq!(metric(s.port(), "klock_event_readers"), Some(4.0));
    // Events of other sessions (a grant to cid after bob's release) wake none of them.
    let x = json!({"intents": ["MUTATES FILE:/x"]});
    let (_, v) = on(&s, &b, "POST", "acquire", x.clone());
    let lease = v["leases"][0]["lease_id"].as_u64().unwrap();
    assert_eq!(
        on(&s, &c, "POST", "acquire", x.clone()).1["verdict"],
        "WAIT"
    );
    on(&s, &b, "POST", "release", json!({"lease_ids": [lease]}));
    let (_, v) = on(&s, &c, "GET", "events?wait_ms=5000", json!({}));
    assert_eq!(v["events"][0]["event"], "GRANTED", "{v}");
    let lease = v["events"][0]["leases"][0]["lease_id"].as_u64().unwrap();
    assert_eq!(
        metric(s.port(), "klock_event_wakeups_total"),
        Some(0.0),
        "a grant to another session woke ann's streams"
    );
    // An event of ann's wakes each of ann's three streams once.
    assert_eq!(on(&s, &a, "POST", "acquire", x).1["verdict"], "WAIT");
    on(&s, &c, "POST", "release", json!({"lease_ids": [lease]}));
    for reader in &mut readers {
        assert_eq!(next_event(reader).0, "GRANTED");
    }
    assert_eq!(metric(s.port(), "klock_event_wakeups_total"), Some(3.0));
}

#[test]
fn a_namespace_ring_is_freed_when_its_sessions_closed_and_its_events_aged_out() {
    let s = Server::start(&["--memory", "--event-bytes", "20000"]);
    let t = open(&s, "tmp", "tia");
    on(
        &s,
        &t,
        "POST",
        "acquire",
        json!({"intents": ["MUTATES FILE:/t"], "ttl_ms": 20}),
    );
    let (_, v) = s.call("GET", "/v1/ns/tmp/watch?wait_ms=5000", &[], "");
    assert_eq!(v["events"][0]["event"], "ACQUIRED", "{v}");
    let acquired = v["next"].as_str().unwrap().to_owned();
    let watch = format!("/v1/ns/tmp/watch?after={acquired}&wait_ms=5000");
    let (_, v) = s.call("GET", &watch, &[], "");
    assert_eq!(v["events"][0]["event"], "LEASE_EXPIRED", "{v}");
    let close = format!("/v1/ns/tmp/sessions/{}", t.id);
    let token = [("klock-session-token", t.token.as_str())];
    assert_eq!(s.call("DELETE", &close, &token, "").0, 200);
    // Other namespaces' events age tmp's out of the budget (a bounded number of rounds).
    let d = open(&s, "default", "dan");
    let mut rounds = 0;
    loop {
        let intents: Vec<String> = (0..40)
            .map(|i| format!("MUTATES FILE:/d/{rounds}/{i}"))
            .collect();
        on(
            &s,
            &d,
            "POST",
            "acquire",
            json!({"intents": intents, "ttl_ms": 20}),
        );
        let (_, v) = on(&s, &d, "GET", "events?wait_ms=5000", json!({}));
        assert!(!v["events"].as_array().unwrap().is_empty(), "{v}");
        rounds += 1;
        let (_, v) = s.call("GET", "/v1/ns/tmp/watch?wait_ms=0", &[], "");
        if v["events"].as_array().unwrap().is_empty() {
            // Freed, and what it held is still reported as missed, not as silence.
            assert_eq!(v["gap"], true, "{v}");
            break;
        }
        assert!(rounds < 20, "tmp's events never aged out: {v}");
    }
    // Left: dan's session ring and the default namespace's (tmp's two are freed).
    assert_eq!(metric(s.port(), "klock_event_rings"), Some(2.0));
}

#[test]
fn after_a_restart_from_a_snapshot_the_watch_keeps_every_session_and_reports_the_gap() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("k.redb");
    let data = data.to_str().unwrap();
    let args = ["--data", data, "--snapshot-every", "3"];
    let s = Server::start(&args);
    let a = open(&s, "default", "ann");
    on(
        &s,
        &a,
        "POST",
        "acquire",
        json!({"intents": ["MUTATES FILE:/a"], "ttl_ms": 20}),
    );
    let (_, v) = s.call("GET", "/v1/ns/default/watch?wait_ms=5000", &[], "");
    assert_eq!(v["events"][0]["event"], "ACQUIRED", "{v}");
    let acquired = v["next"].as_str().unwrap().to_owned();
    let watch = format!("/v1/ns/default/watch?after={acquired}&wait_ms=5000");
    let (_, v) = s.call("GET", &watch, &[], "");
    assert_eq!(v["events"][0]["event"], "LEASE_EXPIRED", "{v}");
    let seen = v["next"].as_str().unwrap().to_owned();
    for _ in 0..4 {
        on(&s, &a, "POST", "heartbeat", json!({})); // entries past a snapshot
    }
    s.kill();
    let s = Server::start(&args);
    // Item 15: the expiry was folded into the snapshot: a reader from before it learns of it.
    let (_, v) = s.call("GET", "/v1/ns/default/watch?wait_ms=0", &[], "");
    assert_eq!(
        (v["gap"].as_bool(), v["events"].as_array().map(Vec::len)),
        (Some(true), Some(0)),
        "{v}"
    );
    let (_, v) = on(&s, &a, "GET", "events?wait_ms=0", json!({}));
    assert_eq!(v["gap"], true, "{v}");
    // Item 14: an event of ann, whose open is in the snapshot, reaches the namespace's watch.
    let b = open(&s, "default", "bob");
    let x = json!({"intents": ["MUTATES FILE:/x"]});
    let (_, v) = on(&s, &b, "POST", "acquire", x.clone());
    let lease = v["leases"][0]["lease_id"].as_u64().unwrap();
    let (_, v) = on(&s, &a, "POST", "acquire", x);
    assert_eq!(v["verdict"], "WAIT", "{v}");
    on(&s, &b, "POST", "release", json!({"lease_ids": [lease]}));
    let (_, v) = s.call(
        "GET",
        &format!("/v1/ns/default/watch?after={seen}&wait_ms=5000"),
        &[],
        "",
    );
    let granted: Vec<&Value> = v["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event"] == "GRANTED")
        .collect();
    assert_eq!(granted.len(), 1, "{v}");
    assert_eq!(granted[0]["session"], a.id, "{v}");
}

#[test]
fn a_retried_held_acquire_answers_the_outcome_of_its_ended_ticket() {
    let s = Server::start(&["--memory"]);
    let b = open(&s, "default", "bob"); // older: it waits for ann
    let a = open(&s, "default", "ann");
    let x = json!({"intents": ["MUTATES FILE:/x"]});
    let (_, v) = on(&s, &a, "POST", "acquire", x);
    let lease = v["leases"][0]["lease_id"].as_u64().unwrap();
    let held = json!({"intents": ["MUTATES FILE:/x"], "hold_ms": 300}).to_string();
    let acquire = format!("/v1/ns/default/sessions/{}/acquire", b.id);
    let headers = [
        ("klock-session-token", b.token.as_str()),
        ("idempotency-key", "held-1"),
    ];
    let (_, first) = s.call("POST", &acquire, &headers, &held);
    assert_eq!(first["verdict"], "WAIT", "{first}");
    on(&s, &a, "POST", "release", json!({"lease_ids": [lease]}));
    // The ticket is granted now; the retry (same key, same body) answers that grant.
    let (status, again) = s.call("POST", &acquire, &headers, &held);
    assert_eq!(status, 200, "{again}");
    assert_eq!(
        (again["event"].as_str(), &again["ticket"]),
        (Some("GRANTED"), &first["ticket"]),
        "the retry answered {again}"
    );
}

/// Event ids count entries of one log, named by every open and watch answer (`log`): a cursor
/// of another log (what a client of a `--memory` server restarted on its port holds) is read
/// from this log's start, at once, with a gap; the same cursor without `log=` skips this log's
/// events up to it, which is why the clients name it. A `--data` server keeps its log across
/// restarts. A `log=` that is no log id is a 400 naming it.
#[test]
fn a_cursor_of_another_log_is_read_from_this_logs_start_with_a_gap() {
    let old = Server::start(&["--memory"]);
    let (status, v) = old.call(
        "POST",
        "/v1/ns/default/sessions",
        &[],
        r#"{"agent_id": "a"}"#,
    );
    assert_eq!(status, 200, "{v}");
    let old_log = v["log"].as_str().expect("an open names its log").to_owned();
    assert_eq!(old_log.len(), 32, "{v}");
    for agent in ["b", "c", "d", "e", "f", "g"] {
        open(&old, "default", agent);
    }
    let (_, v) = old.get("/v1/ns/default/watch?wait_ms=0");
    assert_eq!(v["log"], old_log.as_str(), "{v}");
    // The kernel publishes no event for an open: the cursor is where a client's stream
    // started by the last open would be.
    let cursor = "6.4294967295";

    // The "restarted" server: another process, another log, whose first entries are below the
    // old cursor.
    let new = Server::start(&["--memory"]);
    let bob = open(&new, "default", "bob");
    on(
        &new,
        &bob,
        "POST",
        "acquire",
        json!({"intents": ["MUTATES FILE:/x"]}),
    );
    let (_, v) = new.get("/v1/ns/default/watch?wait_ms=0");
    let new_log = v["log"].as_str().unwrap().to_owned();
    assert_ne!(new_log, old_log);
    assert_eq!(v["events"][0]["event"], "ACQUIRED", "{v}");
    assert_eq!(v["events"][0]["id"], "2.0", "{v}");

    // Without the log, the old cursor hides bob's grant.
    let (_, v) = new.get(&format!("/v1/ns/default/watch?after={cursor}&wait_ms=0"));
    assert_eq!(
        (v["events"].as_array().map(Vec::len), &v["gap"]),
        (Some(0), &json!(false)),
        "{v}"
    );
    // With it, the server reads its own log from the start, says so, and does not hold the
    // poll for an event (the client's resync waits on this answer).
    let started = std::time::Instant::now();
    let (status, v) = new.get(&format!(
        "/v1/ns/default/watch?after={cursor}&log={old_log}&wait_ms=20000"
    ));
    assert_eq!(status, 200, "{v}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "held: {:?}",
        started.elapsed()
    );
    assert_eq!(v["gap"], true, "{v}");
    assert_eq!(v["events"][0]["event"], "ACQUIRED", "{v}");
    assert_eq!(
        (v["next"].as_str(), v["log"].as_str()),
        (Some("2.0"), Some(new_log.as_str()))
    );
    // A session's own stream (and its SSE) follows the same rule.
    let (_, v) = on(
        &new,
        &bob,
        "GET",
        &format!("events?after={cursor}&log={old_log}"),
        json!({}),
    );
    assert_eq!(
        (v["gap"].as_bool(), v["events"][0]["event"].as_str()),
        (Some(true), Some("ACQUIRED")),
        "{v}"
    );
    let headers = [("klock-session-token", bob.token.as_str())];
    let path = format!("/v1/ns/default/sessions/{}/events?log={old_log}", bob.id);
    let (status, head, mut reader) =
        sse_with_head(new.port(), &path, &[headers[0], ("last-event-id", cursor)]);
    assert_eq!(status, 200);
    // An SSE answer's body is events: it names its log in a header.
    let named = head.iter().find(|(name, _)| name == "klock-log");
    assert_eq!(
        named.map(|(_, v)| v.as_str()),
        Some(new_log.as_str()),
        "{head:?}"
    );
    assert_eq!(next_event(&mut reader).0, "gap");
    // So does the namespace's overview (what a dashboard reads beside the stream).
    let (_, v) = new.get("/v1/ns/default/overview");
    assert_eq!(v["log"], new_log.as_str(), "{v}");
    assert_eq!(
        next_event(&mut reader),
        (String::from("ACQUIRED"), String::from("2.0"))
    );
    // Its own log: read after the cursor as ever.
    let (_, v) = new.get(&format!(
        "/v1/ns/default/watch?after=2.0&log={new_log}&wait_ms=0"
    ));
    assert_eq!(
        (v["events"].as_array().map(Vec::len), &v["gap"]),
        (Some(0), &json!(false)),
        "{v}"
    );
    for bad in [
        "",
        "XYZ",
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0",
    ] {
        let (status, v) = new.get(&format!("/v1/ns/default/watch?log={bad}"));
        assert_eq!(status, 400, "{bad:?}: {v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("log must be a log id"),
            "{v}"
        );
    }

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("k.redb");
    let args = ["--data", data.to_str().unwrap()];
    let s = Server::start(&args);
    let (_, v) = s.call(
        "POST",
        "/v1/ns/default/sessions",
        &[],
        r#"{"agent_id": "a"}"#,
    );
    let kept = v["log"].as_str().unwrap().to_owned();
    s.kill();
    let s = Server::start(&args);
    let (_, v) = s.get("/v1/ns/default/watch?wait_ms=0");
    assert_eq!(v["log"], kept.as_str(), "a data file keeps its log: {v}");
    let other = tempfile::tempdir().unwrap();
    let s = Server::start(&["--data", other.path().join("k.redb").to_str().unwrap()]);
    let (_, v) = s.get("/v1/ns/default/watch?wait_ms=0");
    assert_ne!(
        v["log"],
        kept.as_str(),
        "another data file, another log: {v}"
    );
}

/// `holder_events=false` leaves ACQUIRED and RELEASED out of a watch, a session's events and
/// their SSE, and moves `next` past them; a long-poll is not answered by them alone, only by
/// another event; any other value is a 400 naming the parameter.
#[test]
fn holder_events_false_leaves_acquired_and_released_out() {
    let s = Server::start(&["--memory"]);
    let older = open(&s, "default", "older");
    let younger = open(&s, "default", "younger");
    let lease = |a: &Agent, resource: &str| -> u64 {
        let intents = json!({"intents": [format!("MUTATES {resource}")]});
        let (status, v) = on(&s, a, "POST", "acquire", intents);
        assert_eq!(
            (status, v["verdict"].as_str()),
            (200, Some("GRANTED")),
            "{v}"
        );
        v["leases"][0]["lease_id"].as_u64().unwrap()
    };
    let release = |a: &Agent, id: u64| {
        let (status, v) = on(&s, a, "POST", "release", json!({"lease_ids": [id]}));
        assert_eq!(status, 200, "{v}");
    };
    let id = lease(&younger, "FILE:/a");
    release(&younger, id);
    let (_, every) = s.get("/v1/ns/default/watch?wait_ms=0");
    let names = |v: &Value| -> Vec<String> {
        let events = v["events"].as_array().unwrap();
        events
            .iter()
            .map(|e| e["event"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(names(&every), ["ACQUIRED", "RELEASED"], "{every}");
    let (_, none) = s.get("/v1/ns/default/watch?wait_ms=0&holder_events=false");
    assert_eq!(
        (names(&none), &none["next"], &none["gap"]),
        (vec![], &every["next"], &json!(false)),
        "{none}"
    );
    let (_, mine) = on(&s, &younger, "GET", "events?holder_events=false", json!({}));
    assert_eq!(
        (names(&mine), &mine["next"]),
        (vec![], &every["next"]),
        "{mine}"
    );

    // A held poll: the holder events come first and do not answer it; the older session's
    // wait, then its grant, does (GRANTED after the younger one's release).
    let id = lease(&younger, "FILE:/b");
    let (status, v) = on(
        &s,
        &older,
        "POST",
        "acquire",
        json!({"intents": ["MUTATES FILE:/b"], "wait_timeout_ms": 30_000}),
    );
    assert_eq!((status, v["verdict"].as_str()), (200, Some("WAIT")), "{v}");
    let cursor = every["next"].as_str().unwrap().to_owned();
    let port = s.port();
    let poll = std::thread::spawn(move || {
        let path = format!("/v1/ns/default/watch?after={cursor}&wait_ms=20000&holder_events=false");
        let a = klock_testkit::http_client::request(port, "GET", &path, &[], b"").unwrap();
        (a.status, a.body)
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(!poll.is_finished(), "answered by the ACQUIRED before it");
    release(&younger, id);
    let (status, got) = poll.join().unwrap();
    assert_eq!(
        (status, names(&got)),
        (200, vec!["GRANTED".to_owned()]),
        "{got}"
    );

    // SSE: the first event read is the grant, not the holder events before it.
    let path = "/v1/ns/default/watch?holder_events=false";
    let (status, mut reader) = sse(port, path, &[]);
    assert_eq!(status, 200);
    assert_eq!(next_event(&mut reader).0, "GRANTED");

    for bad in ["no", "0", ""] {
        let (status, v) = s.get(&format!("/v1/ns/default/watch?holder_events={bad}"));
        assert_eq!(status, 400, "{bad:?}: {v}");
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("holder_events"), "{v}");
    }
}
