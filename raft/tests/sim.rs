//! A deterministic in-process simulation of a three-node cluster (turmoil; issue 24, "How we
//! will know"): the real Raft node, log file, state machine, applier and proposer of each node
//! (`klock_raft::node::node`), their Raft RPCs over turmoil's simulated TCP instead of HTTP,
//! under partitions, lossy links, held messages and crashes with restarts from the node's own
//! log file, across many seeds.
//!
//! Each seed: three hosts `n1`..`n3` and two clients. Each client opens a session and loops:
//! acquire `MUTATES FILE:/rN` (one of two resources, no waiting), and when granted release
//! every lease; every request carries an idempotency key of its own and is sent again (to the
//! next node) until answered, so an answer lost with a cut link is answered again as first
//! answered. Meanwhile the seed's faults strike every few hundred simulated milliseconds. After
//! the faults stop the links are healed, every node restarted, and:
//! - `fences`: no fence was acknowledged twice;
//! - `exclusive`: no two acknowledged grants of one resource overlap in cluster time (the
//!   log index from a grant's entry to the entry of its holder's next release; for an answer
//!   that repeats a first one, the first one's entry, where it took effect);
//! - `hashes`: the three nodes' state hashes are equal at one applied index;
//! - `progress`: grants were acknowledged (a run that did nothing proves nothing).
//!
//! Turmoil 0.7 is not certified bit-for-bit deterministic for openraft (its forks are not
//! used: docs/DECISIONS.md), and each node's clock reads the machine's monotonic time, so a
//! seed replays the same faults and workload, not always the same interleaving.

use klock_core::{AcquireOptions, Command, Output, SessionId, Verdict};
use klock_raft::network::SnapshotHead;
use klock_raft::node::{node, ClusterConfig, Replicator};
use klock_raft::peer::PeerAccess;
use klock_raft::types::KlockRaft;
use klock_server::applier::Applier;
use klock_server::engine::{Reply, Submission};
use klock_server::events::EventHub;
use klock_server::history::History;
use klock_server::machine::Machine;
use openraft::error::{NetworkError, RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::{AnyError, NodeInfo, OptionalSend, RaftNetworkV2};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use turmoil::net::{TcpListener, TcpStream};

const PORT: u16 = 9000;
const NODES: u64 = 3;
const SECRET: &str = "a-cluster-secret-of-the-simulation";
/// Seeds per run of the tests (split between two tests; `KLOCK_SIM_SEED=N` runs seed N alone,
/// `KLOCK_SIM_SEEDS=M` with it M seeds from N: a longer soak by hand).
const SEEDS: u64 = 8;
/// How long the faults go on, in simulated time.
const FAULTS_FOR: Duration = Duration::from_secs(12);
/// How long, in simulated time, the nodes have to stand at one applied index at the end.
const CHECK_FOR: Duration = Duration::from_secs(10);
/// The largest frame a host reads (a snapshot of this workload is a few kB).
const MAX_FRAME: usize = 16 << 20;

/// One request over the simulated network: a Raft RPC, a client's submission, or the state
/// hash.
#[derive(Serialize, Deserialize)]
enum Request {
    Append(AppendEntriesRequest<KlockRaft>),
    Vote(VoteRequest<KlockRaft>),
    PreVote(VoteRequest<KlockRaft>),
    TransferLeader(TransferLeaderRequest<KlockRaft>),
    Snapshot { head: SnapshotHead, bytes: Vec<u8> },
    Propose(Vec<Submission>),
    Hash,
}

async fn write_frame(stream: &mut TcpStream, value: &impl Serialize) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    stream.write_u32(bytes.len() as u32).await?;
    stream.write_all(&bytes).await?;
    stream.flush().await
}

async fn read_frame<T: DeserializeOwned>(stream: &mut TcpStream) -> std::io::Result<T> {
    let len = stream.read_u32().await? as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::other(format!("a frame of {len} bytes")));
    }
    let mut bytes = vec![0; len];
    stream.read_exact(&mut bytes).await?;
    serde_json::from_slice(&bytes).map_err(std::io::Error::other)
}

/// One request to host `host`, answered within `limit`.
async fn ask(host: &str, request: &Request, limit: Duration) -> Result<Value, String> {
    let exchange = async {
        let mut stream = TcpStream::connect((host, PORT)).await?;
        write_frame(&mut stream, request).await?;
        read_frame::<Value>(&mut stream).await
    };
    match tokio::time::timeout(limit, exchange).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(e)) => Err(format!("{host}: {e}")),
        Err(_) => Err(format!("{host}: no answer within {limit:?}")),
    }
}

