//! A loopback cluster of real `klock serve --node-id` processes, for the cluster, failover and
//! nemesis tests (cli/tests) and the cluster rows of the benchmark
//! (server/examples/bench/cluster.rs).
//!
//! Contract: node `i + 1` listens on `ports[i]`, fixed free loopback ports chosen when the
//! cluster is made (the peers must know each other's addresses before they start; see
//! [`claim_port`] for how they stay free until then), with its
//! own redb file and log file in a temporary directory removed when the cluster is dropped
//! (every node still running is SIGKILLed first). Nodes are started, killed, stopped and
//! restarted by index; the rest reads what the nodes say (their Raft status, the leader they
//! agree on, what they applied, a resource's state) or runs `klock cluster` with the cluster's
//! program. Every wait ends within [`Cluster::wait`], panicking with what it waited for: a
//! test fails, a benchmark stops, naming the step.

use crate::http_client::{request, request_within, Answer};
use crate::process::Spawned;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The cluster secret of every test cluster (`klock serve` asks for at least 16 characters).
pub const SECRET: &str = "a-cluster-secret-of-the-test";
/// How long any one wait may take by default (an election is about a second).
pub const WAIT: Duration = Duration::from_secs(15);

/// How long a node may take to answer `/raft/status`: a loaded machine can hold a node's
/// answer for seconds (a snapshot being installed), and a node paused with SIGSTOP never
/// answers, so callers leave out a node while it is paused.
const STATUS_TIMEOUT: Duration = Duration::from_secs(10);

/// The nodes of one cluster (module contract).
pub struct Cluster {
    /// The `klock` binary every node runs, and `klock cluster` runs.
    pub program: PathBuf,
    pub dir: tempfile::TempDir,
    pub ports: Vec<u16>,
    /// The claims on `ports`, kept while the cluster lives: a node down for a restart keeps
    /// its port.
    _claims: Vec<ClaimedPort>,
    pub peers: String,
    /// Node `i`'s process (`None`: not running).
    pub nodes: Vec<Option<Spawned>>,
    /// More flags for every node started from now on.
    pub extra: Vec<String>,
    /// Whether nodes started from now on write their logs to files ([`Cluster::log`]) rather
    /// than to the caller's stderr.
    pub logged: bool,
    /// How long any one wait may take.
    pub wait: Duration,
}

/// `--cluster-peers` of nodes 1, 2, ... on `ports`.
pub fn peers(ports: &[u16]) -> String {
    ports
        .iter()
        .enumerate()
        .map(|(i, p)| format!("{}=http://127.0.0.1:{p}", i + 1))
        .collect::<Vec<_>>()
        .join(",")
}

/// A loopback port claimed for a node that binds it later: nothing listened on it when it was
/// claimed, and no other caller of [`claim_port`] on this machine (in this process or another:
/// Rust, or the Python tests' `free_port`) is given it while the claim lives.
///
/// The port is released before the node binds it, so two rules keep anyone else from taking
/// it in between:
/// - It comes from below the kernel's ephemeral range (`ip_local_port_range`). A port of that
///   range can be handed to any socket of the machine meanwhile (another test's `bind(0)`, or
///   the local end of an outgoing connection), and the node could not listen.
/// - Below the range, only another test picks ports, at random among thousands; but two picks
///   can still meet (two nodes of one cluster, or two tests' clusters starting at once, or a
///   node's port picked by another test while that node is down for a restart). So each pick
///   takes an exclusive `flock` on a file named after the port, in a directory shared by every
///   test of the machine, and keeps it for as long as the claim lives; a pick whose lock is
///   held elsewhere is skipped. The lock goes away with its process, however it ends.
pub struct ClaimedPort {
    number: u16,
    // Held, never read: the claim lasts as long as this lock.
    _lock: std::fs::File,
}

impl ClaimedPort {
    pub fn number(&self) -> u16 {
        self.number
    }
}

