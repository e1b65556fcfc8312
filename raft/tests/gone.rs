//! A leader whose process is gone is replaced at once (`klock_raft::gone`), and one whose port
//! still accepts (a paused process) is not: three in-process nodes on loopback HTTP, each on a
//! tokio runtime of its own (dropping it is the process's death: its tasks and sockets go),
//! with election timeouts long enough (lease 4 s, timeout 3-4 s) that openraft's own timers
//! could not elect a new leader within the bound the first test asserts.

use klock_raft::node::{serve_node, ClusterConfig, Replicator};
use klock_raft::peer::PeerAccess;
use klock_server::applier::Applier;
use klock_server::events::EventHub;
use klock_server::history::History;
use klock_server::machine::Machine;
use openraft::rt::WatchReceiver as _;
use openraft::ServerState;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SECRET: &str = "a-cluster-secret-for-the-gone-test";
const HEARTBEAT_MS: u64 = 200;
const ELECTION_MS: (u64, u64) = (3000, 4000);

/// One node: its runtime (its "process") and its proposer.
struct Node {
    runtime: tokio::runtime::Runtime,
    replicator: Arc<Replicator>,
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
        runtime,
        replicator,
    }
}

/// Three nodes, initialised, a leader agreed on by all; the nodes and their addresses.
fn cluster(dir: &std::path::Path) -> (Vec<Option<Node>>, Vec<std::net::SocketAddr>) {
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
        .runtime
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
    (nodes, addrs)
}

/// Kills the leader (drops its runtime) and waits up to `within` for a survivor to lead;
/// returns how long it took, or `None`. With `paused`, the leader's port is taken again at
/// once by a listener that accepts and never answers (what a SIGSTOPped process does).
fn kill_leader(paused: bool, within: Duration) -> Option<Duration> {
    let dir = tempfile::tempdir().unwrap();
    let (mut nodes, addrs) = cluster(dir.path());
    let leader = leader_seen(nodes[0].as_ref().unwrap()).unwrap() as usize - 1;
    // A heartbeat or two after the leader's start, so its lease is fresh at every voter.
    std::thread::sleep(Duration::from_millis(2 * HEARTBEAT_MS));
    let killed = Instant::now();
    nodes[leader].take().unwrap().runtime.shutdown_background();
    let _paused = paused.then(|| std::net::TcpListener::bind(addrs[leader]).expect("rebound"));
    while killed.elapsed() < within {
        if nodes
            .iter()
            .flatten()
            .any(|n| state(n) == ServerState::Leader)
        {
            return Some(killed.elapsed());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

#[test]
fn a_leader_whose_port_refuses_is_replaced_before_its_lease_ends() {
    // openraft's own timers: lease 4 s + election timeout >= 3 s after the last heartbeat.
    let took = kill_leader(false, Duration::from_secs(3));
    assert!(
        took.is_some(),
        "no survivor leads 3 s after the leader's death (its lease and timers run 6.8 s at least)"
    );
}

#[test]
fn a_leader_whose_port_accepts_keeps_its_lease() {
    // A paused leader's port accepts: the survivors wait for openraft's timers (>= 6.8 s).
    let took = kill_leader(true, Duration::from_secs(4));
    assert_eq!(
        took, None,
        "a survivor led while the old leader's port accepted"
    );
}

#[tokio::test]
async fn only_a_refused_connection_counts_as_gone() {
    let listening = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let open = format!("http://{}", listening.local_addr().unwrap());
    assert!(!klock_raft::gone::refused(&open).await);
    let closed = listening.local_addr().unwrap();
    drop(listening);
    assert!(klock_raft::gone::refused(&format!("http://{closed}")).await);
    assert!(klock_raft::gone::refused(&format!("https://{closed}/")).await);
    // Not an address: an error, but not a refusal.
    assert!(!klock_raft::gone::refused("http://not-an-address").await);
}
