//! The kernel's hot path against its floor (issue 15): allocations per uncontended
//! acquire+release pair, its time ÷ a bare `HashMap<String, u64>` insert+remove at 0 and
//! 100,000 other leases, and allocations of contended verdicts. The same section is part of
//! `bench/REPORT.md` (written by the `bench_report` example); this prints it alone, quickly.
//!
//! ```text
//! cargo run --release -p klock-core --example hot_path              # a few seconds
//! cargo run --release -p klock-core --example hot_path -- --trace   # each allocation of a pair
//! ```

#[path = "common/mod.rs"]
mod common;

use common::counting::Counting;
use common::{fixtures, hot_path};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--trace") {
        for others in [0, 100_000] {
            eprintln!("=== one pair with {others} other leases");
            let mut kernel = fixtures::kernel_with_others(others);
            hot_path::trace_one_pair(&mut kernel, &fixtures::ONE);
        }
        return;
    }
    let rounds = args
        .iter()
        .position(|a| a == "--rounds")
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(31);
    let mut zero = fixtures::kernel_with_others(0);
    let mut full = fixtures::kernel_with_others(100_000);
    let mut kernels = [(0, &mut zero), (100_000, &mut full)];
    let m = hot_path::measure(&mut kernels, rounds, 10_000, |what| eprintln!("{what}"));
    println!("{}", hot_path::target_rows(&m));
    println!("{}", hot_path::section(&m));
}
