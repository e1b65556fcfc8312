//! Code shared by the swarm example, the bench report and the criterion benches (each
//! includes this folder with `#[path]`, so nothing is duplicated and nothing is published).
//!
//! - [`rng`]: a deterministic generator and a Zipf sampler (no external dependency).
//! - [`invariants`]: safety and liveness checks over a kernel [`Snapshot`](klock_core::Snapshot)
//!   (also used by the `operations` fuzz target).
//! - [`sim`]: the virtual-time event loop that drives agents against one kernel.
//! - [`workloads`]: what the agents ask for (Zipf-skewed flat resources; a file tree).
//! - [`fixtures`]: kernels pre-filled with many unrelated leases, for the scaling benches.
//! - [`fairness`]: the long-lived-agents fairness scenario (bench report and test).
//! - [`counting`]: a counting global allocator (bench report, hot-path example).
//! - [`hot_path`]: allocations and time of the uncontended pair against a bare map (issue 15).
//! - [`policies`]: `detect` against `wait_die` on the swarm's workload (issue 26).

// Each includer uses a different subset.
#![allow(dead_code)]

pub mod counting;
pub mod fairness;
pub mod fixtures;
pub mod hot_path;
pub mod invariants;
pub mod policies;
pub mod rng;
pub mod sim;
pub mod workloads;
