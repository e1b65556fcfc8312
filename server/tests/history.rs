//! The replay endpoints against a server in this process: the history export replayed by the
//! kernel gives the server's state hash at every sampled log index (across a SIGKILL and a
//! restart: cli/tests/history.rs), the namespace overview, `--dashboard`, and every bad input
//! as a clear 4xx.

use klock_testkit::history::{export, live_hash, on, replay, work};
use klock_testkit::http_client::request;
use serde_json::{json, Value};
use std::collections::BTreeMap;

mod support;

use support::{open, sha256_of, Server};

#[test]
fn the_history_replays_to_the_servers_state_hash_at_every_sampled_index() {
    let s = Server::start(&["--memory", "--history", "100000"]);
    let mut samples = BTreeMap::new();
    work(&s, &mut samples, 6);
    let v = export(&s, "team");
    assert_eq!(v["start"]["index"], 0, "a fresh server keeps everything");
    assert!(v["steps"].as_array().unwrap().len() > 40);
    // Nothing secret leaves: no session token, caller or idempotency key in the export.
    let text = v.to_string();
    assert!(
        !text.contains("token") && !text.contains("caller"),
        "{}",
        &text[..400]
    );
    let replayed = replay(&v);
    assert!(samples.len() >= 12);
    for (index, hash) in &samples {
        assert_eq!(replayed.get(index), Some(hash), "entry {index}");
        let (status, at) = s.get(&format!("/v1/state/hash?index={index}"));
        assert_eq!(status, 200, "{at}");
        assert_eq!(
            at["hash"].as_str(),
            Some(hash.as_str()),
            "the server's replay at {index}"
        );
    }
    let last = *replayed.keys().last().unwrap();
    assert_eq!(v["end"]["index"].as_u64(), Some(last));
    assert_eq!(
        v["end"]["hash"].as_str(),
        replayed.get(&last).map(String::as_str)
    );

    // A range: the state at `from` is the state after the last entry at or before it.
    let steps = v["steps"].as_array().unwrap();
    let middle = &steps[steps.len() / 2];
    let (from, to) = (
        middle["now"].as_u64().unwrap(),
        steps[steps.len() - 3]["now"].as_u64().unwrap(),
    );
    let (status, ranged) = s.get(&format!("/v1/ns/team/history?from={from}&to={to}"));
    assert_eq!(status, 200, "{ranged}");
    let start = ranged["start"]["index"].as_u64().unwrap();
    assert!(steps
        .iter()
        .any(|st| st["index"].as_u64() == Some(start) && st["now"].as_u64() <= Some(from)));
    assert!(ranged["steps"]
        .as_array()
        .unwrap()
        .iter()
        .all(|st| st["now"].as_u64().unwrap() <= to));
    let again = replay(&ranged);
    for (index, hash) in &again {
        assert_eq!(replayed.get(index), Some(hash), "ranged replay at {index}");
    }
}

#[test]
fn a_small_history_keeps_the_newest_steps_and_still_replays_exactly() {
    let s = Server::start(&["--memory", "--history", "1"]);
    let mut samples = BTreeMap::new();
    work(&s, &mut samples, 2);
    // Past two checkpoint intervals, through the batch endpoint (one entry per operation).
    let a = open(&s, "team", "batcher");
    let every = klock_server::history::CHECKPOINT_EVERY as usize;
    for _ in 0..(2 * every / 1000 + 1) {
        let ops: Vec<Value> = (0..1000)
            .map(|k| match k % 2 {
                0 => json!({"op": "acquire", "session": a.id, "token": a.token, "intents": [format!("MUTATES FILE:/b{}", k % 7)]}),
                _ => json!({"op": "release_all", "session": a.id, "token": a.token}),
            })
            .collect();
        let (status, v) = s.call(
            "POST",
            "/v1/ns/team/batch",
            &[],
            &json!({ "operations": ops }).to_string(),
        );
        assert_eq!(status, 200, "{v}");
    }
    let (index, hash) = live_hash(&s);
    let v = export(&s, "team");
    let start = v["start"]["index"].as_u64().unwrap();
    assert!(
        start >= every as u64,
        "the oldest steps were dropped: start {start}"
    );
    assert!(v["steps"].as_array().unwrap().len() <= every + 1000);
    assert_eq!(v["kept"]["oldest"]["index"].as_u64(), Some(start));
    let replayed = replay(&v);
    assert_eq!(replayed.get(&index), Some(&hash));
    let (status, e) = s.get(&format!(
        "/v1/ns/team/history?from=0&to={}",
        v["start"]["now"]
    ));
    assert!(status == 410 || status == 200, "{e}");
    let (status, e) = s.get("/v1/state/hash?index=3");
    assert_eq!(status, 410, "{e}");
}

