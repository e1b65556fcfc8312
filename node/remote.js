'use strict';
// The remote backend of the friendly client: the kernel-facing calls of client.js carried over
// HTTP to `klock serve` (server/README.md), through the keep-alive transport of http.js.
//
// Contract
// - `RemoteKernel` answers the calls the friendly layer makes on the in-process `Kernel`
//   (openSession, acquire, heartbeat, release, cancelWait, closeSession, advance,
//   nextDeadline, pendingEvents, drainEvents, resourceState, stats) with the same shapes
//   (camelCase; `expiresAt` and the other times are the server's milliseconds). The calls
//   that reach the server return Promises; `advance`, `nextDeadline`, `pendingEvents` and
//   `drainEvents` are synchronous, as the friendly layer's timer needs. The friendly layer
//   (client.js) exists once and works over either backend.
// - Errors: the server's `{"error": {code, name, message}}` becomes the `KlockError` the
//   in-process kernel throws for that code. A refused bearer token (401/403 without a session
//   token problem) is `KlockError` `UNAUTHORIZED`/`FORBIDDEN` naming the URL. A connection
//   refused, reset or timed out is retried (see "Failover") for at most `reconnectTimeoutMs`
//   (default 30 000); then it is `Unreachable`, naming each URL tried and what failed there
//   last. Every mutating request carries an
//   `Idempotency-Key` made once per logical request and reused on its retries, so a retry
//   after a lost answer never acts twice. The connections are kept alive and reused (http.js;
//   a pooled one the server closed while idle is its to recover, not a failure here).
// - A TLS certificate the handshake refuses (unknown CA, expired, another host) is `KlockError`
//   `CERTIFICATE` at once, never retried as a network failure. A private CA: `ca` (a PEM bundle
//   read once, when the client is made), or `verify: false` to skip the check (tests only).
// - Bounded call: the budget counts from the call's start, not from its first failure, and
//   each attempt waits at most `requestTimeoutMs` (default 10 000) and never past the budget,
//   so a frozen server (SIGSTOP) costs a call at most `reconnectTimeoutMs`.
// - Failover: `url` is one server or the nodes of a cluster (an array, or URLs separated by
//   commas; each checked, a bad one a TypeError naming it), each node with its own pool of
//   kept-alive connections. Every call's attempts follow the core's rules
//   (core/src/client/failover.rs through the addon's `Servers`/`Attempts`, SPEC.md §13.7):
//   it starts at the node that last answered; a node that does not answer, or answers 503,
//   is followed at once by the next untried one; after a round of every node the call pauses
//   (a 503's `Retry-After`, else 50 ms doubling to 1 s); a 429 (`RATE_LIMITED`,
//   `TOO_MANY_WAITS`: refused before it did anything) is asked again of the same node after
//   its `Retry-After` (else the backoff). Nothing waits past the budget; past it a 429 is the
//   server's error, the rest `Unreachable`. Every call gets its whole budget, whatever the
//   calls before it met. This module sends, waits and words the errors.
// - Session token refused: a 401 `SESSION_TOKEN_REFUSED` to a request naming a session means
//   another client resumed the session (a resume issues a new token): `KlockError`
//   `SESSION_TOKEN_REFUSED` with `sessionId` set, never retried; the friendly layer loses the
//   session's leases at once (LEASE_RELEASED) and forgets the session. A resume without the
//   session's current resume secret is `RESUME_SECRET_REFUSED`.
// - Events: one reader per namespace this client has sessions in, as in Python: it long-polls
//   the namespace's watch (`GET /v1/ns/{ns}/watch?after=&wait_ms=`), each poll a call of the
//   failover rules, on transports of its own (it follows the node that last answered, and
//   resumes on another node after the same id when that one fails), and keeps the events of
//   this client's sessions. Where it starts and resumes is the core's rule
//   (core/src/client/watch.rs through the addon's `Follow`): from the log entry that opened
//   (or resumed) the client's first session of the namespace (the answer's `Klock-Index`),
//   so no read is needed before the session is handed out, then after the last id taken in.
//   So a process with thousands of sessions holds one of its token's long-polls per
//   namespace, not one per session. Events are queued in order, duplicates (by id) dropped,
//   and the queue handed to the friendly layer's one dispatch (`onEvents`). The sessions' own
//   ACQUIRED and RELEASED are not asked for while holder events are off (`setHolderEvents(false)`,
//   which the friendly layer calls unless something watches, as on the in-process kernel: it
//   knows its grants and releases from their answers): the poll says `holder_events=false`,
//   and the server leaves every session's out, so an uncontended acquire+release of another
//   process wakes no reader (those that come anyway, from a poll sent before the switch,
//   are dropped). Pacing: the watch carries every session
//   of the namespace, so in a namespace busy with other processes an answer comes back at once
//   for nearly every event; after an answer that brought nothing this client takes in, the
//   next poll is sent no sooner than `coalesceMs` (25) after the last one, unless a session
//   of this client waits on a ticket (a WAIT answer ends a pause at once: an outcome is never
//   held back) or the clock is a test's. So a reader polls at most about 40 times a second
//   for what is not its own, instead of once per event of every other process; the first event
//   after a quiet spell still comes at once (the held poll), and a lost lease's event (WOUNDED,
//   LEASE_EXPIRED, SESSION_CLOSED) in a busy namespace comes at most `coalesceMs` later.
// - Lost-lease safety (as the Rust agent's keeper): each held lease has a local deadline on
//   the client's monotonic clock, the send time of the request that granted or last renewed it
//   plus its TTL, never later than the server's expiry. A lease granted later to a WAIT (by
//   its GRANTED event or a ticket poll) counts from the *acquire's* send time and is renewed
//   at once. Long waits: every third of the asked TTL a waiting ticket is polled (`GET
//   …/tickets/{tid}?wait_ms=0`), and each WAIT answer moves that send time to the poll's (the
//   grant comes after it), so a lease granted after a wait longer than its TTL (an election's
//   campaign) is not lost on arrival. A lease whose local deadline passes (named
//   `LEASE_EXPIRED`, the core's `LOST_AT_LOCAL_DEADLINE`), whose renewal answers anything but
//   OK, or which an event ends (the core's `ends`: LEASE_EXPIRED / WOUNDED / SESSION_CLOSED),
//   is reported lost at once (a `LEASE_LOST` event of this module, routed like the
//   kernel's). `nextDeadline()` is the earliest local deadline, so the friendly layer's timer
//   fires on it and `advance(now)` settles it.
// - Resync (the core's stream rule, as in Python and Rust): an event poll starts a resync of
//   every session when the core says the stream may have missed events (an answer after a
//   poll that gave up, from another node than the last, of another log than its cursor's, or
//   with a `gap`); a request that failed and then got through within its budget does not (the
//   server kept what came meanwhile, and the stream's cursor still reads it): the event readers resume after
//   their last id, open tickets are polled again, held leases are reconciled (those the
//   server no longer has are lost) and the rest are renewed at once. The server restores
//   sessions into a suspension grace and extends leases by downtime + grace
//   (server/README.md), so a lease survives a quick restart. When a namespace's event reader
//   cannot reconnect within the budget, `onDown(sessionId, error)` fails what waits on each of
//   its sessions (once per outage), as Python's reader does; the sessions stay (the server
//   still has them, and a held lease is lost at its local deadline, not before), and the
//   reader asks again after a pause. A session the server
//   no longer knows (a restart without its data) is found by the poll of a ticket waiting in
//   it (each third of its TTL, and on a reconnect): its leases and waits are lost at once.
// - Renewals are paced (the core's rule, core/src/client/renewals.rs): at most the addon's
//   `MAX_RENEWALS_IN_FLIGHT` (32) heartbeats and resync requests (a reconnect's reconcile and
//   ticket poll of each session) are out at once per client; one due while that many are out
//   waits, in order, for one to end, and a heartbeat's send time (where its local deadline
//   counts from) is taken when its turn comes. So a resync of thousands of sessions (a
//   server's return) neither opens a connection per session nor queues them all in the
//   transport ahead of the client's other calls.
// - Under a test clock (`manualTime`: the client's clock is a ManualClock and the server runs
//   `--clock manual`), every request carries `Klock-Now` from the client's clock, `advance`
//   also settles the server's time (`POST /v1/advance`), `nextDeadline` includes the server's
//   next deadline, and `idle()` resolves once no request is in flight and every session's
//   events up to now have been taken in (a JSON poll with `wait_ms=0`), so a test can step
//   deterministically.

