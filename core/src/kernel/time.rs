//! Settlement of due deadlines (docs/SPEC.md §2).
//!
//! Contract: [`Kernel::settle`] processes every deadline at or before `now` in time order, as
//! if the kernel had been called at each: at one instant, all lease expiries (oldest lease
//! first) and then the grants they unblock; then each wait timeout in ticket order followed
//! by the grants it unblocks; then idle closes. Grants made while settling instant `t` are
//! dated `t`. Afterwards the clock is `max(clock, now)`: time never goes back.

use super::{Kernel, LeaseEnd};
use crate::deadlines::DeadlineKind;
use crate::types::{CloseReason, Event, LeaseId, SessionId, TicketId};

impl Kernel {
    pub(super) fn settle(&mut self, now: u64) {
        let now = now.max(self.clock);
        while let Some((at, kind, id)) = self.deadlines.peek_due(now) {
            self.clock = at;
            match kind {
                DeadlineKind::LeaseExpiry => {
                    // Every expiry of this instant first, oldest lease first (index order).
                    let mut next = Some(id);
                    while let Some(lease) = next {
                        self.end_lease(LeaseId(lease), LeaseEnd::Expired);
                        next = self
                            .deadlines
                            .peek_due(at)
                            .filter(|&(t, k, _)| t == at && k == DeadlineKind::LeaseExpiry)
                            .map(|(_, _, id)| id);
                    }
                }
                DeadlineKind::WaitTimeout => {
                    let ticket = TicketId(id);
                    let record = self.withdraw_ticket(ticket);
                    self.counters.timed_out += 1;
                    let agent = &self.sessions[&record.session].agent_id;
                    self.ghosts
                        .bump_with(|a| a == agent, || agent.clone(), 1, 1);
                    self.events.push_back(Event::WaitTimeout {
                        ticket,
                        session: record.session,
                    });
                }
                DeadlineKind::IdleClose => {
                    let session = SessionId(id);
                    self.remove_session(session);
                    self.counters.idle_closed += 1;
                    self.events.push_back(Event::SessionClosed {
                        session,
                        reason: CloseReason::Idle,
                    });
                }
            }
            self.after_frees();
        }
        self.clock = now;
    }

    /// The earliest pending deadline (possibly already past if no call settled it yet).
    pub fn next_deadline(&self) -> Option<u64> {
        self.deadlines.next()
    }

    /// Settles everything due at or before `now` (docs/SPEC.md §2). Calling early is harmless.
    pub fn advance(&mut self, now: u64) {
        self.operation(now, |_| ());
    }
}
