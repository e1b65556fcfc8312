//! How many renewals one remote client sends at once.
//!
//! Contract: a client (one process's connection to a server or cluster, however many sessions
//! it holds) has at most [`MAX_RENEWALS_IN_FLIGHT`] heartbeats in flight at a time; a renewal
//! due while that many are out waits for one of them to end, then goes. Each heartbeat takes a
//! connection of its own (one request per connection at a time), so without the bound a
//! resync (the watch's `Resync::Held`, which makes every keeper renew at once) or a server's
//! return after an absence sends one request per session at the same instant: 2,000 sessions
//! make 2,000 connections from one address, far past a server's connections per peer (256 by
//! default). The server then closes the newest connections before reading their requests
//! (the least recently used idle ones, to make room) or refuses them, and the client retries.
//! Measured with 2,000 sessions against a durable debug server after a restart
//! (client/tests/scale.rs): unbounded, the burst made 3,312 connections, 2,086 of them closed
//! at the cap; bounded, 37 connections, none closed, and the 2,000 renewals took 1.6 s.
//!
//! The bound leaves room under the per-peer cap for the client's other requests (its watch,
//! its acquires, other processes on the same host), and is far above what renewals need: a
//! heartbeat is one short request, so 32 in flight carry thousands of renewals a second. A
//! renewal's local deadline counts while it waits for its turn (its send time is taken after
//! the wait, so the deadline is never late), and a renewal that waited past it is lost as any
//! late one.

/// Heartbeats one client sends at once, at most (module contract).
pub const MAX_RENEWALS_IN_FLIGHT: usize = 32;
