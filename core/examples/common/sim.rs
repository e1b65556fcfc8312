//! A deterministic virtual-time simulation: agents drive one kernel through the sans-IO
//! contract (DESIGN.md §2), exactly as a host would, but with a virtual clock.
//!
//! Contract:
//! - The loop jumps from event to event: the next agent wake-up or the kernel's
//!   `next_deadline()`, whichever comes first; it calls `advance` for kernel deadlines and
//!   drains `poll_event` after every kernel call. Same config + same workload seed = same run.
//! - Agents start attempts until `horizon_ms` of virtual time (or `attempts` calls).
//! - Each agent keeps one session for its whole life (the pattern the clients' READMEs show;
//!   docs/SPEC.md §5 gives every unit of work a fresh priority, so that is fair). An agent repeats:
//!   think, acquire its task's manifest, hold it for the task's time, release everything (a
//!   *commit*). On DIE, DIED or WOUNDED it sleeps the kernel's `retry_after_ms` and retries the
//!   same task (Wait-Die progress: the unit keeps its priority); on WAIT it waits for GRANTED /
//!   WAIT_TIMEOUT / DIED / WOUNDED. A few grants (`stall_per_mille`) stall the agent past its
//!   TTL so leases expire (a ghost).
//! - Fairness: commits per agent, and the longest any task waited from its first attempt to
//!   its grant (DIEs, backoffs and waits included).
//! - Deadlock detection: every `check_every` attempts and at the end, the snapshot is checked
//!   by [`invariants::check`] (wait-for cycles, waiters nothing blocks, conflicting holders,
//!   policy order); and the loop itself reports a stall if agents wait while nothing (no wake-up,
//!   no kernel deadline) can ever move them. After the horizon the run drains: no new
//!   tasks, every wait resolves, every hold is released; leases or tickets left are reported.

use super::invariants::{self, Findings};
use super::rng::Rng;
use klock_core::{AcquireOptions, Config, Event, Kernel, Policy, SessionId, TicketId, Verdict};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::{Duration, Instant};

/// One unit of agent work: a manifest held for `hold_ms` and then released.
#[derive(Clone, Debug)]
pub struct Task {
    pub intents: Vec<String>,
    pub hold_ms: u64,
}

/// What agents ask for.
pub trait Workload {
    /// The next task of `agent`.
    fn task(&mut self, agent: usize, rng: &mut Rng) -> Task;
    /// How long an agent thinks between tasks (and before retrying after a timeout).
    fn think_ms(&mut self, rng: &mut Rng) -> u64;
}

#[derive(Clone, Debug)]
pub struct SimConfig {
    pub policy: Policy,
    pub agents: usize,
    /// Virtual time after which agents start no new attempt; then the run drains.
    pub horizon_ms: u64,
    /// Acquire calls in total, if that comes first (`u64::MAX`: no limit).
    pub attempts: u64,
    /// Wall time after which agents start no new attempt, if that comes first (benchmarks
    /// only: a run cut by it is not reproducible).
    pub wall_budget: Option<Duration>,
    pub seed: u64,
    pub ttl_ms: u64,
    pub wait_timeout_ms: u64,
    /// Per mille of grants after which the agent stalls past its TTL instead of releasing.
    pub stall_per_mille: u64,
    /// Attempts between snapshot checks (0: only at the end).
    pub check_every: u64,
}

impl Default for SimConfig {
    fn default() -> SimConfig {
        SimConfig {
            policy: Policy::WaitDie,
            agents: 64,
            horizon_ms: 600_000,
            attempts: u64::MAX,
            wall_budget: None,
            seed: 1,
            ttl_ms: 60_000,
            wait_timeout_ms: 5_000,
            stall_per_mille: 0,
            check_every: 0,
        }
    }
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub policy: Option<Policy>,
    pub attempts: u64,
    /// Kernel calls made by the agents and the timer (acquire, release_all, advance).
    pub kernel_calls: u64,
    /// Tasks held to the end and released.
    pub commits: u64,
    /// Commits of each agent (fairness: no agent may starve).
    pub agent_commits: Vec<u64>,
    /// The longest time from a task's first attempt to its grant (virtual ms).
    pub max_task_wait_ms: u64,
    pub granted_at_once: u64,
    pub waits: u64,
    /// DIE verdicts.
    pub dies: u64,
    /// DIED events (waiting tickets withdrawn).
    pub died_events: u64,
    pub timeouts: u64,
    pub wounds: u64,
    /// Work lost by wounded holders.
    pub aborted_holds: u64,
    pub expired: u64,
    /// Leases that expired while their agent was not stalled (must be 0 with TTL > hold).
    pub unexpected_expiries: u64,
    pub stalls: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    pub max_wait_ms: u64,
    pub total_wait_ms: u64,
    pub waits_granted: u64,
    /// Virtual time from the start to the last commit.
    pub virtual_ms: u64,
    /// Wall time of the run, invariant checks excluded.
    pub wall: Duration,
    pub check_wall: Duration,
    pub checks: u64,
    pub deadlocks: u64,
    pub stalled_loop: bool,
    /// The run stopped early because of `wall_budget`.
    pub cut_by_wall_budget: bool,
    pub safety_violations: u64,
    pub order_violations: u64,
    pub leftover_leases: u64,
    pub leftover_tickets: u64,
    pub defensive_repairs: u64,
    /// The first unhealthy snapshot's findings, for the report.
    pub first_finding: Option<Findings>,
}

