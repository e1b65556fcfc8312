//! The HTTP API against a server in this process on a free loopback port: verdicts, holds and
//! long-polls, tokens and namespaces, idempotent retries, every kind of bad input (a SIGKILL
//! followed by a restart from the data file, TLS refusals and the Unix socket:
//! cli/tests/http.rs).

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

mod support;

use support::{metric, on, open, sha256_of, Agent, Server};

/// A ticket poll answers for the session's own tickets only: WAIT while one waits, its outcome
/// from the stream once it ends, 410 TICKET_ENDED when that outcome is no longer in the stream
/// after the caller's `after`, and 404 UNKNOWN_TICKET, at once, for a ticket never its own.
#[test]
fn a_ticket_poll_never_answers_wait_for_a_ticket_that_is_not_waiting() {
    let s = Server::start(&["--memory"]);
    let older = open(&s, "default", "older");
    let younger = open(&s, "default", "younger");
    let other = open(&s, "default", "other");
    let intent = json!({"intents": ["MUTATES FILE:/t"]});
    let (_, v) = on(&s, &younger, "POST", "acquire", intent.clone());
    let lease = v["leases"][0]["lease_id"].as_u64().unwrap();
    let (_, v) = on(&s, &older, "POST", "acquire", intent);
    assert_eq!(v["verdict"], "WAIT", "{v}");
    let ticket = v["ticket"].as_u64().unwrap();
    let poll = |agent: &Agent, query: &str| {
        let started = std::time::Instant::now();
        let answer = on(&s, agent, "GET", &format!("tickets/{query}"), json!({}));
        (answer, started.elapsed())
    };

    let ((status, v), _) = poll(&older, &format!("{ticket}?wait_ms=0"));
    assert_eq!((status, &v["verdict"]), (200, &json!("WAIT")), "{v}");
    // Not held for the 5 s asked: there is nothing to wait for.
    for (agent, query) in [
        (&older, "424242?wait_ms=5000"),
        (&other, &*format!("{ticket}?wait_ms=5000")),
    ] {
        let ((status, v), took) = poll(agent, query);
        assert_eq!(
            (status, v["error"]["name"].as_str()),
            (404, Some("UNKNOWN_TICKET")),
            "{v}"
        );
        assert!(took < Duration::from_secs(4), "held {took:?}: {v}");
    }

    let (_, v) = on(
        &s,
        &younger,
        "POST",
        "release",
        json!({"lease_ids": [lease]}),
    );
    assert_eq!(v["released"], json!(true), "{v}");
    let ((status, v), _) = poll(&older, &format!("{ticket}?wait_ms=5000"));
    assert_eq!((status, v["event"].as_str()), (200, Some("GRANTED")), "{v}");
    let seen = v["event_id"].as_str().unwrap().to_owned();
    let ((status, v), took) = poll(&older, &format!("{ticket}?wait_ms=5000&after={seen}"));
    assert_eq!(
        (status, v["error"]["name"].as_str()),
        (410, Some("TICKET_ENDED")),
        "{v}"
    );
    assert!(took < Duration::from_secs(4), "held {took:?}: {v}");
}

#[test]
fn health_version_and_unknown_routes() {
    let s = Server::start(&["--memory"]);
    assert_eq!(s.call("GET", "/v1/health", &[], "").1["status"], "ok");
    let (status, v) = s.call("GET", "/v1/version", &[], "");
    assert_eq!(status, 200);
    assert_eq!(v["api"], "v1");
    let (status, v) = s.call("GET", "/v2/nothing", &[], "");
    assert_eq!(
        (status, v["error"]["name"].as_str()),
        (404, Some("NOT_FOUND"))
    );
}

