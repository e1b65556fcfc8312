//! The cluster rows of the benchmark report (issue 24's targets): a three-node loopback
//! cluster of real `klock serve --node-id` processes on durable storage, default election
//! settings (heartbeat 100 ms, election timeout 400-800 ms).
//!
//! Contract:
//! - [`throughput_round`]: one round's pairs/s of a fresh cluster at 64 clients, one request
//!   per operation and the batch endpoint, through the leader and through a follower (which
//!   proxies to the leader); the report divides each by the single-node durable row of the
//!   same round. Then one client through each, for the latency a follower adds (printed by
//!   [`ab`] only).
//! - [`failover`]: a client writes continuously (acquire+release pairs) through the two
//!   followers; the leader is SIGKILLed; the time from the kill to the first acknowledged
//!   (GRANTED) acquire sent after the kill through a survivor; the killed node is restarted
//!   and caught up before the next kill. The client retries a refused or failed write after
//!   [`RETRY`], not after the 503's `Retry-After: 1` (the row measures the cluster, not a
//!   client's backoff).
//! - [`catch_up`]: a follower stopped, the cluster then holding 100k live leases (its logs
//!   purged behind snapshots, so the follower cannot catch up from the log), the follower
//!   restarted: the time until its applied index reaches the leader's.
//! - [`section`]: the report's section of these rows and their targets, met or missed.
//!
//! A benchmark: a step that cannot go on (no leader within [`WAIT`]) stops the run with a
//! message naming it; nothing is asserted about the figures.

use crate::{batched, hold_leases, median, pairs, Samples};
use klock_testkit::cluster::Cluster;
use klock_testkit::http_client::request;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long any one wait of the benchmark may take before it gives up.
const WAIT: Duration = Duration::from_secs(30);
/// How long the writing client waits before it retries a refused or failed write.
const RETRY: Duration = Duration::from_millis(10);
/// Leader kills of the failover row.
pub const KILLS: usize = 24;
/// Live leases the cluster holds while a node catches up.
const LEASES: usize = 100_000;

// The throughput rows (64 clients each), in the report's order.
pub const LEADER: &str = "three nodes, through the leader";
pub const FOLLOWER: &str = "three nodes, through a follower (proxied)";
pub const LEADER_BATCH: &str = "three nodes, batch endpoint, through the leader";
pub const FOLLOWER_BATCH: &str = "three nodes, batch endpoint, through a follower (proxied)";
// One client, for the latency a follower adds without load (`cluster-ab` prints them; the
// report does not).
pub const LEADER_ONE: &str = "three nodes, through the leader, one client";
pub const FOLLOWER_ONE: &str = "three nodes, through a follower (proxied), one client";

/// Three nodes of `binary`, initialised, their leader taking writes.
fn start(binary: &str) -> Cluster {
    start_with(binary, None, &[])
}

/// [`start`], the nodes logging at `log` (a `--log-level` filter) to files in the cluster's
/// directory ([`Cluster::log`]) if given, else logging errors only to stderr, with `flags`
/// besides.
fn start_with(binary: &str, log: Option<&str>, flags: &[&str]) -> Cluster {
    let mut cluster = Cluster::unstarted(Path::new(binary), 3);
    // Openraft's warnings while a peer is down would bury the benchmark's progress.
    let level = log.unwrap_or("error");
    cluster.extra = vec![String::from("--log-level"), level.to_owned()];
    cluster.extra.extend(flags.iter().map(|f| (*f).to_owned()));
    cluster.logged = log.is_some();
    cluster.wait = WAIT;
    cluster.start_all();
    cluster.init();
    cluster.takes_writes("bench", "ready");
    cluster
}

/// One round of the throughput rows on a fresh cluster (module contract).
pub fn throughput_round(binary: &str, samples: &mut Samples) {
    let cluster = start(binary);
    let leader = cluster.leader();
    let follower = (leader + 1) % 3;
    let (lp, fp) = (cluster.ports[leader], cluster.ports[follower]);
    samples.add(LEADER, 64, pairs(lp, 64));
    samples.add(FOLLOWER, 64, pairs(fp, 64));
    samples.add(LEADER_BATCH, 64, batched(lp, 64));
    samples.add(FOLLOWER_BATCH, 64, batched(fp, 64));
    samples.add(LEADER_ONE, 1, pairs(lp, 1));
    samples.add(FOLLOWER_ONE, 1, pairs(fp, 1));
}

