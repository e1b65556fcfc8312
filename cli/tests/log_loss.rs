//! A data file restored without its log, or beside a log that is not its own (issue 22 item
//! 13): refused by name; accepted with `--accept-log-loss`, and then no fence repeats and
//! server time does not go back. Real `klock serve` processes and real files.

mod support;

use serde_json::{json, Value};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;
use support::{klock, open, Agent, Server};

/// Acquires and releases `resource` once: the grant's fence and server time.
fn grant(s: &Server, a: &Agent, resource: &str) -> (u64, u64) {
    let path = format!("/v1/ns/{}/sessions/{}", a.ns, a.id);
    let answer = klock_testkit::http_client::request(
        s.port(),
        "POST",
        &format!("{path}/acquire"),
        &[("klock-session-token", &a.token)],
        json!({"intents": [format!("MUTATES FILE:/{resource}")]})
            .to_string()
            .as_bytes(),
    )
    .unwrap();
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    let v: &Value = &answer.body;
    let fence = v["leases"][0]["fence"].as_u64().unwrap();
    let lease = v["leases"][0]["lease_id"].as_u64().unwrap();
    let now: u64 = answer.header("klock-now").unwrap().parse().unwrap();
    let (status, v) = s.call(
        "POST",
        &format!("{path}/release"),
        &[("klock-session-token", &a.token)],
        &json!({ "lease_ids": [lease] }).to_string(),
    );
    assert_eq!(status, 200, "{v}");
    (fence, now)
}

/// `klock serve ARGS` expected to refuse to start: its stderr (killed after 20 s if it
/// serves instead, as the old code did).
fn refused(args: &[&str]) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_klock"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut exited = None;
    for _ in 0..400 {
        exited = child.try_wait().unwrap();
        if exited.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(exited.is_some_and(|e| !e.success()), "it started: {err}");
    err
}

fn copy(from: &Path, to: &Path) {
    std::fs::copy(from, to).unwrap();
}

#[test]
fn a_data_file_restored_without_its_log_is_refused_and_with_the_flag_never_repeats_a_fence() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("k.redb");
    let log = klock_server::store::log_path(&data);
    let backup = dir.path().join("backup.redb");
    let d = data.to_str().unwrap();
    let mut highest = (0, 0);
    {
        let s = Server::spawn(klock(), &["--data", d, "--snapshot-every", "2"]);
        let a = open(&s, "default", "a");
        for i in 0..3 {
            highest = highest.max(grant(&s, &a, &format!("r{i}")));
        }
        s.kill();
    }
    // The data file alone is copied aside (its snapshot is a few entries old by then)...
    copy(&data, &backup);
    {
        let s = Server::spawn(klock(), &["--data", d, "--snapshot-every", "1000"]);
        let a = open(&s, "default", "b");
        for i in 0..5 {
            let (fence, now) = grant(&s, &a, &format!("s{i}"));
            assert!(fence > highest.0);
            highest = (fence, highest.1.max(now));
        }
        s.kill();
    }
    // ... and restored without its log: refused by name, and nothing is created.
    copy(&backup, &data);
    std::fs::remove_file(&log).unwrap();
    let err = refused(&["--data", d]);
    assert!(err.contains("LOG_MISSING"), "{err}");
    assert!(!log.exists(), "a refused start writes no log");
    // With the flag: it starts, and the next fence and time are past all issued before.
    let s = Server::spawn(klock(), &["--data", d, "--accept-log-loss"]);
    let a = open(&s, "default", "c");
    let (fence, now) = grant(&s, &a, "after");
    assert!(
        fence > highest.0,
        "fence {fence} after the loss, {} issued before",
        highest.0
    );
    assert!(
        now >= highest.1,
        "time {now} after the loss, {} before",
        highest.1
    );
    s.kill();
    // The raised state was stored: a plain restart (the log is its own now) continues it.
    let s = Server::spawn(klock(), &["--data", d]);
    let a = open(&s, "default", "d");
    let (again, _) = grant(&s, &a, "again");
    assert!(again > fence);
}

