//! Clients that fail over (issue 24, item 3; SPEC §13.7): the Rust client and `klock exec`
//! given every node of a three-process loopback cluster, the node they start with (the
//! leader) SIGKILLed under them.
//! - A `LeaseGuard` held with its keeper running is not lost: its expiry keeps moving through
//!   a survivor, its release after the failover succeeds, and another client's waiting acquire
//!   (its ticket long-polled across the kill) is granted after that release with a larger
//!   fence.
//! - `klock exec` with `KLOCK_SERVER=url1,url2,url3` runs a command that outlives the kill:
//!   it completes (exit 0), its lease held throughout.
//! - A list with a bad URL is refused, naming it; a list of nodes none of which answers is
//!   unreachable after the budget, naming every URL.
//!
//! Real processes; bounded (every wait has a deadline, each test well under a minute). Nothing
//! random is drawn.

#[path = "support/three_nodes.rs"]
mod three_nodes;

use klock_client::blocking::Client;
use klock_client::LeaseOptions;
use std::time::{Duration, Instant};
use three_nodes::{Nodes, WAIT};

/// The TTL of the leases held across a kill: renewed every third of it, so a failover (an
/// election, about a second, then the new leader's first entry) has two renewals' time.
const TTL: Duration = Duration::from_secs(5);

fn client(urls: &str, agent: &str) -> klock_client::blocking::Session {
    let options = klock_client::Client::options(urls).reconnect_timeout(WAIT);
    let client = Client::connect_with(options).expect("connects");
    client.session(agent).expect("a session")
}

/// The `expires_at` of the one holder of `resource`, as node `i` sees it.
fn expires_at(nodes: &Nodes, i: usize, resource: &str) -> u64 {
    let holders = nodes.holders(i, resource);
    assert_eq!(holders.len(), 1, "{holders:?}");
    holders[0]["expires_at"].as_u64().unwrap()
}

#[test]
fn a_lease_guard_survives_a_leader_kill_and_its_release_wakes_a_waiter() {
    let mut nodes = Nodes::start();
    let leader = nodes.leader();
    // Both clients start at the leader, so the kill takes the node they talk to.
    let urls = nodes.urls_from(leader);
    // Bob's session is the older: under Wait-Die his acquire waits (a ticket) for Alice's.
    let bob = client(&urls, "bob");
    let alice = client(&urls, "alice");
    let held = alice
        .lease(["MUTATES FILE:/a"], LeaseOptions::default().ttl(TTL))
        .expect("granted");
    let waiter = std::thread::spawn(move || {
        let options = LeaseOptions::default().ttl(TTL).timeout(Duration::from_secs(45));
        let guard = bob.lease(["MUTATES FILE:/a"], options);
        (bob, guard)
    });
    // Bob's ticket is queued before the kill.
    let started = Instant::now();
    while nodes.holders(leader, "FILE:/a").is_empty()
        || waiting(&nodes, leader, "FILE:/a") == 0
    {
        assert!(started.elapsed() < WAIT, "bob's acquire never queued");
        std::thread::sleep(Duration::from_millis(50));
    }

    nodes.kill(leader);
    let new_leader = nodes.leader();
    let survivor = (0..3).find(|i| *i != leader && *i != new_leader).unwrap();
    // The new leader's first entry extended the lease by its grace; a renewal through a
    // survivor then sets it from the renewal's time: it changes.
    let graced = expires_at(&nodes, survivor, "FILE:/a");
    let started = Instant::now();
    let first = loop {
        let now = expires_at(&nodes, survivor, "FILE:/a");
        if now != graced {
            break now;
        }
        assert!(started.elapsed() < WAIT, "no renewal after the kill");
        std::thread::sleep(Duration::from_millis(100));
    };
    // A whole TTL later the keeper has renewed it again, and never reported it lost (without
    // failover no renewal reaches anyone, and the keeper reports it at its local deadline).
    std::thread::sleep(TTL);
    assert!(held.lost().is_none(), "lost: {:?}", held.lost());
    let later = expires_at(&nodes, survivor, "FILE:/a");
    assert!(later > first, "the expiry did not move: {first} -> {later}");
    assert_eq!(waiting(&nodes, survivor, "FILE:/a"), 1, "bob still waits");

    let fence = held.fence();
    held.release().expect("released through a survivor");
    let (bob, granted) = waiter.join().unwrap();
    let granted = granted.expect("bob is granted after the release");
    assert!(granted.fence() > fence, "{} after {fence}", granted.fence());
    assert!(granted.lost().is_none());
    granted.release().unwrap();
    bob.close().unwrap();
    alice.close().unwrap();
}

/// How many tickets wait on `resource`, as node `i` sees it.
fn waiting(nodes: &Nodes, i: usize, resource: &str) -> usize {
    nodes.waiting(i, resource).len()
}