/// The host name in a node's address (`http://n1:9000`).
fn host_of(node: &NodeInfo) -> String {
    let addr = node.raft_addr.trim_start_matches("http://");
    addr.split(':').next().unwrap_or(addr).to_owned()
}

/// openraft's network over the simulated TCP.
struct SimNetwork;

struct SimPeer {
    host: String,
}

impl RaftNetworkFactory<KlockRaft> for SimNetwork {
    type Network = SimPeer;

    async fn new_client(&mut self, _target: u64, node: &NodeInfo) -> SimPeer {
        SimPeer {
            host: host_of(node),
        }
    }
}

fn unreachable(why: impl Into<String>) -> Unreachable<KlockRaft> {
    Unreachable::new(&AnyError::error(why.into()))
}

impl SimPeer {
    /// The target's `Result<T, E>` to `request`.
    async fn rpc<T: DeserializeOwned, E: DeserializeOwned + std::fmt::Display>(
        &self,
        request: Request,
        limit: Duration,
    ) -> Result<T, RPCError<KlockRaft>> {
        let answer = ask(&self.host, &request, limit)
            .await
            .map_err(|e| RPCError::Unreachable(unreachable(e)))?;
        let answer: Result<T, E> = serde_json::from_value(answer)
            .map_err(|e| RPCError::Unreachable(unreachable(e.to_string())))?;
        answer.map_err(|e| RPCError::Network(NetworkError::new(&AnyError::error(e.to_string()))))
    }
}

type RaftError = openraft::error::RaftError<KlockRaft>;
type Fatal = openraft::error::Fatal<KlockRaft>;

impl RaftNetworkV2<KlockRaft> for SimPeer {
    type SnapshotData = Cursor<Vec<u8>>;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<KlockRaft>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<KlockRaft>, RPCError<KlockRaft>> {
        self.rpc::<_, RaftError>(Request::Append(rpc), option.soft_ttl())
            .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<KlockRaft>,
        option: RPCOption,
    ) -> Result<VoteResponse<KlockRaft>, RPCError<KlockRaft>> {
        self.rpc::<_, RaftError>(Request::Vote(rpc), option.soft_ttl())
            .await
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<KlockRaft>,
        option: RPCOption,
    ) -> Result<VoteResponse<KlockRaft>, RPCError<KlockRaft>> {
        self.rpc::<_, RaftError>(Request::PreVote(rpc), option.soft_ttl())
            .await
    }

