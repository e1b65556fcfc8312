//! tests/remote-scenarios/ through the Rust client: every file, unchanged, against a real
//! `klock serve --data FILE` process reached through a `klock-testkit link` process (the
//! format and what each step does: tests/remote-scenarios/README.md). One test per file, so a
//! scenario the client cannot meet fails by its name; `every_scenario_file_has_a_test` fails
//! when a file is added without one.
//!
//! Real time, bounded: a scenario's sleeps and `within_ms` bounds are wall-clock, and each
//! whole run is bounded by 120 s.

mod support;

use klock_client::{Client, Error, LeaseGuard, LeaseOptions, Session};
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn scenarios_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/remote-scenarios")
}

/// `$KLOCK_TESTKIT_BIN`, else the `klock-testkit` built beside these tests (the workspace's
/// `cargo nextest run` builds it), never one beside `$KLOCK_BIN`, which may be older.
fn testkit_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("KLOCK_TESTKIT_BIN").filter(|v| !v.is_empty()) {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().expect("the test's own path");
    // target/debug/deps/TEST -> target/debug/klock-testkit
    let bin = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|debug| debug.join("klock-testkit"))
        .expect("the test runs from target/debug/deps");
    assert!(
        bin.exists(),
        "no klock-testkit binary at {}: build it (cargo build -p klock-testkit) or set KLOCK_TESTKIT_BIN",
        bin.display()
    );
    bin
}

/// `klock serve --data FILE` on a port that stays its own across restarts.
struct ServerProcess {
    child: Child,
    port: u16,
    data: PathBuf,
}

impl ServerProcess {
    fn start(data: &Path, port: u16) -> ServerProcess {
        let mut child = Command::new(support::klock())
            .args(["serve", "--data"])
            .arg(data)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::piped())
            .spawn()
            .expect("start klock serve");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("its stdout");
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read its first line");
        let port = line
            .trim()
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("klock serve did not say where it listens: {line:?}"));
        ServerProcess {
            child,
            port,
            data: data.to_owned(),
        }
    }

    /// SIGKILL (a crash), then the same data file on the same port.
    fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        *self = ServerProcess::start(&self.data.clone(), self.port);
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `klock-testkit link` process and its control lines.
struct LinkProcess {
    child: Child,
    control: ChildStdin,
    answers: BufReader<ChildStdout>,
    port: u16,
}

