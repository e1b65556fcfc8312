'use strict';
// Leader election on leases: `Election`, the Node twin of Python's `klock.Election`.
//
// Contract
// - The resource. An election named NAME is the resource `LEADER:/NAME` in the Klock's
//   namespace (or the one given). The kernel's resource parser decides what a valid name is
//   (SPEC.md §3; `parseIntent`, the same parser the server runs): a bad one throws
//   `KlockError` `INVALID_RESOURCE` from the constructor. A name that normalises to the root
//   (`''`, `'.'`, `'/'`) is refused the same way: `LEADER:/` covers every election. Names are
//   paths, so an election `a` covers `a/b` (SPEC.md §3).
// - A campaign opens one session of its own (`agentId` is the candidate's identity, which
//   `leader()` shows) and acquires `MUTATES LEADER:/NAME` with the election's `ttlMs` through
//   the client's ordinary acquire rules (one wait in the kernel's queue; the kernel's
//   `retryAfterMs` after a DIE, keeping the session's priority). Without `timeoutMs` it waits
//   with no limit as one ticket (`Infinity`), so it never loses its place in the queue;
//   `timeoutMs` bounds it (`Timeout`), an AbortSignal cancels it. A fresh session per campaign
//   fixes the campaigner's priority at the campaign's start, which orders successors (below).
// - The term is the lease's fence: it strictly increases per resource, across the kernel and
//   across server restarts (SPEC.md §7). Give it to what the leader writes to (`fencedWrite`).
// - While leading, the client's heartbeats renew the lease. When it is lost (expired, revoked
//   by a wound, its session closed, remotely its local deadline passed while the server was
//   unreachable) the election is told at once: `signal` aborts with the `LeaseLost`, `lost`
//   holds it, `whenLost()` resolves with it and `onLost(error)` is called (in a microtask).
//   `isLeader()` settles the clock before answering, so a process resumed after a pause past
//   its lease learns it lost before its timer runs.
// - `resign()` releases (the next campaigner in the queue is granted) and closes the
//   campaign's session; `leader()` reads who leads now from the resource's state (holder,
//   term, and since when: the lease's `acquiredAt`, in the kernel's milliseconds — the
//   Klock's in process, the server's remotely).
// - `observe()` is an async iterator of every change of `leader()` (null: no leader) in term
//   order, re-read every `pollMs`: the kernel's events carry grants after a wait and expiries
//   but not an immediate grant nor a release (SPEC.md §9), so events alone would miss a
//   vacancy and the next leader. A term that starts and ends within one `pollMs` can be
//   missed; terms are never seen out of order. It ends when its signal aborts or the Klock
//   closes.
// - Order of successors (the kernel's policy decides, SPEC.md §6): under `detect`, `lanes`
//   and `wound_wait` campaigners are granted in the order of their campaigns (a campaign's
//   fresh session is younger than every earlier one, so under `wound_wait` it wounds nobody; a
//   campaign holds nothing else, so `detect` finds no cycle). Under `wait_die` (the default)
//   a campaigner younger than the leader or one queued ahead DIEs and retries after
//   `retryAfterMs`: those older than the leader wait in the queue and come first, in queue
//   order; the others are served in the order their retries reach a free resource.

const os = require('node:os');
const { KlockError, ERROR_CODES, parseIntent } = require('./index.js');

/** How often `observe()` re-reads the resource state by default (ms): the dashboard's pace. */
const DEFAULT_POLL_MS = 250;
const ROOT = 'LEADER:/';

function typeError(message) {
  const error = new TypeError(message);
  error.code = 'ERR_INVALID_ARG_TYPE';
  return error;
}

function checkPositiveMs(value, what) {
  if (!Number.isSafeInteger(value) || value <= 0) {
    const error = new RangeError(`\`${what}\` must be an integer number of milliseconds > 0, got ${value}`);
    error.code = 'ERR_OUT_OF_RANGE';
    throw error;
  }
  return value;
}

/** A Promise's value, or the value itself (in process most calls answer at once). */
async function settle(value) {
  return value instanceof Promise ? await value : value;
}

