//! A deliberately naive reference model of the Klock kernel, written from docs/SPEC.md.
//!
//! Everything lives in plain `Vec`s and every question is answered by scanning all of them:
//! overlap is a segment-wise prefix test on canonical resource strings, blockers are found by
//! looking at every lease and every earlier ticket, grants by re-scanning every waiting ticket
//! in ticket order until none can be granted, and time is settled by repeatedly picking the
//! earliest due deadline. It shares no code with the kernel apart from the output types and
//! the splitmix64 / backoff arithmetic (`Jitter`, `retry_after_ms`).
//!
//! Identifier allocation mirrors the kernel's (an implementation detail, not spec): session
//! ids, priorities, lease ids, fences and ticket ids each start at 1 and grow by 1 (a
//! priority is drawn at open and at the first acquire of each new unit of work).

#![allow(dead_code)]

use klock_core::{
    retry_after_ms, AcquireOptions, Blocker, CloseReason, Config, Contention, Counters,
    DigestIdentity, DigestRecovery, ErrorCode, Event, GhostAgent, HeartbeatOutcome, Holder, Intent,
    Jitter, Lease, LeaseId, LeaseStatus, Policy, Predicate, ResourceState, SessionId, SessionInfo,
    SessionView, Snapshot, StateDigest, Stats, TicketId, TicketView, Verdict, Waiter,
    DIGEST_VERSION,
};
use std::collections::VecDeque;

pub type R<T> = Result<T, ErrorCode>;

// ---------------------------------------------------------------------------------------------
// Input parsing (docs/SPEC.md §3, §4, §5)
// ---------------------------------------------------------------------------------------------

/// SPEC §4: the six names, ASCII case-insensitive.
pub fn parse_predicate(text: &str) -> R<Predicate> {
    match text.to_ascii_uppercase().as_str() {
        "PROVIDES" => Ok(Predicate::Provides),
        "CONSUMES" => Ok(Predicate::Consumes),
        "MUTATES" => Ok(Predicate::Mutates),
        "DELETES" => Ok(Predicate::Deletes),
        "DEPENDS_ON" => Ok(Predicate::DependsOn),
        "RENAMES" => Ok(Predicate::Renames),
        _ => Err(ErrorCode::InvalidPredicate),
    }
}

/// SPEC §4 matrix: only these pairs are compatible (symmetric).
pub fn conflicts(a: Predicate, b: Predicate) -> bool {
    use Predicate::*;
    let compatible = [
        (Provides, Consumes),
        (Provides, DependsOn),
        (Consumes, Consumes),
        (Consumes, DependsOn),
        (DependsOn, DependsOn),
    ];
    !(compatible.contains(&(a, b)) || compatible.contains(&(b, a)))
}

/// SPEC §3: validate and normalise `TYPE:/path`.
pub fn parse_resource(text: &str) -> R<String> {
    let bad = Err(ErrorCode::InvalidResource);
    if text.len() > 4096 || text.chars().any(|c| c.is_control()) {
        return bad;
    }
    let Some(colon) = text.find(':') else {
        return bad;
    };
    let (kind, path) = (&text[..colon], &text[colon + 1..]);
    let kb = kind.as_bytes();
    if kb.is_empty() || kb.len() > 32 || !kb[0].is_ascii_uppercase() {
        return bad;
    }
    if !kb
        .iter()
        .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || *b == b'_')
    {
        return bad;
    }
    if !path.starts_with('/') {
        return bad;
    }
    let mut segments = Vec::new();
    for s in path.split('/') {
        if s == ".." {
            return bad;
        }
        if !s.is_empty() && s != "." {
            segments.push(s);
        }
    }
    Ok(format!("{kind}:/{}", segments.join("/")))
}

/// Kernel choice: the intent text is split at the first space.
pub fn parse_intent(text: &str) -> R<(Predicate, String)> {
    let (p, r) = match text.find(' ') {
        Some(i) => (&text[..i], &text[i + 1..]),
        None => (text, ""),
    };
    let p = parse_predicate(p)?;
    Ok((p, parse_resource(r)?))
}

/// SPEC §3: same TYPE and one path is a segment-wise prefix of the other.
pub fn overlaps(a: &str, b: &str) -> bool {
    let split = |s: &str| -> (String, Vec<String>) {
        let i = s.find(':').unwrap();
        (
            s[..i].to_string(),
            s[i + 1..]
                .split('/')
                .filter(|x| !x.is_empty())
                .map(String::from)
                .collect(),
        )
    };
    let (ta, sa) = split(a);
    let (tb, sb) = split(b);
    if ta != tb {
        return false;
    }
    let n = sa.len().min(sb.len());
    sa[..n] == sb[..n]
}

