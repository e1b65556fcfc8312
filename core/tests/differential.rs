//! Differential property test: the kernel against a deliberately naive model written from
//! docs/SPEC.md (`tests/naive/`), plus invariants checked directly on the kernel's snapshot, plus a
//! garbage-input test (errors, never panics, a failed call changes nothing but settlement).
//!
//! Every output is compared after every step: verdicts (held_by, retry_after_ms), leases,
//! events in order, heartbeat / reconcile / release results, error codes, next_deadline,
//! resource_state and the whole snapshot (sessions, leases, tickets, counters, stats).
//!
//! Case counts: `PROPTEST_CASES` (default 512 per policy and for the garbage test).
//! `DIFF_STATS=1` prints what the generator reached (verdicts, events, outcomes);
//! `DIFF_TRACE=1` prints every acquire and its verdict.

mod naive;

use klock_core::{
    AcquireOptions, Config, ErrorCode, Event, Kernel, Lease, LeaseId, LeaseSelection, Policy,
    Predicate, SessionId, Snapshot, StateDigest, TicketId, Verdict,
};
use naive::{conflicts, overlaps, Model};
use proptest::prelude::*;
use proptest::test_runner::{Config as PtConfig, TestCaseError, TestRunner};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// Outcome tallies, printed with `DIFF_STATS=1` to see what the generator reaches.
static TALLY: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());

fn tally(what: impl Into<String>) {
    if std::env::var_os("DIFF_STATS").is_some() {
        *TALLY.lock().unwrap().entry(what.into()).or_default() += 1;
    }
}

fn print_tally(name: &str) {
    if std::env::var_os("DIFF_STATS").is_some() {
        eprintln!("{name}: {:#?}", TALLY.lock().unwrap());
    }
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(512)
}

fn pt_config() -> PtConfig {
    PtConfig {
        cases: cases(),
        failure_persistence: None,
        max_shrink_iters: 20_000,
        ..PtConfig::default()
    }
}

macro_rules! check {
    ($cond:expr, $($fmt:tt)*) => {
        if !$cond {
            return Err(TestCaseError::fail(format!($($fmt)*)));
        }
    };
}

macro_rules! check_eq {
    ($a:expr, $b:expr, $($fmt:tt)*) => {
        match (&$a, &$b) {
            (a, b) if a != b => {
                return Err(TestCaseError::fail(format!("{}\n  kernel: {:?}\n  model:  {:?}", format!($($fmt)*), a, b)));
            }
            _ => {}
        }
    };
}

// ---------------------------------------------------------------------------------------------
// Operations
// ---------------------------------------------------------------------------------------------

const RES: [&str; 6] = [
    "FILE:/",
    "FILE:/a",
    "FILE:/a/b",
    "FILE:/a/c",
    "FILE:/d",
    "SYMBOL:/a",
];
/// The same resources, spelled non-canonically.
const RES_ALT: [&str; 6] = [
    "FILE://",
    "FILE:/a/",
    "FILE:/a/./b",
    "FILE://a//c/",
    "FILE:/d/.",
    "SYMBOL:/./a",
];
const PRED: [&str; 6] = [
    "PROVIDES",
    "CONSUMES",
    "MUTATES",
    "DELETES",
    "DEPENDS_ON",
    "RENAMES",
];
const BAD_INTENTS: [&str; 7] = [
    "WRITES FILE:/a",
    "MUTATES FILE:/a/../b",
    "MUTATES file:/a",
    "MUTATES",
    "MUTATES FILE:",
    "MUTATES FILE:a",
    "MUTATES  FILE:/a",
];

#[derive(Clone, Debug)]
enum Step {
    Same,
    Fwd(u64),
    Back(u64),
    Big(u64),
    ToDeadline,
}

#[derive(Clone, Debug)]
struct Who {
    agent: u8,
    pick: u8,
}

#[derive(Clone, Debug)]
enum Op {
    Open {
        agent: u8,
    },
    Close(Who),
    Suspend(Who),
    Digest(Who),
    Resume {
        agent: u8,
        tamper: u8,
    },
    Acquire {
        who: Who,
        intents: Vec<(u8, u8, u8)>,
        ttl: u8,
        wait: bool,
        timeout: u8,
    },
    /// Acquire again some of the intents the session holds, plus new ones.
    Reacquire {
        who: Who,
        held: u8,
        intents: Vec<(u8, u8, u8)>,
        ttl: u8,
        wait: bool,
        timeout: u8,
    },
    Heartbeat {
        who: Who,
        ids: Option<Vec<u8>>,
    },
    Release {
        who: Who,
        id: u8,
    },
    ReleaseAll(Who),
    Reconcile {
        who: Who,
        ids: Vec<u8>,
    },
    CancelWait {
        who: Who,
        ticket: u8,
    },
    Advance,
    NextDeadline,
    /// The kernel is replaced by `import_state(export_state())`: a host restarting from a
    /// snapshot must go on exactly as before (the model does not notice).
    Restore,
    ResourceState {
        res: u8,
        ns: u8,
    },
}

#[derive(Clone, Debug)]
struct Case {
    config: Config,
    agents: usize,
    ns_mask: u8,
    ops: Vec<(Step, Op)>,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        25 => Just(Step::Same),
        45 => (1u64..=5).prop_map(|k| Step::Fwd(k * 10)),
        5 => (1u64..=5).prop_map(|k| Step::Back(k * 10)),
        3 => (2u64..=30).prop_map(|k| Step::Big(k * 100)),
        10 => Just(Step::ToDeadline),
    ]
}

