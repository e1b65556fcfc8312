// The native layer (index.js): the contract of the one JavaScript API, shared with the wasm
// package (bindings/js-api/test/contract.mjs), and what only the Node addon has: the fast
// acquire/release path (bindings/node/src/fast.rs) refusing a foreign receiver.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { contractTests } from '../../bindings/js-api/test/contract.mjs';

const require = createRequire(import.meta.url);
const native = require('../index.js');
const { Kernel } = native;

contractTests('node', native);

test('acquire and release refuse a foreign receiver (the fast path checks its receiver)', () => {
  const k = new Kernel();
  const s = k.openSession('alice', 'default', 0).sessionId;
  for (const method of ['acquire', 'release', 'heartbeat', 'advance']) {
    assert.throws(
      () => Kernel.prototype[method].call({}, s, ['MUTATES FILE:/x'], null, 1),
      { name: 'TypeError' },
      method,
    );
  }
  assert.equal(Kernel.prototype.acquire.name, 'acquire');
});
