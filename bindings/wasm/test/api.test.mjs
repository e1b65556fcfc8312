// The wasm binding's own contract, in Node against the --target nodejs build:
// `node --test bindings/wasm/test/` (after bindings/wasm/build.sh).
//
// What the conformance vectors do not cover: argument checking at the JS boundary (types,
// NaN, fractions, negatives, > 2^53 - 1, BigInt, lone surrogates, unknown option keys), that
// a rejected argument leaves the kernel untouched, the shape of thrown errors, that every
// output is plain JSON-like data with JS numbers (never BigInt), clones, use after free (a
// clear ERR_INVALID_STATE Error from every method), determinism, and the import checker.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { checkImports } from '../check-imports.mjs';

const require = createRequire(import.meta.url);
const klock = require('../pkg-nodejs/klock_wasm.js');
const { Kernel, errorCodes } = klock;

const MAX = Number.MAX_SAFE_INTEGER;
const BAD_NUMBERS = [
  [-1, RangeError],
  [1.5, RangeError],
  [NaN, RangeError],
  [Infinity, RangeError],
  [-Infinity, RangeError],
  [2 ** 53, RangeError],
  [1e300, RangeError],
  ['5', TypeError],
  [5n, TypeError],
  [true, TypeError],
  [null, TypeError],
  [undefined, TypeError],
  [{}, TypeError],
  [[1], TypeError],
];

/** A kernel with two sessions, a lease and a waiting ticket. */
function fixture() {
  const k = new Kernel({ policy: 'wait_die', seed: 3 });
  const a = k.openSession('alice', 'default', 0).session_id;
  const b = k.openSession('bob', 'default', 0).session_id;
  const v = k.acquire(b, ['MUTATES FILE:/x'], 10);
  assert.equal(v.verdict, 'GRANTED');
  const w = k.acquire(a, ['MUTATES FILE:/x'], 20);
  assert.equal(w.verdict, 'WAIT');
  return { k, a, b, lease: v.leases[0].lease_id, ticket: w.ticket };
}

const state = (k) => JSON.stringify(k.clone().snapshot(k.now()));

test('kernel errors are Error objects with the stable name and numeric code', () => {
  const { k } = fixture();
  const codes = errorCodes();
  assert.equal(codes.UNKNOWN_SESSION, 200);
  assert.equal(Object.keys(codes).length, 17);
  let caught;
  try {
    k.acquire(999, ['MUTATES FILE:/x'], 30);
  } catch (e) {
    caught = e;
  }
  assert.ok(caught instanceof Error, 'an Error, never a bare string');
  assert.equal(caught.name, 'UNKNOWN_SESSION');
  assert.equal(caught.code, 200);
  assert.match(caught.message, /no open session 999/);
  assert.match(String(caught), /^UNKNOWN_SESSION: /);
  assert.ok(typeof caught.stack === 'string');
  const cases = [
    [() => k.acquire(1, [], 30), 'INVALID_MANIFEST'],
    [() => k.acquire(1, ['WRITES FILE:/x'], 30), 'INVALID_PREDICATE'],
    [() => k.acquire(1, ['MUTATES FILE:/../x'], 30), 'INVALID_RESOURCE'],
    [() => k.acquire(1, ['MUTATES FILE:/y'], 30, { ttl_ms: 0 }), 'INVALID_TTL'],
    [() => k.openSession('', 'default', 30), 'INVALID_AGENT_ID'],
    [() => k.openSession('x', '', 30), 'INVALID_NAMESPACE'],
    [() => k.release(1, 12345, 30), 'UNKNOWN_LEASE'],
    [() => k.cancelWait(2, 12345, 30), 'UNKNOWN_TICKET'],
    [() => new Kernel({ default_ttl_ms: 0 }), 'INVALID_CONFIG'],
    [() => new Kernel({ policy: 'fifo' }), 'INVALID_CONFIG'],
    [() => new Kernel({ polciy: 'lanes' }), 'INVALID_CONFIG'],
  ];
  for (const [call, name] of cases) {
    assert.throws(call, (e) => e instanceof Error && e.name === name && e.code === codes[name], name);
  }
});

