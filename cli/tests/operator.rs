//! The operator's server (issue 25 item 4), on real `klock` processes and real files: the
//! version, the config file, the logs (read from the process's own stderr), the online backup
//! under load and its restore, the config-mismatch error and the Prometheus metrics.

mod support;

use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{klock, sha256_of};

/// A `klock serve` process whose stderr goes to a file, stopped with SIGTERM.
struct Proc {
    child: Child,
    port: u16,
    stderr: PathBuf,
}

impl Proc {
    /// `klock serve --listen 127.0.0.1:0 ARGS` in `dir`, stderr into `dir/NAME.log`.
    fn start(dir: &Path, name: &str, args: &[&str]) -> Proc {
        let stderr = dir.join(format!("{name}.log"));
        let mut child = Command::new(klock())
            .current_dir(dir)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(args)
            .env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        let mut line = String::new();
        let stdout = child.stdout.take().unwrap();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let port = line.trim().rsplit(':').next().and_then(|p| p.parse().ok());
        let Some(port) = port else {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "klock serve {args:?} did not start: {line:?}\n{}",
                std::fs::read_to_string(&stderr).unwrap_or_default()
            );
        };
        Proc {
            child,
            port,
            stderr,
        }
    }

    fn call(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Value,
    ) -> (u16, Value) {
        let body = if body.is_null() {
            String::new()
        } else {
            body.to_string()
        };
        let a =
            klock_testkit::http_client::request(self.port, method, path, headers, body.as_bytes())
                .unwrap();
        (a.status, a.body)
    }

    fn text(&self, path: &str, headers: &[(&str, &str)]) -> String {
        let a = klock_testkit::http_client::request(self.port, "GET", path, headers, b"").unwrap();
        assert_eq!(a.status, 200, "{path}");
        String::from_utf8(a.raw).unwrap()
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// SIGTERM, then waits (10 s at most) for it to end; its stderr.
    fn stop(mut self) -> String {
        // SAFETY: kill(2) on the child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait().unwrap().is_none() {
            assert!(
                Instant::now() < deadline,
                "klock serve did not stop on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        std::fs::read_to_string(&self.stderr).unwrap()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `klock ARGS` with `env`, to its end (30 s at most: a command that should have refused to
/// start fails the test instead of serving on).
fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(klock());
    command
        .args(args)
        .env_remove("KLOCK_TOKEN")
        .env_remove("KLOCK_SERVER");
    for (k, v) in env {
        command.env(k, v);
    }
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("klock {args:?} did not end in 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn text_of(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Opens a session (with `bearer`, if any) and returns its id and token.
fn open(p: &Proc, bearer: &[(&str, &str)], agent: &str) -> (u64, String) {
    let (status, v) = p.call(
        "POST",
        "/v1/ns/default/sessions",
        bearer,
        json!({"agent_id": agent}),
    );
    assert_eq!(status, 200, "{v}");
    (
        v["session_id"].as_u64().unwrap(),
        v["session_token"].as_str().unwrap().to_owned(),
    )
}

#[test]
fn version_names_the_crate_version_and_the_commit() {
    for flag in ["--version", "-V"] {
        let out = run(&[flag], &[]);
        assert!(out.status.success());
        let line = text_of(&out.stdout);
        let expected = format!("klock {}", env!("CARGO_PKG_VERSION"));
        assert!(line.starts_with(&expected), "{line}");
        // Built from a git checkout (the tests run in one): the commit is there, 12 hex digits.
        let commit = line
            .trim()
            .strip_prefix(&format!("{expected} (commit "))
            .unwrap();
        let commit = commit.strip_suffix(')').unwrap();
        assert_eq!(commit.len(), 12, "{line}");
        assert!(commit.bytes().all(|b| b.is_ascii_hexdigit()), "{line}");
    }
}

#[test]
fn a_config_file_stands_for_flags_and_the_command_line_wins() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("klock.toml");
    std::fs::write(
        &file,
        r#"
# The listen address is the command line's (Proc gives --listen 127.0.0.1:0).
listen = "127.0.0.1:1"
data = "from-file.redb"
snapshot-every = 3
log-level = "warn"
max-request-ids = 2

[kernel]
policy = "wound_wait"
default_ttl_ms = 30000
"#,
    )
    .unwrap();
    let file = file.to_str().unwrap();
    // The file's log level is warn; the command line's debug wins, and --memory drops its data.
    let p = Proc::start(
        dir.path(),
        "a",
        &[
            "--config",
            file,
            "--log-level",
            "debug",
            "--memory",
            "--config",
            "default_ttl_ms=20000",
        ],
    );
    let (sid, token) = open(&p, &[], "ann");
    let (status, v) = p.call("GET", "/v1/ns/default/stats", &[], Value::Null);
    assert_eq!(status, 200, "{v}");
    let backup: Value = serde_json::from_str(&p.text("/v1/backup", &[])).unwrap();
    let config = &backup["snapshot"]["state"]["config"];
    assert_eq!(
        config["policy"], "wound_wait",
        "from the file's [kernel] table"
    );
    assert_eq!(
        config["default_ttl_ms"], 20000,
        "the command line's --config wins"
    );
    // max-request-ids = 2 from the file: a heartbeat naming three leases is refused.
    let (status, v) = p.call(
        "POST",
        &format!("/v1/ns/default/sessions/{sid}/heartbeat"),
        &[("klock-session-token", &token)],
        json!({"lease_ids": [1, 2, 3]}),
    );
    assert_eq!(
        (status, v["error"]["name"].as_str()),
        (413, Some("TOO_MANY_IDS")),
        "{v}"
    );
    let log = p.stop();
    assert!(
        log.contains("DEBUG klock::request"),
        "debug from the command line:\n{log}"
    );
    assert!(
        !dir.path().join("from-file.redb").exists(),
        "--memory on the command line drops the file's data"
    );

    // Unknown keys, wrong types and refused values: errors naming the file and the key.
    for (body, expected) in [
        ("lisen = \"127.0.0.1:7300\"\n", "unknown key \"lisen\""),
        (
            "snapshot-every = \"often\"\n",
            "key snapshot-every must be a whole number, got string",
        ),
        (
            "memory = 1\n",
            "key memory must be true or false, got integer",
        ),
        (
            "max-connections = 0\n",
            "key max-connections: --max-connections needs a whole number above 0, got \"0\"",
        ),
        (
            "log-format = \"xml\"\n",
            "key log-format: --log-format is text or json, got \"xml\"",
        ),
        (
            "[kernel]\npolcy = \"wait_die\"\n",
            "key kernel.polcy: --config: unknown kernel setting \"polcy\"",
        ),
        (
            "[kernel]\ndefault_ttl_ms = 1.5\n",
            "key kernel.default_ttl_ms must be a string or a whole number, got float",
        ),
        ("listen = [\n", "is not valid TOML"),
    ] {
        let bad = dir.path().join("bad.toml");
        std::fs::write(&bad, body).unwrap();
        // A free port in memory, should a broken parser accept the file and serve.
        let file = bad.to_str().unwrap();
        let out = run(
            &[
                "serve",
                "--config",
                file,
                "--listen",
                "127.0.0.1:0",
                "--memory",
            ],
            &[],
        );
        assert_eq!(out.status.code(), Some(2), "{body}");
        let err = text_of(&out.stderr);
        assert!(
            err.contains("bad.toml") && err.contains(expected),
            "{body}: {err}"
        );
    }
    let out = run(&["serve", "--config", "/nonexistent/klock.toml"], &[]);
    assert!(text_of(&out.stderr).contains("cannot read the config file /nonexistent/klock.toml"));
    // One file at most.
    let out = run(&["serve", "--config", file, "--config", file], &[]);
    assert!(
        text_of(&out.stderr).contains("--config FILE given twice"),
        "{}",
        text_of(&out.stderr)
    );
    // A repeated flag on the command line replaces the file's list; without it the file's
    // list stands.
    let origins = dir.path().join("origins.toml");
    std::fs::write(
        &origins,
        "allow-origin = [\"http://a.test:1\", \"http://b.test:2\"]\n",
    )
    .unwrap();
    let origins = origins.to_str().unwrap();
    let args = |extra: &[&str]| -> Vec<String> {
        ["--config", origins]
            .iter()
            .chain(extra)
            .map(|a| a.to_string())
            .collect()
    };
    let parsed = klock_cli::serve_args::parse(&args(&[])).unwrap();
    assert_eq!(parsed.origins, ["http://a.test:1", "http://b.test:2"]);
    let parsed =
        klock_cli::serve_args::parse(&args(&["--allow-origin", "http://c.test:3"])).unwrap();
    assert_eq!(parsed.origins, ["http://c.test:3"]);
}

#[test]
fn logs_say_the_lifecycle_at_info_and_each_request_at_debug_as_json() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.json");
    let secret = "agent-secret-never-logged";
    std::fs::write(
        &tokens,
        json!({"tokens": [{"name": "bot", "sha256": sha256_of(secret), "role": "admin", "namespaces": ["*"]}]}).to_string(),
    )
    .unwrap();
    let tokens = tokens.to_str().unwrap();
    let args = [
        "--data",
        "k.redb",
        "--snapshot-every",
        "2",
        "--tokens",
        tokens,
    ];
    let bearer = format!("Bearer {secret}");
    let auth = [("authorization", bearer.as_str())];

    // At info (the default): the lifecycle, no request lines.
    let p = Proc::start(
        dir.path(),
        "info",
        &[&args[..], &["--log-format", "json"]].concat(),
    );
    let (sid, token) = open(&p, &auth, "ann");
    let path = format!("/v1/ns/default/sessions/{sid}/acquire");
    let session = [auth[0], ("klock-session-token", token.as_str())];
    let (status, v) = p.call(
        "POST",
        &path,
        &session,
        json!({"intents": ["MUTATES FILE:/x"]}),
    );
    assert_eq!(status, 200, "{v}");
    // The snapshot follows the answer: wait until the engine has stored it.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !p
        .text("/metrics", &auth)
        .contains("\nklock_log_entries 0\n")
    {
        assert!(Instant::now() < deadline, "no snapshot after two entries");
        std::thread::sleep(Duration::from_millis(20));
    }
    let log = p.stop();
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let messages: Vec<&str> = lines
        .iter()
        .map(|l| l["fields"]["message"].as_str().unwrap())
        .collect();
    let listening = &lines[0];
    assert_eq!(listening["level"], "INFO");
    assert_eq!(
        listening["fields"]["address"],
        format!("http://127.0.0.1:{}", p_port(&log))
    );
    assert_eq!(listening["fields"]["data"], "k.redb");
    assert!(
        messages
            .iter()
            .any(|m| m.starts_with("snapshot stored at entry 2")),
        "{log}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m.starts_with("SIGTERM: shutting down")),
        "{log}"
    );
    assert_eq!(messages.last(), Some(&"stopped"), "{log}");
    assert!(
        !log.contains("klock::request"),
        "no request lines at info:\n{log}"
    );

    // Restarted at debug: the recovery, and one line per request without the token.
    let p = Proc::start(
        dir.path(),
        "debug",
        &[&args[..], &["--log-format", "json", "--log-level", "debug"]].concat(),
    );
    let (status, _) = p.call("GET", "/v1/ns/default/stats", &auth, Value::Null);
    assert_eq!(status, 200);
    let (status, _) = p.call("GET", "/v1/ns/default/stats", &[], Value::Null);
    assert_eq!(status, 401);
    let log = p.stop();
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let recovered = lines
        .iter()
        .find(|l| {
            l["fields"]["message"]
                .as_str()
                .unwrap()
                .starts_with("recovered entry")
        })
        .unwrap_or_else(|| panic!("{log}"));
    // Two entries (open, acquire), both in the snapshot: none replayed; entry 3 is the
    // `Recovered` entry the restart logs.
    assert_eq!(recovered["fields"]["replayed"], 0, "{log}");
    assert_eq!(recovered["fields"]["index"], 3, "{log}");
    let requests: Vec<&Value> = lines
        .iter()
        .filter(|l| l["target"] == "klock::request")
        .collect();
    assert_eq!(requests.len(), 2, "{log}");
    for (request, status) in requests.iter().zip([200, 401]) {
        assert_eq!(request["level"], "DEBUG");
        let f = &request["fields"];
        assert_eq!(f["method"], "GET");
        assert_eq!(f["route"], "/v1/ns/{ns}/stats");
        assert_eq!(f["status"], status);
        assert!(f["duration_us"].as_u64().is_some(), "{request}");
    }
    assert!(!log.contains(secret), "a token in the log:\n{log}");

    // Text is the default format.
    let p = Proc::start(
        dir.path(),
        "text",
        &[&args[..], &["--log-level", "info,klock::request=debug"]].concat(),
    );
    p.call("GET", "/v1/health", &[], Value::Null);
    let log = p.stop();
    assert!(
        log.lines()
            .any(|l| l.contains(" INFO ") && l.contains("listening on http://127.0.0.1:")),
        "{log}"
    );
    assert!(
        log.lines().any(|l| l
            .contains(" DEBUG klock::request: request method=GET route=\"/v1/health\" status=200")),
        "{log}"
    );
    let out = run(&["serve", "--log-level", "loud=="], &[]);
    assert!(
        text_of(&out.stderr).contains("--log-level takes a level"),
        "{}",
        text_of(&out.stderr)
    );
}

/// The port in a log's first line (`listening on http://127.0.0.1:PORT ...`).
fn p_port(log: &str) -> u16 {
    let first: Value = serde_json::from_str(log.lines().next().unwrap()).unwrap();
    let address = first["fields"]["address"].as_str().unwrap();
    address.rsplit(':').next().unwrap().parse().unwrap()
}

/// The part of a kernel state a restore keeps exactly: sessions (who, where, priority,
/// epoch), leases (fence, holder, resource, mode, since), tickets' ids, and the token hashes.
fn kept(snapshot: &Value) -> Value {
    let state = &snapshot["state"];
    let pick = |list: &Value, keys: &[&str]| -> Value {
        list.as_array()
            .unwrap()
            .iter()
            .map(|item| {
                keys.iter()
                    .map(|k| item[*k].clone())
                    .collect::<Vec<_>>()
                    .into()
            })
            .collect::<Vec<Value>>()
            .into()
    };
    json!({
        "sessions": pick(&state["sessions"], &["session_id", "agent_id", "namespace", "priority", "epoch"]),
        "leases": pick(&state["leases"], &["lease_id", "session_id", "resource", "predicate", "acquired_at"]),
        "tickets": pick(&state["tickets"], &["ticket_id"]),
        "tokens": snapshot["tokens"].clone(),
    })
}

#[test]
fn an_online_backup_under_load_is_a_committed_prefix_and_restores_into_a_new_server() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.json");
    std::fs::write(
        &tokens,
        json!({"tokens": [
            {"name": "root", "sha256": sha256_of("root-secret"), "role": "admin", "namespaces": ["*"]},
            {"name": "bot", "sha256": sha256_of("bot-secret"), "role": "agent", "namespaces": ["*"]},
        ]})
        .to_string(),
    )
    .unwrap();
    let tokens = tokens.to_str().unwrap();
    let p = Proc::start(
        dir.path(),
        "source",
        &[
            "--data",
            "src.redb",
            "--tokens",
            tokens,
            "--history",
            "1000000",
            "--snapshot-every",
            "50",
        ],
    );
    let port = p.port;
    let stop = Arc::new(AtomicBool::new(false));
    let granted = Arc::new(AtomicU64::new(0));
    // Four agents acquire and release in a loop while the backups are taken.
    let load: Vec<_> = (0..4)
        .map(|n| {
            let (stop, granted) = (Arc::clone(&stop), Arc::clone(&granted));
            std::thread::spawn(move || {
                let call = |method: &str, path: &str, headers: &[(&str, &str)], body: Value| {
                    let a = klock_testkit::http_client::request(
                        port,
                        method,
                        path,
                        headers,
                        body.to_string().as_bytes(),
                    )
                    .unwrap();
                    (a.status, a.body)
                };
                let bot = ("authorization", "Bearer bot-secret");
                let (status, v) = call(
                    "POST",
                    "/v1/ns/default/sessions",
                    &[bot],
                    json!({"agent_id": format!("a{n}")}),
                );
                assert_eq!(status, 200, "{v}");
                let sid = v["session_id"].as_u64().unwrap();
                let token = v["session_token"].as_str().unwrap().to_owned();
                let session = [bot, ("klock-session-token", token.as_str())];
                let base = format!("/v1/ns/default/sessions/{sid}");
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let intent = format!("MUTATES FILE:/agent{n}/file{}", i % 3);
                    let (status, v) = call(
                        "POST",
                        &format!("{base}/acquire"),
                        &session,
                        json!({"intents": [intent]}),
                    );
                    assert_eq!(status, 200, "{v}");
                    granted.fetch_add(1, Ordering::Relaxed);
                    // Every third lease is kept: the backup holds leases.
                    if !i.is_multiple_of(3) {
                        let lease = v["leases"][0]["lease_id"].clone();
                        let (status, v) = call(
                            "POST",
                            &format!("{base}/release"),
                            &session,
                            json!({"lease_ids": [lease]}),
                        );
                        assert_eq!(status, 200, "{v}");
                    }
                    i += 1;
                }
            })
        })
        .collect();
    while granted.load(Ordering::Relaxed) < 40 {
        std::thread::sleep(Duration::from_millis(10));
    }
    let file = dir.path().join("klock.backup");
    let file = file.to_str().unwrap();
    // Refused without a token, and with one that is not admin; nothing written.
    let out = run(&["backup", "--server", &p.url(), file], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text_of(&out.stderr).contains("401 UNAUTHORIZED"),
        "{}",
        text_of(&out.stderr)
    );
    let out = run(
        &["backup", "--server", &p.url(), file],
        &[("KLOCK_TOKEN", "bot-secret")],
    );
    assert!(
        text_of(&out.stderr).contains("403 FORBIDDEN"),
        "{}",
        text_of(&out.stderr)
    );
    assert!(!Path::new(file).exists());
    let (status, _) = p.call(
        "GET",
        "/v1/backup",
        &[("authorization", "Bearer bot-secret")],
        Value::Null,
    );
    assert_eq!(status, 403);

    let root = [("authorization", "Bearer root-secret")];
    let out = run(
        &["backup", "--server", &p.url(), file],
        &[("KLOCK_TOKEN", "root-secret")],
    );
    assert!(out.status.success(), "{}", text_of(&out.stderr));
    assert!(
        text_of(&out.stdout).contains("klock backup: wrote"),
        "{}",
        text_of(&out.stdout)
    );
    let mode = std::fs::metadata(file).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o600
    );
    let at_backup = granted.load(Ordering::Relaxed);
    while granted.load(Ordering::Relaxed) < at_backup + 40 {
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    for t in load {
        t.join().unwrap();
    }
    let backup: Value = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
    let snapshot = &backup["snapshot"];
    let index = snapshot["applied"].as_u64().unwrap();
    // Consistent: the backup is the state after exactly entry `index` of the server's log, as
    // the server itself replays it, though the log went on past it meanwhile.
    let (status, at) = p.call(
        "GET",
        &format!("/v1/state/hash?index={index}"),
        &root,
        Value::Null,
    );
    assert_eq!(status, 200, "{at}");
    assert_eq!(
        at["hash"],
        format!("{:016x}", snapshot["hash"].as_u64().unwrap())
    );
    let (_, now) = p.call("GET", "/v1/state/hash", &root, Value::Null);
    assert!(
        now["index"].as_u64().unwrap() > index + 40,
        "the load went on after the backup: {now}"
    );
    assert!(
        !snapshot["state"]["leases"].as_array().unwrap().is_empty(),
        "the backup holds leases"
    );
    // The last fence the source gave out, to compare the restored server's with.
    let last: Value = serde_json::from_str(&p.text("/v1/backup", &root)).unwrap();
    let last_fence = last["snapshot"]["state"]["next_lease"].as_u64().unwrap();
    p.stop();

    // Restore into a new data file; refused over an existing one.
    let source = dir.path().join("src.redb");
    let out = run(&["restore", "--data", source.to_str().unwrap(), file], &[]);
    let out = if out.status.success() {
        panic!("restored over a data file")
    } else {
        out
    };
    assert!(
        text_of(&out.stderr).contains("RESTORE_TARGET_EXISTS"),
        "{}",
        text_of(&out.stderr)
    );
    let restored = dir.path().join("restored.redb");
    let out = run(
        &["restore", "--data", restored.to_str().unwrap(), file],
        &[],
    );
    assert!(out.status.success(), "{}", text_of(&out.stderr));
    assert!(
        text_of(&out.stdout).contains(&format!("the state after entry {index}")),
        "{}",
        text_of(&out.stdout)
    );
    let q = Proc::start(
        dir.path(),
        "restored",
        &["--data", "restored.redb", "--tokens", tokens],
    );
    let again: Value = serde_json::from_str(&q.text("/v1/backup", &root)).unwrap();
    assert_eq!(
        kept(&again["snapshot"]),
        kept(snapshot),
        "the restored server holds the backup's state"
    );
    // No fence the source gave out after the backup is given out again.
    let next = again["snapshot"]["state"]["next_lease"].as_u64().unwrap();
    assert!(
        next > last_fence,
        "next fence {next} after the source's last {last_fence}"
    );
    // The backup's sessions are served: one resumes its lease (a heartbeat with its token).
    let lease = &snapshot["state"]["leases"][0];
    let sid = lease["session_id"].as_u64().unwrap();
    let (status, v) = q.call(
        "GET",
        &format!(
            "/v1/ns/default/resources/state?resource={}",
            klock_testkit::http_client::percent_encode(lease["resource"].as_str().unwrap())
        ),
        &root,
        Value::Null,
    );
    assert_eq!(status, 200, "{v}");
    assert!(
        v.to_string().contains(&format!("\"session_id\":{sid}")),
        "{v}"
    );
    q.stop();

    // A damaged backup is refused by name, and no data file is made.
    let mut damaged = backup.clone();
    damaged["snapshot"]["state"]["next_lease"] = json!(1);
    let bad = dir.path().join("damaged.backup");
    std::fs::write(&bad, damaged.to_string()).unwrap();
    let target = dir.path().join("never.redb");
    let out = run(
        &[
            "restore",
            "--data",
            target.to_str().unwrap(),
            bad.to_str().unwrap(),
        ],
        &[],
    );
    assert!(
        text_of(&out.stderr).contains("BACKUP_INVALID"),
        "{}",
        text_of(&out.stderr)
    );
    assert!(!target.exists());
    // A backup from the future bounds nothing: refused, nothing made.
    let mut future = backup.clone();
    future["wall_ms"] = json!(u64::MAX / 2);
    std::fs::write(&bad, future.to_string()).unwrap();
    let out = run(
        &[
            "restore",
            "--data",
            target.to_str().unwrap(),
            bad.to_str().unwrap(),
        ],
        &[],
    );
    assert!(
        text_of(&out.stderr).contains("BACKUP_IN_THE_FUTURE"),
        "{}",
        text_of(&out.stderr)
    );
    assert!(!target.exists());
}