    async fn transfer_leader(
        &mut self,
        rpc: TransferLeaderRequest<KlockRaft>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<KlockRaft>, RPCError<KlockRaft>> {
        self.rpc::<_, Fatal>(Request::TransferLeader(rpc), option.soft_ttl())
            .await
    }

    async fn full_snapshot(
        &mut self,
        vote: klock_raft::types::Vote,
        snapshot: klock_raft::state_machine::Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<KlockRaft>, StreamingError<KlockRaft>> {
        let request = Request::Snapshot {
            head: SnapshotHead {
                vote,
                meta: snapshot.meta,
            },
            bytes: snapshot.snapshot.into_inner(),
        };
        let sent = self.rpc::<SnapshotResponse<KlockRaft>, Fatal>(request, option.hard_ttl());
        tokio::select! {
            closed = cancel => Err(StreamingError::Closed(closed)),
            sent = sent => sent.map_err(|e| match e {
                RPCError::Unreachable(e) => StreamingError::Unreachable(e),
                RPCError::Timeout(e) => StreamingError::Timeout(e),
                RPCError::Network(e) => StreamingError::Network(e),
                RPCError::RemoteError(e) => StreamingError::Network(NetworkError::new(&e)),
            }),
        }
    }
}

fn host_name(id: u64) -> String {
    format!("n{id}")
}

fn peers() -> BTreeMap<u64, String> {
    (1..=NODES)
        .map(|id| (id, format!("http://{}:{PORT}", host_name(id))))
        .collect()
}

/// Node `id`'s software: its Raft node on its log file in `dir`, answering the simulated
/// network. Node 1 initialises the cluster on its first start.
async fn run_node(id: u64, dir: PathBuf) -> turmoil::Result {
    let machine = Machine::new(klock_core::Config::default()).map_err(|e| e.message)?;
    let history = History::new(&machine, 0);
    let state = Arc::new(Mutex::new(Applier::new(
        machine,
        Arc::new(EventHub::new(1 << 20)),
        Arc::new(Mutex::new(history)),
    )));
    let access = PeerAccess::new(Arc::from(SECRET), None)?;
    let mut config = ClusterConfig::new(id, peers(), access, dir.join(format!("n{id}.log")))?;
    // Snapshots and purges often, so that a node restarted behind catches up by snapshot.
    config.snapshot_every = 40;
    let replicator = node(&config, Arc::clone(&state), SimNetwork).await?;
    if id == 1 {
        let members: BTreeMap<u64, NodeInfo> = peers()
            .iter()
            .map(|(id, url)| (*id, ClusterConfig::node(url)))
            .collect();
        // Refused once the log holds a membership (every later start): nothing to do then.
        let _ = replicator.raft().initialize(members).await;
    }
    let listener = TcpListener::bind(("0.0.0.0", PORT)).await?;
    loop {
        let (stream, _) = listener.accept().await?;
        let (replicator, state) = (Arc::clone(&replicator), Arc::clone(&state));
        tokio::spawn(async move {
            let _ = serve(stream, &replicator, &state).await;
        });
    }
}

/// Answers one connection's request.
async fn serve(
    mut stream: TcpStream,
    replicator: &Replicator,
    state: &Mutex<Applier>,
) -> std::io::Result<()> {
    let raft = replicator.raft();
    let answer = match read_frame::<Request>(&mut stream).await? {
        Request::Append(rpc) => serde_json::to_value(raft.append_entries(rpc).await),
        Request::Vote(rpc) => serde_json::to_value(raft.vote(rpc).await),
        Request::PreVote(rpc) => serde_json::to_value(raft.pre_vote(rpc).await),
        Request::TransferLeader(rpc) => {
            serde_json::to_value(raft.handle_transfer_leader(rpc).await)
        }
        Request::Snapshot { head, bytes } => {
            let snapshot = klock_raft::state_machine::Snapshot {
                meta: head.meta,
                snapshot: Cursor::new(bytes),
            };
            serde_json::to_value(raft.install_full_snapshot(head.vote, snapshot).await)
        }
        // As the leader's `/raft/propose` does: a node that does not lead says so, and the
        // client asks the next (a follower's forwarding is HTTP, tested with processes).
        Request::Propose(submissions) => {
            serde_json::to_value(replicator.propose_forwarded(submissions).await)
        }
        // A machine whose applier panicked (poisoned) has no state to compare: no answer.
        Request::Hash => match state.lock() {
            Ok(state) => {
                let machine = state.machine();
                let hash = machine.kernel().export_state().hash();
                serde_json::to_value((machine.applied(), hash))
            }
            Err(_) => return Err(std::io::Error::other("the applier panicked")),
        },
    };
    write_frame(&mut stream, &answer.map_err(std::io::Error::other)?).await
}

/// What the clients saw acknowledged.
#[derive(Default)]
struct Seen {
    /// (resource, fence, session, the grant's log index).
    grants: Vec<(String, u64, u64, u64)>,
    /// Per session, the log indexes of its acknowledged releases.
    releases: BTreeMap<u64, Vec<u64>>,
}

/// Sends `command` until a node answers it (the same idempotency key each time, starting at
/// the node that answered last); the answer, or `None` once the simulation is over.
async fn submit(command: Command, key: String, next: &mut u64) -> Option<Reply> {
    loop {
        let mut submission = Submission::new(command.clone(), None);
        submission.key = Some(key.clone());
        let host = host_name(*next % NODES + 1);
        let request = Request::Propose(vec![submission]);
        if let Ok(answer) = ask(&host, &request, Duration::from_secs(2)).await {
            let answer: Result<Vec<Result<Reply, String>>, String> =
                serde_json::from_value(answer).expect("a node's answer");
            if let Ok(mut answers) = answer {
                if let Some(Ok(reply)) = answers.pop() {
                    return Some(reply);
                }
            }
        }
        *next += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A client: its session, then acquire and release in a loop, until the simulation ends it.
async fn client(name: u64, seen: Rc<RefCell<Seen>>) -> turmoil::Result {
    let mut next = name;
    let open = Command::Open {
        agent_id: format!("client{name}"),
        namespace: String::from("sim"),
    };
    let reply = submit(open, format!("c{name}-open"), &mut next)
        .await
        .ok_or("no answer")?;
    let Ok(Output::Session { session }) = reply.output else {
        return Err(format!("client {name}: the open was refused: {:?}", reply.output).into());
    };
    let session: SessionId = session.session_id;
    for op in 0u64.. {
        // A session a new leader suspended (its grace) goes on once it is active again.
        let heartbeat = Command::Heartbeat {
            session,
            leases: None,
        };
        submit(heartbeat, format!("c{name}-hb{op}"), &mut next).await;
        let resource = format!("FILE:/r{}", (op + name) % 2);
        let acquire = Command::Acquire {
            session,
            intents: vec![format!("MUTATES {resource}")],
            options: AcquireOptions {
                ttl_ms: Some(600_000),
                wait: false,
                wait_timeout_ms: None,
            },
        };
        let reply = submit(acquire, format!("c{name}-acq{op}"), &mut next).await;
        if let Some(Reply {
            index,
            repeat_of,
            output:
                Ok(Output::Verdict {
                    verdict: Verdict::Granted { leases },
                }),
            ..
        }) = reply
        {
            // A repeat (an answer lost with a cut link, asked again) took effect at the entry
            // that first answered it.
            let at = repeat_of.unwrap_or(index);
            for lease in leases {
                let grant = (lease.resource.clone(), lease.fence, session.0, at);
                seen.borrow_mut().grants.push(grant);
            }
            let release = Command::ReleaseAll { session };
            if let Some(reply) = submit(release, format!("c{name}-rel{op}"), &mut next).await {
                let at = reply.repeat_of.unwrap_or(reply.index);
                let mut seen = seen.borrow_mut();
                seen.releases.entry(session.0).or_default().push(at);
            }
        }
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    Ok(())
}

/// A small seeded generator (xorshift64*), so the faults follow the seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// One seed's run (module contract); what failed, if anything.
fn run_seed(seed: u64, dir: &Path) -> Result<usize, String> {
    let mut sim = turmoil::Builder::new()
        .simulation_duration(Duration::from_secs(120))
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(5))
        .rng_seed(seed)
        .build();
    for id in 1..=NODES {
        let dir = dir.to_owned();
        sim.host(host_name(id), move || run_node(id, dir.clone()));
    }
    let seen = Rc::new(RefCell::new(Seen::default()));
    for name in 1..=2 {
        sim.client(format!("c{name}"), client(name, Rc::clone(&seen)));
    }
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let hosts: Vec<String> = (1..=NODES).map(host_name).collect();
    let mut down: BTreeSet<String> = BTreeSet::new();
    let mut faults = 0;
    while sim.elapsed() < FAULTS_FOR {
        // A fault every 100-600 ms of simulated time; before it, heal what the last one did
        // (a crashed node comes back from its log file).
        let until = sim.elapsed() + Duration::from_millis(100 + rng.below(500));
        while sim.elapsed() < until {
            sim.step().map_err(|e| e.to_string())?;
        }
        for host in std::mem::take(&mut down) {
            sim.bounce(host);
        }
        for a in &hosts {
            for b in &hosts {
                if a < b {
                    sim.repair(a.as_str(), b.as_str());
                    sim.release(a.as_str(), b.as_str());
                    sim.set_link_fail_rate(a.as_str(), b.as_str(), 0.0);
                }
            }
        }
        let first = rng.below(NODES);
        let second = (first + 1 + rng.below(NODES - 1)) % NODES;
        let (a, b) = (
            hosts[first as usize].clone(),
            hosts[second as usize].clone(),
        );
        match rng.below(4) {
            0 => {
                // Cut one node off from the other two.
                for other in hosts.iter().filter(|h| **h != a) {
                    sim.partition(a.as_str(), other.as_str());
                }
            }
            1 => sim.set_link_fail_rate(a.as_str(), b.as_str(), 0.2),
            2 => sim.hold(a.as_str(), b.as_str()),
            _ => {
                sim.crash(a.as_str());
                down.insert(a);
            }
        }
        faults += 1;
    }
    for host in std::mem::take(&mut down) {
        sim.bounce(host);
    }
    for a in &hosts {
        for b in &hosts {
            if a < b {
                sim.repair(a.as_str(), b.as_str());
                sim.release(a.as_str(), b.as_str());
                sim.set_link_fail_rate(a.as_str(), b.as_str(), 0.0);
            }
        }
    }
    // Quiet: the clients go on, the cluster settles.
    let until = sim.elapsed() + Duration::from_secs(5);
    while sim.elapsed() < until {
        sim.step().map_err(|e| e.to_string())?;
    }
    let hashes = Rc::new(RefCell::new(None));
    let found = Rc::clone(&hashes);
    sim.client("checker", async move {
        // The three nodes at one applied index, with one hash (the clients keep writing:
        // ask again until the indexes meet).
        let give_up = tokio::time::Instant::now() + CHECK_FOR;
        while tokio::time::Instant::now() < give_up {
            let mut all = Vec::new();
            for id in 1..=NODES {
                if let Ok(v) = ask(&host_name(id), &Request::Hash, Duration::from_secs(1)).await {
                    all.push(serde_json::from_value::<(u64, u64)>(v)?);
                }
            }
            if all.len() == NODES as usize && all.iter().all(|h| h.0 == all[0].0) {
                *found.borrow_mut() = Some(all);
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    });
    let until = sim.elapsed() + CHECK_FOR + Duration::from_secs(1);
    while hashes.borrow().is_none() && sim.elapsed() < until {
        sim.step().map_err(|e| e.to_string())?;
    }
    let hashes = hashes
        .borrow()
        .clone()
        .ok_or("hashes: the nodes never stood at one applied index")?;
    if hashes.iter().any(|h| h.1 != hashes[0].1) {
        return Err(format!("hashes: the nodes' states differ: {hashes:?}"));
    }
    let checked = check(&seen.borrow(), faults);
    checked
}

/// The checks on what the clients saw (module contract); how many grants.
fn check(seen: &Seen, faults: usize) -> Result<usize, String> {
    if seen.grants.is_empty() {
        return Err(format!("progress: no grant acknowledged ({faults} faults)"));
    }
    let mut fences = BTreeSet::new();
    for (resource, fence, ..) in &seen.grants {
        if !fences.insert((resource.clone(), *fence)) {
            return Err(format!(
                "fences: fence {fence} of {resource} acknowledged twice"
            ));
        }
    }
    // Each grant holds from its entry to its session's next acknowledged release (or to the
    // end, if none was acknowledged).
    let held = |(_, _, session, at): &(String, u64, u64, u64)| {
        let end = seen
            .releases
            .get(session)
            .and_then(|r| r.iter().find(|i| *i > at).copied());
        (*at, end.unwrap_or(u64::MAX))
    };
    for (i, a) in seen.grants.iter().enumerate() {
        for b in &seen.grants[i + 1..] {
            if a.0 == b.0 && a.2 != b.2 {
                let (x, y) = (held(a), held(b));
                if x.0 < y.1 && y.0 < x.1 {
                    return Err(format!(
                        "exclusive: {} held by sessions {} (entries {:?}) and {} (entries {:?})",
                        a.0, a.2, x, b.2, y
                    ));
                }
            }
        }
    }
    Ok(seen.grants.len())
}

/// Runs seeds `from..from + count` (or `KLOCK_SIM_SEED` and `KLOCK_SIM_SEEDS` when set).
fn run_seeds(from: u64, count: u64) {
    let env = |name: &str| std::env::var(name).ok().and_then(|s| s.parse::<u64>().ok());
    let (from, count) = match env("KLOCK_SIM_SEED") {
        Some(first) => (first, env("KLOCK_SIM_SEEDS").unwrap_or(1)),
        None => (from, env("KLOCK_SIM_SEEDS").unwrap_or(count)),
    };
    for seed in from..from + count {
        let dir = tempfile::tempdir().unwrap();
        let started = std::time::Instant::now();
        match run_seed(seed, dir.path()) {
            Ok(grants) => eprintln!(
                "seed {seed}: {grants} grants acknowledged, checks clean, {:.1} s",
                started.elapsed().as_secs_f64()
            ),
            Err(e) => panic!("seed {seed} (KLOCK_SIM_SEED={seed}): {e}"),
        }
    }
}

// Two tests of half the seeds each, so that each stays well inside the test runner's time
// bound on a loaded machine.
#[test]
fn a_three_node_cluster_stays_safe_under_simulated_faults_seeds_1_to_4() {
    run_seeds(1, SEEDS / 2);
}

#[test]
fn a_three_node_cluster_stays_safe_under_simulated_faults_seeds_5_to_8() {
    run_seeds(1 + SEEDS / 2, SEEDS / 2);
}