const { randomUUID } = require('node:crypto');
const {
  KlockError,
  ERROR_CODES,
  Servers,
  Follow,
  ends,
  LOST_AT_LOCAL_DEADLINE,
  LEADER_HEADER,
  MAX_RENEWALS_IN_FLIGHT,
} = require('./index.js');
const { Transport } = require('./http.js');

/** klock serve could not be reached within the reconnect budget. */
class Unreachable extends KlockError {
  constructor(message, cause) {
    super(message, 0, 'UNREACHABLE', cause === undefined ? undefined : { cause });
  }
}

/** The shortest pause a server's Retry-After asks for (a "0" must not make a busy loop). */
const PAUSE_FLOOR_MS = 50;
/** A wait is refreshed every third of its TTL (the rule "long waits"), at most this often. */
const REFRESH_MIN_MS = 50;
/** How long one watch long-poll waits on the server (it answers earlier when events come). */
const WATCH_WAIT_MS = 10_000;
/**
 * The shortest time between two polls of an event reader whose last answer brought nothing
 * this client routes, while none of its sessions waits on a ticket (the module contract,
 * "Events"): in a namespace busy with other processes' events, each answer would otherwise be
 * followed at once by another poll, so every process's reader woke for every event of every
 * other process (a cost that grows with the square of the processes sharing the namespace).
 */
const WATCH_COALESCE_MS = 25;
/** How long an event reader pauses before it asks again after an answer it could not read or a give-up. */
const READER_PAUSE_MS = 1_000;
/** The kernel's ttl_ms when an acquire gives none (SPEC.md §6). */
const DEFAULT_TTL_MS = 60_000;
/** The default of `requestTimeoutMs`: an attempt (not a stream) that takes longer is a network failure. */
const REQUEST_TIMEOUT_MS = 10_000;
/** How an answer's status counts for the core's failover rules: a 429 is busy, a 503 unavailable. */
function outcomeOf(status) {
  return status === 429 ? 'busy' : status === 503 ? 'unavailable' : 'answered';
}

/** The host's monotonic clock in milliseconds, as the core's failover rules count time. */
const monotonicMs = () => Math.floor(performance.now());

/** snake_case -> camelCase, remembered: the server's answers use a few dozen keys, over and over. */
const camelKeys = new Map();
const CAMEL_KEYS_KEPT = 1000; // keys that are data (a map's), not field names, are not kept past this
function camelKey(key) {
  let camelCased = camelKeys.get(key);
  if (camelCased === undefined) {
    camelCased = key.replace(/_([a-z])/g, (_, c) => c.toUpperCase());
    if (camelKeys.size < CAMEL_KEYS_KEPT) camelKeys.set(key, camelCased);
  }
  return camelCased;
}

/** The server's snake_case JSON as the in-process kernel's camelCase objects. */
function camel(value) {
  if (Array.isArray(value)) return value.map(camel);
  if (value === null || typeof value !== 'object') return value;
  const out = {};
  const keys = Object.keys(value); // no [key, value] pair per field (Object.entries)
  for (let i = 0; i < keys.length; i++) out[camelKey(keys[i])] = camel(value[keys[i]]);
  return out;
}

/** Event ids `"<index>.<k>"` in log order: negative, 0 or positive. */
function compareIds(a, b) {
  const [ai, ak] = a.split('.').map(Number);
  const [bi, bk] = b.split('.').map(Number);
  return ai !== bi ? ai - bi : ak - bk;
}

/** What a transport failure was, in words (the cause's code when there is one). */
function describeFailure(error, timeoutMs) {
  const cause = error?.cause;
  const code = cause?.code ?? error?.code;
  const words = {
    ECONNREFUSED: 'connection refused',
    ECONNRESET: 'connection reset',
    EPIPE: 'connection reset',
    ETIMEDOUT: 'timed out',
    ENOTFOUND: 'host not found',
    EHOSTUNREACH: 'host unreachable',
    ENETUNREACH: 'network unreachable',
  };
  if (error?.name === 'TimeoutError') return `no answer within ${timeoutMs ?? REQUEST_TIMEOUT_MS} ms`;
  if (code !== undefined) return words[code] ?? `${code}${cause?.message ? ` (${cause.message})` : ''}`;
  return cause?.message ?? error?.message ?? String(error);
}

// The codes OpenSSL (through Node's tls) gives a certificate it refused: unknown CA, expired,
// issued for another name. Waiting does not fix them.
const CERTIFICATE_CODES = new Set([
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
  'CERT_UNTRUSTED',
  'CERT_REJECTED',
  'CERT_SIGNATURE_FAILURE',
  'ERR_TLS_CERT_ALTNAME_INVALID',
]);

/** The certificate failure behind a transport failure, if that is what it is. */
function refusedCertificate(error) {
  for (let e = error; e !== undefined && e !== null; e = e.cause) {
    if (CERTIFICATE_CODES.has(e.code)) return e;
  }
  return undefined;
}

/** A 2xx answer. */
const ok = (response) => response.status >= 200 && response.status < 300;

const sleepReal = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * An answer's `Klock-Index` (the log entry of its command), or undefined if absent or not a
 * number (a server that does not say: the event stream then reads from the oldest kept event).
 */
function klockIndex(response) {
  const raw = response.headers['klock-index'];
  return raw !== undefined && /^[0-9]{1,15}$/.test(raw) ? Number(raw) : undefined;
}

/** A busy answer's `Retry-After` (delta-seconds) in milliseconds, or undefined (the core's backoff then). */
function retryAfterMs(response) {
  const raw = response.headers['retry-after'];
  const seconds = raw === undefined || raw.trim() === '' ? NaN : Number(raw);
  if (!Number.isFinite(seconds) || seconds < 0 || seconds > 86_400) return undefined;
  return Math.max(PAUSE_FLOOR_MS, Math.floor(seconds * 1000));
}