#[test]
fn large_steps_shorten_the_history_instead_of_growing_it() {
    // 1,000 steps of capacity allow about 500 KiB (history::BYTES_PER_STEP each). Every
    // acquire below carries 64 intents of about 4 KiB (a step of about 256 KiB): the step
    // count alone would keep all of them, about 10 MiB.
    let s = Server::start(&["--memory", "--history", "1000"]);
    let a = open(&s, "team", "big");
    let long = "x".repeat(4000);
    for round in 0..40 {
        let intents: Vec<String> = (0..64)
            .map(|i| format!("MUTATES FILE:/{round}/{i}/{long}"))
            .collect();
        let v = on(&s, &a, "acquire", json!({ "intents": intents }));
        assert_eq!(v["verdict"], "GRANTED", "{v}");
        on(&s, &a, "release", json!({"all": true}));
    }
    let (index, hash) = live_hash(&s);
    let v = export(&s, "team");
    let kept: usize = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|step| step["commands"].to_string().len() > 200_000)
        .count();
    assert!(
        (1..=6).contains(&kept),
        "about 500 KiB keep 2 or 3 such steps, plus an interval; kept {kept}"
    );
    let replayed = replay(&v);
    assert_eq!(
        replayed.get(&index),
        Some(&hash),
        "what is kept still replays exactly"
    );
}

#[test]
fn a_server_started_without_a_history_says_how_to_keep_one() {
    let s = Server::start(&["--memory"]);
    let a = open(&s, "team", "alice");
    on(&s, &a, "acquire", json!({"intents": ["MUTATES FILE:/a"]}));
    for path in ["/v1/ns/team/history", "/v1/state/hash?index=1"] {
        let (status, e) = s.get(path);
        assert_eq!(status, 410, "{path}: {e}");
        assert_eq!(e["error"]["name"], "HISTORY_NOT_KEPT", "{path}");
        let message = e["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("--history N") && message.contains("--dashboard"),
            "{message}"
        );
    }
    // The live state's hash needs no history.
    let (status, v) = s.get("/v1/state/hash");
    assert_eq!(status, 200, "{v}");
}

#[test]
fn the_overview_shows_one_namespace() {
    let s = Server::start(&["--memory"]);
    let a = open(&s, "team", "alice");
    let b = open(&s, "other", "bob");
    on(&s, &a, "acquire", json!({"intents": ["MUTATES FILE:/a"]}));
    on(&s, &b, "acquire", json!({"intents": ["MUTATES FILE:/b"]}));
    let (status, v) = s.get("/v1/ns/team/overview");
    assert_eq!(status, 200, "{v}");
    let snap = &v["snapshot"];
    assert_eq!(snap["sessions"].as_array().unwrap().len(), 1);
    assert_eq!(snap["sessions"][0]["agent_id"], "alice");
    assert_eq!(snap["leases"].as_array().unwrap().len(), 1);
    assert_eq!(snap["leases"][0]["resource"], "FILE:/a");
    assert_eq!(snap["stats"]["active_leases"], 1);
    assert!(v["index"].as_u64().unwrap() >= 4);
}

#[test]
fn bad_ranges_unknown_namespaces_and_wrong_tokens_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens.json");
    let tokens = json!({"tokens": [
        {"name": "wall", "sha256": sha256_of("wall"), "role": "observer", "namespaces": ["*"]},
        {"name": "team-screen", "sha256": sha256_of("team-screen"), "role": "observer", "namespaces": ["team"]},
        {"name": "bot", "sha256": sha256_of("bot"), "role": "agent", "namespaces": ["*"]},
        {"name": "ops", "sha256": sha256_of("ops"), "role": "admin", "namespaces": ["*"]},
    ]});
    std::fs::write(&file, tokens.to_string()).unwrap();
    let s = Server::start(&[
        "--memory",
        "--history",
        "1000",
        "--tokens",
        file.to_str().unwrap(),
    ]);
    let as_ = |token: &str, path: &str| {
        let auth = format!("Bearer {token}");
        s.call("GET", path, &[("authorization", &auth)], "")
    };
    let (status, v) = s.call(
        "POST",
        "/v1/ns/team/sessions",
        &[("authorization", "Bearer bot")],
        &json!({"agent_id": "alice"}).to_string(),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(as_("wall", "/v1/ns/team/history").0, 200);
    assert_eq!(as_("ops", "/v1/ns/team/history").0, 200);
    let cases: &[(&str, &str, u16, &str, &str)] = &[
        (
            "team-screen",
            "/v1/ns/team/history",
            403,
            "FORBIDDEN",
            "[\"*\"]",
        ),
        (
            "bot",
            "/v1/ns/team/history",
            403,
            "FORBIDDEN",
            "observer and admin",
        ),
        ("nobody", "/v1/ns/team/history", 401, "UNAUTHORIZED", ""),
        (
            "wall",
            "/v1/ns/team/history?from=9&to=3",
            400,
            "BAD_RANGE",
            "from (9) is after to (3)",
        ),
        (
            "wall",
            "/v1/ns/team/history?from=soon",
            400,
            "BAD_REQUEST",
            "whole number",
        ),
        (
            "wall",
            "/v1/ns/team/history?from=-1",
            400,
            "BAD_REQUEST",
            "whole number",
        ),
        (
            "wall",
            "/v1/ns/team/history?since=3",
            400,
            "BAD_REQUEST",
            "unknown query parameter",
        ),
        (
            "wall",
            "/v1/ns/team/history?from=1&from=2",
            400,
            "BAD_REQUEST",
            "twice",
        ),
        (
            "wall",
            "/v1/ns/nobody-here/history",
            404,
            "UNKNOWN_NAMESPACE",
            "nobody-here",
        ),
        (
            "wall",
            "/v1/ns/a%00b/history",
            400,
            "INVALID_NAMESPACE",
            "printable",
        ),
        (
            "wall",
            "/v1/state/hash?index=99999",
            404,
            "UNKNOWN_INDEX",
            "not in the log yet",
        ),
        (
            "wall",
            "/v1/state/hash?index=x",
            400,
            "BAD_REQUEST",
            "whole number",
        ),
        (
            "wall",
            "/v1/ns/a%00b/overview",
            400,
            "INVALID_NAMESPACE",
            "printable",
        ),
    ];
    for (token, path, status, name, words) in cases {
        let (got, v) = as_(token, path);
        assert_eq!(got, *status, "{path} as {token}: {v}");
        assert_eq!(v["error"]["name"], *name, "{path} as {token}: {v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(words),
            "{path}: {v}"
        );
    }
    // An observer of one namespace still reads its overview; the state hash is of every
    // namespace's state, so it needs a token for every namespace (issue 22, item 4).
    assert_eq!(as_("team-screen", "/v1/ns/team/overview").0, 200);
    assert_eq!(as_("team-screen", "/v1/state/hash").0, 403);
}

