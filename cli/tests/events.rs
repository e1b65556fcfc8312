//! The tests of the event streams (server/tests/events.rs) that need the `klock` process
//! itself: retained event bytes stay within `--event-bytes`, measured as the server
//! process's RSS in a bounded loop that stops early.

mod support;

use klock_testkit::http_client::request;
use serde_json::{json, Value};
use support::{klock, metric, Server};

/// A `klock serve` process of our own, for its process id.
struct Own(Server);

impl Own {
    fn start(args: &[&str]) -> Own {
        Own(Server::spawn(klock(), args))
    }

    fn port(&self) -> u16 {
        self.0.port()
    }

    /// The server's resident memory, in KiB.
    fn rss_kib(&self) -> u64 {
        let pid = self.0.pid().expect("a process");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    fn call(&self, method: &str, path: &str, token: &str, body: &Value) -> (u16, Value) {
        let headers = [("klock-session-token", token)];
        let body = body.to_string();
        let a = request(self.port(), method, path, &headers, body.as_bytes()).unwrap();
        (a.status, a.body)
    }
}

#[test]
fn retained_event_bytes_stay_within_the_budget_while_large_grants_stream() {
    // Each GRANTED carries 64 leases on 4 KB resource names (about 300 KB); the old rings kept
    // 4096 of them per session and per namespace. With an 8 MiB budget the server's memory
    // must level off: the loop stops as soon as it grows past the bound.
    const CYCLES: usize = 150;
    const BOUND_KIB: u64 = 48 * 1024;
    let s = Own::start(&["--memory", "--event-bytes", "8388608"]);
    let open = |agent: &str| {
        let (status, v) = s.call(
            "POST",
            "/v1/ns/big/sessions",
            "",
            &json!({"agent_id": agent}),
        );
        assert_eq!(status, 200, "{v}");
        let id = v["session_id"].as_u64().unwrap();
        (id, v["session_token"].as_str().unwrap().to_owned())
    };
    let (b, a) = (open("bob"), open("ann"));
    let pad = "x".repeat(4000);
    let intents: Vec<String> = (0..64)
        .map(|i| format!("MUTATES FILE:/big/{i}/{pad}"))
        .collect();
    let acquire = json!({"intents": intents, "ttl_ms": 600_000});
    let path = |who: u64, what: &str| format!("/v1/ns/big/sessions/{who}/{what}");
    let all = json!({"all": true});
    let mut base = 0;
    let mut peak = 0;
    let mut cycles = 0;
    // Bob starts each unit of work first (a small lease of its own), so it is the older one
    // and waits for ann's grant (wait-die) instead of dying.
    let own = json!({"intents": ["MUTATES FILE:/own"], "ttl_ms": 600_000});
    while cycles < CYCLES {
        let (status, v) = s.call("POST", &path(b.0, "acquire"), &b.1, &own);
        assert_eq!((status, v["verdict"].as_str()), (200, Some("GRANTED")));
        let (status, v) = s.call("POST", &path(a.0, "acquire"), &a.1, &acquire);
        assert_eq!((status, v["verdict"].as_str()), (200, Some("GRANTED")));
        let (status, v) = s.call("POST", &path(b.0, "acquire"), &b.1, &acquire);
        assert_eq!((status, v["verdict"].as_str()), (200, Some("WAIT")));
        s.call("POST", &path(a.0, "release"), &a.1, &all);
        s.call("POST", &path(b.0, "release"), &b.1, &all);
        cycles += 1;
        let rss = s.rss_kib();
        if cycles == 10 {
            base = rss; // the allocator's working set for this load, before rings fill
        }
        peak = peak.max(rss);
        if base > 0 && rss > base + BOUND_KIB {
            break;
        }
    }
    println!("RSS after 10 cycles {base} KiB, peak {peak} KiB over {cycles} cycles");
    assert!(
        peak <= base + BOUND_KIB,
        "the server grew by {} KiB in {cycles} cycles",
        peak - base
    );
    let bytes = metric(s.port(), "klock_event_bytes").unwrap();
    assert!(bytes <= 8388608.0, "{bytes} bytes retained");
    assert!(metric(s.port(), "klock_events_evicted_total").unwrap() > 0.0);
    // A reader from the start of bob's stream learns that it missed the oldest grants.
    let (_, v) = s.call("GET", &path(b.0, "events?wait_ms=0"), &b.1, &json!({}));
    assert_eq!(v["gap"], true, "{}", &v["next"]);
}
