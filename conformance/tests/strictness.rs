//! The runner fails loudly: unknown keys, wrong types, wrong expectations, extra or missing
//! events and unknown ids are failures, never checks of nothing.

use klock_conformance::{run_paths, run_source, VectorResult};

/// A vector with the given config and steps (JSON text of the array items).
fn vector(config: &str, steps: &[&str]) -> String {
    format!(
        r#"{{ "name": "t", "config": {config}, "steps": [ {} ] }}"#,
        steps.join(", ")
    )
}

fn run(steps: &[&str]) -> VectorResult {
    run_source("test.json", &vector(r#"{ "seed": 1 }"#, steps))
}

const OPEN_A: &str = r#"{ "now": 0, "do": "open", "agent": "alice", "as": "A" }"#;
const OPEN_B: &str = r#"{ "now": 1, "do": "open", "agent": "bob", "as": "B" }"#;

fn passes(r: &VectorResult) {
    assert!(r.passed(), "expected a pass, got: {}", r.line());
}

fn fails_with(r: &VectorResult, needle: &str) {
    let line = r.line();
    assert!(
        !r.passed(),
        "expected a failure mentioning {needle:?}, but it passed"
    );
    assert!(
        line.contains(needle),
        "failure does not mention {needle:?}: {line}"
    );
    assert!(
        line.starts_with("FAIL test.json: "),
        "bad line shape: {line}"
    );
}

#[test]
fn a_correct_vector_passes_and_the_line_is_shaped() {
    let r = run(&[
        OPEN_A,
        r#"{ "now": 10, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/x"], "ttl_ms": 100,
             "expect": { "verdict": "GRANTED", "leases": [ { "as": "L", "expires_at": 110, "predicate": "MUTATES", "resource": "FILE:/x", "ttl_ms": 100 } ], "events": [ { "event": "ACQUIRED" } ] } }"#,
        r#"{ "now": 110, "do": "advance", "expect": { "events": [ { "event": "LEASE_EXPIRED", "lease": "L", "session": "A" } ] } }"#,
    ]);
    passes(&r);
    assert_eq!(r.line(), "ok test.json: t");
}

#[test]
fn unknown_keys_fail_at_every_level() {
    let cases: &[(&str, &[&str], &str)] = &[
        ("file", &[OPEN_A], "x"),
        (
            "step",
            &[r#"{ "now": 0, "do": "open", "agent": "a", "as": "A", "namespce": "n" }"#],
            "namespce",
        ),
        (
            "expect",
            &[r#"{ "now": 0, "do": "open", "agent": "a", "as": "A", "expect": { "evnts": [] } }"#],
            "evnts",
        ),
        (
            "expect key of another do",
            &[r#"{ "now": 0, "do": "open", "agent": "a", "expect": { "verdict": "GRANTED" } }"#],
            "verdict",
        ),
        (
            "lease",
            &[
                OPEN_A,
                r#"{ "now": 1, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/x"], "expect": { "leases": [ { "expires": 1 } ] } }"#,
            ],
            "expires",
        ),
        (
            "event",
            &[
                OPEN_A,
                r#"{ "now": 1, "do": "advance", "expect": { "events": [ { "event": "LEASE_EXPIRED", "ticket": "T" } ] } }"#,
            ],
            "ticket",
        ),
        (
            "event field",
            &[
                OPEN_A,
                r#"{ "now": 1, "do": "advance", "expect": { "events": [ { "sesion": "A" } ] } }"#,
            ],
            "sesion",
        ),
        (
            "status",
            &[
                OPEN_A,
                r#"{ "now": 1, "do": "reconcile", "session": "A", "leases": ["L"], "expect": { "status": { "L": { "status": "UNKNOWN", "fence": 1 } } } }"#,
            ],
            "fence",
        ),
        (
            "results",
            &[
                OPEN_A,
                r#"{ "now": 1, "do": "heartbeat", "session": "A", "leases": ["L"], "expect": { "results": { "L": { "stat": "OK" } } } }"#,
            ],
            "stat",
        ),
        (
            "holders",
            &[
                OPEN_A,
                r#"{ "now": 1, "do": "resource_state", "resource": "FILE:/x", "expect": { "holders": [ { "sesion": "A" } ] } }"#,
            ],
            "sesion",
        ),
        (
            "waiting",
            &[
                OPEN_A,
                r#"{ "now": 1, "do": "resource_state", "resource": "FILE:/x", "expect": { "waiting": [ { "session": "A", "tiket": "T" } ] } }"#,
            ],
            "tiket",
        ),
        (
            "covering",
            &[
                OPEN_A,
                r#"{ "now": 1, "do": "resource_state", "resource": "FILE:/x", "expect": { "covering": [ { "predicat": "MUTATES" } ] } }"#,
            ],
            "predicat",
        ),
        (
            "tamper",
            &[
                OPEN_A,
                r#"{ "now": 1, "do": "digest", "session": "A", "as": "D" }"#,
                r#"{ "now": 2, "do": "resume", "digest": "D", "tamper": { "priority": 1 } }"#,
            ],
            "priority",
        ),
    ];
    for (what, steps, needle) in cases {
        let r = if *what == "file" {
            run_source(
                "test.json",
                &format!(
                    r#"{{ "name": "t", "x": 1, "steps": [ {} ] }}"#,
                    steps.join(",")
                ),
            )
        } else {
            run(steps)
        };
        assert!(!r.passed(), "{what}: an unknown key passed");
        assert!(
            r.line().contains(&format!("unknown key `{needle}`")),
            "{what}: {}",
            r.line()
        );
    }
    let r = run_source("test.json", &vector(r#"{ "polcy": "lanes" }"#, &[OPEN_A]));
    fails_with(&r, "unknown key `polcy`");
}

#[test]
fn wrong_types_and_unknown_names_fail() {
    fails_with(
        &run(&[r#"{ "now": "0", "do": "open", "agent": "a" }"#]),
        "`now` must be a non-negative integer",
    );
    fails_with(
        &run(&[r#"{ "now": 1.5, "do": "open", "agent": "a" }"#]),
        "`now` must be a non-negative integer",
    );
    fails_with(
        &run(&[r#"{ "now": 0, "do": "open", "agent": 7 }"#]),
        "`agent` must be a string",
    );
    fails_with(
        &run(&[
            OPEN_A,
            r#"{ "now": 1, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/x"], "wait": "yes" }"#,
        ]),
        "`wait` must be true or false",
    );
    fails_with(
        &run(&[
            OPEN_A,
            r#"{ "now": 1, "do": "acquire", "session": "A", "intents": "MUTATES FILE:/x" }"#,
        ]),
        "`intents` must be a list of strings",
    );
    fails_with(
        &run(&[OPEN_A, r#"{ "now": 1, "do": "lock", "session": "A" }"#]),
        "unknown `do`",
    );
    fails_with(
        &run(&[
            OPEN_A,
            r#"{ "now": 1, "do": "close", "session": "A", "expect": { "error": "UNKNOWN_SESION" } }"#,
        ]),
        "unknown error name",
    );
    fails_with(
        &run(&[
            OPEN_A,
            r#"{ "now": 1, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/x"], "expect": { "verdict": "GRANT" } }"#,
        ]),
        "`verdict` must be one of",
    );
    fails_with(
        &run(&[
            OPEN_A,
            r#"{ "now": 1, "do": "advance", "expect": { "events": [ { "event": "EXPIRED" } ] } }"#,
        ]),
        "unknown event",
    );
    fails_with(
        &run(&[
            OPEN_A,
            r#"{ "now": 1, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/x"], "expect": { "retry_after_ms": [5, 1] } }"#,
        ]),
        "lo <= hi",
    );
    fails_with(
        &run_source("test.json", &vector(r#"{ "policy": "fifo" }"#, &[OPEN_A])),
        "unknown policy",
    );
    fails_with(
        &run_source("test.json", &vector(r#"{ "seed": -1 }"#, &[OPEN_A])),
        "`seed` must be",
    );
    fails_with(
        &run_source(
            "test.json",
            r#"{ "name": "t", "steps": [ { "now": 0, "now": 1, "do": "advance" } ] }"#,
        ),
        "duplicate key `now`",
    );
    fails_with(
        &run_source("test.json", r#"{ "name": "t", "steps": [] }"#),
        "`steps` is empty",
    );
    fails_with(&run_source("test.json", "{ not json"), "invalid JSON");
}

#[test]
fn a_wrong_expectation_fails() {
    let acquire = |expect: &str| {
        format!(
            r#"{{ "now": 10, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/x"], "ttl_ms": 100, "expect": {expect} }}"#
        )
    };
    for (expect, needle) in [
        (
            r#"{ "verdict": "DIE" }"#,
            "verdict: expected DIE, got GRANTED",
        ),
        (
            r#"{ "leases": [ { "expires_at": 111 } ] }"#,
            "expires_at: expected 111, got 110",
        ),
        (r#"{ "leases": [ { "ttl_ms": 99 } ] }"#, "ttl_ms"),
        (r#"{ "leases": [ { "resource": "FILE:/y" } ] }"#, "resource"),
        (
            r#"{ "leases": [ { "predicate": "CONSUMES" } ] }"#,
            "predicate",
        ),
        (r#"{ "leases": [ {}, {} ] }"#, "expected 2 leases, got 1"),
        (r#"{ "ticket": "T" }"#, "`ticket` is expected"),
        (r#"{ "held_by": [] }"#, "`held_by` is expected"),
        (
            r#"{ "error": "INVALID_TTL" }"#,
            "expected error INVALID_TTL, got success",
        ),
    ] {
        let step = acquire(expect);
        fails_with(&run(&[OPEN_A, &step]), needle);
    }
    // An error where success is expected, and the wrong error.
    fails_with(
        &run(&[
            OPEN_A,
            r#"{ "now": 1, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/a/../b"] }"#,
        ]),
        "got error INVALID_RESOURCE",
    );
    fails_with(
        &run(&[
            OPEN_A,
            r#"{ "now": 1, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/a/../b"], "expect": { "error": "INVALID_PREDICATE" } }"#,
        ]),
        "error: expected INVALID_PREDICATE, got INVALID_RESOURCE",
    );
    // held_by is a set of exactly the blockers.
    let steps = [
        OPEN_A,
        OPEN_B,
        r#"{ "now": 2, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/x"] , "expect": { "verdict": "GRANTED", "events": [ { "event": "ACQUIRED" } ] } }"#,
    ];
    let die = |held: &str| {
        format!(
            r#"{{ "now": 3, "do": "acquire", "session": "B", "intents": ["MUTATES FILE:/x"], "expect": {{ "verdict": "DIE", "held_by": {held} }} }}"#
        )
    };
    passes(&run(&[steps[0], steps[1], steps[2], &die(r#"["A"]"#)]));
    fails_with(
        &run(&[steps[0], steps[1], steps[2], &die(r#"["A", "B"]"#)]),
        "held_by",
    );
    fails_with(&run(&[steps[0], steps[1], steps[2], &die("[]")]), "held_by");
}

#[test]
fn an_unbound_session_alias_is_unknown_session() {
    passes(&run(&[
        r#"{ "now": 0, "do": "acquire", "session": "ghost", "intents": ["MUTATES FILE:/x"], "expect": { "error": "UNKNOWN_SESSION" } }"#,
    ]));
    passes(&run(&[
        r#"{ "now": 0, "do": "close", "session": "ghost", "expect": { "error": "UNKNOWN_SESSION" } }"#,
    ]));
    fails_with(
        &run(&[r#"{ "now": 0, "do": "close", "session": "ghost" }"#]),
        "got error UNKNOWN_SESSION",
    );
    // Unbound lease and ticket aliases are unknown ids too, the same id each time.
    passes(&run(&[
        OPEN_A,
        r#"{ "now": 1, "do": "release", "session": "A", "lease": "nope", "expect": { "error": "UNKNOWN_LEASE" } }"#,
        r#"{ "now": 2, "do": "reconcile", "session": "A", "leases": ["nope", "other"], "expect": { "status": { "nope": "UNKNOWN", "other": "UNKNOWN" } } }"#,
        r#"{ "now": 3, "do": "heartbeat", "session": "A", "leases": ["nope"], "expect": { "results": { "nope": "UNKNOWN_LEASE" } } }"#,
        r#"{ "now": 4, "do": "cancel_wait", "session": "A", "ticket": "T9", "expect": { "error": "UNKNOWN_TICKET" } }"#,
    ]));
    // A results key the heartbeat did not ask about fails.
    fails_with(
        &run(&[
            OPEN_A,
            r#"{ "now": 3, "do": "heartbeat", "session": "A", "leases": ["nope"], "expect": { "results": { "other": "UNKNOWN_LEASE" } } }"#,
        ]),
        "did not ask about",
    );
}

#[test]
fn every_event_must_be_listed_and_matched() {
    let grant = r#"{ "now": 10, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/x"], "ttl_ms": 100, "expect": { "leases": [ { "as": "L" } ], "events": [ { "event": "ACQUIRED" } ] } }"#;
    // An event after a step without expect fails.
    fails_with(
        &run(&[OPEN_A, grant, r#"{ "now": 200, "do": "advance" }"#]),
        "events: expected 0, got 1",
    );
    // ... and after a step whose expect does not list it.
    fails_with(
        &run(&[
            OPEN_A,
            grant,
            r#"{ "now": 200, "do": "next_deadline", "expect": { "deadline": 110 } }"#,
            r#"{ "now": 200, "do": "advance", "expect": {} }"#,
        ]),
        "LEASE_EXPIRED",
    );
    // An extra expected event fails.
    fails_with(
        &run(&[
            OPEN_A,
            grant,
            r#"{ "now": 200, "do": "advance", "expect": { "events": [ { "event": "LEASE_EXPIRED" }, { "event": "LEASE_EXPIRED" } ] } }"#,
        ]),
        "events: expected 2, got 1",
    );
    // A field of the wrong event kind or value fails.
    fails_with(
        &run(&[
            OPEN_A,
            grant,
            r#"{ "now": 200, "do": "advance", "expect": { "events": [ { "event": "WAIT_TIMEOUT" } ] } }"#,
        ]),
        "event: expected \"WAIT_TIMEOUT\", got \"LEASE_EXPIRED\"",
    );
    fails_with(
        &run(&[
            OPEN_A,
            OPEN_B,
            grant,
            r#"{ "now": 200, "do": "advance", "expect": { "events": [ { "lease": "L", "session": "B" } ] } }"#,
        ]),
        "session: expected B",
    );
    fails_with(
        &run(&[
            OPEN_A,
            grant,
            r#"{ "now": 200, "do": "advance", "expect": { "events": [ { "ticket": "T" } ] } }"#,
        ]),
        "`ticket` is expected, but a LEASE_EXPIRED event has none",
    );
    // Events settled before a failed call must be listed, and they are the only change.
    passes(&run(&[
        OPEN_A,
        grant,
        r#"{ "now": 200, "do": "release", "session": "A", "lease": "zzz", "expect": { "error": "UNKNOWN_LEASE", "events": [ { "event": "LEASE_EXPIRED", "lease": "L" } ] } }"#,
    ]));
    fails_with(
        &run(&[
            OPEN_A,
            grant,
            r#"{ "now": 200, "do": "release", "session": "A", "lease": "zzz", "expect": { "error": "UNKNOWN_LEASE" } }"#,
        ]),
        "events: expected 0, got 1",
    );
}

#[test]
fn aliases_bind_once_and_by_kind() {
    let grant = |now: u64, path: &str, alias: &str| {
        format!(
            r#"{{ "now": {now}, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:{path}"], "expect": {{ "leases": [ {{ "as": "{alias}" }} ], "events": [ {{ "event": "ACQUIRED" }} ] }} }}"#
        )
    };
    fails_with(
        &run(&[OPEN_A, &grant(1, "/x", "L"), &grant(2, "/y", "L")]),
        "already bound",
    );
    passes(&run(&[OPEN_A, &grant(1, "/x", "L"), &grant(2, "/x", "L")]));
    let same = r#"{ "now": 3, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/x"], "expect": { "leases": [ { "same_as": "L" } ], "events": [ { "event": "ACQUIRED" } ] } }"#;
    passes(&run(&[OPEN_A, &grant(1, "/x", "L"), same]));
    let fence = r#"{ "now": 3, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/y"], "expect": { "leases": [ { "fence_gt": "L", "same_as": "L" } ] } }"#;
    fails_with(&run(&[OPEN_A, &grant(1, "/x", "L"), fence]), "same_as");
    let fence_bad = r#"{ "now": 3, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/y"], "expect": { "leases": [ { "as": "M" } ], "events": [ { "event": "ACQUIRED" } ] } }"#;
    let check = r#"{ "now": 4, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/x"], "expect": { "leases": [ { "fence_gt": "M" } ] } }"#;
    fails_with(
        &run(&[OPEN_A, &grant(1, "/x", "L"), fence_bad, check]),
        "fence_gt",
    );
    fails_with(
        &run(&[
            OPEN_A,
            r#"{ "now": 1, "do": "release", "session": "A", "lease": "A" }"#,
        ]),
        "bound to a session, not a lease",
    );
    fails_with(
        &run(&[OPEN_A, r#"{ "now": 1, "do": "resume", "digest": "D" }"#]),
        "never bound",
    );
}

#[test]
fn zero_vectors_and_unreadable_files_fail() {
    let empty =
        std::env::temp_dir().join(format!("klock-conformance-empty-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let s = run_paths(&[&empty]);
    assert!(!s.ok());
    assert_eq!(s.final_line(), "0 passed, 0 failed");
    std::fs::remove_dir(&empty).unwrap();
    let s = run_paths(&["/nonexistent/klock/vector.json"]);
    assert!(!s.ok());
    assert_eq!(s.final_line(), "0 passed, 1 failed");
    assert!(
        s.results[0].line().contains("cannot read"),
        "{}",
        s.results[0].line()
    );
}

#[test]
fn released_lists_lease_aliases_as_a_set() {
    let grant = r#"{ "now": 1, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/x", "MUTATES FILE:/y"], "expect": { "leases": [ { "as": "L1" }, { "as": "L2" } ], "events": [ { "event": "ACQUIRED", "leases": [ { "same_as": "L1" }, { "same_as": "L2" } ] } ] } }"#;
    let release = |leases: &str| {
        format!(
            r#"{{ "now": 2, "do": "release_all", "session": "A", "expect": {{ "events": [ {{ "event": "RELEASED", "session": "A", "leases": {leases} }} ] }} }}"#
        )
    };
    passes(&run(&[OPEN_A, grant, &release(r#"["L2", "L1"]"#)]));
    fails_with(
        &run(&[OPEN_A, grant, &release(r#"["L1"]"#)]),
        "leases: expected {L1(#1)}",
    );
    // RELEASED names lease ids, not lease objects.
    fails_with(
        &run(&[OPEN_A, grant, &release(r#"[ { "as": "L3" } ]"#)]),
        "leases",
    );
    // A release that ended nothing emits nothing.
    fails_with(
        &run(&[
            OPEN_A,
            grant,
            &release(r#"["L1", "L2"]"#),
            &release(r#"["L1", "L2"]"#).replace(r#""now": 2"#, r#""now": 3"#),
        ]),
        "events: expected 1, got 0",
    );
}