#[test]
fn verdicts_holds_and_long_polls() {
    let s = Server::start(&["--memory"]);
    let older = open(&s, "default", "older");
    let younger = open(&s, "default", "younger");
    let intent = json!({"intents": ["MUTATES FILE:/src/a.ts"], "ttl_ms": 60000});
    let (status, v) = on(&s, &younger, "POST", "acquire", intent.clone());
    assert_eq!(
        (status, v["verdict"].as_str()),
        (200, Some("GRANTED")),
        "{v}"
    );
    let lease = v["leases"][0]["lease_id"].as_u64().unwrap();
    // The younger one is blocked by nothing older than it... the older one waits, held open
    // by the request until the younger releases from another thread.
    let (status, v) = on(
        &s,
        &older,
        "POST",
        "acquire",
        json!({"intents": ["MUTATES FILE:/src/a.ts"], "hold_ms": 100}),
    );
    assert_eq!((status, v["verdict"].as_str()), (200, Some("WAIT")), "{v}");
    let ticket = v["ticket"].as_u64().unwrap();
    std::thread::scope(|scope| {
        let poll = scope.spawn(|| {
            on(
                &s,
                &older,
                "GET",
                &format!("tickets/{ticket}?wait_ms=10000"),
                json!({}),
            )
        });
        std::thread::sleep(Duration::from_millis(200));
        let (status, v) = on(
            &s,
            &younger,
            "POST",
            "release",
            json!({"lease_ids": [lease]}),
        );
        assert_eq!((status, &v["released"]), (200, &json!(true)), "{v}");
        let (status, v) = poll.join().unwrap();
        assert_eq!((status, v["event"].as_str()), (200, Some("GRANTED")), "{v}");
        assert_eq!(v["ticket"], json!(ticket));
    });
    // A DIE names its blocker and says how long to back off.
    let (_, v) = on(
        &s,
        &younger,
        "POST",
        "acquire",
        json!({"intents": ["MUTATES FILE:/src/a.ts"], "wait": false}),
    );
    assert_eq!(v["verdict"], "DIE", "{v}");
    assert!(v["retry_after_ms"].as_u64().unwrap() >= 100);
    assert_eq!(v["held_by"][0]["agent_id"], "older");
    // The granted event is in the older session's stream too.
    let (_, v) = on(&s, &older, "GET", "events?wait_ms=1000", json!({}));
    assert_eq!(v["events"][0]["event"], "GRANTED", "{v}");
}

#[test]
fn tokens_and_namespaces_guard_every_session() {
    let s = Server::start(&["--memory"]);
    let a = open(&s, "default", "ann");
    let path = format!("/v1/ns/default/sessions/{}/heartbeat", a.id);
    let (status, v) = s.call("POST", &path, &[], "{}");
    assert_eq!(
        (status, v["error"]["name"].as_str()),
        (401, Some("SESSION_TOKEN_REFUSED"))
    );
    let (status, v) = s.call("POST", &path, &[("klock-session-token", "0000")], "{}");
    assert_eq!(
        (status, v["error"]["name"].as_str()),
        (401, Some("SESSION_TOKEN_REFUSED"))
    );
    let other = format!("/v1/ns/team/sessions/{}/heartbeat", a.id);
    let (status, v) = s.call("POST", &other, &[("klock-session-token", &a.token)], "{}");
    assert_eq!(
        (status, v["error"]["name"].as_str()),
        (404, Some("UNKNOWN_SESSION")),
        "{v}"
    );
    // Another session's token does not open this one.
    let b = open(&s, "default", "bob");
    let (status, _) = s.call("POST", &path, &[("klock-session-token", &b.token)], "{}");
    assert_eq!(status, 401);
    // Another session's lease: NOT_OWNER, a 409.
    let (_, v) = on(
        &s,
        &a,
        "POST",
        "acquire",
        json!({"intents": ["MUTATES FILE:/x"]}),
    );
    let lease = v["leases"][0]["lease_id"].as_u64().unwrap();
    let (status, v) = on(&s, &b, "POST", "release", json!({"lease_ids": [lease]}));
    assert_eq!(
        (status, v["error"]["name"].as_str()),
        (409, Some("NOT_OWNER")),
        "{v}"
    );
}

