//! A friendly session: leases as RAII guards, renewed in the background, lost leases told to
//! their guard.
//!
//! Contract:
//! - [`Session::lease`] checks the intents with the kernel's own parser and the TTL before
//!   any request ([`Error::InvalidInput`] names the bad one), then acquires the whole manifest
//!   at once through [`crate::acquire::Acquire`] (the core decides every retry, `Died` and
//!   `Timeout`), and returns a [`LeaseGuard`]. The session's [`Keeper`] renews every held lease
//!   a third of the way to its local deadline.
//! - A lost lease (the server says it expired, was wounded or its session closed, or no renewal
//!   reached the server before its local deadline) is told to the guard holding it
//!   ([`LeaseGuard::lost`], [`LeaseGuard::until_lost`]).
//! - [`Session::close`] releases everything on the server and withdraws every wait; dropping
//!   the last handle of an unclosed session (guards hold one) closes it in the background,
//!   best effort: a server that cannot be reached lets its leases end at their TTL.

use crate::acquire::Acquire;
use crate::error::Error;
use crate::guard::LeaseGuard;
use crate::keeper::{Keeper, Loss};
use crate::routes;
use crate::transport::Transport;
use klock_core::{parse_intent, Lease};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// Where each held lease's loss goes: the watch of the guard holding it.
pub(crate) type Watchers = Arc<Mutex<BTreeMap<u64, Arc<watch::Sender<Option<Loss>>>>>>;

/// The TTL of a lease when the options give none.
pub const DEFAULT_TTL: Duration = Duration::from_secs(60);

/// How a lease is asked for.
#[derive(Clone, Copy, Debug)]
pub struct LeaseOptions {
    ttl: Duration,
    timeout: Option<Duration>,
}

impl Default for LeaseOptions {
    /// A 60 s TTL, and no client-side limit on the wait.
    fn default() -> LeaseOptions {
        LeaseOptions {
            ttl: DEFAULT_TTL,
            timeout: None,
        }
    }
}

impl LeaseOptions {
    /// The TTL of each lease (whole milliseconds, at least 1): how long the server keeps it
    /// after the last renewal reached it. The session renews it every third of it.
    pub fn ttl(mut self, ttl: Duration) -> LeaseOptions {
        self.ttl = ttl;
        self
    }

    /// The budget of the whole acquisition, waits and Wait-Die backoffs included: past it,
    /// [`Error::Timeout`]. `Duration::ZERO` is a try-lock. Without one (the default) there is
    /// no client-side limit: each wait lasts the kernel's default, and is asked again.
    pub fn timeout(mut self, timeout: Duration) -> LeaseOptions {
        self.timeout = Some(timeout);
        self
    }
}

/// An open session; clones share it.
#[derive(Clone, Debug)]
pub struct Session {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) routes: routes::Session,
    pub(crate) keeper: Keeper,
    pub(crate) watchers: Watchers,
    /// Hands the keeper's losses to the guards.
    dispatcher: JoinHandle<()>,
    pub(crate) closed: AtomicBool,
    /// Where to release and close in the background after a drop.
    pub(crate) runtime: tokio::runtime::Handle,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("info", &self.routes.info)
            .finish_non_exhaustive()
    }
}

impl Session {
    pub(crate) async fn open(
        transport: Transport,
        namespace: &str,
        agent_id: &str,
    ) -> Result<Session, Error> {
        let routes = routes::Session::open(transport, namespace, agent_id).await?;
        let (keeper, losses) = Keeper::start(routes.clone());
        let watchers = Watchers::default();
        let dispatcher = tokio::spawn(dispatch(losses, watchers.clone()));
        Ok(Session {
            inner: Arc::new(Inner {
                routes,
                keeper,
                watchers,
                dispatcher,
                closed: AtomicBool::new(false),
                runtime: tokio::runtime::Handle::current(),
            }),
        })
    }

    /// The session's id on the server.
    pub fn id(&self) -> u64 {
        self.inner.routes.info.session_id.0
    }

    /// The session's priority (its open time on the server: the smaller, the older).
    pub fn priority(&self) -> u64 {
        self.inner.routes.info.priority
    }

