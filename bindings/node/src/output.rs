//! Output conversion: the kernel's owned answers as plain JS objects.
//!
//! Contract: one JS shape per core type, field for field, names in camelCase; ids, times,
//! fences and counts as numbers; predicates, statuses, event kinds and verdicts as the core's
//! upper-case names. Tagged unions carry their tag in `verdict` (acquire) or `event`
//! (events). Optional values are `null` in snapshots and absent elsewhere. These are the
//! shapes of the one JS API (bindings/js-api/kernel.d.ts), replayed against the core's own
//! answers by the resolved scripts; the generated declarations are checked against it.

use crate::shapes::{self, Shape};
use crate::shared::camel;
use napi::bindgen_prelude::*;
use napi::sys;
use napi_derive::napi;

/// A u64 from the kernel as a JS number (exact up to 2^53 − 1).
pub(crate) fn num(x: u64) -> f64 {
    x as f64
}

/// One intent: what to do to which resource.
#[napi(object, object_from_js = false)]
pub struct Intent {
    #[napi(ts_type = "Predicate")]
    pub predicate: String,
    /// Canonical `TYPE:/path`.
    pub resource: String,
}

impl From<&klock_core::Intent> for Intent {
    fn from(i: &klock_core::Intent) -> Intent {
        Intent {
            predicate: i.predicate.name().to_owned(),
            resource: i.resource.clone(),
        }
    }
}

/// A session as opened or resumed.
#[napi(object, object_from_js = false)]
pub struct SessionInfo {
    pub session_id: f64,
    pub agent_id: String,
    pub namespace: String,
    /// Smaller = older = higher priority. Only the order is meaningful.
    pub priority: f64,
    pub epoch: f64,
}

impl From<klock_core::SessionInfo> for SessionInfo {
    fn from(s: klock_core::SessionInfo) -> SessionInfo {
        SessionInfo {
            session_id: num(s.session_id.0),
            agent_id: s.agent_id,
            namespace: s.namespace,
            priority: num(s.priority),
            epoch: num(s.epoch),
        }
    }
}

/// A granted lease. A lease alone is not mutual exclusion when its holder can pause past
/// `expiresAt`: the protected resource must reject writes carrying a `fence` smaller than the
/// largest it has seen.
///
/// (Declaration for the type definitions; values are built by [`LeaseJs`].)
#[napi(object, object_from_js = false, object_to_js = false)]
pub struct Lease {
    pub lease_id: f64,
    pub session_id: f64,
    pub agent_id: String,
    /// Canonical `TYPE:/path`.
    pub resource: String,
    #[napi(ts_type = "Predicate")]
    pub predicate: String,
    /// Strictly increasing across every grant of the kernel.
    pub fence: f64,
    pub acquired_at: f64,
    /// Effective expiry (suspension grace included).
    pub expires_at: f64,
    pub ttl_ms: f64,
}

/// A session that blocks a request, and its conflicting intents (held or queued ahead).
#[napi(object, object_from_js = false)]
pub struct Blocker {
    pub session_id: f64,
    pub agent_id: String,
    pub intents: Vec<Intent>,
}

fn blockers(list: Vec<klock_core::Blocker>) -> Vec<Blocker> {
    list.into_iter()
        .map(|b| Blocker {
            session_id: num(b.session_id.0),
            agent_id: b.agent_id,
            intents: b.intents.iter().map(Intent::from).collect(),
        })
        .collect()
}

/// The immediate answer to an acquire.
///
/// (Declaration for the type definitions; values are built by [`VerdictJs`].)
#[napi(
    discriminant = "verdict",
    discriminant_case = "UPPER_SNAKE",
    object_from_js = false,
    object_to_js = false
)]
pub enum Verdict {
    /// Every intent is a lease now, one per distinct intent in order of first appearance.
    Granted { leases: Vec<Lease> },
    /// Queued; resolved later by a GRANTED, WAIT_TIMEOUT, DIED or WOUNDED event.
    Wait { ticket: f64, held_by: Vec<Blocker> },
    /// Nothing held or queued; retry after `retryAfterMs` (the session keeps its priority).
    /// `cycle`: under `detect`, the session ids of the wait-for cycle this request was the
    /// victim of, this session first (SPEC.md §6.1); absent otherwise.
    Die {
        retry_after_ms: f64,
        held_by: Vec<Blocker>,
        cycle: Option<Vec<f64>>,
    },
}

