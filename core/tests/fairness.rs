//! Starvation freedom with long-lived sessions (docs/SPEC.md §5, rev 4): 32 agents, each keeping
//! one session for the whole run, hammer 4 hot files for 60 virtual seconds under every
//! policy. Priority belongs to the unit of work, so no agent may starve: the agent with the
//! fewest commits must reach a quarter of the mean. Virtual time and a fixed seed make the
//! run deterministic; the figures are also written to `bench/REPORT.md` by the bench report.

#[path = "../examples/common/mod.rs"]
mod common;

use common::fairness;
use klock_core::Policy;

fn check(policy: Policy) {
    let o = fairness::run(policy);
    let min = o.agent_commits.iter().min().copied().unwrap_or(0);
    let max = o.agent_commits.iter().max().copied().unwrap_or(0);
    println!(
        "{}: {} commits, per agent {min}–{max}, fairness {:.2}, worst task wait {} ms",
        policy.name(),
        o.commits,
        o.fairness(),
        o.max_task_wait_ms
    );
    assert!(o.healthy(), "{}: unhealthy run: {o:#?}", policy.name());
    assert!(
        o.fairness() >= fairness::TARGET,
        "{}: the fewest commits of one agent ({min}) are {:.2} of the mean; the target is {}",
        policy.name(),
        o.fairness(),
        fairness::TARGET
    );
}

#[test]
fn long_lived_agents_do_not_starve_under_wait_die() {
    check(Policy::WaitDie);
}

#[test]
fn long_lived_agents_do_not_starve_under_wound_wait() {
    check(Policy::WoundWait);
}

#[test]
fn long_lived_agents_do_not_starve_under_lanes() {
    check(Policy::Lanes);
}

#[test]
fn long_lived_agents_do_not_starve_under_detect() {
    check(Policy::Detect);
}
