//! The control plane's benchmark report: `bash server/bench/run.sh` (or this program with the
//! path of a release `klock` binary) writes `server/bench/REPORT.md`.
//!
//! Everything is measured in one run on one machine, each row once in each of [`ROUNDS`]
//! rounds (figures are medians; a ratio is the median of each round's ratio, so the drift of
//! a shared machine hits both sides of it alike), as ratios where a peer is involved:
//! - acquire+release pairs/s over loopback HTTP (one request per operation) with 1 and 64
//!   client threads, against `klock serve --memory` and a durable server (group commit), with
//!   p50/p99 request latency;
//! - the same client against a bare axum JSON echo endpoint in this process: the floor of the
//!   transport on this machine;
//! - the batch endpoint (50 acquire + release_all pairs per request);
//! - Redis (`SET NX PX` + `DEL`) with the same thread counts, when `redis-server` is on PATH,
//!   without persistence and durable (`--appendonly yes --appendfsync always`: a sync before
//!   each answer, the peer of the durable server);
//! - restart time of a durable server with a log of 1M entries, and from a snapshot holding
//!   100k active leases.
//!
//! - the issue's targets, computed from the same run (64 clients);
//! - the cluster rows (`bench/cluster.rs`, issue 24): a three-node durable cluster's pairs/s
//!   through its leader and through a follower, each divided by the single-node durable row
//!   of the same round; the time from a SIGKILL of the leader to the first acknowledged write
//!   (over [`cluster::KILLS`] kills); a lagging node's catch-up by snapshot from 100k live
//!   leases. `--cluster-only` measures those alone (with the single-node durable rows they
//!   are divided by) and replaces only the report's cluster section.
//!
//! A benchmark, not a test: it asserts nothing and prints what it measured.
//!
//! `http_bench failover KLOCK [KILLS] [--log FILTER DIR]` measures the failover row alone and
//! prints it (each kill, then p50/p99/max), the nodes logging at FILTER into DIR if asked.
//!
//! `http_bench cluster-ab A B [--rounds N]` compares the cluster throughput rows of several
//! binaries the same way (`ab` does the single-node rows).
//!
//! For a profiler: `http_bench echo` serves the echo floor alone in its own process (it prints
//! its port), and `http_bench load PORT [echo|batch]` drives a server started by hand with the
//! 64-client load of one row (acquire+release pairs by default). `http_bench raw-echo` serves
//! the same echo with no HTTP library (tokio, and the head read by hand): what axum and hyper
//! cost per request, for comparison (DECISIONS, "what an HTTP stack of our own would buy").

#[path = "bench/cluster.rs"]
mod cluster;

use klock_testkit::process::Spawned;
use serde_json::{json, Value};
use std::borrow::Cow;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const RUN: Duration = Duration::from_secs(3);

/// A keep-alive HTTP/1.1 connection.
///
/// The load generator shares the machine's cores with the server it measures, so every
/// row's client does the same lean work per request, and no row pays for more than the
/// others: the request is written into one reused buffer, the answer's status line and
/// headers are read as bytes, and its body, read into another reused buffer, is parsed only
/// into the fields the row needs (serde's typed, borrowing parse: nothing is built for the
/// rest of it, which is still read and checked as JSON).
struct Conn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    port: u16,
    request: Vec<u8>,
    line: Vec<u8>,
    body: Vec<u8>,
}

impl Conn {
    fn new(port: u16) -> Conn {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_nodelay(true).unwrap();
        Conn {
            reader: BufReader::new(s.try_clone().unwrap()),
            writer: s,
            port,
            request: Vec::new(),
            line: Vec::new(),
            body: Vec::new(),
        }
    }

    /// Sends one request and reads its answer: the status and the body.
    fn call(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> (u16, &[u8]) {
        self.request.clear();
        write!(
            self.request,
            "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1:{}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
            self.port,
            body.len()
        )
        .unwrap();
        for (k, v) in headers {
            write!(self.request, "{k}: {v}\r\n").unwrap();
        }
        self.request.extend_from_slice(b"\r\n");
        self.request.extend_from_slice(body);
        self.writer.write_all(&self.request).expect("write");
        self.line.clear();
        self.reader
            .read_until(b'\n', &mut self.line)
            .expect("status line");
        // "HTTP/1.1 200 OK": the three digits after the first space.
        let status = self
            .line
            .get(9..12)
            .and_then(|c| std::str::from_utf8(c).ok()?.parse().ok())
            .expect("status");
        let mut length = 0;
        let mut close = false;
        loop {
            self.line.clear();
            self.reader
                .read_until(b'\n', &mut self.line)
                .expect("header");
            let l = self.line.trim_ascii_end();
            if l.is_empty() {
                break;
            }
            let Some(colon) = l.iter().position(|&b| b == b':') else {
                continue;
            };
            let (k, v) = (&l[..colon], l[colon + 1..].trim_ascii());
            if k.eq_ignore_ascii_case(b"content-length") {
                length = std::str::from_utf8(v)
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .expect("length");
            }
            // The server closes a connection after its request limit: open another.
            close |= k.eq_ignore_ascii_case(b"connection") && v == b"close";
        }
        self.body.resize(length, 0);
        self.reader.read_exact(&mut self.body).expect("body");
        if close {
            let reopened = Conn::new(self.port);
            (self.reader, self.writer) = (reopened.reader, reopened.writer);
        }
        (status, &self.body)
    }
}

/// What the pairs' client reads of an acquire's answer.
#[derive(serde::Deserialize)]
struct Acquired<'a> {
    #[serde(borrow)]
    verdict: Cow<'a, str>,
    #[serde(default)]
    leases: Vec<LeaseId>,
}

