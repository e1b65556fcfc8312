//! Measures the kernel and writes `bench/REPORT.md` (DESIGN.md §6).
//!
//! ```text
//! cargo run --release -p klock-core --example bench_report            # ~1 minute
//! cargo run --release -p klock-core --example bench_report -- --quick # smoke run, no 1M
//! cargo run --release -p klock-core --example bench_report -- --out /tmp/REPORT.md
//! ```
//!
//! Benchmarks are programs, not tests: this never fails because of a number; it reports
//! each target as met or missed. Machines here are shared and noisy, so costs that are
//! compared are measured in one run, interleaved round by round (0, 1k, 100k, 1M, 0, 1k, ...),
//! and reported as medians and as the median of per-round ratios.
//!
//! Memory and allocations are counted by a counting global allocator (`common/counting.rs`):
//! bytes requested and not yet freed (allocator overhead and fragmentation not included), and
//! allocation calls. The hot-path section (issue 15) is `common/hot_path.rs`, also printed
//! alone by the `hot_path` example. The report's last section, from `## Friendly clients`
//! on, is the hosts' own (their benches measure it) and is kept as it was.

#[path = "common/mod.rs"]
mod common;

/// The heading of the report's last section, which this program does not write and keeps.
const CLIENTS_SECTION: &str = "## Friendly clients";

use common::counting::{live, Counting};
use common::fairness;
use common::fixtures::{self, DEEP, DIRECTORY, EIGHT, ONE};
use common::hot_path;
use common::policies::{self, Totals};
use common::sim::{self, Outcome, SimConfig};
use common::workloads::ZipfWorkload;
use klock_core::{Kernel, Policy};
use std::fmt::Write as _;
use std::io::Write as _;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

struct Plan {
    levels: Vec<usize>,
    rounds: usize,
    pairs_per_round: u64,
    contended_attempts: u64,
    contended_budget: Duration,
    memory_sizes: Vec<usize>,
    /// Seeds of the detect-against-wait_die runs of the swarm's workload (issue 26).
    detect_seeds: Vec<u64>,
    /// Virtual ms of each of those runs.
    swarm_horizon_ms: u64,
    out: std::path::PathBuf,
}

fn parse_args() -> Result<Plan, String> {
    let mut plan = Plan {
        levels: vec![0, 1_000, 100_000, 1_000_000],
        rounds: 15,
        pairs_per_round: 20_000,
        contended_attempts: 300_000,
        contended_budget: Duration::from_secs(12),
        memory_sizes: vec![100_000, 1_000_000],
        detect_seeds: vec![1, 2, 3],
        swarm_horizon_ms: policies::swarm_config().horizon_ms,
        out: std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/REPORT.md"),
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--quick" => {
                plan.levels = vec![0, 1_000, 100_000];
                plan.rounds = 5;
                plan.pairs_per_round = 5_000;
                plan.contended_attempts = 30_000;
                plan.contended_budget = Duration::from_secs(4);
                plan.memory_sizes = vec![100_000];
                plan.detect_seeds = vec![1];
                plan.swarm_horizon_ms = 300_000;
            }
            "--out" => {
                i += 1;
                plan.out = args.get(i).ok_or("--out needs a path")?.into();
            }
            "--help" | "-h" => return Err(String::new()),
            other => return Err(format!("unknown flag {other:?}")),
        }
        i += 1;
    }
    Ok(plan)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn ns_per(d: Duration, n: u64) -> f64 {
    d.as_nanos() as f64 / n as f64
}

fn per_sec(ns: f64) -> String {
    group(1e9 / ns)
}

/// `1234567.8` → `1,234,568`.
fn group(x: f64) -> String {
    let digits = format!("{:.0}", x);
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn status(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "**missed**"
    }
}

fn progress(what: &str) {
    eprint!("\r{:60}\r{what}", "");
    let _ = std::io::stderr().flush();
}

