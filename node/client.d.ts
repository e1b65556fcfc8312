// Types of the friendly client (client.js). The native layer's types are in index.d.ts.
//
// Errors, all `instanceof KlockError` (`code`: number, `name`: stable upper-case name), the same
// names as the Python client's:
// - kernel errors: `code` and `name` from the core (e.g. 300 / 'NOT_OWNER');
// - `LeaseLost`: a held lease ended early; `name` 'LEASE_EXPIRED' (expired) or
//   'LEASE_RELEASED' (wounded, or its session closed: `session.close()`, `klock.close()`, or
//   in the kernel behind the client's back, or taken over by another client's resume),
//   `code` its code;
// - `Died` (`code` 0, `name` 'DIE'): DIE (or DIED, or WOUNDED) while the session holds other
//   leases — release everything, wait `retryAfterMs`, start over with all intents in one
//   manifest; under `detect`, `cycle` names the wait-for cycle it died to break;
// - `Timeout` (`code` 0, `name` 'TIMEOUT'): not granted within `timeoutMs`;
// - `Closed` (`code` 0, `name` 'CLOSED'): the Klock or the session was closed before or while
//   the call ran; the message says which ("this Klock is closed" / "this session is closed").
// - `Unreachable` (`code` 0, `name` 'UNREACHABLE'): a remote Klock (`connect`) could not
//   reach `klock serve` within its `reconnectTimeoutMs`; the message names the URL and what
//   failed. A refused bearer token is a `KlockError` 'UNAUTHORIZED' (401) or 'FORBIDDEN'
//   (403) naming the URL; a refused session token (another client resumed the session) is
//   'SESSION_TOKEN_REFUSED' with a `sessionId` property, and the session's Leases are lost at once
//   ('LEASE_RELEASED'). A 429 ('RATE_LIMITED', 'TOO_MANY_WAITS') is retried within the budget
//   and thrown only past it;
// - `StaleFence` (`code` 0, `name` 'STALE_FENCE'): `fencedWrite` refused a smaller fence.
// Bad arguments throw `TypeError` (`code` 'ERR_INVALID_ARG_TYPE', 'ERR_MISSING_ARGS',
// 'ERR_INVALID_ARG_VALUE') or `RangeError` (`code` 'ERR_OUT_OF_RANGE'); an aborted
// `lease()` rejects with `signal.reason`.

import type { Config, Lease as LeaseInfo, ReconcileResult, ResourceState, Snapshot, StateDigest, Stats } from './index';
import { Kernel, KlockError } from './index';

export {
  KlockError,
  Kernel,
  ERROR_CODES,
  parseIntent,
  MAX_MANIFEST_INTENTS,
  MAX_NAME_BYTES,
  MAX_RESOURCE_BYTES,
} from './index';
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
} from './index';
export type { LeaseInfo };

/** A lease of a `Lease` ended before the `Lease` was released. */
export declare class LeaseLost extends KlockError {
  constructor(name: string, message: string, leaseIds: number[]);
  /** The kernel lease ids that ended. */
  readonly leaseIds: number[];
}

/** DIE while the session holds other leases (SPEC.md §6 rule 3). */
export declare class Died extends KlockError {
  constructor(message: string, retryAfterMs: number, heldBy: number[], cycle?: number[]);
  /** Wait at least this long before starting the unit of work over. */
  readonly retryAfterMs: number;
  /** The blocking sessions. */
  readonly heldBy: number[];
  /**
   * Under `detect` (SPEC.md §6.1): the session ids of the wait-for cycle this session died to
   * break, itself first, following the edges; empty for any other death.
   */
  readonly cycle: number[];
}

/** The intents could not be had within `timeoutMs`. */
export declare class Timeout extends KlockError {
  constructor(message: string, heldBy: number[]);
  /** The blocking sessions at the last answer. */
  readonly heldBy: number[];
}

/** The Klock or the session was closed before or while the call ran. */
export declare class Closed extends KlockError {
  constructor(message: string);
}

/** A remote Klock could not reach `klock serve` within `reconnectTimeoutMs`. */
export declare class Unreachable extends KlockError {
  constructor(message: string, cause?: unknown);
}

/** `fencedWrite` refused: a larger fence was already accepted for the file. */
export declare class StaleFence extends KlockError {
  constructor(path: string, fence: number, stored: number);
  /** The file written to. */
  readonly path: string;
  /** The fence given. */
  readonly fence: number;
  /** The largest fence accepted so far (in `<path>.fence`). */
  readonly stored: number;
}

