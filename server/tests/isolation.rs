//! Tenant isolation (issue 22, items 1-4, 6, 7 and the session and answer bounds of 10),
//! against servers in this process on free loopback ports: no caller acts as another's
//! session, reads another namespace, moves the clock, or grows the server without bound
//! (`klock exec`'s saved secret and the memory bound of remembered answers:
//! cli/tests/isolation.rs).

use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

mod support;

use support::{metric, on, open, sha256_of, Agent, Server};

/// The digest anyone can build from `/overview`: agent, session and priority are public, and
/// epoch 0 is never newer than the kernel's.
fn forged_digest(s: &Server, ns: &str, session: u64) -> Value {
    let (status, o) = s.get(&format!("/v1/ns/{ns}/overview"));
    assert_eq!(status, 200, "{o}");
    let view = o["snapshot"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["session_id"] == session)
        .expect("the session is in the overview")
        .clone();
    json!({
        "version": 1,
        "identity": {
            "agent_id": view["agent_id"],
            "namespace": ns,
            "session_id": session,
            "priority_timestamp": view["priority"],
            "epoch": 0,
        },
        "recovery": {"last_phase": "HOLDING", "pending_intents": []},
    })
}

fn resume(s: &Server, ns: &str, body: Value) -> (u16, Value) {
    s.call(
        "POST",
        &format!("/v1/ns/{ns}/sessions/resume"),
        &[],
        &body.to_string(),
    )
}

/// Item 1: a digest built from public data does not resume another agent's session, with no
/// secret or a wrong one; the victim keeps its lease and its token. The holder's secret
/// resumes it, once: each resume hands out a new secret and the old one stops working.
#[test]
fn a_forged_digest_cannot_take_a_session_over() {
    let s = Server::start(&["--memory"]);
    let victim = open(&s, "default", "victim");
    let secret = victim.secret.clone();
    let (status, v) = on(
        &s,
        &victim,
        "POST",
        "acquire",
        json!({"intents": ["MUTATES FILE:/x"]}),
    );
    assert_eq!(
        (status, v["verdict"].as_str()),
        (200, Some("GRANTED")),
        "{v}"
    );
    let lease = v["leases"][0]["lease_id"].as_u64().unwrap();
    let digest = forged_digest(&s, "default", victim.id);
    for body in [
        json!({ "digest": digest }),
        json!({ "digest": digest, "resume_secret": "0".repeat(64) }),
        json!({ "digest": digest, "resume_secret": "" }),
    ] {
        let (status, v) = resume(&s, "default", body);
        assert_eq!(
            (status, v["error"]["name"].as_str()),
            (401, Some("RESUME_SECRET_REFUSED")),
            "{v}"
        );
    }
    // The victim is untouched: its token works and its lease is held.
    let (status, v) = on(&s, &victim, "POST", "heartbeat", json!({}));
    assert_eq!(status, 200, "the victim's token still works: {v}");
    let (_, state) = s.get("/v1/ns/default/resources/state?resource=FILE:/x");
    assert_eq!(state["holders"][0]["lease_id"], lease, "{state}");
    // The holder's own secret resumes it, and replaces it.
    let (status, v) = resume(
        &s,
        "default",
        json!({ "digest": digest, "resume_secret": secret }),
    );
    assert_eq!(status, 200, "{v}");
    let next = v["resume_secret"].as_str().unwrap().to_owned();
    assert_ne!(next, secret);
    let (status, _) = resume(
        &s,
        "default",
        json!({ "digest": digest, "resume_secret": secret }),
    );
    assert_eq!(status, 401, "a used resume secret stops working");
    let (status, v) = resume(
        &s,
        "default",
        json!({ "digest": digest, "resume_secret": next }),
    );
    assert_eq!(status, 200, "{v}");
}