/// Claims a port for a node to bind later ([`ClaimedPort`]).
pub fn claim_port() -> ClaimedPort {
    let low = ephemeral_range_start().unwrap_or(32768);
    // The span [FLOOR, low): clear of the privileged ports and of the usual service ports.
    const FLOOR: u16 = 10_000;
    let dir = std::env::temp_dir().join("klock-test-ports");
    std::fs::create_dir_all(&dir).expect("the directory of port claims");
    let seed = std::collections::hash_map::RandomState::new();
    let candidates = (0u32..1_000)
        .filter(|_| low > FLOOR + 1_000)
        .map(|attempt| {
            let span = u64::from(low - FLOOR);
            FLOOR + (std::hash::BuildHasher::hash_one(&seed, attempt) % span) as u16
        })
        .chain(std::iter::repeat_with(any_free_port).take(1_000));
    for candidate in candidates {
        let Some(lock) = lock_port(&dir, candidate) else {
            continue;
        };
        if std::net::TcpListener::bind(("127.0.0.1", candidate)).is_ok() {
            return ClaimedPort {
                number: candidate,
                _lock: lock,
            };
        }
    }
    panic!("no loopback port could be claimed in 2,000 tries");
}

/// The exclusive lock on `port`'s file in `dir`, unless someone holds it.
fn lock_port(dir: &Path, port: u16) -> Option<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(port.to_string()))
        .expect("a port's claim file");
    file.try_lock().ok().map(|()| file)
}

/// The first port of the kernel's ephemeral range, if it can be read.
fn ephemeral_range_start() -> Option<u16> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    range.split_whitespace().next()?.parse().ok()
}

/// A port the kernel hands out for `bind(0)`.
fn any_free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

