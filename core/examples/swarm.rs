//! A swarm of agents contending for a shared source tree, on virtual time, under each policy.
//!
//! ```text
//! cargo run --release -p klock-core --example swarm
//! cargo run --release -p klock-core --example swarm -- --agents 200 --steps 100000 --policy wound_wait --seed 7
//! ```
//!
//! Agents edit files (MUTATES), read them (CONSUMES), review whole modules (CONSUMES on a
//! directory), delete packages (DELETES on a directory) and rename modules (RENAMES), with
//! Zipf-skewed popularity; a few stall past their TTL so their leases expire. The run prints
//! a progress line on stderr and a table on stdout; it exits 1 if any check failed (a
//! deadlock, conflicting holders, a policy-order violation, a kernel error), 2 on bad flags.

#[path = "common/mod.rs"]
mod common;

use common::policies;
use common::sim::{self, Outcome, SimConfig};
use klock_core::Policy;
use std::io::Write;
use std::process::ExitCode;

const USAGE: &str = "\
usage: swarm [--agents N] [--seconds S] [--steps N] [--policy wait_die|wound_wait|lanes|detect|all]
             [--seed S] [--stall PER_MILLE] [--check-every N] [--verbose]

  --agents N        agents (sessions) contending, default 64
  --seconds S       virtual seconds per policy (then the run drains), default 3600
  --steps N         stop earlier after N acquire attempts per policy, default no limit
  --policy P        one policy, or all (default) to run each in turn
  --seed S          workload and kernel seed, default 1
  --stall PER_MILLE grants after which the agent stalls past its TTL, default 5
  --check-every N   attempts between deadlock/safety checks of the snapshot, default 500
  --verbose         print every counter of each run on stderr";

struct Args {
    sim: SimConfig,
    policies: Vec<Policy>,
    verbose: bool,
}

fn parse_args(args: &[String]) -> Result<Option<Args>, String> {
    let mut sim = policies::swarm_config();
    let mut policies = Policy::ALL.to_vec();
    let mut verbose = false;
    let mut i = 0;
    while i < args.len() {
        let flag = args[i].as_str();
        if flag == "--help" || flag == "-h" {
            return Ok(None);
        }
        if flag == "--verbose" {
            verbose = true;
            i += 1;
            continue;
        }
        let value = args
            .get(i + 1)
            .ok_or_else(|| format!("{flag} needs a value"))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| format!("{flag} needs a non-negative integer, got {value:?}"))
        };
        match flag {
            "--agents" => {
                sim.agents = number()? as usize;
                if sim.agents == 0 || sim.agents > 100_000 {
                    return Err(format!("--agents must be 1..=100000, got {value}"));
                }
            }
            "--steps" => sim.attempts = number()?,
            "--seconds" => sim.horizon_ms = number()?.saturating_mul(1000),
            "--seed" => sim.seed = number()?,
            "--stall" => {
                sim.stall_per_mille = number()?;
                if sim.stall_per_mille > 1000 {
                    return Err(format!("--stall is per mille (0..=1000), got {value}"));
                }
            }
            "--check-every" => sim.check_every = number()?,
            "--policy" => {
                policies = if value == "all" {
                    policies
                } else {
                    vec![Policy::parse(value).map_err(|e| e.message)?]
                }
            }
            _ => return Err(format!("unknown flag {flag:?}")),
        }
        i += 2;
    }
    Ok(Some(Args {
        sim,
        policies,
        verbose,
    }))
}

fn main() -> ExitCode {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let args = match parse_args(&raw) {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("swarm: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let files = policies::swarm_workload().file_count();
    println!(
        "swarm: {} agents, {} virtual s per policy{}, seed {}, {} files in 8 modules × 4 packages, stall {}‰",
        args.sim.agents,
        args.sim.horizon_ms / 1000,
        if args.sim.attempts == u64::MAX { String::new() } else { format!(" (at most {} attempts)", args.sim.attempts) },
        args.sim.seed,
        files,
        args.sim.stall_per_mille
    );
    let mut outcomes: Vec<Outcome> = Vec::new();
    for &policy in &args.policies {
        let cfg = SimConfig {
            policy,
            ..args.sim.clone()
        };
        let mut workload = policies::swarm_workload();
        let name = policy.name();
        let outcome = sim::run(&cfg, &mut workload, |done| {
            eprint!("\r[{name}] {:3.0}% ", done * 100.0);
            let _ = std::io::stderr().flush();
        });
        eprint!("\r{:40}\r", "");
        if args.verbose {
            eprintln!("\r{outcome:#?}");
        }
        outcomes.push(outcome);
    }
    print_table(&outcomes);
    let mut healthy = true;
    for o in &outcomes {
        if !o.healthy() {
            healthy = false;
            let name = o.policy.map_or("?", Policy::name);
            println!("\n{name}: CHECK FAILED: {o:#?}");
        }
    }
    if healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn print_table(outcomes: &[Outcome]) {
    println!();
    println!(
        "| policy | commits | commits per agent (min–max) | waits | deaths (DIE+DIED) | deaths per commit | timeouts | wounds (holds lost) | expired | max ticket wait (virtual ms) | worst task wait (virtual ms) | commits / virtual s | commits / wall s | checks | deadlocks |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for o in outcomes {
        println!(
            "| {} | {} | {}–{} | {} | {} | {:.3} | {} | {} ({}) | {} | {} | {} | {:.1} | {:.0} | {} | {} |",
            o.policy.map_or("?", Policy::name),
            o.commits,
            o.agent_commits.iter().min().unwrap_or(&0),
            o.agent_commits.iter().max().unwrap_or(&0),
            o.waits,
            o.dies + o.died_events,
            // What a retry costs an agent (issue 26: detect kills only on a real cycle).
            (o.dies + o.died_events) as f64 / o.commits.max(1) as f64,
            o.timeouts,
            o.wounds,
            o.aborted_holds,
            o.expired,
            o.max_wait_ms,
            o.max_task_wait_ms,
            o.commits_per_virtual_sec(),
            o.commits_per_wall_sec(),
            o.checks,
            o.total_deadlocks(),
        );
    }
}
