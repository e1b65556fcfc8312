// The shared client scenarios (tests/client-scenarios/*.json; format in its README.md) on the
// Node client: one test per file and backend, each lease block a promise, on a ManualClock so
// that time moves only when a step says so. python/tests/test_client_scenarios.py runs the
// same files on the Python client.
//
// Two backends, one runner: `inprocess` (new Klock, the native kernel) and `remote`
// (connect() to the test kit's `klock-testkit serve` this file starts, a `klock serve --memory
// --clock manual` reset to each scenario's config; every request carries the ManualClock's time in Klock-Now). Remotely
// "let the client react" also waits until no request is in flight and every event has been
// taken in, and the expectations read the server (resource state, stats, session digests).
// What a remote client cannot do is listed in REMOTE_CANNOT, with the reason, and counted.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { Klock, ManualClock, KlockError, Kernel, connect } = require('../client.js');
const { startManualServer } = await import('./server.mjs');

/** Scenarios the remote backend cannot run, and why (counted in a test of their own). */
const REMOTE_CANNOT = {
  'idle-session-closed':
    "its expectations read each session's priority, which a remote observer can read only through the " +
    "session's digest (GET .../digest), a call that counts as the session's activity and so moves the idle " +
    'close the scenario checks',
};

const dir = new URL('../../tests/client-scenarios/', import.meta.url);
const files = readdirSync(dir)
  .filter((f) => f.endsWith('.json'))
  .sort();
const CLIENT_ERRORS = new Set(['LeaseLost', 'Died', 'Timeout', 'Closed']);
const ACTIONS = new Set([
  'open',
  'enter',
  'exit',
  'heartbeat',
  'advance',
  'jump',
  'close',
  'close_klock',
  'kernel_close',
  'expect',
]);
const STEP_KEYS = new Set([...ACTIONS, 'session', 'intents', 'ttl_ms', 'timeout_ms']);

const snake = (name) => name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
const camel = (name) => name.replace(/_([a-z])/g, (_, c) => c.toUpperCase());
/** Lets every promise that can settle, settle (the clock does not move meanwhile). */
const settle = async (klock) => {
  for (let i = 0; i < 3; i++) await new Promise((resolve) => setImmediate(resolve));
  if (klock?.kernel.remote === true) {
    // Remote: until no request is in flight and nothing new came (twice in a row).
    for (let quiet = 0; quiet < 2;) {
      const before = JSON.stringify(klock.counters) + klock.kernel._inFlight;
      await klock.kernel.idle();
      for (let i = 0; i < 3; i++) await new Promise((resolve) => setImmediate(resolve));
      quiet =
        before === JSON.stringify(klock.counters) + klock.kernel._inFlight && klock.kernel._inFlight === 0
          ? quiet + 1
          : 0;
    }
  }
};

let server = null;
after(async () => server?.stop());

/** The shared manual-clock server, reset to `config`. */
async function remoteServer(config) {
  server ??= await startManualServer();
  const response = await fetch(`${server.url}/v1/reset`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'klock-now': '0' },
    // The server takes a whole config: the kernel's defaults, then the scenario's.
    body: JSON.stringify({
      ...Object.fromEntries(Object.entries(new Kernel().config).map(([k, v]) => [snake(k), v])),
      ...config,
    }),
  });
  assert.equal(response.status, 200, await response.text());
  return server.url;
}

test('there are scenarios', () => assert.ok(files.length >= 10));

class Run {
  constructor(config, url) {
    this.clock = new ManualClock();
    this.remote = url !== undefined;
    this.url = url;
    this.klock = this.remote
      ? connect(url, { clock: this.clock })
      : new Klock({
          ...Object.fromEntries(Object.entries(config).map(([k, v]) => [camel(k), v])),
          clock: this.clock,
        });
    this.sessions = new Map();
    this.names = new Map();
    this.blocks = new Map();
  }

  error(e) {
    assert.ok(e instanceof KlockError, String(e));
    const cls = CLIENT_ERRORS.has(e.constructor.name) ? e.constructor.name : 'KlockError';
    const view = { class: cls, name: e.name, code: e.code, message: e.message };
    if (e.retryAfterMs !== undefined) view.retry_after_ms = e.retryAfterMs;
    if (e.heldBy !== undefined) view.held_by = e.heldBy.map((s) => this.names.get(s));
    return view;
  }

