//! The tests of the HTTP API (server/tests/http.rs) that need the `klock` process itself: a
//! SIGKILL followed by a restart from the data file, a Unix socket, and what `klock serve`
//! refuses to start with (exit status and message).

use serde_json::json;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};

mod support;

use support::{klock, on, open, Server};

#[test]
fn a_killed_server_restarts_from_its_file_with_every_lease_and_token() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("klock.redb");
    let data = data.to_str().unwrap();
    let s = Server::spawn(klock(), &["--data", data]);
    let a = open(&s, "default", "ann");
    let (_, v) = on(
        &s,
        &a,
        "POST",
        "acquire",
        json!({"intents": ["MUTATES FILE:/x"], "ttl_ms": 60000}),
    );
    let lease = v["leases"][0].clone();
    s.kill();
    let s = Server::spawn(klock(), &["--data", data]);
    let (status, v) = on(
        &s,
        &a,
        "POST",
        "reconcile",
        json!({"lease_ids": [lease["lease_id"]]}),
    );
    assert_eq!(status, 200, "the token survives the restart: {v}");
    assert_eq!(v["statuses"][0]["status"], "ACTIVE", "{v}");
    assert!(v["statuses"][0]["expires_at"].as_u64() >= lease["expires_at"].as_u64());
    // Fences continue: the next grant's fence is larger.
    let b = open(&s, "default", "bob");
    let (_, v) = on(
        &s,
        &b,
        "POST",
        "acquire",
        json!({"intents": ["MUTATES FILE:/y"]}),
    );
    assert!(
        v["leases"][0]["fence"].as_u64() > lease["fence"].as_u64(),
        "{v}"
    );
    // The lease is still held against others.
    let (_, v) = on(
        &s,
        &b,
        "POST",
        "acquire",
        json!({"intents": ["MUTATES FILE:/x"], "wait": false}),
    );
    assert_eq!(v["verdict"], "DIE", "{v}");
}

#[test]
fn a_bad_token_file_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (json!({"tokens": []}), "lists no token"),
        (
            json!({"tokens": [{"name": "a", "sha256": "abc", "role": "agent", "namespaces": ["*"]}]}),
            "64 hex digits",
        ),
        (
            json!({"tokens": [{"name": "a", "sha256": "0".repeat(64), "role": "boss", "namespaces": ["*"]}]}),
            "unknown variant",
        ),
        (
            json!({"tokens": [{"name": "a", "sha256": "0".repeat(64), "role": "agent", "namespaces": []}]}),
            "namespaces is empty",
        ),
        (
            json!({"tokens": [{"name": "a", "sha256": "0".repeat(64), "role": "agent", "namespaces": ["*"], "color": 1}]}),
            "unknown field",
        ),
    ];
    for (i, (file, expected)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("t{i}.json"));
        std::fs::write(&path, file.to_string()).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_klock"))
            .args([
                "serve",
                "--memory",
                "--listen",
                "127.0.0.1:0",
                "--tokens",
                path.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(expected),
            "{file}: {err}"
        );
    }
}

#[test]
fn https_with_a_certificate_and_refusals_beyond_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let (certified, cert, key) = support::self_signed(dir.path());
    let s = Server::start(&[
        "--memory",
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]);
    // A TLS client that trusts this certificate gets an answer.
    let config = support::trusting(&certified);
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(config, name).unwrap();
    let tcp = TcpStream::connect(("127.0.0.1", s.port())).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let head = format!(
        "GET /v1/health HTTP/1.1\r\nhost: localhost:{}\r\nconnection: close\r\n\r\n",
        s.port()
    );
    tls.write_all(head.as_bytes()).unwrap();
    let mut answer = String::new();
    let _ = tls.read_to_string(&mut answer);
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.contains("\"ok\""),
        "{answer}"
    );
    // Plain HTTP to the TLS port gets no HTTP answer.
    let raw = s.raw("GET", "/v1/health", &[], b"");
    assert!(!String::from_utf8_lossy(&raw).starts_with("HTTP/1.1 200"));
    // Beyond loopback: tokens are required, and TLS unless --insecure.
    let refuse = |args: &[&str], expected: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_klock"))
            .arg("serve")
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(expected),
            "{args:?}: {err}"
        );
    };
    refuse(&["--memory", "--listen", "0.0.0.0:0"], "without --tokens");
    let tokens = dir.path().join("tokens.json");
    let file = json!({"tokens": [{"name": "a", "sha256": "0".repeat(64), "role": "admin", "namespaces": ["*"]}]});
    std::fs::write(&tokens, file.to_string()).unwrap();
    refuse(
        &[
            "--memory",
            "--listen",
            "0.0.0.0:0",
            "--tokens",
            tokens.to_str().unwrap(),
        ],
        "without TLS",
    );
    refuse(
        &["--memory", "--tls-cert", cert.to_str().unwrap()],
        "go together",
    );
}

#[test]
fn a_unix_socket_serves_the_same_api() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("klock.sock");
    let mut child = Command::new(env!("CARGO_BIN_EXE_klock"))
        .args(["serve", "--memory", "--socket", socket.to_str().unwrap()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("unix:"), "{line}");
    let mut conn = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    let body = r#"{"agent_id": "local"}"#;
    let req = format!(
        "POST /v1/ns/default/sessions HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(req.as_bytes()).unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.contains("session_token"),
        "{answer}"
    );
}

#[test]
fn the_kernel_settings_come_from_config_flags_and_stay_with_the_data_file() {
    // wound_wait: the older session's request wounds the younger holder and is granted, where
    // the default wait_die would make it wait; the TTL default is the one given.
    let s = Server::start(&[
        "--memory",
        "--config",
        "policy=wound_wait",
        "--config",
        "default_ttl_ms=5000",
    ]);
    let older = open(&s, "default", "older");
    let younger = open(&s, "default", "younger");
    let intent = json!({"intents": ["MUTATES FILE:/x"]});
    let (status, v) = on(&s, &younger, "POST", "acquire", intent.clone());
    assert_eq!(
        (status, v["verdict"].as_str()),
        (200, Some("GRANTED")),
        "{v}"
    );
    assert_eq!(v["leases"][0]["ttl_ms"], 5000, "{v}");
    let (status, v) = on(&s, &older, "POST", "acquire", intent);
    assert_eq!(
        (status, v["verdict"].as_str()),
        (200, Some("GRANTED")),
        "{v}"
    );
    drop(s);

    let refused = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_klock"))
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?} was not refused");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = refused(&["--memory", "--config", "default_tll_ms=5"]);
    assert!(
        err.contains("\"default_tll_ms\"") && err.contains("default_ttl_ms"),
        "{err}"
    );
    let err = refused(&["--memory", "--config", "policy=fifo"]);
    assert!(err.contains("fifo") && err.contains("wound_wait"), "{err}");
    let err = refused(&["--memory", "--config", "max_ttl_ms=0"]);
    assert!(err.contains("max_ttl_ms must be at least 1 ms"), "{err}");
    let err = refused(&["--memory", "--config", "seed=-1"]);
    assert!(err.contains("whole number"), "{err}");

    // A data file keeps the settings it was created with: another setting is refused, never a
    // silent switch; the same one starts.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("k.redb");
    let data = data.to_str().unwrap();
    drop(Server::start(&["--data", data, "--config", "policy=lanes"]));
    let out = Command::new(env!("CARGO_BIN_EXE_klock"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data", data])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("CONFIG_MISMATCH")
            && err.contains("policy: the data file has \"lanes\", the flags ask for \"wait_die\""),
        "{err}"
    );
    drop(Server::start(&["--data", data, "--config", "policy=lanes"]));
}