impl Outcome {
    pub fn commits_per_wall_sec(&self) -> f64 {
        self.commits as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    /// The fewest commits of one agent divided by the mean: 1.0 is perfectly even, 0.0 means
    /// some agent starved.
    pub fn fairness(&self) -> f64 {
        let total: u64 = self.agent_commits.iter().sum();
        let min = self.agent_commits.iter().copied().min().unwrap_or(0);
        match total {
            0 => 0.0,
            _ => min as f64 * self.agent_commits.len() as f64 / total as f64,
        }
    }

    pub fn commits_per_virtual_sec(&self) -> f64 {
        self.commits as f64 / (self.virtual_ms.max(1) as f64 / 1000.0)
    }

    /// Deadlocks found in any way (cycles, lost wake-ups, a stalled loop, leftovers).
    pub fn total_deadlocks(&self) -> u64 {
        self.deadlocks + u64::from(self.stalled_loop) + self.leftover_tickets
    }

    /// Whether the run was healthy: no deadlock, no safety or order violation, no error.
    pub fn healthy(&self) -> bool {
        self.total_deadlocks() == 0
            && self.safety_violations == 0
            && self.order_violations == 0
            && self.errors == 0
            && self.unexpected_expiries == 0
            && self.leftover_leases == 0
            && self.defensive_repairs == 0
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Thinking, or sleeping before a retry; the wake-up acquires.
    Ready,
    Waiting {
        ticket: TicketId,
        since: u64,
    },
    Holding {
        stalled: bool,
    },
    Done,
}

struct Agent {
    session: SessionId,
    state: State,
    task: Option<Task>,
    /// Only the wake-up with the current generation counts (older ones were superseded).
    generation: u64,
    /// When the current task was first attempted.
    task_since: u64,
}

struct Sim<'w> {
    cfg: SimConfig,
    kernel: Kernel,
    workload: &'w mut dyn Workload,
    rng: Rng,
    agents: Vec<Agent>,
    by_session: HashMap<SessionId, usize>,
    /// (at, sequence, agent, generation)
    wakes: BinaryHeap<Reverse<(u64, u64, usize, u64)>>,
    sequence: u64,
    now: u64,
    out: Outcome,
    options: AcquireOptions,
    started: Instant,
    wall_checks: u64,
}

/// Runs the simulation; `progress` gets the fraction of the run done, about 100 times.
pub fn run(cfg: &SimConfig, workload: &mut dyn Workload, mut progress: impl FnMut(f64)) -> Outcome {
    let config = Config {
        policy: cfg.policy,
        seed: cfg.seed,
        max_ttl_ms: cfg.ttl_ms.max(1),
        ..Config::default()
    };
    let kernel = Kernel::new(config).expect("simulation config is valid");
    let mut sim = Sim {
        cfg: cfg.clone(),
        kernel,
        workload,
        rng: Rng::new(cfg.seed),
        agents: Vec::with_capacity(cfg.agents),
        by_session: HashMap::new(),
        wakes: BinaryHeap::new(),
        sequence: 0,
        now: 0,
        out: Outcome {
            policy: Some(cfg.policy),
            agent_commits: vec![0; cfg.agents],
            ..Outcome::default()
        },
        options: AcquireOptions {
            ttl_ms: Some(cfg.ttl_ms),
            wait: true,
            wait_timeout_ms: Some(cfg.wait_timeout_ms),
        },
        started: Instant::now(),
        wall_checks: 0,
    };
    let started = sim.started;
    for i in 0..cfg.agents {
        let session = sim.open(i);
        sim.agents.push(Agent {
            session,
            state: State::Ready,
            task: None,
            generation: 0,
            task_since: 0,
        });
        let think = sim.workload.think_ms(&mut sim.rng);
        sim.wake(i, think);
    }
    let fraction = |sim: &Sim| {
        let by_time = sim.now as f64 / cfg.horizon_ms.max(1) as f64;
        let by_attempts = sim.out.attempts as f64 / cfg.attempts.max(1) as f64;
        by_time.max(by_attempts).min(1.0)
    };
    let mut next_progress = 0.01;
    let mut next_check = if cfg.check_every == 0 {
        u64::MAX
    } else {
        cfg.check_every
    };
    let mut done = 0;
    while done < cfg.agents {
        let wake = sim.wakes.peek().map(|Reverse((at, ..))| *at);
        let due = sim.kernel.next_deadline();
        let Some(t) = [wake, due].into_iter().flatten().min() else {
            // Nothing can ever happen again, yet not every agent is done: a stall.
            sim.out.stalled_loop = true;
            break;
        };
        sim.now = sim.now.max(t);
        if due.is_some_and(|d| d <= sim.now) {
            sim.kernel.advance(sim.now);
            sim.out.kernel_calls += 1;
            sim.drain();
        }
        while let Some(&Reverse((at, _, agent, generation))) = sim.wakes.peek() {
            if at > sim.now {
                break;
            }
            sim.wakes.pop();
            if sim.agents[agent].generation == generation {
                sim.act(agent);
                if sim.agents[agent].state == State::Done {
                    done += 1;
                }
            }
        }
        if fraction(&sim) >= next_progress {
            progress(fraction(&sim));
            next_progress = fraction(&sim) + 0.01;
        }
        if sim.out.attempts >= next_check {
            sim.check();
            next_check = sim.out.attempts + cfg.check_every;
        }
    }
    sim.check();
    let stats = sim.kernel.stats();
    sim.out.leftover_leases = stats.active_leases;
    sim.out.leftover_tickets = stats.waiting_tickets;
    sim.out.defensive_repairs = stats.counters.defensive_repairs;
    sim.out.wall = started.elapsed().saturating_sub(sim.out.check_wall);
    progress(1.0);
    sim.out
}

impl Sim<'_> {
    fn out_of_wall_time(&mut self) -> bool {
        if let Some(budget) = self.cfg.wall_budget {
            self.wall_checks += 1;
            if self.wall_checks & 63 == 0 && self.started.elapsed() >= budget {
                self.cfg.attempts = self.out.attempts;
                self.out.cut_by_wall_budget = true;
                return true;
            }
        }
        false
    }

