'use strict';
// The friendly client: Klock, Session and Lease, on the native kernel (./index.js).
//
// Contract
// - A Klock owns one kernel and one clock (integer milliseconds since the Klock was created,
//   monotonic, unless `clock` is given). Every kernel call is followed by draining the
//   kernel's events and routing each to whoever waits for it, then by re-arming one timer
//   (`setTimeout`) for the earliest of the kernel's `nextDeadline()` and the next heartbeat
//   due. When it fires the Klock calls `advance(now)` and sends the heartbeats due. Nothing
//   polls.
// - The timer is unref'd: held leases, heartbeats and expiries never keep the process
//   alive. Only while a `lease()` call waits for a kernel event (a WAIT ticket) is it ref'd,
//   because that event (a timeout, an expiry that frees the resource) may come from the timer
//   alone, and the caller is awaiting it.
// - The kernel decides everything (grants, waits, deaths, expiries, timeouts); this module
//   only carries the decisions out: `session.lease()` resolves when the kernel grants (at
//   once, or by the GRANTED event of its ticket), sleeps `retryAfterMs` after a DIE and asks
//   again with the same session (same priority), heartbeats every held lease every ttl/3,
//   and releases what it holds when asked (`withLease` does it in `finally`).
// - A DIE is retried only while the session holds nothing else through this client;
//   otherwise the promise rejects with `Died` so the caller's unit of work releases
//   everything and starts over with all its intents in one manifest (SPEC.md §6 rule 3).
// - A held lease that ends early (expired, wounded, session closed) marks its Lease lost:
//   `lease.lost` is the `LeaseLost` error, `lease.signal` aborts with it, `lease.check()`
//   throws it, and `withLease` rejects with it once the callback is done.
// - An AbortSignal cancels a pending `lease()`: a waiting ticket is withdrawn with
//   `cancelWait`, a backoff sleep is cut short, and the promise rejects with
//   `signal.reason`. A grant that happened first wins.
// - A lease alone is not mutual exclusion when a holder can pause past its expiry: pass
//   `lease.fence` to the protected resource and have it reject smaller fences.

const native = require('./index.js');

const { Kernel, KlockError, ERROR_CODES } = native;

/** A lease of a Lease ended before the Lease was released (expired, wounded, closed). */
class LeaseLost extends KlockError {
  constructor(name, message, leaseIds) {
    super(message, ERROR_CODES[name] ?? 0, name);
    this.leaseIds = leaseIds;
  }
}

/** DIE while the session holds other leases: roll back, then retry after `retryAfterMs`. */
class Died extends KlockError {
  constructor(message, retryAfterMs, heldBy) {
    super(message, 0, 'DIE');
    this.retryAfterMs = retryAfterMs;
    this.heldBy = heldBy;
  }
}

/** The intents could not be had within `timeoutMs`. */
class Timeout extends KlockError {
  constructor(message, heldBy) {
    super(message, 0, 'TIMEOUT');
    this.heldBy = heldBy;
  }
}

function closedError(what) {
  return new KlockError(`the ${what} was closed while this lease was being acquired`, 0, 'CLOSED');
}

/** Longest delay `setTimeout` takes; a later deadline fires early and re-arms. */
const MAX_DELAY = 2 ** 31 - 1;

function monotonicClock() {
  const t0 = process.hrtime.bigint();
  return () => Number((process.hrtime.bigint() - t0) / 1_000_000n);
}

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

/** A min-heap of heartbeat entries `{ due, lease, seq }` (stale entries skipped lazily). */
class Heap {
  constructor() {
    this.items = [];
  }
  get size() {
    return this.items.length;
  }
  peek() {
    return this.items[0];
  }
  push(item) {
    const a = this.items;
    a.push(item);
    let i = a.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (a[p].due <= item.due) break;
      a[i] = a[p];
      i = p;
    }
    a[i] = item;
  }
  pop() {
    const a = this.items;
    const top = a[0];
    const last = a.pop();
    if (a.length > 0) {
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        if (l >= a.length) break;
        const c = l + 1 < a.length && a[l + 1].due < a[l].due ? l + 1 : l;
        if (a[c].due >= last.due) break;
        a[i] = a[c];
        i = c;
      }
      a[i] = last;
    }
    return top;
  }
}

