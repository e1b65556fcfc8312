//! Acquire (docs/SPEC.md §6): validation, idempotent re-acquire, and the four policies.
//!
//! Contract: the request is validated completely before any state changes (error precedence
//! UNKNOWN_SESSION, INVALID_MANIFEST, per intent INVALID_PREDICATE then INVALID_RESOURCE,
//! INVALID_TTL, HOLD_AND_WAIT, QUOTA_EXCEEDED); then it is GRANTED all-or-nothing, queued as
//! one ticket (WAIT), or refused (DIE) with a backoff, by the configured policy.
//!
//! An uncontended acquire allocates only its answer (issue 15): intents borrow the caller's
//! text when it is canonical, and the per-request lists live inline up to [`INLINE_INTENTS`].

use super::scheduler::Blockers;
use super::{Intents, Kernel, Session, TicketIntent, INLINE_INTENTS};
use crate::config::Policy;
use crate::error::{Error, ErrorCode};
use crate::predicate::Predicate;
use crate::resource::{canonical, ResourceName};
use crate::tree::{NamespaceId, NodeId};
use crate::types::{AcquireOptions, LeaseId, SessionId, TicketId, Verdict};
use alloc::{borrow::Cow, format, string::String, vec::Vec};
use smallvec::SmallVec;

/// Most intents one manifest may name (counted before duplicates are removed).
pub const MAX_MANIFEST_INTENTS: usize = 256;

/// Splits `"PREDICATE TYPE:/path"` at the first space and validates both halves.
///
/// # Errors
/// `INVALID_PREDICATE`, then `INVALID_RESOURCE`.
pub fn parse_intent(text: &str) -> Result<(Predicate, ResourceName), Error> {
    let (predicate, resource) = text.split_once(' ').unwrap_or((text, ""));
    Ok((Predicate::parse(predicate)?, ResourceName::parse(resource)?))
}

/// [`parse_intent`] with the resource canonical and borrowed from `text` when it already is.
/// Inlined: its answer is otherwise shuffled through the stack on every acquire.
#[inline(always)]
fn parse_intent_text(text: &str) -> Result<(Predicate, Cow<'_, str>), Error> {
    let (predicate, resource) = match text.bytes().position(|b| b == b' ') {
        Some(space) => (&text[..space], &text[space + 1..]),
        None => (text, ""),
    };
    Ok((Predicate::parse(predicate)?, canonical(resource)?))
}

/// One distinct intent of a request.
struct Wanted<'a> {
    predicate: Predicate,
    /// Canonical, borrowed from the caller's text when it already was.
    name: Cow<'a, str>,
    /// Its node when it has one already (looked up once, in validation).
    node: Option<NodeId>,
    /// The lease of the session's it reuses (held on `node` with the same predicate).
    reuse: Option<LeaseId>,
}

/// A validated acquire: what it asks for and on what terms.
struct Request<'a> {
    namespace: NamespaceId,
    /// The distinct intents, in order of first appearance.
    wanted: SmallVec<[Wanted<'a>; INLINE_INTENTS]>,
    /// Clamped to `max_ttl_ms`.
    ttl_ms: u64,
    /// Whether a conflict may queue (asked to, with a wait timeout above 0).
    wait: bool,
    wait_timeout_ms: u64,
}

