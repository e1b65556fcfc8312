//! One event stream per client and namespace: the reader of a namespace's watch that carries
//! the events of every session the client has there.
//!
//! Contract:
//! - A client (a [`Transport`] and its clones) reads at most one stream per namespace: the
//!   namespace's watch (`GET /v1/ns/{ns}/watch?after=&wait_ms=`, a JSON long-poll, as the
//!   Python and Node clients read it), so the server counts one long-poll against the token's
//!   limit however many sessions the client holds. [`Watch::join`] starts it with the first
//!   session of the namespace; it stops when the last session's [`Subscription`] is dropped
//!   (the client then holds no stream), and starts again with the next session.
//! - *Nothing is missed before the first poll*: a new stream reads from the log entry that
//!   opened (or resumed) the session that started it (the answer's `Klock-Index`; from the
//!   oldest kept event if the server did not say), so every event of that session, and of
//!   every session joined later, is at or after its cursor, and older events (others') are
//!   not read. It costs no request before the session is handed out (Python and Node place
//!   their watch with a read first). A session that joins a running stream needs nothing:
//!   its events begin with its first acquire, sent after it joined; unless it was opened on
//!   another log than the stream's (a `--memory` server restarted on its port): then the
//!   stream moves to read that log from the session's entry ([`Follow::opened`]).
//! - Each poll is one call of the transport, so it fails over as every call does (the core's
//!   `failover` rules) and resumes after the last event id taken in (numbered alike by every
//!   node). Each event goes to the [`Listener`] of the session it names (its keeper); events
//!   of sessions not joined are skipped. Where the stream resumes, and when events may have
//!   been missed (an answer after a failed poll, from another node than the last, or with a
//!   `gap`), are the core's rules ([`klock_core::client::watch::Follow`]); then every
//!   listener is told to resync ([`Listener::resync`]: its keeper renews every held lease at
//!   once, and the renewal says which the server no longer has).
//! - A poll that fails (the servers stayed away past the call's budget, a refusal, an answer
//!   this client cannot read) is asked again after [`PAUSE`]; meanwhile the keepers' local
//!   deadlines decide what an absent server costs. A poll whose call was retried within its
//!   budget (a cut connection) and answered by the same node without a `gap` missed nothing
//!   (that node kept every event after the cursor), so only a call that gave up counts as a
//!   failed poll.

use crate::routes::{self, EventBatch};
use crate::transport::Transport;
use klock_core::client::watch::{Follow, Resync};
use klock_core::Event;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::task::JoinHandle;

/// How long one poll asks the server to hold it for an event (Python's and Node's
/// `WATCH_WAIT_MS`): the server answers as soon as one comes.
pub const WAIT: Duration = Duration::from_secs(10);

/// How long the reader pauses after a failed poll before it asks again (Python's
/// `_READER_PAUSE_S`).
pub const PAUSE: Duration = Duration::from_secs(1);

/// What a watch hands a session's events to: its keeper.
pub trait Listener: Send + Sync {
    /// An event of the listener's session, in the stream's order.
    fn event(&self, event: &Event);
    /// Events of the session may have been missed: learn again what the server holds.
    fn resync(&self);
}

/// Session id -> its listener.
type Listeners = Mutex<HashMap<u64, Weak<dyn Listener>>>;

/// The running watches of one client, by namespace (shared by the transport's clones).
#[derive(Clone, Default)]
pub struct Watches(Arc<Mutex<HashMap<String, Weak<Watch>>>>);

/// A client's reader of one namespace's events (module contract).
pub struct Watch {
    listeners: Arc<Listeners>,
    /// Where the stream resumes: the reader's, and a joining session's on another log.
    follow: Arc<Mutex<Follow>>,
    task: JoinHandle<()>,
}

/// A session's place on its namespace's watch: dropping it leaves, and stops the watch with
/// the last one.
pub struct Subscription {
    watch: Arc<Watch>,
    session: u64,
}

impl Watch {
    /// Routes the events of `session` (of namespace `ns`, opened or resumed by log entry
    /// `started_at` of log `log`) to `listener` from now on, starting the client's watch of
    /// `ns` if none runs.
    pub fn join(
        transport: &Transport,
        ns: &str,
        (session, started_at, log): (u64, Option<u64>, Option<&str>),
        listener: Weak<dyn Listener>,
    ) -> Subscription {
        let watch = {
            let mut running = transport.watches().0.lock().expect("watches lock");
            match running.get(ns).and_then(Weak::upgrade) {
                Some(watch) => {
                    if let Some(index) = started_at {
                        lock(&watch.follow).opened(index, log);
                    }
                    watch
                }
                None => {
                    let follow =
                        started_at.map_or_else(Follow::new, |index| Follow::from_entry(index, log));
                    let watch = Arc::new(Watch::start(transport.clone(), ns.to_owned(), follow));
                    running.insert(ns.to_owned(), Arc::downgrade(&watch));
                    watch
                }
            }
        };
        watch
            .listeners
            .lock()
            .expect("listeners lock")
            .insert(session, listener);
        Subscription { watch, session }
    }

    fn start(transport: Transport, ns: String, follow: Follow) -> Watch {
        let listeners = Arc::new(Listeners::default());
        let follow = Arc::new(Mutex::new(follow));
        let task = tokio::spawn(read(transport, ns, Arc::clone(&follow), listeners.clone()));
        Watch {
            listeners,
            follow,
            task,
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut listeners = self.watch.listeners.lock().expect("listeners lock");
        listeners.remove(&self.session);
    }
}

/// Polls the watch until aborted (module contract).
async fn read(
    transport: Transport,
    ns: String,
    follow: Arc<Mutex<Follow>>,
    listeners: Arc<Listeners>,
) {
    loop {
        let (after, log, wait) = {
            let follow = lock(&follow);
            let after = follow.after().map(|after| after.to_string());
            let wait = follow.wait_ms(WAIT.as_millis() as u64);
            (after, follow.log().map(str::to_owned), wait)
        };
        let wait = Duration::from_millis(wait);
        let answer = routes::watch(&transport, &ns, after.as_deref(), log.as_deref(), wait).await;
        let taken = answer.ok().and_then(|(batch, node)| {
            let resync = lock(&follow)
                .answered(node, &batch.next, batch.gap, batch.log.as_deref())
                .ok()?;
            Some((batch, resync))
        });
        let Some((batch, resync)) = taken else {
            lock(&follow).failed();
            tokio::time::sleep(PAUSE).await;
            continue;
        };
        route(&listeners, &batch);
        if resync == Resync::Held {
            for listener in every(&listeners) {
                listener.resync();
            }
        }
    }
}

/// Hands each event of `batch`, in order, to the listener of its session.
fn route(listeners: &Listeners, batch: &EventBatch) {
    for stamped in &batch.events {
        let session = stamped.event.session().0;
        // Upgraded under the lock, called outside it (a listener may leave meanwhile).
        let listener = {
            let listeners = listeners.lock().expect("listeners lock");
            listeners.get(&session).and_then(Weak::upgrade)
        };
        if let Some(listener) = listener {
            listener.event(&stamped.event);
        }
    }
}

/// Every live listener (to be called outside the lock).
fn every(listeners: &Listeners) -> Vec<Arc<dyn Listener>> {
    let listeners = listeners.lock().expect("listeners lock");
    listeners.values().filter_map(Weak::upgrade).collect()
}

/// The stream's cursor (each use leaves it whole, so a poisoned lock is taken as it is).
fn lock(follow: &Mutex<Follow>) -> std::sync::MutexGuard<'_, Follow> {
    follow.lock().unwrap_or_else(|e| e.into_inner())
}
