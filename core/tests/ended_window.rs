//! A live session remembers only its most recent ENDED_MEMORY_PER_SESSION ended leases and
//! tickets: exact answers inside the window, UNKNOWN beyond it (bounded memory). The same
//! holds for `ticket_waiting`, the pure query of where a ticket stands. The whole kernel
//! remembers at most ENDED_MEMORY_PER_KERNEL of each, cutting the longest windows first
//! (docs/SPEC.md §13.2); these tests hold it to a naive model of that rule.

use klock_core::{
    AcquireOptions, Config, ErrorCode, Kernel, KernelState, LeaseId, LeaseStatus, SessionId,
    TicketId, Verdict, ENDED_MEMORY_AFTER_TRIM, ENDED_MEMORY_PER_KERNEL, ENDED_MEMORY_PER_SESSION,
};

fn granted(v: Verdict) -> LeaseId {
    match v {
        Verdict::Granted { leases } => leases[0].lease_id,
        other => panic!("expected GRANTED, got {other:?}"),
    }
}

#[test]
fn ended_leases_beyond_the_window_are_forgotten() {
    let config = Config {
        max_leases_per_session: 10,
        ..Config::default()
    };
    let mut k = Kernel::new(config).unwrap();
    let a = k.open_session("a", "default", 0).unwrap().session_id;
    let b = k.open_session("b", "default", 0).unwrap().session_id;
    let mut ids = Vec::new();
    for i in 0..=ENDED_MEMORY_PER_SESSION {
        let intent = format!("MUTATES FILE:/x/{i}");
        let id = granted(
            k.acquire(a, &[intent], AcquireOptions::default(), 1)
                .unwrap(),
        );
        assert!(k.release(a, id, 1).unwrap());
        ids.push(id);
    }
    let (first, second, last) = (ids[0], ids[1], *ids.last().unwrap());
    let status = k.reconcile(a, &[first, second, last], 2).unwrap();
    assert_eq!(status[0].1, LeaseStatus::Unknown, "the oldest is forgotten");
    assert_eq!(
        status[1].1,
        LeaseStatus::Released,
        "the window still holds the rest"
    );
    assert_eq!(status[2].1, LeaseStatus::Released);
    assert_eq!(
        k.release(a, second, 2),
        Ok(false),
        "release stays idempotent in the window"
    );
    assert_eq!(
        k.release(a, first, 2).unwrap_err().code,
        ErrorCode::UnknownLease
    );
    let other = k.reconcile(b, &[first, last], 2).unwrap();
    assert_eq!(other[0].1, LeaseStatus::Unknown);
    assert_eq!(other[1].1, LeaseStatus::NotOwner);
}

#[test]
fn ended_tickets_beyond_the_window_are_forgotten() {
    let mut k = Kernel::new(Config::default()).unwrap();
    let older = k.open_session("older", "default", 0).unwrap().session_id;
    let holder = k.open_session("holder", "default", 0).unwrap().session_id;
    granted(
        k.acquire(holder, &["MUTATES FILE:/t"], AcquireOptions::default(), 1)
            .unwrap(),
    );
    let mut tickets: Vec<TicketId> = Vec::new();
    for _ in 0..=ENDED_MEMORY_PER_SESSION {
        let Verdict::Wait { ticket, .. } = k
            .acquire(older, &["MUTATES FILE:/t"], AcquireOptions::default(), 1)
            .unwrap()
        else {
            panic!("the older session waits");
        };
        assert_eq!(k.ticket_waiting(older, ticket), Some(true));
        assert_eq!(k.ticket_waiting(holder, ticket), None, "not the holder's");
        k.cancel_wait(older, ticket, 1).unwrap();
        tickets.push(ticket);
    }
    let (first, last) = (tickets[0], *tickets.last().unwrap());
    // What ticket_waiting says follows the same memory: ended within the window, unknown
    // beyond it, and never another session's.
    assert_eq!(k.ticket_waiting(older, last), Some(false));
    assert_eq!(k.ticket_waiting(holder, last), None);
    assert_eq!(k.ticket_waiting(older, first), None);
    assert_eq!(k.ticket_waiting(older, TicketId(u64::MAX)), None);
    assert_eq!(
        k.cancel_wait(older, last, 2).unwrap_err().code,
        ErrorCode::UnknownTicket
    );
    assert_eq!(
        k.cancel_wait(holder, last, 2).unwrap_err().code,
        ErrorCode::NotOwner
    );
    assert_eq!(
        k.cancel_wait(holder, first, 2).unwrap_err().code,
        ErrorCode::UnknownTicket,
        "the oldest ended ticket is forgotten, so ownership is no longer known"
    );
}