/// Item 1: the resume secret is kept (as a hash) through a snapshot and a restart from the
/// data file: the holder resumes after it, a forger still cannot.
#[test]
fn the_resume_secret_survives_a_snapshot_and_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("k.redb");
    let args = ["--data", data.to_str().unwrap(), "--snapshot-every", "2"];
    let s = Server::start(&args);
    let victim = open(&s, "default", "victim");
    let secret = victim.secret.clone();
    for _ in 0..3 {
        let (status, _) = on(&s, &victim, "POST", "heartbeat", json!({}));
        assert_eq!(status, 200);
    }
    let digest = forged_digest(&s, "default", victim.id);
    s.kill();
    let mut log = data.as_os_str().to_owned();
    log.push(".log");
    for file in [data.clone(), log.into()] {
        let text = std::fs::read(&file).unwrap();
        assert!(
            secret.is_empty() || !text.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "{} holds the resume secret in clear",
            file.display()
        );
    }
    let s = Server::start(&args);
    let (status, _) = resume(&s, "default", json!({ "digest": digest }));
    assert_eq!(status, 401);
    let (status, v) = resume(
        &s,
        "default",
        json!({ "digest": digest, "resume_secret": secret }),
    );
    assert_eq!(status, 200, "{v}");
}

fn token_file(dir: &Path, tokens: Value) -> String {
    let file = dir.join("tokens.json");
    std::fs::write(&file, json!({ "tokens": tokens }).to_string()).unwrap();
    file.to_str().unwrap().to_owned()
}

/// Item 2: an idempotency key is scoped to who asks: another bearer token replaying an open
/// key gets a session of its own, not the victim's (whose token keeps working).
#[test]
fn another_token_replaying_an_open_key_does_not_get_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = token_file(
        dir.path(),
        json!([
            {"name": "alice", "sha256": sha256_of("alice-secret"), "role": "agent", "namespaces": ["team"]},
            {"name": "mallory", "sha256": sha256_of("mallory-secret"), "role": "agent", "namespaces": ["team"]},
        ]),
    );
    let s = Server::start(&["--memory", "--tokens", &tokens]);
    let body = r#"{"agent_id": "worker"}"#;
    let open_as = |secret: &str| {
        let auth = format!("Bearer {secret}");
        s.call(
            "POST",
            "/v1/ns/team/sessions",
            &[("authorization", &auth), ("idempotency-key", "open-1")],
            body,
        )
    };
    let (status, alice) = open_as("alice-secret");
    assert_eq!(status, 200, "{alice}");
    let (status, mallory) = open_as("mallory-secret");
    assert_eq!(status, 200, "{mallory}");
    assert_ne!(mallory["session_id"], alice["session_id"], "{mallory}");
    // Alice's own retry answers her session, and her token still works after all this.
    let (_, again) = open_as("alice-secret");
    assert_eq!(again["session_id"], alice["session_id"]);
    let token = again["session_token"].as_str().unwrap();
    let (status, v) = s.call(
        "POST",
        &format!("/v1/ns/team/sessions/{}/heartbeat", alice["session_id"]),
        &[
            ("authorization", "Bearer alice-secret"),
            ("klock-session-token", token),
        ],
        "{}",
    );
    assert_eq!(status, 200, "{v}");
}

/// Item 2: a batch key is scoped to each operation's session: one session's batch with
/// another's key never gets the other's lease and fence.
#[test]
fn a_batch_key_never_answers_one_session_with_anothers_lease() {
    let s = Server::start(&["--memory"]);
    let (a, b) = (open(&s, "default", "a"), open(&s, "default", "b"));
    let batch = |agent: &Agent| {
        let body = json!({"operations": [
            {"op": "acquire", "session": agent.id, "token": agent.token, "intents": ["MUTATES FILE:/x"], "wait": false},
        ]});
        s.call(
            "POST",
            "/v1/ns/default/batch",
            &[("idempotency-key", "batch-1")],
            &body.to_string(),
        )
    };
    let (status, first) = batch(&a);
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["results"][0]["ok"]["verdict"], "GRANTED", "{first}");
    let (status, second) = batch(&b);
    assert_eq!(status, 200, "{second}");
    let answer = &second["results"][0]["ok"];
    assert_ne!(
        answer["verdict"], "GRANTED",
        "b never gets a's lease: {second}"
    );
    assert!(
        answer.get("leases").is_none(),
        "no lease nor fence of a's: {second}"
    );
}

