//! Leases and the sessions in the way, as one line of text: for the client's errors and
//! losses, and for the agent tools' messages.
//!
//! Contract: pure formatting of the kernel's own values; an empty list of blockers reads
//! "other agents" (a verdict that names none).

use klock_core::{Blocker, Lease};

/// Leases as "MUTATES FILE:/x (lease 7, fence 9), ...".
pub fn describe_leases(leases: &[Lease]) -> String {
    let parts: Vec<String> = leases
        .iter()
        .map(|l| {
            format!(
                "{} {} (lease {}, fence {})",
                l.predicate, l.resource, l.lease_id, l.fence
            )
        })
        .collect();
    parts.join(", ")
}

/// The blockers of a verdict as "agent "a" (session 3: MUTATES FILE:/x); ...".
pub fn describe_blockers(blockers: &[Blocker]) -> String {
    if blockers.is_empty() {
        return String::from("other agents");
    }
    let parts: Vec<String> = blockers
        .iter()
        .map(|b| {
            let intents: Vec<String> = b
                .intents
                .iter()
                .map(|i| format!("{} {}", i.predicate, i.resource))
                .collect();
            format!(
                "agent {:?} (session {}: {})",
                b.agent_id,
                b.session_id,
                intents.join(", ")
            )
        })
        .collect();
    parts.join("; ")
}
