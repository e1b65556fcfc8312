//! A cluster node: the Raft node of `klock serve --node-id`, the proposer it gives the
//! server's engine, and the leader's clock.
//!
//! Contract:
//! - [`ClusterConfig`] is the server's [`Cluster`]: starting it opens the Raft log file (the
//!   `--data` path), restores the machine from its stored snapshot, and runs the Raft node on
//!   the server's applier, with the peers' HTTP network ([`crate::network`]) and its routes
//!   ([`crate::routes`]).
//! - Leader time: when this node becomes the committed leader it waits until every entry of
//!   the earlier terms is applied (a read index), anchors its clock on the applied
//!   `last_now` (time never goes back, and the pause between leaders does not count), and
//!   proposes a `LeaderChanged` entry (the machine's `Recovered` entry: every session gets
//!   its suspension grace, as after a single node's restart) conditional on its term. Only
//!   once that entry is applied does it stamp and propose clients' commands; until then, and
//!   whenever it does not lead, it has no clock.
//! - [`Replicator::propose`]: on the anchored leader, a request's submissions are stamped
//!   with one reading of the leader's clock (under [`ClusterConfig::manual_clock`]: each with
//!   the `now` its request carried, for conformance runs through a cluster) and written
//!   conditional on the leader's term: two or more that share one `now` as one
//!   [`Entry::Batch`] (one Raft entry, its commands applied in order, each answered with its
//!   own reply, all carrying the entry's index), else each as its own entry, in order, and
//!   answered with the applied entry's reply. On a follower that knows the leader, the submissions go to
//!   the leader (`/raft/propose`: the requests that come while [`FORWARDS_IN_FLIGHT`] are
//!   under way to that leader wait, and go together in the next one, up to
//!   [`FORWARD_ALONE`] submissions, each keeping its own submissions' order and answers; a
//!   request of more goes alone); the answers are given as soon as the leader's are in
//!   (committed), and every read through this node first applies up to the entries it
//!   answered ([`Replicate::answered`]: so a read through it right after sees its own
//!   write, without a write waiting for this node's apply). With no leader known,
//!   or a leader that does not answer, the answer is `Unavailable` (503, retry).
//! - [`Replicator::relay`]: a follower that knows its leader relays a batch request to the
//!   leader's client API as it came ([`klock_server::relay`]), and its answer's
//!   `Klock-Index` is an entry it answered, as above; [`Replicator::propose_here`] is a
//!   relayed request's proposal: as the anchored leader, or refused.
//! - Reads that must see every acknowledged write (`Replicate::caught_up`: a session or a
//!   ticket this node does not know yet) wait for a read index: the leader confirms with a
//!   quorum that it still leads; a follower asks its leader for that index
//!   (`/raft/read-index`) and waits until it applied up to it.
//! - Leaving (`Replicate::leave`, when the server stops on SIGTERM or Ctrl-C): a leader
//!   hands its leadership to the voter with the most of the log and waits (3 s at most) for
//!   another node to lead, so the cluster does not wait out an election timeout; then the
//!   Raft node stops. Every answer given was committed already: leaving loses nothing.
//! - A leader whose port refuses connections (its process is gone) is replaced at once, not
//!   after openraft's leader lease and election timeout ([`crate::gone`]: the watch runs on
//!   a node started by [`ClusterConfig`]'s `start`, with its HTTP routes).

use crate::gone::GoneLeader;
use crate::log_store::{open_file, LogStore};
use crate::network::Network;
use crate::peer::{Peer, PeerAccess};
use crate::state_machine::{SnapshotDue, StateMachine};
use crate::types::{KlockRaft, Proposal, Replies};
use axum::body::Bytes;
use futures_util::future::BoxFuture;
use hyper::header::{HeaderMap, HeaderValue};
use klock_core::Command;
use klock_server::applier::Applier;
use klock_server::engine::{self, Answers, Clock, EngineError, Replicate, Reply, Submission};
use klock_server::machine::Entry;
use klock_server::relay::{Relay, Relayed, RELAYED_HEADER};
use klock_server::serve::{Cluster, Started};
use openraft::alias::CommittedLeaderIdOf;
use openraft::impls::ProgressResponder;
use openraft::network::RaftNetworkFactory;
use openraft::raft::ReadPolicy;
use openraft::rt::WatchReceiver as _;
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The Raft node of Klock.
pub type RaftNode = openraft::Raft<KlockRaft, StateMachine>;
type LeaderId = CommittedLeaderIdOf<KlockRaft>;

/// How long a follower waits for its leader's answer to forwarded submissions (a held
/// acquire is answered at once: holding is the handler's, never the engine's).
const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);

/// How many `/raft/propose` requests a follower has under way at once: the requests that come
/// meanwhile wait, and go together in the next one (fewer, larger requests to the leader).
const FORWARDS_IN_FLIGHT: usize = 4;

/// Forwarded requests are joined up to this many submissions a `/raft/propose` (a request
/// with more goes alone). A batch request is relayed whole instead ([`klock_server::relay`]).
const FORWARD_ALONE: usize = 64;

