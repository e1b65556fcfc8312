//! A cluster node that is stopped (SIGTERM) leaves gracefully: a leader hands its leadership
//! to a follower before it exits (its log says to which node, and the survivors agree that
//! node leads), exits 0, and, restarted on the same log, rejoins; writes through a survivor
//! are acknowledged after it left.
//!
//! Real `klock` processes on fixed free loopback ports (support/cluster.rs), each one's log in
//! a file. Bounded: every wait has a deadline.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};
use support::cluster::{klock_cluster, Cluster, WAIT};

/// `klock exec` through node `i`: a session, a lease and its release, all writes. Asked
/// again while the node answers 503 (a follower that has not applied the membership naming
/// its leader yet, a moment after the cluster formed).
fn write_through(cluster: &Cluster, i: usize) {
    let started = Instant::now();
    let out = loop {
        let out = Command::new(env!("CARGO_BIN_EXE_klock"))
            .args([
                "exec",
                "--server",
                &format!("http://127.0.0.1:{}", cluster.ports[i]),
            ])
            .args(["--root", cluster.dir.path().to_str().unwrap()])
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
        let unavailable = String::from_utf8_lossy(&out.stderr).contains("503");
        if out.status.success() || !unavailable || started.elapsed() > WAIT {
            break out;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        out.status.success(),
        "exec through node {}: {}",
        i + 1,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_leader_stopped_with_sigterm_hands_its_leadership_over_and_rejoins() {
    let mut cluster = Cluster::unstarted(support::klock(), 3);
    cluster.logged = true;
    for i in 0..3 {
        cluster.start(i);
    }
    klock_cluster(&cluster, 0, &["init"]).unwrap();
    let old = cluster.leader();
    let survivor = (0..3).find(|i| *i != old).unwrap();
    write_through(&cluster, survivor);

    let status = cluster.terminate(old);
    assert!(status.success(), "node {} exited {status}", old + 1);
    let log = cluster.log(old);
    let handed = log
        .lines()
        .find_map(|l| {
            let (_, rest) = l.split_once("handed leadership to node ")?;
            rest.split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse::<usize>()
                .ok()
        })
        .unwrap_or_else(|| panic!("node {} never said it handed over:\n{log}", old + 1));
    assert_ne!(handed, old + 1);
    assert_eq!(
        cluster.leader() + 1,
        handed,
        "the survivors follow the successor"
    );
    write_through(&cluster, survivor);

    // Its log was closed cleanly: restarted, it rejoins and follows the new leader.
    cluster.start(old);
    assert_eq!(cluster.leader() + 1, handed);
    let started = Instant::now();
    loop {
        let applied = |i: usize| cluster.status(i).and_then(|s| s["applied_index"].as_u64());
        let target = applied(handed - 1);
        if target.is_some() && applied(old) == target {
            break;
        }
        assert!(started.elapsed() < WAIT, "node {} never caught up", old + 1);
        std::thread::sleep(Duration::from_millis(50));
    }
}
