//! `Kernel::import_state` refuses every state no kernel could have reached, with a message
//! naming the problem, and never panics: neither while importing nor in any later call on a
//! kernel it accepted. (The round trip of valid states, with the kernel going on exactly as
//! before, is checked step by step against the naive model in `differential.rs`, op Restore.)

use klock_core::{
    AcquireOptions, Config, Kernel, KernelState, LeaseId, LeaseSelection, Policy, SessionId,
    TicketId, Verdict,
};
use proptest::prelude::*;

/// A kernel with sessions, leases (one suspended with grace), a waiting ticket that reuses a
/// lease, ended leases and tickets, counters and heavy-hitter entries.
fn busy(policy: Policy) -> Kernel {
    let mut k = Kernel::new(Config {
        policy,
        ..Config::default()
    })
    .unwrap();
    let a = k.open_session("alice", "default", 0).unwrap().session_id;
    let b = k.open_session("bob", "default", 0).unwrap().session_id;
    let c = k.open_session("carol", "team", 0).unwrap().session_id;
    let opts = AcquireOptions::default();
    let verdict = k.acquire(b, &["MUTATES FILE:/src/x", "CONSUMES FILE:/doc"], opts, 10);
    assert!(matches!(verdict, Ok(Verdict::Granted { .. })));
    let Verdict::Granted { leases } = k
        .acquire(c, &["DELETES FILE:/build", "MUTATES FILE:/tmp"], opts, 10)
        .unwrap()
    else {
        panic!("free resources")
    };
    k.release(c, leases[1].lease_id, 15).unwrap();
    if policy != Policy::Lanes {
        let verdict = k.acquire(a, &["MUTATES FILE:/z"], opts, 20);
        assert!(matches!(verdict, Ok(Verdict::Granted { .. })));
        // a is older than b: it waits (wait_die, detect) or wounds b and is granted
        // (wound_wait).
        let verdict = k.acquire(a, &["MUTATES FILE:/z", "MUTATES FILE:/src"], opts, 30);
        match policy {
            Policy::WaitDie | Policy::Detect => {
                assert!(matches!(verdict, Ok(Verdict::Wait { .. })))
            }
            _ => assert!(matches!(verdict, Ok(Verdict::Granted { .. }))),
        }
    }
    k.suspend_session(c, 40).unwrap();
    while k.poll_event().is_some() {}
    k
}

fn reject(state: &KernelState, expected: &str) {
    match Kernel::import_state(state) {
        Ok(_) => panic!("accepted a state with {expected}"),
        Err(e) => assert!(
            e.to_string().contains(expected),
            "message {:?} does not name {expected:?}",
            e.to_string()
        ),
    }
}

#[test]
fn a_busy_state_round_trips_under_every_policy() {
    for policy in Policy::ALL {
        let k = busy(policy);
        let state = k.export_state();
        assert!(!state.leases.is_empty() && !state.sessions.is_empty());
        let restored = Kernel::import_state(&state).unwrap();
        assert_eq!(restored.export_state(), state);
        assert_eq!(restored.export_state().hash(), state.hash());
    }
    let state = busy(Policy::WaitDie).export_state();
    assert!(
        !state.tickets.is_empty(),
        "the scenario leaves a waiting ticket"
    );
}

#[test]
fn the_hash_tells_states_apart() {
    let mut k = busy(Policy::WaitDie);
    let before = k.export_state().hash();
    k.advance(41);
    assert_ne!(
        k.export_state().hash(),
        before,
        "the clock is part of the state"
    );
}

#[test]
fn each_impossible_state_is_refused_by_name() {
    let good = busy(Policy::WaitDie).export_state();
    let mut s = good.clone();
    s.version += 1;
    reject(&s, "version");
    let mut s = good.clone();
    s.leases[0].session_id = SessionId(999);
    reject(&s, "not open");
    let mut s = good.clone();
    s.leases[0].resource = String::from("FILE:/src//x");
    reject(&s, "not canonical");
    let mut s = good.clone();
    s.leases[0].expires_at = s.clock;
    s.leases[0].grace_until = None;
    reject(&s, "already due");
    let mut s = good.clone();
    let other = s
        .leases
        .iter()
        .position(|l| l.resource == "FILE:/doc")
        .unwrap();
    s.leases[other].resource = String::from("FILE:/src/x");
    s.leases[other].predicate = klock_core::Predicate::Mutates;
    s.leases[other].session_id = s.sessions[0].session_id;
    reject(&s, "conflicts");
    let mut s = good.clone();
    s.sessions[1].priority = s.sessions[0].priority;
    s.sessions[1].first_priority = s.sessions[0].priority;
    reject(&s, "share one priority");
    let mut s = good.clone();
    s.sessions[0].agent_id = String::from("bad\u{200b}id");
    reject(&s, "unprintable");
    let mut s = good.clone();
    s.tickets[0].intents.retain(|i| i.reuse.is_some());
    reject(&s, "waits for nothing");
    let mut s = good.clone();
    s.tickets[0].intents[0].reuse = Some(LeaseId(1));
    reject(&s, "does not hold");
    let mut s = good.clone();
    s.tickets[0].ticket = TicketId(s.next_ticket);
    reject(&s, "never issued");
    let mut s = good.clone();
    let owner = s.tickets[0].session_id;
    s.sessions
        .iter_mut()
        .find(|x| x.session_id == owner)
        .unwrap()
        .unit_ended = true;
    reject(&s, "ended unit of work");
    let mut s = good.clone();
    s.leases.swap(0, 1);
    reject(&s, "out of order");
    let mut s = good.clone();
    s.sessions[0]
        .ended_leases
        .push((s.leases[0].lease_id, true));
    reject(&s, "both active and ended");
    let mut s = good.clone();
    s.config.max_ttl_ms = 0;
    reject(&s, "config");
    // A waiter whose blocker is gone: it would wait for nothing.
    let mut s = good.clone();
    let waiter = s.tickets[0].session_id;
    s.leases.retain(|l| l.session_id == waiter);
    reject(&s, "nothing blocks it");
}