  async step(step) {
    const [action] = Object.keys(step).filter((key) => ACTIONS.has(key));
    const { klock, clock } = this;
    if (action === 'open') {
      const session = await klock.session(step.open);
      this.sessions.set(step.open, session);
      this.names.set(session.sessionId, step.open);
    } else if (action === 'enter') {
      const timeoutMs = step.timeout_ms === 'inf' ? Infinity : step.timeout_ms;
      const block = { lease: null, state: 'pending', at: null, error: null };
      this.blocks.set(step.enter, block);
      this.sessions
        .get(step.session)
        .lease(step.intents, {
          ...(step.ttl_ms !== undefined && { ttlMs: step.ttl_ms }),
          ...(timeoutMs !== undefined && { timeoutMs }),
        })
        .then(
          (lease) => Object.assign(block, { lease, state: 'held', at: clock.now() }),
          (e) => Object.assign(block, { state: 'failed', at: clock.now(), error: this.error(e) }),
        );
    } else if (action === 'exit' || action === 'heartbeat') {
      const block = this.blocks.get(step[action]);
      try {
        if (action === 'exit') await block.lease.release();
        else await block.lease.heartbeat();
      } catch (e) {
        block.error = this.error(e);
      }
      if (action === 'exit') Object.assign(block, { state: 'exited', at: clock.now() });
    } else if (action === 'advance' || action === 'jump') {
      const target = clock.now() + step[action];
      for (
        let due = clock.nextTimer();
        action === 'advance' && due !== null && due <= target;
        due = clock.nextTimer()
      ) {
        clock.advance(Math.max(0, due - clock.now()));
        await settle(klock);
      }
      clock.jump(target - clock.now());
    } else if (action === 'close') await this.sessions.get(step.close).close();
    else if (action === 'close_klock') await klock.close();
    else if (action === 'kernel_close') await this.kernelClose(this.sessions.get(step.kernel_close).sessionId);
    else await this.check(step.expect);
    await settle(klock);
  }

  /** Closes a session behind the client's back: on the kernel, or with a raw HTTP call. */
  async kernelClose(sessionId) {
    const { klock } = this;
    if (!this.remote) return klock.kernel.closeSession(sessionId, klock.now());
    const s = klock.kernel._sessions.get(sessionId);
    const response = await fetch(`${this.url}${s.path}`, {
      method: 'DELETE',
      headers: { 'klock-session-token': s.token, 'klock-now': String(klock.now()) },
    });
    assert.equal(response.status, 200, await response.text());
    return undefined;
  }

  /** A raw GET of the server at the clock's time (expectations: no client state changes). */
  async get(path, headers = {}) {
    const response = await fetch(`${this.url}${path}`, {
      headers: { ...headers, 'klock-now': String(this.clock.now()) },
    });
    return { status: response.status, body: await response.json() };
  }

  /** What the expectation names, read without settling anything (at the kernel's time). */
  async observed(expected) {
    if (this.remote) return this.observedRemote(expected);
    const kernel = this.klock.kernel;
    const out = { now: this.clock.now(), counters: this.klock.counters, blocks: {}, resources: {}, sessions: {} };
    for (const [name, block] of this.blocks) {
      const lease = block.lease;
      const lost = lease?.lost ? this.error(lease.lost) : null;
      const view = { state: block.state, at: block.at, error: block.error, lost, lease_ids: lease?.leaseIds ?? [] };
      if (lease?.leases.length) Object.assign(view, { expires_at: lease.expiresAt, ttl_ms: lease.leases[0].ttlMs });
      out.blocks[name] = view;
    }
    for (const resource of Object.keys(expected.resources ?? {})) {
      const state = kernel.resourceState(resource, 'default', kernel.now());
      out.resources[resource] = {
        holders: state.holders.map((h) => this.names.get(h.sessionId)),
        expires_at: state.holders.map((h) => h.expiresAt),
        waiting: state.waiting.map((w) => this.names.get(w.sessionId)),
      };
    }
    const priorities = new Map(kernel.snapshot(kernel.now()).sessions.map((s) => [s.sessionId, s.priority]));
    for (const [name, s] of this.sessions)
      out.sessions[name] = { closed: s.closed, priority: priorities.get(s.sessionId) ?? null };
    const stats = kernel.stats();
    out.kernel = {
      active_sessions: stats.activeSessions,
      active_leases: stats.activeLeases,
      waiting_tickets: stats.waitingTickets,
    };
    return out;
  }