#[derive(serde::Deserialize)]
struct LeaseId {
    lease_id: u64,
}

/// What the batch client reads of a batch's answer: each result's verdict, if it has one.
#[derive(serde::Deserialize)]
struct BatchAnswer<'a> {
    #[serde(borrow)]
    results: Vec<BatchResult<'a>>,
}

#[derive(serde::Deserialize)]
struct BatchResult<'a> {
    #[serde(borrow, default)]
    ok: Option<BatchOk<'a>>,
}

#[derive(serde::Deserialize)]
struct BatchOk<'a> {
    #[serde(borrow, default)]
    verdict: Option<Cow<'a, str>>,
}

/// What the echo's client reads of its answer: the intents it sent (the same shape of work
/// as the pairs' client reading a grant).
#[derive(serde::Deserialize)]
struct Echoed<'a> {
    #[serde(borrow)]
    intents: Vec<Cow<'a, str>>,
}

/// Request latencies of one run, and how many pairs it completed.
struct Tally {
    pairs: u64,
    requests: u64,
    latencies_us: Vec<u64>,
    took: Duration,
}

impl Tally {
    fn per_sec(&self, n: u64) -> f64 {
        n as f64 / self.took.as_secs_f64()
    }

    fn percentile(&mut self, p: f64) -> f64 {
        self.latencies_us.sort_unstable();
        let i = ((self.latencies_us.len() as f64 - 1.0) * p).round() as usize;
        self.latencies_us.get(i).copied().unwrap_or(0) as f64 / 1000.0
    }
}

