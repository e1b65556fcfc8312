'use strict';
// The friendly client: Klock, Session and Lease, on the native kernel (./index.js) or, made by
// `connect(url)`, on `klock serve` (./remote.js).
//
// Backends: the friendly layer below exists once and calls a backend with the kernel's own
// JavaScript API (bindings/js-api/kernel.d.ts): `openSession`, `acquire`, `heartbeat`,
// `release`, `cancelWait`, `closeSession`, `advance`, `nextDeadline`, `pendingEvents`,
// `drainEvents`, `resourceState`, `stats`. In process the backend is the native `Kernel`
// itself (no wrapper, so the hot path costs what it did). Remotely it is `RemoteKernel`, whose
// calls that reach the server answer Promises; the layer awaits those (an `instanceof Promise`
// check on the in-process path), routes the events the remote backend queues through the same
// dispatch, and the calls that are synchronous in process (`release`, `heartbeat`, `close`)
// answer Promises remotely. Lost-lease rules specific to a remote kernel (local deadlines,
// reconnects) live in remote.js and reach this layer as events (`LEASE_LOST`).
//
// Contract
// - A Klock owns one kernel and takes every time it uses from one clock: the `now` of every
//   kernel call, its one timer, backoff sleeps and `timeoutMs` budgets. A clock has `now()`
//   (integer milliseconds, never going back), `setTimer(at, callback)` (runs `callback` once
//   when `now()` has reached `at`; returns a handle) and `clearTimer(handle)`. The default
//   `SystemClock` counts monotonic milliseconds since it was made and runs timers with
//   `setTimeout`; a `ManualClock` moves only when a test says so (`advance(ms)` runs the timers
//   due on the way, each at its own time; `jump(ms)` runs none, like a paused process), so a
//   test drives the client through virtual time deterministically, without sleeping.
// - Every kernel call is followed by draining the kernel's events and routing each to whoever
//   waits for it, then by re-arming one timer for the earliest of the kernel's
//   `nextDeadline()` and the next heartbeat due. When it fires the Klock calls `advance(now)`
//   and sends the heartbeats due. Nothing polls.
// - The timer is unref'd (when the clock's handles have `unref`, as SystemClock's do): held
//   leases, heartbeats and expiries never keep the process alive. Only while a `lease()` call
//   waits for a kernel event (a WAIT ticket) is it ref'd, because that event (a timeout, an
//   expiry that frees the resource) may come from the timer alone, and the caller is awaiting
//   it.
// - The kernel decides everything (grants, waits, deaths, expiries, timeouts, backoffs); this
//   module only carries the decisions out: `session.lease()` resolves when the kernel grants
//   (at once, or by the GRANTED event of its ticket), sleeps the kernel's `retryAfterMs` after
//   a DIE verdict, a DIED event or a WOUNDED event (all three count as a DIE, SPEC.md §8; the
//   client never sizes a backoff itself) and asks again with the same session, and releases
//   what it holds when asked (`withLease` does it in `finally`).
// - A DIE (or DIED, or WOUNDED) is retried only while the session holds nothing else through
//   this client; otherwise the promise rejects with `Died` so the caller's unit of work
//   releases everything and starts over with all its intents in one manifest (SPEC.md §6).
// - Which Leases (blocks, nested or not) hold which kernel leases, which leases a release
//   ends (those no other Lease of the session holds), where a lost lease goes (every Lease
//   holding it) and when each Lease's next heartbeat is due are the core's ledger's answers
//   (klock_core::client::Ledger, through the addon's `Ledger`); this module carries them out.
//   Heartbeats follow each lease as the kernel last reported it (grant, re-acquire,
//   heartbeat): a Lease is renewed when a third of a lease's current `ttlMs` has passed since
//   its last renewal (at `expiresAt - 2·ttlMs/3`; remotely from the local deadline). The
//   Leases of one session that share a kernel lease (nested blocks) see one ledger entry of
//   it, so `lease.leases` and `lease.expiresAt` always show the current expiry and TTL.
// - The Klock never refers to a Lease handle (what `lease()` gives), only to its `LeaseCore`
//   (its state, which never refers back): only a Lease that something can still release is
//   heartbeated. A Lease that becomes unreachable without being released is released when it
//   is garbage-collected (FinalizationRegistry; `counters.collected`), so a forgotten Lease
//   frees its resource instead of being renewed forever. In process, a new Lease is registered
//   with the FinalizationRegistry once the event loop turns (an unref'd `setImmediate`), if it
//   is still held then: until that registration the Klock holds it, so it cannot be collected
//   unseen, and the many Leases released within the job that made them are never registered
//   at all. Remote, a Lease is registered as it is given out (each took a round trip: the
//   registration costs less than the turn that would defer it).
// - A held lease that ends early marks its Lease lost: `lease.lost` is the `LeaseLost` error,
//   `lease.signal` aborts with it, `lease.check()` throws it, and the first `release()` (so
//   `withLease` and `await using`) throws it — also when that release is the call that settles
//   the expiry (a callback that blocked the event loop past the TTL, a paused process). Its
//   name is `LEASE_EXPIRED` (expired) or `LEASE_RELEASED` (wounded, or its session closed: by
//   `session.close()`, `klock.close()`, or in the kernel behind the client's back, found by
//   the next heartbeat; closing a session releases what it holds, SPEC.md §5).
// - An AbortSignal cancels a pending `lease()`: a waiting ticket is withdrawn with
//   `cancelWait`, a backoff sleep is cut short, and the promise rejects with
//   `signal.reason`. `Klock.close()` (and `Session.close()` for its own acquisitions) does the
//   same with `Closed`. A grant that happened first wins over an abort.
// - A lease alone is not mutual exclusion when a holder can pause past its expiry: pass
//   `lease.fence` to the protected resource and have it reject smaller fences.

const fs = require('node:fs');
const native = require('./index.js');
// Re-exported by name (shorthand entries: what lets `import { parseIntent } from 'klock'` see them).
const { parseIntent, afterSetback, MAX_MANIFEST_INTENTS, MAX_NAME_BYTES, MAX_RESOURCE_BYTES } = native;
const { RemoteKernel, Unreachable } = require('./remote.js');
const { fencedWrite, fencedWriteAsync, StaleFence } = require('./fence.js');
const { file } = require('./names.js');
const { Election } = require('./election.js');

const { Kernel, KlockError, ERROR_CODES, Ledger, renewAt, AFTER_NO_WAIT_DIE } = native;

/** The Klock option (internal, used by `connect`) that gives it a backend instead of a Kernel. */
const BACKEND = Symbol('klock.backend');

/** Whether the core ends an acquisition whose no-wait attempt got a DIE with a timeout (it does). */
const NO_WAIT_DIE_TIMES_OUT = AFTER_NO_WAIT_DIE.startsWith('timeout_');

/** The default of `connect`'s `reconnectTimeoutMs`. */
const RECONNECT_TIMEOUT_MS = 30_000;
/** The default of `connect`'s `requestTimeoutMs` (as Python's `request_timeout`, 10 s). */
const REQUEST_TIMEOUT_MS = 10_000;

/** A lease of a Lease ended before the Lease was released (expired, wounded, closed). */
class LeaseLost extends KlockError {
  constructor(name, message, leaseIds) {
    super(message, ERROR_CODES[name] ?? 0, name);
    this.leaseIds = leaseIds;
  }
}

/**
 * DIE while the session holds other leases: roll back, then retry after `retryAfterMs`.
 * `cycle`: under `detect`, the session ids of the wait-for cycle this session died to break,
 * itself first and following the edges, as the kernel named it (SPEC.md §6.1); empty for any
 * other death.
 */
class Died extends KlockError {
  constructor(message, retryAfterMs, heldBy, cycle = []) {
    super(message, 0, 'DIE');
    this.retryAfterMs = retryAfterMs;
    this.heldBy = heldBy;
    this.cycle = cycle;
  }
}

/** Why a DIE or DIED ended an attempt: the kernel's `cycle` when it names one, else `otherwise`. */
function diedWhy(cycle, what, otherwise) {
  if (cycle.length === 0) return otherwise;
  return (
    `died breaking a wait-for cycle with sessions ${cycle.slice(1).join(', ')} while asking for ${what} ` +
    `(the cycle ${cycle.join(' -> ')}: the youngest unit of work on it dies)`
  );
}

/** The intents could not be had within `timeoutMs`. */
class Timeout extends KlockError {
  constructor(message, heldBy) {
    super(message, 0, 'TIMEOUT');
    this.heldBy = heldBy;
  }
}

/** The Klock or the session was closed before or while the call ran (`code` 0). */
class Closed extends KlockError {
  constructor(message) {
    super(message, 0, 'CLOSED');
  }
}

const KLOCK_CLOSED = 'this Klock is closed';
const SESSION_CLOSED = 'this session is closed';

const LOST_BEFORE_RELEASE = 'the lease expired before it was released (heartbeats came too late)';
const LOST_TO_SESSION_CLOSE = 'the session was closed while the Lease held it';
const LOST_TO_KLOCK_CLOSE = 'the Klock was closed while the Lease held it';
const LOST_TO_KERNEL_CLOSE = 'the session was closed in the kernel (not through this client) while the Lease held it';