fn who() -> impl Strategy<Value = Who> {
    (
        0u8..5,
        prop_oneof![30 => Just(0u8), 1 => Just(5u8), 1 => Just(6u8), 1 => Just(7u8)],
    )
        .prop_map(|(agent, pick)| Who { agent, pick })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..5).prop_map(|agent| Op::Open { agent }),
        3 => who().prop_map(Op::Close),
        3 => who().prop_map(Op::Suspend),
        3 => who().prop_map(Op::Digest),
        3 => (0u8..5, any::<u8>()).prop_map(|(agent, tamper)| Op::Resume { agent, tamper }),
        30 => (
            who(),
            prop::collection::vec((0u8..9, 0u8..9, any::<u8>()), 1..=3),
            any::<u8>(),
            prop::bool::weighted(0.85),
            any::<u8>()
        )
            .prop_map(|(who, intents, ttl, wait, timeout)| Op::Acquire { who, intents, ttl, wait, timeout }),
        10 => (
            who(),
            any::<u8>(),
            prop::collection::vec((0u8..9, 0u8..9, 0u8..36), 0..=2),
            any::<u8>(),
            prop::bool::weighted(0.9),
            any::<u8>()
        )
            .prop_map(|(who, held, intents, ttl, wait, timeout)| Op::Reacquire { who, held, intents, ttl, wait, timeout }),
        8 => (who(), prop::option::weighted(0.6, prop::collection::vec(any::<u8>(), 0..=3)))
            .prop_map(|(who, ids)| Op::Heartbeat { who, ids }),
        8 => (who(), any::<u8>()).prop_map(|(who, id)| Op::Release { who, id }),
        3 => who().prop_map(Op::ReleaseAll),
        4 => (who(), prop::collection::vec(any::<u8>(), 0..=4)).prop_map(|(who, ids)| Op::Reconcile { who, ids }),
        4 => (who(), any::<u8>()).prop_map(|(who, ticket)| Op::CancelWait { who, ticket }),
        6 => Just(Op::Advance),
        2 => Just(Op::NextDeadline),
        3 => Just(Op::Restore),
        3 => (0u8..7, 0u8..3).prop_map(|(res, ns)| Op::ResourceState { res, ns }),
    ]
}

fn config(policy: Policy) -> impl Strategy<Value = Config> {
    (
        any::<u64>(),
        prop::sample::select(vec![200u64, 500, 1000]),
        prop::sample::select(vec![300u64, 1000, 300_000]),
        prop::sample::select(vec![30u64, 100, 300]),
        prop::sample::select(vec![0u64, 7, 100]),
        prop::sample::select(vec![0u64, 50, 10_000]),
        prop::sample::select(vec![0u64, 40, 150]),
        prop::sample::select(vec![0u64, 0, 150, 1000]),
        prop::sample::select(vec![2u64, 4, 1024, 1024]),
        prop::sample::select(vec![0u64, 0, 120, 400]),
    )
        .prop_map(
            move |(seed, ttl, max_ttl, wt, base, cap, grace, idle, quota, life)| Config {
                policy,
                seed,
                default_ttl_ms: ttl,
                max_ttl_ms: max_ttl,
                default_wait_timeout_ms: wt,
                backoff_base_ms: base,
                backoff_cap_ms: cap,
                grace_ms: grace,
                session_idle_ms: idle,
                max_leases_per_session: quota,
                max_lease_lifetime_ms: life,
            },
        )
}

fn case(policy: Policy) -> impl Strategy<Value = Case> {
    (
        config(policy),
        3usize..=5,
        any::<u8>(),
        prop::collection::vec((step(), op()), 1..=60),
    )
        .prop_map(|(config, agents, ns_mask, ops)| Case {
            config,
            agents,
            ns_mask,
            ops,
        })
}

// ---------------------------------------------------------------------------------------------
// The harness
// ---------------------------------------------------------------------------------------------

type Manifest = Vec<(Predicate, String)>;

struct World {
    k: Kernel,
    m: Model,
    policy: Policy,
    /// Host time.
    t: u64,
    agents: Vec<(String, String)>,
    sessions: Vec<Vec<SessionId>>,
    digests: Vec<Option<StateDigest>>,
    max_lease: u64,
    max_ticket: u64,
    max_fence: u64,
    new_leases: Vec<(LeaseId, u64)>,
    /// The kernel's snapshot after the last step.
    snap: Snapshot,
    /// Every lease each session was granted.
    owned: HashMap<SessionId, Vec<LeaseId>>,
    /// Every WAIT ticket and its session.
    waits: Vec<(TicketId, SessionId)>,
    fences: HashMap<LeaseId, u64>,
    manifests: HashMap<TicketId, Manifest>,
    /// The active leases as the events alone tell them (ACQUIRED and GRANTED begin a lease;
    /// RELEASED, LEASE_EXPIRED and WOUNDED end it): an observer that reads only the event
    /// stream must see exactly the kernel's leases (docs/SPEC.md §9).
    told: std::collections::BTreeSet<LeaseId>,
}

fn code<T>(r: Result<T, klock_core::Error>) -> Result<T, ErrorCode> {
    r.map_err(|e| {
        assert!(
            !e.message.is_empty(),
            "error {:?} without a message",
            e.code
        );
        e.code
    })
}

/// Compares one operation's answers and tallies the outcome.
fn same<T: PartialEq + std::fmt::Debug>(
    at: &str,
    what: &str,
    k: Result<T, ErrorCode>,
    m: Result<T, ErrorCode>,
) -> Result<Result<T, ErrorCode>, TestCaseError> {
    check_eq!(k, m, "{at}");
    tally(match &k {
        Ok(_) => format!("{what} ok"),
        Err(c) => format!("{what} {c}"),
    });
    Ok(k)
}

fn canonical_manifest(texts: &[String]) -> Manifest {
    let mut out: Manifest = Vec::new();
    for t in texts {
        let (p, r) = klock_core::parse_intent(t).expect("valid manifest");
        let i = (p, r.into_string());
        if !out.contains(&i) {
            out.push(i);
        }
    }
    out
}

fn intents_of(leases: &[Lease]) -> Manifest {
    leases
        .iter()
        .map(|l| (l.predicate, l.resource.clone()))
        .collect()
}

impl World {
    fn new(case: &Case) -> World {
        let agents = (0..case.agents)
            .map(|i| {
                let ns = if i >= 2 && case.ns_mask >> i & 1 == 1 {
                    "ns2"
                } else {
                    "default"
                };
                (format!("agent{i}"), String::from(ns))
            })
            .collect();
        World {
            k: Kernel::new(case.config.clone()).expect("valid config"),
            m: Model::new(case.config.clone()),
            policy: case.config.policy,
            t: 0,
            agents,
            sessions: vec![Vec::new(); case.agents],
            digests: vec![None; case.agents],
            max_lease: 0,
            max_ticket: 0,
            max_fence: 0,
            new_leases: Vec::new(),
            snap: Kernel::new(Config::default()).unwrap().snapshot(0),
            owned: HashMap::new(),
            waits: Vec::new(),
            fences: HashMap::new(),
            told: std::collections::BTreeSet::new(),
            manifests: HashMap::new(),
        }
    }

