//! The RAII lease guard: holding it holds the leases; dropping it gives them back.
//!
//! Contract: a [`LeaseGuard`] holds the leases of one grant. While it lives its session renews
//! them in the background. [`LeaseGuard::release`] releases them and says whether the server
//! took it; dropping the guard stops renewing them at once and releases them in the background
//! on the runtime the session was opened in (best effort: a server that cannot be reached lets
//! them end at their TTL). A loss (module [`crate::session`]) is kept by the guard:
//! [`LeaseGuard::lost`] reads it, [`LeaseGuard::until_lost`] waits for it. The guard's fence
//! is the largest of its leases' fences, for a store that refuses stale writers
//! ([`LeaseGuard::fenced_write`]).

use crate::error::Error;
use crate::fence;
use crate::keeper::Loss;
use crate::session::Session;
use klock_core::client::watch::LOST_AT_LOCAL_DEADLINE;
use klock_core::Lease;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::watch;

/// Leases held until dropped.
#[derive(Debug)]
#[must_use = "the leases are released as soon as the guard is dropped"]
pub struct LeaseGuard {
    session: Session,
    leases: Vec<Lease>,
    lost: watch::Receiver<Option<Loss>>,
    /// Released already (by [`LeaseGuard::release`]): nothing left to do on drop.
    released: bool,
}

impl LeaseGuard {
    /// Guards leases just granted to `session` (and held by its keeper).
    pub(crate) fn new(session: Session, leases: Vec<Lease>) -> LeaseGuard {
        let (tx, lost) = watch::channel(None);
        let tx = Arc::new(tx);
        {
            let mut watchers = session.inner.watchers.lock().expect("watchers lock");
            for lease in &leases {
                watchers.insert(lease.lease_id.0, tx.clone());
            }
        }
        // A loss reported between the grant and the lines above found no guard to tell: a
        // lease the keeper no longer holds is lost (its reason went with the report: named as
        // a lease not renewed in time, the core's name for it).
        let held = session.inner.keeper.held();
        let gone: Vec<Lease> = leases
            .iter()
            .filter(|l| !held.iter().any(|h| h.lease_id == l.lease_id))
            .cloned()
            .collect();
        if !gone.is_empty() {
            tx.send_replace(Some(Loss {
                leases: gone,
                reason: String::from(LOST_AT_LOCAL_DEADLINE),
            }));
        }
        LeaseGuard {
            session,
            leases,
            lost,
            released: false,
        }
    }

    /// The leases held.
    pub fn leases(&self) -> &[Lease] {
        &self.leases
    }

    /// The largest fence of the grant: strictly larger than any earlier grant's of these
    /// resources.
    pub fn fence(&self) -> u64 {
        self.leases
            .iter()
            .map(|l| l.fence)
            .max()
            .unwrap_or_default()
    }

    /// The session holding them.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// The loss of (some of) these leases, if one happened: stop acting on them.
    pub fn lost(&self) -> Option<Loss> {
        self.lost.borrow().clone()
    }

    /// Waits until (some of) these leases are lost (and forever while they are not).
    pub async fn until_lost(&mut self) -> Loss {
        match self.lost.wait_for(Option::is_some).await {
            Ok(loss) => loss.clone().expect("waited for a loss"),
            // No loss can come any more (the session is gone without one).
            Err(_) => std::future::pending().await,
        }
    }

    /// Writes `data` to `path` through the fence protocol ([`crate::fence`]) with this
    /// guard's fence: refused with [`Error::StaleFence`] if the file has accepted a newer one.
    ///
    /// # Errors
    /// [`Error::StaleFence`], or [`Error::Io`].
    pub async fn fenced_write(&self, path: impl AsRef<Path>, data: &[u8]) -> Result<(), Error> {
        let (path, data, fence) = (path.as_ref().to_owned(), data.to_vec(), self.fence());
        tokio::task::spawn_blocking(move || fence::fenced_write(&path, &data, fence))
            .await
            .map_err(|e| Error::Io {
                path: std::path::PathBuf::new(),
                message: format!("the fenced write's thread failed: {e}"),
            })?
    }

    /// Stops renewing the leases and forgets the guard's watch; the ids to release.
    fn detach(&mut self) -> Vec<u64> {
        self.released = true;
        let ids: Vec<u64> = self.leases.iter().map(|l| l.lease_id.0).collect();
        let inner = &self.session.inner;
        inner.keeper.forget(Some(&ids));
        let mut watchers = inner.watchers.lock().expect("watchers lock");
        for id in &ids {
            watchers.remove(id);
        }
        ids
    }

    /// Releases the leases now.
    ///
    /// # Errors
    /// Unreachable, or refused (the session is gone: its leases with it).
    pub async fn release(mut self) -> Result<(), Error> {
        let ids = self.detach();
        if self.session.inner.closed.load(Ordering::SeqCst) {
            return Ok(());
        }
        self.session.inner.routes.release(Some(&ids)).await?;
        Ok(())
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let ids = self.detach();
        let inner = &self.session.inner;
        if inner.closed.load(Ordering::SeqCst) {
            return;
        }
        let routes = inner.routes.clone();
        inner
            .runtime
            .spawn(async move { routes.release(Some(&ids)).await });
    }
}
