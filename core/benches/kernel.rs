//! Criterion benchmarks of the kernel (DESIGN.md §6). Programs, not tests: nothing here
//! asserts a time. The quick report with targets and ratios is
//! `cargo run --release -p klock-core --example bench_report`.
//!
//! ```text
//! cargo bench -p klock-core --bench kernel                      # everything (~3 minutes)
//! cargo bench -p klock-core --bench kernel -- acquire_release   # one group
//! ```
//!
//! Groups: `acquire_release/<N>` (one intent, N unrelated active leases),
//! `policy_uncontended/<policy>` (one intent on an empty kernel, asked with `wait: true`, under
//! wait_die and detect: issue 26's bound is detect within 5% of wait_die), `batch8/<N>`,
//! `hierarchical/{depth6,directory}`, `contended/<policy>` (the virtual-time swarm of
//! 1,000 sessions over 10,000 Zipf-skewed resources; one iteration = one bounded run).

#[path = "../examples/common/mod.rs"]
mod common;

use common::fixtures::{self, DEEP, DIRECTORY, EIGHT, ONE};
use common::sim::{self, SimConfig};
use common::workloads::ZipfWorkload;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use klock_core::{Kernel, Policy};
use std::time::Duration;

fn acquire_release(c: &mut Criterion) {
    let mut group = c.benchmark_group("acquire_release");
    group.throughput(Throughput::Elements(1));
    for others in [0, 1_000, 100_000, 1_000_000] {
        // Built on first use, so a size filtered out on the command line costs nothing.
        let mut kernel: Option<Kernel> = None;
        group.bench_function(BenchmarkId::from_parameter(others), |b| {
            let kernel = kernel.get_or_insert_with(|| fixtures::kernel_with_others(others));
            b.iter_custom(|iters| fixtures::timed_pairs(kernel, &ONE, iters))
        });
    }
    group.finish();
}

fn policy_uncontended(c: &mut Criterion) {
    let mut group = c.benchmark_group("policy_uncontended");
    group.throughput(Throughput::Elements(1));
    for policy in [Policy::WaitDie, Policy::Detect] {
        let mut kernel = fixtures::kernel_under(policy);
        group.bench_function(policy.name(), |b| {
            b.iter_custom(|iters| {
                fixtures::timed_pairs_with(&mut kernel, &ONE, iters, fixtures::waiting_options())
            })
        });
    }
    group.finish();
}

fn batch8(c: &mut Criterion) {
    let mut group = c.benchmark_group("batch8");
    group.throughput(Throughput::Elements(1));
    for others in [0, 100_000] {
        let mut kernel: Option<Kernel> = None;
        group.bench_function(BenchmarkId::from_parameter(others), |b| {
            let kernel = kernel.get_or_insert_with(|| fixtures::kernel_with_others(others));
            b.iter_custom(|iters| fixtures::timed_pairs(kernel, &EIGHT, iters))
        });
    }
    group.finish();
}

fn hierarchical(c: &mut Criterion) {
    let mut group = c.benchmark_group("hierarchical");
    group.throughput(Throughput::Elements(1));
    let mut kernel: Option<Kernel> = None;
    for (name, intents) in [("depth6", &DEEP), ("directory", &DIRECTORY)] {
        group.bench_function(name, |b| {
            let kernel = kernel.get_or_insert_with(|| fixtures::hierarchical_kernel(1_000));
            b.iter_custom(|iters| fixtures::timed_pairs(kernel, intents, iters))
        });
    }
    group.finish();
}

fn contended(c: &mut Criterion) {
    let mut group = c.benchmark_group("contended");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10))
        .warm_up_time(Duration::from_secs(1));
    for policy in Policy::ALL {
        let cfg = SimConfig {
            policy,
            agents: 1_000,
            horizon_ms: 600_000,
            attempts: 5_000,
            seed: 1,
            ttl_ms: 60_000,
            wait_timeout_ms: 5_000,
            ..SimConfig::default()
        };
        // One iteration = one whole run (same seed, same work); its counts, once.
        let mut reported = false;
        group.bench_function(policy.name(), |b| {
            if !reported {
                reported = true;
                let once = sim::run(&cfg, &mut ZipfWorkload::new(10_000, 0.8), |_| {});
                eprintln!(
                    "contended/{}: {} attempts → {} commits, {} WAIT, {} DIE, {} DIED, {} timeouts, {} WOUNDED, deadlocks {}",
                    policy.name(),
                    once.attempts,
                    once.commits,
                    once.waits,
                    once.dies,
                    once.died_events,
                    once.timeouts,
                    once.wounds,
                    once.total_deadlocks()
                );
            }
            b.iter(|| sim::run(&cfg, &mut ZipfWorkload::new(10_000, 0.8), |_| {}))
        });
    }
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20)
}

criterion_group! { name = benches; config = config(); targets = acquire_release, policy_uncontended, batch8, hierarchical, contended }
criterion_main!(benches);