/** A bad `url` argument of `connect()`: a TypeError naming it. */
function badUrl(message) {
  const error = new TypeError(message);
  error.code = 'ERR_INVALID_ARG_VALUE';
  return error;
}

/**
 * The server URLs `connect()` was given (one URL, several separated by commas, or an array of
 * them), each checked: an http:// or https:// URL with a host, none twice. A bad one is a
 * TypeError naming it.
 */
function serverUrls(url) {
  let given;
  if (typeof url === 'string') given = url.split(',').map((part) => part.trim());
  else if (Array.isArray(url)) given = [...url];
  else {
    throw badUrl(
      `\`url\` must be a URL of klock serve, several separated by commas, or an array of them, got ${typeof url}`,
    );
  }
  if (given.length === 0) throw badUrl('`url` is an empty array: give at least one URL of klock serve');
  const urls = [];
  for (const item of given) {
    let parsed = null;
    try {
      parsed = typeof item === 'string' ? new URL(item) : null;
    } catch {
      parsed = null;
    }
    if (parsed === null || !['http:', 'https:'].includes(parsed.protocol) || parsed.hostname === '') {
      const where = given.length > 1 ? ` (in ${JSON.stringify(url)})` : '';
      throw badUrl(`\`url\` must be an http:// or https:// URL of klock serve, got ${JSON.stringify(item)}${where}`);
    }
    if (urls.some((u) => u.href === parsed.href)) {
      throw badUrl(`server URL ${JSON.stringify(item)} is given twice (in ${JSON.stringify(url)})`);
    }
    urls.push(parsed);
  }
  return urls;
}

class RemoteKernel {
  /**
   * @param {object} options
   * @param {string | string[]} options.url the server, e.g. `http://127.0.0.1:7300`, or the
   *   nodes of a cluster (an array, or URLs separated by commas)
   * @param {string} [options.token] the server's bearer token
   * @param {{ now(): number }} options.clock the client's clock (send times, deadlines)
   * @param {boolean} options.manualTime send `Klock-Now` (a `--clock manual` server)
   * @param {number} options.reconnectTimeoutMs the reconnect budget (of every call)
   * @param {number} [options.requestTimeoutMs] one attempt's limit (default 10 000)
   * @param {Buffer} [options.ca] the PEM bundle of the CAs to trust (instead of the system's)
   * @param {boolean} [options.verify] false: accept any certificate (default true)
   */
  constructor({
    url,
    token,
    clock,
    manualTime,
    reconnectTimeoutMs,
    requestTimeoutMs = REQUEST_TIMEOUT_MS,
    ca,
    verify = true,
  }) {
    const parsed = serverUrls(url);
    /** The servers' URLs, in the order given (the core's node positions). */
    this.urls = parsed.map((u) => u.href.replace(/\/+$/, ''));
    /** The URLs as one text (the one URL of a single server), for messages. */
    this.url = this.urls.join(',');
    this.remote = true;
    /** Which node a call starts with and when it gives up: the core's rules (failover). */
    this._servers = new Servers(this.urls.length);
    /** One pool of keep-alive connections per node. */
    this._http = parsed.map((u) => new Transport(u, { ca, verify }));
    /** Transports of its own for each event reader (one per node): its long-poll never waits for a call's connection. */
    this._newTransports = () => parsed.map((u) => new Transport(u, { ca, verify }));
    this._token = token;
    this._clock = clock;
    this._manual = manualTime;
    this._budget = reconnectTimeoutMs;
    this._requestTimeout = requestTimeoutMs;
    /** @type {Map<number, RemoteSession>} */
    this._sessions = new Map();
    /** @type {Map<number, { sessionId: number, ttlMs: number, deadline: number }>} lease id -> local view */
    this._leases = new Map();
    this._queue = [];
    this._inFlight = 0;
    this._idleWaiters = [];
    /** Renewal turns not taken (the core's `MAX_RENEWALS_IN_FLIGHT` at most), and who waits for one, oldest first. */
    this._renewalsFree = MAX_RENEWALS_IN_FLIGHT;
    this._renewalWaiters = [];
    this._serverDeadline = null;
    /**
     * Whether the sessions' own ACQUIRED and RELEASED are taken in from the event stream: the
     * friendly layer has no use for them unless something watches (it turns them off, as on
     * the in-process kernel: `setHolderEvents`).
     */
    this._holderEvents = true;
    /** The shortest time between two polls of a reader that has nothing to wait for (ms). */
    this.coalesceMs = WATCH_COALESCE_MS;
    /** @type {Map<string, NamespaceWatch>} namespace -> the reader of its events */
    this._watches = new Map();
    this._closed = false;
    /** Set by the friendly layer: route the queued events now. */
    this.onEvents = () => {};
    /** Set by the friendly layer: a session's server stayed unreachable past the budget. */
    this.onDown = () => {};
  }

  // ---- the kernel's calls -------------------------------------------------------------

  async openSession(agentId, namespace) {
    const [body, index] = await this._request('POST', `/v1/ns/${enc(namespace)}/sessions`, {
      body: { agent_id: agentId },
      withIndex: true,
    });
    return this._opened(body, index);
  }

  /** Resumes the session of a StateDigest (the server's JSON, as `digest()` answers it). */
  async resumeSession(digest) {
    const namespace = digest?.identity?.namespace;
    if (typeof namespace !== 'string') {
      throw new KlockError(
        'a digest is the object session.digest() answered ({version, identity: {..., namespace, ...}, recovery})',
        ERROR_CODES.INVALID_DIGEST,
        'INVALID_DIGEST',
      );
    }
    // The resume secret travels beside the digest, not in it (`digest()` put it there): a
    // digest is public data, the secret is what proves the session is ours.
    const { resume_secret: given, ...fields } = digest;
    const resumeSecret = given ?? this._sessions.get(digest.identity?.session_id)?.resumeSecret;
    const request = resumeSecret ? { digest: fields, resume_secret: resumeSecret } : { digest: fields };
    const [body, index] = await this._request('POST', `/v1/ns/${enc(namespace)}/sessions/resume`, {
      body: request,
      withIndex: true,
    });
    const previous = this._sessions.get(body.session_id);
    if (previous !== undefined) {
      // Same client: the new token, the same event position; every lease was renewed.
      previous.token = body.session_token;
      previous.resumeSecret = body.resume_secret;
      const now = this._clock.now();
      for (const held of this._leases.values()) {
        if (held.sessionId === previous.id) held.deadline = Math.max(held.deadline, now + held.ttlMs);
      }
      return this._info(body);
    }
    return this._opened(body, index);
  }

  async suspendSession(sessionId) {
    const s = this._session(sessionId);
    await this._request('POST', `${s.path}/suspend`, { body: {}, session: s });
  }