/// One random change to a valid state.
fn mutate(state: &mut KernelState, kind: u8, pick: usize, value: u64) {
    let n = |len: usize| pick % len.max(1);
    match kind % 14 {
        0 => state.clock = value,
        1 if !state.leases.is_empty() => {
            let i = n(state.leases.len());
            state.leases[i].expires_at = value;
        }
        2 if !state.leases.is_empty() => {
            let i = n(state.leases.len());
            state.leases[i].lease_id = LeaseId(value % 16);
        }
        3 if !state.sessions.is_empty() => {
            let i = n(state.sessions.len());
            state.sessions[i].session_id = SessionId(value % 8);
        }
        4 if !state.tickets.is_empty() => {
            let i = n(state.tickets.len());
            state.tickets[i].session_id = SessionId(value % 8);
        }
        5 if !state.tickets.is_empty() => {
            let i = n(state.tickets.len());
            let intents = &mut state.tickets[i].intents;
            let j = n(intents.len());
            intents[j].reuse = Some(LeaseId(value % 16));
        }
        6 if !state.sessions.is_empty() => {
            let i = n(state.sessions.len());
            state.sessions[i].priority = value % 16;
        }
        7 => state.next_lease = value % 16,
        8 => state.next_ticket = value % 16,
        9 if !state.leases.is_empty() => {
            let i = n(state.leases.len());
            state.leases[i].resource = ["FILE:/", "FILE:/src", "X", "FILE:/src/x/y"][n(4)].into();
        }
        10 if !state.sessions.is_empty() => {
            let i = n(state.sessions.len());
            state.sessions[i]
                .ended_leases
                .push((LeaseId(value % 16), value % 2 == 0));
        }
        11 if !state.leases.is_empty() => {
            let i = n(state.leases.len());
            state.leases[i].grace_until = Some(value);
        }
        12 if !state.sessions.is_empty() => {
            let i = n(state.sessions.len());
            state.sessions[i].unit_ended = value % 2 == 0;
        }
        13 if !state.sessions.is_empty() => {
            let i = n(state.sessions.len());
            state.sessions[i].suspended_at = (value % 2 == 0).then_some(value / 2);
        }
        _ => state.jitter_state = value,
    }
}

/// Every operation once, on every session id that may exist, at and after the clock.
fn exercise(k: &mut Kernel) {
    let now = k.now();
    for id in 0..8 {
        let s = SessionId(id);
        let opts = AcquireOptions::default();
        let _ = k.acquire(s, &["MUTATES FILE:/src/x", "CONSUMES FILE:/z"], opts, now);
        let _ = k.heartbeat(s, LeaseSelection::All, now + 1);
        let _ = k.reconcile(s, &[LeaseId(1), LeaseId(2), LeaseId(5)], now + 1);
        let _ = k.cancel_wait(s, TicketId(1), now + 2);
        let _ = k.digest(s, now + 2);
        let _ = k.release(s, LeaseId(id), now + 3);
        let _ = k.release_all(s, now + 3);
        let _ = k.resource_state("FILE:/src", "default", now + 4);
        let _ = k.close_session(s, now + 5);
    }
    k.advance(now.saturating_add(10_000_000));
    let _ = k.snapshot(now.saturating_add(10_000_001));
    while k.poll_event().is_some() {}
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn corrupted_states_never_panic(
        policy in prop::sample::select(Policy::ALL.to_vec()),
        changes in prop::collection::vec((any::<u8>(), any::<usize>(), any::<u64>()), 1..4),
    ) {
        let mut state = busy(policy).export_state();
        for (kind, pick, value) in changes {
            mutate(&mut state, kind, pick, value);
        }
        if let Ok(mut k) = Kernel::import_state(&state) {
            // Accepted: it must behave as a kernel, and round-trip.
            prop_assert_eq!(k.export_state(), state);
            exercise(&mut k);
        }
    }
}

/// Under `detect`, a state whose waiters form a cycle is refused: the kernel breaks every
/// cycle before a request is queued (docs/SPEC.md §6.1, §13.6), so no kernel reaches one.
#[test]
fn a_detect_state_with_a_wait_cycle_is_refused() {
    let mut k = Kernel::new(Config {
        policy: Policy::Detect,
        ..Config::default()
    })
    .unwrap();
    let a = k.open_session("alice", "default", 0).unwrap().session_id;
    let b = k.open_session("bob", "default", 0).unwrap().session_id;
    let opts = AcquireOptions::default();
    for (s, r) in [(a, "MUTATES FILE:/a"), (b, "MUTATES FILE:/b")] {
        assert!(matches!(
            k.acquire(s, &[r], opts, 1),
            Ok(Verdict::Granted { .. })
        ));
    }
    let verdict = k.acquire(a, &["MUTATES FILE:/b"], opts, 2);
    assert!(matches!(verdict, Ok(Verdict::Wait { .. })), "{verdict:?}");
    let good = k.export_state();
    Kernel::import_state(&good).unwrap();
    // b waiting for what a holds closes the cycle a → b → a.
    let mut s = good.clone();
    let mut closing = s.tickets[0].clone();
    closing.ticket = TicketId(s.next_ticket);
    closing.session_id = b;
    closing.intents[0].resource = String::from("FILE:/a");
    s.next_ticket += 1;
    s.tickets.push(closing);
    reject(&s, "cycle");
}
