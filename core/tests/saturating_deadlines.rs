//! docs/SPEC.md §2 (rev 4): deadline arithmetic saturates at 2^64-1, and that deadline means
//! "never": it is not reported by `next_deadline()` and never settled, even by a call made at
//! `now = 2^64-1`. The JS hosts cannot express such times (their numbers stop at 2^53), so
//! these cases live here rather than in the shared vectors.

use klock_core::{AcquireOptions, Config, Event, Kernel, LeaseSelection, LeaseStatus, Verdict};

const END: u64 = u64::MAX;

#[test]
fn a_session_opened_at_the_end_of_time_is_never_closed_as_idle() {
    let mut k = Kernel::new(Config::default()).unwrap();
    let s = k.open_session("late", "default", END).unwrap().session_id;
    assert_eq!(
        k.next_deadline(),
        None,
        "an idle close at 2^64-1 means never"
    );
    k.advance(END);
    assert!(k.poll_event().is_none());
    // The next call naming it still finds it open.
    k.heartbeat(s, LeaseSelection::All, END).unwrap();
    assert!(k.digest(s, END).is_ok());
}

#[test]
fn leases_and_waits_whose_deadline_saturates_never_fall_due() {
    let config = Config {
        max_ttl_ms: END,
        ..Config::default()
    };
    let mut k = Kernel::new(config).unwrap();
    let now = END - 10;
    let a = k.open_session("a", "default", now).unwrap().session_id;
    let b = k.open_session("b", "default", now).unwrap().session_id;
    let options = AcquireOptions {
        ttl_ms: Some(100),
        ..AcquireOptions::default()
    };
    let Verdict::Granted { leases } = k.acquire(b, &["MUTATES FILE:/x"], options, now).unwrap()
    else {
        panic!("first acquire is granted")
    };
    assert_eq!(leases[0].expires_at, END);
    let waiting = AcquireOptions {
        wait_timeout_ms: Some(1_000),
        ..AcquireOptions::default()
    };
    // a is older than b: it waits, and its timeout saturates too.
    let verdict = k.acquire(a, &["MUTATES FILE:/x"], waiting, now).unwrap();
    assert!(matches!(verdict, Verdict::Wait { .. }), "{verdict:?}");
    assert_eq!(k.next_deadline(), None);
    assert!(matches!(k.poll_event(), Some(Event::Acquired { .. })));
    assert!(k.poll_event().is_none());
    k.advance(END);
    assert!(k.poll_event().is_none(), "nothing falls due at 2^64-1");
    let status = k.reconcile(b, &[leases[0].lease_id], END).unwrap();
    assert_eq!(
        status[0].1,
        LeaseStatus::Active {
            expires_at: END,
            fence: leases[0].fence
        }
    );
}
