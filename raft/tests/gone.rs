//! A leader whose process is gone is replaced at once (`klock_raft::gone`), and one whose port
//! still accepts (a paused process) is not: three in-process nodes on loopback HTTP, each on a
//! tokio runtime of its own (dropping it is the process's death: its tasks and sockets go),
//! with election timeouts long enough (lease 4 s, timeout 3-4 s) that openraft's own timers
//! could not elect a new leader within the bound the first test asserts, and a vote request
//! inside a leader's lease is granted only once the leader's port refuses.

use klock_raft::gone::refused;
use klock_raft::node::{serve_node, ClusterConfig, Replicator};
use klock_raft::peer::{Peer, PeerAccess};
use klock_raft::types::{KlockRaft, LogId, Vote};
use klock_server::applier::Applier;
use klock_server::events::EventHub;
use klock_server::history::History;
use klock_server::machine::Machine;
use openraft::impls::leader_id_adv::LeaderId;
use openraft::raft::VoteRequest;
use openraft::rt::WatchReceiver as _;
use openraft::ServerState;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SECRET: &str = "a-cluster-secret-for-the-gone-test";
/// Long enough that a follower's watch waits a second (two heartbeats) before it looks.
const HEARTBEAT_MS: u64 = 500;
const ELECTION_MS: (u64, u64) = (3000, 4000);

/// One node: its runtime (its "process") and its proposer.
struct Node {
    runtime: Option<tokio::runtime::Runtime>,
    replicator: Arc<Replicator>,
}

impl Node {
    fn runtime(&self) -> &tokio::runtime::Runtime {
        self.runtime.as_ref().expect("the node runs")
    }
}