    /// The session an operation names: mostly the agent's live session (opened first, as a
    /// step of its own, when it has none), sometimes a closed one or a made-up id.
    fn who(&mut self, w: &Who, now: u64) -> Result<SessionId, TestCaseError> {
        let agent = w.agent as usize % self.agents.len();
        let idle_ms = self.k.config().session_idle_ms;
        // Live, and not about to be closed for idleness by this call's settlement.
        let usable = |s: &SessionId| {
            self.snap.sessions.iter().any(|v| {
                v.session_id == *s
                    && !(idle_ms > 0
                        && v.leases == 0
                        && v.tickets.is_empty()
                        && v.last_active + idle_ms <= now)
            })
        };
        if w.pick < 5 && !self.sessions[agent].last().is_some_and(usable) {
            self.apply(
                usize::MAX,
                &Step::Same,
                &Op::Open { agent: agent as u8 },
                now,
            )?;
        }
        let list = &self.sessions[agent];
        Ok(match w.pick {
            7 => SessionId(u64::from(w.agent) * 3 % 11),
            6 if list.len() >= 2 => list[list.len() - 2],
            _ => list
                .last()
                .copied()
                .unwrap_or(SessionId(1000 + w.agent as u64)),
        })
    }

    /// Mostly one of the session's active leases, else one it held before, sometimes any id.
    fn lease_id(&self, s: SessionId, sel: u8) -> LeaseId {
        let active: Vec<LeaseId> = self
            .snap
            .leases
            .iter()
            .filter(|l| l.session_id == s)
            .map(|l| l.lease_id)
            .collect();
        let owned = self.owned.get(&s).cloned().unwrap_or_default();
        let pick = |v: &[LeaseId]| v[(sel as usize / 4) % v.len()];
        match sel % 4 {
            1 | 2 if !active.is_empty() => pick(&active),
            1..=3 if !owned.is_empty() => pick(&owned),
            _ => LeaseId(u64::from(sel) % (self.max_lease + 3)),
        }
    }

    /// Mostly one of the session's waiting tickets, else one it had, sometimes any id.
    fn ticket_id(&self, s: SessionId, sel: u8) -> TicketId {
        let waiting: Vec<TicketId> = self
            .snap
            .tickets
            .iter()
            .filter(|t| t.session_id == s)
            .map(|t| t.ticket)
            .collect();
        let had: Vec<TicketId> = self
            .waits
            .iter()
            .filter(|(_, o)| *o == s)
            .map(|(t, _)| *t)
            .collect();
        let pick = |v: &[TicketId]| v[(sel as usize / 4) % v.len()];
        match sel % 4 {
            1 | 2 if !waiting.is_empty() => pick(&waiting),
            1..=3 if !had.is_empty() => pick(&had),
            _ => TicketId(u64::from(sel) % (self.max_ticket + 3)),
        }
    }

    /// Records the leases of a grant; new ones are checked at the end of the step.
    fn saw_leases(&mut self, leases: &[Lease], what: &str) -> Result<(), TestCaseError> {
        for l in leases {
            match self.fences.get(&l.lease_id) {
                Some(&f) => check_eq!(f, l.fence, "{what}: fence of lease {} changed", l.lease_id),
                None => {
                    self.owned.entry(l.session_id).or_default().push(l.lease_id);
                    self.fences.insert(l.lease_id, l.fence);
                    self.new_leases.push((l.lease_id, l.fence));
                }
            }
            self.max_lease = self.max_lease.max(l.lease_id.0);
        }
        Ok(())
    }

    /// Fences strictly increase in grant order (lease ids are handed out in grant order).
    fn check_new_fences(&mut self, what: &str) -> Result<(), TestCaseError> {
        let mut new = std::mem::take(&mut self.new_leases);
        new.sort();
        for (id, fence) in new {
            check!(
                fence > self.max_fence,
                "{what}: fence {fence} of new lease {id} not above {}",
                self.max_fence
            );
            self.max_fence = fence;
        }
        Ok(())
    }

    fn run(&mut self, ops: &[(Step, Op)]) -> Result<(), TestCaseError> {
        for i in 0..self.agents.len() {
            self.apply(i, &Step::Same, &Op::Open { agent: i as u8 }, 0)?;
        }
        for (i, (step, op)) in ops.iter().enumerate() {
            self.apply(i, step, op, self.t)?;
        }
        Ok(())
    }

