//! The crash test: 32 agents acquire MUTATES on 3 hot resources through a real `klock serve`
//! with a data file and write to a fenced register, while the server is killed with SIGKILL
//! 20 times at seeded random moments and restarted from its file each time. Then, on the
//! recorded history: every acknowledged grant is still known to the server (reconcile), no
//! fence was issued twice, the register never accepted a fence smaller than one it had
//! accepted, and no two sessions held one resource at the same server instant. Bounded: the
//! test stops after the 20th restart and a short run on the last server.
//!
//! Agents retry a request cut by a kill with the same `Idempotency-Key`, which is how they
//! learn the outcome of a request the server made durable but could not answer.
//!
//! Across the restarts a watcher follows the namespace's watch stream (resuming after the last
//! id it got, as a dashboard does): every event an agent was told of (a held acquire's or a
//! ticket poll's outcome) is in what it read, or inside a gap the stream reported; never
//! missing in silence. And every retry completes promptly: a held acquire retried after its
//! ticket ended answers that outcome, not the old WAIT after holding (checked by asking the
//! ticket after every WAIT: an outcome logged before the WAIT's own entry is a stale answer).

use klock_testkit::http_client::request;
use klock_testkit::process::Spawned;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const AGENTS: usize = 32;
const RESOURCES: usize = 3;
const KILLS: usize = 20;
const SEED: u64 = 0x6b6c_6f63_6b21;

fn start(data: &str) -> Spawned {
    let program = std::path::Path::new(env!("CARGO_BIN_EXE_klock"));
    let args = ["--data", data, "--snapshot-every", "150"];
    Spawned::start(program, &args).expect("start klock serve")
}

/// An acknowledged grant, released: server times from its grant to its release.
struct Grant {
    session: u64,
    lease: u64,
    fence: u64,
    resource: String,
    acquired_at: u64,
    released_at: u64,
}

/// What a test run shares.
struct World {
    port: AtomicU16,
    stop: AtomicBool,
    /// resource → the largest fence the register accepted.
    register: Mutex<HashMap<String, u64>>,
    /// Every acknowledged grant.
    grants: Mutex<Vec<Grant>>,
    /// Writes the register refused: a holder with a valid lease whose fence was not larger
    /// than one already accepted (a repeated or forgotten fence would do that).
    refused_writes: Mutex<u64>,
    /// Ids of the events agents were told of (outcomes of held acquires and ticket polls).
    told: Mutex<Vec<String>>,
    /// WAITs answered for a ticket whose outcome was logged before the answer's own entry.
    stale: Mutex<Vec<String>>,
    /// The agents are done: the watcher reads up to the end, then stops.
    done: AtomicBool,
}

impl World {
    /// Retries a request with the same idempotency key until the server answers.
    fn ask(
        &self,
        method: &str,
        path: &str,
        token: &str,
        key: &str,
        body: Value,
    ) -> (u16, u64, Value) {
        let (status, now, _, body) = self.ask_indexed(method, path, token, key, body);
        (status, now, body)
    }