test('every numeric argument rejects non-integers, negatives, > 2^53 - 1 and non-numbers, changing nothing', () => {
  const { k, a, b, lease, ticket } = fixture();
  const calls = {
    'openSession now': (x) => k.openSession('carol', 'default', x),
    'acquire session': (x) => k.acquire(x, ['MUTATES FILE:/y'], 30),
    'acquire now': (x) => k.acquire(a, ['MUTATES FILE:/y'], x),
    'acquire ttl_ms': (x) => (x === null || x === undefined ? assert.fail('optional') : k.acquire(a, ['MUTATES FILE:/y'], 30, { ttl_ms: x })),
    'acquire wait_timeout_ms': (x) => (x === null || x === undefined ? assert.fail('optional') : k.acquire(a, ['MUTATES FILE:/y'], 30, { wait_timeout_ms: x })),
    'heartbeat lease': (x) => k.heartbeat(b, [lease, x], 30),
    'heartbeat now': (x) => k.heartbeat(b, 'all', x),
    'release lease': (x) => k.release(b, x, 30),
    'releaseAll now': (x) => k.releaseAll(b, x),
    'reconcile lease': (x) => k.reconcile(b, [x], 30),
    'cancelWait ticket': (x) => k.cancelWait(a, x, 30),
    'cancelWait session': (x) => k.cancelWait(x, ticket, 30),
    'closeSession session': (x) => k.closeSession(x, 30),
    'suspendSession now': (x) => k.suspendSession(a, x),
    'digest session': (x) => k.digest(x, 30),
    'advance now': (x) => k.advance(x),
    'resourceState now': (x) => k.resourceState('FILE:/x', 'default', x),
    'snapshot now': (x) => k.snapshot(x),
  };
  const before = state(k);
  for (const [what, call] of Object.entries(calls)) {
    for (const [bad, kind] of BAD_NUMBERS) {
      if ((bad === null || bad === undefined) && what.includes('_ms')) continue; // optional: means the default
      const code = kind === RangeError ? 'ERR_OUT_OF_RANGE' : 'ERR_INVALID_ARG_TYPE';
      assert.throws(() => call(bad), (e) => e instanceof kind && e.code === code, `${what} = ${String(bad)}`);
    }
  }
  assert.equal(state(k), before, 'a rejected argument changed the kernel');
});

test('2^53 - 1 is accepted, and optional numbers accept undefined and null', () => {
  const k = new Kernel({ seed: MAX });
  assert.equal(k.config.seed, MAX);
  const a = k.openSession('alice', 'default', 5).session_id;
  const v = k.acquire(a, ['MUTATES FILE:/x'], 6, { ttl_ms: undefined, wait: null, wait_timeout_ms: null });
  assert.equal(v.leases[0].ttl_ms, 60000);
  k.advance(MAX);
  assert.equal(k.now(), MAX);
  assert.deepEqual(k.drainEvents().map((e) => e.event), ['LEASE_EXPIRED', 'SESSION_CLOSED']);
  assert.equal(k.nextDeadline(), null);
});

test('strings, arrays and option objects are checked strictly, changing nothing', () => {
  const { k, a } = fixture();
  const before = state(k);
  const type = (call, msg) =>
    assert.throws(call, (e) => e instanceof TypeError && e.code === 'ERR_INVALID_ARG_TYPE' && msg.test(e.message), String(msg));
  type(() => k.openSession(42, 'default', 1), /agent_id must be a string, got number/);
  type(() => k.openSession('a\ud800b', 'default', 1), /lone surrogate/);
  type(() => k.openSession('alice', null, 1), /namespace must be a string, got null/);
  type(() => k.acquire(a, 'MUTATES FILE:/y', 30), /intents must be an array of strings, got string/);
  type(() => k.acquire(a, ['MUTATES FILE:/y', 7], 30), /intents\[1\] must be a string/);
  type(() => k.acquire(a, { 0: 'MUTATES FILE:/y', length: 1 }, 30), /must be an array/);
  type(() => k.acquire(a, ['MUTATES FILE:/y'], 30, { ttl: 5 }), /options has an unknown key "ttl"/);
  type(() => k.acquire(a, ['MUTATES FILE:/y'], 30, { wait: 'no' }), /options.wait must be true or false/);
  type(() => k.acquire(a, ['MUTATES FILE:/y'], 30, [1]), /options must be an object/);
  type(() => k.heartbeat(a, 'some', 30), /leases must be an array of numbers/);
  type(() => k.resourceState(5, 'default', 30), /resource must be a string/);
  type(() => new Kernel({ policy: 3 }), /config.policy must be a string/);
  type(() => new Kernel('wait_die'), /config must be an object/);
  type(() => k.resumeSession({ version: 1 }, 30), /digest is missing the key "identity"/);
  assert.equal(state(k), before);
  // A real U+FFFD is text, not a lone surrogate.
  assert.equal(k.openSession('agent \ufffd', 'default', 40).agent_id, 'agent \ufffd');
});