/// How long a follower waits for its leader's answer to a membership change it passed on (a
/// learner's catch-up is part of adding it).
const MEMBERSHIP_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a read through a follower waits to apply what its leader answered (or for a read
/// index) before it is refused as unavailable.
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(5);

/// A cluster node's configuration (`--node-id`, `--cluster-peers`, `--cluster-secret-file`,
/// `--data`).
#[derive(Clone)]
pub struct ClusterConfig {
    /// This node's id (a key of `peers`).
    pub id: u64,
    /// Every node's id and address (`http://HOST:PORT` or `https://HOST:PORT`: its API and
    /// its `/raft/*` routes).
    pub peers: BTreeMap<u64, String>,
    /// The cluster secret (never shown) and the CA bundle trusted for `https://` peers.
    pub access: PeerAccess,
    /// The Raft log file (`--data`).
    pub data: PathBuf,
    /// Raft's timing: heartbeat and election timeouts, in ms.
    pub heartbeat_ms: u64,
    pub election_ms: (u64, u64),
    /// Take a snapshot every this many commands applied (a batch entry counts its commands)
    /// and purge the log it covers (`--snapshot-every`; 0: never). A node too far behind then
    /// catches up by snapshot.
    pub snapshot_every: u64,
    /// `--clock manual` (conformance runs through a cluster): the leader stamps each entry
    /// with the `now` its request carried, instead of its own clock, and a request without
    /// one is refused as on a single manual-clock server.
    pub manual_clock: bool,
}

impl fmt::Debug for ClusterConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterConfig")
            .field("id", &self.id)
            .field("peers", &self.peers)
            .field("data", &self.data)
            .finish_non_exhaustive()
    }
}

impl ClusterConfig {
    /// The configuration of node `id` of `peers`, with the default timing (heartbeat 100 ms,
    /// election timeout 400-800 ms) and a snapshot every
    /// [`klock_server::serve::DEFAULT_SNAPSHOT_EVERY`] commands.
    ///
    /// # Errors
    /// `id` is not one of `peers`, a peer's address is not `http://HOST:PORT` or
    /// `https://HOST:PORT`, or an `https://` one while `access` trusts no CA bundle.
    pub fn new(
        id: u64,
        peers: BTreeMap<u64, String>,
        access: PeerAccess,
        data: PathBuf,
    ) -> Result<ClusterConfig, String> {
        if !peers.contains_key(&id) {
            return Err(format!(
                "BAD_CLUSTER: --node-id {id} is not one of --cluster-peers"
            ));
        }
        for url in peers.values() {
            Peer::new(url, &access)?;
        }
        Ok(ClusterConfig {
            id,
            peers,
            access,
            data,
            heartbeat_ms: 100,
            election_ms: (400, 800),
            snapshot_every: klock_server::serve::DEFAULT_SNAPSHOT_EVERY,
            manual_clock: false,
        })
    }

    /// The membership's information of the node at `url` (its Raft and its API address).
    pub fn node(url: &str) -> openraft::NodeInfo {
        openraft::NodeInfo {
            raft_addr: url.to_owned(),
            data: url.to_owned(),
        }
    }
}

impl Cluster for ClusterConfig {
    fn start(&self, state: Arc<Mutex<Applier>>) -> BoxFuture<'static, Started> {
        let config = self.clone();
        Box::pin(async move { start(config, state).await })
    }
}

/// Starts the node (module contract): its Raft RPCs over HTTP, and its `/raft/*` routes.
async fn start(config: ClusterConfig, state: Arc<Mutex<Applier>>) -> Started {
    let (replicator, routes) = serve_node(config, state).await?;
    Ok((replicator, routes))
}

/// The node of `config` on `state` as `klock serve` runs it: its Raft RPCs over HTTP, the
/// watch for a leader whose process is gone ([`crate::gone`]), and its `/raft/*` routes (to
/// be served on its address).
///
/// # Errors
/// As [`node`].
pub async fn serve_node(
    config: ClusterConfig,
    state: Arc<Mutex<Applier>>,
) -> Result<(Arc<Replicator>, axum::Router), String> {
    let network = Network::new(config.access.clone());
    let replicator = node(&config, state, network).await?;
    crate::gone::watch(replicator.raft.clone(), Arc::downgrade(&replicator.gone));
    let routes = crate::routes::router(
        replicator.raft.clone(),
        Arc::clone(&replicator),
        config.access.secret(),
        config.peers.clone(),
    );
    Ok((replicator, routes))
}

/// The Raft node of `config` on the applier `state`, its RPCs sent over `network` (the HTTP
/// network of a server, or a simulated one in the tests), and its proposer.
///
/// # Errors
/// The log file cannot be opened, the Raft configuration is refused, or the node cannot
/// start.
pub async fn node<N, P>(
    config: &ClusterConfig,
    state: Arc<Mutex<Applier>>,
    network: N,
) -> Result<Arc<Replicator>, String>
where
    N: RaftNetworkFactory<KlockRaft, Network = P>,
    P: openraft::RaftNetworkV2<KlockRaft, SnapshotData = std::io::Cursor<Vec<u8>>>,
{
    let (log, torn) = open_file(&config.data).map_err(|e| e.to_string())?;
    if let Some(torn) = torn {
        tracing::warn!(
            at = torn.at,
            dropped_bytes = torn.dropped,
            "the Raft log ended in a torn record after byte {} ({} bytes cut)",
            torn.at,
            torn.dropped
        );
    }
    let mut sm =
        StateMachine::open(Arc::clone(&state), Arc::clone(&log)).map_err(|e| e.to_string())?;
    let due = sm.snapshot_every(config.snapshot_every);
    let raft_config = openraft::Config {
        cluster_name: String::from("klock"),
        heartbeat_interval: config.heartbeat_ms,
        election_timeout_min: config.election_ms.0,
        election_timeout_max: config.election_ms.1,
        // Not openraft's count of log entries: a batch entry carries up to 1,000 commands, and
        // what a restart replays is bounded by commands (`snapshot_when_due`).
        snapshot_policy: openraft::SnapshotPolicy::Never,
        // What a snapshot covers is dropped from the log (the single server compacts so too).
        max_in_snapshot_log_to_keep: 0,
        ..openraft::Config::default()
    }
    .validate()
    .map_err(|e| format!("BAD_CLUSTER: {e}"))?;
    let raft = RaftNode::new(
        config.id,
        Arc::new(raft_config),
        network,
        LogStore::new(log),
        sm,
    )
    .await
    .map_err(|e| format!("cannot start the Raft node: {e}"))?;
    let replicator = Arc::new_cyclic(|me| Replicator {
        me: me.clone(),
        raft: raft.clone(),
        id: config.id,
        access: config.access.clone(),
        leaders: Mutex::new(BTreeMap::new()),
        state,
        anchor: Arc::new(Mutex::new(None)),
        watch: Mutex::new(None),
        manual_clock: config.manual_clock,
        gone: Arc::new(GoneLeader::new(
            config.id,
            Duration::from_millis(config.heartbeat_ms),
            config.access.clone(),
        )),
        answered: AtomicU64::new(0),
        forwards: Mutex::new(BTreeMap::new()),
    });
    replicator.watch_leadership();
    snapshot_when_due(Arc::downgrade(&replicator), due);
    Ok(replicator)
}

