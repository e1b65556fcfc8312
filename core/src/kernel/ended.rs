//! The kernel's memory of ended leases and tickets, and its two bounds.
//!
//! Contract:
//! - A live session remembers its most recent [`ENDED_MEMORY_PER_SESSION`] ended leases and,
//!   separately, as many ended tickets: within that window release is idempotent and
//!   reconcile, heartbeat and cancel_wait answer exactly; an id that falls out of it is
//!   forgotten (`UNKNOWN`).
//! - The kernel as a whole remembers at most [`ENDED_MEMORY_PER_KERNEL`] ended leases and as
//!   many ended tickets. When an operation ends above that, the kernel forgets down to
//!   [`ENDED_MEMORY_AFTER_TRIM`] by cutting the longest windows first: every session keeps
//!   its newest `L` ended ids at most, `L` the largest level at which the total fits. A
//!   session remembering no more than the fair share (`ENDED_MEMORY_AFTER_TRIM` over the live
//!   sessions) loses nothing, so a fleet of busy sessions cannot make the kernel forget the
//!   few recent ends of a quiet one first.
//! - Which ids are forgotten follows from the state alone (the windows, not the order in
//!   which sessions were visited), so a kernel restored from a snapshot, or a replica applying
//!   the same log, forgets the same ids.
//!
//! Why two bounds: the per-session window bounds one long-lived session; without the kernel
//! bound, a token's default quota of 10,000 sessions could make a server remember about 80
//! million ended ids (gigabytes of memory and of every snapshot).

use super::{Kernel, LeaseEnd, Map, Session};
use crate::types::{LeaseId, SessionId, TicketId};
use alloc::{collections::VecDeque, vec::Vec};
use core::hash::Hash;

/// How many ended leases, and separately ended tickets, a session remembers. Within that
/// window release stays idempotent and reconcile, heartbeat and cancel_wait answer exactly
/// (RELEASED / EXPIRED / NOT_OWNER); beyond it, and once the session closes, an ended id is
/// forgotten (`UNKNOWN`). This bounds the memory of a long-lived session.
pub const ENDED_MEMORY_PER_SESSION: usize = 4096;

/// How many ended leases, and separately ended tickets, the whole kernel remembers at most
/// once an operation has ended (see the module docs). 2^18: a few megabytes of memory and of
/// a snapshot, room for 64 sessions with full windows.
pub const ENDED_MEMORY_PER_KERNEL: usize = 1 << 18;

/// What a kernel over [`ENDED_MEMORY_PER_KERNEL`] forgets down to: three quarters of it, so
/// a trim (whose work grows with the number of sessions) happens at most once per quarter of
/// the bound's worth of ends.
pub const ENDED_MEMORY_AFTER_TRIM: usize = ENDED_MEMORY_PER_KERNEL / 4 * 3;

impl Kernel {
    /// Remembers an ended lease of `owner` (its record `window`), forgetting its oldest
    /// beyond the window. Over the fields it needs, for a caller holding the session record.
    pub(super) fn remember_ended_lease(
        ended_leases: &mut Map<LeaseId, (SessionId, LeaseEnd)>,
        window: &mut VecDeque<LeaseId>,
        owner: SessionId,
        id: LeaseId,
        end: LeaseEnd,
    ) {
        ended_leases.insert(id, (owner, end));
        window.push_back(id);
        if window.len() > ENDED_MEMORY_PER_SESSION {
            let oldest = window.pop_front().expect("over the window, so not empty");
            ended_leases.remove(&oldest);
        }
    }

    /// Remembers a ticket of `session` that stopped waiting, forgetting its oldest beyond
    /// the window.
    pub(super) fn remember_ended_ticket(&mut self, session: SessionId, ticket: TicketId) {
        self.ended_tickets.insert(ticket, session);
        let ended = &mut self.session_mut(session).ended_tickets;
        ended.push_back(ticket);
        if ended.len() > ENDED_MEMORY_PER_SESSION {
            let oldest = ended.pop_front().expect("over the window, so not empty");
            self.ended_tickets.remove(&oldest);
        }
    }

    /// Applies the kernel-wide bound at the end of an operation (see the module docs). Only
    /// the end counts, so a session closed by the same operation frees its share first. A
    /// cut window also gives back its capacity: otherwise every session that once filled its
    /// window would keep room for all of it, and the bound would bound nothing.
    pub(super) fn forget_ended_over_bound(&mut self) {
        cut_to_bound(&mut self.sessions, &mut self.ended_leases, |s| {
            &mut s.ended_leases
        });
        cut_to_bound(&mut self.sessions, &mut self.ended_tickets, |s| {
            &mut s.ended_tickets
        });
    }
}

/// Cuts every session's `window` of one kind of ended id to the water level when the kernel
/// remembers more than [`ENDED_MEMORY_PER_KERNEL`] of that kind (`remembered`).
fn cut_to_bound<Id: Copy + Eq + Hash, V>(
    sessions: &mut Map<SessionId, Session>,
    remembered: &mut Map<Id, V>,
    window: impl Fn(&mut Session) -> &mut VecDeque<Id>,
) {
    if remembered.len() <= ENDED_MEMORY_PER_KERNEL {
        return;
    }
    let lengths: Vec<usize> = sessions.values_mut().map(|s| window(s).len()).collect();
    let level = water_level(&lengths);
    for session in sessions.values_mut() {
        let window = window(session);
        if window.len() > level {
            for oldest in window.drain(..window.len() - level) {
                remembered.remove(&oldest);
            }
            window.shrink_to_fit();
        }
    }
}

/// The largest level `L` such that windows of `lengths`, each cut to at most `L`, hold at
/// most [`ENDED_MEMORY_AFTER_TRIM`] ids in total. Level 0 always fits, and a window never
/// exceeds [`ENDED_MEMORY_PER_SESSION`], so a binary search over that range finds it in a
/// dozen passes over the sessions.
fn water_level(lengths: &[usize]) -> usize {
    let fits = |level: usize| {
        lengths.iter().map(|&len| len.min(level)).sum::<usize>() <= ENDED_MEMORY_AFTER_TRIM
    };
    // Invariant: `low` fits, and nothing above `high` does.
    let (mut low, mut high) = (0, ENDED_MEMORY_PER_SESSION);
    while low < high {
        let middle = low + (high - low).div_ceil(2);
        match fits(middle) {
            true => low = middle,
            false => high = middle - 1,
        }
    }
    low
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_water_level_is_the_largest_that_fits() {
        let target = ENDED_MEMORY_AFTER_TRIM;
        // Everything fits uncut: the level is the window itself.
        assert_eq!(water_level(&[10, 20]), ENDED_MEMORY_PER_SESSION);
        // 64 full windows and a short one: the short one is below the level and keeps all.
        let mut lengths = alloc::vec![ENDED_MEMORY_PER_SESSION; 64];
        lengths.push(10);
        let level = water_level(&lengths);
        assert_eq!(level, (target - 10) / 64);
        let total = |l: usize| lengths.iter().map(|&n| n.min(l)).sum::<usize>();
        assert!(total(level) <= target && total(level + 1) > target);
        // More sessions than the target: nothing can be kept.
        assert_eq!(water_level(&alloc::vec![2; target + 1]), 0);
    }
}