/// A/B of the throughput rows (`http_bench cluster-ab KLOCK_A KLOCK_B ... [--rounds N]`):
/// each round measures every binary's cluster, in rotating order, and prints each row's
/// median pairs/s and p50 per binary, and the median of the rounds' ratios to binary A (and
/// each round's).
pub fn ab(binaries: &[String], rounds: usize) {
    let mut samples: Vec<Samples> = binaries.iter().map(|_| Samples::default()).collect();
    for round in 0..rounds {
        for k in 0..binaries.len() {
            let which = (round + k) % binaries.len();
            eprintln!("round {} of {rounds}: {}", round + 1, binaries[which]);
            throughput_round(&binaries[which], &mut samples[which]);
        }
    }
    let rows = [
        (LEADER, 64),
        (FOLLOWER, 64),
        (LEADER_BATCH, 64),
        (FOLLOWER_BATCH, 64),
        (LEADER_ONE, 1),
        (FOLLOWER_ONE, 1),
    ];
    for (row, clients) in rows {
        let pairs = |k: usize| {
            samples[k]
                .median(row, clients, |s| s.pairs)
                .unwrap_or(f64::NAN)
        };
        let p50 = |k: usize| {
            samples[k]
                .median(row, clients, |s| s.p50)
                .unwrap_or(f64::NAN)
        };
        for (k, binary) in binaries.iter().enumerate().skip(1) {
            let a = &samples[0].0[&(row, clients)];
            let b = &samples[k].0[&(row, clients)];
            let ratios: Vec<f64> = a.iter().zip(b).map(|(a, b)| b.pairs / a.pairs).collect();
            let each: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
            println!(
                "{row}, {clients} clients: {} {:.0} pairs/s (p50 {:.2} ms), {binary} {:.0} pairs/s (p50 {:.2} ms): ratio median {:.2} over {rounds} rounds ({})",
                binaries[0],
                pairs(0),
                p50(0),
                pairs(k),
                p50(k),
                median(ratios),
                each.join(", ")
            );
        }
    }
}

/// What the failover row measured: each kill's time to the first acknowledged write, and
/// each restarted node's time to catch up.
pub struct Failover {
    kills: Vec<Duration>,
    /// From each kill until a survivor said it leads (`/raft/status`).
    elected: Vec<Duration>,
    rejoins: Vec<Duration>,
}

/// An acknowledged write of the writing client: when it was sent and when answered.
struct Ack {
    sent: Instant,
    answered: Instant,
}

/// The writing client: acquire+release pairs through `targets` in turn, each acknowledged
/// acquire reported on `acks`, until `stop`.
fn writer(
    targets: Arc<Mutex<Vec<u16>>>,
    acks: mpsc::Sender<Ack>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let call = |port: u16, path: &str, token: &str, body: Value| {
            let headers = [("klock-session-token", token)];
            request(port, "POST", path, &headers, body.to_string().as_bytes())
                .ok()
                .filter(|a| a.status == 200)
        };
        let mut session: Option<(String, String)> = None;
        let mut i = 0u64;
        while !stop.load(Ordering::Relaxed) {
            i += 1;
            let port = {
                let targets = targets.lock().unwrap();
                targets[i as usize % targets.len()]
            };
            let Some((base, token)) = session.clone() else {
                let opened = call(port, "/v1/ns/bench/sessions", "", json!({"agent_id": "w"}));
                match opened {
                    Some(a) => {
                        let token = a.body["session_token"].as_str().unwrap_or("").to_owned();
                        let base = format!("/v1/ns/bench/sessions/{}", a.body["session_id"]);
                        session = Some((base, token));
                    }
                    None => std::thread::sleep(RETRY),
                }
                continue;
            };
            let sent = Instant::now();
            let body = json!({"intents": [format!("MUTATES FILE:/failover/{i}")]});
            match call(port, &format!("{base}/acquire"), &token, body) {
                Some(a) if a.body["verdict"] == "GRANTED" => {
                    let answered = Instant::now();
                    let _ = acks.send(Ack { sent, answered });
                    let lease = a.body["leases"][0]["lease_id"].clone();
                    let body = json!({ "lease_ids": [lease] });
                    call(port, &format!("{base}/release"), &token, body);
                }
                _ => std::thread::sleep(RETRY),
            }
        }
    })
}

/// The failover row (module contract): [`KILLS`] kills.
pub fn failover(binary: &str) -> Failover {
    failover_kills(binary, KILLS, None)
}