fn command_line(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let rustc = command_line("rustc", &["-V"]).unwrap_or_else(|| "unknown".into());
    let date =
        command_line("date", &["-u", "+%Y-%m-%d %H:%M UTC"]).unwrap_or_else(|| "unknown".into());
    let commit = command_line(
        "git",
        &[
            "-C",
            env!("CARGO_MANIFEST_DIR"),
            "rev-parse",
            "--short",
            "HEAD",
        ],
    )
    .unwrap_or_else(|| "unknown".into());
    let dirty = command_line(
        "git",
        &[
            "-C",
            env!("CARGO_MANIFEST_DIR"),
            "status",
            "--porcelain",
            "--",
            "src",
        ],
    )
    .is_some_and(|s| !s.is_empty());
    let load = std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into());
    format!(
        "- date: {date}\n- machine: {nproc} CPUs available, {cpu}; load average at start {load} \
         (a load above the CPU count means other work shared the CPUs: absolute numbers are \
         then low, ratios still hold)\n- compiler: {rustc}, release profile\n- kernel: klock-core {} at commit {commit}{}\n",
        env!("CARGO_PKG_VERSION"),
        if dirty { " (core/src modified)" } else { "" }
    )
}

struct Scaling {
    level: usize,
    ns: f64,
    ratio: f64,
}

/// Single-intent acquire+release at every level, interleaved round by round.
fn scaling(plan: &Plan, kernels: &mut [(usize, Kernel)]) -> Vec<Scaling> {
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); kernels.len()];
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); kernels.len()];
    for round in 0..plan.rounds {
        progress(&format!(
            "single-intent pairs: round {}/{}",
            round + 1,
            plan.rounds
        ));
        let mut this_round = Vec::new();
        for (i, (_, kernel)) in kernels.iter_mut().enumerate() {
            let ns = ns_per(
                fixtures::timed_pairs(kernel, &ONE, plan.pairs_per_round),
                plan.pairs_per_round,
            );
            samples[i].push(ns);
            this_round.push(ns);
        }
        for (i, ns) in this_round.iter().enumerate() {
            ratios[i].push(ns / this_round[0]);
        }
    }
    kernels
        .iter()
        .enumerate()
        .map(|(i, (level, _))| Scaling {
            level: *level,
            ns: median(&mut samples[i]),
            ratio: median(&mut ratios[i]),
        })
        .collect()
}

/// Median ns per operation of `intents` pairs on `kernel`.
fn pairs(kernel: &mut Kernel, intents: &[&str], rounds: usize, per_round: u64) -> f64 {
    let mut samples: Vec<f64> = (0..rounds)
        .map(|_| ns_per(fixtures::timed_pairs(kernel, intents, per_round), per_round))
        .collect();
    median(&mut samples)
}

/// Uncontended single-intent pairs asked with `wait: true` under wait_die and detect, on
/// empty kernels, interleaved round by round (the order alternating): the median ns of each
/// and the median of the per-round ratios detect ÷ wait_die.
fn uncontended_by_policy(plan: &Plan) -> (f64, f64, f64) {
    let mut kernels = [
        fixtures::kernel_under(Policy::WaitDie),
        fixtures::kernel_under(Policy::Detect),
    ];
    let (mut wd, mut dt, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..plan.rounds {
        progress(&format!(
            "uncontended pairs by policy: round {}/{}",
            round + 1,
            plan.rounds
        ));
        let mut ns = [0.0; 2];
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            let d = fixtures::timed_pairs_with(
                &mut kernels[i],
                &ONE,
                plan.pairs_per_round,
                fixtures::waiting_options(),
            );
            ns[i] = ns_per(d, plan.pairs_per_round);
        }
        wd.push(ns[0]);
        dt.push(ns[1]);
        ratios.push(ns[1] / ns[0]);
    }
    (median(&mut wd), median(&mut dt), median(&mut ratios))
}

fn contended(plan: &Plan) -> Vec<Outcome> {
    Policy::ALL
        .into_iter()
        .map(|policy| {
            let cfg = SimConfig {
                policy,
                agents: 1_000,
                horizon_ms: 600_000,
                attempts: plan.contended_attempts,
                wall_budget: Some(plan.contended_budget),
                seed: 1,
                ttl_ms: 60_000,
                wait_timeout_ms: 5_000,
                stall_per_mille: 0,
                check_every: plan.contended_attempts / 10,
            };
            let mut workload = ZipfWorkload::new(10_000, 0.8);
            let name = policy.name();
            sim::run(&cfg, &mut workload, |f| {
                progress(&format!("contended {name}: {:.0}%", f * 100.0))
            })
        })
        .collect()
}