/**
 * Writes `data` to `path` atomically (a temporary file in the same directory, fsynced, renamed
 * over it) if `fence` is at least the largest fence accepted for `path`, which is kept in
 * `<path>.fence` and updated (fsynced) first; throws `StaleFence` otherwise, leaving the file
 * unchanged. Under an exclusive flock(2) of `<path>.fence` — the same lock Python's
 * `klock.fenced_write` takes, so writers in both languages exclude each other. Blocks the
 * thread while another writer holds the lock (one write).
 */
export declare function fencedWrite(path: string, data: string | NodeJS.ArrayBufferView, fence: number): void;
/** `fencedWrite` without blocking the event loop while another writer holds the lock. */
export declare function fencedWriteAsync(
  path: string,
  data: string | NodeJS.ArrayBufferView,
  fence: number,
): Promise<void>;

/**
 * The resource name of the file at `path`: `FILE:/` + its path under the root the agents share
 * (`options.root`, else `$KLOCK_ROOT`), links resolved; e.g. `'FILE:/src/auth.ts'`. A relative
 * path is relative to the current directory. A path outside the root, or holding a character a
 * resource cannot hold (Unicode Cc, Cf, Zl, Zp), is a `RangeError` (docs/SPEC.md §3).
 */
export declare function file(path: string, options?: { root?: string }): string;

/** Options of `connect()`. */
export interface ConnectOptions {
  /**
   * The server's bearer token (`Authorization: Bearer`); session tokens are handled inside.
   * Default `$KLOCK_TOKEN`.
   */
  token?: string;
  /** Where sessions open by default: `$KLOCK_NAMESPACE`, else `$KLOCK_NS`, else `'default'`. */
  namespace?: string;
  /**
   * As `new Klock()`'s. A `ManualClock` also drives a server started with `--clock manual`
   * (tests): every request carries `Klock-Now` from it.
   */
  clock?: Clock<any> | (() => number);
  /**
   * Every call's budget: how long connection failures (refused, reset, timed out) and busy
   * answers (429 `RATE_LIMITED` / `TOO_MANY_WAITS`, 503) are retried, with backoff from 50 ms
   * doubling to 1 s (or the server's `Retry-After`), counted from the call's start, before it
   * fails with `Unreachable` (a 429: the server's error) and the held leases are lost.
   * Default 30 000.
   */
  reconnectTimeoutMs?: number;
  /**
   * The longest one attempt of a call waits for an answer (never past the budget) before it
   * counts as a network failure; Python's `request_timeout`. Default 10 000.
   */
  requestTimeoutMs?: number;
  /**
   * The path of a PEM file of the CAs to trust for an `https://` server (a private CA), read
   * once here; default `$KLOCK_CA`. A refused certificate is `KlockError` `CERTIFICATE` at once.
   */
  ca?: string;
  /** `false`: accept any certificate (tests only; Python's `verify=False`). Default `true`. */
  verify?: boolean;
}

/**
 * A Klock whose kernel is `klock serve` at `url` (or the nodes of a cluster: an array of URLs,
 * or URLs separated by commas; each call starts at the node that last answered and fails over
 * to the others): the same interface as `new Klock()`, over
 * HTTP (kept-alive connections; one event stream per namespace, shared by its sessions). Each lease has a local deadline
 * (send time of its last grant or renewal + TTL, on the monotonic clock), so it is marked lost
 * no later than the server lets it expire; `expiresAt` shows the server's time. Connection
 * failures are retried within `reconnectTimeoutMs`; after a server restart the client resumes
 * its event streams, polls its open tickets, reconciles and renews its leases. Call
 * `close()` when done: the event streams keep the process alive until then.
 */
export declare function connect(url?: string | readonly string[] | null, options?: ConnectOptions): RemoteKlock;

/**
 * A Klock made by `connect()`: what reaches the server answers a Promise where the in-process
 * call is synchronous (`close`, `resourceState`, `stats`; a session's `close`; a lease's
 * `release` and `heartbeat`). `snapshot()` is in process only.
 */
export interface RemoteKlock extends Omit<
  Klock,
  'session' | 'resume' | 'resourceState' | 'stats' | 'snapshot' | 'close' | 'kernel'
> {
  /** The remote backend (internal). */
  readonly kernel: { readonly remote: true; readonly url: string };
  session(agentId: string, options?: { namespace?: string }): Promise<RemoteSession>;
  /** As `Klock.resume`, from the server's StateDigest JSON (`RemoteSession.digest()`). */
  resume(digest: RemoteDigest): Promise<RemoteSession>;
  resourceState(resource: string, namespace?: string): Promise<ResourceState>;
  /** The server's counters for this Klock's namespace. */
  stats(): Promise<Stats>;
  /** As `Klock.close()`; resolves once the server closed the sessions (never rejects). */
  close(): Promise<void>;
}