/// Item 2: resource-state keys do not cross namespaces.
#[test]
fn a_resource_state_key_does_not_cross_namespaces() {
    let s = Server::start(&["--memory"]);
    let a = open(&s, "a", "ann");
    let (status, _) = on(
        &s,
        &a,
        "POST",
        "acquire",
        json!({"intents": ["MUTATES FILE:/x"]}),
    );
    assert_eq!(status, 200);
    let read = |ns: &str| {
        s.call(
            "GET",
            &format!("/v1/ns/{ns}/resources/state?resource=FILE:/x"),
            &[("idempotency-key", "state-1")],
            "",
        )
    };
    let (_, in_a) = read("a");
    assert_eq!(in_a["holders"].as_array().unwrap().len(), 1, "{in_a}");
    let (status, in_b) = read("b");
    assert_eq!(status, 200, "{in_b}");
    assert_eq!(in_b["namespace"], "b", "{in_b}");
    assert!(in_b["holders"].as_array().unwrap().is_empty(), "{in_b}");
}

/// Item 2: the same key with another request is 422 IDEMPOTENCY_KEY_REUSED (Stripe's rule),
/// and changes nothing; with the same request it answers the first answer.
#[test]
fn a_key_reused_with_another_body_is_422() {
    let s = Server::start(&["--memory"]);
    let a = open(&s, "default", "ann");
    let path = format!("/v1/ns/default/sessions/{}/acquire", a.id);
    let headers = [
        ("klock-session-token", a.token.as_str()),
        ("idempotency-key", "k-1"),
    ];
    let first_body = json!({"intents": ["MUTATES FILE:/x"]}).to_string();
    let (status, first) = s.call("POST", &path, &headers, &first_body);
    assert_eq!(status, 200, "{first}");
    let other = json!({"intents": ["MUTATES FILE:/y"]}).to_string();
    let (status, v) = s.call("POST", &path, &headers, &other);
    assert_eq!(
        (status, v["error"]["name"].as_str()),
        (422, Some("IDEMPOTENCY_KEY_REUSED")),
        "{v}"
    );
    let (_, state) = s.get("/v1/ns/default/resources/state?resource=FILE:/y");
    assert!(state["holders"].as_array().unwrap().is_empty(), "{state}");
    let (status, again) = s.call("POST", &path, &headers, &first_body);
    assert_eq!((status, &again), (200, &first));
}

