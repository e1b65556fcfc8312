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
//! - *A cursor belongs to one log.* Event ids count entries of the server's log, named by an
//!   id (a `--memory` server makes a new one at each start; a data file and a cluster keep
//!   theirs): a number from one log means nothing in another, and taken as one it would skip
//!   the new log's events up to it. The stream knows the log of its cursor (an open's or a
//!   watch answer's `log`) and names it with each poll ([`Follow::log`], the query's
//!   `log=`); a server whose log is another reads it from that log's start with a `gap`, and
//!   [`Follow::answered`] then *replaces* the cursor (it only moves forward within a log) and
//!   says [`Resync::Held`]. A session opened on another log than the stream's
//!   ([`Follow::opened`]) moves the stream to read from that session's entry of its log, and
//!   the next answer resyncs: the old log's sessions are gone with it. So the host counts as
//!   a failed poll only a call that gave up: a server's return within the call's budget
//!   missed nothing (same log) or says so (another log).
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
use alloc::string::String;
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
    /// The log `after` counts entries of, once known.
    log: Option<String>,
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

    /// A watch that reads every event of log entry `index` (of log `log`, when the server
    /// named it) and later ones (module contract).
    pub fn from_entry(index: u64, log: Option<&str>) -> Follow {
        Follow {
            after: before_entry(index),
            log: log.map(String::from),
            ..Follow::default()
        }
    }

    /// The id to ask after (`None`: from the oldest kept event), as the query's `after=`.
    pub fn after(&self) -> Option<impl fmt::Display> {
        self.after
    }

    /// The log the cursor belongs to (`None`: not known yet), as the query's `log=`.
    pub fn log(&self) -> Option<&str> {
        self.log.as_deref()
    }

    /// A session of this stream was opened (or resumed) by log entry `index` of log `log`
    /// (its answer's `Klock-Index` and `log`). On the stream's own log (or an unknown one)
    /// nothing moves: the session's events come after its open, sent after the stream
    /// started. On another log, the stream reads that log from the session's entry, and the
    /// next answer says [`Resync::Held`] (module contract).
    pub fn opened(&mut self, index: u64, log: Option<&str>) {
        match (self.log.as_deref(), log) {
            (Some(ours), Some(theirs)) if ours != theirs => {
                self.after = before_entry(index);
                self.log = Some(String::from(theirs));
                self.cut_off = true;
            }
            (None, Some(theirs)) => self.log = Some(String::from(theirs)),
            _ => {}
        }
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

    /// A poll answered by node `node` (its position in the client's list) with `next`,
    /// `gap` and `log` (the answer's log, if it named one); the host routes its events, then
    /// does what this says.
    ///
    /// # Errors
    /// [`BadEventId`]: nothing moved; the host takes it as a failed poll.
    pub fn answered(
        &mut self,
        node: usize,
        next: &str,
        gap: bool,
        log: Option<&str>,
    ) -> Result<Resync, BadEventId> {
        let next = EventId::parse(next)?;
        let moved = self.last_node.is_some_and(|last| last != node);
        let other_log =
            matches!((self.log.as_deref(), log), (Some(ours), Some(theirs)) if ours != theirs);
        let missed = gap || self.cut_off || moved || other_log;
        if other_log {
            // The server read this stream from its log's start: its `next` is where to go on.
            self.after = None;
        }
        if let Some(log) = log {
            if self.log.as_deref() != Some(log) {
                self.log = Some(String::from(log));
            }
        }
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

/// The cursor just before log entry `index`: the last event of the entry before (entry 0
/// has none before it).
fn before_entry(index: u64) -> Option<EventId> {
    index.checked_sub(1).map(|before| EventId {
        index: before,
        k: u32::MAX,
    })
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
        assert_eq!(f.answered(0, "7.2", false, None), Ok(Resync::Nothing));
        assert_eq!(after(&f).as_deref(), Some("7.2"));
        assert_eq!(f.answered(0, "9.0", false, None), Ok(Resync::Nothing));
        assert_eq!(after(&f).as_deref(), Some("9.0"));
        // A node behind (a follower that applied less) answers an older next: kept where it was.
        assert_eq!(f.answered(0, "8.5", false, None), Ok(Resync::Nothing));
        assert_eq!(after(&f).as_deref(), Some("9.0"));
        // Numeric, not textual, order.
        assert_eq!(f.answered(0, "10.0", false, None), Ok(Resync::Nothing));
        assert_eq!(after(&f).as_deref(), Some("10.0"));
    }

    #[test]
    fn a_stream_for_a_session_reads_from_the_entry_that_opened_it() {
        let f = Follow::from_entry(12, None);
        assert_eq!(after(&f).as_deref(), Some("11.4294967295"));
        assert_eq!(after(&Follow::from_entry(0, None)), None);
        // An event of entry 12 is after the cursor, the last of entry 11 is not.
        let mut f = Follow::from_entry(12, None);
        assert_eq!(f.answered(0, "11.3", false, None), Ok(Resync::Nothing));
        assert_eq!(after(&f).as_deref(), Some("11.4294967295"));
        assert_eq!(f.answered(0, "12.0", false, None), Ok(Resync::Nothing));
        assert_eq!(after(&f).as_deref(), Some("12.0"));
    }

    #[test]
    fn a_bad_next_is_a_named_error_that_moves_nothing() {
        let mut f = Follow::new();
        assert_eq!(f.answered(0, "3.0", false, None), Ok(Resync::Nothing));
        for bad in ["", "3", "x.1", "3.-1", "3.0.0"] {
            assert_eq!(f.answered(1, bad, true, None), Err(BadEventId), "{bad:?}");
        }
        assert_eq!(after(&f).as_deref(), Some("3.0"));
        // The bad answers did not count as answers: node 1 never answered.
        assert_eq!(f.answered(0, "4.0", false, None), Ok(Resync::Nothing));
    }

    #[test]
    fn a_gap_a_failure_or_another_node_resyncs_once() {
        let mut f = Follow::new();
        assert_eq!(f.answered(0, "2.0", false, None), Ok(Resync::Nothing));
        assert_eq!(f.answered(0, "5.0", true, None), Ok(Resync::Held), "a gap");
        assert_eq!(f.answered(0, "5.0", false, None), Ok(Resync::Nothing));
        f.failed();
        assert_eq!(
            f.answered(0, "5.0", false, None),
            Ok(Resync::Held),
            "after a failure"
        );
        assert_eq!(f.answered(0, "6.0", false, None), Ok(Resync::Nothing));
        assert_eq!(
            f.answered(2, "6.0", false, None),
            Ok(Resync::Held),
            "another node"
        );
        assert_eq!(f.answered(2, "6.0", false, None), Ok(Resync::Nothing));
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
        assert_eq!(f.answered(0, "3.0", false, None), Ok(Resync::Held));
        assert_eq!(f.wait_ms(10_000), 10_000);
        // An answer it could not read is no answer: still no wait.
        f.failed();
        assert_eq!(f.answered(0, "x", false, None), Err(BadEventId));
        assert_eq!(f.wait_ms(10_000), 0);
    }

    /// A restarted `--memory` server (another log) answers from its start: the cursor is
    /// replaced, not kept as the larger number, and the host resyncs.
    #[test]
    fn an_answer_of_another_log_replaces_the_cursor_and_resyncs() {
        let mut f = Follow::from_entry(40, Some("aa"));
        assert_eq!(f.log(), Some("aa"));
        assert_eq!(
            f.answered(0, "45.0", false, Some("aa")),
            Ok(Resync::Nothing)
        );
        assert_eq!(after(&f).as_deref(), Some("45.0"));
        // The new log's events so far end at 3.1, below the old cursor.
        assert_eq!(f.answered(0, "3.1", true, Some("bb")), Ok(Resync::Held));
        assert_eq!(after(&f).as_deref(), Some("3.1"));
        assert_eq!(f.log(), Some("bb"));
        assert_eq!(f.answered(0, "4.0", false, Some("bb")), Ok(Resync::Nothing));
        assert_eq!(after(&f).as_deref(), Some("4.0"));
        // An answer that names no log (or the first log learnt) changes nothing of the kind.
        assert_eq!(f.answered(0, "5.0", false, None), Ok(Resync::Nothing));
        assert_eq!(f.log(), Some("bb"));
        let mut f = Follow::new();
        assert_eq!(f.log(), None);
        assert_eq!(f.answered(0, "9.0", false, Some("cc")), Ok(Resync::Nothing));
        assert_eq!((after(&f).as_deref(), f.log()), (Some("9.0"), Some("cc")));
        // A bad answer of another log moves nothing, not even the log.
        assert_eq!(f.answered(0, "x", false, Some("dd")), Err(BadEventId));
        assert_eq!(f.log(), Some("cc"));
    }

    /// A session opened on another log than the stream's: the stream reads that log from the
    /// session's entry, and the next answer resyncs; on the same log nothing moves.
    #[test]
    fn a_session_opened_on_another_log_moves_the_stream_to_it() {
        let mut f = Follow::from_entry(40, Some("aa"));
        assert_eq!(
            f.answered(0, "45.0", false, Some("aa")),
            Ok(Resync::Nothing)
        );
        f.opened(50, Some("aa"));
        f.opened(7, None);
        assert_eq!((after(&f).as_deref(), f.log()), (Some("45.0"), Some("aa")));
        assert_eq!(f.wait_ms(10_000), 10_000);
        f.opened(3, Some("bb"));
        assert_eq!(
            (after(&f).as_deref(), f.log()),
            (Some("2.4294967295"), Some("bb"))
        );
        assert_eq!(f.wait_ms(10_000), 0, "the resync's answer is not held");
        assert_eq!(f.answered(0, "3.0", false, Some("bb")), Ok(Resync::Held));
        assert_eq!(f.answered(0, "3.1", false, Some("bb")), Ok(Resync::Nothing));
        // A stream that knew no log learns the session's, and keeps its cursor.
        let mut f = Follow::new();
        assert_eq!(f.answered(0, "8.0", false, None), Ok(Resync::Nothing));
        f.opened(9, Some("cc"));
        assert_eq!((after(&f).as_deref(), f.log()), (Some("8.0"), Some("cc")));
        assert_eq!(f.answered(0, "9.0", false, Some("cc")), Ok(Resync::Nothing));
    }

    #[test]
    fn the_first_answer_is_no_reconnect_but_its_gap_is() {
        let mut f = Follow::new();
        assert_eq!(f.answered(1, "1.0", false, None), Ok(Resync::Nothing));
        let mut f = Follow::new();
        assert_eq!(f.answered(1, "1.0", true, None), Ok(Resync::Held));
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
