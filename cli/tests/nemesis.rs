//! The nemesis suite: a three-process loopback cluster under seeded faults while client
//! threads contend for a few resources, checked afterwards against the history of the
//! answers the clients were given.
//!
//! Workload: `WORKERS` threads, one session each, acquire one of two resources (waiting, held
//! for the outcome), renew the lease, write a fenced register with the lease's fence, and
//! release, each call sent to a random node; a connection error, a timeout or a 5xx is an
//! unknown outcome, retried with the same `Idempotency-Key` on another node until a deadline.
//!
//! Nemeses, in an order and with pauses drawn from the seed (every kind at least once): SIGKILL
//! of the leader, SIGKILL of a follower, SIGSTOP of the leader past the election timeout then
//! SIGCONT, a node killed and restarted with a torn log tail (a write cut short at the end of
//! its log, which it cuts off at start: see [`tear`]), and a follower removed from the
//! membership, wiped, restarted empty and re-added (a learner caught up by snapshot, then a
//! voter). One fault at a time: the cluster heals (every node at the leader's applied index)
//! before the next.
//!
//! Checks once the faults stop and the cluster healed (each a named list of violations):
//! - `fence-once`: no fence acknowledged for two different leases;
//! - `fence-order`: per resource, leases in order of their grant have increasing fences;
//! - `exclusive`: no two acknowledged leases of one resource over overlapping intervals of the
//!   cluster's time: from `acquired_at` to the acknowledged `expires_at` (renewals extend it),
//!   cut at the release (its `now` when first answered; otherwise the last time the client
//!   knew before sending it);
//! - `register`: the fenced register refused no write (a write is made only while the lease is
//!   valid by the cluster's own clock, so a refusal means a later fence was written meanwhile);
//! - `known`: every acknowledged grant still valid and never released is in the leader's final
//!   state with its fence, no acknowledged release is, the kernel's grant counter covers every
//!   acknowledged grant, and a fresh grant's fence is above every acknowledged one;
//! - `waiters`: every ticket a client was given has resolved (none waits any more);
//! - `events`: over the entries two nodes both claim to keep whole (after any gap a snapshot
//!   left), their namespace streams hold the same events under the same ids (a client resumes
//!   a stream on another node by event id);
//! - `hashes`: the three nodes' state hashes are equal at the same applied index.
//!
//! Seed: `KLOCK_NEMESIS_SEED` (default 24), printed at the start and in every failure. Bounded:
//! every wait has a deadline; the whole file runs in well under two minutes.

mod support;

use klock_testkit::http_client::request_within as call;
use klock_testkit::rng::Rng;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::cluster::{on_leader, Cluster, WAIT};

const WORKERS: usize = 4;
const RESOURCES: [&str; 2] = ["FILE:/r0", "FILE:/r1"];
const TTL_MS: u64 = 1_500;
const WAIT_TIMEOUT_MS: u64 = 1_000;
const HOLD_MS: u64 = 1_500;
/// A node's answer may take the hold and a proxied write; past this it is an unknown outcome.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(4);
/// How long a client retries one call (same key, other nodes) before giving its outcome up.
const RETRY_FOR: Duration = Duration::from_secs(20);
/// A register write needs this much of the lease left by the cluster's clock, past the time
/// the renewal took to come back.
const MARGIN_MS: u64 = 300;
/// Snapshots (and purged logs) often, so a re-added node catches up by snapshot and a
/// restarted one from a snapshot and the entries after it.
const SNAPSHOT_EVERY: &str = "40";

/// A client's answer: the body, the `(index, now)` of the entry that carried it, and whether it
/// came on the first attempt (an answer to a retry may be the first one's, kept by key).
struct Known {
    status: u16,
    body: Value,
    now: Option<u64>,
    first: bool,
    sent: Instant,
}