/** What the client did on the kernel's answers (the kernel's own counts: `klock.stats()`). */
function newCounters() {
  return { grants: 0, waits: 0, deaths: 0, retries: 0, timeouts: 0, lost: 0 };
}

class Klock {
  /**
   * @param {object} [options] the kernel config (`policy`, `seed`, `defaultTtlMs`, ...) and
   *   `clock`: a function returning the time in integer milliseconds (default: monotonic,
   *   0 when the Klock is created).
   */
  constructor(options = {}) {
    if (options === null || typeof options !== 'object' || Array.isArray(options)) {
      const error = new TypeError('`options` must be a plain object');
      error.code = 'ERR_INVALID_ARG_TYPE';
      throw error;
    }
    const { clock, ...config } = options;
    if (clock !== undefined && typeof clock !== 'function') {
      const error = new TypeError('`options.clock` must be a function returning milliseconds');
      error.code = 'ERR_INVALID_ARG_TYPE';
      throw error;
    }
    /** The kernel this Klock drives. Calls made on it directly bypass the event routing. */
    this.kernel = new Kernel(config);
    this._clock = clock ?? monotonicClock();
    this._lastNow = 0;
    /** @type {Map<number, Waiter>} ticket -> the acquisition waiting for it */
    this._waiters = new Map();
    /** @type {Map<number, Set<Lease>>} lease id -> the Leases holding it */
    this._holders = new Map();
    /** @type {Map<number, Session>} */
    this._sessions = new Map();
    this._heartbeats = new Heap();
    this._heartbeatSeq = 0;
    this._heartbeatStale = 0;
    this._timer = null;
    this._timerRefed = false;
    this._armedAt = Infinity;
    this._closed = false;
    this.counters = newCounters();
    /** The last unexpected error inside the timer callback (a bug), if any. */
    this.timerError = null;
  }

  /** The Klock's time in integer milliseconds (never going back). */
  now() {
    const t = this._clock();
    checkInteger(t, 'clock()');
    if (t > this._lastNow) this._lastNow = t;
    return this._lastNow;
  }

  /** Opens a session for `agentId` (priority assigned by the kernel: older = higher). */
  async session(agentId, options = {}) {
    const { namespace = 'default' } = checkKeys(options, 'options', ['namespace']);
    this._checkOpen();
    const info = this._call((now) => this.kernel.openSession(agentId, namespace, now));
    const session = new Session(this, info);
    this._sessions.set(info.sessionId, session);
    return session;
  }

  /** Holders, queue and covering holders of one resource node. */
  resourceState(resource, namespace = 'default') {
    return this._call((now) => this.kernel.resourceState(resource, namespace, now));
  }

  /** The kernel's counters, contention and ghost agents. */
  stats() {
    return this.kernel.stats();
  }

  /** The kernel's whole state, for dashboards. */
  snapshot() {
    return this._call((now) => this.kernel.snapshot(now));
  }

  /** Closes every session (releasing what they hold) and stops the timer. Idempotent. */
  close() {
    if (this._closed) return;
    for (const session of [...this._sessions.values()]) session.close();
    this._closed = true;
    for (const waiter of [...this._waiters.values()]) waiter.deliver({ event: 'CLOSED', what: 'Klock' });
    this._waiters.clear();
    if (this._timer !== null) clearTimeout(this._timer);
    this._timer = null;
    this._armedAt = Infinity;
  }

  _checkOpen() {
    if (this._closed) throw new KlockError('this Klock is closed', 0, 'CLOSED');
  }

  /** One kernel call at the current time, then its events routed and the timer re-armed. */
  _call(work) {
    try {
      return work(this.now());
    } finally {
      this._settled();
    }
  }

  /** Routes every pending event and re-arms the timer if it must fire sooner. */
  _settled() {
    if (this.kernel.pendingEvents() > 0) {
      for (const event of this.kernel.drainEvents()) this._dispatch(event);
    }
    this._arm();
    this._keepAlive();
  }

  /** The timer keeps the process alive only while a lease() call waits for an event. */
  _keepAlive() {
    if (this._timer === null) return;
    const wanted = this._waiters.size > 0;
    if (wanted !== this._timerRefed) {
      this._timerRefed = wanted;
      if (wanted) this._timer.ref();
      else this._timer.unref();
    }
  }