/// Asks openraft for a snapshot whenever the state machine says one is due
/// ([`ClusterConfig::snapshot_every`] commands applied since the last): until the node or its
/// state machine is gone.
fn snapshot_when_due(node: std::sync::Weak<Replicator>, due: Arc<SnapshotDue>) {
    if due.every == 0 {
        return;
    }
    tokio::spawn(async move {
        loop {
            due.wait().await;
            // The state machine gone (only this task holds `due`): the node stopped.
            let (Some(node), true) = (node.upgrade(), Arc::strong_count(&due) > 1) else {
                return;
            };
            // Asked once more at the next apply if a snapshot under way made openraft ignore
            // this one (the count is reset only when a snapshot begins).
            if due.due() && node.raft.trigger().snapshot().await.is_err() {
                return; // the Raft core stopped
            }
        }
    });
}

/// The leader's clock, once anchored, and the term it holds for.
#[derive(Clone)]
struct Anchor {
    leader: LeaderId,
    clock: Clock,
}

/// A request's submissions waiting to be passed on to the leader.
struct Forward {
    submissions: Vec<Submission>,
    answer: tokio::sync::oneshot::Sender<Answers>,
}

/// The forwards queued for one leader, and the senders under way to it (at most
/// [`FORWARDS_IN_FLIGHT`]; a leader that does not answer holds up only its own queue).
#[derive(Default)]
struct Forwards {
    waiting: Vec<Forward>,
    in_flight: usize,
}