  /**
   * The session's StateDigest, as the server's JSON (what `resumeSession` takes back), with
   * `resume_secret` beside its fields: a resume needs the secret the session's open (or last
   * resume) answered. Keep it as private as the session token.
   */
  async digest(sessionId) {
    const s = this._session(sessionId);
    const digest = await this._request('GET', `${s.path}/digest`, { session: s });
    if (s.resumeSecret) digest.resume_secret = s.resumeSecret;
    return digest;
  }

  /**
   * A session the server opened or resumed (by log entry `index`, its `Klock-Index`, of the
   * answer's `log`): its token kept, its namespace's event reader started on its first session
   * there, from that entry (every event of the session comes from it or a later one); a
   * running reader is told of the session (a later session's events all come after the reader
   * started, unless the session is of another log: then the core moves the reader to it).
   */
  _opened(body, index) {
    const session = new RemoteSession(this, body);
    this._sessions.set(session.id, session);
    const log = typeof body.log === 'string' ? body.log : undefined;
    const running = this._watches.get(session.namespace);
    if (running === undefined) {
      const watch = new NamespaceWatch(this, session.namespace, index, log);
      this._watches.set(session.namespace, watch);
      watch.start();
    } else if (index !== undefined) {
      running.follow.opened(index, log);
    }
    return this._info(body);
  }

  _info(body) {
    return {
      sessionId: body.session_id,
      agentId: body.agent_id,
      namespace: body.namespace,
      priority: body.priority,
      epoch: body.epoch,
    };
  }

  async acquire(sessionId, intents, options) {
    const s = this._session(sessionId);
    const body = { intents };
    if (options?.ttlMs !== undefined) body.ttl_ms = options.ttlMs;
    if (options?.wait !== undefined) body.wait = options.wait;
    if (options?.waitTimeoutMs !== undefined) body.wait_timeout_ms = options.waitTimeoutMs;
    const sentAt = this._clock.now();
    s.acquiring.push(sentAt);
    let verdict;
    try {
      verdict = camel(await this._request('POST', `${s.path}/acquire`, { body, session: s }));
    } finally {
      s.acquiring.splice(s.acquiring.indexOf(sentAt), 1);
    }
    if (verdict.verdict === 'GRANTED') this._hold(sessionId, verdict.leases, sentAt);
    else if (verdict.verdict === 'WAIT' && !s.resolved.has(verdict.ticket)) {
      s.tickets.set(verdict.ticket, sentAt);
      // Its outcome is an event: the reader polls now, not after a pause between polls.
      this._watches.get(s.namespace)?.wake();
      if (!this._manual) {
        const every = Math.max(REFRESH_MIN_MS, Math.floor((options?.ttlMs ?? DEFAULT_TTL_MS) / 3));
        s.refresh.set(verdict.ticket, { at: sentAt + every, every });
      }
    }
    s.resolved.delete(verdict.ticket);
    return verdict;
  }

  async heartbeat(sessionId, leaseIds) {
    this._session(sessionId);
    return this._paced(async () => {
      // Closed while it waited for its turn: UNKNOWN_SESSION, as the server would say.
      const s = this._session(sessionId);
      // The send time is taken when its turn comes (the core's `renewals` rule).
      const sentAt = this._clock.now();
      return this._sendHeartbeat(s, leaseIds, sentAt);
    });
  }

  /** Sends a heartbeat that has its turn; `sentAt`: its send time. */
  async _sendHeartbeat(s, leaseIds, sentAt) {
    const body = camel(
      await this._request('POST', `${s.path}/heartbeat`, {
        body: leaseIds === 'all' ? {} : { lease_ids: leaseIds },
        session: s,
      }),
    );
    for (const r of body.results) {
      const held = this._leases.get(r.leaseId);
      if (held === undefined) continue;
      if (r.status === 'OK') held.deadline = Math.max(held.deadline, sentAt + held.ttlMs);
      else if (r.status !== 'LIFETIME_EXCEEDED') this._leases.delete(r.leaseId);
    }
    return body.results;
  }

  /** Settles the local deadlines at once (synchronously), then releases on the server. */
  /**
   * Settles the local deadlines at once (synchronously), then releases on the server:
   * resolves `true` if this call released it, `false` if the server had ended it already.
   */
  release(sessionId, leaseId, now) {
    this.advance(now, { server: false });
    const s = this._session(sessionId);
    this._leases.delete(leaseId);
    return this._request('POST', `${s.path}/release`, { body: { lease_ids: [leaseId] }, session: s }).then(
      (body) => body.released > 0,
    );
  }

  async cancelWait(sessionId, ticket) {
    const s = this._session(sessionId);
    s.tickets.delete(ticket);
    await this._request('DELETE', `${s.path}/tickets/${ticket}`, { session: s, mutating: true });
  }

  async closeSession(sessionId) {
    const s = this._session(sessionId);
    this._forgetSession(s);
    await this._request('DELETE', s.path, { session: s, mutating: true });
  }

  async reconcile(sessionId, leaseIds) {
    const s = this._session(sessionId);
    const body = await this._request('POST', `${s.path}/reconcile`, { body: { lease_ids: leaseIds }, session: s });
    return camel(body.statuses);
  }

  async resourceState(resource, namespace) {
    const q = new URLSearchParams({ resource });
    return camel(await this._request('GET', `/v1/ns/${enc(namespace)}/resources/state?${q}`));
  }

  async stats(namespace = 'default') {
    return camel(await this._request('GET', `/v1/ns/${enc(namespace)}/stats`));
  }

  snapshot() {
    return Promise.reject(
      new KlockError(
        "snapshot() is the in-process kernel's; a remote client reads resourceState() and stats()",
        0,
        'UNSUPPORTED',
      ),
    );
  }

  /**
   * Settles time locally: every held lease whose local deadline has passed is lost now.
   * Under a test clock it also settles the server's time (`POST /v1/advance`).
   */
  advance(now, { server = true } = {}) {
    // Under a test clock both sides share one time: the server's own expiry (its event) is
    // the one to report, and a local deadline due now would re-arm the timer at once.
    for (const [leaseId, held] of this._manual ? [] : this._leases) {
      if (held.deadline > now) continue;
      this._leases.delete(leaseId);
      // Lost here, so nobody will release it: let go on the server too (best effort; when
      // the server is back from a restart it may still hold it).
      const s = this._sessions.get(held.sessionId);
      if (s !== undefined) {
        this._background(this._request('POST', `${s.path}/release`, { body: { lease_ids: [leaseId] }, session: s }));
      }
      this._queue.push({
        event: 'LEASE_LOST',
        lease: leaseId,
        session: held.sessionId,
        name: LOST_AT_LOCAL_DEADLINE,
        message:
          `no renewal reached klock serve at ${this.url} before the lease's TTL ran out ` +
          '(its local deadline passed); the server may have let it expire',
      });
    }
    for (const s of this._manual ? [] : this._sessions.values()) {
      for (const [ticket, due] of s.refresh) {
        if (!s.tickets.has(ticket))
          s.refresh.delete(ticket); // resolved or withdrawn
        else if (due.at <= now) {
          due.at = now + due.every;
          this._background(s.refreshTicket(ticket, now));
        }
      }
    }
    if (server && this._manual && !this._closed) {
      this._serverDeadline = null; // until the advance is answered: never re-armed in the past
      this._background(this._request('POST', '/v1/advance', { body: {}, now }).then(() => this._refreshDeadline()));
    }
  }