#[test]
fn bad_input_is_a_clear_json_error_and_changes_nothing() {
    let s = Server::start(&["--memory"]);
    let a = open(&s, "default", "ann");
    let cases: Vec<(Value, u16, &str)> = vec![
        (json!({"intents": ["MUTATES x"]}), 400, "INVALID_RESOURCE"),
        (
            json!({"intents": ["EATS FILE:/x"]}),
            400,
            "INVALID_PREDICATE",
        ),
        (json!({"intents": []}), 400, "INVALID_MANIFEST"),
        (
            json!({"intents": ["MUTATES FILE:/x"], "ttl_ms": 0}),
            400,
            "INVALID_TTL",
        ),
        (
            json!({"intents": ["MUTATES FILE:/x"], "ttl_ms": -1}),
            400,
            "BAD_REQUEST",
        ),
        (
            json!({"intents": ["MUTATES FILE:/x"], "ttl_ms": "soon"}),
            400,
            "BAD_REQUEST",
        ),
        (
            json!({"intents": ["MUTATES FILE:/x"], "extra": 1}),
            400,
            "BAD_REQUEST",
        ),
        (
            json!({"intents": ["MUTATES FILE:/x"], "hold_ms": 30001}),
            400,
            "BAD_REQUEST",
        ),
        (json!({"intents": "MUTATES FILE:/x"}), 400, "BAD_REQUEST"),
    ];
    for (body, status, name) in cases {
        let (got, v) = on(&s, &a, "POST", "acquire", body.clone());
        assert_eq!(
            (got, v["error"]["name"].as_str()),
            (status, Some(name)),
            "{body}: {v}"
        );
        assert!(!v["error"]["message"].as_str().unwrap().is_empty());
    }
    let path = format!("/v1/ns/default/sessions/{}/acquire", a.id);
    let token = [("klock-session-token", a.token.as_str())];
    let (status, v) = s.call("POST", &path, &token, "{not json");
    assert_eq!(
        (status, v["error"]["name"].as_str()),
        (400, Some("BAD_REQUEST"))
    );
    let bytes = [b'{', 0xff, 0xfe, b'}'];
    let raw = s.raw("POST", &path, &token, &bytes);
    assert!(String::from_utf8_lossy(&raw).starts_with("HTTP/1.1 400"));
    // A 100k-intent manifest is over the body limit, answered without reading it all.
    let many: Vec<String> = (0..100_000)
        .map(|i| format!("MUTATES FILE:/f/{i}"))
        .collect();
    let raw = s.raw(
        "POST",
        &path,
        &token,
        json!({"intents": many}).to_string().as_bytes(),
    );
    assert!(
        String::from_utf8_lossy(&raw).starts_with("HTTP/1.1 413"),
        "{}",
        String::from_utf8_lossy(&raw[..40.min(raw.len())])
    );
    let (status, v) = s.call("POST", "/v1/ns/default/sessions/abc/acquire", &token, "{}");
    assert_eq!(
        (status, v["error"]["name"].as_str()),
        (400, Some("BAD_REQUEST"))
    );
    // Nothing of the above reached the kernel: the resource is free.
    let (status, v) = s.call(
        "GET",
        "/v1/ns/default/resources/state?resource=FILE:/x",
        &[],
        "",
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["holders"], json!([]));
    // The server still serves.
    let (_, v) = on(
        &s,
        &a,
        "POST",
        "acquire",
        json!({"intents": ["MUTATES FILE:/x"]}),
    );
    assert_eq!(v["verdict"], "GRANTED");
}