#[test]
fn a_log_of_another_data_file_or_newer_than_the_data_file_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.redb"), dir.path().join("b.redb"));
    let (a_log, b_log) = (
        klock_server::store::log_path(&a),
        klock_server::store::log_path(&b),
    );
    for data in [&a, &b] {
        let s = Server::spawn(klock(), &["--data", data.to_str().unwrap()]);
        let agent = open(&s, "default", "x");
        grant(&s, &agent, "r");
        s.kill();
    }
    // b's log beside a: refused; accepted with the flag, b's log set aside (not deleted).
    let a_own = std::fs::read(&a_log).unwrap();
    copy(&b_log, &a_log);
    let err = refused(&["--data", a.to_str().unwrap()]);
    assert!(err.contains("LOG_MISMATCH"), "{err}");
    let s = Server::spawn(
        klock(),
        &["--data", a.to_str().unwrap(), "--accept-log-loss"],
    );
    drop(s);
    let aside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("a.redb.log.set-aside-"))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(
        std::fs::read(dir.path().join(&aside[0])).unwrap(),
        std::fs::read(&b_log).unwrap()
    );
    assert_ne!(a_own, std::fs::read(&b_log).unwrap());

    // A data file restored from an older copy beside its own newer log (compacted since).
    let c = dir.path().join("c.redb");
    let c_old = dir.path().join("c-old.redb");
    let cd = c.to_str().unwrap();
    {
        let s = Server::spawn(klock(), &["--data", cd, "--snapshot-every", "2"]);
        let agent = open(&s, "default", "x");
        grant(&s, &agent, "r");
        s.kill();
    }
    copy(&c, &c_old);
    {
        let s = Server::spawn(klock(), &["--data", cd, "--snapshot-every", "2"]);
        let agent = open(&s, "default", "y");
        for i in 0..3 {
            grant(&s, &agent, &format!("r{i}"));
        }
        s.kill();
    }
    copy(&c_old, &c);
    let err = refused(&["--data", cd]);
    assert!(err.contains("LOG_NEWER_THAN_DATA"), "{err}");
}

/// A data file and log written before logs had headers (no id in the data file, no header
/// record in the log) start as before: the log is adopted, behind a header naming the file.
#[test]
fn a_log_from_before_headers_is_adopted() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("k.redb");
    let log = klock_server::store::log_path(&data);
    let d = data.to_str().unwrap();
    let first = {
        let s = Server::spawn(klock(), &["--data", d, "--snapshot-every", "0"]);
        let a = open(&s, "default", "a");
        let (fence, _) = grant(&s, &a, "r");
        s.kill();
        fence
    };
    // Back to the old layout: the header record cut from the log, the id from the data file.
    let bytes = std::fs::read(&log).unwrap();
    assert_eq!(
        &bytes[8..16],
        &0u64.to_le_bytes(),
        "the log starts with its header"
    );
    let header_len = 16 + u32::from_le_bytes(bytes[0..4].try_into().unwrap()) as usize;
    std::fs::write(&log, &bytes[header_len..]).unwrap();
    {
        let db = redb::Database::open(&data).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let meta: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("meta");
            let mut table = txn.open_table(meta).unwrap();
            table.remove("id").unwrap();
        }
        txn.commit().unwrap();
    }
    let s = Server::spawn(klock(), &["--data", d]);
    let a = open(&s, "default", "b");
    let (fence, _) = grant(&s, &a, "r");
    assert!(
        fence > first,
        "the history was kept: fence {fence} after {first}"
    );
    s.kill();
    let bytes = std::fs::read(&log).unwrap();
    assert_eq!(
        &bytes[8..16],
        &0u64.to_le_bytes(),
        "adopted behind a header"
    );
}
