//! Keeps a session's leases alive in the background and says when one is lost.
//!
//! Contract: [`Keeper::start`] runs one heartbeat task for a session (on the tokio runtime it
//! is called in) and joins the client's event stream of the session's namespace
//! ([`crate::watch`]: one stream per client and namespace, whatever the number of sessions).
//! Each lease handed to [`Keeper::hold`] has a local
//! deadline: the send time of the last request that granted or renewed it, plus its TTL, on
//! the monotonic clock; the server cannot have let it expire earlier. The heartbeat task
//! renews every held lease together when the first is due, a third of the way to its local
//! deadline (the core's [`klock_core::renew_at`]: two more renewals may fail before it ends),
//! and at once when the stream may have missed events (a reconnect, another node, a gap: the
//! core's `watch` rules); a renewal keeps the server's new `expires_at` in the lease
//! ([`Keeper::held`]). A renewal waits for its turn among the client's few in flight (the
//! core's `renewals` rule: a resync renews every session at once); its local deadline counts
//! meanwhile. A lease is reported lost once, on the returned channel, when a
//! heartbeat answers anything but OK for it or is refused (401: the session was resumed
//! elsewhere, a new token), an event of the stream ends it (it expired, was wounded or its
//! session closed: the core's `watch::ends`), or its local deadline passes without a renewal
//! (a server that does not answer cannot keep a lease alive). A lost lease is no longer held.
//! Dropping the keeper stops its task and leaves the stream (the last session of the
//! namespace stops it).

use crate::routes::Session;
use crate::transport::Failure;
use crate::watch::{Listener, Subscription, Watch};
use klock_core::client::watch::{ends, Ended, LOST_AT_LOCAL_DEADLINE};
use klock_core::{renew_at, Event, Lease};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Leases that ended without their holder releasing them.
#[derive(Clone, Debug)]
pub struct Loss {
    pub leases: Vec<Lease>,
    /// The kernel's name for why (`LEASE_EXPIRED`, `WOUNDED`, `SESSION_CLOSED`,
    /// `LEASE_RELEASED`, ...), or `UNAUTHORIZED` when a renewal was refused. A lease whose
    /// local deadline passed without a renewal is `LEASE_EXPIRED` too, the core's
    /// [`LOST_AT_LOCAL_DEADLINE`], as in every driver.
    pub reason: String,
}

impl Loss {
    /// Why, in words.
    pub fn why(&self) -> String {
        match self.reason.as_str() {
            LOST_AT_LOCAL_DEADLINE => String::from(
                "no renewal reached the server before the lease's TTL ran out (the server said so, or no renewal was answered by the local deadline): it expired, or the server lets it expire",
            ),
            "WOUNDED" => String::from(
                "the server says WOUNDED: an older agent needed it and took it from you",
            ),
            "UNAUTHORIZED" => String::from(
                "the server refused the renewal (401): another process resumed this session, which holds it now, or the bearer token is no longer accepted",
            ),
            other => format!("the server says {other}"),
        }
    }
}

struct Held {
    lease: Lease,
    deadline: Instant,
}

struct Shared {
    /// The zero of the milliseconds the core's schedule counts in.
    origin: Instant,
    held: Mutex<BTreeMap<u64, Held>>,
    /// Wakes the heartbeat task when the set of leases changes, or a renewal is asked now.
    changed: Notify,
    /// Renew every held lease now, not when due: the event stream may have missed events.
    renew_now: AtomicBool,
    /// Where losses are reported.
    losses: mpsc::UnboundedSender<Loss>,
}

/// The background keeper of one session's leases.
pub struct Keeper {
    shared: Arc<Shared>,
    beats: JoinHandle<()>,
    /// The session's place on its namespace's event stream.
    _events: Subscription,
}

/// A lease's local deadline: `sent` plus its TTL. A TTL over a century (a server configured
/// without a cap) counts as a century, so the addition cannot overflow the monotonic clock (a
/// clock that still could not hold it makes the deadline `sent`: the lease is reported lost,
/// never kept by mistake).
fn local_deadline(sent: Instant, ttl_ms: u64) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    sent.checked_add(Duration::from_millis(ttl_ms).min(CENTURY))
        .unwrap_or(sent)
}