    fn open(&mut self, agent: usize) -> SessionId {
        let info = self
            .kernel
            .open_session(&format!("agent-{agent}"), "default", self.now)
            .expect("valid agent id");
        self.by_session.insert(info.session_id, agent);
        info.session_id
    }

    fn wake(&mut self, agent: usize, after_ms: u64) {
        let a = &mut self.agents[agent];
        a.generation += 1;
        self.sequence += 1;
        self.wakes.push(Reverse((
            self.now.saturating_add(after_ms),
            self.sequence,
            agent,
            a.generation,
        )));
    }

    fn act(&mut self, agent: usize) {
        match self.agents[agent].state {
            State::Ready => self.attempt(agent),
            State::Holding { stalled } => {
                let session = self.agents[agent].session;
                self.out.kernel_calls += 1;
                match self.kernel.release_all(session, self.now) {
                    Ok(_) if stalled => {}
                    Ok(_) => {
                        // The release ends the unit of work: the agent's next task starts
                        // young in the same session (docs/SPEC.md §5).
                        self.out.commits += 1;
                        self.out.agent_commits[agent] += 1;
                        self.out.virtual_ms = self.now;
                    }
                    Err(e) => self.error(e.to_string()),
                }
                self.drain();
                self.agents[agent].task = None;
                self.agents[agent].state = State::Ready;
                let think = self.workload.think_ms(&mut self.rng);
                self.wake(agent, think);
            }
            State::Waiting { .. } | State::Done => {}
        }
    }

    fn attempt(&mut self, agent: usize) {
        if self.out.attempts >= self.cfg.attempts
            || self.now >= self.cfg.horizon_ms
            || self.out_of_wall_time()
        {
            self.agents[agent].state = State::Done;
            return;
        }
        self.out.attempts += 1;
        if self.agents[agent].task.is_none() {
            self.agents[agent].task = Some(self.workload.task(agent, &mut self.rng));
            self.agents[agent].task_since = self.now;
        }
        let session = self.agents[agent].session;
        let task = self.agents[agent].task.as_ref().expect("task set above");
        let result = self
            .kernel
            .acquire(session, &task.intents, self.options, self.now);
        self.out.kernel_calls += 1;
        match result {
            Ok(Verdict::Granted { .. }) => {
                self.out.granted_at_once += 1;
                self.start_holding(agent);
            }
            Ok(Verdict::Wait { ticket, .. }) => {
                self.out.waits += 1;
                self.agents[agent].state = State::Waiting {
                    ticket,
                    since: self.now,
                };
            }
            Ok(Verdict::Die { retry_after_ms, .. }) => {
                self.out.dies += 1;
                self.wake(agent, retry_after_ms);
            }
            Err(e) => {
                self.error(e.to_string());
                self.agents[agent].task = None;
                let think = self.workload.think_ms(&mut self.rng);
                self.wake(agent, think);
            }
        }
        self.drain();
    }