/// `--workers N` starts N threads that serve connections (besides the kernel's own), from the
/// command line or a config file; 0, more than 1,024 and a non-number are refused, naming the
/// flag, before anything is served.
#[test]
fn workers_sets_the_threads_that_serve_and_refuses_what_cannot_be() {
    /// The threads of `pid` named as the runtime's workers.
    fn workers_of(pid: u32) -> usize {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
            .filter(|name| name.trim() == "klock-worker")
            .count()
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("workers.toml");
    std::fs::write(&file, "memory = true\nworkers = 5\n").unwrap();
    for (args, expected) in [
        (vec!["--memory", "--workers", "3"], 3),
        (vec!["--config", file.to_str().unwrap()], 5),
        (vec!["--memory", "--workers", "1"], 1),
    ] {
        let p = Proc::start(dir.path(), "workers", &args);
        let (status, _) = p.call("GET", "/v1/ns/default/overview", &[], Value::Null);
        assert_eq!(status, 200, "{args:?}");
        assert_eq!(workers_of(p.child.id()), expected, "{args:?}");
        p.stop();
    }
    for (value, expected) in [
        ("0", "--workers needs a whole number above 0, got \"0\""),
        ("1025", "--workers is at most 1024, got 1025"),
        (
            "many",
            "--workers needs a whole number above 0, got \"many\"",
        ),
    ] {
        let out = run(
            &[
                "serve",
                "--memory",
                "--listen",
                "127.0.0.1:0",
                "--workers",
                value,
            ],
            &[],
        );
        assert_eq!(out.status.code(), Some(2), "{value}");
        let err = text_of(&out.stderr);
        assert!(err.contains(expected), "{value}: {err}");
    }
}

#[test]
fn a_config_mismatch_names_each_setting_and_both_values() {
    let dir = tempfile::tempdir().unwrap();
    let p = Proc::start(
        dir.path(),
        "first",
        &["--data", "k.redb", "--config", "policy=wound_wait"],
    );
    p.stop();
    let out = run(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data",
            dir.path().join("k.redb").to_str().unwrap(),
            "--config",
            "default_ttl_ms=1000",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = text_of(&out.stderr);
    assert!(err.contains("CONFIG_MISMATCH"), "{err}");
    assert!(
        err.contains("policy: the data file has \"wound_wait\", the flags ask for \"wait_die\""),
        "{err}"
    );
    assert!(
        err.contains("default_ttl_ms: the data file has 60000, the flags ask for 1000"),
        "{err}"
    );
    assert!(!err.contains("Config {"), "no Debug struct: {err}");
}

#[test]
fn metrics_follow_prometheus_conventions_with_build_info_routes_and_the_process() {
    let dir = tempfile::tempdir().unwrap();
    let p = Proc::start(dir.path(), "m", &["--memory"]);
    let (sid, token) = open(&p, &[], "ann");
    for _ in 0..3 {
        let (status, v) = p.call(
            "GET",
            &format!("/v1/ns/default/sessions/{sid}/digest"),
            &[("klock-session-token", &token)],
            Value::Null,
        );
        assert_eq!(status, 200, "{v}");
    }
    p.call("GET", "/nowhere/42", &[], Value::Null);
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let text = p.text("/metrics", &[]);
    let value = |series: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
    };
    let version = env!("CARGO_PKG_VERSION");
    // The same version and commit as `klock --version` and GET /v1/version.
    let long = text_of(&run(&["--version"], &[]).stdout);
    let commit = long
        .trim()
        .rsplit(' ')
        .next()
        .unwrap()
        .trim_end_matches(')');
    assert_eq!(commit.len(), 12, "{long}");
    let info = format!("\nklock_build_info{{version=\"{version}\",commit=\"{commit}\"}} 1\n");
    assert!(text.contains(&info), "no {info} in\n{text}");
    let (_, about) = p.call("GET", "/v1/version", &[], Value::Null);
    assert_eq!(
        (about["server"].as_str(), about["commit"].as_str()),
        (Some(version), Some(commit))
    );
    // The route template, never the raw path; a histogram per route.
    let events = "route=\"/v1/ns/{ns}/sessions/{sid}/digest\"";
    assert_eq!(
        value(&format!(
            "klock_http_request_duration_seconds_count{{{events}}}"
        )),
        3.0
    );
    assert_eq!(
        value(&format!(
            "klock_http_request_duration_seconds_bucket{{{events},le=\"+Inf\"}}"
        )),
        3.0
    );
    assert!(
        value(&format!(
            "klock_http_request_duration_seconds_sum{{{events}}}"
        )) > 0.0
    );
    assert_eq!(
        value(&format!(
            "klock_http_requests_total{{{events},status=\"200\"}}"
        )),
        3.0
    );
    assert_eq!(
        value("klock_http_requests_total{route=\"unmatched\",status=\"404\"}"),
        1.0
    );
    assert!(
        !text.contains(&format!("/sessions/{sid}/")),
        "a raw path in a label"
    );
    // Buckets are cumulative.
    let buckets: Vec<f64> = text
        .lines()
        .filter(|l| {
            l.starts_with(&format!(
                "klock_http_request_duration_seconds_bucket{{{events}"
            ))
        })
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{buckets:?}");
    // The process, from /proc.
    assert!(value("process_resident_memory_bytes") > 1e6);
    assert!(value("process_virtual_memory_bytes") >= value("process_resident_memory_bytes"));
    assert!(value("process_open_fds") >= 3.0);
    assert!(value("process_max_fds") >= value("process_open_fds"));
    // CPU time as the kernel counts it for the process, read after the scrape: at most that.
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", p.child.id())).unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    // SAFETY: sysconf reads a constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let after = (fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap()) / ticks;
    let cpu = value("process_cpu_seconds_total");
    assert!(
        (0.0..=after).contains(&cpu),
        "{cpu} s of CPU, {after} s after the scrape"
    );
    let start = value("process_start_time_seconds");
    assert!(
        start <= started + 1.0 && start > started - 120.0,
        "{start} vs {started}"
    );
    // Conventions: every counter ends in _total, every TYPE has a HELP, names are unique.
    let mut seen = std::collections::HashSet::new();
    for line in text.lines().filter(|l| l.starts_with("# TYPE ")) {
        let mut words = line.split(' ').skip(2);
        let (name, kind) = (words.next().unwrap(), words.next().unwrap());
        assert!(seen.insert(name.to_owned()), "{name} declared twice");
        assert!(
            text.contains(&format!("# HELP {name} ")),
            "{name} has no HELP"
        );
        if kind == "counter" {
            assert!(name.ends_with("_total"), "counter {name} without _total");
        }
        if kind == "histogram" {
            assert!(
                name.ends_with("_seconds"),
                "histogram {name} without its unit"
            );
        }
    }
    p.stop();
}
