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
//! - [`ends`]: which of its session's leases an event ends, and the kernel's name for why
//!   (`LEASE_EXPIRED`, `WOUNDED`, `SESSION_CLOSED`); every other event ends none.
//! - It reads no clock and does no I/O: the host polls, pauses, routes each event to the
//!   session it names ([`Event::session`]) and renews.

use crate::types::{Event, LeaseId};
use core::fmt;

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

/// The leases `event` ends for the session it names, and the kernel's name for why; `None`
/// for an event that ends none (grants, waits, releases by their holder).
pub fn ends(event: &Event) -> Option<(Ended<'_>, &'static str)> {
    match event {
        Event::LeaseExpired { lease, .. } => {
            Some((Ended::Leases(core::slice::from_ref(lease)), event.name()))
        }
        Event::Wounded { lost_leases, .. } => Some((Ended::Leases(lost_leases), event.name())),
        Event::SessionClosed { .. } => Some((Ended::All, event.name())),
        Event::Granted { .. }
        | Event::Acquired { .. }
        | Event::Released { .. }
        | Event::WaitTimeout { .. }
        | Event::Died { .. } => None,
    }
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
}
