//! The alias table of one vector run.
//!
//! Contract: an alias is bound once, by `as` (sessions, leases, digests) or by an expected
//! `ticket` (tickets), to a value of one kind; binding it again to the same value is a no-op,
//! to another value or kind is a failure (use `same_as` to say "the same lease"). Resolving a
//! bound alias as another kind fails. Resolving an alias that was never bound yields a literal
//! id the kernel has never issued and never will: kernel ids count up from 1, unbound aliases
//! count down from 2^53 − 1 (the largest integer every host's language holds exactly, so a
//! resolved script replays unchanged in JavaScript), one fixed id per alias for the whole
//! vector — so an unbound session alias is `UNKNOWN_SESSION`, an unbound lease `UNKNOWN_LEASE` / `UNKNOWN`, and the
//! same unbound name means the same id in a request and in its expectation. A digest alias
//! must be bound. Ids are labelled back to their aliases for messages.

use klock_core::{LeaseId, SessionId, StateDigest, TicketId};
use std::collections::BTreeMap;

/// The first literal id for an unbound alias (2^53 − 1); later ones count down from it.
const LARGEST_PORTABLE_ID: u64 = (1 << 53) - 1;

/// What an alias stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Bound {
    Session(u64),
    /// A lease id and its fence (for `fence_gt`).
    Lease(u64, u64),
    Ticket(u64),
    Digest(Box<StateDigest>),
}

impl Bound {
    fn kind(&self) -> &'static str {
        match self {
            Bound::Session(_) => "session",
            Bound::Lease(..) => "lease",
            Bound::Ticket(_) => "ticket",
            Bound::Digest(_) => "digest",
        }
    }
}

/// The aliases of one vector run.
#[derive(Debug, Default)]
pub struct Aliases {
    bound: BTreeMap<String, Bound>,
    unbound: BTreeMap<String, u64>,
}

impl Aliases {
    fn bind(&mut self, alias: &str, value: Bound) -> Result<(), String> {
        match self.bound.get(alias) {
            None => {
                self.bound.insert(alias.to_owned(), value);
                Ok(())
            }
            Some(old) if *old == value => Ok(()),
            Some(old) => Err(format!(
                "alias {alias:?} is already bound to {} {}, cannot rebind it to {} {} (aliases are bound once; use same_as)",
                old.kind(),
                describe(old),
                value.kind(),
                describe(&value)
            )),
        }
    }

    /// Binds a session alias.
    pub fn bind_session(&mut self, alias: &str, id: SessionId) -> Result<(), String> {
        self.bind(alias, Bound::Session(id.0))
    }

    /// Binds a lease alias (with the lease's fence).
    pub fn bind_lease(&mut self, alias: &str, id: LeaseId, fence: u64) -> Result<(), String> {
        self.bind(alias, Bound::Lease(id.0, fence))
    }

    /// Binds a ticket alias.
    pub fn bind_ticket(&mut self, alias: &str, id: TicketId) -> Result<(), String> {
        self.bind(alias, Bound::Ticket(id.0))
    }

    /// Binds a digest alias.
    pub fn bind_digest(&mut self, alias: &str, digest: StateDigest) -> Result<(), String> {
        self.bind(alias, Bound::Digest(Box::new(digest)))
    }

    /// The never-issued id standing for an unbound alias.
    fn literal(&mut self, alias: &str) -> u64 {
        let next = LARGEST_PORTABLE_ID - self.unbound.len() as u64;
        *self.unbound.entry(alias.to_owned()).or_insert(next)
    }

    fn resolve(&mut self, alias: &str, kind: &str) -> Result<u64, String> {
        match self.bound.get(alias) {
            None => Ok(self.literal(alias)),
            Some(b) if b.kind() != kind => Err(format!(
                "alias {alias:?} is bound to a {}, not a {kind}",
                b.kind()
            )),
            Some(Bound::Session(id) | Bound::Ticket(id) | Bound::Lease(id, _)) => Ok(*id),
            Some(Bound::Digest(_)) => unreachable!("digests are resolved by Aliases::digest"),
        }
    }