/** A session of a `RemoteKlock`. */
export interface RemoteSession extends Omit<
  Session,
  'klock' | 'lease' | 'withLease' | 'digest' | 'suspend' | 'reconcile' | 'close'
> {
  readonly klock: RemoteKlock;
  /**
   * The server's StateDigest JSON (snake_case): what the Python client and `klock exec
   * --digest` save too, so any of them can resume it.
   */
  digest(): Promise<RemoteDigest>;
  suspend(): Promise<void>;
  reconcile(leaseIds: Iterable<number>): Promise<ReconcileResult[]>;
  lease(intents: string | readonly string[], options?: LeaseOptions): Promise<RemoteLease>;
  withLease<T>(
    intents: string | readonly string[],
    fn: (lease: RemoteLease) => T | Promise<T>,
    options?: LeaseOptions,
  ): Promise<T>;
  close(): Promise<void>;
}

/** A StateDigest as `klock serve` answers it (GET .../digest). */
export interface RemoteDigest {
  version: number;
  identity: { namespace: string; session_id: number; agent_id: string; [key: string]: unknown };
  recovery: Record<string, unknown>;
}

/** A lease of a `RemoteSession`. */
export interface RemoteLease extends Omit<Lease, 'session' | 'heartbeat' | 'release'> {
  readonly session: RemoteSession;
  /** Renews now; rejects with `LeaseLost` if the renewal found a lease gone. */
  heartbeat(): Promise<void>;
  /**
   * Releases on the server; rejects with `LeaseLost` if a lease had ended (the server's
   * answer or the local deadline says so). A server that cannot be reached lets it end at
   * its TTL.
   */
  release(): Promise<void>;
}

/**
 * Where a Klock takes every time it uses: the `now` of every kernel call, its one timer,
 * backoff sleeps and `timeoutMs` budgets.
 */
export interface Clock<Handle = unknown> {
  /** Integer milliseconds, never going back (any epoch). */
  now(): number;
  /**
   * Runs `callback` once, when `now()` has reached `at`. A handle with `ref()` / `unref()`
   * (as SystemClock's) lets the Klock decide whether its timer keeps the process alive.
   */
  setTimer(at: number, callback: () => void): Handle;
  /** Makes sure the timer does not run (harmless if it ran or was cleared). */
  clearTimer(handle: Handle): void;
}

/** A SystemClock timer handle. */
export interface SystemTimer {
  ref(): this;
  unref(): this;
}

/**
 * Real time: monotonic milliseconds since the clock was made (or what `now` returns), timers
 * on `setTimeout`. The default clock of a Klock.
 */
export declare class SystemClock implements Clock<SystemTimer> {
  constructor(now?: () => number);
  now(): number;
  setTimer(at: number, callback: () => void): SystemTimer;
  clearTimer(handle: SystemTimer): void;
}

/** A ManualClock timer handle. */
export interface ManualTimer {
  readonly at: number;
}

/** Virtual time for tests: moves only by `advance` and `jump`. */
export declare class ManualClock implements Clock<ManualTimer> {
  /** Starts at `start` (default 0). */
  constructor(start?: number);
  now(): number;
  setTimer(at: number, callback: () => void): ManualTimer;
  clearTimer(handle: ManualTimer): void;
  /** When the earliest pending timer is due (possibly already), or `null`. */
  nextTimer(): number | null;
  /**
   * Moves time forward by `ms`, running every timer due up to the new time in time order,
   * `now()` standing at each one's `at` while it runs (timers set meanwhile within the range
   * run too).
   */
  advance(ms: number): void;
  /**
   * Moves time forward by `ms` without running any timer: a paused process. The overdue
   * timers run at the next `advance` (`advance(0)` runs them at once).
   */
  jump(ms: number): void;
}

/** Options of `new Klock()`: the kernel's config plus the clock. */
export interface KlockOptions extends Config {
  /**
   * Where every time comes from: a `ManualClock` (tests in virtual time), a `SystemClock`
   * (the default), any `Clock`, or a function returning integer milliseconds (a
   * `SystemClock` with that `now`).
   */
  clock?: Clock<any> | (() => number);
}

