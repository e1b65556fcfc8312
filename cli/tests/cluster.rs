//! A three-process loopback cluster (`klock serve --node-id`): the leader is SIGKILLed with a
//! lease held; a new leader is elected, the lease and its fence survive, a fence never
//! repeats, a write through a survivor is acknowledged, and the killed node, restarted,
//! catches up; a leader paused past the election timeout grants nothing when it wakes; the
//! new leader's time continues from the applied time; a node joins by snapshot, votes and is
//! removed; with no quorum a write is 503 `NO_LEADER`; the `/raft/*` routes refuse a missing
//! or wrong cluster secret, and a body that does not decode (400, no panic); the cluster flags' refusals; a whole cluster restarted keeps its
//! leases and fences; the cluster names one log for its event ids, kept through a new leader
//! and a restart; a write through a follower is seen at once by every read through it, and
//! concurrent writes through a follower each get their own answers; the test kit's cluster
//! ports come from below the ephemeral range, and a node that cannot start is reported with
//! its log.
//!
//! Real `klock` processes on fixed free loopback ports (the peers must know each other's
//! addresses before they start). Seeded (the order of resources), bounded: every wait has a
//! deadline, the whole test well under 60 s.

mod support;

use klock_testkit::http_client::request;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use support::cluster::{claim_port, klock_cluster, on_leader, peers, Cluster, SECRET, WAIT};

fn open(cluster: &Cluster, node: usize, name: &str) -> (u64, String) {
    let a = cluster.ask(
        node,
        "/v1/ns/default/sessions",
        "",
        &format!("open-{name}"),
        json!({"agent_id": name}),
    );
    assert_eq!(a.status, 200, "{a:?}");
    (
        a.body["session_id"].as_u64().unwrap(),
        a.body["session_token"].as_str().unwrap().to_owned(),
    )
}

/// The log node `i`'s event streams count entries of (a watch answer's `log`).
fn log_of(cluster: &Cluster, i: usize) -> String {
    let a = request(
        cluster.ports[i],
        "GET",
        "/v1/ns/default/watch?wait_ms=0",
        &[],
        b"",
    )
    .unwrap();
    assert_eq!(a.status, 200, "{a:?}");
    let log = a.body["log"]
        .as_str()
        .unwrap_or_else(|| panic!("no log: {a:?}"));
    log.to_owned()
}

/// Acquires `resource` for the session; the granted lease (id, fence).
fn acquire(cluster: &Cluster, node: usize, session: &(u64, String), resource: &str) -> Value {
    let a = cluster.ask(
        node,
        &format!("/v1/ns/default/sessions/{}/acquire", session.0),
        &session.1,
        &format!("acq-{}-{resource}", session.0),
        json!({"intents": [format!("MUTATES {resource}")], "ttl_ms": 60_000}),
    );
    assert_eq!(a.status, 200, "{a:?}");
    a.body
}

