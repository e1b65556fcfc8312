//! A batch entry (`Entry::Batch`: several commands at one `now`, one log entry, a cluster's
//! batch request) is applied exactly as its commands applied one by one, each its own entry at
//! that time: the same answers, events, repeats, kernel calls, session secrets and state hash
//! (seeded random histories with sessions, tokens right and wrong, idempotency keys repeated
//! within and across entries, reused keys, closes and expiries). Only the index differs: every
//! answer of a batch carries the batch's, and its events are numbered across it. A batch made
//! by `Entry::batch` names its items' common caller once, and is applied, and decoded from its
//! JSON, as its items with their own callers.

use klock_core::{AcquireOptions, Command, Config, Event, SessionId};
use klock_server::applier::Applier;
use klock_server::events::{EventHub, EventId, Kinds, Stream};
use klock_server::history::History;
use klock_server::machine::{Applied, Caller, Entry, Item, Machine, Refused};
use klock_testkit::rng::Rng;
use std::sync::{Arc, Mutex};

const NAMESPACES: [&str; 2] = ["a", "b"];

/// The token hash an open by agent `n` binds (a caller presents one of these, or none).
fn token(n: u64) -> String {
    format!("t{n}")
}

/// A random command with what comes with it.
fn item(rng: &mut Rng) -> Item {
    let session = SessionId(1 + rng.below(8));
    let ns = NAMESPACES[rng.below(2) as usize];
    let agent = rng.below(8);
    let command = match rng.below(10) {
        0 | 1 => Command::Open {
            agent_id: format!("agent-{agent}"),
            namespace: ns.into(),
        },
        2..=5 => Command::Acquire {
            session,
            intents: vec![format!("MUTATES FILE:/r{}", rng.below(4))],
            options: AcquireOptions {
                ttl_ms: Some(20 + rng.below(300)),
                wait: rng.chance(50),
                wait_timeout_ms: rng.chance(50).then(|| rng.below(200)),
            },
        },
        6 => Command::ReleaseAll { session },
        7 => Command::Heartbeat {
            session,
            leases: None,
        },
        8 => Command::Close { session },
        _ => Command::Advance,
    };
    let opening = matches!(command, Command::Open { .. });
    let caller = rng.chance(85).then(|| Caller {
        namespace: ns.into(),
        token: if opening {
            None
        } else {
            [Some(token(agent)), None][rng.below(2) as usize].clone()
        },
        caps: (opening && rng.chance(30)).then_some(klock_server::machine::SessionCaps {
            per_owner: 3,
            per_namespace: 4,
        }),
        owner: opening.then(|| format!("owner-{}", rng.below(2))),
        ..Caller::default()
    });
    let key = rng.chance(40).then(|| format!("k{}", rng.below(12)));
    let fingerprint = key
        .as_ref()
        .map(|_| format!("f{}", u64::from(rng.chance(10))));
    Item {
        command,
        key,
        token: opening.then(|| token(agent)),
        caller,
        resume: None,
        fingerprint,
    }
}

/// What must be equal between the two ways: everything but the indexes.
fn same(batch: &Applied, alone: &Applied, what: &str) {
    // A forgotten answer's message names the first entry's index: the only index in an answer.
    let forgotten = |a: &Applied| matches!(a.output, Err(Refused::AnswerForgotten(_)));
    if forgotten(batch) || forgotten(alone) {
        assert!(
            forgotten(batch) && forgotten(alone),
            "{what}: {:?} {:?}",
            batch.output,
            alone.output
        );
    } else {
        assert_eq!(batch.output, alone.output, "{what}: output");
    }
    assert_eq!(batch.events, alone.events, "{what}: events");
    assert_eq!(
        batch.repeat_of.map(|(_, now)| now),
        alone.repeat_of.map(|(_, now)| now),
        "{what}: repeat"
    );
    assert_eq!(
        batch.kernel_calls, alone.kernel_calls,
        "{what}: kernel calls"
    );
}