#[test]
fn a_retried_request_answers_the_first_answer() {
    let s = Server::start(&["--memory"]);
    let a = open(&s, "default", "ann");
    let path = format!("/v1/ns/default/sessions/{}/acquire", a.id);
    let headers = [
        ("klock-session-token", a.token.as_str()),
        ("idempotency-key", "try-1"),
    ];
    let body = json!({"intents": ["MUTATES FILE:/x", "CONSUMES FILE:/y"]}).to_string();
    let (_, first) = s.call("POST", &path, &headers, &body);
    let (_, again) = s.call("POST", &path, &headers, &body);
    assert_eq!(first, again);
    let (_, stats) = s.call("GET", "/v1/ns/default/stats", &[], "");
    assert_eq!(stats["counters"]["granted"], 1, "{stats}");
    assert_eq!(stats["active_leases"], 2);
}

#[test]
fn the_manual_clock_takes_now_from_each_request() {
    let s = Server::start(&["--memory", "--clock", "manual"]);
    let (status, v) = s.call(
        "POST",
        "/v1/ns/default/sessions",
        &[],
        r#"{"agent_id": "ann"}"#,
    );
    assert_eq!(status, 400, "{v}");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("Klock-Now"));
    let (status, v) = s.call(
        "POST",
        "/v1/ns/default/sessions",
        &[("klock-now", "500")],
        r#"{"agent_id": "ann"}"#,
    );
    assert_eq!((status, &v["server_now"]), (200, &json!(500)), "{v}");
    let monotonic = Server::start(&["--memory"]);
    let (status, _) = monotonic.call(
        "POST",
        "/v1/ns/default/sessions",
        &[("klock-now", "5")],
        r#"{"agent_id": "ann"}"#,
    );
    assert_eq!(status, 400);
}

/// Reads an SSE stream until `want` events arrived (or 10 s passed); returns (id, event) pairs.
fn sse_events(
    s: &Server,
    a: &Agent,
    last_event_id: Option<&str>,
    want: usize,
) -> Vec<(String, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", s.port())).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut req = format!(
        "GET /v1/ns/default/sessions/{}/events HTTP/1.1\r\nhost: 127.0.0.1:{}\r\naccept: text/event-stream\r\nklock-session-token: {}\r\n",
        a.id,
        s.port(),
        a.token
    );
    if let Some(id) = last_event_id {
        req.push_str(&format!("last-event-id: {id}\r\n"));
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes()).unwrap();
    let mut reader = BufReader::new(stream);
    let mut found = Vec::new();
    let (mut id, mut line) = (String::new(), String::new());
    while found.len() < want {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        if let Some(v) = line.trim_end().strip_prefix("id: ") {
            id = v.to_owned();
        } else if let Some(v) = line.trim_end().strip_prefix("event: ") {
            found.push((id.clone(), v.to_owned()));
        }
    }
    found
}

#[test]
fn the_event_stream_resumes_after_the_last_event_id_without_loss_or_duplicates() {
    let s = Server::start(&["--memory"]);
    let older = open(&s, "default", "older");
    let younger = open(&s, "default", "younger");
    let (_, v) = on(
        &s,
        &younger,
        "POST",
        "acquire",
        json!({"intents": ["MUTATES FILE:/x"]}),
    );
    let lease = v["leases"][0]["lease_id"].as_u64().unwrap();
    let (_, v) = on(
        &s,
        &older,
        "POST",
        "acquire",
        json!({"intents": ["MUTATES FILE:/x"], "ttl_ms": 300}),
    );
    assert_eq!(v["verdict"], "WAIT", "{v}");
    std::thread::scope(|scope| {
        let reader = scope.spawn(|| sse_events(&s, &older, None, 1));
        std::thread::sleep(Duration::from_millis(200));
        on(
            &s,
            &younger,
            "POST",
            "release",
            json!({"lease_ids": [lease]}),
        );
        let got = reader.join().unwrap();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].1, "GRANTED");
        // Disconnected now; the granted lease expires meanwhile (ttl 300 ms).
        std::thread::sleep(Duration::from_millis(600));
        let again = sse_events(&s, &older, Some(&got[0].0), 1);
        assert_eq!(again.len(), 1, "{again:?}");
        assert_eq!(
            again[0].1, "LEASE_EXPIRED",
            "resumed after the GRANTED, not before it"
        );
        let index = |id: &str| -> u64 { id.split('.').next().unwrap().parse().unwrap() };
        assert!(
            index(&again[0].0) > index(&got[0].0),
            "{again:?} after {got:?}"
        );
    });
}