#[test]
fn dashboard_serves_the_page_and_names_a_missing_wasm_package() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-pkg");
    let s = Server::start(&[
        "--memory",
        "--dashboard",
        "--dashboard-pkg",
        missing.to_str().unwrap(),
    ]);
    let port = s.port();
    let page = request(port, "GET", "/dashboard/", &[], b"").unwrap();
    assert_eq!(page.status, 200);
    assert!(page
        .header("content-type")
        .unwrap()
        .starts_with("text/html"));
    assert!(String::from_utf8_lossy(&page.raw).contains("main.js"));
    for file in ["main.js", "app.js", "remote.js", "sim.js", "waitfor.js"] {
        let a = request(port, "GET", &format!("/dashboard/{file}"), &[], b"").unwrap();
        assert_eq!(a.status, 200, "{file}");
        assert!(
            a.header("content-type")
                .unwrap()
                .starts_with("text/javascript"),
            "{file}"
        );
    }
    let root = request(port, "GET", "/", &[], b"").unwrap();
    assert!((300..400).contains(&root.status));
    assert_eq!(root.header("location"), Some("/dashboard/?live"));
    let wasm = request(port, "GET", "/dashboard/pkg/klock_wasm.js", &[], b"").unwrap();
    assert_eq!(wasm.status, 404);
    assert!(String::from_utf8_lossy(&wasm.raw).contains("bindings/wasm/build.sh"));
    let escape = request(port, "GET", "/dashboard/pkg/..%2Fsecret", &[], b"").unwrap();
    assert_eq!(escape.status, 404);
    // The API is unchanged beside it.
    assert_eq!(
        request(port, "GET", "/v1/health", &[], b"").unwrap().status,
        200
    );
    assert_eq!(
        request(port, "GET", "/nothing", &[], b"").unwrap().status,
        404
    );
}

#[test]
fn only_an_allowed_origin_may_read_the_server_from_a_browser() {
    let s = Server::start(&["--memory", "--allow-origin", "http://127.0.0.1:8080"]);
    let port = s.port();
    let preflight = request(
        port,
        "OPTIONS",
        "/v1/ns/team/watch",
        &[
            ("origin", "http://127.0.0.1:8080"),
            ("access-control-request-method", "GET"),
            (
                "access-control-request-headers",
                "authorization, last-event-id",
            ),
        ],
        b"",
    )
    .unwrap();
    assert_eq!(preflight.status, 204);
    assert_eq!(
        preflight.header("access-control-allow-origin"),
        Some("http://127.0.0.1:8080")
    );
    assert!(preflight
        .header("access-control-allow-headers")
        .unwrap()
        .contains("last-event-id"));
    let allowed = request(
        port,
        "GET",
        "/v1/ns/team/overview",
        &[("origin", "http://127.0.0.1:8080")],
        b"",
    )
    .unwrap();
    assert_eq!(allowed.status, 200);
    assert_eq!(
        allowed.header("access-control-allow-origin"),
        Some("http://127.0.0.1:8080")
    );
    let other = request(
        port,
        "GET",
        "/v1/ns/team/overview",
        &[("origin", "http://evil.test")],
        b"",
    )
    .unwrap();
    assert_eq!(other.status, 200);
    assert_eq!(other.header("access-control-allow-origin"), None);
    // Without --allow-origin, no origin is granted.
    let plain = Server::start(&["--memory"]);
    let none = request(
        plain.port(),
        "GET",
        "/v1/health",
        &[("origin", "http://127.0.0.1:8080")],
        b"",
    )
    .unwrap();
    assert_eq!(none.header("access-control-allow-origin"), None);
}