/// The machines' states, but for their indexes.
fn same_state(batch: &Machine, alone: &Machine, what: &str) {
    let (b, a) = (batch.snapshot(), alone.snapshot());
    assert_eq!(b.hash, a.hash, "{what}: state hash");
    assert_eq!(b.last_now, a.last_now, "{what}: time");
    assert_eq!(b.tokens, a.tokens, "{what}: tokens");
    assert_eq!(b.owners, a.owners, "{what}: owners");
    let answers = |s: &klock_server::machine::MachineSnapshot| {
        s.remembered
            .iter()
            .map(|r| (r.key.clone(), r.now, r.output.clone(), r.dropped))
            .collect::<Vec<_>>()
    };
    assert_eq!(answers(&b), answers(&a), "{what}: remembered answers");
}

#[test]
fn a_batch_entry_applies_as_its_commands_one_by_one() {
    let mut refused = 0;
    let mut repeats = 0;
    let mut events = 0;
    let mut shared = 0;
    for seed in 0..48u64 {
        let mut rng = Rng(seed);
        let mut by_batch = Machine::new(Config::default()).unwrap();
        let mut one_by_one = Machine::new(Config::default()).unwrap();
        // A small budget: answers get dropped (a repeat then is refused as forgotten).
        if seed % 3 == 0 {
            by_batch.set_answer_budget(2_000);
            one_by_one.set_answer_budget(2_000);
        }
        let mut now = 0;
        for step in 0..120 {
            now += rng.below(60);
            let mut items: Vec<Item> = (0..1 + rng.below(8)).map(|_| item(&mut rng)).collect();
            // Seeds from 24: every item has a caller, most often its batch's first item's, so
            // that the batch shares it.
            if seed >= 24 {
                let first = items[0].caller.clone().or_else(|| item(&mut rng).caller);
                for item in &mut items {
                    if item.caller.is_none() || rng.chance(60) {
                        item.caller.clone_from(&first);
                    }
                }
            }
            let what = format!("seed {seed}, step {step}");
            let index = by_batch.applied() + 1;
            let batch = Entry::batch(now, items.clone());
            if let Entry::Batch {
                caller: Some(caller),
                commands,
                ..
            } = &batch
            {
                shared += 1;
                // Only the items of another caller keep theirs.
                for (made, item) in commands.iter().zip(&items) {
                    let own = item.caller.as_ref().filter(|c| *c != caller);
                    assert_eq!(made.caller.as_ref(), own, "{what}");
                }
            }
            // As a follower gets it: its JSON, decoded.
            let json = serde_json::to_string(&batch).unwrap();
            assert_eq!(serde_json::from_str::<Entry>(&json).unwrap(), batch);
            let got = by_batch.apply_entry(index, &batch);
            assert_eq!(got.len(), items.len(), "{what}: one answer per command");
            for (k, (item, got)) in items.into_iter().zip(&got).enumerate() {
                let index = one_by_one.applied() + 1;
                let want = one_by_one.apply(index, &item.at(now));
                same(got, &want, &format!("{what}, command {k}"));
                // A repeat names the batch's index (the first answer's entry).
                if let Some((first, _)) = got.repeat_of {
                    assert!(first <= by_batch.applied(), "{what}: repeat of {first}");
                    repeats += 1;
                }
                refused += usize::from(got.output.is_err());
                events += got.events.len();
            }
            same_state(&by_batch, &one_by_one, &what);
        }
    }
    // The histories reach what they are meant to.
    assert!(
        refused > 200 && repeats > 50 && events > 500 && shared > 500,
        "{refused} {repeats} {events} {shared}"
    );
}