/// Runs `threads` copies of `work` (which returns pairs done and requests made per call)
/// for [`RUN`].
fn drive(
    threads: usize,
    work: impl Fn(usize) -> Box<dyn FnMut() -> (u64, u64) + Send> + Sync,
) -> Tally {
    let stop = Arc::new(AtomicBool::new(false));
    // Every client is set up (its session opened) before the clock starts.
    let steps: Vec<_> = (0..threads).map(work).collect();
    let started = Instant::now();
    let results: Vec<(u64, u64, Vec<u64>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = steps
            .into_iter()
            .map(|mut step| {
                let stop = Arc::clone(&stop);
                scope.spawn(move || {
                    let (mut pairs, mut requests, mut lat) = (0, 0, Vec::new());
                    while !stop.load(Ordering::Relaxed) {
                        let at = Instant::now();
                        let (p, r) = step();
                        let each = at.elapsed().as_micros() as u64 / r.max(1);
                        lat.extend(std::iter::repeat_n(each, r as usize));
                        pairs += p;
                        requests += r;
                    }
                    (pairs, requests, lat)
                })
            })
            .collect();
        std::thread::sleep(RUN);
        stop.store(true, Ordering::Relaxed);
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let took = started.elapsed();
    let mut t = Tally {
        pairs: 0,
        requests: 0,
        latencies_us: Vec::new(),
        took,
    };
    for (p, r, l) in results {
        t.pairs += p;
        t.requests += r;
        t.latencies_us.extend(l);
    }
    t
}

/// Starts `klock serve` and says how long it took until it listened.
fn start(binary: &str, args: &[&str]) -> (Spawned, Duration) {
    let started = Instant::now();
    let server = Spawned::start(std::path::Path::new(binary), args).expect("start klock serve");
    (server, started.elapsed())
}

/// Opens a session: its path prefix and token header value.
fn session(conn: &mut Conn, name: &str) -> (String, String) {
    let (status, answer) = conn.call(
        "POST",
        "/v1/ns/bench/sessions",
        &[],
        json!({"agent_id": name}).to_string().as_bytes(),
    );
    let v: Value = serde_json::from_slice(answer).unwrap_or(Value::Null);
    let token = v["session_token"].as_str();
    let token = token.unwrap_or_else(|| panic!("open answered {status}: {v}"));
    (
        format!("/v1/ns/bench/sessions/{}", v["session_id"]),
        token.to_owned(),
    )
}

fn pairs(port: u16, threads: usize) -> Tally {
    drive(threads, |t| {
        let mut conn = Conn::new(port);
        let (base, token) = session(&mut conn, &format!("c{t}"));
        let (acquire, release) = (format!("{base}/acquire"), format!("{base}/release"));
        let mut body = Vec::new();
        let mut i = 0u64;
        Box::new(move || {
            i += 1;
            let h = [("klock-session-token", token.as_str())];
            body.clear();
            write!(body, r#"{{"intents":["MUTATES FILE:/b/{t}/{}"]}}"#, i % 16).unwrap();
            let (status, answer) = conn.call("POST", &acquire, &h, &body);
            let granted = serde_json::from_slice::<Acquired>(answer)
                .ok()
                .filter(|a| status == 200 && a.verdict == "GRANTED")
                .and_then(|a| a.leases.first().map(|l| l.lease_id));
            // Only an acknowledged pair counts (a cluster node may answer 503 meanwhile).
            let Some(lease) = granted else { return (0, 1) };
            body.clear();
            write!(body, r#"{{"lease_ids":[{lease}]}}"#).unwrap();
            let (released, _) = conn.call("POST", &release, &h, &body);
            (u64::from(released == 200), 2)
        })
    })
}

const PER_BATCH: usize = 50;

fn batched(port: u16, threads: usize) -> Tally {
    drive(threads, |t| {
        let mut conn = Conn::new(port);
        let (base, token) = session(&mut conn, &format!("b{t}"));
        let sid: u64 = base.rsplit('/').next().unwrap().parse().unwrap();
        let mut ops = Vec::new();
        for i in 0..PER_BATCH {
            ops.push(json!({"op": "acquire", "session": sid, "token": token, "intents": [format!("MUTATES FILE:/b/{t}/{i}")]}));
            ops.push(json!({"op": "release_all", "session": sid, "token": token}));
        }
        let body = json!({ "operations": ops }).to_string();
        Box::new(move || {
            let (_, answer) = conn.call("POST", "/v1/ns/bench/batch", &[], body.as_bytes());
            (acquired(answer), 1)
        })
    })
}

/// How many acquires a batch's answer acknowledged (`{"ok": ...}` with a lease granted).
fn acquired(answer: &[u8]) -> u64 {
    let Ok(answer) = serde_json::from_slice::<BatchAnswer>(answer) else {
        return 0;
    };
    let granted = |r: &&BatchResult| {
        let verdict = r.ok.as_ref().and_then(|ok| ok.verdict.as_deref());
        verdict == Some("GRANTED")
    };
    answer.results.iter().filter(granted).count() as u64
}

/// Runs `serve` on a listener of a free loopback port, on two tokio workers in a thread of its
/// own (the echo floors' servers); the port.
fn serve_on_two_workers<F>(serve: impl FnOnce(tokio::net::TcpListener) -> F + Send + 'static) -> u16
where
    F: std::future::Future<Output = ()>,
{
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap().port()).unwrap();
            serve(listener).await;
        });
    });
    rx.recv().unwrap()
}

fn echo_server() -> u16 {
    use axum::routing::post;
    serve_on_two_workers(|listener| async move {
        let app = axum::Router::new().route(
            "/echo",
            post(|axum::Json(v): axum::Json<Value>| async move { axum::Json(v) }),
        );
        axum::serve(listener, app).await.unwrap();
    })
}

/// The most bytes a raw echo request's head, or its body, may take (the server's body limit).
const RAW_ECHO_LIMIT: usize = 1 << 20;

/// The echo floor without axum or hyper: two tokio workers; per request the head is read up to
/// its blank line, `Content-Length` found by hand, the body parsed into a `Value` and written
/// back, as the axum echo does. Anything else (no length, a bad body, a head or body over
/// [`RAW_ECHO_LIMIT`]) closes the connection.
fn raw_echo_server() -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    async fn serve(mut s: tokio::net::TcpStream) -> Option<()> {
        s.set_nodelay(true).ok()?;
        let (mut input, mut out, mut chunk) = (Vec::new(), Vec::new(), [0u8; 8192]);
        loop {
            let head = loop {
                if let Some(at) = input.windows(4).position(|w| w == b"\r\n\r\n") {
                    break at + 4;
                }
                if input.len() > RAW_ECHO_LIMIT {
                    return None;
                }
                match s.read(&mut chunk).await.ok()? {
                    0 => return None,
                    n => input.extend_from_slice(&chunk[..n]),
                }
            };
            let length: usize = std::str::from_utf8(&input[..head])
                .ok()?
                .split("\r\n")
                .filter_map(|line| line.split_once(':'))
                .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))?
                .1
                .trim()
                .parse()
                .ok()
                .filter(|&n| n <= RAW_ECHO_LIMIT)?;
            while input.len() < head + length {
                match s.read(&mut chunk).await.ok()? {
                    0 => return None,
                    n => input.extend_from_slice(&chunk[..n]),
                }
            }
            let v: Value = serde_json::from_slice(&input[head..head + length]).ok()?;
            let body = serde_json::to_vec(&v).ok()?;
            out.clear();
            write!(
                out,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                body.len()
            )
            .ok()?;
            out.extend_from_slice(&body);
            s.write_all(&out).await.ok()?;
            input.drain(..head + length);
        }
    }
    serve_on_two_workers(|listener| async move {
        loop {
            if let Ok((s, _)) = listener.accept().await {
                tokio::spawn(serve(s));
            }
        }
    })
}

