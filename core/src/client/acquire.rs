//! What a friendly client does after an attempt to acquire that was not granted.
//!
//! Contract (docs/SPEC.md §5 and §8; `tests/client-scenarios/`):
//! - An acquisition has a budget, its timeout, counted on the host's clock from its first
//!   attempt: [`Acquisition::new`] turns it into a deadline; without a timeout there is no
//!   client-side limit ([`Acquisition::until`]`(None)`), or the kernel's default wait bounds
//!   each attempt ([`Acquisition::kernel_default`]). [`Acquisition::wait_ms`] is the wait
//!   each attempt asks the kernel for: what is left of the budget.
//! - [`Acquisition::after`] answers a [`Setback`] with what to do next ([`Next`]):
//!   - `WAIT_TIMEOUT`: ask again at once while the budget lasts (the kernel caps a wait, and
//!     the cap can be shorter than the client's budget), else [`TimedOut::WaitEnded`];
//!   - a DIE verdict to an attempt that asked for no wait (a zero budget, or none left):
//!     [`TimedOut::NoWait`], never slept, whatever else holds (the session's other leases,
//!     the budget, the backoff, the time): [`Acquisition::AFTER_NO_WAIT_DIE`], so a host may
//!     end a refused try-lock as soon as it sees the verdict, with no call, await or timer;
//!   - DIE, DIED, WOUNDED: while the session holds other leases, [`Failure::Died`] (it must
//!     roll back: waiting while holding is what deadlocks); else, when sleeping the kernel's
//!     `retry_after_ms` would pass the budget, [`TimedOut::RetryTooLate`] at once (no retry
//!     could come before the budget ends, so waiting it out would only delay the answer);
//!     else sleep exactly `retry_after_ms` and ask again. The backoff is the kernel's (§8),
//!     never shortened: a retry sooner than it would only be refused again.
//! - It reads no clock and does no I/O: every time is the host's `now`, in the kernel's
//!   milliseconds. The host keeps the messages, its language's errors and the I/O.

/// Why an attempt was not granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Setback {
    /// A DIE verdict to an attempt that asked the kernel for `asked_wait_ms` of waiting.
    Die {
        /// The kernel's backoff.
        retry_after_ms: u64,
        /// The wait the refused attempt asked for ([`Acquisition::wait_ms`] when it was sent;
        /// `None`: the kernel's default).
        asked_wait_ms: Option<u64>,
    },
    /// The attempt's ticket was withdrawn (a DIED event), or the session was wounded (a
    /// WOUNDED event): both count as a DIE.
    Withdrawn {
        /// The kernel's backoff.
        retry_after_ms: u64,
    },
    /// The ticket's wait ended (a WAIT_TIMEOUT event).
    WaitTimeout,
}

impl Setback {
    /// The kinds of verdict and event that are setbacks, as hosts name them.
    pub const KINDS: [&'static str; 4] = ["DIE", "DIED", "WOUNDED", "WAIT_TIMEOUT"];

    /// The setback a verdict or event of `kind` (one of [`Setback::KINDS`]) is, with its
    /// backoff and (a DIE) the wait its attempt asked for; `None` for any other kind.
    pub fn of_kind(kind: &str, retry_after_ms: u64, asked_wait_ms: Option<u64>) -> Option<Self> {
        Some(match kind {
            "DIE" => Setback::Die {
                retry_after_ms,
                asked_wait_ms,
            },
            "DIED" | "WOUNDED" => Setback::Withdrawn { retry_after_ms },
            "WAIT_TIMEOUT" => Setback::WaitTimeout,
            _ => return None,
        })
    }
}

/// What the host does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Ask again now.
    AskAgain,
    /// Sleep this long on the host's clock, then ask again.
    Sleep {
        /// Milliseconds: the kernel's `retry_after_ms`.
        ms: u64,
    },
    /// End the acquisition with this failure.
    Fail(Failure),
}

/// How an acquisition fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The session holds other leases: roll back (release everything), sleep the kernel's
    /// `retry_after_ms`, and ask again for everything at once.
    Died,
    /// The budget ran out, or could not last until the next retry.
    Timeout(TimedOut),
}

impl Next {
    /// Its name, for hosts that pass it on as text: `ask_again`, `sleep`, `died`,
    /// `timeout_no_wait`, `timeout_wait_ended` or `timeout_retry_too_late`.
    pub const fn name(&self) -> &'static str {
        match self {
            Next::AskAgain => "ask_again",
            Next::Sleep { .. } => "sleep",
            Next::Fail(Failure::Died) => "died",
            Next::Fail(Failure::Timeout(TimedOut::NoWait)) => "timeout_no_wait",
            Next::Fail(Failure::Timeout(TimedOut::WaitEnded)) => "timeout_wait_ended",
            Next::Fail(Failure::Timeout(TimedOut::RetryTooLate)) => "timeout_retry_too_late",
        }
    }

    /// How long to sleep before asking again (0 unless [`Next::Sleep`]).
    pub fn sleep_ms(&self) -> u64 {
        match self {
            Next::Sleep { ms } => *ms,
            _ => 0,
        }
    }
}