    fn start_holding(&mut self, agent: usize) {
        let stalled =
            self.cfg.stall_per_mille > 0 && self.rng.below(1000) < self.cfg.stall_per_mille;
        self.agents[agent].state = State::Holding { stalled };
        let waited = self.now - self.agents[agent].task_since;
        self.out.max_task_wait_ms = self.out.max_task_wait_ms.max(waited);
        let hold = if stalled {
            self.out.stalls += 1;
            self.cfg.ttl_ms + 1
        } else {
            self.agents[agent].task.as_ref().map_or(0, |t| t.hold_ms)
        };
        self.wake(agent, hold);
    }

    /// Sleeps, then retries the same task (same session, same priority).
    fn retry_after(&mut self, agent: usize, ms: u64) {
        self.agents[agent].state = State::Ready;
        self.wake(agent, ms);
    }

    fn error(&mut self, message: String) {
        self.out.errors += 1;
        self.out.first_error.get_or_insert(message);
    }

    /// The agent that owns `session`, if it is still one of ours.
    fn agent_of(&self, session: SessionId) -> Option<usize> {
        self.by_session.get(&session).copied()
    }

    fn waiting_on(&self, agent: usize, ticket: TicketId) -> Option<u64> {
        match self.agents[agent].state {
            State::Waiting { ticket: t, since } if t == ticket => Some(since),
            _ => None,
        }
    }

    fn end_wait(&mut self, since: u64) -> u64 {
        let waited = self.now.saturating_sub(since);
        self.out.max_wait_ms = self.out.max_wait_ms.max(waited);
        waited
    }

    fn drain(&mut self) {
        while let Some(event) = self.kernel.poll_event() {
            let Some(agent) = self.agent_of(event.session()) else {
                continue;
            };
            match event {
                Event::Granted { ticket, .. } => {
                    if let Some(since) = self.waiting_on(agent, ticket) {
                        let waited = self.end_wait(since);
                        self.out.total_wait_ms += waited;
                        self.out.waits_granted += 1;
                        self.start_holding(agent);
                    }
                }
                Event::WaitTimeout { ticket, .. } => {
                    if let Some(since) = self.waiting_on(agent, ticket) {
                        self.end_wait(since);
                        self.out.timeouts += 1;
                        let think = self.workload.think_ms(&mut self.rng);
                        self.retry_after(agent, think);
                    }
                }
                Event::Died {
                    ticket,
                    retry_after_ms,
                    ..
                } => {
                    self.out.died_events += 1;
                    if let Some(since) = self.waiting_on(agent, ticket) {
                        self.end_wait(since);
                        self.retry_after(agent, retry_after_ms);
                    }
                }
                Event::LeaseExpired { .. } => {
                    self.out.expired += 1;
                    if !matches!(self.agents[agent].state, State::Holding { stalled: true }) {
                        self.out.unexpected_expiries += 1;
                    }
                }
                Event::Wounded {
                    lost_leases,
                    lost_tickets,
                    retry_after_ms,
                    ..
                } => {
                    // A wound counts as a DIE: back off as long as the kernel says.
                    self.out.wounds += 1;
                    match self.agents[agent].state {
                        State::Holding { .. } if !lost_leases.is_empty() => {
                            self.out.aborted_holds += 1;
                            self.retry_after(agent, retry_after_ms);
                        }
                        State::Waiting { ticket, since } if lost_tickets.contains(&ticket) => {
                            self.end_wait(since);
                            self.retry_after(agent, retry_after_ms);
                        }
                        _ => {}
                    }
                }
                Event::SessionClosed { session, .. } => {
                    // Only idle sessions are closed; open a new one (a new, younger priority).
                    self.by_session.remove(&session);
                    let fresh = self.open(agent);
                    self.agents[agent].session = fresh;
                }
                // The agent's own immediate grants and releases: its verdicts said so already.
                Event::Acquired { .. } | Event::Released { .. } => {}
            }
        }
    }

    fn check(&mut self) {
        let started = Instant::now();
        let findings = invariants::check(&self.kernel.snapshot(self.now));
        self.drain();
        self.out.checks += 1;
        self.out.deadlocks += findings.deadlocks() as u64;
        self.out.safety_violations += findings.conflicting_holders.len() as u64;
        self.out.order_violations += findings.order_violations.len() as u64;
        if !findings.is_clean() && self.out.first_finding.is_none() {
            self.out.first_finding = Some(findings);
        }
        self.out.check_wall += started.elapsed();
    }
}
