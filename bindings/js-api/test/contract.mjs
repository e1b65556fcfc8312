// The contract of the one JavaScript API (bindings/js-api/kernel.d.ts), run against both
// packages: `contractTests(label, api)` registers the same tests for the Node addon
// (node/test/native.test.mjs) and the wasm nodejs build (bindings/wasm/test/api.test.mjs).
// Every operation and the drive contract, the exports and the core's lists (checked against
// the declarations), the errors (KlockError for the kernel's; TypeError / RangeError with
// Node's codes and the same messages for bad arguments), and that bad input changes nothing.
// What the resolved scripts already replay exactly (every answer of every vector) is not
// repeated here. Test code, shipped nowhere.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';

const DTS = readFileSync(new URL('../kernel.d.ts', import.meta.url), 'utf8');

/** The string members of the union type `name` in kernel.d.ts, in order. */
function union(name) {
  const m = DTS.match(new RegExp(`^export type ${name} =([^]*?)\\n\\n`, 'm'));
  assert.ok(m, `kernel.d.ts declares ${name}`);
  return [...m[1].matchAll(/'([A-Za-z_]+)'/g)].map((x) => x[1]);
}

/** The keys of the interface `name` in kernel.d.ts, in order. */
function keys(name) {
  const m = DTS.match(new RegExp(`^export interface ${name} \\{([^]*?)^\\}`, 'm'));
  assert.ok(m, `kernel.d.ts declares ${name}`);
  return [...m[1].matchAll(/^ {2}(\w+)\??:/gm)].map((x) => x[1]);
}

