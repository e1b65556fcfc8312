//! A client that starts on a follower goes to the leader once an answer names it: a real
//! three-process cluster (the test kit's), a follower's `Klock-Leader`, and the core's
//! `Servers::led_by` deciding in the transport every Rust driver (the agent tools too) calls
//! through.

mod support;

use klock_client::endpoint::Endpoint;
use klock_client::transport::Transport;
use klock_testkit::cluster::{Cluster, WAIT};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_on_a_follower_goes_to_the_leader_once_an_answer_names_it() {
    let cluster = Cluster::initialised(&support::klock(), 3);
    let leader = cluster.leader();
    let follower = (leader + 1) % 3;
    let endpoints = [cluster.url(follower), cluster.url(leader)]
        .iter()
        .map(|url| Endpoint::parse(url).unwrap())
        .collect();
    let transport = Transport::nodes(endpoints, None).unwrap();
    // A follower heard from its leader lately names it: asked until it does, bounded.
    let started = Instant::now();
    let mut answered_by = Vec::new();
    loop {
        let (_, node) = transport
            .get_from("/v1/state/hash", Duration::ZERO)
            .await
            .unwrap();
        answered_by.push(node);
        if node == 1 {
            break;
        }
        assert!(
            started.elapsed() < WAIT,
            "no answer named the leader: {answered_by:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(answered_by[0], 0, "the first call went to the first URL");
    // The leader names none: the client stays there.
    for _ in 0..5 {
        let (_, node) = transport
            .get_from("/v1/state/hash", Duration::ZERO)
            .await
            .unwrap();
        assert_eq!(node, 1);
    }
}
