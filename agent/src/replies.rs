//! What the model reads about its requests: granted, queued, refused, resolved, lost.
//!
//! Contract: each text starts with its outcome in capitals (GRANTED, WAIT, DIE, TIMED_OUT,
//! DIED, FAILED, WITHDRAWN, LOST), names who holds what (agent, session, predicate, resource, lease,
//! fence), and ends with what to do next in terms of the tools.

use super::sidecar::QUEUE_MS;
use klock_client::describe::describe_leases;
use klock_client::keeper::Loss;
use klock_core::Lease;
use klock_mcp::Reply;
use std::fmt::Write;

/// How a followed ticket ended.
#[derive(Clone, Debug)]
pub enum End {
    Granted(Vec<Lease>),
    TimedOut,
    Died(u64),
    /// The follower could not reach the server, or a granted lease was gone at once.
    Failed(String),
    /// No longer queued, though it did not end on its own: by whom or what (a
    /// `klock_release` with `all: true`, the session ending).
    Withdrawn(&'static str),
}

/// Why a ticket was withdrawn by `klock_release {all: true}`.
pub const WITHDRAWN_BY_RELEASE: &str = "a klock_release with all: true withdrew this request";
/// Why a ticket was withdrawn when the server forgot the session.
pub const WITHDRAWN_WITH_SESSION: &str =
    "your Klock session ended on the server, and this request with it";

/// A failed call: the model sees a tool error.
pub fn failed(text: String) -> Reply {
    Reply { text, failed: true }
}

/// Leases granted to this agent.
pub fn granted(leases: &[Lease]) -> Reply {
    Reply {
        text: format!(
            "GRANTED: you hold {}. Edit now; the leases are renewed for you until you call klock_release (do so when done). If you write to a store that checks fences, pass the fence.",
            describe_leases(leases)
        ),
        failed: false,
    }
}

/// Queued behind `blockers`, with the ticket to await.
pub fn waiting(ticket: u64, blockers: &str) -> Reply {
    Reply {
        text: format!(
            "WAIT: held by {blockers}. You are queued (ticket {ticket}) but hold nothing new: do not edit it yet. Call klock_await with ticket {ticket} to keep waiting (your place is kept for {} minutes), do other work meanwhile, or klock_release with all: true to give up.",
            QUEUE_MS / 60_000
        ),
        failed: false,
    }
}

/// Refused by Wait-Die; what to release first if anything is held.
pub fn died(retry_after_ms: u64, blockers: &str, held: &[Lease]) -> Reply {
    let mut text = format!(
        "DIE: not granted, nothing of this request is held: {blockers} has priority over you. "
    );
    if held.is_empty() {
        let _ = write!(text, "Call klock_acquire again after {retry_after_ms} ms.");
    } else {
        let _ = write!(
            text,
            "You still hold {}: to avoid a deadlock, release everything (klock_release with all: true), then after {retry_after_ms} ms ask again for everything you need in one klock_acquire.",
            describe_leases(held)
        );
    }
    Reply {
        text,
        failed: false,
    }
}

/// How a followed ticket ended, as a line.
pub fn end_text(end: &End) -> String {
    match end {
        End::Granted(leases) => format!(
            "GRANTED: you hold {}; renewed for you until klock_release.",
            describe_leases(leases)
        ),
        End::TimedOut => {
            String::from("TIMED_OUT: the wait ran out; nothing held. Call klock_acquire again.")
        }
        End::Died(ms) => {
            format!("DIED: withdrawn, nothing held. Call klock_acquire again after {ms} ms.")
        }
        End::Failed(why) => format!("FAILED: {why}. Call klock_acquire again."),
        End::Withdrawn(why) => format!(
            "WITHDRAWN: {why}; it is no longer queued and nothing of it is held. Call klock_acquire again if you still need it."
        ),
    }
}

/// How a followed ticket ended, as the answer of the call that waited for it.
pub fn ended(ticket: u64, end: &End) -> Reply {
    match end {
        End::Granted(leases) => granted(leases),
        other => Reply {
            text: format!("Ticket {ticket}: {}", end_text(other)),
            failed: false,
        },
    }
}

/// Leases lost without a release.
pub fn lost(loss: &Loss) -> String {
    format!(
        "LOST {} ({}): stop editing it; klock_acquire it again before continuing.",
        describe_leases(&loss.leases),
        loss.why()
    )
}
