//! What the history tests share (server/tests/history.rs in process, cli/tests/history.rs
//! across a SIGKILL): contended work that samples the live state hash as it goes, the history
//! export, and its replay by the kernel alone, as the dashboard's wasm replays it.

use crate::server::Server;
use crate::support::{open, Agent};
use klock_core::{Command, Kernel, KernelState};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// A call on a session's route that the server did not fail (below 500); the body.
pub fn on(s: &Server, a: &Agent, what: &str, body: Value) -> Value {
    let (status, v) = s.call(
        "POST",
        &format!("/v1/ns/{}/sessions/{}/{what}", a.ns, a.id),
        &[("klock-session-token", &a.token)],
        &body.to_string(),
    );
    assert!(status < 500, "{status} {v}");
    v
}

/// The live state hash: `(index, hash)`.
pub fn live_hash(s: &Server) -> (u64, String) {
    let (status, v) = s.get("/v1/state/hash");
    assert_eq!(status, 200, "{v}");
    (
        v["index"].as_u64().unwrap(),
        v["hash"].as_str().unwrap().to_owned(),
    )
}

/// Some contended work in two namespaces: grants, WAITs, DIEs, releases, a refused call (a
/// wrong session token) and an error (a bad intent), sampling the live hash as it goes.
pub fn work(s: &Server, samples: &mut BTreeMap<u64, String>, rounds: usize) {
    let agents: Vec<Agent> = (0..4)
        .flat_map(|i| {
            [
                open(s, "team", &format!("t{i}")),
                open(s, "other", &format!("o{i}")),
            ]
        })
        .collect();
    for round in 0..rounds {
        for (k, a) in agents.iter().enumerate() {
            let file = format!("MUTATES FILE:/f{}", (round + k) % 3);
            on(
                s,
                a,
                "acquire",
                json!({"intents": [file, "CONSUMES FILE:/readme"], "ttl_ms": 60_000}),
            );
        }
        // A caller without the session's token is refused by the machine, not the kernel.
        let (status, _) = s.call(
            "POST",
            &format!("/v1/ns/team/sessions/{}/release", agents[0].id),
            &[("klock-session-token", "wrong")],
            &json!({"all": true}).to_string(),
        );
        assert_eq!(status, 401);
        on(
            s,
            &agents[1],
            "acquire",
            json!({"intents": ["BOGUS FILE:/x"]}),
        );
        let (index, hash) = live_hash(s);
        samples.insert(index, hash);
        for a in agents.iter().skip(round % 2).step_by(2) {
            on(s, a, "release", json!({"all": true}));
        }
        let (index, hash) = live_hash(s);
        samples.insert(index, hash);
    }
}

#[derive(serde::Deserialize)]
struct Step {
    index: u64,
    now: u64,
    commands: Vec<Command>,
}

/// Replays an export with the kernel alone, as the dashboard's wasm does: the hash after each
/// step, by log index (the start's too).
pub fn replay(export: &Value) -> BTreeMap<u64, String> {
    let state: KernelState = serde_json::from_value(export["start"]["state"].clone()).unwrap();
    let mut kernel = Kernel::import_state(&state).unwrap();
    let mut hashes = BTreeMap::new();
    let hash = |k: &Kernel| format!("{:016x}", k.export_state().hash());
    hashes.insert(export["start"]["index"].as_u64().unwrap(), hash(&kernel));
    let steps: Vec<Step> = serde_json::from_value(export["steps"].clone()).unwrap();
    for step in steps {
        kernel.advance(step.now);
        for command in &step.commands {
            let _ = kernel.apply(command, step.now);
        }
        while kernel.poll_event().is_some() {}
        hashes.insert(step.index, hash(&kernel));
    }
    hashes
}

/// The history export of namespace `ns` (asserting 200).
pub fn export(s: &Server, ns: &str) -> Value {
    let (status, v) = s.get(&format!("/v1/ns/{ns}/history"));
    assert_eq!(status, 200, "{v}");
    v
}
