// The addon's `Ledger` (bindings/node/src/ledger.rs): the core's ledger of nested lease blocks
// as node/client.js drives it. The rules themselves are the core's (tested in Rust, and through
// the friendly client by client.test.mjs and the client scenarios); here: that the class
// carries them across unchanged, and that bad arguments are named errors that change nothing.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { Ledger, renewAt, Kernel } = require('../index.js');

/** The figures `grant` takes of one lease. */
const lease = (leaseId, expiresAt, ttlMs) => [leaseId, expiresAt, ttlMs];
/** A kernel lease object as the client shows it (`show` and `finish` write two figures). */
const shown = (leaseId, expiresAt, ttlMs) => ({ leaseId, expiresAt, ttlMs, fence: 7, resource: 'FILE:/x' });

test('a block is scheduled a third of the way through its TTL and releases what it alone holds', () => {
  const ledger = new Ledger();
  assert.equal(ledger.grant(1, 10, [...lease(100, 3000, 3000), ...lease(101, 6000, 3000)], undefined, 0), 1000);
  assert.equal(renewAt(3000, 3000), 1000);
  assert.equal(ledger.nextHeartbeat(), 1000);
  assert.equal(ledger.renewDue(1), 1000);
  assert.deepEqual(ledger.releasable(1), [100, 101]);
  assert.equal(ledger.holdsLeases(10), true);
  assert.deepEqual(ledger.sessionLeases(10), [100, 101]);
  assert.equal(ledger.popDue(999), null);
  assert.deepEqual(ledger.popDue(1000), { block: 1, session: 10, leaseIds: [100, 101] });
  assert.equal(ledger.nextHeartbeat(), null, 'taken off the schedule until the host schedules it');
  assert.equal(ledger.schedule(1, 1500), 1500);
  assert.equal(ledger.nextHeartbeat(), 1500);
  assert.equal(ledger.schedule(1, 1200), 1200, 'the earliest heartbeat after it');
  assert.equal(ledger.grant(2, 10, lease(102, 9000, 3000), undefined, 0), 1200, 'the earliest, not its own');
  assert.equal(ledger.finish(1), 7000);
  assert.throws(() => ledger.finish(1), { code: 'ERR_INVALID_ARG_VALUE', message: /block 1 is not held/ });
  assert.equal(ledger.finish(2), null);
  assert.equal(ledger.holdsLeases(10), false);
  assert.equal(ledger.nextHeartbeat(), null);
});

test('nested blocks share a lease until the last ends, and every one shows its renewal', () => {
  const ledger = new Ledger();
  const outer = [shown(100, 1000, 1000)];
  const inner = [shown(100, 5600, 5000)];
  ledger.grant(1, 10, lease(100, 1000, 1000), undefined, 0);
  ledger.grant(2, 10, lease(100, 5600, 5000), undefined, 600);
  assert.deepEqual(ledger.releasable(2), [], 'the outer block still holds it');
  ledger.show(1, outer);
  assert.equal(outer[0].expiresAt, 5600);
  assert.equal(outer[0].ttlMs, 5000);
  assert.equal(outer[0].fence, 7, 'only the expiry and the TTL are written');
  ledger.renewed(100, 5700, undefined, undefined);
  // The outer block stays scheduled where its grant put it (a third of 1000 ms); when that
  // time comes, the ledger moves it to its renewed figures instead of handing it out.
  assert.equal(ledger.finish(2, inner), 334);
  assert.equal(inner[0].expiresAt, 5700, 'finish writes the last figures');
  assert.deepEqual(ledger.releasable(1), [100]);
  assert.equal(ledger.renewDue(1), 5700 - Math.floor((2 * 5000) / 3));
  assert.equal(ledger.popDue(334), null, 'renewed meanwhile: moved, not due');
  assert.equal(ledger.nextHeartbeat(), 5700 - Math.floor((2 * 5000) / 3));
  // A block whose figures did not change since its grant: finish writes nothing.
  const same = [shown(300, 100, 100)];
  ledger.grant(3, 10, lease(300, 100, 100), undefined, 0);
  same[0].expiresAt = 'untouched';
  ledger.finish(3, same);
  assert.equal(same[0].expiresAt, 'untouched');
});

test('a lost lease reaches every block holding it, which is no longer released or renewed', () => {
  const ledger = new Ledger();
  ledger.grant(1, 10, [...lease(100, 3000, 3000), ...lease(101, 3000, 3000)], undefined, 0);
  ledger.grant(2, 10, lease(100, 3000, 3000), undefined, 0);
  ledger.grant(3, 11, lease(200, 3000, 3000), undefined, 0);
  assert.deepEqual(ledger.lose(100), [1, 2]);
  assert.deepEqual(ledger.lose(100), [], 'forgotten');
  assert.deepEqual(ledger.releasable(1), [101]);
  assert.deepEqual(ledger.sessionLeases(10), [101]);
  assert.deepEqual(ledger.popDue(10_000), { block: 3, session: 11, leaseIds: [200] });
  assert.equal(ledger.popDue(10_000), null, 'blocks with a lost lease are not scheduled');
});

test("a host due time (a remote client's local deadline) overrides the kernel's figures", () => {
  const ledger = new Ledger();
  assert.equal(ledger.grant(1, 10, lease(100, 90_000, 3000), [renewAt(3000, 3000)], 0), 1000);
  ledger.unschedule(1);
  assert.equal(ledger.nextHeartbeat(), null);
  ledger.renewed(100, 99_000, undefined, 2000);
  assert.equal(ledger.renewDue(1), 2000);
  // A due time in the past is now.
  assert.equal(ledger.grant(2, 10, lease(300, 10, 3000), undefined, 50), 50);
  assert.deepEqual(ledger.popDue(50), { block: 2, session: 10, leaseIds: [300] });
});