    fn apply(
        &mut self,
        index: usize,
        step: &Step,
        op: &Op,
        host: u64,
    ) -> Result<(), TestCaseError> {
        let at = format!("step {index} {step:?} {op:?}");
        tally("steps");
        let now = match *step {
            Step::Same => host,
            Step::Fwd(d) | Step::Big(d) => self.t + d,
            Step::Back(d) => self.t.saturating_sub(d),
            Step::ToDeadline => {
                check_eq!(
                    self.k.next_deadline(),
                    self.m.next_deadline(),
                    "{at}: next_deadline"
                );
                self.k.next_deadline().unwrap_or(self.t)
            }
        };
        self.t = self.t.max(now);
        match op {
            Op::Open { agent } => {
                let a = *agent as usize % self.agents.len();
                let (name, ns) = self.agents[a].clone();
                let (kr, mr) = (
                    code(self.k.open_session(&name, &ns, now)),
                    self.m.open_session(&name, &ns, now),
                );
                check_eq!(kr, mr, "{at}");
                if let Ok(info) = kr {
                    self.sessions[a].push(info.session_id);
                }
            }
            Op::Close(w) => {
                let s = self.who(w, now)?;
                let _ = same(
                    &at,
                    "close",
                    code(self.k.close_session(s, now)),
                    self.m.close_session(s, now),
                )?;
            }
            Op::Suspend(w) => {
                let s = self.who(w, now)?;
                let _ = same(
                    &at,
                    "suspend",
                    code(self.k.suspend_session(s, now)),
                    self.m.suspend_session(s, now),
                )?;
            }
            Op::Digest(w) => {
                let s = self.who(w, now)?;
                let (kr, mr) = (code(self.k.digest(s, now)), self.m.digest(s, now));
                check_eq!(kr, mr, "{at}");
                if let Ok(d) = kr {
                    if let Some(a) = self.sessions.iter().position(|l| l.contains(&s)) {
                        self.digests[a] = Some(d);
                    }
                }
            }
            Op::Resume { agent, tamper } => {
                let a = *agent as usize % self.agents.len();
                let mut d = match (&self.digests[a], self.sessions[a].last()) {
                    (Some(d), _) => d.clone(),
                    (None, Some(&s)) => StateDigest {
                        version: klock_core::DIGEST_VERSION,
                        identity: klock_core::DigestIdentity {
                            agent_id: self.agents[a].0.clone(),
                            namespace: self.agents[a].1.clone(),
                            session_id: s,
                            priority_timestamp: s.0,
                            epoch: 0,
                        },
                        recovery: klock_core::DigestRecovery {
                            last_phase: "IDLE".into(),
                            pending_intents: vec![],
                        },
                    },
                    (None, None) => return Ok(()),
                };
                match tamper % 12 {
                    5 => d.identity.priority_timestamp += 1,
                    6 => d.identity.agent_id.push('x'),
                    7 => d.identity.namespace = "elsewhere".into(),
                    8 => d.identity.epoch += 5,
                    9 => d.version += 1,
                    10 => d.identity.session_id = SessionId(d.identity.session_id.0 + 1),
                    _ => {}
                }
                let _ = same(
                    &at,
                    "resume",
                    code(self.k.resume_session(&d, now)),
                    self.m.resume_session(&d, now),
                )?;
            }
            Op::Acquire {
                who,
                intents,
                ttl,
                wait,
                timeout,
            } => {
                let s = self.who(who, now)?;
                self.acquire(&at, s, Vec::new(), intents, *ttl, *wait, *timeout, now)?;
            }
            Op::Reacquire {
                who,
                held,
                intents,
                ttl,
                wait,
                timeout,
            } => {
                let s = self.who(who, now)?;
                let mine: Vec<String> = self
                    .k
                    .snapshot(0)
                    .leases
                    .iter()
                    .filter(|l| l.session_id == s)
                    .map(|l| format!("{} {}", l.predicate.name(), l.resource))
                    .collect();
                let mut texts = Vec::new();
                for (i, text) in mine.iter().enumerate() {
                    if held >> (i % 8) & 1 == 1 || mine.len() == 1 {
                        texts.push(text.clone());
                    }
                }
                if texts.is_empty() && intents.is_empty() {
                    texts.push(format!(
                        "{} {}",
                        PRED[*held as usize % 6],
                        RES[*held as usize / 6 % 6]
                    ));
                }
                self.acquire(&at, s, texts, intents, *ttl, *wait, *timeout, now)?;
            }
            Op::Heartbeat { who, ids } => {
                let s = self.who(who, now)?;
                let ids: Option<Vec<LeaseId>> = ids
                    .as_ref()
                    .map(|v| v.iter().map(|&x| self.lease_id(s, x)).collect());
                let (kr, mr) = match &ids {
                    None => (
                        code(self.k.heartbeat(s, LeaseSelection::All, now)),
                        self.m.heartbeat(s, None, now),
                    ),
                    Some(v) => (
                        code(self.k.heartbeat(s, LeaseSelection::Ids(v), now)),
                        self.m.heartbeat(s, Some(v), now),
                    ),
                };
                check_eq!(kr, mr, "{at}: ids {ids:?}");
                for (_, o) in kr.unwrap_or_default() {
                    tally(format!(
                        "heartbeat -> {}",
                        o.map_or_else(|c| c.name(), |_| "renewed")
                    ));
                }
            }
            Op::Release { who, id } => {
                let s = self.who(who, now)?;
                let l = self.lease_id(s, *id);
                let r = same(
                    &at,
                    "release",
                    code(self.k.release(s, l, now)),
                    self.m.release(s, l, now),
                )?;
                tally(format!("release -> {r:?}"));
            }
            Op::ReleaseAll(w) => {
                let s = self.who(w, now)?;
                let _ = same(
                    &at,
                    "release_all",
                    code(self.k.release_all(s, now)),
                    self.m.release_all(s, now),
                )?;
            }
            Op::Reconcile { who, ids } => {
                let s = self.who(who, now)?;
                let ids: Vec<LeaseId> = ids.iter().map(|&x| self.lease_id(s, x)).collect();
                let r = same(
                    &at,
                    "reconcile",
                    code(self.k.reconcile(s, &ids, now)),
                    self.m.reconcile(s, &ids, now),
                )?;
                for (_, st) in r.unwrap_or_default() {
                    tally(format!("reconcile -> {}", st.name()));
                }
            }
            Op::CancelWait { who, ticket } => {
                let s = self.who(who, now)?;
                let t = self.ticket_id(s, *ticket);
                let _ = same(
                    &at,
                    "cancel_wait",
                    code(self.k.cancel_wait(s, t, now)),
                    self.m.cancel_wait(s, t, now),
                )?;
            }
            Op::Advance => {
                self.k.advance(now);
                self.m.advance(now);
            }
            Op::NextDeadline => check_eq!(self.k.next_deadline(), self.m.next_deadline(), "{at}"),
            Op::Restore => {
                let state = self.k.export_state();
                let restored = Kernel::import_state(&state);
                if let Err(e) = &restored {
                    check!(false, "{at}: import refused its own export: {e}");
                }
                let restored = restored.expect("checked above");
                let again = restored.export_state();
                check_eq!(again.hash(), state.hash(), "{at}: state hash after import");
                check_eq!(again, state, "{at}: state after import");
                check_eq!(
                    restored.next_deadline(),
                    self.k.next_deadline(),
                    "{at}: deadline"
                );
                self.k = restored;
            }
            Op::ResourceState { res, ns } => {
                let r = if *res as usize >= RES.len() {
                    "FILE:/a/../x"
                } else {
                    RES_ALT[*res as usize]
                };
                let ns = ["default", "ns2", ""][*ns as usize % 3];
                let (kr, mr) = (
                    code(self.k.resource_state(r, ns, now)),
                    self.m.resource_state(r, ns, now),
                );
                check_eq!(kr, mr, "{at}");
            }
        }
        self.drain_events(&at)?;
        self.check_new_fences(&at)?;
        check_eq!(self.k.now(), self.m.now(), "{at}: clock");
        check_eq!(
            self.k.next_deadline(),
            self.m.next_deadline(),
            "{at}: next_deadline"
        );
        let snap = self.k.snapshot(0);
        for t in &snap.tickets {
            if self
                .manifests
                .get(&t.ticket)
                .is_some_and(|m| m.len() > t.intents.len())
            {
                tally("snapshot: ticket reusing a lease");
            }
        }
        check_eq!(snap, self.m.snapshot(0), "{at}: snapshot");
        self.invariants(&snap, &at)?;
        self.snap = snap;
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn acquire(
        &mut self,
        at: &str,
        s: SessionId,
        texts: Vec<String>,
        intents: &[(u8, u8, u8)],
        ttl: u8,
        wait: bool,
        timeout: u8,
        now: u64,
    ) -> Result<(), TestCaseError> {
        let mut texts = texts;
        texts.extend(intents.iter().map(|&(r, p, style)| {
            // Skewed towards a few nodes and the common predicates, for contention
            // and re-acquires.
            let r = [0, 1, 1, 2, 2, 3, 4, 5, 1][r as usize % 9];
            let p = [0, 1, 1, 2, 2, 2, 3, 4, 5][p as usize % 9];
            match style % 40 {
                36 => PRED[p].to_lowercase() + " " + RES[r],
                37 => format!("{} {}", PRED[p], RES_ALT[r]),
                38 | 39 => BAD_INTENTS[(style as usize / 40 + r) % BAD_INTENTS.len()].to_string(),
                _ => format!("{} {}", PRED[p], RES[r]),
            }
        }));
        let ttl_ms = match ttl % 32 {
            0..=6 => None,
            7 | 8 => Some(10),
            9 | 10 => Some(30),
            11 => Some(100),
            12 => Some(1000),
            13 => Some(70),
            14 => Some(u64::MAX),
            15 => Some(0),
            _ => None,
        };
        let wait_timeout_ms = match timeout % 8 {
            0..=2 => None,
            3 => Some(0),
            4 => Some(10),
            5 => Some(40),
            6 => Some(100),
            _ => Some(300),
        };
        let o = AcquireOptions {
            ttl_ms,
            wait,
            wait_timeout_ms,
        };
        let (kr, mr) = (
            code(self.k.acquire(s, &texts, o, now)),
            self.m.acquire(s, &texts, o, now),
        );
        check_eq!(kr, mr, "{at}: {texts:?}");
        if std::env::var_os("DIFF_TRACE").is_some() {
            eprintln!("t={now} {s} {texts:?} -> {kr:?}");
        }
        tally(match &kr {
            Ok(Verdict::Granted { .. }) => "verdict GRANTED".into(),
            Ok(Verdict::Wait { .. }) => "verdict WAIT".into(),
            Ok(Verdict::Die { cycle, .. }) if !cycle.is_empty() => "verdict DIE (cycle)".into(),
            Ok(Verdict::Die { .. }) => "verdict DIE".into(),
            Err(c) => format!("acquire {c}"),
        });
        match kr {
            Ok(Verdict::Granted { leases }) => {
                check_eq!(
                    intents_of(&leases),
                    canonical_manifest(&texts),
                    "{at}: GRANTED is all-or-nothing"
                );
                self.saw_leases(&leases, at)?;
            }
            Ok(Verdict::Wait { ticket, held_by }) => {
                check!(!held_by.is_empty(), "{at}: WAIT without blockers");
                self.manifests.insert(ticket, canonical_manifest(&texts));
                self.max_ticket = self.max_ticket.max(ticket.0);
            }
            Ok(Verdict::Die { held_by, .. }) => {
                check!(!held_by.is_empty(), "{at}: DIE without blockers")
            }
            Err(_) => {}
        }
        Ok(())
    }

    fn drain_events(&mut self, at: &str) -> Result<(), TestCaseError> {
        let mut ke = Vec::new();
        while let Some(e) = self.k.poll_event() {
            ke.push(e);
        }
        let mut me = Vec::new();
        while let Some(e) = self.m.poll_event() {
            me.push(e);
        }
        check_eq!(ke, me, "{at}: events");
        for e in &ke {
            match e {
                Event::Died { cycle, .. } if !cycle.is_empty() => tally("event DIED (cycle)"),
                _ => tally(format!("event {}", e.name())),
            }
        }
        self.follow_lease_lives(&ke, at)?;
        // The leases a GRANTED creates (not those it reuses: SPEC §6 lets a ticket reuse a
        // lease the session already holds, even one granted earlier in the same drain) carry
        // fences larger than every lease created by an earlier GRANTED.
        let mut last_fence = 0;
        let mut created = std::collections::HashSet::new();
        for e in &ke {
            if let Event::Granted { leases, .. } = e {
                let new = leases.iter().filter(|l| {
                    !self.fences.contains_key(&l.lease_id) && created.insert(l.lease_id)
                });
                let fences: Vec<u64> = new.map(|l| l.fence).collect();
                check!(
                    fences.iter().all(|&f| f > last_fence),
                    "{at}: GRANTED events out of grant order"
                );
                last_fence = fences.into_iter().max().unwrap_or(last_fence);
            }
        }
        for e in &ke {
            if let Event::Granted { ticket, leases, .. } = e {
                let want = self.manifests.get(ticket).cloned().unwrap_or_default();
                check_eq!(
                    intents_of(leases),
                    want,
                    "{at}: GRANTED event of {ticket} is all-or-nothing"
                );
                self.saw_leases(leases, at)?;
            }
        }
        Ok(())
    }

    /// Follows every lease's life through the events: each begins in an ACQUIRED or GRANTED
    /// (again in a later one that reuses it), ends in exactly one RELEASED, LEASE_EXPIRED or
    /// WOUNDED, and the leases so told are exactly the kernel's active leases.
    fn follow_lease_lives(&mut self, events: &[Event], at: &str) -> Result<(), TestCaseError> {
        for e in events {
            let ended: &[LeaseId] = match e {
                Event::Acquired { leases, .. } | Event::Granted { leases, .. } => {
                    self.told.extend(leases.iter().map(|l| l.lease_id));
                    &[]
                }
                Event::Released { leases, .. } => {
                    check!(!leases.is_empty(), "{at}: RELEASED of no lease");
                    check!(leases.is_sorted(), "{at}: RELEASED not ascending");
                    leases
                }
                Event::LeaseExpired { lease, .. } => core::slice::from_ref(lease),
                Event::Wounded { lost_leases, .. } => lost_leases,
                _ => &[],
            };
            for id in ended {
                check!(
                    self.told.remove(id),
                    "{at}: {e:?} ends lease {id}, never begun or ended already"
                );
            }
        }
        let active: std::collections::BTreeSet<LeaseId> = self
            .k
            .snapshot(0)
            .leases
            .iter()
            .map(|l| l.lease_id)
            .collect();
        check_eq!(&self.told, &active, "{at}: the leases the events tell");
        Ok(())
    }

    /// Properties checked directly on the kernel, independently of the model.
    fn invariants(&self, snap: &Snapshot, at: &str) -> Result<(), TestCaseError> {
        check_eq!(
            snap.stats.counters.defensive_repairs,
            0,
            "{at}: defensive repairs"
        );
        let ns: HashMap<SessionId, &str> = snap
            .sessions
            .iter()
            .map(|s| (s.session_id, s.namespace.as_str()))
            .collect();
        let prio: HashMap<SessionId, u64> = snap
            .sessions
            .iter()
            .map(|s| (s.session_id, s.priority))
            .collect();
        for (i, a) in snap.leases.iter().enumerate() {
            check!(
                a.expires_at > snap.now,
                "{at}: lease {} reported with expires_at {} <= now {}",
                a.lease_id,
                a.expires_at,
                snap.now
            );
            if i > 0 {
                check!(
                    snap.leases[i - 1].fence < a.fence,
                    "{at}: fences not increasing in grant order"
                );
            }
            for b in &snap.leases[..i] {
                let clash = a.session_id != b.session_id
                    && ns[&a.session_id] == ns[&b.session_id]
                    && overlaps(&a.resource, &b.resource)
                    && conflicts(a.predicate, b.predicate);
                check!(!clash, "{at}: conflicting holders {a:?} and {b:?}");
            }
        }
        let mut waits_for: BTreeMap<SessionId, Vec<SessionId>> = BTreeMap::new();
        for (i, t) in snap.tickets.iter().enumerate() {
            let mut blockers: Vec<SessionId> = Vec::new();
            for want in &t.intents {
                let same = |s: SessionId| s != t.session_id && ns[&s] == ns[&t.session_id];
                for l in snap.leases.iter().filter(|l| same(l.session_id)) {
                    if overlaps(&want.resource, &l.resource)
                        && conflicts(want.predicate, l.predicate)
                    {
                        blockers.push(l.session_id);
                    }
                }
                for u in snap.tickets[..i].iter().filter(|u| same(u.session_id)) {
                    for q in &u.intents {
                        if overlaps(&want.resource, &q.resource)
                            && conflicts(want.predicate, q.predicate)
                        {
                            blockers.push(u.session_id);
                        }
                    }
                }
            }
            check!(
                !blockers.is_empty(),
                "{at}: ticket {} waits with nothing blocking it",
                t.ticket
            );
            let me = prio[&t.session_id];
            waits_for.entry(t.session_id).or_default().extend(&blockers);
            for b in blockers {
                match self.policy {
                    Policy::WaitDie => check!(
                        me < prio[&b],
                        "{at}: wait_die ticket {} waits for older {b}",
                        t.ticket
                    ),
                    Policy::WoundWait => check!(
                        me > prio[&b],
                        "{at}: wound_wait ticket {} waits for younger {b}",
                        t.ticket
                    ),
                    // Detect: no order; the graph must be acyclic instead (below).
                    Policy::Lanes | Policy::Detect => {}
                }
            }
        }
        check!(
            !has_cycle(&waits_for),
            "{at}: the waiters form a cycle (SPEC §6.1): {waits_for:?}"
        );
        if self.policy == Policy::Lanes {
            for s in &snap.sessions {
                check!(
                    s.tickets.len() <= 1 && (s.tickets.is_empty() || s.leases == 0),
                    "{at}: lanes hold-and-wait by {s:?}"
                );
            }
        }
        Ok(())
    }
}

/// Whether the session graph has a cycle (depth-first, a session on the current path reached
/// again).
fn has_cycle(edges: &BTreeMap<SessionId, Vec<SessionId>>) -> bool {
    fn visit(
        s: SessionId,
        edges: &BTreeMap<SessionId, Vec<SessionId>>,
        path: &mut Vec<SessionId>,
        done: &mut Vec<SessionId>,
    ) -> bool {
        if path.contains(&s) {
            return true;
        }
        if done.contains(&s) {
            return false;
        }
        path.push(s);
        let cyclic = edges
            .get(&s)
            .is_some_and(|out| out.iter().any(|&b| visit(b, edges, path, done)));
        path.pop();
        done.push(s);
        cyclic
    }
    let mut done = Vec::new();
    edges
        .keys()
        .any(|&s| visit(s, edges, &mut Vec::new(), &mut done))
}

fn run_case(case: Case) -> Result<(), TestCaseError> {
    tally("cases");
    World::new(&case).run(&case.ops)
}

fn run_policy(policy: Policy) {
    let mut runner = TestRunner::new(pt_config());
    let result = runner.run(&case(policy), run_case);
    print_tally(policy.name());
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn differential_wait_die() {
    run_policy(Policy::WaitDie);
}

#[test]
fn differential_wound_wait() {
    run_policy(Policy::WoundWait);
}

#[test]
fn differential_lanes() {
    run_policy(Policy::Lanes);
}

#[test]
fn differential_detect() {
    run_policy(Policy::Detect);
}

/// Regression: a WAIT whose manifest names one resource with two predicates queues two intents
/// of one ticket on one node (SPEC §6: "two predicates on one resource are two leases").
#[test]
fn two_predicates_on_one_resource_can_wait() {
    let mut k = Kernel::new(Config::default()).unwrap();
    let a = k.open_session("a", "default", 0).unwrap().session_id;
    let b = k.open_session("b", "default", 0).unwrap().session_id;
    assert!(matches!(
        k.acquire(b, &["MUTATES FILE:/x"], AcquireOptions::default(), 0),
        Ok(Verdict::Granted { .. })
    ));
    let v = k
        .acquire(
            a,
            &["PROVIDES FILE:/x", "CONSUMES FILE:/x"],
            AcquireOptions::default(),
            0,
        )
        .unwrap();
    let Verdict::Wait { ticket, .. } = v else {
        panic!("{v:?}")
    };
    assert!(matches!(k.poll_event(), Some(Event::Acquired { .. })));
    k.release_all(b, 1).unwrap();
    assert!(matches!(k.poll_event(), Some(Event::Released { .. })));
    let Some(Event::Granted {
        ticket: t, leases, ..
    }) = k.poll_event()
    else {
        panic!()
    };
    assert_eq!((t, leases.len()), (ticket, 2));
}

/// Regression: `covering` lists the holders on ancestors even when nothing is held or queued on
/// the node itself or below it (SPEC §10).
#[test]
fn resource_state_shows_an_ancestor_lock_on_an_untouched_node() {
    let mut k = Kernel::new(Config::default()).unwrap();
    let a = k.open_session("a", "default", 0).unwrap().session_id;
    assert!(matches!(
        k.acquire(a, &["DELETES FILE:/build"], AcquireOptions::default(), 0),
        Ok(Verdict::Granted { .. })
    ));
    let state = k.resource_state("FILE:/build/out.o", "default", 1).unwrap();
    assert_eq!(state.covering.len(), 1, "{state:?}");
}

// ---------------------------------------------------------------------------------------------
// Garbage input: errors, never panics, and a failed call changes nothing but settlement
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Junk {
    Open(String, String),
    Acquire {
        session: u64,
        manifest: Vec<String>,
        ttl: Option<u64>,
        wait: bool,
        timeout: Option<u64>,
    },
    EmptyManifest(u64),
    HugeManifest(u64),
    Heartbeat(u64, Vec<u64>),
    Release(u64, u64),
    ReleaseAll(u64),
    Reconcile(u64, Vec<u64>),
    CancelWait(u64, u64),
    Close(u64),
    Suspend(u64),
    Digest(u64),
    Resume {
        session: u64,
        agent: String,
        namespace: String,
        priority: u64,
        epoch: u64,
        version: u32,
    },
    ResourceState(String, String),
    Advance,
}

fn junk_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[ -~]{0,12}",
        "(MUTATES|mutates|Consumes|DEPENDS_ON|WRITES|) ?[A-Z_0-9a-z]{0,4}:?[/.a-z ]{0,8}",
        Just(String::new()),
        Just("a".repeat(257)),
        Just(format!("MUTATES FILE:/{}", "x".repeat(4100))),
        Just("MUTATES FILE:/a\u{0}b".to_string()),
        Just("MUTATES FILE:/a\u{85}b".to_string()),
        Just("A\u{7f}".to_string()),
    ]
}