test('outputs are plain data with JS numbers only (no BigInt), snake_case like the core', () => {
  const { k, a, b } = fixture();
  k.suspendSession(b, 40);
  const digest = k.digest(a, 41);
  const outputs = [
    k.snapshot(50),
    k.stats(),
    k.config,
    digest,
    k.resourceState('FILE:/x', undefined, 51),
    k.reconcile(b, [1, 99], 52),
    k.heartbeat(b, null, 53),
    k.drainEvents(),
    errorCodes(),
  ];
  const walk = (v, path) => {
    if (v === null || typeof v === 'string' || typeof v === 'boolean') return;
    if (typeof v === 'number') {
      assert.ok(Number.isSafeInteger(v) && v >= 0, `${path} = ${v}`);
      return;
    }
    if (Array.isArray(v)) return v.forEach((x, i) => walk(x, `${path}[${i}]`));
    assert.equal(Object.getPrototypeOf(v), Object.prototype, `${path} is a plain object`);
    for (const [key, x] of Object.entries(v)) {
      assert.match(key, /^[a-z_]+$|^[A-Z_]+$/, `${path}.${key}`);
      walk(x, `${path}.${key}`);
    }
  };
  outputs.forEach((o, i) => walk(o, `output${i}`));
  const snap = k.snapshot(60);
  assert.equal(snap.policy, 'wait_die');
  assert.deepEqual(Object.keys(snap.leases[0]), ['lease_id', 'session_id', 'agent_id', 'resource', 'predicate', 'fence', 'acquired_at', 'expires_at', 'ttl_ms']);
  assert.deepEqual(k.reconcile(b, [1, 99], 61), [
    { lease_id: 1, status: 'ACTIVE', expires_at: 60053, fence: 1 },
    { lease_id: 99, status: 'UNKNOWN', expires_at: null, fence: null },
  ]);
  // A digest survives a JSON round trip and resumes the session.
  const info = k.resumeSession(JSON.parse(JSON.stringify(digest)), 62);
  assert.equal(info.epoch, 1);
  assert.equal(info.session_id, a);
});

test('clone is independent; a freed kernel throws an Error instead of crashing', () => {
  const { k, b } = fixture();
  const c = k.clone();
  c.releaseAll(b, 30);
  assert.equal(c.drainEvents()[0].event, 'GRANTED');
  assert.equal(k.snapshot(30).leases.length, 1);
  assert.equal(k.pendingEvents(), 0);
  c.free();
  assert.throws(() => c.now(), Error);
  k.free();
});

