//! The log, its snapshots and recovery: a restarted server has exactly the state it had after
//! its last durable entry (same state hash), resumes time where the log stopped, puts every
//! session in its grace, and refuses a damaged or mismatched file with a clear error.

use klock_core::{AcquireOptions, Command, Config, Event, Output, SessionId, Verdict};
use klock_server::engine::{self, Clock, EngineConfig, EngineError, Submission};
use klock_server::events::{EventId, Kinds, Stream};
use klock_server::log::Log as _;
use klock_server::machine::{Entry, Machine, MachineSnapshot};
use klock_server::recovery::recover;
use klock_server::store::Store;
use std::sync::Arc;

fn open(agent: &str) -> Command {
    Command::Open {
        agent_id: agent.into(),
        namespace: "default".into(),
    }
}

fn acquire(session: u64, intent: &str, ttl_ms: u64) -> Command {
    Command::Acquire {
        session: SessionId(session),
        intents: vec![intent.into()],
        options: AcquireOptions {
            ttl_ms: Some(ttl_ms),
            ..AcquireOptions::default()
        },
    }
}

/// A history with grants, a wait, a release that grants the waiter, and an expiry.
fn history() -> Vec<Entry> {
    let c = |now, command| Entry::Command {
        now,
        command,
        key: None,
        token: None,
        caller: None,
        resume: None,
        fingerprint: None,
    };
    vec![
        c(0, open("ann")),
        c(0, open("bob")),
        c(10, acquire(2, "MUTATES FILE:/x", 60_000)),
        c(20, acquire(1, "MUTATES FILE:/x", 60_000)),
        c(30, acquire(1, "CONSUMES FILE:/y", 100)),
        c(
            40,
            Command::ReleaseAll {
                session: SessionId(2),
            },
        ),
        c(500, Command::Advance),
    ]
}

fn write_history(store: &Store, entries: &[Entry]) -> Machine {
    let mut machine = Machine::new(Config::default()).unwrap();
    store.set_config(&Config::default()).unwrap();
    for entry in entries {
        let index = machine.applied() + 1;
        machine.apply(index, entry);
        store.append(&[(index, entry.clone())]).unwrap();
    }
    machine
}

#[test]
fn recovery_replays_to_the_same_state_then_suspends_every_session() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("klock.redb");
    let mut original = {
        let store = Store::open(&path).unwrap();
        write_history(&store, &history())
    };
    let store = Store::open(&path).unwrap();
    let recovered = recover(&store, &Config::default(), &Default::default()).unwrap();
    assert!(recovered.restarted);
    assert_eq!(recovered.replayed, history().len() as u64);
    // The same Recovered entry applied to the original gives the same state.
    let index = original.applied() + 1;
    original.apply(
        index,
        &Entry::Recovered {
            now: original.last_now(),
        },
    );
    assert_eq!(recovered.machine.snapshot(), original.snapshot());
    assert_eq!(
        recovered.machine.last_now(),
        500,
        "time resumes at the last logged now"
    );
    let snapshot = recovered.machine.kernel().clone().snapshot(500);
    assert!(
        snapshot.sessions.iter().all(|s| s.suspended),
        "{snapshot:?}"
    );
    // The Recovered entry itself is durable: a second restart replays it too.
    drop(store);
    let store = Store::open(&path).unwrap();
    let again = recover(&store, &Config::default(), &Default::default()).unwrap();
    assert_eq!(again.replayed, history().len() as u64 + 1);
}

#[test]
fn compaction_keeps_the_state_and_drops_the_covered_entries() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("klock.redb");
    let store = Store::open(&path).unwrap();
    let entries = history();
    let machine = write_history(&store, &entries[..4]);
    store.compact(&machine.snapshot()).unwrap();
    assert_eq!(store.log_len().unwrap(), 0);
    let mut machine = machine;
    for entry in &entries[4..] {
        let index = machine.applied() + 1;
        machine.apply(index, entry);
        store.append(&[(index, entry.clone())]).unwrap();
    }
    assert_eq!(store.log_len().unwrap(), 3);
    let loaded = store.load().unwrap();
    assert_eq!(loaded.snapshot.as_ref().map(|s| s.applied), Some(4));
    assert_eq!(loaded.entries.first().map(|e| e.0), Some(5));
    let mut replayed = Machine::restore(loaded.snapshot.as_ref().unwrap()).unwrap();
    for (index, entry) in &loaded.entries {
        replayed.apply(*index, entry);
    }
    assert_eq!(replayed.snapshot(), machine.snapshot());
}

