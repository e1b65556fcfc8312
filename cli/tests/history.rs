//! The tests of the replay endpoints (server/tests/history.rs) that need the `klock` process
//! itself: the history across a SIGKILL and a restart, and the flags `klock serve` refuses
//! (`--dashboard-pkg` without `--dashboard`, an origin that is not exact).

use klock_testkit::history::{export, live_hash, replay, work};
use std::collections::BTreeMap;

mod support;

use support::{klock, Server};

#[test]
fn after_a_sigkill_the_history_restarts_at_the_latest_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("k.redb");
    let data = data.to_str().unwrap();
    let args = [
        "--data",
        data,
        "--snapshot-every",
        "30",
        "--history",
        "100000",
    ];
    let s = Server::spawn(klock(), &args);
    let mut samples = BTreeMap::new();
    work(&s, &mut samples, 4);
    s.kill();
    let s = Server::spawn(klock(), &args);
    let mut later = BTreeMap::new();
    let (index, hash) = live_hash(&s);
    later.insert(index, hash);
    work(&s, &mut later, 2);
    let v = export(&s, "team");
    let start = v["start"]["index"].as_u64().unwrap();
    assert!(start > 0, "the log before the latest snapshot is gone");
    let replayed = replay(&v);
    for (index, hash) in samples.iter().chain(&later).filter(|(i, _)| **i >= start) {
        assert_eq!(replayed.get(index), Some(hash), "entry {index}");
    }
    // Before the kept history: 410 with what is kept.
    let (status, e) = s.get("/v1/state/hash?index=1");
    assert_eq!(status, 410, "{e}");
    assert_eq!(e["error"]["name"], "HISTORY_NOT_KEPT");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("keeps entries"),
        "{e}"
    );
}

/// `klock serve` refuses `--dashboard-pkg` without `--dashboard` (the page itself:
/// server/tests/history.rs).
#[test]
fn the_dashboard_package_goes_with_the_dashboard() {
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_klock"))
        .args(["serve", "--memory", "--dashboard-pkg", "x"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--dashboard-pkg goes with --dashboard")
    );
}

/// `klock serve` refuses an `--allow-origin` that is not an exact origin (CORS itself:
/// server/tests/history.rs).
#[test]
fn an_allowed_origin_must_be_exact() {
    for bad in ["*", "http://x/path", "example.test"] {
        let refused = std::process::Command::new(env!("CARGO_BIN_EXE_klock"))
            .args(["serve", "--memory", "--allow-origin", bad])
            .output()
            .unwrap();
        assert!(!refused.status.success(), "{bad}");
        assert!(
            String::from_utf8_lossy(&refused.stderr).contains("exact origin"),
            "{bad}"
        );
    }
}
