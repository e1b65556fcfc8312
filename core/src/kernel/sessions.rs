//! Session lifecycle (docs/SPEC.md §5): open, close, suspend, resume, digest, idle close.
//!
//! Contract: the kernel assigns ids and priorities (clients never choose a priority); a
//! session's priority belongs to its unit of work and is renewed only by the first acquire
//! after a release ended one (see [`Kernel::acquire`]); a resume never changes it; closing
//! releases every lease and cancels every wait and then forgets the session's ended leases
//! and tickets (afterwards their ids are `UNKNOWN` to everyone); a digest is checked against
//! the kernel's own record on resume.

use super::{Kernel, LeaseEnd, Session, Set};
use crate::deadlines::DeadlineKind;
use crate::error::{Error, ErrorCode};
use crate::types::{
    DigestIdentity, DigestRecovery, SessionId, SessionInfo, StateDigest, DIGEST_VERSION,
};
use alloc::{collections::VecDeque, format, string::String, vec::Vec};

/// Longest accepted agent id or namespace, in bytes.
pub const MAX_NAME_BYTES: usize = 256;

/// Whether `c` is of a Unicode general category an id must not contain (docs/SPEC.md §5): Cc
/// (controls, NUL included), Cf (format: zero-width and bidirectional controls, tags, ...),
/// Zl or Zp. Such a character makes an id shown in a log or a dashboard differ from the id
/// the kernel holds.
pub fn is_unprintable(c: char) -> bool {
    use unicode_properties::{GeneralCategory as G, UnicodeGeneralCategory};
    matches!(
        c.general_category(),
        G::Control | G::Format | G::LineSeparator | G::ParagraphSeparator
    )
}

/// Checks an agent id or namespace: 1..=256 bytes of printable UTF-8 (no Cc, Cf, Zl, Zp).
fn check_name(what: &str, code: ErrorCode, value: &str) -> Result<(), Error> {
    if value.is_empty() || value.len() > MAX_NAME_BYTES {
        return Err(Error::new(
            code,
            format!("{what} must be 1 to 256 bytes, got {} bytes", value.len()),
        ));
    }
    if let Some(c) = value.chars().find(|&c| is_unprintable(c)) {
        return Err(Error::new(
            code,
            format!(
                "{what} {value:?} contains the unprintable character U+{:04X} (a control, format or separator character); use printable text",
                c as u32
            ),
        ));
    }
    Ok(())
}

pub(crate) fn check_agent_id(agent_id: &str) -> Result<(), Error> {
    check_name("agent_id", ErrorCode::InvalidAgentId, agent_id)
}

/// Checks a namespace as every kernel call naming one does (`INVALID_NAMESPACE`), for a host
/// that reads a namespace before any kernel call.
pub fn check_namespace(namespace: &str) -> Result<(), Error> {
    check_name("namespace", ErrorCode::InvalidNamespace, namespace)
}

impl Kernel {
    /// Opens a session for `agent_id` in `namespace`.
    ///
    /// # Errors
    /// `INVALID_AGENT_ID` / `INVALID_NAMESPACE` unless 1..=256 bytes of printable text (no
    /// Cc, Cf, Zl or Zp character).
    pub fn open_session(
        &mut self,
        agent_id: &str,
        namespace: &str,
        now: u64,
    ) -> Result<SessionInfo, Error> {
        self.operation(now, |k| {
            check_agent_id(agent_id)?;
            check_namespace(namespace)?;
            let id = SessionId(k.next_session);
            k.next_session += 1;
            let priority = k.next_priority;
            k.next_priority += 1;
            let ns = k.namespaces.acquire(namespace);
            k.sessions.insert(
                id,
                Session {
                    agent_id: String::from(agent_id),
                    namespace: ns,
                    priority,
                    first_priority: priority,
                    granted_in_unit: false,
                    unit_ended: false,
                    epoch: 0,
                    leases: Set::default(),
                    tickets: Vec::new(),
                    die_count: 0,
                    last_active: k.clock,
                    idle_deadline: None,
                    suspended_at: None,
                    ended_leases: VecDeque::new(),
                    ended_tickets: VecDeque::new(),
                },
            );
            k.refresh_idle(id);
            k.counters.sessions_opened += 1;
            Ok(k.session_info(id))
        })
    }

    /// The session `id` as it stands, if it is open: a pure query (no `now`, nothing
    /// settles), for hosts that must check a session's namespace before calling on it.
    pub fn session_info_of(&self, id: SessionId) -> Option<SessionInfo> {
        self.sessions
            .contains_key(&id)
            .then(|| self.session_info(id))
    }

    fn session_info(&self, id: SessionId) -> SessionInfo {
        let s = &self.sessions[&id];
        SessionInfo {
            session_id: id,
            agent_id: s.agent_id.clone(),
            namespace: String::from(self.namespaces.name(s.namespace)),
            priority: s.priority,
            epoch: s.epoch,
        }
    }

    /// Closes a session: releases every lease (one RELEASED event lists them), cancels every
    /// wait (the grants this unblocks are emitted as events; no SESSION_CLOSED is emitted for
    /// an explicit close).
    ///
    /// # Errors
    /// `UNKNOWN_SESSION`.
    pub fn close_session(&mut self, session: SessionId, now: u64) -> Result<(), Error> {
        self.operation(now, |k| {
            k.session(session)?;
            k.remove_session(session);
            k.after_frees();
            Ok(())
        })
    }