/// Leader time: the new leader's clock continues from the applied time (never back, and
/// not ahead of the wall time that passed), and its `LeaderChanged` entry put every session
/// open before it (`alice`) in its suspension grace, not one opened after (`bob`).
fn leader_time(before: &Value, after: &Value, elapsed: Duration, alice: u64, bob: u64) {
    let (then, now) = (
        before["now"].as_u64().unwrap(),
        after["now"].as_u64().unwrap(),
    );
    assert!(now >= then, "time went back: {then} -> {now}");
    let most = then + elapsed.as_millis() as u64 + 100;
    assert!(
        now <= most,
        "time ran ahead: {then} -> {now} in {elapsed:?}"
    );
    let suspended = |sid: u64| {
        after["snapshot"]["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["session_id"] == sid)
            .map(|s| s["suspended"].clone())
    };
    assert_eq!(suspended(alice), Some(json!(true)), "{after}");
    assert_eq!(suspended(bob), Some(json!(false)), "{after}");
}

#[test]
fn a_leader_killed_with_a_lease_held_loses_neither_the_lease_nor_a_fence() {
    let started = Instant::now();
    let mut cluster = Cluster::new(support::klock(), 3);
    // klock cluster init, through node 1.
    let init = std::process::Command::new(env!("CARGO_BIN_EXE_klock"))
        .args([
            "cluster",
            "init",
            "--node",
            &format!("http://127.0.0.1:{}", cluster.ports[0]),
            "--cluster-secret-file",
            &cluster.secret_file(),
        ])
        .output()
        .unwrap();
    assert!(init.status.success(), "{init:?}");
    let leader = cluster.leader();
    // Through a follower: it hands the write to the leader and answers once applied itself.
    let follower = (leader + 1) % 3;
    let alice = open(&cluster, follower, "alice");
    // ... so a read through it right after sees the write.
    let seen = cluster.overview(follower);
    assert_eq!(
        seen["snapshot"]["sessions"][0]["session_id"], alice.0,
        "{seen}"
    );
    // One log for the cluster, named by its first LeaderChanged entry: every node says it.
    let log = log_of(&cluster, leader);
    assert_eq!(log.len(), 32, "{log}");
    assert_eq!(log_of(&cluster, follower), log);
    let first = acquire(&cluster, leader, &alice, "FILE:/a");
    assert_eq!(first["verdict"], "GRANTED", "{first}");
    let lease = &first["leases"][0];
    let (lease_id, fence) = (
        lease["lease_id"].as_u64().unwrap(),
        lease["fence"].as_u64().unwrap(),
    );

    let before = cluster.overview(leader);
    let killed_at = Instant::now();
    cluster.kill(leader);
    let new_leader = cluster.leader();
    assert_ne!(new_leader, leader);
    let survivor = (0..3).find(|i| *i != leader && *i != new_leader).unwrap();

    // The lease survived: another session waits for it (or is told to die), never granted.
    let bob = open(&cluster, survivor, "bob");
    leader_time(
        &before,
        &cluster.overview(new_leader),
        killed_at.elapsed(),
        alice.0,
        bob.0,
    );
    // A new leader's LeaderChanged entry does not rename the log: event ids go on.
    assert_eq!(
        (log_of(&cluster, new_leader), log_of(&cluster, survivor)),
        (log.clone(), log.clone())
    );
    let contended = acquire(&cluster, survivor, &bob, "FILE:/a");
    assert_ne!(contended["verdict"], "GRANTED", "{contended}");
    // A write through a survivor is acknowledged, with a fence never given before.
    let other = acquire(&cluster, survivor, &bob, "FILE:/b");
    assert_eq!(other["verdict"], "GRANTED", "{other}");
    let new_fence = other["leases"][0]["fence"].as_u64().unwrap();
    assert!(new_fence > fence, "fence {new_fence} after {fence}");
    // Alice still holds her lease and releases it (her session is in its grace, resumable,
    // but a release by token is still hers).
    let released = cluster.ask(
        survivor,
        &format!("/v1/ns/default/sessions/{}/release", alice.0),
        &alice.1,
        "rel-alice",
        json!({"lease_ids": [lease_id]}),
    );
    assert_eq!(released.status, 200, "{released:?}");

    // The killed node comes back and catches up to the others' applied index.
    cluster.start(leader);
    let target = cluster.status(new_leader).unwrap()["applied_index"]
        .as_u64()
        .unwrap();
    let caught_up = Instant::now();
    loop {
        let applied = cluster
            .status(leader)
            .and_then(|s| s["applied_index"].as_u64());
        if applied.is_some_and(|a| a >= target) {
            break;
        }
        assert!(
            caught_up.elapsed() < WAIT,
            "node {leader} stays at {applied:?} < {target}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(log_of(&cluster, leader), log, "the restarted node's log");
    assert!(started.elapsed() < Duration::from_secs(60));
}

/// A node started after the others joins as a learner, catches up by snapshot (the others
/// snapshot every 3 entries and purged their logs), becomes a voter (a write through it is
/// acknowledged), and is removed again; `klock cluster status` shows each step.
#[test]
fn a_node_joins_as_a_learner_then_votes_and_is_removed() {
    let mut cluster = Cluster::unstarted(support::klock(), 4);
    cluster.extra = vec![String::from("--snapshot-every"), String::from("3")];
    let all = cluster.peers.clone();
    // Nodes 1-3 form the cluster; node 4 knows them, they learn of it through the membership.
    cluster.peers = peers(&cluster.ports[..3]);
    for i in 0..3 {
        cluster.start(i);
    }
    klock_cluster(&cluster, 0, &["init"]).unwrap();
    let leader = cluster.leader();
    let alice = open(&cluster, leader, "alice");
    for name in ["b", "c", "d"] {
        open(&cluster, leader, name);
    }
    // Entry 0 (the first membership) is gone from its log: a new node cannot start from it.
    // (The purge follows the snapshot a moment later.)
    let started = Instant::now();
    loop {
        let status = cluster.status(leader).unwrap();
        if status["purged_index"].as_u64().is_some() {
            break;
        }
        assert!(
            started.elapsed() < WAIT,
            "the log was never purged: {status}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    cluster.peers = all;
    cluster.start(3);
    let url = format!("http://127.0.0.1:{}", cluster.ports[3]);
    on_leader(&cluster, &["add", "--id", "4", "--url", &url]);
    let status: Value = serde_json::from_str(&on_leader(&cluster, &["status"])).unwrap();
    assert_eq!(
        (&status["voters"], &status["learners"]),
        (&json!([1, 2, 3]), &json!([4])),
        "{status}"
    );
    // The learner catches up: alice's open is applied there, from a snapshot (which Raft's
    // metrics show a moment after the machine has it).
    let started = Instant::now();
    loop {
        let seen = cluster.overview(3);
        let joined = cluster.status(3).unwrap();
        if seen["snapshot"]["sessions"][0]["session_id"] == alice.0
            && joined["snapshot_index"].as_u64().is_some()
        {
            break;
        }
        assert!(
            started.elapsed() < WAIT,
            "the learner never caught up: {seen} {joined}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    on_leader(&cluster, &["voters", "--ids", "1,2,3,4"]);
    let status: Value = serde_json::from_str(&on_leader(&cluster, &["status"])).unwrap();
    assert_eq!(
        (&status["voters"], &status["learners"]),
        (&json!([1, 2, 3, 4]), &json!([])),
        "{status}"
    );
    // A write through the new node (a follower: it forwards to the leader).
    let granted = acquire(&cluster, 3, &alice, "FILE:/joined");
    assert_eq!(granted["verdict"], "GRANTED", "{granted}");
    on_leader(&cluster, &["remove", "--id", "4"]);
    let status: Value = serde_json::from_str(&on_leader(&cluster, &["status"])).unwrap();
    assert_eq!(status["voters"], json!([1, 2, 3]), "{status}");
}

#[test]
fn the_raft_routes_refuse_a_missing_or_wrong_secret() {
    let cluster = Cluster::new(support::klock(), 1);
    for headers in [vec![], vec![("klock-cluster-secret", "not-the-secret")]] {
        for (method, path) in [
            ("POST", "/raft/init"),
            ("GET", "/raft/status"),
            ("POST", "/raft/vote"),
        ] {
            let a = request(cluster.ports[0], method, path, &headers, b"{}").unwrap();
            assert_eq!(a.status, 401, "{method} {path} {headers:?}: {a:?}");
            assert_eq!(a.body["error"]["name"], "CLUSTER_SECRET_REFUSED");
        }
    }
    // Refused means unchanged: the node was never initialized.
    let status = cluster.status(0).unwrap();
    assert_eq!(status["voters"], json!([]), "{status}");
    // A client token is no cluster secret either (and the client API stays the client's).
    let a = request(
        cluster.ports[0],
        "GET",
        "/raft/status",
        &[("authorization", &format!("Bearer {SECRET}"))],
        b"",
    )
    .unwrap();
    assert_eq!(a.status, 401);
}

/// A Raft RPC whose body does not decode (cut short, garbled, an entry that is no log record)
/// is refused with 400 `BAD_REQUEST` naming the problem, before Raft sees it; the node goes on
/// answering (no panic), and a well-formed AppendEntries to it is answered.
#[test]
fn a_raft_rpc_that_does_not_decode_is_refused() {
    use klock_raft::types::{Proposal, RaftEntry};
    use klock_server::machine::Entry;
    use openraft::impls::leader_id_adv::LeaderId;
    use openraft::{EntryPayload, LogId};
    let cluster = Cluster::new(support::klock(), 1);
    let secret = [("klock-cluster-secret", SECRET)];
    let entry = RaftEntry {
        log_id: LogId::new(
            LeaderId {
                term: 1,
                node_id: 2,
            },
            0,
        ),
        payload: EntryPayload::Normal(Proposal::new(Entry::Recovered { now: 1 }).unwrap()),
    };
    let vote = json!({"leader_id": {"term": 1, "node_id": 2}, "committed": true});
    let heartbeat =
        json!({"vote": vote, "prev_log_id": null, "entries": [], "leader_commit": null});
    let append =
        json!({"vote": vote, "prev_log_id": null, "entries": [entry], "leader_commit": null})
            .to_string();
    // The control: a heartbeat decodes and gets Raft's answer.
    let a = request(
        cluster.ports[0],
        "POST",
        "/raft/append",
        &secret,
        heartbeat.to_string().as_bytes(),
    )
    .unwrap();
    assert_eq!(a.status, 200, "{a:?}");
    let mut bad: Vec<(String, String)> = [8, 40, append.len() / 2, append.len() - 1]
        .iter()
        .map(|n| (format!("cut at {n}"), append[..*n].to_owned()))
        .collect();
    bad.push(("empty".into(), String::new()));
    bad.push(("not JSON".into(), "\u{0}\u{ff}garbage".into()));
    bad.push((
        "an unknown command".into(),
        append.replace("\"entry\":\"recovered\"", "\"entry\":\"reboot\""),
    ));
    bad.push((
        "a field too many".into(),
        append.replace("\"now\":1", "\"now\":1,\"then\":2"),
    ));
    bad.push((
        "an entry that is no object".into(),
        append.replace("{\"entry\":\"recovered\",\"now\":1}", "7"),
    ));
    for (what, body) in &bad {
        assert_ne!(body, &append, "{what}: the body is unchanged");
        let a = request(
            cluster.ports[0],
            "POST",
            "/raft/append",
            &secret,
            body.as_bytes(),
        )
        .unwrap();
        assert_eq!(a.status, 400, "{what}: {a:?}");
        assert_eq!(a.body["error"]["name"], "BAD_REQUEST", "{what}: {a:?}");
        let message = a.body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("the body does not decode"),
            "{what}: {message}"
        );
    }
    for path in ["/raft/vote", "/raft/pre-vote", "/raft/propose"] {
        let a = request(cluster.ports[0], "POST", path, &secret, b"{\"vote\":").unwrap();
        assert_eq!(a.status, 400, "{path}: {a:?}");
    }
    // Nothing was appended, and the node answers.
    let status = cluster.status(0).unwrap();
    assert_eq!(status["last_log_index"], Value::Null, "{status}");
}

/// A leader anchors its clock on the applied time: a node whose log ends at `now` = 10^9 (a
/// cluster that has run for days) stamps its next entries from there on, and its time moves
/// with the wall clock; a clock of its own process's age would freeze the kernel's time at
/// 10^9 (entries apply at `max(last_now, now)`) until it caught up.
#[test]
fn a_new_leader_continues_the_applied_time() {
    use klock_core::Command;
    use klock_raft::types::{Proposal, RaftEntry};
    use klock_server::machine::Entry;
    use openraft::impls::leader_id_adv::LeaderId;
    use openraft::{EntryPayload, LogId, Membership};
    const LATE: u64 = 1_000_000_000;
    let mut cluster = Cluster::unstarted(support::klock(), 1);
    {
        let (log, _) = klock_raft::log_store::open_file(&cluster.data(0)).unwrap();
        let id = |index| {
            LogId::new(
                LeaderId {
                    term: 1,
                    node_id: 1,
                },
                index,
            )
        };
        let voters = std::collections::BTreeSet::from([1]);
        let entries: Vec<(u64, RaftEntry)> = vec![
            (
                1,
                RaftEntry {
                    log_id: id(0),
                    payload: EntryPayload::Membership(Membership::new_with_defaults(
                        vec![voters],
                        [],
                    )),
                },
            ),
            (
                2,
                RaftEntry {
                    log_id: id(1),
                    payload: EntryPayload::Normal(
                        Proposal::new(Entry::Command {
                            now: LATE,
                            command: Command::Advance,
                            key: None,
                            token: None,
                            caller: None,
                            resume: None,
                            fingerprint: None,
                        })
                        .unwrap(),
                    ),
                },
            ),
        ];
        log.append(&entries).unwrap();
    }
    cluster.start(0);
    let opened_at = |name: &str| {
        let a = cluster.ask(
            0,
            "/v1/ns/default/sessions",
            "",
            name,
            json!({"agent_id": name}),
        );
        assert_eq!(a.status, 200, "{a:?}");
        a.header("klock-now").unwrap().parse::<u64>().unwrap()
    };
    let first = opened_at("first");
    std::thread::sleep(Duration::from_millis(300));
    let second = opened_at("second");
    assert!(first >= LATE, "time went back to {first}");
    assert!(
        second >= first + 250,
        "time stood still: {first} then {second}"
    );
}

/// With no quorum (a two-node cluster whose other node never started) there is no leader: a
/// write is answered 503 `NO_LEADER` with `Retry-After: 1`, at once, and nothing is applied.
#[test]
fn with_no_leader_a_write_is_503_with_retry_after() {
    let mut cluster = Cluster::unstarted(support::klock(), 2);
    cluster.start(0);
    klock_cluster(&cluster, 0, &["init"]).unwrap();
    let body = json!({"agent_id": "nobody"}).to_string();
    let a = request(
        cluster.ports[0],
        "POST",
        "/v1/ns/default/sessions",
        &[],
        body.as_bytes(),
    )
    .unwrap();
    assert_eq!(a.status, 503, "{a:?}");
    assert_eq!(a.header("retry-after"), Some("1"), "{a:?}");
    assert_eq!(a.body["error"]["name"], "NO_LEADER", "{a:?}");
    assert_eq!(cluster.overview(0)["snapshot"]["sessions"], json!([]));
}

/// The cluster flags go together and with a data file (under a manual clock too) and TCP; a
/// refusal names what is wrong.
#[test]
fn cluster_flags_that_do_not_go_together_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, SECRET).unwrap();
    let short = dir.path().join("short");
    std::fs::write(&short, "too-short").unwrap();
    let data = dir.path().join("n.redb");
    let (secret, short, data) = (
        secret.to_str().unwrap(),
        short.to_str().unwrap(),
        data.to_str().unwrap(),
    );
    let peers = "1=http://127.0.0.1:7301,2=http://127.0.0.1:7302";
    let refused = |flags: &[&str], expected: &str| {
        let args: Vec<String> = flags.iter().map(|s| (*s).to_owned()).collect();
        let err = klock_cli::serve_args::parse(&args)
            .err()
            .unwrap_or_else(|| panic!("{flags:?} accepted"));
        assert!(err.contains(expected), "{flags:?}: {err}");
    };
    let node = [
        "--node-id",
        "1",
        "--cluster-peers",
        peers,
        "--cluster-secret-file",
        secret,
    ];
    let with = |more: &[&'static str]| -> Vec<&str> {
        node.iter().copied().chain(more.iter().copied()).collect()
    };
    refused(&["--node-id", "1", "--data", data], "go together");
    refused(&with(&["--memory"]), "needs --data");
    refused(
        &[&with(&["--clock", "manual"])[..], &["--memory"]].concat(),
        "needs --data",
    );
    // A manual-clock node (conformance runs through a cluster) keeps its Raft log in --data
    // as every node does.
    let mut manual = with(&["--clock", "manual"]);
    manual.extend(["--data", data]);
    let args: Vec<String> = manual.iter().map(|s| (*s).to_owned()).collect();
    let config = klock_cli::serve_args::parse(&args).expect("a manual-clock node");
    assert!(config.manual_clock && config.cluster.is_some());
    refused(
        &[
            "--node-id",
            "3",
            "--cluster-peers",
            peers,
            "--cluster-secret-file",
            secret,
            "--data",
            data,
        ],
        "not one of --cluster-peers",
    );
    refused(
        &[
            "--node-id",
            "1",
            "--cluster-peers",
            "1=https://127.0.0.1:7301",
            "--cluster-secret-file",
            secret,
            "--data",
            data,
        ],
        "give --tls-cert",
    );
    refused(
        &[
            "--node-id",
            "1",
            "--cluster-peers",
            peers,
            "--cluster-secret-file",
            short,
            "--data",
            data,
        ],
        "shorter than 16",
    );
    refused(
        &[
            "--node-id",
            "1",
            "--cluster-peers",
            "1=http://a:1,1=http://b:2",
            "--cluster-secret-file",
            secret,
            "--data",
            data,
        ],
        "twice",
    );
    refused(
        &[
            "--node-id",
            "1",
            "--cluster-peers",
            "x",
            "--cluster-secret-file",
            secret,
            "--data",
            data,
        ],
        "ID=URL",
    );
    let mut ok: Vec<&str> = node.to_vec();
    ok.extend(["--data", data]);
    let args: Vec<String> = ok.iter().map(|s| (*s).to_owned()).collect();
    let config = klock_cli::serve_args::parse(&args).unwrap();
    let shown = format!("{:?}", config.cluster);
    assert!(
        shown.contains("ClusterConfig") && !shown.contains(SECRET),
        "{shown}"
    );
}

/// A leader paused (SIGSTOP) past the election timeout is deposed; when it wakes it grants
/// nothing from its old term: a resource granted meanwhile by the new leader is not granted
/// again through the woken node, and fences keep growing.
#[test]
fn a_paused_leader_grants_nothing_when_it_wakes() {
    let cluster = Cluster::new(support::klock(), 3);
    klock_cluster(&cluster, 0, &["init"]).unwrap();
    let old = cluster.leader();
    let alice = open(&cluster, old, "alice");
    let bob = open(&cluster, old, "bob");
    let first = acquire(&cluster, old, &alice, "FILE:/first");
    let first_fence = first["leases"][0]["fence"].as_u64().unwrap();
    let pid = cluster.nodes[old].as_ref().unwrap().pid() as i32;
    // SAFETY: signals a child process this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    // The others elect a new leader (the paused node still believes it leads).
    let started = Instant::now();
    let new = loop {
        let seen: Vec<Option<u64>> = (0..3)
            .filter(|i| *i != old)
            .map(|i| cluster.status(i).and_then(|s| s["leader"].as_u64()))
            .collect();
        if let [Some(a), Some(b)] = seen[..] {
            if a == b && (a - 1) as usize != old {
                break (a - 1) as usize;
            }
        }
        assert!(started.elapsed() < WAIT, "no new leader: {seen:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let held = acquire(&cluster, new, &alice, "FILE:/x");
    assert_eq!(held["verdict"], "GRANTED", "{held}");
    let held_fence = held["leases"][0]["fence"].as_u64().unwrap();
    assert!(held_fence > first_fence);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    // Through the woken node: it must not grant FILE:/x to bob from its stale term.
    let contended = acquire(&cluster, old, &bob, "FILE:/x");
    assert_ne!(contended["verdict"], "GRANTED", "{contended}");
    let other = acquire(&cluster, old, &bob, "FILE:/y");
    assert_eq!(other["verdict"], "GRANTED", "{other}");
    assert!(
        other["leases"][0]["fence"].as_u64().unwrap() > held_fence,
        "{other}"
    );
}

/// Every node killed and restarted: the cluster elects a leader again from its logs and
/// snapshots, the lease is still held (another session is not granted it), its fence is not
/// given again, and time has not gone back.
#[test]
fn a_whole_cluster_restarted_keeps_its_leases_and_fences() {
    let mut cluster = Cluster::unstarted(support::klock(), 3);
    // Snapshots (and purged logs) to restart from, as well as log entries after them.
    cluster.extra = vec![String::from("--snapshot-every"), String::from("4")];
    for i in 0..3 {
        cluster.start(i);
    }
    klock_cluster(&cluster, 0, &["init"]).unwrap();
    let leader = cluster.leader();
    let alice = open(&cluster, leader, "alice");
    let held = acquire(&cluster, leader, &alice, "FILE:/kept");
    let fence = held["leases"][0]["fence"].as_u64().unwrap();
    for name in ["b", "c", "d", "e"] {
        open(&cluster, leader, name);
    }
    let before = cluster.overview(leader)["now"].as_u64().unwrap();
    let status = cluster.status(leader).unwrap();
    assert!(status["snapshot_index"].as_u64().is_some(), "{status}");
    for i in 0..3 {
        cluster.kill(i);
    }
    for i in 0..3 {
        cluster.start(i);
    }
    let leader = cluster.leader();
    let bob = open(&cluster, leader, "bob");
    let contended = acquire(&cluster, leader, &bob, "FILE:/kept");
    assert_ne!(contended["verdict"], "GRANTED", "{contended}");
    let other = acquire(&cluster, leader, &bob, "FILE:/other");
    assert!(
        other["leases"][0]["fence"].as_u64().unwrap() > fence,
        "{other}"
    );
    let after = cluster.overview(leader);
    assert!(after["now"].as_u64().unwrap() >= before, "{after}");
}

/// A session opened through the leader is known at once through a follower, and so is a
/// ticket: a read naming a session or a ticket the node has not applied yet waits for a read
/// index instead of answering 404 (each of 20 opens, and of 10 waiting acquires, is read
/// through a follower right after its answer).
#[test]
fn a_session_opened_through_the_leader_is_known_at_once_through_a_follower() {
    let cluster = Cluster::initialised(support::klock(), 3);
    let leader = cluster.leader();
    let follower = (leader + 1) % 3;
    for n in 0..20 {
        let (id, token) = open(&cluster, leader, &format!("reader-{n}"));
        let path = format!("/v1/ns/default/sessions/{id}/events?wait_ms=0");
        let headers = [("klock-session-token", token.as_str())];
        let a = request(cluster.ports[follower], "GET", &path, &headers, b"").unwrap();
        assert_eq!(a.status, 200, "open {n}: {a:?}");
    }
    // So is a ticket given through the leader (its sessions known to the follower already).
    let pairs: Vec<_> = (0..10)
        .map(|n| {
            let older = open(&cluster, leader, &format!("older-{n}"));
            let younger = open(&cluster, leader, &format!("younger-{n}"));
            acquire(&cluster, leader, &younger, &format!("FILE:/t{n}"));
            (older, n)
        })
        .collect();
    cluster.caught_up_with(leader);
    for (older, n) in pairs {
        let waiting = acquire(&cluster, leader, &older, &format!("FILE:/t{n}"));
        assert_eq!(waiting["verdict"], "WAIT", "{waiting}");
        let path = format!(
            "/v1/ns/default/sessions/{}/tickets/{}?wait_ms=0",
            older.0, waiting["ticket"]
        );
        let headers = [("klock-session-token", older.1.as_str())];
        let a = request(cluster.ports[follower], "GET", &path, &headers, b"").unwrap();
        let verdict = (a.status, &a.body["verdict"]);
        assert_eq!(verdict, (200, &json!("WAIT")), "ticket {n}: {a:?}");
    }
}

/// Whether the JSON events answer `a` holds the GRANTED event of `ticket`.
fn has_grant(a: &klock_testkit::http_client::Answer, ticket: &Value) -> bool {
    a.body["events"].as_array().is_some_and(|e| {
        e.iter()
            .any(|e| e["event"] == "GRANTED" && e["ticket"] == *ticket)
    })
}

/// A follower answers a proxied write once its leader has (committed), before it applied the
/// entry itself; a read through that follower right after still sees the write: every kind
/// of read that the node answers from its own machine or streams (a ticket poll, a session's
/// events, the namespace's watch, the overview, the stats, the state hash, the history, a
/// closed session's refusal) and those that go through the log (resource state, reconcile,
/// digest). Repeated, so a follower that answered before applying is caught in the act.
#[test]
fn a_write_through_a_follower_is_seen_at_once_by_every_read_through_it() {
    let mut cluster = Cluster::unstarted(support::klock(), 3);
    cluster.extra = vec![String::from("--history"), String::from("10000")];
    cluster.start_all();
    cluster.init();
    let leader = cluster.leader();
    let f = (leader + 1) % 3;
    let port = cluster.ports[f];
    // A 503 (no leader for a moment: an election on a loaded machine) answered nothing: asked
    // again, as a client does. What is checked is what an answered read says.
    let get = |path: &str, token: &str| {
        let headers = [("klock-session-token", token)];
        let started = Instant::now();
        loop {
            let answer = request(port, "GET", path, &headers, b"").unwrap();
            if answer.status != 503 || started.elapsed() > WAIT {
                return answer;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    for n in 0..20 {
        let older = open(&cluster, f, &format!("older-{n}"));
        let younger = open(&cluster, f, &format!("younger-{n}"));
        let resource = format!("FILE:/seen/{n}");
        let held = cluster.ask(
            f,
            &format!("/v1/ns/default/sessions/{}/acquire", younger.0),
            &younger.1,
            &format!("acq-{n}"),
            json!({"intents": [format!("MUTATES {resource}")], "ttl_ms": 60_000}),
        );
        let index: u64 = held.header("klock-index").unwrap().parse().unwrap();
        let held = held.body;
        let lease = held["leases"][0]["lease_id"].clone();
        assert_eq!(held["verdict"], "GRANTED", "{held}");
        // Each read first in turn (a read waits for what the node answered, then the
        // next one finds it applied): the overview holds the lease; the state hash is past it.
        let overview = || {
            let overview = get("/v1/ns/default/overview", "");
            assert_eq!(overview.status, 200, "{overview:?}");
            let leases = overview.body["snapshot"]["leases"].as_array().unwrap();
            assert!(
                leases.iter().any(|l| l["lease_id"] == lease),
                "{n}: the overview misses lease {lease}: {overview:?}"
            );
        };
        let hash = || {
            let hash = get("/v1/state/hash", "");
            let at = hash.body["index"].as_u64().unwrap();
            assert!(
                at >= index,
                "{n}: the state hash is of {at}, before {index}"
            );
        };
        let reads: [&dyn Fn(); 2] = [&overview, &hash];
        for k in 0..reads.len() {
            reads[(n + k) % reads.len()]();
        }
        let stats = get("/v1/ns/default/stats", "");
        assert_eq!(stats.status, 200, "{stats:?}");
        // Resource state and reconcile go through the log: the holder and its lease.
        let state = get(
            &format!("/v1/ns/default/resources/state?resource={resource}"),
            "",
        );
        assert!(
            state.body.to_string().contains(&lease.to_string()),
            "{state:?}"
        );
        let reconciled = cluster.ask(
            f,
            &format!("/v1/ns/default/sessions/{}/reconcile", younger.0),
            &younger.1,
            &format!("rec-{n}"),
            json!({"lease_ids": [lease]}),
        );
        assert_eq!(reconciled.status, 200, "{reconciled:?}");
        assert!(
            reconciled.body.to_string().contains(&lease.to_string()),
            "{reconciled:?}"
        );
        // The older session waits; the younger one releases through the follower: the ticket
        // poll, the older session's events and the namespace's watch show the grant at once.
        let waiting = acquire(&cluster, f, &older, &resource);
        assert_eq!(waiting["verdict"], "WAIT", "{waiting}");
        let ticket = waiting["ticket"].clone();
        let released = cluster.ask(
            f,
            &format!("/v1/ns/default/sessions/{}/release", younger.0),
            &younger.1,
            &format!("rel-{n}"),
            json!({"lease_ids": [lease]}),
        );
        assert_eq!(released.status, 200, "{released:?}");
        let poll = || {
            let path = format!(
                "/v1/ns/default/sessions/{}/tickets/{ticket}?wait_ms=0",
                older.0
            );
            let polled = get(&path, &older.1);
            assert_eq!(polled.body["event"], "GRANTED", "{n}: {polled:?}");
        };
        let events = || {
            let path = format!("/v1/ns/default/sessions/{}/events?wait_ms=0", older.0);
            let events = get(&path, &older.1);
            assert!(has_grant(&events, &ticket), "{n}: {events:?}");
        };
        let watch = || {
            let watched = get("/v1/ns/default/watch?wait_ms=0", "");
            assert!(has_grant(&watched, &ticket), "{n}: {watched:?}");
        };
        let reads: [&dyn Fn(); 3] = [&poll, &events, &watch];
        for k in 0..reads.len() {
            reads[(n + k) % reads.len()]();
        }
        let history = get("/v1/ns/default/history", "");
        assert_eq!(history.status, 200, "{history:?}");
        // The digest goes through the log.
        let digest = get(
            &format!("/v1/ns/default/sessions/{}/digest", older.0),
            &older.1,
        );
        let phase = &digest.body["recovery"]["last_phase"];
        assert_eq!(
            phase, "HOLDING",
            "{n}: the digest misses the grant: {digest:?}"
        );
        // A session closed through the follower is refused by it at once.
        let headers = [("klock-session-token", younger.1.as_str())];
        let path = format!("/v1/ns/default/sessions/{}", younger.0);
        let closed = request(port, "DELETE", &path, &headers, b"").unwrap();
        assert_eq!(closed.status, 200, "{closed:?}");
        let after = get(
            &format!("/v1/ns/default/sessions/{}/events?wait_ms=0", younger.0),
            &younger.1,
        );
        assert_ne!(after.status, 200, "{n}: a closed session read: {after:?}");
    }
}

/// Writes through a follower from many clients at once (the follower sends the ones that
/// come while others are under way together, in one request to its leader): each client
/// gets its own answers, in its own order, and a batch request's operations stay in order.
#[test]
fn concurrent_writes_through_a_follower_each_get_their_own_answers() {
    let cluster = Cluster::initialised(support::klock(), 3);
    let leader = cluster.leader();
    let f = (leader + 1) % 3;
    let cluster = &cluster;
    std::thread::scope(|scope| {
        for t in 0..24 {
            scope.spawn(move || {
                let me = open(cluster, f, &format!("many-{t}"));
                for i in 0..5 {
                    let resource = format!("FILE:/many/{t}/{i}");
                    let a = acquire(cluster, f, &me, &resource);
                    assert_eq!(a["verdict"], "GRANTED", "{a}");
                    assert_eq!(a["leases"][0]["resource"], resource, "{t}.{i}: {a}");
                    assert_eq!(a["leases"][0]["session_id"], me.0, "{t}.{i}: {a}");
                }
                // A batch of this session's operations: in order, each its own answer.
                let ops: Vec<Value> = (0..6)
                    .map(|i| {
                        json!({"op": "acquire", "session": me.0, "token": me.1,
                               "intents": [format!("MUTATES FILE:/many/{t}/b{i}")]})
                    })
                    .collect();
                let a = cluster.ask(
                    f,
                    "/v1/ns/default/batch",
                    "",
                    &format!("batch-{t}"),
                    json!({ "operations": ops }),
                );
                assert_eq!(a.status, 200, "{a:?}");
                let results = a.body["results"].as_array().unwrap();
                assert_eq!(results.len(), 6, "{a:?}");
                for (i, r) in results.iter().enumerate() {
                    let lease = &r["ok"]["leases"][0];
                    assert_eq!(lease["resource"], format!("FILE:/many/{t}/b{i}"), "{r}");
                }
            });
        }
    });
}

/// A cluster's ports are chosen before its nodes bind them, so they come from below the
/// ephemeral range, where no `bind(0)` and no outgoing connection takes them meanwhile, and a
/// claimed port is given to no other claim (of this process or another) while it lives.
#[test]
fn claimed_ports_come_from_below_the_ephemeral_range_and_are_given_once() {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap();
    let low: u16 = range.split_whitespace().next().unwrap().parse().unwrap();
    let claims: Vec<_> = (0..200).map(|_| claim_port()).collect();
    let mut numbers: Vec<u16> = claims.iter().map(|c| c.number()).collect();
    for &port in &numbers {
        assert!(port < low, "{port} is in the ephemeral range from {low}");
        std::net::TcpListener::bind(("127.0.0.1", port)).expect("the port is free");
    }
    numbers.sort_unstable();
    numbers.dedup();
    assert_eq!(numbers.len(), claims.len(), "a port was claimed twice");
    // Another process (the Python tests take the same locks) cannot claim a held port.
    let held = claims[0].number();
    let path = std::env::temp_dir()
        .join("klock-test-ports")
        .join(held.to_string());
    let script = format!(
        "import fcntl\nf = open({path:?}, 'a')\ntry:\n    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept BlockingIOError:\n    print('held')\n"
    );
    let out = std::process::Command::new("python3")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "held",
        "{out:?}"
    );
    drop(claims);
    let out = std::process::Command::new("python3")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "", "{out:?}");
}

/// A node that cannot start says why in the test's error, not an empty line: its exit and
/// the end of its log.
#[test]
fn a_node_that_cannot_listen_is_reported_with_its_log() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("node.log");
    let listen = format!("127.0.0.1:{port}");
    let started = klock_testkit::process::Spawned::start_logged(
        support::klock(),
        &["--memory", "--listen", &listen],
        &log,
    );
    let error = started.err().expect("the port is taken");
    assert!(error.contains("it ended: exit status:"), "{error}");
    assert!(
        error.contains(&format!("cannot listen on {listen}")),
        "{error}"
    );
}

/// The three nodes' state hashes at one applied index (read again until the indexes meet:
/// the leader's timer may still settle a deadline); that index.
fn same_hashes(cluster: &Cluster) -> u64 {
    let started = Instant::now();
    loop {
        let hashes: Vec<(u64, String)> = (0..3)
            .filter_map(|i| {
                let a = request(cluster.ports[i], "GET", "/v1/state/hash", &[], b"").ok()?;
                Some((
                    a.body["index"].as_u64()?,
                    a.body["hash"].as_str()?.to_owned(),
                ))
            })
            .collect();
        if hashes.len() == 3 && hashes.iter().all(|h| h.0 == hashes[0].0) {
            assert!(hashes.iter().all(|h| h.1 == hashes[0].1), "{hashes:?}");
            return hashes[0].0;
        }
        assert!(started.elapsed() < WAIT, "never at one index: {hashes:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Issue 24, one Raft entry per batch request: a batch through a follower is one entry (its
/// events all carry that entry's index, numbered across it); an operation refused mid-batch
/// (a wrong session token) refuses that one only; a retry with the same Idempotency-Key
/// through the leader answers the same leases and fences, and the refused one again; a
/// follower that missed batches past the leader's purge catches up by snapshot; after the
/// whole cluster restarted (replaying its batch entries) the leases are kept; and every time
/// the three nodes' state hashes agree at one index.
#[test]
fn a_batch_request_is_one_entry_answered_per_operation_through_snapshots_and_restarts() {
    let mut cluster = Cluster::unstarted(support::klock(), 3);
    cluster.extra = vec![String::from("--snapshot-every"), String::from("5")];
    for i in 0..3 {
        cluster.start(i);
    }
    klock_cluster(&cluster, 0, &["init"]).unwrap();
    let leader = cluster.leader();
    let follower = (leader + 1) % 3;
    let alice = open(&cluster, leader, "alice");
    let bob = open(&cluster, leader, "bob");
    let acquire = |s: &(u64, String), token: &str, resource: &str| {
        json!({"op": "acquire", "session": s.0, "token": token,
               "intents": [format!("MUTATES {resource}")], "ttl_ms": 60_000, "wait": false})
    };
    let body = json!({"operations": [
        acquire(&alice, &alice.1, "FILE:/a"),
        acquire(&bob, "not-bobs-token", "FILE:/b"),
        acquire(&bob, &bob.1, "FILE:/b"),
        acquire(&bob, &bob.1, "FILE:/a"),
    ]});
    let first = cluster.ask(
        follower,
        "/v1/ns/default/batch",
        "",
        "batch-1",
        body.clone(),
    );
    assert_eq!(first.status, 200, "{first:?}");
    let results = first.body["results"].as_array().unwrap().clone();
    assert_eq!(results.len(), 4, "{first:?}");
    assert_eq!(results[0]["ok"]["verdict"], "GRANTED", "{first:?}");
    assert_eq!(
        results[1]["error"]["name"], "SESSION_TOKEN_REFUSED",
        "{first:?}"
    );
    assert_eq!(results[2]["ok"]["verdict"], "GRANTED", "{first:?}");
    assert_ne!(results[3]["ok"]["verdict"], "GRANTED", "{first:?}");
    // Its events: one entry's, numbered across it from 0 (alice's grant, then bob's).
    cluster.caught_up_with(leader);
    let watch = request(
        cluster.ports[follower],
        "GET",
        "/v1/ns/default/watch?wait_ms=0",
        &[],
        b"",
    )
    .unwrap();
    let lease = |k: usize| results[k]["ok"]["leases"][0]["lease_id"].clone();
    let id_of = |lease: &Value| {
        let events = watch.body["events"].as_array().unwrap();
        let event = events
            .iter()
            .find(|e| e["event"] == "ACQUIRED" && e["leases"][0]["lease_id"] == *lease);
        let id = event.unwrap_or_else(|| panic!("no ACQUIRED of {lease}: {watch:?}"))["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let (index, k) = id.split_once('.').unwrap();
        (index.parse::<u64>().unwrap(), k.parse::<u32>().unwrap())
    };
    let (a, b) = (id_of(&lease(0)), id_of(&lease(2)));
    assert_eq!(
        a.0, b.0,
        "the batch's events are not one entry's: {a:?} {b:?}"
    );
    assert_eq!((a.1, b.1), (0, 1), "{a:?} {b:?}");
    // A retry through the leader: the same answers, nothing applied twice.
    let again = cluster.ask(leader, "/v1/ns/default/batch", "", "batch-1", body);
    assert_eq!(again.status, 200, "{again:?}");
    let repeated = again.body["results"].as_array().unwrap();
    for k in [0, 2, 3] {
        assert_eq!(repeated[k], results[k], "operation {k}: {again:?}");
    }
    assert_eq!(
        repeated[1]["error"]["name"], "SESSION_TOKEN_REFUSED",
        "{again:?}"
    );
    same_hashes(&cluster);

    // A follower misses batches past the leader's purge, and catches up by snapshot.
    let behind = (leader + 2) % 3;
    let missed = cluster.applied(behind).unwrap();
    cluster.kill(behind);
    let started = Instant::now();
    let mut n = 0;
    loop {
        let ops: Vec<Value> = (0..3)
            .map(|k| acquire(&alice, &alice.1, &format!("FILE:/n{n}-{k}")))
            .collect();
        let a = cluster.ask(
            leader,
            "/v1/ns/default/batch",
            "",
            &format!("more-{n}"),
            json!({ "operations": ops }),
        );
        assert_eq!(a.status, 200, "{a:?}");
        n += 1;
        let status = cluster.status(leader).unwrap();
        if n >= 12
            && status["purged_index"]
                .as_u64()
                .is_some_and(|p| p > missed + 1)
        {
            break;
        }
        assert!(
            started.elapsed() < WAIT,
            "never purged past {missed}: {status}"
        );
    }
    cluster.start(behind);
    cluster.caught_up(behind, leader);
    same_hashes(&cluster);
    assert_eq!(cluster.holders(behind, "FILE:/a").len(), 1);

    // The whole cluster restarted: its batch entries replayed (after its snapshots).
    for i in 0..3 {
        cluster.kill(i);
    }
    for i in 0..3 {
        cluster.start(i);
    }
    let leader = cluster.leader();
    let holders = cluster.holders(leader, "FILE:/b");
    assert_eq!(holders.len(), 1, "{holders:?}");
    assert_eq!(holders[0]["session_id"], bob.0, "{holders:?}");
    cluster.caught_up_with(leader);
    same_hashes(&cluster);
}

/// `--snapshot-every N` counts commands, not log entries: one batch request of 150
/// operations is one entry, and with N = 100 it makes a snapshot due on every node (what a
/// restart replays stays bounded by commands, though an entry may carry a batch's 1,000); a
/// few entries of one command each make none.
#[test]
fn snapshots_count_the_commands_a_batch_entry_carries() {
    let mut cluster = Cluster::unstarted(support::klock(), 3);
    cluster.extra = vec![String::from("--snapshot-every"), String::from("100")];
    for i in 0..3 {
        cluster.start(i);
    }
    klock_cluster(&cluster, 0, &["init"]).unwrap();
    let leader = cluster.leader();
    let alice = open(&cluster, leader, "alice");
    let snapshots = |cluster: &Cluster| -> Vec<Option<u64>> {
        (0..3)
            .map(|i| cluster.status(i).unwrap()["snapshot_index"].as_u64())
            .collect()
    };
    cluster.caught_up_with(leader);
    assert_eq!(snapshots(&cluster), [None, None, None], "too early");
    let ops: Vec<Value> = (0..150)
        .map(|k| {
            json!({"op": "acquire", "session": alice.0, "token": alice.1,
                   "intents": [format!("MUTATES FILE:/s{k}")], "ttl_ms": 60_000, "wait": false})
        })
        .collect();
    let a = cluster.ask(
        leader,
        "/v1/ns/default/batch",
        "",
        "batch-150",
        json!({ "operations": ops }),
    );
    assert_eq!(a.status, 200, "{a:?}");
    cluster.caught_up_with(leader);
    let started = Instant::now();
    loop {
        let taken = snapshots(&cluster);
        if taken.iter().all(Option::is_some) {
            break;
        }
        assert!(
            started.elapsed() < WAIT,
            "150 commands in one entry made no snapshot on every node: {taken:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A batch through a follower is relayed to its leader as it came (`server/src/relay.rs`):
/// the client gets the leader's answer, byte for byte the one the leader repeats for the same
/// idempotency key, with the entry's `Klock-Index`; a read through the follower right after
/// sees the batch's lease; and a request marked as relayed is never relayed again (the
/// follower refuses it, 503 `NO_LEADER` with `Retry-After`; the leader answers it).
#[test]
fn a_batch_through_a_follower_is_relayed_once_and_answered_as_the_leader_answers() {
    let cluster = Cluster::initialised(support::klock(), 3);
    let leader = cluster.leader();
    let f = (leader + 1) % 3;
    let alice = open(&cluster, leader, "alice");
    let body = json!({"operations": [
        {"op": "acquire", "session": alice.0, "token": alice.1,
         "intents": ["MUTATES FILE:/relayed/a"], "ttl_ms": 60_000, "wait": false},
        {"op": "acquire", "session": alice.0, "token": "not-alices-token",
         "intents": ["MUTATES FILE:/relayed/b"], "ttl_ms": 60_000, "wait": false},
    ]});
    let through = cluster.ask(f, "/v1/ns/default/batch", "", "relay-1", body.clone());
    assert_eq!(through.status, 200, "{through:?}");
    assert_eq!(
        through.body["results"][0]["ok"]["verdict"], "GRANTED",
        "{through:?}"
    );
    assert_eq!(
        through.body["results"][1]["error"]["name"], "SESSION_TOKEN_REFUSED",
        "{through:?}"
    );
    let index: u64 = through
        .header("klock-index")
        .unwrap_or_else(|| panic!("no Klock-Index through the follower: {through:?}"))
        .parse()
        .unwrap();
    assert!(through.header("klock-now").is_some(), "{through:?}");
    let again = cluster.ask(leader, "/v1/ns/default/batch", "", "relay-1", body.clone());
    assert_eq!(again.status, 200, "{again:?}");
    assert_eq!(again.body, through.body, "the leader's repeat differs");
    // Read through the follower at once: it applied up to the relayed answer's index.
    let lease = through.body["results"][0]["ok"]["leases"][0]["lease_id"].clone();
    let state = request(
        cluster.ports[f],
        "GET",
        "/v1/ns/default/resources/state?resource=FILE:/relayed/a",
        &[],
        b"",
    )
    .unwrap();
    assert_eq!(state.status, 200, "{state:?}");
    assert!(
        state.body.to_string().contains(&lease.to_string()),
        "{state:?}"
    );
    let hash = request(cluster.ports[f], "GET", "/v1/state/hash", &[], b"").unwrap();
    assert!(
        hash.body["index"].as_u64().unwrap() >= index,
        "the follower's state is of {}, before the relayed {index}",
        hash.body["index"]
    );
    // Marked as relayed: the follower answers it itself, and does not lead.
    let marked = |node: usize, key: &str| {
        let headers = [
            ("klock-relayed", "1"),
            ("idempotency-key", key),
            ("content-type", "application/json"),
        ];
        let body = json!({"operations": [{"op": "heartbeat", "session": alice.0,
                                          "token": alice.1}]});
        let path = "/v1/ns/default/batch";
        request(
            cluster.ports[node],
            "POST",
            path,
            &headers,
            body.to_string().as_bytes(),
        )
        .unwrap()
    };
    let refused = marked(f, "marked-1");
    assert_eq!(refused.status, 503, "{refused:?}");
    assert_eq!(refused.body["error"]["name"], "NO_LEADER", "{refused:?}");
    assert_eq!(refused.header("retry-after"), Some("1"), "{refused:?}");
    let answered = marked(leader, "marked-2");
    assert_eq!(answered.status, 200, "{answered:?}");
    assert!(
        answered.body["results"][0]["ok"].is_object(),
        "{answered:?}"
    );
}

/// Every answer of a follower names the leader's URL as the membership has it
/// (`Klock-Leader`: a client then sends its next calls there, the core's `Servers::led_by`),
/// reads and proxied writes alike, while it hears from its leader (a heartbeat within two
/// intervals: on a loaded machine one may come late, so each is asked again until named); the
/// leader's answers never name one.
#[test]
fn a_followers_answers_name_the_leader_and_the_leaders_name_none() {
    let cluster = Cluster::initialised(support::klock(), 3);
    let leader = cluster.leader();
    let leader_url = cluster.url(leader);
    for node in 0..3 {
        let want = (node != leader).then_some(leader_url.as_str());
        let started = Instant::now();
        let mut asked = 0;
        loop {
            asked += 1;
            let read = request(cluster.ports[node], "GET", "/v1/state/hash", &[], b"").unwrap();
            assert_eq!(read.status, 200, "{read:?}");
            let write = cluster.ask(
                node,
                "/v1/ns/default/sessions",
                "",
                &format!("named-{node}-{asked}"),
                json!({"agent_id": format!("named-{node}")}),
            );
            assert_eq!(write.status, 200, "{write:?}");
            let named = [read.header("klock-leader"), write.header("klock-leader")];
            if node == leader {
                assert_eq!(named, [None, None], "the leader named a leader");
                break;
            }
            for name in named.into_iter().flatten() {
                assert_eq!(name, leader_url, "node {node} named another node");
            }
            if named == [want, want] {
                break;
            }
            assert!(
                started.elapsed() < WAIT,
                "node {node} never named its leader in {asked} tries: {named:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