  /** The earliest local deadline of a held lease (and, under a test clock, the server's). */
  nextDeadline() {
    let next = this._serverDeadline ?? Infinity;
    if (!this._manual) {
      for (const held of this._leases.values()) if (held.deadline < next) next = held.deadline;
      for (const s of this._sessions.values()) for (const due of s.refresh.values()) if (due.at < next) next = due.at;
    }
    return next === Infinity ? null : next;
  }

  /** The local deadline of a held lease (see the module contract), or undefined. */
  deadline(leaseId) {
    return this._leases.get(leaseId)?.deadline;
  }

  pendingEvents() {
    return this._queue.length;
  }

  /**
   * Whether the sessions' own ACQUIRED and RELEASED events are taken in (and routed), as the
   * in-process kernel's `setHolderEvents`: the friendly layer turns them off unless something
   * watches every event.
   */
  setHolderEvents(on) {
    const was = this._holderEvents;
    this._holderEvents = Boolean(on);
    // A poll held without them would skip those that come meanwhile: sent again with them.
    if (this._holderEvents && !was) for (const watch of this._watches.values()) watch.again();
  }

  /** Whether a session of this client waits on a ticket (its outcome comes as an event). */
  _waiting() {
    for (const s of this._sessions.values()) if (s.tickets.size > 0) return true;
    return false;
  }

  drainEvents() {
    const events = this._queue;
    this._queue = [];
    return events;
  }

  /** Stops every event reader and forgets the sessions (the friendly layer closed them). */
  close() {
    this._closed = true;
    for (const watch of this._watches.values()) watch.stop();
    for (const http of this._http) http.close();
  }

  /**
   * Resolves once no request is in flight and every open session's events up to now have
   * been taken in (tests on a manual clock step with it).
   */
  async idle() {
    for (let round = 0; round < 50; round++) {
      while (this._inFlight > 0) await new Promise((resolve) => this._idleWaiters.push(resolve));
      await this._catchUp().catch(() => {});
      if (this._inFlight === 0) {
        if (this._queue.length > 0) this.onEvents();
        return;
      }
    }
  }

  // ---- inside ------------------------------------------------------------------------------

  /**
   * Takes in every event of this client's sessions up to now, without waiting, from their
   * namespaces' watches (what their readers would bring next; a read that, unlike a session's
   * own event poll, does not count as the session's activity, so it never keeps an idle
   * session open).
   */
  async _catchUp() {
    for (const watch of this._watches.values()) {
      const [body, node] = await this._request('GET', `${watch.path}?${watch.query(0)}`, { withNode: true });
      watch.take(body, watch.check(node, body));
    }
  }

  _session(sessionId) {
    const s = this._sessions.get(sessionId);
    if (s === undefined) {
      throw new KlockError(
        `session ${sessionId} is not open through this client`,
        ERROR_CODES.UNKNOWN_SESSION,
        'UNKNOWN_SESSION',
      );
    }
    return s;
  }

  /** Leases just granted: their local deadlines count from `sentAt`. */
  _hold(sessionId, leases, sentAt) {
    for (const l of leases) {
      const held = this._leases.get(l.leaseId);
      const deadline = sentAt + l.ttlMs;
      if (held === undefined) this._leases.set(l.leaseId, { sessionId, ttlMs: l.ttlMs, deadline });
      else {
        held.ttlMs = l.ttlMs;
        held.deadline = Math.max(held.deadline, deadline);
      }
    }
  }

  _forgetSession(s) {
    this._sessions.delete(s.id);
    for (const [id, held] of this._leases) if (held.sessionId === s.id) this._leases.delete(id);
  }

  /** An event of session `s` as the kernel's; updates the local view, queues it. */
  _ingest(s, raw, id) {
    if (id !== undefined && id !== null && id !== '') {
      if (s.lastEventId !== null && compareIds(id, s.lastEventId) <= 0) return false;
      s.lastEventId = id;
    }
    const event = camel(raw);
    delete event.id;
    delete event.eventId;
    switch (event.event) {
      case 'GRANTED': {
        // The grant may predate what told us of it: count from the acquire's send time (or,
        // before its answer came, the oldest acquire in flight). The friendly layer renews it
        // at once (client.js, `_dispatch`), which starts a fresh local deadline.
        const sentAt = s.tickets.get(event.ticket) ?? s.acquiring[0] ?? this._clock.now();
        if (!s.tickets.has(event.ticket)) s.resolved.add(event.ticket);
        s.tickets.delete(event.ticket);
        this._hold(s.id, event.leases, sentAt);
        break;
      }
      case 'WAIT_TIMEOUT':
      case 'DIED':
        if (!s.tickets.has(event.ticket)) s.resolved.add(event.ticket);
        s.tickets.delete(event.ticket);
        break;
      case 'WOUNDED':
        for (const t of event.lostTickets) s.tickets.delete(t);
        break;
      default:
        break;
    }
    // The leases it ends (the core's rule): no longer held here. Every lease of a closed
    // session: the session is gone.
    const ended = ends(event);
    if (ended?.leases === null)
      this._lostSession(s, `the server closed the session (${event.reason ?? 'closed'})`, false);
    else for (const id of ended?.leases ?? []) this._leases.delete(id);
    this._queue.push(event);
    return true;
  }

  /**
   * Every held lease of `s` is lost and the session is gone (closed or unknown on the
   * server); `announce`: also queue its SESSION_CLOSED (when no event of the server said so).
   */
  _lostSession(s, why, announce = true) {
    if (!this._sessions.has(s.id)) return;
    for (const [id, held] of this._leases) {
      if (held.sessionId !== s.id) continue;
      this._leases.delete(id);
      this._queue.push({ event: 'LEASE_LOST', lease: id, session: s.id, name: 'LEASE_RELEASED', message: why });
    }
    if (announce) this._queue.push({ event: 'SESSION_CLOSED', session: s.id, reason: 'GONE' });
    this._sessions.delete(s.id);
    s.tickets.clear();
    s.refresh.clear();
  }

  /**
   * What a ticket poll's failure says of its session: one the server no longer knows (a
   * restart without its data, a close unheard) or whose token it refuses is lost now, with
   * what waits in it; `true` then.
   */
  _sessionGoneBy(s, error) {
    if (!(error instanceof KlockError)) return false;
    if (!['UNKNOWN_SESSION', 'UNAUTHORIZED', 'SESSION_TOKEN_REFUSED'].includes(error.name)) return false;
    this._lostSession(s, `the server no longer knows the session (${error.message})`);
    this.onDown(s.id, error);
    this.onEvents();
    return true;
  }

