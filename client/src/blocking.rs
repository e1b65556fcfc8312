//! The blocking facade: the same client for a program without async, over a private runtime.
//!
//! Contract: [`Client::connect`] starts one current-thread tokio runtime on a thread of its
//! own, shared by the client, its sessions and their guards, and stopped when the last of them
//! is dropped. Every call blocks the calling thread on that runtime until the async client's
//! call ends; meanwhile and between calls the runtime's thread renews the leases and watches
//! for losses, exactly as the async client does. A guard dropped releases its leases before
//! the drop returns (bounded by the request's time limit), and the last handle of an unclosed
//! session closes it. Called from inside a tokio runtime (where blocking would stall it), a
//! call returns [`Error::InvalidInput`] instead, and a drop falls back to the async client's
//! background release.

use crate::error::Error;
use crate::keeper::Loss;
use crate::session::LeaseOptions;
use klock_core::Lease;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The runtime's handle (or why it could not be built), from its thread to the caller.
type Built = (
    std::sync::Mutex<Option<Result<tokio::runtime::Handle, String>>>,
    std::sync::Condvar,
);

/// The private runtime and the thread that drives it.
struct Runtime {
    handle: tokio::runtime::Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Runtime {
    fn start() -> Result<Arc<Runtime>, Error> {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        // Built on its own thread, and handed back through a condition variable: building a
        // runtime, or blocking in a channel's recv, records the blocking thread (std's
        // `thread::current()`), and a thread std did not start (a C program's main thread,
        // through libklock) never frees that record, which valgrind reports as lost.
        let built: Arc<Built> = Arc::default();
        let thread = std::thread::Builder::new()
            .name(String::from("klock-client"))
            .spawn({
                let built = built.clone();
                move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build();
                    let handle = runtime.as_ref().map(|r| r.handle().clone());
                    *built.0.lock().expect("runtime slot") =
                        Some(handle.map_err(|e| e.to_string()));
                    built.1.notify_one();
                    if let Ok(runtime) = runtime {
                        runtime.block_on(async {
                            let _ = stopped.await;
                        });
                    }
                }
            })
            .map_err(|e| Error::Unreachable(format!("cannot start the client's thread: {e}")))?;
        let mut slot = built.0.lock().expect("runtime slot");
        let handle = loop {
            match slot.take() {
                Some(handle) => break handle,
                None => slot = built.1.wait(slot).expect("runtime slot"),
            }
        };
        drop(slot);
        match handle {
            Ok(handle) => Ok(Arc::new(Runtime {
                handle,
                stop: Some(stop),
                thread: Some(thread),
            })),
            Err(e) => {
                let _ = thread.join();
                Err(Error::Unreachable(format!(
                    "cannot start the client's runtime: {e}"
                )))
            }
        }
    }

    /// Runs `future` to its end on the runtime, blocking this thread.
    fn block_on<F: Future>(&self, future: F) -> Result<F::Output, Error> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(Error::InvalidInput(String::from(
                "klock_client::blocking was called inside a tokio runtime, where blocking would stall it: use the async klock_client::Client there",
            )));
        }
        Ok(self.handle.block_on(future))
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A connection to `klock serve`, blocking.
#[derive(Clone)]
pub struct Client {
    client: crate::Client,
    runtime: Arc<Runtime>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.client.fmt(f)
    }
}

impl Client {
    /// [`crate::Client::connect`], blocking.
    ///
    /// # Errors
    /// As [`crate::Connect::connect`].
    pub fn connect(url: &str, token: Option<&str>) -> Result<Client, Error> {
        let runtime = Runtime::start()?;
        let client = runtime.block_on(crate::Client::connect(url, token))??;
        Ok(Client { client, runtime })
    }

    /// [`crate::Connect::connect`] (a CA bundle, a namespace), blocking.
    ///
    /// # Errors
    /// As [`crate::Connect::connect`].
    pub fn connect_with(options: crate::Connect) -> Result<Client, Error> {
        let runtime = Runtime::start()?;
        let client = runtime.block_on(options.connect())??;
        Ok(Client { client, runtime })
    }