/// Something that happened other than as the direct answer of a call (SPEC.md §9).
///
/// (Declaration for the type definitions; values are built by [`EventJs`].)
#[napi(
    discriminant = "event",
    discriminant_case = "UPPER_SNAKE",
    object_from_js = false,
    object_to_js = false
)]
pub enum Event {
    Granted {
        ticket: f64,
        session: f64,
        leases: Vec<Lease>,
    },
    WaitTimeout {
        ticket: f64,
        session: f64,
    },
    /// A waiting ticket was withdrawn (counts as a DIE); `cycle`: under `detect`, the session
    /// ids of the wait-for cycle it was the victim of, this session first; absent otherwise.
    Died {
        ticket: f64,
        session: f64,
        retry_after_ms: f64,
        cycle: Option<Vec<f64>>,
    },
    LeaseExpired {
        lease: f64,
        session: f64,
    },
    /// An older session revoked this one's leases and/or tickets (`wound_wait`); counts as a
    /// DIE (SPEC.md §8): wait `retryAfterMs` before asking again.
    Wounded {
        session: f64,
        by: f64,
        lost_leases: Vec<f64>,
        lost_tickets: Vec<f64>,
        retry_after_ms: f64,
    },
    SessionClosed {
        session: f64,
        #[napi(ts_type = "'IDLE'")]
        reason: String,
    },
    /// An acquire was granted at once: the verdict's leases (SPEC.md §9).
    Acquired {
        session: f64,
        leases: Vec<Lease>,
    },
    /// Leases ended by their holder (`release`, `releaseAll`, `closeSession`), by id,
    /// ascending (SPEC.md §9).
    Released {
        session: f64,
        leases: Vec<f64>,
    },
}

unsafe fn number(env: sys::napi_env, x: u64) -> Result<sys::napi_value> {
    unsafe { f64::to_napi_value(env, num(x)) }
}

/// A kernel lease on its way to JS (a [`Lease`] object).
pub struct LeaseJs(pub klock_core::Lease);

impl LeaseJs {
    unsafe fn args(env: sys::napi_env, l: klock_core::Lease) -> Result<[sys::napi_value; 9]> {
        unsafe {
            Ok([
                number(env, l.lease_id.0)?,
                number(env, l.session_id.0)?,
                String::to_napi_value(env, l.agent_id)?,
                String::to_napi_value(env, l.resource)?,
                shapes::predicate(env, l.predicate)?,
                number(env, l.fence)?,
                number(env, l.acquired_at)?,
                number(env, l.expires_at)?,
                number(env, l.ttl_ms)?,
            ])
        }
    }
}

impl ToNapiValue for LeaseJs {
    unsafe fn to_napi_value(env: sys::napi_env, val: LeaseJs) -> Result<sys::napi_value> {
        unsafe {
            let args = LeaseJs::args(env, val.0)?;
            shapes::call(env, Shape::Lease, &args)
        }
    }
}

/// Session ids as a JS array of numbers.
unsafe fn session_ids(
    env: sys::napi_env,
    ids: Vec<klock_core::SessionId>,
) -> Result<sys::napi_value> {
    let ids: Vec<f64> = ids.into_iter().map(|s| num(s.0)).collect();
    unsafe { Vec::to_napi_value(env, ids) }
}

fn lease_list(list: Vec<klock_core::Lease>) -> Vec<LeaseJs> {
    list.into_iter().map(LeaseJs).collect()
}

/// A verdict on its way to JS (a [`Verdict`] object).
pub struct VerdictJs(pub klock_core::Verdict);