impl Cluster {
    /// A cluster of `size` nodes running `program`, none started yet.
    pub fn unstarted(program: &Path, size: usize) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("klock-cluster")
            .tempdir()
            .expect("the cluster's directory");
        std::fs::write(dir.path().join("secret"), SECRET).expect("the cluster secret");
        let claims: Vec<ClaimedPort> = (0..size).map(|_| claim_port()).collect();
        let ports: Vec<u16> = claims.iter().map(ClaimedPort::number).collect();
        Cluster {
            _claims: claims,
            program: program.to_owned(),
            dir,
            peers: peers(&ports),
            ports,
            nodes: (0..size).map(|_| None).collect(),
            extra: Vec::new(),
            logged: false,
            wait: WAIT,
        }
    }

    /// A cluster of `size` nodes, all started (not initialised: `klock cluster init`).
    pub fn new(program: &Path, size: usize) -> Cluster {
        let mut cluster = Cluster::unstarted(program, size);
        cluster.start_all();
        cluster
    }

    /// A cluster of `size` nodes, started, initialised (`klock cluster init`), with a leader
    /// agreed on.
    pub fn initialised(program: &Path, size: usize) -> Cluster {
        let cluster = Cluster::new(program, size);
        cluster.init();
        cluster
    }

    /// Starts every node that does not run.
    pub fn start_all(&mut self) {
        for i in 0..self.ports.len() {
            if self.nodes[i].is_none() {
                self.start(i);
            }
        }
    }

    /// `klock cluster init` through node 1, then waits for a leader agreed on.
    pub fn init(&self) {
        klock_cluster(self, 0, &["init"]).expect("klock cluster init");
        self.leader();
    }

    pub fn data(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("node{}.redb", i + 1))
    }

    /// Starts node `i` (again) on its port and data file.
    pub fn start(&mut self, i: usize) {
        let data = self.data(i);
        let secret = self.dir.path().join("secret");
        let listen = format!("127.0.0.1:{}", self.ports[i]);
        let id = (i + 1).to_string();
        let args = [
            "--listen",
            &listen,
            "--data",
            data.to_str().unwrap(),
            "--node-id",
            &id,
            "--cluster-peers",
            &self.peers,
            "--cluster-secret-file",
            secret.to_str().unwrap(),
        ];
        let mut args: Vec<&str> = args.to_vec();
        args.extend(self.extra.iter().map(String::as_str));
        let spawned = if self.logged {
            Spawned::start_logged(&self.program, &args, &self.log_file(i))
        } else {
            Spawned::start(&self.program, &args)
        };
        self.nodes[i] = Some(spawned.expect("a cluster node starts"));
    }

    fn log_file(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("node{}.log", i + 1))
    }

    /// What node `i` logged so far (with [`Cluster::logged`]), across its restarts.
    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(self.log_file(i)).unwrap_or_default()
    }

    /// Stops node `i` with SIGTERM and returns how it exited.
    pub fn terminate(&mut self, i: usize) -> std::process::ExitStatus {
        let node = self.nodes[i].take().expect("the node runs");
        node.terminate(self.wait)
            .unwrap_or_else(|e| panic!("node {}: {e}", i + 1))
    }

    /// SIGKILLs node `i`, if it runs.
    pub fn kill(&mut self, i: usize) {
        if let Some(node) = self.nodes[i].take() {
            node.kill();
        }
    }

    pub fn secret_file(&self) -> String {
        self.dir.path().join("secret").to_str().unwrap().to_owned()
    }

    /// `/raft/status` of node `i` (`None` if it does not answer within 10 s).
    pub fn status(&self, i: usize) -> Option<Value> {
        let answer = request_within(
            self.ports[i],
            "GET",
            "/raft/status",
            &[("klock-cluster-secret", SECRET)],
            b"",
            STATUS_TIMEOUT,
        )
        .ok()?;
        (answer.status == 200).then_some(answer.body)
    }

    /// The index of the last entry node `i` applied, if it answers.
    pub fn applied(&self, i: usize) -> Option<u64> {
        self.status(i)?["applied_index"].as_u64()
    }

    /// Panics, naming `what`, once the cluster's wait from `started` is over.
    fn within(&self, started: Instant, what: impl FnOnce() -> String) {
        assert!(started.elapsed() < self.wait, "{}", what());
    }

    /// The index of the leader every live node agrees on, once there is one.
    pub fn leader(&self) -> usize {
        let started = Instant::now();
        loop {
            let leaders: Vec<Option<u64>> = (0..self.ports.len())
                .filter(|i| self.nodes[*i].is_some())
                .map(|i| self.status(i).and_then(|s| s["leader"].as_u64()))
                .collect();
            if let Some(Some(leader)) = leaders.first() {
                let index = (*leader - 1) as usize;
                if leaders.iter().all(|l| *l == Some(*leader)) && self.nodes[index].is_some() {
                    return index;
                }
            }
            self.within(started, || format!("no leader agreed on: {leaders:?}"));
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A live node that says it leads (a node not yet in the membership knows no leader).
    pub fn leading(&self) -> usize {
        let started = Instant::now();
        loop {
            let found = (0..self.ports.len()).find(|i| {
                self.nodes[*i].is_some() && self.status(*i).is_some_and(|s| s["state"] == "Leader")
            });
            if let Some(i) = found {
                return i;
            }
            self.within(started, || String::from("no node leads"));
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until the leader takes writes (an elected leader first anchors its clock and
    /// writes its `LeaderChanged` entry, answering 503 meanwhile): a session of `agent` in
    /// namespace `ns` opened through it.
    pub fn takes_writes(&self, ns: &str, agent: &str) {
        let started = Instant::now();
        let body = json!({ "agent_id": agent }).to_string();
        loop {
            let path = format!("/v1/ns/{ns}/sessions");
            let opened = request(
                self.ports[self.leader()],
                "POST",
                &path,
                &[],
                body.as_bytes(),
            );
            if opened.as_ref().is_ok_and(|a| a.status == 200) {
                return;
            }
            self.within(started, || format!("the leader takes no write: {opened:?}"));
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Node `i`'s client URL.
    pub fn url(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.ports[i])
    }

    /// Every node's URL, `first` first (the node a client starts with), comma-separated.
    pub fn urls_from(&self, first: usize) -> String {
        let n = self.ports.len();
        let urls: Vec<String> = (0..n).map(|k| self.url((first + k) % n)).collect();
        urls.join(",")
    }

    /// Waits until node `n` has applied entry `target`; how long that took.
    fn applies(&self, n: usize, target: u64) -> Duration {
        let started = Instant::now();
        while self.applied(n).is_none_or(|a| a < target) {
            self.within(started, || {
                format!("node {} never applied entry {target}", n + 1)
            });
            std::thread::sleep(Duration::from_millis(10));
        }
        started.elapsed()
    }

    /// Waits until node `i` has applied what node `leader` had applied when this was called;
    /// how long that took.
    pub fn caught_up(&self, i: usize, leader: usize) -> Duration {
        let target = self.applied(leader).expect("the leader's applied index");
        self.applies(i, target)
    }

    /// Waits until every live node has applied what node `i` has: a follower answers some
    /// reads (a ticket's) from its applied state, which may lag the leader's by a heartbeat.
    pub fn caught_up_with(&self, i: usize) {
        let target = self.applied(i).expect("node i answers");
        for n in (0..self.ports.len()).filter(|n| self.nodes[*n].is_some()) {
            self.applies(n, target);
        }
    }

    /// `GET .../resources/state` of `resource` through node `i` (a command, so a read through
    /// the leader), asked again while the node has no leader to take it (503).
    fn resource_state(&self, i: usize, resource: &str) -> Value {
        let path = format!("/v1/ns/default/resources/state?resource={resource}");
        let started = Instant::now();
        loop {
            let answer = request(self.ports[i], "GET", &path, &[], b"").unwrap();
            if answer.status != 503 {
                assert_eq!(answer.status, 200, "{answer:?}");
                return answer.body;
            }
            self.within(started, || format!("node {i} never answered: {answer:?}"));
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The holders of `resource`, through node `i`.
    pub fn holders(&self, i: usize, resource: &str) -> Vec<Value> {
        let state = self.resource_state(i, resource);
        state["holders"].as_array().cloned().unwrap_or_default()
    }

    /// The tickets waiting on `resource`, through node `i`.
    pub fn waiting(&self, i: usize, resource: &str) -> Vec<Value> {
        let state = self.resource_state(i, resource);
        state["waiting"].as_array().cloned().unwrap_or_default()
    }

    /// `GET /v1/ns/default/overview` of node `i`.
    pub fn overview(&self, i: usize) -> Value {
        let a = request(self.ports[i], "GET", "/v1/ns/default/overview", &[], b"").unwrap();
        assert_eq!(a.status, 200, "{a:?}");
        a.body
    }

    /// A client's request to node `i`, retried (same idempotency key) while the cluster has
    /// no leader to take it (503) or the node does not answer.
    pub fn ask(&self, i: usize, path: &str, token: &str, key: &str, body: Value) -> Answer {
        let started = Instant::now();
        loop {
            let headers = [("klock-session-token", token), ("idempotency-key", key)];
            match request(
                self.ports[i],
                "POST",
                path,
                &headers,
                body.to_string().as_bytes(),
            ) {
                Ok(a) if a.status != 503 && !a.body.is_null() => return a,
                Ok(a) if a.status == 503 => {
                    assert_eq!(a.header("retry-after"), Some("1"), "{a:?}");
                }
                _ => {}
            }
            self.within(started, || format!("node {i} never took {path}"));
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Cluster {
    /// Every node still running is SIGKILLed before the directory goes.
    fn drop(&mut self) {
        self.nodes.clear();
    }
}

/// `klock cluster ARGS...` against node `i`; its standard output, or why it failed.
pub fn klock_cluster(cluster: &Cluster, i: usize, args: &[&str]) -> Result<String, String> {
    let node = cluster.url(i);
    let secret = cluster.secret_file();
    let out = std::process::Command::new(&cluster.program)
        .arg("cluster")
        .arg(args[0])
        .args(["--node", &node, "--cluster-secret-file", &secret])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", cluster.program.display()))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// `klock cluster ARGS...` against the leader, again against the new one if leadership moved
/// meanwhile (a follower refuses a membership change: `MEMBERSHIP_REFUSED`, "forward").
pub fn on_leader(cluster: &Cluster, args: &[&str]) -> String {
    let started = Instant::now();
    loop {
        match klock_cluster(cluster, cluster.leading(), args) {
            Ok(out) => return out,
            Err(e) if e.contains("forward") && started.elapsed() < cluster.wait => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("klock cluster {args:?}: {e}"),
        }
    }
}
