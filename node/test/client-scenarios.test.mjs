// The shared client scenarios (tests/client-scenarios/*.json; format in its README.md) on the
// Node client: one test per file, each lease block a promise, on a ManualClock so that time
// moves only when a step says so. python/tests/test_client_scenarios.py runs the same files on
// the Python client.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { Klock, ManualClock, KlockError } = require('../client.js');

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

const camel = (name) => name.replace(/_([a-z])/g, (_, c) => c.toUpperCase());
/** Lets every promise that can settle, settle (the clock does not move meanwhile). */
const settle = async () => {
  for (let i = 0; i < 3; i++) await new Promise((resolve) => setImmediate(resolve));
};

test('there are scenarios', () => assert.ok(files.length >= 10));

class Run {
  constructor(config) {
    this.clock = new ManualClock();
    this.klock = new Klock({
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
        if (action === 'exit') block.lease.release();
        else block.lease.heartbeat();
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
        await settle();
      }
      clock.jump(target - clock.now());
    } else if (action === 'close') this.sessions.get(step.close).close();
    else if (action === 'close_klock') klock.close();
    else if (action === 'kernel_close')
      klock.kernel.closeSession(this.sessions.get(step.kernel_close).sessionId, klock.now());
    else this.check(step.expect);
    await settle();
  }

  /** What the expectation names, read without settling anything (at the kernel's time). */
  observed(expected) {
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

  check(expected) {
    const unknown = Object.keys(expected).filter(
      (k) => !['now', 'blocks', 'counters', 'resources', 'sessions', 'kernel'].includes(k),
    );
    assert.deepEqual(unknown, [], 'unknown expectation');
    matches(expected, this.observed(expected), '');
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

for (const file of files) {
  test(file.replace(/\.json$/, ''), { timeout: 20_000 }, async () => {
    const scenario = JSON.parse(readFileSync(new URL(file, dir), 'utf8'));
    assert.deepEqual(
      Object.keys(scenario).filter((k) => !['name', 'about', 'config', 'steps'].includes(k)),
      [],
      'unknown keys',
    );
    const run = new Run(scenario.config ?? {});
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
      run.klock.close();
      await settle();
    }
  });
}
