//! Safety and liveness checks over a kernel [`Snapshot`], computed independently of the
//! kernel's own data structures (from the snapshot's strings, with a plain ordered map).
//!
//! Contract: [`check`] reports, for the state the snapshot shows,
//! - `conflicting_holders`: pairs of leases of different sessions on overlapping resources
//!   (same namespace and TYPE, one path a segment-prefix of the other) whose predicates
//!   conflict (docs/SPEC.md §3–4) — must always be empty;
//! - `waiters_without_blocker`: waiting tickets that nothing blocks (no conflicting lease of
//!   another session and no conflicting ticket of another session ahead): a lost wake-up, the
//!   ticket would wait until it times out;
//! - `wait_cycles`: cycles in the session wait-for graph (a deadlock);
//! - `order_violations`: edges against the policy's order (wait_die: a waiter must be older
//!   than everything it waits for; wound_wait: younger; lanes: no order).
//!
//! Used by the swarm, the contended benchmarks and the `operations` fuzz target.

use klock_core::{Policy, Predicate, SessionId, Snapshot};
use std::collections::{BTreeMap, HashMap};

/// What [`check`] found; everything empty/zero means healthy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Findings {
    /// `(lease, lease)` pairs that conflict.
    pub conflicting_holders: Vec<(u64, u64)>,
    /// Ticket numbers.
    pub waiters_without_blocker: Vec<u64>,
    /// Number of distinct cycles found by the depth-first search (at least 1 per deadlock).
    pub wait_cycles: usize,
    /// `(waiter session, blocker session)` edges against the policy's order.
    pub order_violations: Vec<(u64, u64)>,
}

impl Findings {
    pub fn is_clean(&self) -> bool {
        *self == Findings::default()
    }

    /// States from which some waiter cannot make progress except by timing out.
    pub fn deadlocks(&self) -> usize {
        self.wait_cycles + self.waiters_without_blocker.len()
    }
}

#[derive(Clone, Copy)]
enum Entry {
    Held { lease: u64 },
    Queued { ticket: u64 },
}

#[derive(Clone, Copy)]
struct Item {
    session: SessionId,
    predicate: Predicate,
    entry: Entry,
}

/// `(namespace, resource)` → entries on that exact node.
type Index<'a> = BTreeMap<(&'a str, &'a str), Vec<Item>>;

/// The parent of a canonical `TYPE:/path`, or `None` for the root `TYPE:/`.
fn parent(resource: &str) -> Option<&str> {
    let colon = resource.find(':')?;
    let path = &resource[colon + 1..];
    if path == "/" {
        return None;
    }
    match path.rfind('/')? {
        0 => Some(&resource[..colon + 2]),
        cut => Some(&resource[..colon + 1 + cut]),
    }
}

/// Calls `visit` for every entry on `resource`, its ancestors and its descendants.
fn for_each_overlapping<'a>(
    index: &Index<'a>,
    namespace: &'a str,
    resource: &'a str,
    mut visit: impl FnMut(&Item),
) {
    let mut node = Some(resource);
    while let Some(name) = node {
        if let Some(items) = index.get(&(namespace, name)) {
            items.iter().for_each(&mut visit);
        }
        node = parent(name);
    }
    // Descendants: names that start with `resource/` (or, for a root `TYPE:/`, with it).
    let prefix = if resource.ends_with('/') {
        resource.to_string()
    } else {
        format!("{resource}/")
    };
    for ((ns, name), items) in index.range((namespace, prefix.as_str())..) {
        if *ns != namespace || !name.starts_with(prefix.as_str()) {
            break;
        }
        if *name != resource {
            items.iter().for_each(&mut visit);
        }
    }
}

