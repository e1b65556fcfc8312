//! The cluster's HTTP client (`klock_raft::peer::Peer`): concurrent requests to one peer do not
//! wait for each other's round trip (a follower forwarding 64 clients' writes to its leader
//! had them take turns on one connection: 5% of a single node's pairs/s, server/bench), and
//! an idle connection is used again.
//!
//! A real axum server on a free loopback port whose route answers after [`SLOW`]; bounded.

use axum::extract::ConnectInfo;
use axum::routing::post;
use klock_raft::peer::{Peer, PeerAccess};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long the server takes to answer each request.
const SLOW: Duration = Duration::from_millis(300);
const SECRET: &str = "a-cluster-secret-of-the-test";

/// Starts the slow server; its port and the client addresses (one per connection) it
/// answered.
async fn slow_server() -> (u16, Arc<Mutex<BTreeSet<SocketAddr>>>) {
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let record = Arc::clone(&seen);
    let app = axum::Router::new().route(
        "/raft/slow",
        post(move |ConnectInfo(from): ConnectInfo<SocketAddr>| {
            let record = Arc::clone(&record);
            async move {
                record.lock().unwrap().insert(from);
                tokio::time::sleep(SLOW).await;
                "{}"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        axum::serve(listener, app).await.unwrap();
    });
    (port, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_to_one_peer_do_not_take_turns() {
    let (port, connections) = slow_server().await;
    let access = PeerAccess::new(Arc::from(SECRET), None).unwrap();
    let peer = Arc::new(Peer::new(&format!("http://127.0.0.1:{port}"), &access).unwrap());
    let started = Instant::now();
    let requests: Vec<_> = (0..4)
        .map(|_| {
            let peer = Arc::clone(&peer);
            tokio::spawn(async move {
                peer.post("/raft/slow", None, b"{}".to_vec(), Duration::from_secs(10))
                    .await
            })
        })
        .collect();
    for request in requests {
        let (status, _) = request.await.unwrap().unwrap();
        assert_eq!(status, 200);
    }
    // Four answers of 300 ms each in turn would take 1.2 s; side by side, about 300 ms.
    let took = started.elapsed();
    assert!(took < SLOW * 3, "four concurrent requests took {took:?}");
    assert_eq!(connections.lock().unwrap().len(), 4);
    // Once answered, a connection is used again: one more request opens none.
    let (status, _) = peer
        .post("/raft/slow", None, b"{}".to_vec(), Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(connections.lock().unwrap().len(), 4);
}
