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
//   order, the current state first, driven by the kernel's events (SPEC.md §9): ACQUIRED and
//   GRANTED begin a term, RELEASED, LEASE_EXPIRED and WOUNDED end it (a resign that hands over
//   shows null and then the successor: the release comes first). Every lease's life is in
//   the events, so every term is seen, even one that begins and ends between two reads of the
//   state. In process the events come from the Klock's dispatch, and the state read and the
//   start of the following are one synchronous step; remotely from the namespace's event
//   stream, long-polled after the log index of the namespace's overview the state is read
//   from. `expiresAt` is as of the change. It ends when its signal aborts or the Klock closes.
// - Order of successors (the kernel's policy decides, SPEC.md §6): under `detect`, `lanes`
//   and `wound_wait` campaigners are granted in the order of their campaigns (a campaign's
//   fresh session is younger than every earlier one, so under `wound_wait` it wounds nobody; a
//   campaign holds nothing else, so `detect` finds no cycle). Under `wait_die` (the default)
//   a campaigner younger than the leader or one queued ahead DIEs and retries after
//   `retryAfterMs`: those older than the leader wait in the queue and come first, in queue
//   order; the others are served in the order their retries reach a free resource.

const os = require('node:os');
const { KlockError, ERROR_CODES, parseIntent } = require('./index.js');

/**
 * How often an idle `observe()` looks whether the Klock closed, and remotely how long one
 * long-poll of the event stream waits, by default (ms).
 */
const DEFAULT_POLL_MS = 250;
/** The largest `k` of a server event id `<index>.<k>`: "after every event of entry index". */
const END_OF_ENTRY = 4294967295;
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

/** A lease of a server event (snake_case JSON) in the binding's shape. */
function leaseFromServer(l) {
  return {
    leaseId: l.lease_id,
    sessionId: l.session_id,
    agentId: l.agent_id,
    resource: l.resource,
    predicate: l.predicate,
    fence: l.fence,
    acquiredAt: l.acquired_at,
    expiresAt: l.expires_at,
  };
}

/** A server event (snake_case JSON) in the binding's shape, as far as an observer reads it. */
function eventFromServer(raw) {
  const leases =
    raw.leases === undefined ? undefined : raw.event === 'RELEASED' ? raw.leases : raw.leases.map(leaseFromServer);
  return { event: raw.event, session: raw.session, leases, lease: raw.lease, lostLeases: raw.lost_leases };
}

/** The leader a lease makes (a lease in the binding's shape). */
function leaderOf(lease) {
  return {
    agentId: lease.agentId,
    sessionId: lease.sessionId,
    term: lease.fence,
    since: lease.acquiredAt,
    expiresAt: lease.expiresAt,
    leaseId: lease.leaseId,
  };
}

/**
 * One observer's view of an election, kept from the events in order: the current leader and
 * the changes not yet taken. `inNamespace(sessionId)` says whether a new holder is of the
 * election's namespace (remotely the stream is the namespace's own).
 */
class Follower {
  constructor(election, initial, inNamespace) {
    this._election = election;
    this._inNamespace = inNamespace;
    this.current = initial;
    this._lastTerm = initial === null ? 0 : initial.term;
    /** @type {Array<object | null>} */
    this.changes = [];
    this._wake = null;
  }

  /** Takes note of one event (called from the dispatch: it only records). */
  apply(event) {
    const { resource } = this._election;
    switch (event.event) {
      case 'ACQUIRED':
      case 'GRANTED':
        for (const lease of event.leases) {
          // A new term: a MUTATES lease on the resource, newer than the last term seen (a
          // grant reusing the leader's lease is not one), of the election's namespace.
          if (lease.resource !== resource || lease.predicate !== 'MUTATES' || lease.fence <= this._lastTerm) continue;
          if (!this._inNamespace(lease.sessionId)) continue;
          this._lastTerm = lease.fence;
          this._push(leaderOf(lease));
        }
        return;
      case 'RELEASED':
        return this._ended(event.leases);
      case 'LEASE_EXPIRED':
        return this._ended([event.lease]);
      case 'WOUNDED':
        return this._ended(event.lostLeases);
      default:
        return;
    }
  }