  /** Renews `leaseIds` now (a late-heard grant, a reconnect); a failure loses them. */
  _renewNow(s, leaseIds) {
    if (leaseIds.length === 0) return;
    this._background(
      this.heartbeat(s.id, leaseIds).then(
        (results) => {
          for (const r of results) {
            if (r.status === 'OK' || r.status === 'LIFETIME_EXCEEDED') continue;
            this._queue.push({
              event: 'LEASE_LOST',
              lease: r.leaseId,
              session: s.id,
              name: r.status === 'LEASE_EXPIRED' ? 'LEASE_EXPIRED' : 'LEASE_RELEASED',
              message: `a renewal found the lease ${r.status.toLowerCase().replace('_', ' ')}`,
            });
          }
          if (this._queue.length > 0) this.onEvents();
        },
        () => {
          // Unreachable: the local deadline decides.
        },
      ),
    );
  }

  /**
   * After a reconnect: reconcile every held lease (the ones the server lost are lost), renew
   * the rest, poll open tickets again. The event readers resume by themselves.
   */
  _resync() {
    for (const s of [...this._sessions.values()]) {
      const ids = [...this._leases].filter(([, h]) => h.sessionId === s.id).map(([id]) => id);
      if (ids.length > 0) {
        this._background(
          this._paced(() => this.reconcile(s.id, ids)).then(
            (statuses) => {
              const active = [];
              for (const r of statuses) {
                if (r.status === 'ACTIVE') active.push(r.leaseId);
                else if (this._leases.delete(r.leaseId)) {
                  this._queue.push({
                    event: 'LEASE_LOST',
                    lease: r.leaseId,
                    session: s.id,
                    name: r.status === 'EXPIRED' ? 'LEASE_EXPIRED' : 'LEASE_RELEASED',
                    message: `after reconnecting, the server no longer has the lease (${r.status})`,
                  });
                }
              }
              this._renewNow(s, active);
              if (this._queue.length > 0) this.onEvents();
            },
            () => {},
          ),
        );
      }
      for (const ticket of [...s.tickets.keys()]) this._background(this._paced(() => s.pollTicket(ticket)));
    }
  }

  /**
   * Runs `send` (one renewal: a heartbeat, or a resync's request for one session) once a
   * renewal turn is free, and gives the turn back when it ends (the core's `renewals` rule:
   * at most `MAX_RENEWALS_IN_FLIGHT` out at once; the rest wait, in order). A waiting renewal
   * counts as a request in flight (`idle()`).
   */
  async _paced(send) {
    this._enter();
    try {
      if (this._renewalsFree > 0) this._renewalsFree--;
      else await new Promise((resolve) => this._renewalWaiters.push(resolve));
      try {
        return await send();
      } finally {
        // The turn passes to the oldest waiter, else it is free again.
        const next = this._renewalWaiters.shift();
        if (next !== undefined) next();
        else this._renewalsFree++;
      }
    } finally {
      this._leave();
    }
  }

  async _refreshDeadline() {
    const body = await this._request('GET', '/v1/deadline');
    this._serverDeadline = body.deadline ?? null;
    if (!this._closed) this.onEvents();
  }

  /** A request whose outcome nobody awaits: counted for `idle()`, errors kept quiet. */
  _background(promise) {
    promise.catch(() => {});
  }

  _enter() {
    this._inFlight++;
  }

  _leave() {
    this._inFlight--;
    if (this._inFlight === 0) {
      const waiters = this._idleWaiters;
      this._idleWaiters = [];
      for (const resolve of waiters) resolve();
    }
  }

  _headers(session, extra) {
    const headers = { ...extra };
    if (this._token !== undefined) headers.authorization = `Bearer ${this._token}`;
    if (session !== undefined) headers['klock-session-token'] = session.token;
    return headers;
  }

  /**
   * One logical request, retried on network failures and busy answers within the reconnect
   * budget (the same `Idempotency-Key` on every try of a mutating one), each attempt to the
   * node the core's failover rules name. Resolves with the JSON answer (`withIndex`: with its
   * `Klock-Index`, `[answer, index]`; `withNode`: with the node that answered, `[answer, node]`,
   * since the next call may start at another, the leader the answer named), rejects with the
   * server's error as `KlockError`, or `Unreachable` naming the URLs tried.
   */
  async _request(
    method,
    path,
    { body, session, mutating = method !== 'GET', now, withIndex = false, withNode = false } = {},
  ) {
    // One shape for every request's headers (an absent one is undefined: the transport skips
    // it), so the stores below and the transport's reads of them are the same each time.
    const headers = {
      'content-type': body === undefined ? undefined : 'application/json',
      authorization: this._token === undefined ? undefined : `Bearer ${this._token}`,
      'klock-session-token': session === undefined ? undefined : session.token,
      'idempotency-key': mutating ? randomUUID() : undefined,
      'klock-now': undefined,
    };
    const payload = body === undefined ? undefined : JSON.stringify(body);
    // Bounded call: every attempt and pause fits in the budget, counted from now. Which node
    // each attempt asks, how long it pauses and when it gives up are the core's rules.
    const started = monotonicMs();
    const attempts = this._servers.call(started, this._budget);
    /** @type {Map<string, string> | null} URL -> what failed there last, in the order tried (made at the first failure) */
    let failures = null;
    const failed = (url, what) => {
      failures ??= new Map();
      failures.delete(url);
      failures.set(url, what);
    };
    this._enter();
    try {
      for (;;) {
        if (this._manual) headers['klock-now'] = String(now ?? this._clock.now());
        const node = attempts.node;
        const url = this.urls[node];
        const attemptMs = attempts.attemptLimitMs(monotonicMs(), this._requestTimeout);
        let response;
        let outcome;
        let pauseAsked;
        try {
          response = await this._http[node].request(method, path, { headers, body: payload, timeoutMs: attemptMs });
          outcome = outcomeOf(response.status);
        } catch (error) {
          const refused = refusedCertificate(error);
          if (refused !== undefined) {
            // Not a network failure: said at once, not after the whole reconnect budget.
            throw new KlockError(
              `klock serve at ${url}: its TLS certificate was refused (${refused.code}: ${refused.message}); ` +
                'trust the CA that signed it: connect(url, { ca: PATH }) or KLOCK_CA=PATH',
              0,
              'CERTIFICATE',
            );
          }
          outcome = 'unreachable';
          failed(url, describeFailure(error, attemptMs));
        }
        if (outcome === 'busy' || outcome === 'unavailable') {
          pauseAsked = retryAfterMs(response);
          failed(url, `the server is unavailable (${response.status}: ${response.text.slice(0, 200)})`);
        }
        // A closed client asks no more: its failure is final.
        const next = this._closed
          ? { what: outcome === 'busy' ? 'gave_up_busy' : outcome === 'answered' ? 'done' : 'gave_up_unreachable' }
          : attempts.after(this._servers, outcome, pauseAsked, monotonicMs());
        if (next.what === 'gave_up_unreachable') {
          const tried = [...(failures ?? [])].map(([u, what]) => `${u}: ${what}`).join('; ');
          throw new Unreachable(
            `cannot reach klock serve at ${tried} (${method} ${path.split('?')[0]}; ` +
              `gave up after ${monotonicMs() - started} ms, reconnectTimeoutMs ${this._budget})`,
          );
        }
        if (next.what === 'retry') {
          if (next.ms > 0) await sleepReal(next.ms);
          continue;
        }
        // Answered (or a 429 past the budget: the server's own error, named). A follower's
        // answer names the leader: the next calls go there if it is one of ours.
        const leader = response.headers[LEADER_HEADER];
        if (leader !== undefined && next.what === 'done') this._servers.ledBy(leader, this.urls);
        let answer;
        try {
          answer = this._answer(response, response.text, method, path, session, url);
        } catch (e) {
          if (e?.sessionId !== undefined && session !== undefined) {
            // Session token refused: the session is another client's now; what it held is lost.
            this._lostSession(session, `the server refused the session's token: ${e.message}`);
            this.onEvents();
          }
          throw e;
        }
        // A test clock: the command may have moved the server's next deadline.
        if (this._manual && mutating && path !== '/v1/advance') this._background(this._refreshDeadline());
        if (withNode) return [answer, node];
        return withIndex ? [answer, klockIndex(response)] : answer;
      }
    } finally {
      this._leave();
    }
  }

