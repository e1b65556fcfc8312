// Types of the friendly client (client.js). The native layer's types are in index.d.ts.
//
// Errors, all `instanceof KlockError` (`code`: number, `name`: stable upper-case name):
// - kernel errors: `code` and `name` from the core (e.g. 300 / 'NOT_OWNER');
// - `LeaseLost`: a held lease ended early; `name` is what the kernel said
//   ('LEASE_EXPIRED', 'LEASE_RELEASED', 'UNKNOWN_SESSION', ...), `code` its code;
// - `Died` (`code` 0, `name` 'DIE'): DIE while the session holds other leases — release
//   everything, wait `retryAfterMs`, start over with all intents in one manifest;
// - `Timeout` (`code` 0, `name` 'TIMEOUT'): not granted within `timeoutMs`;
// - `name` 'CLOSED' (`code` 0): the Klock or the session closed while a lease was pending.
// Bad arguments throw `TypeError` (`code` 'ERR_INVALID_ARG_TYPE', 'ERR_MISSING_ARGS',
// 'ERR_INVALID_ARG_VALUE') or `RangeError` (`code` 'ERR_OUT_OF_RANGE'); an aborted
// `lease()` rejects with `signal.reason`.

import type { Config, Lease as LeaseInfo, ResourceState, Snapshot, Stats } from './index'
import { Kernel, KlockError } from './index'

export {
  KlockError,
  Kernel,
  ERROR_CODES,
  parseIntent,
  MAX_MANIFEST_INTENTS,
  MAX_NAME_BYTES,
  MAX_RESOURCE_BYTES,
} from './index'
export type {
  AcquireOptions,
  Blocker,
  Config,
  ConfigView,
  Counters,
  Event,
  HeartbeatResult,
  Holder,
  Intent,
  KlockErrorName,
  Policy,
  Predicate,
  ReconcileResult,
  ResourceState,
  SessionInfo,
  Snapshot,
  StateDigest,
  Stats,
  Verdict,
  Waiter,
} from './index'
export type { LeaseInfo }

/** A lease of a `Lease` ended before the `Lease` was released. */
export declare class LeaseLost extends KlockError {
  constructor(name: string, message: string, leaseIds: number[])
  /** The kernel lease ids that ended. */
  readonly leaseIds: number[]
}

/** DIE while the session holds other leases (SPEC.md §6 rule 3). */
export declare class Died extends KlockError {
  constructor(message: string, retryAfterMs: number, heldBy: number[])
  /** Wait at least this long before starting the unit of work over. */
  readonly retryAfterMs: number
  /** The blocking sessions. */
  readonly heldBy: number[]
}

/** The intents could not be had within `timeoutMs`. */
export declare class Timeout extends KlockError {
  constructor(message: string, heldBy: number[])
  /** The blocking sessions at the last answer. */
  readonly heldBy: number[]
}

/** Options of `new Klock()`: the kernel's config plus the clock. */
export interface KlockOptions extends Config {
  /** The time in integer milliseconds (default: monotonic, 0 when the Klock is created). */
  clock?: () => number
}

/** What the client did on the kernel's answers (the kernel's own counts: `stats()`). */
export interface ClientCounters {
  grants: number
  waits: number
  deaths: number
  retries: number
  timeouts: number
  lost: number
}

/**
 * Owns one kernel, drives it with one unref'd timer at `nextDeadline()` (and the next
 * heartbeat due), and routes the kernel's events to the sessions waiting for them.
 */
export declare class Klock {
  constructor(options?: KlockOptions)
  /** The kernel this Klock drives (calls made on it directly bypass the event routing). */
  readonly kernel: Kernel
  readonly counters: ClientCounters
  /** The last unexpected error inside the timer callback (a bug), if any. */
  readonly timerError: unknown
  /** The Klock's time in integer milliseconds. */
  now(): number
  /** Opens a session; the kernel assigns its priority (older = higher). */
  session(agentId: string, options?: { namespace?: string }): Promise<Session>
  resourceState(resource: string, namespace?: string): ResourceState
  stats(): Stats
  snapshot(): Snapshot
  /** Closes every session (releasing what they hold) and stops the timer. Idempotent. */
  close(): void
}

/** Options of `session.lease()`. */
export interface LeaseOptions {
  /** Lease TTL (default: the kernel's `defaultTtlMs`); heartbeats renew it every ttl/3. */
  ttlMs?: number
  /** Give up with `Timeout` after this long (WAITs and DIE retries included); 0 = try once. */
  timeoutMs?: number
  /** Cancels a pending acquisition (the promise rejects with `signal.reason`). */
  signal?: AbortSignal
}

/** One run of one agent against the Klock's kernel. */
export declare class Session {
  readonly klock: Klock
  readonly sessionId: number
  readonly agentId: string
  readonly namespace: string
  /** Smaller = older = higher priority; kept across every DIE and retry. */
  readonly priority: number
  readonly closed: boolean
  /**
   * Acquires every intent at once (`"PREDICATE TYPE:/path"`); resolves when granted, waiting
   * for the grant event or retrying after DIE as the kernel says.
   */
  lease(intents: string | readonly string[], options?: LeaseOptions): Promise<Lease>
  /**
   * Acquires, runs `fn(lease)`, releases in `finally`. Rejects with what `fn` threw, or with
   * `LeaseLost` if a lease ended while `fn` ran.
   */
  withLease<T>(intents: string | readonly string[], fn: (lease: Lease) => T | Promise<T>, options?: LeaseOptions): Promise<T>
  /** Releases everything the session holds and withdraws its waits. Idempotent. */
  close(): void
}

/** Intents held together: the handle `session.lease()` resolves with. */
export declare class Lease {
  readonly session: Session
  readonly intents: readonly string[]
  /** The kernel leases, one per distinct intent. */
  readonly leases: LeaseInfo[]
  /** Set when a lease ended early (and then `signal` is aborted with it). */
  readonly lost: LeaseLost | null
  /** Aborts with the `LeaseLost` error when a lease ends early. */
  readonly signal: AbortSignal
  /** Held and not lost. */
  readonly held: boolean
  /** The largest fence: the protected resource must reject writes with a smaller one. */
  readonly fence: number
  /** Fence per canonical resource. */
  readonly fences: Record<string, number>
  readonly leaseIds: number[]
  /** The earliest expiry (moved forward by every heartbeat). */
  readonly expiresAt: number
  /** Throws `LeaseLost` if a lease has ended. */
  check(): void
  /** Renews every lease now; throws `LeaseLost` if one has ended. */
  heartbeat(): void
  /** Releases (leases shared with another Lease of the session stay held). Idempotent. */
  release(): void
}