/** Longest delay `setTimeout` takes; a later timer fires early and re-arms. */
const MAX_DELAY = 2 ** 31 - 1;

/** The largest time the addon takes (2^53 - 1): the wait of `timeoutMs: Infinity`. */
const MAX_MS = Number.MAX_SAFE_INTEGER;

/** How many Leases may wait for their registration before the released ones are dropped. */
const UNREGISTERED_COMPACT = 1024;

/** After an unexpected error in the timer callback (a bug), try again this much later. */
const TIMER_RETRY_MS = 50;

function checkInteger(value, what, { min = 0 } = {}) {
  if (value === undefined) return;
  if (typeof value !== 'number') {
    const error = new TypeError(`\`${what}\` must be an integer number, got ${value === null ? 'null' : typeof value}`);
    error.code = 'ERR_INVALID_ARG_TYPE';
    throw error;
  }
  if (!Number.isSafeInteger(value) || value < min) {
    const error = new RangeError(`\`${what}\` must be an integer from ${min} to 2^53 - 1, got ${value}`);
    error.code = 'ERR_OUT_OF_RANGE';
    throw error;
  }
}

function checkKeys(object, what, allowed) {
  if (object === undefined || object === null) return {};
  if (typeof object !== 'object' || Array.isArray(object)) {
    const error = new TypeError(`\`${what}\` must be a plain object`);
    error.code = 'ERR_INVALID_ARG_TYPE';
    throw error;
  }
  for (const key of Object.keys(object)) {
    if (!allowed.includes(key)) {
      const error = new TypeError(`\`${what}\` has an unknown key \`${key}\` (allowed: ${allowed.join(', ')})`);
      error.code = 'ERR_INVALID_ARG_VALUE';
      throw error;
    }
  }
  return object;
}

/** `timeoutMs`: undefined, Infinity (no client-side limit), or an integer from 0 to 2^53 - 1. */
function checkTimeout(value, what) {
  if (value === undefined || value === Infinity) return;
  if (typeof value !== 'number') {
    const error = new TypeError(
      `\`${what}\` must be a number of milliseconds or Infinity, got ${value === null ? 'null' : typeof value}`,
    );
    error.code = 'ERR_INVALID_ARG_TYPE';
    throw error;
  }
  if (!Number.isSafeInteger(value) || value < 0) {
    const error = new RangeError(
      `\`${what}\` must be an integer number of milliseconds from 0 to ${MAX_MS} (2^53 - 1), ` +
        `or Infinity to wait with no limit; got ${value}`,
    );
    error.code = 'ERR_OUT_OF_RANGE';
    throw error;
  }
}

/**
 * Real time: `now()` is monotonic milliseconds since the clock was made (or what the `now`
 * function given returns), and timers run on `setTimeout` (their handles have `ref()` and
 * `unref()`).
 */
class SystemClock {
  constructor(now) {
    if (now !== undefined && typeof now !== 'function') {
      const error = new TypeError('`now` must be a function returning milliseconds');
      error.code = 'ERR_INVALID_ARG_TYPE';
      throw error;
    }
    if (now === undefined) {
      const t0 = process.hrtime.bigint();
      now = () => Number((process.hrtime.bigint() - t0) / 1_000_000n);
    }
    this._now = now;
  }

  now() {
    return this._now();
  }

  setTimer(at, callback) {
    checkInteger(at, 'at');
    return new SystemTimer(this, at, callback);
  }

  clearTimer(timer) {
    timer._clear();
  }
}

/** A SystemClock timer: a `setTimeout`, armed again while it fires before the clock reaches `at`. */
class SystemTimer {
  constructor(clock, at, callback) {
    this._refed = true;
    const arm = () => {
      const delay = Math.min(MAX_DELAY, Math.max(0, at - clock.now()));
      this._timeout = setTimeout(() => (clock.now() < at ? arm() : callback()), delay);
      if (!this._refed) this._timeout.unref();
    };
    arm();
  }

  ref() {
    this._refed = true;
    this._timeout.ref();
    return this;
  }

  unref() {
    this._refed = false;
    this._timeout.unref();
    return this;
  }

  _clear() {
    clearTimeout(this._timeout);
  }
}

/**
 * Virtual time for tests: starts at `start` and moves only by `advance(ms)` (running every
 * timer due up to the new time in time order, `now()` standing at each one's `at` while it
 * runs; timers set by callbacks within the range run too) or `jump(ms)` (running none: a
 * paused process; the overdue timers run at the next `advance`, `advance(0)` at once).
 */
class ManualClock {
  constructor(start = 0) {
    checkInteger(start, 'start');
    this._now = start;
    this._timers = [];
    this._seq = 0;
  }

  now() {
    return this._now;
  }

  setTimer(at, callback) {
    checkInteger(at, 'at');
    if (typeof callback !== 'function') {
      const error = new TypeError('`callback` must be a function');
      error.code = 'ERR_INVALID_ARG_TYPE';
      throw error;
    }
    const timer = { at, seq: ++this._seq, callback };
    this._timers.push(timer);
    return timer;
  }

  clearTimer(timer) {
    const i = this._timers.indexOf(timer);
    if (i >= 0) this._timers.splice(i, 1);
  }

  /** When the earliest pending timer is due (possibly already), or `null`. */
  nextTimer() {
    return this._first()?.at ?? null;
  }

  advance(ms) {
    checkInteger(ms, 'ms');
    const target = this._now + ms;
    for (let first = this._first(); first !== null && first.at <= target; first = this._first()) {
      this._now = Math.max(this._now, first.at);
      this.clearTimer(first);
      first.callback();
    }
    this._now = target;
  }

  jump(ms) {
    checkInteger(ms, 'ms');
    this._now += ms;
  }

  _first() {
    let first = null;
    for (const t of this._timers)
      if (first === null || t.at < first.at || (t.at === first.at && t.seq < first.seq)) first = t;
    return first;
  }
}

/** The `clock` option: a clock object, a function (a SystemClock with that `now`), or the default. */
function toClock(clock) {
  if (clock === undefined) return new SystemClock();
  if (typeof clock === 'function') return new SystemClock(clock);
  if (
    clock === null ||
    typeof clock !== 'object' ||
    !['now', 'setTimer', 'clearTimer'].every((m) => typeof clock[m] === 'function')
  ) {
    const error = new TypeError(
      '`options.clock` must be a ManualClock / SystemClock (an object with now(), setTimer(at, callback) and ' +
        'clearTimer(timer)) or a function returning milliseconds',
    );
    error.code = 'ERR_INVALID_ARG_TYPE';
    throw error;
  }
  return clock;
}

/**
 * What the client did on the kernel's answers (the kernel's own counts: `klock.stats()`).
 * `deaths`: DIE verdicts and DIED events; `wounds`: WOUNDED events received by this Klock's
 * sessions (as the kernel's `died` and `wounded`).
 */
function newCounters() {
  return { grants: 0, waits: 0, deaths: 0, wounds: 0, retries: 0, timeouts: 0, lost: 0, collected: 0 };
}

class Klock {
  /**
   * @param {object} [options] the kernel config (`policy`, `seed`, `defaultTtlMs`, ...) and
   *   `clock`: a `ManualClock`, a `SystemClock` (the default: monotonic, 0 when made), any
   *   object with `now()`, `setTimer(at, callback)` and `clearTimer(handle)`, or a function
   *   returning integer milliseconds (a `SystemClock` with that `now`).
   */
  constructor(options = {}) {
    if (options === null || typeof options !== 'object' || Array.isArray(options)) {
      const error = new TypeError('`options` must be a plain object');
      error.code = 'ERR_INVALID_ARG_TYPE';
      throw error;
    }
    const { clock, [BACKEND]: backend, ...config } = options;
    /** Where every time of this Klock comes from. */
    this.clock = toClock(clock);
    /**
     * The backend this Klock drives: the in-process kernel, or `RemoteKernel` (remote.js) for
     * a Klock made by `connect()`. Calls made on it directly bypass the event routing.
     */
    this.kernel = backend === undefined ? new Kernel(config) : backend(this.clock);
    /** The remote backend, or null in process. */
    this._remote = this.kernel.remote === true ? this.kernel : null;
    /** The namespace sessions open in by default (`connect`'s `namespace`). */
    this._namespace = this._remote?.namespace ?? 'default';
    /** Remote only: ticket events that came before the acquire's answer registered a waiter. */
    this._orphans = new Map();
    /** Remote only: tickets withdrawn whose outcome may still come (a grant raced the cancel). */
    this._withdrawn = new Set();
    this._lastNow = 0;
    /** @type {Map<number, Waiter>} ticket -> the acquisition waiting for it */
    this._waiters = new Map();
    /** @type {Set<Acquisition>} every `lease()` call in progress (waiting or backing off) */
    this._acquisitions = new Set();
    /**
     * Which Leases (blocks) hold which kernel leases, which leases a release ends, where a lost
     * lease goes and when each block's heartbeat is due: the core's ledger
     * (klock_core::client::Ledger), by block id (`LeaseCore._block`).
     */
    this._ledger = new Ledger();
    /**
     * The LeaseCore of every block in the ledger, by its id: the one table beside the ledger
     * (a JS Map costs no more per block than a napi reference the ledger would hold; DECISIONS).
     * @type {Map<number, LeaseCore>}
     */
    this._blocks = new Map();
    /** The id of the last block granted. */
    this._blockSeq = 0;
    /**
     * The ledger's earliest scheduled heartbeat (Infinity: none), as its last answer said:
     * `grant`, `finish` and `schedule` answer it, so arming the timer costs no call per block.
     * A loss only unschedules, so it may be early after one: `_fire` then reads it afresh.
     */
    this._heartbeatAt = Infinity;
    /** @type {Map<number, Session>} */
    this._sessions = new Map();
    /**
     * Who follows every event in process (election observers, `_watch`), called in order from
     * the dispatch. While none does, the kernel emits no ACQUIRED and RELEASED, which the
     * client's own routing has no use for and which cost every acquire and release.
     * @type {Set<(event: object) => void>}
     */
    this._watchers = new Set();
    this.kernel.setHolderEvents?.(false);
    /** Releases what a Lease held when it is collected unreleased (its LeaseCore: `_collected`). */
    this._finalizer = new FinalizationRegistry((held) => this._collected(held));
    /** Leases given out and not yet registered with `_finalizer` (held strongly until then). */
    this._unregistered = [];
    /** At this length `_unregistered` drops the released ones. */
    this._compactAt = UNREGISTERED_COMPACT;
    /** The Immediate that registers them (`_register`), while one is scheduled. */
    this._registering = null;
    this._timer = null;
    this._timerRefed = false;
    this._armedAt = Infinity;
    this._firing = false;
    this._closed = false;
    this.counters = newCounters();
    /** The last unexpected error inside the timer callback (a bug), if any. */
    this.timerError = null;
    if (this._remote !== null) {
      this._remote.onEvents = () => this._settled();
      this._remote.onDown = (sessionId, error) => {
        for (const acquisition of [...this._acquisitions])
          if (acquisition.session.sessionId === sessionId) acquisition.fail(error);
      };
    }
  }