    /// [`ask`](Self::ask), with the answer's `Klock-Index` too.
    fn ask_indexed(
        &self,
        method: &str,
        path: &str,
        token: &str,
        key: &str,
        body: Value,
    ) -> (u16, u64, u64, Value) {
        let started = Instant::now();
        loop {
            let port = self.port.load(Ordering::SeqCst);
            let headers = [("klock-session-token", token), ("idempotency-key", key)];
            let answer = request(port, method, path, &headers, body.to_string().as_bytes());
            // No whole answer: the server is down or was killed (mid-answer, the body is cut
            // and is no JSON); 503: it is stopping. Either way, ask again.
            match answer {
                Ok(a) if a.status != 503 && !a.body.is_null() => {
                    let number = |h: &str| a.header(h).and_then(|n| n.parse().ok());
                    let (now, index) = (number("klock-now"), number("klock-index"));
                    return (a.status, now.unwrap_or(0), index.unwrap_or(0), a.body);
                }
                _ => {}
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the server never came back"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The fenced register: accepts a write only with a fence larger than any it accepted.
    fn write(&self, resource: &str, fence: u64) {
        let mut register = self.register.lock().unwrap();
        let largest = register.entry(resource.to_owned()).or_insert(0);
        if fence <= *largest {
            *self.refused_writes.lock().unwrap() += 1;
            return;
        }
        *largest = fence;
    }
}

fn agent(world: &World, index: usize) -> (u64, String) {
    let (status, _, v) = world.ask(
        "POST",
        "/v1/ns/default/sessions",
        "",
        &format!("open-{index}"),
        json!({ "agent_id": format!("agent-{index}") }),
    );
    assert_eq!(status, 200, "{v}");
    (
        v["session_id"].as_u64().unwrap(),
        v["session_token"].as_str().unwrap().to_owned(),
    )
}

fn run_agent(world: &World, index: usize) {
    let (sid, token) = agent(world, index);
    let base = format!("/v1/ns/default/sessions/{sid}");
    let mut rng = SEED ^ (index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut step = 0u64;
    while !world.stop.load(Ordering::SeqCst) {
        step += 1;
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let resource = format!("FILE:/hot/{}", rng % RESOURCES as u64);
        let body =
            json!({"intents": [format!("MUTATES {resource}")], "ttl_ms": 60_000, "hold_ms": 2_000});
        let key = format!("acq-{index}-{step}");
        let acquire = format!("{base}/acquire");
        let (status, _, at, v) = world.ask_indexed("POST", &acquire, &token, &key, body);
        assert_eq!(status, 200, "{v}");
        if let Some(id) = v["event_id"].as_str() {
            world.told.lock().unwrap().push(id.to_owned());
        }
        let lease = match v["verdict"].as_str().or(v["event"].as_str()) {
            Some("GRANTED") => v["leases"][0].clone(),
            Some("DIE") => {
                let pause = v["retry_after_ms"].as_u64().unwrap().min(200);
                std::thread::sleep(Duration::from_millis(pause));
                continue;
            }
            Some("WAIT") => {
                // Still waiting after the hold: give the ticket up. If it was resolved
                // meanwhile (a grant this agent never heard of, say because the answer was
                // lost in a kill), drop whatever the session holds so no lease is orphaned.
                let ticket = v["ticket"].as_u64().unwrap();
                // Its outcome, if it has one: one logged before this WAIT's entry (a retry's)
                // was known when the WAIT was answered, so the WAIT was stale.
                let poll = format!("{base}/tickets/{ticket}?wait_ms=0");
                let key = format!("poll-{index}-{step}");
                let (_, _, t) = world.ask("GET", &poll, &token, &key, json!({}));
                if let Some(id) = t["event_id"].as_str() {
                    world.told.lock().unwrap().push(id.to_owned());
                    if event_id(id).0 < at {
                        let stale = format!("agent {index} ticket {ticket}: WAIT at {at}, {t}");
                        world.stale.lock().unwrap().push(stale);
                    }
                }
                let key = format!("cancel-{index}-{step}");
                let path = format!("{base}/tickets/{ticket}");
                let (status, _, _) = world.ask("DELETE", &path, &token, &key, json!({}));
                if status != 200 {
                    let key = format!("cleanup-{index}-{step}");
                    let path = format!("{base}/release");
                    world.ask("POST", &path, &token, &key, json!({"all": true}));
                }
                continue;
            }
            _ => continue, // WAIT_TIMEOUT, DIED, WOUNDED: try again
        };
        let (lease_id, fence) = (
            lease["lease_id"].as_u64().unwrap(),
            lease["fence"].as_u64().unwrap(),
        );
        world.write(&resource, fence);
        std::thread::sleep(Duration::from_millis(rng % 5));
        let key = format!("rel-{index}-{step}");
        let (status, released_at, v) = world.ask(
            "POST",
            &format!("{base}/release"),
            &token,
            &key,
            json!({"lease_ids": [lease_id]}),
        );
        assert_eq!((status, &v["released"]), (200, &json!(true)), "{v}");
        let acquired_at = lease["acquired_at"].as_u64().unwrap();
        world.grants.lock().unwrap().push(Grant {
            session: sid,
            lease: lease_id,
            fence,
            resource,
            acquired_at,
            released_at,
        });
    }
    // Every acknowledged grant of this agent is still known to the server.
    let mine: Vec<u64> = world
        .grants
        .lock()
        .unwrap()
        .iter()
        .filter(|g| g.session == sid)
        .map(|g| g.lease)
        .collect();
    if !mine.is_empty() {
        let key = format!("reconcile-{index}");
        let (status, _, v) = world.ask(
            "POST",
            &format!("{base}/reconcile"),
            &token,
            &key,
            json!({"lease_ids": mine}),
        );
        assert_eq!(status, 200, "{v}");
        for s in v["statuses"].as_array().unwrap() {
            assert_eq!(
                s["status"], "RELEASED",
                "an acknowledged release was forgotten: {s}"
            );
        }
    }
}

/// An event id `"<index>.<k>"`, ordered as the log orders events.
type EventId = (u64, u32);

fn event_id(text: &str) -> EventId {
    let (index, k) = text.split_once('.').expect("an event id");
    (index.parse().unwrap(), k.parse().unwrap())
}

/// What the watcher read of the namespace's watch stream across the restarts.
#[derive(Default)]
struct Watched {
    seen: HashSet<EventId>,
    /// Reported gaps: events after the first id and up to the second may be missing.
    gaps: Vec<(EventId, EventId)>,
    reads: u64,
}

/// Follows `/v1/ns/default/watch` as a dashboard does (resuming after the last id it got on
/// whichever server is up) until the agents are done and it has read up to the end.
fn watch(world: &World) -> Watched {
    let mut out = Watched::default();
    let mut after: EventId = (0, 0);
    loop {
        let done = world.done.load(Ordering::SeqCst);
        let port = world.port.load(Ordering::SeqCst);
        let path = format!(
            "/v1/ns/default/watch?after={}.{}&wait_ms=200",
            after.0, after.1
        );
        let v = match request(port, "GET", &path, &[], b"") {
            Ok(a) if a.status == 200 && !a.body.is_null() => a.body,
            _ => {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
        };
        out.reads += 1;
        let events = v["events"].as_array().unwrap();
        let id = |e: &Value| event_id(e.as_str().unwrap());
        let next = id(&v["next"]);
        if v["gap"] == true {
            let upto = events.first().map_or(next, |e| id(&e["id"]));
            out.gaps.push((after, upto));
        }
        out.seen.extend(events.iter().map(|e| id(&e["id"])));
        after = next;
        if done && events.is_empty() {
            return out;
        }
    }
}

#[test]
fn sigkill_under_load_loses_no_acknowledged_grant_and_never_repeats_a_fence() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("klock.redb");
    let data = data.to_str().unwrap().to_owned();
    let mut server = start(&data);
    let port = server.port;
    let world = Arc::new(World {
        port: AtomicU16::new(port),
        stop: AtomicBool::new(false),
        register: Mutex::new(HashMap::new()),
        grants: Mutex::new(Vec::new()),
        refused_writes: Mutex::new(0),
        told: Mutex::new(Vec::new()),
        stale: Mutex::new(Vec::new()),
        done: AtomicBool::new(false),
    });
    let watcher = {
        let world = Arc::clone(&world);
        std::thread::spawn(move || watch(&world))
    };
    let agents: Vec<_> = (0..AGENTS)
        .map(|i| {
            let world = Arc::clone(&world);
            std::thread::spawn(move || run_agent(&world, i))
        })
        .collect();
    let mut rng = SEED;
    let mut grants_at_kill = Vec::new();
    for _ in 0..KILLS {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        std::thread::sleep(Duration::from_millis(100 + rng % 200));
        server.kill();
        grants_at_kill.push(world.grants.lock().unwrap().len());
        server = start(&data);
        world.port.store(server.port, Ordering::SeqCst);
    }
    std::thread::sleep(Duration::from_millis(500));
    world.stop.store(true, Ordering::SeqCst);
    for a in agents {
        a.join().expect("an agent failed");
    }
    world.done.store(true, Ordering::SeqCst);
    let watched = watcher.join().expect("the watcher failed");
    server.kill();

    let grants = world.grants.lock().unwrap();
    println!(
        "{} acknowledged grants across {KILLS} kills (grants seen at each kill: {grants_at_kill:?})",
        grants.len()
    );
    assert!(
        grants.len() > 2 * KILLS,
        "too little work to mean anything: {} grants",
        grants.len()
    );
    assert!(
        grants_at_kill.windows(2).any(|w| w[1] > w[0]),
        "no progress between kills"
    );
    // Every event an agent was told of reached the watcher, or a gap said it might not have.
    let told = world.told.lock().unwrap();
    let missing: Vec<&String> = told
        .iter()
        .filter(|id| {
            let id = event_id(id);
            !watched.seen.contains(&id)
                && !watched.gaps.iter().any(|(lo, hi)| *lo < id && id <= *hi)
        })
        .collect();
    println!(
        "the watcher read {} events in {} reads, with {} gaps; agents were told of {} events",
        watched.seen.len(),
        watched.reads,
        watched.gaps.len(),
        told.len()
    );
    assert!(
        missing.is_empty(),
        "{} events agents were told of are missing from the watch without a gap: {:?}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
    let stale = world.stale.lock().unwrap();
    assert!(
        stale.is_empty(),
        "retried held acquires answered an old WAIT: {:?}",
        &stale[..stale.len().min(5)]
    );
    let fences: HashSet<u64> = grants.iter().map(|g| g.fence).collect();
    assert_eq!(fences.len(), grants.len(), "a fence was issued twice");
    assert_eq!(
        *world.refused_writes.lock().unwrap(),
        0,
        "a holder's fence was stale"
    );
    // No two sessions held one resource at the same server instant.
    let mut by_resource: BTreeMap<&str, Vec<(u64, u64, u64)>> = BTreeMap::new();
    for g in grants.iter() {
        let span = (g.acquired_at, g.released_at, g.session);
        by_resource.entry(&g.resource).or_default().push(span);
    }
    for (resource, mut spans) in by_resource {
        spans.sort_unstable();
        for w in spans.windows(2) {
            assert!(
                w[0].1 <= w[1].0,
                "{resource}: {:?} and {:?} overlap",
                w[0],
                w[1]
            );
        }
    }
}