/// The proposer of a cluster node (module contract).
pub struct Replicator {
    /// Itself, for the futures [`Replicate::propose`] returns.
    me: std::sync::Weak<Replicator>,
    raft: RaftNode,
    id: u64,
    access: PeerAccess,
    /// The connections to the leaders this node forwarded to, with the address each was
    /// made for (an address in the membership replaces an older one).
    leaders: Mutex<BTreeMap<u64, (String, Arc<Peer>)>>,
    state: Arc<Mutex<Applier>>,
    anchor: Arc<Mutex<Option<Anchor>>>,
    /// Keeps the leadership watch running.
    watch: Mutex<Option<openraft::raft::WatchChangeHandle<KlockRaft>>>,
    /// [`ClusterConfig::manual_clock`].
    manual_clock: bool,
    /// Whether the leader's process is gone ([`crate::gone`]).
    gone: Arc<GoneLeader>,
    /// For each leader forwarded to: the forwards waiting to be sent, and the senders under
    /// way.
    forwards: Mutex<BTreeMap<u64, Forwards>>,
    /// The machine index of the last entry a forwarded write of this node was answered with
    /// (module contract: a read through this node applies up to it first).
    answered: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Replicator {
    /// The node's Raft handle (its RPCs, its metrics).
    pub fn raft(&self) -> &RaftNode {
        &self.raft
    }

    /// What this node knows of its leader's liveness ([`crate::gone`]).
    pub fn gone(&self) -> &GoneLeader {
        &self.gone
    }

    /// Anchors the clock whenever this node becomes the committed leader, and drops it when
    /// it stops leading.
    fn watch_leadership(self: &Arc<Self>) {
        let (gained, lost) = (Arc::clone(self), Arc::clone(&self.anchor));
        let handle = self.raft.on_leader_change(
            move |leader| {
                let node = Arc::clone(&gained);
                async move {
                    tokio::spawn(async move { node.anchor(leader).await });
                }
            },
            move |_| {
                let anchor = Arc::clone(&lost);
                async move {
                    *lock(&anchor) = None;
                }
            },
        );
        *lock(&self.watch) = Some(handle);
    }

    /// The leader's start (module contract): read index, clock on the applied `last_now`,
    /// then the `LeaderChanged` entry under this term.
    async fn anchor(&self, leader: LeaderId) {
        if let Err(e) = self.raft.ensure_linearizable(ReadPolicy::ReadIndex).await {
            tracing::warn!("leading, but the earlier entries are not applied: {e}");
            return;
        }
        let last_now = lock(&self.state).machine().last_now();
        let clock = if self.manual_clock {
            Clock::Manual
        } else {
            Clock::monotonic(last_now)
        };
        // Every leader draws a log id; the first one applied names the cluster's log for good.
        let log = match klock_server::store::new_id() {
            Ok(log) => log,
            Err(e) => {
                tracing::warn!("leading, but no LeaderChanged entry: {e}");
                return;
            }
        };
        let changed = Entry::LeaderChanged { now: last_now, log };
        match self.write(&leader, changed).await {
            Ok(replies) => {
                tracing::info!(
                    index = replies.first().map(|r| r.index),
                    now = last_now,
                    "leading: the clock continues from {last_now}; every session has its grace"
                );
                // Only while this term still leads (checked under the anchor's lock, which
                // the loss of leadership takes to drop it): a late anchor of a lost term would
                // keep the node proposing where it cannot write.
                let mut anchor = lock(&self.anchor);
                if self
                    .raft
                    .as_leader()
                    .is_ok_and(|now| now.to_committed_leader_id() == leader)
                {
                    *anchor = Some(Anchor { leader, clock });
                }
            }
            Err(e) => tracing::warn!("leading, but the LeaderChanged entry failed: {e:?}"),
        }
    }

    /// Writes `entry` conditional on `leader`'s term, and waits for its reply.
    async fn write(&self, leader: &LeaderId, entry: Entry) -> Result<Replies, EngineError> {
        let pending = self.send(leader, entry).await?;
        pending.await
    }

    /// Sends `entry` to the Raft core conditional on `leader`'s term; the future answers it.
    async fn send(
        &self,
        leader: &LeaderId,
        entry: Entry,
    ) -> Result<impl std::future::Future<Output = Result<Replies, EngineError>>, EngineError> {
        let proposal = Proposal::new(entry)
            .map_err(|e| unavailable(format!("the entry cannot be encoded: {e}")))?;
        let (responder, answer) = ProgressResponder::complete_only();
        self.raft
            .write(proposal)
            .with_leader(*leader)
            .responder(responder)
            .await
            .map_err(|e| unavailable(format!("the Raft node stopped: {e}")))?;
        let (anchor, leader) = (Arc::clone(&self.anchor), *leader);
        Ok(async move {
            match answer.await {
                Ok(Ok(written)) => Ok(written.data),
                Ok(Err(e)) => {
                    // This term no longer leads: stop stamping for it (a new term anchors anew).
                    let mut anchor = lock(&anchor);
                    if anchor.as_ref().is_some_and(|a| a.leader == leader) {
                        *anchor = None;
                    }
                    Err(unavailable(format!("not written: {e}")))
                }
                Err(_) => Err(unavailable(String::from(
                    "leadership changed before the entry was written",
                ))),
            }
        })
    }

    /// Proposes `submissions` as the anchored leader, or answers that this node does not lead.
    /// Stamped with one reading of the clock; two or more that stamp well and share one `now`
    /// (always, under the leader's own clock) are one [`Entry::Batch`], answered with its
    /// replies in order (module contract); else each is its own entry.
    pub async fn propose_as_leader(&self, submissions: Vec<Submission>) -> Answers {
        let Some(Anchor { leader, clock }) = lock(&self.anchor).clone() else {
            return Err(unavailable(String::from(
                "this node does not lead the cluster (now)",
            )));
        };
        let stamped = engine::stamp_all(&clock, submissions);
        let stamped = match one_batch(stamped) {
            Ok((batch, shape)) => {
                let count = shape.iter().filter(|s| s.is_ok()).count();
                let replies = self.write(&leader, batch).await;
                return Ok(spread(shape, replies, count));
            }
            Err(stamped) => stamped,
        };
        let mut pending = Vec::with_capacity(stamped.len());
        for entry in stamped {
            match entry {
                Ok(entry) => pending.push(Ok(self.send(&leader, entry).await?)),
                Err(e) => pending.push(Err(e)),
            }
        }
        let mut answers = Vec::with_capacity(pending.len());
        for p in pending {
            answers.push(match p {
                Ok(answer) => answer.await.and_then(only),
                Err(e) => Err(e),
            });
        }
        Ok(answers)
    }

    /// The connection to node `leader`, at its address in the current membership (a node
    /// added later is found there, not in `--cluster-peers`).
    fn leader_peer(&self, leader: u64) -> Result<Arc<Peer>, EngineError> {
        let url = {
            let metrics = self.raft.metrics();
            let metrics = metrics.borrow_watched();
            let node = metrics.membership_config.membership().get_node(&leader);
            node.map(|n| n.data.clone())
        }
        .ok_or_else(|| unavailable(format!("the leader {leader} is not in the membership")))?;
        let mut leaders = lock(&self.leaders);
        if let Some((known, peer)) = leaders.get(&leader) {
            if *known == url {
                return Ok(Arc::clone(peer));
            }
        }
        let peer = Arc::new(Peer::new(&url, &self.access).map_err(unavailable)?);
        leaders.insert(leader, (url, Arc::clone(&peer)));
        Ok(peer)
    }

    /// Passes a membership change (`path`, `body`) on to the leader `leader`, marked as passed
    /// on; the leader's status and body.
    ///
    /// # Errors
    /// The leader is unknown to the membership or does not answer in time.
    pub async fn pass_on(
        &self,
        leader: u64,
        path: &str,
        body: Bytes,
    ) -> Result<(hyper::StatusCode, Bytes), String> {
        let peer = self.leader_peer(leader).map_err(message)?;
        let passed_on = Some((crate::routes::PASSED_ON_HEADER, String::from("1")));
        peer.post(path, passed_on, body.to_vec(), MEMBERSHIP_TIMEOUT)
            .await
            .map_err(|e| format!("the leader (node {leader}) did not answer: {e}"))
    }

    /// Passes `submissions` on to the leader `leader` (module contract): queued, and sent with
    /// the other requests' queued meanwhile in one `/raft/propose`, once fewer than
    /// [`FORWARDS_IN_FLIGHT`] are under way to that leader.
    async fn forward(&self, leader: u64, submissions: Vec<Submission>) -> Answers {
        let this = self.me.upgrade().ok_or(EngineError::Stopped)?;
        let (answer, answered) = tokio::sync::oneshot::channel();
        let send = {
            let mut queue = lock(&self.forwards);
            let queue = queue.entry(leader).or_default();
            queue.waiting.push(Forward {
                submissions,
                answer,
            });
            let send = queue.in_flight < FORWARDS_IN_FLIGHT;
            queue.in_flight += usize::from(send);
            send
        };
        if send {
            // A task of its own: the request that started it may go (its client hung up)
            // while the others' submissions are on their way.
            tokio::spawn(async move { this.send_forwards(leader).await });
        }
        answered.await.unwrap_or_else(|_| {
            Err(unavailable(String::from(
                "the forwarded write got no answer (the node is stopping)",
            )))
        })
    }

    /// Sends the forwards queued for `leader`, up to [`FORWARD_ALONE`] submissions a request,
    /// until none is left; then this sender's place in flight is free.
    async fn send_forwards(&self, leader: u64) {
        loop {
            let batch = {
                let mut forwards = lock(&self.forwards);
                let Some(queue) = forwards.get_mut(&leader) else {
                    return;
                };
                if queue.waiting.is_empty() {
                    queue.in_flight -= 1;
                    if queue.in_flight == 0 {
                        forwards.remove(&leader);
                    }
                    return;
                }
                // The oldest first, up to FORWARD_ALONE submissions (one at least).
                let (mut taken, mut n) = (0, 0);
                for f in &queue.waiting {
                    if taken > 0 && n + f.submissions.len() > FORWARD_ALONE {
                        break;
                    }
                    n += f.submissions.len();
                    taken += 1;
                }
                queue.waiting.drain(..taken).collect::<Vec<_>>()
            };
            let (mut all, mut counts) = (Vec::new(), Vec::with_capacity(batch.len()));
            let mut answers = Vec::with_capacity(batch.len());
            for f in batch {
                counts.push(f.submissions.len());
                all.extend(f.submissions);
                answers.push(f.answer);
            }
            match self.post_forward(leader, all).await {
                Ok(replies) if replies.len() == counts.iter().sum::<usize>() => {
                    let mut replies = replies.into_iter();
                    for (answer, n) in answers.into_iter().zip(counts) {
                        let _ = answer.send(Ok(replies.by_ref().take(n).collect()));
                    }
                }
                Ok(replies) => {
                    let e = unavailable(format!(
                        "the leader (node {leader}) answered {} of {} forwarded submissions",
                        replies.len(),
                        counts.iter().sum::<usize>()
                    ));
                    for answer in answers {
                        let _ = answer.send(Err(e.clone()));
                    }
                }
                Err(e) => {
                    for answer in answers {
                        let _ = answer.send(Err(e.clone()));
                    }
                }
            }
        }
    }

    /// Sends `submissions` to the leader `leader` and answers with its answers, once they are
    /// in (committed), raising [`Replicator::answered`] to their entries.
    async fn post_forward(&self, leader: u64, submissions: Vec<Submission>) -> Answers {
        let peer = self.leader_peer(leader)?;
        let body = serde_json::to_vec(&submissions).map_err(|e| unavailable(e.to_string()))?;
        let (status, bytes) = peer
            .post("/raft/propose", None, body, FORWARD_TIMEOUT)
            .await
            .map_err(|e| unavailable(format!("the leader (node {leader}) did not answer: {e}")))?;
        if !status.is_success() {
            return Err(unavailable(format!(
                "the leader (node {leader}) answered {status}: {}",
                String::from_utf8_lossy(&bytes)
            )));
        }
        let answers: Result<Vec<Result<Reply, String>>, String> = serde_json::from_slice(&bytes)
            .map_err(|e| unavailable(format!("the leader's answer is undecodable: {e}")))?;
        let answers = answers.map_err(unavailable)?;
        // Answered at once: the entries are committed (nothing answered is lost), and every
        // read through this node first applies up to them (`Replicate::answered`).
        if let Some(last) = answers.iter().flatten().map(|r| r.index).max() {
            self.answered.fetch_max(last, Ordering::AcqRel);
        }
        Ok(answers
            .into_iter()
            .map(|a| a.map_err(unavailable))
            .collect())
    }
}

/// A request's submissions, stamped (or refused by the clock), in order.
type Stamped = Vec<Result<Entry, EngineError>>;

/// Where each submission of a batch entry stands: in the entry (`Ok`), or refused.
type Shape = Vec<Result<(), EngineError>>;

/// The stamped commands as one [`Entry::Batch`] (see [`Replicator::propose_as_leader`]),
/// moved into it, with the place of each (`Ok`) and the refusals among them; or `stamped`
/// back as it was: fewer than two commands, or commands of several times (a manual clock's
/// requests may each carry their own).
fn one_batch(stamped: Stamped) -> Result<(Entry, Shape), Stamped> {
    let mut now = None;
    let mut count = 0;
    for entry in stamped.iter().flatten() {
        let Entry::Command { now: at, .. } = entry else {
            return Err(stamped);
        };
        if *now.get_or_insert(*at) != *at {
            return Err(stamped);
        }
        count += 1;
    }
    let Some(now) = now.filter(|_| count >= 2) else {
        return Err(stamped);
    };
    let mut commands = Vec::with_capacity(count);
    let shape = stamped
        .into_iter()
        .map(|entry| match entry?.into_item() {
            Some(item) => {
                commands.push(item);
                Ok(())
            }
            // Checked above: every stamped entry is a command.
            None => Err(unavailable(String::from("not a command"))),
        })
        .collect();
    Ok((Entry::batch(now, commands), shape))
}

/// The answers in the places of `shape`: its refusal where a submission was not stamped, else
/// the next of the batch entry's `replies` (of `count` commands), in order.
fn spread(
    shape: Shape,
    replies: Result<Replies, EngineError>,
    count: usize,
) -> Vec<Result<Reply, EngineError>> {
    let replies = replies.and_then(|r| {
        if r.len() == count {
            Ok(r)
        } else {
            Err(unavailable(format!(
                "the batch entry answered {} of its {count} commands",
                r.len()
            )))
        }
    });
    match replies {
        Ok(replies) => {
            let mut replies = replies.into_iter();
            shape
                .into_iter()
                .map(|s| {
                    s.and_then(|()| {
                        replies
                            .next()
                            .ok_or_else(|| unavailable(String::from("no answer")))
                    })
                })
                .collect()
        }
        Err(e) => shape
            .into_iter()
            .map(|s| s.and_then(|()| Err(e.clone())))
            .collect(),
    }
}

/// The one reply of an entry of one command.
fn only(replies: Replies) -> Result<Reply, EngineError> {
    let n = replies.len();
    let mut replies = replies.into_iter();
    match (replies.next(), n) {
        (Some(reply), 1) => Ok(reply),
        _ => Err(unavailable(format!(
            "an entry of one command answered {n} times"
        ))),
    }
}

impl Replicator {
    /// The leader's answer to a follower's `/raft/propose` of `submissions`
    /// ([`Replicator::propose_as_leader`], in its wire form: [`wire`]).
    pub async fn propose_forwarded(
        &self,
        submissions: Vec<Submission>,
    ) -> Result<Vec<Result<Reply, String>>, String> {
        let shown: Vec<bool> = submissions.iter().map(shows_events).collect();
        wire(self.propose_as_leader(submissions).await, &shown)
    }
}

/// Whether the answer to `submission` shows its reply's events: only an `advance`'s does
/// (`/v1/advance`). See [`wire`].
fn shows_events(submission: &Submission) -> bool {
    matches!(submission.command, Command::Advance)
}

/// The wire form of [`Answers`] (`/raft/propose`): errors as their messages, and the events
/// of the `k`-th reply only if `shows_events[k]` ([`shows_events`] of its submission). The
/// follower publishes every entry's events from its own apply, so the others' would be
/// encoded here and decoded there for nothing (about a tenth of a follower's work under batch
/// requests went into decoding them).
fn wire(answers: Answers, shows_events: &[bool]) -> Result<Vec<Result<Reply, String>>, String> {
    let all = answers.map_err(message)?;
    Ok(all
        .into_iter()
        .enumerate()
        .map(|(k, answer)| {
            let mut reply = answer.map_err(message)?;
            // By index, not a zip: no answer is ever dropped, whatever the two counts.
            if shows_events.get(k) != Some(&true) {
                reply.events = Vec::new();
            }
            Ok(reply)
        })
        .collect())
}

/// An engine error as the message a peer or an operator reads.
fn message(e: EngineError) -> String {
    match e {
        EngineError::Stopped => String::from("the leader is stopping"),
        EngineError::Clock(m) => m.to_owned(),
        EngineError::Unavailable(m) => m,
    }
}

fn unavailable(message: String) -> EngineError {
    EngineError::Unavailable(message)
}

impl Replicator {
    /// The read index (module contract): on the leader, once a quorum confirmed it still leads
    /// and it applied what it had committed; on a follower, once it applied up to the index
    /// its leader gives (`/raft/read-index`).
    async fn read_index(&self) -> Result<(), EngineError> {
        let leader = match self.raft.ensure_linearizable(ReadPolicy::ReadIndex).await {
            Ok(_) => return Ok(()),
            Err(e) => e
                .forward_to_leader()
                .and_then(|f| f.leader_id)
                .ok_or_else(|| unavailable(format!("no leader to take a read index from: {e}")))?,
        };
        let peer = self.leader_peer(leader)?;
        let (status, bytes) = peer
            .post("/raft/read-index", None, b"{}".to_vec(), FORWARD_TIMEOUT)
            .await
            .map_err(|e| unavailable(format!("the leader (node {leader}) did not answer: {e}")))?;
        let index = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .filter(|_| status.is_success())
            .and_then(|v| v["index"].as_u64())
            .ok_or_else(|| {
                unavailable(format!(
                    "the leader (node {leader}) gave no read index ({status}): {}",
                    String::from_utf8_lossy(&bytes)
                ))
            })?;
        self.raft
            .wait(Some(CATCH_UP_TIMEOUT))
            .applied_index_at_least(Some(index), "a read index")
            .await
            .map(|_| ())
            .map_err(|e| unavailable(format!("not caught up with the leader's read index: {e}")))
    }