#[test]
fn a_batch_applies_its_operations_in_order_with_per_operation_answers() {
    let s = Server::start(&["--memory"]);
    let a = open(&s, "default", "ann");
    let b = open(&s, "default", "bob");
    let ops = json!({"operations": [
        {"op": "acquire", "session": a.id, "token": a.token, "intents": ["MUTATES FILE:/x"]},
        {"op": "acquire", "session": b.id, "token": b.token, "intents": ["MUTATES FILE:/x"], "wait": false},
        {"op": "acquire", "session": b.id, "token": "wrong", "intents": ["MUTATES FILE:/y"]},
        {"op": "release_all", "session": a.id, "token": a.token},
        {"op": "acquire", "session": b.id, "token": b.token, "intents": ["MUTATES FILE:/x"]},
    ]});
    let (status, v) = s.call("POST", "/v1/ns/default/batch", &[], &ops.to_string());
    assert_eq!(status, 200, "{v}");
    let r = v["results"].as_array().unwrap();
    assert_eq!(r.len(), 5);
    assert_eq!(r[0]["ok"]["verdict"], "GRANTED", "{v}");
    assert_eq!(
        r[1]["ok"]["verdict"], "DIE",
        "in order: a holds x when b asks"
    );
    assert_eq!(r[2]["error"]["name"], "SESSION_TOKEN_REFUSED");
    assert_eq!(r[3]["ok"]["released"], 1);
    assert_eq!(
        r[4]["ok"]["verdict"], "GRANTED",
        "after a's release, in the same batch"
    );
    // Its answer names its last entry (`Klock-Index`, `Klock-Now`), as every write's does.
    let heartbeat = json!({"operations": [{"op": "heartbeat", "session": b.id, "token": b.token}]});
    let path = "/v1/ns/default/batch";
    let body = heartbeat.to_string();
    let index = |answer: &klock_testkit::http_client::Answer| -> u64 {
        let index = answer.header("klock-index");
        index
            .unwrap_or_else(|| panic!("no Klock-Index: {answer:?}"))
            .parse()
            .unwrap()
    };
    let first = klock_testkit::http_client::request(s.port(), "POST", path, &[], body.as_bytes());
    let first = first.unwrap();
    assert_eq!(first.status, 200, "{first:?}");
    assert!(first.header("klock-now").is_some(), "{first:?}");
    let next = klock_testkit::http_client::request(s.port(), "POST", path, &[], body.as_bytes());
    assert_eq!(index(&next.unwrap()), index(&first) + 1);
    // The request as a whole is checked strictly.
    let (status, v) = s.call(
        "POST",
        "/v1/ns/default/batch",
        &[],
        r#"{"operations": [{"op": "explode"}]}"#,
    );
    assert_eq!(
        (status, v["error"]["name"].as_str()),
        (400, Some("BAD_REQUEST")),
        "{v}"
    );
    let (status, _) = s.call("POST", "/v1/ns/default/batch", &[], r#"{"operations": []}"#);
    assert_eq!(status, 400);
}

/// A data file stores a snapshot every 100,000 commands unless `--snapshot-every` says
/// otherwise (`DEFAULT_SNAPSHOT_EVERY`): 11,001 commands are all still in the log (the earlier
/// default, 10,000, compacted them), 101,001 are past a snapshot; `--snapshot-every 10000`
/// compacts at 10,000.
#[test]
fn a_data_file_snapshots_every_100k_commands_unless_told_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let logged = |name: &str, flags: &[&str], requests: usize| -> Vec<f64> {
        let data = dir.path().join(name);
        let mut args = vec!["--data", data.to_str().unwrap()];
        args.extend_from_slice(flags);
        let s = Server::start(&args);
        let a = open(&s, "default", "ann");
        let pair = [
            json!({"op": "acquire", "session": a.id, "token": a.token, "intents": ["MUTATES FILE:/x"]}),
            json!({"op": "release_all", "session": a.id, "token": a.token}),
        ];
        let operations: Vec<Value> = pair.iter().cycle().take(1_000).cloned().collect();
        let body = json!({ "operations": operations }).to_string();
        (1..=requests)
            .map(|_| {
                let (status, v) = s.call("POST", "/v1/ns/default/batch", &[], &body);
                assert_eq!(status, 200, "{v}");
                metric(s.port(), "klock_log_entries").expect("klock_log_entries")
            })
            .collect()
    };
    let by_default = logged("default.redb", &[], 101);
    assert_eq!(
        by_default[10], 11_001.0,
        "1 open + 11 requests of 1,000, none compacted"
    );
    assert!(
        by_default[100] <= 1_001.0,
        "a snapshot once 100,000 commands were logged: {} left",
        by_default[100]
    );
    let told = logged("told.redb", &["--snapshot-every", "10000"], 11);
    assert!(
        told[10] <= 1_001.0,
        "a snapshot at 10,000: {} left",
        told[10]
    );
}