/// The kernel-wide bound as docs/SPEC.md §13.2 states it, computed naively over the window
/// lengths: one more ended id for session `who`, then, if the kernel remembers more than
/// ENDED_MEMORY_PER_KERNEL, every window cut to the largest level at which the total is at
/// most ENDED_MEMORY_AFTER_TRIM.
fn model_one_end(windows: &mut [usize], who: usize) {
    windows[who] = (windows[who] + 1).min(ENDED_MEMORY_PER_SESSION);
    if windows.iter().sum::<usize>() > ENDED_MEMORY_PER_KERNEL {
        let level = (0..=ENDED_MEMORY_PER_SESSION)
            .rev()
            .find(|&l| windows.iter().map(|&w| w.min(l)).sum::<usize>() <= ENDED_MEMORY_AFTER_TRIM)
            .expect("level 0 always fits");
        for w in windows.iter_mut() {
            *w = (*w).min(level);
        }
    }
}

/// How many ended leases and tickets each of `sessions` remembers, from the exported state.
fn windows_of(state: &KernelState, sessions: &[SessionId]) -> (Vec<usize>, Vec<usize>) {
    let of = |id: SessionId| {
        let s = state.sessions.iter().find(|s| s.session_id == id).unwrap();
        (s.ended_leases.len(), s.ended_tickets.len())
    };
    sessions.iter().map(|&id| of(id)).unzip()
}

/// Ends `count` uncontended leases of `session`, one acquire and one release each.
fn end_leases(k: &mut Kernel, session: SessionId, count: usize) -> Vec<LeaseId> {
    (0..count)
        .map(|_| {
            let id = granted(
                k.acquire(session, &["MUTATES FILE:/x"], AcquireOptions::default(), 1)
                    .unwrap(),
            );
            assert!(k.release(session, id, 1).unwrap());
            id
        })
        .collect()
}

/// The sessions a bound test uses: a quiet one first (its few ends are the oldest in the
/// kernel), then enough busy ones for their full windows to pass the kernel-wide bound
/// twice over their fill.
fn quiet_and_busy(k: &mut Kernel) -> Vec<SessionId> {
    let busy = ENDED_MEMORY_PER_KERNEL / ENDED_MEMORY_PER_SESSION + 16;
    (0..=busy)
        .map(|i| {
            k.open_session(&format!("agent-{i}"), "default", 0)
                .unwrap()
                .session_id
        })
        .collect()
}

#[test]
fn the_kernel_forgets_ended_leases_of_the_longest_windows_first() {
    let mut k = Kernel::new(Config::default()).unwrap();
    let sessions = quiet_and_busy(&mut k);
    let mut model = vec![0; sessions.len()];
    let mut ended: Vec<Vec<LeaseId>> = Vec::new();
    for (who, &session) in sessions.iter().enumerate() {
        let count = match who {
            0 => 10,
            _ => ENDED_MEMORY_PER_SESSION,
        };
        ended.push(end_leases(&mut k, session, count));
        for _ in 0..count {
            model_one_end(&mut model, who);
        }
    }
    let state = k.export_state();
    let (leases, _) = windows_of(&state, &sessions);
    assert_eq!(leases, model, "each window as the naive rule leaves it");
    assert!(leases.iter().sum::<usize>() <= ENDED_MEMORY_PER_KERNEL);
    assert_eq!(
        leases[0], 10,
        "the quiet session keeps its ends, the oldest in the kernel"
    );
    assert!(
        leases[1] < ENDED_MEMORY_PER_SESSION,
        "a busy session's window was cut"
    );
    // What each session still knows is exactly its newest ends.
    for (who, &session) in sessions.iter().enumerate() {
        let status = k.reconcile(session, &ended[who], 2).unwrap();
        let forgotten = ended[who].len() - leases[who];
        for (i, (_, s)) in status.iter().enumerate() {
            let expected = match i < forgotten {
                true => LeaseStatus::Unknown,
                false => LeaseStatus::Released,
            };
            assert_eq!(*s, expected, "session {who}, its end number {i}");
        }
    }
    let restored = Kernel::import_state(&state).unwrap();
    assert_eq!(
        restored.export_state(),
        state,
        "a restored kernel remembers the same"
    );
}