fn junk_id() -> impl Strategy<Value = u64> {
    prop_oneof![6 => 0u64..6, 1 => Just(u64::MAX), 1 => any::<u64>()]
}

fn junk_num() -> impl Strategy<Value = Option<u64>> {
    prop_oneof![
        Just(None),
        Just(Some(0)),
        Just(Some(u64::MAX)),
        any::<u64>().prop_map(Some),
        (1u64..100).prop_map(Some)
    ]
}

fn junk() -> impl Strategy<Value = Junk> {
    prop_oneof![
        (junk_text(), junk_text()).prop_map(|(a, n)| Junk::Open(a, n)),
        (
            junk_id(),
            prop::collection::vec(junk_text(), 0..4),
            junk_num(),
            any::<bool>(),
            junk_num()
        )
            .prop_map(|(session, manifest, ttl, wait, timeout)| Junk::Acquire {
                session,
                manifest,
                ttl,
                wait,
                timeout
            }),
        (
            junk_id(),
            prop::collection::vec(0u8..6, 1..4),
            junk_num(),
            any::<bool>(),
            junk_num()
        )
            .prop_map(|(session, rs, ttl, wait, timeout)| Junk::Acquire {
                session,
                manifest: rs
                    .into_iter()
                    .map(|r| format!("MUTATES {}", RES[r as usize]))
                    .collect(),
                ttl,
                wait,
                timeout
            }),
        junk_id().prop_map(Junk::EmptyManifest),
        junk_id().prop_map(Junk::HugeManifest),
        (junk_id(), prop::collection::vec(junk_id(), 0..4))
            .prop_map(|(s, l)| Junk::Heartbeat(s, l)),
        (junk_id(), junk_id()).prop_map(|(s, l)| Junk::Release(s, l)),
        junk_id().prop_map(Junk::ReleaseAll),
        (junk_id(), prop::collection::vec(junk_id(), 0..4))
            .prop_map(|(s, l)| Junk::Reconcile(s, l)),
        (junk_id(), junk_id()).prop_map(|(s, t)| Junk::CancelWait(s, t)),
        junk_id().prop_map(Junk::Close),
        junk_id().prop_map(Junk::Suspend),
        junk_id().prop_map(Junk::Digest),
        (
            junk_id(),
            junk_text(),
            junk_text(),
            junk_id(),
            junk_id(),
            prop_oneof![Just(1u32), any::<u32>()]
        )
            .prop_map(|(session, agent, namespace, priority, epoch, version)| {
                Junk::Resume {
                    session,
                    agent,
                    namespace,
                    priority,
                    epoch,
                    version,
                }
            }),
        (junk_text(), junk_text()).prop_map(|(r, n)| Junk::ResourceState(r, n)),
        Just(Junk::Advance),
    ]
}

