//! A three-process loopback cluster whose nodes talk TLS (`https://` peers, `--tls-cert`,
//! `--cluster-ca`): it elects a leader over TLS; a client's writes through a follower, and a
//! membership change sent to a follower, are passed to the leader over TLS; a node's
//! certificate is checked: `klock cluster` with the wrong CA is refused naming the
//! certificate, and without a CA is refused naming the flag. The TLS cluster flags' refusals
//! are checked by name.
//!
//! Real `klock` processes on fixed free loopback ports (support/cluster.rs); every node
//! presents one self-signed certificate for `localhost`, which is also the CA every node
//! trusts. Bounded: every wait has a deadline.

mod support;

use klock_testkit::support::self_signed;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use support::cluster::{Cluster, SECRET, WAIT};

fn klock(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_klock"))
        .args(args)
        .env_remove("KLOCK_CA")
        .env_remove("KLOCK_SERVER")
        .env_remove("KLOCK_TOKEN")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `klock cluster ACTION` against `node`, trusting `ca`.
fn cluster(action: &str, node: &str, secret: &Path, ca: Option<&Path>) -> Output {
    let mut args = vec![
        "cluster",
        action,
        "--node",
        node,
        "--cluster-secret-file",
        secret.to_str().unwrap(),
    ];
    if let Some(ca) = ca {
        args.extend(["--ca", ca.to_str().unwrap()]);
    }
    klock(&args)
}

/// Three nodes of the shared cluster helper, made `https://localhost:PORT` peers serving one
/// certificate, which is also the CA they trust.
struct TlsCluster {
    nodes: Cluster,
    urls: Vec<String>,
    cert: PathBuf,
}

impl TlsCluster {
    fn start() -> TlsCluster {
        let mut nodes = Cluster::unstarted(support::klock(), 3);
        let (_, cert, key) = self_signed(nodes.dir.path());
        let urls: Vec<String> = nodes
            .ports
            .iter()
            .map(|p| format!("https://localhost:{p}"))
            .collect();
        nodes.peers = urls
            .iter()
            .enumerate()
            .map(|(i, u)| format!("{}={u}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let (cert_arg, key_arg) = (cert.to_str().unwrap(), key.to_str().unwrap());
        nodes.extra = [
            "--tls-cert",
            cert_arg,
            "--tls-key",
            key_arg,
            "--cluster-ca",
            cert_arg,
        ]
        .map(String::from)
        .to_vec();
        for i in 0..3 {
            nodes.start(i);
        }
        TlsCluster { nodes, urls, cert }
    }

    fn secret(&self) -> PathBuf {
        PathBuf::from(self.nodes.secret_file())
    }

    fn dir(&self) -> &Path {
        self.nodes.dir.path()
    }

    /// `klock cluster status` of node `i` over TLS, as JSON.
    fn status(&self, i: usize) -> Option<Value> {
        let out = cluster("status", &self.urls[i], &self.secret(), Some(&self.cert));
        out.status
            .success()
            .then(|| serde_json::from_slice(&out.stdout).ok())
            .flatten()
    }

    /// The leader all three nodes agree on (node id), once they do.
    fn leader(&self) -> u64 {
        let started = Instant::now();
        loop {
            let leaders: Vec<Option<u64>> = (0..3)
                .map(|i| self.status(i).and_then(|s| s["leader"].as_u64()))
                .collect();
            if let Some(Some(leader)) = leaders.first() {
                if leaders.iter().all(|l| *l == Some(*leader)) {
                    return *leader;
                }
            }
            assert!(started.elapsed() < WAIT, "no leader agreed on: {leaders:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn a_cluster_over_tls_elects_replicates_proxies_and_checks_certificates() {
    let nodes = TlsCluster::start();
    let init = cluster("init", &nodes.urls[0], &nodes.secret(), Some(&nodes.cert));
    assert!(init.status.success(), "{}", text(&init.stderr));
    // Votes and appends travel over TLS: without them no leader is agreed on.
    let leader = nodes.leader();
    let status = nodes.status((leader - 1) as usize).unwrap();
    assert_eq!(status["voters"], serde_json::json!([1, 2, 3]), "{status}");

    // A membership change sent to a follower is passed on to the leader (over TLS) and
    // answered as the leader answers it.
    let follower = (0..3).find(|i| *i as u64 != leader - 1).unwrap();
    let mut voters = vec!["voters", "--ids", "1,2,3"];
    let (node, secret, ca) = (
        nodes.urls[follower].as_str(),
        nodes.secret(),
        nodes.cert.to_str().unwrap().to_owned(),
    );
    voters.extend([
        "--node",
        node,
        "--cluster-secret-file",
        secret.to_str().unwrap(),
    ]);
    voters.extend(["--ca", &ca]);
    let started = Instant::now();
    let passed_on = loop {
        let out = klock(&[&["cluster"], &voters[..]].concat());
        // A leader just elected may still be committing the first membership: asked again.
        if out.status.success()
            || !text(&out.stderr).contains("undergoing a configuration change")
            || started.elapsed() > WAIT
        {
            break out;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        passed_on.status.success() && text(&passed_on.stdout).contains("log_index"),
        "voters through follower {}: {}",
        follower + 1,
        text(&passed_on.stderr)
    );

    // A client's writes through a follower: the follower proxies them to the leader, over TLS.
    let root = nodes.dir().to_str().unwrap();
    let exec = klock(&[
        "exec",
        "--server",
        &nodes.urls[follower],
        "--ca",
        nodes.cert.to_str().unwrap(),
        "--root",
        root,
        "--intent",
        "MUTATES FILE:/over-tls",
        "--",
        "true",
    ]);
    assert!(
        exec.status.success(),
        "exec through follower {}: {}",
        follower + 1,
        text(&exec.stderr)
    );
    // Every node applied the writes: the commit index moved past the session's close.
    let started = Instant::now();
    loop {
        let applied: Vec<Option<u64>> = (0..3)
            .map(|i| nodes.status(i).and_then(|s| s["applied_index"].as_u64()))
            .collect();
        let leader_applied = applied[(leader - 1) as usize];
        if leader_applied.is_some() && applied.iter().all(|a| *a == leader_applied) {
            break;
        }
        assert!(
            started.elapsed() < WAIT,
            "not applied everywhere: {applied:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // The node's certificate is checked: another CA is refused naming the certificate...
    let other = nodes.dir().join("other");
    std::fs::create_dir(&other).unwrap();
    let (_, other_ca, _) = self_signed(&other);
    let refused = cluster("status", &nodes.urls[0], &nodes.secret(), Some(&other_ca));
    let err = text(&refused.stderr);
    assert!(
        !refused.status.success() && err.contains("TLS") && err.contains("certificate"),
        "{err}"
    );
    // ... and no CA at all is refused before any connection, naming the flag.
    let refused = cluster("status", &nodes.urls[0], &nodes.secret(), None);
    let err = text(&refused.stderr);
    assert!(
        !refused.status.success() && err.contains("CLUSTER_CA_MISSING") && err.contains("--ca"),
        "{err}"
    );
}

/// A node's URL says whether it serves TLS, `--cluster-ca` goes with `https://` peers, and an
/// `https://` peer needs it; each refusal names what is wrong.
#[test]
fn tls_cluster_flags_that_do_not_go_together_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, SECRET).unwrap();
    let (_, cert, key) = self_signed(dir.path());
    let data = dir.path().join("n.redb");
    let (secret, cert, key, data) = (
        secret.to_str().unwrap(),
        cert.to_str().unwrap(),
        key.to_str().unwrap(),
        data.to_str().unwrap(),
    );
    let refused = |peers: &str, more: &[&str], expected: &str| {
        let mut args: Vec<String> = [
            "--node-id",
            "1",
            "--cluster-peers",
            peers,
            "--cluster-secret-file",
            secret,
            "--data",
            data,
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        args.extend(more.iter().map(|s| (*s).to_owned()));
        let err = klock_cli::serve_args::parse(&args)
            .err()
            .unwrap_or_else(|| panic!("{peers} {more:?} accepted"));
        assert!(err.contains(expected), "{peers} {more:?}: {err}");
    };
    let tls = ["--tls-cert", cert, "--tls-key", key];
    let https = "1=https://localhost:7301,2=https://localhost:7302";
    refused(https, &["--cluster-ca", cert], "give --tls-cert");
    refused(
        "1=http://127.0.0.1:7301,2=http://127.0.0.1:7302",
        &tls,
        "make it https://",
    );
    refused(
        "1=http://127.0.0.1:7301,2=http://127.0.0.1:7302",
        &["--cluster-ca", cert],
        "names none",
    );
    refused(https, &tls, "CLUSTER_CA_MISSING");
    let bad_ca = dir.path().join("empty.pem");
    std::fs::write(&bad_ca, "not a certificate").unwrap();
    refused(
        https,
        &[&tls[..], &["--cluster-ca", bad_ca.to_str().unwrap()]].concat(),
        "BAD_CLUSTER_CA",
    );
    let err = klock_cli::serve_args::parse(&["--cluster-ca".to_owned(), cert.to_owned()])
        .err()
        .unwrap();
    assert!(err.contains("is for a cluster node"), "{err}");
    // Together they are taken.
    let mut ok: Vec<String> = [
        "--node-id",
        "1",
        "--cluster-peers",
        https,
        "--cluster-secret-file",
        secret,
        "--data",
        data,
        "--cluster-ca",
        cert,
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    ok.extend(tls.iter().map(|s| (*s).to_owned()));
    assert!(klock_cli::serve_args::parse(&ok).is_ok());
}