export function contractTests(label, api) {
  const {
    Kernel,
    KlockError,
    ERROR_CODES,
    PREDICATES,
    EVENT_KINDS,
    parseIntent,
    MAX_MANIFEST_INTENTS,
    MAX_NAME_BYTES,
    MAX_RESOURCE_BYTES,
  } = api;

  test(`${label}: exports`, () => {
    assert.deepEqual(
      Object.keys(api)
        .filter((n) => !['free', 'default', 'initSync'].includes(n))
        .sort(),
      [
        'ERROR_CODES',
        'EVENT_KINDS',
        'Kernel',
        'KlockError',
        'MAX_MANIFEST_INTENTS',
        'MAX_NAME_BYTES',
        'MAX_RESOURCE_BYTES',
        'PREDICATES',
        'parseIntent',
      ]
        .concat('__napiBindingTarget' in api ? ['__napiBindingTarget'] : [])
        // Node only: flock(2) for the fence helper (node/fence.js); a browser has no files.
        .concat('flock' in api ? ['flock'] : [])
        // Only the Node addon: the core's acquisition rule for the friendly client (node/client.js).
        .concat(label === 'node' ? ['AFTER_NO_WAIT_DIE', 'afterSetback'] : [])
        // Only the Node addon: the core's failover rules for the remote client (node/remote.js),
        // and the header a cluster's follower names its leader in.
        .concat(label === 'node' ? ['Attempts', 'LEADER_HEADER', 'Servers'] : [])
        // Only the Node addon: the core's rules of following a watch, and of losing leases, for
        // node/remote.js.
        .concat(label === 'node' ? ['Follow', 'LOST_AT_LOCAL_DEADLINE', 'ends'] : [])
        // Only the Node addon: the core's bound on renewals in flight, for node/remote.js.
        .concat(label === 'node' ? ['MAX_RENEWALS_IN_FLIGHT'] : [])
        // Node only: the core's ledger of nested lease blocks for node/client.js.
        .concat(label === 'node' ? ['Ledger', 'renewAt'] : [])
        // Only the wasm package: the dashboard's replayer of a server's history (bindings/wasm/src/replay.rs).
        .concat(label === 'wasm' && 'Replayer' in api ? ['Replayer'] : [])
        .sort(),
    );
    assert.equal(typeof Kernel, 'function');
    assert.equal(MAX_MANIFEST_INTENTS, 256);
    assert.equal(MAX_NAME_BYTES, 256);
    assert.equal(MAX_RESOURCE_BYTES, 4096);
    assert.equal(ERROR_CODES.NOT_OWNER, 300);
    assert.equal(ERROR_CODES.INVALID_RESOURCE, 100);
    assert.equal(ERROR_CODES.QUOTA_EXCEEDED, 400);
    for (const list of [ERROR_CODES, PREDICATES, EVENT_KINDS]) assert.ok(Object.isFrozen(list));
    assert.deepEqual(parseIntent('mutates FILE://a/./b/'), { predicate: 'MUTATES', resource: 'FILE:/a/b' });
    assert.throws(
      () => parseIntent('WRITES FILE:/x'),
      (e) => e instanceof KlockError && e.name === 'INVALID_PREDICATE',
    );
    // Every backoff is sized by the kernel's answer (SPEC.md §8: DIE, DIED and WOUNDED carry
    // retryAfterMs): no package exports a backoff formula for a client to compute one itself.
    assert.deepEqual(
      Object.keys(api).filter((name) => /retry|backoff/i.test(name)),
      [],
    );
  });

  test(`${label}: the core's lists are what kernel.d.ts declares`, () => {
    assert.deepEqual(union('KlockErrorName'), Object.keys(ERROR_CODES));
    assert.deepEqual(
      Object.values(ERROR_CODES),
      [...Object.values(ERROR_CODES)].sort((a, b) => a - b),
      'in numeric order',
    );
    assert.deepEqual(union('Predicate'), [...PREDICATES]);
    assert.deepEqual(
      [...DTS.matchAll(/\{ event: '(\w+)'/g)].map((x) => x[1]),
      [...EVENT_KINDS],
    );
    assert.deepEqual(keys('Config'), Object.keys(new Kernel().config));
    assert.deepEqual(
      union('Policy').map((policy) => new Kernel({ policy }).config.policy),
      union('Policy'),
    );
  });

  test(`${label}: argument errors are worded the same in both packages`, () => {
    const k = new Kernel();
    const a = k.openSession('alice', 'default', 0).sessionId;
    const cases = [
      [
        () => k.advance(-1),
        RangeError,
        'ERR_OUT_OF_RANGE',
        '`now` must be an integer from 0 to 2^53 - 1 (9007199254740991), got -1',
      ],
      [
        () => k.advance(NaN),
        RangeError,
        'ERR_OUT_OF_RANGE',
        '`now` must be an integer from 0 to 2^53 - 1 (9007199254740991), got NaN',
      ],
      [() => k.advance(), TypeError, 'ERR_MISSING_ARGS', 'the argument `now` is missing: pass an integer number'],
      [
        () => k.advance(5n),
        TypeError,
        'ERR_INVALID_ARG_TYPE',
        '`now` must be an integer number, got a bigint (pass a Number: values up to 2^53 - 1 are exact)',
      ],
      [
        () => k.acquire(a, 'MUTATES FILE:/x', null, 1),
        TypeError,
        'ERR_INVALID_ARG_TYPE',
        '`intents` must be an Array, got a string',
      ],
      [
        () => k.acquire(a, ['MUTATES FILE:/x', 7], null, 1),
        TypeError,
        'ERR_INVALID_ARG_TYPE',
        '`intents[1]` must be a string, got a number',
      ],
      [
        () => k.acquire(a, ['MUTATES FILE:/x'], { ttl: 5 }, 1),
        TypeError,
        'ERR_INVALID_ARG_VALUE',
        '`options` has an unknown key `ttl` (allowed: ttlMs, wait, waitTimeoutMs)',
      ],
      [
        () => k.acquire(a, ['MUTATES FILE:/x'], { ttlMs: 1.5 }, 1),
        RangeError,
        'ERR_OUT_OF_RANGE',
        '`options.ttlMs` must be an integer from 0 to 2^53 - 1 (9007199254740991), got 1.5',
      ],
      [
        () => k.acquire(a, ['MUTATES FILE:/x'], [], 1),
        TypeError,
        'ERR_INVALID_ARG_TYPE',
        '`options` must be a plain object, got an Array',
      ],
      [
        () => k.openSession('a\ud800', 'default', 1),
        TypeError,
        'ERR_INVALID_ARG_VALUE',
        '`agentId` is not valid Unicode (it contains a lone UTF-16 surrogate)',
      ],
      [
        () => k.heartbeat(a, 'some', 1),
        TypeError,
        'ERR_INVALID_ARG_VALUE',
        '`leases` must be an Array of lease ids or the string \'all\', got "some"',
      ],
      [
        () => k.resumeSession({ version: 1, identity: {} }, 1),
        TypeError,
        'ERR_INVALID_ARG_TYPE',
        '`digest.identity.agentId` must be a string, got undefined',
      ],
      [
        () => k.resumeSession({ version: 2 ** 32, identity: {}, recovery: {} }, 1),
        RangeError,
        'ERR_OUT_OF_RANGE',
        '`digest.version` must be at most 4294967295, got 4294967296',
      ],
    ];
    for (const [call, kind, code, message] of cases) {
      assert.throws(
        call,
        (e) => e instanceof kind && !(e instanceof KlockError) && e.code === code && e.message === message,
        message,
      );
    }
  });

  /** Two sessions; ACQUIRED and RELEASED off unless `holderEvents` (their own test is below). */
  function kernelWithTwo(config = { seed: 7 }, holderEvents = false) {
    const k = new Kernel(config);
    k.setHolderEvents(holderEvents);
    const a = k.openSession('alice', 'default', 0).sessionId;
    const b = k.openSession('bob', 'default', 1).sessionId;
    return { k, a, b };
  }

  test(`${label}: nextDeadlineIfQuiet: null with no deadline, undefined while events wait`, () => {
    const k = new Kernel({ seed: 1 });
    assert.equal(k.nextDeadlineIfQuiet(), null);
    const a = k.openSession('alice', 'default', 0).sessionId;
    assert.equal(k.nextDeadlineIfQuiet(), k.nextDeadline()); // the idle close
    k.acquire(a, ['MUTATES FILE:/x'], { ttlMs: 5 }, 1);
    k.advance(6); // the lease expires: one event
    assert.equal(k.nextDeadlineIfQuiet(), undefined);
    k.drainEvents();
    assert.equal(k.nextDeadlineIfQuiet(), k.nextDeadline());
  });

  test(`${label}: config: defaults, getter, validation`, () => {
    const k = new Kernel();
    assert.deepEqual(k.config, {
      policy: 'wait_die',
      seed: 0,
      defaultTtlMs: 60000,
      maxTtlMs: 300000,
      defaultWaitTimeoutMs: 30000,
      backoffBaseMs: 100,
      backoffCapMs: 10000,
      graceMs: 15000,
      sessionIdleMs: 300000,
      maxLeasesPerSession: 1024,
      maxLeaseLifetimeMs: 0,
    });
    assert.equal(new Kernel({ policy: 'lanes', seed: 3 }).config.policy, 'lanes');
    assert.equal(new Kernel(null).config.policy, 'wait_die');
    assert.throws(() => new Kernel({ policy: 'fifo' }), { name: 'INVALID_CONFIG', code: 107 });
    assert.throws(() => new Kernel({ defaultTtlMs: 0 }), { name: 'INVALID_CONFIG' });
    // An unknown key is the kernel's INVALID_CONFIG (never a default), named in camelCase.
    assert.throws(
      () => new Kernel({ polcy: 'lanes' }),
      (e) =>
        e instanceof KlockError &&
        e.name === 'INVALID_CONFIG' &&
        e.code === 107 &&
        e.message === `unknown config field "polcy": the fields are ${Object.keys(new Kernel().config).join(', ')}`,
    );
    assert.throws(() => new Kernel({ default_ttl_ms: 5 }), {
      name: 'INVALID_CONFIG',
      message: /unknown config field "default_ttl_ms"/,
    });
    assert.throws(() => new Kernel({ defaultTtlMs: 5, maxTtlMs: undefined, typo: undefined }), {
      name: 'INVALID_CONFIG',
    });
    assert.equal(
      new Kernel({ defaultTtlMs: 5, maxTtlMs: undefined }).config.maxTtlMs,
      300000,
      'a key holding undefined is absent',
    );
    assert.throws(() => new Kernel({ seed: null }), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
    assert.throws(() => new Kernel({ seed: -1 }), { name: 'RangeError', code: 'ERR_OUT_OF_RANGE' });
    assert.throws(() => new Kernel('wait_die'), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
    assert.throws(() => new Kernel([]), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
  });

  test(`${label}: KlockError: class, code, name, message`, () => {
    const { k, a } = kernelWithTwo();
    let caught;
    try {
      k.release(a, 999, 2);
    } catch (e) {
      caught = e;
    }
    assert.ok(caught instanceof KlockError);
    assert.ok(caught instanceof Error);
    assert.equal(caught.code, 201);
    assert.equal(caught.name, 'UNKNOWN_LEASE');
    assert.match(caught.message, /no lease 999/);
    assert.match(String(caught), /^UNKNOWN_LEASE: no lease 999/);
    assert.match(caught.stack, /^UNKNOWN_LEASE: /);
    assert.equal(KlockError.prototype.name, 'KlockError');
    const own = new KlockError('custom', 0, 'MINE');
    assert.equal(own.name, 'MINE');
    assert.equal(own.code, 0);
  });

  test(`${label}: acquire: GRANTED, WAIT and DIE with their fields; release; events`, () => {
    const { k, a, b } = kernelWithTwo();
    const g = k.acquire(b, ['MUTATES FILE:/x', 'CONSUMES FILE:/y'], { ttlMs: 1000 }, 10);
    assert.equal(g.verdict, 'GRANTED');
    assert.equal(g.leases.length, 2);
    assert.deepEqual(Object.keys(g.leases[0]), [
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
    assert.equal(g.leases[0].resource, 'FILE:/x');
    assert.equal(g.leases[0].predicate, 'MUTATES');
    assert.equal(g.leases[1].predicate, 'CONSUMES');
    assert.equal(g.leases[0].agentId, 'bob');
    assert.equal(g.leases[0].expiresAt, 1010);
    assert.ok(g.leases[1].fence > g.leases[0].fence);
    // alice is older: she waits
    const w = k.acquire(a, ['MUTATES FILE:/x'], null, 11);
    assert.equal(w.verdict, 'WAIT');
    assert.equal(typeof w.ticket, 'number');
    assert.deepEqual(
      w.heldBy.map((h) => [h.sessionId, h.agentId, h.intents]),
      [[b, 'bob', [{ predicate: 'MUTATES', resource: 'FILE:/x' }]]],
    );
    // a third, younger session dies
    const c = k.openSession('carol', 'default', 12).sessionId;
    const d = k.acquire(c, ['CONSUMES FILE:/x'], undefined, 12);
    assert.equal(d.verdict, 'DIE');
    assert.ok(d.retryAfterMs >= 100 && d.retryAfterMs < 200);
    assert.equal(k.pendingEvents(), 0);
    assert.equal(k.nextDeadlineIfQuiet(), k.nextDeadline());
    assert.equal(k.release(b, g.leases[0].leaseId, 13), true);
    assert.equal(k.release(b, g.leases[0].leaseId, 14), false);
    assert.equal(k.pendingEvents(), 1);
    assert.equal(k.nextDeadlineIfQuiet(), undefined); // an event waits: drain first
    const ev = k.pollEvent();
    assert.equal(ev.event, 'GRANTED');
    assert.equal(ev.ticket, w.ticket);
    assert.equal(ev.session, a);
    assert.equal(ev.leases[0].acquiredAt, 13);
    assert.equal(k.pollEvent(), null);
    assert.deepEqual(k.drainEvents(), []);
  });

  test(`${label}: ACQUIRED and RELEASED tell every immediate grant and release, unless turned off`, () => {
    const { k, a } = kernelWithTwo({ seed: 7 }, true);
    const g = k.acquire(a, ['MUTATES FILE:/x', 'CONSUMES FILE:/y'], { ttlMs: 1000 }, 10);
    assert.equal(k.releaseAll(a, 11), 2);
    assert.equal(k.releaseAll(a, 12), 0); // nothing ended: nothing emitted
    assert.deepEqual(k.drainEvents(), [
      { event: 'ACQUIRED', session: a, leases: g.leases },
      { event: 'RELEASED', session: a, leases: g.leases.map((l) => l.leaseId) },
    ]);
    k.setHolderEvents(false);
    const l = k.acquire(a, ['MUTATES FILE:/x'], null, 13).leases[0];
    assert.equal(k.release(a, l.leaseId, 14), true);
    assert.deepEqual(k.drainEvents(), []);
  });

  test(`${label}: heartbeat, reconcile, releaseAll, expiry events, nextDeadline, advance`, () => {
    const { k, a, b } = kernelWithTwo();
    const [l1, l2] = k.acquire(a, ['MUTATES FILE:/x', 'MUTATES FILE:/y'], { ttlMs: 100 }, 10).leases;
    assert.equal(k.nextDeadline(), 110);
    const hb = k.heartbeat(a, [l1.leaseId, 424242], 50);
    assert.deepEqual(hb, [
      { leaseId: l1.leaseId, status: 'OK', expiresAt: 150 },
      { leaseId: 424242, status: 'UNKNOWN_LEASE' },
    ]);
    assert.deepEqual(
      k.heartbeat(a, 'all', 60).map((r) => r.status),
      ['OK', 'OK'],
    );
    assert.equal(k.heartbeat(b, [l1.leaseId], 61)[0].status, 'NOT_OWNER');
    k.advance(159);
    assert.equal(k.pendingEvents(), 0);
    assert.equal(k.nextDeadlineIfQuiet(), 160);
    k.advance(160);
    const expired = k.drainEvents();
    assert.deepEqual(
      expired.map((e) => [e.event, e.lease, e.session]),
      [
        ['LEASE_EXPIRED', l1.leaseId, a],
        ['LEASE_EXPIRED', l2.leaseId, a],
      ],
    );
    const rec = k.reconcile(a, [l1.leaseId, 31337], 161);
    assert.deepEqual(rec, [
      { leaseId: l1.leaseId, status: 'EXPIRED' },
      { leaseId: 31337, status: 'UNKNOWN' },
    ]);
    const [l3] = k.acquire(a, ['MUTATES FILE:/z'], null, 170).leases;
    assert.deepEqual(k.reconcile(a, [l3.leaseId], 171), [
      { leaseId: l3.leaseId, status: 'ACTIVE', expiresAt: 60170, fence: l3.fence },
    ]);
    assert.equal(k.releaseAll(a, 172), 1);
    assert.equal(k.reconcile(a, [l3.leaseId], 173)[0].status, 'RELEASED');
    assert.equal(k.now(), 173);
    k.advance(5); // time never goes back
    assert.equal(k.now(), 173);
  });

  test(`${label}: cancelWait, resourceState, stats, snapshot, clone`, () => {
    const { k, a, b } = kernelWithTwo();
    k.acquire(b, ['MUTATES FILE:/d/x'], null, 2);
    const w = k.acquire(a, ['MUTATES FILE:/d/x'], { waitTimeoutMs: 500 }, 3);
    const st = k.resourceState('FILE:/d/x', 'default', 4);
    assert.equal(st.resource, 'FILE:/d/x');
    assert.equal(st.holders.length, 1);
    assert.equal(st.holders[0].sessionId, b);
    assert.equal(st.waiting.length, 1);
    assert.equal(st.waiting[0].ticket, w.ticket);
    assert.equal(st.waiting[0].deadline, 503);
    const parent = k.resourceState('FILE:/d', 'default', 4);
    assert.equal(parent.covering.length, 1);
    const fork = k.clone();
    k.cancelWait(a, w.ticket, 5);
    assert.throws(() => k.cancelWait(a, w.ticket, 6), { name: 'UNKNOWN_TICKET', code: 202 });
    // the clone is independent: its ticket still waits
    assert.equal(fork.snapshot(5).tickets.length, 1);
    assert.equal(k.snapshot(6).tickets.length, 0);
    const stats = k.stats();
    assert.equal(stats.counters.granted, 1);
    assert.equal(stats.counters.waited, 1);
    assert.equal(stats.counters.cancelled, 1);
    assert.equal(stats.activeSessions, 2);
    const snap = k.snapshot(7);
    assert.equal(snap.policy, 'wait_die');
    assert.equal(snap.now, 7);
    assert.equal(snap.sessions.length, 2);
    assert.equal(snap.leases.length, 1);
    assert.equal(typeof snap.nextDeadline, 'number');
    assert.equal(new Kernel().snapshot(0).nextDeadline, null);
  });

  test(`${label}: sessions: digest, suspend, resume, close, idle close event`, () => {
    const k = new Kernel({ sessionIdleMs: 1000, seed: 1 });
    k.setHolderEvents(false);
    const s = k.openSession('alice', 'tenant', 0);
    assert.deepEqual(Object.keys(s), ['sessionId', 'agentId', 'namespace', 'priority', 'epoch']);
    assert.equal(s.namespace, 'tenant');
    const [l] = k.acquire(s.sessionId, ['MUTATES FILE:/x'], { ttlMs: 100 }, 1).leases;
    k.suspendSession(s.sessionId, 2);
    const d = k.digest(s.sessionId, 3);
    assert.equal(d.version, 1);
    assert.equal(d.identity.agentId, 'alice');
    assert.equal(d.identity.sessionId, s.sessionId);
    assert.equal(d.recovery.lastPhase, 'SUSPENDED');
    const r = k.resumeSession(d, 50);
    assert.equal(r.epoch, 1);
    assert.equal(r.priority, s.priority);
    assert.equal(k.reconcile(s.sessionId, [l.leaseId], 51)[0].expiresAt, 150);
    assert.throws(() => k.resumeSession({ ...d, identity: { ...d.identity, agentId: 'mallory' } }, 52), {
      name: 'INVALID_DIGEST',
    });
    assert.throws(() => k.resumeSession({ ...d, identity: { ...d.identity }, extra: 1 }, 52), {
      code: 'ERR_INVALID_ARG_VALUE',
    });
    assert.throws(() => k.resumeSession({ version: 1, identity: d.identity }, 52), {
      name: 'TypeError',
      code: 'ERR_INVALID_ARG_TYPE',
    });
    k.closeSession(s.sessionId, 60);
    assert.throws(() => k.closeSession(s.sessionId, 61), { name: 'UNKNOWN_SESSION', code: 200 });
    assert.deepEqual(k.drainEvents(), []);
    const idle = k.openSession('bob', 'default', 100).sessionId;
    k.advance(1100);
    assert.deepEqual(k.drainEvents(), [{ event: 'SESSION_CLOSED', session: idle, reason: 'IDLE' }]);
  });

  test(`${label}: wound_wait emits WOUNDED with lost leases and tickets and the kernel's retryAfterMs`, () => {
    const k = new Kernel({ policy: 'wound_wait', seed: 2, backoffBaseMs: 100, backoffCapMs: 10_000 });
    k.setHolderEvents(false);
    const old = k.openSession('old', 'default', 0).sessionId;
    const young = k.openSession('young', 'default', 1).sessionId;
    const [l] = k.acquire(young, ['MUTATES FILE:/x'], null, 2).leases;
    const v = k.acquire(old, ['MUTATES FILE:/x'], null, 3);
    assert.equal(v.verdict, 'GRANTED');
    const events = k.drainEvents();
    assert.equal(events.length, 1);
    const [wounded] = events;
    // A wound counts as a DIE (SPEC.md §8): the first one is base + jitter in [0, base).
    assert.equal(typeof wounded.retryAfterMs, 'number');
    assert.ok(wounded.retryAfterMs >= 100 && wounded.retryAfterMs < 200, `retryAfterMs ${wounded.retryAfterMs}`);
    assert.deepEqual(events, [
      {
        event: 'WOUNDED',
        session: young,
        by: old,
        lostLeases: [l.leaseId],
        lostTickets: [],
        retryAfterMs: wounded.retryAfterMs,
      },
    ]);
    // The same seed and calls give the same backoff (the kernel's seeded generator).
    const again = new Kernel({ policy: 'wound_wait', seed: 2, backoffBaseMs: 100, backoffCapMs: 10_000 });
    again.setHolderEvents(false);
    again.openSession('old', 'default', 0);
    again.openSession('young', 'default', 1);
    again.acquire(young, ['MUTATES FILE:/x'], null, 2);
    again.acquire(old, ['MUTATES FILE:/x'], null, 3);
    assert.equal(again.drainEvents()[0].retryAfterMs, wounded.retryAfterMs);
  });

  test(`${label}: kernel errors: every name and code comes through`, () => {
    const { k, a, b } = kernelWithTwo({ seed: 1, maxLeasesPerSession: 2, policy: 'lanes' });
    const cases = [
      [() => k.acquire(a, ['WRITES FILE:/x'], null, 5), 'INVALID_PREDICATE'],
      [() => k.acquire(a, ['MUTATES file:/x'], null, 5), 'INVALID_RESOURCE'],
      [() => k.acquire(a, [], null, 5), 'INVALID_MANIFEST'],
      [() => k.acquire(a, ['MUTATES FILE:/x'], { ttlMs: 0 }, 5), 'INVALID_TTL'],
      [() => k.acquire(a, ['MUTATES FILE:/a', 'MUTATES FILE:/b', 'MUTATES FILE:/c'], null, 5), 'QUOTA_EXCEEDED'],
      [() => k.openSession('', 'default', 5), 'INVALID_AGENT_ID'],
      [() => k.openSession('x', 'a\u0007b', 5), 'INVALID_NAMESPACE'],
      [() => k.acquire(424242, ['MUTATES FILE:/x'], null, 5), 'UNKNOWN_SESSION'],
    ];
    for (const [call, name] of cases)
      assert.throws(call, (e) => e instanceof KlockError && e.name === name && e.code === ERROR_CODES[name], name);
    const [l] = k.acquire(a, ['MUTATES FILE:/x'], null, 6).leases;
    assert.throws(() => k.acquire(a, ['MUTATES FILE:/y'], null, 7), { name: 'HOLD_AND_WAIT' });
    assert.throws(() => k.release(b, l.leaseId, 8), { name: 'NOT_OWNER', code: 300 });
  });

  // ---- bad input: named errors, and no state change at all -------------------------------

  const BAD_NUMBERS = [
    [NaN, 'RangeError', 'ERR_OUT_OF_RANGE'],
    [Infinity, 'RangeError', 'ERR_OUT_OF_RANGE'],
    [-Infinity, 'RangeError', 'ERR_OUT_OF_RANGE'],
    [-1, 'RangeError', 'ERR_OUT_OF_RANGE'],
    [1.5, 'RangeError', 'ERR_OUT_OF_RANGE'],
    [2 ** 53, 'RangeError', 'ERR_OUT_OF_RANGE'],
    [2 ** 64, 'RangeError', 'ERR_OUT_OF_RANGE'],
    ['5', 'TypeError', 'ERR_INVALID_ARG_TYPE'],
    [5n, 'TypeError', 'ERR_INVALID_ARG_TYPE'],
    [null, 'TypeError', 'ERR_INVALID_ARG_TYPE'],
    [{}, 'TypeError', 'ERR_INVALID_ARG_TYPE'],
    [true, 'TypeError', 'ERR_INVALID_ARG_TYPE'],
    [undefined, 'TypeError', 'ERR_MISSING_ARGS'],
  ];

  /** Every call with one argument replaced by `bad`, as [label, call]. */
  function callsWith(k, a, lease, ticket, bad) {
    const m = ['MUTATES FILE:/x'];
    return [
      ['openSession now', () => k.openSession('z', 'default', bad)],
      ['closeSession session', () => k.closeSession(bad, 50)],
      ['closeSession now', () => k.closeSession(a, bad)],
      ['suspendSession now', () => k.suspendSession(a, bad)],
      ['digest session', () => k.digest(bad, 50)],
      ['acquire session', () => k.acquire(bad, m, null, 50)],
      ['acquire now', () => k.acquire(a, m, null, bad)],
      ['acquire ttlMs', () => k.acquire(a, m, { ttlMs: bad }, 50)],
      ['acquire waitTimeoutMs', () => k.acquire(a, m, { waitTimeoutMs: bad }, 50)],
      ['heartbeat id', () => k.heartbeat(a, [bad], 50)],
      ['heartbeat now', () => k.heartbeat(a, [lease], bad)],
      ['release lease', () => k.release(a, bad, 50)],
      ['release now', () => k.release(a, lease, bad)],
      ['releaseAll now', () => k.releaseAll(a, bad)],
      ['reconcile id', () => k.reconcile(a, [lease, bad], 50)],
      ['cancelWait ticket', () => k.cancelWait(a, bad, 50)],
      ['cancelWait now', () => k.cancelWait(a, ticket, bad)],
      ['advance now', () => k.advance(bad)],
      ['resourceState now', () => k.resourceState('FILE:/x', 'default', bad)],
      ['snapshot now', () => k.snapshot(bad)],
    ];
  }

  function busyKernel() {
    const { k, a, b } = kernelWithTwo({ seed: 3 });
    const [lease] = k.acquire(b, ['MUTATES FILE:/x'], { ttlMs: 100 }, 10).leases;
    const { ticket } = k.acquire(a, ['MUTATES FILE:/x'], null, 11);
    return { k, a, lease: lease.leaseId, ticket };
  }

  test(`${label}: bad numbers: NaN, infinities, negative, fractions, 2^53, wrong types, missing → named errors, no state change`, () => {
    for (const [bad, errorName, code] of BAD_NUMBERS) {
      const { k, a, lease, ticket } = busyKernel();
      const before = k.clone().snapshot(11);
      for (const [label, call] of callsWith(k, a, lease, ticket, bad)) {
        if (label.endsWith('ttlMs') || label.endsWith('waitTimeoutMs')) {
          // An option key holding undefined counts as absent: the call is then valid.
          if (bad === undefined) continue;
        }
        const expectedCode = code === 'ERR_MISSING_ARGS' && /Ms|id$/.test(label) ? 'ERR_INVALID_ARG_TYPE' : code;
        assert.throws(
          call,
          (e) => e.name === errorName && e.code === expectedCode && !(e instanceof KlockError),
          `${label} with ${String(bad)}`,
        );
      }
      // Nothing changed: not even time (the argument errors happen before the kernel runs).
      assert.equal(k.now(), 11);
      assert.deepEqual(k.snapshot(11), before);
      assert.equal(k.pendingEvents(), 0);
    }
  });

  test(`${label}: the largest safe integer is accepted; 2^53 is not`, () => {
    const k = new Kernel({ sessionIdleMs: 0 });
    const s = k.openSession('a', 'default', 0).sessionId;
    k.advance(Number.MAX_SAFE_INTEGER);
    assert.equal(k.now(), Number.MAX_SAFE_INTEGER);
    assert.throws(() => k.advance(Number.MAX_SAFE_INTEGER + 1), { code: 'ERR_OUT_OF_RANGE' });
    assert.throws(() => k.release(s, Number.MAX_SAFE_INTEGER, 1), { name: 'UNKNOWN_LEASE' });
  });

  test(`${label}: bad strings, lists and option objects → named errors, no state change`, () => {
    const { k, a, lease, ticket } = busyKernel();
    const before = k.clone().snapshot(11);
    const cases = [
      [() => k.openSession(7, 'default', 12), 'TypeError', 'ERR_INVALID_ARG_TYPE'],
      [() => k.openSession('a', undefined, 12), 'TypeError', 'ERR_MISSING_ARGS'],
      [() => k.openSession('\ud800', 'default', 12), 'TypeError', 'ERR_INVALID_ARG_VALUE'],
      [() => k.openSession(), 'TypeError', 'ERR_MISSING_ARGS'],
      [() => k.acquire(a, 'MUTATES FILE:/x', null, 12), 'TypeError', 'ERR_INVALID_ARG_TYPE'],
      [() => k.acquire(a, undefined, null, 12), 'TypeError', 'ERR_MISSING_ARGS'],
      [() => k.acquire(a, [1], null, 12), 'TypeError', 'ERR_INVALID_ARG_TYPE'],
      [() => k.acquire(a, ['MUTATES FILE:/x', null], null, 12), 'TypeError', 'ERR_INVALID_ARG_TYPE'],
      [() => k.acquire(a, ['MUTATES FILE:/\udc00'], null, 12), 'TypeError', 'ERR_INVALID_ARG_VALUE'],
      [() => k.acquire(a, { 0: 'MUTATES FILE:/x', length: 1 }, null, 12), 'TypeError', 'ERR_INVALID_ARG_TYPE'],
      [() => k.acquire(a, ['MUTATES FILE:/x'], 'wait', 12), 'TypeError', 'ERR_INVALID_ARG_TYPE'],
      [() => k.acquire(a, ['MUTATES FILE:/x'], [], 12), 'TypeError', 'ERR_INVALID_ARG_TYPE'],
      [() => k.acquire(a, ['MUTATES FILE:/x'], { ttl: 5 }, 12), 'TypeError', 'ERR_INVALID_ARG_VALUE'],
      [() => k.acquire(a, ['MUTATES FILE:/x'], { wait: 'no' }, 12), 'TypeError', 'ERR_INVALID_ARG_TYPE'],
      [() => k.heartbeat(a, 'some', 12), 'TypeError', 'ERR_INVALID_ARG_VALUE'],
      [() => k.heartbeat(a, lease, 12), 'TypeError', 'ERR_INVALID_ARG_TYPE'],
      [() => k.reconcile(a, null, 12), 'TypeError', 'ERR_INVALID_ARG_TYPE'],
      [() => k.resumeSession(null, 12), 'TypeError', 'ERR_INVALID_ARG_TYPE'],
      [() => k.resumeSession(undefined, 12), 'TypeError', 'ERR_MISSING_ARGS'],
      [() => k.resourceState(5, 'default', 12), 'TypeError', 'ERR_INVALID_ARG_TYPE'],
      [() => k.cancelWait(a, String(ticket), 12), 'TypeError', 'ERR_INVALID_ARG_TYPE'],
      [() => k.acquire(a, ['MUTATES FILE:/x'], { ttlMs: -5 }, 12), 'RangeError', 'ERR_OUT_OF_RANGE'],
    ];
    for (const [call, errorName, code] of cases) {
      assert.throws(
        call,
        (e) => e.name === errorName && e.code === code && typeof e.message === 'string' && e.message.length > 10,
        String(call),
      );
    }
    assert.equal(k.now(), 11);
    assert.deepEqual(k.snapshot(11), before);
    // a huge manifest is the kernel's INVALID_MANIFEST, with time settled and nothing else
    const many = Array.from({ length: 257 }, (_, i) => `MUTATES FILE:/m/${i}`);
    assert.throws(() => k.acquire(a, many, null, 11), { name: 'INVALID_MANIFEST' });
    assert.deepEqual(k.snapshot(11), before);
  });

  test(`${label}: a kernel error after settling time leaves only the settlement`, () => {
    const { k, a, lease } = busyKernel();
    const twin = k.clone();
    twin.advance(500);
    const settled = twin.drainEvents();
    assert.throws(() => k.release(a, lease, 500), { name: 'NOT_OWNER' });
    assert.deepEqual(k.drainEvents(), settled);
    assert.deepEqual(k.snapshot(500), twin.snapshot(500));
  });

  test(`${label}: user code run while arguments are read may throw or call the kernel again`, () => {
    const k = new Kernel();
    const s = k.openSession('alice', 'default', 0).sessionId;
    // A throwing getter: its exception comes out as it is, and the kernel works on.
    const throwing = ['placeholder'];
    Object.defineProperty(throwing, 0, {
      get() {
        throw new Error('boom');
      },
    });
    assert.throws(() => k.acquire(s, throwing, null, 1), { message: 'boom' });
    const options = {};
    Object.defineProperty(options, 'ttlMs', { enumerable: true, get: () => assert.fail('read once, here') });
    assert.throws(() => k.acquire(s, ['MUTATES FILE:/x'], options, 1), { name: 'AssertionError' });
    assert.deepEqual(k.snapshot(1).leases, []);
    // A getter calling the same kernel before the outer call reaches it.
    const manifest = ['placeholder'];
    Object.defineProperty(manifest, 0, {
      get() {
        assert.equal(k.acquire(s, ['MUTATES FILE:/inner'], null, 1).verdict, 'GRANTED');
        return 'MUTATES FILE:/outer';
      },
    });
    const v = k.acquire(s, manifest, null, 2);
    assert.deepEqual(
      v.leases.map((l) => l.resource),
      ['FILE:/outer'],
    );
    assert.deepEqual(
      k.snapshot(2).leases.map((l) => l.resource),
      ['FILE:/inner', 'FILE:/outer'],
    );
  });
}
