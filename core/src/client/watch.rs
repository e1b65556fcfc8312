//! One event stream for every session of a remote client: the rules of following a
//! namespace's watch (`GET /v1/ns/{ns}/watch?after=&wait_ms=`), one per client and namespace.
//!
//! Contract:
//! - [`Follow`] is where the stream resumes: the last event id taken in (`"<index>.<k>"`,
//!   numbered alike by every node of a cluster), which only ever moves forward. A stream
//!   started for a session reads from the log entry that opened (or resumed) it
//!   ([`Follow::from_entry`], the answer's `Klock-Index`): every event of the session comes
//!   from that entry or a later one, and the older events, which concern others, are not
//!   read. Without that index it reads from the oldest kept event ([`Follow::new`]): as
//!   right, only longer. Either way nothing of the session is missed before the first poll.
//! - *What was missed is learnt again*: [`Follow::answered`] says [`Resync::Held`] (renew
//!   every lease the client holds in the namespace at once: the renewal answers, per lease,
//!   whether the server still has it) when the answer follows a failed poll, comes from
//!   another node than the last answer, or has a `gap` (the server dropped events after the
//!   cursor: its byte budget, or a restart from a snapshot). Each of these may have hidden an
//!   expiry, a wound or a close. A poll the host could not use is [`Follow::failed`].
//! - A poll asks the server to hold it for an event up to the host's long wait, except right
//!   after a failed poll ([`Follow::wait_ms`]: 0): that answer is the one that says
//!   [`Resync::Held`], and held for an event it would put the resync off by the whole wait.
//! - [`ends`]: which of its session's leases an event ends, and the kernel's name for why
//!   (`LEASE_EXPIRED`, `WOUNDED`, `SESSION_CLOSED`); every other event ends none. A host that
//!   keeps events in its own shape (Python's and Node's JSON events) asks [`ending`] with the
//!   event's name: it says where such an event names the leases it ends.
//! - [`LOST_AT_LOCAL_DEADLINE`]: the name of a lease lost because its local deadline passed
//!   (the send time of the request that granted or last renewed it, plus its TTL, without a
//!   renewal answered): the kernel's `LEASE_EXPIRED`, in every driver (docs/SPEC.md §13).
//! - It reads no clock and does no I/O: the host polls, pauses, routes each event to the
//!   session it names ([`Event::session`]) and renews.

use crate::error::ErrorCode;
use crate::types::{Event, LeaseId};
use core::fmt;

/// The name of a lease the client found lost at its local deadline (module contract): the
/// kernel's name for a lease whose TTL ran out without a renewal, `LEASE_EXPIRED` (an error
/// name, code 301, and the name of the kernel's event). The server cannot have kept the
/// lease past that deadline without a renewal the client saw answered, so the client reports
/// it as the expiry it is or is about to be, in the words it would use had the server's
/// event arrived; no driver names it otherwise (docs/DECISIONS.md, "Issue 27: one name for a
/// lease lost at its local deadline").
pub const LOST_AT_LOCAL_DEADLINE: &str = ErrorCode::LeaseExpired.name();

/// An event id, ordered as the log is: `"<index>.<k>"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct EventId {
    index: u64,
    k: u32,
}

impl EventId {
    fn parse(text: &str) -> Result<EventId, BadEventId> {
        let (index, k) = text.split_once('.').ok_or(BadEventId)?;
        Ok(EventId {
            index: index.parse().map_err(|_| BadEventId)?,
            k: k.parse().map_err(|_| BadEventId)?,
        })
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.index, self.k)
    }
}

/// A `next` that is not an event id (`"<index>.<k>"`): the answer cannot be used, and the
/// cursor did not move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadEventId;

impl fmt::Display for BadEventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the watch's next is not an event id like 12.0")
    }
}

/// What the host does after an answered poll.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resync {
    /// Nothing was missed.
    Nothing,
    /// Events may have been missed: renew every held lease of the namespace now (module
    /// contract).
    Held,
}

