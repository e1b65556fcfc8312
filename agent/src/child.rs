//! The command under `klock exec`: started in its own process group with the lease
//! environment, signals passed on to that group, stopped with SIGTERM then SIGKILL.
//!
//! Contract: [`spawn`] starts the command as the leader of a new process group (as timeout(1)
//! does), so a forwarded signal or a stop reaches everything it started, and a terminal's
//! Ctrl-C reaches it once, through us, not twice. [`supervise`] waits for the command to end
//! or a lease to be lost, forwarding SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2
//! meanwhile. [`Interrupts`] are SIGINT, SIGTERM and SIGHUP while there is no command (waiting
//! for the leases, closing the MCP sidecar's session), listened for from its creation on.

use klock_client::keeper::Loss;
use std::process::ExitStatus;
use std::time::Duration;
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, SignalKind};

/// Starts `command` (program and arguments) with `env` added, leading its own process group.
///
/// # Errors
/// The program cannot be run (not found: [`std::io::ErrorKind::NotFound`]).
pub fn spawn(command: &[String], env: &[(&str, String)]) -> std::io::Result<Child> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "no command"))?;
    Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .process_group(0)
        .spawn()
}

/// How the command's run ended.
pub enum Ended {
    /// It exited on its own.
    Exited(ExitStatus),
    /// A lease was lost first (the command still runs).
    Lost(Loss),
}

/// Waits for the command to end or a lease to be lost, passing signals on meanwhile.
pub async fn supervise(
    child: &mut Child,
    losses: &mut tokio::sync::mpsc::UnboundedReceiver<Loss>,
) -> Ended {
    let mut caught = Caught::new(&[
        SignalKind::terminate(),
        SignalKind::interrupt(),
        SignalKind::hangup(),
        SignalKind::quit(),
        SignalKind::user_defined1(),
        SignalKind::user_defined2(),
    ]);
    loop {
        tokio::select! {
            status = child.wait() => match status {
                Ok(status) => break Ended::Exited(status),
                // wait(2) failing means the child is not ours to wait for; treat it as gone.
                Err(_) => break Ended::Exited(ExitStatus::default()),
            },
            Some(loss) = losses.recv() => break Ended::Lost(loss),
            sig = caught.next() => send(child, sig),
        }
    }
}

/// Signals caught while it lives, by number. Dropping it stops the listening; tokio keeps its
/// handlers installed, so a signal that comes later is ignored rather than fatal.
struct Caught {
    rx: tokio::sync::mpsc::UnboundedReceiver<i32>,
    listeners: Vec<tokio::task::JoinHandle<()>>,
}

impl Caught {
    fn new(kinds: &[SignalKind]) -> Caught {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut listeners = Vec::new();
        for &kind in kinds {
            // A signal we cannot listen for keeps its default action: no failure.
            if let Ok(mut stream) = signal(kind) {
                let tx = tx.clone();
                listeners.push(tokio::spawn(async move {
                    while stream.recv().await.is_some() {
                        let _ = tx.send(kind.as_raw_value());
                    }
                }));
            }
        }
        Caught { rx, listeners }
    }

    /// The next signal (never, if none could be listened for).
    async fn next(&mut self) -> i32 {
        match self.rx.recv().await {
            Some(sig) => sig,
            None => std::future::pending().await,
        }
    }
}

impl Drop for Caught {
    fn drop(&mut self) {
        for listener in &self.listeners {
            listener.abort();
        }
    }
}

/// SIGINT, SIGTERM and SIGHUP, listened for from its creation on: a signal that comes while
/// nobody awaits [`Interrupts::next`] (a request in flight) is kept for the next call, not
/// lost, and every later one is seen too (a second Ctrl-C).
pub struct Interrupts(Caught);

impl Interrupts {
    pub fn new() -> Interrupts {
        let kinds = [
            SignalKind::interrupt(),
            SignalKind::terminate(),
            SignalKind::hangup(),
        ];
        Interrupts(Caught::new(&kinds))
    }

    /// The next signal caught (at once if one came since the last call).
    pub async fn next(&mut self) -> i32 {
        self.0.next().await
    }

    /// A signal caught and not yet taken, without waiting.
    pub fn pending(&mut self) -> Option<i32> {
        self.0.rx.try_recv().ok()
    }
}

impl Default for Interrupts {
    fn default() -> Interrupts {
        Interrupts::new()
    }
}

/// Sends `sig` to the command's process group (its pid: it leads the group).
fn send(child: &Child, sig: i32) {
    if let Some(pid) = child.id() {
        // SAFETY: kill(2) on the group of a child we spawned and have not reaped yet.
        unsafe {
            libc::kill(-(pid as libc::pid_t), sig);
        }
    }
}

/// SIGTERM to the command's group, then SIGKILL if it has not ended `kill_after` later.
pub async fn stop(child: &mut Child, kill_after: Duration) {
    send(child, libc::SIGTERM);
    if tokio::time::timeout(kill_after, child.wait())
        .await
        .is_err()
    {
        send(child, libc::SIGKILL);
        let _ = child.wait().await;
    }
}

/// The exit status to pass on: the command's code, or 128 + N for a signal N.
pub fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(sig)) => 128u8.saturating_add(sig as u8),
        (None, None) => 1,
    }
}