impl Drop for Node {
    /// The process dies: its tasks and sockets go at once (a blocked worker is not waited for).
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// The committed leader node `node` sees, if it is a voter that follows or leads one.
fn leader_seen(node: &Node) -> Option<u64> {
    let metrics = node.replicator.raft().metrics();
    let m = metrics.borrow_watched();
    m.vote.is_committed().then_some(m.current_leader).flatten()
}

fn state(node: &Node) -> ServerState {
    node.replicator.raft().metrics().borrow_watched().state
}

/// Starts node `id` of `peers` on `listener`, with its data in `dir`.
fn start(
    id: u64,
    peers: &BTreeMap<u64, String>,
    listener: std::net::TcpListener,
    dir: &std::path::Path,
) -> Node {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let access = PeerAccess::new(Arc::from(SECRET), None).expect("access");
    let mut config =
        ClusterConfig::new(id, peers.clone(), access, dir.join(format!("n{id}.log"))).unwrap();
    config.heartbeat_ms = HEARTBEAT_MS;
    config.election_ms = ELECTION_MS;
    let machine = Machine::new(klock_core::Config::default()).unwrap();
    let history = Arc::new(Mutex::new(History::new(&machine, 0)));
    let applier = Applier::new(machine, Arc::new(EventHub::new(1 << 16)), history);
    let replicator = runtime.block_on(async {
        let (replicator, routes) = serve_node(config, Arc::new(Mutex::new(applier)))
            .await
            .expect("the node starts");
        listener.set_nonblocking(true).unwrap();
        let listener = tokio::net::TcpListener::from_std(listener).unwrap();
        tokio::spawn(async move { axum::serve(listener, routes).await });
        replicator
    });
    Node {
        runtime: Some(runtime),
        replicator,
    }
}

/// Three nodes, initialised, a leader agreed on by all.
fn cluster(dir: &std::path::Path) -> Vec<Option<Node>> {
    let listeners: Vec<std::net::TcpListener> = (0..3)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let addrs: Vec<_> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
    let peers: BTreeMap<u64, String> = (1..=3u64)
        .map(|id| (id, format!("http://{}", addrs[id as usize - 1])))
        .collect();
    let nodes: Vec<Option<Node>> = listeners
        .into_iter()
        .enumerate()
        .map(|(i, l)| Some(start(i as u64 + 1, &peers, l, dir)))
        .collect();
    let members: BTreeMap<u64, openraft::NodeInfo> = peers
        .iter()
        .map(|(id, url)| (*id, ClusterConfig::node(url)))
        .collect();
    let first = nodes[0].as_ref().unwrap();
    first
        .runtime()
        .block_on(first.replicator.raft().initialize(members))
        .expect("initialised");
    let agreed = Instant::now();
    loop {
        let seen: Vec<_> = nodes.iter().flatten().map(leader_seen).collect();
        if seen.iter().all(|s| s.is_some() && *s == seen[0]) {
            break;
        }
        assert!(
            agreed.elapsed() < Duration::from_secs(30),
            "no leader agreed on: {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    nodes
}

/// Kills the leader (drops its runtime), or with `paused` stops it as SIGSTOP would (its one
/// worker thread blocked: nothing of it runs, while the kernel still accepts connections on
/// its port), and waits up to `within` for a survivor to lead; how long that took, or `None`.
fn kill_leader(paused: bool, within: Duration) -> Option<Duration> {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = cluster(dir.path());
    let leader = leader_seen(nodes[0].as_ref().unwrap()).unwrap() as usize - 1;
    // A heartbeat or two after the leader's start, so its lease is fresh at every voter.
    std::thread::sleep(Duration::from_millis(2 * HEARTBEAT_MS));
    let killed = Instant::now();
    let old = nodes[leader].take().unwrap();
    let old_paused = if paused {
        old.runtime()
            .spawn(async move { std::thread::sleep(within + Duration::from_secs(1)) });
        Some(old)
    } else {
        drop(old);
        None
    };
    let mut took = None;
    while killed.elapsed() < within {
        if nodes
            .iter()
            .flatten()
            .any(|n| state(n) == ServerState::Leader)
        {
            took = Some(killed.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(old_paused);
    took
}

#[test]
fn a_leader_whose_port_refuses_is_replaced_before_its_lease_ends() {
    // openraft's own timers: lease 4 s + election timeout >= 3 s after the last heartbeat
    // (at most a heartbeat, 0.5 s, before the kill): 6.5 s at least.
    let took = kill_leader(false, Duration::from_secs(5));
    assert!(
        took.is_some(),
        "no survivor leads 5 s after the leader's death (its lease and timers run 6.5 s at least)"
    );
}

#[test]
fn a_leader_whose_port_accepts_keeps_its_lease() {
    // A paused leader's port accepts: the survivors wait for openraft's timers (>= 6.5 s).
    let took = kill_leader(true, Duration::from_secs(4));
    assert_eq!(
        took, None,
        "a survivor led while the old leader's port accepted"
    );
}

/// The address of node `id` in `node`'s membership.
fn leader_url(node: &Node, id: u64) -> String {
    let metrics = node.replicator.raft().metrics();
    let m = metrics.borrow_watched();
    let url = m.membership_config.membership().get_node(&id).unwrap();
    url.raft_addr.clone()
}

/// A vote request from node `candidate` for the term after `term`, with a log longer than
/// any (only the lease can refuse it), sent to `to`'s `/raft/vote`: whether it was granted.
fn vote(to: &Node, candidate: u64, term: u64, leader: u64) -> bool {
    let url = {
        let metrics = to.replicator.raft().metrics();
        let m = metrics.borrow_watched();
        let id = m.id;
        m.membership_config
            .membership()
            .get_node(&id)
            .unwrap()
            .raft_addr
            .clone()
    };
    let last = LogId::new(
        LeaderId {
            term,
            node_id: leader,
        },
        1_000_000,
    );
    let request = VoteRequest::<KlockRaft>::new(Vote::new(term + 1, candidate), Some(last));
    let access = PeerAccess::new(Arc::from(SECRET), None).unwrap();
    let peer = Peer::new(&url, &access).unwrap();
    let body = serde_json::to_vec(&request).unwrap();
    let (status, answer) = to
        .runtime()
        .block_on(peer.post("/raft/vote", None, body, Duration::from_secs(5)))
        .expect("the vote answered");
    assert!(status.is_success(), "{status}");
    let answer: serde_json::Value = serde_json::from_slice(&answer).unwrap();
    answer["Ok"]["vote_granted"]
        .as_bool()
        .unwrap_or_else(|| panic!("not a vote response: {answer}"))
}

#[test]
fn a_vote_passes_the_lease_only_while_the_leaders_port_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = cluster(dir.path());
    let first = nodes[0].as_ref().unwrap();
    let leader = leader_seen(first).unwrap();
    let term = first
        .replicator
        .raft()
        .metrics()
        .borrow_watched()
        .vote
        .leader_id()
        .term;
    let others: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    let (voter, candidate) = (others[0], others[1]);
    let voter_node = nodes[voter as usize - 1].take().unwrap();
    // The leader lives: its lease holds the vote back.
    assert!(
        !vote(&voter_node, candidate, term, leader),
        "granted inside a live leader's lease"
    );
    // The leader is gone: asked at once (the voter's watch waits two heartbeats, 1 s, before it
    // looks), the voter sees the refusal itself and grants.
    let url = leader_url(&voter_node, leader);
    drop(nodes[leader as usize - 1].take());
    // The runtime's tasks (its listener among them) are dropped by its workers as they stop.
    let gone = Instant::now();
    while !voter_node.runtime().block_on(refused(&url)) {
        assert!(
            gone.elapsed() < Duration::from_secs(5),
            "the leader's port still accepts"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        vote(&voter_node, candidate, term, leader),
        "refused inside a gone leader's lease"
    );
}

#[tokio::test]
async fn only_a_refused_connection_counts_as_gone() {
    let listening = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let open = format!("http://{}", listening.local_addr().unwrap());
    assert!(!refused(&open).await);
    let closed = listening.local_addr().unwrap();
    drop(listening);
    assert!(refused(&format!("http://{closed}")).await);
    assert!(refused(&format!("https://{closed}/")).await);
    // Not an address: an error, but not a refusal.
    assert!(!refused("http://not-an-address").await);
}