    /// The typed routes under it ([`crate::routes::Session`]).
    pub fn routes(&self) -> &routes::Session {
        &self.inner.routes
    }

    /// The leases this session holds now (through every guard), each with the `expires_at`
    /// its last renewal answered.
    pub fn held(&self) -> Vec<Lease> {
        self.inner.keeper.held()
    }

    /// Acquires every intent (`"PREDICATE TYPE:/path"`, like `"MUTATES FILE:/src/app.rs"`) at
    /// once (module contract).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] (no intent, one the kernel cannot read, a TTL under 1 ms);
    /// [`Error::Died`] (Wait-Die refused it while this session holds other leases: drop their
    /// guards and ask again for everything); [`Error::Timeout`]; the server's refusal or
    /// absence.
    pub async fn lease<I, S>(&self, intents: I, options: LeaseOptions) -> Result<LeaseGuard, Error>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let intents: Vec<String> = intents.into_iter().map(Into::into).collect();
        if intents.is_empty() {
            return Err(Error::InvalidInput(String::from(
                "name at least one intent, like \"MUTATES FILE:/src/app.rs\"",
            )));
        }
        for intent in &intents {
            parse_intent(intent).map_err(|e| {
                Error::InvalidInput(format!(
                    "{intent:?} is not an intent (\"PREDICATE TYPE:/path\", like \"MUTATES FILE:/src/app.rs\"): {}",
                    e.message
                ))
            })?;
        }
        let ttl_ms = u64::try_from(options.ttl.as_millis()).unwrap_or(u64::MAX);
        if ttl_ms == 0 {
            return Err(Error::InvalidInput(String::from(
                "a lease's ttl must be at least 1 ms",
            )));
        }
        if self.inner.closed.load(Ordering::SeqCst) {
            return Err(Error::InvalidInput(String::from("this session is closed")));
        }
        let inner = &self.inner;
        let leases = Acquire::new(
            &inner.routes,
            &inner.keeper,
            &intents,
            ttl_ms,
            options.timeout,
        )
        .run()
        .await?;
        Ok(LeaseGuard::new(self.clone(), leases))
    }

    /// Closes the session: every lease released, every wait withdrawn; its guards are then
    /// told their leases are lost (`SESSION_CLOSED`) and release nothing when dropped.
    ///
    /// # Errors
    /// Unreachable, or the server no longer knows the session.
    pub async fn close(&self) -> Result<(), Error> {
        self.inner.closed.store(true, Ordering::SeqCst);
        let held = self.inner.keeper.held();
        self.inner.keeper.forget(None);
        let watchers = std::mem::take(&mut *self.inner.watchers.lock().expect("watchers lock"));
        let result = self.inner.routes.close().await;
        for lease in held {
            if let Some(watch) = watchers.get(&lease.lease_id.0) {
                tell(watch, &lease, "SESSION_CLOSED");
            }
        }
        Ok(result?)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.dispatcher.abort();
        if !self.closed.load(Ordering::SeqCst) {
            let routes = self.routes.best_effort();
            self.runtime.spawn(async move { routes.close().await });
        }
    }
}

/// Hands each loss to the guards of its leases.
async fn dispatch(mut losses: mpsc::UnboundedReceiver<Loss>, watchers: Watchers) {
    while let Some(loss) = losses.recv().await {
        for lease in &loss.leases {
            let watch = watchers
                .lock()
                .expect("watchers lock")
                .remove(&lease.lease_id.0);
            if let Some(watch) = watch {
                tell(&watch, lease, &loss.reason);
            }
        }
    }
}

/// Tells a guard that `lease` is lost: the first loss of the guard is kept, the leases of a
/// later one are added to it.
fn tell(watch: &watch::Sender<Option<Loss>>, lease: &Lease, reason: &str) {
    watch.send_modify(|lost| match lost {
        Some(loss) => loss.leases.push(lease.clone()),
        None => {
            *lost = Some(Loss {
                leases: vec![lease.clone()],
                reason: reason.to_owned(),
            })
        }
    });
}