  /** The Klock's time in integer milliseconds (never going back). */
  now() {
    const t = this.clock.now();
    checkInteger(t, 'clock.now()');
    if (t > this._lastNow) this._lastNow = t;
    return this._lastNow;
  }

  /** Opens a session for `agentId` (priority assigned by the kernel: older = higher). */
  async session(agentId, options = {}) {
    const { namespace = this._namespace } = checkKeys(options, 'options', ['namespace']);
    this._checkOpen();
    let info = this._call((now) => this.kernel.openSession(agentId, namespace, now));
    if (info instanceof Promise) info = await this._settledAfter(info);
    const session = new Session(this, info);
    this._sessions.set(info.sessionId, session);
    return session;
  }

  /**
   * Re-attaches a restarted agent to its session from `session.digest()` (SPEC.md §5): the
   * same priority, epoch + 1, every lease renewed; the Session (a new object after a restart)
   * is open again. Remote: the digest is the server's StateDigest JSON, the one the Python
   * client and `klock exec --digest` save, so any of them can resume it.
   */
  async resume(digest) {
    this._checkOpen();
    let info = this._call((now) => this.kernel.resumeSession(digest, now));
    if (info instanceof Promise) info = await this._settledAfter(info);
    let session = this._sessions.get(info.sessionId);
    if (session === undefined) {
      session = new Session(this, info);
      this._sessions.set(info.sessionId, session);
    }
    return session;
  }

  /** Holders, queue and covering holders of one resource node (a Promise when remote). */
  resourceState(resource, namespace = this._namespace) {
    return this._call((now) => this.kernel.resourceState(resource, namespace, now));
  }

  /** The kernel's counters, contention and ghost agents (a Promise of the namespace's when remote). */
  stats() {
    return this._remote === null ? this.kernel.stats() : this._remote.stats(this._namespace);
  }

  /** The kernel's whole state, for dashboards (in process only). */
  snapshot() {
    return this._call((now) => this.kernel.snapshot(now));
  }

  /**
   * Ends every acquisition in progress (waiting or backing off) with `Closed` ("this Klock is
   * closed"), its ticket withdrawn; closes every session in the kernel, which releases what
   * they hold (their Leases are lost, `LEASE_RELEASED`), and stops the timer, so nothing of
   * the Klock keeps the process alive. Later calls reject with `Closed`. Idempotent.
   * Remote: returns a Promise that resolves once the server has closed the sessions (it
   * never rejects: an unreachable server ends them by their idle timeout) and stops the
   * event readers.
   */
  close() {
    if (this._closed) return this._remote === null ? undefined : Promise.resolve();
    this._closed = true;
    // Youngest ticket first: a ticket only waits for older ones, so withdrawing in this order
    // never grants one of the others on the way.
    const pending = [...this._acquisitions].sort((a, b) => (b.lease._ticket ?? -1) - (a.lease._ticket ?? -1));
    for (const acquisition of pending) acquisition.stop(KLOCK_CLOSED);
    const closing = [];
    for (const session of [...this._sessions.values()]) {
      const done = session._end(LOST_TO_KLOCK_CLOSE);
      if (done !== undefined) closing.push(done.catch(() => {}));
    }
    if (this._timer !== null) this.clock.clearTimer(this._timer);
    this._timer = null;
    this._armedAt = Infinity;
    if (this._registering !== null) clearImmediate(this._registering);
    this._registering = null;
    this._unregistered = [];
    if (this._remote === null) return undefined;
    const remote = this._remote;
    return Promise.all(closing).then(() => remote.close());
  }

  _checkOpen() {
    if (this._closed) throw new Closed(KLOCK_CLOSED);
  }

  /**
   * One kernel call at the current time, then its events routed and the timer re-armed. A
   * remote call answers a Promise: `_settledAfter` settles again once it resolves.
   */
  _call(work) {
    try {
      return work(this.now());
    } finally {
      this._settled();
    }
  }

  /** `promise`, with the events it brought routed and the timer re-armed when it settles. */
  _settledAfter(promise) {
    return promise.finally(() => this._settled());
  }

  /** Routes every pending event and re-arms the timer if it must fire sooner. */
  _settled() {
    const kernel = this.kernel;
    // In process, one query says both whether events wait and when the kernel's next deadline
    // is (a remote backend has no such query).
    const quiet = kernel.nextDeadlineIfQuiet?.();
    if (quiet !== undefined) this._armFor(quiet);
    else {
      if (kernel.pendingEvents() > 0) {
        for (const event of kernel.drainEvents()) this._dispatch(event);
      }
      this._arm();
    }
    this._keepAlive();
  }

  /** The timer keeps the process alive only while a lease() call waits for an event. */
  _keepAlive() {
    if (this._timer === null) return;
    const wanted = this._waiters.size > 0;
    if (wanted !== this._timerRefed) {
      this._timerRefed = wanted;
      if (wanted) this._timer.ref?.();
      else this._timer.unref?.();
    }
  }

  _dispatch(event) {
    for (const watcher of this._watchers) watcher(event);
    switch (event.event) {
      case 'GRANTED':
      case 'WAIT_TIMEOUT':
      case 'DIED': {
        const waiter = this._waiters.get(event.ticket);
        if (waiter === undefined) {
          // In process: a ticket made directly on .kernel. Remote: the event came before the
          // acquire's answer (the waiter takes it when it registers, `_adopt`), or after the
          // ticket was withdrawn: a grant that raced the cancel is released at once.
          if (this._remote === null) return;
          if (!this._withdrawn.delete(event.ticket)) bounded(this._orphans.set(event.ticket, event));
          else if (event.event === 'GRANTED') {
            for (const l of event.leases) this.kernel.release(event.session, l.leaseId, this.now()).catch(() => {});
          }
          return;
        }
        this._waiters.delete(event.ticket);
        if (event.event === 'GRANTED') {
          waiter.lease._granted(event.leases);
          // Remote: the grant may be older than the news of it (its local deadline counts
          // from the acquire's send time): renew at once, which starts a fresh one.
          if (this._remote !== null) {
            const lease = waiter.lease;
            queueMicrotask(() => {
              if (lease._state === 'held' && lease.lost === null && !this._closed)
                lease._beat(this.now())?.catch(() => {});
            });
          }
        } else if (event.event === 'DIED') this.counters.deaths++;
        waiter.deliver(event);
        return;
      }
      case 'LEASE_EXPIRED':
        this._lose([event.lease], 'LEASE_EXPIRED', LOST_BEFORE_RELEASE);
        return;
      case 'WOUNDED':
        if (this._sessions.has(event.session)) this.counters.wounds++;
        for (const ticket of event.lostTickets) {
          const waiter = this._waiters.get(ticket);
          if (waiter !== undefined) {
            this._waiters.delete(ticket);
            waiter.deliver(event);
          }
        }
        this._lose(
          event.lostLeases,
          'LEASE_RELEASED',
          `the lease was revoked (wounded) by the older session ${event.by}`,
        );
        return;
      case 'LEASE_LOST':
        // Remote only (remote.js): a local deadline passed, a renewal or a reconcile found the
        // lease gone, or the server could not be reached within the budget.
        this._lose([event.lease], event.name, event.message);
        return;
      case 'SESSION_CLOSED': {
        const session = this._sessions.get(event.session);
        if (session !== undefined) {
          this._sessions.delete(event.session);
          session._closed = true;
        }
        return;
      }
      default:
        return;
    }
  }