#[test]
fn a_damaged_or_mismatched_file_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("klock.redb");
    let store = Store::open(&path).unwrap();
    let machine = write_history(&store, &history()[..3]);
    let other = Config {
        grace_ms: 1,
        ..Config::default()
    };
    let err = recover(&store, &other, &Default::default()).err().unwrap();
    assert!(
        err.contains("CONFIG_MISMATCH: ")
            && err.contains("(grace_ms: the data file has 15000, the flags ask for 1)"),
        "{err}"
    );
    // A snapshot whose hash does not match its state.
    let mut snapshot = machine.snapshot();
    snapshot.hash ^= 1;
    store.compact(&snapshot).unwrap();
    let err = recover(&store, &Config::default(), &Default::default())
        .err()
        .unwrap();
    assert!(err.contains("hashes to"), "{err}");
    // A gap in the log: appends refuse one, so the file is damaged by hand, cutting out the
    // record of entry 1 (records are `[length u32][crc u32][index u64][entry]`, after the
    // header record).
    let store2_path = dir.path().join("gap.redb");
    let store2 = Store::open(&store2_path).unwrap();
    write_history(&store2, &history()[..3]);
    let err = store2
        .append(&[(5, Entry::Recovered { now: 0 })])
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("must follow the log's last entry 3"), "{err}");
    drop(store2);
    let log = klock_server::store::log_path(&store2_path);
    let bytes = std::fs::read(&log).unwrap();
    let record_end =
        |at: usize| at + 16 + u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    let (first, second) = (record_end(0), record_end(record_end(0)));
    std::fs::write(&log, [&bytes[..first], &bytes[second..]].concat()).unwrap();
    let store2 = Store::open(&store2_path).unwrap();
    let err = store2.load().err().unwrap().to_string();
    assert!(err.contains("where entry 1 was expected"), "{err}");
    // Not a redb file at all.
    let junk = dir.path().join("junk");
    std::fs::write(&junk, b"this is not a database, only text").unwrap();
    let err = Store::open(&junk).err().unwrap().to_string();
    assert!(err.contains("cannot open the data file"), "{err}");
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn concurrent_commands_get_dense_durable_indexes() {
    runtime().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("klock.redb");
        let store = Arc::new(Store::open(&path).unwrap());
        let machine = recover(&store, &Config::default(), &Default::default())
            .unwrap()
            .machine;
        let config = EngineConfig {
            clock: Clock::monotonic(0),
            snapshot_every: 50,
            log_entries: 0,
            metrics: Default::default(),
        };
        let engine = engine::spawn(
            machine,
            Some(Arc::clone(&store)),
            config,
            Default::default(),
        );
        let mut tasks = Vec::new();
        for i in 0..64 {
            let engine = engine.clone();
            tasks.push(tokio::spawn(async move {
                let reply = engine
                    .command(open(&format!("agent-{i}")), None)
                    .await
                    .unwrap();
                let Ok(Output::Session { session }) = reply.output else {
                    panic!("open answers a session")
                };
                let held = engine
                    .command(
                        acquire(session.session_id.0, &format!("MUTATES FILE:/f{i}"), 60_000),
                        None,
                    )
                    .await
                    .unwrap();
                assert!(matches!(
                    held.output,
                    Ok(Output::Verdict {
                        verdict: Verdict::Granted { .. }
                    })
                ));
                (reply.index, held.index)
            }));
        }
        let mut indexes = Vec::new();
        for t in tasks {
            let (a, b) = t.await.unwrap();
            indexes.extend([a, b]);
        }
        indexes.sort_unstable();
        assert_eq!(indexes, (1..=128).collect::<Vec<u64>>());
        let state = engine.read(|m| m.kernel().export_state()).await.unwrap();
        drop(engine);
        drop(store);
        // Everything answered is durable: recovery rebuilds the same state (plus the
        // Recovered entry), from a snapshot and the log after it.
        let store = reopen(&path).await;
        let recovered = recover(&store, &Config::default(), &Default::default()).unwrap();
        assert!(
            recovered.replayed < 128,
            "a snapshot covered part of the log"
        );
        assert_eq!(recovered.machine.applied(), 129);
        let mut expected = Machine::restore(&MachineSnapshot {
            applied: 128,
            last_now: recovered.machine.last_now(),
            hash: state.hash(),
            state,
            remembered: Vec::new(),
            tokens: Default::default(),
            resumes: Default::default(),
            owners: Default::default(),
            log: None,
            consensus: None,
        })
        .unwrap();
        let now = expected.last_now();
        expected.apply(129, &Entry::Recovered { now });
        assert_eq!(
            recovered.machine.snapshot().state,
            expected.snapshot().state
        );
    });
}