  /** The same view, read from the server (resource state, session digests, stats). */
  async observedRemote(expected) {
    const out = {
      now: this.clock.now(),
      counters: this.klock.counters,
      blocks: this.blockViews(),
      resources: {},
      sessions: {},
    };
    for (const resource of Object.keys(expected.resources ?? {})) {
      const { body } = await this.get(`/v1/ns/default/resources/state?${new URLSearchParams({ resource })}`);
      out.resources[resource] = {
        holders: body.holders.map((h) => this.names.get(h.session_id)),
        expires_at: body.holders.map((h) => h.expires_at),
        waiting: body.waiting.map((w) => this.names.get(w.session_id)),
      };
    }
    for (const [name, s] of this.sessions) {
      const remote = this.klock.kernel._sessions.get(s.sessionId);
      let priority = null;
      if (remote !== undefined) {
        const { status, body } = await this.get(`${remote.path}/digest`, { 'klock-session-token': remote.token });
        if (status === 200) priority = body.identity.priority_timestamp;
      }
      out.sessions[name] = { closed: s.closed, priority };
    }
    const { body: stats } = await this.get('/v1/ns/default/stats');
    out.kernel = {
      active_sessions: stats.active_sessions,
      active_leases: stats.active_leases,
      waiting_tickets: stats.waiting_tickets,
    };
    return out;
  }

  blockViews() {
    const blocks = {};
    for (const [name, block] of this.blocks) {
      const lease = block.lease;
      const lost = lease?.lost ? this.error(lease.lost) : null;
      const view = { state: block.state, at: block.at, error: block.error, lost, lease_ids: lease?.leaseIds ?? [] };
      if (lease?.leases.length) Object.assign(view, { expires_at: lease.expiresAt, ttl_ms: lease.leases[0].ttlMs });
      blocks[name] = view;
    }
    return blocks;
  }

  async check(expected) {
    const unknown = Object.keys(expected).filter(
      (k) => !['now', 'blocks', 'counters', 'resources', 'sessions', 'kernel'].includes(k),
    );
    assert.deepEqual(unknown, [], 'unknown expectation');
    matches(expected, await this.observed(expected), '');
  }
}

/** Every key the expectation names matches exactly; `message_starts` is a prefix. */
function matches(expected, actual, where) {
  if (
    expected !== null &&
    typeof expected === 'object' &&
    !Array.isArray(expected) &&
    actual !== null &&
    typeof actual === 'object'
  ) {
    for (const [key, value] of Object.entries(expected)) {
      if (key === 'message_starts') {
        const message = String(actual.message);
        assert.ok(
          message.startsWith(value),
          `${where}.message: expected ${JSON.stringify(value)}..., got ${JSON.stringify(message)}`,
        );
        continue;
      }
      assert.ok(key in actual, `${where}.${key}: not observed (got ${Object.keys(actual).sort()})`);
      matches(value, actual[key], `${where}.${key}`);
    }
  } else {
    assert.deepEqual(actual, expected, `${where}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)}`);
  }
}

const BACKENDS = ['inprocess', 'remote'];

test('remote: the scenarios it cannot run are named with a reason', () => {
  for (const [name, why] of Object.entries(REMOTE_CANNOT)) {
    assert.ok(files.includes(`${name}.json`), name);
    assert.ok(why.length > 20, name);
  }
  console.log(
    `remote backend: ${files.length - Object.keys(REMOTE_CANNOT).length} of ${files.length} scenarios run, ${Object.keys(REMOTE_CANNOT).length} cannot (${Object.keys(REMOTE_CANNOT).join(', ') || 'none'})`,
  );
});

for (const backend of BACKENDS)
  for (const file of files) {
    const name = file.replace(/\.json$/, '');
    if (backend === 'remote' && name in REMOTE_CANNOT) continue;
    test(`${backend}: ${name}`, { timeout: 20_000 }, async () => {
      const scenario = JSON.parse(readFileSync(new URL(file, dir), 'utf8'));
      assert.deepEqual(
        Object.keys(scenario).filter((k) => !['name', 'about', 'config', 'steps'].includes(k)),
        [],
        'unknown keys',
      );
      const url = backend === 'remote' ? await remoteServer(scenario.config ?? {}) : undefined;
      const run = new Run(scenario.config ?? {}, url);
      try {
        for (const [i, step] of scenario.steps.entries()) {
          const keys = Object.keys(step);
          const wellFormed = keys.filter((k) => ACTIONS.has(k)).length === 1 && keys.every((k) => STEP_KEYS.has(k));
          assert.ok(wellFormed, `step ${i}: malformed ${JSON.stringify(step)}`);
          try {
            await run.step(step);
          } catch (e) {
            if (e instanceof assert.AssertionError) e.message = `step ${i} ${JSON.stringify(step)}: ${e.message}`;
            throw e;
          }
        }
      } finally {
        await run.klock.close();
        await settle();
      }
    });
  }