fn main() -> ExitCode {
    let plan = match parse_args() {
        Ok(plan) => plan,
        Err(message) => {
            if !message.is_empty() {
                eprintln!("bench_report: {message}");
            }
            eprintln!("usage: bench_report [--quick] [--out PATH]");
            return ExitCode::from(2);
        }
    };
    let started = Instant::now();
    let mut report = String::new();
    let _ = writeln!(report, "# klock-core benchmark report\n");
    let _ =
        writeln!(
        report,
        "Written by `cargo run --release -p klock-core --example bench_report`{}. Benchmarks are \
         programs, not tests: numbers vary with the machine and its load; compare ratios measured \
         in one run. Criterion versions of these measurements: `cargo bench -p klock-core`.\n",
        if plan.levels.len() < 4 { " (`--quick`)" } else { "" }
    );
    report.push_str(&machine());

    // Build the kernels, measuring the memory each filler lease costs.
    let mut kernels: Vec<(usize, Kernel)> = Vec::new();
    let mut memory: Vec<(usize, f64, Duration)> = Vec::new();
    for &level in &plan.levels {
        progress(&format!("filling a kernel with {level} leases"));
        let before = live();
        let t = Instant::now();
        let kernel = fixtures::kernel_with_others(level);
        let fill = t.elapsed();
        if plan.memory_sizes.contains(&level) {
            memory.push((level, (live() - before) as f64 / level as f64, fill));
        }
        kernels.push((level, kernel));
    }
    let scaling = scaling(&plan, &mut kernels);

    let hot = {
        let mut levels: Vec<(usize, &mut Kernel)> = kernels
            .iter_mut()
            .filter(|(level, _)| *level == 0 || *level == 100_000)
            .map(|(level, kernel)| (*level, kernel))
            .collect();
        hot_path::measure(&mut levels, plan.rounds, plan.pairs_per_round, progress)
    };

    progress("batches of 8");
    let (batch_rounds, batch_per_round) = (plan.rounds.min(9), plan.pairs_per_round / 8);
    let batch_at: Vec<(usize, f64)> = kernels
        .iter_mut()
        .filter(|(level, _)| *level == 0 || *level == 100_000)
        .map(|(level, kernel)| (*level, pairs(kernel, &EIGHT, batch_rounds, batch_per_round)))
        .collect();

    progress("retained memory per released lease");
    let retained = {
        let kernel = &mut kernels[0].1;
        let session = fixtures::bench_session(kernel);
        let n = 100_000;
        let before = live();
        for _ in 0..n {
            fixtures::acquire_release(kernel, session, &ONE);
        }
        let grown = (live() - before) as f64 / n as f64;
        kernel
            .close_session(session, fixtures::NOW)
            .expect("open session");
        let after_close = (live() - before) as f64 / n as f64;
        (grown, after_close)
    };
    drop(kernels);

    progress("hierarchical");
    let mut tree = fixtures::hierarchical_kernel(1_000);
    let deep = pairs(&mut tree, &DEEP, 9, plan.pairs_per_round);
    let directory = pairs(&mut tree, &DIRECTORY, 9, plan.pairs_per_round / 20);
    drop(tree);

    let outcomes = contended(&plan);
    progress("fairness of long-lived agents");
    let fair: Vec<Outcome> = Policy::ALL.into_iter().map(fairness::run).collect();
    let uncontended = uncontended_by_policy(&plan);
    let pairs = policies::compare(&plan.detect_seeds, plan.swarm_horizon_ms, progress);
    let wait_die = Totals::of(pairs.iter().map(|p| &p.wait_die));
    let detect = Totals::of(pairs.iter().map(|p| &p.detect));
    progress("");

    // ---- the report ----
    let at = |level: usize| scaling.iter().find(|s| s.level == level);
    let _ = writeln!(report, "\n## Targets\n");
    let _ = writeln!(report, "| target | measured | status |\n|---|---|---|");
    if let Some(s) = at(100_000) {
        let rate = 1e9 / s.ns;
        let _ = writeln!(
            report,
            "| ≥ 1,000,000 acquire+release pairs/s with 100k other active leases | {} pairs/s | {} |",
            group(rate),
            status(rate >= 1e6)
        );
    }
    if let Some(s) = at(1_000_000) {
        let _ = writeln!(
            report,
            "| per-pair cost with 1M other leases ≤ 3× the cost with 0 | {:.2}× | {} |",
            s.ratio,
            status(s.ratio <= 3.0)
        );
    }
    report.push_str(&hot_path::target_rows(&hot));
    for (level, bytes, _) in &memory {
        let _ = writeln!(
            report,
            "| ≤ 300 bytes per active lease ({} leases) | {bytes:.0} B | {} |",
            group(*level as f64),
            status(*bytes <= 300.0)
        );
    }
    for o in &fair {
        let _ = writeln!(
            report,
            "| {} long-lived agents, {}: fewest commits ≥ {:.0}% of the mean | {:.0}% | {} |",
            fairness::AGENTS,
            o.policy.map_or("?", Policy::name),
            fairness::TARGET * 100.0,
            o.fairness() * 100.0,
            status(o.fairness() >= fairness::TARGET && o.healthy())
        );
    }
    let seeds = plan
        .detect_seeds
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    // No death at all under detect has no finite ratio: say so instead of dividing by zero.
    let fewer = match detect.deaths {
        0 => "no deaths under detect".to_string(),
        _ => format!(
            "{:.1}× fewer",
            wait_die.deaths_per_commit() / detect.deaths_per_commit()
        ),
    };
    let fewer_met = detect.deaths_per_commit() * 5.0 <= wait_die.deaths_per_commit();
    let _ = writeln!(
        report,
        "| detect: uncontended acquire+release (`wait: true`) ≤ 1.05× wait_die's | {:.3}× ({:.0} vs {:.0} ns) | {} |",
        uncontended.2,
        uncontended.1,
        uncontended.0,
        status(uncontended.2 <= 1.05)
    );
    let _ = writeln!(
        report,
        "| detect: deaths per commit on the swarm's workload ≥ 5× fewer than wait_die (seeds {seeds}) | {fewer} ({:.4} vs {:.4}) | {} |",
        detect.deaths_per_commit(),
        wait_die.deaths_per_commit(),
        status(fewer_met)
    );
    let _ = writeln!(
        report,
        "| detect: commits per virtual s on the swarm's workload no lower than wait_die's | {:.2} vs {:.2} | {} |",
        detect.commits_per_virtual_sec(),
        wait_die.commits_per_virtual_sec(),
        status(detect.commits_per_virtual_sec() >= wait_die.commits_per_virtual_sec())
    );
    let _ = writeln!(
        report,
        "| detect: deadlocks = 0 on the swarm's workload | {} (checks {}) | {} |",
        detect.deadlocks,
        if detect.healthy { "clean" } else { "NOT clean" },
        status(detect.deadlocks == 0 && detect.healthy)
    );
    let deadlocks: u64 = outcomes.iter().map(Outcome::total_deadlocks).sum();
    let healthy = outcomes.iter().all(Outcome::healthy);
    let _ = writeln!(
        report,
        "| deadlocks = 0 under contention, every policy | {deadlocks} (safety/order/errors {}) | {} |",
        if healthy { "clean" } else { "NOT clean" },
        status(deadlocks == 0 && healthy)
    );

    let _ = writeln!(
        report,
        "\n## Acquire + release of one intent vs. unrelated active leases\n\n\
         `MUTATES FILE:/bench/x`, granted and released (`release` of its lease) by one session \
         while other sessions hold N leases on `FILE:/fill/d<i/1000>/f<i%1000>` (1,000 per \
         session). {} rounds of {} pairs, interleaved across N; a fresh session per round.\n",
        plan.rounds,
        group(plan.pairs_per_round as f64)
    );
    let _ = writeln!(report, "| other active leases | ns / pair (median) | pairs / s | cost ÷ cost at 0 (median of per-round ratios) |");
    let _ = writeln!(report, "|---:|---:|---:|---:|");
    for s in &scaling {
        let _ = writeln!(
            report,
            "| {} | {:.0} | {} | {:.2}× |",
            group(s.level as f64),
            s.ns,
            per_sec(s.ns),
            s.ratio
        );
    }

    let _ = writeln!(report, "\n{}", hot_path::section(&hot));

    let _ = writeln!(report, "\n## Other shapes\n");
    let _ = writeln!(
        report,
        "| operation | ns / op (median) | ops / s |\n|---|---:|---:|"
    );
    for (level, ns) in &batch_at {
        let _ = writeln!(
            report,
            "| batch of 8 intents (acquire 8 + `release_all`), {} other leases | {ns:.0} | {} |",
            group(*level as f64),
            per_sec(*ns)
        );
    }
    let _ = writeln!(
        report,
        "| `MUTATES FILE:/a/b/c/d/e/f` (depth 6), 1,000 sibling leases at each of 5 levels | {deep:.0} | {} |",
        per_sec(deep)
    );
    let _ = writeln!(
        report,
        "| `CONSUMES FILE:/a/b/c/d/e` over 1,000 compatible holders below it (subtree walk) | {directory:.0} | {} |",
        per_sec(directory)
    );

    let _ = writeln!(
        report,
        "\n## Memory\n\nLive bytes requested from the allocator (counting global allocator), after \
         minus before, divided by the count.\n"
    );
    let _ = writeln!(report, "| what | bytes each | fill time |\n|---|---:|---:|");
    for (level, bytes, fill) in &memory {
        let _ = writeln!(
            report,
            "| active lease, {} leases on distinct resources (node, lease record, indexes, session set) | {bytes:.0} | {:.2} s ({} leases/s) |",
            group(*level as f64),
            fill.as_secs_f64(),
            group(*level as f64 / fill.as_secs_f64())
        );
    }
    let _ = writeln!(
        report,
        "| released lease, remembered by its still-open session (100,000 acquire+release pairs) | {:.0} | |",
        retained.0
    );
    let _ = writeln!(
        report,
        "| the same after the session closes | {:.0} | |",
        retained.1
    );

    let _ = writeln!(
        report,
        "\n## Contended workload per policy\n\n\
         1,000 sessions, 10,000 resources `FILE:/r/<rank>` with Zipf(0.8) popularity, batches \
         of 1–8 intents (75% MUTATES, 25% CONSUMES), hold 20–200 virtual ms, think 0–100 ms, \
         wait timeout 5 s, DIE, DIED or WOUNDED → sleep the kernel's `retry_after_ms` and retry, one \
         session per agent for the whole run. \
         Virtual time (the event loop calls `advance` at `next_deadline`); up to {} acquire \
         attempts, 600 virtual s or {} s of wall time (runs cut by wall time are marked ✂), then \
         drained. Wall time excludes the {} snapshot checks \
         (wait-for cycles, waiters with no blocker, conflicting holders, policy order).\n",
        group(plan.contended_attempts as f64),
        plan.contended_budget.as_secs(),
        outcomes.first().map_or(0, |o| o.checks)
    );
    let _ = writeln!(
        report,
        "| policy | commits / wall s | kernel calls / wall s | commits / virtual s | attempts | commits | granted at once | WAIT | DIE | DIED | timeouts | WOUNDED (holds lost) | max wait (virtual ms) | deadlocks |"
    );
    let _ = writeln!(
        report,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for o in &outcomes {
        let _ = writeln!(
            report,
            "| {}{} | {} | {} | {:.1} | {} | {} | {} | {} | {} | {} | {} | {} ({}) | {} | {} |",
            o.policy.map_or("?", Policy::name),
            if o.cut_by_wall_budget { " ✂" } else { "" },
            group(o.commits_per_wall_sec()),
            group(o.kernel_calls as f64 / o.wall.as_secs_f64().max(1e-9)),
            o.commits_per_virtual_sec(),
            o.attempts,
            o.commits,
            o.granted_at_once,
            o.waits,
            o.dies,
            o.died_events,
            o.timeouts,
            o.wounds,
            o.aborted_holds,
            o.max_wait_ms,
            o.total_deadlocks()
        );
    }
    let _ = writeln!(
        report,
        "\n## Fairness: long-lived agents\n\n\
         docs/SPEC.md rev 4 gives every unit of work its own priority. {} agents, each keeping one \
         session for the whole run, edit 1–2 of {} hot files (`MUTATES FILE:/hot/<i>`), hold \
         5–50 virtual ms, think 0–10 ms, {} virtual s, seed {}. A task's wait runs from its \
         first attempt to its grant (DIEs, backoffs and waits included). The same scenario is \
         asserted by `core/tests/fairness.rs` (fewest ≥ {:.0}% of the mean). Before rev 4 \
         (priority per session) the oldest agent took nearly everything: the same run gave \
         wait_die 2–1,511 commits per agent and wound_wait 0–1,828.\n",
        fairness::AGENTS,
        fairness::HOT_FILES,
        fairness::VIRTUAL_MS / 1000,
        fairness::SEED,
        fairness::TARGET * 100.0
    );
    let _ = writeln!(
        report,
        "| policy | commits | per agent min | per agent max | mean | min ÷ mean | worst task wait (virtual ms) | deadlocks |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|"
    );
    for o in &fair {
        let mean = o.commits as f64 / o.agent_commits.len().max(1) as f64;
        let _ = writeln!(
            report,
            "| {} | {} | {} | {} | {mean:.1} | {:.2} | {} | {} |",
            o.policy.map_or("?", Policy::name),
            o.commits,
            o.agent_commits.iter().min().unwrap_or(&0),
            o.agent_commits.iter().max().unwrap_or(&0),
            o.fairness(),
            o.max_task_wait_ms,
            o.total_deadlocks()
        );
    }
    let _ = writeln!(
        report,
        "\n## Policy detect against wait_die (issue 26)\n\n\
         Deaths cost agents real work: under wait_die a younger request dies whenever an older \
         unit holds what it wants; under detect everyone waits and only a real cycle of waiters \
         is broken (docs/SPEC.md §6.1). The swarm's workload (`cargo run --release -p klock-core \
         --example swarm`: {} agents on a tree of 8 modules × 4 packages × 16 files, edits, \
         reads, module reviews, package deletions and renames, Zipf-skewed, {}‰ of grants \
         stalled past the TTL, a snapshot check every {} attempts), {} virtual s per run, \
         under each policy with the same seeds ({seeds}). Deaths = DIE verdicts + DIED events; \
         throughput = commits per virtual second (the agents' time), and per wall second (the \
         kernel's own speed, with checks excluded).\n",
        policies::swarm_config().agents,
        policies::swarm_config().stall_per_mille,
        policies::swarm_config().check_every,
        plan.swarm_horizon_ms / 1000
    );
    let _ = writeln!(
        report,
        "| seed | policy | commits | waits | DIE | DIED | deaths per commit | timeouts | commits / virtual s | commits / wall s | worst task wait (virtual ms) | deadlocks |\n\
         |---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for pair in &pairs {
        for o in [&pair.wait_die, &pair.detect] {
            let _ = writeln!(
                report,
                "| {} | {} | {} | {} | {} | {} | {:.4} | {} | {:.2} | {} | {} | {} |",
                pair.seed,
                o.policy.map_or("?", Policy::name),
                o.commits,
                o.waits,
                o.dies,
                o.died_events,
                policies::deaths(o) as f64 / o.commits.max(1) as f64,
                o.timeouts,
                o.commits_per_virtual_sec(),
                group(o.commits_per_wall_sec()),
                o.max_task_wait_ms,
                o.total_deadlocks()
            );
        }
    }
    for (name, t) in [("wait_die", &wait_die), ("detect", &detect)] {
        let _ = writeln!(
            report,
            "| all | {name} | {} | | | | {:.4} | | {:.2} | {} | | {} |",
            t.commits,
            t.deaths_per_commit(),
            t.commits_per_virtual_sec(),
            group(t.commits_per_wall_sec()),
            t.deadlocks
        );
    }
    let _ = writeln!(
        report,
        "\nUncontended cost: one `MUTATES FILE:/bench/x` acquire+release pair asked with `wait: true` \
         on an empty kernel (nothing blocks it, so detect never searches the graph), {} rounds of {} \
         pairs alternating between the policies: wait_die {:.0} ns, detect {:.0} ns (medians), \
         detect ÷ wait_die {:.3}× (median of per-round ratios). Criterion: `cargo bench -p \
         klock-core --bench kernel -- policy_uncontended`. The fleet demo's deaths under both \
         policies are the section \"Fleet demo: detect vs wait_die\" at the end (`python3 bench/fleet.py`).",
        plan.rounds,
        group(plan.pairs_per_round as f64),
        uncontended.0,
        uncontended.1,
        uncontended.2
    );
    for o in outcomes
        .iter()
        .chain(&fair)
        .chain(pairs.iter().flat_map(|p| [&p.wait_die, &p.detect]))
        .filter(|o| !o.healthy())
    {
        let _ = writeln!(
            report,
            "\n**{} run not clean:**\n\n```\n{o:#?}\n```",
            o.policy.map_or("?", Policy::name)
        );
    }
    let _ = writeln!(
        report,
        "\nTotal run time: {:.0} s.",
        started.elapsed().as_secs_f64()
    );

    // The hosts' friendly clients are measured by their own benches (python/bench.py,
    // node/bench.mjs); their section of the report is kept as it is.
    if let Ok(old) = std::fs::read_to_string(&plan.out) {
        if let Some(at) = old.find(CLIENTS_SECTION) {
            let _ = write!(report, "\n{}", &old[at..]);
        }
    }
    if let Some(dir) = plan.out.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    match std::fs::write(&plan.out, &report) {
        Ok(()) => {
            println!("{report}");
            eprintln!("wrote {}", plan.out.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("{report}");
            eprintln!("bench_report: cannot write {}: {e}", plan.out.display());
            ExitCode::FAILURE
        }
    }
}