#[test]
fn the_kernel_forgets_ended_tickets_of_the_longest_windows_first() {
    let mut k = Kernel::new(Config::default()).unwrap();
    // Every waiter is older than the holder, so under Wait-Die each of them waits.
    let sessions = quiet_and_busy(&mut k);
    let holder = k.open_session("holder", "default", 0).unwrap().session_id;
    granted(
        k.acquire(holder, &["MUTATES FILE:/t"], AcquireOptions::default(), 1)
            .unwrap(),
    );
    let mut model = vec![0; sessions.len()];
    let mut ended: Vec<Vec<TicketId>> = Vec::new();
    for (who, &session) in sessions.iter().enumerate() {
        let count = match who {
            0 => 10,
            _ => ENDED_MEMORY_PER_SESSION,
        };
        let mut tickets = Vec::new();
        for _ in 0..count {
            let Verdict::Wait { ticket, .. } = k
                .acquire(session, &["MUTATES FILE:/t"], AcquireOptions::default(), 1)
                .unwrap()
            else {
                panic!("an older session waits");
            };
            k.cancel_wait(session, ticket, 1).unwrap();
            tickets.push(ticket);
            model_one_end(&mut model, who);
        }
        ended.push(tickets);
    }
    let state = k.export_state();
    let (_, tickets) = windows_of(&state, &sessions);
    assert_eq!(tickets, model, "each window as the naive rule leaves it");
    assert_eq!(tickets[0], 10, "the quiet session keeps its ends");
    assert!(tickets[1] < ENDED_MEMORY_PER_SESSION);
    for (who, &session) in sessions.iter().enumerate() {
        let forgotten = ended[who].len() - tickets[who];
        for (i, &ticket) in ended[who].iter().enumerate() {
            let expected = (i >= forgotten).then_some(false);
            assert_eq!(
                k.ticket_waiting(session, ticket),
                expected,
                "session {who}, {i}"
            );
        }
    }
}

#[test]
fn a_state_over_the_kernel_bound_is_restored_and_trimmed_by_the_next_operation() {
    // A state written before the kernel-wide bound existed may remember more; a restore
    // accepts it as it is, and the next operation applies the bound.
    let mut k = Kernel::new(Config::default()).unwrap();
    let gone = k.open_session("gone", "default", 0).unwrap().session_id;
    let forgotten = end_leases(&mut k, gone, 100);
    k.close_session(gone, 1).unwrap();
    let late = k.open_session("late", "default", 0).unwrap().session_id;
    let busy: Vec<SessionId> = (0..ENDED_MEMORY_PER_KERNEL / ENDED_MEMORY_PER_SESSION)
        .map(|i| {
            let s = k
                .open_session(&format!("busy-{i}"), "default", 0)
                .unwrap()
                .session_id;
            end_leases(&mut k, s, ENDED_MEMORY_PER_SESSION);
            s
        })
        .collect();
    let mut state = k.export_state();
    let (full, _) = windows_of(&state, &busy);
    assert_eq!(
        full.iter().sum::<usize>(),
        ENDED_MEMORY_PER_KERNEL,
        "exactly at the bound"
    );
    let late_state = state
        .sessions
        .iter_mut()
        .find(|s| s.session_id == late)
        .unwrap();
    late_state.ended_leases = forgotten.iter().map(|&id| (id, true)).collect();
    let mut old = Kernel::import_state(&state).unwrap();
    assert_eq!(old.export_state(), state, "restored as it was");
    old.advance(2);
    let after = old.export_state();
    let (late_window, _) = windows_of(&after, &[late]);
    let (busy_windows, _) = windows_of(&after, &busy);
    assert_eq!(late_window, [100], "below the level: kept");
    let level = (ENDED_MEMORY_AFTER_TRIM - 100) / busy.len();
    assert!(
        busy_windows.iter().all(|&w| w == level),
        "{busy_windows:?} at {level}"
    );
}