#[test]
fn metrics_count_requests_outcomes_and_durable_writes() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("klock.redb");
    let s = Server::start(&["--data", data.to_str().unwrap()]);
    let a = open(&s, "default", "ann");
    on(
        &s,
        &a,
        "POST",
        "acquire",
        json!({"intents": ["MUTATES FILE:/x"]}),
    );
    on(
        &s,
        &a,
        "POST",
        "acquire",
        json!({"intents": ["EATS FILE:/x"]}),
    );
    let raw = s.raw("GET", "/metrics", &[], b"");
    let text = String::from_utf8_lossy(&raw).into_owned();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let value = |name: &str| -> f64 {
        let line = text
            .lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
            .unwrap_or_else(|| panic!("no {name} in {text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    let acquires =
        "klock_http_requests_total{route=\"/v1/ns/{ns}/sessions/{sid}/acquire\",status=\"200\"}";
    assert_eq!(value(acquires), 1.0);
    let bad =
        "klock_http_requests_total{route=\"/v1/ns/{ns}/sessions/{sid}/acquire\",status=\"400\"}";
    assert_eq!(value(bad), 1.0);
    assert_eq!(value("klock_active_leases"), 1.0);
    assert_eq!(value("klock_outcomes_total{outcome=\"granted\"}"), 1.0);
    assert_eq!(value("klock_committed_entries_total"), 3.0);
    assert!(value("klock_commit_seconds_count") >= 1.0);
    assert_eq!(value("klock_log_entries"), 3.0);
    let acquire_seconds =
        "klock_http_request_duration_seconds_count{route=\"/v1/ns/{ns}/sessions/{sid}/acquire\"}";
    assert_eq!(value(acquire_seconds), 2.0);
}

#[test]
fn bearer_tokens_grant_a_role_on_namespaces_with_limits() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens.json");
    let tokens = json!({"tokens": [
        {"name": "bot", "sha256": sha256_of("bot-secret"), "role": "agent", "namespaces": ["team"], "max_long_polls": 1},
        {"name": "screen", "sha256": sha256_of("screen-secret"), "role": "observer", "namespaces": ["*"]},
        {"name": "slow", "sha256": sha256_of("slow-secret"), "role": "agent", "namespaces": ["*"], "rate_per_second": 3},
    ]});
    std::fs::write(&file, tokens.to_string()).unwrap();
    let s = Server::start(&["--memory", "--tokens", file.to_str().unwrap()]);
    let bot = [("authorization", "Bearer bot-secret")];
    let open_in = |ns: &str, auth: &[(&str, &str)]| {
        s.call(
            "POST",
            &format!("/v1/ns/{ns}/sessions"),
            auth,
            r#"{"agent_id": "a"}"#,
        )
    };
    // Health needs nothing; everything else a known token.
    assert_eq!(s.call("GET", "/v1/health", &[], "").0, 200);
    let (status, v) = open_in("team", &[]);
    assert_eq!(
        (status, v["error"]["name"].as_str()),
        (401, Some("UNAUTHORIZED")),
        "{v}"
    );
    let (status, _) = open_in("team", &[("authorization", "Bearer guess")]);
    assert_eq!(status, 401);
    // The agent token works in its namespace only.
    let (status, v) = open_in("team", &bot);
    assert_eq!(status, 200, "{v}");
    let (sid, token) = (
        v["session_id"].as_u64().unwrap(),
        v["session_token"].as_str().unwrap().to_owned(),
    );
    let (status, v) = open_in("default", &bot);
    assert_eq!(
        (status, v["error"]["name"].as_str()),
        (403, Some("FORBIDDEN")),
        "{v}"
    );
    // The observer reads but does not act.
    let screen = [("authorization", "Bearer screen-secret")];
    assert_eq!(s.call("GET", "/v1/ns/team/stats", &screen, "").0, 200);
    let (status, v) = open_in("team", &screen);
    assert_eq!(
        (status, v["error"]["name"].as_str()),
        (403, Some("FORBIDDEN")),
        "{v}"
    );
    assert_eq!(
        s.call("POST", "/v1/advance", &bot, "").0,
        403,
        "only an admin settles time"
    );
    // One waiting request at a time for the bot: a second long-poll is refused while one waits.
    let events = format!("/v1/ns/team/sessions/{sid}/events?wait_ms=1500");
    let with_token = [bot[0], ("klock-session-token", token.as_str())];
    std::thread::scope(|scope| {
        let first = scope.spawn(|| s.call("GET", &events, &with_token, ""));
        std::thread::sleep(Duration::from_millis(300));
        let (status, v) = s.call("GET", &events, &with_token, "");
        assert_eq!(
            (status, v["error"]["name"].as_str()),
            (429, Some("TOO_MANY_WAITS")),
            "{v}"
        );
        assert_eq!(first.join().unwrap().0, 200);
    });
    assert_eq!(
        s.call("GET", &events.replace("1500", "0"), &with_token, "")
            .0,
        200,
        "the slot is free again"
    );
    // Three requests a second for the slow token: a burst of ten is cut.
    let slow = [("authorization", "Bearer slow-secret")];
    let statuses: Vec<u16> = (0..10)
        .map(|_| s.call("GET", "/v1/ns/x/stats", &slow, "").0)
        .collect();
    assert!(
        statuses.contains(&429) && statuses.contains(&200),
        "{statuses:?}"
    );
    // A 429 says when to ask again: Retry-After, in whole seconds.
    let refused = (0..20)
        .map(|_| {
            String::from_utf8_lossy(&s.raw("GET", "/v1/ns/x/stats", &slow, b"")).to_lowercase()
        })
        .find(|answer| answer.starts_with("http/1.1 429"))
        .expect("the slow token is refused within 20 quick requests");
    assert!(refused.contains("\r\nretry-after: 1\r\n"), "{refused}");
}

#[test]
fn the_openapi_document_describes_every_route_the_server_serves() {
    let s = Server::start(&["--memory"]);
    let (status, doc) = s.call("GET", "/v1/openapi.json", &[], "");
    assert_eq!(status, 200);
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3.1"),
        "{}",
        doc["openapi"]
    );
    let paths = doc["paths"].as_object().unwrap();
    let mut operations = 0;
    for (path, ops) in paths {
        for method in ops.as_object().unwrap().keys() {
            operations += 1;
            let concrete = path
                .replace("{ns}", "default")
                .replace("{sid}", "1")
                .replace("{tid}", "1");
            let raw = s.raw(&method.to_uppercase(), &concrete, &[], b"");
            let text = String::from_utf8_lossy(&raw);
            assert!(
                !text.contains("no such route") && !text.starts_with("HTTP/1.1 405"),
                "{method} {path} is documented but not served: {text}"
            );
        }
    }
    // Every route of the API is documented (the router and the document share one list).
    for route in [
        "/v1/ns/{ns}/sessions",
        "/v1/ns/{ns}/sessions/{sid}/acquire",
        "/v1/ns/{ns}/sessions/{sid}/tickets/{tid}",
        "/v1/ns/{ns}/sessions/{sid}/events",
        "/v1/ns/{ns}/batch",
        "/v1/ns/{ns}/watch",
        "/v1/ns/{ns}/history",
        "/v1/ns/{ns}/overview",
        "/v1/state/hash",
        "/metrics",
        "/v1/backup",
    ] {
        assert!(
            paths.contains_key(route),
            "{route} is missing from the document"
        );
    }
    // 24 since POST /v1/reset left the API for the test kit (klock-testkit serve); 25 with
    // GET /v1/backup (issue 25).
    assert_eq!(operations, 25, "one operation per handler");
    // An undocumented path is not served.
    let (status, v) = s.call("GET", "/v1/ns/default/undocumented", &[], "");
    assert_eq!(
        (status, v["error"]["name"].as_str()),
        (404, Some("NOT_FOUND"))
    );
}