/** What the client did on the kernel's answers (the kernel's own counts: `stats()`). */
export interface ClientCounters {
  grants: number;
  waits: number;
  /** DIE verdicts and DIED events (as the kernel's `died`). */
  deaths: number;
  /** WOUNDED events received by this Klock's sessions (as the kernel's `wounded`). */
  wounds: number;
  retries: number;
  timeouts: number;
  lost: number;
  /** Leases garbage-collected without being released (released by the Klock then). */
  collected: number;
}

/**
 * Owns one kernel, drives it with one unref'd timer at `nextDeadline()` (and the next
 * heartbeat due), and routes the kernel's events to the sessions waiting for them.
 */
export declare class Klock {
  constructor(options?: KlockOptions);
  /** The kernel this Klock drives (calls made on it directly bypass the event routing). */
  readonly kernel: Kernel;
  /** Where every time of this Klock comes from. */
  readonly clock: Clock<any>;
  readonly counters: ClientCounters;
  /** The last unexpected error inside the timer callback (a bug), if any. */
  readonly timerError: unknown;
  /** The Klock's time in integer milliseconds. */
  now(): number;
  /** Opens a session; the kernel assigns its priority (older = higher). */
  session(agentId: string, options?: { namespace?: string }): Promise<Session>;
  /**
   * Re-attaches a restarted agent to its session from `session.digest()`: the same priority,
   * epoch + 1, every lease renewed (SPEC.md §5).
   */
  resume(digest: StateDigest): Promise<Session>;
  resourceState(resource: string, namespace?: string): ResourceState;
  stats(): Stats;
  snapshot(): Snapshot;
  /**
   * Ends every acquisition in progress with `Closed` (tickets withdrawn), closes every
   * session in the kernel (releasing what they hold: their Leases are lost,
   * 'LEASE_RELEASED') and stops the timer. Idempotent.
   */
  close(): void;
}

/** Options of `session.lease()`. */
export interface LeaseOptions {
  /**
   * Lease TTL (default: the kernel's `defaultTtlMs`); heartbeats renew it a third of the way
   * through the lease's current TTL. Asking again for a lease the session holds never
   * shortens it (the larger TTL wins). Above the kernel's cap (`maxTtlMs`, 5 minutes by
   * default) the kernel cuts it, and the grant emits a process warning
   * (`TtlCappedWarning`, code `KLOCK_TTL_CAPPED`).
   */
  ttlMs?: number;
  /**
   * Give up with `Timeout` after this many milliseconds (WAITs and DIE/WOUNDED backoffs
   * included): an integer from 0 (try once) to 2^53 - 1, or `Infinity` for no client-side
   * limit. Default: retry the kernel's default wait until granted.
   */
  timeoutMs?: number;
  /** Cancels a pending acquisition (the promise rejects with `signal.reason`). */
  signal?: AbortSignal;
}

/** One run of one agent against the Klock's kernel. */
export declare class Session {
  readonly klock: Klock;
  readonly sessionId: number;
  readonly agentId: string;
  readonly namespace: string;
  /**
   * The priority the session was opened with (smaller = older = higher). The kernel keeps it
   * across every DIE, WOUNDED and retry of a unit of work and assigns a fresh (youngest) one
   * when the session starts a new unit (SPEC.md §5).
   */
  readonly priority: number;
  readonly closed: boolean;
  /**
   * Acquires every intent at once (`"PREDICATE TYPE:/path"`); resolves when granted, waiting
   * for the grant event or retrying after DIE as the kernel says.
   */
  lease(intents: string | readonly string[], options?: LeaseOptions): Promise<Lease>;
  /**
   * Acquires, runs `fn(lease)`, releases in `finally`. Rejects with what `fn` threw, or with
   * `LeaseLost` if a lease ended while `fn` ran (also when the release finds it expired).
   */
  withLease<T>(
    intents: string | readonly string[],
    fn: (lease: Lease) => T | Promise<T>,
    options?: LeaseOptions,
  ): Promise<T>;
  /** The recovery digest to save for `klock.resume(digest)`. */
  digest(): StateDigest;
  /** Marks the session as restarting: its leases survive missed heartbeats for the grace. */
  suspend(): void;
  /** The kernel's truth for each lease id. */
  reconcile(leaseIds: Iterable<number>): ReconcileResult[];
  /**
   * Ends the session's acquisitions in progress with `Closed`, closes it in the kernel
   * (releasing everything it holds: its Leases are lost, 'LEASE_RELEASED') and withdraws its
   * waits; later calls reject with `Closed`. Idempotent.
   */
  close(): void;
  /** `close()`: what `await using session = await klock.session(...)` calls. */
  [Symbol.asyncDispose](): Promise<void>;
}

