//! The friendly clients' decisions, written once for every host (sans-IO: inputs are a
//! verdict, an event or `now`; outputs say what to do next).
//!
//! Contract: nothing here reads a clock, calls the kernel or does I/O. A host (the Python
//! and Node clients through their bindings, the `klock` agent tools directly) feeds it what
//! happened and carries out the answer in its own idioms: its errors, messages, timers and
//! transport. What is here:
//! - [`Acquisition`]: what to do after an attempt that was not granted (sleep the kernel's
//!   backoff and ask again, ask again at once, or fail with `Died` or `Timeout`).
//!
//! The ledger of nested lease blocks and their heartbeats is [`crate::Ledger`].

mod acquire;

pub use acquire::{Acquisition, Failure, Next, Setback, TimedOut};