/// How soon to retry a heartbeat the server did not answer.
const RETRY: Duration = Duration::from_millis(200);

impl Keeper {
    /// Starts keeping `session`'s leases; losses arrive on the receiver.
    pub fn start(session: Session) -> (Keeper, mpsc::UnboundedReceiver<Loss>) {
        let (losses, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            origin: Instant::now(),
            held: Mutex::default(),
            changed: Notify::new(),
            renew_now: AtomicBool::new(false),
            losses,
        });
        let listener: Weak<dyn Listener> = Arc::downgrade(&shared) as Weak<dyn Listener>;
        let events = Watch::join(
            &session.client,
            &session.info.namespace,
            (
                session.info.session_id.0,
                session.started_at,
                session.log.as_deref(),
            ),
            listener,
        );
        let beats = tokio::spawn(heartbeats(session, shared.clone()));
        let keeper = Keeper {
            shared,
            beats,
            _events: events,
        };
        (keeper, rx)
    }

    /// Keeps these leases, granted or renewed by a request sent at `sent`.
    pub fn hold(&self, leases: &[Lease], sent: Instant) {
        let mut held = self.shared.held.lock().expect("keeper lock");
        for lease in leases {
            let deadline = local_deadline(sent, lease.ttl_ms);
            held.insert(
                lease.lease_id.0,
                Held {
                    lease: lease.clone(),
                    deadline,
                },
            );
        }
        drop(held);
        self.shared.changed.notify_one();
    }

    /// Renews leases granted at some unknown moment of a wait and keeps them, their TTL
    /// counting from this renewal; `false` (and nothing kept) if one was already gone.
    ///
    /// # Errors
    /// The renewal did not reach the server.
    pub async fn hold_renewed(&self, session: &Session, leases: &[Lease]) -> Result<bool, Failure> {
        let ids: Vec<u64> = leases.iter().map(|l| l.lease_id.0).collect();
        let sent = Instant::now();
        let results = session.heartbeat(&ids).await?;
        let all_ok = results.len() == ids.len() && results.iter().all(|(_, r)| r.is_ok());
        if all_ok {
            self.hold(leases, sent);
        }
        Ok(all_ok)
    }

    /// Stops keeping these leases (`None`: all), before releasing them.
    pub fn forget(&self, ids: Option<&[u64]>) {
        let mut held = self.shared.held.lock().expect("keeper lock");
        match ids {
            Some(ids) => ids.iter().for_each(|id| drop(held.remove(id))),
            None => held.clear(),
        }
    }

    /// The leases held now, by id.
    pub fn held(&self) -> Vec<Lease> {
        let held = self.shared.held.lock().expect("keeper lock");
        held.values().map(|h| h.lease.clone()).collect()
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.beats.abort();
    }
}

impl Listener for Shared {
    fn event(&self, event: &Event) {
        let Some((ended, reason)) = ends(event) else {
            return;
        };
        let ids: Vec<u64> = match ended {
            Ended::Leases(leases) => leases.iter().map(|l| l.0).collect(),
            Ended::All => self
                .held
                .lock()
                .expect("keeper lock")
                .keys()
                .copied()
                .collect(),
        };
        self.lose(&ids, reason);
    }

    fn resync(&self) {
        self.renew_now.store(true, Ordering::SeqCst);
        self.changed.notify_one();
    }
}

impl Shared {
    /// Removes the leases among `ids` still held and reports them lost.
    fn lose(&self, ids: &[u64], reason: &str) {
        let mut held = self.held.lock().expect("keeper lock");
        let leases: Vec<Lease> = ids
            .iter()
            .filter_map(|id| held.remove(id))
            .map(|h| h.lease)
            .collect();
        if !leases.is_empty() {
            let _ = self.losses.send(Loss {
                leases,
                reason: reason.to_owned(),
            });
        }
    }