/// Opens the data file once the engine task has let go of it.
async fn reopen(path: &std::path::Path) -> Store {
    for _ in 0..200 {
        if let Ok(store) = Store::open(path) {
            return store;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("the engine never released the data file")
}

#[test]
fn the_clock_rules_are_enforced() {
    runtime().block_on(async {
        let machine = Machine::new(Config::default()).unwrap();
        let monotonic = EngineConfig {
            clock: Clock::monotonic(0),
            snapshot_every: 0,
            log_entries: 0,
            metrics: Default::default(),
        };
        let engine = engine::spawn(machine.clone(), None, monotonic, Default::default());
        let err = engine.command(open("ann"), Some(5)).await.unwrap_err();
        assert!(matches!(err, EngineError::Clock(m) if m.contains("keeps its own time")));
        let manual = EngineConfig {
            clock: Clock::Manual,
            snapshot_every: 0,
            log_entries: 0,
            metrics: Default::default(),
        };
        let engine = engine::spawn(machine, None, manual, Default::default());
        let err = engine.command(open("ann"), None).await.unwrap_err();
        assert!(matches!(err, EngineError::Clock(m) if m.contains("must carry `now`")));
        let reply = engine.command(open("ann"), Some(42)).await.unwrap();
        assert_eq!(reply.now, 42);
    });
}

/// In memory, commands sent at once from many tasks get dense indexes, stamped in the order
/// they are applied.
#[test]
fn concurrent_commands_in_memory_get_dense_indexes_in_time_order() {
    runtime().block_on(async {
        let config = EngineConfig {
            clock: Clock::monotonic(0),
            snapshot_every: 0,
            log_entries: 0,
            metrics: Default::default(),
        };
        let machine = Machine::new(Config::default()).unwrap();
        let engine = engine::spawn(machine, None, config, Default::default());
        let mut tasks = Vec::new();
        for i in 0..64 {
            let engine = engine.clone();
            tasks.push(tokio::spawn(async move {
                let mut seen = Vec::new();
                for k in 0..20 {
                    let reply = engine.command(open(&format!("agent-{i}-{k}")), None).await;
                    let reply = reply.unwrap();
                    seen.push((reply.index, reply.now));
                }
                seen
            }));
        }
        let mut seen = Vec::new();
        for t in tasks {
            seen.extend(t.await.unwrap());
        }
        seen.sort_unstable();
        let indexes: Vec<u64> = seen.iter().map(|s| s.0).collect();
        assert_eq!(indexes, (1..=1280).collect::<Vec<u64>>());
        assert!(
            seen.windows(2).all(|w| w[0].1 <= w[1].1),
            "a later index never has an earlier now"
        );
        let applied = engine.read(|m| m.applied()).await.unwrap();
        assert_eq!(applied, 1280);
    });
}

/// A batch's submission that the clock refuses gets its own error in its own place; the
/// others are applied with consecutive indexes.
#[test]
fn a_refused_submission_keeps_its_place_in_the_answers() {
    runtime().block_on(async {
        let manual = EngineConfig {
            clock: Clock::Manual,
            snapshot_every: 0,
            log_entries: 0,
            metrics: Default::default(),
        };
        let machine = Machine::new(Config::default()).unwrap();
        let engine = engine::spawn(machine, None, manual, Default::default());
        let answers = engine
            .submit_many(vec![
                Submission::new(open("ann"), Some(5)),
                Submission::new(open("bob"), None),
                Submission::new(open("cy"), Some(6)),
            ])
            .await
            .unwrap();
        assert_eq!(answers.len(), 3);
        assert_eq!(answers[0].as_ref().unwrap().index, 1);
        assert!(
            matches!(&answers[1], Err(EngineError::Clock(m)) if m.contains("must carry `now`"))
        );
        assert_eq!(answers[2].as_ref().unwrap().index, 2);
        assert_eq!(answers[2].as_ref().unwrap().now, 6);
    });
}

#[test]
fn the_timer_expires_leases_without_any_client_call() {
    runtime().block_on(async {
        let machine = Machine::new(Config::default()).unwrap();
        let config = EngineConfig {
            clock: Clock::monotonic(0),
            snapshot_every: 0,
            log_entries: 0,
            metrics: Default::default(),
        };
        let engine = engine::spawn(machine, None, config, Default::default());
        engine.command(open("ann"), None).await.unwrap();
        let reply = engine
            .command(acquire(1, "MUTATES FILE:/x", 30), None)
            .await
            .unwrap();
        assert!(matches!(
            reply.output,
            Ok(Output::Verdict {
                verdict: Verdict::Granted { .. }
            })
        ));
        let batch = engine
            .events()
            .wait_after(
                &Stream::Session(SessionId(1)),
                EventId::default(),
                std::time::Duration::from_secs(5),
                Kinds::Every,
            )
            .await;
        // The grant's ACQUIRED, then the expiry the timer settles.
        let first = batch.events.first().map(|e| e.event());
        assert!(matches!(first, Some(Event::Acquired { .. })), "{batch:?}");
        let after = EventId::parse(&batch.next).unwrap();
        let batch = engine
            .events()
            .wait_after(
                &Stream::Session(SessionId(1)),
                after,
                std::time::Duration::from_secs(5),
                Kinds::Every,
            )
            .await;
        let first = batch.events.first().map(|e| e.event());
        assert!(
            matches!(first, Some(Event::LeaseExpired { .. })),
            "{batch:?}"
        );
    });
}

#[test]
fn a_repeated_idempotency_key_answers_the_first_answer_and_changes_nothing() {
    let mut machine = Machine::new(Config::default()).unwrap();
    let keyed = |now, command, key: &str| Entry::Command {
        now,
        command,
        key: Some(key.into()),
        token: None,
        caller: None,
        resume: None,
        fingerprint: None,
    };
    machine.apply(1, &keyed(0, open("ann"), "k-open"));
    let first = machine.apply(2, &keyed(5, acquire(1, "MUTATES FILE:/x", 1000), "k-acq"));
    // A repeat changes nothing but the settlement of time (docs/SPEC.md §2), like any call.
    let mut settled = machine.kernel().clone();
    settled.advance(9);
    let state = settled.export_state();
    let again = machine.apply(3, &keyed(9, acquire(1, "MUTATES FILE:/x", 1000), "k-acq"));
    assert_eq!(again.output, first.output);
    assert_eq!(again.repeat_of, Some((2, 5)));
    assert_eq!(
        machine.kernel().export_state(),
        state,
        "a repeat changes nothing"
    );
    // The memory of keys survives a snapshot.
    let mut restored = Machine::restore(&machine.snapshot()).unwrap();
    let third = restored.apply(4, &keyed(10, acquire(1, "MUTATES FILE:/x", 1000), "k-acq"));
    assert_eq!(third.repeat_of, Some((2, 5)));
    // Another key is a new request: the re-acquire renews the same lease.
    let other = restored.apply(5, &keyed(11, acquire(1, "MUTATES FILE:/x", 1000), "k-new"));
    assert_eq!(other.repeat_of, None);
}

#[test]
fn requests_beyond_one_full_batch_are_all_answered() {
    runtime().block_on(async {
        let machine = Machine::new(Config::default()).unwrap();
        let config = EngineConfig {
            clock: Clock::monotonic(0),
            snapshot_every: 0,
            log_entries: 0,
            metrics: Default::default(),
        };
        let engine = engine::spawn(machine, None, config, Default::default());
        // Several requests of many commands each, arriving together: more than one batch.
        let many = |n: usize| {
            (0..n)
                .map(|i| Submission::new(open(&format!("a{i}")), None))
                .collect()
        };
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let engine = engine.clone();
                tokio::spawn(async move { engine.submit_many(many(700)).await })
            })
            .collect();
        for t in tasks {
            let replies = t.await.unwrap().expect("the engine answers");
            assert_eq!(replies.len(), 700);
            assert!(replies
                .iter()
                .all(|r| r.as_ref().is_ok_and(|r| r.output.is_ok())));
        }
        let opened = engine
            .read(|m| m.kernel().stats().active_sessions)
            .await
            .unwrap();
        assert_eq!(opened, 2800);
    });
}

