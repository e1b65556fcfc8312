//! The client's one event stream per namespace (`klock_client::watch`) against a real
//! `klock serve --memory`: it carries every session's events to its own keeper, it lives while
//! a session of the namespace does, and events the server dropped before the client read them
//! (a `gap`) make every held lease be renewed at once, so a loss they told is learnt then, not
//! at the next renewal. Every wait is bounded.

mod support;

use klock_client::{Client, LeaseOptions};
use klock_testkit::link::Link;
use klock_testkit::server::Server;
use std::time::{Duration, Instant};
use support::{eventually, klock, metric, metric_where, server, url};

/// Runs a test's body under a bound, so a client that hangs fails instead of stalling.
async fn bounded<F: std::future::Future>(body: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(40), body)
        .await
        .expect("the test ran past its 40 s bound")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_stream_carries_each_sessions_events_to_its_own_guards() {
    let server = server(&["--config", "policy=wound_wait"]);
    bounded(async {
        let client = Client::connect(&url(&server), None).await.unwrap();
        let older = client.session("older").await.unwrap();
        let younger: Vec<_> = [client.session("a").await, client.session("b").await]
            .into_iter()
            .map(Result::unwrap)
            .collect();
        let mut a = younger[0]
            .lease(["MUTATES FILE:/a"], LeaseOptions::default())
            .await
            .unwrap();
        let b = younger[1]
            .lease(["MUTATES FILE:/b"], LeaseOptions::default())
            .await
            .unwrap();
        assert!(
            eventually(Duration::from_secs(5), || async {
                metric(&server, None, "klock_event_readers") == 1.0
            })
            .await
        );
        // Wound-Wait: the older session takes /a; only a's guard hears of it, by the stream
        // (the 60 s TTL renews in 20 s).
        let _taken = older
            .lease(["MUTATES FILE:/a"], LeaseOptions::default())
            .await
            .unwrap();
        let loss = tokio::time::timeout(Duration::from_secs(5), a.until_lost())
            .await
            .expect("no loss told within 5 s");
        assert_eq!(loss.reason, "WOUNDED");
        assert!(b.lost().is_none(), "b's lease was not touched");
        assert_eq!(younger[1].held().len(), 1);
        assert!(metric(&server, None, "klock_event_readers") <= 1.0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_stops_with_the_last_session_and_starts_with_the_next() {
    let server = server(&[]);
    bounded(async {
        let client = Client::connect(&url(&server), None).await.unwrap();
        let readers = || async { metric(&server, None, "klock_event_readers") };
        let sessions = [client.session("a").await, client.session("b").await];
        assert!(eventually(Duration::from_secs(5), || async { readers().await == 1.0 }).await);
        drop(sessions);
        // The reader's poll is abandoned; the server lets its wait go by the poll's 10 s.
        assert!(
            eventually(Duration::from_secs(15), || async { readers().await == 0.0 }).await,
            "the client still reads the stream with no session left"
        );
        let _again = client.session("c").await.unwrap();
        assert!(eventually(Duration::from_secs(5), || async { readers().await == 1.0 }).await);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loss_the_stream_missed_in_a_gap_is_learnt_by_renewing_at_once() {
    // A budget of a few events: a burst of others' events drops the one that concerns us.
    let server = server(&["--config", "policy=wound_wait", "--event-bytes", "4096"]);
    let link = Link::open(server.port()).unwrap();
    bounded(async {
        let direct = Client::connect(&url(&server), None).await.unwrap();
        let older = direct.session("older").await.unwrap();
        let through = Client::connect(&format!("http://127.0.0.1:{}", link.port()), None)
            .await
            .unwrap();
        let younger = through.session("younger").await.unwrap();
        let granted = Instant::now();
        let mut held = younger
            .lease(["MUTATES FILE:/x"], LeaseOptions::default())
            .await
            .unwrap();
        // The stream is cut off; meanwhile the older session wounds the holder and a burst of
        // its own events pushes the WOUNDED out of the server's budget.
        link.cut();
        let _taken = older
            .lease(["MUTATES FILE:/x"], LeaseOptions::default())
            .await
            .unwrap();
        for _ in 0..100 {
            let burst = older
                .lease(["MUTATES FILE:/burst"], LeaseOptions::default())
                .await
                .unwrap();
            burst.release().await.unwrap();
        }
        assert!(held.lost().is_none(), "the loss cannot have been heard yet");
        link.restore();
        // The next poll answers with a gap: the keeper renews at once, and the server says
        // the lease is gone; its renewal was not due before 20 s after the grant.
        let loss = tokio::time::timeout(Duration::from_secs(8), held.until_lost())
            .await
            .expect("no loss learnt within 8 s of the gap");
        assert!(
            granted.elapsed() < Duration::from_secs(18),
            "too slow to tell a resync from the renewal due at 20 s"
        );
        // The renewal's answer, not the local deadline (LEASE_EXPIRED): a wounded lease
        // counts as released.
        assert_eq!(loss.reason, "LEASE_RELEASED", "{loss:?}");
        assert!(younger.held().is_empty());
    })
    .await;
}

/// A `--memory` server restarted on its port starts a new log, whose entries begin below the
/// stream's cursor. The stream names its cursor's log, so the restarted server reads it from
/// its log's start, and a session opened there hears of its loss through the stream (the
/// core's `Follow::opened`, `answered`), not at its renewal a third of the TTL later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_memory_servers_restart_the_stream_reads_the_new_log() {
    let server = server(&["--config", "policy=wound_wait"]);
    let port = server.port();
    bounded(async {
        let client = Client::connect(&url(&server), None).await.unwrap();
        // Kept through the restart, so the client's stream (and its cursor) lives on.
        let first = client.session("first").await.unwrap();
        for _ in 0..20 {
            let lease = first
                .lease(["MUTATES FILE:/warm"], LeaseOptions::default())
                .await
                .unwrap();
            lease.release().await.unwrap();
        }
        server.kill();
        let listen = format!("127.0.0.1:{port}");
        let server = Server::spawn(
            &klock(),
            &[
                "--memory",
                "--config",
                "policy=wound_wait",
                "--listen",
                &listen,
            ],
        );
        // On the new log: an older session of another client, then this client's younger one.
        let other = Client::connect(&url(&server), None).await.unwrap();
        let older = other.session("older").await.unwrap();
        let younger = client.session("younger").await.unwrap();
        let granted = Instant::now();
        let mut held = younger
            .lease(["MUTATES FILE:/x"], LeaseOptions::default())
            .await
            .unwrap();
        // Wound-Wait: the older session takes /x; the WOUNDED is an early entry of the new log.
        let _taken = older
            .lease(["MUTATES FILE:/x"], LeaseOptions::default())
            .await
            .unwrap();
        let loss = tokio::time::timeout(Duration::from_secs(8), held.until_lost())
            .await
            .expect("no loss heard within 8 s: the stream did not read the new log");
        assert!(
            granted.elapsed() < Duration::from_secs(18),
            "too slow to tell the stream from the renewal due at 20 s"
        );
        // The stream's event, by its name (a renewal would say LEASE_RELEASED).
        assert_eq!(loss.reason, "WOUNDED", "{loss:?}");
        drop(first);
    })
    .await;
}

/// The stream asks the server to leave the holder events (ACQUIRED, RELEASED) out: another
/// client's uncontended acquires and releases in the namespace answer none of this client's
/// polls (each would be answered at once by them otherwise: a poll per event of every process).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_clients_acquires_and_releases_answer_no_poll() {
    let server = server(&[]);
    bounded(async {
        let idle = Client::connect(&url(&server), None).await.unwrap();
        let _bystander = idle.session("bystander").await.unwrap();
        let busy = Client::connect(&url(&server), None).await.unwrap();
        let churner = busy.session("churner").await.unwrap();
        let watch = "/v1/ns/{ns}/watch\"";
        let polls = || metric_where(&server, None, "klock_http_requests_total", watch);
        assert!(
            eventually(Duration::from_secs(5), || async {
                metric(&server, None, "klock_event_readers") == 2.0
            })
            .await
        );
        let before = polls();
        for _ in 0..100 {
            let lease = churner
                .lease(["MUTATES FILE:/churn"], LeaseOptions::default())
                .await
                .unwrap();
            lease.release().await.unwrap();
        }
        // Each reader's poll is held (10 s): none answered by the 200 holder events.
        let answered = polls() - before;
        assert!(
            answered <= 1.0,
            "{answered} polls answered during 100 acquire+release pairs"
        );
    })
    .await;
}