  _dispatch(event) {
    switch (event.event) {
      case 'GRANTED':
      case 'WAIT_TIMEOUT':
      case 'DIED': {
        const waiter = this._waiters.get(event.ticket);
        if (waiter === undefined) return; // a ticket made directly on .kernel
        this._waiters.delete(event.ticket);
        if (event.event === 'GRANTED') waiter.lease._granted(event.leases);
        else if (event.event === 'DIED') this.counters.deaths++;
        waiter.deliver(event);
        return;
      }
      case 'LEASE_EXPIRED':
        this._lose([event.lease], 'LEASE_EXPIRED', 'the lease expired before it was released (heartbeats came too late)');
        return;
      case 'WOUNDED':
        for (const ticket of event.lostTickets) {
          const waiter = this._waiters.get(ticket);
          if (waiter !== undefined) {
            this._waiters.delete(ticket);
            waiter.deliver(event);
          }
        }
        this._lose(event.lostLeases, 'LEASE_RELEASED', `the lease was revoked (wounded) by the older session ${event.by}`);
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

  _lose(leaseIds, name, message) {
    for (const id of leaseIds) {
      const holders = this._holders.get(id);
      if (holders === undefined) continue;
      this._holders.delete(id);
      for (const lease of holders) {
        lease.session._refs.delete(id);
        lease._lose(name, message, id);
      }
    }
  }

  _scheduleHeartbeat(lease, due) {
    lease._heartbeatSeq = ++this._heartbeatSeq;
    this._heartbeats.push({ due, lease, seq: lease._heartbeatSeq });
  }

  /** Forgets a lease's pending heartbeat; the heap is compacted when mostly stale. */
  _unscheduleHeartbeat(lease) {
    if (lease._heartbeatSeq === 0) return;
    lease._heartbeatSeq = 0;
    this._heartbeatStale++;
    const heap = this._heartbeats;
    if (this._heartbeatStale > 64 && this._heartbeatStale * 2 > heap.size) {
      const live = heap.items.filter((e) => e.lease._heartbeatSeq === e.seq);
      heap.items = [];
      for (const entry of live) heap.push(entry);
      this._heartbeatStale = 0;
    }
  }

  /** Arms the one timer for the earliest kernel deadline or heartbeat, if sooner than armed. */
  _arm() {
    if (this._closed) return;
    const heap = this._heartbeats;
    while (heap.size > 0 && heap.peek().lease._heartbeatSeq !== heap.peek().seq) heap.pop();
    const deadline = this.kernel.nextDeadline();
    let next = deadline === null ? Infinity : deadline;
    if (heap.size > 0 && heap.peek().due < next) next = heap.peek().due;
    if (next >= this._armedAt) return;
    if (this._timer !== null) clearTimeout(this._timer);
    const delay = Math.min(MAX_DELAY, Math.max(0, next - this.now()));
    this._armedAt = next;
    this._timer = setTimeout(() => this._fire(), delay);
    this._timerRefed = true;
    this._keepAlive();
  }

  _fire() {
    this._timer = null;
    this._armedAt = Infinity;
    try {
      const now = this.now();
      this.kernel.advance(now);
      this._settled();
      const heap = this._heartbeats;
      while (heap.size > 0 && heap.peek().due <= now) {
        const { lease, seq } = heap.pop();
        if (lease._heartbeatSeq === seq) lease._beat(now);
      }
    } catch (e) {
      this.timerError = e;
    }
    this._arm();
    this._keepAlive();
  }
}

/** One acquisition waiting for the event that resolves its ticket. */
class Waiter {
  constructor(lease) {
    this.lease = lease;
    this.deliver = () => {};
  }
}

function intentList(intents) {
  if (typeof intents === 'string') return [intents];
  return intents;
}

class Session {
  constructor(klock, info) {
    this.klock = klock;
    this.sessionId = info.sessionId;
    this.agentId = info.agentId;
    this.namespace = info.namespace;
    /** Smaller = older = higher priority; kept across every DIE and retry. */
    this.priority = info.priority;
    /** @type {Map<number, number>} lease id -> how many of this session's Leases hold it */
    this._refs = new Map();
    this._closed = false;
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
  async lease(intents, options = {}) {
    const { ttlMs, timeoutMs, signal } = checkKeys(options, 'options', ['ttlMs', 'timeoutMs', 'signal']);
    checkInteger(timeoutMs, 'options.timeoutMs');
    if (signal !== undefined && !(signal instanceof AbortSignal)) {
      const error = new TypeError('`options.signal` must be an AbortSignal');
      error.code = 'ERR_INVALID_ARG_TYPE';
      throw error;
    }
    const lease = new Lease(this, intentList(intents), ttlMs);
    await lease._acquire(timeoutMs, signal);
    return lease;
  }

  /**
   * Acquires `intents`, runs `fn(lease)`, and releases in `finally`. Rejects with what `fn`
   * threw, or with `LeaseLost` if a lease ended while `fn` ran (watch `lease.signal` to stop
   * early).
   */
  async withLease(intents, fn, options) {
    if (typeof fn !== 'function') {
      const error = new TypeError('`fn` must be a function (lease) => ...');
      error.code = 'ERR_INVALID_ARG_TYPE';
      throw error;
    }
    const lease = await this.lease(intents, options);
    let result;
    try {
      result = await fn(lease);
    } finally {
      lease.release();
    }
    lease.check();
    return result;
  }

  /** Closes the session: releases everything it holds and withdraws its waits. Idempotent. */
  close() {
    if (this._closed) return;
    const k = this.klock;
    for (const [ticket, waiter] of [...k._waiters]) {
      if (waiter.lease.session === this) {
        k._waiters.delete(ticket);
        waiter.deliver({ event: 'CLOSED', what: 'session' });
      }
    }
    const held = [];
    for (const holders of k._holders.values()) for (const lease of holders) if (lease.session === this) held.push(lease);
    this._closed = true;
    k._sessions.delete(this.sessionId);
    try {
      k._call((now) => k.kernel.closeSession(this.sessionId, now));
    } catch (e) {
      if (!(e instanceof KlockError && e.name === 'UNKNOWN_SESSION')) throw e;
    }
    for (const lease of held) {
      k._lose(lease.leaseIds, 'LEASE_RELEASED', 'the session was closed');
      lease._state = 'done';
    }
    this._refs.clear();
  }
}

if (typeof Symbol.asyncDispose === 'symbol') {
  Session.prototype[Symbol.asyncDispose] = async function asyncDispose() {
    this.close();
  };
}

function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** A set of intents held together (or being acquired): the handle `session.lease()` gives. */
class Lease {
  constructor(session, intents, ttlMs) {
    this.session = session;
    this.intents = intents;
    this.ttlMs = ttlMs;
    /** The kernel leases, one per distinct intent (in order of first appearance). */
    this.leases = [];
    /** @type {LeaseLost | null} */
    this.lost = null;
    this._state = 'acquiring';
    this._ticket = null;
    this._heartbeatSeq = 0;
    this._heartbeatMs = 0;
    this._abort = new AbortController();
  }

  /** Aborts with the `LeaseLost` error when a lease of this Lease ends early. */
  get signal() {
    return this._abort.signal;
  }

  /** Whether every lease is still held (not released, not lost). */
  get held() {
    return this._state === 'held' && this.lost === null;
  }

  /** The largest fence of the leases: pass it to the protected resource. */
  get fence() {
    return Math.max(...this.leases.map((l) => l.fence));
  }

  /** Fence per canonical resource (the largest when one resource has two predicates). */
  get fences() {
    const out = {};
    for (const l of this.leases) out[l.resource] = Math.max(out[l.resource] ?? 0, l.fence);
    return out;
  }

  get leaseIds() {
    return this.leases.map((l) => l.leaseId);
  }

  /** The earliest expiry of the leases (moved forward by every heartbeat). */
  get expiresAt() {
    return Math.min(...this.leases.map((l) => l.expiresAt));
  }

  /** Throws `LeaseLost` if a lease of this Lease has ended. */
  check() {
    if (this.lost !== null) throw this.lost;
  }

  /** Renews every lease now (the Klock also does it every ttl/3); throws `LeaseLost`. */
  heartbeat() {
    if (this._state !== 'held') throw new KlockError('heartbeat() needs a held lease', 0, 'NOT_HELD');
    if (this.lost === null) this._beat(this.session.klock.now());
    this.check();
  }

  /** Releases what this Lease holds (leases shared with another Lease stay held). Idempotent. */
  release() {
    if (this._state !== 'held') return;
    this._state = 'done';
    const session = this.session;
    const k = session.klock;
    k._unscheduleHeartbeat(this);
    const ending = [];
    for (const id of this.leaseIds) {
      const holders = k._holders.get(id);
      if (holders !== undefined) {
        holders.delete(this);
        if (holders.size === 0) k._holders.delete(id);
      }
      const count = session._refs.get(id);
      if (count === undefined) continue; // lost already
      if (count > 1) session._refs.set(id, count - 1);
      else {
        session._refs.delete(id);
        ending.push(id);
      }
    }
    if (ending.length === 0 || session._closed) return;
    k._call((now) => {
      try {
        for (const id of ending) k.kernel.release(session.sessionId, id, now);
      } catch (e) {
        // The kernel closed the session (idle): nothing is held any more.
        if (!(e instanceof KlockError && e.name === 'UNKNOWN_SESSION')) throw e;
      }
    });
  }

  _granted(leases) {
    const session = this.session;
    const k = session.klock;
    this.leases = leases;
    this._state = 'held';
    for (const l of leases) {
      session._refs.set(l.leaseId, (session._refs.get(l.leaseId) ?? 0) + 1);
      let holders = k._holders.get(l.leaseId);
      if (holders === undefined) k._holders.set(l.leaseId, (holders = new Set()));
      holders.add(this);
    }
    k.counters.grants++;
    this._heartbeatMs = Math.max(1, Math.floor(Math.min(...leases.map((l) => l.ttlMs)) / 3));
    k._scheduleHeartbeat(this, k.now() + this._heartbeatMs);
  }

  _lose(name, message, leaseId) {
    if (this.lost === null) {
      this.lost = new LeaseLost(name, message, [leaseId]);
      this.session.klock._unscheduleHeartbeat(this);
      this.session.klock.counters.lost++;
      this._abort.abort(this.lost);
    } else {
      this.lost.leaseIds.push(leaseId);
    }
  }

  _beat(now) {
    const k = this.session.klock;
    const ids = this.leaseIds;
    let results;
    try {
      results = k.kernel.heartbeat(this.session.sessionId, ids, now);
    } catch (e) {
      if (!(e instanceof KlockError)) throw e;
      k._lose(ids, e.name, e.message); // the session is gone (closed, idle-closed)
      return;
    } finally {
      k._settled();
    }
    let renewable = true;
    for (const r of results) {
      if (r.status === 'OK') {
        const l = this.leases.find((x) => x.leaseId === r.leaseId);
        if (l !== undefined) l.expiresAt = r.expiresAt;
      } else if (r.status === 'LIFETIME_EXCEEDED') {
        renewable = false; // valid until its capped expiry, then LEASE_EXPIRED
      } else {
        k._lose([r.leaseId], r.status, `a heartbeat found the lease ${r.status.toLowerCase().replace('_', ' ')}`);
      }
    }
    if (this._state === 'held' && this.lost === null && renewable) k._scheduleHeartbeat(this, now + this._heartbeatMs);
  }

  /** Asks until granted: waits for the ticket's event, sleeps after a DIE, retries. */
  async _acquire(timeoutMs, signal) {
    const session = this.session;
    const k = session.klock;
    k._checkOpen();
    signal?.throwIfAborted();
    const deadline = timeoutMs === undefined ? undefined : k.now() + timeoutMs;
    let attempt = 0;
    for (;;) {
      k._checkOpen(); // the Klock may have closed during a backoff sleep
      if (attempt++ > 0) k.counters.retries++;
      const waitMs = deadline === undefined ? undefined : Math.max(0, deadline - k.now());
      const options = { ttlMs: this.ttlMs, wait: waitMs !== 0, waitTimeoutMs: waitMs };
      let verdict;
      let waiter = null;
      try {
        verdict = k.kernel.acquire(session.sessionId, this.intents, options, k.now());
        if (verdict.verdict === 'GRANTED') this._granted(verdict.leases);
        else if (verdict.verdict === 'WAIT') {
          k.counters.waits++;
          waiter = new Waiter(this);
          this._ticket = verdict.ticket;
          k._waiters.set(verdict.ticket, waiter);
        } else k.counters.deaths++;
      } finally {
        k._settled();
      }
      if (verdict.verdict === 'GRANTED') return;
      const heldBy = verdict.heldBy.map((b) => b.sessionId);
      let retryAfterMs;
      if (waiter !== null) {
        const event = await this._wait(waiter, signal);
        this._ticket = null;
        if (event.event === 'GRANTED') return;
        if (event.event === 'CLOSED') throw closedError(event.what);
        if (event.event === 'WOUNDED') {
          // wound_wait: an older session took precedence. Asking again at once only gets this
          // lease wounded again by the next older requester, so it backs off by the kernel's
          // answer (SPEC §8: a wound counts as a DIE and carries retryAfterMs).
          const pause = event.retryAfterMs;
          if (deadline !== undefined && k.now() + pause > deadline) {
            k.counters.timeouts++;
            throw new Timeout(`${this.intents.join(', ')}: wounded by older sessions; the next retry (${pause} ms) would pass the timeout`, heldBy);
          }
          await sleep(pause, signal);
          continue;
        }
        if (event.event === 'WAIT_TIMEOUT') {
          if (deadline !== undefined && k.now() >= deadline) {
            k.counters.timeouts++;
            throw new Timeout(`waited ${timeoutMs} ms for ${this.intents.join(', ')}; still held by sessions ${heldBy.join(', ')}`, heldBy);
          }
          continue; // the kernel's default wait timeout: ask again
        }
        retryAfterMs = event.retryAfterMs; // DIED
      } else {
        retryAfterMs = verdict.retryAfterMs;
        if (waitMs === 0) {
          k.counters.timeouts++;
          throw new Timeout(`${this.intents.join(', ')} held by sessions ${heldBy.join(', ')} (timeout ${timeoutMs} ms)`, heldBy);
        }
      }
      if (session._refs.size > 0) {
        throw new Died(
          `session ${session.sessionId} must roll back: it holds other leases while younger than sessions ${heldBy.join(', ')} ` +
            `blocking ${this.intents.join(', ')}; release everything, wait retryAfterMs, and acquire all intents in one manifest`,
          retryAfterMs,
          heldBy,
        );
      }
      if (deadline !== undefined && k.now() + retryAfterMs > deadline) {
        k.counters.timeouts++;
        throw new Timeout(
          `${this.intents.join(', ')} held by sessions ${heldBy.join(', ')}; the next retry (${retryAfterMs} ms) would pass the timeout`,
          heldBy,
        );
      }
      await sleep(retryAfterMs, signal);
    }
  }

  /** Resolves with the event that resolves the ticket; an abort withdraws the ticket. */
  _wait(waiter, signal) {
    return new Promise((resolve, reject) => {
      const k = this.session.klock;
      const ticket = this._ticket;
      const onAbort = () => {
        if (k._waiters.get(ticket) !== waiter) return; // already resolved: the grant wins
        k._waiters.delete(ticket);
        this._ticket = null;
        try {
          k._call((now) => k.kernel.cancelWait(this.session.sessionId, ticket, now));
        } catch (e) {
          reject(e);
          return;
        }
        reject(signal.reason);
      };
      waiter.deliver = (event) => {
        signal?.removeEventListener('abort', onAbort);
        resolve(event);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }
}

if (typeof Symbol.dispose === 'symbol') {
  Lease.prototype[Symbol.dispose] = function dispose() {
    this.release();
  };
}

module.exports = {
  Klock,
  Session,
  Lease,
  KlockError,
  LeaseLost,
  Died,
  Timeout,
  ERROR_CODES,
  Kernel,
  parseIntent: native.parseIntent,
  MAX_MANIFEST_INTENTS: native.MAX_MANIFEST_INTENTS,
  MAX_NAME_BYTES: native.MAX_NAME_BYTES,
  MAX_RESOURCE_BYTES: native.MAX_RESOURCE_BYTES,
};
