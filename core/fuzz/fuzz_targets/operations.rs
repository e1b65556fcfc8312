//! Arbitrary sequences of kernel operations — garbage strings, extreme numbers, unknown and
//! foreign ids, time jumping forwards, backwards and to `u64::MAX` — under an arbitrary
//! config. Never panics; after every operation the snapshot must be healthy:
//! no conflicting holders on overlapping resources, no waiter that nothing blocks, no
//! wait-for cycle, the policy's waiting order kept, no active lease or waiting ticket whose
//! deadline has passed, fences unique and increasing with lease ids, and no defensive repair.
//!
//! `cargo +nightly fuzz run operations -- -max_total_time=120` (from core/).

#![no_main]

#[allow(dead_code)]
#[path = "../../examples/common/invariants.rs"]
mod invariants;

use klock_core::{
    AcquireOptions, Config, Event, Kernel, LeaseId, LeaseSelection, Policy, SessionId, StateDigest,
    TicketId, Verdict,
};
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;

const RESOURCES: &[&str] = &[
    "FILE:/",
    "FILE:/a",
    "FILE:/a/b",
    "FILE:/a/b/c",
    "FILE:/a/c",
    "FILE:/ab",
    "FILE://a/./b/",
    "SYMBOL:/a",
    "FILE:/a/../b",
    "file:/a",
];
const PREDICATES: &[&str] = &[
    "PROVIDES",
    "CONSUMES",
    "MUTATES",
    "DELETES",
    "DEPENDS_ON",
    "RENAMES",
    "mutates",
    "Consumes",
    "WRITES",
];
const NUMBERS: &[u64] = &[
    0,
    1,
    2,
    5,
    50,
    100,
    1_000,
    30_000,
    60_000,
    300_000,
    1 << 53,
    u64::MAX - 1,
    u64::MAX,
];

fn number(u: &mut Unstructured) -> Result<u64> {
    if u.ratio(1, 4)? {
        u.arbitrary()
    } else {
        u.choose(NUMBERS).copied()
    }
}

fn text(u: &mut Unstructured, pool: &[&str]) -> Result<String> {
    if u.ratio(1, 8)? {
        u.arbitrary()
    } else {
        Ok(u.choose(pool)?.to_string())
    }
}

fn intent(u: &mut Unstructured) -> Result<String> {
    if u.ratio(1, 16)? {
        return u.arbitrary();
    }
    Ok(format!("{} {}", text(u, PREDICATES)?, text(u, RESOURCES)?))
}

/// A known id most of the time, an arbitrary one sometimes.
fn pick<T: Copy>(u: &mut Unstructured, known: &[T], make: fn(u64) -> T) -> Result<T> {
    if known.is_empty() || u.ratio(1, 8)? {
        Ok(make(u.arbitrary()?))
    } else {
        u.choose(known).copied()
    }
}

struct State {
    kernel: Kernel,
    now: u64,
    sessions: Vec<SessionId>,
    leases: Vec<LeaseId>,
    tickets: Vec<TicketId>,
    digests: Vec<StateDigest>,
    /// Every lease seen in a snapshot, with its fence.
    fences: BTreeMap<LeaseId, u64>,
}

/// `KLOCK_FUZZ_TRACE=1 cargo +nightly fuzz run operations <artifact>` prints every call.
fn trace() -> bool {
    static TRACE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TRACE.get_or_init(|| std::env::var_os("KLOCK_FUZZ_TRACE").is_some())
}

fn config(u: &mut Unstructured) -> Result<Config> {
    Ok(Config {
        policy: *u.choose(&Policy::ALL)?,
        seed: u.arbitrary()?,
        default_ttl_ms: number(u)?,
        max_ttl_ms: number(u)?,
        default_wait_timeout_ms: number(u)?,
        backoff_base_ms: number(u)?,
        backoff_cap_ms: number(u)?,
        grace_ms: number(u)?,
        session_idle_ms: number(u)?,
        max_leases_per_session: *u.choose(&[0, 1, 2, 3, 8, 1_024, u64::MAX])?,
        max_lease_lifetime_ms: number(u)?,
    })
}