    /// The leader's read index: the index a follower applies up to before a read (see
    /// [`Replicator::read_index`]).
    ///
    /// # Errors
    /// This node does not lead (any more).
    pub async fn leader_read_index(&self) -> Result<u64, String> {
        self.raft
            .ensure_linearizable(ReadPolicy::ReadIndex)
            .await
            .map(|read| read.log_id().index)
            .map_err(|e| e.to_string())
    }
}

/// How long a leaving leader waits for the peer it hands leadership to to take it.
const HANDOVER_TIMEOUT: Duration = Duration::from_secs(3);

impl Replicator {
    /// The voter other than this node that has the most of the log (`None`: no other voter),
    /// while this node leads.
    fn successor(&self) -> Option<u64> {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow_watched();
        if metrics.current_leader != Some(self.id) {
            return None;
        }
        let matched = metrics.replication.as_ref();
        metrics
            .membership_config
            .membership()
            .voter_ids()
            .filter(|id| *id != self.id)
            .max_by_key(|id| {
                matched
                    .and_then(|m| m.get(id).cloned().flatten())
                    .map(|log| log.index)
            })
    }

    /// Leaving (module contract): a leader hands its leadership to its best-caught-up voter and
    /// waits (a bounded time) until another node leads, so the cluster does not wait out an
    /// election timeout; then the Raft node stops (its log is flushed and closed).
    async fn hand_over_and_stop(&self) {
        if let Some(successor) = self.successor() {
            match self.raft.trigger().transfer_leader(successor).await {
                Ok(()) => {
                    let me = self.id;
                    let taken = self
                        .raft
                        .wait(Some(HANDOVER_TIMEOUT))
                        .metrics(
                            move |m| m.current_leader.is_some_and(|l| l != me),
                            "another node leads",
                        )
                        .await;
                    match taken {
                        Ok(m) => tracing::info!(
                            leader = m.current_leader,
                            "leaving: handed leadership to node {successor}"
                        ),
                        Err(e) => tracing::warn!(
                            "leaving: node {successor} did not take the leadership ({e}); the others elect a leader"
                        ),
                    }
                }
                Err(e) => tracing::warn!("leaving: cannot hand leadership over: {e}"),
            }
        }
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!("leaving: the Raft node did not stop cleanly: {e}");
        }
    }
}