/** Sleeps `ms` on the Klock's clock (a ManualClock's virtual time too), cut short by `signal`. */
function sleepOn(klock, ms, signal) {
  return new Promise((resolve) => {
    let real = null;
    const done = () => {
      klock.clock.clearTimer(timer);
      clearTimeout(real);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = klock.clock.setTimer(klock.now() + ms, done);
    // At most that long in real time as well: a closed Klock's clock runs no more timers.
    real = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });
}

class Election {
  /**
   * @param {import('./client.js').Klock} klock in process or `connect(url)`
   * @param {string} name the election: the resource `LEADER:/name`
   * @param {object} [options]
   * @param {string} [options.agentId] the candidate's identity (default `HOST/PID`)
   * @param {number} [options.ttlMs] the leader's lease TTL (default 15 000)
   * @param {string} [options.namespace] the Klock's by default
   * @param {(error: Error) => void} [options.onLost] told when a term is lost (not resigned)
   * @param {number} [options.pollMs] `observe()`'s pace (default 250)
   */
  constructor(klock, name, options = {}) {
    if (klock === null || typeof klock !== 'object' || typeof klock.session !== 'function') {
      throw typeError('`klock` must be a Klock (new Klock() or connect(url))');
    }
    if (typeof name !== 'string') throw typeError(`\`name\` must be a string, got ${typeof name}`);
    if (options === null || typeof options !== 'object') throw typeError('`options` must be an object');
    const allowed = ['agentId', 'ttlMs', 'namespace', 'onLost', 'pollMs'];
    for (const key of Object.keys(options)) {
      if (!allowed.includes(key)) throw typeError(`unknown option \`${key}\` (known: ${allowed.join(', ')})`);
    }
    const { agentId, ttlMs = 15_000, namespace, onLost, pollMs = DEFAULT_POLL_MS } = options;
    if (agentId !== undefined && typeof agentId !== 'string') throw typeError('`options.agentId` must be a string');
    if (namespace !== undefined && typeof namespace !== 'string')
      throw typeError('`options.namespace` must be a string');
    if (onLost !== undefined && typeof onLost !== 'function') throw typeError('`options.onLost` must be a function');
    this.ttlMs = checkPositiveMs(ttlMs, 'options.ttlMs');
    this.pollMs = checkPositiveMs(pollMs, 'options.pollMs');
    // The kernel's parser decides what a valid name is.
    const { resource } = parseIntent(`MUTATES ${ROOT}${name}`);
    if (resource === ROOT) {
      throw new KlockError(
        `election name ${JSON.stringify(name)} names the root LEADER:/, which covers every election; ` +
          "give a name such as 'indexer'",
        ERROR_CODES.INVALID_RESOURCE,
        'INVALID_RESOURCE',
      );
    }
    this.klock = klock;
    /** The election's resource, `LEADER:/NAME` in the kernel's normal form. */
    this.resource = resource;
    this.name = resource.slice(ROOT.length);
    this.agentId = agentId ?? `${os.hostname()}/${process.pid}`;
    this.namespace = namespace ?? klock._namespace;
    this.onLost = onLost ?? null;
    this._session = null;
    this._lease = null;
    this._term = null;
    this._lost = null;
    this._lostController = new AbortController();
    this._onLostListeners = [];
    /** @type {Map<number, number>} lease id -> acquiredAt already read */
    this._since = new Map();
  }

  /** The current term while this candidate leads (or led until a loss not yet resigned), else null. */
  get term() {
    return this._term;
  }

  /** The `LeaseLost` that ended the last campaign's term (not resigned), else null. */
  get lost() {
    return this._lost;
  }

  /** Aborts with the `LeaseLost` when the term of the last campaign is lost. */
  get signal() {
    return this._lostController.signal;
  }

  /** Resolves with the `LeaseLost` when the term of the last campaign is lost. */
  whenLost() {
    if (this._lost !== null) return Promise.resolve(this._lost);
    return new Promise((resolve) => this._onLostListeners.push(resolve));
  }

  /**
   * The one call into the client's lease API: a fresh session and a Lease asking for
   * `MUTATES LEADER:/NAME` with the election's TTL (no `timeoutMs`: no limit, as one wait).
   */
  async _openLease(timeoutMs, signal) {
    const session = await this.klock.session(this.agentId, { namespace: this.namespace });
    this._session = session;
    const options = { ttlMs: this.ttlMs, timeoutMs: timeoutMs ?? Infinity };
    if (signal !== undefined) options.signal = signal;
    return { session, lease: session.lease(`MUTATES ${this.resource}`, options) };
  }

  /**
   * Resolves with the term once this candidate leads. `timeoutMs`: give up with `Timeout` (0:
   * try once); `signal`: cancel (rejects with its reason). A second campaign while leading
   * rejects with `KlockError` `STATE_ERROR`.
   * @param {{ timeoutMs?: number, signal?: AbortSignal }} [options]
   */
  async campaign(options = {}) {
    const { timeoutMs, signal } = options;
    if (this._lease !== null && this._lease.held) {
      throw new KlockError(
        `${this.agentId} already leads ${this.resource} (term ${this._term}); resign() first`,
        0,
        'STATE_ERROR',
      );
    }
    await this._forget();
    this._lost = null;
    if (this._lostController.signal.aborted) this._lostController = new AbortController();
    const { session, lease } = await this._openLease(timeoutMs, signal);
    let held;
    try {
      held = await lease;
    } catch (error) {
      if (this._session === session) this._session = null;
      await settle(session.close());
      throw error;
    }
    if (this._session !== session) {
      // Resigned while the grant was on its way: give it back.
      await settle(session.close());
      throw new KlockError(`${this.agentId} resigned from ${this.resource} while campaigning`, 0, 'CLOSED');
    }
    this._lease = held;
    this._term = held.fence;
    this._since.set(held.leases[0].leaseId, held.leases[0].acquiredAt);
    held.signal.addEventListener('abort', () => this._lostNow(held), { once: true });
    return this._term;
  }

  _lostNow(lease) {
    if (this._lease !== lease) return; // resigned meanwhile
    this._lost = lease.lost;
    this._lostController.abort(this._lost);
    for (const resolve of this._onLostListeners.splice(0)) resolve(this._lost);
    if (this.onLost !== null) {
      const onLost = this.onLost;
      const error = this._lost;
      queueMicrotask(() => onLost(error));
    }
  }

  /**
   * Stops leading (or campaigning): releases the lease, so the next campaigner is granted, and
   * closes the campaign's session. Idempotent; never rejects for a lease already lost.
   */
  async resign() {
    await this._forget();
  }

  async _forget() {
    const lease = this._lease;
    const session = this._session;
    this._lease = null;
    this._session = null;
    this._term = null;
    try {
      if (lease !== null && lease.lost === null) {
        try {
          await settle(lease.release());
        } catch (error) {
          if (error?.name !== 'LEASE_EXPIRED' && error?.name !== 'LEASE_RELEASED') throw error;
        }
      }
    } finally {
      if (session !== null) await settle(session.close());
    }
  }

  /**
   * Whether this candidate leads now with a valid lease. Settles the Klock's clock first
   * (expiries due, remotely the local deadline), so the answer is current even right after
   * the process was paused past its lease.
   */
  isLeader() {
    const lease = this._lease;
    if (lease === null || !lease.held) return false;
    const k = this.klock;
    if (!k._closed) k._call((now) => k.kernel.advance(now));
    return lease.held;
  }

  /** The term, or throws the `LeaseLost` (`STATE_ERROR` when not campaigning) unless leading now. */
  check() {
    if (this._lease === null || this._term === null) {
      throw new KlockError(`${this.agentId} does not lead ${this.resource}`, 0, 'STATE_ERROR');
    }
    if (!this.isLeader()) this._lease.check();
    return this._term;
  }

  /** Who leads now (null: nobody), from the resource's state. */
  async leader() {
    const state = await settle(this.klock.resourceState(this.resource, this.namespace));
    const holder = state.holders.find((h) => h.predicate === 'MUTATES');
    if (holder === undefined) return null;
    return {
      agentId: holder.agentId,
      sessionId: holder.sessionId,
      term: holder.fence,
      since: await this._acquiredAt(holder.leaseId),
      expiresAt: holder.expiresAt,
      leaseId: holder.leaseId,
    };
  }

  /**
   * When a lease was granted (the resource state does not say): from the kernel's snapshot in
   * process, the namespace's overview remotely; read once per lease.
   */
  async _acquiredAt(leaseId) {
    const known = this._since.get(leaseId);
    if (known !== undefined) return known;
    const k = this.klock;
    let leases;
    if (k._remote !== null) {
      const overview = await k._remote._request('GET', `/v1/ns/${encodeURIComponent(this.namespace)}/overview`, {});
      leases = overview.snapshot.leases.map((l) => ({ leaseId: l.lease_id, acquiredAt: l.acquired_at }));
    } else {
      leases = k.snapshot().leases;
    }
    const lease = leases.find((l) => l.leaseId === leaseId);
    if (lease === undefined) return 0; // ended between the two reads: the next read shows its successor
    this._since.set(leaseId, lease.acquiredAt);
    return lease.acquiredAt;
  }

  /**
   * Every change of `leader()` (null: no leader), in term order, the current state first;
   * re-read every `pollMs`. Ends when `signal` aborts or the Klock closes.
   * @param {{ signal?: AbortSignal }} [options]
   */
  async *observe(options = {}) {
    const { signal } = options;
    let last = 'start';
    let largest = -1;
    while (!this.klock._closed && !signal?.aborted) {
      let current;
      try {
        current = await this.leader();
      } catch (error) {
        if (this.klock._closed) return;
        throw error;
      }
      const term = current === null ? null : current.term;
      if (term !== last && !(term !== null && term < largest)) {
        last = term;
        if (term !== null) largest = term;
        yield current;
      }
      await sleepOn(this.klock, this.pollMs, signal);
    }
  }
}

// `await using election = ...`: resigns at the end of the block (Node has the symbol from 20.4
// on; the syntax needs a newer V8 or TypeScript).
if (typeof Symbol.asyncDispose === 'symbol') {
  Election.prototype[Symbol.asyncDispose] = async function asyncDispose() {
    await this.resign();
  };
}

module.exports = { Election };
