//! The engine's timer against deadlines at the end of the kernel's clock: a lease whose expiry
//! saturates (an operator's `max_ttl_ms` without a cap, and a client's TTL at `u64::MAX`) is
//! a deadline the timer never reaches, not an overflow that ends the timer task and with it
//! every later expiry's wake-up.

use serde_json::json;

mod support;

use support::{on, open, Server};

#[test]
fn a_deadline_at_the_end_of_time_leaves_the_timer_waking_earlier_ones() {
    let uncapped = format!("max_ttl_ms={}", u64::MAX);
    let s = Server::start(&["--memory", "--config", &uncapped]);
    // The waiter is the oldest: under Wait-Die it waits rather than dies.
    let waiter = open(&s, "default", "waiter");
    let forever = open(&s, "default", "forever");
    let holder = open(&s, "default", "holder");
    let (status, v) = on(
        &s,
        &forever,
        "POST",
        "acquire",
        json!({"intents": ["MUTATES FILE:/forever"], "ttl_ms": u64::MAX}),
    );
    assert_eq!((status, &v["verdict"]), (200, &json!("GRANTED")), "{v}");
    // The timer has now armed for the saturated expiry (the only deadline).
    std::thread::sleep(std::time::Duration::from_millis(100));
    let (_, v) = on(
        &s,
        &holder,
        "POST",
        "acquire",
        json!({"intents": ["MUTATES FILE:/short"], "ttl_ms": 200}),
    );
    assert_eq!(v["verdict"], "GRANTED", "{v}");
    let (_, v) = on(
        &s,
        &waiter,
        "POST",
        "acquire",
        json!({"intents": ["MUTATES FILE:/short"], "wait_timeout_ms": 30_000}),
    );
    assert_eq!(v["verdict"], "WAIT", "{v}");
    let ticket = v["ticket"].as_u64().unwrap();
    // Nothing but the timer moves the kernel's clock past the holder's expiry here: the
    // long-poll is a read. A dead timer leaves the waiter waiting the whole poll.
    let (status, v) = on(
        &s,
        &waiter,
        "GET",
        &format!("tickets/{ticket}?wait_ms=5000"),
        json!({}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["event"], "GRANTED",
        "the holder's expiry never woke the waiter: {v}"
    );
}
