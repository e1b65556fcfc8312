//! Issue 26's comparison of `detect` with `wait_die` on the swarm's workload (the `swarm`
//! example's file tree, agents and defaults), run by the bench report.
//!
//! Contract: [`swarm_config`] is the `swarm` example's default run (64 agents, 3,600 virtual
//! seconds, 5‰ stalls past the TTL, a snapshot check every 500 attempts), which the example
//! itself starts from; [`compare`] runs it under `wait_die` and under `detect` with each of
//! the same seeds, one after the other, so the two columns see the same agents' plans.
//! [`Totals`] sums a policy's runs: deaths (DIE verdicts and DIED events) per commit, commits
//! per virtual second (the agents' throughput) and per wall second (the kernel's), deadlocks.

use super::sim::{self, Outcome, SimConfig};
use super::workloads::TreeWorkload;
use klock_core::Policy;

/// The swarm's file tree: 8 modules × 4 packages × 16 files.
pub fn swarm_workload() -> TreeWorkload {
    TreeWorkload::new(8, 4, 16)
}

/// The `swarm` example's default run (its flags change it from here).
pub fn swarm_config() -> SimConfig {
    SimConfig {
        horizon_ms: 3_600_000,
        stall_per_mille: 5,
        check_every: 500,
        ..SimConfig::default()
    }
}

/// One seed's runs: `wait_die`, then `detect`.
pub struct Pair {
    pub seed: u64,
    pub wait_die: Outcome,
    pub detect: Outcome,
}

/// Runs [`swarm_config`] with `horizon_ms` under both policies for every seed.
pub fn compare(seeds: &[u64], horizon_ms: u64, mut progress: impl FnMut(&str)) -> Vec<Pair> {
    seeds
        .iter()
        .map(|&seed| {
            let mut run = |policy: Policy| {
                let cfg = SimConfig {
                    policy,
                    seed,
                    horizon_ms,
                    ..swarm_config()
                };
                let name = policy.name();
                sim::run(&cfg, &mut swarm_workload(), |f| {
                    progress(&format!("swarm seed {seed}, {name}: {:.0}%", f * 100.0))
                })
            };
            Pair {
                seed,
                wait_die: run(Policy::WaitDie),
                detect: run(Policy::Detect),
            }
        })
        .collect()
}

/// A policy's runs summed.
#[derive(Default)]
pub struct Totals {
    pub commits: u64,
    pub deaths: u64,
    pub virtual_ms: u64,
    pub wall_s: f64,
    pub deadlocks: u64,
    pub healthy: bool,
}

impl Totals {
    pub fn of<'a>(runs: impl IntoIterator<Item = &'a Outcome>) -> Totals {
        let mut t = Totals {
            healthy: true,
            ..Totals::default()
        };
        for o in runs {
            t.commits += o.commits;
            t.deaths += deaths(o);
            t.virtual_ms += o.virtual_ms;
            t.wall_s += o.wall.as_secs_f64();
            t.deadlocks += o.total_deadlocks();
            t.healthy &= o.healthy();
        }
        t
    }

    pub fn deaths_per_commit(&self) -> f64 {
        self.deaths as f64 / self.commits.max(1) as f64
    }

    pub fn commits_per_virtual_sec(&self) -> f64 {
        self.commits as f64 * 1000.0 / self.virtual_ms.max(1) as f64
    }

    pub fn commits_per_wall_sec(&self) -> f64 {
        self.commits as f64 / self.wall_s.max(1e-9)
    }
}

/// What a run's retries cost its agents: DIE verdicts and DIED events.
pub fn deaths(o: &Outcome) -> u64 {
    o.dies + o.died_events
}
