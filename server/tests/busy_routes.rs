//! The busy routes (acquire, release, heartbeat) are served without the router
//! (`server/src/api/busy.rs`), and answer exactly as the router does: the same scenario is
//! sent to two servers, to one as any client sends it and to the other with an `Origin`
//! header, which keeps a request on the router; every answer (status, headers, body) and the
//! request metrics must be the same, but for the session secrets each open hands out.

mod support;

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use support::{sha256_of, Server};

/// One answer, comparable across the two servers: status, headers but `date`, and the body
/// with the secrets an open hands out, and the log's name, masked.
#[derive(Debug, PartialEq)]
struct Seen {
    status: u16,
    headers: BTreeMap<String, String>,
    body: Value,
}

impl Seen {
    fn of(raw: &[u8]) -> (Seen, Value) {
        let text = String::from_utf8_lossy(raw);
        let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
        let mut lines = head.lines();
        let status = lines.next().unwrap().split(' ').nth(1).unwrap();
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.to_ascii_lowercase(), v.trim().to_owned()))
            .filter(|(k, _)| k != "date")
            .collect();
        let body = serde_json::from_str(body).unwrap_or_else(|_| Value::String(body.to_owned()));
        let mut masked = body.clone();
        if let Some(fields) = masked.as_object_mut() {
            // Secrets, and the log's name (each server's own).
            for key in ["session_token", "resume_secret", "log"] {
                if fields.contains_key(key) {
                    fields.insert(key.into(), json!("*"));
                }
            }
        }
        let seen = Seen {
            status: status.parse().unwrap(),
            headers,
            body: masked,
        };
        (seen, body)
    }
}

