//! `klock mcp`: the session behind the MCP tools of `klock-mcp`, one per agent process.
//!
//! Contract: the session opens when the sidecar starts, or if the server is not up yet at the
//! first tool call (which says so when it still is not), and again at the next call after
//! the server forgot it (closed for idleness, or restarted without its data: the model is
//! told). The [`Keeper`] renews its leases in the background, so the model never heartbeats.
//! An acquire that is not granted within `wait_s` (≤ 45 s, below the 60 s MCP clients time
//! out at) answers WAIT with a ticket that stays queued for [`QUEUE_MS`]; a follower task
//! keeps polling it, so a lease granted while the model is elsewhere is renewed from the
//! moment it is granted. A DIE is slept off and retried within `wait_s` when the agent holds
//! nothing and the kernel's backoff ends within it (the core decides:
//! [`klock_core::client::Acquisition`]); otherwise it is answered with what to release. Lost leases and tickets resolved
//! between calls are told at the head of the next tool result and at once as MCP log
//! messages. When stdin ends, or at SIGTERM, SIGINT or SIGHUP, the session is closed: every
//! lease released, every wait withdrawn; then the process exits, even with stdin still open
//! (a second signal while closing exits at once). A `klock_release` with `all: true` withdraws
//! the waits too, and an acquire or await waiting on one answers WITHDRAWN.

use super::args::{Connection, Flags, CONNECTION_HELP};
use super::child;
use super::overview::{gather, render, render_resource};
use super::replies::{
    died, end_text, ended, failed, granted, lost, waiting, End, WITHDRAWN_BY_RELEASE,
    WITHDRAWN_WITH_SESSION,
};
use klock_client::describe::{describe_blockers, describe_leases};
use klock_client::keeper::{Keeper, Loss};
use klock_client::routes::{resource_state, Acquired, Outcome, Session};
use klock_client::transport::{Failure, Transport};
use klock_core::client::{Acquisition, Next, Setback};
use klock_core::{Blocker, Verdict};
use klock_mcp::{AcquireArgs, AwaitArgs, Coordinator, ReleaseArgs, Reply, StatusArgs};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// How long a ticket stays queued after a WAIT answer, for the model to come back.
pub const QUEUE_MS: u64 = 300_000;
pub const HELP: &str = "\
usage: klock mcp [connection flags] [--type TYPE]...

A Model Context Protocol server on stdin/stdout for one LLM agent: the agent host launches
it once per agent. It opens one Klock session when it starts (or at the first tool call, if
the server is not up yet), renews its leases in the background, and closes the session
(releasing everything) when stdin ends or it gets SIGTERM, SIGINT or SIGHUP.
Tools: klock_acquire, klock_await, klock_release, klock_status, klock_reconcile, klock_who.

  --type TYPE      resource types klock_who lists besides those the agent used (default FILE)
CONNECTION_FLAGS