/**
 * Intents held together: the handle `session.lease()` resolves with. Release it (or use
 * `withLease`, or `await using`); one that becomes unreachable unreleased is released when
 * garbage-collected, and is not heartbeated meanwhile.
 */
export declare class Lease {
  readonly session: Session;
  readonly intents: readonly string[];
  /** The kernel leases, one per distinct intent, as the kernel last reported them. */
  readonly leases: LeaseInfo[];
  /** Set when a lease ended early (and then `signal` is aborted with it). */
  readonly lost: LeaseLost | null;
  /** Aborts with the `LeaseLost` error when a lease ends early. */
  readonly signal: AbortSignal;
  /** Held and not lost. */
  readonly held: boolean;
  /** The largest fence: the protected resource must reject writes with a smaller one. */
  readonly fence: number;
  /** Fence per canonical resource. */
  readonly fences: Record<string, number>;
  readonly leaseIds: number[];
  /** The earliest expiry (moved forward by every heartbeat and re-acquire). */
  readonly expiresAt: number;
  /** Throws `LeaseLost` if a lease has ended. */
  check(): void;
  /** Renews every lease now; throws `LeaseLost` if one has ended. */
  heartbeat(): void;
  /**
   * Releases (leases shared with another Lease of the session stay held). Throws `LeaseLost`
   * if a lease had ended, also when this release is what finds it expired. Idempotent.
   */
  release(): void;
  /** `release()`: what `await using lease = await session.lease(...)` calls. */
  [Symbol.asyncDispose](): Promise<void>;
  /** `release()`: what `using` calls. */
  [Symbol.dispose](): void;
}

/** Who leads an election (`Election.leader()`): times in the kernel's milliseconds. */
export interface Leader {
  /** The campaigner's identity. */
  agentId: string;
  sessionId: number;
  /** The term: the lease's fence. */
  term: number;
  /** The lease's `acquiredAt` (the server's milliseconds remotely). */
  since: number;
  expiresAt: number;
  leaseId: number;
}

export interface ElectionOptions {
  /** The candidate's identity (default `HOST/PID`). */
  agentId?: string;
  /** The leader's lease TTL (default 15 000). */
  ttlMs?: number;
  /** The Klock's by default. */
  namespace?: string;
  /** Told when a term is lost (not resigned), in a microtask. */
  onLost?: (error: LeaseLost) => void;
  /** `observe()`'s pace (default 250). */
  pollMs?: number;
}

/**
 * Leader election on the resource `LEADER:/NAME` (node/election.js): the term is the lease's
 * fence; `signal` aborts, `whenLost()` resolves and `onLost` is called when a term is lost.
 */
export declare class Election {
  constructor(klock: Klock | RemoteKlock, name: string, options?: ElectionOptions);
  readonly klock: Klock | RemoteKlock;
  /** `LEADER:/NAME` in the kernel's normal form. */
  readonly resource: string;
  readonly name: string;
  readonly agentId: string;
  readonly namespace: string;
  readonly ttlMs: number;
  readonly pollMs: number;
  onLost: ((error: LeaseLost) => void) | null;
  /** The current term while this candidate leads (or led until an unresigned loss), else null. */
  readonly term: number | null;
  /** The `LeaseLost` that ended the last campaign's term (not resigned), else null. */
  readonly lost: LeaseLost | null;
  /** Aborts with the `LeaseLost` when the term of the last campaign is lost. */
  readonly signal: AbortSignal;
  /** Resolves with the term once this candidate leads (`Timeout`, `signal.reason`, `Closed`). */
  campaign(options?: { timeoutMs?: number; signal?: AbortSignal }): Promise<number>;
  /** Releases (the next campaigner is granted) and closes the campaign's session. */
  resign(): Promise<void>;
  /** Whether this candidate leads now with a valid lease (settles the clock first). */
  isLeader(): boolean;
  /** The term, or throws the `LeaseLost` (`STATE_ERROR` when not campaigning). */
  check(): number;
  /** Resolves with the `LeaseLost` when the term of the last campaign is lost. */
  whenLost(): Promise<LeaseLost>;
  /** Who leads now, or null. */
  leader(): Promise<Leader | null>;
  /** Every change of `leader()` in term order, re-read every `pollMs`; ends on abort or close. */
  observe(options?: { signal?: AbortSignal }): AsyncGenerator<Leader | null, void, undefined>;
  [Symbol.asyncDispose](): Promise<void>;
}
