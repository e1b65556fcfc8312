//! TypeScript declarations of the values the `Kernel` methods take and return.
//!
//! Contract: these describe exactly what [`crate::output`] produces (the core's serde shape)
//! and what [`crate::args`] accepts; wasm-bindgen copies them into the generated `.d.ts`, and
//! the method signatures refer to them through `unchecked_param_type` / `unchecked_return_type`.
//! Every number is a JS number holding an integer in `0 ..= 2^53 − 1`.

use wasm_bindgen::prelude::*;

#[wasm_bindgen(typescript_custom_section)]
const TYPES: &'static str = r#"
export type Policy = "wait_die" | "wound_wait" | "lanes";
export type Predicate = "PROVIDES" | "CONSUMES" | "MUTATES" | "DELETES" | "DEPENDS_ON" | "RENAMES";
export type ErrorName =
  | "INVALID_RESOURCE" | "INVALID_PREDICATE" | "INVALID_MANIFEST" | "INVALID_TTL" | "INVALID_DIGEST"
  | "INVALID_AGENT_ID" | "INVALID_NAMESPACE" | "INVALID_CONFIG" | "UNKNOWN_SESSION" | "UNKNOWN_LEASE"
  | "UNKNOWN_TICKET" | "NOT_OWNER" | "LEASE_EXPIRED" | "LEASE_RELEASED" | "HOLD_AND_WAIT"
  | "LIFETIME_EXCEEDED" | "QUOTA_EXCEEDED";
/** What every kernel method throws for a kernel error (a TypeError with code ERR_INVALID_ARG_TYPE or a RangeError with code ERR_OUT_OF_RANGE for a bad argument; an Error with code ERR_INVALID_STATE on a freed kernel). */
export interface KlockError extends Error { name: ErrorName; code: number; }

export interface Config {
  policy: Policy; seed: number; default_ttl_ms: number; max_ttl_ms: number;
  default_wait_timeout_ms: number; backoff_base_ms: number; backoff_cap_ms: number; grace_ms: number;
  session_idle_ms: number; max_leases_per_session: number; max_lease_lifetime_ms: number;
}
export interface AcquireOptions { ttl_ms?: number | null; wait?: boolean | null; wait_timeout_ms?: number | null; }
export interface SessionInfo { session_id: number; agent_id: string; namespace: string; priority: number; epoch: number; }
export interface Lease {
  lease_id: number; session_id: number; agent_id: string; resource: string; predicate: Predicate;
  fence: number; acquired_at: number; expires_at: number; ttl_ms: number;
}
export interface Intent { predicate: Predicate; resource: string; }
export interface Blocker { session_id: number; agent_id: string; intents: Intent[]; }
/** `retry_after_ms` (DIE verdicts, DIED and WOUNDED events, which all count as a DIE) is how long to back off before retrying: use it, never a formula of your own (SPEC.md §8). */
export type Verdict =
  | { verdict: "GRANTED"; leases: Lease[] }
  | { verdict: "WAIT"; ticket: number; held_by: Blocker[] }
  | { verdict: "DIE"; retry_after_ms: number; held_by: Blocker[] };
export type KlockEvent =
  | { event: "GRANTED"; ticket: number; session: number; leases: Lease[] }
  | { event: "WAIT_TIMEOUT"; ticket: number; session: number }
  | { event: "DIED"; ticket: number; session: number; retry_after_ms: number }
  | { event: "LEASE_EXPIRED"; lease: number; session: number }
  | { event: "WOUNDED"; session: number; by: number; lost_leases: number[]; lost_tickets: number[]; retry_after_ms: number }
  | { event: "SESSION_CLOSED"; session: number; reason: "IDLE" };
export interface HeartbeatResult {
  lease_id: number;
  status: "OK" | "LEASE_EXPIRED" | "LEASE_RELEASED" | "NOT_OWNER" | "UNKNOWN_LEASE" | "LIFETIME_EXCEEDED";
  expires_at: number | null;
}
export interface ReconcileResult {
  lease_id: number; status: "ACTIVE" | "EXPIRED" | "RELEASED" | "NOT_OWNER" | "UNKNOWN";
  expires_at: number | null; fence: number | null;
}
export interface Holder {
  session_id: number; agent_id: string; lease_id: number; resource: string; predicate: Predicate;
  fence: number; expires_at: number;
}
export interface Waiter {
  session_id: number; agent_id: string; ticket: number; predicate: Predicate; position: number; deadline: number;
}
export interface ResourceState { resource: string; namespace: string; holders: Holder[]; waiting: Waiter[]; covering: Holder[]; }
export interface StateDigest {
  version: number;
  identity: { agent_id: string; namespace: string; session_id: number; priority_timestamp: number; epoch: number };
  recovery: { last_phase: "IDLE" | "WAITING" | "HOLDING" | "SUSPENDED" | string; pending_intents: string[] };
}
export interface Counters {
  sessions_opened: number; granted: number; waited: number; died: number; timed_out: number; expired: number;
  wounded: number; released: number; cancelled: number; idle_closed: number; defensive_repairs: number;
}
export interface Stats {
  counters: Counters; active_sessions: number; active_leases: number; waiting_tickets: number;
  top_contended: { namespace: string; resource: string; blocked: number }[];
  ghost_agents: { agent_id: string; expired_leases: number; wait_timeouts: number }[];
}
export interface SessionView {
  session_id: number; agent_id: string; namespace: string; priority: number; epoch: number; suspended: boolean;
  leases: number; tickets: number[]; die_count: number; last_active: number;
}
export interface TicketView { ticket: number; session_id: number; agent_id: string; intents: Intent[]; deadline: number; }
export interface Snapshot {
  now: number; policy: Policy; next_deadline: number | null; sessions: SessionView[]; leases: Lease[];
  tickets: TicketView[]; stats: Stats;
}
"#;