    /// Ends everything of a session and forgets it (explicit close and idle close).
    pub(super) fn remove_session(&mut self, id: SessionId) {
        for ticket in self.sessions[&id].tickets.clone() {
            self.withdraw_ticket(ticket);
        }
        let mut leases: Vec<_> = self.sessions[&id].leases.iter().copied().collect();
        leases.sort_unstable();
        for &lease in &leases {
            self.end_lease(lease, LeaseEnd::Released);
        }
        // An idle close never has leases, so only an explicit close emits RELEASED.
        self.emit_released(id, leases);
        let session = self.sessions.remove(&id).expect("live session");
        if let Some(at) = session.idle_deadline {
            self.deadlines.remove(at, DeadlineKind::IdleClose, id.0);
        }
        for lease in &session.ended_leases {
            self.ended_leases.remove(lease);
        }
        for ticket in &session.ended_tickets {
            self.ended_tickets.remove(ticket);
        }
        self.namespaces.release(session.namespace);
    }

    /// Marks the session as restarting: its leases (and any granted while suspended) are
    /// kept until at least `now + grace_ms`, within their lifetime cap.
    ///
    /// # Errors
    /// `UNKNOWN_SESSION`.
    pub fn suspend_session(&mut self, session: SessionId, now: u64) -> Result<(), Error> {
        self.operation(now, |k| {
            k.session(session)?;
            let now = k.clock;
            let grace = now.saturating_add(k.config.grace_ms);
            k.session_mut(session).suspended_at = Some(now);
            let mut leases: Vec<_> = k.sessions[&session].leases.iter().copied().collect();
            leases.sort_unstable();
            for id in leases {
                let lease = &k.leases[&id];
                let grace_until = k.capped_expiry(lease, grace);
                k.set_lease_expiry(id, lease.expires_at, grace_until);
            }
            k.touch(session);
            Ok(())
        })
    }

    /// The session's recovery digest (KLIS-8 shape).
    ///
    /// # Errors
    /// `UNKNOWN_SESSION`.
    pub fn digest(&mut self, session: SessionId, now: u64) -> Result<StateDigest, Error> {
        self.operation(now, |k| {
            k.session(session)?;
            k.touch(session);
            let s = &k.sessions[&session];
            let last_phase = if s.suspended_at.is_some() {
                "SUSPENDED"
            } else if !s.tickets.is_empty() {
                "WAITING"
            } else if !s.leases.is_empty() {
                "HOLDING"
            } else {
                "IDLE"
            };
            let pending_intents = s
                .tickets
                .iter()
                .flat_map(|t| k.tickets[t].intents.iter().filter(|i| i.reuse.is_none()))
                .map(|i| format!("{} {}", i.predicate.name(), k.tree.node(i.node).name))
                .collect();
            Ok(StateDigest {
                version: DIGEST_VERSION,
                identity: DigestIdentity {
                    agent_id: s.agent_id.clone(),
                    namespace: String::from(k.namespaces.name(s.namespace)),
                    session_id: session,
                    priority_timestamp: s.priority,
                    epoch: s.epoch,
                },
                recovery: DigestRecovery {
                    last_phase: String::from(last_phase),
                    pending_intents,
                },
            })
        })
    }

    /// Re-attaches a restarted agent to its session: same priority, epoch + 1, suspension
    /// ended, every lease renewed as a heartbeat would.
    ///
    /// # Errors
    /// `UNKNOWN_SESSION` if the digest names no open session; `INVALID_DIGEST` if its version,
    /// agent, namespace or priority differ from the kernel's record or its epoch is newer.
    pub fn resume_session(&mut self, digest: &StateDigest, now: u64) -> Result<SessionInfo, Error> {
        self.operation(now, |k| {
            let id = digest.identity.session_id;
            let s = k.session(id)?;
            let d = &digest.identity;
            let mismatch = if digest.version != DIGEST_VERSION {
                Some("version")
            } else if d.agent_id != s.agent_id {
                Some("agent_id")
            } else if d.namespace != k.namespaces.name(s.namespace) {
                Some("namespace")
            } else if !(s.first_priority..=s.priority).contains(&d.priority_timestamp) {
                Some("priority_timestamp")
            } else if d.epoch > s.epoch {
                Some("epoch")
            } else {
                None
            };
            if let Some(field) = mismatch {
                return Err(Error::new(
                    ErrorCode::InvalidDigest,
                    format!("digest {field} does not match the kernel's record of session {id}"),
                ));
            }
            let s = k.session_mut(id);
            s.epoch += 1;
            s.suspended_at = None;
            let mut leases: Vec<_> = s.leases.iter().copied().collect();
            leases.sort_unstable();
            for lease in leases {
                // A resume ends the suspension of every lease, renewable or not.
                let l = &k.leases[&lease];
                let (expires_at, ttl) = (l.expires_at, l.ttl_ms);
                k.set_lease_expiry(lease, expires_at, 0);
                k.renew_lease(lease, ttl);
            }
            k.touch(id);
            Ok(k.session_info(id))
        })
    }
}
