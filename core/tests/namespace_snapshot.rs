//! `Kernel::namespace_snapshot` (docs/SPEC.md §10, §12): the state cut to one namespace, read
//! from `&self`. It must equal the full snapshot at the same time, cut by hand: that
//! namespace's sessions, their leases and tickets, totals of those, and that namespace's
//! contended resources (counters and ghost agents stay kernel-wide). It settles nothing, an
//! unknown namespace gives empty lists, and a malformed one is `INVALID_NAMESPACE`.

use klock_core::{AcquireOptions, Config, ErrorCode, Kernel, Snapshot, Verdict};

/// Two namespaces with holders, a waiter (so contention) and a lease that lapses at 1 000.
fn kernel() -> Kernel {
    let mut k = Kernel::new(Config::default()).unwrap();
    let waits = AcquireOptions {
        wait_timeout_ms: Some(5_000),
        ..AcquireOptions::default()
    };
    for ns in ["alpha", "beta"] {
        let old = k.open_session("old", ns, 0).unwrap().session_id;
        let young = k.open_session("young", ns, 0).unwrap().session_id;
        let short = AcquireOptions {
            ttl_ms: Some(1_000),
            ..AcquireOptions::default()
        };
        let granted = k.acquire(young, &["MUTATES FILE:/x"], short, 0).unwrap();
        assert!(matches!(granted, Verdict::Granted { .. }), "{granted:?}");
        let verdict = k.acquire(old, &["MUTATES FILE:/x"], waits, 0).unwrap();
        assert!(matches!(verdict, Verdict::Wait { .. }), "{verdict:?}");
        let reader = k.open_session("reader", ns, 0).unwrap().session_id;
        let read = k
            .acquire(reader, &["CONSUMES FILE:/docs"], waits, 0)
            .unwrap();
        assert!(matches!(read, Verdict::Granted { .. }), "{read:?}");
    }
    while k.poll_event().is_some() {}
    k
}

/// The full snapshot cut to `ns` the long way.
fn cut(mut full: Snapshot, ns: &str) -> Snapshot {
    full.sessions.retain(|s| s.namespace == ns);
    let ids: Vec<_> = full.sessions.iter().map(|s| s.session_id).collect();
    full.leases.retain(|l| ids.contains(&l.session_id));
    full.tickets.retain(|t| ids.contains(&t.session_id));
    full.stats.top_contended.retain(|c| c.namespace == ns);
    full.stats.active_sessions = full.sessions.len() as u64;
    full.stats.active_leases = full.leases.len() as u64;
    full.stats.waiting_tickets = full.tickets.len() as u64;
    full
}

#[test]
fn it_is_the_full_snapshot_cut_to_the_namespace() {
    let k = kernel();
    for ns in ["alpha", "beta"] {
        let view = k.namespace_snapshot(ns).unwrap();
        assert_eq!(view, cut(k.clone().snapshot(0), ns));
        assert_eq!(view.sessions.len(), 3);
        assert_eq!(view.leases.len(), 2);
        assert_eq!(view.tickets.len(), 1);
        assert_eq!(view.stats.top_contended.len(), 1, "{:?}", view.stats);
        assert!(view.sessions.iter().all(|s| s.namespace == ns));
    }
}

#[test]
fn it_settles_nothing_and_changes_nothing() {
    let k = kernel();
    let before = k.namespace_snapshot("alpha").unwrap();
    assert_eq!(before.now, 0);
    assert_eq!(before.next_deadline, Some(1_000));
    // At 2 000 the young holder's lease would have lapsed; the view is of the last call, so
    // it is still there, and reading twice gives the same answer.
    assert_eq!(k.namespace_snapshot("alpha").unwrap(), before);
    let settled = cut(k.clone().snapshot(2_000), "alpha");
    assert_ne!(
        settled.leases, before.leases,
        "settling at 2 000 changes the leases"
    );
}

#[test]
fn an_unknown_namespace_is_empty_and_a_malformed_one_is_refused() {
    let k = kernel();
    let empty = k.namespace_snapshot("gamma").unwrap();
    assert!(empty.sessions.is_empty() && empty.leases.is_empty() && empty.tickets.is_empty());
    assert_eq!(
        (empty.stats.active_sessions, empty.stats.active_leases),
        (0, 0)
    );
    assert!(empty.stats.top_contended.is_empty());
    for bad in ["", "tab\there"] {
        let error = k.namespace_snapshot(bad).unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidNamespace, "{error:?}");
    }
}