test("a lease that never expires (the kernel's 2^64 - 1) is never scheduled", () => {
  const kernel = new Kernel({ defaultTtlMs: 1000 });
  const s = kernel.openSession('a', 'default', 0).sessionId;
  const [granted] = kernel.acquire(s, ['MUTATES FILE:/x'], null, 0).leases;
  const ledger = new Ledger();
  const figures = [granted.leaseId, granted.expiresAt, granted.ttlMs];
  assert.equal(ledger.grant(1, s, figures, undefined, 0), renewAt(1000, 1000));
  const never = 2 ** 64 - 1;
  assert.equal(renewAt(never, 1000), null);
  assert.equal(ledger.grant(2, s, lease(5, never, 1000), undefined, 0), renewAt(1000, 1000), 'block 1 only');
  assert.equal(ledger.renewDue(2), null);
});

test('bad arguments are named errors and change nothing', () => {
  const ledger = new Ledger();
  ledger.grant(1, 10, lease(100, 3000, 3000), undefined, 0);
  const bad = (call, error) => {
    assert.throws(call, error);
    assert.deepEqual(ledger.releasable(1), [100], 'unchanged');
    assert.equal(ledger.nextHeartbeat(), 1000, 'unchanged');
  };
  bad(() => ledger.grant(1, 10, lease(101, 3000, 3000), undefined, 0), {
    name: 'TypeError',
    code: 'ERR_INVALID_ARG_VALUE',
    message: /block 1 is held already/,
  });
  bad(() => ledger.grant(2, 10, [101, 3000], undefined, 0), {
    name: 'TypeError',
    code: 'ERR_INVALID_ARG_VALUE',
    message: /`figures` must hold \[leaseId, expiresAt, ttlMs\] per lease; it has 2 numbers/,
  });
  bad(() => ledger.grant(2, 10, lease(101, -1, 3000), undefined, 0), {
    name: 'RangeError',
    code: 'ERR_OUT_OF_RANGE',
    message: /figures\[1\]/,
  });
  bad(() => ledger.grant(2, 10, [101, 3000, '5'], undefined, 0), { name: 'TypeError', message: /figures\[2\]/ });
  bad(() => ledger.grant(2, 10, 'figures', undefined, 0), { name: 'TypeError', message: /figures/ });
  bad(() => ledger.grant(2, 10, lease(101, 3000, 3000), [1, 2], 0), {
    name: 'TypeError',
    code: 'ERR_INVALID_ARG_VALUE',
    message: /renewAt` has 2 times for 1 leases/,
  });
  bad(() => ledger.grant(2, 10, lease(101, 3000, 3000), undefined, 1.5), { name: 'RangeError', message: /now/ });
  for (const call of [
    () => ledger.releasable(9),
    () => ledger.schedule(9, 5),
    () => ledger.unschedule(9),
    () => ledger.renewDue(9),
    () => ledger.show(9, []),
  ]) {
    bad(call, { name: 'TypeError', code: 'ERR_INVALID_ARG_VALUE', message: /block 9 is not held/ });
  }
  bad(() => ledger.show(1, [{}, {}]), { name: 'TypeError', message: /`shown` has 2 leases; block 1 holds 1/ });
  bad(() => ledger.schedule(1, 'soon'), { name: 'TypeError', message: /at/ });
  bad(() => ledger.lose(), { name: 'TypeError', code: 'ERR_MISSING_ARGS' });
  bad(() => ledger.finish(1, 'shown'), { name: 'TypeError', message: /shown/ });
  bad(() => ledger.finish(1, [{}, {}]), { name: 'TypeError', message: /`shown` has 2 leases; block 1 holds 1/ });
  bad(() => ledger.finish(9), { name: 'TypeError', code: 'ERR_INVALID_ARG_VALUE', message: /block 9 is not held/ });
});

test('releaseIn releases in the kernel what the block alone holds, or settles time when nothing', () => {
  const kernel = new Kernel({ defaultTtlMs: 1000 });
  const s = kernel.openSession('a', 'default', 0).sessionId;
  const [x] = kernel.acquire(s, ['MUTATES FILE:/x'], null, 0).leases;
  const ledger = new Ledger();
  ledger.grant(1, s, [x.leaseId, x.expiresAt, x.ttlMs], undefined, 0);
  ledger.grant(2, s, [x.leaseId, x.expiresAt, x.ttlMs], undefined, 0); // nested: the same lease
  assert.throws(() => ledger.releaseIn({}, 2, s, 10), {
    name: 'TypeError',
    code: 'ERR_INVALID_ARG_TYPE',
    message: /Kernel/,
  });
  assert.throws(() => ledger.releaseIn(kernel, 9, s, 10), {
    code: 'ERR_INVALID_ARG_VALUE',
    message: /block 9 is not held/,
  });
  // The inner block's end releases nothing (the outer holds it): time is settled instead.
  assert.equal(ledger.releaseIn(kernel, 2, s, 2000), 0);
  assert.ok(kernel.drainEvents().some((e) => e.event === 'LEASE_EXPIRED' && e.lease === x.leaseId));
  ledger.finish(2);
  const [y] = kernel.acquire(s, ['MUTATES FILE:/y'], null, 2000).leases;
  ledger.grant(3, s, [y.leaseId, y.expiresAt, y.ttlMs], undefined, 2000);
  assert.equal(ledger.releaseIn(kernel, 3, s, 2001), 1);
  assert.equal(kernel.stats().activeLeases, 0);
  kernel.closeSession(s, 2002);
  assert.throws(() => ledger.releaseIn(kernel, 1, s, 2003), { name: 'UNKNOWN_SESSION' });
});
