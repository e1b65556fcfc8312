//! Exhaustive small-scope model checking of the kernel (docs/SPEC.md §2, §3, §4, §6, §7, §9).
//!
//! Three agents each run a small client program against one kernel: open a session, acquire
//! manifest M1, acquire manifest M2, release everything, close. They follow the client rules
//! of docs/SPEC.md §6: a WAIT blocks the agent until its ticket is resolved by an event; a DIE (or
//! DIED) while holding something makes the agent release everything and start over, and is
//! retried at once while holding nothing (backoff base 0); a WAIT_TIMEOUT is retried; a
//! WOUNDED, or a LEASE_EXPIRED of a lease it still needed, makes it release everything and
//! start over. Under `lanes` an agent asks for M1 ∪ M2 in one manifest (request everything up
//! front), releases, then asks for M2 again.
//!
//! Every reachable state is explored breadth-first: at each state one runnable agent takes its
//! next step, or time advances by one millisecond (settling expiries and wait timeouts), or an
//! agent crashes (stops acting; what it holds expires, what it waits for times out). States
//! are deduplicated by a canonical key (ids replaced by their rank, times relative to now).
//!
//! Checked in every reachable state: no two sessions hold conflicting leases on overlapping
//! resources; fences strictly increase in grant order; every waiting ticket has a blocker (no
//! lost wake-up); the policy's waiting order (wait_die: a waiter is older than every blocker,
//! wound_wait: younger; lanes: nobody holds and waits; detect: no order, only the cycle check);
//! no defensive repair was ever needed;
//! the wait-for graph has no cycle; nobody is stuck without a pending deadline. On every
//! transition: new fences exceed every earlier fence, and nothing is granted past a conflicting
//! ticket queued ahead (no barging). Over the whole graph: from every reachable state, a state
//! where every program has finished is reachable; and, while no agent has crashed, reachable
//! without any wait timing out (timeouts bound waits, they must not be what breaks cycles).
//! Each policy must also show every kind of outcome it can produce (GRANTED, WAIT, DIE,
//! WAIT_TIMEOUT, DIED, LEASE_EXPIRED, WOUNDED, as applicable) and none it must not.
//!
//! A negative control runs the same checker over a naive blocking lock manager (everyone
//! waits, no deadlock prevention) to prove the cycle detector is not vacuous.
//!
//! Run with `cargo test -p klock-core --test model_check -- --nocapture` to see the state
//! counts.

use klock_core::{AcquireOptions, Config, Event, Kernel, Policy, Predicate, SessionId, Verdict};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt::Write as _;
use std::time::Instant;

// ---------------------------------------------------------------------------------------------
// Configuration of the explored world
// ---------------------------------------------------------------------------------------------

/// Lease TTL (ms): small, so expiries interleave with everything else.
const TTL_MS: u64 = 2;
/// Wait timeout (ms): shorter than the TTL, so timeouts and expiries both happen.
const WAIT_TIMEOUT_MS: u64 = 1;
/// Agent crashes per explored run.
const MAX_CRASHES: u8 = 1;

const P: &str = "FILE:/p";
const C: &str = "FILE:/p/c";
const Q: &str = "FILE:/q";

/// One agent's program: the manifests it acquires in order.
#[derive(Clone, Debug)]
struct Program {
    stages: Vec<Vec<String>>,
    /// Release everything between two stages (lanes: never hold and wait).
    release_between: bool,
}

/// A named set of three programs, each `[M1, M2]`.
struct Scenario {
    name: &'static str,
    agents: [[&'static [&'static str]; 2]; 3],
}

fn scenarios() -> Vec<Scenario> {
    vec![
        // The classic A-B / B-A cross order, plus a child of A against B.
        Scenario {
            name: "cross_mutates",
            agents: [
                [&["MUTATES FILE:/p"], &["MUTATES FILE:/q"]],
                [&["MUTATES FILE:/q"], &["MUTATES FILE:/p"]],
                [&["MUTATES FILE:/p/c"], &["MUTATES FILE:/q"]],
            ],
        },
        // Readers that upgrade to writers on the same resource (the upgrade deadlock).
        Scenario {
            name: "reader_upgrade",
            agents: [
                [&["CONSUMES FILE:/p"], &["MUTATES FILE:/p"]],
                [&["CONSUMES FILE:/p"], &["MUTATES FILE:/p"]],
                [&["CONSUMES FILE:/p/c"], &["MUTATES FILE:/p/c"]],
            ],
        },
        // A directory delete against writers and readers under it.
        Scenario {
            name: "parent_delete",
            agents: [
                [&["DELETES FILE:/p"], &["MUTATES FILE:/q"]],
                [&["MUTATES FILE:/q"], &["MUTATES FILE:/p/c"]],
                [
                    &["CONSUMES FILE:/p/c", "DEPENDS_ON FILE:/q"],
                    &["DELETES FILE:/p"],
                ],
            ],
        },
        // PROVIDES is exclusive among providers but lets DEPENDS_ON / CONSUMES in.
        Scenario {
            name: "provides_depends",
            agents: [
                [&["PROVIDES FILE:/p"], &["DEPENDS_ON FILE:/q"]],
                [
                    &["PROVIDES FILE:/q", "DEPENDS_ON FILE:/p/c"],
                    &["PROVIDES FILE:/p"],
                ],
                [
                    &["DEPENDS_ON FILE:/p"],
                    &["PROVIDES FILE:/q", "CONSUMES FILE:/p/c"],
                ],
            ],
        },
        // M2 repeats an intent of M1: idempotent re-acquire, DIED when the reused lease ends.
        Scenario {
            name: "reuse_grow",
            agents: [
                [
                    &["MUTATES FILE:/p"],
                    &["MUTATES FILE:/p", "MUTATES FILE:/q"],
                ],
                [
                    &["MUTATES FILE:/q"],
                    &["MUTATES FILE:/q", "CONSUMES FILE:/p/c"],
                ],
                [
                    &["CONSUMES FILE:/p/c"],
                    &["CONSUMES FILE:/p/c", "MUTATES FILE:/q"],
                ],
            ],
        },
    ]
}