impl LinkProcess {
    fn open(target: u16) -> LinkProcess {
        let mut child = Command::new(testkit_bin())
            .args(["link", "--to", &target.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start klock-testkit link");
        let control = child.stdin.take().expect("its stdin");
        let mut answers = BufReader::new(child.stdout.take().expect("its stdout"));
        let mut line = String::new();
        answers.read_line(&mut line).expect("read its first line");
        let port = line
            .trim()
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("the link did not say its port: {line:?}"));
        LinkProcess {
            child,
            control,
            answers,
            port,
        }
    }

    fn command(&mut self, line: &str) {
        writeln!(self.control, "{line}").expect("write to the link");
        let mut answer = String::new();
        self.answers
            .read_line(&mut answer)
            .expect("read the link's answer");
        assert_eq!(answer.trim(), "ok", "link command {line:?}");
    }
}

impl Drop for LinkProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a block shows the expectations (README "expect").
#[derive(Default)]
struct Block {
    state: &'static str,
    error: Option<String>,
    took_ms: Option<u64>,
    guard: Option<LeaseGuard>,
    /// Whether an acquisition or exit is still running.
    busy: bool,
}

impl Block {
    fn view(&self) -> Value {
        let lost = self
            .guard
            .as_ref()
            .and_then(LeaseGuard::lost)
            .map(|loss| json!({ "name": loss.reason }));
        json!({
            "state": self.state,
            "error": self.error.as_ref().map(|name| json!({ "name": name })),
            "lost": lost,
            "took_ms": self.took_ms,
        })
    }
}

type Blocks = Arc<Mutex<HashMap<String, Block>>>;

struct Run {
    server: ServerProcess,
    /// Shared with the link commands sent later (`after_ms`).
    link: Arc<Mutex<LinkProcess>>,
    linked: Client,
    direct: Client,
    sessions: HashMap<String, Session>,
    /// How long opening each session took, in ms.
    opened_in: HashMap<String, u64>,
    blocks: Blocks,
}

impl Run {
    async fn step(&mut self, step: &Map<String, Value>) -> Result<(), String> {
        let str_of = |key: &str| step.get(key).and_then(Value::as_str).map(str::to_owned);
        let ms_of = |key: &str| step.get(key).and_then(Value::as_u64);
        if let Some(name) = str_of("open") {
            let direct = step.get("direct").and_then(Value::as_bool) == Some(true);
            let client = if direct { &self.direct } else { &self.linked };
            let started = Instant::now();
            let session = client
                .session(&name)
                .await
                .map_err(|e| format!("open {name}: {e}"))?;
            self.opened_in
                .insert(name.clone(), started.elapsed().as_millis() as u64);
            self.sessions.insert(name, session);
        } else if let Some(name) = str_of("enter") {
            let session = str_of("session").ok_or("enter names no session")?;
            let session = self.sessions[&session].clone();
            let intents: Vec<String> = step["intents"]
                .as_array()
                .ok_or("enter has no intents")?
                .iter()
                .filter_map(|i| i.as_str().map(str::to_owned))
                .collect();
            let mut options = LeaseOptions::default();
            if let Some(ttl) = ms_of("ttl_ms") {
                options = options.ttl(Duration::from_millis(ttl));
            }
            if let Some(timeout) = ms_of("timeout_ms") {
                options = options.timeout(Duration::from_millis(timeout));
            }
            self.blocks.lock().unwrap().insert(
                name.clone(),
                Block {
                    state: "pending",
                    busy: true,
                    ..Block::default()
                },
            );
            let blocks = Arc::clone(&self.blocks);
            let started = Instant::now();
            tokio::spawn(async move {
                let outcome = session.lease(intents, options).await;
                let mut blocks = blocks.lock().unwrap();
                let block = blocks.get_mut(&name).expect("entered");
                block.took_ms = Some(started.elapsed().as_millis() as u64);
                block.busy = false;
                match outcome {
                    Ok(guard) => {
                        block.state = "held";
                        block.guard = Some(guard);
                    }
                    Err(e) => {
                        block.state = "failed";
                        block.error = Some(e.name().to_owned());
                    }
                }
            });
        } else if let Some(name) = str_of("exit") {
            let guard = {
                let mut blocks = self.blocks.lock().unwrap();
                let block = blocks.get_mut(&name).ok_or(format!("no block {name}"))?;
                block.busy = true;
                block
                    .guard
                    .take()
                    .ok_or(format!("block {name} holds nothing"))?
            };
            let blocks = Arc::clone(&self.blocks);
            tokio::spawn(async move {
                let released: Result<(), Error> = guard.release().await;
                let mut blocks = blocks.lock().unwrap();
                let block = blocks.get_mut(&name).expect("entered");
                block.busy = false;
                block.state = "exited";
                block.error = released.err().map(|e| e.name().to_owned());
            });
        } else if let Some(name) = str_of("await") {
            let within = Duration::from_millis(ms_of("within_ms").ok_or("await needs within_ms")?);
            let until = Instant::now() + within;
            while self.blocks.lock().unwrap()[&name].busy {
                if Instant::now() >= until {
                    return Err(format!("block {name} did not settle within {within:?}"));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        } else if let Some(command) = str_of("link") {
            match ms_of("after_ms") {
                None => self.link.lock().unwrap().command(&command),
                Some(after) => {
                    let link = Arc::clone(&self.link);
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis(after)).await;
                        link.lock().unwrap().command(&command);
                    });
                }
            }
        } else if step.contains_key("restart") {
            self.server.restart();
        } else if let Some(ms) = ms_of("sleep") {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        } else if let Some(expected) = step.get("expect") {
            self.check(expected)?;
        } else if let Some(expected) = step.get("eventually") {
            let within =
                Duration::from_millis(ms_of("within_ms").ok_or("eventually needs within_ms")?);
            let until = Instant::now() + within;
            loop {
                match self.check(expected) {
                    Ok(()) => break,
                    Err(e) if Instant::now() >= until => {
                        return Err(format!("not within {within:?}: {e}"))
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
        } else {
            return Err(format!("unknown step {step:?}"));
        }
        Ok(())
    }

    /// The observable state the expectation names, compared (README "expect").
    fn check(&self, expected: &Value) -> Result<(), String> {
        let mut seen = Map::new();
        if let Some(named) = expected.get("blocks").and_then(Value::as_object) {
            let blocks = self.blocks.lock().unwrap();
            let views: Map<String, Value> = named
                .keys()
                .map(|name| {
                    let view = blocks.get(name).map_or(Value::Null, Block::view);
                    (name.clone(), view)
                })
                .collect();
            seen.insert(String::from("blocks"), Value::Object(views));
        }
        if let Some(named) = expected.get("sessions").and_then(Value::as_object) {
            let views: Map<String, Value> = named
                .keys()
                .map(|name| {
                    let took = self.opened_in.get(name).copied();
                    (name.clone(), json!({ "took_ms": took }))
                })
                .collect();
            seen.insert(String::from("sessions"), Value::Object(views));
        }
        if let Some(named) = expected.get("holders").and_then(Value::as_object) {
            let holders: Map<String, Value> = named
                .keys()
                .map(|resource| (resource.clone(), holders(self.server.port, resource)))
                .collect();
            seen.insert(String::from("holders"), Value::Object(holders));
        }
        if expected.get("stats").is_some() {
            let answer = klock_testkit::http_client::request(
                self.server.port,
                "GET",
                "/v1/ns/default/stats",
                &[],
                b"",
            )
            .expect("read the stats");
            seen.insert(String::from("stats"), answer.body);
        }
        matches(expected, &Value::Object(seen), "")
    }
}

/// The agent ids holding `resource` in the default namespace, read from the server directly.
fn holders(port: u16, resource: &str) -> Value {
    let path = format!(
        "/v1/ns/default/resources/state?resource={}",
        klock_testkit::http_client::percent_encode(resource)
    );
    let answer = klock_testkit::http_client::request(port, "GET", &path, &[], b"")
        .expect("read the resource's state");
    let body = answer.body;
    let ids: Vec<Value> = body["holders"]
        .as_array()
        .map(|hs| hs.iter().map(|h| h["agent_id"].clone()).collect())
        .unwrap_or_default();
    Value::Array(ids)
}

/// Whether `seen` has every key `expected` names with the same value; `took_ms` compares
/// with `{"min", "max"}`.
fn matches(expected: &Value, seen: &Value, at: &str) -> Result<(), String> {
    match (expected, seen) {
        (Value::Object(want), Value::Object(got)) => {
            for (key, value) in want {
                let here = format!("{at}.{key}");
                let got = got.get(key).unwrap_or(&Value::Null);
                if key == "took_ms" {
                    let took = got.as_u64().ok_or(format!("{here}: no time taken"))?;
                    let (min, max) = (value["min"].as_u64(), value["max"].as_u64());
                    if min.is_some_and(|m| took < m) || max.is_some_and(|m| took > m) {
                        return Err(format!("{here}: {took} ms, expected {value}"));
                    }
                } else {
                    matches(value, got, &here)?;
                }
            }
            Ok(())
        }
        _ if expected == seen => Ok(()),
        _ => Err(format!("{at}: expected {expected}, got {seen}")),
    }
}

async fn run(file: &str) {
    let path = scenarios_dir().join(file);
    let text = std::fs::read_to_string(&path).expect("read the scenario");
    let scenario: Value = serde_json::from_str(&text).expect("a JSON scenario");
    let dir = tempfile::tempdir().expect("a directory");
    let server = ServerProcess::start(&dir.path().join("klock.redb"), 0);
    let link = LinkProcess::open(server.port);
    let budget = scenario["client"]["reconnect_timeout_ms"]
        .as_u64()
        .map_or(Duration::from_secs(30), Duration::from_millis);
    let connect = |port: u16| async move {
        Client::options(&format!("http://127.0.0.1:{port}"))
            .reconnect_timeout(budget)
            .connect()
            .await
            .expect("connect")
    };
    let linked = connect(link.port).await;
    let direct = connect(server.port).await;
    let mut run = Run {
        server,
        link: Arc::new(Mutex::new(link)),
        linked,
        direct,
        sessions: HashMap::new(),
        opened_in: HashMap::new(),
        blocks: Arc::default(),
    };
    let steps = scenario["steps"].as_array().expect("steps");
    for (i, step) in steps.iter().enumerate() {
        let step = step.as_object().expect("a step is an object");
        if let Err(e) = run.step(step).await {
            panic!("{file}: step {i} {step:?}: {e}");
        }
    }
}

fn scenario(file: &str) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        tokio::time::timeout(Duration::from_secs(120), run(file))
            .await
            .unwrap_or_else(|_| panic!("{file} ran past its 120 s bound"));
    });
}