/// Item 3: a namespace that cannot be percent-decoded is 400, never unchecked.
#[test]
fn an_undecodable_namespace_is_400_never_unchecked() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = token_file(
        dir.path(),
        json!([{"name": "bot", "sha256": sha256_of("bot-secret"), "role": "agent", "namespaces": ["a"]}]),
    );
    let s = Server::start(&["--memory", "--tokens", &tokens]);
    let bot = [("authorization", "Bearer bot-secret")];
    for path in [
        "/v1/ns/b%zz/sessions",
        "/v1/ns/b%4/sessions",
        "/v1/ns/b%/sessions",
        "/v1/ns/%ff/sessions",
    ] {
        let (status, v) = s.call("POST", path, &bot, r#"{"agent_id": "x"}"#);
        assert_eq!(
            (status, v["error"]["name"].as_str()),
            (400, Some("BAD_REQUEST")),
            "{path}: {v}"
        );
    }
    let (status, v) = s.call("GET", "/v1/ns/b%zz/stats", &bot, "");
    assert_eq!(status, 400, "{v}");
    // Encoded names of its own namespace still work.
    let (status, v) = s.call("POST", "/v1/ns/%61/sessions", &bot, r#"{"agent_id": "x"}"#);
    assert_eq!(status, 200, "{v}");
}

/// Item 4: a token of one namespace sees that namespace only in `/stats` and `/overview`, and
/// the routes with server-wide values need a token covering every namespace.
#[test]
fn an_observer_of_one_namespace_sees_nothing_of_another() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = token_file(
        dir.path(),
        json!([
            {"name": "bot", "sha256": sha256_of("bot-secret"), "role": "agent", "namespaces": ["*"]},
            {"name": "a-eye", "sha256": sha256_of("a-secret"), "role": "observer", "namespaces": ["a"]},
            {"name": "all-eye", "sha256": sha256_of("all-secret"), "role": "observer", "namespaces": ["*"]},
        ]),
    );
    let s = Server::start(&["--memory", "--tokens", &tokens]);
    let bot = [("authorization", "Bearer bot-secret")];
    let mut in_b = Vec::new();
    for agent in ["secret-agent-1", "secret-agent-2"] {
        let (status, v) = s.call(
            "POST",
            "/v1/ns/b/sessions",
            &bot,
            &json!({ "agent_id": agent }).to_string(),
        );
        assert_eq!(status, 200, "{v}");
        in_b.push((
            v["session_id"].as_u64().unwrap(),
            v["session_token"].as_str().unwrap().to_owned(),
        ));
    }
    for (id, token) in &in_b {
        let (status, v) = s.call(
            "POST",
            &format!("/v1/ns/b/sessions/{id}/acquire"),
            &[bot[0], ("klock-session-token", token)],
            &json!({"intents": ["MUTATES FILE:/b-secret-plan"], "ttl_ms": 60_000}).to_string(),
        );
        assert_eq!(status, 200, "{v}");
    }
    let a_eye = [("authorization", "Bearer a-secret")];
    let (status, stats) = s.call("GET", "/v1/ns/a/stats", &a_eye, "");
    assert_eq!(status, 200, "{stats}");
    let text = stats.to_string();
    assert!(
        !text.contains("b-secret-plan") && !text.contains("secret-agent"),
        "{text}"
    );
    assert_eq!(stats["active_sessions"], 0, "{stats}");
    assert_eq!(stats["active_leases"], 0, "{stats}");
    assert_eq!(stats["counters"]["granted"], 0, "{stats}");
    assert_eq!(stats["counters"]["sessions_opened"], 0, "{stats}");
    let (status, o) = s.call("GET", "/v1/ns/a/overview", &a_eye, "");
    assert_eq!(status, 200, "{o}");
    let text = o.to_string();
    assert!(
        !text.contains("b-secret-plan") && !text.contains("secret-agent"),
        "{text}"
    );
    assert_eq!(o["snapshot"]["stats"]["counters"]["granted"], 0, "{o}");
    assert!(
        o["snapshot"]["next_deadline"].is_null(),
        "b's deadline: {o}"
    );
    for path in ["/metrics", "/v1/deadline", "/v1/state/hash"] {
        let answer =
            klock_testkit::http_client::request(s.port(), "GET", path, &a_eye, b"").unwrap();
        assert_eq!(answer.status, 403, "{path}: {answer:?}");
        let all = [("authorization", "Bearer all-secret")];
        let answer = klock_testkit::http_client::request(s.port(), "GET", path, &all, b"").unwrap();
        assert_eq!(answer.status, 200, "{path}: {answer:?}");
    }
    // A token for every namespace still sees b's own stats in full.
    let all = [("authorization", "Bearer all-secret")];
    let (_, stats) = s.call("GET", "/v1/ns/b/stats", &all, "");
    assert_eq!(stats["active_leases"], 1, "{stats}");
    assert_eq!(stats["counters"]["sessions_opened"], 2, "{stats}");
    // A lease of b's that expires makes its agent a ghost: seen by the token for every
    // namespace, never by a's observer.
    let (id, token) = &in_b[0];
    let (status, v) = s.call(
        "POST",
        &format!("/v1/ns/b/sessions/{id}/acquire"),
        &[bot[0], ("klock-session-token", token)],
        &json!({"intents": ["MUTATES FILE:/b-short"], "ttl_ms": 30}).to_string(),
    );
    assert_eq!(status, 200, "{v}");
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, stats) = s.call("GET", "/v1/ns/b/stats", &all, "");
        if !stats["ghost_agents"].as_array().unwrap().is_empty() {
            break;
        }
        assert!(Instant::now() < until, "no ghost agent in b: {stats}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (_, stats) = s.call("GET", "/v1/ns/a/stats", &a_eye, "");
    assert!(
        stats["ghost_agents"].as_array().unwrap().is_empty(),
        "{stats}"
    );
    let (_, o) = s.call("GET", "/v1/ns/a/overview", &a_eye, "");
    assert!(!o.to_string().contains("secret-agent"), "{o}");
}

