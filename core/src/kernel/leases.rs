//! Lease upkeep (docs/SPEC.md §7, §9, §12): heartbeat, release, release_all, reconcile,
//! cancel_wait. A release that ends leases emits RELEASED, listing them (docs/SPEC.md §9).
//!
//! Contract: ownership is checked before anything else; another namespace's leases and
//! tickets do not exist for a session (`UNKNOWN_*`), another session's in the same namespace
//! are `NOT_OWNER`; an ended lease is never resurrected; release is idempotent.

use super::{Kernel, LeaseEnd, LeaseRecord};
use crate::error::{Error, ErrorCode};
use crate::types::{
    Event, HeartbeatOutcome, LeaseId, LeaseSelection, LeaseStatus, SessionId, TicketId,
};
use alloc::{format, vec::Vec};

/// Where a lease id stands from the point of view of one session.
enum Standing {
    Owned,
    OwnedEnded(LeaseEnd),
    OtherSession,
    Unknown,
}

impl Kernel {
    /// RELEASED for the leases a release, release_all or close ended, if any (and if the host
    /// did not turn holder events off).
    pub(super) fn emit_released(&mut self, session: SessionId, leases: Vec<LeaseId>) {
        if self.holder_events && !leases.is_empty() {
            self.events.push_back(Event::Released { session, leases });
        }
    }

    fn standing(&self, session: SessionId, id: LeaseId) -> Standing {
        // The ended leases are looked up only for an id that is not active.
        let (owner, ended) = match self.leases.get(&id) {
            Some(l) => (l.session, None),
            None => match self.ended_leases.get(&id) {
                Some(&(owner, end)) => (owner, Some(end)),
                None => return Standing::Unknown,
            },
        };
        if owner == session {
            return ended.map_or(Standing::Owned, Standing::OwnedEnded);
        }
        if self.sessions[&owner].namespace == self.sessions[&session].namespace {
            Standing::OtherSession
        } else {
            Standing::Unknown
        }
    }

    /// Renews leases of `session` for their TTL from `now` (KLIS-3 §3.2), each answered
    /// separately; `All` renews every active lease (in grant order).
    ///
    /// # Errors
    /// `UNKNOWN_SESSION`. Per lease: `LEASE_EXPIRED`, `LEASE_RELEASED`, `NOT_OWNER`,
    /// `UNKNOWN_LEASE`, `LIFETIME_EXCEEDED`.
    pub fn heartbeat(
        &mut self,
        session: SessionId,
        which: LeaseSelection<'_>,
        now: u64,
    ) -> Result<Vec<(LeaseId, HeartbeatOutcome)>, Error> {
        self.operation(now, |k| {
            k.session(session)?;
            let ids: Vec<LeaseId> = match which {
                LeaseSelection::All => {
                    let mut all: Vec<LeaseId> =
                        k.sessions[&session].leases.iter().copied().collect();
                    all.sort_unstable();
                    all
                }
                LeaseSelection::Ids(ids) => ids.to_vec(),
            };
            k.touch(session);
            let results = ids
                .into_iter()
                .map(|id| {
                    let outcome = match k.standing(session, id) {
                        Standing::Owned => {
                            let ttl = k.leases[&id].ttl_ms;
                            if k.renew_lease(id, ttl) {
                                Ok(k.effective_expiry(id))
                            } else {
                                Err(ErrorCode::LifetimeExceeded)
                            }
                        }
                        Standing::OwnedEnded(LeaseEnd::Expired) => Err(ErrorCode::LeaseExpired),
                        Standing::OwnedEnded(LeaseEnd::Released) => Err(ErrorCode::LeaseReleased),
                        Standing::OtherSession => Err(ErrorCode::NotOwner),
                        Standing::Unknown => Err(ErrorCode::UnknownLease),
                    };
                    (id, outcome)
                })
                .collect();
            Ok(results)
        })
    }

    /// Releases one lease. Returns `true` if this call released it, `false` if it had already
    /// ended (released, expired or wounded): release is idempotent.
    ///
    /// # Errors
    /// `UNKNOWN_SESSION`, `NOT_OWNER` (another session's lease), `UNKNOWN_LEASE`.
    pub fn release(&mut self, session: SessionId, lease: LeaseId, now: u64) -> Result<bool, Error> {
        self.operation(now, |k| {
            k.session(session)?;
            let released = match k.standing(session, lease) {
                // Ending it records the session's activity at this instant, as `touch` does.
                Standing::Owned => {
                    k.end_lease(lease, LeaseEnd::Released);
                    if k.holder_events {
                        k.emit_released(session, alloc::vec![lease]);
                    }
                    true
                }
                Standing::OwnedEnded(_) => {
                    k.touch(session);
                    false
                }
                Standing::OtherSession => {
                    return Err(Error::new(
                        ErrorCode::NotOwner,
                        format!(
                        "lease {lease} belongs to another session; only its owner may release it"
                    ),
                    ))
                }
                Standing::Unknown => return Err(unknown_lease(lease)),
            };
            k.after_frees();
            k.end_unit_if_done(session);
            Ok(released)
        })
    }