    /// The held ids, when the next heartbeat is due, and the earliest local deadline.
    fn plan(&self) -> (Vec<u64>, Option<Instant>, Option<Instant>) {
        let held = self.held.lock().expect("keeper lock");
        let ids = held.keys().copied().collect();
        let ms = |at: Instant| at.saturating_duration_since(self.origin).as_millis() as u64;
        let due = held
            .values()
            .map(|h| renew_at(ms(h.deadline), h.lease.ttl_ms))
            .min()
            .map(|at| self.origin + Duration::from_millis(at));
        let deadline = held.values().map(|h| h.deadline).min();
        (ids, due, deadline)
    }
}

async fn heartbeats(session: Session, shared: Arc<Shared>) {
    // Set after a heartbeat failed: try again at this time rather than a third TTL later.
    let mut retry_at: Option<Instant> = None;
    loop {
        let (ids, due, deadline) = shared.plan();
        let asked_now = shared.renew_now.swap(false, Ordering::SeqCst);
        let due = due.map(|due| {
            if asked_now {
                Instant::now()
            } else {
                retry_at.unwrap_or(due)
            }
        });
        let (Some(due), Some(deadline)) = (due, deadline) else {
            shared.changed.notified().await;
            continue;
        };
        tokio::select! {
            () = shared.changed.notified() => continue,
            () = tokio::time::sleep_until(deadline) => {
                expire_overdue(&shared);
                continue;
            }
            () = tokio::time::sleep_until(due) => {}
        }
        let renewal = async {
            // One of the client's few renewals in flight (the core's `renewals` rule); the
            // send time, which the local deadline counts from, is taken once it is our turn.
            let _turn = session.client.renewal_turn().await;
            let sent = Instant::now();
            (session.heartbeat(&ids).await, sent)
        };
        let (answer, sent) = tokio::select! {
            answered = renewal => answered,
            // A server that does not answer must not hold the deadline back.
            () = tokio::time::sleep_until(deadline) => {
                expire_overdue(&shared);
                continue;
            }
        };
        match answer {
            Ok(results) => {
                retry_at = None;
                renew(&shared, &ids, &results, sent);
            }
            Err(Failure::Refused { name, .. }) if name == "UNKNOWN_SESSION" => {
                shared.lose(&ids, "SESSION_CLOSED");
            }
            // Refused credentials (the session resumed by another process, which holds it now
            // with a new token; or a bearer token the server no longer takes): no renewal will
            // ever pass, so the leases are lost now, not at their local deadline.
            Err(Failure::Refused { status: 401, .. }) => {
                shared.lose(&ids, "UNAUTHORIZED");
            }
            // Unreachable, or refused for a reason that may pass (a rate limit): try again
            // soon; the local deadline decides when it is too late.
            Err(_) => retry_at = Some(Instant::now() + RETRY),
        }
    }
}

/// Moves the deadlines of the leases renewed by a heartbeat sent at `sent` for `asked`, and
/// keeps the server's new expiry; the others are lost (a lease the answer does not name is not
/// renewed: were it kept, it would be due again at once, forever).
fn renew(shared: &Shared, asked: &[u64], results: &[(u64, Result<u64, String>)], sent: Instant) {
    let mut lost: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    {
        let mut held = shared.held.lock().expect("keeper lock");
        for (id, result) in results {
            match (result, held.get_mut(id)) {
                (Ok(expires_at), Some(h)) => {
                    h.deadline = local_deadline(sent, h.lease.ttl_ms);
                    h.lease.expires_at = *expires_at;
                }
                (Err(reason), Some(_)) => lost.entry(reason).or_default().push(*id),
                (_, None) => {}
            }
        }
        // A held lease the answer does not name was not renewed: it is lost now, as at its
        // local deadline.
        for id in asked {
            if held.contains_key(id) && !results.iter().any(|(r, _)| r == id) {
                lost.entry(LOST_AT_LOCAL_DEADLINE).or_default().push(*id);
            }
        }
    }
    for (reason, ids) in lost {
        shared.lose(&ids, reason);
    }
}

fn expire_overdue(shared: &Shared) {
    let now = Instant::now();
    let overdue: Vec<u64> = {
        let held = shared.held.lock().expect("keeper lock");
        held.iter()
            .filter(|(_, h)| h.deadline <= now)
            .map(|(id, _)| *id)
            .collect()
    };
    shared.lose(&overdue, LOST_AT_LOCAL_DEADLINE);
}