/// Why an acquisition timed out (the host's message says which).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimedOut {
    /// The refused attempt asked for no wait (a zero budget, or none left).
    NoWait,
    /// The budget ended while the ticket waited.
    WaitEnded,
    /// The kernel's backoff would end after the budget.
    RetryTooLate,
}

/// One acquisition's budget (see the module contract).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acquisition {
    /// The end of the budget (`None`: no client-side limit).
    deadline: Option<u64>,
    /// Without a deadline: each attempt waits the kernel's default wait, not "never".
    kernel_default: bool,
}

impl Acquisition {
    /// What follows a DIE verdict to an attempt that asked for no wait (`asked_wait_ms`
    /// `Some(0)`: a zero budget, or none left): [`Acquisition::after`]'s answer to it, which
    /// depends on nothing else.
    pub const AFTER_NO_WAIT_DIE: Next = Next::Fail(Failure::Timeout(TimedOut::NoWait));

    /// An acquisition whose first attempt is at `now`, with `timeout_ms` of budget (`None`:
    /// no client-side limit). A deadline saturates at the end of the clock.
    pub fn new(now: u64, timeout_ms: Option<u64>) -> Acquisition {
        Acquisition::until(timeout_ms.map(|t| now.saturating_add(t)))
    }

    /// An acquisition whose budget ends at `deadline` (`None`: no client-side limit).
    pub fn until(deadline: Option<u64>) -> Acquisition {
        Acquisition {
            deadline,
            kernel_default: false,
        }
    }

    /// An acquisition with no client-side limit whose attempts each wait the kernel's default
    /// wait (`default_wait_timeout_ms`), and ask again after it.
    pub fn kernel_default() -> Acquisition {
        Acquisition {
            deadline: None,
            kernel_default: true,
        }
    }

    /// The end of the budget (`None`: no client-side limit).
    pub fn deadline(&self) -> Option<u64> {
        self.deadline
    }

    /// The wait an attempt at `now` asks the kernel for: what is left of the budget;
    /// `u64::MAX` ("never", SPEC.md §2) without a limit; `None` for the kernel's default.
    pub fn wait_ms(&self, now: u64) -> Option<u64> {
        match self.deadline {
            Some(deadline) => Some(deadline.saturating_sub(now)),
            None if self.kernel_default => None,
            None => Some(u64::MAX),
        }
    }