Example (an MCP host's configuration):
  {\"mcpServers\": {\"klock\": {\"command\": \"klock\",
     \"args\": [\"mcp\", \"--server\", \"http://127.0.0.1:7300\", \"--ns\", \"myrepo\", \"--agent\", \"claude-1\"]}}}";

/// The help with the connection flags filled in.
pub fn help() -> String {
    HELP.replace("CONNECTION_FLAGS", CONNECTION_HELP)
}

/// A ticket being followed: how it ended (once it has) and who blocked it.
struct Followed {
    end: watch::Receiver<Option<End>>,
    /// Shared with the follower: a withdrawal says so here, for the call waiting on it.
    tell: Arc<watch::Sender<Option<End>>>,
    blockers: Vec<Blocker>,
    /// The follower; forgetting the ticket stops it.
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Followed {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Live {
    session: Session,
    keeper: Arc<Keeper>,
}

/// The sidecar's state, shared by the tool calls.
pub struct Sidecar {
    client: Transport,
    ns: String,
    agent: String,
    /// The session while the server knows it; dropped when the server says it is gone (closed
    /// for idleness after `session_idle_ms` holding nothing, or a server restarted without
    /// its data), so the next call opens another instead of failing for good.
    live: tokio::sync::Mutex<Option<Arc<Live>>>,
    /// Resource types to list in klock_who.
    types: Mutex<BTreeSet<String>>,
    /// Tickets being followed, by ticket.
    tickets: Mutex<BTreeMap<u64, Followed>>,
    /// What happened between calls, for the head of the next tool result.
    unreported: Arc<Mutex<Vec<String>>>,
    notices: mpsc::UnboundedSender<String>,
}

/// Reads the flags; the sidecar and the receiver of its notices.
///
/// # Errors
/// An unknown flag or a bad value.
pub fn parse(args: &[String]) -> Result<(Sidecar, mpsc::UnboundedReceiver<String>), String> {
    let mut connection = Connection::default();
    let mut types = BTreeSet::new();
    let mut flags = Flags::new(args);
    while let Some((flag, inline)) = flags.next_flag() {
        if connection.take(&mut flags, flag, inline)? {
            continue;
        }
        match flag {
            "--type" => {
                types.insert(flags.value(flag, inline)?.to_owned());
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if types.is_empty() {
        types.insert(String::from("FILE"));
    }
    let (notices, rx) = mpsc::unbounded_channel();
    let sidecar = Sidecar {
        client: connection.client()?,
        ns: connection.ns()?,
        agent: connection.agent(),
        live: tokio::sync::Mutex::default(),
        types: Mutex::new(types),
        tickets: Mutex::default(),
        unreported: Arc::default(),
        notices,
    };
    Ok((sidecar, rx))
}

/// Serves MCP until stdin ends (or SIGTERM, SIGINT, SIGHUP), then closes the session.
///
/// # Errors
/// The MCP handshake failed.
pub async fn run(sidecar: Sidecar, notices: mpsc::UnboundedReceiver<String>) -> Result<(), String> {
    let sidecar = Arc::new(sidecar);
    // Open at once, so the session's age (its priority) is the agent's start; if the server
    // is not up yet, the first tool call tries again.
    let early = sidecar.clone();
    tokio::spawn(async move {
        let _ = early.live().await;
    });
    let mut signals = child::Interrupts::new();
    let served = tokio::select! {
        served = klock_mcp::serve(Shared(sidecar.clone()), notices) => served,
        // A host that stops its sidecar with SIGTERM (MCP hosts do, after closing stdin, or
        // instead of it) or a Ctrl-C still frees its leases at once, not after their TTL.
        _ = signals.next() => Ok(()),
    };
    let close = async {
        let live = sidecar.live.lock().await.take();
        if let Some(live) = live {
            if let Err(e) = live.session.close().await {
                eprintln!(
                    "klock mcp: could not close the session ({e}); its leases end at their TTL"
                );
            }
        }
    };
    tokio::select! {
        () = close => {}
        // Another signal while closing (a server that does not answer): stop now.
        sig = signals.next() => eprintln!(
            "klock mcp: signal {sig} while closing the session: exiting now; its leases end at their TTL"
        ),
    }
    // The caller exits without waiting for the MCP transport's read of stdin (which may stay
    // open): see `main.rs`, which shuts the runtime down in the background.
    served
}

/// The sidecar behind the MCP tools, shared so that `run` still has it to close the session
/// once the tools are done.
struct Shared(Arc<Sidecar>);

impl Sidecar {
    /// The session: opened at start, or else by the first call that finds the server up, and
    /// again after the server forgot it ([`Sidecar::gone`]).
    async fn live(&self) -> Result<Arc<Live>, Reply> {
        let mut live = self.live.lock().await;
        if let Some(live) = &*live {
            return Ok(live.clone());
        }
        let session = Session::open(self.client.clone(), &self.ns, &self.agent)
            .await
            .map_err(|e| failed(format!("Klock is unavailable, so nothing was claimed: {e}")))?;
        let (keeper, losses) = Keeper::start(session.clone());
        tokio::spawn(report_losses(
            losses,
            self.unreported.clone(),
            self.notices.clone(),
        ));
        let fresh = Arc::new(Live {
            session,
            keeper: Arc::new(keeper),
        });
        *live = Some(fresh.clone());
        Ok(fresh)
    }

    /// The session if one is open, without opening one.
    async fn current(&self) -> Option<Arc<Live>> {
        self.live.lock().await.clone()
    }

    /// `true` if `failure` says the server no longer knows `dead`'s session: then it is
    /// dropped with its waits (the next [`Sidecar::live`] opens a new one) and the model is
    /// told in the next result.
    async fn gone(&self, dead: &Arc<Live>, failure: &Failure) -> bool {
        if failure.name() != "UNKNOWN_SESSION" {
            return false;
        }
        let mut live = self.live.lock().await;
        if live.as_ref().is_some_and(|l| Arc::ptr_eq(l, dead)) {
            *live = None;
            self.tickets.lock().expect("sidecar lock").clear();
            let held = dead.keeper.held();
            let what = if held.is_empty() {
                String::from("it held nothing")
            } else {
                format!("{} ended with it", describe_leases(&held))
            };
            self.unreported.lock().expect("sidecar lock").push(format!(
                "Your Klock session ended on the server (closed after being idle, or the server restarted without its data); {what}, and any wait was withdrawn. A new session is opened for your next request."
            ));
        }
        true
    }

    /// Prefixes what happened since the last call, and the ticket outcomes not yet told.
    fn reply(&self, mut reply: Reply) -> Reply {
        let resolved: Vec<(u64, End)> = {
            let mut tickets = self.tickets.lock().expect("sidecar lock");
            let done: Vec<u64> = tickets
                .iter()
                .filter(|(_, f)| f.end.borrow().is_some())
                .map(|(t, _)| *t)
                .collect();
            done.into_iter()
                .filter_map(|t| {
                    let end = tickets.remove(&t)?.end.borrow().clone();
                    end.map(|e| (t, e))
                })
                .collect()
        };
        let mut head: Vec<String> =
            std::mem::take(&mut *self.unreported.lock().expect("sidecar lock"));
        for (ticket, end) in resolved {
            head.push(format!("Ticket {ticket}: {}", end_text(&end)));
        }
        if !head.is_empty() {
            let mut text = String::from("NOTICE since your last Klock call:\n");
            for line in head {
                let _ = writeln!(text, "- {line}");
            }
            text.push('\n');
            reply.text = text + &reply.text;
        }
        reply
    }

    /// Follows a ticket in the background until it ends; a grant is kept renewed at once.
    fn follow(&self, live: &Arc<Live>, ticket: u64, blockers: Vec<Blocker>) {
        let (tx, end) = watch::channel(None);
        let tx = Arc::new(tx);
        let tell = tx.clone();
        let (session, keeper) = (live.session.clone(), live.keeper.clone());
        let notices = self.notices.clone();
        let task = tokio::spawn(async move {
            let end = loop {
                match session.ticket(ticket, Duration::from_secs(30)).await {
                    Ok(Outcome::Waiting) => continue,
                    Ok(Outcome::Granted(leases)) => {
                        match keeper.hold_renewed(&session, &leases).await {
                            Ok(true) => break End::Granted(leases),
                            Ok(false) => {
                                break End::Failed(String::from(
                                    "granted, but a lease ended at once",
                                ))
                            }
                            Err(e) => break End::Failed(e.to_string()),
                        }
                    }
                    Ok(Outcome::TimedOut) => break End::TimedOut,
                    Ok(Outcome::Died(ms)) => break End::Died(ms),
                    Err(e) => break End::Failed(e.to_string()),
                }
            };
            let _ = notices.send(format!("Ticket {ticket}: {}", end_text(&end)));
            let _ = tx.send(Some(end));
        });
        let followed = Followed {
            end,
            tell,
            blockers,
            task,
        };
        self.tickets
            .lock()
            .expect("sidecar lock")
            .insert(ticket, followed);
    }

    /// Waits up to `wait` for a followed ticket; `None` if it still waits. A ticket
    /// withdrawn meanwhile answers how ([`End::Withdrawn`]), never that it still waits.
    async fn wait_ticket(&self, ticket: u64, wait: Duration) -> Option<End> {
        let mut rx = {
            let tickets = self.tickets.lock().expect("sidecar lock");
            tickets.get(&ticket)?.end.clone()
        };
        let end = match tokio::time::timeout(wait, rx.wait_for(Option::is_some)).await {
            Err(_) => return None, // still queued
            Ok(Ok(end)) => end.clone(),
            // Forgotten with no word (the session ended on the server: its waits with it).
            Ok(Err(_)) => Some(End::Withdrawn(WITHDRAWN_WITH_SESSION)),
        };
        self.tickets.lock().expect("sidecar lock").remove(&ticket);
        end
    }

    async fn acquire(&self, args: AcquireArgs) -> Reply {
        if args.intents.is_empty() {
            return failed(String::from(
                "Name at least one intent, like \"MUTATES FILE:/src/app.py\".",
            ));
        }
        let ttl_ms = args.ttl_s.unwrap_or(60).max(1).saturating_mul(1000);
        let wait = args.wait();
        let mut live = match self.live().await {
            Ok(live) => live,
            Err(reply) => return reply,
        };
        let mut reopened = false;
        {
            let mut types = self.types.lock().expect("sidecar lock");
            for intent in &args.intents {
                let kind = intent
                    .split_whitespace()
                    .nth(1)
                    .and_then(|r| r.split_once(':'));
                if let Some((kind, _)) = kind {
                    types.insert(kind.to_owned());
                }
            }
        }
        let started = Instant::now();
        let give_up = started + wait;
        let budget = Acquisition::new(0, Some(wait.as_millis() as u64));
        loop {
            let sent = Instant::now();
            let answer = live
                .session
                .acquire(&args.intents, ttl_ms, Some(QUEUE_MS), Duration::ZERO)
                .await;
            let verdict = match answer {
                Ok(Acquired::Verdict(verdict)) => verdict,
                // Without hold_ms the server answers with the verdict itself.
                Ok(Acquired::Resolved(..)) => {
                    return failed(String::from(
                        "The Klock server answered an unheld acquire as if held: is it the same version as this klock?",
                    ))
                }
                // Asked once more in a new session: this request was never decided.
                Err(e) if !reopened && self.gone(&live, &e).await => {
                    reopened = true;
                    live = match self.live().await {
                        Ok(live) => live,
                        Err(reply) => return reply,
                    };
                    continue;
                }
                Err(e) => return failed(format!("Nothing was claimed: {e}")),
            };
            match verdict {
                Verdict::Granted { leases } => {
                    live.keeper.hold(&leases, sent);
                    return granted(&leases);
                }
                Verdict::Wait { ticket, held_by } => {
                    let ticket = ticket.0;
                    let blockers = describe_blockers(&held_by);
                    self.follow(&live, ticket, held_by);
                    let left = give_up.saturating_duration_since(Instant::now());
                    return match self.wait_ticket(ticket, left).await {
                        Some(end) => ended(ticket, &end),
                        None => waiting(ticket, &blockers),
                    };
                }
                Verdict::Die {
                    retry_after_ms,
                    held_by,
                    ..
                } => {
                    let held = live.keeper.held();
                    let setback = Setback::Die {
                        retry_after_ms,
                        asked_wait_ms: Some(QUEUE_MS),
                    };
                    let now = started.elapsed().as_millis() as u64;
                    if let Next::Sleep { ms } = budget.after(setback, !held.is_empty(), now) {
                        // Nothing held, so retrying after the kernel's delay is safe.
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                        continue;
                    }
                    return died(retry_after_ms, &describe_blockers(&held_by), &held);
                }
            }
        }
    }

    async fn await_ticket(&self, args: AwaitArgs) -> Reply {
        let wait = args.wait();
        let blockers = {
            let tickets = self.tickets.lock().expect("sidecar lock");
            match tickets.get(&args.ticket) {
                Some(followed) => describe_blockers(&followed.blockers),
                None => {
                    let known: Vec<String> = tickets.keys().map(u64::to_string).collect();
                    return failed(format!(
                        "Ticket {} is not waiting (already answered, or not from klock_acquire). Tickets waiting: {}. Call klock_acquire to ask again.",
                        args.ticket,
                        if known.is_empty() { String::from("none") } else { known.join(", ") }
                    ));
                }
            }
        };
        match self.wait_ticket(args.ticket, wait).await {
            Some(end) => ended(args.ticket, &end),
            None => waiting(args.ticket, &blockers),
        }
    }

    async fn release(&self, args: ReleaseArgs) -> Reply {
        let all = args.all.unwrap_or(false);
        let ids = match (&args.lease_ids, all) {
            (Some(ids), false) if !ids.is_empty() => Some(ids.as_slice()),
            (None, true) => None,
            _ => {
                return failed(String::from(
                    "Pass lease_ids (a list of lease ids) or all: true, not both.",
                ))
            }
        };
        // Without a session there is nothing to release; none is opened for it.
        let Some(live) = self.current().await else {
            return Reply {
                text: String::from("RELEASED 0 lease(s). You hold nothing now."),
                failed: false,
            };
        };
        if all {
            // Waits first (their followers stopped), so a grant that comes meanwhile is
            // released by the release below rather than kept.
            let tickets = std::mem::take(&mut *self.tickets.lock().expect("sidecar lock"));
            for (ticket, followed) in tickets {
                followed.task.abort();
                let _ = live.session.cancel(ticket).await;
                // A call waiting on it is told the truth: withdrawn, not still queued (a
                // grant that raced this is released below).
                followed.tell.send_modify(|end| {
                    if !matches!(end, Some(End::TimedOut | End::Died(_) | End::Failed(_))) {
                        *end = Some(End::Withdrawn(WITHDRAWN_BY_RELEASE));
                    }
                });
            }
        }
        live.keeper.forget(ids);
        let released = match live.session.release(ids).await {
            Ok(n) => n,
            // The session ended on the server, and its leases with it.
            Err(e) if self.gone(&live, &e).await => 0,
            Err(e) => {
                return failed(format!(
                    "Release failed: {e}. Your leases end at their TTL anyway."
                ))
            }
        };
        let held = live.keeper.held();
        let rest = if held.is_empty() {
            String::from("You hold nothing now.")
        } else {
            format!("You still hold {}.", describe_leases(&held))
        };
        Reply {
            text: format!("RELEASED {released} lease(s). {rest}"),
            failed: false,
        }
    }

    async fn status(&self, args: StatusArgs) -> Reply {
        match resource_state(&self.client, &self.ns, &args.resource).await {
            Ok((state, now)) => {
                let mine = self.current().await.map(|l| l.session.info.session_id);
                let others = state
                    .holders
                    .iter()
                    .chain(&state.covering)
                    .any(|h| Some(h.session_id) != mine);
                let advice = if others {
                    "Someone else holds it or something overlapping: work on something else, or klock_acquire it with wait_s to queue for it."
                } else {
                    "Nobody else holds it: klock_acquire it before editing."
                };
                Reply {
                    text: format!("{}{advice}", render_resource(&state, now)),
                    failed: false,
                }
            }
            Err(e) => failed(format!("Cannot read {}: {e}", args.resource)),
        }
    }

    async fn reconcile(&self) -> Reply {
        let nothing = || Reply {
            text: String::from("You hold no lease (as far as this agent knows)."),
            failed: false,
        };
        let live = match self.live().await {
            Ok(live) => live,
            Err(reply) => return reply,
        };
        let held = live.keeper.held();
        if held.is_empty() {
            return nothing();
        }
        let ids: Vec<u64> = held.iter().map(|l| l.lease_id.0).collect();
        let statuses = match live.session.reconcile(&ids).await {
            Ok(s) => s,
            // The session ended on the server, and its leases with it (the notice says so).
            Err(e) if self.gone(&live, &e).await => return nothing(),
            Err(e) => return failed(format!("Cannot reconcile: {e}")),
        };
        let mut text = String::new();
        let mut gone = Vec::new();
        for (lease, status) in held.iter().zip(&statuses) {
            let state = status["status"].as_str().unwrap_or("UNKNOWN");
            let _ = writeln!(
                text,
                "lease {} {} {}: {state}{}",
                lease.lease_id,
                lease.predicate,
                lease.resource,
                status["fence"]
                    .as_u64()
                    .map(|f| format!(", fence {f}"))
                    .unwrap_or_default()
            );
            if state != "ACTIVE" {
                gone.push(lease.lease_id.0);
            }
        }
        if gone.is_empty() {
            text.push_str("All ACTIVE: carry on.");
        } else {
            live.keeper.forget(Some(&gone));
            text.push_str("Stop editing what a lease that is not ACTIVE covered; klock_acquire it again first.");
        }
        Reply {
            text,
            failed: false,
        }
    }

    async fn who(&self) -> Reply {
        let types: Vec<String> = self
            .types
            .lock()
            .expect("sidecar lock")
            .iter()
            .cloned()
            .collect();
        match gather(&self.client, &self.ns, &types).await {
            Ok(overview) => Reply {
                text: render(&overview, &types),
                failed: false,
            },
            Err(e) => failed(format!("Cannot read the namespace: {e}")),
        }
    }
}

async fn report_losses(
    mut losses: mpsc::UnboundedReceiver<Loss>,
    unreported: Arc<Mutex<Vec<String>>>,
    notices: mpsc::UnboundedSender<String>,
) {
    while let Some(loss) = losses.recv().await {
        let text = lost(&loss);
        let _ = notices.send(text.clone());
        unreported.lock().expect("sidecar lock").push(text);
    }
}

impl Coordinator for Shared {
    async fn acquire(&self, args: AcquireArgs) -> Reply {
        self.0.reply(self.0.acquire(args).await)
    }

    async fn await_ticket(&self, args: AwaitArgs) -> Reply {
        self.0.reply(self.0.await_ticket(args).await)
    }

    async fn release(&self, args: ReleaseArgs) -> Reply {
        self.0.reply(self.0.release(args).await)
    }

    async fn status(&self, args: StatusArgs) -> Reply {
        self.0.reply(self.0.status(args).await)
    }

    async fn reconcile(&self) -> Reply {
        self.0.reply(self.0.reconcile().await)
    }

    async fn who(&self) -> Reply {
        self.0.reply(self.0.who().await)
    }
}
