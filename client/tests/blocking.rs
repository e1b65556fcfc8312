//! The blocking facade against a real `klock serve --memory` process: no async in the test,
//! renewals on the facade's own runtime thread while the caller sleeps, a guard's drop that
//! has released before it returns, and a call from inside a tokio runtime refused by name.

mod support;

use klock_client::blocking::Client;
use klock_client::{LeaseOptions, TimedOut};
use std::time::Duration;
use support::{server, timed_out, url};

const X: &str = "MUTATES FILE:/x";

#[test]
fn the_blocking_client_holds_renews_and_releases() {
    let server = server(&[]);
    let client = Client::connect(&url(&server), None).unwrap();
    let (a, b) = (client.session("a").unwrap(), client.session("b").unwrap());
    let ttl = Duration::from_millis(300);
    let guard = a.lease([X], LeaseOptions::default().ttl(ttl)).unwrap();
    assert_eq!(guard.leases()[0].resource, "FILE:/x");
    // The caller's thread sleeps four TTLs: the facade's runtime renews meanwhile.
    std::thread::sleep(ttl * 4);
    assert!(guard.lost().is_none(), "{:?}", guard.lost());
    let try_lock = LeaseOptions::default().timeout(Duration::ZERO);
    let refused = b.lease([X], try_lock).unwrap_err();
    assert!(timed_out(&refused, TimedOut::NoWait), "{refused}");
    // Released by the time the drop returns: the next try-lock is granted at once.
    drop(guard);
    assert!(a.held().is_empty());
    let taken = b.lease([X], try_lock).unwrap();
    taken.release().unwrap();
    assert!(Client::connect("http://nowhere", None).is_err_and(|e| e.name() == "BAD_URL"));
}

#[test]
fn the_blocking_client_inside_a_runtime_is_refused_not_a_panic() {
    let server = server(&[]);
    let client = Client::connect(&url(&server), None).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let refused = runtime.block_on(async { client.session("a").map(|_| ()) });
    let e = refused.unwrap_err();
    assert_eq!(e.name(), "INVALID_INPUT", "{e}");
    assert!(e.to_string().contains("inside a tokio runtime"), "{e}");
}

#[test]
fn the_blocking_guard_is_told_of_a_loss() {
    let server = server(&["--config", "policy=wound_wait"]);
    let client = Client::connect(&url(&server), None).unwrap();
    let older = client.session("older").unwrap();
    let younger = client.session("younger").unwrap();
    let mut held = younger.lease([X], LeaseOptions::default()).unwrap();
    assert!(held.wait_lost(Duration::from_millis(50)).is_none());
    // Wound-Wait: the older session, on another thread, takes the resource.
    let taker = std::thread::spawn(move || {
        let options = LeaseOptions::default().timeout(Duration::from_secs(10));
        older.lease([X], options).map(|guard| guard.fence())
    });
    let loss = held
        .wait_lost(Duration::from_secs(10))
        .expect("no loss told within 10 s");
    assert_eq!(loss.reason, "WOUNDED");
    assert!(taker.join().unwrap().unwrap() > held.fence());
}

#[test]
fn one_blocking_client_opens_sessions_in_several_namespaces() {
    let server = server(&[]);
    let client = Client::connect(&url(&server), None).unwrap();
    let try_lock = LeaseOptions::default().timeout(Duration::ZERO);
    let (here, also_here) = (client.session("a").unwrap(), client.session("b").unwrap());
    let there = client.in_namespace("team-b").session("c").unwrap();
    let held = here.lease([X], try_lock).unwrap();
    // The same resource in another namespace is another resource; in this one it is held.
    let elsewhere = there.lease([X], try_lock).unwrap();
    let refused = also_here.lease([X], try_lock).unwrap_err();
    assert!(timed_out(&refused, TimedOut::NoWait), "{refused}");
    drop((held, elsewhere));
}
