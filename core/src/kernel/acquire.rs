//! Acquire (docs/SPEC.md §6): validation, idempotent re-acquire, and the three policies.
//!
//! Contract: the request is validated completely before any state changes (error precedence
//! UNKNOWN_SESSION, INVALID_MANIFEST, per intent INVALID_PREDICATE then INVALID_RESOURCE,
//! INVALID_TTL, HOLD_AND_WAIT, QUOTA_EXCEEDED); then it is GRANTED all-or-nothing, queued as
//! one ticket (WAIT), or refused (DIE) with a backoff, by the configured policy.

use super::scheduler::Blockers;
use super::{Kernel, TicketIntent};
use crate::config::Policy;
use crate::error::{Error, ErrorCode};
use crate::predicate::Predicate;
use crate::resource::ResourceName;
use crate::types::{AcquireOptions, SessionId, TicketId, Verdict};
use alloc::{format, string::String, vec::Vec};

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
        let s = self.session(session)?;
        if intents.is_empty() || intents.len() > MAX_MANIFEST_INTENTS {
            return Err(Error::new(
                ErrorCode::InvalidManifest,
                format!(
                    "a manifest needs 1 to {MAX_MANIFEST_INTENTS} intents, got {}",
                    intents.len()
                ),
            ));
        }
        let mut wanted: Vec<(Predicate, ResourceName)> = Vec::with_capacity(intents.len());
        for text in intents {
            let intent = parse_intent(text.as_ref())?;
            if !wanted.contains(&intent) {
                wanted.push(intent);
            }
        }
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
        let wait = options.wait && wait_timeout_ms > 0;

        // Which intents the session already holds with the same predicate.
        let namespace = s.namespace;
        let reuse: Vec<Option<crate::types::LeaseId>> = wanted
            .iter()
            .map(|(predicate, name)| {
                let node = self.tree.find(namespace, name.as_str())?;
                self.held_by(session, node, *predicate)
            })
            .collect();
        let new_count = reuse.iter().filter(|r| r.is_none()).count() as u64;
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
        let in_use: u64 = s.leases.len() as u64
            + s.tickets
                .iter()
                .map(|t| {
                    self.tickets[t]
                        .intents
                        .iter()
                        .filter(|i| i.reuse.is_none())
                        .count() as u64
                })
                .sum::<u64>();
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

        // Valid: from here on the call succeeds.
        self.touch(session);
        self.begin_unit_if_needed(session);
        let ticket_intents: Vec<TicketIntent> = wanted
            .iter()
            .zip(&reuse)
            .map(|((predicate, name), &reuse)| {
                let node = match reuse {
                    Some(lease) => self.leases[&lease].node,
                    None => {
                        let node = self.tree.intern(namespace, name.as_str());
                        self.touched.push(node);
                        node
                    }
                };
                TicketIntent {
                    node,
                    predicate: *predicate,
                    reuse,
                }
            })
            .collect();
        let queued = ticket_intents
            .iter()
            .filter(|i| i.reuse.is_none())
            .map(|i| (i.node, i.predicate));
        let found = self.find_blockers(session, queued, TicketId(u64::MAX));
        if found.is_empty() {
            return Ok(Verdict::Granted {
                leases: self.grant(session, &ticket_intents, ttl_ms),
            });
        }
        self.count_contention(namespace, &found);
        let priority = self.sessions[&session].priority;
        let all_younger = found.sessions.iter().all(|b| b.priority > priority);
        let policy = self.config.policy;
        let verdict = match policy {
            // Wait-Die: only a requester older than every blocker waits. Lanes: anyone waits.
            Policy::WaitDie | Policy::Lanes if wait && (all_younger || policy == Policy::Lanes) => {
                self.wait(
                    session,
                    ticket_intents,
                    ttl_ms,
                    wait_timeout_ms,
                    &found,
                    |_| true,
                )
            }
            Policy::WoundWait if wait || all_younger => {
                // Wound every younger blocker, oldest victim first (ids order = priority order
                // is not guaranteed, so sort by priority).
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
                    Verdict::Granted {
                        leases: self.grant(session, &ticket_intents, ttl_ms),
                    }
                } else {
                    self.wait(
                        session,
                        ticket_intents,
                        ttl_ms,
                        wait_timeout_ms,
                        &found,
                        |b| b < priority,
                    )
                };
                self.after_frees();
                verdict
            }
            _ => {
                let held_by = self.describe_blockers(found.sessions.iter());
                self.counters.died += 1;
                Verdict::Die {
                    retry_after_ms: self.die_backoff(session),
                    held_by,
                }
            }
        };
        Ok(verdict)
    }

    /// Queues the request; `held_by` lists the blockers whose priority passes `shown`.
    fn wait(
        &mut self,
        session: SessionId,
        intents: Vec<TicketIntent>,
        ttl_ms: u64,
        wait_timeout_ms: u64,
        found: &Blockers,
        shown: impl Fn(u64) -> bool,
    ) -> Verdict {
        let held_by = self.describe_blockers(found.sessions.iter().filter(|b| shown(b.priority)));
        let ticket = self.enqueue(session, intents, ttl_ms, wait_timeout_ms);
        Verdict::Wait { ticket, held_by }
    }

    fn count_contention(&mut self, namespace: crate::tree::NamespaceId, found: &Blockers) {
        let ns = String::from(self.namespaces.name(namespace));
        for &node in &found.blocked_nodes {
            let key = (ns.clone(), String::from(&*self.tree.node(node).name));
            self.contention.bump(&key, 0, 1);
        }
    }
}
