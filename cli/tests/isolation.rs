//! The tests of tenant isolation (server/tests/isolation.rs) that need the `klock` process
//! itself: `klock exec` and `klock reconcile` keep the resume secret in a private file, and
//! remembered answers stay within their byte budget (the server process's RSS).

use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod support;

use support::{klock, metric, on, open, Server};

/// Item 1: `klock exec --digest FILE` saves what a resume needs (the digest and its resume
/// secret) in a file only its owner reads, and a rerun resumes from it; `klock reconcile`
/// resumes from it too and saves the next secret the same way.
#[test]
fn exec_saves_the_resume_secret_in_a_private_file() {
    let s = Server::start(&["--memory"]);
    let holder = open(&s, "default", "holder");
    let (status, _) = on(
        &s,
        &holder,
        "POST",
        "acquire",
        json!({"intents": ["MUTATES FILE:/x"]}),
    );
    assert_eq!(status, 200);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("job.json");
    let url = format!("http://127.0.0.1:{}", s.port());
    let klock = |args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_klock"));
        for name in ["KLOCK_SERVER", "KLOCK_SOCKET", "KLOCK_TOKEN", "KLOCK_NS"] {
            c.env_remove(name);
        }
        c.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
        c.output().unwrap()
    };
    let file_arg = file.to_str().unwrap();
    let exec_args = [
        "exec",
        "-v",
        "--server",
        &url,
        "--agent",
        "job",
        "--wait",
        "0",
        "--digest",
        file_arg,
        "--intent",
        "MUTATES FILE:/x",
        "--",
        "true",
    ];
    let out = klock(&exec_args);
    assert_eq!(
        out.status.code(),
        Some(75),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&file), 0o600, "the digest file is the owner's only");
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let first_secret = saved["resume_secret"].as_str().unwrap().to_owned();
    assert!(saved["identity"]["session_id"].is_u64(), "{saved}");
    // Reconcile resumes with it and saves the next secret.
    let out = klock(&["reconcile", "--server", &url, "--digest", file_arg]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(mode(&file), 0o600);
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_ne!(saved["resume_secret"].as_str().unwrap(), first_secret);
    // Once the holder is gone, the rerun resumes the saved session and finishes.
    let (status, _) = s.call(
        "DELETE",
        &format!("/v1/ns/default/sessions/{}", holder.id),
        &[("klock-session-token", &holder.token)],
        "",
    );
    assert_eq!(status, 200);
    let out = klock(&exec_args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("resumed"), "{err}");
}

/// The server's resident memory in KiB (`VmRSS` of /proc/PID/status).
fn rss_kib(s: &Server) -> u64 {
    let status =
        std::fs::read_to_string(format!("/proc/{}/status", s.pid().expect("a process"))).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Item 10: remembered idempotency answers stay within their byte budget: large keyed answers
/// (250-intent grants) past it drop the oldest, whose retry is 409 and never applied twice;
/// the gauge and the server's memory stay bounded while the loop runs.
#[test]
fn remembered_answers_stay_within_their_byte_budget() {
    let budget = 1 << 20;
    let s = Server::spawn(
        klock(),
        &["--memory", "--idempotency-bytes", &budget.to_string()],
    );
    let a = open(&s, "default", "ann");
    let path = format!("/v1/ns/default/sessions/{}/acquire", a.id);
    let intents: Vec<String> = (0..250)
        .map(|i| format!("MUTATES FILE:/a-rather-long-directory-name/for-a-large-answer/{i}"))
        .collect();
    let body = json!({ "intents": intents }).to_string();
    let started = rss_kib(&s);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut peak = started;
    for i in 0..200 {
        let key = format!("big-{i}");
        let (status, v) = s.call(
            "POST",
            &path,
            &[("klock-session-token", &a.token), ("idempotency-key", &key)],
            &body,
        );
        assert_eq!(status, 200, "{v}");
        let (status, _) = on(&s, &a, "POST", "release", json!({"all": true}));
        assert_eq!(status, 200);
        peak = peak.max(rss_kib(&s));
        if Instant::now() > deadline || peak > started + 200 * 1024 {
            break;
        }
    }
    let kept = metric(s.port(), "klock_idempotency_answer_bytes").expect("the gauge") as u64;
    assert!(
        kept <= budget,
        "{kept} bytes remembered over a budget of {budget}"
    );
    assert!(kept > 0);
    assert!(
        peak < started + 64 * 1024,
        "the server grew from {started} KiB to {peak} KiB"
    );
    // The oldest answer was dropped: its retry is refused, and acquires nothing.
    let (status, v) = s.call(
        "POST",
        &path,
        &[
            ("klock-session-token", &a.token),
            ("idempotency-key", "big-0"),
        ],
        &body,
    );
    assert_eq!(
        (status, v["error"]["name"].as_str()),
        (409, Some("IDEMPOTENCY_ANSWER_FORGOTTEN")),
        "{v}"
    );
    let (_, stats) = s.get("/v1/ns/default/stats");
    assert_eq!(stats["active_leases"], 0, "{stats}");
}