  /** A response as its JSON, or the `KlockError` it carries (`url`: the node that answered). */
  _answer(response, text, method, path, session, url = this.url) {
    let json = null;
    try {
      json = text === '' ? {} : JSON.parse(text);
    } catch {
      json = null;
    }
    if (ok(response) && json !== null) return json;
    const error = json?.error;
    const where = `klock serve at ${url} (${method} ${path.split('?')[0]})`;
    if (session !== undefined && response.status === 401 && error?.name === 'SESSION_TOKEN_REFUSED') {
      // Session token refused: another client resumed the session, which is its now.
      const refused = new KlockError(
        `${where} refused the session token of session ${session.id} (401: ${error.message}); another ` +
          "client resumed the session (a resume issues a new token), so it is no longer this client's",
        error.code ?? 0,
        'SESSION_TOKEN_REFUSED',
      );
      refused.sessionId = session.id;
      throw refused;
    }
    if (response.status === 401 && error?.name === 'RESUME_SECRET_REFUSED') {
      throw new KlockError(`${where}: ${error.message}`, error.code ?? 0, error.name);
    }
    if (response.status === 401 || response.status === 403) {
      const name = response.status === 401 ? 'UNAUTHORIZED' : 'FORBIDDEN';
      throw new KlockError(
        `${where} refused the bearer token (${response.status}${error?.message ? `: ${error.message}` : ''}); ` +
          'pass the token the server was given (`connect(url, { token })`)',
        error?.code ?? 0,
        error?.name ?? name,
      );
    }
    if (error !== undefined && typeof error.name === 'string') {
      throw new KlockError(
        error.message ?? `${where}: ${error.name}`,
        error.code ?? ERROR_CODES[error.name] ?? 0,
        error.name,
      );
    }
    throw new KlockError(
      `${where} answered HTTP ${response.status}: ${text.slice(0, 200) || '(no body)'}`,
      0,
      'BAD_RESPONSE',
    );
  }
}

/** One session on the server: its token, its last event, its open tickets. */
class RemoteSession {
  constructor(backend, body) {
    this.backend = backend;
    this.id = body.session_id;
    this.token = body.session_token;
    /** What the next resume of the session must present. */
    this.resumeSecret = body.resume_secret;
    this.namespace = body.namespace;
    this.path = `/v1/ns/${enc(body.namespace)}/sessions/${body.session_id}`;
    this.lastEventId = null;
    /**
     * @type {Map<number, number>} open ticket -> the latest send time it was known to wait at:
     * its acquire's, then each refresh's that answered WAIT (the rule "long waits")
     */
    this.tickets = new Map();
    /** @type {Map<number, { at: number, every: number }>} open ticket -> its next refresh */
    this.refresh = new Map();
    /** Tickets whose outcome came before their acquire's answer. */
    this.resolved = new Set();
    /** Send times of the acquires whose answer has not come yet (oldest first). */
    this.acquiring = [];
  }

  /**
   * Polls an open ticket's outcome (after a reconnect): a resolved one is taken in as its event.
   * One that ended while this client could not hear of it, and whose outcome the server no
   * longer has (TICKET_ENDED: it left the session's event stream, for instance across a restart
   * from a snapshot; UNKNOWN_TICKET: forgotten), is taken in as a wait that timed out: its block
   * asks again, which reuses any lease the session was granted meanwhile (an acquire of intents
   * a session holds reuses its leases, SPEC.md §6), instead of waiting for an event that will
   * never come.
   */
  async pollTicket(ticket) {
    const b = this.backend;
    let body;
    try {
      body = await b._request('GET', `${this.path}/tickets/${ticket}?wait_ms=0`, { session: this });
    } catch (e) {
      if (b._sessionGoneBy(this, e)) return;
      if (e?.name !== 'TICKET_ENDED' && e?.name !== 'UNKNOWN_TICKET') throw e;
      body = { event: 'WAIT_TIMEOUT', ticket, session: this.id };
    }
    if (body.event === undefined || !this.tickets.has(ticket)) return;
    if (b._ingest(this, body, body.event_id)) b.onEvents();
  }

  /**
   * Asks whether a long wait still waits (the rule "long waits"), the request sent at `now`:
   * a WAIT answer moves the ticket's send time to `now`, an outcome is taken in as its event.
   * A failure changes nothing (the next refresh asks again; a reconnect polls the tickets).
   */
  async refreshTicket(ticket, now) {
    const b = this.backend;
    let body;
    try {
      body = await b._request('GET', `${this.path}/tickets/${ticket}?wait_ms=0`, { session: this });
    } catch (e) {
      b._sessionGoneBy(this, e);
      return;
    }
    if (!this.tickets.has(ticket)) return; // resolved meanwhile by the event reader
    if (body.event === undefined) this.tickets.set(ticket, Math.max(now, this.tickets.get(ticket)));
    else if (b._ingest(this, body, body.event_id)) b.onEvents();
  }
}

/**
 * The reader of one namespace's events for every session of this client in it: long-polls the
 * watch, resumed after the last event id taken in, each poll a call of the core's failover
 * rules (it follows the node that last answered and moves on when that one fails), until
 * stopped or cut off past the budget (the module contract, "Events", "Reconnect", "Failover").
 */
class NamespaceWatch {
  /**
   * `entry`: the log entry of the open that started it (undefined: from the oldest kept event),
   * of log `log` (the open's answer's, if any).
   */
  constructor(backend, namespace, entry, log) {
    this.backend = backend;
    this.namespace = namespace;
    this.path = `/v1/ns/${enc(namespace)}/watch`;
    /** Where the stream resumes, and when it may have missed events: the core's rules. */
    this.follow = new Follow(entry, log);
    /** One transport per node. */
    this._http = backend._newTransports();
    /** Ends the poll in flight: `stop()`, or `again()`. */
    this._abort = new AbortController();
    /** The poll in flight was ended to be sent again at once (`again()`), not by a failure. */
    this._again = false;
    this._stopped = false;
    /** When the last poll was sent (`performance.now()`), for the pause between polls. */
    this._sentAt = -Infinity;
    /** Ends the pause before the next poll early, while one runs. */
    this._wake = null;
  }

