//! The async client against a real `klock serve --memory` process on a free loopback port:
//! grant and release, the RAII guard, background renewal, Wait-Die (wait, then granted; Died
//! while holding; Timeout), a lost lease told to its guard, the fenced write, bad input. Every
//! wait is bounded; the server's own view of a resource is read to check what the client says.

mod support;

use klock_client::{Client, Error, LeaseOptions, Session, TimedOut};
use std::time::{Duration, Instant};
use support::{acquires, eventually, holders, server, timed_out, url};

const X: &str = "MUTATES FILE:/x";
const Y: &str = "MUTATES FILE:/y";

fn try_lock() -> LeaseOptions {
    LeaseOptions::default().timeout(Duration::ZERO)
}

/// A client, and two sessions in the order of their age (Wait-Die: the older one waits, the
/// younger one dies), of the agents "older" and "younger".
async fn older_and_younger(server: &klock_testkit::server::Server) -> (Client, Session, Session) {
    let client = Client::connect(&url(server), None).await.unwrap();
    let older = client.session("older").await.unwrap();
    let younger = client.session("younger").await.unwrap();
    (client, older, younger)
}

/// Runs a test's body under a bound, so a client that hangs fails instead of stalling.
async fn bounded<F: std::future::Future>(body: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(30), body)
        .await
        .expect("the test ran past its 30 s bound")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_is_granted_held_and_released() {
    let server = server(&[]);
    bounded(async {
        let (client, a, b) = older_and_younger(&server).await;
        let guard = a.lease([X], LeaseOptions::default()).await.unwrap();
        assert_eq!(guard.leases().len(), 1);
        assert_eq!(guard.leases()[0].resource, "FILE:/x");
        assert_eq!(guard.fence(), guard.leases()[0].fence);
        assert_eq!(
            holders(&client, "FILE:/x").await,
            [guard.leases()[0].lease_id.0]
        );
        assert_eq!(a.held().len(), 1);
        // Held: the younger session is refused at once.
        let refused = b.lease([X], try_lock()).await.unwrap_err();
        assert!(timed_out(&refused, TimedOut::NoWait), "{refused}");
        assert!(refused.to_string().contains("\"older\""), "{refused}");
        guard.release().await.unwrap();
        assert!(holders(&client, "FILE:/x").await.is_empty());
        assert!(a.held().is_empty());
        let _taken = b.lease([X], try_lock()).await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_guard_releases_the_lease() {
    let server = server(&[]);
    bounded(async {
        let client = Client::connect(&url(&server), None).await.unwrap();
        let a = client.session("a").await.unwrap();
        let guard = a.lease([X, Y], LeaseOptions::default()).await.unwrap();
        assert_eq!(holders(&client, "FILE:/y").await.len(), 1);
        drop(guard);
        assert!(a.held().is_empty(), "no longer renewed once dropped");
        let released = eventually(Duration::from_secs(5), || async {
            holders(&client, "FILE:/x").await.is_empty()
                && holders(&client, "FILE:/y").await.is_empty()
        })
        .await;
        assert!(released, "the dropped guard's leases are still held");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_lease_is_renewed_past_its_ttl() {
    let server = server(&[]);
    bounded(async {
        let (client, a, b) = older_and_younger(&server).await;
        let ttl = Duration::from_millis(300);
        let guard = a
            .lease([X], LeaseOptions::default().ttl(ttl))
            .await
            .unwrap();
        let id = guard.leases()[0].lease_id.0;
        // Four TTLs: without renewals the server would have let it expire three times over.
        tokio::time::sleep(ttl * 4).await;
        assert!(guard.lost().is_none(), "{:?}", guard.lost());
        assert_eq!(holders(&client, "FILE:/x").await, [id]);
        assert!(b.lease([X], try_lock()).await.is_err());
        drop(guard);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_session_waits_and_is_granted_when_the_holder_releases() {
    let server = server(&[]);
    bounded(async {
        // Opened first, so older: Wait-Die lets it wait for the younger holder.
        let (client, older, younger) = older_and_younger(&server).await;
        let held = younger.lease([X], LeaseOptions::default()).await.unwrap();
        let reader = client.clone();
        let release = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(400)).await;
            // What waits meanwhile: the request's one ticket, followed, not asked again.
            let (state, _) = klock_client::routes::resource_state(
                reader.transport(),
                reader.namespace(),
                "FILE:/x",
            )
            .await
            .unwrap();
            held.release().await.unwrap();
            state.waiting
        });
        let started = Instant::now();
        let options = LeaseOptions::default().timeout(Duration::from_secs(10));
        let guard = older.lease([X], options).await.unwrap();
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(350), "{waited:?}");
        assert_eq!(
            holders(&client, "FILE:/x").await,
            [guard.leases()[0].lease_id.0]
        );
        let waiting = release.await.unwrap();
        assert_eq!(waiting.len(), 1, "{waiting:?}");
        assert_eq!(waiting[0].agent_id, "older");
        // One acquire each: the waiter followed its ticket rather than asking again.
        assert_eq!(acquires(&server), 2);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_younger_session_holding_another_lease_dies_rather_than_waits() {
    let server = server(&[]);
    bounded(async {
        let (client, older, younger) = older_and_younger(&server).await;
        let _x = older.lease([X], LeaseOptions::default()).await.unwrap();
        let y = younger.lease([Y], LeaseOptions::default()).await.unwrap();
        let options = LeaseOptions::default().timeout(Duration::from_secs(10));
        let started = Instant::now();
        let died = younger.lease([X], options).await.unwrap_err();
        // At once, not after sleeping backoffs until the timeout: holding Y while waiting for
        // X is how deadlocks start, so the caller must roll back.
        assert!(started.elapsed() < Duration::from_secs(3));
        match &died {
            Error::Died { blockers, .. } => {
                assert_eq!(blockers.len(), 1);
                assert_eq!(blockers[0].agent_id, "older");
            }
            other => panic!("expected Died, got {other}"),
        }
        assert_eq!(died.name(), "DIED");
        // Its other lease is untouched: rolling back is the caller's call.
        assert_eq!(holders(&client, "FILE:/y").await.len(), 1);
        drop(y);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_not_granted_in_its_timeout_is_a_timeout() {
    let server = server(&[]);
    bounded(async {
        let (client, older, younger) = older_and_younger(&server).await;
        let held = younger.lease([X], LeaseOptions::default()).await.unwrap();
        // The older session waits (a WAIT) until its timeout.
        let started = Instant::now();
        let options = LeaseOptions::default().timeout(Duration::from_millis(500));
        let waited = older.lease([X], options).await.unwrap_err();
        let took = started.elapsed();
        assert!(timed_out(&waited, TimedOut::WaitEnded), "{waited}");
        assert!(
            took >= Duration::from_millis(450) && took < Duration::from_secs(5),
            "{took:?}"
        );
        assert!(waited.to_string().contains("\"younger\""), "{waited}");
        // Nothing of it stays queued.
        let (state, _) =
            klock_client::routes::resource_state(client.transport(), client.namespace(), "FILE:/x")
                .await
                .unwrap();
        assert!(state.waiting.is_empty(), "{:?}", state.waiting);
        drop(held);
        // The younger one, refused by an older holder (a DIE), holds nothing else: it sleeps
        // the kernel's backoff and asks again until the next retry would pass its timeout.
        let _x = older.lease([X], LeaseOptions::default()).await.unwrap();
        let options = LeaseOptions::default().timeout(Duration::from_millis(300));
        let started = Instant::now();
        let died = younger.lease([X], options).await.unwrap_err();
        assert!(timed_out(&died, TimedOut::RetryTooLate), "{died}");
        assert!(started.elapsed() < Duration::from_secs(3));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wounded_lease_is_told_to_its_guard() {
    let server = server(&["--config", "policy=wound_wait"]);
    bounded(async {
        let (_, older, younger) = older_and_younger(&server).await;
        let mut held = younger.lease([X], LeaseOptions::default()).await.unwrap();
        assert!(held.lost().is_none());
        // Wound-Wait: the older session takes the resource from the younger holder.
        let options = LeaseOptions::default().timeout(Duration::from_secs(10));
        let taken = tokio::spawn(async move { older.lease([X], options).await });
        let loss = tokio::time::timeout(Duration::from_secs(10), held.until_lost())
            .await
            .expect("no loss told within 10 s");
        assert_eq!(loss.reason, "WOUNDED");
        assert_eq!(loss.leases[0].lease_id, held.leases()[0].lease_id);
        assert_eq!(held.lost().map(|l| l.reason), Some(String::from("WOUNDED")));
        assert!(
            younger.held().is_empty(),
            "a lost lease is no longer renewed"
        );
        let guard = taken.await.unwrap().unwrap();
        assert!(guard.fence() > held.fence());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_write_refuses_a_stale_fence() {
    let server = server(&[]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("notes.txt");
    bounded(async {
        let (_, a, b) = older_and_younger(&server).await;
        let first = a.lease([X], LeaseOptions::default()).await.unwrap();
        let stale = first.fence();
        first.fenced_write(&file, b"first").await.unwrap();
        first.release().await.unwrap();
        let second = b.lease([X], LeaseOptions::default()).await.unwrap();
        assert!(second.fence() > stale);
        second.fenced_write(&file, b"second").await.unwrap();
        // The first holder wakes up late and writes with its old fence.
        let refused = klock_client::fence::fenced_write(&file, b"late", stale).unwrap_err();
        match &refused {
            Error::StaleFence {
                fence,
                stored,
                path,
            } => {
                assert_eq!((*fence, *stored), (stale, second.fence()));
                assert_eq!(path, &file);
            }
            other => panic!("expected StaleFence, got {other}"),
        }
        assert_eq!(refused.name(), "STALE_FENCE");
        assert_eq!(std::fs::read(&file).unwrap(), b"second");
        assert_eq!(
            klock_client::fence::stored_fence(&file).unwrap(),
            Some(second.fence())
        );
        // The same fence again is accepted (one holder may write twice).
        second.fenced_write(&file, b"again").await.unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), b"again");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_named_error_before_any_request() {
    let server = server(&[]);
    bounded(async {
        for bad in ["ftp://127.0.0.1:1", "http://127.0.0.1", "http://h:1/v1", ""] {
            let e = Client::connect(bad, None).await.unwrap_err();
            assert_eq!(e.name(), "BAD_URL", "{bad:?}: {e}");
        }
        // Nothing listens on a port just freed (tried for a short budget, not the default 30 s).
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = free.local_addr().unwrap().port();
        drop(free);
        let e = Client::options(&format!("http://127.0.0.1:{port}"))
            .reconnect_timeout(Duration::from_millis(300))
            .connect()
            .await
            .unwrap_err();
        assert_eq!(e.name(), "UNREACHABLE", "{e}");
        let client = Client::connect(&url(&server), None).await.unwrap();
        let a = client.session("a").await.unwrap();
        for intents in [
            vec![],
            vec!["MUTATES"],
            vec!["GRABS FILE:/x"],
            vec!["MUTATES nope"],
        ] {
            let e = a
                .lease(intents.clone(), LeaseOptions::default())
                .await
                .unwrap_err();
            assert_eq!(e.name(), "INVALID_INPUT", "{intents:?}: {e}");
        }
        let e = a
            .lease([X], LeaseOptions::default().ttl(Duration::ZERO))
            .await
            .unwrap_err();
        assert_eq!(e.name(), "INVALID_INPUT", "{e}");
        // A bad agent id is the server's refusal, named.
        let e = client.session("").await.unwrap_err();
        assert!(matches!(e, Error::Refused { status: 400, .. }), "{e}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_the_session_releases_everything_and_tells_the_guards() {
    let server = server(&[]);
    bounded(async {
        let client = Client::connect(&url(&server), None).await.unwrap();
        let a = client.session("a").await.unwrap();
        let guard = a.lease([X], LeaseOptions::default()).await.unwrap();
        a.close().await.unwrap();
        assert!(holders(&client, "FILE:/x").await.is_empty());
        assert_eq!(
            guard.lost().map(|l| l.reason),
            Some(String::from("SESSION_CLOSED"))
        );
        let e = a.lease([X], LeaseOptions::default()).await.unwrap_err();
        assert_eq!(e.name(), "INVALID_INPUT", "{e}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_future_dropped_while_it_waits_withdraws_its_ticket() {
    let server = server(&[]);
    bounded(async {
        let (client, older, younger) = older_and_younger(&server).await;
        let _held = younger.lease([X], LeaseOptions::default()).await.unwrap();
        // The older session queues behind the holder; its caller gives up on its own clock.
        let asked = older.lease([X], LeaseOptions::default());
        assert!(tokio::time::timeout(Duration::from_millis(300), asked)
            .await
            .is_err());
        let withdrawn = eventually(Duration::from_secs(5), || async {
            let (state, _) = klock_client::routes::resource_state(
                client.transport(),
                client.namespace(),
                "FILE:/x",
            )
            .await
            .unwrap();
            state.waiting.is_empty()
        })
        .await;
        assert!(withdrawn, "the dropped lease's ticket is still queued");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_wrong_token_fails_at_connect_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let server = support::token_server(dir.path(), "s3cret", &["default"]);
    bounded(async {
        for token in [None, Some("wrong")] {
            let e = Client::connect(&url(&server), token).await.unwrap_err();
            assert_eq!(e.name(), "UNAUTHORIZED", "{token:?}: {e}");
            assert!(matches!(e, Error::Refused { status: 401, .. }), "{e}");
        }
        let client = Client::connect(&url(&server), Some("s3cret"))
            .await
            .unwrap();
        let a = client.session("a").await.unwrap();
        let _held = a.lease([X], LeaseOptions::default()).await.unwrap();
    })
    .await;
}
