//! The friendly clients' decisions, written once for every host (sans-IO: inputs are a
//! verdict, an event or `now`; outputs say what to do next).
//!
//! Contract: nothing here reads a clock, calls the kernel or does I/O. A host (the Python
//! and Node clients through their bindings, the `klock` agent tools directly) feeds it what
//! happened and carries out the answer in its own idioms: its errors, messages, timers and
//! transport. What is here:
//! - [`Acquisition`]: what to do after an attempt that was not granted (sleep the kernel's
//!   backoff and ask again, ask again at once, or fail with `Died` or `Timeout`).
//! - [`Ledger`]: which nested lease blocks hold which leases, which leases a block's exit
//!   releases, and when each block's next heartbeat is due.
//! - [`failover`]: which server a remote call asks next, when it pauses, and when it gives up.
//! - [`watch`]: one event stream for every session of a remote client: where it resumes,
//!   when what it missed must be learnt again, and which leases an event ends.
//! - [`renewals`]: how many renewals one remote client sends at once.

mod acquire;
pub mod failover;
mod ledger;
pub mod renewals;
pub mod watch;

pub use acquire::{Acquisition, Failure, Next, Setback, TimedOut};
pub use ledger::{renew_at, BlockId, HeldLease, Ledger};
