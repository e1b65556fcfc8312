//! A cuttable loopback TCP link for fault tests: the Rust twin of `Link` in
//! python/tests/server.py and `openLink` in node/test/server.mjs.
//!
//! Contract: [`Link::open`] forwards a free loopback port of its own ([`Link::port`]) to a
//! server's port. [`Link::cut`] takes the client's network away while the server stays up:
//! every open connection is closed (both ends, both directions) and new ones are closed at
//! once; [`Link::restore`] gives it back. [`Link::drop_next_requests`] closes each connection
//! open then, both ways, when the client next sends on it, before a byte of it reaches the
//! server: a server that closed an idle kept-alive connection just as a request left, which
//! the client could not have seen. It reaches whatever listens on the server's port, so a
//! server restarted on that port is reached again. Dropping it closes everything.

use std::io;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;

/// A forwarder to one port (module contract).
pub struct Link {
    port: u16,
    shared: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    cut: bool,
    closed: bool,
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

impl Link {
    /// A link to `127.0.0.1:target`.
    ///
    /// # Errors
    /// No loopback port could be bound.
    pub fn open(target: u16) -> io::Result<Link> {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        let port = listener.local_addr()?.port();
        let shared = Arc::new(Mutex::new(State::default()));
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
        let mut state = self.state();
        state.cut = true;
        state.drop_all();
    }

    /// Closes every connection open now when its client next sends on it, without
    /// forwarding what it sent; new connections are forwarded as usual.
    pub fn drop_next_requests(&self) {
        let mut state = self.state();
        state.doomed_below = state.accepted;
    }

    /// Forwards new connections again.
    pub fn restore(&self) {
        self.state().cut = false;
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A pump thread that panicked holds no invariant the link needs: go on.
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        let mut state = self.state();
        state.closed = true;
        state.cut = true;
        state.drop_all();
        drop(state);
        // Wakes the accept loop, which sees `closed` and ends (closing the listener).
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn accept(listener: &TcpListener, target: u16, shared: &Arc<Mutex<State>>) {
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let mut state = shared.lock().unwrap_or_else(|e| e.into_inner());
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
            let state = Arc::clone(shared);
            thread::spawn(move || {
                if upward {
                    pump_up(&mut from, &mut to, number, &state);
                } else {
                    let _ = io::copy(&mut from, &mut to);
                }
                // One direction ended: the connection is over both ways.
                let _ = from.shutdown(Shutdown::Both);
                let _ = to.shutdown(Shutdown::Both);
            });
        }
    }
}

/// Forwards what the client of connection `number` sends until it ends, or until it sends
/// while the connection is doomed ([`Link::drop_next_requests`]): that is not forwarded.
fn pump_up(from: &mut TcpStream, to: &mut TcpStream, number: u64, shared: &Mutex<State>) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match io::Read::read(from, &mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let doomed = number
            < shared
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .doomed_below;
        if doomed || io::Write::write_all(to, &buf[..n]).is_err() {
            return;
        }
    }
}