impl ToNapiValue for VerdictJs {
    unsafe fn to_napi_value(env: sys::napi_env, val: VerdictJs) -> Result<sys::napi_value> {
        unsafe {
            match val.0 {
                klock_core::Verdict::Granted { mut leases } if leases.len() == 1 => {
                    let args = LeaseJs::args(env, leases.pop().expect("one lease"))?;
                    shapes::call(env, Shape::GrantedOne, &args)
                }
                klock_core::Verdict::Granted { leases } => shapes::call(
                    env,
                    Shape::Granted,
                    &[Vec::to_napi_value(env, lease_list(leases))?],
                ),
                klock_core::Verdict::Wait { ticket, held_by } => shapes::call(
                    env,
                    Shape::Wait,
                    &[
                        number(env, ticket.0)?,
                        Vec::to_napi_value(env, blockers(held_by))?,
                    ],
                ),
                klock_core::Verdict::Die {
                    retry_after_ms,
                    held_by,
                    cycle,
                } if cycle.is_empty() => shapes::call(
                    env,
                    Shape::Die,
                    &[
                        number(env, retry_after_ms)?,
                        Vec::to_napi_value(env, blockers(held_by))?,
                    ],
                ),
                klock_core::Verdict::Die {
                    retry_after_ms,
                    held_by,
                    cycle,
                } => shapes::call(
                    env,
                    Shape::DieInCycle,
                    &[
                        number(env, retry_after_ms)?,
                        Vec::to_napi_value(env, blockers(held_by))?,
                        session_ids(env, cycle)?,
                    ],
                ),
            }
        }
    }
}

/// An event on its way to JS (an [`Event`] object; its kind is the core's name for it).
pub struct EventJs(pub klock_core::Event);

impl ToNapiValue for EventJs {
    unsafe fn to_napi_value(env: sys::napi_env, val: EventJs) -> Result<sys::napi_value> {
        use klock_core::Event as E;
        let ids = |list: Vec<u64>| -> Result<sys::napi_value> {
            unsafe { Vec::to_napi_value(env, list.into_iter().map(num).collect::<Vec<f64>>()) }
        };
        unsafe {
            let kind = <&str>::to_napi_value(env, val.0.name())?;
            match val.0 {
                E::Granted {
                    ticket,
                    session,
                    leases,
                } => shapes::call(
                    env,
                    Shape::EventGranted,
                    &[
                        kind,
                        number(env, ticket.0)?,
                        number(env, session.0)?,
                        Vec::to_napi_value(env, lease_list(leases))?,
                    ],
                ),
                E::Acquired { session, leases } => shapes::call(
                    env,
                    Shape::EventSessionLeases,
                    &[
                        kind,
                        number(env, session.0)?,
                        Vec::to_napi_value(env, lease_list(leases))?,
                    ],
                ),
                E::Released { session, leases } => shapes::call(
                    env,
                    Shape::EventSessionLeases,
                    &[
                        kind,
                        number(env, session.0)?,
                        ids(leases.iter().map(|l| l.0).collect())?,
                    ],
                ),
                E::WaitTimeout { ticket, session } => shapes::call(
                    env,
                    Shape::EventWaitTimeout,
                    &[kind, number(env, ticket.0)?, number(env, session.0)?],
                ),
                E::Died {
                    ticket,
                    session,
                    retry_after_ms,
                    cycle,
                } if cycle.is_empty() => shapes::call(
                    env,
                    Shape::EventDied,
                    &[
                        kind,
                        number(env, ticket.0)?,
                        number(env, session.0)?,
                        number(env, retry_after_ms)?,
                    ],
                ),
                E::Died {
                    ticket,
                    session,
                    retry_after_ms,
                    cycle,
                } => shapes::call(
                    env,
                    Shape::EventDiedInCycle,
                    &[
                        kind,
                        number(env, ticket.0)?,
                        number(env, session.0)?,
                        number(env, retry_after_ms)?,
                        session_ids(env, cycle)?,
                    ],
                ),
                E::LeaseExpired { lease, session } => shapes::call(
                    env,
                    Shape::EventLeaseExpired,
                    &[kind, number(env, lease.0)?, number(env, session.0)?],
                ),
                E::Wounded {
                    session,
                    by,
                    lost_leases,
                    lost_tickets,
                    retry_after_ms,
                } => shapes::call(
                    env,
                    Shape::EventWounded,
                    &[
                        kind,
                        number(env, session.0)?,
                        number(env, by.0)?,
                        ids(lost_leases.iter().map(|l| l.0).collect())?,
                        ids(lost_tickets.iter().map(|t| t.0).collect())?,
                        number(env, retry_after_ms)?,
                    ],
                ),
                E::SessionClosed { session, reason } => shapes::call(
                    env,
                    Shape::EventSessionClosed,
                    &[
                        kind,
                        number(env, session.0)?,
                        <&str>::to_napi_value(env, reason.name())?,
                    ],
                ),
            }
        }
    }
}