/// Item 6: with tokens, only an admin token may move the manual clock with `Klock-Now`.
#[test]
fn only_an_admin_token_moves_the_manual_clock() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = token_file(
        dir.path(),
        json!([
            {"name": "eye", "sha256": sha256_of("eye-secret"), "role": "observer", "namespaces": ["other"]},
            {"name": "bot", "sha256": sha256_of("bot-secret"), "role": "agent", "namespaces": ["*"]},
            {"name": "root", "sha256": sha256_of("root-secret"), "role": "admin", "namespaces": ["*"]},
        ]),
    );
    let s = Server::start(&["--memory", "--clock", "manual", "--tokens", &tokens]);
    for who in ["Bearer eye-secret", "Bearer bot-secret"] {
        let (status, v) = s.call(
            "GET",
            "/v1/ns/other/resources/state?resource=FILE:/x",
            &[("authorization", who), ("klock-now", "999999")],
            "",
        );
        assert_eq!(
            (status, v["error"]["name"].as_str()),
            (403, Some("FORBIDDEN")),
            "{who}: {v}"
        );
    }
    // The clock did not move: the admin's open at 10 is answered at 10.
    let (status, v) = s.call(
        "POST",
        "/v1/ns/other/sessions",
        &[("authorization", "Bearer root-secret"), ("klock-now", "10")],
        r#"{"agent_id": "a"}"#,
    );
    assert_eq!((status, &v["server_now"]), (200, &json!(10)), "{v}");
}

/// Item 7: the OpenAPI document and the dashboard need a token when a token file is given;
/// the dashboard serves only its package's own files; `bearer` is matched in any case.
#[test]
fn the_document_and_the_dashboard_need_a_token_and_bearer_is_case_insensitive() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = token_file(
        dir.path(),
        json!([{"name": "eye", "sha256": sha256_of("eye-secret"), "role": "observer", "namespaces": ["*"]}]),
    );
    let pkg = dir.path().join("pkg");
    std::fs::create_dir(&pkg).unwrap();
    std::fs::write(pkg.join("klock_wasm.js"), "export {};").unwrap();
    std::fs::write(pkg.join("notes.txt"), "private").unwrap();
    let s = Server::start(&[
        "--memory",
        "--tokens",
        &tokens,
        "--dashboard",
        "--dashboard-pkg",
        pkg.to_str().unwrap(),
    ]);
    let status = |path: &str, headers: &[(&str, &str)]| {
        let raw = s.raw("GET", path, headers, b"");
        let text = String::from_utf8_lossy(&raw);
        text.split(' ')
            .nth(1)
            .unwrap_or("")
            .parse::<u16>()
            .unwrap_or(0)
    };
    assert_eq!(status("/v1/openapi.json", &[]), 401);
    assert_eq!(
        status(
            "/v1/openapi.json",
            &[("authorization", "Bearer eye-secret")]
        ),
        200
    );
    for scheme in ["bearer", "BEARER", "BeArEr"] {
        let header = format!("{scheme} eye-secret");
        assert_eq!(
            status("/v1/ns/x/stats", &[("authorization", &header)]),
            200,
            "{scheme}"
        );
    }
    assert_eq!(status("/dashboard/", &[]), 401);
    let raw = String::from_utf8_lossy(&s.raw("GET", "/dashboard/", &[], b"")).to_lowercase();
    assert!(raw.contains("www-authenticate: basic"), "{raw}");
    // user:eye-secret in base64, as a browser sends it once asked.
    let basic = [("authorization", "Basic dXNlcjpleWUtc2VjcmV0")];
    assert_eq!(status("/dashboard/", &basic), 200);
    assert_eq!(status("/dashboard/pkg/klock_wasm.js", &basic), 200);
    assert_eq!(status("/dashboard/pkg/notes.txt", &basic), 404);
    assert_eq!(
        status(
            "/dashboard/",
            &[("authorization", "Basic dXNlcjp3cm9uZw==")]
        ),
        401
    );
}

