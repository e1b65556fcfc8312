//! Arbitrary sequences of kernel operations — garbage strings, extreme numbers, unknown and
//! foreign ids, time jumping forwards, backwards and to `u64::MAX` — under an arbitrary
//! config. Never panics; after every operation the snapshot must be healthy:
//! no conflicting holders on overlapping resources, no waiter that nothing blocks, no
//! wait-for cycle, the policy's waiting order kept, no active lease or waiting ticket whose
//! deadline has passed, fences unique and increasing with lease ids, and no defensive repair.
//! Every policy is drawn, `detect` among them (docs/SPEC.md §6.1): there the checks above are
//! its own (no cycle of waiters left unbroken, no lost wake-up: a waiter nothing blocks), and
//! every DIE or DIED must name a real victim: a DIE of a request made with `wait` true names
//! a cycle, and a named cycle has distinct members, the victim first and the youngest of them
//! (largest priority), passes through the requester whose acquire closed it, and its other
//! members were waiting before that acquire. Under the other policies no cycle is named.
//!
//! `cargo +nightly fuzz run operations -- -max_total_time=120` (from core/).

#![no_main]

#[allow(dead_code)]
#[path = "../../examples/common/invariants.rs"]
mod invariants;

use klock_core::{
    AcquireOptions, Config, Event, Kernel, LeaseId, LeaseSelection, Policy, SessionId, Snapshot,
    StateDigest, TicketId, Verdict,
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
    /// The snapshot after the previous operation (the state the next one starts from).
    before: Option<Snapshot>,
}

/// Whether a request with `options` may wait: `wait` and a wait timeout above 0 (else a
/// blocked request is a failed try-lock, DIE under every policy).
fn may_wait(k: &Kernel, options: &AcquireOptions) -> bool {
    options.wait
        && options
            .wait_timeout_ms
            .unwrap_or(k.config().default_wait_timeout_ms)
            > 0
}

/// A DIE or DIED the last operation caused: `(victim, cycle)`.
type Death = (SessionId, Vec<SessionId>);

/// The deaths of one operation against the detect rules (see the module contract):
/// `requester` is the session whose acquire ran (`None`: another operation) and `waited`
/// whether it asked to wait; `deaths` the DIE verdict (first, if any) and DIED events.
fn check_deaths(
    s: &State,
    after: &Snapshot,
    requester: Option<SessionId>,
    waited_die: bool,
    deaths: &[Death],
) {
    let policy = after.policy;
    if policy != Policy::Detect {
        for (victim, cycle) in deaths {
            assert!(
                cycle.is_empty(),
                "{policy:?} named a cycle {cycle:?} for {victim:?}"
            );
        }
        return;
    }
    if waited_die {
        let (victim, cycle) = &deaths[0];
        assert!(
            !cycle.is_empty(),
            "detect: a request of {victim:?} made with wait true died without a cycle"
        );
    }
    let priority = |id: SessionId| {
        after
            .sessions
            .iter()
            .find(|v| v.session_id == id)
            .map(|v| v.priority)
    };
    for (victim, cycle) in deaths.iter().filter(|(_, c)| !c.is_empty()) {
        let who = format!("detect: the cycle {cycle:?} of victim {victim:?}");
        assert_eq!(cycle.first(), Some(victim), "{who} does not start with it");
        assert!(cycle.len() >= 2, "{who} is a self-loop");
        let mut distinct = cycle.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), cycle.len(), "{who} repeats a member");
        let requester = requester.unwrap_or_else(|| panic!("{who} named outside an acquire"));
        assert!(
            cycle.contains(&requester),
            "{who} misses the requester {requester:?}"
        );
        let youngest = cycle.iter().map(|&m| priority(m)).max().flatten();
        assert_eq!(
            priority(*victim),
            youngest,
            "{who}: not its youngest member"
        );
        let before = s
            .before
            .as_ref()
            .expect("a snapshot before every operation");
        for &member in cycle.iter().filter(|&&m| m != requester) {
            assert!(
                before.tickets.iter().any(|t| t.session_id == member),
                "{who}: member {member:?} was not waiting"
            );
        }
    }
}

/// `KLOCK_FUZZ_TRACE=1 cargo +nightly fuzz run operations <artifact>` prints every call.
fn trace() -> bool {
    static TRACE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TRACE.get_or_init(|| std::env::var_os("KLOCK_FUZZ_TRACE").is_some())
}

fn config(u: &mut Unstructured) -> Result<Config> {
    Ok(Config {
        // detect half the time (its cycle checks need many runs to form cycles), else any.
        policy: if u.arbitrary()? {
            Policy::Detect
        } else {
            *u.choose(&Policy::ALL)?
        },
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
    let op = u.int_in_range(0..=17)?;
    // For the detect checks: whose acquire ran, and what died.
    let mut requester: Option<SessionId> = None;
    let mut waited_die = false;
    let mut deaths: Vec<Death> = Vec::new();
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
            requester = Some(session);
            match traced!(k.acquire(session, &manifest, options, now)) {
                Ok(Verdict::Granted { leases }) => {
                    s.leases.extend(leases.iter().map(|l| l.lease_id))
                }
                Ok(Verdict::Wait { ticket, .. }) => s.tickets.push(ticket),
                Ok(Verdict::Die { cycle, .. }) => {
                    waited_die = may_wait(k, &options);
                    deaths.push((session, cycle));
                }
                Err(_) => {}
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
        16 | 17 => {
            // What closes wait-for cycles (random intents rarely do): a session that holds a
            // lease asks, waiting, for a resource another session holds.
            let before = s
                .before
                .as_ref()
                .expect("a snapshot before every operation");
            let holders: Vec<SessionId> = before.leases.iter().map(|l| l.session_id).collect();
            let (Ok(&session), Ok(lease)) = (u.choose(&holders), u.choose(&before.leases)) else {
                return Ok(());
            };
            let intent = format!("{} {}", u.choose(PREDICATES[..6].as_ref())?, lease.resource);
            let options = AcquireOptions {
                ttl_ms: None,
                wait: true,
                wait_timeout_ms: None,
            };
            requester = Some(session);
            match traced!(k.acquire(session, &[intent], options, now)) {
                Ok(Verdict::Granted { leases }) => {
                    s.leases.extend(leases.iter().map(|l| l.lease_id))
                }
                Ok(Verdict::Wait { ticket, .. }) => s.tickets.push(ticket),
                Ok(Verdict::Die { cycle, .. }) => {
                    waited_die = may_wait(k, &options);
                    deaths.push((session, cycle));
                }
                Err(_) => {}
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
        match event {
            Event::Granted { leases, .. } => s.leases.extend(leases.iter().map(|l| l.lease_id)),
            Event::Died { session, cycle, .. } => deaths.push((session, cycle)),
            _ => {}
        }
    }
    let after = check(s);
    check_deaths(s, &after, requester, waited_die, &deaths);
    s.before = Some(after);
    Ok(())
}

/// Checks the state after an operation and returns its snapshot.
fn check(s: &mut State) -> Snapshot {
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
    snapshot
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
        before: None,
    };
    state.before = Some(state.kernel.snapshot(0));
    for _ in 0..64 {
        if u.is_empty() || step(&mut u, &mut state).is_err() {
            break;
        }
    }
});