/// The outcome of a heartbeat for one lease.
#[napi(object, object_from_js = false)]
pub struct HeartbeatResult {
    pub lease_id: f64,
    #[napi(
        ts_type = "'OK' | 'LEASE_EXPIRED' | 'LEASE_RELEASED' | 'NOT_OWNER' | 'UNKNOWN_LEASE' | 'LIFETIME_EXCEEDED'"
    )]
    pub status: String,
    /// The new expiry, when `status` is `'OK'`.
    pub expires_at: Option<f64>,
}

impl From<(klock_core::LeaseId, klock_core::HeartbeatOutcome)> for HeartbeatResult {
    fn from((id, outcome): (klock_core::LeaseId, klock_core::HeartbeatOutcome)) -> HeartbeatResult {
        match outcome {
            Ok(at) => HeartbeatResult {
                lease_id: num(id.0),
                status: String::from("OK"),
                expires_at: Some(num(at)),
            },
            Err(code) => HeartbeatResult {
                lease_id: num(id.0),
                status: code.name().to_owned(),
                expires_at: None,
            },
        }
    }
}

/// The kernel's truth about one lease (KLIS-3 VERIFY_ALL).
#[napi(object, object_from_js = false)]
pub struct ReconcileResult {
    pub lease_id: f64,
    #[napi(ts_type = "'ACTIVE' | 'EXPIRED' | 'RELEASED' | 'NOT_OWNER' | 'UNKNOWN'")]
    pub status: String,
    /// When `status` is `'ACTIVE'`.
    pub expires_at: Option<f64>,
    /// When `status` is `'ACTIVE'`.
    pub fence: Option<f64>,
}

impl From<(klock_core::LeaseId, klock_core::LeaseStatus)> for ReconcileResult {
    fn from((id, status): (klock_core::LeaseId, klock_core::LeaseStatus)) -> ReconcileResult {
        let (expires_at, fence) = match status {
            klock_core::LeaseStatus::Active { expires_at, fence } => {
                (Some(num(expires_at)), Some(num(fence)))
            }
            _ => (None, None),
        };
        ReconcileResult {
            lease_id: num(id.0),
            status: status.name().to_owned(),
            expires_at,
            fence,
        }
    }
}

/// A holder of a lease on a node.
#[napi(object, object_from_js = false)]
pub struct Holder {
    pub session_id: f64,
    pub agent_id: String,
    pub lease_id: f64,
    pub resource: String,
    #[napi(ts_type = "Predicate")]
    pub predicate: String,
    pub fence: f64,
    pub expires_at: f64,
}

fn holders(list: Vec<klock_core::Holder>) -> Vec<Holder> {
    list.into_iter()
        .map(|h| Holder {
            session_id: num(h.session_id.0),
            agent_id: h.agent_id,
            lease_id: num(h.lease_id.0),
            resource: h.resource,
            predicate: h.predicate.name().to_owned(),
            fence: num(h.fence),
            expires_at: num(h.expires_at),
        })
        .collect()
}

/// A queued intent on a node.
#[napi(object, object_from_js = false)]
pub struct Waiter {
    pub session_id: f64,
    pub agent_id: String,
    pub ticket: f64,
    #[napi(ts_type = "Predicate")]
    pub predicate: String,
    /// 0-based position in this node's queue.
    pub position: f64,
    /// When the wait times out.
    pub deadline: f64,
}

/// Who holds and who waits on one resource node (SPEC.md §10).
#[napi(object, object_from_js = false)]
pub struct ResourceState {
    pub resource: String,
    pub namespace: String,
    pub holders: Vec<Holder>,
    /// In queue order.
    pub waiting: Vec<Waiter>,
    /// Holders on ancestors and descendants whose resources overlap this one.
    pub covering: Vec<Holder>,
}