fn junk_now() -> impl Strategy<Value = u64> {
    prop_oneof![8 => 0u64..2_000, 1 => Just(u64::MAX), 1 => any::<u64>(), 1 => Just(u64::MAX - 1)]
}

fn junk_config() -> impl Strategy<Value = Config> {
    let n = || {
        prop_oneof![
            Just(0u64),
            Just(1u64),
            Just(u64::MAX),
            1u64..1_000,
            any::<u64>()
        ]
    };
    (
        prop::sample::select(Policy::ALL.to_vec()),
        any::<u64>(),
        n(),
        n(),
        n(),
        n(),
        n(),
        n(),
        n(),
        n(),
        n(),
    )
        .prop_map(
            |(policy, seed, ttl, max_ttl, wt, base, cap, grace, idle, quota, life)| Config {
                policy,
                seed,
                default_ttl_ms: ttl,
                max_ttl_ms: max_ttl,
                default_wait_timeout_ms: wt,
                backoff_base_ms: base,
                backoff_cap_ms: cap,
                grace_ms: grace,
                session_idle_ms: idle,
                max_leases_per_session: quota,
                max_lease_lifetime_ms: life,
            },
        )
}

fn drain(k: &mut Kernel) -> Vec<Event> {
    std::iter::from_fn(|| k.poll_event()).collect()
}

