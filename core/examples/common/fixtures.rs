//! Kernels pre-filled with many unrelated active leases, and the measured operations.
//!
//! Contract: fillers are spread over sessions of [`PER_SESSION`] leases (under the default
//! `max_leases_per_session`), on distinct resources `FILE:/fill/d<i/1000>/f<i%1000>`, with a
//! TTL so large that nothing expires; the measured operations use a constant `now`
//! ([`NOW`]), so no deadline is ever due and only the operation itself is timed.

use klock_core::{AcquireOptions, Config, Kernel, Policy, SessionId, Verdict};

/// The constant clock of every measured call.
pub const NOW: u64 = 1_000;
/// A TTL that outlives any run.
pub const HUGE_TTL: u64 = 1 << 50;
/// Leases per filler session (the default quota is 1 024).
pub const PER_SESSION: usize = 1_000;
/// The one intent of the single-intent benchmark.
pub const ONE: [&str; 1] = ["MUTATES FILE:/bench/x"];
/// The 8 intents of the batch benchmark.
pub const EIGHT: [&str; 8] = [
    "MUTATES FILE:/bench/b0",
    "MUTATES FILE:/bench/b1",
    "MUTATES FILE:/bench/b2",
    "MUTATES FILE:/bench/b3",
    "MUTATES FILE:/bench/b4",
    "MUTATES FILE:/bench/b5",
    "MUTATES FILE:/bench/b6",
    "MUTATES FILE:/bench/b7",
];

/// Default config, but TTLs may be huge (nothing expires during a benchmark).
pub fn config() -> Config {
    Config {
        max_ttl_ms: HUGE_TTL,
        ..Config::default()
    }
}

pub fn options() -> AcquireOptions {
    AcquireOptions {
        ttl_ms: Some(HUGE_TTL),
        wait: false,
        wait_timeout_ms: None,
    }
}

/// [`options`] of a request that would wait if blocked (what the friendly clients send): the
/// path on which a policy such as `detect` could cost something, if anything were blocked.
pub fn waiting_options() -> AcquireOptions {
    AcquireOptions {
        wait: true,
        ..options()
    }
}

/// An empty kernel under `policy` ([`config`] otherwise).
pub fn kernel_under(policy: Policy) -> Kernel {
    Kernel::new(Config { policy, ..config() }).expect("valid config")
}

/// Acquires `intents` for `session` and panics unless granted (fixtures are conflict-free).
pub fn grant(kernel: &mut Kernel, session: SessionId, intents: &[String]) {
    match kernel.acquire(session, intents, options(), NOW) {
        Ok(Verdict::Granted { .. }) => {}
        other => panic!(
            "fixture acquire of {} intents was not granted: {other:?}",
            intents.len()
        ),
    }
}

/// A kernel holding `others` unrelated leases.
pub fn kernel_with_others(others: usize) -> Kernel {
    let mut kernel = Kernel::new(config()).expect("valid config");
    add_fillers(&mut kernel, others);
    kernel
}

/// Adds `count` filler leases in fresh sessions.
pub fn add_fillers(kernel: &mut Kernel, count: usize) {
    let mut made = 0;
    while made < count {
        let session = kernel
            .open_session(&format!("filler-{made}"), "default", NOW)
            .expect("valid")
            .session_id;
        let mine = PER_SESSION.min(count - made);
        let names: Vec<String> = (made..made + mine)
            .map(|i| format!("MUTATES FILE:/fill/d{}/f{}", i / 1000, i % 1000))
            .collect();
        for chunk in names.chunks(250) {
            grant(kernel, session, chunk);
        }
        made += mine;
    }
}

/// Opens the session whose operations are measured.
pub fn bench_session(kernel: &mut Kernel) -> SessionId {
    kernel
        .open_session("bench", "default", NOW)
        .expect("valid")
        .session_id
}

/// One acquire of `intents` and the release of what it granted (one `release` per lease for
/// a single intent, `release_all` for a batch).
#[inline]
pub fn acquire_release(kernel: &mut Kernel, session: SessionId, intents: &[&str]) {
    acquire_release_with(kernel, session, intents, options());
}

/// [`acquire_release`] with the request's `options`.
#[inline]
pub fn acquire_release_with(
    kernel: &mut Kernel,
    session: SessionId,
    intents: &[&str],
    options: AcquireOptions,
) {
    match kernel.acquire(session, intents, options, NOW) {
        Ok(Verdict::Granted { leases }) => {
            if let [lease] = leases.as_slice() {
                kernel
                    .release(session, lease.lease_id, NOW)
                    .expect("own lease");
            } else {
                kernel.release_all(session, NOW).expect("own session");
            }
        }
        other => panic!("benchmark acquire was not granted: {other:?}"),
    }
    drain(kernel);
}

/// Drains the events, as a host does after every call (the drive loop, `klock_core` docs):
/// the pair's ACQUIRED and RELEASED are part of its cost.
#[inline]
pub fn drain(kernel: &mut Kernel) {
    while kernel.poll_event().is_some() {}
}

/// Runs `iterations` pairs on a fresh session (opened and closed outside the returned time):
/// the kernel remembers a session's ended leases until it closes, so a fresh session per
/// measurement keeps that memory from growing across measurements.
pub fn timed_pairs(kernel: &mut Kernel, intents: &[&str], iterations: u64) -> std::time::Duration {
    timed_pairs_with(kernel, intents, iterations, options())
}

/// [`timed_pairs`] with the requests' `options`.
pub fn timed_pairs_with(
    kernel: &mut Kernel,
    intents: &[&str],
    iterations: u64,
    options: AcquireOptions,
) -> std::time::Duration {
    let session = bench_session(kernel);
    let started = std::time::Instant::now();
    for _ in 0..iterations {
        acquire_release_with(kernel, session, intents, options);
    }
    let elapsed = started.elapsed();
    kernel.close_session(session, NOW).expect("open session");
    elapsed
}

/// A tree for the hierarchical benchmark: `FILE:/a/b/c/d/e/f` with `siblings` CONSUMES
/// leases of other sessions beside every node on the way down (`/a/s<i>`, `/a/b/s<i>`, ...):
/// siblings never overlap the leaf, so [`DEEP`] is granted after walking its 6 ancestors,
/// and [`DIRECTORY`] is granted after walking the `siblings` compatible holders below it.
pub fn hierarchical_kernel(siblings: usize) -> Kernel {
    let mut kernel = Kernel::new(config()).expect("valid config");
    let levels = [
        "FILE:/a",
        "FILE:/a/b",
        "FILE:/a/b/c",
        "FILE:/a/b/c/d",
        "FILE:/a/b/c/d/e",
    ];
    let mut all: Vec<String> = Vec::new();
    for level in levels {
        for i in 0..siblings {
            all.push(format!("CONSUMES {level}/s{i}"));
        }
    }
    for (n, chunk) in all.chunks(PER_SESSION).enumerate() {
        let session = kernel
            .open_session(&format!("sibling-{n}"), "default", NOW)
            .expect("valid")
            .session_id;
        for part in chunk.chunks(250) {
            grant(&mut kernel, session, part);
        }
    }
    kernel
}

/// The leaf request of the hierarchical benchmark (depth 6).
pub const DEEP: [&str; 1] = ["MUTATES FILE:/a/b/c/d/e/f"];
/// A directory request whose subtree holds compatible leases (walks the subtree).
pub const DIRECTORY: [&str; 1] = ["CONSUMES FILE:/a/b/c/d/e"];