/// The distinct intents of a manifest, in order of first appearance (no node looked up yet).
///
/// # Errors
/// `INVALID_MANIFEST` (0 or more than 256 intents), then the first bad intent's error.
fn parse_manifest<S: AsRef<str>>(
    intents: &[S],
) -> Result<SmallVec<[Wanted<'_>; INLINE_INTENTS]>, Error> {
    if intents.is_empty() || intents.len() > MAX_MANIFEST_INTENTS {
        return Err(Error::new(
            ErrorCode::InvalidManifest,
            format!(
                "a manifest needs 1 to {MAX_MANIFEST_INTENTS} intents, got {}",
                intents.len()
            ),
        ));
    }
    let mut wanted: SmallVec<[Wanted<'_>; INLINE_INTENTS]> = SmallVec::new();
    for text in intents {
        let (predicate, name) = parse_intent_text(text.as_ref())?;
        if !wanted
            .iter()
            .any(|w| w.predicate == predicate && w.name == name)
        {
            wanted.push(Wanted {
                predicate,
                name,
                node: None,
                reuse: None,
            });
        }
    }
    Ok(wanted)
}

impl Kernel {
    /// Asks for every intent of `intents` (`"PREDICATE TYPE:/path"`) at once.
    ///
    /// # Errors
    /// `UNKNOWN_SESSION`, `INVALID_MANIFEST` (0 or more than 256 intents), `INVALID_PREDICATE`,
    /// `INVALID_RESOURCE`, `INVALID_TTL` (0), `HOLD_AND_WAIT` (lanes: the session already holds
    /// or waits), `QUOTA_EXCEEDED` (`max_leases_per_session`). A failed acquire changes nothing.
    pub fn acquire<S: AsRef<str>>(
        &mut self,
        session: SessionId,
        intents: &[S],
        options: AcquireOptions,
        now: u64,
    ) -> Result<Verdict, Error> {
        self.operation(now, |k| k.acquire_now(session, intents, options))
    }

    fn acquire_now<S: AsRef<str>>(
        &mut self,
        session: SessionId,
        intents: &[S],
        options: AcquireOptions,
    ) -> Result<Verdict, Error> {
        let request = self.validate(session, intents, options)?;
        // Valid: from here on the call succeeds.
        self.touch_and_begin_unit(session);
        let ticket_intents = self.intern_intents(&request);
        let queued = ticket_intents
            .iter()
            .filter(|i| i.reuse.is_none())
            .map(|i| (i.node, i.predicate));
        let found = self.find_blockers(session, queued, TicketId(u64::MAX));
        if found.is_empty() {
            return Ok(self.grant_at_once(session, &ticket_intents, request.ttl_ms));
        }
        self.count_contention(request.namespace, &found);
        Ok(self.decide(session, &request, ticket_intents, &found))
    }

    /// Checks the whole request in the contract's error order, changing nothing.
    fn validate<'a, S: AsRef<str>>(
        &self,
        session: SessionId,
        intents: &'a [S],
        options: AcquireOptions,
    ) -> Result<Request<'a>, Error> {
        let s = self.session(session)?;
        let mut wanted = parse_manifest(intents)?;
        let ttl_ms = match options.ttl_ms.unwrap_or(self.config.default_ttl_ms) {
            0 => {
                return Err(Error::new(
                    ErrorCode::InvalidTtl,
                    "ttl_ms must be at least 1 ms",
                ))
            }
            ttl => ttl.min(self.config.max_ttl_ms),
        };
        let wait_timeout_ms = options
            .wait_timeout_ms
            .unwrap_or(self.config.default_wait_timeout_ms);
        // Each intent's node, and whether the session already holds it with the predicate.
        let namespace = s.namespace;
        let mut new_count = 0;
        for w in &mut wanted {
            w.node = self.tree.find(namespace, &w.name);
            w.reuse = w
                .node
                .and_then(|node| self.held_by(session, node, w.predicate));
            new_count += u64::from(w.reuse.is_none());
        }
        if self.config.policy == Policy::Lanes
            && new_count > 0
            && !(s.leases.is_empty() && s.tickets.is_empty())
        {
            return Err(Error::new(
                ErrorCode::HoldAndWait,
                format!(
                    "session {session} already holds or waits for resources; under the lanes policy request everything in one manifest, or release first"
                ),
            ));
        }
        self.check_quota(session, s, new_count)?;
        Ok(Request {
            namespace,
            wanted,
            ttl_ms,
            wait: options.wait && wait_timeout_ms > 0,
            wait_timeout_ms,
        })
    }

    /// `QUOTA_EXCEEDED` unless the session can hold or wait for `new_count` more intents.
    fn check_quota(&self, session: SessionId, s: &Session, new_count: u64) -> Result<(), Error> {
        let queued: u64 = s
            .tickets
            .iter()
            .map(|t| {
                let intents = &self.tickets[t].intents;
                intents.iter().filter(|i| i.reuse.is_none()).count() as u64
            })
            .sum();
        let in_use = s.leases.len() as u64 + queued;
        let limit = self.config.max_leases_per_session;
        if in_use + new_count > limit {
            return Err(Error::new(
                ErrorCode::QuotaExceeded,
                format!(
                    "session {session} would hold or wait for {} intents; the limit is {limit}",
                    in_use + new_count
                ),
            ));
        }
        Ok(())
    }

    /// The request's intents on tree nodes, creating the nodes of new ones (validation found
    /// the others, and nothing removes a node before the operation ends).
    fn intern_intents(&mut self, request: &Request) -> Intents {
        request
            .wanted
            .iter()
            .map(|w| {
                // A reused lease is held on the node validation found.
                let node = w
                    .node
                    .unwrap_or_else(|| self.tree.intern(request.namespace, &w.name));
                if w.reuse.is_none() {
                    self.touched.push(node);
                }
                TicketIntent {
                    node,
                    predicate: w.predicate,
                    reuse: w.reuse,
                }
            })
            .collect()
    }

    /// The policy's verdict on a valid request that `found` blocks.
    fn decide(
        &mut self,
        session: SessionId,
        request: &Request,
        intents: Intents,
        found: &Blockers,
    ) -> Verdict {
        let priority = self.sessions[&session].priority;
        let all_younger = found.sessions.iter().all(|b| b.priority > priority);
        let (ttl_ms, wait_timeout_ms) = (request.ttl_ms, request.wait_timeout_ms);
        match self.config.policy {
            // Wait-Die: only a requester older than every blocker waits. Lanes: anyone waits.
            Policy::WaitDie if request.wait && all_younger => {
                self.wait(session, intents, ttl_ms, wait_timeout_ms, found, |_| true)
            }
            Policy::Lanes if request.wait => {
                self.wait(session, intents, ttl_ms, wait_timeout_ms, found, |_| true)
            }
            Policy::WoundWait if request.wait || all_younger => {
                self.wound_wait(session, priority, all_younger, request, intents, found)
            }
            Policy::Detect if request.wait => self.detect(session, request, intents, found),
            _ => self.die(session, found, Vec::new()),
        }
    }

    /// A DIE verdict for `session`, which `found` blocks; `cycle` names the wait-for cycle it
    /// was the victim of under `detect` (empty otherwise).
    fn die(&mut self, session: SessionId, found: &Blockers, cycle: Vec<SessionId>) -> Verdict {
        let held_by = self.describe_blockers(found.sessions.iter());
        self.counters.died += 1;
        Verdict::Die {
            retry_after_ms: self.die_backoff(session),
            held_by,
            cycle,
        }
    }

    /// Detect (docs/SPEC.md §6.1): the request waits unless it would close a wait-for cycle.
    /// Then the cycle's youngest member dies: the requester with DIE, or a waiter's ticket on
    /// the cycle with DIED, after which the request is decided again (the withdrawn ticket may
    /// have been one of its blockers, or on another cycle it closes).
    fn detect(
        &mut self,
        session: SessionId,
        request: &Request,
        intents: Intents,
        found: &Blockers,
    ) -> Verdict {
        let mut again: Option<Blockers> = None;
        loop {
            let current = again.as_ref().unwrap_or(found);
            let Some(cycle) = self.find_cycle(session, current) else {
                let (ttl_ms, timeout) = (request.ttl_ms, request.wait_timeout_ms);
                return self.wait(session, intents, ttl_ms, timeout, current, |_| true);
            };
            let (victim, ticket) = cycle.victim(self);
            let members = cycle.starting_at(victim);
            let Some(ticket) = ticket else {
                return self.die(session, current, members);
            };
            self.die_ticket(ticket, members);
            // The grants this unblocks are never the requester's: a ticket of it that the
            // victim blocked, with the victim on a cycle back to it, would have been a cycle
            // already. So the request's reused leases are as validation found them.
            self.after_frees();
            let queued = intents
                .iter()
                .filter(|i| i.reuse.is_none())
                .map(|i| (i.node, i.predicate));
            let blockers = self.find_blockers(session, queued, TicketId(u64::MAX));
            if blockers.is_empty() {
                return self.grant_at_once(session, &intents, request.ttl_ms);
            }
            again = Some(blockers);
        }
    }

    /// Wound-Wait for a requester of `priority`: wounds every younger blocker, oldest victim
    /// first, then is granted (`all_younger`: every blocker was) or waits for the older ones
    /// left.
    fn wound_wait(
        &mut self,
        session: SessionId,
        priority: u64,
        all_younger: bool,
        request: &Request,
        intents: Intents,
        found: &Blockers,
    ) -> Verdict {
        // Session ids need not follow priority order, so sort by priority.
        let mut victims: Vec<(u64, SessionId, bool)> = found
            .sessions
            .iter()
            .filter(|b| b.priority > priority)
            .map(|b| (b.priority, b.session, b.via_lease))
            .collect();
        victims.sort_unstable();
        for (_, victim, via_lease) in victims {
            self.wound(victim, session, via_lease);
        }
        let verdict = if all_younger {
            self.grant_at_once(session, &intents, request.ttl_ms)
        } else {
            let (ttl_ms, timeout) = (request.ttl_ms, request.wait_timeout_ms);
            self.wait(session, intents, ttl_ms, timeout, found, |b| b < priority)
        };
        self.after_frees();
        verdict
    }

    /// Queues the request; `held_by` lists the blockers whose priority passes `shown`.
    fn wait(
        &mut self,
        session: SessionId,
        intents: Intents,
        ttl_ms: u64,
        wait_timeout_ms: u64,
        found: &Blockers,
        shown: impl Fn(u64) -> bool,
    ) -> Verdict {
        let held_by = self.describe_blockers(found.sessions.iter().filter(|b| shown(b.priority)));
        let ticket = self.enqueue(session, intents, ttl_ms, wait_timeout_ms);
        Verdict::Wait { ticket, held_by }
    }

    /// Counts each blocked node in the contention table; the key's strings are copied only
    /// when the table takes a new entry.
    fn count_contention(&mut self, namespace: NamespaceId, found: &Blockers) {
        let ns = self.namespaces.name(namespace);
        for &node in &found.blocked_nodes {
            let name = &self.tree.node(node).name;
            self.contention.bump_with(
                |(n, r)| n == ns && r == name,
                || (String::from(ns), name.clone()),
                0,
                1,
            );
        }
    }
}