fn echo(port: u16, threads: usize) -> Tally {
    drive(threads, |_| {
        let mut conn = Conn::new(port);
        let body = json!({"intents": ["MUTATES FILE:/b/x"]}).to_string();
        Box::new(move || {
            let (status, answer) = conn.call("POST", "/echo", &[], body.as_bytes());
            let echoed = serde_json::from_slice::<Echoed>(answer).map(|e| e.intents.len());
            assert!(
                status == 200 && echoed.is_ok_and(|n| n == 1),
                "the echo answered {status}"
            );
            (0, 1)
        })
    })
}

/// A RESP client for `SET key v NX PX 60000` + `DEL key`.
fn redis(port: u16, threads: usize) -> Tally {
    drive(threads, |t| {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("redis");
        s.set_nodelay(true).unwrap();
        let mut reader = BufReader::new(s.try_clone().unwrap());
        let mut writer = s;
        let mut i = 0u64;
        let (mut key, mut command, mut line) = (Vec::new(), Vec::new(), Vec::new());
        Box::new(move || {
            i += 1;
            key.clear();
            write!(key, "b:{t}:{}", i % 16).unwrap();
            command.clear();
            write!(command, "*6\r\n$3\r\nSET\r\n${}\r\n", key.len()).unwrap();
            command.extend_from_slice(&key);
            command.extend_from_slice(b"\r\n$1\r\n1\r\n$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n60000\r\n");
            writer.write_all(&command).unwrap();
            line.clear();
            reader.read_until(b'\n', &mut line).unwrap();
            // Only a lock taken counts, as only a grant does for klock.
            let set = line.starts_with(b"+OK");
            command.clear();
            write!(command, "*2\r\n$3\r\nDEL\r\n${}\r\n", key.len()).unwrap();
            command.extend_from_slice(&key);
            command.extend_from_slice(b"\r\n");
            writer.write_all(&command).unwrap();
            line.clear();
            reader.read_until(b'\n', &mut line).unwrap();
            (u64::from(set && line.starts_with(b":1")), 2)
        })
    })
}