  start() {
    this._run();
  }

  stop() {
    this._stopped = true;
    this._abort.abort();
    this.wake();
    for (const http of this._http) http.close();
  }

  /**
   * Sends the poll again at once, from the same cursor: holder events were turned on, and a
   * poll held without them would move past those that come meanwhile. The ended poll was not
   * answered, so nothing it would have skipped is lost.
   */
  again() {
    this._again = true;
    this._abort.abort();
    this.wake();
  }

  /** Ends the pause before the next poll, if one runs (a ticket opened, or the reader stops). */
  wake() {
    const wake = this._wake;
    this._wake = null;
    wake?.();
  }

  /**
   * After an answer that brought nothing this client routes: waits until `coalesceMs` after
   * the last poll was sent, unless a session waits on a ticket (its outcome must come at once)
   * or the clock is a test's (it steps the events itself). The first event after a quiet
   * spell still comes at once (the poll is already held on the server); what follows within
   * the pause comes in the next answer, together.
   */
  async _pause() {
    const b = this.backend;
    const ms = this._sentAt + b.coalesceMs - performance.now();
    if (ms <= 0 || b._manual || b._waiting()) return;
    await new Promise((resolve) => {
      const timer = setTimeout(() => {
        this._wake = null;
        resolve();
      }, ms);
      this._wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }

  /** A poll's query: after the id the core names (none: from the oldest kept event), of its log. */
  query(longMs) {
    // Not held for an event right after a failed poll: that answer is the resync's (the core's rule).
    let query = `wait_ms=${this.follow.waitMs(longMs)}`;
    const { after, log } = this.follow;
    if (after !== null) query += `&after=${encodeURIComponent(after)}`;
    if (log !== null) query += `&log=${encodeURIComponent(log)}`;
    // Holder events off: the server leaves them out, so they neither come nor answer a poll.
    if (!this.backend._holderEvents) query += '&holder_events=false';
    return query;
  }

  /**
   * The core's word on a poll's answer from node `node`: whether events may have been missed
   * (a resync after taking it in). Throws (a `RangeError`, moving nothing) if the answer's
   * `next` is not an event id.
   */
  check(node, body) {
    const log = typeof body?.log === 'string' ? body.log : undefined;
    return this.follow.answered(node, String(body?.next), body?.gap === true, log);
  }

  /**
   * Takes in a watch answer: the events of this client's sessions, in order (their ACQUIRED
   * and RELEASED only while holder events are on); then `resync`. Whether any was taken in.
   */
  take(body, resync) {
    const b = this.backend;
    let took = false;
    for (const event of body.events ?? []) {
      const s = b._sessions.get(event.session);
      if (s === undefined) continue;
      if (!b._holderEvents && (event.event === 'ACQUIRED' || event.event === 'RELEASED')) continue;
      took = b._ingest(s, event, event.id) || took;
    }
    if (took) b.onEvents();
    if (resync) b._resync();
    return took;
  }

  async _run() {
    const b = this.backend;
    let attempts = null;
    /** @type {Map<string, string>} URL -> what failed there last, in this outage */
    const failures = new Map();
    // Whether the waiting blocks were told of this outage already.
    let told = false;
    // Whether the last answer brought nothing this client routes (then a pause, `_pause`).
    let quiet = false;
    while (!this._stopped) {
      if (quiet) {
        quiet = false;
        await this._pause();
        if (this._stopped) return;
      }
      attempts ??= b._servers.call(monotonicMs(), b._budget);
      const node = attempts.node;
      const url = b.urls[node];
      let outcome;
      let pauseAsked;
      let body;
      try {
        const headers = b._headers(undefined, {});
        if (b._manual) headers['klock-now'] = String(b._clock.now());
        // Sent on the reader's own transport, not through `_request`: it is not counted by
        // `idle()`, and `stop()` ends it at once; a server that does not answer within the wait
        // and an attempt's time is a failure.
        this._sentAt = performance.now();
        if (this._abort.signal.aborted) this._abort = new AbortController(); // after again()
        this._again = false;
        const response = await this._http[node].request('GET', `${this.path}?${this.query(WATCH_WAIT_MS)}`, {
          headers,
          timeoutMs: WATCH_WAIT_MS + b._requestTimeout,
          signal: this._abort.signal,
        });
        const text = response.text;
        outcome = outcomeOf(response.status);
        if (outcome !== 'answered') {
          pauseAsked = retryAfterMs(response);
          failures.delete(url);
          failures.set(url, `the server is unavailable (${response.status}: ${text.slice(0, 200)})`);
        } else if (ok(response)) {
          body = JSON.parse(text);
        } else {
          b._answer(response, text, 'GET', this.path, undefined, url); // throws its error
        }
      } catch (error) {
        if (this._stopped) return;
        if (this._again) continue; // ended by again(): sent again at once, nothing failed
        failures.delete(url);
        if (outcome === 'answered') {
          // An error answer (a refused token, say): no events from that node; it counts as a
          // node that could not serve the poll, so a lasting one ends the reader past the
          // budget, as a server out of reach does.
          outcome = 'unavailable';
          failures.set(url, error?.message ?? String(error));
        } else {
          outcome = 'unreachable';
          failures.set(url, describeFailure(error));
        }
      }
      if (this._stopped) return;
      const next = attempts.after(b._servers, outcome, pauseAsked, monotonicMs());
      if (next.what === 'done') {
        attempts = null;
        let resync;
        try {
          resync = this.check(node, body);
        } catch (error) {
          // An answer this client cannot read: a failed poll, asked again after a pause.
          this.follow.failed();
          failures.set(url, `an unreadable event batch (${error?.message ?? error})`);
          await sleepReal(READER_PAUSE_MS);
          continue;
        }
        failures.clear();
        told = false;
        quiet = !this.take(body, resync) && !resync;
        continue;
      }
      if (next.what === 'retry') {
        await sleepReal(next.ms);
        continue;
      }
      // Gave up: the servers stayed away (or busy) past the budget. Only then may events have
      // been missed: a server back within the budget missed none, or its answer names another log.
      this.follow.failed();
      if (!told) this._down(failures, monotonicMs() - attempts.endsMs + b._budget);
      told = true;
      attempts = null;
      await sleepReal(READER_PAUSE_MS);
    }
  }

  /**
   * Cut off past the budget: what waits on the namespace's sessions fails. The sessions stay
   * (the server still has them; a held lease is lost at its local deadline, not before).
   */
  _down(failures, spentMs) {
    const b = this.backend;
    const tried = [...failures].map(([u, what]) => `${u}: ${what}`).join('; ');
    const down = new Unreachable(
      `cannot reach klock serve at ${tried} (the event stream of namespace ` +
        `${JSON.stringify(this.namespace)}; gave up after ${spentMs} ms, reconnectTimeoutMs ${b._budget})`,
    );
    for (const s of [...b._sessions.values()]) if (s.namespace === this.namespace) b.onDown(s.id, down);
    b.onEvents();
  }
}

function enc(namespace) {
  return encodeURIComponent(namespace);
}

module.exports = { RemoteKernel, Unreachable };
