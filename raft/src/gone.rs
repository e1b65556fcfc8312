//! A leader whose process is gone: a follower starts the election at once, and a voter grants
//! it inside its leader lease, instead of both waiting out openraft's timers.
//!
//! Why: openraft's voters refuse every vote while the leader lease of the leader they follow
//! runs (`election_timeout_max`, 800 ms since its last heartbeat), and a follower elects only
//! once that lease and its own election timeout (400-800 ms) have passed: 1.2-1.6 s after the
//! last heartbeat, and up to one timeout more when the first candidate's log is the shorter
//! (docs/DECISIONS.md, "Issue 24: failover time").
//! When the leader's process is gone (SIGKILL, a crash, a stop), its port refuses connections
//! at once, and that proves the lease has no one left to protect.
//!
//! Contract:
//! - A node's [`GoneLeader`] knows when the last `/raft/append` reached it ([`GoneLeader::heard`]).
//! - The watch ([`watch`], started with the node's routes): every [`TICK`], on a voter that
//!   follows a committed leader `L` and has heard nothing for two heartbeat intervals, it
//!   connects to `L`'s address ([`refused`]). Only a refused connection counts (nothing
//!   listens there: the process is gone); a connection made, a timeout or any other error is
//!   a leader that may live (a paused or loaded process still has its port open: the kernel
//!   accepts for it), and openraft's own timers decide. On a refusal it waits its turn, so
//!   the survivors do not split the vote nor start with a candidate the others must refuse:
//!   it asks the other voters for their last log index (`/raft/status`, [`PROBE_TIMEOUT`];
//!   one that does not answer is left out), ranks the survivors by that index (greatest
//!   first, then by id) and waits its rank times [`STAGGER`]. If it still follows `L` in the
//!   same term then, it starts an election (`trigger().elect`). Once per leader and term.
//! - A vote request ([`GoneLeader::lease_void`], by the `/raft/vote` route) from another node
//!   than `L`, while this node follows `L`, is passed to openraft as one its leader lease does
//!   not hold back (the request's `leadership_transfer` flag) if and only if `L`'s port refuses
//!   a connection right then. Every other rule of the vote (term, log) is openraft's.
//!
//! Safety: Raft's safety never rests on the lease (a vote is still one per term, to a log at
//! least as long), and Klock reads through a read index, never openraft's lease read; the
//! lease only keeps a live leader from being disturbed, and a leader whose port refuses is
//! not live. A paused old leader keeps its port open, so it is not affected: it loses its
//! leadership on openraft's timers, and its writes are conditional on its term.

use crate::node::RaftNode;
use crate::peer::{Peer, PeerAccess};
use openraft::rt::WatchReceiver as _;
use openraft::ServerState;
use std::sync::{Mutex, Weak};
use std::time::{Duration, Instant};

/// How often the watch looks.
pub const TICK: Duration = Duration::from_millis(20);
/// How long a connection attempt to the leader may take before it counts as "may live".
pub const PROBE_TIMEOUT: Duration = Duration::from_millis(200);
/// How long each voter waits after the one ranked before it, once the leader is gone.
pub const STAGGER: Duration = Duration::from_millis(60);

/// What a node knows of its leader's liveness (module contract).
pub struct GoneLeader {
    id: u64,
    heartbeat: Duration,
    access: PeerAccess,
    last_append: Mutex<Instant>,
    /// The leader and term the watch already elected for.
    acted: Mutex<Option<(u64, u64)>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whom a voter follows.
struct Following {
    leader: u64,
    term: u64,
    /// The leader's address.
    addr: String,
    /// This node's last log index.
    last_log: Option<u64>,
    /// The other voters but the leader, and their addresses.
    others: Vec<(u64, String)>,
}

/// The committed leader this voter follows (none while it leads, is a candidate or a
/// learner, or knows no leader).
fn following(raft: &RaftNode, me: u64) -> Option<Following> {
    let metrics = raft.metrics();
    let m = metrics.borrow_watched();
    if m.state != ServerState::Follower || !m.vote.is_committed() {
        return None;
    }
    let leader = m.vote.leader_id().node_id;
    if leader == me || m.current_leader != Some(leader) {
        return None;
    }
    let membership = m.membership_config.membership();
    if !membership.voter_ids().any(|v| v == me) {
        return None;
    }
    let others = membership
        .voter_ids()
        .filter(|v| *v != leader && *v != me)
        .filter_map(|v| Some((v, membership.get_node(&v)?.raft_addr.clone())))
        .collect();
    Some(Following {
        leader,
        term: m.vote.leader_id().term,
        addr: membership.get_node(&leader)?.raft_addr.clone(),
        last_log: m.last_log_index,
        others,
    })
}

/// Whether nothing listens at the node address `url` (`http://HOST:PORT` or `https://...`):
/// a TCP connection to it is refused within [`PROBE_TIMEOUT`].
pub async fn refused(url: &str) -> bool {
    let addr = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .unwrap_or(url)
        .trim_end_matches('/');
    matches!(
        tokio::time::timeout(PROBE_TIMEOUT, tokio::net::TcpStream::connect(addr)).await,
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused
    )
}

impl GoneLeader {
    /// The liveness of node `id`'s leader, whose heartbeats come every `heartbeat`; `access`
    /// asks the other voters for their logs.
    pub fn new(id: u64, heartbeat: Duration, access: PeerAccess) -> GoneLeader {
        GoneLeader {
            id,
            heartbeat,
            access,
            last_append: Mutex::new(Instant::now()),
            acted: Mutex::new(None),
        }
    }

