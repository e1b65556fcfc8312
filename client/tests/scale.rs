//! A fleet behind one token, from one process (issue 27 item 2), as
//! python/tests/test_scale.py and node/test/scale.test.mjs: 2,000 sessions, each holding a
//! lease and renewing it, through one `Client` against a real `klock serve` with a token file
//! and every limit at its default. One client reads one event stream per namespace (its
//! watch), so the fleet holds one of the token's 256 long-polls, not one per session (2,000
//! streams would be refused). Bounded: well under a minute in a debug build.
//!
//! The second test is the resync burst: the server (durable) is SIGKILLed and restarted on
//! its port and data file after longer than the client's watch may retry a poll, so the
//! watch's next answer may follow missed events and every keeper renews at once: 2,000
//! renewals due at the same instant, which sent together would be 2,000 connections from one
//! address, far above the server's 256 connections per peer. The client paces them (the core's
//! `renewals` rule): every lease must survive, and the server close or refuse no connection.

mod support;

use klock_client::{Client, LeaseGuard, LeaseOptions};
use klock_testkit::server::Server;
use std::time::{Duration, Instant};
use support::{eventually, klock, metric, metric_where, token_file, token_server, url};

const SESSIONS: usize = 2_000;
/// Opened and acquired this many at a time, as a fleet's agents would start: concurrently.
const BATCH: usize = 50;
const TTL: Duration = Duration::from_secs(30);
/// Leases are renewed a third of the way through their TTL: wait well past that for the last
/// one (a loaded machine answers heartbeats late), well before any deadline.
const HOLD: Duration = Duration::from_secs(15);
const SECRET: &str = "fleet-secret";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_sessions_behind_one_token_hold_and_renew_their_leases() {
    let dir = tempfile::tempdir().unwrap();
    let server = token_server(dir.path(), SECRET, &["*"]);
    let gauge = |name| metric(&server, Some(SECRET), name);
    tokio::time::timeout(Duration::from_secs(55), async {
        let fleet = start_fleet(&url(&server), None, TTL).await;
        let first: Vec<u64> = fleet.iter().map(|g| g.leases()[0].expires_at).collect();
        assert_eq!(gauge("klock_active_sessions"), SESSIONS as f64);
        assert_eq!(gauge("klock_active_leases"), SESSIONS as f64);
        // One stream for the whole process: the namespace's watch, not one per session.
        assert!(gauge("klock_event_readers") <= 1.0);

        // Past every lease's first renewal: each is held and was renewed.
        tokio::time::sleep(HOLD).await;
        let lost = lost(&fleet);
        assert!(
            lost.is_empty(),
            "{} leases lost, the first {:?}",
            lost.len(),
            &lost[..lost.len().min(5)]
        );
        let renewed = (0..SESSIONS)
            .filter(|&i| fleet[i].session().held()[0].expires_at > first[i])
            .count();
        assert_eq!(
            renewed, SESSIONS,
            "only {renewed} of {SESSIONS} leases renewed"
        );
        assert_eq!(gauge("klock_active_leases"), SESSIONS as f64);
        assert!(gauge("klock_event_readers") <= 1.0);

        release_fleet(fleet, SESSIONS).await;
        assert_eq!(gauge("klock_active_leases"), 0.0);
        assert_eq!(gauge("klock_active_sessions"), 0.0);
    })
    .await
    .expect("the fleet ran past its 55 s bound");
}

/// Opens the fleet through one client of the server at `url` (with this reconnect budget, else
/// the default): each session acquires its own file with `ttl`, [`BATCH`] at a time.
async fn start_fleet(url: &str, reconnect: Option<Duration>, ttl: Duration) -> Vec<LeaseGuard> {
    let mut options = Client::options(url).token(SECRET).namespace("fleet");
    if let Some(budget) = reconnect {
        options = options.reconnect_timeout(budget);
    }
    let client = options.connect().await.unwrap();
    let mut fleet: Vec<LeaseGuard> = Vec::with_capacity(SESSIONS);
    for start in (0..SESSIONS).step_by(BATCH) {
        let batch: Vec<_> = (start..start + BATCH)
            .map(|i| {
                let client = client.clone();
                tokio::spawn(async move {
                    let session = client.session(&format!("agent-{i}")).await?;
                    let options = LeaseOptions::default().ttl(ttl);
                    session
                        .lease([format!("MUTATES FILE:/fleet/{i}")], options)
                        .await
                })
            })
            .collect();
        for task in batch {
            fleet.push(task.await.unwrap().expect("a session and its lease"));
        }
    }
    fleet
}

/// Releases every lease of the fleet and closes its sessions, `at_once` at a time.
async fn release_fleet(mut fleet: Vec<LeaseGuard>, at_once: usize) {
    while !fleet.is_empty() {
        let batch = fleet.split_off(fleet.len().saturating_sub(at_once));
        let released: Vec<_> = batch
            .into_iter()
            .map(|guard| {
                tokio::spawn(async move {
                    let session = guard.session().clone();
                    guard.release().await?;
                    session.close().await
                })
            })
            .collect();
        for task in released {
            task.await.unwrap().expect("released and closed");
        }
    }
}

/// The sessions of the fleet whose lease is lost, or not held as one lease.
fn lost(fleet: &[LeaseGuard]) -> Vec<usize> {
    (0..fleet.len())
        .filter(|&i| fleet[i].lost().is_some() || fleet[i].session().held().len() != 1)
        .collect()
}

/// The client's reconnect budget in the restart test: a call gives up once the server has been
/// away this long (plus what a long poll asks the server to hold it). Short, so that the test
/// need not keep the server away for the default's 30 s; long enough for a debug server's
/// answers under the burst and its snapshot.
const RECONNECT: Duration = Duration::from_secs(3);

