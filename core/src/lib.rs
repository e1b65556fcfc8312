//! # klock-core
//!
//! A `no_std`, clock-injected coordination kernel for multi-agent systems: sessions, leases
//! with TTLs and heartbeats, fencing tokens, intent conflicts over hierarchical resources,
//! FIFO wait queues and deadlock prevention (Wait-Die, Wound-Wait or FIFO lanes) or detection
//! (`detect`). The normative behaviour is the project's SPEC (`docs/SPEC.md`, revision 5).
//!
//! ## The drive loop
//!
//! The kernel never reads a clock and never does I/O. The host:
//! 1. calls operations ([`Kernel::open_session`], [`Kernel::acquire`], [`Kernel::release`],
//!    ...) with its own `now` in milliseconds and reads their direct answers;
//! 2. drains [`Kernel::poll_event`] after every call (grants made by someone else's release,
//!    expiries, timeouts, wounds, idle closes, and every immediate grant and release, so that
//!    the events alone tell every lease's life);
//! 3. arms one timer for [`Kernel::next_deadline`] and calls [`Kernel::advance`] when it
//!    fires (early or spurious calls are harmless).
//!
//! ```
//! use klock_core::{AcquireOptions, Config, Event, Kernel, Verdict};
//! let mut k = Kernel::new(Config::default()).unwrap();
//! let a = k.open_session("alice", "default", 0).unwrap().session_id;
//! let v = k.acquire(a, &["MUTATES FILE:/src/a.ts"], AcquireOptions::default(), 10).unwrap();
//! let Verdict::Granted { leases } = v else { panic!() };
//! assert_eq!(leases[0].expires_at, 60_010);
//! assert!(matches!(k.poll_event(), Some(Event::Acquired { .. })));
//! assert_eq!(k.next_deadline(), Some(60_010));
//! k.advance(60_010);
//! assert!(matches!(k.poll_event(), Some(Event::LeaseExpired { .. })));
//! ```
//!
//! A lease alone is not mutual exclusion when a holder can pause (GC, swap, a stopped VM)
//! past its expiry: the protected resource must check the lease's `fence` and reject writes
//! carrying a fence smaller than the largest it has seen.

#![no_std]
#![warn(missing_docs)]
#![forbid(unsafe_code)]

extern crate alloc;

mod backoff;
pub mod client;
mod command;
mod config;
mod deadlines;
mod error;
mod kernel;
mod predicate;
mod resource;
mod stats;
mod tree;
mod types;

pub use backoff::{retry_after_ms, Jitter};
pub use client::{renew_at, BlockId, HeldLease, Ledger};
pub use command::{Command, Output, Replayed};
pub use config::{Config, Policy};
pub use error::{Error, ErrorCode};
pub use kernel::acquire::{parse_intent, MAX_MANIFEST_INTENTS};
pub use kernel::sessions::{check_namespace, is_unprintable, MAX_NAME_BYTES};
pub use kernel::{
    Kernel, KernelState, LeaseState, SessionState, SessionView, Snapshot, StateError,
    TicketIntentState, TicketState, TicketView, ENDED_MEMORY_AFTER_TRIM, ENDED_MEMORY_PER_KERNEL,
    ENDED_MEMORY_PER_SESSION, STATE_VERSION,
};
pub use predicate::Predicate;
pub use resource::{ResourceName, MAX_RESOURCE_BYTES};
pub use stats::{Contention, Counters, GhostAgent, Stats, TOP_CAPACITY};
pub use types::*;