fn run_junk(config: Config, ops: Vec<(u64, Junk)>) -> Result<(), TestCaseError> {
    let Ok(mut k) = Kernel::new(config.clone()) else {
        check!(
            config.default_ttl_ms == 0 || config.max_ttl_ms == 0,
            "valid config refused: {config:?}"
        );
        return Ok(());
    };
    // Some valid state to damage: two sessions per namespace, a few leases.
    for (i, ns) in ["default", "default", "other"].iter().enumerate() {
        let s = k
            .open_session(&format!("agent{i}"), ns, 0)
            .unwrap()
            .session_id;
        let _ = k.acquire(
            s,
            &[format!("MUTATES {}", RES[i + 1])],
            AcquireOptions::default(),
            0,
        );
    }
    for (i, (now, op)) in ops.into_iter().enumerate() {
        let at = format!("junk step {i} at {now}: {op:?}");
        let mut settled = k.clone();
        settled.advance(now);
        let expected: Option<ErrorCode>;
        let result: Result<(), klock_core::Error> = match &op {
            Junk::Open(a, n) => {
                expected = (a.is_empty() || a.len() > 256 || a.chars().any(char::is_control))
                    .then_some(ErrorCode::InvalidAgentId);
                k.open_session(a, n, now).map(drop)
            }
            Junk::Acquire {
                session,
                manifest,
                ttl,
                wait,
                timeout,
            } => {
                expected = None;
                let o = AcquireOptions {
                    ttl_ms: *ttl,
                    wait: *wait,
                    wait_timeout_ms: *timeout,
                };
                k.acquire(SessionId(*session), manifest, o, now).map(drop)
            }
            Junk::EmptyManifest(s) => {
                expected = settled
                    .snapshot(0)
                    .sessions
                    .iter()
                    .any(|v| v.session_id.0 == *s)
                    .then_some(ErrorCode::InvalidManifest);
                k.acquire(
                    SessionId(*s),
                    &[] as &[&str],
                    AcquireOptions::default(),
                    now,
                )
                .map(drop)
            }
            Junk::HugeManifest(s) => {
                expected = Some(
                    if settled
                        .snapshot(0)
                        .sessions
                        .iter()
                        .any(|v| v.session_id.0 == *s)
                    {
                        ErrorCode::InvalidManifest
                    } else {
                        ErrorCode::UnknownSession
                    },
                );
                let m: Vec<String> = (0..257).map(|i| format!("CONSUMES FILE:/m/{i}")).collect();
                k.acquire(SessionId(*s), &m, AcquireOptions::default(), now)
                    .map(drop)
            }
            Junk::Heartbeat(s, ids) => {
                expected = None;
                let ids: Vec<LeaseId> = ids.iter().map(|&l| LeaseId(l)).collect();
                k.heartbeat(SessionId(*s), LeaseSelection::Ids(&ids), now)
                    .map(drop)
            }
            Junk::Release(s, l) => {
                expected = None;
                k.release(SessionId(*s), LeaseId(*l), now).map(drop)
            }
            Junk::ReleaseAll(s) => {
                expected = None;
                k.release_all(SessionId(*s), now).map(drop)
            }
            Junk::Reconcile(s, ids) => {
                expected = None;
                let ids: Vec<LeaseId> = ids.iter().map(|&l| LeaseId(l)).collect();
                k.reconcile(SessionId(*s), &ids, now).map(drop)
            }
            Junk::CancelWait(s, t) => {
                expected = None;
                k.cancel_wait(SessionId(*s), TicketId(*t), now)
            }
            Junk::Close(s) => {
                expected = None;
                k.close_session(SessionId(*s), now)
            }
            Junk::Suspend(s) => {
                expected = None;
                k.suspend_session(SessionId(*s), now)
            }
            Junk::Digest(s) => {
                expected = None;
                k.digest(SessionId(*s), now).map(drop)
            }
            Junk::Resume {
                session,
                agent,
                namespace,
                priority,
                epoch,
                version,
            } => {
                expected = None;
                let d = StateDigest {
                    version: *version,
                    identity: klock_core::DigestIdentity {
                        agent_id: agent.clone(),
                        namespace: namespace.clone(),
                        session_id: SessionId(*session),
                        priority_timestamp: *priority,
                        epoch: *epoch,
                    },
                    recovery: klock_core::DigestRecovery {
                        last_phase: "IDLE".into(),
                        pending_intents: vec![],
                    },
                };
                k.resume_session(&d, now).map(drop)
            }
            Junk::ResourceState(r, n) => {
                expected = None;
                k.resource_state(r, n, now).map(drop)
            }
            Junk::Advance => {
                expected = None;
                k.advance(now);
                Ok(())
            }
        };
        if let Some(want) = expected {
            check_eq!(result.as_ref().map_err(|e| e.code), Err(want), "{at}");
        }
        match result {
            Err(e) => {
                check!(!e.message.is_empty(), "{at}: error without a message");
                tally(format!("junk error {}", e.code));
                check_eq!(
                    drain(&mut k),
                    drain(&mut settled),
                    "{at}: a failed call emitted events"
                );
                check_eq!(
                    k.snapshot(0),
                    settled.snapshot(0),
                    "{at}: a failed call changed the state"
                );
            }
            Ok(()) => {
                tally("junk ok");
                drain(&mut k);
            }
        }
        check_eq!(k.stats().counters.defensive_repairs, 0, "{at}");
    }
    Ok(())
}