/// How long the server stays away in the restart test: longer than the watch's poll may try
/// ([`RECONNECT`] plus its wait), so the poll gives up and the next answer may follow missed
/// events: every keeper is told to resync at once when the server is back, and all 2,000
/// renew together.
const DOWN: Duration =
    Duration::from_secs(klock_client::watch::WAIT.as_secs() + RECONNECT.as_secs() + 1);

/// The leases' TTL in the restart test: no renewal falls due on its schedule (a third of the
/// TTL, 80 s after the grant) before the test ends, so every renewal it sees is the resync's;
/// and the local deadlines stay far beyond the downtime and the burst, so a lease can only be
/// lost if the burst loses it.
const RESTART_TTL: Duration = Duration::from_secs(240);

/// How long after the restart every lease must have been renewed: the resync follows the
/// watch's first answer from the restarted server (the poll after a failed one is not held
/// for an event, so it comes at once: the first renewal must come before a long poll's wait
/// could have ended), then the burst itself (about 2-4 s in a debug build); generous, for a
/// loaded machine.
const BURST: Duration = Duration::from_secs(klock_client::watch::WAIT.as_secs() + 15);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_two_thousand_leases_renew_at_once_and_all_survive() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = token_file(dir.path(), SECRET, &["*"]);
    let data = dir.path().join("klock.redb");
    let (tokens, data) = (tokens.to_str().unwrap(), data.to_str().unwrap());
    // A durable server with every limit at its default (256 connections per peer among them).
    let server = Server::spawn(&klock(), &["--data", data, "--tokens", tokens]);
    let port = server.port();
    tokio::time::timeout(Duration::from_secs(150), async {
        let opened = Instant::now();
        let fleet = start_fleet(&url(&server), Some(RECONNECT), RESTART_TTL).await;
        assert_eq!(
            metric(&server, Some(SECRET), "klock_active_leases"),
            SESSIONS as f64
        );
        let before: Vec<u64> = fleet.iter().map(|g| g.session().held()[0].expires_at).collect();

        server.kill(); // SIGKILL: a crash
        tokio::time::sleep(DOWN).await;
        let listen = format!("127.0.0.1:{port}");
        let server = Server::spawn(
            &klock(),
            &["--data", data, "--tokens", tokens, "--listen", &listen],
        );
        let back = Instant::now();
        assert_eq!(server.port(), port);

        // Every lease renewed by the restarted server (its expiry moved), none lost.
        let renewed = |fleet: &[LeaseGuard]| {
            (0..SESSIONS)
                .filter(|&i| {
                    fleet[i]
                        .session()
                        .held()
                        .first()
                        .is_some_and(|l| l.expires_at > before[i])
                })
                .count()
        };
        let mut first_renewal = None;
        let all = eventually(BURST, || {
            let count = renewed(&fleet);
            if count > 0 && first_renewal.is_none() {
                first_renewal = Some(back.elapsed());
            }
            let done = count == SESSIONS || !lost(&fleet).is_empty();
            async move { done }
        })
        .await;
        let took = back.elapsed();
        // Nothing fell due on its schedule so far: every renewal seen was the resync's.
        assert!(opened.elapsed() < RESTART_TTL / 3);
        let lost = lost(&fleet);
        assert!(
            lost.is_empty(),
            "{} leases lost after the restart, the first {:?}: {:?}",
            lost.len(),
            &lost[..lost.len().min(5)],
            fleet[lost[0]].lost()
        );
        let count = renewed(&fleet);
        assert!(
            all && count == SESSIONS,
            "only {count} of {SESSIONS} leases renewed within {BURST:?} of the restart"
        );
        // The resync did not wait for a long poll to end (the core's `Follow::wait_ms`).
        let first = first_renewal.expect("a renewal");
        assert!(
            first < klock_client::watch::WAIT,
            "the first renewal came {first:?} after the restart: the resync waited for a long poll"
        );
        let heartbeats = metric_where(
            &server,
            Some(SECRET),
            "klock_http_requests_total",
            "/heartbeat\",status=\"200\"",
        );
        let closed = |reason| {
            metric_where(
                &server,
                Some(SECRET),
                "klock_connections_closed_total",
                reason,
            )
        };
        let (refused, evicted) = (closed("too_many_connections_from_peer"), closed("evicted_idle"));
        let accepted = metric(&server, Some(SECRET), "klock_connections_accepted_total");
        eprintln!(
            "burst: {SESSIONS} leases renewed {took:?} after the restart (the first {first_renewal:?}); {heartbeats} heartbeats \
             answered 200, {accepted} connections accepted, {evicted} evicted at the cap, {refused} \
             refused as too many from this address"
        );
        assert!(heartbeats >= SESSIONS as f64, "{heartbeats} heartbeats");
        // The client paced its renewals (the core's `renewals` rule): the burst stayed under the
        // server's connections per peer, which closed or refused none of them.
        assert_eq!(
            (evicted, refused),
            (0.0, 0.0),
            "connections closed at the per-peer cap (evicted, refused)"
        );
        assert_eq!(
            metric(&server, Some(SECRET), "klock_active_leases"),
            SESSIONS as f64
        );
        // As the fleet started, BATCH at a time: its short reconnect budget is for the burst,
        // not for 2,000 concurrent closes, each a durable write, beside a snapshot.
        release_fleet(fleet, BATCH).await;
        assert_eq!(metric(&server, Some(SECRET), "klock_active_leases"), 0.0);
        assert_eq!(metric(&server, Some(SECRET), "klock_active_sessions"), 0.0);
    })
    .await
    .expect("the fleet ran past its 150 s bound");
}