  /**
   * The kernel answered UNKNOWN_SESSION for a session this client thought open: it was closed
   * in the kernel behind the client's back (directly on the kernel), which released its
   * leases, or for idleness, when it held none.
   */
  _sessionGone(session) {
    this._sessions.delete(session.sessionId);
    session._closed = true;
    this._lose(this._ledger.sessionLeases(session.sessionId), 'LEASE_RELEASED', LOST_TO_KERNEL_CLOSE);
  }

  /**
   * In process: calls `onEvent(event)` for every later event of the kernel, in order, from
   * the dispatch (it must only take note); returns the function that stops it. The caller
   * tells namespaces apart with `_namespaceOf`.
   */
  _watch(onEvent) {
    this._watchers.add(onEvent);
    this.kernel.setHolderEvents?.(true);
    return () => {
      this._watchers.delete(onEvent);
      this.kernel.setHolderEvents?.(this._watchers.size > 0);
    };
  }

  /** In process: the namespace of an open session of the kernel (undefined: not open). */
  _namespaceOf(sessionId) {
    const own = this._sessions.get(sessionId);
    if (own !== undefined) return own.namespace;
    // Another client's session of this kernel: read once per new holder by an observer.
    return this.kernel.snapshot(0).sessions.find((s) => s.sessionId === sessionId)?.namespace;
  }

  /** Remote: a ticket's event that came before its waiter registered is delivered now. */
  _adopt(ticket) {
    if (this._remote === null) return;
    const event = this._orphans.get(ticket);
    if (event === undefined) return;
    this._orphans.delete(ticket);
    this._dispatch(event);
  }

  /** These kernel leases ended: every Lease still holding one is lost (the ledger routes them). */
  _lose(leaseIds, name, message) {
    for (const id of leaseIds) {
      for (const block of this._ledger.lose(id)) this._blocks.get(block)._lose(name, message, id);
    }
  }

  /**
   * A Lease was garbage-collected without being released: nothing can release it any more,
   * so the kernel leases only it held are released now (never left to be renewed forever).
   */
  _collected(lease) {
    if (this._closed) return;
    this.counters.collected++;
    const session = lease.session;
    lease._state = 'done'; // no more heartbeats
    // The leases only it held and that did not end; it leaves the ledger.
    const ending = this._ledger.releasable(lease._block);
    lease._finish();
    if (ending.length === 0 || session._closed) return;
    try {
      this._call((now) => {
        for (const id of ending) {
          const done = this.kernel.release(session.sessionId, id, now);
          if (done instanceof Promise) done.catch(() => {}); // remote: the TTL ends it anyway
        }
      });
    } catch (e) {
      // Runs from the garbage collector: never throw. UNKNOWN_SESSION: closed by the kernel.
      if (!(e instanceof KlockError && e.name === 'UNKNOWN_SESSION')) this.timerError = e;
    }
  }

  /**
   * A Lease handle given out: registered with the FinalizationRegistry when the event loop
   * turns, if still held (`_register`); held here until then.
   */
  _track(lease) {
    if (this._remote !== null) {
      // Remote: registered at once. Every remote acquire is a round trip, so its Lease is never
      // one of many made and released within one job, and a registration costs less than the
      // turn of the event loop (an Immediate per operation) that would defer it (issue 27, Node
      // at 16 client processes).
      const core = lease._core;
      core._registered = true;
      this._finalizer.register(lease, core, core);
      return;
    }
    const leases = this._unregistered;
    leases.push(lease);
    if (leases.length >= this._compactAt) {
      // A job that runs long (a loop of microtasks) and releases out of order: keep only the
      // held ones, so what waits for the turn stays as large as what is held.
      this._unregistered = leases.filter((l) => l._core._state === 'held');
      this._compactAt = Math.max(UNREGISTERED_COMPACT, 2 * this._unregistered.length);
    }
    if (this._registering === null) {
      this._registering = setImmediate(() => this._register());
      this._registering.unref?.();
    }
  }

  /** Registers the Leases given out since the last turn that are still held. */
  _register() {
    this._registering = null;
    const leases = this._unregistered;
    this._unregistered = [];
    this._compactAt = UNREGISTERED_COMPACT;
    if (this._closed) return;
    for (const lease of leases) {
      const core = lease._core;
      if (core._state !== 'held') continue; // released already
      core._registered = true;
      this._finalizer.register(lease, core, core);
    }
  }

  /** A LeaseCore was released: it needs no finalization any more. */
  _untrack(core) {
    if (core._registered) {
      core._registered = false;
      this._finalizer.unregister(core);
      return;
    }
    // Not registered yet: usually the last one given out (a lease block), dropped at once;
    // otherwise `_register` skips it.
    const leases = this._unregistered;
    if (leases.length > 0 && leases[leases.length - 1]._core === core) leases.pop();
  }

  /** Arms the one timer for the earliest kernel deadline or heartbeat, if sooner than armed. */
  _arm() {
    if (this._closed || this._firing) return;
    this._armFor(this.kernel.nextDeadline());
  }

  /** `_arm`, the kernel's next deadline being `deadline` (null: none). */
  _armFor(deadline) {
    if (this._closed || this._firing) return;
    let next = deadline === null ? Infinity : deadline;
    if (this._heartbeatAt < next) next = this._heartbeatAt;
    if (next >= this._armedAt) return;
    if (this._timer !== null) this.clock.clearTimer(this._timer);
    this._armedAt = next;
    this._timer = this.clock.setTimer(next, () => this._fire());
    this._timerRefed = true;
    this._keepAlive();
  }

  /** The timer fired: settle what is due, send the heartbeats due, re-arm (once, at the end). */
  _fire() {
    this._timer = null;
    this._armedAt = Infinity;
    if (this._closed) return;
    this._firing = true;
    let retryAt = null;
    try {
      const now = this.now();
      this.kernel.advance(now);
      this._settled();
      // The ledger moves a block renewed meanwhile (a nested block's re-acquire, a heartbeat
      // of a lease it shares) to its new time instead of handing it out.
      for (let due = this._ledger.popDue(now); due !== null; due = this._ledger.popDue(now)) {
        this._blocks.get(due.block)._beat(now);
      }
      this._heartbeatAt = this._ledger.nextHeartbeat() ?? Infinity;
    } catch (e) {
      this.timerError = e; // a bug: keep the timer alive, expose what happened
      retryAt = this._lastNow + TIMER_RETRY_MS;
    }
    this._firing = false;
    if (retryAt === null) this._arm();
    else {
      this._armedAt = retryAt;
      this._timer = this.clock.setTimer(retryAt, () => this._fire());
    }
    this._keepAlive();
  }
}

/** Most entries a remote bookkeeping set or map keeps (the oldest go first). */
const BOUND = 1024;

/** Drops the oldest entries of `collection` (a Set or a Map) beyond BOUND. */
function bounded(collection) {
  while (collection.size > BOUND) collection.delete(collection.keys().next().value);
}

/** The wait to ask for at `now`: Infinity is the largest the addon takes; undefined, the kernel's default. */
/** The message of a `Timeout` the core decided (`next.what`, afterSetback), by its reason. */
function timeoutMessage(reason, { what, heldBy, timeoutMs, why, session, retryAfterMs }) {
  const holders = heldBy.join(', ');
  if (reason === 'timeout_no_wait') return `${what} held by sessions ${holders} (timeout ${timeoutMs} ms)`;
  if (reason === 'timeout_wait_ended') return `waited ${timeoutMs} ms for ${what}; still held by sessions ${holders}`;
  return `${what}: session ${session.sessionId} ${why}; the next retry (${retryAfterMs} ms) would pass the timeout`;
}

function waitFor(forever, deadline, now) {
  return forever ? MAX_MS : deadline === undefined ? undefined : Math.max(0, deadline - now);
}

/** One acquisition waiting for the event that resolves its ticket. */
class Waiter {
  constructor(lease) {
    this.lease = lease;
    this.deliver = () => {};
  }
}

/** One `lease()` call in progress; `stop(message)` ends it with `Closed`. */
class Acquisition {
  constructor(lease) {
    this.lease = lease;
    this.session = lease.session;
    this.controller = new AbortController();
  }

  get signal() {
    return this.controller.signal;
  }

  stop(message) {
    if (this.signal.aborted) return;
    this.controller.abort(new Closed(`${message}: the acquisition of ${intentText(this.lease.intents)} was abandoned`));
  }

  /** Ends it with `error` (remote: the server stayed unreachable past the reconnect budget). */
  fail(error) {
    if (!this.signal.aborted) this.controller.abort(error);
  }
}

function intentList(intents) {
  if (typeof intents === 'string') return [intents];
  return intents;
}

/** The intents for a message (whatever the caller passed: the kernel validates them). */
function intentText(intents) {
  return Array.isArray(intents) ? intents.join(', ') : String(intents);
}

/** The keys of `session.lease()`'s options. */
const LEASE_OPTIONS = ['ttlMs', 'timeoutMs', 'signal'];

class Session {
  constructor(klock, info) {
    this.klock = klock;
    this.sessionId = info.sessionId;
    this.agentId = info.agentId;
    this.namespace = info.namespace;
    /**
     * The priority the session was opened with (smaller = older = higher). The kernel keeps
     * it across every DIE, WOUNDED and retry of a unit of work and gives the session a fresh,
     * youngest one when it starts a new unit (SPEC.md §5): `klock.snapshot()` shows it.
     */
    this.priority = info.priority;
    this._closed = false;
    this._closedByUser = false;
  }