/// Checks the snapshot (see the module contract).
pub fn check(snapshot: &Snapshot) -> Findings {
    let namespace_of: HashMap<SessionId, &str> = snapshot
        .sessions
        .iter()
        .map(|s| (s.session_id, s.namespace.as_str()))
        .collect();
    let priority_of: HashMap<SessionId, u64> = snapshot
        .sessions
        .iter()
        .map(|s| (s.session_id, s.priority))
        .collect();
    let mut index: Index = BTreeMap::new();
    for l in &snapshot.leases {
        let ns = namespace_of.get(&l.session_id).copied().unwrap_or("?");
        index
            .entry((ns, l.resource.as_str()))
            .or_default()
            .push(Item {
                session: l.session_id,
                predicate: l.predicate,
                entry: Entry::Held {
                    lease: l.lease_id.0,
                },
            });
    }
    for t in &snapshot.tickets {
        let ns = namespace_of.get(&t.session_id).copied().unwrap_or("?");
        for i in &t.intents {
            index
                .entry((ns, i.resource.as_str()))
                .or_default()
                .push(Item {
                    session: t.session_id,
                    predicate: i.predicate,
                    entry: Entry::Queued { ticket: t.ticket.0 },
                });
        }
    }

    let mut findings = Findings::default();

    // Safety: conflicting holders. Every overlapping pair is seen from its deeper lease
    // (ancestor walk) or, on one node, from both sides: keep it once (smaller id first).
    for l in &snapshot.leases {
        let ns = namespace_of.get(&l.session_id).copied().unwrap_or("?");
        let mut node = Some(l.resource.as_str());
        while let Some(name) = node {
            for item in index.get(&(ns, name)).into_iter().flatten() {
                if let Entry::Held { lease } = item.entry {
                    let same_node = name == l.resource;
                    if item.session != l.session_id
                        && item.predicate.conflicts_with(l.predicate)
                        && (!same_node || lease > l.lease_id.0)
                    {
                        findings
                            .conflicting_holders
                            .push((l.lease_id.0.min(lease), l.lease_id.0.max(lease)));
                    }
                }
            }
            node = parent(name);
        }
    }

    // Liveness: who waits for whom.
    let mut waits_for: BTreeMap<SessionId, Vec<SessionId>> = BTreeMap::new();
    for t in &snapshot.tickets {
        let ns = namespace_of.get(&t.session_id).copied().unwrap_or("?");
        let mut blockers: Vec<SessionId> = Vec::new();
        for i in &t.intents {
            for_each_overlapping(&index, ns, i.resource.as_str(), |item| {
                let ahead = match item.entry {
                    Entry::Held { .. } => true,
                    Entry::Queued { ticket } => ticket < t.ticket.0,
                };
                if ahead
                    && item.session != t.session_id
                    && item.predicate.conflicts_with(i.predicate)
                {
                    blockers.push(item.session);
                }
            });
        }
        blockers.sort_unstable();
        blockers.dedup();
        if blockers.is_empty() {
            findings.waiters_without_blocker.push(t.ticket.0);
        }
        let mine = priority_of.get(&t.session_id).copied().unwrap_or(0);
        for &b in &blockers {
            let theirs = priority_of.get(&b).copied().unwrap_or(0);
            let wrong = match snapshot.policy {
                Policy::WaitDie => mine > theirs,
                Policy::WoundWait => mine < theirs,
                // Lanes: no order; detect: cycles are checked below, with the others.
                Policy::Lanes | Policy::Detect => false,
            };
            if wrong {
                findings.order_violations.push((t.session_id.0, b.0));
            }
        }
        waits_for.entry(t.session_id).or_default().extend(blockers);
    }
    findings.wait_cycles = count_cycles(&waits_for);
    findings
}

/// Back edges found by an iterative depth-first search (0 exactly when the graph is acyclic).
fn count_cycles(graph: &BTreeMap<SessionId, Vec<SessionId>>) -> usize {
    #[derive(Clone, Copy, PartialEq)]
    enum Color {
        White,
        Grey,
        Black,
    }
    let mut color: HashMap<SessionId, Color> = HashMap::new();
    let mut cycles = 0;
    for &start in graph.keys() {
        if color.get(&start).copied().unwrap_or(Color::White) != Color::White {
            continue;
        }
        let mut stack: Vec<(SessionId, usize)> = vec![(start, 0)];
        color.insert(start, Color::Grey);
        while let Some(&mut (node, ref mut next)) = stack.last_mut() {
            let edges = graph.get(&node).map(Vec::as_slice).unwrap_or(&[]);
            if let Some(&to) = edges.get(*next) {
                *next += 1;
                match color.get(&to).copied().unwrap_or(Color::White) {
                    Color::White => {
                        color.insert(to, Color::Grey);
                        stack.push((to, 0));
                    }
                    Color::Grey => cycles += 1,
                    Color::Black => {}
                }
            } else {
                color.insert(node, Color::Black);
                stack.pop();
            }
        }
    }
    cycles
}
