//! `klock exec` as a user runs it: real `klock exec` processes around real commands, against
//! a real `klock serve --memory` on a free loopback port. Each test bounds every wait and
//! kills what it started.

use klock_testkit::process::Spawned;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn klock() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_klock"))
}

/// Without the caller's KLOCK_* settings, which would change what the tools do.
fn hermetic(command: &mut Command) {
    for name in [
        "KLOCK_SERVER",
        "KLOCK_SOCKET",
        "KLOCK_TOKEN",
        "KLOCK_NS",
        "KLOCK_AGENT",
    ] {
        command.env_remove(name);
    }
}

fn server() -> Spawned {
    Spawned::start(klock(), &["--memory"]).expect("start klock serve")
}

/// `klock exec --server URL ARGS...`, output captured.
fn exec(server: &Spawned, args: &[&str]) -> Command {
    let mut command = Command::new(klock());
    hermetic(&mut command);
    command
        .arg("exec")
        .args(["--server", &format!("http://127.0.0.1:{}", server.port)])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Kills the process if the test ends (or panics) before it exits.
struct Running(Option<Child>);

impl Running {
    fn spawn(mut command: Command) -> Running {
        Running(Some(command.spawn().expect("spawn klock exec")))
    }

    fn pid(&self) -> i32 {
        self.0.as_ref().expect("running").id() as i32
    }

    /// Waits at most `limit` for the exit; the status code and the output.
    fn finish(mut self, limit: Duration) -> (i32, String, String) {
        let mut child = self.0.take().expect("running");
        let until = Instant::now() + limit;
        while child.try_wait().expect("try_wait").is_none() {
            if Instant::now() > until {
                let _ = child.kill();
                let _ = child.wait();
                panic!("klock exec did not end within {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let out: Output = child.wait_with_output().expect("output");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: kill(2) on a child this test spawned and has not reaped.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
}

fn temp() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

fn wait_for(path: &Path) {
    let until = Instant::now() + Duration::from_secs(10);
    while !path.exists() {
        assert!(Instant::now() < until, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Spawns `c` running `sh -c script` and returns once the script has touched `started` (its
/// first step: the command runs, its lease held).
fn run_script(mut c: Command, script: &str, started: &Path) -> Running {
    c.args(["--", "sh", "-c", script]);
    let run = Running::spawn(c);
    wait_for(started);
    run
}

/// Reruns agent `job` with `--digest digest`: it must resume `session` with its `priority`
/// (as its `-v` line says), succeed, and remove the digest, its work done.
fn rerun_resumes(server: &Spawned, digest: &Path, session: u64, priority: u64) {
    let mut c = exec(
        server,
        &["-v", "--agent", "job", "--digest", digest.to_str().unwrap()],
    );
    c.args([
        "--intent",
        "MUTATES FILE:/x",
        "--",
        "sh",
        "-c",
        "echo $KLOCK_SESSION",
    ]);
    let (code, out, err) = Running::spawn(c).finish(Duration::from_secs(10));
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), session.to_string());
    assert!(
        err.contains(&format!("priority {priority}, resumed")),
        "{err}"
    );
    assert!(!digest.exists(), "a finished run leaves no digest behind");
}

#[test]
fn two_runs_on_one_file_serialize() {
    let server = server();
    let dir = temp();
    let log = dir.path().join("log");
    let script = format!(
        "echo start $0 >> {0}; sleep 0.3; echo end $0 >> {0}",
        log.display()
    );
    let run = |agent: &str| {
        let mut c = exec(
            &server,
            &["--agent", agent, "--intent", "MUTATES FILE:/repo/a.rs"],
        );
        c.args(["--", "sh", "-c", &script, agent]);
        Running::spawn(c)
    };
    let (a, b) = (run("a"), run("b"));
    let (ca, _, ea) = a.finish(Duration::from_secs(20));
    let (cb, _, eb) = b.finish(Duration::from_secs(20));
    assert_eq!((ca, cb), (0, 0), "{ea}{eb}");
    let lines: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| l.split(' ').next().unwrap().to_owned())
        .collect();
    assert_eq!(
        lines,
        ["start", "end", "start", "end"],
        "the runs overlapped"
    );
}

#[test]
fn the_command_sees_its_leases_and_its_status_comes_back() {
    let server = server();
    let mut c = exec(
        &server,
        &[
            "--intent",
            "MUTATES FILE:/x",
            "--intent",
            "CONSUMES FILE:/y",
        ],
    );
    c.args([
        "--",
        "sh",
        "-c",
        "echo $KLOCK_SESSION; echo $KLOCK_FENCE; echo $KLOCK_LEASES; exit 3",
    ]);
    let (code, out, err) = Running::spawn(c).finish(Duration::from_secs(10));
    assert_eq!(code, 3, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    let leases: Value = serde_json::from_str(lines[2]).unwrap();
    let leases = leases.as_array().unwrap();
    assert_eq!(leases.len(), 2);
    assert_eq!(leases[0]["resource"], "FILE:/x");
    assert_eq!(leases[1]["predicate"], "CONSUMES");
    assert_eq!(lines[0], leases[0]["session_id"].to_string());
    let max_fence = leases
        .iter()
        .map(|l| l["fence"].as_u64().unwrap())
        .max()
        .unwrap();
    assert_eq!(lines[1], max_fence.to_string());
    // Released on the way out: another run gets the file at once.
    let c = exec(
        &server,
        &["--wait", "0", "--intent", "MUTATES FILE:/x", "--", "true"],
    );
    assert_eq!(Running::spawn(c).finish(Duration::from_secs(10)).0, 0);
}

#[test]
fn wait_expiry_exits_75_naming_the_holder() {
    let server = server();
    let dir = temp();
    let ready = dir.path().join("ready");
    let mut holder = exec(
        &server,
        &["--agent", "holder-bot", "--intent", "MUTATES FILE:/x"],
    );
    holder.args([
        "--",
        "sh",
        "-c",
        &format!("touch {}; sleep 5", ready.display()),
    ]);
    let holder = Running::spawn(holder);
    wait_for(&ready);
    let started = Instant::now();
    let c = exec(
        &server,
        &[
            "--agent",
            "late",
            "--wait",
            "400ms",
            "--intent",
            "MUTATES FILE:/x",
            "--",
            "true",
        ],
    );
    let (code, _, err) = Running::spawn(c).finish(Duration::from_secs(10));
    let took = started.elapsed();
    assert_eq!(code, 75, "{err}");
    assert!(
        err.contains("\"holder-bot\"") && err.contains("MUTATES FILE:/x"),
        "{err}"
    );
    // The younger run is refused (DIE) and sleeps the kernel's backoff while it fits in
    // --wait; once the next retry would land after --wait it gives up at once (the core's
    // rule, klock_core::client::Acquisition), rather than sleeping --wait out first. The
    // first backoff (100 ms and up, by default) fits in --wait, so it is slept.
    assert!(
        took >= Duration::from_millis(100) && took < Duration::from_secs(5),
        "{took:?}"
    );
    drop(holder);
}

#[test]
fn a_lost_lease_stops_the_command_and_a_rerun_keeps_the_priority() {
    let server = server();
    let dir = temp();
    let digest = dir.path().join("digest.json");
    let (started, stopped) = (dir.path().join("started"), dir.path().join("stopped"));
    let script = format!(
        "trap 'touch {}; exit 9' TERM; touch {}; sleep 20 & wait",
        stopped.display(),
        started.display()
    );
    let mut c = exec(
        &server,
        &[
            "-v",
            "--agent",
            "job",
            "--ttl",
            "600ms",
            "--kill-after",
            "2s",
        ],
    );
    c.args([
        "--digest",
        digest.to_str().unwrap(),
        "--intent",
        "MUTATES FILE:/x",
    ]);
    let run = run_script(c, &script, &started);
    // Freeze the wrapper past its TTL: no renewal reaches the server, so the lease is lost
    // however the wrapper learns it on waking (its local deadline, or the server's answer).
    signal(run.pid(), libc::SIGSTOP);
    std::thread::sleep(Duration::from_millis(900));
    signal(run.pid(), libc::SIGCONT);
    let (code, _, err) = run.finish(Duration::from_secs(10));
    assert_eq!(code, 107, "{err}");
    assert!(stopped.exists(), "the command was not sent SIGTERM: {err}");
    assert!(err.contains("lost MUTATES FILE:/x"), "{err}");
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&digest).unwrap()).unwrap();
    let priority = saved["identity"]["priority_timestamp"].as_u64().unwrap();
    let session = saved["identity"]["session_id"].as_u64().unwrap();

    // A younger session opens meanwhile; the rerun still comes back with the older priority.
    let c = exec(&server, &["--intent", "MUTATES FILE:/other", "--", "true"]);
    assert_eq!(Running::spawn(c).finish(Duration::from_secs(10)).0, 0);
    rerun_resumes(&server, &digest, session, priority);
}

#[test]
fn a_server_that_dies_mid_command_stops_it() {
    let server = server();
    let dir = temp();
    let started = dir.path().join("started");
    let c = exec(
        &server,
        &[
            "--ttl",
            "600ms",
            "--kill-after",
            "1s",
            "--intent",
            "MUTATES FILE:/x",
        ],
    );
    let run = run_script(
        c,
        &format!("touch {}; sleep 20", started.display()),
        &started,
    );
    let killed = Instant::now();
    server.kill();
    let (code, _, err) = run.finish(Duration::from_secs(10));
    assert_eq!(code, 107, "{err}");
    assert!(err.contains("no renewal reached the server"), "{err}");
    // Stopped within the TTL plus the SIGTERM (sh dies of it at once), not the 20 s sleep.
    assert!(
        killed.elapsed() < Duration::from_secs(3),
        "{:?}",
        killed.elapsed()
    );
}

#[test]
fn signals_reach_the_command() {
    let server = server();
    let dir = temp();
    let started = dir.path().join("started");
    let script = format!(
        "trap 'exit 42' TERM; touch {}; sleep 20 & wait",
        started.display()
    );
    let c = exec(&server, &["--intent", "MUTATES FILE:/x"]);
    let run = run_script(c, &script, &started);
    signal(run.pid(), libc::SIGTERM);
    let (code, _, err) = run.finish(Duration::from_secs(10));
    assert_eq!(code, 42, "{err}");
}

#[test]
fn the_server_down_at_start_says_so() {
    let port = {
        let server = server();
        server.port
    };
    let started = std::time::Instant::now();
    let c = Command::new(klock())
        .env_remove("KLOCK_TOKEN")
        .args(["exec", "--server", &format!("http://127.0.0.1:{port}")])
        .args(["--reconnect-timeout", "500ms"])
        .args(["--intent", "MUTATES FILE:/x", "--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&c.stderr);
    assert_eq!(c.status.code(), Some(69), "{err}");
    // Given up after its budget, not the default 30 s.
    assert!(started.elapsed() < Duration::from_secs(10), "{err}");
    assert!(
        err.contains("cannot reach the Klock server at http://127.0.0.1:"),
        "{err}"
    );
    assert!(
        err.contains("--server URL[,URL...] or --socket PATH"),
        "{err}"
    );
}

#[test]
fn bad_input_is_named_never_a_panic() {
    let server = server();
    let cases: [(&[&str], &str); 5] = [
        (
            &["--intent", "MUTATE FILE:/x", "--", "true"],
            "INVALID_PREDICATE",
        ),
        (&["--intent", "MUTATES x", "--", "true"], "INVALID_RESOURCE"),
        (
            &["--ttl", "soon", "--intent", "MUTATES FILE:/x", "--", "true"],
            "--ttl takes a duration",
        ),
        (&["--", "true"], "--intent"),
        (
            &["--intent", "MUTATES FILE:/x", "--", "/no/such/program"],
            "cannot run",
        ),
    ];
    for (args, says) in cases {
        let (code, _, err) = Running::spawn(exec(&server, args)).finish(Duration::from_secs(10));
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!([2, 127].contains(&code), "{args:?}: {code} {err}");
    }
    let dir = temp();
    let digest = dir.path().join("d.json");
    std::fs::write(&digest, "not json").unwrap();
    let args = [
        "--digest",
        digest.to_str().unwrap(),
        "--intent",
        "MUTATES FILE:/x",
        "--",
        "true",
    ];
    let (code, _, err) = Running::spawn(exec(&server, &args)).finish(Duration::from_secs(10));
    assert_eq!(code, 2);
    assert!(
        err.contains("is not a StateDigest") && err.contains("delete it"),
        "{err}"
    );
    let help = Command::new(klock())
        .args(["exec", "--help"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&help.stdout).contains("Examples:"));
}

#[test]
fn a_unix_socket_works_too() {
    let dir = temp();
    let socket: PathBuf = dir.path().join("klock.sock");
    let mut serve = Command::new(klock())
        .args(["serve", "--memory", "--socket", socket.to_str().unwrap()])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&socket);
    let out = Command::new(klock())
        .args([
            "exec",
            "--socket",
            socket.to_str().unwrap(),
            "--intent",
            "MUTATES FILE:/x",
        ])
        .args(["--", "sh", "-c", "echo $KLOCK_FENCE"])
        .env_remove("KLOCK_TOKEN")
        .output()
        .unwrap();
    let _ = serve.kill();
    let _ = serve.wait();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1");
}

#[test]
fn an_interrupted_wait_exits_130() {
    let server = server();
    let dir = temp();
    let ready = dir.path().join("ready");
    let mut holder = exec(
        &server,
        &["--agent", "holder", "--intent", "MUTATES FILE:/x"],
    );
    holder.args([
        "--",
        "sh",
        "-c",
        &format!("touch {}; sleep 5", ready.display()),
    ]);
    let holder = Running::spawn(holder);
    wait_for(&ready);
    let c = exec(
        &server,
        &["--wait", "20s", "--intent", "MUTATES FILE:/x", "--", "true"],
    );
    let waiter = Running::spawn(c);
    // The waiter is younger than the holder, so it is told to die and retry (Wait-Die): once
    // it was, it is in its acquisition, with its signal handlers in place (they are installed
    // before its first request). A fixed sleep raced a slow start under load.
    eventually("the waiter told to die and retry", || {
        let stats = stats_of_default(&server);
        stats["counters"]["died"].as_u64().unwrap() > 0
    });
    let interrupted = Instant::now();
    signal(waiter.pid(), libc::SIGINT);
    let (code, _, err) = waiter.finish(Duration::from_secs(10));
    assert_eq!(code, 130, "{err}");
    assert!(err.contains("interrupted by signal 2"), "{err}");
    assert!(interrupted.elapsed() < Duration::from_secs(2));
    drop(holder);
}

#[test]
fn a_bearer_token_comes_from_the_flag_or_the_environment() {
    let dir = temp();
    let tokens = dir.path().join("tokens.json");
    let hash = Command::new(klock())
        .arg("token-hash")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(b"s3cret")?;
            c.wait_with_output()
        })
        .unwrap();
    let hash = String::from_utf8(hash.stdout).unwrap();
    let file = format!(
        r#"{{"tokens": [{{"name": "ci", "sha256": "{}", "role": "agent", "namespaces": ["ci"]}}]}}"#,
        hash.trim()
    );
    std::fs::write(&tokens, file).unwrap();
    let server =
        Spawned::start(klock(), &["--memory", "--tokens", tokens.to_str().unwrap()]).unwrap();
    let args = ["--ns", "ci", "--intent", "MUTATES FILE:/x", "--", "true"];
    let (code, _, err) = Running::spawn(exec(&server, &args)).finish(Duration::from_secs(10));
    assert_eq!(code, 69);
    assert!(
        err.contains("401") && err.contains("--token T or $KLOCK_TOKEN"),
        "{err}"
    );
    let mut c = exec(&server, &["--token", "s3cret"]);
    c.args(args);
    assert_eq!(Running::spawn(c).finish(Duration::from_secs(10)).0, 0);
    let mut c = exec(&server, &args);
    c.env("KLOCK_TOKEN", "s3cret");
    assert_eq!(Running::spawn(c).finish(Duration::from_secs(10)).0, 0);
}

#[test]
fn a_wound_from_an_older_session_stops_the_command_with_107() {
    use klock_testkit::http_client::request;
    let server = Spawned::start(klock(), &["--memory", "--config", "policy=wound_wait"])
        .expect("start klock serve");
    // The older session opens first; the wrapper's session is younger.
    let opened = request(
        server.port,
        "POST",
        "/v1/ns/default/sessions",
        &[],
        br#"{"agent_id": "older"}"#,
    )
    .unwrap();
    assert_eq!(opened.status, 200, "{:?}", opened.body);
    let older = opened.body["session_id"].as_u64().unwrap();
    let token = opened.body["session_token"].as_str().unwrap().to_owned();

    let dir = temp();
    let (started, stopped) = (dir.path().join("started"), dir.path().join("stopped"));
    let script = format!(
        "trap 'touch {}; exit 9' TERM; touch {}; sleep 20 & wait",
        stopped.display(),
        started.display()
    );
    let mut c = exec(
        &server,
        &["-v", "--agent", "younger", "--intent", "MUTATES FILE:/x"],
    );
    c.arg("--kill-after").arg("2s");
    let run = run_script(c, &script, &started);
    let acquired = request(
        server.port,
        "POST",
        &format!("/v1/ns/default/sessions/{older}/acquire"),
        &[("klock-session-token", &token)],
        br#"{"intents": ["MUTATES FILE:/x"]}"#,
    )
    .unwrap();
    assert_eq!(
        acquired.body["verdict"], "GRANTED",
        "the older session wounds the holder: {:?}",
        acquired.body
    );
    let (code, _, err) = run.finish(Duration::from_secs(10));
    assert_eq!(code, 107, "{err}");
    assert!(stopped.exists(), "the command was not sent SIGTERM: {err}");
    assert!(
        err.contains("WOUNDED"),
        "the message names the wound: {err}"
    );
}

#[test]
fn a_wait_that_runs_out_names_the_holder_it_queued_behind() {
    let server = server();
    let dir = temp();
    let digest = dir.path().join("job.json");
    let digest_arg = digest.to_str().unwrap();
    let holder = |agent: &str, ready: &Path, secs: u32| {
        let c = exec(&server, &["--agent", agent, "--intent", "MUTATES FILE:/x"]);
        run_script(
            c,
            &format!("touch {}; sleep {secs}", ready.display()),
            ready,
        )
    };
    // The job's session is opened while a first holder has the file: it gives up at once
    // (a DIE), and its session is kept, older than any opened later.
    let first = dir.path().join("first");
    let early = holder("early-bot", &first, 1);
    let job = |wait: &str| {
        exec(
            &server,
            &[
                "--agent",
                "job",
                "--wait",
                wait,
                "--digest",
                digest_arg,
                "--intent",
                "MUTATES FILE:/x",
                "--",
                "true",
            ],
        )
    };
    let (code, _, err) = Running::spawn(job("0")).finish(Duration::from_secs(10));
    assert_eq!(code, 75, "{err}");
    assert!(err.contains("--wait 0s:"), "{err}");
    assert_eq!(early.finish(Duration::from_secs(10)).0, 0);
    // A younger holder now: the older job queues behind it (a WAIT, not a DIE), and when its
    // wait runs out the message still names who held the file.
    let second = dir.path().join("second");
    let late = holder("late-bot", &second, 5);
    // Twice: the server's timeout and the end of its hold race, so a single run could miss
    // a client that names the holders only when the hold ends first.
    for _ in 0..2 {
        let (code, _, err) = Running::spawn(job("300ms")).finish(Duration::from_secs(10));
        assert_eq!(code, 75, "{err}");
        assert!(
            err.contains("held by agent \"late-bot\"") && err.contains("MUTATES FILE:/x"),
            "{err}"
        );
    }
    drop(late);
}

#[test]
fn a_server_that_dies_mid_command_leaves_a_digest_for_its_restart() {
    let dir = temp();
    let data = dir.path().join("klock.redb");
    let data_arg = data.to_str().unwrap();
    let digest = dir.path().join("job.json");
    let digest_arg = digest.to_str().unwrap();
    let server = Spawned::start(klock(), &["--data", data_arg]).expect("start klock serve");
    let started = dir.path().join("started");
    let mut c = exec(
        &server,
        &["--agent", "job", "--ttl", "600ms", "--kill-after", "1s"],
    );
    c.args(["--digest", digest_arg, "--intent", "MUTATES FILE:/x"]);
    let script = format!("echo $KLOCK_SESSION; touch {}; sleep 20", started.display());
    let run = run_script(c, &script, &started);
    server.kill();
    let (code, out, err) = run.finish(Duration::from_secs(10));
    assert_eq!(code, 107, "{err}");
    // The server could not give the digest: the run wrote the one it knew.
    assert!(err.contains("saved the session to"), "{err}");
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&digest).unwrap()).unwrap();
    let session = saved["identity"]["session_id"].as_u64().unwrap();
    assert_eq!(session.to_string(), out.trim());
    let priority = saved["identity"]["priority_timestamp"].as_u64().unwrap();

    // The server restarts from its log: the rerun resumes the session, with its priority.
    let server = Spawned::start(klock(), &["--data", data_arg]).expect("restart klock serve");
    rerun_resumes(&server, &digest, session, priority);
}

#[test]
fn a_command_that_outlives_its_ttl_many_times_keeps_its_lease() {
    let server = server();
    // Renewed every 100 ms (a third of the TTL): 1.5 s is five TTLs.
    let c = exec(
        &server,
        &[
            "--ttl",
            "300ms",
            "--intent",
            "MUTATES FILE:/x",
            "--",
            "sleep",
            "1.5",
        ],
    );
    let (code, _, err) = Running::spawn(c).finish(Duration::from_secs(10));
    assert_eq!(code, 0, "{err}");
}

#[test]
fn a_command_that_ignores_sigterm_is_killed_after_kill_after() {
    let server = server();
    let dir = temp();
    let (started, survived) = (dir.path().join("started"), dir.path().join("survived"));
    let script = format!(
        "trap '' TERM; touch {}; sleep 3; touch {}",
        started.display(),
        survived.display()
    );
    let c = exec(
        &server,
        &[
            "--ttl",
            "600ms",
            "--kill-after",
            "500ms",
            "--intent",
            "MUTATES FILE:/x",
        ],
    );
    let run = run_script(c, &script, &started);
    let killed = Instant::now();
    server.kill();
    let (code, _, err) = run.finish(Duration::from_secs(10));
    assert_eq!(code, 107, "{err}");
    // The TTL, then --kill-after, not the command's 3 s.
    assert!(
        killed.elapsed() < Duration::from_millis(2500),
        "{:?}",
        killed.elapsed()
    );
    // Past the moment a surviving command would have touched the file.
    std::thread::sleep(
        (killed + Duration::from_millis(3300)).saturating_duration_since(Instant::now()),
    );
    assert!(!survived.exists(), "the command outlived the SIGKILL");
}

/// Opens a session over HTTP; its id and token.
fn open_session(server: &Spawned, agent: &str) -> (u64, String) {
    use klock_testkit::http_client::request;
    let body = format!(r#"{{"agent_id": "{agent}"}}"#);
    let opened = request(
        server.port,
        "POST",
        "/v1/ns/default/sessions",
        &[],
        body.as_bytes(),
    )
    .unwrap();
    assert_eq!(opened.status, 200, "{:?}", opened.body);
    let id = opened.body["session_id"].as_u64().unwrap();
    (
        id,
        opened.body["session_token"].as_str().unwrap().to_owned(),
    )
}

/// `POST .../sessions/{id}/{what}` with the session's token; the answer's JSON.
fn session_call(server: &Spawned, (id, token): &(u64, String), what: &str, body: &str) -> Value {
    use klock_testkit::http_client::request;
    let answer = request(
        server.port,
        "POST",
        &format!("/v1/ns/default/sessions/{id}/{what}"),
        &[("klock-session-token", token)],
        body.as_bytes(),
    )
    .unwrap();
    assert_eq!(answer.status, 200, "{what}: {:?}", answer.body);
    answer.body
}

/// Who holds and who waits on `FILE:/x` now.
fn state_of_x(server: &Spawned) -> Value {
    use klock_testkit::http_client::request;
    let answer = request(
        server.port,
        "GET",
        "/v1/ns/default/resources/state?resource=FILE:/x",
        &[],
        b"",
    )
    .unwrap();
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    answer.body
}

/// The default namespace's statistics now.
fn stats_of_default(server: &Spawned) -> Value {
    use klock_testkit::http_client::request;
    let answer = request(server.port, "GET", "/v1/ns/default/stats", &[], b"").unwrap();
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    answer.body
}

/// Polls `check` every 10 ms for at most 10 s.
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < until, "{what} did not happen within 10 s");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Makes `digest` name a session of agent `job` that is older than any opened later: a first
/// run gives up at once (`--wait 0`) behind a holder of `FILE:/x` and saves its session.
fn job_with_a_saved_session(server: &Spawned, digest: &Path) {
    let early = open_session(server, "early-bot");
    session_call(
        server,
        &early,
        "acquire",
        r#"{"intents": ["MUTATES FILE:/x"]}"#,
    );
    let c = exec(
        server,
        &[
            "--agent",
            "job",
            "--wait",
            "0",
            "--digest",
            digest.to_str().unwrap(),
            "--intent",
            "MUTATES FILE:/x",
            "--",
            "true",
        ],
    );
    let (code, _, err) = Running::spawn(c).finish(Duration::from_secs(10));
    assert_eq!(code, 75, "{err}");
    assert!(digest.exists(), "{err}");
    session_call(server, &early, "release", r#"{"all": true}"#);
}

/// Issue 22, item 20: `klock exec --digest` interrupted while queued withdrew nothing, so its
/// ticket stayed queued for the suspended session, was granted to it when the holder let go,
/// and blocked the resource for TTL + grace (one more ticket per rerun).
#[test]
fn an_interrupted_wait_with_a_digest_withdraws_its_ticket() {
    let server = server();
    let dir = temp();
    let digest = dir.path().join("job.json");
    job_with_a_saved_session(&server, &digest);
    // A younger holder: the job's older session queues behind it (a WAIT, not a DIE).
    let holder = open_session(&server, "late-bot");
    let held = session_call(
        &server,
        &holder,
        "acquire",
        r#"{"intents": ["MUTATES FILE:/x"]}"#,
    );
    assert_eq!(held["verdict"], "GRANTED", "{held:?}");
    let c = exec(
        &server,
        &[
            "--agent",
            "job",
            "--wait",
            "30s",
            "--digest",
            digest.to_str().unwrap(),
            "--intent",
            "MUTATES FILE:/x",
            "--",
            "true",
        ],
    );
    let waiter = Running::spawn(c);
    eventually("the job's ticket queued", || {
        !state_of_x(&server)["waiting"]
            .as_array()
            .unwrap()
            .is_empty()
    });
    signal(waiter.pid(), libc::SIGINT);
    let (code, _, err) = waiter.finish(Duration::from_secs(10));
    assert_eq!(code, 130, "{err}");
    assert!(err.contains("the request was withdrawn"), "{err}");
    assert!(digest.exists(), "the session is kept for a rerun: {err}");
    let state = state_of_x(&server);
    assert_eq!(state["waiting"], serde_json::json!([]), "{state:?}");
    // The holder lets go: a third party gets the file at once, nothing queued before it.
    session_call(&server, &holder, "release", r#"{"all": true}"#);
    let third = open_session(&server, "third");
    let got = session_call(
        &server,
        &third,
        "acquire",
        r#"{"intents": ["MUTATES FILE:/x"], "wait": false}"#,
    );
    assert_eq!(got["verdict"], "GRANTED", "{got:?}");
}

/// Issue 22, item 17: a heartbeat refused with 401 (another process resumed the session, so
/// its token is no longer this run's) was retried as if the server were unreachable until the
/// local deadline; the lease is lost at once and the message says why.
#[test]
fn a_rerun_that_resumes_the_session_stops_the_first_run_at_once() {
    let server = server();
    let dir = temp();
    let digest = dir.path().join("job.json");
    job_with_a_saved_session(&server, &digest);
    let digest_arg = digest.to_str().unwrap();
    let run = |started: &Path| {
        let c = exec(
            &server,
            &[
                "--agent",
                "job",
                "--ttl",
                "6s",
                "--kill-after",
                "1s",
                "--digest",
                digest_arg,
                "--intent",
                "MUTATES FILE:/x",
            ],
        );
        run_script(c, &format!("touch {}; sleep 8", started.display()), started)
    };
    let first = run(&dir.path().join("first"));
    // The same digest again, while the first run still holds the lease: this run resumes the
    // session (a new token) and reuses its lease.
    let second = run(&dir.path().join("second"));
    let resumed = Instant::now();
    let (code, _, err) = first.finish(Duration::from_secs(10));
    assert_eq!(code, 107, "{err}");
    assert!(
        err.contains("another process resumed this session"),
        "{err}"
    );
    // Renewals go every 2 s: lost at the first one, not at the 6 s local deadline.
    assert!(resumed.elapsed() < Duration::from_millis(5500), "{err}");
    drop(second);
}

/// Issue 22, item 7: `--token` on the command line shows in `ps`; the tools warn, and
/// `KLOCK_TOKEN` is the quiet way.
#[test]
fn a_token_on_the_command_line_is_warned_about() {
    let server = server();
    let args = ["--intent", "MUTATES FILE:/x", "--", "true"];
    let mut c = exec(&server, &["--token", "s3cret"]);
    c.args(args);
    let (code, _, err) = Running::spawn(c).finish(Duration::from_secs(10));
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("--token on the command line is visible") && err.contains("KLOCK_TOKEN"),
        "{err}"
    );
    let mut c = exec(&server, &args);
    c.env("KLOCK_TOKEN", "s3cret");
    let (code, _, err) = Running::spawn(c).finish(Duration::from_secs(10));
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("warning"), "{err}");
    let mut status = Command::new(klock());
    hermetic(&mut status);
    let out = status
        .args(["status", "--server"])
        .arg(format!("http://127.0.0.1:{}", server.port))
        .args(["--token", "s3cret"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--token on the command line is visible"),
        "{err}"
    );
}

/// The address space a process has reserved without a file behind it, from its
/// `/proc/PID/maps` text: mimalloc's arena is 1 GiB of it from the first allocation on.
fn anonymous_bytes(maps: &str) -> u64 {
    maps.lines()
        .filter(|line| line.split_whitespace().nth(5).is_none())
        .map(|line| {
            let range = line.split_whitespace().next().unwrap();
            let (start, end) = range.split_once('-').unwrap();
            u64::from_str_radix(end, 16).unwrap() - u64::from_str_radix(start, 16).unwrap()
        })
        .sum()
}

/// `klock exec` runs on the C library's allocator, `klock serve` on mimalloc (issue 27: the
/// arena mimalloc reserves and fills with huge pages at its first allocation was the largest
/// item of exec's start-up). Seen from outside: the command reads its parent's memory map.
#[cfg(target_os = "linux")]
#[test]
fn exec_starts_without_the_servers_allocator() {
    const ARENA: u64 = 512 << 20;
    let server = server();
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", server.pid())).unwrap();
    assert!(
        anonymous_bytes(&maps) >= ARENA,
        "klock serve should be on mimalloc (a 1 GiB arena):\n{maps}"
    );
    let mut c = exec(&server, &["--intent", "MUTATES FILE:/alloc"]);
    c.args(["--", "sh", "-c", "cat /proc/$PPID/maps"]);
    let (code, out, err) = Running::spawn(c).finish(Duration::from_secs(10));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("klock"), "not klock exec's map:\n{out}");
    assert!(
        anonymous_bytes(&out) < ARENA,
        "klock exec reserved mimalloc's arena:\n{out}"
    );
}
