//! A live session remembers only its most recent ENDED_MEMORY_PER_SESSION ended leases and
//! tickets: exact answers inside the window, UNKNOWN beyond it (bounded memory). The same
//! holds for `ticket_waiting`, the pure query of where a ticket stands.

use klock_core::{
    AcquireOptions, Config, ErrorCode, Kernel, LeaseId, LeaseStatus, TicketId, Verdict,
    ENDED_MEMORY_PER_SESSION,
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