fn step(u: &mut Unstructured, s: &mut State) -> Result<()> {
    // Time: mostly forward by a little, sometimes a jump, sometimes backwards.
    s.now = match u.int_in_range(0..=9)? {
        0..=5 => s.now.saturating_add(u.int_in_range(0..=200)?),
        6 => s.now.saturating_add(number(u)?),
        7 => s.now.saturating_sub(u.int_in_range(0..=1_000)?),
        8 => s.kernel.next_deadline().unwrap_or(s.now),
        _ => s.now,
    };
    let now = s.now;
    let k = &mut s.kernel;
    let op = u.int_in_range(0..=15)?;
    macro_rules! traced {
        ($e:expr) => {{
            let r = $e;
            if trace() {
                eprintln!("[{now}] {} -> {:?}", stringify!($e), r);
            }
            r
        }};
    }
    match op {
        0 | 1 => {
            let (agent, namespace) = (
                text(u, &["a", "b", "c", "d"])?,
                text(u, &["default", "other"])?,
            );
            if let Ok(info) = traced!(k.open_session(&agent, &namespace, now)) {
                s.sessions.push(info.session_id);
            }
        }
        2..=5 => {
            let session = pick(u, &s.sessions, SessionId)?;
            let count = if u.ratio(1, 64)? {
                257
            } else {
                u.int_in_range(0..=4)?
            };
            let manifest: Vec<String> = (0..count).map(|_| intent(u)).collect::<Result<_>>()?;
            let options = AcquireOptions {
                ttl_ms: if u.arbitrary()? {
                    Some(number(u)?)
                } else {
                    None
                },
                wait: u.ratio(3, 4)?,
                wait_timeout_ms: if u.arbitrary()? {
                    Some(number(u)?)
                } else {
                    None
                },
            };
            match traced!(k.acquire(session, &manifest, options, now)) {
                Ok(Verdict::Granted { leases }) => {
                    s.leases.extend(leases.iter().map(|l| l.lease_id))
                }
                Ok(Verdict::Wait { ticket, .. }) => s.tickets.push(ticket),
                _ => {}
            }
        }
        6 => {
            let (session, lease) = (
                pick(u, &s.sessions, SessionId)?,
                pick(u, &s.leases, LeaseId)?,
            );
            let _ = traced!(k.release(session, lease, now));
        }
        7 => {
            let session = pick(u, &s.sessions, SessionId)?;
            let _ = traced!(k.release_all(session, now));
        }
        8 => {
            let session = pick(u, &s.sessions, SessionId)?;
            if u.arbitrary()? {
                let _ = traced!(k.heartbeat(session, LeaseSelection::All, now));
            } else {
                let ids: Vec<LeaseId> = (0..u.int_in_range(0..=3)?)
                    .map(|_| pick(u, &s.leases, LeaseId))
                    .collect::<Result<_>>()?;
                let _ = traced!(k.heartbeat(session, LeaseSelection::Ids(&ids), now));
            }
        }
        9 => {
            let ids: Vec<LeaseId> = (0..u.int_in_range(0..=3)?)
                .map(|_| pick(u, &s.leases, LeaseId))
                .collect::<Result<_>>()?;
            let session = pick(u, &s.sessions, SessionId)?;
            let _ = traced!(k.reconcile(session, &ids, now));
        }
        10 => {
            let (session, ticket) = (
                pick(u, &s.sessions, SessionId)?,
                pick(u, &s.tickets, TicketId)?,
            );
            let _ = traced!(k.cancel_wait(session, ticket, now));
        }
        11 => {
            let session = pick(u, &s.sessions, SessionId)?;
            let _ = traced!(k.close_session(session, now));
        }
        12 => {
            let session = pick(u, &s.sessions, SessionId)?;
            let _ = traced!(k.suspend_session(session, now));
        }
        13 => {
            let session = pick(u, &s.sessions, SessionId)?;
            if let Ok(d) = traced!(k.digest(session, now)) {
                s.digests.push(d);
            }
        }
        14 => {
            if let Some(mut d) = u.choose(&s.digests).ok().cloned() {
                match u.int_in_range(0..=5)? {
                    0 => d.identity.epoch = number(u)?,
                    1 => d.identity.priority_timestamp = number(u)?,
                    2 => d.identity.agent_id = u.arbitrary()?,
                    3 => d.version = u.arbitrary()?,
                    _ => {}
                }
                let _ = traced!(k.resume_session(&d, now));
            }
        }
        _ => {
            if u.arbitrary()? {
                traced!(k.advance(now));
            } else {
                let (resource, namespace) = (text(u, RESOURCES)?, text(u, &["default", "other"])?);
                let _ = traced!(k.resource_state(&resource, &namespace, now));
            }
        }
    }
    while let Some(event) = k.poll_event() {
        if trace() {
            eprintln!("    event {event:?}");
        }
        if let Event::Granted { leases, .. } = event {
            s.leases.extend(leases.iter().map(|l| l.lease_id));
        }
    }
    check(s);
    Ok(())
}

