//! A three-node loopback cluster for the client failover tests (cli/tests/failover.rs): real
//! `klock serve --node-id` processes on free ports, initialised with `klock cluster init`,
//! the leader they agree on, and a node killed with SIGKILL. Every wait has a deadline
//! ([`WAIT`]). (cli/tests/cluster.rs keeps a fuller helper of its own, for membership and
//! restarts; this one is what a client's test needs.)

use klock_testkit::http_client::request;
use klock_testkit::process::Spawned;
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

const SECRET: &str = "a-cluster-secret-of-the-failover-tests";
/// How long any one wait may take (an election is about a second).
pub const WAIT: Duration = Duration::from_secs(15);

pub struct Nodes {
    dir: tempfile::TempDir,
    pub ports: Vec<u16>,
    nodes: Vec<Option<Spawned>>,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl Nodes {
    /// Three nodes started and initialised, with a leader elected.
    pub fn start() -> Nodes {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, SECRET).unwrap();
        let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let peers: Vec<String> = ports
            .iter()
            .enumerate()
            .map(|(i, p)| format!("{}=http://127.0.0.1:{p}", i + 1))
            .collect();
        let peers = peers.join(",");
        let program = Path::new(env!("CARGO_BIN_EXE_klock"));
        let nodes = (0..3)
            .map(|i| {
                let data = dir.path().join(format!("node{}.redb", i + 1));
                let listen = format!("127.0.0.1:{}", ports[i]);
                let id = (i + 1).to_string();
                let args = [
                    "--listen",
                    &listen,
                    "--data",
                    data.to_str().unwrap(),
                    "--node-id",
                    &id,
                    "--cluster-peers",
                    &peers,
                    "--cluster-secret-file",
                    secret.to_str().unwrap(),
                ];
                Some(Spawned::start(program, &args).expect("a cluster node starts"))
            })
            .collect();
        let nodes = Nodes { dir, ports, nodes };
        let init = std::process::Command::new(program)
            .args(["cluster", "init", "--node", &nodes.url(0)])
            .arg("--cluster-secret-file")
            .arg(nodes.dir.path().join("secret"))
            .output()
            .unwrap();
        assert!(init.status.success(), "{init:?}");
        nodes.leader();
        nodes
    }

    /// Node `i`'s client URL.
    pub fn url(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.ports[i])
    }

    /// Every node's URL, `first` first (the node a client starts with), comma-separated.
    pub fn urls_from(&self, first: usize) -> String {
        let order = [first, (first + 1) % 3, (first + 2) % 3];
        let urls: Vec<String> = order.iter().map(|i| self.url(*i)).collect();
        urls.join(",")
    }

    fn status(&self, i: usize) -> Option<Value> {
        let headers = [("klock-cluster-secret", SECRET)];
        let answer = request(self.ports[i], "GET", "/raft/status", &headers, b"").ok()?;
        (answer.status == 200).then_some(answer.body)
    }

    /// The index of the leader every live node agrees on, once there is one.
    pub fn leader(&self) -> usize {
        let started = Instant::now();
        loop {
            let live = (0..3).filter(|i| self.nodes[*i].is_some());
            let leaders: Vec<Option<u64>> = live
                .map(|i| self.status(i).and_then(|s| s["leader"].as_u64()))
                .collect();
            if let Some(Some(leader)) = leaders.first() {
                let index = (*leader - 1) as usize;
                if leaders.iter().all(|l| *l == Some(*leader)) && self.nodes[index].is_some() {
                    return index;
                }
            }
            assert!(started.elapsed() < WAIT, "no leader agreed on: {leaders:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until every live node has applied what node `i` has: a follower answers
    /// some reads (a ticket's) from its applied state, which may lag the leader's by a
    /// heartbeat.
    pub fn caught_up_with(&self, i: usize) {
        let applied = |i: usize| self.status(i).and_then(|s| s["applied_index"].as_u64());
        let target = applied(i).expect("node i answers");
        let started = Instant::now();
        while (0..3).any(|n| self.nodes[n].is_some() && applied(n).is_none_or(|a| a < target)) {
            assert!(
                started.elapsed() < WAIT,
                "the nodes never caught up with node {i}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILLs node `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(node) = self.nodes[i].take() {
            node.kill();
        }
    }

    /// `GET .../resources/state` of `resource` through node `i` (a command, so a read
    /// through the leader), asked again while the node has no leader to take it (503).
    fn state(&self, i: usize, resource: &str) -> Value {
        let path = format!("/v1/ns/default/resources/state?resource={resource}");
        let started = Instant::now();
        loop {
            let answer = request(self.ports[i], "GET", &path, &[], b"").unwrap();
            if answer.status != 503 {
                assert_eq!(answer.status, 200, "{answer:?}");
                return answer.body;
            }
            assert!(
                started.elapsed() < WAIT,
                "node {i} never answered: {answer:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The holders of `resource`, through node `i`.
    pub fn holders(&self, i: usize, resource: &str) -> Vec<Value> {
        let state = self.state(i, resource);
        state["holders"].as_array().cloned().unwrap_or_default()
    }

    /// The tickets waiting on `resource`, through node `i`.
    pub fn waiting(&self, i: usize, resource: &str) -> Vec<Value> {
        let state = self.state(i, resource);
        state["waiting"].as_array().cloned().unwrap_or_default()
    }
}
