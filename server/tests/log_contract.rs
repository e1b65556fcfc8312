//! The log interface's contract (server/src/log.rs), checked the same way on every
//! implementation: the memory log, and the file store (also across a reopen).

use klock_core::{Command, SessionId};
use klock_server::log::{EncodedSnapshot, Log, MemoryLog};
use klock_server::machine::{Entry, Machine};
use klock_server::store::Store;

fn entry(now: u64) -> Entry {
    Entry::Command {
        now,
        command: Command::ReleaseAll {
            session: SessionId(now),
        },
        key: None,
        token: None,
        caller: None,
        resume: None,
        fingerprint: None,
    }
}

fn entries(from: u64, to: u64, tag: u64) -> Vec<(u64, Entry)> {
    (from..to).map(|i| (i, entry(i * 100 + tag))).collect()
}

fn err(result: Result<impl std::fmt::Debug, klock_server::store::StoreError>) -> String {
    result.expect_err("an error").to_string()
}

/// Appends, reads, truncates and purges, checking every answer; leaves the log holding
/// entries 3..=5 (5 and 4 rewritten with tag 2) and returns what they are.
fn exercise(log: &dyn Log) -> Vec<(u64, Entry)> {
    assert_eq!(log.bounds(), (1, 0), "a new log holds nothing");
    assert_eq!(log.read(1, 1).unwrap(), vec![]);
    log.append(&entries(1, 6, 1)).unwrap();
    assert_eq!(log.bounds(), (1, 5));
    assert_eq!(log.read(2, 4).unwrap(), entries(2, 4, 1));
    assert_eq!(log.read(1, 6).unwrap(), entries(1, 6, 1));
    // Entries must follow the last one, densely.
    let e = err(log.append(&entries(7, 8, 1)));
    assert!(
        e.contains("must follow the log's last entry 5: got 7"),
        "{e}"
    );
    let e = err(log.append(&[(6, entry(1)), (8, entry(1))]));
    assert!(e.contains("got 8"), "{e}");
    assert_eq!(log.bounds(), (1, 5), "a refused append changes nothing");
    // Reads outside what is held are refused, never shortened.
    let e = err(log.read(4, 7));
    assert!(
        e.contains("entries 4..7 are not all in the log, which holds 1..=5"),
        "{e}"
    );
    // Truncate a suffix, then write another one in its place.
    log.truncate_after(3).unwrap();
    assert_eq!(log.bounds(), (1, 3));
    log.truncate_after(9).unwrap();
    assert_eq!(
        log.bounds(),
        (1, 3),
        "truncating after the end changes nothing"
    );
    log.append(&entries(4, 6, 2)).unwrap();
    let mut expected = entries(1, 4, 1);
    expected.extend(entries(4, 6, 2));
    assert_eq!(log.read(1, 6).unwrap(), expected);
    // Purge a prefix: the rest stays readable, the purged part is refused.
    log.purge_upto(2).unwrap();
    assert_eq!(log.bounds(), (3, 5));
    assert_eq!(log.read(3, 6).unwrap(), expected[2..].to_vec());
    let e = err(log.read(2, 4));
    assert!(e.contains("holds 3..=5"), "{e}");
    let e = err(log.truncate_after(1));
    assert!(e.contains("after entry 1"), "{e}");
    assert_eq!(log.bounds(), (3, 5), "a refused truncation changes nothing");
    log.purge_upto(1).unwrap();
    assert_eq!(log.bounds(), (3, 5), "purging what is gone changes nothing");
    expected[2..].to_vec()
}

fn vote_and_snapshot(log: &dyn Log) -> Machine {
    assert_eq!(log.read_vote().unwrap(), None);
    log.save_vote(b"term 1").unwrap();
    log.save_vote(b"term 2, voted for 3").unwrap();
    assert_eq!(
        log.read_vote().unwrap().as_deref(),
        Some(&b"term 2, voted for 3"[..])
    );
    assert!(log.read_snapshot().unwrap().is_none());
    let mut machine = Machine::new(klock_core::Config::default()).unwrap();
    machine.apply(1, &entry(7));
    let snapshot = machine.snapshot();
    log.save_snapshot(&EncodedSnapshot::new(&snapshot, 0).unwrap())
        .unwrap();
    assert_eq!(log.read_snapshot().unwrap(), Some(machine.snapshot()));
    machine
}

fn purge_past_the_end(log: &dyn Log) {
    let (_, last) = log.bounds();
    log.purge_upto(last + 5).unwrap();
    assert_eq!(
        log.bounds(),
        (last + 6, last + 5),
        "empty, after the purged index"
    );
    let e = err(log.append(&entries(last + 1, last + 2, 3)));
    assert!(e.contains(&format!("last entry {}", last + 5)), "{e}");
    log.append(&entries(last + 6, last + 8, 3)).unwrap();
    assert_eq!(
        log.read(last + 6, last + 8).unwrap(),
        entries(last + 6, last + 8, 3)
    );
}

#[test]
fn the_memory_log_keeps_the_contract() {
    let log = MemoryLog::default();
    exercise(&log);
    vote_and_snapshot(&log);
    purge_past_the_end(&log);
}

#[test]
fn the_file_store_keeps_the_contract_and_keeps_it_across_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.redb");
    let (held, machine) = {
        let store = Store::open(&path).unwrap();
        store.set_config(&klock_core::Config::default()).unwrap();
        (exercise(&store), vote_and_snapshot(&store))
    };
    let store = Store::open(&path).unwrap();
    assert_eq!(
        store.bounds(),
        (3, 5),
        "what was truncated and purged stays so"
    );
    assert_eq!(store.read(3, 6).unwrap(), held);
    assert_eq!(
        store.read_vote().unwrap().as_deref(),
        Some(&b"term 2, voted for 3"[..])
    );
    assert_eq!(store.read_snapshot().unwrap(), Some(machine.snapshot()));
    purge_past_the_end(&store);
    drop(store);
    let store = Store::open(&path).unwrap();
    assert_eq!(store.bounds(), (11, 12));
}