#[test]
fn a_torn_tail_is_cut_and_the_server_recovers_to_the_prefix_and_says_so() {
    let entries = history();
    // The state after each prefix of the history (prefix k: the first k entries).
    let mut prefixes = vec![Machine::new(Config::default()).unwrap()];
    for entry in &entries {
        let mut m = prefixes.last().unwrap().clone();
        let index = m.applied() + 1;
        m.apply(index, entry);
        prefixes.push(m);
    }
    let mut rng: u64 = 0x7013_7a11;
    for round in 0..12 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("klock.redb");
        {
            let store = Store::open(&path).unwrap();
            write_history(&store, &entries);
        }
        let log = klock_server::store::log_path(&path);
        let full = std::fs::metadata(&log).unwrap().len();
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let cut = if round == 0 {
            full - 1
        } else {
            (rng >> 33) % full
        };
        let file = std::fs::OpenOptions::new().write(true).open(&log).unwrap();
        file.set_len(cut).unwrap();
        drop(file);
        let store = Store::open(&path).unwrap();
        let recovered = recover(&store, &Config::default(), &Default::default()).unwrap();
        let kept = recovered.replayed as usize;
        // A cut inside a record is a torn tail; one on a record's end leaves whole records.
        if let Some(torn) = recovered.torn {
            assert_eq!(torn.at + torn.dropped, cut, "round {round}");
        }
        assert!(
            kept < entries.len(),
            "round {round}: the cut lost something"
        );
        // The state is the prefix's, plus the Recovered entry (when there was history).
        let mut expected = prefixes[kept].clone();
        if kept > 0 {
            let index = expected.applied() + 1;
            let now = expected.last_now();
            expected.apply(index, &Entry::Recovered { now });
        }
        assert_eq!(
            recovered.machine.snapshot(),
            expected.snapshot(),
            "round {round}"
        );
        // The log was cut to whole records: a second start finds no torn tail.
        drop(store);
        let store = Store::open(&path).unwrap();
        let again = recover(&store, &Config::default(), &Default::default()).unwrap();
        assert_eq!(again.torn, None, "round {round}");
    }
}

#[test]
fn a_log_left_behind_without_its_data_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("klock.redb");
    {
        let store = Store::open(&path).unwrap();
        write_history(&store, &history());
    }
    std::fs::remove_file(&path).unwrap();
    let store = Store::open(&path).unwrap();
    let err = recover(&store, &Config::default(), &Default::default())
        .err()
        .unwrap();
    assert!(err.contains("do not belong together"), "{err}");
}
