//! ACQUIRED and RELEASED (docs/SPEC.md §9, §13.8): emitted by default; a host that turns them
//! off gets every other event unchanged, and the same answers.

use klock_core::{AcquireOptions, Config, Event, Kernel, Verdict};

/// One holder releasing to a waiter, with every event drained.
fn run(holder_events: bool) -> (Vec<Verdict>, Vec<Event>) {
    let mut k = Kernel::new(Config::default()).unwrap();
    k.set_holder_events(holder_events);
    assert_eq!(k.holder_events(), holder_events);
    let old = k.open_session("old", "default", 0).unwrap().session_id;
    let young = k.open_session("young", "default", 0).unwrap().session_id;
    let options = AcquireOptions::default();
    let mut verdicts = vec![k.acquire(young, &["MUTATES FILE:/x"], options, 1).unwrap()];
    verdicts.push(k.acquire(old, &["MUTATES FILE:/x"], options, 2).unwrap());
    k.release_all(young, 3).unwrap();
    k.close_session(old, 4).unwrap();
    (verdicts, std::iter::from_fn(|| k.poll_event()).collect())
}

#[test]
fn turned_off_they_alone_are_missing() {
    let (verdicts_on, on) = run(true);
    let (verdicts_off, off) = run(false);
    assert_eq!(verdicts_on, verdicts_off);
    let names: Vec<&str> = on.iter().map(Event::name).collect();
    assert_eq!(
        names,
        ["ACQUIRED", "RELEASED", "GRANTED", "RELEASED"],
        "{on:?}"
    );
    let others: Vec<Event> = on
        .into_iter()
        .filter(|e| !matches!(e, Event::Acquired { .. } | Event::Released { .. }))
        .collect();
    assert_eq!(off, others);
}

#[test]
fn a_clone_keeps_the_setting() {
    let mut k = Kernel::new(Config::default()).unwrap();
    k.set_holder_events(false);
    let mut twin = k.clone();
    let s = twin.open_session("a", "default", 0).unwrap().session_id;
    let granted = twin.acquire(s, &["MUTATES FILE:/x"], AcquireOptions::default(), 1);
    assert!(matches!(granted, Ok(Verdict::Granted { .. })));
    assert_eq!(twin.poll_event(), None);
}