#[test]
fn a_slow_client_holding_a_connection_does_not_stop_the_server() {
    let s = Server::start(&["--memory"]);
    // Half a request, never finished, and a connection that sends nothing at all.
    let mut slow = TcpStream::connect(("127.0.0.1", s.port())).unwrap();
    slow.write_all(
        format!(
            "POST /v1/ns/default/sessions HTTP/1.1\r\nhost: 127.0.0.1:{}\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{{\"agent",
            s.port()
        )
        .as_bytes(),
    )
    .unwrap();
    let _idle = TcpStream::connect(("127.0.0.1", s.port())).unwrap();
    for i in 0..20 {
        let a = open(&s, "default", &format!("agent-{i}"));
        let (_, v) = on(
            &s,
            &a,
            "POST",
            "acquire",
            json!({"intents": [format!("MUTATES FILE:/{i}")]}),
        );
        assert_eq!(v["verdict"], "GRANTED");
    }
    let (_, stats) = s.call("GET", "/v1/ns/default/stats", &[], "");
    assert_eq!(
        stats["active_sessions"], 20,
        "the half request opened nothing"
    );
}

#[test]
fn the_namespace_watch_streams_every_sessions_events_as_sse() {
    let s = Server::start(&["--memory"]);
    let a = open(&s, "default", "ann");
    let b = open(&s, "default", "bob");
    on(
        &s,
        &a,
        "POST",
        "acquire",
        json!({"intents": ["MUTATES FILE:/w"], "ttl_ms": 100}),
    );
    on(
        &s,
        &b,
        "POST",
        "acquire",
        json!({"intents": ["MUTATES FILE:/v"], "ttl_ms": 150}),
    );
    let mut stream = TcpStream::connect(("127.0.0.1", s.port())).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .write_all(
            format!(
                "GET /v1/ns/default/watch HTTP/1.1\r\nhost: 127.0.0.1:{}\r\naccept: text/event-stream\r\n\r\n",
                s.port()
            )
            .as_bytes(),
        )
        .unwrap();
    let mut reader = BufReader::new(stream);
    let (mut kinds, mut line) = (Vec::new(), String::new());
    while kinds.len() < 4 && reader.read_line(&mut line).unwrap_or(0) > 0 {
        if let Some(kind) = line.trim_end().strip_prefix("event: ") {
            kinds.push(kind.to_owned());
        }
        line.clear();
    }
    assert_eq!(
        kinds,
        ["ACQUIRED", "ACQUIRED", "LEASE_EXPIRED", "LEASE_EXPIRED"],
        "both sessions' grants, then their expiries"
    );
}