fn programs_for(scenario: &Scenario, policy: Option<Policy>) -> Vec<Program> {
    scenario
        .agents
        .iter()
        .map(|[m1, m2]| {
            let m1: Vec<String> = m1.iter().map(|s| s.to_string()).collect();
            let m2: Vec<String> = m2.iter().map(|s| s.to_string()).collect();
            if policy == Some(Policy::Lanes) {
                let union = m1.iter().chain(&m2).cloned().collect();
                Program {
                    stages: vec![union, m2],
                    release_between: true,
                }
            } else {
                Program {
                    stages: vec![m1, m2],
                    release_between: false,
                }
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The system under test, behind a small interface (the kernel, or the naive control)
// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
enum Outcome {
    /// (lease id, fence) per lease.
    Granted(Vec<(u64, u64)>),
    Wait(u64),
    Die,
}

#[derive(Clone, Debug)]
enum Ev {
    Granted {
        ticket: u64,
        session: u64,
        leases: Vec<(u64, u64)>,
    },
    Timeout {
        ticket: u64,
        session: u64,
    },
    Died {
        ticket: u64,
        session: u64,
    },
    Expired {
        session: u64,
    },
    Wounded {
        session: u64,
    },
    Closed {
        session: u64,
    },
}

impl Ev {
    fn session(&self) -> u64 {
        match *self {
            Ev::Granted { session, .. }
            | Ev::Timeout { session, .. }
            | Ev::Died { session, .. }
            | Ev::Expired { session }
            | Ev::Wounded { session }
            | Ev::Closed { session } => session,
        }
    }
}

#[derive(Clone, Debug)]
struct LeaseV {
    id: u64,
    session: u64,
    predicate: Predicate,
    resource: String,
    fence: u64,
    expires_at: u64,
}

#[derive(Clone, Debug)]
struct TicketV {
    id: u64,
    session: u64,
    intents: Vec<(Predicate, String)>,
    deadline: u64,
}

/// What the checker needs to know about the lock state.
#[derive(Clone, Debug, Default)]
struct View {
    /// session id → priority (smaller = older).
    priorities: BTreeMap<u64, u64>,
    /// session id → what decides its next unit of work (docs/SPEC.md §5): (granted in this unit,
    /// unit ended, had a DIE since its last grant). Part of the state: two states that differ
    /// only here behave differently on the next release or acquire.
    units: BTreeMap<u64, (bool, bool, bool)>,
    leases: Vec<LeaseV>,
    tickets: Vec<TicketV>,
    next_deadline: Option<u64>,
}

trait Backend: Clone {
    /// The policy whose waiting order is checked (`None`: no order is promised).
    fn policy(&self) -> Option<Policy>;
    fn open(&mut self, agent: usize, now: u64) -> u64;
    fn acquire(&mut self, session: u64, manifest: &[String], now: u64) -> Result<Outcome, String>;
    fn release_all(&mut self, session: u64, now: u64);
    fn close(&mut self, session: u64, now: u64);
    fn advance(&mut self, now: u64);
    fn next_deadline(&self) -> Option<u64>;
    fn poll(&mut self) -> Option<Ev>;
    fn view(&mut self, now: u64) -> View;
    /// Backend-specific invariants (the kernel: no defensive repair ever).
    fn health(&self) -> Result<(), String>;
}

#[derive(Clone)]
struct KernelBackend {
    kernel: Kernel,
}

impl KernelBackend {
    fn new(policy: Policy) -> KernelBackend {
        let config = Config {
            policy,
            default_ttl_ms: TTL_MS,
            default_wait_timeout_ms: WAIT_TIMEOUT_MS,
            backoff_base_ms: 0,
            session_idle_ms: 0,
            ..Config::default()
        };
        KernelBackend {
            kernel: Kernel::new(config).unwrap(),
        }
    }
}

fn lease_pairs(leases: &[klock_core::Lease]) -> Vec<(u64, u64)> {
    leases.iter().map(|l| (l.lease_id.0, l.fence)).collect()
}

impl Backend for KernelBackend {
    fn policy(&self) -> Option<Policy> {
        Some(self.kernel.config().policy)
    }

    fn open(&mut self, agent: usize, now: u64) -> u64 {
        self.kernel
            .open_session(&format!("agent{agent}"), "default", now)
            .unwrap()
            .session_id
            .0
    }

    fn acquire(&mut self, session: u64, manifest: &[String], now: u64) -> Result<Outcome, String> {
        let options = AcquireOptions::default();
        match self
            .kernel
            .acquire(SessionId(session), manifest, options, now)
        {
            Ok(Verdict::Granted { leases }) => Ok(Outcome::Granted(lease_pairs(&leases))),
            Ok(Verdict::Wait { ticket, .. }) => Ok(Outcome::Wait(ticket.0)),
            Ok(Verdict::Die { .. }) => Ok(Outcome::Die),
            Err(e) => Err(format!("acquire {manifest:?} failed: {e:?}")),
        }
    }

    fn release_all(&mut self, session: u64, now: u64) {
        self.kernel.release_all(SessionId(session), now).unwrap();
    }

    fn close(&mut self, session: u64, now: u64) {
        self.kernel.close_session(SessionId(session), now).unwrap();
    }

    fn advance(&mut self, now: u64) {
        self.kernel.advance(now);
    }

    fn next_deadline(&self) -> Option<u64> {
        self.kernel.next_deadline()
    }

    fn poll(&mut self) -> Option<Ev> {
        // ACQUIRED and RELEASED report what the agent's own call just did (its verdict, its
        // release): they change no agent's program, so they are drained here; the
        // differential test checks them against the naive model.
        let mut event = self.kernel.poll_event()?;
        while matches!(event, Event::Acquired { .. } | Event::Released { .. }) {
            event = self.kernel.poll_event()?;
        }
        Some(match event {
            Event::Granted {
                ticket,
                session,
                leases,
            } => Ev::Granted {
                ticket: ticket.0,
                session: session.0,
                leases: lease_pairs(&leases),
            },
            Event::WaitTimeout { ticket, session } => Ev::Timeout {
                ticket: ticket.0,
                session: session.0,
            },
            Event::Died {
                ticket, session, ..
            } => Ev::Died {
                ticket: ticket.0,
                session: session.0,
            },
            Event::LeaseExpired { session, .. } => Ev::Expired { session: session.0 },
            Event::Wounded { session, .. } => Ev::Wounded { session: session.0 },
            Event::SessionClosed { session, .. } => Ev::Closed { session: session.0 },
            Event::Acquired { .. } | Event::Released { .. } => unreachable!("drained above"),
        })
    }

    fn view(&mut self, now: u64) -> View {
        let snap = self.kernel.snapshot(now);
        View {
            priorities: snap
                .sessions
                .iter()
                .map(|s| (s.session_id.0, s.priority))
                .collect(),
            units: snap
                .sessions
                .iter()
                .map(|s| {
                    (
                        s.session_id.0,
                        (s.unit_granted, s.unit_ended, s.die_count > 0),
                    )
                })
                .collect(),
            leases: snap
                .leases
                .iter()
                .map(|l| LeaseV {
                    id: l.lease_id.0,
                    session: l.session_id.0,
                    predicate: l.predicate,
                    resource: l.resource.clone(),
                    fence: l.fence,
                    expires_at: l.expires_at,
                })
                .collect(),
            tickets: snap
                .tickets
                .iter()
                .map(|t| TicketV {
                    id: t.ticket.0,
                    session: t.session_id.0,
                    intents: t
                        .intents
                        .iter()
                        .map(|i| (i.predicate, i.resource.clone()))
                        .collect(),
                    deadline: t.deadline,
                })
                .collect(),
            next_deadline: snap.next_deadline,
        }
    }

    fn health(&self) -> Result<(), String> {
        let repairs = self.kernel.stats().counters.defensive_repairs;
        if repairs == 0 {
            Ok(())
        } else {
            Err(format!("the kernel needed {repairs} defensive repair(s) (docs/SPEC.md §6: a waiter must always be older than all it waits for)"))
        }
    }
}

/// The negative control: a naive blocking lock manager. A request is granted when no other
/// session holds a conflicting overlapping lock, otherwise it waits forever (no timeout, no
/// deadlock prevention); releases grant waiters in arrival order.
#[derive(Clone, Default)]
struct NaiveBackend {
    next_id: u64,
    priorities: BTreeMap<u64, u64>,
    leases: Vec<LeaseV>,
    tickets: Vec<TicketV>,
    events: VecDeque<Ev>,
}

impl NaiveBackend {
    fn parse(manifest: &[String]) -> Vec<(Predicate, String)> {
        manifest
            .iter()
            .map(|m| {
                let (p, r) = klock_core::parse_intent(m).unwrap();
                (p, r.into_string())
            })
            .collect()
    }

    fn free_for(&self, session: u64, intents: &[(Predicate, String)]) -> bool {
        !self.leases.iter().any(|l| {
            l.session != session
                && intents
                    .iter()
                    .any(|(p, r)| overlaps(r, &l.resource) && p.conflicts_with(l.predicate))
        })
    }

    fn grant(&mut self, session: u64, intents: &[(Predicate, String)]) -> Vec<(u64, u64)> {
        intents
            .iter()
            .map(|(predicate, resource)| {
                self.next_id += 1;
                let id = self.next_id;
                self.leases.push(LeaseV {
                    id,
                    session,
                    predicate: *predicate,
                    resource: resource.clone(),
                    fence: id,
                    expires_at: u64::MAX,
                });
                (id, id)
            })
            .collect()
    }

    fn wake(&mut self) {
        let mut i = 0;
        while i < self.tickets.len() {
            if self.free_for(self.tickets[i].session, &self.tickets[i].intents) {
                let t = self.tickets.remove(i);
                let leases = self.grant(t.session, &t.intents);
                self.events.push_back(Ev::Granted {
                    ticket: t.id,
                    session: t.session,
                    leases,
                });
            } else {
                i += 1;
            }
        }
    }
}

impl Backend for NaiveBackend {
    fn policy(&self) -> Option<Policy> {
        None
    }

    fn open(&mut self, _agent: usize, _now: u64) -> u64 {
        self.next_id += 1;
        self.priorities.insert(self.next_id, self.next_id);
        self.next_id
    }

    fn acquire(&mut self, session: u64, manifest: &[String], _now: u64) -> Result<Outcome, String> {
        let intents = NaiveBackend::parse(manifest);
        if self.free_for(session, &intents) {
            return Ok(Outcome::Granted(self.grant(session, &intents)));
        }
        self.next_id += 1;
        self.tickets.push(TicketV {
            id: self.next_id,
            session,
            intents,
            deadline: u64::MAX,
        });
        Ok(Outcome::Wait(self.next_id))
    }

    fn release_all(&mut self, session: u64, _now: u64) {
        self.leases.retain(|l| l.session != session);
        self.wake();
    }

    fn close(&mut self, session: u64, now: u64) {
        self.tickets.retain(|t| t.session != session);
        self.release_all(session, now);
        self.priorities.remove(&session);
    }

    fn advance(&mut self, _now: u64) {}

    fn next_deadline(&self) -> Option<u64> {
        None
    }

    fn poll(&mut self) -> Option<Ev> {
        self.events.pop_front()
    }

    fn view(&mut self, _now: u64) -> View {
        View {
            priorities: self.priorities.clone(),
            units: BTreeMap::new(),
            leases: self.leases.clone(),
            tickets: self.tickets.clone(),
            next_deadline: None,
        }
    }

    fn health(&self) -> Result<(), String> {
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Agents and transitions
// ---------------------------------------------------------------------------------------------

/// An agent's program counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pc {
    Open,
    /// Next step: acquire stage n.
    Acquire(u8),
    /// Waiting for the resolution of `ticket`, asked at stage n.
    Blocked(u8, u64),
    /// Next step: release everything, then acquire stage n (or close when n is past the end).
    Release(u8),
    Close,
    Done,
    Crashed,
}

impl Pc {
    fn runnable(self) -> bool {
        matches!(self, Pc::Open | Pc::Acquire(_) | Pc::Release(_) | Pc::Close)
    }

    fn finished(self) -> bool {
        matches!(self, Pc::Done | Pc::Crashed)
    }
}

#[derive(Clone, Debug)]
struct Agent {
    pc: Pc,
    session: Option<u64>,
    /// A lease it needed expired while it was blocked: start over once the wait resolves.
    lost: bool,
}

/// Bits of what a transition did, to show the exploration covers every kind of outcome.
type Seen = u32;
const SEEN_GRANTED: Seen = 1;
const SEEN_WAIT: Seen = 1 << 1;
const SEEN_DIE: Seen = 1 << 2;
const SEEN_GRANTED_EVENT: Seen = 1 << 3;
const SEEN_TIMEOUT: Seen = 1 << 4;
const SEEN_DIED: Seen = 1 << 5;
const SEEN_EXPIRED: Seen = 1 << 6;
const SEEN_WOUNDED: Seen = 1 << 7;
const SEEN_CRASH: Seen = 1 << 8;
const SEEN_NAMES: [&str; 9] = [
    "GRANTED",
    "WAIT",
    "DIE",
    "GRANTED-event",
    "WAIT_TIMEOUT",
    "DIED",
    "LEASE_EXPIRED",
    "WOUNDED",
    "crash",
];

fn seen_names(seen: Seen) -> String {
    let names: Vec<&str> = SEEN_NAMES
        .iter()
        .enumerate()
        .filter(|(i, _)| seen & (1 << i) != 0)
        .map(|(_, n)| *n)
        .collect();
    names.join(" ")
}

#[derive(Clone, Copy, Debug)]
enum Action {
    Step(usize),
    Tick,
    Crash(usize),
}

#[derive(Clone)]
struct World<B> {
    backend: B,
    now: u64,
    agents: Vec<Agent>,
    crashes: u8,
    /// Largest fence and lease id granted on the path that led here.
    max_fence: u64,
    max_lease: u64,
    /// Leases granted by the last transition, with the ticket they were granted through
    /// (`None`: an immediate GRANTED verdict). Not part of the state.
    fresh: Vec<(u64, Option<u64>)>,
}

struct Model<'a> {
    programs: &'a [Program],
    max_crashes: u8,
    /// Check the wait-for graph for cycles (disabled only by the negative control of the
    /// stuck-state check).
    check_cycles: bool,
}

impl Model<'_> {
    /// Where an agent goes after stage `stage` is granted: release before the next stage
    /// (lanes) or before closing after the last one; otherwise straight to the next acquire.
    fn after_stage(&self, agent: usize, stage: u8) -> Pc {
        let program = &self.programs[agent];
        let next = stage + 1;
        if usize::from(next) >= program.stages.len() || program.release_between {
            Pc::Release(next)
        } else {
            Pc::Acquire(next)
        }
    }

    fn initial<B: Backend>(&self, backend: B) -> World<B> {
        World {
            backend,
            now: 0,
            agents: vec![
                Agent {
                    pc: Pc::Open,
                    session: None,
                    lost: false
                };
                self.programs.len()
            ],
            crashes: 0,
            max_fence: 0,
            max_lease: 0,
            fresh: Vec::new(),
        }
    }

    fn actions<B: Backend>(&self, w: &World<B>) -> Vec<Action> {
        let mut out: Vec<Action> = (0..w.agents.len())
            .filter(|&i| w.agents[i].pc.runnable())
            .map(Action::Step)
            .collect();
        if w.backend.next_deadline().is_some() {
            out.push(Action::Tick);
        }
        if w.crashes < self.max_crashes {
            out.extend(
                (0..w.agents.len())
                    .filter(|&i| w.agents[i].session.is_some() && !w.agents[i].pc.finished())
                    .map(Action::Crash),
            );
        }
        out
    }

    /// Checks and records grants of new leases: fences strictly increasing in grant order.
    fn note_grant<B>(
        &self,
        w: &mut World<B>,
        leases: &[(u64, u64)],
        ticket: Option<u64>,
    ) -> Result<(), String> {
        for &(id, fence) in leases {
            if id > w.max_lease {
                if fence <= w.max_fence {
                    return Err(format!(
                        "lease {id} granted with fence {fence}, not above the largest fence granted before ({}) (docs/SPEC.md §7)",
                        w.max_fence
                    ));
                }
                w.max_lease = id;
                w.max_fence = fence;
                w.fresh.push((id, ticket));
            }
        }
        Ok(())
    }

    /// Delivers every pending event to its agent. Returns whether a wait timed out.
    fn deliver<B: Backend>(
        &self,
        w: &mut World<B>,
        log: &mut Option<Vec<String>>,
    ) -> Result<Seen, String> {
        let mut seen = 0;
        while let Some(ev) = w.backend.poll() {
            if let Some(log) = log.as_mut() {
                log.push(format!("    event {ev:?}"));
            }
            let session = ev.session();
            let Some(i) = w.agents.iter().position(|a| a.session == Some(session)) else {
                return Err(format!("event {ev:?} for a session no agent owns"));
            };
            if let Ev::Granted { leases, ticket, .. } = &ev {
                self.note_grant(w, leases, Some(*ticket))?;
            }
            seen |= match ev {
                Ev::Granted { .. } => SEEN_GRANTED_EVENT,
                Ev::Timeout { .. } => SEEN_TIMEOUT,
                Ev::Died { .. } => SEEN_DIED,
                Ev::Expired { .. } => SEEN_EXPIRED,
                Ev::Wounded { .. } => SEEN_WOUNDED,
                Ev::Closed { .. } => 0,
            };
            let agent = &mut w.agents[i];
            if agent.pc == Pc::Crashed {
                continue;
            }
            let pc = agent.pc;
            match (ev, pc) {
                (Ev::Closed { .. }, _) => {
                    return Err(format!(
                        "session {session} closed by the kernel (idle close is off)"
                    ))
                }
                (Ev::Granted { ticket, .. }, Pc::Blocked(stage, t)) if t == ticket => {
                    agent.pc = if agent.lost {
                        Pc::Release(0)
                    } else {
                        self.after_stage(i, stage)
                    };
                    agent.lost = false;
                }
                (Ev::Timeout { ticket, .. }, Pc::Blocked(stage, t)) if t == ticket => {
                    agent.pc = if agent.lost {
                        Pc::Release(0)
                    } else {
                        Pc::Acquire(stage)
                    };
                    agent.lost = false;
                }
                (Ev::Died { ticket, .. }, Pc::Blocked(stage, t)) if t == ticket => {
                    agent.pc = if stage == 0 && !agent.lost {
                        Pc::Acquire(0)
                    } else {
                        Pc::Release(0)
                    };
                    agent.lost = false;
                }
                (
                    Ev::Wounded { .. },
                    Pc::Blocked(..) | Pc::Acquire(_) | Pc::Release(_) | Pc::Close,
                ) => {
                    agent.pc = Pc::Release(0);
                    agent.lost = false;
                }
                (Ev::Expired { .. }, Pc::Blocked(..)) => agent.lost = true,
                (Ev::Expired { .. }, Pc::Acquire(n) | Pc::Release(n)) if n > 0 => {
                    agent.pc = Pc::Release(0)
                }
                (Ev::Expired { .. }, Pc::Close) => agent.pc = Pc::Release(0),
                // Already starting over: the lease was going to be released anyway.
                (Ev::Expired { .. }, Pc::Acquire(0) | Pc::Release(0)) => {}
                (ev, pc) => return Err(format!("unexpected event {ev:?} for agent {i} at {pc:?}")),
            }
        }
        Ok(seen)
    }

    /// Applies one action. Returns the new world and what happened ([`Seen`] bits).
    fn apply<B: Backend>(
        &self,
        w: &World<B>,
        action: Action,
        log: &mut Option<Vec<String>>,
    ) -> Result<(World<B>, Seen), String> {
        let mut w = w.clone();
        w.fresh.clear();
        let mut seen = 0;
        let now = w.now;
        let mut say = |text: String| {
            if let Some(log) = log.as_mut() {
                log.push(format!("t={now} {text}"));
            }
        };
        match action {
            Action::Tick => {
                w.now += 1;
                say(format!("time -> {}", w.now));
                w.backend.advance(w.now);
            }
            Action::Crash(i) => {
                say(format!("agent{i} crashes at {:?}", w.agents[i].pc));
                w.agents[i].pc = Pc::Crashed;
                w.agents[i].lost = false;
                w.crashes += 1;
                seen |= SEEN_CRASH;
            }
            Action::Step(i) => {
                let pc = w.agents[i].pc;
                match pc {
                    Pc::Open => {
                        let s = w.backend.open(i, now);
                        say(format!("agent{i} opens session {s}"));
                        w.agents[i].session = Some(s);
                        w.agents[i].pc = Pc::Acquire(0);
                    }
                    Pc::Acquire(stage) => {
                        let s = w.agents[i].session.unwrap();
                        let manifest = &self.programs[i].stages[usize::from(stage)];
                        let outcome = w.backend.acquire(s, manifest, now)?;
                        say(format!(
                            "agent{i} (session {s}) acquires {manifest:?} -> {outcome:?}"
                        ));
                        seen |= match outcome {
                            Outcome::Granted(_) => SEEN_GRANTED,
                            Outcome::Wait(_) => SEEN_WAIT,
                            Outcome::Die => SEEN_DIE,
                        };
                        w.agents[i].pc = match outcome {
                            Outcome::Granted(leases) => {
                                self.note_grant(&mut w, &leases, None)?;
                                self.after_stage(i, stage)
                            }
                            Outcome::Wait(t) => Pc::Blocked(stage, t),
                            Outcome::Die if stage == 0 => Pc::Acquire(0),
                            Outcome::Die => Pc::Release(0),
                        };
                    }
                    Pc::Release(stage) => {
                        let s = w.agents[i].session.unwrap();
                        say(format!("agent{i} (session {s}) releases everything"));
                        w.backend.release_all(s, now);
                        let done = usize::from(stage) >= self.programs[i].stages.len();
                        w.agents[i].pc = if done { Pc::Close } else { Pc::Acquire(stage) };
                    }
                    Pc::Close => {
                        let s = w.agents[i].session.unwrap();
                        say(format!("agent{i} (session {s}) closes"));
                        w.backend.close(s, now);
                        w.agents[i].pc = Pc::Done;
                    }
                    Pc::Blocked(..) | Pc::Done | Pc::Crashed => unreachable!("not runnable"),
                }
            }
        }
        seen |= self.deliver(&mut w, log)?;
        Ok((w, seen))
    }

    /// The canonical key of a state: ids replaced by ranks, times relative to now. Two states
    /// with one key behave alike from here on (the kernel only compares ids and priorities).
    fn key(&self, w: &World<impl Backend>, view: &View) -> String {
        let agent_of: HashMap<u64, usize> = w
            .agents
            .iter()
            .enumerate()
            .filter_map(|(i, a)| a.session.map(|s| (s, i)))
            .collect();
        let ticket_rank: HashMap<u64, usize> = view
            .tickets
            .iter()
            .enumerate()
            .map(|(r, t)| (t.id, r))
            .collect();
        let mut key = String::new();
        for a in &w.agents {
            match a.pc {
                Pc::Blocked(stage, t) => {
                    let rank = ticket_rank.get(&t).map_or(usize::MAX, |&r| r);
                    write!(key, "B{stage}.{rank}").unwrap();
                }
                pc => write!(key, "{pc:?}").unwrap(),
            }
            key.push(if a.lost { '!' } else { ',' });
        }
        write!(key, "|c{}|", w.crashes).unwrap();
        let mut by_priority: Vec<(u64, u64)> =
            view.priorities.iter().map(|(&s, &p)| (p, s)).collect();
        by_priority.sort_unstable();
        for (_, s) in by_priority {
            let unit = view.units.get(&s).copied().unwrap_or_default();
            let agent = agent_of.get(&s).map_or(usize::MAX, |&i| i);
            write!(key, "{agent}{unit:?},").unwrap();
        }
        key.push('|');
        let mut fences: Vec<u64> = view.leases.iter().map(|l| l.fence).collect();
        fences.sort_unstable();
        for l in &view.leases {
            let fence_rank = fences.binary_search(&l.fence).unwrap();
            write!(
                key,
                "{}:{}:{}:{}:{};",
                agent_of[&l.session],
                l.predicate as u8,
                l.resource,
                fence_rank,
                l.expires_at.saturating_sub(w.now)
            )
            .unwrap();
        }
        key.push('|');
        for t in &view.tickets {
            write!(key, "{}:", agent_of[&t.session]).unwrap();
            for (p, r) in &t.intents {
                write!(key, "{}{r},", *p as u8).unwrap();
            }
            write!(key, ":{};", t.deadline.saturating_sub(w.now)).unwrap();
        }
        key
    }
}

// ---------------------------------------------------------------------------------------------
// State invariants
// ---------------------------------------------------------------------------------------------

/// Whether two canonical resources overlap (docs/SPEC.md §3: same node, ancestor or descendant,
/// segment-wise, within one TYPE; one namespace here).
fn overlaps(a: &str, b: &str) -> bool {
    let (ta, pa) = a.split_once(':').unwrap();
    let (tb, pb) = b.split_once(':').unwrap();
    fn ancestor(x: &str, y: &str) -> bool {
        x == "/" || (y.len() > x.len() && y.starts_with(x) && y.as_bytes()[x.len()] == b'/')
    }
    ta == tb && (pa == pb || ancestor(pa, pb) || ancestor(pb, pa))
}

/// docs/SPEC.md §6: the sessions blocking ticket `t`: other sessions holding a lease, or owning a
/// ticket ahead of `t`, that overlaps and conflicts with one of its intents.
fn blockers(view: &View, t: &TicketV) -> Vec<u64> {
    let mut out: Vec<u64> = Vec::new();
    let hit = |p: Predicate, r: &str| {
        t.intents
            .iter()
            .any(|(tp, tr)| overlaps(tr, r) && tp.conflicts_with(p))
    };
    for l in &view.leases {
        if l.session != t.session && hit(l.predicate, &l.resource) {
            out.push(l.session);
        }
    }
    for other in &view.tickets {
        if other.id < t.id
            && other.session != t.session
            && other.intents.iter().any(|(p, r)| hit(*p, r))
        {
            out.push(other.session);
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// A cycle in the wait-for graph (waiting session → sessions blocking one of its tickets).
fn wait_for_cycle(edges: &BTreeMap<u64, Vec<u64>>) -> Option<Vec<u64>> {
    // 0 = unvisited, 1 = on the stack, 2 = done.
    fn visit(
        n: u64,
        edges: &BTreeMap<u64, Vec<u64>>,
        mark: &mut HashMap<u64, u8>,
        stack: &mut Vec<u64>,
    ) -> Option<Vec<u64>> {
        mark.insert(n, 1);
        stack.push(n);
        for &m in edges.get(&n).map_or(&[][..], |v| v.as_slice()) {
            match mark.get(&m).copied().unwrap_or(0) {
                1 => {
                    let from = stack.iter().position(|&x| x == m).unwrap();
                    let mut cycle = stack[from..].to_vec();
                    cycle.push(m);
                    return Some(cycle);
                }
                0 => {
                    if let Some(c) = visit(m, edges, mark, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        mark.insert(n, 2);
        None
    }
    let mut mark = HashMap::new();
    for &n in edges.keys() {
        if mark.get(&n).copied().unwrap_or(0) == 0 {
            if let Some(c) = visit(n, edges, &mut mark, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

/// No barging (docs/SPEC.md §6): a lease granted by this transition conflicts with no ticket of
/// another session that was queued ahead of it (every ticket, for an immediate GRANTED).
fn check_transition<B: Backend>(w: &World<B>, view: &View) -> Result<(), String> {
    for &(lease, granted_through) in &w.fresh {
        let Some(l) = view.leases.iter().find(|l| l.id == lease) else {
            continue;
        };
        for t in &view.tickets {
            let conflicts = t
                .intents
                .iter()
                .any(|(p, r)| overlaps(r, &l.resource) && p.conflicts_with(l.predicate));
            if t.session != l.session && conflicts && granted_through.is_none_or(|g| t.id < g) {
                return Err(format!(
                    "barging: lease {} {} {} granted (through {granted_through:?}) past the waiting ticket {} queued ahead (docs/SPEC.md §6: no barging)",
                    l.id, l.predicate, l.resource, t.id
                ));
            }
        }
    }
    Ok(())
}

fn check_state<B: Backend>(model: &Model, w: &World<B>, view: &View) -> Result<(), String> {
    w.backend.health()?;
    let agent_of = |s: u64| {
        w.agents
            .iter()
            .position(|a| a.session == Some(s))
            .map_or("?".into(), |i| format!("agent{i}"))
    };

    // Safety: no two sessions hold conflicting leases on overlapping resources (docs/SPEC.md §3, §4).
    for (i, a) in view.leases.iter().enumerate() {
        for b in &view.leases[i + 1..] {
            if a.session != b.session
                && overlaps(&a.resource, &b.resource)
                && a.predicate.conflicts_with(b.predicate)
            {
                return Err(format!(
                    "conflicting holders: {} holds {} {} and {} holds {} {} (docs/SPEC.md §3/§4)",
                    agent_of(a.session),
                    a.predicate,
                    a.resource,
                    agent_of(b.session),
                    b.predicate,
                    b.resource
                ));
            }
        }
    }
    // Fences follow grant (lease id) order and are unique (docs/SPEC.md §7).
    let mut by_id = view.leases.clone();
    by_id.sort_by_key(|l| l.id);
    for pair in by_id.windows(2) {
        if pair[0].fence >= pair[1].fence {
            return Err(format!(
                "fences not increasing in grant order: {:?} then {:?} (docs/SPEC.md §7)",
                pair[0], pair[1]
            ));
        }
    }
    if let Some(l) = view.leases.iter().find(|l| l.expires_at <= w.now) {
        return Err(format!(
            "lease {l:?} still active at {} (strict expiry, docs/SPEC.md §2)",
            w.now
        ));
    }

    // Waiting tickets: each is blocked, in the policy's order; the wait-for graph is acyclic.
    let mut edges: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for t in &view.tickets {
        let found = blockers(view, t);
        if found.is_empty() {
            return Err(format!(
                "ticket {} of {} waits with nothing blocking it (lost wake-up, docs/SPEC.md §6/§9)",
                t.id,
                agent_of(t.session)
            ));
        }
        let mine = view.priorities[&t.session];
        match w.backend.policy() {
            Some(Policy::WaitDie) => {
                if let Some(b) = found.iter().find(|b| view.priorities[b] < mine) {
                    return Err(format!(
                        "wait_die: ticket {} of {} waits for the older {} (docs/SPEC.md §6: every waiter is older than all it waits for)",
                        t.id,
                        agent_of(t.session),
                        agent_of(*b)
                    ));
                }
            }
            Some(Policy::WoundWait) => {
                if let Some(b) = found.iter().find(|b| view.priorities[b] > mine) {
                    return Err(format!(
                        "wound_wait: ticket {} of {} waits for the younger {} (docs/SPEC.md §6: a requester waits only for older blockers)",
                        t.id,
                        agent_of(t.session),
                        agent_of(*b)
                    ));
                }
            }
            // Detect: any waiter may wait for anyone; the cycle check below is its invariant
            // (docs/SPEC.md §6.1: no cycle of waiters is ever left unbroken).
            Some(Policy::Detect) => {}
            Some(Policy::Lanes) => {
                if view.leases.iter().any(|l| l.session == t.session) {
                    return Err(format!(
                        "lanes: {} holds leases and waits (docs/SPEC.md §6)",
                        agent_of(t.session)
                    ));
                }
                if view
                    .tickets
                    .iter()
                    .filter(|o| o.session == t.session)
                    .count()
                    > 1
                {
                    return Err(format!(
                        "lanes: {} has two outstanding requests (docs/SPEC.md §6)",
                        agent_of(t.session)
                    ));
                }
            }
            None => {}
        }
        edges.entry(t.session).or_default().extend(found);
    }
    if model.check_cycles {
        if let Some(cycle) = wait_for_cycle(&edges) {
            let names: Vec<String> = cycle.iter().map(|&s| agent_of(s)).collect();
            return Err(format!("wait-for cycle (deadlock): {}", names.join(" -> ")));
        }
    }

    // Agents and kernel agree on who waits (no ticket resolved without an event).
    for (i, a) in w.agents.iter().enumerate() {
        if let Pc::Blocked(_, ticket) = a.pc {
            if !view
                .tickets
                .iter()
                .any(|t| t.id == ticket && Some(t.session) == a.session)
            {
                return Err(format!("agent{i} waits for ticket {ticket}, which the kernel no longer has and never resolved"));
            }
        }
    }
    for t in &view.tickets {
        let owner = w.agents.iter().find(|a| a.session == Some(t.session));
        if !owner
            .is_some_and(|a| matches!(a.pc, Pc::Blocked(_, x) if x == t.id) || a.pc == Pc::Crashed)
        {
            return Err(format!(
                "ticket {} of {} is waiting but its agent is not waiting for it",
                t.id,
                agent_of(t.session)
            ));
        }
    }

    // Deadlock freedom: somebody waits ⇒ some agent can act or a deadline is pending.
    if !view.tickets.is_empty()
        && !w.agents.iter().any(|a| a.pc.runnable())
        && view.next_deadline.is_none()
    {
        return Err("deadlock: tickets wait, no agent can act and no deadline is pending".into());
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The explorer
// ---------------------------------------------------------------------------------------------

struct Report {
    /// What happened on at least one explored transition.
    seen: Seen,
    states: usize,
    transitions: usize,
    terminal: usize,
}

struct Graph {
    /// Parent and action of each state (breadth-first tree), for traces.
    parent: Vec<(u32, Option<Action>)>,
    /// (from, to, a wait timed out).
    edges: Vec<(u32, u32, bool)>,
    terminal: Vec<bool>,
    /// Whether some agent has crashed on the way to the state.
    crashed: Vec<bool>,
}

impl Graph {
    fn path(&self, mut n: u32) -> Vec<Action> {
        let mut path = Vec::new();
        while let (p, Some(a)) = self.parent[n as usize] {
            path.push(a);
            n = p;
        }
        path.reverse();
        path
    }

    /// States from which a terminal state is reachable over edges accepted by `use_edge`.
    fn can_finish(&self, use_edge: impl Fn(u32, bool) -> bool) -> Vec<bool> {
        let n = self.parent.len();
        let mut preds: Vec<Vec<u32>> = vec![Vec::new(); n];
        for &(from, to, timed_out) in &self.edges {
            if use_edge(to, timed_out) {
                preds[to as usize].push(from);
            }
        }
        let mut ok = self.terminal.clone();
        let mut queue: VecDeque<u32> = (0..n as u32).filter(|&i| ok[i as usize]).collect();
        while let Some(s) = queue.pop_front() {
            for &p in &preds[s as usize] {
                if !ok[p as usize] {
                    ok[p as usize] = true;
                    queue.push_back(p);
                }
            }
        }
        ok
    }
}

fn trace<B: Backend>(model: &Model, initial: &World<B>, path: &[Action]) -> String {
    let mut log = Some(Vec::new());
    let mut w = initial.clone();
    for &a in path {
        let applied = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            model.apply(&w, a, &mut log)
        }));
        match applied {
            Ok(Ok((next, _))) => w = next,
            Ok(Err(e)) => {
                log.as_mut().unwrap().push(format!("  !! {e}"));
                break;
            }
            Err(_) => {
                let agents = &w.agents;
                log.as_mut().unwrap().push(format!(
                    "t={} !! the kernel panicked during {a:?} (agents: {agents:?})",
                    w.now
                ));
                return log.unwrap().join("\n");
            }
        }
    }
    let mut out = log.unwrap().join("\n");
    let view = w.backend.view(w.now);
    write!(
        out,
        "\n  final agents: {:?}\n  final view: {view:#?}",
        w.agents
    )
    .unwrap();
    out
}

fn explore<B: Backend>(model: &Model, backend: B) -> Result<Report, String> {
    let initial = model.initial(backend);
    let mut graph = Graph {
        parent: Vec::new(),
        edges: Vec::new(),
        terminal: Vec::new(),
        crashed: Vec::new(),
    };
    let mut index: HashMap<String, u32> = HashMap::new();
    let mut queue: VecDeque<(u32, World<B>)> = VecDeque::new();
    let mut seen: Seen = 0;

    let mut first = initial.clone();
    let view = first.backend.view(first.now);
    check_state(model, &first, &view).map_err(|e| format!("{e}\ninitial state"))?;
    index.insert(model.key(&first, &view), 0);
    graph.parent.push((0, None));
    graph.terminal.push(false);
    graph.crashed.push(false);
    queue.push_back((0, first));

    while let Some((id, w)) = queue.pop_front() {
        for action in model.actions(&w) {
            let fail = |e: String, graph: &Graph| {
                let mut path = graph.path(id);
                path.push(action);
                format!(
                    "{e}\n(after exploring {} states)\ntrace ({} steps):\n{}",
                    graph.parent.len(),
                    path.len(),
                    trace(model, &initial, &path)
                )
            };
            let applied = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                model.apply(&w, action, &mut None)
            }));
            let (mut next, happened) = match applied {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => return Err(fail(e, &graph)),
                Err(panic) => {
                    let what = panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    return Err(fail(format!("the kernel panicked: {what}"), &graph));
                }
            };
            let view = next.backend.view(next.now);
            if let Err(e) = check_transition(&next, &view) {
                return Err(fail(e, &graph));
            }
            let key = model.key(&next, &view);
            let to = match index.get(&key) {
                Some(&to) => to,
                None => {
                    if let Err(e) = check_state(model, &next, &view) {
                        return Err(fail(e, &graph));
                    }
                    let to = graph.parent.len() as u32;
                    index.insert(key, to);
                    graph.parent.push((id, Some(action)));
                    graph
                        .terminal
                        .push(next.agents.iter().all(|a| a.pc.finished()));
                    graph.crashed.push(next.crashes > 0);
                    queue.push_back((to, next));
                    to
                }
            };
            seen |= happened;
            graph.edges.push((id, to, happened & SEEN_TIMEOUT != 0));
        }
    }

    // Liveness: every program can still finish from every reachable state. And while no
    // agent has crashed, they can all finish without any wait timing out: timeouts bound
    // waits, they must not be what breaks wait cycles. (A crashed holder is only got rid of
    // by its expiry, which a shorter wait timeout may legitimately precede.)
    let any = graph.can_finish(|_, _| true);
    if let Some(stuck) = any.iter().position(|&ok| !ok) {
        let path = graph.path(stuck as u32);
        return Err(format!(
            "no way for every program to finish from this state\ntrace ({} steps):\n{}",
            path.len(),
            trace(model, &initial, &path)
        ));
    }
    let without_timeouts =
        graph.can_finish(|to, timed_out| !timed_out && !graph.crashed[to as usize]);
    let needs_timeout = |&(i, &ok): &(usize, &bool)| !ok && !graph.crashed[i];
    let timeouts_needed = without_timeouts
        .iter()
        .enumerate()
        .filter(needs_timeout)
        .count();
    if let Some((stuck, _)) = without_timeouts.iter().enumerate().find(needs_timeout) {
        let path = graph.path(stuck as u32);
        return Err(format!(
            "from this state the programs can only finish if some wait times out ({timeouts_needed} such states)\ntrace ({} steps):\n{}",
            path.len(),
            trace(model, &initial, &path)
        ));
    }
    Ok(Report {
        seen,
        states: graph.parent.len(),
        transitions: graph.edges.len(),
        terminal: graph.terminal.iter().filter(|&&t| t).count(),
    })
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

/// What each policy must show somewhere in its exploration (so the checks are not vacuous),
/// and what it must never show.
fn expected_outcomes(policy: Policy) -> (Seen, Seen) {
    let common =
        SEEN_GRANTED | SEEN_WAIT | SEEN_GRANTED_EVENT | SEEN_TIMEOUT | SEEN_EXPIRED | SEEN_CRASH;
    match policy {
        // DIED: a reused lease ended while the re-acquire waited (reuse_grow).
        Policy::WaitDie => (common | SEEN_DIE | SEEN_DIED, SEEN_WOUNDED),
        // With wait: true, wound_wait never refuses: older requesters wound, younger wait.
        Policy::WoundWait => (common | SEEN_WOUNDED, SEEN_DIE),
        // Lanes: no waiting request ever dies, nobody is wounded.
        Policy::Lanes => (common, SEEN_DIE | SEEN_DIED | SEEN_WOUNDED),
        // Detect: a cycle's youngest member dies, as the requester (DIE) or as a waiter
        // (DIED); nobody is wounded.
        Policy::Detect => (common | SEEN_DIE | SEEN_DIED, SEEN_WOUNDED),
    }
}

fn check_policy(policy: Policy) {
    let started = Instant::now();
    let mut total = 0;
    let mut lines = Vec::new();
    let mut seen = 0;
    for scenario in scenarios() {
        let programs = programs_for(&scenario, Some(policy));
        let model = Model {
            programs: &programs,
            max_crashes: MAX_CRASHES,
            check_cycles: true,
        };
        let t = Instant::now();
        match explore(&model, KernelBackend::new(policy)) {
            Ok(r) => {
                let line = format!(
                    "model_check {:<10} {:<17} states={:>7} transitions={:>8} terminal={:>5} ({:.1?}) seen: {}",
                    policy.name(),
                    scenario.name,
                    r.states,
                    r.transitions,
                    r.terminal,
                    t.elapsed(),
                    seen_names(r.seen)
                );
                seen |= r.seen;
                println!("{line}");
                lines.push(line);
                total += r.states;
            }
            Err(e) => panic!(
                "model_check {} {}: VIOLATION: {e}\nscenarios explored before this one:\n{}",
                policy.name(),
                scenario.name,
                lines.join("\n")
            ),
        }
    }
    let summary = format!(
        "model_check {}: {total} states explored over {} scenarios in {:.1?}",
        policy.name(),
        lines.len(),
        started.elapsed()
    );
    println!("{summary}");
    // The state counts are part of the assertion messages too, so they show without
    // --nocapture whenever an assertion fails.
    let (must, never) = expected_outcomes(policy);
    assert!(
        seen & must == must,
        "{summary}\n{}\nnever reached: {}",
        lines.join("\n"),
        seen_names(must & !seen)
    );
    assert!(
        seen & never == 0,
        "{summary}\n{}\nunexpected: {}",
        lines.join("\n"),
        seen_names(seen & never)
    );
}

#[test]
fn exhaustive_wait_die() {
    check_policy(Policy::WaitDie);
}

#[test]
fn exhaustive_wound_wait() {
    check_policy(Policy::WoundWait);
}

#[test]
fn exhaustive_lanes() {
    check_policy(Policy::Lanes);
}

#[test]
fn exhaustive_detect() {
    check_policy(Policy::Detect);
}

/// The negative control: naive blocking locks over the A-B / B-A programs must be reported
/// as a wait-for cycle by the same checker.
#[test]
fn negative_control_naive_locks_deadlock() {
    let scenario = &scenarios()[0];
    let programs = programs_for(scenario, None);
    let model = Model {
        programs: &programs,
        max_crashes: 0,
        check_cycles: true,
    };
    let err = match explore(&model, NaiveBackend::default()) {
        Ok(r) => panic!(
            "the naive lock manager passed the model check ({} states): the checker is vacuous",
            r.states
        ),
        Err(e) => e,
    };
    println!("negative control (cycle detector) found, as expected:\n{err}");
    assert!(
        err.starts_with("wait-for cycle"),
        "expected a wait-for cycle, got: {err}"
    );

    // Without the cycle detector, the stuck-state check still catches it.
    let model = Model {
        programs: &programs,
        max_crashes: 0,
        check_cycles: false,
    };
    let err = explore(&model, NaiveBackend::default())
        .err()
        .expect("naive locks must deadlock");
    assert!(
        err.starts_with("deadlock:"),
        "expected a stuck state, got: {err}"
    );

    // And the reader-upgrade programs deadlock too (two readers both upgrading).
    let scenario = &scenarios()[1];
    let programs = programs_for(scenario, None);
    let model = Model {
        programs: &programs,
        max_crashes: 0,
        check_cycles: true,
    };
    let err = explore(&model, NaiveBackend::default())
        .err()
        .expect("naive upgrades must deadlock");
    assert!(
        err.starts_with("wait-for cycle"),
        "expected a wait-for cycle, got: {err}"
    );
}

#[test]
fn checker_helpers() {
    assert!(overlaps(P, C) && overlaps(C, P) && overlaps(P, P));
    assert!(!overlaps(P, Q) && !overlaps(C, Q) && !overlaps("FILE:/p", "FILE:/pc"));
    assert!(overlaps("FILE:/", Q) && !overlaps("DIR:/p", P));
    let mut edges = BTreeMap::new();
    edges.insert(1, vec![2]);
    edges.insert(2, vec![3]);
    assert_eq!(wait_for_cycle(&edges), None);
    edges.insert(3, vec![1]);
    assert_eq!(wait_for_cycle(&edges), Some(vec![1, 2, 3, 1]));
}

/// Found by the model checker (lanes, reader_upgrade: M1 ∪ M2 = CONSUMES and MUTATES on one
/// resource). docs/SPEC.md §6: "two predicates on one resource are two leases" — such a manifest
/// must be able to wait like any other.
#[test]
fn two_predicates_on_one_resource_can_wait() {
    for policy in Policy::ALL {
        let mut k = Kernel::new(Config {
            policy,
            ..Config::default()
        })
        .unwrap();
        let older = k.open_session("older", "default", 0).unwrap().session_id;
        let younger = k.open_session("younger", "default", 0).unwrap().session_id;
        let (holder, waiter) = if policy == Policy::WoundWait {
            (older, younger)
        } else {
            (younger, older)
        };
        let held = k
            .acquire(holder, &["MUTATES FILE:/p"], AcquireOptions::default(), 1)
            .unwrap();
        assert!(
            matches!(held, Verdict::Granted { .. }),
            "{policy:?}: {held:?}"
        );
        let both = ["CONSUMES FILE:/p", "MUTATES FILE:/p"];
        let verdict = k
            .acquire(waiter, &both, AcquireOptions::default(), 2)
            .unwrap();
        let Verdict::Wait { ticket, .. } = verdict else {
            panic!("{policy:?}: expected WAIT, got {verdict:?}")
        };
        k.release_all(holder, 3).unwrap();
        // The holder's immediate grant and its release come first (docs/SPEC.md §9).
        let acquired = k.poll_event();
        assert!(
            matches!(acquired, Some(Event::Acquired { session, .. }) if session == holder),
            "{policy:?}: {acquired:?}"
        );
        let released = k.poll_event();
        assert!(
            matches!(released, Some(Event::Released { session, .. }) if session == holder),
            "{policy:?}: {released:?}"
        );
        match k.poll_event() {
            Some(Event::Granted {
                ticket: t, leases, ..
            }) => assert!(t == ticket && leases.len() == 2, "{policy:?}"),
            other => panic!("{policy:?}: expected GRANTED, got {other:?}"),
        }
    }
}