  _ended(leaseIds) {
    if (this.current !== null && leaseIds.includes(this.current.leaseId)) this._push(null);
  }

  _push(change) {
    this.current = change;
    this.changes.push(change);
    const wake = this._wake;
    this._wake = null;
    wake?.();
  }

  /** Resolves when a change is there, after `ms` (real time), or when `signal` aborts. */
  next(ms, signal) {
    if (this.changes.length > 0 || signal?.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', done);
        this._wake = null;
        resolve();
      };
      const timer = setTimeout(done, ms);
      this._wake = done;
      signal?.addEventListener('abort', done, { once: true });
    });
  }
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
   * @param {number} [options.pollMs] how often an idle `observe()` looks whether the Klock
   *   closed, and remotely one long-poll's wait (default 250)
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
   * Every change of `leader()` (null: no leader), in term order, the current state first,
   * from the kernel's events (see the contract above). Ends when `signal` aborts or the Klock
   * closes.
   * @param {{ signal?: AbortSignal }} [options]
   */
  async *observe(options = {}) {
    const { signal } = options;
    if (this.klock._remote !== null) {
      yield* this._observeRemote(signal);
      return;
    }
    const k = this.klock;
    if (k._closed || signal?.aborted) return;
    // One synchronous step: the state now, and every event after it.
    const follower = new Follower(this, this._leaderNow(), (id) => k._namespaceOf(id) === this.namespace);
    const stop = k._watch((event) => follower.apply(event));
    try {
      yield follower.current;
      while (!k._closed && !signal?.aborted) {
        if (follower.changes.length > 0) yield follower.changes.shift();
        else await follower.next(this.pollMs, signal);
      }
    } finally {
      stop();
    }
  }

  /** In process: who leads now, read at once (no await between the read and what follows). */
  _leaderNow() {
    const k = this.klock;
    const state = k.resourceState(this.resource, this.namespace);
    const holder = state.holders.find((h) => h.predicate === 'MUTATES');
    if (holder === undefined) return null;
    let since = this._since.get(holder.leaseId);
    if (since === undefined) since = k.snapshot().leases.find((l) => l.leaseId === holder.leaseId)?.acquiredAt ?? 0;
    return {
      agentId: holder.agentId,
      sessionId: holder.sessionId,
      term: holder.fence,
      since,
      expiresAt: holder.expiresAt,
      leaseId: holder.leaseId,
    };
  }

  /**
   * Remotely: the namespace's overview (the leader it shows, at its log index), then its event
   * stream after that index, long-polled `pollMs` at a time.
   */
  async *_observeRemote(signal) {
    const k = this.klock;
    const remote = k._remote;
    const ns = encodeURIComponent(this.namespace);
    const closedOr = (error) => {
      if (k._closed || signal?.aborted) return;
      throw error;
    };
    let overview;
    try {
      overview = await remote._request('GET', `/v1/ns/${ns}/overview`, {});
    } catch (error) {
      return closedOr(error);
    }
    const held = overview.snapshot.leases.find((l) => l.resource === this.resource && l.predicate === 'MUTATES');
    const follower = new Follower(this, held === undefined ? null : leaderOf(leaseFromServer(held)), () => true);
    let after = `${overview.index}.${END_OF_ENTRY}`;
    yield follower.current;
    while (!k._closed && !signal?.aborted) {
      let body;
      try {
        body = await remote._request('GET', `/v1/ns/${ns}/watch?after=${after}&wait_ms=${this.pollMs}`, {});
      } catch (error) {
        return closedOr(error);
      }
      for (const raw of body.events ?? []) follower.apply(eventFromServer(raw));
      if (body.next !== undefined && body.next !== null) after = body.next;
      while (follower.changes.length > 0 && !signal?.aborted) yield follower.changes.shift();
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
