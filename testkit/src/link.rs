//! A loopback TCP link for fault tests that the test can cut, delay, freeze and restore: the
//! Rust twin of `Link` in python/tests/server.py and `openLink` in node/test/server.mjs, and
//! (as `klock-testkit link`, src/link_process.rs) the one link every remote scenario runner
//! drives (tests/remote-scenarios/).
//!
//! Contract: [`Link::open`] forwards a free loopback port of its own ([`Link::port`]) to a
//! server's port. [`Link::cut`] takes the client's network away while the server stays up:
//! every open connection is closed (both ends, both directions, what it held dropped) and new
//! ones are closed at once. [`Link::delay`] delivers every chunk read afterwards, either way,
//! that long after it was read (a slow network: connections stay open). [`Link::freeze`]
//! delivers nothing, either way, while connections and new ones stay open: what is read is
//! held, as a network that silently stops carrying packets (no reset, so only a client's own
//! timeouts notice). [`Link::restore`] makes the link whole again: no cut, no freeze, no delay;
//! what a freeze held is delivered then, in order. [`Link::drop_next_requests`] closes each
//! connection open then, both ways, when the client next sends on it, before a byte of it
//! reaches the server: a server that closed an idle kept-alive connection just as a request
//! left, which the client could not have seen. It reaches whatever listens on the server's
//! port, so a server restarted on that port is reached again. Dropping it closes everything.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

/// A forwarder to one port (module contract).
pub struct Link {
    port: u16,
    shared: Arc<Shared>,
}

/// The link's state, and the pumps held by a freeze waiting on its change.
#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
struct State {
    cut: bool,
    closed: bool,
    frozen: bool,
    delay: Duration,
    /// Connections numbered from 0 as accepted: how many so far.
    accepted: u64,
    /// The connections numbered below this one drop what their client sends next.
    doomed_below: u64,
    /// Both ends of every forwarded connection, to close them on a cut.
    open: Vec<TcpStream>,
}

impl State {
    fn drop_all(&mut self) {
        for end in self.open.drain(..) {
            let _ = end.shutdown(Shutdown::Both);
        }
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // A pump thread that panicked holds no invariant the link needs: go on.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits while the link is frozen; then the delay to apply to a chunk, or `None` when the
    /// link was cut or closed meanwhile (the chunk is dropped with its connection).
    fn pass(&self) -> Option<Duration> {
        let mut state = self.state();
        while state.frozen && !state.cut && !state.closed {
            state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        (!state.cut && !state.closed).then_some(state.delay)
    }
}

impl Link {
    /// A link to `127.0.0.1:target`.
    ///
    /// # Errors
    /// No loopback port could be bound.
    pub fn open(target: u16) -> io::Result<Link> {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        let port = listener.local_addr()?.port();
        let shared = Arc::new(Shared::default());
        let state = Arc::clone(&shared);
        thread::spawn(move || accept(&listener, target, &state));
        Ok(Link { port, shared })
    }

    /// The port a client connects to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Closes every open connection and, until [`Link::restore`], every new one.
    pub fn cut(&self) {
        let mut state = self.shared.state();
        state.cut = true;
        state.drop_all();
        self.shared.changed.notify_all();
    }

    /// Delivers every chunk read from now on `by` after it was read, either way.
    pub fn delay(&self, by: Duration) {
        self.shared.state().delay = by;
    }

    /// Delivers nothing, either way, until [`Link::restore`] (or a cut, which drops it).
    pub fn freeze(&self) {
        self.shared.state().frozen = true;
    }

    /// Closes every connection open now when its client next sends on it, without
    /// forwarding what it sent; new connections are forwarded as usual.
    pub fn drop_next_requests(&self) {
        let mut state = self.shared.state();
        state.doomed_below = state.accepted;
    }

    /// Forwards again at once: ends a cut, a freeze (delivering what it held) and a delay.
    pub fn restore(&self) {
        let mut state = self.shared.state();
        state.cut = false;
        state.frozen = false;
        state.delay = Duration::ZERO;
        self.shared.changed.notify_all();
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        let mut state = self.shared.state();
        state.closed = true;
        state.cut = true;
        state.drop_all();
        self.shared.changed.notify_all();
        drop(state);
        // Wakes the accept loop, which sees `closed` and ends (closing the listener).
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn accept(listener: &TcpListener, target: u16, shared: &Arc<Shared>) {
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let mut state = shared.state();
        if state.closed {
            return;
        }
        if state.cut {
            let _ = conn.shutdown(Shutdown::Both);
            continue;
        }
        let Ok(upstream) = TcpStream::connect(("127.0.0.1", target)) else {
            let _ = conn.shutdown(Shutdown::Both);
            continue;
        };
        let ends = [&conn, &upstream].map(|s| s.try_clone());
        let [Ok(a), Ok(b)] = ends else {
            continue;
        };
        state.open.extend([a, b]);
        let number = state.accepted;
        state.accepted += 1;
        drop(state);
        for (from, to, upward) in [(&conn, &upstream, true), (&upstream, &conn, false)] {
            let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
                continue;
            };
            let shared = Arc::clone(shared);
            thread::spawn(move || {
                pump(&mut from, &mut to, upward.then_some(number), &shared);
                // One direction ended: the connection is over both ways.
                let _ = from.shutdown(Shutdown::Both);
                let _ = to.shutdown(Shutdown::Both);
            });
        }
    }
}

/// Forwards one direction of a connection until it ends, each chunk once the link lets it
/// pass (a freeze holds it, a delay defers it, a cut drops it). `client` is the connection's
/// number when this is what its client sends: that is not forwarded once the connection is
/// doomed ([`Link::drop_next_requests`]).
fn pump(from: &mut TcpStream, to: &mut TcpStream, client: Option<u64>, shared: &Shared) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let read_at = Instant::now();
        if client.is_some_and(|number| number < shared.state().doomed_below) {
            return;
        }
        let Some(delay) = shared.pass() else { return };
        if let Some(wait) = (read_at + delay).checked_duration_since(Instant::now()) {
            thread::sleep(wait);
        }
        if to.write_all(&buf[..n]).is_err() {
            return;
        }
    }
}