/// The failover row alone (`http_bench failover KLOCK [KILLS] [--log FILTER DIR]`): `kills`
/// kills, each printed with its wall-clock time, and their percentiles; with `--log`, the
/// nodes log at FILTER and their logs are copied to DIR at the end (where the time goes).
pub fn failover_only(args: &[String]) {
    let usage = || -> ! {
        eprintln!("usage: http_bench failover KLOCK_BINARY [KILLS] [--log FILTER DIR]");
        std::process::exit(2);
    };
    let mut args = args.to_vec();
    let mut log = None;
    if let Some(at) = args.iter().position(|a| a == "--log") {
        let (Some(filter), Some(dir)) = (args.get(at + 1), args.get(at + 2)) else {
            usage()
        };
        log = Some((filter.clone(), dir.clone()));
        args.drain(at..at + 3);
    }
    let Some(binary) = args.first() else { usage() };
    let kills = match args.get(1).map(|k| k.parse::<usize>()) {
        None => KILLS,
        Some(Ok(k)) if k > 0 => k,
        Some(_) => usage(),
    };
    let f = failover_kills(
        binary,
        kills,
        log.as_ref().map(|(f, d)| (f.as_str(), d.as_str())),
    );
    let row = |what: &str, v: &[Duration]| {
        println!(
            "{what}: p50 {}, p99 {}, max {} ({} kills)",
            ms(percentile(v, 0.5)),
            ms(percentile(v, 0.99)),
            ms(percentile(v, 1.0)),
            v.len()
        );
    };
    row("kill -> first acknowledged write", &f.kills);
    row("kill -> a survivor says it leads", &f.elected);
    row("restarted node -> caught up", &f.rejoins);
    let mut each = f.kills.clone();
    each.sort_unstable();
    let each: Vec<String> = each
        .iter()
        .map(|d| format!("{:.0}", d.as_secs_f64() * 1000.0))
        .collect();
    println!("each kill, sorted (ms): {}", each.join(", "));
}

/// The failover row with `kills` kills, the nodes logging as `log` says (FILTER, DIR).
fn failover_kills(binary: &str, kills: usize, log: Option<(&str, &str)>) -> Failover {
    let mut cluster = start_with(binary, log.map(|(filter, _)| filter), &[]);
    let leader = cluster.leader();
    let ports = cluster.ports.clone();
    let followers =
        |leader: usize| -> Vec<u16> { (0..3).filter(|i| *i != leader).map(|i| ports[i]).collect() };
    let targets = Arc::new(Mutex::new(followers(leader)));
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, acks) = mpsc::channel();
    let client = writer(Arc::clone(&targets), tx, Arc::clone(&stop));
    let mut result = Failover {
        kills: Vec::new(),
        elected: Vec::new(),
        rejoins: Vec::new(),
    };
    for kill in 0..kills {
        let leader = cluster.leader();
        *targets.lock().unwrap() = followers(leader);
        // The client is writing through the followers before the kill.
        let warm = Instant::now();
        while acks.recv_timeout(WAIT).expect("no write acknowledged").sent < warm {}
        let killed = Instant::now();
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        cluster.kill(leader);
        // Where the time goes: when a survivor first says it leads (polled every 10 ms),
        // then the new leader's start and the write itself.
        let mut elected = None;
        let first = loop {
            assert!(
                killed.elapsed() < WAIT,
                "no write acknowledged after kill {kill}"
            );
            if elected.is_none()
                && (0..3).any(|i| {
                    i != leader && cluster.status(i).is_some_and(|s| s["state"] == "Leader")
                })
            {
                elected = Some(killed.elapsed());
            }
            match acks.recv_timeout(Duration::from_millis(10)) {
                Ok(ack) if ack.sent >= killed => break ack.answered - killed,
                _ => {}
            }
        };
        let elected = elected.unwrap_or(first);
        eprintln!(
            "  kill {} of {kills} (at {}.{:06} s since the epoch): node {} killed, a survivor leads after {:.0} ms, first write acknowledged after {:.0} ms",
            kill + 1,
            wall.as_secs(),
            wall.subsec_micros(),
            leader + 1,
            elected.as_secs_f64() * 1000.0,
            first.as_secs_f64() * 1000.0
        );
        result.kills.push(first);
        result.elected.push(elected);
        cluster.start(leader);
        let new = cluster.leader();
        result.rejoins.push(cluster.caught_up(leader, new));
    }
    stop.store(true, Ordering::Relaxed);
    client.join().expect("the writing client");
    if let Some((_, dir)) = log {
        std::fs::create_dir_all(dir).expect("the log directory");
        for i in 0..3 {
            let to = Path::new(dir).join(format!("node{}.log", i + 1));
            std::fs::write(&to, cluster.log(i)).expect("a node's log copied");
        }
    }
    result
}