/// Item 7: the data file and its log are created readable by their owner only.
#[test]
fn the_data_file_and_its_log_are_created_0600() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("k.redb");
    // Snapshots every 2 entries: the log is replaced by a new one (compaction) while serving.
    let args = ["--data", data.to_str().unwrap(), "--snapshot-every", "2"];
    let s = Server::start(&args);
    for agent in ["ann", "bob", "cy"] {
        open(&s, "default", agent);
    }
    s.kill();
    let mut log = data.as_os_str().to_owned();
    log.push(".log");
    let log = std::path::PathBuf::from(log);
    let mode =
        |file: &std::path::Path| std::fs::metadata(file).unwrap().permissions().mode() & 0o777;
    for file in [&data, &log] {
        assert_eq!(mode(file), 0o600, "{}", file.display());
    }
    // A mode the operator chose is kept when a compaction replaces the log.
    std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o640)).unwrap();
    let s = Server::start(&args);
    for agent in ["dee", "eve", "fay"] {
        open(&s, "default", agent);
    }
    s.kill();
    assert_eq!(mode(&log), 0o640, "{}", log.display());
}

/// Item 10: sessions are capped per namespace and per bearer token (429 TOO_MANY_SESSIONS,
/// counted); closing one makes room again.
#[test]
fn sessions_are_capped_per_namespace_and_per_token() {
    let s = Server::start(&["--memory", "--max-sessions-per-namespace", "2"]);
    let first = open(&s, "a", "one");
    open(&s, "a", "two");
    let (status, v) = s.call("POST", "/v1/ns/a/sessions", &[], r#"{"agent_id": "three"}"#);
    assert_eq!(
        (status, v["error"]["name"].as_str()),
        (429, Some("TOO_MANY_SESSIONS")),
        "{v}"
    );
    open(&s, "b", "elsewhere");
    let (status, _) = s.call(
        "DELETE",
        &format!("/v1/ns/a/sessions/{}", first.id),
        &[("klock-session-token", &first.token)],
        "",
    );
    assert_eq!(status, 200);
    open(&s, "a", "three");
    assert_eq!(metric(s.port(), "klock_sessions_refused_total"), Some(1.0));

    let dir = tempfile::tempdir().unwrap();
    let tokens = token_file(
        dir.path(),
        json!([
            {"name": "greedy", "sha256": sha256_of("greedy-secret"), "role": "agent", "namespaces": ["*"]},
            {"name": "other", "sha256": sha256_of("other-secret"), "role": "agent", "namespaces": ["*"]},
        ]),
    );
    let s = Server::start(&[
        "--memory",
        "--tokens",
        &tokens,
        "--max-sessions-per-token",
        "2",
    ]);
    let open_as = |who: &str, ns: &str| {
        let auth = format!("Bearer {who}");
        s.call(
            "POST",
            &format!("/v1/ns/{ns}/sessions"),
            &[("authorization", &auth)],
            r#"{"agent_id": "x"}"#,
        )
        .0
    };
    assert_eq!(open_as("greedy-secret", "a"), 200);
    assert_eq!(open_as("greedy-secret", "b"), 200);
    assert_eq!(open_as("greedy-secret", "c"), 429);
    assert_eq!(open_as("other-secret", "a"), 200);
}

/// Item 1, replay: a resume entry logged before resume secrets (no `caller.resume`) replays as
/// it was answered then; one the server logs now needs the bound secret's hash, and a session
/// with none bound (opened by an older server) cannot be resumed by a new request.
#[test]
fn logged_resumes_replay_as_answered_and_new_ones_need_the_secret() {
    use klock_core::{Command, Config, Output};
    use klock_server::machine::{Caller, Entry, Machine, Refused};
    let entry = |now, command, resume: Option<&str>, caller: Option<Caller>| Entry::Command {
        now,
        command,
        key: None,
        token: None,
        caller,
        resume: resume.map(str::to_owned),
        fingerprint: None,
    };
    let open = |agent: &str| Command::Open {
        agent_id: agent.into(),
        namespace: "default".into(),
    };
    let mut m = Machine::new(Config::default()).unwrap();
    // An old open (no resume hash) and a new one (hash "aa").
    m.apply(1, &entry(0, open("old"), None, None));
    m.apply(2, &entry(0, open("new"), Some("aa"), None));
    let digest = |m: &mut Machine, index, session| {
        let d = m.apply(index, &entry(1, Command::Digest { session }, None, None));
        match d.output {
            Ok(Output::Digest { digest }) => digest,
            other => panic!("{other:?}"),
        }
    };
    let caller = |resume: Option<&str>| Caller {
        namespace: "default".into(),
        resume: resume.map(str::to_owned),
        ..Caller::default()
    };
    let (s1, s2) = (klock_core::SessionId(1), klock_core::SessionId(2));
    let d1 = digest(&mut m, 3, s1);
    let d2 = digest(&mut m, 4, s2);
    let resume = |d: &klock_core::StateDigest| Command::Resume {
        digest: Box::new(d.clone()),
    };
    // Logged before resume secrets: applied as then.
    let old = m.apply(5, &entry(2, resume(&d1), Some("bb"), Some(caller(None))));
    assert!(
        matches!(old.output, Ok(Output::Session { .. })),
        "{:?}",
        old.output
    );
    // A new request for a session with no secret bound, or with the wrong one: refused.
    let mut d1 = d1;
    d1.identity.epoch = 1;
    m.apply(6, &entry(3, Command::Suspend { session: s1 }, None, None));
    let none_bound = m.apply(
        7,
        &entry(3, resume(&d2), Some("cc"), Some(caller(Some("zz")))),
    );
    assert!(
        matches!(none_bound.output, Err(Refused::ResumeSecret(_))),
        "{:?}",
        none_bound.output
    );
    let right = m.apply(
        8,
        &entry(3, resume(&d2), Some("dd"), Some(caller(Some("aa")))),
    );
    assert!(
        matches!(right.output, Ok(Output::Session { .. })),
        "{:?}",
        right.output
    );
    let reused = m.apply(
        9,
        &entry(3, resume(&d2), Some("ee"), Some(caller(Some("aa")))),
    );
    assert!(
        matches!(reused.output, Err(Refused::ResumeSecret(_))),
        "the secret was replaced: {:?}",
        reused.output
    );
    // The legacy-resumed session 1 got the hash its entry carried ("bb").
    let again = m.apply(
        10,
        &entry(4, resume(&d1), Some("ff"), Some(caller(Some("bb")))),
    );
    assert!(
        matches!(again.output, Ok(Output::Session { .. })),
        "{:?}",
        again.output
    );
}