/// Starts `redis-server` on a free port: without persistence, or (`aof_dir`) with an
/// append-only file in that directory, synced before each answer (`appendfsync always`).
fn start_redis(aof_dir: Option<&std::path::Path>) -> Option<(Child, u16)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()?
        .port();
    let port_text = port.to_string();
    let mut args = vec!["--port", &port_text, "--bind", "127.0.0.1", "--save", ""];
    match aof_dir {
        None => args.extend(["--appendonly", "no"]),
        Some(dir) => {
            args.extend(["--appendonly", "yes", "--appendfsync", "always", "--dir"]);
            args.push(dir.to_str()?);
        }
    }
    let child = Command::new("redis-server")
        .args(&args)
        .stdout(Stdio::null())
        .spawn()
        .ok()?;
    for _ in 0..100 {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Some((child, port));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// Fills a durable server with `entries` log entries (batches of acquire/release_all).
fn fill_log(port: u16, entries: usize) {
    let mut conn = Conn::new(port);
    let (base, token) = session(&mut conn, "filler");
    let sid: u64 = base.rsplit('/').next().unwrap().parse().unwrap();
    let per = 1000;
    let ops: Vec<Value> = (0..per / 2)
        .flat_map(|i| {
            [
                json!({"op": "acquire", "session": sid, "token": token, "intents": [format!("MUTATES FILE:/f/{i}")]}),
                json!({"op": "release_all", "session": sid, "token": token}),
            ]
        })
        .collect();
    let body = json!({ "operations": ops }).to_string();
    for _ in 0..entries / per {
        conn.call("POST", "/v1/ns/bench/batch", &[], body.as_bytes());
    }
}

/// Holds `leases` active leases (in batches of 1,000 acquires over 100 sessions); how many
/// were granted.
fn hold_leases(port: u16, leases: usize) -> usize {
    let mut conn = Conn::new(port);
    let sessions: Vec<(u64, String)> = (0..100)
        .map(|i| {
            let (base, token) = session(&mut conn, &format!("holder{i}"));
            (base.rsplit('/').next().unwrap().parse().unwrap(), token)
        })
        .collect();
    let mut granted = 0;
    for chunk in 0..leases / 1000 {
        let ops: Vec<Value> = (0..1000)
            .map(|i| {
                let (sid, token) = &sessions[(chunk * 1000 + i) % 100];
                json!({"op": "acquire", "session": sid, "token": token, "ttl_ms": 300000,
                       "intents": [format!("MUTATES FILE:/h/{chunk}/{i}")]})
            })
            .collect();
        let body = json!({ "operations": ops }).to_string();
        let (_, answer) = conn.call("POST", "/v1/ns/bench/batch", &[], body.as_bytes());
        granted += acquired(answer) as usize;
    }
    granted
}

/// Rounds of the report: each row is measured once per round.
const ROUNDS: usize = 3;

// The rows of the report, in its order.
const ECHO: &str = "bare axum JSON echo (the floor)";
const MEMORY: &str = "klock serve, memory";
const MEMORY_BATCH: &str = "klock serve, memory, batch endpoint (50 pairs a request)";
const DURABLE: &str = "klock serve, durable (group commit)";
const DURABLE_BATCH: &str =
    "klock serve, durable (group commit), batch endpoint (50 pairs a request)";
const REDIS: &str = "Redis 7, SET NX PX + DEL (no persistence)";
const REDIS_DURABLE: &str = "Redis 7, SET NX PX + DEL (appendfsync always)";
const ROWS: [&str; 7] = [
    ECHO,
    MEMORY,
    MEMORY_BATCH,
    DURABLE,
    DURABLE_BATCH,
    REDIS,
    REDIS_DURABLE,
];

/// One measurement of a row.
#[derive(Clone, Copy)]
struct Sample {
    pairs: f64,
    requests: f64,
    p50: f64,
    p99: f64,
}

/// The measurements of a run: per (row, clients), one sample per round, in round order.
#[derive(Default)]
struct Samples(std::collections::BTreeMap<(&'static str, usize), Vec<Sample>>);

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

impl Samples {
    fn add(&mut self, row: &'static str, threads: usize, mut t: Tally) {
        let sample = Sample {
            pairs: t.per_sec(t.pairs),
            requests: t.per_sec(t.requests),
            p50: t.percentile(0.5),
            p99: t.percentile(0.99),
        };
        eprintln!(
            "  {row}, {threads} clients: {:.0} pairs/s, {:.0} requests/s",
            sample.pairs, sample.requests
        );
        self.0.entry((row, threads)).or_default().push(sample);
    }

    /// The median of `f` over a row's rounds.
    fn median(&self, row: &str, threads: usize, f: impl Fn(&Sample) -> f64) -> Option<f64> {
        let v = self.0.get(&(row, threads))?;
        Some(median(v.iter().map(f).collect()))
    }

    /// The median over rounds of `f(a) ÷ f(b)` taken within each round.
    fn ratio(
        &self,
        (a, a_threads): (&str, usize),
        (b, b_threads): (&str, usize),
        f: impl Fn(&Sample) -> f64,
    ) -> Option<f64> {
        let (a, b) = (self.0.get(&(a, a_threads))?, self.0.get(&(b, b_threads))?);
        Some(median(a.iter().zip(b).map(|(x, y)| f(x) / f(y)).collect()))
    }

    /// The table of one request per operation (and the batch rows beside it).
    fn table(&self) -> String {
        let mut out = String::from(
            "## One request per operation\n\n| server | clients | pairs/s | requests/s | ÷ echo floor (same clients) | p50 ms | p99 ms |\n|---|---:|---:|---:|---:|---:|---:|\n",
        );
        for row in ROWS {
            for threads in [1, 64] {
                let Some(requests) = self.median(row, threads, |s| s.requests) else {
                    continue;
                };
                let pairs = match self.median(row, threads, |s| s.pairs) {
                    Some(p) if row != ECHO => format!("{p:.0}"),
                    _ => String::from("–"),
                };
                let floor = if row == MEMORY_BATCH || row == DURABLE_BATCH {
                    String::from("–")
                } else {
                    let r = self.ratio((row, threads), (ECHO, threads), |s| s.requests);
                    format!("{:.2}", r.unwrap_or(f64::NAN))
                };
                out.push_str(&format!(
                    "| {row} | {threads} | {pairs} | {requests:.0} | {floor} | {:.2} | {:.2} |\n",
                    self.median(row, threads, |s| s.p50).unwrap_or(f64::NAN),
                    self.median(row, threads, |s| s.p99).unwrap_or(f64::NAN),
                ));
            }
        }
        if !self.0.contains_key(&(REDIS, 64)) {
            out.push_str("| Redis | – | not measured: `redis-server` is not on PATH | | | | |\n");
        }
        out
    }

    /// The issue's targets (64 clients, this run), met or not, and the durable path beside
    /// its peer.
    fn targets(&self) -> String {
        let met = |ok: bool| if ok { "met" } else { "missed" };
        let mut out = String::from(
            "\n## Targets\n\nAll at 64 clients, from the rounds above (a ratio is the median of each round's ratio).\n\n| target | measured | |\n|---|---:|---|\n",
        );
        for (what, row, floor) in [("memory", MEMORY, 0.70), ("durable", DURABLE, 0.50)] {
            if let Some(r) = self.ratio((row, 64), (ECHO, 64), |s| s.requests) {
                out.push_str(&format!(
                    "| one request per operation, {what}: ≥ {floor:.2}× the echo floor | {r:.2}× | {} |\n",
                    met(r >= floor)
                ));
            }
        }
        match self.ratio((MEMORY, 64), (REDIS, 64), |s| s.pairs) {
            Some(r) => out.push_str(&format!(
                "| per-request pairs/s, memory: ≥ 0.5× Redis's SET NX PX + DEL pairs/s | {r:.2}× | {} |\n",
                met(r >= 0.5)
            )),
            None => out.push_str(
                "| per-request pairs/s, memory: ≥ 0.5× Redis's SET NX PX + DEL pairs/s | not measured (no redis-server) | |\n",
            ),
        }
        if let Some(batch) = self.median(DURABLE_BATCH, 64, |s| s.pairs) {
            out.push_str(&format!(
                "| batch endpoint, durable: ≥ 100,000 pairs/s | {batch:.0} pairs/s | {} |\n",
                met(batch >= 100_000.0)
            ));
        }
        out.push_str("\nBeside them (no target):\n\n| what | measured |\n|---|---:|\n");
        if let Some(r) = self.ratio((DURABLE, 64), (REDIS_DURABLE, 64), |s| s.pairs) {
            out.push_str(&format!(
                "| per-request pairs/s, durable ÷ Redis with appendfsync always | {r:.2}× |\n"
            ));
        }
        if let Some(r) = self.ratio((MEMORY_BATCH, 64), (REDIS, 64), |s| s.pairs) {
            out.push_str(&format!(
                "| batch endpoint pairs/s, memory ÷ Redis per request (no persistence) | {r:.2}× |\n"
            ));
        }
        if let Some(r) = self.ratio((DURABLE_BATCH, 64), (REDIS_DURABLE, 64), |s| s.pairs) {
            out.push_str(&format!(
                "| batch endpoint pairs/s, durable ÷ Redis per request (appendfsync always) | {r:.2}× |\n"
            ));
        }
        out
    }
}

/// Removes a data file and the log beside it.
fn remove_data(data: &std::path::Path) {
    let _ = std::fs::remove_file(data);
    let _ = std::fs::remove_file(klock_server::store::log_path(data));
}

/// A/B mode (`http_bench ab KLOCK_A KLOCK_B [KLOCK_C ...] [--rounds N]`): at 64 clients, the
/// one-request-per-operation pairs/s and the batch endpoint's pairs/s of several binaries,
/// memory and durable, in rotating order each round (A B C, then B C A, ...) so that the
/// machine's drift hits each alike; prints each round's figures and the median ratio to A per
/// binary and row.
fn ab(binaries: &[String], rounds: usize) {
    let dir = std::env::temp_dir().join(format!("klock-ab-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let data = dir.join("ab.redb");
    let modes: [(&str, Vec<&str>); 2] = [
        ("memory", vec!["--memory"]),
        ("durable", vec!["--data", data.to_str().unwrap()]),
    ];
    let n = binaries.len();
    // ratios[mode][0 per request, 1 batch][binary]: each round's pairs/s ÷ binary A's.
    let mut ratios = vec![vec![vec![Vec::new(); n]; 2]; modes.len()];
    for round in 0..rounds {
        for (m, (label, args)) in modes.iter().enumerate() {
            let mut measured = vec![[0.0f64; 2]; n];
            for k in 0..n {
                let which = (round + k) % n;
                let (server, _) = start(&binaries[which], args);
                let t = pairs(server.port, 64);
                let b = batched(server.port, 64);
                measured[which] = [t.per_sec(t.pairs), b.per_sec(b.pairs)];
                drop(server);
                remove_data(&data);
            }
            let shown: Vec<String> = measured
                .iter()
                .map(|[t, b]| format!("{t:.0}/{b:.0}"))
                .collect();
            eprintln!(
                "round {round} {label}: pairs/s per request/batch {}",
                shown.join(" ")
            );
            for (k, got) in measured.iter().enumerate() {
                for way in 0..2 {
                    ratios[m][way][k].push(got[way] / measured[0][way]);
                }
            }
        }
    }
    for (m, (label, _)) in modes.iter().enumerate() {
        for (way, name) in ["one request per operation", "batch endpoint"]
            .iter()
            .enumerate()
        {
            for (k, binary) in binaries.iter().enumerate().skip(1) {
                let v = &mut ratios[m][way][k];
                v.sort_by(f64::total_cmp);
                let median = if v.len() % 2 == 1 {
                    v[v.len() / 2]
                } else {
                    (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
                };
                let shown: Vec<String> = v.iter().map(|x| format!("{x:.3}")).collect();
                println!(
                    "{label}, {name}, 64 clients: {binary} ÷ {}: median {median:.3} over {rounds} rounds (sorted: {})",
                    binaries[0],
                    shown.join(" ")
                );
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().map(String::as_str);
    if mode == Some("ab") || mode == Some("cluster-ab") {
        let mut binaries: Vec<String> = args[1..].to_vec();
        let mut rounds = 6;
        if let Some(at) = binaries.iter().position(|a| a == "--rounds") {
            rounds = binaries
                .get(at + 1)
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            binaries.drain(at..(at + 2).min(binaries.len()));
        }
        if binaries.len() < 2 || rounds == 0 {
            eprintln!("usage: http_bench ab|cluster-ab KLOCK_A KLOCK_B [KLOCK_C ...] [--rounds N]");
            std::process::exit(2);
        }
        if mode == Some("ab") {
            ab(&binaries, rounds);
        } else {
            cluster::ab(&binaries, rounds);
        }
        return;
    }
    // The failover row alone (issue 24's failover time), printed, not written to the report.
    if mode == Some("failover") {
        cluster::failover_only(&args[1..]);
        return;
    }
    // The echo floor alone, in a process of its own (for a profiler or `perf stat`).
    if let Some(which @ ("echo" | "raw-echo")) = mode {
        let port = if which == "echo" {
            echo_server()
        } else {
            raw_echo_server()
        };
        println!("{which} floor listening on port {port}");
        loop {
            std::thread::park();
        }
    }
    // Load only (for a profiler attached to a server started by hand).
    if args.first().map(String::as_str) == Some("load") {
        let Some(port) = args.get(1).and_then(|p| p.parse().ok()) else {
            eprintln!("usage: http_bench load PORT [echo|batch]");
            std::process::exit(2);
        };
        if args.get(2).map(String::as_str) == Some("echo") {
            let t = echo(port, 64);
            println!("{:.0} requests/s", t.per_sec(t.requests));
        } else if args.get(2).map(String::as_str) == Some("batch") {
            let t = batched(port, 64);
            println!("{:.0} pairs/s", t.per_sec(t.pairs));
        } else {
            let t = pairs(port, 64);
            println!("{:.0} pairs/s", t.per_sec(t.pairs));
        }
        return;
    }
    // `--cluster-only`: the cluster rows (and the single-node durable rows they are divided
    // by) alone, replacing the report's cluster section and keeping the rest of it.
    let cluster_only = args.iter().any(|a| a == "--cluster-only");
    let args: Vec<&String> = args.iter().filter(|a| *a != "--cluster-only").collect();
    let (Some(binary), Some(out)) = (args.first(), args.get(1)) else {
        eprintln!(
            "usage: http_bench KLOCK_BINARY REPORT.md [--cluster-only]   (see server/bench/run.sh)"
        );
        std::process::exit(2);
    };
    let dir = std::env::temp_dir().join(format!("klock-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let data = dir.join("bench.redb");
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load = load
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ");
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mut report = String::from("# klock serve benchmark report\n\n");
    report.push_str(&format!(
        "Written by `bash server/bench/run.sh`. Loopback HTTP/1.1 keep-alive, one connection per client \
         thread, {} s per measurement, every row measured once in each of {ROUNDS} rounds in one run on this \
         machine ({cpus} CPUs; load average at start {load}). Figures are medians over the rounds; a ratio is the \
         median of the ratios taken within each round. The client threads share the cores with the server they \
         measure, so every row's client does the same lean work per request: the request written into a reused \
         buffer, the answer read as bytes and its body parsed only into the fields the row checks (a grant's \
         verdict and lease id, a batch's verdicts, the echoed intents, Redis's reply line); a pair counts only \
         when its acquire was granted (or SET answered OK) and its release acknowledged.\n\n",
        RUN.as_secs(),
    ));
    let echo_port = echo_server();
    let aof_dir = dir.join("redis");
    std::fs::create_dir_all(&aof_dir).unwrap();
    // Every row is measured once a round, rounds one after another, so that the machine's
    // drift (other jobs on a shared host) hits every row alike; a row's figures are medians
    // over the rounds, and a ratio is the median of the same round's ratios.
    let mut samples = Samples::default();
    for round in 0..ROUNDS {
        eprintln!("round {} of {ROUNDS}", round + 1);
        let mut servers = vec![(DURABLE, vec!["--data", data.to_str().unwrap()])];
        if !cluster_only {
            for threads in [1, 64] {
                samples.add(ECHO, threads, echo(echo_port, threads));
            }
            servers.insert(0, (MEMORY, vec!["--memory"]));
        }
        for (row, args) in servers {
            let (server, _) = start(binary, &args);
            let clients: &[usize] = if cluster_only { &[64] } else { &[1, 64] };
            for threads in clients {
                samples.add(row, *threads, pairs(server.port, *threads));
            }
            let batch_row = if row == MEMORY {
                MEMORY_BATCH
            } else {
                DURABLE_BATCH
            };
            samples.add(batch_row, 64, batched(server.port, 64));
            drop(server);
            remove_data(&data);
        }
        cluster::throughput_round(binary, &mut samples);
        if cluster_only {
            continue;
        }
        for (row, aof) in [(REDIS, None), (REDIS_DURABLE, Some(aof_dir.as_path()))] {
            let Some((mut child, port)) = start_redis(aof) else {
                continue;
            };
            for threads in [1, 64] {
                samples.add(row, threads, redis(port, threads));
            }
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_dir_all(&aof_dir);
            std::fs::create_dir_all(&aof_dir).unwrap();
        }
    }
    if !cluster_only {
        report.push_str(&samples.table());
        report.push_str(&restart_rows(binary, &data));
        report.push_str(&samples.targets());
    }
    eprintln!("cluster failover: {} kills of the leader", cluster::KILLS);
    let failover = cluster::failover(binary);
    eprintln!("cluster catch-up by snapshot");
    let catch_up = cluster::catch_up(binary);
    let _ = std::fs::remove_dir_all(&dir);
    let note = if cluster_only {
        // The rest of the report is kept from its own run.
        let kept = std::fs::read_to_string(out).unwrap_or_default();
        // Kept up to the section, ending in one newline (the section starts after a blank line).
        report = match kept.find(cluster::HEADING) {
            Some(at) => format!("{}\n", kept[..at].trim_end()),
            None if kept.is_empty() => report,
            None => format!("{}\n", kept.trim_end()),
        };
        format!(
            "Measured alone by `bash server/bench/run.sh --cluster-only` (its own run, with its own \
             single-node durable rows; {ROUNDS} rounds, {} s per measurement; {cpus} CPUs; load \
             average at start {load}). ",
            RUN.as_secs()
        )
    } else {
        String::new()
    };
    report.push('\n');
    report.push_str(&cluster::section(
        &samples,
        (DURABLE, DURABLE_BATCH),
        &failover,
        &catch_up,
        &note,
    ));
    std::fs::write(out, &report).expect("write the report");
    println!("{report}");
}

/// The restart rows: a durable server's restart with a log of 1M entries, and from a
/// snapshot holding 100k active leases.
fn restart_rows(binary: &str, data: &std::path::Path) -> String {
    let mut report = String::from("\n## Restart\n\n| what | restart to listening |\n|---|---:|\n");
    eprintln!("restart with a log of 1M entries");
    let (server, _) = start(
        binary,
        &["--data", data.to_str().unwrap(), "--snapshot-every", "0"],
    );
    fill_log(server.port, 1_000_000);
    drop(server);
    let (server, took) = start(
        binary,
        &["--data", data.to_str().unwrap(), "--snapshot-every", "0"],
    );
    report.push_str(&format!(
        "| a log of 1,000,000 entries, no snapshot | {:.2} s |\n",
        took.as_secs_f64()
    ));
    drop(server);
    remove_data(data);
    eprintln!("restart from a snapshot of 100k leases");
    let (server, _) = start(
        binary,
        &[
            "--data",
            data.to_str().unwrap(),
            "--snapshot-every",
            "100000",
        ],
    );
    hold_leases(server.port, 100_000);
    drop(server);
    let (server, took) = start(
        binary,
        &[
            "--data",
            data.to_str().unwrap(),
            "--snapshot-every",
            "100000",
        ],
    );
    report.push_str(&format!(
        "| a snapshot holding 100,000 active leases | {:.2} s |\n",
        took.as_secs_f64()
    ));
    drop(server);
    remove_data(data);
    report
}