impl From<klock_core::ResourceState> for ResourceState {
    fn from(s: klock_core::ResourceState) -> ResourceState {
        ResourceState {
            resource: s.resource,
            namespace: s.namespace,
            holders: holders(s.holders),
            waiting: s
                .waiting
                .into_iter()
                .map(|w| Waiter {
                    session_id: num(w.session_id.0),
                    agent_id: w.agent_id,
                    ticket: num(w.ticket.0),
                    predicate: w.predicate.name().to_owned(),
                    position: w.position as f64,
                    deadline: num(w.deadline),
                })
                .collect(),
            covering: holders(s.covering),
        }
    }
}

/// Persistent recovery state of a session (KLIS-8 shape); pass it back to `resumeSession`.
#[napi(object, object_from_js = false)]
pub struct StateDigest {
    pub version: u32,
    pub identity: DigestIdentity,
    pub recovery: DigestRecovery,
}

/// Who the session is; checked against the kernel's record on resume.
#[napi(object, object_from_js = false)]
pub struct DigestIdentity {
    pub agent_id: String,
    pub namespace: String,
    pub session_id: f64,
    pub priority_timestamp: f64,
    pub epoch: f64,
}

/// What the session was doing when the digest was taken.
#[napi(object, object_from_js = false)]
pub struct DigestRecovery {
    #[napi(ts_type = "'IDLE' | 'WAITING' | 'HOLDING' | 'SUSPENDED'")]
    pub last_phase: String,
    /// The intents of the session's waiting tickets, as `"PREDICATE TYPE:/path"`.
    pub pending_intents: Vec<String>,
}

impl From<klock_core::StateDigest> for StateDigest {
    fn from(d: klock_core::StateDigest) -> StateDigest {
        StateDigest {
            version: d.version,
            identity: DigestIdentity {
                agent_id: d.identity.agent_id,
                namespace: d.identity.namespace,
                session_id: num(d.identity.session_id.0),
                priority_timestamp: num(d.identity.priority_timestamp),
                epoch: num(d.identity.epoch),
            },
            recovery: DigestRecovery {
                last_phase: d.recovery.last_phase,
                pending_intents: d.recovery.pending_intents,
            },
        }
    }
}

/// Exact counts of every outcome since the kernel was created.
#[napi(object, object_from_js = false)]
pub struct Counters {
    pub sessions_opened: f64,
    /// GRANTED verdicts plus GRANTED events.
    pub granted: f64,
    /// WAIT verdicts.
    pub waited: f64,
    /// DIE verdicts plus DIED events.
    pub died: f64,
    pub timed_out: f64,
    pub expired: f64,
    /// WOUNDED events (sessions wounded).
    pub wounded: f64,
    pub released: f64,
    pub cancelled: f64,
    pub idle_closed: f64,
    /// Waiters withdrawn because the policy's waiting order was about to break (always 0).
    pub defensive_repairs: f64,
}

/// One resource and how often requests for it were blocked (WAIT or DIE).
#[napi(object, object_from_js = false)]
pub struct Contention {
    pub namespace: String,
    pub resource: String,
    pub blocked: f64,
}

/// An agent whose leases expired or whose waits timed out ("ghost agents").
#[napi(object, object_from_js = false)]
pub struct GhostAgent {
    pub agent_id: String,
    pub expired_leases: f64,
    pub wait_timeouts: f64,
}

/// Outcome counters, live totals, top contended resources and ghost agents.
#[napi(object, object_from_js = false)]
pub struct Stats {
    pub counters: Counters,
    pub active_sessions: f64,
    pub active_leases: f64,
    pub waiting_tickets: f64,
    /// Most blocked first.
    pub top_contended: Vec<Contention>,
    /// Most expiries + timeouts first.
    pub ghost_agents: Vec<GhostAgent>,
}