/// A key repeated within one batch answers what its first use in the batch answered, with
/// the batch's own index as the first answer's.
#[test]
fn a_key_repeated_inside_one_batch_answers_the_first_answer() {
    let mut m = Machine::new(Config::default()).unwrap();
    let open = Item {
        command: Command::Open {
            agent_id: "ann".into(),
            namespace: "a".into(),
        },
        key: None,
        token: Some(token(0)),
        caller: None,
        resume: None,
        fingerprint: None,
    };
    m.apply(1, &open.at(0));
    let acquire = Item {
        command: Command::Acquire {
            session: SessionId(1),
            intents: vec!["MUTATES FILE:/x".into()],
            options: AcquireOptions::default(),
        },
        key: Some("k".into()),
        token: None,
        caller: Some(Caller {
            namespace: "a".into(),
            token: Some(token(0)),
            ..Caller::default()
        }),
        resume: None,
        fingerprint: Some("f".into()),
    };
    let mut other = acquire.clone();
    other.fingerprint = Some("g".into());
    let got = m.apply_entry(
        2,
        &Entry::Batch {
            caller: None,
            now: 5,
            commands: vec![acquire.clone(), acquire, other],
        },
    );
    assert_eq!(got[0].repeat_of, None);
    assert!(got[0].output.is_ok(), "{:?}", got[0].output);
    assert_eq!(got[1].repeat_of, Some((2, 5)));
    assert_eq!(got[1].output, got[0].output);
    assert!(got[1].events.is_empty() && got[1].kernel_calls.is_empty());
    assert!(
        matches!(got[2].output, Err(Refused::KeyReused(_))),
        "{:?}",
        got[2].output
    );
}

/// Through the applier: every answer of a batch carries its index, its events are numbered
/// across the entry (`"<index>.<k>"`, k counting every event of the entry, so unique and in
/// order), and the history holds one step for it (its kernel calls, in order).
#[test]
fn a_batch_entrys_answers_share_its_index_and_its_events_count_across_it() {
    let machine = Machine::new(Config::default()).unwrap();
    let events = Arc::new(EventHub::new(1 << 20));
    let history = Arc::new(Mutex::new(History::new(&machine, 100)));
    let mut applier = Applier::new(machine, Arc::clone(&events), Arc::clone(&history));
    let open = |agent: &str| Item {
        command: Command::Open {
            agent_id: agent.into(),
            namespace: "a".into(),
        },
        key: None,
        token: None,
        caller: None,
        resume: None,
        fingerprint: None,
    };
    let acquire = |session: u64, resource: &str| Item {
        command: Command::Acquire {
            session: SessionId(session),
            intents: vec![format!("MUTATES FILE:/{resource}")],
            options: AcquireOptions::default(),
        },
        ..open("")
    };
    let opened = applier.apply(
        1,
        &Entry::Batch {
            caller: None,
            now: 0,
            commands: vec![open("ann"), open("bob")],
        },
    );
    assert_eq!(opened.len(), 2);
    let replies = applier.apply(
        2,
        &Entry::Batch {
            caller: None,
            now: 1,
            commands: vec![acquire(1, "x"), acquire(2, "y"), acquire(1, "z")],
        },
    );
    assert_eq!(replies.len(), 3);
    assert!(replies.iter().all(|r| r.index == 2 && r.output.is_ok()));
    assert!(replies.iter().all(|r| !r.events.is_empty()), "{replies:?}");
    let read = events.read(
        &Stream::Namespace("a".into()),
        EventId::end_of(1),
        Kinds::Every,
    );
    let ids: Vec<EventId> = read.events.iter().map(|e| e.id()).collect();
    let expected: Vec<EventId> = (0..ids.len() as u32)
        .map(|k| EventId { index: 2, k })
        .collect();
    assert_eq!(ids, expected);
    assert_eq!(
        ids.len(),
        replies.iter().map(|r| r.events.len()).sum::<usize>()
    );
    let kinds: Vec<bool> = read
        .events
        .iter()
        .map(|e| matches!(e.event(), Event::Acquired { .. }))
        .collect();
    assert!(kinds.iter().all(|k| *k), "{kinds:?}");
    let slice = klock_server::applier::lock(&history).slice(1, Some(2));
    let step = slice
        .and_then(|s| s.steps.into_iter().find(|s| s.index == 2))
        .expect("the batch's step");
    assert_eq!(step.commands.len(), 3);
}