macro_rules! scenarios {
    ($($test:ident => $file:literal,)*) => {
        $(
            #[test]
            fn $test() {
                scenario($file);
            }
        )*

        const FILES: &[&str] = &[$($file),*];
    };
}

scenarios! {
    short_cut_keeps_the_lease => "short-cut-keeps-the-lease.json",
    cut_past_the_ttl_loses_the_lease => "cut-past-the-ttl-loses-the-lease.json",
    freeze_past_the_ttl_loses_the_lease => "freeze-past-the-ttl-loses-the-lease.json",
    cut_call_raises_unreachable_within_its_budget => "cut-call-raises-unreachable-within-its-budget.json",
    frozen_call_raises_unreachable_within_its_budget => "frozen-call-raises-unreachable-within-its-budget.json",
    restart_keeps_the_grant => "restart-keeps-the-grant.json",
    delayed_link_keeps_the_lease => "delayed-link-keeps-the-lease.json",
    lost_answer_is_retried_once => "lost-answer-is-retried-once.json",
    grant_during_a_cut_is_found_after_restore => "grant-during-a-cut-is-found-after-restore.json",
}

#[test]
fn every_scenario_file_has_a_test() {
    let mut files: Vec<String> = std::fs::read_dir(scenarios_dir())
        .expect("list the scenarios")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".json"))
        .collect();
    files.sort();
    let mut listed: Vec<String> = FILES.iter().map(|f| (*f).to_owned()).collect();
    listed.sort();
    assert_eq!(files, listed, "add a line to scenarios! for each file");
}