/// One request on a connection of its own (JSON unless `headers` name a Content-Type); the
/// whole answer.
fn exchange(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Vec<u8> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    if !headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
    {
        head.push_str("content-type: application/json\r\n");
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    let _ = s.write_all(body.as_bytes());
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

/// A server, and whether its requests carry `Origin` (and so go through the router).
struct Side {
    server: Server,
    routed: bool,
    /// The bearer token every request carries (with a token file).
    bearer: Option<String>,
    /// The bearer token `/metrics` is read with (with a token file).
    admin: Option<String>,
    seen: Vec<Seen>,
}

impl Side {
    fn new(args: &[&str], routed: bool, bearer: Option<&str>) -> Side {
        Side {
            server: Server::start(args),
            routed,
            bearer: bearer.map(|t| format!("Bearer {t}")),
            admin: None,
            seen: Vec::new(),
        }
    }

    /// Sends one request, keeps its answer for the comparison, and returns its whole body.
    fn send(&mut self, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Value {
        let mut all = headers.to_vec();
        if self.routed {
            all.push(("origin", "http://127.0.0.1"));
        }
        if let Some(bearer) = &self.bearer {
            all.push(("authorization", bearer));
        }
        let (seen, body) = Seen::of(&exchange(self.server.port(), method, path, &all, body));
        self.seen.push(seen);
        body
    }

    /// The `klock_http_requests_total` lines of the busy routes.
    fn busy_metrics(&self) -> Vec<String> {
        let admin = self.admin.as_deref().map(|a| ("authorization", a));
        let raw = exchange(self.server.port(), "GET", "/metrics", admin.as_slice(), "");
        String::from_utf8_lossy(&raw)
            .lines()
            .filter(|l| l.starts_with("klock_http_requests_total"))
            .filter(|l| {
                ["acquire\"", "release\"", "heartbeat\""]
                    .iter()
                    .any(|r| l.contains(r))
            })
            .map(str::to_owned)
            .collect()
    }
}

/// A session opened on a side: its id and token.
struct Opened {
    id: u64,
    token: String,
}

fn open(side: &mut Side, agent: &str, clock: &[(&str, &str)]) -> Opened {
    let body = json!({ "agent_id": agent }).to_string();
    let v = side.send("POST", "/v1/ns/team/sessions", clock, &body);
    Opened {
        id: v["session_id"].as_u64().expect("an open session"),
        token: v["session_token"].as_str().unwrap().to_owned(),
    }
}

/// Under the manual clock: grants, a refusal, a wait held for its outcome, renewals, releases,
/// idempotency keys and every kind of bad input the three routes can get.
fn manual_clock_scenario(side: &mut Side) {
    let a = open(side, "a", &[("klock-now", "1")]);
    let b = open(side, "b", &[("klock-now", "2")]);
    let on = |s: &Opened, what: &str| format!("/v1/ns/team/sessions/{}/{what}", s.id);
    let (a_acquire, b_acquire) = (on(&a, "acquire"), on(&b, "acquire"));
    let a_token = ("klock-session-token", a.token.as_str());
    let b_token = ("klock-session-token", b.token.as_str());
    let at = |ms: &'static str| ("klock-now", ms);
    let x = json!({"intents": ["MUTATES FILE:/x"], "ttl_ms": 10_000}).to_string();
    side.send("POST", &a_acquire, &[a_token, at("10")], &x);
    // The younger session is refused at once, waits, and waits held for its outcome.
    let no_wait = json!({"intents": ["MUTATES FILE:/x"], "wait": false}).to_string();
    side.send("POST", &b_acquire, &[b_token, at("11")], &no_wait);
    let older = json!({"intents": ["MUTATES FILE:/y"]}).to_string();
    side.send("POST", &b_acquire, &[b_token, at("12")], &older);
    let held = json!({"intents": ["READS FILE:/y"], "hold_ms": 50}).to_string();
    side.send("POST", &a_acquire, &[a_token, at("13")], &held);
    // Renewals: every lease, one, and bad ones.
    let a_heartbeat = on(&a, "heartbeat");
    for (ms, body) in [
        ("20", ""),
        ("21", r#"{"lease_ids": [1]}"#),
        ("22", r#"{"all": true}"#),
        ("23", r#"{"lease_ids": [999]}"#),
    ] {
        side.send("POST", &a_heartbeat, &[a_token, at(ms)], body);
    }
    // Idempotency keys: a retry answers the first answer; another body with it is refused.
    let key = ("idempotency-key", "k-1");
    let z = json!({"intents": ["MUTATES FILE:/z"]}).to_string();
    side.send("POST", &a_acquire, &[a_token, at("30"), key], &z);
    side.send("POST", &a_acquire, &[a_token, at("31"), key], &z);
    side.send("POST", &a_acquire, &[a_token, at("32"), key], &x);
    // Bad input, each named.
    for bad in [
        "{",
        r#"{"intents": "x"}"#,
        r#"{"intents": [], "what": 1}"#,
        r#"{"intents": ["NOPE"]}"#,
    ] {
        side.send("POST", &a_acquire, &[a_token, at("40")], bad);
    }
    let wrong = ("klock-session-token", "wrong");
    let text = ("content-type", "text/plain");
    for (path, headers) in [
        (a_acquire.as_str(), &[at("41")][..]), // no session token
        (&a_acquire, &[wrong, at("42")]),
        (&a_acquire, &[a_token]), // no Klock-Now under the manual clock
        (&a_acquire, &[a_token, at("soon")]),
        ("/v1/ns/team/sessions/999/acquire", &[a_token, at("43")]),
        ("/v1/ns/team/sessions/abc/acquire", &[a_token, at("44")]),
        ("/v1/ns/other/sessions/1/acquire", &[a_token, at("45")]),
        (&a_acquire, &[a_token, at("46"), text]),
    ] {
        side.send("POST", path, headers, &x);
    }
    let huge = format!(r#"{{"intents": ["{}"]}}"#, "a".repeat(1 << 20));
    side.send("POST", &a_acquire, &[a_token, at("47")], &huge);
    // Releases: one, a bad one, all; and a closed session's.
    let a_release = on(&a, "release");
    for (ms, body) in [
        ("50", r#"{"lease_ids": [1]}"#),
        ("51", r#"{"lease_ids": [1, 2]}"#),
        ("52", r#"{"all": true}"#),
        ("53", r#"{"all": true}"#),
    ] {
        side.send("POST", &a_release, &[a_token, at(ms)], body);
    }
    side.send(
        "DELETE",
        &format!("/v1/ns/team/sessions/{}", a.id),
        &[a_token, at("60")],
        "",
    );
    side.send("POST", &a_release, &[a_token, at("61")], r#"{"all": true}"#);
}

/// With bearer tokens (the real clock): who may act on the busy routes.
fn token_scenario(side: &mut Side, tokens: &[(&str, Option<&str>)]) {
    let s = open(side, "a", &[]);
    let path = |what: &str| format!("/v1/ns/team/sessions/{}/{what}", s.id);
    let session = ("klock-session-token", s.token.as_str());
    for (what, body) in [
        (
            "acquire",
            r#"{"intents": ["MUTATES FILE:/x"], "wait": false}"#,
        ),
        ("heartbeat", r#"{"lease_ids": [999]}"#),
        ("release", r#"{"all": true}"#),
    ] {
        for (_, bearer) in tokens {
            let saved = side.bearer.clone();
            side.bearer = bearer.map(|t| format!("Bearer {t}"));
            side.send("POST", &path(what), &[session], body);
            side.bearer = saved;
        }
    }
}

fn compare(busy: &Side, routed: &Side) {
    assert_eq!(busy.seen.len(), routed.seen.len());
    for (i, (b, r)) in busy.seen.iter().zip(&routed.seen).enumerate() {
        assert_eq!(
            b, r,
            "answer {i} differs between the busy route and the router"
        );
    }
    let metrics = busy.busy_metrics();
    assert!(
        !metrics.is_empty(),
        "no request of a busy route was counted"
    );
    assert_eq!(metrics, routed.busy_metrics(), "the request metrics differ");
}

#[test]
fn busy_routes_answer_as_the_router_does() {
    let args = ["--memory", "--clock", "manual"];
    let mut busy = Side::new(&args, false, None);
    let mut routed = Side::new(&args, true, None);
    manual_clock_scenario(&mut busy);
    manual_clock_scenario(&mut routed);
    compare(&busy, &routed);
    // Statuses worth seeing in the scenario: it did reach the handlers' every kind of answer.
    let statuses: std::collections::BTreeSet<u16> = busy.seen.iter().map(|s| s.status).collect();
    for status in [200, 400, 401, 404, 413, 415, 422] {
        assert!(
            statuses.contains(&status),
            "no {status} in the scenario: {statuses:?}"
        );
    }
}

#[test]
fn busy_routes_check_bearer_tokens_as_the_router_does() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens.json");
    let tokens = json!({"tokens": [
        {"name": "agent", "sha256": sha256_of("agent-secret"), "role": "agent", "namespaces": ["team"]},
        {"name": "eye", "sha256": sha256_of("eye-secret"), "role": "observer", "namespaces": ["team"]},
        {"name": "elsewhere", "sha256": sha256_of("else-secret"), "role": "agent", "namespaces": ["other"]},
        {"name": "ops", "sha256": sha256_of("ops-secret"), "role": "admin", "namespaces": ["*"]},
    ]});
    std::fs::write(&file, tokens.to_string()).unwrap();
    let args = ["--memory", "--tokens", file.to_str().unwrap()];
    let bearers = [
        ("agent", Some("agent-secret")),
        ("observer", Some("eye-secret")),
        ("another namespace's", Some("else-secret")),
        ("unknown", Some("nobody")),
        ("none", None),
    ];
    let mut busy = Side::new(&args, false, Some("agent-secret"));
    let mut routed = Side::new(&args, true, Some("agent-secret"));
    for side in [&mut busy, &mut routed] {
        side.admin = Some(String::from("Bearer ops-secret"));
    }
    token_scenario(&mut busy, &bearers);
    token_scenario(&mut routed, &bearers);
    // The real clock: lease times differ, so compare what a refusal is made of.
    let refusals = |side: &Side| -> Vec<(u16, Value)> {
        side.seen
            .iter()
            .map(|s| (s.status, s.body["error"]["name"].clone()))
            .collect()
    };
    assert_eq!(refusals(&busy), refusals(&routed));
    let statuses: Vec<u16> = busy.seen.iter().map(|s| s.status).collect();
    // Per route: the agent's call is answered, the others refused (403, 403, 401, 401).
    assert_eq!(
        statuses[1..],
        [200, 403, 403, 401, 401, 200, 403, 403, 401, 401, 200, 403, 403, 401, 401],
        "{statuses:?}"
    );
    assert_eq!(busy.busy_metrics(), routed.busy_metrics());
}
