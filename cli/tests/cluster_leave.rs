//! A cluster node that is stopped (SIGTERM) leaves gracefully: a leader hands its leadership
//! to a follower before it exits (the log says to which node, and the survivors agree that
//! node leads), exits 0, and, restarted on the same log, rejoins; writes through a survivor
//! are acknowledged after it left.
//!
//! Real `klock` processes on fixed free loopback ports, each one's log (stderr) in a file.
//! Bounded: every wait has a deadline.

use klock_testkit::http_client::request;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SECRET: &str = "a-cluster-secret-of-the-leave-test";
/// How long any one wait may take (an election is about a second).
const WAIT: Duration = Duration::from_secs(20);

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

struct Nodes {
    dir: tempfile::TempDir,
    ports: Vec<u16>,
    peers: String,
    children: Vec<Option<Child>>,
}

impl Nodes {
    fn new() -> Nodes {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("secret"), SECRET).unwrap();
        let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let peers = ports
            .iter()
            .enumerate()
            .map(|(i, p)| format!("{}=http://127.0.0.1:{p}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let mut nodes = Nodes {
            dir,
            ports,
            peers,
            children: (0..3).map(|_| None).collect(),
        };
        for i in 0..3 {
            nodes.start(i);
        }
        nodes
    }

    fn log(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("node{}.log", i + 1))
    }

    /// Starts node `i` (its log appended to its file) and waits until it listens.
    fn start(&mut self, i: usize) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log(i))
            .unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_klock"))
            .arg("serve")
            .args(["--listen", &format!("127.0.0.1:{}", self.ports[i])])
            .args([
                "--data",
                self.dir.path().join(format!("n{i}.redb")).to_str().unwrap(),
            ])
            .args(["--node-id", &(i + 1).to_string()])
            .args(["--cluster-peers", &self.peers])
            .args(["--cluster-secret-file", self.secret().to_str().unwrap()])
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.contains("listening"), "node {} said {line:?}", i + 1);
        self.children[i] = Some(child);
    }

    fn secret(&self) -> PathBuf {
        self.dir.path().join("secret")
    }

    fn status(&self, i: usize) -> Option<Value> {
        let answer = request(
            self.ports[i],
            "GET",
            "/raft/status",
            &[("klock-cluster-secret", SECRET)],
            b"",
        )
        .ok()?;
        (answer.status == 200).then_some(answer.body)
    }

    /// The leader (node id) every running node agrees on, once they do.
    fn leader(&self) -> u64 {
        let started = Instant::now();
        loop {
            let leaders: Vec<Option<u64>> = (0..3)
                .filter(|i| self.children[*i].is_some())
                .map(|i| self.status(i).and_then(|s| s["leader"].as_u64()))
                .collect();
            if let Some(Some(leader)) = leaders.first() {
                if leaders.iter().all(|l| *l == Some(*leader)) {
                    return *leader;
                }
            }
            assert!(started.elapsed() < WAIT, "no leader agreed on: {leaders:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `klock exec` through node `i`: a session, a lease and its release, all writes.
    fn write_through(&self, i: usize) {
        let out = Command::new(env!("CARGO_BIN_EXE_klock"))
            .args([
                "exec",
                "--server",
                &format!("http://127.0.0.1:{}", self.ports[i]),
            ])
            .args(["--root", self.dir.path().to_str().unwrap()])
            .args([
                "--intent",
                "MUTATES FILE:/shared",
                "--wait",
                "20s",
                "--",
                "true",
            ])
            .env_remove("KLOCK_SERVER")
            .env_remove("KLOCK_TOKEN")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "exec through node {}: {}",
            i + 1,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Sends SIGTERM to node `i` and waits for it to exit; its exit status.
    fn terminate(&mut self, i: usize) -> std::process::ExitStatus {
        let mut child = self.children[i].take().unwrap();
        // SAFETY: kill(2) on our own child's pid.
        assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
        let started = Instant::now();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if started.elapsed() > WAIT {
                let _ = child.kill();
                panic!("node {} did not exit after SIGTERM", i + 1);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for child in self.children.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn klock_cluster_init(nodes: &Nodes) {
    let out = Command::new(env!("CARGO_BIN_EXE_klock"))
        .args(["cluster", "init"])
        .args(["--node", &format!("http://127.0.0.1:{}", nodes.ports[0])])
        .args(["--cluster-secret-file", nodes.secret().to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[test]
fn a_leader_stopped_with_sigterm_hands_its_leadership_over_and_rejoins() {
    let mut nodes = Nodes::new();
    klock_cluster_init(&nodes);
    let leader = nodes.leader();
    let old = (leader - 1) as usize;
    let survivor = (0..3).find(|i| *i != old).unwrap();
    nodes.write_through(survivor);

    let status = nodes.terminate(old);
    assert!(status.success(), "node {leader} exited {status}");
    let log = read(&nodes.log(old));
    let handed = log
        .lines()
        .find_map(|l| {
            let (_, rest) = l.split_once("handed leadership to node ")?;
            rest.split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse::<u64>()
                .ok()
        })
        .unwrap_or_else(|| panic!("node {leader} never said it handed over:\n{log}"));
    assert_ne!(handed, leader);
    assert_eq!(nodes.leader(), handed, "the survivors follow the successor");
    nodes.write_through(survivor);

    // Its log was closed cleanly: restarted, it rejoins and follows the new leader.
    nodes.start(old);
    assert_eq!(nodes.leader(), handed);
    let started = Instant::now();
    loop {
        let applied = |i: usize| nodes.status(i).and_then(|s| s["applied_index"].as_u64());
        let target = applied((handed - 1) as usize);
        if target.is_some() && applied(old) == target {
            break;
        }
        assert!(started.elapsed() < WAIT, "node {leader} never caught up");
        std::thread::sleep(Duration::from_millis(50));
    }
}