  /** Whether the session was closed (by `close()`, its Klock, or the kernel for idleness). */
  get closed() {
    return this._closed;
  }

  /**
   * Acquires every intent at once and resolves with the held Lease.
   * @param {string | string[]} intents `"PREDICATE TYPE:/path"`, e.g. `"MUTATES FILE:/x"`
   * @param {{ ttlMs?: number, timeoutMs?: number, signal?: AbortSignal }} [options]
   */
  async lease(intents, options) {
    return this._lease(intents, options);
  }

  /**
   * `lease()` without a Promise when the kernel grants at once: the held Lease, or a Promise
   * of it (`withLease` then skips a turn of the event loop).
   */
  _lease(intents, options) {
    let ttlMs;
    let timeoutMs;
    let signal;
    if (options !== undefined) {
      ({ ttlMs, timeoutMs, signal } = checkKeys(options, 'options', LEASE_OPTIONS));
      checkTimeout(timeoutMs, 'options.timeoutMs');
      if (signal !== undefined && !(signal instanceof AbortSignal)) {
        const error = new TypeError('`options.signal` must be an AbortSignal');
        error.code = 'ERR_INVALID_ARG_TYPE';
        throw error;
      }
    }
    const core = new LeaseCore(this, intentList(intents), ttlMs);
    const acquiring = core._acquire(timeoutMs, signal); // undefined: granted at once
    if (acquiring === undefined) return this._held(core);
    return acquiring.then(() => this._held(core));
  }

  /** The Lease handle of an acquired `core`. */
  _held(core) {
    if (core.ttlMs !== undefined) warnIfCapped(core);
    const lease = new Lease(core);
    // Collected unreleased: what it holds is released (`Klock._collected`).
    if (core._state === 'held') this.klock._track(lease);
    return lease;
  }

  /**
   * Acquires `intents`, runs `fn(lease)`, and releases in `finally`. Rejects with what `fn`
   * threw, or with `LeaseLost` if a lease ended while `fn` ran — also when the release itself
   * finds it expired (watch `lease.signal` to stop early).
   */
  async withLease(intents, fn, options) {
    if (typeof fn !== 'function') {
      const error = new TypeError('`fn` must be a function (lease) => ...');
      error.code = 'ERR_INVALID_ARG_TYPE';
      throw error;
    }
    const acquired = this._lease(intents, options);
    const lease = acquired instanceof Lease ? acquired : await acquired;
    let result;
    try {
      result = await fn(lease);
    } catch (error) {
      try {
        const released = lease.release();
        if (released !== undefined) await released;
      } catch {
        // The callback's own error is the one to report; `lease.lost` keeps the loss.
      }
      throw error;
    }
    const released = lease.release(); // a Promise only remote
    if (released !== undefined) await released;
    lease.check();
    return result;
  }

  /**
   * The recovery digest to save for `klock.resume(digest)` (a Promise when remote: the
   * server's StateDigest JSON).
   */
  digest() {
    this._checkOpen();
    const k = this.klock;
    const answer = k._call((now) => k.kernel.digest(this.sessionId, now));
    return answer instanceof Promise ? k._settledAfter(answer) : answer;
  }

  /**
   * Marks the session as restarting: its leases survive missed heartbeats for the kernel's
   * grace (SPEC.md §5) until `klock.resume(digest)`. A Promise when remote.
   */
  suspend() {
    this._checkOpen();
    const k = this.klock;
    const answer = k._call((now) => k.kernel.suspendSession(this.sessionId, now));
    return answer instanceof Promise ? k._settledAfter(answer).then(() => undefined) : undefined;
  }

  /**
   * The kernel's truth for each lease id: `{ leaseId, status, expiresAt?, fence? }` (status
   * `ACTIVE`, `EXPIRED`, `RELEASED`, `NOT_OWNER` or `UNKNOWN`). A Promise when remote.
   */
  reconcile(leaseIds) {
    this._checkOpen();
    const k = this.klock;
    const answer = k._call((now) => k.kernel.reconcile(this.sessionId, [...leaseIds], now));
    return answer instanceof Promise ? k._settledAfter(answer) : answer;
  }

  /**
   * Closes the session in the kernel, which releases everything it holds and withdraws its
   * waits: its acquisitions in progress reject with `Closed` ("this session is closed"), its
   * held Leases are lost (`LEASE_RELEASED`: their `release()` throws it), and later calls
   * reject with `Closed`. Idempotent. Remote: returns a Promise of the server's close.
   */
  close() {
    if (this._closedByUser) return undefined;
    this._closedByUser = true;
    for (const acquisition of [...this.klock._acquisitions]) {
      if (acquisition.session === this) acquisition.stop(SESSION_CLOSED);
    }
    return this._end(LOST_TO_SESSION_CLOSE);
  }

  /**
   * Closes the session in the kernel (unless the kernel closed it already) and marks every
   * Lease holding one of its leases lost.
   */
  _end(why) {
    this._closedByUser = true;
    const k = this.klock;
    k._sessions.delete(this.sessionId);
    let done;
    if (!this._closed) {
      this._closed = true;
      try {
        done = k._call((now) => k.kernel.closeSession(this.sessionId, now));
      } catch (e) {
        // Closed in the kernel already (idle, or directly on the kernel).
        if (!(e instanceof KlockError && e.name === 'UNKNOWN_SESSION')) throw e;
      }
    }
    k._lose(k._ledger.sessionLeases(this.sessionId), 'LEASE_RELEASED', why);
    if (done instanceof Promise) {
      // Remote: the server closes it; UNKNOWN_SESSION means it was gone already.
      return k._settledAfter(done).catch((e) => {
        if (!(e instanceof KlockError && e.name === 'UNKNOWN_SESSION')) throw e;
      });
    }
    return undefined;
  }

  /** Throws `Closed` if this session or its Klock was closed by the user. */
  _checkOpen() {
    this.klock._checkOpen();
    if (this._closedByUser) throw new Closed(SESSION_CLOSED);
  }
}

if (typeof Symbol.asyncDispose === 'symbol') {
  Session.prototype[Symbol.asyncDispose] = async function asyncDispose() {
    this.close();
  };
}

/** Resolves after `ms` of the Klock's clock; rejects on an abort of one of `signals`. */
function sleep(klock, ms, signals) {
  return new Promise((resolve, reject) => {
    const aborted = signals.find((s) => s?.aborted);
    if (aborted !== undefined) {
      reject(aborted.reason);
      return;
    }
    const listeners = [];
    const cleanup = () => {
      klock.clock.clearTimer(timer);
      for (const [signal, onAbort] of listeners) signal.removeEventListener('abort', onAbort);
    };
    const timer = klock.clock.setTimer(klock.now() + ms, () => {
      cleanup();
      resolve();
    });
    for (const signal of signals) {
      if (signal === undefined) continue;
      const onAbort = () => {
        cleanup();
        reject(signal.reason);
      };
      listeners.push([signal, onAbort]);
      signal.addEventListener('abort', onAbort, { once: true });
    }
  });
}

/**
 * A set of intents held together: the handle `session.lease()` gives. Everything it shows and
 * does is its `LeaseCore`'s, which the Klock holds (strongly) while it is held; the Klock
 * never refers to the handle, so a handle nobody can reach any more is collected, and the
 * FinalizationRegistry then releases what its core holds (see the module contract).
 */
class Lease {
  constructor(core) {
    this._core = core;
  }

  get session() {
    return this._core.session;
  }

  get intents() {
    return this._core.intents;
  }

  get ttlMs() {
    return this._core.ttlMs;
  }

  /**
   * The kernel leases, one per distinct intent (in order of first appearance), as the
   * kernel last reported them: shared with the other Leases of the session holding the same
   * kernel lease, and kept current by every heartbeat and re-acquire.
   */
  get leases() {
    return this._core.leases;
  }

  /** The `LeaseLost` error once a lease of this Lease has ended early, else null. */
  get lost() {
    return this._core.lost;
  }

  /** Aborts with the `LeaseLost` error when a lease of this Lease ends early. */
  get signal() {
    return this._core.signal;
  }

  /** Whether every lease is still held (not released, not lost). */
  get held() {
    return this._core.held;
  }

  /** The largest fence of the leases: pass it to the protected resource. */
  get fence() {
    return this._core.fence;
  }

  /** Fence per canonical resource (the largest when one resource has two predicates). */
  get fences() {
    return this._core.fences;
  }

  get leaseIds() {
    return this._core.leaseIds;
  }

  /** The earliest expiry of the leases (moved forward by every heartbeat and re-acquire). */
  get expiresAt() {
    return this._core.expiresAt;
  }

  /** Throws `LeaseLost` if a lease of this Lease has ended. */
  check() {
    this._core.check();
  }

  /**
   * Renews every lease now (the Klock also does it on its own); throws `LeaseLost`. Remote:
   * returns a Promise that rejects with `LeaseLost` if the renewal found a lease gone.
   */
  heartbeat() {
    return this._core.heartbeat();
  }