    /// What to do after `setback` at `now`; `holds_others`: the session holds other leases
    /// (through any block of the client).
    pub fn after(&self, setback: Setback, holds_others: bool, now: u64) -> Next {
        let retry_after_ms = match setback {
            Setback::WaitTimeout => {
                return if self.deadline.is_some_and(|d| now >= d) {
                    Next::Fail(Failure::Timeout(TimedOut::WaitEnded))
                } else {
                    Next::AskAgain
                };
            }
            Setback::Die {
                asked_wait_ms: Some(0),
                ..
            } => return Acquisition::AFTER_NO_WAIT_DIE,
            Setback::Die { retry_after_ms, .. } | Setback::Withdrawn { retry_after_ms } => {
                retry_after_ms
            }
        };
        if holds_others {
            Next::Fail(Failure::Died)
        } else if self
            .deadline
            .is_some_and(|d| now.saturating_add(retry_after_ms) > d)
        {
            Next::Fail(Failure::Timeout(TimedOut::RetryTooLate))
        } else {
            Next::Sleep { ms: retry_after_ms }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIE: Setback = Setback::Die {
        retry_after_ms: 100,
        asked_wait_ms: Some(500),
    };
    const DIED: Setback = Setback::Withdrawn {
        retry_after_ms: 100,
    };

    #[test]
    fn hosts_name_setbacks_and_answers() {
        for kind in Setback::KINDS {
            assert!(Setback::of_kind(kind, 7, Some(0)).is_some(), "{kind}");
        }
        assert_eq!(
            Setback::of_kind("DIE", 7, Some(0)),
            Some(Setback::Die {
                retry_after_ms: 7,
                asked_wait_ms: Some(0)
            })
        );
        assert_eq!(
            Setback::of_kind("WOUNDED", 7, None),
            Some(Setback::Withdrawn { retry_after_ms: 7 })
        );
        assert_eq!(Setback::of_kind("GRANTED", 7, None), None);
        assert_eq!(Next::Sleep { ms: 9 }.name(), "sleep");
        assert_eq!(Next::Sleep { ms: 9 }.sleep_ms(), 9);
        assert_eq!(Next::Fail(Failure::Died).sleep_ms(), 0);
        assert_eq!(
            Next::Fail(Failure::Timeout(TimedOut::RetryTooLate)).name(),
            "timeout_retry_too_late"
        );
    }

    #[test]
    fn the_budget_is_counted_from_the_first_attempt() {
        let a = Acquisition::new(1_000, Some(500));
        assert_eq!(a.deadline(), Some(1_500));
        assert_eq!(a.wait_ms(1_000), Some(500));
        assert_eq!(a.wait_ms(1_400), Some(100));
        assert_eq!(a.wait_ms(2_000), Some(0));
        assert_eq!(Acquisition::until(Some(1_500)), a);
        let unlimited = Acquisition::new(1_000, None);
        assert_eq!(unlimited.deadline(), None);
        assert_eq!(unlimited.wait_ms(1_000), Some(u64::MAX));
        let kernel = Acquisition::kernel_default();
        assert_eq!((kernel.deadline(), kernel.wait_ms(1_000)), (None, None));
        assert_eq!(
            Acquisition::new(u64::MAX - 1, Some(10)).deadline(),
            Some(u64::MAX)
        );
    }

    #[test]
    fn a_die_or_a_withdrawal_sleeps_the_kernels_backoff_while_nothing_else_is_held() {
        let a = Acquisition::new(0, Some(500));
        for setback in [DIE, DIED] {
            assert_eq!(a.after(setback, false, 0), Next::Sleep { ms: 100 });
            // Exactly at the budget's end is still in it.
            assert_eq!(a.after(setback, false, 400), Next::Sleep { ms: 100 });
            assert_eq!(
                a.after(setback, false, 401),
                Next::Fail(Failure::Timeout(TimedOut::RetryTooLate))
            );
        }
        for unlimited in [Acquisition::new(0, None), Acquisition::kernel_default()] {
            assert_eq!(
                unlimited.after(DIE, false, u64::MAX),
                Next::Sleep { ms: 100 }
            );
        }
    }

    #[test]
    fn holding_other_leases_rolls_back_instead_of_retrying() {
        let a = Acquisition::new(0, None);
        assert_eq!(a.after(DIE, true, 0), Next::Fail(Failure::Died));
        assert_eq!(a.after(DIED, true, 0), Next::Fail(Failure::Died));
        // Even with the budget about to end: the rollback is what the caller must do.
        let short = Acquisition::new(0, Some(50));
        assert_eq!(short.after(DIE, true, 0), Next::Fail(Failure::Died));
    }

    #[test]
    fn a_die_to_an_attempt_that_asked_for_no_wait_is_a_timeout() {
        let a = Acquisition::new(0, Some(0));
        let refused = Setback::Die {
            retry_after_ms: 100,
            asked_wait_ms: a.wait_ms(0),
        };
        let no_wait = Next::Fail(Failure::Timeout(TimedOut::NoWait));
        assert_eq!(a.after(refused, false, 0), no_wait);
        // Checked before the rollback: the caller asked not to wait at all.
        assert_eq!(a.after(refused, true, 0), no_wait);
        // Whatever else holds: the constant hosts may act on without asking.
        assert_eq!(Acquisition::AFTER_NO_WAIT_DIE, no_wait);
        assert_eq!(Acquisition::AFTER_NO_WAIT_DIE.name(), "timeout_no_wait");
        for acquisition in [
            a,
            Acquisition::new(0, Some(500)),
            Acquisition::new(0, None),
            Acquisition::kernel_default(),
        ] {
            for (retry_after_ms, holds, now) in
                [(0, false, 0), (100, true, 499), (u64::MAX, false, u64::MAX)]
            {
                let refused = Setback::Die {
                    retry_after_ms,
                    asked_wait_ms: Some(0),
                };
                assert_eq!(acquisition.after(refused, holds, now), no_wait);
            }
        }
    }

    #[test]
    fn a_wait_timeout_asks_again_until_the_budget_ends() {
        let a = Acquisition::new(0, Some(500));
        assert_eq!(a.after(Setback::WaitTimeout, false, 499), Next::AskAgain);
        assert_eq!(
            a.after(Setback::WaitTimeout, false, 500),
            Next::Fail(Failure::Timeout(TimedOut::WaitEnded))
        );
        for unlimited in [Acquisition::new(0, None), Acquisition::kernel_default()] {
            assert_eq!(
                unlimited.after(Setback::WaitTimeout, true, u64::MAX),
                Next::AskAgain
            );
        }
    }
}