    /// The session an alias names (unbound: a never-issued id).
    pub fn session(&mut self, alias: &str) -> Result<SessionId, String> {
        self.resolve(alias, "session").map(SessionId)
    }

    /// The lease an alias names (unbound: a never-issued id).
    pub fn lease(&mut self, alias: &str) -> Result<LeaseId, String> {
        self.resolve(alias, "lease").map(LeaseId)
    }

    /// The ticket an alias names (unbound: a never-issued id).
    pub fn ticket(&mut self, alias: &str) -> Result<TicketId, String> {
        self.resolve(alias, "ticket").map(TicketId)
    }

    /// A bound lease: its id and fence (for `fence_gt` and `same_as`, which need one).
    pub fn bound_lease(&self, alias: &str) -> Result<(LeaseId, u64), String> {
        match self.bound.get(alias) {
            Some(Bound::Lease(id, fence)) => Ok((LeaseId(*id), *fence)),
            Some(other) => Err(format!(
                "alias {alias:?} is bound to a {}, not a lease",
                other.kind()
            )),
            None => Err(format!("alias {alias:?} is not bound to a lease yet")),
        }
    }

    /// The digest an alias names; it must be bound.
    pub fn digest(&self, alias: &str) -> Result<StateDigest, String> {
        match self.bound.get(alias) {
            Some(Bound::Digest(d)) => Ok((**d).clone()),
            Some(other) => Err(format!(
                "alias {alias:?} is bound to a {}, not a digest",
                other.kind()
            )),
            None => Err(format!(
                "digest alias {alias:?} was never bound (bind it with a digest step's `as`)"
            )),
        }
    }

    fn label(&self, kind: &str, id: u64) -> String {
        let found = self.bound.iter().find(|(_, b)| {
            matches!((kind, b), ("session", Bound::Session(x)) | ("ticket", Bound::Ticket(x)) | ("lease", Bound::Lease(x, _)) if *x == id)
        });
        if let Some((alias, _)) = found {
            return format!("{alias}(#{id})");
        }
        match self.unbound.iter().find(|(_, &x)| x == id) {
            Some((alias, _)) => format!("{alias}(unbound)"),
            None => format!("#{id}"),
        }
    }

    /// `A(#1)` for a session bound to alias `A`, `#7` for an id without alias.
    pub fn session_label(&self, id: SessionId) -> String {
        self.label("session", id.0)
    }

    /// Like [`session_label`](Self::session_label), for leases.
    pub fn lease_label(&self, id: LeaseId) -> String {
        self.label("lease", id.0)
    }

    /// Like [`session_label`](Self::session_label), for tickets.
    pub fn ticket_label(&self, id: TicketId) -> String {
        self.label("ticket", id.0)
    }
}

fn describe(b: &Bound) -> String {
    match b {
        Bound::Session(id) | Bound::Ticket(id) | Bound::Lease(id, _) => format!("#{id}"),
        Bound::Digest(d) => format!("of session #{}", d.identity.session_id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unbound_aliases_are_stable_never_issued_ids() {
        let mut a = Aliases::default();
        let x = a.session("X").unwrap();
        let y = a.lease("Y").unwrap();
        assert_eq!(a.session("X").unwrap(), x);
        assert_ne!(x.0, y.0);
        assert!(x.0 > LARGEST_PORTABLE_ID / 2 && y.0 > LARGEST_PORTABLE_ID / 2);
    }

    #[test]
    fn kinds_and_rebinding_are_checked() {
        let mut a = Aliases::default();
        a.bind_session("A", SessionId(1)).unwrap();
        a.bind_session("A", SessionId(1)).unwrap();
        assert!(a.bind_session("A", SessionId(2)).is_err());
        assert!(a.bind_lease("A", LeaseId(1), 1).is_err());
        assert!(a.lease("A").is_err());
        assert_eq!(a.session("A").unwrap(), SessionId(1));
        assert!(a.digest("A").is_err());
        assert!(a.digest("D").is_err());
        assert_eq!(a.session_label(SessionId(1)), "A(#1)");
    }
}