    /// [`crate::Client::in_namespace`]: the same client, on the same runtime.
    pub fn in_namespace(&self, namespace: &str) -> Client {
        Client {
            client: self.client.in_namespace(namespace),
            runtime: self.runtime.clone(),
        }
    }

    /// [`crate::Client::session`], blocking.
    ///
    /// # Errors
    /// As [`crate::Client::session`].
    pub fn session(&self, agent_id: &str) -> Result<Session, Error> {
        let session = self.runtime.block_on(self.client.session(agent_id))??;
        Ok(Session {
            session,
            runtime: self.runtime.clone(),
        })
    }
}

/// An open session, blocking; clones share it.
#[derive(Clone, Debug)]
pub struct Session {
    session: crate::Session,
    runtime: Arc<Runtime>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Runtime")
    }
}

impl Session {
    /// The session's id on the server.
    pub fn id(&self) -> u64 {
        self.session.id()
    }

    /// The leases this session holds now.
    pub fn held(&self) -> Vec<Lease> {
        self.session.held()
    }

    /// [`crate::Session::lease`], blocking.
    ///
    /// # Errors
    /// As [`crate::Session::lease`].
    pub fn lease<I, S>(&self, intents: I, options: LeaseOptions) -> Result<LeaseGuard, Error>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let guard = self
            .runtime
            .block_on(self.session.lease(intents, options))??;
        Ok(LeaseGuard {
            guard: Some(guard),
            runtime: self.runtime.clone(),
        })
    }

    /// [`crate::Session::close`], blocking.
    ///
    /// # Errors
    /// As [`crate::Session::close`].
    pub fn close(&self) -> Result<(), Error> {
        self.runtime.block_on(self.session.close())?
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        close_if_last(&self.session, &self.runtime);
    }
}

/// Closes `session` if this is its last handle, before the runtime can stop under it.
fn close_if_last(session: &crate::Session, runtime: &Runtime) {
    if Arc::strong_count(&session.inner) == 1 {
        let _ = runtime.block_on(session.close());
    }
}

/// Leases held until dropped, blocking.
#[derive(Debug)]
#[must_use = "the leases are released as soon as the guard is dropped"]
pub struct LeaseGuard {
    /// `None` once released.
    guard: Option<crate::LeaseGuard>,
    runtime: Arc<Runtime>,
}

impl LeaseGuard {
    fn guard(&self) -> &crate::LeaseGuard {
        self.guard
            .as_ref()
            .expect("a guard is released only by release or drop")
    }

    /// The leases held.
    pub fn leases(&self) -> &[Lease] {
        self.guard().leases()
    }

    /// The largest fence of the grant.
    pub fn fence(&self) -> u64 {
        self.guard().fence()
    }

    /// The loss of (some of) these leases, if one happened.
    pub fn lost(&self) -> Option<Loss> {
        self.guard().lost()
    }

    /// Waits up to `timeout` for a loss of (some of) these leases; `None` if none came.
    pub fn wait_lost(&mut self, timeout: Duration) -> Option<Loss> {
        let guard = self.guard.as_mut()?;
        // Made inside the runtime: a timer needs its context when it is created.
        let waited = async { tokio::time::timeout(timeout, guard.until_lost()).await };
        self.runtime.block_on(waited).ok()?.ok()
    }

    /// [`crate::fence::fenced_write`] with this guard's fence.
    ///
    /// # Errors
    /// [`Error::StaleFence`], or [`Error::Io`].
    pub fn fenced_write(&self, path: impl AsRef<Path>, data: &[u8]) -> Result<(), Error> {
        crate::fence::fenced_write(path, data, self.fence())
    }

    /// Releases the leases now.
    ///
    /// # Errors
    /// As [`crate::LeaseGuard::release`].
    pub fn release(mut self) -> Result<(), Error> {
        let guard = self.guard.take().expect("released once");
        let session = guard.session().clone();
        let released = self.runtime.block_on(guard.release())?;
        close_if_last(&session, &self.runtime);
        released
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        let Some(guard) = self.guard.take() else {
            return;
        };
        let session = guard.session().clone();
        // Inside a runtime the guard's own drop releases in the background instead.
        if let Err(Error::InvalidInput(_)) = self.runtime.block_on(guard.release()) {
            return;
        }
        close_if_last(&session, &self.runtime);
    }
}