  /**
   * Releases what this Lease holds (leases shared with another Lease of the session stay
   * held). Throws `LeaseLost` if a lease of it had ended — also when this release is what
   * finds it expired. Idempotent: later calls do nothing. Remote: returns a Promise that
   * resolves once the server released (it rejects with the `LeaseLost` only; a server that
   * cannot be reached lets the lease end at its TTL).
   */
  release() {
    return this._core.release();
  }
}

/**
 * A grant whose TTL the kernel cut to its cap (`maxTtlMs`, 5 minutes by default; SPEC.md §6) is
 * never silent: a process warning (`KLOCK_TTL_CAPPED`), not an error, since the lease is held
 * and renewed and the cap is the kernel's (a server's) configuration, learned from the grant.
 */
function warnIfCapped(core) {
  let got = Infinity;
  for (const l of core._leases) got = Math.min(got, l.ttlMs);
  if (got >= core.ttlMs) return;
  process.emitWarning(
    `asked for a TTL of ${core.ttlMs} ms for ${JSON.stringify(core.intents)}; the kernel granted ${got} ms, its cap (maxTtlMs)`,
    { type: 'TtlCappedWarning', code: 'KLOCK_TTL_CAPPED' },
  );
}

/**
 * A Lease's state and work (acquiring, holding, renewing, releasing), held by the Klock (its
 * block table beside the ledger, its waiters) while it matters. It never refers to its Lease.
 */
class LeaseCore {
  constructor(session, intents, ttlMs) {
    this.session = session;
    this.intents = intents;
    this.ttlMs = ttlMs;
    /**
     * The kernel's lease objects of the grant, one per distinct intent (in order of first
     * appearance); `leases` writes the ledger's current expiry and TTL into them.
     */
    this._leases = [];
    /** Its block id in the Klock's ledger while it is there (granted, not finished), else 0. */
    this._block = 0;
    /** @type {LeaseLost | null} */
    this.lost = null;
    this._state = 'acquiring';
    this._ticket = null;
    /** The Waiter of the ticket the last ask got (WAIT), until the acquisition loop takes it. */
    this._waiter = null;
    this._renewable = true;
    /** Whether the Klock's FinalizationRegistry has this core's Lease (`Klock._register`). */
    this._registered = false;
    /** Behind `signal`: made when first asked for (most Leases never are), aborted if lost. */
    this._abort = null;
  }

  /** Aborts with the `LeaseLost` error when a lease of this Lease ends early. */
  get signal() {
    if (this._abort === null) {
      this._abort = new AbortController();
      if (this.lost !== null) this._abort.abort(this.lost);
    }
    return this._abort.signal;
  }

  /**
   * The kernel leases as the kernel last reported them (grant, heartbeat, or a re-acquire by
   * another Lease of the session holding the same kernel lease): the ledger's current
   * figures, written into the grant's objects when asked for.
   */
  get leases() {
    if (this._block !== 0) this.session.klock._ledger.show(this._block, this._leases);
    return this._leases;
  }

  /** Whether every lease is still held (not released, not lost). */
  get held() {
    return this._state === 'held' && this.lost === null;
  }

  /** The largest fence of the leases: pass it to the protected resource. */
  get fence() {
    return Math.max(...this._leases.map((l) => l.fence));
  }

  /** Fence per canonical resource (the largest when one resource has two predicates). */
  get fences() {
    const out = {};
    for (const l of this._leases) out[l.resource] = Math.max(out[l.resource] ?? 0, l.fence);
    return out;
  }

  get leaseIds() {
    return this._leases.map((l) => l.leaseId);
  }

  /** The earliest expiry of the leases (moved forward by every heartbeat and re-acquire). */
  get expiresAt() {
    return Math.min(...this.leases.map((l) => l.expiresAt));
  }

  /** Throws `LeaseLost` if a lease of this Lease has ended. */
  check() {
    if (this.lost !== null) throw this.lost;
  }

  /**
   * Renews every lease now (the Klock also does it on its own); throws `LeaseLost`. Remote:
   * returns a Promise that rejects with `LeaseLost` if the renewal found a lease gone.
   */
  heartbeat() {
    if (this._state !== 'held') throw new KlockError('heartbeat() needs a held lease', 0, 'NOT_HELD');
    const beaten = this.lost === null ? this._beat(this.session.klock.now()) : undefined;
    if (beaten !== undefined) return beaten.then(() => this.check());
    if (this.session.klock._remote !== null) return this.lost === null ? Promise.resolve() : Promise.reject(this.lost);
    this.check();
    return undefined;
  }

  /**
   * Releases what this Lease holds (leases shared with another Lease of the session stay
   * held). Throws `LeaseLost` if a lease of it had ended — also when this release is what
   * finds it expired. Idempotent: later calls do nothing. Remote: returns a Promise that
   * resolves once the server released (it rejects with the `LeaseLost` only; a server that
   * cannot be reached lets the lease end at its TTL).
   */
  release() {
    if (this._state !== 'held') return this.session.klock._remote === null ? undefined : Promise.resolve();
    const session = this.session;
    const k = session.klock;
    let pending = null; // remote only: the server's answers, and their lease ids
    let pendingIds = null;
    if (!session._closed && !k._closed) {
      // Kernel calls made while this Lease is still registered as a holder: the first settles
      // time, so if a lease expired unseen (the timer could not run: a long synchronous
      // callback, a paused process), the LEASE_EXPIRED it settles reaches this Lease, and the
      // release reports it instead of passing a lost lease off as fine. Only the kernel
      // leases no other Lease of the session holds are released (the ledger's answer); in
      // process the addon releases them in the same call that asks the ledger.
      try {
        const now = k.now();
        if (k._remote === null) k._ledger.releaseIn(k.kernel, this._block, session.sessionId, now);
        else {
          const ids = k._ledger.releasable(this._block);
          for (const id of ids) {
            (pending ??= []).push(k.kernel.release(session.sessionId, id, now));
            (pendingIds ??= []).push(id);
          }
          if (ids.length === 0) k.kernel.advance(now);
        }
      } catch (e) {
        if (!(e instanceof KlockError && e.name === 'UNKNOWN_SESSION')) throw e;
        k._sessionGone(session);
      } finally {
        k._settled();
      }
    }
    this._state = 'done';
    k._untrack(this);
    this._finish();
    if (pending !== null) {
      // Remote: the server's answer settles what the release found, as in process.
      return Promise.all(pending).then(
        (released) => {
          released.forEach((done, i) => {
            const id = pendingIds[i];
            if (!done && !this.lost?.leaseIds.includes(id)) this._lose('LEASE_EXPIRED', LOST_BEFORE_RELEASE, id);
          });
          this.check();
        },
        (e) => {
          if (!(e instanceof KlockError)) throw e;
          if (e.name === 'UNKNOWN_SESSION') {
            k._sessionGone(session);
            for (const id of pendingIds) this._lose('LEASE_RELEASED', LOST_TO_KERNEL_CLOSE, id);
          } else if (!(e instanceof Unreachable)) throw e;
          // Unreachable: the lease ends at its TTL on the server.
          this.check();
        },
      );
    }
    if (k._remote !== null) {
      // Remote: always a Promise (nothing left to send: the leases were lost already).
      return this.lost === null ? Promise.resolve() : Promise.reject(this.lost);
    }
    this.check();
    return undefined;
  }

  _granted(leases) {
    const k = this.session.klock;
    this._state = 'held';
    this._leases = leases;
    this._block = ++k._blockSeq;
    k._blocks.set(this._block, this);
    // Remote: each lease is renewed from its local deadline (the send time of the acquire
    // + TTL, on this clock), a third of the way through its TTL as the core rules.
    const remote = k._remote;
    const renew = remote === null ? undefined : leases.map((l) => this._renewAt(remote, l.leaseId, l.ttlMs));
    const figures = [];
    for (const l of leases) figures.push(l.leaseId, l.expiresAt, l.ttlMs);
    k._heartbeatAt = k._ledger.grant(this._block, this.session.sessionId, figures, renew, k.now()) ?? Infinity;
    k.counters.grants++;
  }

  /** Remote: when the lease needs renewing, from its local deadline (none known: now). */
  _renewAt(remote, leaseId, ttlMs) {
    const k = this.session.klock;
    return renewAt(remote.deadline(leaseId) ?? k.now(), ttlMs) ?? MAX_MS;
  }

  /** The current TTL of one of its kernel leases (as the ledger last reported it). */
  _ttlOf(leaseId) {
    return this.leases.find((l) => l.leaseId === leaseId).ttlMs;
  }

  /** It leaves the ledger (its last figures written into `_leases`) and the block table. */
  _finish() {
    const k = this.session.klock;
    if (this._block === 0) return;
    k._heartbeatAt = k._ledger.finish(this._block, this._leases) ?? Infinity;
    k._blocks.delete(this._block);
    this._block = 0;
  }

  _lose(name, message, leaseId) {
    if (this.lost === null) {
      // The ledger took its block off the heartbeat schedule with the lease.
      this.lost = new LeaseLost(name, message, [leaseId]);
      this.session.klock.counters.lost++;
      this._abort?.abort(this.lost);
    } else {
      this.lost.leaseIds.push(leaseId);
    }
  }