#[test]
fn garbage_never_panics_and_failed_calls_change_nothing() {
    let ops = prop::collection::vec((junk_now(), junk()), 1..40);
    let mut runner = TestRunner::new(pt_config());
    let result = runner.run(&(junk_config(), ops), |(config, ops)| run_junk(config, ops));
    print_tally("garbage");
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// Regression: when one ended lease withdraws several tickets that reuse it, the DIED events
/// (and their jitter draws) come in ticket order, like every other same-instant resolution
/// (SPEC §2 "wait timeouts in ticket order", §9 "several GRANTED in ticket order").
#[test]
fn died_events_come_in_ticket_order() {
    let mut k = Kernel::new(Config::default()).unwrap();
    let a = k.open_session("a", "default", 0).unwrap().session_id;
    let b = k.open_session("b", "default", 0).unwrap().session_id;
    let o = AcquireOptions::default();
    assert!(matches!(
        k.acquire(b, &["MUTATES FILE:/x"], o, 0),
        Ok(Verdict::Granted { .. })
    ));
    let Ok(Verdict::Granted { leases }) = k.acquire(a, &["CONSUMES FILE:/y"], o, 0) else {
        panic!()
    };
    let Ok(Verdict::Wait { ticket: t1, .. }) =
        k.acquire(a, &["CONSUMES FILE:/y", "MUTATES FILE:/x"], o, 0)
    else {
        panic!()
    };
    let Ok(Verdict::Wait { ticket: t2, .. }) =
        k.acquire(a, &["CONSUMES FILE:/y", "DELETES FILE:/x"], o, 0)
    else {
        panic!()
    };
    assert_eq!(k.release(a, leases[0].lease_id, 1), Ok(true));
    let died: Vec<TicketId> = drain(&mut k)
        .into_iter()
        .filter_map(|e| match e {
            Event::Died { ticket, .. } => Some(ticket),
            _ => None,
        })
        .collect();
    assert_eq!(died, [t1, t2]);
}