test('every call on a freed kernel throws a clear Error (code ERR_INVALID_STATE); free() again is a no-op', () => {
  const { k, a, b, lease, ticket } = fixture();
  const digest = k.digest(a, 30);
  const kept = k.clone();
  k.free();
  const freed = {
    name: 'Error',
    code: 'ERR_INVALID_STATE',
    message: /^this Kernel was freed \(free\(\) was called\): create a new one, or call clone\(\) before free\(\)$/,
  };
  const calls = {
    config: () => k.config,
    clone: () => k.clone(),
    now: () => k.now(),
    openSession: () => k.openSession('carol', 'default', 40),
    closeSession: () => k.closeSession(a, 40),
    suspendSession: () => k.suspendSession(a, 40),
    digest: () => k.digest(a, 40),
    resumeSession: () => k.resumeSession(digest, 40),
    acquire: () => k.acquire(a, ['MUTATES FILE:/y'], 40),
    heartbeat: () => k.heartbeat(b, 'all', 40),
    release: () => k.release(b, lease, 40),
    releaseAll: () => k.releaseAll(b, 40),
    reconcile: () => k.reconcile(b, [lease], 40),
    cancelWait: () => k.cancelWait(a, ticket, 40),
    advance: () => k.advance(40),
    nextDeadline: () => k.nextDeadline(),
    pollEvent: () => k.pollEvent(),
    drainEvents: () => k.drainEvents(),
    pendingEvents: () => k.pendingEvents(),
    resourceState: () => k.resourceState('FILE:/x', 'default', 40),
    stats: () => k.stats(),
    snapshot: () => k.snapshot(40),
  };
  // Every method and getter of the class is listed above (a new one must be added here).
  const proto = Object.getOwnPropertyNames(Kernel.prototype).filter((n) => !['constructor', 'free', '__destroy_into_raw'].includes(n));
  assert.deepEqual(proto.sort(), Object.keys(calls).sort());
  for (const [name, fn] of Object.entries(calls)) assert.throws(fn, freed, name);
  // Bad arguments on a freed kernel: the freed state is what is reported.
  assert.throws(() => k.acquire('x', null, -1), freed);
  k.free(); // a second free is a no-op, like closing something already closed
  if (Symbol.dispose) k[Symbol.dispose]();
  // The clone taken before lives on, and freeing it does not touch the freed original.
  assert.equal(kept.snapshot(30).leases.length, 1);
  kept.free();
  assert.throws(() => kept.now(), freed);
});

test('same config and calls give the same outputs, bit for bit', () => {
  const run = () => {
    const k = new Kernel({ policy: 'wait_die', seed: 99 });
    const out = [];
    const s = [0, 1, 2, 3].map((i) => k.openSession(`agent-${i}`, 'default', i).session_id);
    for (let t = 10; t < 400; t += 7) {
      const who = s[t % 4];
      try {
        out.push(k.acquire(who, [`MUTATES FILE:/f${t % 3}`, `CONSUMES FILE:/f${(t + 1) % 3}`], t, { ttl_ms: 50 }));
      } catch (e) {
        out.push(`${e.name} ${e.code}`);
      }
      out.push(k.drainEvents());
      if (t % 5 === 0) k.releaseAll(who, t);
    }
    out.push(k.snapshot(1000));
    k.free();
    return JSON.stringify(out);
  };
  assert.equal(run(), run());
});

test('the import checker flags a clock, randomness and foreign modules', () => {
  const glue = [
    '__wbg_parse_0123456789abcdef: function(arg0, arg1) {',
    '    const ret = JSON.parse(getStringFromWasm0(arg0, arg1));',
    '},',
    '__wbg_now_0123456789abcdef: function() {',
    '    const ret = Date.now();',
    '},',
    '__wbg_getRandomValues_0123456789abcdef: function(arg0) {',
    '    globalThis.crypto.getRandomValues(arg0);',
    '},',
    '__wbg_sneaky_0123456789abcdef: function() {',
    '    return performance.now();',
    '},',
    '    };',
  ].join('\n');
  const imp = (name, module = './klock_wasm_bg.js') => ({ module, name, kind: 'function' });
  const clean = checkImports([imp('__wbg_parse_0123456789abcdef')], glue);
  assert.deepEqual(clean.problems, []);
  const dirty = checkImports(
    [imp('__wbg_now_0123456789abcdef'), imp('__wbg_getRandomValues_0123456789abcdef'), imp('__wbg_sneaky_0123456789abcdef'), imp('fd_write', 'wasi_snapshot_preview1'), imp('__wbg_missing_0123456789abcdef')],
    glue,
  );
  const text = dirty.problems.join('\n');
  assert.match(text, /__wbg_now_.*name suggests a clock/);
  assert.match(text, /__wbg_now_.*Date/);
  assert.match(text, /getRandomValues.*crypto/);
  assert.match(text, /sneaky.*performance/);
  assert.match(text, /wasi_snapshot_preview1 fd_write: imported from a module wasm-bindgen does not generate/);
  assert.match(text, /__wbg_missing_.*no implementation/);
});