impl From<klock_core::Stats> for Stats {
    fn from(s: klock_core::Stats) -> Stats {
        let c = s.counters;
        Stats {
            counters: Counters {
                sessions_opened: num(c.sessions_opened),
                granted: num(c.granted),
                waited: num(c.waited),
                died: num(c.died),
                timed_out: num(c.timed_out),
                expired: num(c.expired),
                wounded: num(c.wounded),
                released: num(c.released),
                cancelled: num(c.cancelled),
                idle_closed: num(c.idle_closed),
                defensive_repairs: num(c.defensive_repairs),
            },
            active_sessions: num(s.active_sessions),
            active_leases: num(s.active_leases),
            waiting_tickets: num(s.waiting_tickets),
            top_contended: s
                .top_contended
                .into_iter()
                .map(|t| Contention {
                    namespace: t.namespace,
                    resource: t.resource,
                    blocked: num(t.blocked),
                })
                .collect(),
            ghost_agents: s
                .ghost_agents
                .into_iter()
                .map(|g| GhostAgent {
                    agent_id: g.agent_id,
                    expired_leases: num(g.expired_leases),
                    wait_timeouts: num(g.wait_timeouts),
                })
                .collect(),
        }
    }
}

/// One session as a dashboard sees it.
#[napi(object, object_from_js = false)]
pub struct SessionView {
    pub session_id: f64,
    pub agent_id: String,
    pub namespace: String,
    pub priority: f64,
    pub epoch: f64,
    pub suspended: bool,
    /// How many leases it holds.
    pub leases: f64,
    /// Its waiting tickets, in arrival order.
    pub tickets: Vec<f64>,
    /// DIEs since the last grant (the next backoff exponent).
    pub die_count: f64,
    /// Idle closing counts from here.
    pub last_active: f64,
    /// Something was granted since the priority was assigned (SPEC.md §5).
    pub unit_granted: bool,
    /// The unit of work ended: the next acquire assigns a new (youngest) priority.
    pub unit_ended: bool,
}

/// One waiting ticket.
#[napi(object, object_from_js = false)]
pub struct TicketView {
    pub ticket: f64,
    pub session_id: f64,
    pub agent_id: String,
    /// The intents still to be granted (already-held ones are not repeated).
    pub intents: Vec<Intent>,
    pub deadline: f64,
}

/// Everything a dashboard needs, in one serialisable value.
#[napi(object, object_from_js = false, use_nullable = true)]
pub struct Snapshot {
    pub now: f64,
    #[napi(ts_type = "Policy")]
    pub policy: String,
    pub next_deadline: Option<f64>,
    pub sessions: Vec<SessionView>,
    #[napi(ts_type = "Array<Lease>")]
    pub leases: Vec<LeaseJs>,
    pub tickets: Vec<TicketView>,
    pub stats: Stats,
}

impl From<klock_core::Snapshot> for Snapshot {
    fn from(s: klock_core::Snapshot) -> Snapshot {
        Snapshot {
            now: num(s.now),
            policy: s.policy.name().to_owned(),
            next_deadline: s.next_deadline.map(num),
            sessions: s
                .sessions
                .into_iter()
                .map(|v| SessionView {
                    session_id: num(v.session_id.0),
                    agent_id: v.agent_id,
                    namespace: v.namespace,
                    priority: num(v.priority),
                    epoch: num(v.epoch),
                    suspended: v.suspended,
                    leases: v.leases as f64,
                    tickets: v.tickets.iter().map(|t| num(t.0)).collect(),
                    die_count: f64::from(v.die_count),
                    last_active: num(v.last_active),
                    unit_granted: v.unit_granted,
                    unit_ended: v.unit_ended,
                })
                .collect(),
            leases: lease_list(s.leases),
            tickets: s
                .tickets
                .into_iter()
                .map(|t| TicketView {
                    ticket: num(t.ticket.0),
                    session_id: num(t.session_id.0),
                    agent_id: t.agent_id,
                    intents: t.intents.iter().map(Intent::from).collect(),
                    deadline: num(t.deadline),
                })
                .collect(),
            stats: s.stats.into(),
        }
    }
}

/// The configuration a kernel runs with, every field: `policy` and the core's numeric
/// fields, named by [`camel`] (the core's list, never a copy of it).
pub fn config_view<'env>(env: &'env Env, c: &klock_core::Config) -> Result<Object<'env>> {
    let mut view = Object::new(env)?;
    view.set("policy", c.policy.name())?;
    for field in klock_core::Config::NUMERIC_FIELDS {
        if let Some(value) = c.number(field) {
            view.set(camel(field), num(value))?;
        }
    }
    Ok(view)
}