fn check(s: &mut State) {
    let now = s.kernel.now();
    let snapshot = s.kernel.snapshot(now);
    // snapshot() settles at `now`, which the operation already did: nothing new to report.
    // Except at the end of time: at u64::MAX every deadline a call creates saturates to
    // u64::MAX, already due, and is settled by the next call (docs/SPEC.md §2 allows a
    // `next_deadline` in the past; the host then calls `advance` at once).
    if now == u64::MAX {
        while s.kernel.poll_event().is_some() {}
    }
    assert_eq!(
        s.kernel.pending_events(),
        0,
        "snapshot at the current time emitted events"
    );
    let findings = invariants::check(&snapshot);
    assert!(
        findings.is_clean(),
        "unhealthy state after an operation: {findings:?}\n{snapshot:#?}"
    );
    assert_eq!(
        snapshot.stats.counters.defensive_repairs, 0,
        "a defensive repair was needed"
    );
    for lease in &snapshot.leases {
        assert!(
            lease.expires_at > now || now == u64::MAX,
            "lease {} active at {now} but expired at {}",
            lease.lease_id,
            lease.expires_at
        );
        let previous = s.fences.insert(lease.lease_id, lease.fence);
        assert!(
            previous.is_none_or(|f| f == lease.fence),
            "lease {} changed its fence",
            lease.lease_id
        );
    }
    for ticket in &snapshot.tickets {
        assert!(
            ticket.deadline > now || now == u64::MAX,
            "ticket {} waiting at {now} past its deadline {}",
            ticket.ticket,
            ticket.deadline
        );
    }
    // Fences increase with lease ids (both grow with every grant).
    let mut last = 0;
    for (&id, &fence) in &s.fences {
        assert!(
            fence > last,
            "fence of lease {id} ({fence}) is not above the previous lease's ({last})"
        );
        last = fence;
    }
    if let Some(next) = snapshot.next_deadline {
        assert!(
            next > now || now == u64::MAX,
            "deadline {next} still pending after settling {now}"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(config) = config(&mut u) else { return };
    if trace() {
        eprintln!("{config:?}");
    }
    let Ok(kernel) = Kernel::new(config) else {
        return;
    };
    let mut state = State {
        kernel,
        now: 0,
        sessions: Vec::new(),
        leases: Vec::new(),
        tickets: Vec::new(),
        digests: Vec::new(),
        fences: BTreeMap::new(),
    };
    for _ in 0..64 {
        if u.is_empty() || step(&mut u, &mut state).is_err() {
            break;
        }
    }
});