impl Replicator {
    /// The clock's refusals of `submissions` when one carries its own time to a cluster that
    /// keeps its own (or carries none to a manual-clock one: all of its submissions then):
    /// refused here, with the clock's own error, as every node refuses them (passed on to the
    /// leader, a refusal would come back as a message only, answered 503 as if worth a retry).
    fn misclocked(&self, submissions: &[Submission]) -> Option<Answers> {
        if submissions
            .iter()
            .all(|s| s.now.is_some() == self.manual_clock)
        {
            return None;
        }
        let clock = if self.manual_clock {
            Clock::Manual
        } else {
            Clock::monotonic(0)
        };
        Some(Ok(submissions
            .iter()
            .map(|s| match engine::stamp(&clock, s.clone()) {
                Err(e) => Err(e),
                Ok(_) => Err(unavailable(String::from(
                    "a request carries its own time in part only",
                ))),
            })
            .collect()))
    }

    /// `request` sent to the client API of `leader` as it came, marked relayed, and the
    /// leader's answer ([`klock_server::relay`]); the index it names is this node's
    /// [`Replicator::answered`] from then on.
    async fn relay_to(&self, leader: u64, mut request: Relay) -> Result<Relayed, EngineError> {
        let peer = self.leader_peer(leader)?;
        request
            .headers
            .insert(RELAYED_HEADER, HeaderValue::from_static("1"));
        let (status, headers, body) = peer
            .send(
                hyper::Method::POST,
                &request.path,
                request.headers,
                request.body,
                FORWARD_TIMEOUT,
            )
            .await
            .map_err(|e| unavailable(format!("the leader (node {leader}) did not answer: {e}")))?;
        if let Some(index) = Relayed::index(&headers) {
            self.answered.fetch_max(index, Ordering::AcqRel);
        }
        Ok(Relayed::new(status, headers, body))
    }
}