  /** Renews the leases; remote: returns a Promise (the answer is handled when it comes). */
  _beat(now) {
    const k = this.session.klock;
    const ids = this.leaseIds;
    let results;
    try {
      results = k.kernel.heartbeat(this.session.sessionId, ids, now);
    } catch (e) {
      // UNKNOWN_SESSION is the only error a heartbeat call raises.
      if (!(e instanceof KlockError && e.name === 'UNKNOWN_SESSION')) throw e;
      k._sessionGone(this.session);
      return undefined;
    } finally {
      k._settled();
    }
    if (results instanceof Promise) {
      if (this._block !== 0) k._ledger.unschedule(this._block); // none scheduled while this one is out
      return k._settledAfter(results).then(
        (answer) => this._beaten(answer, k.now()),
        (e) => {
          if (e instanceof KlockError && e.name === 'UNKNOWN_SESSION') k._sessionGone(this.session);
          else if (this._state === 'held' && this.lost === null) {
            // Unreachable past the budget: try again soon; the local deadline decides meanwhile.
            k._heartbeatAt = k._ledger.schedule(this._block, k.now() + TIMER_RETRY_MS) ?? Infinity;
            k._arm();
          }
        },
      );
    }
    this._beaten(results, now);
    return undefined;
  }

  /** What a heartbeat answered: renewed expiries, lost leases, the next renewal scheduled. */
  _beaten(results, now) {
    const k = this.session.klock;
    for (const r of results) {
      if (r.status === 'OK') {
        // Every block holding it sees the new expiry; remote, it is renewed from its new local
        // deadline (the core's third of the TTL, which the heartbeat kept).
        const remote = k._remote;
        const renew = remote === null ? undefined : this._renewAt(remote, r.leaseId, this._ttlOf(r.leaseId));
        k._ledger.renewed(r.leaseId, r.expiresAt, undefined, renew);
      } else if (r.status === 'LIFETIME_EXCEEDED') {
        this._renewable = false; // valid until its capped expiry, then LEASE_EXPIRED
      } else {
        k._lose([r.leaseId], r.status, `a heartbeat found the lease ${r.status.toLowerCase().replace('_', ' ')}`);
      }
    }
    if (this._state === 'held' && this.lost === null && this._renewable) {
      // Never twice in one millisecond: a renewal due at once waits for the next tick.
      const due = k._ledger.renewDue(this._block);
      if (due !== null) k._heartbeatAt = k._ledger.schedule(this._block, Math.max(now + 1, due)) ?? Infinity;
      if (k._remote !== null) k._arm();
    }
  }

  /**
   * Asks until granted: waits for the ticket's event, sleeps after a DIE, retries. The first
   * ask is made at once: when it grants (in process), this returns `undefined` — no Promise,
   * nothing awaited; otherwise a Promise of the rest of the acquisition (`_ask`).
   */
  _acquire(timeoutMs, signal) {
    const session = this.session;
    const k = session.klock;
    session._checkOpen();
    signal?.throwIfAborted();
    const forever = timeoutMs === Infinity;
    const deadline = timeoutMs === undefined || forever ? undefined : Math.min(MAX_MS, k.now() + timeoutMs);
    const now = k.now();
    const waitMs = waitFor(forever, deadline, now);
    const verdict = this._askOnce(now, waitMs);
    if (verdict.verdict === 'GRANTED') return undefined; // a remote answer is a Promise
    // A DIE to an attempt that asked for no wait (`timeoutMs: 0`): the core's answer to it
    // depends on nothing else (AFTER_NO_WAIT_DIE, afterSetback's), so a timeout is thrown
    // now, with no call, Promise, timer or loop on the way (issue 27).
    if (waitMs === 0 && NO_WAIT_DIE_TIMES_OUT && verdict.verdict === 'DIE') throw this._refused(verdict, timeoutMs);
    return this._acquireRest(timeoutMs, signal, forever, deadline, verdict, waitMs);
  }

  /**
   * The `Timeout` of a DIE `verdict` to an attempt that asked for no wait (the core's
   * AFTER_NO_WAIT_DIE), counted. A refusal is an answer, not a fault: the error names the
   * intents and their holders and carries no stack frames, whose capture cost as much as the
   * refused acquire itself.
   */
  _refused(verdict, timeoutMs) {
    const heldBy = verdict.heldBy.map((b) => b.sessionId);
    this.session.klock.counters.timeouts++;
    const message = timeoutMessage(AFTER_NO_WAIT_DIE, { what: intentText(this.intents), heldBy, timeoutMs });
    const limit = Error.stackTraceLimit;
    try {
      Error.stackTraceLimit = 0;
      return new Timeout(message, heldBy);
    } finally {
      Error.stackTraceLimit = limit;
    }
  }

  /** The acquisition after a first ask that did not grant at once (`verdict`, asked with `waitMs`). */
  async _acquireRest(timeoutMs, signal, forever, deadline, verdict, waitMs) {
    const slot = { current: null };
    try {
      await this._ask(slot, timeoutMs, forever, deadline, signal, verdict, waitMs);
    } finally {
      if (slot.current !== null) this.session.klock._acquisitions.delete(slot.current);
    }
  }

  /**
   * One ask at `now` for a wait of `waitMs` (undefined: the kernel's default), its events
   * routed: the verdict, recorded (`_record`); remotely a Promise of it, to record when it comes.
   */
  _askOnce(now, waitMs) {
    const k = this.session.klock;
    // null: every option the kernel's default (wait, default TTL and wait timeout).
    const options =
      this.ttlMs === undefined && waitMs === undefined
        ? null
        : { ttlMs: this.ttlMs, wait: waitMs !== 0, waitTimeoutMs: waitMs };
    try {
      const verdict = k.kernel.acquire(this.session.sessionId, this.intents, options, now);
      if (!(verdict instanceof Promise)) this._record(verdict);
      return verdict;
    } finally {
      k._settled();
    }
  }

  /** What a verdict makes of this Lease: held (GRANTED), waiting for its ticket (WAIT), or a DIE. */
  _record(verdict) {
    const k = this.session.klock;
    if (verdict.verdict === 'GRANTED') this._granted(verdict.leases);
    else if (verdict.verdict === 'WAIT') {
      k.counters.waits++;
      this._waiter = new Waiter(this);
      this._ticket = verdict.ticket;
      k._waiters.set(verdict.ticket, this._waiter);
    } else k.counters.deaths++;
  }

  /**
   * The acquisition loop, from the first ask's `verdict` on. `slot.current` is the
   * `Acquisition` that lets a close stop it, made (and registered with the Klock) only once it
   * has to wait or back off: a lease granted at once costs nothing more.
   */
  async _ask(slot, timeoutMs, forever, deadline, signal, verdict, waitMs) {
    const session = this.session;
    const k = session.klock;
    let what;
    const stoppable = () => {
      if (slot.current === null) {
        slot.current = new Acquisition(this);
        k._acquisitions.add(slot.current);
      }
      return slot.current;
    };
    for (let attempt = 0; ; attempt++) {
      if (attempt > 0) {
        session._checkOpen(); // the Klock or the session may have closed during a backoff
        k.counters.retries++;
        const now = k.now();
        waitMs = waitFor(forever, deadline, now);
        verdict = this._askOnce(now, waitMs);
      }
      if (verdict instanceof Promise) {
        try {
          // Remote: the answer comes later; the session or the Klock may close meanwhile.
          verdict = await verdict;
          if (session._closedByUser || k._closed) {
            if (verdict.verdict === 'GRANTED') {
              this._granted(verdict.leases);
              this.release()?.catch(() => {});
            } else if (verdict.verdict === 'WAIT') {
              k.kernel.cancelWait(session.sessionId, verdict.ticket, k.now()).catch(() => {});
            }
            session._checkOpen();
          }
          this._record(verdict);
        } finally {
          k._settled();
        }
      }
      if (verdict.verdict === 'GRANTED') return;
      const waiter = verdict.verdict === 'WAIT' ? this._waiter : null;
      this._waiter = null;
      what ??= intentText(this.intents);
      let heldBy = verdict.heldBy.map((b) => b.sessionId);
      let retryAfterMs;
      let why;
      let setback;
      // Under `detect`, the wait-for cycle the session died to break (SPEC.md §6.1).
      let cycle = [];
      if (waiter !== null) {
        const acquisition = stoppable();
        const event = await this._wait(waiter, signal, acquisition.signal);
        this._ticket = null;
        if (event.event === 'GRANTED') {
          if (acquisition.signal.aborted) {
            // Granted in the very call that closed: nobody is left to hold it.
            try {
              this.release();
            } catch {
              // lost or closed already: nothing more to release
            }
            throw acquisition.signal.reason;
          }
          return;
        }
        // DIED, or WOUNDED (wound_wait: an older session took precedence; asking again at
        // once would only get this wounded again): both count as a DIE, sized by the kernel.
        setback = event.event;
        retryAfterMs = event.retryAfterMs ?? 0;
        if (event.event === 'WOUNDED') {
          heldBy = [event.by];
          why = `was wounded by the older session ${event.by} while waiting for ${what}`;
        } else if (event.event === 'DIED') {
          cycle = event.cycle ?? [];
          why = diedWhy(cycle, what, `its wait for ${what} was withdrawn (DIED)`);
        }
      } else {
        setback = 'DIE';
        retryAfterMs = verdict.retryAfterMs;
        cycle = verdict.cycle ?? [];
        why = diedWhy(cycle, what, `is younger than sessions ${heldBy.join(', ')} blocking ${what}`);
      }
      // What comes next is the core's decision (klock_core::client::Acquisition).
      const next = afterSetback(
        deadline,
        setback,
        retryAfterMs,
        waiter === null ? waitMs : undefined,
        k._ledger.holdsLeases(session.sessionId),
        k.now(),
      );
      if (next.what === 'ask_again') continue; // the kernel's default wait timeout ended
      if (next.what === 'died') {
        throw new Died(
          `session ${session.sessionId} must roll back: it holds other leases and ${why}; ` +
            'release everything, wait retryAfterMs, and acquire all intents in one manifest',
          retryAfterMs,
          heldBy,
          cycle,
        );
      }
      if (next.what !== 'sleep') {
        k.counters.timeouts++;
        throw new Timeout(timeoutMessage(next.what, { what, heldBy, timeoutMs, why, session, retryAfterMs }), heldBy);
      }
      await sleep(k, next.ms, [signal, stoppable().signal]);
    }
  }