/// Where a client's watch of one namespace resumes, and whether it may have missed events
/// (module contract).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Follow {
    after: Option<EventId>,
    /// The node of the last answered poll.
    last_node: Option<usize>,
    /// A poll failed since the last answer.
    cut_off: bool,
}

impl Follow {
    /// A watch that reads from the oldest event the server keeps.
    pub fn new() -> Follow {
        Follow::default()
    }

    /// A watch that reads every event of log entry `index` and later ones (module contract).
    pub fn from_entry(index: u64) -> Follow {
        Follow {
            // The last event of the entry before; entry 0 has none before it.
            after: index.checked_sub(1).map(|before| EventId {
                index: before,
                k: u32::MAX,
            }),
            ..Follow::default()
        }
    }

    /// The id to ask after (`None`: from the oldest kept event), as the query's `after=`.
    pub fn after(&self) -> Option<impl fmt::Display> {
        self.after
    }

    /// How long the next poll asks the server to hold it for an event (its `wait_ms=`): the
    /// host's `long` wait, or 0 right after a failed poll (module contract).
    pub fn wait_ms(&self, long: u64) -> u64 {
        if self.cut_off {
            0
        } else {
            long
        }
    }

    /// A poll failed (unreachable past its budget, refused, or an answer the host could not
    /// read): the next answer may follow missed events.
    pub fn failed(&mut self) {
        self.cut_off = true;
    }

    /// A poll answered by node `node` (its position in the client's list) with `next` and
    /// `gap`; the host routes its events, then does what this says.
    ///
    /// # Errors
    /// [`BadEventId`]: nothing moved; the host takes it as a failed poll.
    pub fn answered(&mut self, node: usize, next: &str, gap: bool) -> Result<Resync, BadEventId> {
        let next = EventId::parse(next)?;
        let moved = self.last_node.is_some_and(|last| last != node);
        let missed = gap || self.cut_off || moved;
        self.advance(next);
        self.cut_off = false;
        self.last_node = Some(node);
        Ok(if missed {
            Resync::Held
        } else {
            Resync::Nothing
        })
    }

    fn advance(&mut self, next: EventId) {
        if self.after.is_none_or(|after| next > after) {
            self.after = Some(next);
        }
    }
}

/// Which of its session's leases an event ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ended<'a> {
    /// These leases.
    Leases(&'a [LeaseId]),
    /// Every lease the session holds (it was closed).
    All,
}

/// Where an event that ends leases names them, for a host that keeps events in its own
/// shape (their fields are named as in the server's JSON).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// The one lease of its `lease` field.
    Lease,
    /// The leases of its `lost_leases` field.
    LostLeases,
    /// Every lease its session holds (it was closed).
    Session,
}

impl Ending {
    /// The kernel's name of the event kind that ends leases so, the name [`ends`] gives.
    pub const fn name(self) -> &'static str {
        match self {
            Ending::Lease => "LEASE_EXPIRED",
            Ending::LostLeases => "WOUNDED",
            Ending::Session => "SESSION_CLOSED",
        }
    }
}

/// Whether an event named `kind` (its `event` field, e.g. `"WOUNDED"`) ends leases of the
/// session it names, and where it names them; `None` for an event that ends none (grants,
/// waits, releases by their holder) and for a name that is no event's. The one rule: [`ends`]
/// reads a kernel [`Event`] through it.
pub fn ending(kind: &str) -> Option<Ending> {
    [Ending::Lease, Ending::LostLeases, Ending::Session]
        .into_iter()
        .find(|ending| ending.name() == kind)
}