    /// An `/raft/append` reached this node.
    pub fn heard(&self) {
        *lock(&self.last_append) = Instant::now();
    }

    /// Whether an `/raft/append` reached this node within two heartbeat intervals: its leader
    /// was alive that recently (what a client is sent to, see `Replicate::leader_url`).
    pub fn heard_lately(&self) -> bool {
        lock(&self.last_append).elapsed() <= 2 * self.heartbeat
    }

    /// Whether the vote request of `candidate` may pass this node's leader lease: this node
    /// follows a committed leader other than `candidate`, and that leader's port refuses.
    pub async fn lease_void(&self, raft: &RaftNode, candidate: u64) -> bool {
        let Some(Following {
            leader, term, addr, ..
        }) = following(raft, self.id)
        else {
            return false;
        };
        if leader == candidate || !refused(&addr).await {
            return false;
        }
        tracing::info!(
            leader,
            term,
            candidate,
            "the leader's port refuses connections: node {candidate}'s vote request passes the leader lease"
        );
        true
    }

    /// This node's turn among the surviving voters (module contract): how many of them have
    /// a longer log, or as long a one and a smaller id.
    async fn rank(&self, f: &Following) -> u32 {
        let asks = f.others.iter().map(|(id, url)| async move {
            let peer = Peer::new(url, &self.access).ok()?;
            let (status, body) = peer.get("/raft/status", PROBE_TIMEOUT).await.ok()?;
            let v: serde_json::Value = serde_json::from_slice(&body).ok()?;
            status
                .is_success()
                .then(|| (*id, v["last_log_index"].as_u64()))
        });
        let mine = (f.last_log, std::cmp::Reverse(self.id));
        futures_util::future::join_all(asks)
            .await
            .into_iter()
            .flatten()
            .filter(|(id, last)| (*last, std::cmp::Reverse(*id)) > mine)
            .count() as u32
    }

    /// One look of the watch (module contract).
    async fn look(&self, raft: &RaftNode) {
        let Some(f) = following(raft, self.id) else {
            return;
        };
        let (leader, term) = (f.leader, f.term);
        let silent = lock(&self.last_append).elapsed() >= 2 * self.heartbeat;
        let acted = *lock(&self.acted) == Some((leader, term));
        if !silent || acted || !refused(&f.addr).await {
            return;
        }
        *lock(&self.acted) = Some((leader, term));
        let rank = self.rank(&f).await;
        tokio::time::sleep(STAGGER * rank).await;
        let still = following(raft, self.id);
        if still.map(|f| (f.leader, f.term)) != Some((leader, term)) {
            return;
        }
        tracing::info!(
            leader,
            term,
            rank,
            "the leader's port refuses connections: starting an election now"
        );
        if let Err(e) = raft.trigger().elect(false).await {
            tracing::warn!("cannot start an election: {e}");
        }
    }
}

/// Runs the watch (module contract) until the node is dropped or its Raft stops.
pub fn watch(raft: RaftNode, gone: Weak<GoneLeader>) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(TICK).await;
            let Some(gone) = gone.upgrade() else { return };
            if raft.metrics().borrow_watched().running_state.is_err() {
                return;
            }
            gone.look(&raft).await;
        }
    });
}
