//! What a follower pays to decode a batch entry (docs/DECISIONS.md, "a batch entry's caller
//! written once"): nanoseconds per acquire+release pair of a 100-command batch entry, as the
//! derived decoding of `Entry` reads it and as a follower reads a proposal (its text kept, then
//! decoded the quick way), with each command naming its caller and with the caller named once
//! by the entry. A benchmark, not a test: `cargo run --release -p klock-raft --example
//! decode_bench`.

use klock_core::{AcquireOptions, Command, LeaseId, SessionId};
use klock_raft::types::Proposal;
use klock_server::machine::{Caller, Entry, Item};
use std::hint::black_box;
use std::time::Instant;

const PAIRS: usize = 50;
const REPEATS: u32 = 2_000;

/// The batch entry of one client's 50 acquire+release pairs, as a leader writes it:
/// `shared` makes it with `Entry::batch` (the caller named once), else every item names it.
fn entry(shared: bool) -> String {
    let caller = Caller {
        namespace: String::from("bench"),
        token: Some(String::from(
            "ff09b3e01acb25f1c8c0a3dcd40797e00671d9c3c442316df0ee3024eae48b9b",
        )),
        ..Caller::default()
    };
    let item = |command| Item {
        command,
        key: None,
        token: None,
        caller: Some(caller.clone()),
        resume: None,
        fingerprint: None,
    };
    let items: Vec<Item> = (0..PAIRS as u64)
        .flat_map(|i| {
            [
                item(Command::Acquire {
                    session: SessionId(52),
                    intents: vec![format!("MUTATES FILE:/b/51/{i}")],
                    options: AcquireOptions::default(),
                }),
                item(Command::Release {
                    session: SessionId(52),
                    lease: LeaseId(123_456 + i),
                }),
            ]
        })
        .collect();
    let entry = if shared {
        Entry::batch(9, items)
    } else {
        Entry::Batch {
            now: 9,
            caller: None,
            commands: items,
        }
    };
    serde_json::to_string(&entry).expect("an entry encodes")
}

/// Nanoseconds per pair of `decode` over `json`.
fn time(json: &str, decode: impl Fn(&str)) -> f64 {
    let started = Instant::now();
    for _ in 0..REPEATS {
        decode(json);
    }
    started.elapsed().as_nanos() as f64 / f64::from(REPEATS) / PAIRS as f64
}

fn main() {
    let derived = |json: &str| {
        black_box(serde_json::from_str::<Entry>(json).expect("decodes"));
    };
    let follower = |json: &str| {
        black_box(serde_json::from_str::<Proposal>(json).expect("decodes"));
    };
    println!("ns per pair of a {}-command batch entry", 2 * PAIRS);
    println!("| round | caller | bytes | derived `Entry` | follower's `Proposal` |");
    println!("|---:|---|---:|---:|---:|");
    for round in 1..=5 {
        for shared in [false, true] {
            let json = entry(shared);
            println!(
                "| {round} | {} | {} | {:.0} | {:.0} |",
                if shared { "once" } else { "per command" },
                json.len(),
                time(&json, derived),
                time(&json, follower)
            );
        }
    }
}
