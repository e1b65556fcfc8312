//! A fleet behind one token, from one process (issue 27 item 2), as
//! python/tests/test_scale.py and node/test/scale.test.mjs: 2,000 sessions, each holding a
//! lease and renewing it, through one `Client` against a real `klock serve` with a token file
//! and every limit at its default. One client reads one event stream per namespace (its
//! watch), so the fleet holds one of the token's 256 long-polls, not one per session (2,000
//! streams would be refused). Bounded: well under a minute in a debug build.

mod support;

use klock_client::{Client, LeaseGuard, LeaseOptions};
use std::time::Duration;
use support::{metric, token_server, url};

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
        let client = Client::options(&url(&server))
            .token(SECRET)
            .namespace("fleet")
            .connect()
            .await
            .unwrap();
        let mut fleet: Vec<LeaseGuard> = Vec::with_capacity(SESSIONS);
        for start in (0..SESSIONS).step_by(BATCH) {
            let batch: Vec<_> = (start..start + BATCH)
                .map(|i| {
                    let client = client.clone();
                    tokio::spawn(async move {
                        let session = client.session(&format!("agent-{i}")).await?;
                        let options = LeaseOptions::default().ttl(TTL);
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
        let first: Vec<u64> = fleet.iter().map(|g| g.leases()[0].expires_at).collect();
        assert_eq!(gauge("klock_active_sessions"), SESSIONS as f64);
        assert_eq!(gauge("klock_active_leases"), SESSIONS as f64);
        // One stream for the whole process: the namespace's watch, not one per session.
        assert!(gauge("klock_event_readers") <= 1.0);

        // Past every lease's first renewal: each is held and was renewed.
        tokio::time::sleep(HOLD).await;
        let lost: Vec<usize> = (0..SESSIONS)
            .filter(|&i| fleet[i].lost().is_some() || fleet[i].session().held().len() != 1)
            .collect();
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

        let released: Vec<_> = fleet
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
        assert_eq!(gauge("klock_active_leases"), 0.0);
        assert_eq!(gauge("klock_active_sessions"), 0.0);
    })
    .await
    .expect("the fleet ran past its 55 s bound");
}