impl Replicate for Replicator {
    fn propose(&self, submissions: Vec<Submission>) -> BoxFuture<'static, Answers> {
        let me = self.me.upgrade();
        Box::pin(async move {
            let this = me.ok_or(EngineError::Stopped)?;
            if let Some(refused) = this.misclocked(&submissions) {
                return refused;
            }
            if lock(&this.anchor).is_some() {
                return this.propose_as_leader(submissions).await;
            }
            match this.raft.current_leader().await {
                Some(leader) if leader != this.id => this.forward(leader, submissions).await,
                Some(_) => Err(unavailable(String::from(
                    "this node was just elected and is catching up; retry",
                ))),
                None => Err(unavailable(String::from(
                    "no leader is known now (an election is under way); retry",
                ))),
            }
        })
    }

    fn propose_here(&self, submissions: Vec<Submission>) -> BoxFuture<'static, Answers> {
        let me = self.me.upgrade();
        Box::pin(async move {
            let this = me.ok_or(EngineError::Stopped)?;
            match this.misclocked(&submissions) {
                Some(refused) => refused,
                None => this.propose_as_leader(submissions).await,
            }
        })
    }

    /// Relayed while another node leads and is known (module contract of
    /// [`klock_server::relay`]); a node that leads, or knows no leader, answers itself (its
    /// `propose` then says why it cannot take the write now).
    fn relay(
        &self,
        path: &str,
        headers: &HeaderMap,
        body: &Bytes,
    ) -> Option<BoxFuture<'static, Result<Relayed, EngineError>>> {
        if lock(&self.anchor).is_some() {
            return None;
        }
        let leader = self
            .raft
            .metrics()
            .borrow_watched()
            .current_leader
            .filter(|leader| *leader != self.id)?;
        let this = self.me.upgrade()?;
        let request = Relay::of(path, headers, body);
        Some(Box::pin(
            async move { this.relay_to(leader, request).await },
        ))
    }

    fn clock(&self) -> Option<Clock> {
        lock(&self.anchor).as_ref().map(|a| a.clock)
    }

    /// The leader's address in the current membership, while another node leads and was
    /// heard from lately (a client is not sent to a leader that may be gone: during an
    /// election a follower still names the old one for up to its election timeout).
    fn leader_url(&self) -> Option<String> {
        if lock(&self.anchor).is_some() || !self.gone.heard_lately() {
            return None;
        }
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow_watched();
        let leader = metrics.current_leader.filter(|leader| *leader != self.id)?;
        let node = metrics.membership_config.membership().get_node(&leader)?;
        Some(node.data.clone())
    }

    fn caught_up(&self) -> BoxFuture<'static, Result<(), EngineError>> {
        let me = self.me.upgrade();
        Box::pin(async move { me.ok_or(EngineError::Stopped)?.read_index().await })
    }

    fn answered(&self) -> u64 {
        self.answered.load(Ordering::Acquire)
    }

    fn applied_up_to(&self, index: u64) -> BoxFuture<'static, Result<(), EngineError>> {
        let raft = self.raft.clone();
        Box::pin(async move {
            // The machine's index is the Raft index plus one.
            raft.wait(Some(CATCH_UP_TIMEOUT))
                .applied_index_at_least(Some(index.saturating_sub(1)), "the answered writes")
                .await
                .map(|_| ())
                .map_err(|e| {
                    unavailable(format!("not caught up with its own answered writes: {e}"))
                })
        })
    }

    fn leave(&self) -> BoxFuture<'static, ()> {
        let me = self.me.upgrade();
        Box::pin(async move {
            if let Some(this) = me {
                this.hand_over_and_stop().await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use klock_core::{Command, Output};
    use klock_server::machine::Item;

    fn at(now: u64) -> Result<Entry, EngineError> {
        Ok(Item {
            command: Command::Advance,
            key: None,
            token: None,
            caller: None,
            resume: None,
            fingerprint: None,
        }
        .at(now))
    }

    fn reply(index: u64) -> Reply {
        Reply {
            index,
            repeat_of: None,
            now: 1,
            output: Ok(Output::Done),
            events: Vec::new(),
        }
    }

    /// A forwarded answer carries its reply's events only for an `advance`, the one answer that
    /// shows them; the others' are left out, and errors travel as their messages.
    #[test]
    fn the_wire_carries_only_an_advances_events() {
        let with_event = |index| Reply {
            events: vec![klock_core::Event::WaitTimeout {
                ticket: klock_core::TicketId(1),
                session: klock_core::SessionId(2),
            }],
            ..reply(index)
        };
        let submissions = [
            Submission::new(Command::Advance, None),
            Submission::new(Command::NextDeadline, None),
            Submission::new(Command::Advance, None),
        ];
        let shown: Vec<bool> = submissions.iter().map(shows_events).collect();
        let answers = Ok(vec![
            Ok(with_event(1)),
            Ok(with_event(2)),
            Err(EngineError::Unavailable(String::from("gone"))),
        ]);
        let sent = wire(answers, &shown).unwrap();
        let events: Vec<Option<usize>> = sent
            .iter()
            .map(|a| a.as_ref().ok().map(|r| r.events.len()))
            .collect();
        assert_eq!(events, [Some(1), Some(0), None]);
        assert_eq!(sent[2].as_ref().unwrap_err(), "gone");
        let refused = wire(Err(EngineError::Stopped), &shown).unwrap_err();
        assert_eq!(refused, "the leader is stopping");
    }

    /// Two or more stamped commands of one `now` are one batch entry, moved into it in order
    /// (a refused one is left out, its refusal kept in its place); one alone, or commands of
    /// several times (a manual clock's), are not, and come back as they were.
    #[test]
    fn one_batch_of_the_commands_of_one_time() {
        let refused = || Err(EngineError::Clock("refused"));
        let keyed = |now, key: &str| {
            let mut item = at(now).unwrap().into_item().unwrap();
            item.key = Some(key.to_owned());
            Ok(item.at(now))
        };
        let (batch, shape) = one_batch(vec![keyed(5, "a"), refused(), keyed(5, "b")]).unwrap();
        match batch {
            Entry::Batch {
                now: 5, commands, ..
            } => {
                let keys: Vec<_> = commands.iter().map(|c| c.key.as_deref()).collect();
                assert_eq!(keys, [Some("a"), Some("b")]);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            shape[..],
            [Ok(()), Err(EngineError::Clock("refused")), Ok(())]
        ));
        let back = |stamped: Vec<Result<Entry, EngineError>>| {
            let n = stamped.len();
            let back = one_batch(stamped).unwrap_err();
            assert_eq!(back.len(), n);
            back
        };
        assert!(matches!(
            back(vec![at(5), refused()])[1],
            Err(EngineError::Clock(_))
        ));
        assert_eq!(
            back(vec![at(5), at(6)])[1].as_ref().unwrap(),
            &at(6).unwrap()
        );
        back(vec![]);
    }

    /// The batch's replies go back in the submissions' places, a refused submission keeps its
    /// refusal in its place, and a batch that failed (or answered another count) fails each.
    #[test]
    fn the_replies_are_spread_over_the_submissions() {
        let stamped = || vec![Ok(()), Err(EngineError::Clock("refused")), Ok(())];
        let got = spread(stamped(), Ok(vec![reply(7), reply(7)]), 2);
        assert!(matches!(&got[0], Ok(r) if r.index == 7));
        assert!(matches!(got[1], Err(EngineError::Clock("refused"))));
        assert!(matches!(&got[2], Ok(r) if r.index == 7));
        let short = spread(stamped(), Ok(vec![reply(7)]), 2);
        assert!(matches!(short[0], Err(EngineError::Unavailable(_))));
        assert!(matches!(short[1], Err(EngineError::Clock("refused"))));
        assert!(matches!(short[2], Err(EngineError::Unavailable(_))));
        let failed = spread(stamped(), Err(unavailable("gone".into())), 2);
        assert!(matches!(failed[0], Err(EngineError::Unavailable(_))));
        assert!(matches!(failed[2], Err(EngineError::Unavailable(_))));
    }
}
