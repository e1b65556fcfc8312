//! The fairness run of docs/SPEC.md rev 4: 32 long-lived agents (one session each, for the whole
//! run) on a hot spot of 4 files, 60 virtual seconds, seeded, under one policy. Shared by the
//! bench report (which writes the figures) and `core/tests/fairness.rs` (which holds the
//! target: the agent with the fewest commits has at least a quarter of the mean).

use super::sim::{self, Outcome, SimConfig};
use super::workloads::HotSpotWorkload;
use klock_core::Policy;

pub const AGENTS: usize = 32;
pub const HOT_FILES: usize = 4;
pub const VIRTUAL_MS: u64 = 60_000;
pub const SEED: u64 = 4;
/// The target: fewest commits of one agent ÷ mean commits per agent.
pub const TARGET: f64 = 0.25;

/// Runs the fairness scenario under `policy`.
pub fn run(policy: Policy) -> Outcome {
    let cfg = SimConfig {
        policy,
        agents: AGENTS,
        horizon_ms: VIRTUAL_MS,
        seed: SEED,
        ttl_ms: 60_000,
        wait_timeout_ms: 30_000,
        stall_per_mille: 0,
        check_every: 2_000,
        ..SimConfig::default()
    };
    sim::run(&cfg, &mut HotSpotWorkload::new(HOT_FILES), |_| {})
}