  /** Resolves with the event that resolves the ticket; an abort or a close withdraws it. */
  _wait(waiter, signal, stop) {
    return new Promise((resolve, reject) => {
      const k = this.session.klock;
      const ticket = this._ticket;
      const cleanup = () => {
        signal?.removeEventListener('abort', onAbort);
        stop.removeEventListener('abort', onStop);
      };
      const withdraw = (reason) => {
        if (k._waiters.get(ticket) !== waiter) return; // already resolved: the grant wins
        k._waiters.delete(ticket);
        this._ticket = null;
        cleanup();
        try {
          const done = k._call((now) => k.kernel.cancelWait(this.session.sessionId, ticket, now));
          if (done instanceof Promise) {
            bounded(k._withdrawn.add(ticket));
            done.catch(() => {}); // remote: resolved already (see `_dispatch`), or unreachable
          }
        } catch (e) {
          // UNKNOWN_TICKET / UNKNOWN_SESSION: the ticket is gone already.
          if (!(e instanceof KlockError)) {
            reject(e);
            return;
          }
        }
        reject(reason);
      };
      const onAbort = () => withdraw(signal.reason);
      const onStop = () => withdraw(stop.reason);
      waiter.deliver = (event) => {
        cleanup();
        resolve(event);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      stop.addEventListener('abort', onStop, { once: true });
      // Either may have aborted while a remote acquire's answer was on its way (a listener
      // added to an aborted signal never runs).
      if (stop.aborted) onStop();
      else if (signal?.aborted) onAbort();
      else k._adopt(ticket);
    });
  }
}

// `await using lease = await session.lease(...)` and `using`: release at the end of the block
// (Node has the symbols from 18.18 / 20.4 on; the syntax needs a newer V8 or TypeScript).
if (typeof Symbol.asyncDispose === 'symbol') {
  Lease.prototype[Symbol.asyncDispose] = async function asyncDispose() {
    this.release();
  };
}
if (typeof Symbol.dispose === 'symbol') {
  Lease.prototype[Symbol.dispose] = function dispose() {
    this.release();
  };
}

/**
 * A Klock whose kernel is `klock serve` at `url` (server/README.md): the same interface as
 * `new Klock()` (sessions, `lease()`, `withLease`, heartbeats, lost leases, close), over HTTP.
 * The calls that are synchronous in process and must reach the server return Promises
 * remotely: `lease.release()`, `lease.heartbeat()`, `session.close()`, `klock.close()`,
 * `stats()`, `resourceState()` (`withLease` and `await using` await them). Call
 * `klock.close()` when done: the event streams keep the process alive until then.
 *
 * `url` may name every node of a cluster: an array of URLs, or one string of URLs separated by
 * commas (`'http://a:7300,http://b:7300,http://c:7300'`); each must be an http:// or https://
 * URL with a host (else a TypeError naming it), none twice. Each call then starts at the node
 * that last answered and fails over to the others (node/remote.js, "Failover").
 *
 * What is not given comes from the environment, as for the `klock` CLI (so a program started
 * by `klock exec` reaches the same server): `url` from `KLOCK_SERVER` (several separated by
 * commas; else `http://127.0.0.1:7300`), `token` from `KLOCK_TOKEN`, `namespace` from `KLOCK_NAMESPACE` (or
 * the CLI's older `KLOCK_NS`; both set and different is an error; else `'default'`).
 *
 * @param {string | string[]} [url] e.g. `http://127.0.0.1:7300`, or a cluster's nodes
 * @param {object} [options]
 * @param {string} [options.token] the server's bearer token (`Authorization: Bearer`); the
 *   session tokens are handled inside
 * @param {string} [options.namespace] where sessions open by default
 * @param {object} [options.clock] as `new Klock`'s; a `ManualClock` also drives a server
 *   started with `--clock manual` (tests): every request carries `Klock-Now` from it
 * @param {number} [options.reconnectTimeoutMs] every call's budget: how long connection
 *   failures and busy answers (429, 503) are retried (backoff 50 ms doubling to 1 s, or the
 *   server's Retry-After), counted from the call's start, before it fails with `Unreachable`
 *   (a 429: the server's error) and held leases are lost (default 30 000)
 * @param {number} [options.requestTimeoutMs] the longest one attempt of a call waits for an
 *   answer (never past the budget) before it counts as a network failure (default 10 000)
 */
function connect(url, options = {}) {
  if (url === undefined || url === null) url = process.env.KLOCK_SERVER || 'http://127.0.0.1:7300';
  const {
    token = process.env.KLOCK_TOKEN || undefined,
    namespace = envNamespace(),
    clock,
    reconnectTimeoutMs = RECONNECT_TIMEOUT_MS,
    requestTimeoutMs = REQUEST_TIMEOUT_MS,
    ca = process.env.KLOCK_CA || undefined,
    verify = true,
  } = checkKeys(options, 'options', [
    'token',
    'namespace',
    'clock',
    'reconnectTimeoutMs',
    'requestTimeoutMs',
    'ca',
    'verify',
  ]);
  if (token !== undefined && (typeof token !== 'string' || token === '')) {
    const error = new TypeError("`options.token` must be a non-empty string (the server's bearer token)");
    error.code = 'ERR_INVALID_ARG_TYPE';
    throw error;
  }
  if (typeof namespace !== 'string' || namespace === '') {
    const error = new TypeError('`options.namespace` must be a non-empty string');
    error.code = 'ERR_INVALID_ARG_TYPE';
    throw error;
  }
  checkInteger(reconnectTimeoutMs, 'options.reconnectTimeoutMs');
  checkInteger(requestTimeoutMs, 'options.requestTimeoutMs', { min: 1 });
  if (typeof verify !== 'boolean') {
    const error = new TypeError('`options.verify` must be a boolean (false: accept any certificate)');
    error.code = 'ERR_INVALID_ARG_TYPE';
    throw error;
  }
  const caPem = ca === undefined ? undefined : readCa(ca);
  const backend = (resolved) => {
    const remote = new RemoteKernel({
      url,
      token,
      clock: resolved,
      manualTime: resolved instanceof ManualClock,
      reconnectTimeoutMs,
      requestTimeoutMs,
      ca: caPem,
      verify,
    });
    remote.namespace = namespace;
    return remote;
  };
  return new Klock({ ...(clock !== undefined && { clock }), [BACKEND]: backend });
}

/** The PEM bundle at `path` (`options.ca`, else `KLOCK_CA`), read once when connecting. */
function readCa(path) {
  if (typeof path !== 'string' || path === '') {
    const error = new TypeError('`options.ca` must be the path of a PEM file of CA certificates');
    error.code = 'ERR_INVALID_ARG_TYPE';
    throw error;
  }
  let pem;
  try {
    pem = fs.readFileSync(path);
  } catch (e) {
    throw new Error(`cannot read the CA bundle ${path} (options.ca or KLOCK_CA): ${e.message}`, { cause: e });
  }
  if (!pem.includes('-----BEGIN CERTIFICATE-----')) {
    throw new Error(`the CA bundle ${path} (options.ca or KLOCK_CA) holds no PEM certificate`);
  }
  return pem;
}

/** `KLOCK_NAMESPACE`, else `KLOCK_NS` (the CLI's older name), else `'default'`. */
function envNamespace() {
  const long = process.env.KLOCK_NAMESPACE || undefined;
  const short = process.env.KLOCK_NS || undefined;
  if (long !== undefined && short !== undefined && long !== short) {
    throw new RangeError(
      `KLOCK_NAMESPACE=${JSON.stringify(long)} and KLOCK_NS=${JSON.stringify(short)} disagree: set one of them`,
    );
  }
  return long ?? short ?? 'default';
}

module.exports = {
  Klock,
  connect,
  Election,
  file,
  fencedWrite,
  fencedWriteAsync,
  StaleFence,
  Unreachable,
  Session,
  Lease,
  SystemClock,
  ManualClock,
  KlockError,
  LeaseLost,
  Died,
  Timeout,
  Closed,
  ERROR_CODES,
  Kernel,
  parseIntent,
  MAX_MANIFEST_INTENTS,
  MAX_NAME_BYTES,
  MAX_RESOURCE_BYTES,
};