/// What the catch-up row measured.
pub struct CatchUp {
    /// From the restart of the lagging node to its applied index reaching the leader's.
    took: Duration,
    /// From the same restart until the node listened.
    listening: Duration,
    /// The lagging node's log end before it stopped.
    before: u64,
    /// The leader's log purged up to here when the node restarted: beyond `before`, the
    /// node could only catch up by snapshot.
    purged: Option<u64>,
    /// The lagging node's snapshot index once caught up.
    snapshot: Option<u64>,
    leader_applied: u64,
}

impl CatchUp {
    /// The leader's log no longer held what the node lacked: it caught up by snapshot.
    fn by_snapshot(&self) -> bool {
        self.purged.is_some_and(|p| p > self.before) && self.snapshot.is_some()
    }
}

/// The catch-up row (module contract).
pub fn catch_up(binary: &str) -> CatchUp {
    // A snapshot every 10,000 commands: the leader must purge past the stopped node while it
    // takes the 100,000 leases, which the default cadence (100,000 commands) would leave to
    // the last few of them.
    let mut cluster = start_with(binary, None, &["--snapshot-every", "10000"]);
    let leader = cluster.leader();
    let lagging = (leader + 1) % 3;
    let before = cluster.status(lagging).expect("the follower's status")["last_log_index"]
        .as_u64()
        .unwrap_or(0);
    cluster.kill(lagging);
    let held = hold_leases(cluster.ports[leader], LEASES);
    assert_eq!(held, LEASES, "the cluster did not grant every lease");
    let status = cluster.status(leader).expect("the leader's status");
    let leader_applied = status["applied_index"].as_u64().unwrap_or(0);
    let purged = status["purged_index"].as_u64();
    let restarted = Instant::now();
    cluster.start(lagging);
    let listening = restarted.elapsed();
    let took = listening + cluster.caught_up(lagging, leader);
    let snapshot = cluster
        .status(lagging)
        .and_then(|s| s["snapshot_index"].as_u64());
    CatchUp {
        took,
        listening,
        before,
        purged,
        snapshot,
        leader_applied,
    }
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

/// The `p`-th percentile (nearest rank) of `v`.
fn percentile(v: &[Duration], p: f64) -> Duration {
    let mut v = v.to_vec();
    v.sort_unstable();
    let rank = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// The heading the report's cluster section starts with (`--cluster-only` replaces the
/// report from there on).
pub const HEADING: &str = "## Cluster (three nodes on loopback)";

/// The report's cluster section (module contract): the throughput rows beside the
/// single-node durable rows `single` and `single_batch` of the same rounds, the failover and
/// catch-up rows, and the targets.
pub fn section(
    samples: &Samples,
    (single, single_batch): (&str, &str),
    failover: &Failover,
    catch_up: &CatchUp,
    note: &str,
) -> String {
    let met = |ok: bool| if ok { "met" } else { "missed" };
    let mut out = format!(
        "{HEADING}\n\n{note}Three `klock serve --node-id N` processes, each with its own data file \
         (durable), default election settings (heartbeat 100 ms, election timeout 400-800 ms), \
         snapshot every 100,000 commands (the default; a batch request is one entry of up to 1,000; \
         the catch-up row's cluster every 10,000). A cluster \
         row is divided by the single-node durable row of the same round (same way of asking, 64 clients).\n\n\
         ### Throughput\n\n| cluster | clients | pairs/s | ÷ single-node durable | p50 ms | p99 ms |\n\
         |---|---:|---:|---:|---:|---:|\n"
    );
    let rows = [
        (LEADER, single),
        (FOLLOWER, single),
        (LEADER_BATCH, single_batch),
        (FOLLOWER_BATCH, single_batch),
    ];
    for (row, base) in rows {
        let Some(p) = samples.median(row, 64, |s| s.pairs) else {
            continue;
        };
        out.push_str(&format!(
            "| {row} | 64 | {p:.0} | {:.2} | {:.2} | {:.2} |\n",
            samples
                .ratio((row, 64), (base, 64), |s| s.pairs)
                .unwrap_or(f64::NAN),
            samples.median(row, 64, |s| s.p50).unwrap_or(f64::NAN),
            samples.median(row, 64, |s| s.p99).unwrap_or(f64::NAN),
        ));
    }
    for base in [single, single_batch] {
        if let Some(p) = samples.median(base, 64, |s| s.pairs) {
            out.push_str(&format!(
                "| (one node: {base}) | 64 | {p:.0} | 1.00 | | |\n"
            ));
        }
    }
    let (p50, p99, max) = (
        percentile(&failover.kills, 0.5),
        percentile(&failover.kills, 0.99),
        percentile(&failover.kills, 1.0),
    );
    let mut each: Vec<Duration> = failover.kills.clone();
    each.sort_unstable();
    let each: Vec<String> = each
        .iter()
        .map(|d| format!("{:.0}", d.as_secs_f64() * 1000.0))
        .collect();
    out.push_str(&format!(
        "\n### Failover\n\n{} SIGKILLs of the leader while one client writes acquire+release pairs \
         through the two followers (a refused or failed write retried after {} ms). Measured from \
         the kill to the answer of the first GRANTED acquire sent after it, through a survivor; \
         the killed node is then restarted and caught up before the next kill.\n\n\
         | what | p50 | p99 | max |\n|---|---:|---:|---:|\n\
         | kill of the leader → first acknowledged write | {} | {} | {} |\n\
         | of which: kill → a survivor says it leads (`/raft/status`, polled every 10 ms) | {} | {} | {} |\n\
         | restarted node → caught up to the leader's applied index | {} | {} | {} |\n\n\
         Each kill, sorted (ms): {}.\n",
        failover.kills.len(),
        RETRY.as_millis(),
        ms(p50),
        ms(p99),
        ms(max),
        ms(percentile(&failover.elected, 0.5)),
        ms(percentile(&failover.elected, 0.99)),
        ms(percentile(&failover.elected, 1.0)),
        ms(percentile(&failover.rejoins, 0.5)),
        ms(percentile(&failover.rejoins, 0.99)),
        ms(percentile(&failover.rejoins, 1.0)),
        each.join(", ")
    ));
    out.push_str(&format!(
        "\n### Catch-up by snapshot\n\nA follower stopped (its log ends at index {}), the leader \
         then granted {LEASES} leases (live, 5 min TTL) through the batch endpoint and applied up to \
         index {} with its log purged up to index {}; the follower restarted.\n\n\
         | what | measured |\n|---|---:|\n\
         | restart → listening | {} |\n\
         | restart → applied index reaches the leader's | {} |\n\
         | the follower's snapshot index after | {} |\n",
        catch_up.before,
        catch_up.leader_applied,
        catch_up
            .purged
            .map_or(String::from("none (nothing purged)"), |p| p.to_string()),
        ms(catch_up.listening),
        ms(catch_up.took),
        catch_up
            .snapshot
            .map_or(String::from("none (caught up from the log)"), |s| s.to_string()),
    ));
    out.push_str("\n### Cluster targets\n\n| target | measured | |\n|---|---:|---|\n");
    out.push_str(&format!(
        "| failover: p99 ≤ 2 s over ≥ 20 kills | p50 {}, p99 {}, max {} ({} kills) | {} |\n",
        ms(p50),
        ms(p99),
        ms(max),
        failover.kills.len(),
        met(p99 <= Duration::from_secs(2) && failover.kills.len() >= 20)
    ));
    let targets = [
        (
            LEADER_BATCH,
            single_batch,
            0.5,
            "batch endpoint, through the leader",
        ),
        (
            FOLLOWER_BATCH,
            single_batch,
            0.5,
            "batch endpoint, through a follower",
        ),
        (
            LEADER,
            single,
            0.4,
            "one request per operation, through the leader",
        ),
        (
            FOLLOWER,
            single,
            0.4,
            "one request per operation, through a follower",
        ),
    ];
    for (row, base, floor, what) in targets {
        if let Some(r) = samples.ratio((row, 64), (base, 64), |s| s.pairs) {
            out.push_str(&format!(
                "| {what}: ≥ {:.0}% of single-node durable | {:.0}% | {} |\n",
                floor * 100.0,
                r * 100.0,
                met(r >= floor)
            ));
        }
    }
    out.push_str(&format!(
        "| catch-up by snapshot holding {LEASES} live leases: ≤ 5 s | {}{} | {} |\n",
        ms(catch_up.took),
        if catch_up.by_snapshot() {
            ""
        } else {
            " (not by snapshot)"
        },
        met(catch_up.took <= Duration::from_secs(5) && catch_up.by_snapshot())
    ));
    out
}