/// The leases `event` ends for the session it names, and the kernel's name for why; `None`
/// for an event that ends none ([`ending`]).
pub fn ends(event: &Event) -> Option<(Ended<'_>, &'static str)> {
    let ended = match (ending(event.name())?, event) {
        (Ending::Lease, Event::LeaseExpired { lease, .. }) => {
            Ended::Leases(core::slice::from_ref(lease))
        }
        (Ending::LostLeases, Event::Wounded { lost_leases, .. }) => Ended::Leases(lost_leases),
        (Ending::Session, _) => Ended::All,
        // Each kind names its leases in the field `ending` says: no other pair occurs.
        (Ending::Lease | Ending::LostLeases, _) => return None,
    };
    Some((ended, event.name()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{CloseReason, SessionId, TicketId};
    use alloc::string::ToString;
    use alloc::vec::Vec;

    fn after(f: &Follow) -> Option<alloc::string::String> {
        f.after().map(|a| a.to_string())
    }

    #[test]
    fn the_cursor_starts_at_the_oldest_and_only_moves_forward() {
        let mut f = Follow::new();
        assert_eq!(after(&f), None);
        assert_eq!(f.answered(0, "7.2", false), Ok(Resync::Nothing));
        assert_eq!(after(&f).as_deref(), Some("7.2"));
        assert_eq!(f.answered(0, "9.0", false), Ok(Resync::Nothing));
        assert_eq!(after(&f).as_deref(), Some("9.0"));
        // A node behind (a follower that applied less) answers an older next: kept where it was.
        assert_eq!(f.answered(0, "8.5", false), Ok(Resync::Nothing));
        assert_eq!(after(&f).as_deref(), Some("9.0"));
        // Numeric, not textual, order.
        assert_eq!(f.answered(0, "10.0", false), Ok(Resync::Nothing));
        assert_eq!(after(&f).as_deref(), Some("10.0"));
    }

    #[test]
    fn a_stream_for_a_session_reads_from_the_entry_that_opened_it() {
        let f = Follow::from_entry(12);
        assert_eq!(after(&f).as_deref(), Some("11.4294967295"));
        assert_eq!(after(&Follow::from_entry(0)), None);
        // An event of entry 12 is after the cursor, the last of entry 11 is not.
        let mut f = Follow::from_entry(12);
        assert_eq!(f.answered(0, "11.3", false), Ok(Resync::Nothing));
        assert_eq!(after(&f).as_deref(), Some("11.4294967295"));
        assert_eq!(f.answered(0, "12.0", false), Ok(Resync::Nothing));
        assert_eq!(after(&f).as_deref(), Some("12.0"));
    }

    #[test]
    fn a_bad_next_is_a_named_error_that_moves_nothing() {
        let mut f = Follow::new();
        assert_eq!(f.answered(0, "3.0", false), Ok(Resync::Nothing));
        for bad in ["", "3", "x.1", "3.-1", "3.0.0"] {
            assert_eq!(f.answered(1, bad, true), Err(BadEventId), "{bad:?}");
        }
        assert_eq!(after(&f).as_deref(), Some("3.0"));
        // The bad answers did not count as answers: node 1 never answered.
        assert_eq!(f.answered(0, "4.0", false), Ok(Resync::Nothing));
    }

    #[test]
    fn a_gap_a_failure_or_another_node_resyncs_once() {
        let mut f = Follow::new();
        assert_eq!(f.answered(0, "2.0", false), Ok(Resync::Nothing));
        assert_eq!(f.answered(0, "5.0", true), Ok(Resync::Held), "a gap");
        assert_eq!(f.answered(0, "5.0", false), Ok(Resync::Nothing));
        f.failed();
        assert_eq!(
            f.answered(0, "5.0", false),
            Ok(Resync::Held),
            "after a failure"
        );
        assert_eq!(f.answered(0, "6.0", false), Ok(Resync::Nothing));
        assert_eq!(
            f.answered(2, "6.0", false),
            Ok(Resync::Held),
            "another node"
        );
        assert_eq!(f.answered(2, "6.0", false), Ok(Resync::Nothing));
    }

    /// The poll after a failed one is not held for an event: its answer is the resync's.
    #[test]
    fn a_poll_after_a_failed_one_asks_without_waiting() {
        let mut f = Follow::new();
        assert_eq!(f.wait_ms(10_000), 10_000);
        f.failed();
        assert_eq!(f.wait_ms(10_000), 0);
        f.failed();
        assert_eq!(f.wait_ms(10_000), 0, "until a poll is answered");
        assert_eq!(f.answered(0, "3.0", false), Ok(Resync::Held));
        assert_eq!(f.wait_ms(10_000), 10_000);
        // An answer it could not read is no answer: still no wait.
        f.failed();
        assert_eq!(f.answered(0, "x", false), Err(BadEventId));
        assert_eq!(f.wait_ms(10_000), 0);
    }

    #[test]
    fn the_first_answer_is_no_reconnect_but_its_gap_is() {
        let mut f = Follow::new();
        assert_eq!(f.answered(1, "1.0", false), Ok(Resync::Nothing));
        let mut f = Follow::new();
        assert_eq!(f.answered(1, "1.0", true), Ok(Resync::Held));
    }

    #[test]
    fn expiries_wounds_and_closes_end_leases_the_rest_none() {
        let s = SessionId(4);
        let expired = Event::LeaseExpired {
            lease: LeaseId(9),
            session: s,
        };
        assert_eq!(
            ends(&expired),
            Some((Ended::Leases(&[LeaseId(9)]), "LEASE_EXPIRED"))
        );
        let wounded = Event::Wounded {
            session: s,
            by: SessionId(1),
            lost_leases: alloc::vec![LeaseId(2), LeaseId(3)],
            lost_tickets: Vec::new(),
            retry_after_ms: 10,
        };
        assert_eq!(
            ends(&wounded),
            Some((Ended::Leases(&[LeaseId(2), LeaseId(3)]), "WOUNDED"))
        );
        let closed = Event::SessionClosed {
            session: s,
            reason: CloseReason::Idle,
        };
        assert_eq!(ends(&closed), Some((Ended::All, "SESSION_CLOSED")));
        let timed_out = Event::WaitTimeout {
            ticket: TicketId(1),
            session: s,
        };
        assert_eq!(ends(&timed_out), None);
        let released = Event::Released {
            session: s,
            leases: alloc::vec![LeaseId(9)],
        };
        assert_eq!(ends(&released), None);
    }

    #[test]
    fn ending_names_the_field_of_each_kind_that_ends_leases() {
        let named: Vec<(&str, Option<Ending>)> = Event::KINDS
            .iter()
            .map(|kind| (*kind, ending(kind)))
            .collect();
        assert_eq!(
            named,
            [
                ("GRANTED", None),
                ("WAIT_TIMEOUT", None),
                ("DIED", None),
                ("LEASE_EXPIRED", Some(Ending::Lease)),
                ("WOUNDED", Some(Ending::LostLeases)),
                ("SESSION_CLOSED", Some(Ending::Session)),
                ("ACQUIRED", None),
                ("RELEASED", None),
            ]
        );
        for (kind, ending) in named.iter().filter_map(|(k, e)| Some((k, (*e)?))) {
            assert_eq!(ending.name(), *kind);
        }
        // A host's own names (Node's LEASE_LOST), other cases and nothing end none.
        for other in ["LEASE_LOST", "lease_expired", "", "WOUNDED "] {
            assert_eq!(ending(other), None, "{other:?}");
        }
    }

    #[test]
    fn a_lease_lost_at_its_local_deadline_has_the_kernels_expiry_name() {
        assert_eq!(LOST_AT_LOCAL_DEADLINE, "LEASE_EXPIRED");
        assert_eq!(LOST_AT_LOCAL_DEADLINE, ErrorCode::LeaseExpired.name());
        let expired = Event::LeaseExpired {
            lease: LeaseId(1),
            session: SessionId(1),
        };
        assert_eq!(expired.name(), LOST_AT_LOCAL_DEADLINE);
    }
}