/// One client call, to random nodes until one answers below 500 or `RETRY_FOR` passed.
fn ask(
    ports: &[u16],
    rng: &mut Rng,
    path: &str,
    token: &str,
    key: &str,
    body: &Value,
) -> Option<Known> {
    let started = Instant::now();
    let mut first = true;
    let body = body.to_string();
    while started.elapsed() < RETRY_FOR {
        let port = ports[rng.below(ports.len() as u64) as usize];
        let sent = Instant::now();
        let headers = [("klock-session-token", token), ("idempotency-key", key)];
        if let Ok(a) = call(
            port,
            "POST",
            path,
            &headers,
            body.as_bytes(),
            ANSWER_TIMEOUT,
        ) {
            if a.status < 500 {
                let now = a.header("klock-now").and_then(|n| n.parse().ok());
                return Some(Known {
                    status: a.status,
                    body: a.body,
                    now,
                    first,
                    sent,
                });
            }
        }
        first = false;
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// A lease as the client was told of it.
#[derive(Clone, Debug)]
struct Grant {
    worker: usize,
    lease: u64,
    resource: String,
    fence: u64,
    acquired_at: u64,
    /// The end of the interval the client may rely on the lease.
    end: u64,
    /// A release was sent (its outcome may be unknown).
    release_sent: bool,
    /// A release was acknowledged.
    released: bool,
}

/// A register that keeps the highest fence written to each resource and refuses a lower one.
#[derive(Default)]
struct Register {
    highest: BTreeMap<String, u64>,
    accepted: u64,
    refused: Vec<(String, u64, u64)>,
}

impl Register {
    fn write(&mut self, resource: &str, fence: u64) {
        let highest = self.highest.entry(resource.to_owned()).or_default();
        if fence < *highest {
            self.refused.push((resource.to_owned(), fence, *highest));
        } else {
            *highest = fence;
            self.accepted += 1;
        }
    }
}

/// What one client saw.
#[derive(Default)]
struct Seen {
    session: u64,
    token: String,
    grants: Vec<Grant>,
    tickets: Vec<u64>,
    /// Of those, the ones still waiting when their acquire was answered.
    unresolved: u64,
    /// The lease of the last acquire, kept (a long TTL) for the `known` check.
    last: Option<Grant>,
    unknown: u64,
}

fn leases_of(body: &Value) -> Option<&Vec<Value>> {
    let granted = body["verdict"] == "GRANTED" || body["event"] == "GRANTED";
    granted.then(|| body["leases"].as_array()).flatten()
}

fn grant_of(worker: usize, lease: &Value) -> Grant {
    let n = |k: &str| {
        lease[k]
            .as_u64()
            .unwrap_or_else(|| panic!("{k} in {lease}"))
    };
    Grant {
        worker,
        lease: n("lease_id"),
        resource: lease["resource"].as_str().unwrap().to_owned(),
        fence: n("fence"),
        acquired_at: n("acquired_at"),
        end: n("expires_at"),
        release_sent: false,
        released: false,
    }
}

/// One client: its session, then acquire / renew / write / release rounds until `stop`, then
/// one last lease it keeps.
fn worker(
    w: usize,
    seed: u64,
    ports: Vec<u16>,
    stop: Arc<AtomicBool>,
    register: Arc<Mutex<Register>>,
) -> Seen {
    let mut rng = Rng(seed ^ (w as u64 + 1).wrapping_mul(0x1234_5678_9abc));
    let opened = ask(
        &ports,
        &mut rng,
        "/v1/ns/default/sessions",
        "",
        &format!("w{w}-open"),
        &json!({"agent_id": format!("w{w}")}),
    )
    .expect("a session opens");
    assert_eq!(opened.status, 200, "{}", opened.body);
    let mut seen = Seen {
        session: opened.body["session_id"].as_u64().unwrap(),
        token: opened.body["session_token"].as_str().unwrap().to_owned(),
        ..Seen::default()
    };
    let route = |what: &str| format!("/v1/ns/default/sessions/{}/{what}", seen.session);
    let (acquire, heartbeat, release) = (route("acquire"), route("heartbeat"), route("release"));
    let mut round = 0;
    while !stop.load(Ordering::SeqCst) {
        round += 1;
        let resource = RESOURCES[rng.below(RESOURCES.len() as u64) as usize];
        let body = json!({"intents": [format!("MUTATES {resource}")], "ttl_ms": TTL_MS,
            "wait": true, "wait_timeout_ms": WAIT_TIMEOUT_MS, "hold_ms": HOLD_MS});
        let Some(a) = ask(
            &ports,
            &mut rng,
            &acquire,
            &seen.token,
            &format!("w{w}-acq-{round}"),
            &body,
        ) else {
            seen.unknown += 1;
            continue;
        };
        assert_eq!(a.status, 200, "worker {w} acquire: {}", a.body);
        // A wait: answered by its outcome (held), or still waiting when the hold ended.
        if let Some(ticket) = a.body["ticket"].as_u64() {
            seen.tickets.push(ticket);
            seen.unresolved += u64::from(a.body["verdict"] == "WAIT");
        }
        let Some(leases) = leases_of(&a.body) else {
            let pause = a.body["retry_after_ms"].as_u64().unwrap_or(50).min(200);
            std::thread::sleep(Duration::from_millis(pause));
            continue;
        };
        let mut grant = grant_of(w, &leases[0]);
        let mut known_now = grant.acquired_at;
        let renew = json!({"lease_ids": [grant.lease]});
        match ask(
            &ports,
            &mut rng,
            &heartbeat,
            &seen.token,
            &format!("w{w}-hb-{round}"),
            &renew,
        ) {
            Some(h) if h.status == 200 && h.body["results"][0]["status"] == "OK" => {
                let expires = h.body["results"][0]["expires_at"].as_u64().unwrap();
                grant.end = grant.end.max(expires);
                let now = h.now.unwrap();
                known_now = known_now.max(now);
                // Stamped after it was sent (a first attempt is never a kept answer), so the
                // cluster's time now is at most `now` plus the time since sending.
                let since = h.sent.elapsed().as_millis() as u64;
                if h.first && now + since + MARGIN_MS < expires {
                    register.lock().unwrap().write(resource, grant.fence);
                }
            }
            Some(_) => {}
            None => seen.unknown += 1,
        }
        let free = json!({"lease_ids": [grant.lease]});
        grant.release_sent = true;
        match ask(
            &ports,
            &mut rng,
            &release,
            &seen.token,
            &format!("w{w}-rel-{round}"),
            &free,
        ) {
            Some(r) if r.status == 200 => {
                // First answered: the release's own time; else it was sent after `known_now`.
                let cut = if r.first { r.now.unwrap() } else { known_now };
                grant.end = grant.end.min(cut);
                grant.released = true;
            }
            Some(r) => panic!("worker {w} release: {} {}", r.status, r.body),
            None => seen.unknown += 1,
        }
        seen.grants.push(grant);
    }
    let keep =
        json!({"intents": [format!("MUTATES FILE:/kept-{w}")], "ttl_ms": 60_000, "wait": false});
    let a = ask(
        &ports,
        &mut rng,
        &acquire,
        &seen.token,
        &format!("w{w}-keep"),
        &keep,
    )
    .expect("the last acquire is answered");
    let leases = leases_of(&a.body).unwrap_or_else(|| panic!("worker {w}: {}", a.body));
    let last = grant_of(w, &leases[0]);
    seen.grants.push(last.clone());
    seen.last = Some(last);
    seen
}

/// Waits until every node answers and has applied what the leader had applied.
fn heal(cluster: &Cluster) {
    let leader = cluster.leading();
    let started = Instant::now();
    let target = loop {
        if let Some(a) = cluster
            .status(leader)
            .and_then(|s| s["applied_index"].as_u64())
        {
            break a;
        }
        assert!(
            started.elapsed() < WAIT,
            "the leader {leader} does not answer"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    for i in 0..cluster.ports.len() {
        loop {
            let applied = cluster.status(i).and_then(|s| s["applied_index"].as_u64());
            if applied.is_some_and(|a| a >= target) {
                break;
            }
            assert!(
                started.elapsed() < WAIT,
                "node {i} stays at {applied:?} < {target}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A node other than `not` that the live others agree leads.
fn new_leader(cluster: &Cluster, not: usize) -> usize {
    let started = Instant::now();
    loop {
        let seen: Vec<Option<u64>> = (0..cluster.ports.len())
            .filter(|i| *i != not && cluster.nodes[*i].is_some())
            .map(|i| cluster.status(i).and_then(|s| s["leader"].as_u64()))
            .collect();
        if let Some(Some(l)) = seen.first() {
            if seen.iter().all(|s| *s == Some(*l)) && (*l - 1) as usize != not {
                return (*l - 1) as usize;
            }
        }
        assert!(started.elapsed() < WAIT, "no new leader: {seen:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn signal(cluster: &Cluster, i: usize, signal: i32) {
    let pid = cluster.nodes[i].as_ref().unwrap().pid() as i32;
    // SAFETY: signals a child process this test started.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
}

#[derive(Clone, Copy, Debug)]
enum Nemesis {
    KillLeader,
    KillFollower,
    PauseLeader,
    TornTail,
    Wipe,
}

fn follower(cluster: &Cluster, rng: &mut Rng) -> usize {
    let leader = cluster.leading();
    (leader + 1 + rng.below(2) as usize) % 3
}

/// Tears the tail of the Raft log beside `data` as a crash in the middle of a write does: the
/// log's last record written again, cut short after a seeded number of its bytes (a write
/// that never completed, so was never synced nor acknowledged). Cutting into the records
/// already there would lose entries the node had acknowledged, which no crash does (an append
/// returns after its `fdatasync`) and Raft does not tolerate (openraft's leader then finds the
/// follower's log gone back, a debug assertion). Returns (bytes kept, record length).
fn tear(data: &Path, rng: &mut Rng) -> (u64, u64) {
    let log = klock_server::store::log_path(data);
    let bytes = std::fs::read(&log).unwrap();
    // Records: [length u32][crc32 u32][index u64][entry] (server/src/store.rs).
    let (mut at, mut last) = (0, 0..0);
    while bytes.len() - at >= 16 {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        last = at..at + 16 + len;
        at = last.end;
    }
    assert_eq!(at, bytes.len(), "{log:?} is not whole before the tear");
    let record = &bytes[last];
    let kept = 1 + rng.below(record.len() as u64 - 1);
    let mut file = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    file.write_all(&record[..kept as usize]).unwrap();
    (kept, record.len() as u64)
}

/// Applies one fault and ends it; what it did, for the log.
fn strike(cluster: &mut Cluster, nemesis: Nemesis, rng: &mut Rng) -> String {
    match nemesis {
        Nemesis::KillLeader | Nemesis::KillFollower => {
            let victim = match nemesis {
                Nemesis::KillLeader => cluster.leading(),
                _ => follower(cluster, rng),
            };
            cluster.kill(victim);
            std::thread::sleep(rng.millis(300, 1_500));
            new_leader(cluster, victim);
            cluster.start(victim);
            format!("SIGKILL node {}", victim + 1)
        }
        Nemesis::PauseLeader => {
            let old = cluster.leading();
            signal(cluster, old, libc::SIGSTOP);
            let new = new_leader(cluster, old);
            std::thread::sleep(rng.millis(200, 800));
            signal(cluster, old, libc::SIGCONT);
            format!(
                "SIGSTOP leader {} (node {} elected), SIGCONT",
                old + 1,
                new + 1
            )
        }
        Nemesis::TornTail => {
            let victim = rng.below(3) as usize;
            cluster.kill(victim);
            new_leader(cluster, victim);
            let (cut, of) = tear(&cluster.data(victim), rng);
            cluster.start(victim);
            format!(
                "SIGKILL node {}, its log ends in a write of {of} bytes cut after {cut}",
                victim + 1
            )
        }
        Nemesis::Wipe => {
            let victim = follower(cluster, rng);
            let id = (victim + 1).to_string();
            cluster.kill(victim);
            on_leader(cluster, &["remove", "--id", &id]);
            let data = cluster.data(victim);
            for path in [klock_server::store::log_path(&data), data.clone()] {
                std::fs::remove_file(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
            }
            cluster.start(victim);
            let url = format!("http://127.0.0.1:{}", cluster.ports[victim]);
            on_leader(cluster, &["add", "--id", &id, "--url", &url]);
            heal(cluster);
            on_leader(cluster, &["voters", "--ids", "1,2,3"]);
            format!("node {} removed, wiped, re-added", victim + 1)
        }
    }
}

/// An event id, `index.k`, in its order.
type EventKey = (u64, u32);

/// A node's namespace stream: every event it keeps, by id, and the id after which it claims
/// to keep every event (`None`: from the start). A node that started from a snapshot, or
/// installed one, says a reader from before it missed events (a gap): it folded them in.
#[derive(Debug, Default)]
struct Kept {
    whole_after: Option<EventKey>,
    events: Vec<(EventKey, Value)>,
}

/// One read of node `i`'s namespace stream after `after`: (gap, events, next).
fn watch(cluster: &Cluster, i: usize, after: &str) -> (bool, Vec<Value>, String) {
    let path = format!("/v1/ns/default/watch?after={after}");
    let a = call(cluster.ports[i], "GET", &path, &[], b"", ANSWER_TIMEOUT).unwrap();
    assert_eq!(a.status, 200, "{a:?}");
    let events = a.body["events"].as_array().cloned().unwrap_or_default();
    (
        a.body["gap"] == true,
        events,
        a.body["next"].as_str().unwrap().to_owned(),
    )
}

/// Every event of namespace `default` node `i` still keeps.
fn events(cluster: &Cluster, i: usize) -> Kept {
    let (mut kept, mut after, mut gap) = (Kept::default(), String::from("0.0"), false);
    loop {
        let (lost, batch, next) = watch(cluster, i, &after);
        gap |= lost;
        if batch.is_empty() {
            break;
        }
        for mut e in batch {
            let id = e["id"].as_str().unwrap().to_owned();
            let (index, k) = id.split_once('.').unwrap();
            e.as_object_mut().unwrap().remove("id");
            kept.events
                .push(((index.parse().unwrap(), k.parse().unwrap()), e));
        }
        after = next;
    }
    if gap {
        // A gap is reported to a reader from before the last event folded in, so it shows
        // for every id up to there and none after: the first id it does not show for.
        let key = |j: usize| kept.events[j].0;
        let shown = |j: usize| watch(cluster, i, &format!("{}.{}", key(j).0, key(j).1)).0;
        let (mut low, mut high) = (0, kept.events.len());
        while low < high {
            let mid = (low + high) / 2;
            if shown(mid) {
                low = mid + 1;
            } else {
                high = mid;
            }
        }
        kept.whole_after = Some(kept.events.get(low).map_or((u64::MAX, 0), |e| e.0));
    }
    kept
}

/// Where two nodes' events differ over the entries up to `upto` that both claim whole.
fn differ(a: &Kept, b: &Kept, upto: u64) -> Option<String> {
    let after = a.whole_after.max(b.whole_after);
    let within = |k: &Kept| -> Vec<(EventKey, Value)> {
        k.events
            .iter()
            .filter(|(id, _)| Some(*id) > after && id.0 <= upto)
            .cloned()
            .collect()
    };
    let (a, b) = (within(a), within(b));
    let at = a.iter().zip(&b).position(|(x, y)| x != y);
    if at.is_none() && a.len() == b.len() {
        return None;
    }
    let i = at.unwrap_or(a.len().min(b.len()));
    Some(format!(
        "after {after:?} up to entry {upto}: {} and {} events, first difference at {:?} / {:?}",
        a.len(),
        b.len(),
        a.get(i),
        b.get(i)
    ))
}

/// Violations found, by check.
type Found = BTreeMap<&'static str, Vec<String>>;

/// The checks of the history alone (`fence-once`, `fence-order`, `exclusive`, `register`),
/// and the leases it tells of, by id.
fn check_history(seen: &[Seen], register: &Register) -> (Found, BTreeMap<u64, Grant>) {
    let mut found = Found::new();
    let mut fail = |check: &'static str, what: String| found.entry(check).or_default().push(what);
    // One record per lease (a re-acquire of a held intent is the same lease).
    let mut leases: BTreeMap<u64, Grant> = BTreeMap::new();
    for g in seen.iter().flat_map(|s| &s.grants) {
        leases
            .entry(g.lease)
            .and_modify(|l| {
                l.acquired_at = l.acquired_at.min(g.acquired_at);
                l.end = l.end.max(g.end);
                l.released &= g.released;
                l.release_sent &= g.release_sent;
                if l.fence != g.fence || l.resource != g.resource {
                    fail(
                        "fence-once",
                        format!("lease {} told as {l:?} and {g:?}", g.lease),
                    );
                }
            })
            .or_insert_with(|| g.clone());
    }
    let mut by_fence: BTreeMap<u64, u64> = BTreeMap::new();
    for l in leases.values() {
        if let Some(other) = by_fence.insert(l.fence, l.lease) {
            fail(
                "fence-once",
                format!(
                    "fence {} acknowledged for leases {other} and {}",
                    l.fence, l.lease
                ),
            );
        }
    }
    let mut by_resource: BTreeMap<&str, Vec<&Grant>> = BTreeMap::new();
    for l in leases.values() {
        by_resource.entry(&l.resource).or_default().push(l);
    }
    for held in by_resource.values_mut() {
        held.sort_by_key(|l| (l.acquired_at, l.fence));
        for pair in held.windows(2) {
            if pair[1].fence <= pair[0].fence {
                fail("fence-order", format!("{:?} then {:?}", pair[0], pair[1]));
            }
        }
        for (i, a) in held.iter().enumerate() {
            for b in &held[i + 1..] {
                if a.acquired_at < b.end && b.acquired_at < a.end {
                    fail(
                        "exclusive",
                        format!(
                            "worker {}: {a:?} overlaps worker {}: {b:?}",
                            a.worker, b.worker
                        ),
                    );
                }
            }
        }
    }
    for (resource, fence, highest) in &register.refused {
        fail(
            "register",
            format!("{resource}: fence {fence} written after {highest}"),
        );
    }
    (found, leases)
}

/// Every check of the module's contract, each with the violations it found.
fn check(cluster: &Cluster, seen: &[Seen], register: &Register) -> Found {
    let (mut found, leases) = check_history(seen, register);
    let mut fail = |check: &'static str, what: String| found.entry(check).or_default().push(what);

    let leader = cluster.leading();
    let overview = cluster.overview(leader);
    let now = overview["now"].as_u64().unwrap();
    let state = &overview["snapshot"];
    let held: BTreeMap<u64, u64> = state["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["lease_id"].as_u64().unwrap(),
                l["fence"].as_u64().unwrap(),
            )
        })
        .collect();
    for l in leases.values() {
        if l.released && held.contains_key(&l.lease) {
            fail("known", format!("released {l:?} is still held at {now}"));
        }
        // Never released (a release with no known outcome may have ended it).
        if !l.release_sent && l.end > now && held.get(&l.lease) != Some(&l.fence) {
            fail("known", format!("{l:?} is not held at {now}: {held:?}"));
        }
    }
    let granted = state["stats"]["counters"]["granted"].as_u64().unwrap();
    if granted < leases.len() as u64 {
        fail(
            "known",
            format!("{} leases acknowledged, {granted} granted", leases.len()),
        );
    }
    let s = &seen[0];
    let fresh = cluster.ask(
        leader,
        &format!("/v1/ns/default/sessions/{}/acquire", s.session),
        &s.token,
        "fresh",
        json!({"intents": ["MUTATES FILE:/fresh"], "wait": false}),
    );
    let top = leases.values().map(|l| l.fence).max().unwrap_or(0);
    match leases_of(&fresh.body) {
        Some(f) if f[0]["fence"].as_u64().unwrap() > top => {}
        _ => fail(
            "known",
            format!("a fresh grant after fence {top}: {}", fresh.body),
        ),
    }

    // Waiters: every ticket's wait timeout has passed since the workers stopped.
    let started = Instant::now();
    loop {
        let waiting = cluster.overview(leader)["snapshot"]["stats"]["waiting_tickets"].as_u64();
        if waiting == Some(0) {
            break;
        }
        if started.elapsed() > WAIT {
            fail("waiters", format!("{waiting:?} tickets still wait"));
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for s in seen {
        for t in &s.tickets {
            let path = format!("/v1/ns/default/sessions/{}/tickets/{t}", s.session);
            let a = call(
                cluster.ports[leader],
                "GET",
                &path,
                &[("klock-session-token", &s.token)],
                b"",
                ANSWER_TIMEOUT,
            )
            .unwrap();
            if a.body["verdict"] == "WAIT" {
                fail(
                    "waiters",
                    format!("session {} ticket {t} still waits", s.session),
                );
            }
        }
    }

    // Hashes: the three at one applied index (nothing is written now; the leader's timer may
    // still settle a deadline, so read again until the indexes meet).
    let started = Instant::now();
    let mut common = None;
    loop {
        let hashes: Vec<(u64, String)> = (0..3)
            .filter_map(|i| {
                let a = call(
                    cluster.ports[i],
                    "GET",
                    "/v1/state/hash",
                    &[],
                    b"",
                    ANSWER_TIMEOUT,
                )
                .ok()?;
                Some((
                    a.body["index"].as_u64()?,
                    a.body["hash"].as_str()?.to_owned(),
                ))
            })
            .collect();
        if hashes.len() == 3 && hashes.iter().all(|h| h.0 == hashes[0].0) {
            if hashes.iter().any(|h| h.1 != hashes[0].1) {
                fail("hashes", format!("{hashes:?}"));
            }
            common = Some(hashes[0].0);
            break;
        }
        if started.elapsed() > WAIT {
            fail("hashes", format!("never at one index: {hashes:?}"));
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }

    // Events: over the entries (up to that index) two nodes both claim whole, their streams
    // hold the same events under the same ids (a client resumes a stream on another node by
    // event id).
    if let Some(upto) = common {
        let streams: Vec<Kept> = (0..3).map(|i| events(cluster, i)).collect();
        let kept: Vec<_> = streams
            .iter()
            .map(|s| (s.whole_after, s.events.len(), s.events.first().map(|e| e.0)))
            .collect();
        eprintln!("events kept by each node up to {upto} (whole after, count, first): {kept:?}");
        for a in 0..3 {
            for b in a + 1..3 {
                if let Some(what) = differ(&streams[a], &streams[b], upto) {
                    fail("events", format!("nodes {} and {}: {what}", a + 1, b + 1));
                }
            }
        }
    }
    found
}

#[test]
fn a_cluster_under_nemeses_keeps_every_acknowledged_answer() {
    let started = Instant::now();
    let seed: u64 = std::env::var("KLOCK_NEMESIS_SEED")
        .map(|s| s.parse().expect("KLOCK_NEMESIS_SEED is a whole number"))
        .unwrap_or(24);
    eprintln!("nemesis seed {seed} (KLOCK_NEMESIS_SEED)");
    let mut rng = Rng(seed);
    let mut cluster = Cluster::unstarted(support::klock(), 3);
    cluster.extra = vec![
        String::from("--snapshot-every"),
        String::from(SNAPSHOT_EVERY),
    ];
    for i in 0..3 {
        cluster.start(i);
    }
    support::cluster::klock_cluster(&cluster, 0, &["init"]).unwrap();
    cluster.leader();

    let stop = Arc::new(AtomicBool::new(false));
    let register = Arc::new(Mutex::new(Register::default()));
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (ports, stop, register) = (
                cluster.ports.clone(),
                Arc::clone(&stop),
                Arc::clone(&register),
            );
            std::thread::spawn(move || worker(w, seed, ports, stop, register))
        })
        .collect();

    // Every kind once, in a seeded order, and one more of a seeded kind.
    let mut plan = vec![
        Nemesis::KillLeader,
        Nemesis::KillFollower,
        Nemesis::PauseLeader,
        Nemesis::TornTail,
        Nemesis::Wipe,
    ];
    for i in (1..plan.len()).rev() {
        plan.swap(i, rng.below(i as u64 + 1) as usize);
    }
    plan.push(plan[rng.below(5) as usize]);
    for nemesis in plan {
        std::thread::sleep(rng.millis(300, 1_200));
        let what = strike(&mut cluster, nemesis, &mut rng);
        eprintln!(
            "{:>6.1}s {nemesis:?}: {what}",
            started.elapsed().as_secs_f64()
        );
        heal(&cluster);
    }
    std::thread::sleep(Duration::from_millis(1_000));
    stop.store(true, Ordering::SeqCst);
    let seen: Vec<Seen> = workers
        .into_iter()
        .map(|w| w.join().expect("a worker panicked"))
        .collect();
    heal(&cluster);
    // Every wait ends within its timeout after the last acquire.
    std::thread::sleep(Duration::from_millis(WAIT_TIMEOUT_MS));
    let register = register.lock().unwrap();
    let grants: usize = seen.iter().map(|s| s.grants.len()).sum();
    let tickets: usize = seen.iter().map(|s| s.tickets.len()).sum();
    let unknown: u64 = seen.iter().map(|s| s.unknown).sum();
    let unresolved: u64 = seen.iter().map(|s| s.unresolved).sum();
    eprintln!(
        "{:>6.1}s {grants} grants, {tickets} waits ({unresolved} still waiting when answered), {unknown} outcomes unknown, {} register writes",
        started.elapsed().as_secs_f64(),
        register.accepted
    );
    let found = check(&cluster, &seen, &register);
    assert!(found.is_empty(), "seed {seed}: {found:#?}");
    assert!(
        grants > 20 && register.accepted > 10,
        "seed {seed}: too little work to judge"
    );
    assert!(
        started.elapsed() < Duration::from_secs(110),
        "seed {seed}: {:?}",
        started.elapsed()
    );
}

/// The history's checks fire on a history that breaks them: a fence told for two leases, a
/// later grant with a lower fence, two holders at one instant, a refused register write; and
/// not on one that does not.
#[test]
fn the_history_checks_find_what_breaks_them() {
    let lease = |lease, resource: &str, fence, acquired_at, end| Grant {
        worker: 0,
        lease,
        resource: resource.to_owned(),
        fence,
        acquired_at,
        end,
        release_sent: true,
        released: true,
    };
    let judged = |grants: Vec<Grant>, register: Register| {
        let seen = [Seen {
            grants,
            ..Seen::default()
        }];
        check_history(&seen, &register)
            .0
            .into_keys()
            .collect::<Vec<_>>()
    };
    let sound = vec![
        lease(1, "A", 1, 0, 100),
        lease(2, "A", 2, 100, 200),
        lease(3, "B", 3, 50, 150),
    ];
    assert!(judged(sound, Register::default()).is_empty());
    let twice = vec![lease(1, "A", 1, 0, 100), lease(2, "B", 1, 0, 100)];
    assert_eq!(judged(twice, Register::default()), ["fence-once"]);
    let lower = vec![lease(1, "A", 2, 0, 100), lease(2, "A", 1, 100, 200)];
    assert_eq!(judged(lower, Register::default()), ["fence-order"]);
    let overlapping = vec![lease(1, "A", 1, 0, 100), lease(2, "A", 2, 99, 200)];
    assert_eq!(judged(overlapping, Register::default()), ["exclusive"]);
    let mut register = Register::default();
    register.write("A", 2);
    register.write("A", 1);
    assert_eq!(judged(Vec::new(), register), ["register"]);
}

/// The event streams' comparison finds a different or a missing event over the entries both
/// nodes claim whole, and ignores what one of them folded into a snapshot.
#[test]
fn the_event_check_finds_a_difference() {
    let e = |index, k, name: &str| ((index, k), json!({"event": name}));
    let kept = |whole_after, events: Vec<((u64, u32), Value)>| Kept {
        whole_after,
        events,
    };
    let all = vec![
        e(3, 0, "A"),
        e(4, 0, "B"),
        e(4, 1, "C"),
        e(6, 0, "D"),
        e(7, 0, "E"),
    ];
    let leader = kept(None, all.clone());
    assert_eq!(differ(&leader, &kept(None, all.clone()), 7), None);
    // A node restarted from a snapshot at entry 5 claims what follows its first event.
    let restarted = vec![e(6, 0, "D"), e(7, 0, "E")];
    assert_eq!(differ(&leader, &kept(Some((6, 0)), restarted), 7), None);
    // ... or still keeps an event from before a snapshot it installed.
    let installed = vec![e(3, 0, "A"), e(6, 0, "D"), e(7, 0, "E")];
    assert_eq!(differ(&leader, &kept(Some((6, 0)), installed), 7), None);
    // Past `upto`: not yet applied everywhere.
    assert_eq!(differ(&leader, &kept(None, all[..4].to_vec()), 6), None);
    // A node that keeps nothing yet claims every event lost its events.
    assert!(differ(&leader, &kept(None, Vec::new()), 7).is_some());
    let missing = vec![e(4, 0, "B"), e(6, 0, "D"), e(7, 0, "E")];
    assert!(differ(&leader, &kept(Some((3, 0)), missing), 7).is_some());
    let other = vec![e(4, 0, "B"), e(4, 1, "X"), e(6, 0, "D"), e(7, 0, "E")];
    assert!(differ(&leader, &kept(Some((3, 0)), other), 7).is_some());
    let renumbered = vec![e(4, 0, "B"), e(4, 2, "C"), e(6, 0, "D"), e(7, 0, "E")];
    assert!(differ(&leader, &kept(Some((3, 0)), renumbered), 7).is_some());
}