/// SPEC §5: printable means no character of the general categories Cc, Cf, Zl, Zp.
fn check_name(v: &str, code: ErrorCode) -> R<()> {
    use unicode_properties::{GeneralCategory as G, UnicodeGeneralCategory};
    let unprintable = |c: char| {
        matches!(
            c.general_category(),
            G::Control | G::Format | G::LineSeparator | G::ParagraphSeparator
        )
    };
    if v.is_empty() || v.len() > 256 || v.chars().any(unprintable) {
        Err(code)
    } else {
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// State
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum LState {
    Active,
    Released,
    Expired,
}

#[derive(Clone, Debug)]
struct MLease {
    id: u64,
    session: u64,
    res: String,
    pred: Predicate,
    fence: u64,
    acquired_at: u64,
    expires_at: u64,
    ttl: u64,
    grace: Option<u64>,
    state: LState,
    /// When it ended, in the model's order of ends (0 while active).
    ended: u64,
}

impl MLease {
    fn eff(&self) -> u64 {
        self.expires_at.max(self.grace.unwrap_or(0))
    }
}

#[derive(Clone, Debug)]
struct MIntent {
    pred: Predicate,
    res: String,
    reuse: Option<u64>,
}

#[derive(Clone, Debug)]
struct MTicket {
    id: u64,
    session: u64,
    intents: Vec<MIntent>,
    ttl: u64,
    deadline: u64,
    waiting: bool,
    /// When it stopped waiting, in the model's order of ends (0 while waiting).
    ended: u64,
}

#[derive(Clone, Debug)]
struct MSession {
    id: u64,
    agent: String,
    ns: String,
    priority: u64,
    /// Every priority the session had lies between this and `priority` (SPEC §5).
    opened_priority: u64,
    /// Granted something since `priority` was assigned.
    granted_since_priority: bool,
    /// A release ended the unit of work: the next valid acquire gets a new priority.
    unit_over: bool,
    epoch: u64,
    suspended_at: Option<u64>,
    die_count: u32,
    last_active: u64,
}

struct MBlocker {
    session: u64,
    priority: u64,
    via_lease: bool,
    intents: Vec<(Predicate, String)>,
}

#[derive(Clone)]
pub struct Model {
    cfg: Config,
    clock: u64,
    jitter: Jitter,
    sessions: Vec<MSession>,
    /// Every lease still remembered (active or ended); forgotten when its session closes or
    /// falls out of the window of ended leases.
    leases: Vec<MLease>,
    /// Every ticket still remembered (waiting or ended); forgotten when its session closes or
    /// falls out of the window of ended tickets.
    tickets: Vec<MTicket>,
    events: VecDeque<Event>,
    next_session: u64,
    next_priority: u64,
    next_lease: u64,
    next_ticket: u64,
    /// Tickets whose reused lease ended in the current step; they die in ticket order.
    orphans: Vec<u64>,
    /// Counts ends of leases and tickets, to know which are a session's oldest ended ones.
    end_seq: u64,
    counters: Counters,
    contention: Vec<((String, String), u64)>,
    ghosts: Vec<(String, [u64; 2])>,
}

impl Model {
    pub fn new(cfg: Config) -> Model {
        Model {
            jitter: Jitter::new(cfg.seed),
            cfg,
            clock: 0,
            sessions: Vec::new(),
            leases: Vec::new(),
            tickets: Vec::new(),
            events: VecDeque::new(),
            next_session: 1,
            next_priority: 1,
            next_lease: 1,
            next_ticket: 1,
            orphans: Vec::new(),
            end_seq: 0,
            counters: Counters::default(),
            contention: Vec::new(),
            ghosts: Vec::new(),
        }
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    pub fn now(&self) -> u64 {
        self.clock
    }

    // ---- small lookups ----------------------------------------------------------------------

    fn sess(&self, id: u64) -> R<&MSession> {
        self.sessions
            .iter()
            .find(|s| s.id == id)
            .ok_or(ErrorCode::UnknownSession)
    }

    fn sess_mut(&mut self, id: u64) -> &mut MSession {
        self.sessions
            .iter_mut()
            .find(|s| s.id == id)
            .expect("live session")
    }

    fn ns_of(&self, session: u64) -> String {
        self.sess(session).expect("live").ns.clone()
    }

    fn agent_of(&self, session: u64) -> String {
        self.sess(session).expect("live").agent.clone()
    }

    fn active_leases_of(&self, session: u64) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .leases
            .iter()
            .filter(|l| l.session == session && l.state == LState::Active)
            .map(|l| l.id)
            .collect();
        v.sort();
        v
    }

    fn waiting_tickets_of(&self, session: u64) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .tickets
            .iter()
            .filter(|t| t.session == session && t.waiting)
            .map(|t| t.id)
            .collect();
        v.sort();
        v
    }

    fn lease(&self, id: u64) -> &MLease {
        self.leases.iter().find(|l| l.id == id).unwrap()
    }

    fn lease_mut(&mut self, id: u64) -> &mut MLease {
        self.leases.iter_mut().find(|l| l.id == id).unwrap()
    }

    fn ticket(&self, id: u64) -> &MTicket {
        self.tickets.iter().find(|t| t.id == id).unwrap()
    }

    fn ticket_mut(&mut self, id: u64) -> &mut MTicket {
        self.tickets.iter_mut().find(|t| t.id == id).unwrap()
    }

    fn is_idle(&self, session: u64) -> bool {
        self.active_leases_of(session).is_empty() && self.waiting_tickets_of(session).is_empty()
    }

    fn idle_deadline(&self, s: &MSession) -> Option<u64> {
        (self.cfg.session_idle_ms > 0 && self.is_idle(s.id))
            .then(|| s.last_active.saturating_add(self.cfg.session_idle_ms))
    }

    /// A successful call naming the session.
    fn touch(&mut self, session: u64) {
        let now = self.clock;
        self.sess_mut(session).last_active = now;
    }

    /// The session stops holding or waiting for something now.
    fn activity_end(&mut self, session: u64) {
        let now = self.clock;
        let s = self.sess_mut(session);
        s.last_active = s.last_active.max(now);
    }

    fn cap(&self, acquired_at: u64, wanted: u64) -> u64 {
        match self.cfg.max_lease_lifetime_ms {
            0 => wanted,
            c => wanted.min(acquired_at.saturating_add(c)),
        }
    }

    fn lease_view(&self, id: u64) -> Lease {
        let l = self.lease(id);
        Lease {
            lease_id: LeaseId(l.id),
            session_id: SessionId(l.session),
            agent_id: self.agent_of(l.session),
            resource: l.res.clone(),
            predicate: l.pred,
            fence: l.fence,
            acquired_at: l.acquired_at,
            expires_at: l.eff(),
            ttl_ms: l.ttl,
        }
    }

    fn backoff(&mut self, session: u64) -> u64 {
        let draw = self.jitter.next_u64();
        let (base, cap) = (self.cfg.backoff_base_ms, self.cfg.backoff_cap_ms);
        let s = self.sess_mut(session);
        let r = retry_after_ms(base, cap, s.die_count, draw);
        s.die_count = s.die_count.saturating_add(1);
        r
    }

    fn bump_ghost(&mut self, agent: String, which: usize) {
        match self.ghosts.iter_mut().find(|(a, _)| *a == agent) {
            Some(e) => e.1[which] += 1,
            None => {
                let mut c = [0; 2];
                c[which] = 1;
                self.ghosts.push((agent, c));
            }
        }
    }

    // ---- blockers, grants, endings ------------------------------------------------------------

    /// Every other session of the same namespace holding a conflicting overlapping lease, or
    /// with a conflicting overlapping intent in a waiting ticket numbered below `before`.
    fn blockers(
        &self,
        session: u64,
        wanted: &[(Predicate, String)],
        before: u64,
    ) -> (Vec<MBlocker>, Vec<String>) {
        let ns = self.ns_of(session);
        let mut hits: Vec<(u64, Predicate, String, bool)> = Vec::new();
        let mut blocked = Vec::new();
        for (p, r) in wanted {
            let n = hits.len();
            for l in &self.leases {
                if l.state == LState::Active
                    && l.session != session
                    && self.ns_of(l.session) == ns
                    && overlaps(r, &l.res)
                    && conflicts(*p, l.pred)
                {
                    hits.push((l.session, l.pred, l.res.clone(), true));
                }
            }
            for t in &self.tickets {
                if !t.waiting
                    || t.id >= before
                    || t.session == session
                    || self.ns_of(t.session) != ns
                {
                    continue;
                }
                for i in t.intents.iter().filter(|i| i.reuse.is_none()) {
                    if overlaps(r, &i.res) && conflicts(*p, i.pred) {
                        hits.push((t.session, i.pred, i.res.clone(), false));
                    }
                }
            }
            if hits.len() > n {
                blocked.push(r.clone());
            }
        }
        let mut ids: Vec<u64> = hits.iter().map(|h| h.0).collect();
        ids.sort();
        ids.dedup();
        let out = ids
            .into_iter()
            .map(|sid| {
                let mut intents: Vec<(Predicate, String)> = hits
                    .iter()
                    .filter(|h| h.0 == sid)
                    .map(|h| (h.1, h.2.clone()))
                    .collect();
                intents.sort();
                intents.dedup();
                MBlocker {
                    session: sid,
                    priority: self.sess(sid).unwrap().priority,
                    via_lease: hits.iter().any(|h| h.0 == sid && h.3),
                    intents,
                }
            })
            .collect();
        (out, blocked)
    }

    fn describe(&self, bs: &[&MBlocker]) -> Vec<Blocker> {
        bs.iter()
            .map(|b| Blocker {
                session_id: SessionId(b.session),
                agent_id: self.agent_of(b.session),
                intents: b
                    .intents
                    .iter()
                    .map(|(p, r)| Intent {
                        predicate: *p,
                        resource: r.clone(),
                    })
                    .collect(),
            })
            .collect()
    }

    fn new_intents(t: &MTicket) -> Vec<(Predicate, String)> {
        t.intents
            .iter()
            .filter(|i| i.reuse.is_none())
            .map(|i| (i.pred, i.res.clone()))
            .collect()
    }

    fn create_lease(&mut self, session: u64, pred: Predicate, res: &str, ttl: u64) -> u64 {
        let id = self.next_lease;
        self.next_lease += 1;
        let now = self.clock;
        let expires_at = self.cap(now, now.saturating_add(ttl));
        let grace = self
            .sess(session)
            .unwrap()
            .suspended_at
            .map(|s| self.cap(now, s.saturating_add(self.cfg.grace_ms)));
        self.leases.push(MLease {
            id,
            session,
            res: res.to_string(),
            pred,
            fence: id,
            acquired_at: now,
            expires_at,
            ttl,
            grace,
            state: LState::Active,
            ended: 0,
        });
        id
    }

    /// Heartbeat-style renewal; false (nothing changed) when already at the lifetime cap.
    fn renew(&mut self, id: u64, ttl: u64) -> bool {
        let l = self.lease(id).clone();
        if self.cfg.max_lease_lifetime_ms != 0
            && l.expires_at == l.acquired_at.saturating_add(self.cfg.max_lease_lifetime_ms)
        {
            return false;
        }
        let e = self.cap(l.acquired_at, self.clock.saturating_add(ttl));
        let lm = self.lease_mut(id);
        lm.expires_at = e;
        lm.grace = None;
        true
    }

    /// SPEC §9: a GRANTED verdict, and ACQUIRED with the same leases.
    fn grant_at_once(&mut self, session: u64, intents: &[MIntent], ttl: u64) -> Verdict {
        let leases = self.grant(session, intents, ttl);
        self.events.push_back(Event::Acquired {
            session: SessionId(session),
            leases: leases.clone(),
        });
        Verdict::Granted { leases }
    }

    fn grant(&mut self, session: u64, intents: &[MIntent], ttl: u64) -> Vec<Lease> {
        let mut ids = Vec::new();
        for i in intents {
            // A ticket's intent the session holds by now (granted to an earlier ticket of its
            // own) reuses that lease too (SPEC §6): never two leases with one predicate on one
            // resource.
            let held_now = self.active_leases_of(session).into_iter().find(|&l| {
                let l = self.lease(l);
                l.pred == i.pred && l.res == i.res
            });
            match i.reuse.or(held_now) {
                Some(id) => {
                    // Idempotent re-acquire (SPEC §6): renewed, never shortened: the larger
                    // TTL, the later expiry, within its lifetime cap; it never fails.
                    let old = self.lease(id).clone();
                    let ttl = old.ttl.max(ttl);
                    let e = self.cap(old.acquired_at, self.clock.saturating_add(ttl));
                    let l = self.lease_mut(id);
                    l.ttl = ttl;
                    l.expires_at = e.max(old.eff());
                    l.grace = None;
                    ids.push(id);
                }
                None => ids.push(self.create_lease(session, i.pred, &i.res, ttl)),
            }
        }
        self.sess_mut(session).die_count = 0;
        self.sess_mut(session).granted_since_priority = true;
        self.counters.granted += 1;
        ids.into_iter().map(|id| self.lease_view(id)).collect()
    }

    fn end_lease(&mut self, id: u64, how: LState) {
        let session = self.lease(id).session;
        self.lease_mut(id).state = how;
        self.end_seq += 1;
        self.lease_mut(id).ended = self.end_seq;
        self.forget_beyond_window(session);
        for t in self.waiting_tickets_of(session) {
            if self.ticket(t).intents.iter().any(|i| i.reuse == Some(id)) {
                self.orphans.push(t);
            }
        }
        if how == LState::Expired {
            self.counters.expired += 1;
            let agent = self.agent_of(session);
            self.bump_ghost(agent, 0);
            self.events.push_back(Event::LeaseExpired {
                lease: LeaseId(id),
                session: SessionId(session),
            });
        } else {
            self.counters.released += 1;
        }
        self.activity_end(session);
    }

    fn stop_waiting(&mut self, t: u64) {
        let session = self.ticket(t).session;
        self.ticket_mut(t).waiting = false;
        self.end_seq += 1;
        self.ticket_mut(t).ended = self.end_seq;
        self.forget_beyond_window(session);
    }

    /// A session remembers only its most recent ENDED_MEMORY_PER_SESSION ended leases and,
    /// separately, ended tickets. The kernel-wide bound (ENDED_MEMORY_PER_KERNEL) lies far
    /// beyond what a property test reaches; `ended_window.rs` holds it to its own model.
    fn forget_beyond_window(&mut self, session: u64) {
        let window = klock_core::ENDED_MEMORY_PER_SESSION;
        let ended_leases = self
            .leases
            .iter()
            .filter(|l| l.session == session && l.ended > 0);
        if ended_leases.count() > window {
            let oldest = self
                .leases
                .iter()
                .filter(|l| l.session == session && l.ended > 0)
                .map(|l| l.ended)
                .min();
            self.leases
                .retain(|l| !(l.session == session && Some(l.ended) == oldest));
        }
        let ended_tickets = self
            .tickets
            .iter()
            .filter(|t| t.session == session && t.ended > 0);
        if ended_tickets.count() > window {
            let oldest = self
                .tickets
                .iter()
                .filter(|t| t.session == session && t.ended > 0)
                .map(|t| t.ended)
                .min();
            self.tickets
                .retain(|t| !(t.session == session && Some(t.ended) == oldest));
        }
    }

    fn withdraw(&mut self, t: u64) {
        let session = self.ticket(t).session;
        self.stop_waiting(t);
        self.activity_end(session);
    }

    /// Orphaned tickets die (in ticket order), then every grantable ticket is granted, in
    /// ticket order, until none is left.
    fn grant_pass(&mut self) {
        let mut orphans = std::mem::take(&mut self.orphans);
        orphans.sort();
        orphans.dedup();
        for t in orphans {
            if self.ticket(t).waiting {
                let session = self.ticket(t).session;
                self.withdraw(t);
                self.counters.died += 1;
                let retry_after_ms = self.backoff(session);
                self.events.push_back(Event::Died {
                    ticket: TicketId(t),
                    session: SessionId(session),
                    retry_after_ms,
                    cycle: Vec::new(),
                });
            }
        }
        loop {
            let mut waiting: Vec<u64> = self
                .tickets
                .iter()
                .filter(|t| t.waiting)
                .map(|t| t.id)
                .collect();
            waiting.sort();
            let next = waiting.into_iter().find(|&id| {
                let t = self.ticket(id);
                self.blockers(t.session, &Self::new_intents(t), t.id)
                    .0
                    .is_empty()
            });
            let Some(id) = next else { break };
            let t = self.ticket(id).clone();
            self.stop_waiting(id);
            let leases = self.grant(t.session, &t.intents, t.ttl);
            self.events.push_back(Event::Granted {
                ticket: TicketId(id),
                session: SessionId(t.session),
                leases,
            });
        }
    }

    /// SPEC §9: RELEASED lists the leases a release, release_all or close ended, if any.
    fn emit_released(&mut self, session: u64, ids: Vec<u64>) {
        if !ids.is_empty() {
            self.events.push_back(Event::Released {
                session: SessionId(session),
                leases: ids.into_iter().map(LeaseId).collect(),
            });
        }
    }

    fn remove_session(&mut self, id: u64) {
        for t in self.waiting_tickets_of(id) {
            self.withdraw(t);
        }
        let released = self.active_leases_of(id);
        for &l in &released {
            self.end_lease(l, LState::Released);
        }
        self.emit_released(id, released);
        self.leases.retain(|l| l.session != id);
        self.tickets.retain(|t| t.session != id);
        self.sessions.retain(|s| s.id != id);
    }

    // ---- time -----------------------------------------------------------------------------------

    pub fn next_deadline(&self) -> Option<u64> {
        let leases = self
            .leases
            .iter()
            .filter(|l| l.state == LState::Active)
            .map(|l| l.eff());
        let tickets = self
            .tickets
            .iter()
            .filter(|t| t.waiting)
            .map(|t| t.deadline);
        let idle = self.sessions.iter().filter_map(|s| self.idle_deadline(s));
        // SPEC §2: a deadline of 2^64-1 means never.
        leases
            .chain(tickets)
            .chain(idle)
            .filter(|&t| t != u64::MAX)
            .min()
    }

    fn settle(&mut self, now: u64) {
        let now = now.max(self.clock);
        while let Some(t) = self.next_deadline().filter(|&t| t <= now) {
            self.clock = t;
            let mut expiring: Vec<u64> = self
                .leases
                .iter()
                .filter(|l| l.state == LState::Active && l.eff() == t)
                .map(|l| l.id)
                .collect();
            expiring.sort();
            if !expiring.is_empty() {
                for id in expiring {
                    self.end_lease(id, LState::Expired);
                }
                self.grant_pass();
                continue;
            }
            let timeout = self
                .tickets
                .iter()
                .filter(|x| x.waiting && x.deadline == t)
                .map(|x| x.id)
                .min();
            if let Some(id) = timeout {
                let session = self.ticket(id).session;
                self.withdraw(id);
                self.counters.timed_out += 1;
                let agent = self.agent_of(session);
                self.bump_ghost(agent, 1);
                self.events.push_back(Event::WaitTimeout {
                    ticket: TicketId(id),
                    session: SessionId(session),
                });
                self.grant_pass();
                continue;
            }
            let idle = self
                .sessions
                .iter()
                .filter(|s| self.idle_deadline(s) == Some(t))
                .map(|s| s.id)
                .min();
            let id = idle.expect("a due deadline of some kind");
            self.remove_session(id);
            self.counters.idle_closed += 1;
            self.events.push_back(Event::SessionClosed {
                session: SessionId(id),
                reason: CloseReason::Idle,
            });
            self.grant_pass();
        }
        self.clock = now;
    }

    pub fn advance(&mut self, now: u64) {
        self.settle(now);
    }

    // ---- sessions -------------------------------------------------------------------------------

    pub fn open_session(&mut self, agent: &str, ns: &str, now: u64) -> R<SessionInfo> {
        self.settle(now);
        check_name(agent, ErrorCode::InvalidAgentId)?;
        check_name(ns, ErrorCode::InvalidNamespace)?;
        let id = self.next_session;
        self.next_session += 1;
        let priority = self.next_priority;
        self.next_priority += 1;
        self.sessions.push(MSession {
            id,
            agent: agent.to_string(),
            ns: ns.to_string(),
            priority,
            opened_priority: priority,
            granted_since_priority: false,
            unit_over: false,
            epoch: 0,
            suspended_at: None,
            die_count: 0,
            last_active: self.clock,
        });
        self.counters.sessions_opened += 1;
        Ok(self.info(id))
    }

    fn info(&self, id: u64) -> SessionInfo {
        let s = self.sess(id).unwrap();
        SessionInfo {
            session_id: SessionId(id),
            agent_id: s.agent.clone(),
            namespace: s.ns.clone(),
            priority: s.priority,
            epoch: s.epoch,
        }
    }

    pub fn close_session(&mut self, session: SessionId, now: u64) -> R<()> {
        self.settle(now);
        self.sess(session.0)?;
        self.remove_session(session.0);
        self.grant_pass();
        Ok(())
    }

    pub fn suspend_session(&mut self, session: SessionId, now: u64) -> R<()> {
        self.settle(now);
        let id = session.0;
        self.sess(id)?;
        let now = self.clock;
        self.sess_mut(id).suspended_at = Some(now);
        for l in self.active_leases_of(id) {
            let g = self.cap(
                self.lease(l).acquired_at,
                now.saturating_add(self.cfg.grace_ms),
            );
            self.lease_mut(l).grace = Some(g);
        }
        self.touch(id);
        Ok(())
    }

    pub fn digest(&mut self, session: SessionId, now: u64) -> R<StateDigest> {
        self.settle(now);
        let id = session.0;
        self.sess(id)?;
        self.touch(id);
        let s = self.sess(id).unwrap().clone();
        let tickets = self.waiting_tickets_of(id);
        let phase = if s.suspended_at.is_some() {
            "SUSPENDED"
        } else if !tickets.is_empty() {
            "WAITING"
        } else if !self.active_leases_of(id).is_empty() {
            "HOLDING"
        } else {
            "IDLE"
        };
        let pending = tickets
            .iter()
            .flat_map(|&t| Self::new_intents(self.ticket(t)))
            .map(|(p, r)| format!("{} {}", p.name(), r))
            .collect();
        Ok(StateDigest {
            version: DIGEST_VERSION,
            identity: DigestIdentity {
                agent_id: s.agent,
                namespace: s.ns,
                session_id: session,
                priority_timestamp: s.priority,
                epoch: s.epoch,
            },
            recovery: DigestRecovery {
                last_phase: phase.to_string(),
                pending_intents: pending,
            },
        })
    }

    pub fn resume_session(&mut self, d: &StateDigest, now: u64) -> R<SessionInfo> {
        self.settle(now);
        let id = d.identity.session_id.0;
        let s = self.sess(id)?.clone();
        if d.version != DIGEST_VERSION
            || d.identity.agent_id != s.agent
            || d.identity.namespace != s.ns
            || d.identity.priority_timestamp < s.opened_priority
            || d.identity.priority_timestamp > s.priority
            || d.identity.epoch > s.epoch
        {
            return Err(ErrorCode::InvalidDigest);
        }
        let sm = self.sess_mut(id);
        sm.epoch += 1;
        sm.suspended_at = None;
        for l in self.active_leases_of(id) {
            self.lease_mut(l).grace = None;
            let ttl = self.lease(l).ttl;
            self.renew(l, ttl);
        }
        self.touch(id);
        Ok(self.info(id))
    }

    // ---- acquire --------------------------------------------------------------------------------

    pub fn acquire<S: AsRef<str>>(
        &mut self,
        session: SessionId,
        texts: &[S],
        o: AcquireOptions,
        now: u64,
    ) -> R<Verdict> {
        self.settle(now);
        let sid = session.0;
        let s = self.sess(sid)?.clone();
        if texts.is_empty() || texts.len() > 256 {
            return Err(ErrorCode::InvalidManifest);
        }
        let mut wanted: Vec<(Predicate, String)> = Vec::new();
        for t in texts {
            let i = parse_intent(t.as_ref())?;
            if !wanted.contains(&i) {
                wanted.push(i);
            }
        }
        let ttl = match o.ttl_ms.unwrap_or(self.cfg.default_ttl_ms) {
            0 => return Err(ErrorCode::InvalidTtl),
            t => t.min(self.cfg.max_ttl_ms),
        };
        let wait_timeout = o
            .wait_timeout_ms
            .unwrap_or(self.cfg.default_wait_timeout_ms);
        let wait = o.wait && wait_timeout > 0;
        let held = self.active_leases_of(sid);
        let intents: Vec<MIntent> = wanted
            .iter()
            .map(|(p, r)| MIntent {
                pred: *p,
                res: r.clone(),
                reuse: held
                    .iter()
                    .copied()
                    .find(|&l| self.lease(l).pred == *p && self.lease(l).res == *r),
            })
            .collect();
        let new_count = intents.iter().filter(|i| i.reuse.is_none()).count() as u64;
        let waiting = self.waiting_tickets_of(sid);
        if self.cfg.policy == Policy::Lanes
            && new_count > 0
            && !(held.is_empty() && waiting.is_empty())
        {
            return Err(ErrorCode::HoldAndWait);
        }
        let in_use = held.len() as u64
            + waiting
                .iter()
                .map(|&t| Self::new_intents(self.ticket(t)).len() as u64)
                .sum::<u64>();
        if in_use + new_count > self.cfg.max_leases_per_session {
            return Err(ErrorCode::QuotaExceeded);
        }
        self.touch(sid);
        let s = if s.unit_over {
            // SPEC §5: the first valid acquire of a new unit of work makes the session the
            // youngest.
            let priority = self.next_priority;
            self.next_priority += 1;
            let sm = self.sess_mut(sid);
            sm.priority = priority;
            sm.granted_since_priority = false;
            sm.unit_over = false;
            sm.clone()
        } else {
            s
        };
        let new: Vec<(Predicate, String)> = intents
            .iter()
            .filter(|i| i.reuse.is_none())
            .map(|i| (i.pred, i.res.clone()))
            .collect();
        let (found, blocked) = self.blockers(sid, &new, u64::MAX);
        if found.is_empty() {
            return Ok(self.grant_at_once(sid, &intents, ttl));
        }
        for r in blocked {
            let key = (s.ns.clone(), r);
            match self.contention.iter_mut().find(|(k, _)| *k == key) {
                Some(e) => e.1 += 1,
                None => self.contention.push((key, 1)),
            }
        }
        let all_younger = found.iter().all(|b| b.priority > s.priority);
        let verdict = match self.cfg.policy {
            Policy::WaitDie if wait && all_younger => {
                let held_by = self.describe(&found.iter().collect::<Vec<_>>());
                Verdict::Wait {
                    ticket: self.enqueue(sid, intents, ttl, wait_timeout),
                    held_by,
                }
            }
            Policy::Lanes if wait => {
                let held_by = self.describe(&found.iter().collect::<Vec<_>>());
                Verdict::Wait {
                    ticket: self.enqueue(sid, intents, ttl, wait_timeout),
                    held_by,
                }
            }
            Policy::WoundWait if wait || all_younger => {
                let mut victims: Vec<(u64, u64, bool)> = found
                    .iter()
                    .filter(|b| b.priority > s.priority)
                    .map(|b| (b.priority, b.session, b.via_lease))
                    .collect();
                victims.sort();
                for (_, victim, via_lease) in victims {
                    self.wound(victim, sid, via_lease);
                }
                let v = if all_younger {
                    self.grant_at_once(sid, &intents, ttl)
                } else {
                    let held_by = self.describe(
                        &found
                            .iter()
                            .filter(|b| b.priority < s.priority)
                            .collect::<Vec<_>>(),
                    );
                    Verdict::Wait {
                        ticket: self.enqueue(sid, intents, ttl, wait_timeout),
                        held_by,
                    }
                };
                self.grant_pass();
                v
            }
            Policy::Detect if wait => self.detect(sid, intents, ttl, wait_timeout, found),
            _ => self.die(sid, &found, Vec::new()),
        };
        Ok(verdict)
    }

    fn die(&mut self, sid: u64, found: &[MBlocker], cycle: Vec<SessionId>) -> Verdict {
        let held_by = self.describe(&found.iter().collect::<Vec<_>>());
        self.counters.died += 1;
        Verdict::Die {
            retry_after_ms: self.backoff(sid),
            held_by,
            cycle,
        }
    }

    /// SPEC §6.1: wait unless the request closes a wait-for cycle; then the cycle's youngest
    /// member dies (DIE for the requester; DIED for another member's ticket on the cycle, and
    /// the request is decided again).
    fn detect(
        &mut self,
        sid: u64,
        intents: Vec<MIntent>,
        ttl: u64,
        wait_timeout: u64,
        mut found: Vec<MBlocker>,
    ) -> Verdict {
        let new: Vec<(Predicate, String)> = intents
            .iter()
            .filter(|i| i.reuse.is_none())
            .map(|i| (i.pred, i.res.clone()))
            .collect();
        loop {
            if found.is_empty() {
                return self.grant_at_once(sid, &intents, ttl);
            }
            let Some(cycle) = self.find_cycle(sid, &found) else {
                let held_by = self.describe(&found.iter().collect::<Vec<_>>());
                return Verdict::Wait {
                    ticket: self.enqueue(sid, intents, ttl, wait_timeout),
                    held_by,
                };
            };
            let (at, &(victim, ticket)) = cycle
                .iter()
                .enumerate()
                .max_by_key(|(_, (s, _))| self.sess(*s).map(|s| s.priority).unwrap())
                .unwrap();
            let members: Vec<SessionId> = cycle[at..]
                .iter()
                .chain(&cycle[..at])
                .map(|&(s, _)| SessionId(s))
                .collect();
            let Some(t) = ticket else {
                return self.die(sid, &found, members);
            };
            self.withdraw(t);
            self.counters.died += 1;
            let retry_after_ms = self.backoff(victim);
            self.events.push_back(Event::Died {
                ticket: TicketId(t),
                session: SessionId(victim),
                retry_after_ms,
                cycle: members,
            });
            self.grant_pass();
            found = self.blockers(sid, &new, u64::MAX).0;
        }
    }

    /// SPEC §6.1: the sessions blocking a waiting ticket of `session`, ascending, each with the
    /// first such ticket.
    fn wait_edges(&self, session: u64) -> Vec<(u64, u64)> {
        let mut edges: Vec<(u64, u64)> = Vec::new();
        for t in self.waiting_tickets_of(session) {
            let tk = self.ticket(t);
            for b in self.blockers(session, &Self::new_intents(tk), t).0 {
                if !edges.iter().any(|&(s, _)| s == b.session) {
                    edges.push((b.session, t));
                }
            }
        }
        edges.sort();
        edges
    }

    /// SPEC §13.6: the shortest cycle back to `requester` from its blockers, breadth-first in
    /// ascending session id; each member with its ticket toward the next (`None`: the
    /// requester, whose edge is the new request).
    fn find_cycle(&self, requester: u64, found: &[MBlocker]) -> Option<Vec<(u64, Option<u64>)>> {
        let mut from: Vec<(u64, u64, Option<u64>)> = Vec::new();
        let mut queue: VecDeque<u64> = VecDeque::new();
        let mut starts: Vec<u64> = found.iter().map(|b| b.session).collect();
        starts.sort();
        for b in starts {
            from.push((b, requester, None));
            queue.push_back(b);
        }
        while let Some(x) = queue.pop_front() {
            for (next, t) in self.wait_edges(x) {
                if next == requester {
                    let mut cycle = vec![(x, Some(t))];
                    let mut at = x;
                    while at != requester {
                        let &(_, prev, ticket) = from.iter().find(|e| e.0 == at).unwrap();
                        cycle.push((prev, ticket));
                        at = prev;
                    }
                    cycle.reverse();
                    return Some(cycle);
                }
                if !from.iter().any(|e| e.0 == next) {
                    from.push((next, x, Some(t)));
                    queue.push_back(next);
                }
            }
        }
        None
    }

    fn enqueue(
        &mut self,
        session: u64,
        intents: Vec<MIntent>,
        ttl: u64,
        wait_timeout: u64,
    ) -> TicketId {
        let id = self.next_ticket;
        self.next_ticket += 1;
        let deadline = self.clock.saturating_add(wait_timeout);
        self.tickets.push(MTicket {
            id,
            session,
            intents,
            ttl,
            deadline,
            waiting: true,
            ended: 0,
        });
        self.counters.waited += 1;
        TicketId(id)
    }

    fn wound(&mut self, victim: u64, by: u64, lose_leases: bool) {
        let lost_tickets = self.waiting_tickets_of(victim);
        for &t in &lost_tickets {
            self.withdraw(t);
        }
        let lost_leases = if lose_leases {
            self.active_leases_of(victim)
        } else {
            Vec::new()
        };
        for &l in &lost_leases {
            self.end_lease(l, LState::Released);
        }
        self.counters.wounded += 1;
        let retry_after_ms = self.backoff(victim);
        self.events.push_back(Event::Wounded {
            session: SessionId(victim),
            by: SessionId(by),
            lost_leases: lost_leases.into_iter().map(LeaseId).collect(),
            lost_tickets: lost_tickets.into_iter().map(TicketId).collect(),
            retry_after_ms,
        });
    }

    // ---- leases ---------------------------------------------------------------------------------

    /// None = unknown to this session; Some(Ok(state)) = own; Some(Err(())) = another
    /// session's in the same namespace.
    fn standing(&self, session: u64, id: u64) -> Option<Result<LState, ()>> {
        let l = self.leases.iter().find(|l| l.id == id)?;
        if l.session == session {
            Some(Ok(l.state))
        } else if self.ns_of(l.session) == self.ns_of(session) {
            Some(Err(()))
        } else {
            None
        }
    }

    pub fn heartbeat(
        &mut self,
        session: SessionId,
        ids: Option<&[LeaseId]>,
        now: u64,
    ) -> R<Vec<(LeaseId, HeartbeatOutcome)>> {
        self.settle(now);
        let sid = session.0;
        self.sess(sid)?;
        let ids: Vec<u64> = match ids {
            None => self.active_leases_of(sid),
            Some(ids) => ids.iter().map(|l| l.0).collect(),
        };
        self.touch(sid);
        let mut out = Vec::new();
        for id in ids {
            let r = match self.standing(sid, id) {
                Some(Ok(LState::Active)) => {
                    let ttl = self.lease(id).ttl;
                    if self.renew(id, ttl) {
                        Ok(self.lease(id).eff())
                    } else {
                        Err(ErrorCode::LifetimeExceeded)
                    }
                }
                Some(Ok(LState::Expired)) => Err(ErrorCode::LeaseExpired),
                Some(Ok(LState::Released)) => Err(ErrorCode::LeaseReleased),
                Some(Err(())) => Err(ErrorCode::NotOwner),
                None => Err(ErrorCode::UnknownLease),
            };
            out.push((LeaseId(id), r));
        }
        Ok(out)
    }

    pub fn release(&mut self, session: SessionId, lease: LeaseId, now: u64) -> R<bool> {
        self.settle(now);
        let sid = session.0;
        self.sess(sid)?;
        let released = match self.standing(sid, lease.0) {
            Some(Ok(LState::Active)) => {
                self.end_lease(lease.0, LState::Released);
                self.emit_released(sid, vec![lease.0]);
                true
            }
            Some(Ok(_)) => false,
            Some(Err(())) => return Err(ErrorCode::NotOwner),
            None => return Err(ErrorCode::UnknownLease),
        };
        self.touch(sid);
        self.grant_pass();
        self.maybe_end_unit(sid);
        Ok(released)
    }

    /// SPEC §5: a release that leaves the session holding and waiting for nothing ends its
    /// unit of work, if it was granted something since its priority was assigned and has had
    /// no DIE since its last grant.
    fn maybe_end_unit(&mut self, sid: u64) {
        let idle = self.is_idle(sid);
        let s = self.sess_mut(sid);
        if idle && s.granted_since_priority && s.die_count == 0 {
            s.unit_over = true;
        }
    }

    pub fn release_all(&mut self, session: SessionId, now: u64) -> R<usize> {
        self.settle(now);
        let sid = session.0;
        self.sess(sid)?;
        let ids = self.active_leases_of(sid);
        for &l in &ids {
            self.end_lease(l, LState::Released);
        }
        let count = ids.len();
        self.emit_released(sid, ids);
        self.touch(sid);
        self.grant_pass();
        self.maybe_end_unit(sid);
        Ok(count)
    }

    pub fn reconcile(
        &mut self,
        session: SessionId,
        ids: &[LeaseId],
        now: u64,
    ) -> R<Vec<(LeaseId, LeaseStatus)>> {
        self.settle(now);
        let sid = session.0;
        self.sess(sid)?;
        self.touch(sid);
        Ok(ids
            .iter()
            .map(|&id| {
                let st = match self.standing(sid, id.0) {
                    Some(Ok(LState::Active)) => {
                        let l = self.lease(id.0);
                        LeaseStatus::Active {
                            expires_at: l.eff(),
                            fence: l.fence,
                        }
                    }
                    Some(Ok(LState::Expired)) => LeaseStatus::Expired,
                    Some(Ok(LState::Released)) => LeaseStatus::Released,
                    Some(Err(())) => LeaseStatus::NotOwner,
                    None => LeaseStatus::Unknown,
                };
                (id, st)
            })
            .collect())
    }

    pub fn cancel_wait(&mut self, session: SessionId, ticket: TicketId, now: u64) -> R<()> {
        self.settle(now);
        let sid = session.0;
        let ns = self.sess(sid)?.ns.clone();
        let Some(t) = self.tickets.iter().find(|t| t.id == ticket.0).cloned() else {
            return Err(ErrorCode::UnknownTicket);
        };
        if t.session != sid {
            return Err(if self.ns_of(t.session) == ns {
                ErrorCode::NotOwner
            } else {
                ErrorCode::UnknownTicket
            });
        }
        if !t.waiting {
            return Err(ErrorCode::UnknownTicket);
        }
        self.withdraw(t.id);
        self.counters.cancelled += 1;
        self.touch(sid);
        self.grant_pass();
        Ok(())
    }

    // ---- observation ----------------------------------------------------------------------------

    fn holder(&self, l: &MLease) -> Holder {
        Holder {
            session_id: SessionId(l.session),
            agent_id: self.agent_of(l.session),
            lease_id: LeaseId(l.id),
            resource: l.res.clone(),
            predicate: l.pred,
            fence: l.fence,
            expires_at: l.eff(),
        }
    }

    pub fn resource_state(&mut self, resource: &str, ns: &str, now: u64) -> R<ResourceState> {
        self.settle(now);
        let res = parse_resource(resource)?;
        check_name(ns, ErrorCode::InvalidNamespace)?;
        let mut active: Vec<&MLease> = self
            .leases
            .iter()
            .filter(|l| l.state == LState::Active && self.ns_of(l.session) == ns)
            .collect();
        active.sort_by_key(|l| l.id);
        let holders = active
            .iter()
            .filter(|l| l.res == res)
            .map(|l| self.holder(l))
            .collect();
        let covering = active
            .iter()
            .filter(|l| l.res != res && overlaps(&l.res, &res))
            .map(|l| self.holder(l))
            .collect();
        let mut tickets: Vec<&MTicket> = self
            .tickets
            .iter()
            .filter(|t| t.waiting && self.ns_of(t.session) == ns)
            .collect();
        tickets.sort_by_key(|t| t.id);
        let mut waiting = Vec::new();
        for t in tickets {
            for i in t
                .intents
                .iter()
                .filter(|i| i.reuse.is_none() && i.res == res)
            {
                waiting.push(Waiter {
                    session_id: SessionId(t.session),
                    agent_id: self.agent_of(t.session),
                    ticket: TicketId(t.id),
                    predicate: i.pred,
                    position: waiting.len(),
                    deadline: t.deadline,
                });
            }
        }
        Ok(ResourceState {
            resource: res,
            namespace: ns.to_string(),
            holders,
            waiting,
            covering,
        })
    }

    pub fn snapshot(&mut self, now: u64) -> Snapshot {
        self.settle(now);
        let mut sessions: Vec<&MSession> = self.sessions.iter().collect();
        sessions.sort_by_key(|s| s.id);
        let sessions = sessions
            .into_iter()
            .map(|s| SessionView {
                session_id: SessionId(s.id),
                agent_id: s.agent.clone(),
                namespace: s.ns.clone(),
                priority: s.priority,
                epoch: s.epoch,
                suspended: s.suspended_at.is_some(),
                leases: self.active_leases_of(s.id).len(),
                tickets: self
                    .waiting_tickets_of(s.id)
                    .into_iter()
                    .map(TicketId)
                    .collect(),
                die_count: s.die_count,
                last_active: s.last_active,
                unit_granted: s.granted_since_priority,
                unit_ended: s.unit_over,
            })
            .collect();
        let mut lease_ids: Vec<u64> = self
            .leases
            .iter()
            .filter(|l| l.state == LState::Active)
            .map(|l| l.id)
            .collect();
        lease_ids.sort();
        let mut ticket_ids: Vec<u64> = self
            .tickets
            .iter()
            .filter(|t| t.waiting)
            .map(|t| t.id)
            .collect();
        ticket_ids.sort();
        let tickets = ticket_ids
            .into_iter()
            .map(|id| {
                let t = self.ticket(id);
                TicketView {
                    ticket: TicketId(id),
                    session_id: SessionId(t.session),
                    agent_id: self.agent_of(t.session),
                    intents: Self::new_intents(t)
                        .into_iter()
                        .map(|(p, r)| Intent {
                            predicate: p,
                            resource: r,
                        })
                        .collect(),
                    deadline: t.deadline,
                }
            })
            .collect::<Vec<_>>();
        let mut top = self.contention.clone();
        top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let mut ghosts = self.ghosts.clone();
        ghosts.sort_by(|a, b| {
            (b.1[0] + b.1[1])
                .cmp(&(a.1[0] + a.1[1]))
                .then_with(|| a.0.cmp(&b.0))
        });
        let stats = Stats {
            counters: self.counters.clone(),
            active_sessions: self.sessions.len() as u64,
            active_leases: lease_ids.len() as u64,
            waiting_tickets: tickets.len() as u64,
            top_contended: top
                .into_iter()
                .map(|((namespace, resource), blocked)| Contention {
                    namespace,
                    resource,
                    blocked,
                })
                .collect(),
            ghost_agents: ghosts
                .into_iter()
                .map(|(agent_id, [e, w])| GhostAgent {
                    agent_id,
                    expired_leases: e,
                    wait_timeouts: w,
                })
                .collect(),
        };
        Snapshot {
            now: self.clock,
            policy: self.cfg.policy,
            next_deadline: self.next_deadline(),
            sessions,
            leases: lease_ids
                .into_iter()
                .map(|id| self.lease_view(id))
                .collect(),
            tickets,
            stats,
        }
    }
}