    /// Releases every active lease of the session (waits are kept). Returns how many.
    ///
    /// # Errors
    /// `UNKNOWN_SESSION`.
    pub fn release_all(&mut self, session: SessionId, now: u64) -> Result<usize, Error> {
        self.operation(now, |k| {
            k.session(session)?;
            let mut ids: Vec<LeaseId> = k.sessions[&session].leases.iter().copied().collect();
            ids.sort_unstable();
            for &id in &ids {
                k.end_lease(id, LeaseEnd::Released);
            }
            let count = ids.len();
            k.emit_released(session, ids);
            k.touch(session);
            k.after_frees();
            k.end_unit_if_done(session);
            Ok(count)
        })
    }

    /// The kernel's truth about each lease, from the point of view of `session`.
    ///
    /// # Errors
    /// `UNKNOWN_SESSION`.
    pub fn reconcile(
        &mut self,
        session: SessionId,
        leases: &[LeaseId],
        now: u64,
    ) -> Result<Vec<(LeaseId, LeaseStatus)>, Error> {
        self.operation(now, |k| {
            k.session(session)?;
            k.touch(session);
            Ok(leases
                .iter()
                .map(|&id| {
                    let status = match k.standing(session, id) {
                        Standing::Owned => LeaseStatus::Active {
                            expires_at: k.effective_expiry(id),
                            fence: LeaseRecord::fence(id),
                        },
                        Standing::OwnedEnded(LeaseEnd::Expired) => LeaseStatus::Expired,
                        Standing::OwnedEnded(LeaseEnd::Released) => LeaseStatus::Released,
                        Standing::OtherSession => LeaseStatus::NotOwner,
                        Standing::Unknown => LeaseStatus::Unknown,
                    };
                    (id, status)
                })
                .collect())
        })
    }

    /// Where `ticket` stands for `session`, a pure query (no `now`, nothing settles):
    /// `Some(true)` while it waits; `Some(false)` once it ended (granted, timed out, died,
    /// wounded or withdrawn), for as long as the kernel remembers the session's ended tickets
    /// (the same memory that makes `cancel_wait` of an ended ticket `UNKNOWN_TICKET`, not
    /// `NOT_OWNER`); `None` if it was never this session's ticket, or is forgotten. For hosts
    /// that answer a poll of a ticket's outcome from their event streams.
    pub fn ticket_waiting(&self, session: SessionId, ticket: TicketId) -> Option<bool> {
        if let Some(t) = self.tickets.get(&ticket) {
            return (t.session == session).then_some(true);
        }
        (self.ended_tickets.get(&ticket) == Some(&session)).then_some(false)
    }

    /// Withdraws a waiting ticket of the session.
    ///
    /// # Errors
    /// `UNKNOWN_SESSION`, `NOT_OWNER` (another session's ticket, checked first),
    /// `UNKNOWN_TICKET` (not waiting any more, or never issued).
    pub fn cancel_wait(
        &mut self,
        session: SessionId,
        ticket: TicketId,
        now: u64,
    ) -> Result<(), Error> {
        self.operation(now, |k| {
            let namespace = k.session(session)?.namespace;
            let owner = k
                .tickets
                .get(&ticket)
                .map(|t| t.session)
                .or_else(|| k.ended_tickets.get(&ticket).copied());
            let unknown = || {
                Error::new(
                    ErrorCode::UnknownTicket,
                    format!("ticket {ticket} is not waiting"),
                )
            };
            match owner {
                Some(o) if o != session && k.sessions[&o].namespace == namespace => {
                    return Err(Error::new(
                        ErrorCode::NotOwner,
                        format!("ticket {ticket} belongs to another session"),
                    ))
                }
                Some(o) if o == session && k.tickets.contains_key(&ticket) => {}
                _ => return Err(unknown()),
            }
            k.withdraw_ticket(ticket);
            k.counters.cancelled += 1;
            k.touch(session);
            k.after_frees();
            Ok(())
        })
    }
}

fn unknown_lease(lease: LeaseId) -> Error {
    Error::new(
        ErrorCode::UnknownLease,
        format!("no lease {lease} is known to this session's namespace"),
    )
}
