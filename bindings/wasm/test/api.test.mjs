// The wasm binding in Node, against the --target nodejs build: `node --test
// bindings/wasm/test/` (after bindings/wasm/build.sh).
//
// First the contract of the one JavaScript API, shared with the Node addon
// (bindings/js-api/test/contract.mjs). Then what only the wasm package has or must prove:
// every output is plain JSON-like data with JS numbers (never BigInt), use after free (a
// clear ERR_INVALID_STATE Error from every method), determinism, and the import checker.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { checkImports } from '../check-imports.mjs';
import { contractTests } from '../../js-api/test/contract.mjs';

const require = createRequire(import.meta.url);
const klock = require('../pkg-nodejs/klock_wasm.js');
const { Kernel, ERROR_CODES } = klock;

contractTests('wasm', klock);

test('both builds declare the one JavaScript API verbatim, and exactly what they export', () => {
  // wasm-bindgen re-indents a custom section; nothing else changes.
  const unindent = (text) => text.replace(/^ +/gm, '');
  const one = unindent(readFileSync(new URL('../../js-api/kernel.d.ts', import.meta.url), 'utf8'));
  for (const target of ['nodejs', 'web']) {
    const dts = unindent(readFileSync(new URL(`../pkg-${target}/klock_wasm.d.ts`, import.meta.url), 'utf8'));
    assert.ok(dts.includes(one), `pkg-${target}/klock_wasm.d.ts contains bindings/js-api/kernel.d.ts`);
  }
  const dts = readFileSync(new URL('../pkg-nodejs/klock_wasm.d.ts', import.meta.url), 'utf8');
  const declared = [...dts.matchAll(/^export declare (?:class|function|const) (\w+)/gm)].map((m) => m[1]);
  assert.deepEqual(declared.sort(), Object.keys(klock).sort());
});

/** A kernel with two sessions, a lease and a waiting ticket. */
function fixture() {
  const k = new Kernel({ policy: 'wait_die', seed: 3 });
  const a = k.openSession('alice', 'default', 0).sessionId;
  const b = k.openSession('bob', 'default', 0).sessionId;
  const v = k.acquire(b, ['MUTATES FILE:/x'], null, 10);
  assert.equal(v.verdict, 'GRANTED');
  const w = k.acquire(a, ['MUTATES FILE:/x'], null, 20);
  assert.equal(w.verdict, 'WAIT');
  return { k, a, b, lease: v.leases[0].leaseId, ticket: w.ticket };
}

test('outputs are plain data with JS numbers only (no BigInt), camelCase keys', () => {
  const { k, a, b } = fixture();
  k.suspendSession(b, 40);
  const digest = k.digest(a, 41);
  const outputs = [
    k.snapshot(50),
    k.stats(),
    k.config,
    digest,
    k.resourceState('FILE:/x', 'default', 51),
    k.reconcile(b, [1, 99], 52),
    k.heartbeat(b, 'all', 53),
    k.drainEvents(),
    ERROR_CODES,
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
      assert.match(key, /^[a-z][A-Za-z]*$|^[A-Z_]+$/, `${path}.${key}`);
      walk(x, `${path}.${key}`);
    }
  };
  outputs.forEach((o, i) => walk(o, `output${i}`));
  const snap = k.snapshot(60);
  assert.equal(snap.policy, 'wait_die');
  assert.deepEqual(Object.keys(snap.leases[0]), [
    'leaseId',
    'sessionId',
    'agentId',
    'resource',
    'predicate',
    'fence',
    'acquiredAt',
    'expiresAt',
    'ttlMs',
  ]);
  assert.deepEqual(k.reconcile(b, [1, 99], 61), [
    { leaseId: 1, status: 'ACTIVE', expiresAt: 60053, fence: 1 },
    { leaseId: 99, status: 'UNKNOWN' },
  ]);
  // A digest survives a JSON round trip and resumes the session.
  const info = k.resumeSession(JSON.parse(JSON.stringify(digest)), 62);
  assert.equal(info.epoch, 1);
  assert.equal(info.sessionId, a);
});

test('clone is independent; a freed kernel throws an Error instead of crashing', () => {
  const { k, b } = fixture();
  k.drainEvents(); // the fixture's ACQUIRED: the clone starts with nothing pending
  const c = k.clone();
  c.releaseAll(b, 30);
  assert.deepEqual(
    c.drainEvents().map((e) => e.event),
    ['RELEASED', 'GRANTED'],
  );
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
    acquire: () => k.acquire(a, ['MUTATES FILE:/y'], null, 40),
    heartbeat: () => k.heartbeat(b, 'all', 40),
    release: () => k.release(b, lease, 40),
    releaseAll: () => k.releaseAll(b, 40),
    reconcile: () => k.reconcile(b, [lease], 40),
    cancelWait: () => k.cancelWait(a, ticket, 40),
    advance: () => k.advance(40),
    nextDeadline: () => k.nextDeadline(),
    nextDeadlineIfQuiet: () => k.nextDeadlineIfQuiet(),
    pollEvent: () => k.pollEvent(),
    drainEvents: () => k.drainEvents(),
    pendingEvents: () => k.pendingEvents(),
    resourceState: () => k.resourceState('FILE:/x', 'default', 40),
    setHolderEvents: () => k.setHolderEvents(false),
    stats: () => k.stats(),
    snapshot: () => k.snapshot(40),
  };
  // Every method and getter of the class is listed above (a new one must be added here).
  const proto = Object.getOwnPropertyNames(Kernel.prototype).filter(
    (n) => !['constructor', 'free', '__destroy_into_raw'].includes(n),
  );
  assert.deepEqual(proto.sort(), Object.keys(calls).sort());
  for (const [name, fn] of Object.entries(calls)) assert.throws(fn, freed, name);
  // Bad arguments on a freed kernel: the freed state is what is reported.
  assert.throws(() => k.acquire('x', null, 5, -1), freed);
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
    const s = [0, 1, 2, 3].map((i) => k.openSession(`agent-${i}`, 'default', i).sessionId);
    for (let t = 10; t < 400; t += 7) {
      const who = s[t % 4];
      try {
        out.push(k.acquire(who, [`MUTATES FILE:/f${t % 3}`, `CONSUMES FILE:/f${(t + 1) % 3}`], { ttlMs: 50 }, t));
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
    [
      imp('__wbg_now_0123456789abcdef'),
      imp('__wbg_getRandomValues_0123456789abcdef'),
      imp('__wbg_sneaky_0123456789abcdef'),
      imp('fd_write', 'wasi_snapshot_preview1'),
      imp('__wbg_missing_0123456789abcdef'),
    ],
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
