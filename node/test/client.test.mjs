// The friendly client (client.js): every feature, on a fake clock where the timer must not
// matter and on the real clock where it must.
//
// One suite, two backends: the tests of the first part run on the in-process kernel and on
// `connect()` to a real server this file starts (the test kit's `klock-testkit serve`, a
// `klock serve --memory --clock manual` that resets to the test's config, for the fake clock;
// a `klock serve --memory --config ...` per config for the real clock). The awaits they add (release, resourceState, ...) cost nothing in process. The
// tests after them drive what only the in-process client has (the kernel object itself, its
// snapshot, garbage collection, the process exiting with a Klock alive, a clock function);
// INPROCESS_ONLY names each with the reason, and a test counts them.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { startManualServer, startServer } from './server.mjs';

const require = createRequire(import.meta.url);
const {
  Klock,
  Session,
  Lease,
  KlockError,
  LeaseLost,
  Died,
  Timeout,
  ERROR_CODES,
  ManualClock,
  Kernel,
  connect,
} = require('../client.js');
const clientPath = fileURLToPath(new URL('../client.js', import.meta.url));

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const BACKENDS = ['inprocess', 'remote'];
const snake = (name) => name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

let manualServer = null;
/** @type {Map<string, Promise<{ url: string, stop(): Promise<void> }>>} real-clock servers by config */
const realServers = new Map();
after(async () => {
  await manualServer?.stop();
  for (const s of realServers.values()) await (await s).stop();
});

/**
 * A Klock of `backend`. `fake`: on a clock that only moves when the test says so (a function
 * clock in process; a ManualClock driving a `--clock manual` server remotely); otherwise the
 * real clock. `config`: the kernel's (in process) or the server's (remote).
 */
async function makeKlock(backend, config = {}, { fake = false } = {}) {
  if (backend === 'inprocess') {
    if (!fake) return new Klock(config);
    const clock = { t: 0 };
    return new Klock({ seed: 1, ...config, clock: () => clock.t });
  }
  if (fake) {
    manualServer ??= await startManualServer();
    const defaults = Object.fromEntries(Object.entries(new Kernel().config).map(([k, v]) => [snake(k), v]));
    const body = { ...defaults, seed: 1, ...Object.fromEntries(Object.entries(config).map(([k, v]) => [snake(k), v])) };
    const response = await fetch(`${manualServer.url}/v1/reset`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'klock-now': '0' },
      body: JSON.stringify(body),
    });
    assert.equal(response.status, 200, await response.text());
    return connect(manualServer.url, { clock: new ManualClock() });
  }
  const key = JSON.stringify(config);
  if (!realServers.has(key)) {
    const args = ['--memory'];
    for (const [k, v] of Object.entries(config)) args.push('--config', `${snake(k)}=${v}`);
    realServers.set(key, startServer(args));
  }
  return connect((await realServers.get(key)).url);
}

/** Lets the client react: remotely, until no request is in flight and every event came in. */
async function settled(klock) {
  for (let i = 0; i < 3; i++) await new Promise((resolve) => setImmediate(resolve));
  if (klock.kernel.remote !== true) return;
  for (let i = 0; i < 2; i++) {
    await klock.kernel.idle();
    for (let j = 0; j < 3; j++) await new Promise((resolve) => setImmediate(resolve));
  }
}

/** Resolves to 'pending' if `promise` has not settled once the client has reacted. */
async function state(promise, klock) {
  const marker = {};
  let result = marker;
  promise.then(
    () => (result = 'fulfilled'),
    () => (result = 'rejected'),
  );
  await settled(klock);
  await new Promise((r) => setImmediate(r));
  return result === marker ? 'pending' : result;
}

/** How many tickets wait on `resource` (the kernel's, or the server's, view). */
async function waiting(klock, resource = 'FILE:/x') {
  return (await klock.resourceState(resource)).waiting.length;
}

for (const backend of BACKENDS) {
  const fakeKlock = (config) => makeKlock(backend, config, { fake: true });
  const realKlock = (config) => makeKlock(backend, config);

  test(`${backend}: lease: granted at once, fence and leases, release frees the resource`, async () => {
    const klock = await fakeKlock();
    const s = await klock.session('alice');
    assert.ok(s instanceof Session);
    assert.equal(s.agentId, 'alice');
    const lease = await s.lease(['MUTATES FILE:/x', 'CONSUMES FILE:/y'], { ttlMs: 1000 });
    assert.ok(lease instanceof Lease);
    assert.ok(lease.held);
    assert.equal(lease.leases.length, 2);
    assert.equal(lease.fence, Math.max(...lease.leases.map((l) => l.fence)));
    assert.deepEqual(Object.keys(lease.fences).sort(), ['FILE:/x', 'FILE:/y']);
    assert.equal(lease.expiresAt, 1000);
    assert.equal((await klock.resourceState('FILE:/x')).holders.length, 1);
    await lease.release();
    await lease.release(); // idempotent
    assert.equal(lease.held, false);
    assert.equal((await klock.resourceState('FILE:/x')).holders.length, 0);
    const single = await s.lease('DELETES FILE:/tmp');
    assert.equal(single.leases[0].predicate, 'DELETES');
    await klock.close();
  });

  test(`${backend}: an older session waits and is granted by the GRANTED event (no polling, no time passing)`, async () => {
    const klock = await fakeKlock();
    const older = await klock.session('older');
    const younger = await klock.session('younger');
    const held = await younger.lease('MUTATES FILE:/x');
    const pending = older.lease('MUTATES FILE:/x');
    assert.equal(await state(pending, klock), 'pending');
    assert.equal(klock.counters.waits, 1);
    assert.equal((await klock.resourceState('FILE:/x')).waiting[0].sessionId, older.sessionId);
    await sleep(20); // the clock does not move: nothing but an event can grant it
    assert.equal(await state(pending, klock), 'pending');
    await held.release();
    const lease = await pending;
    assert.ok(lease.held);
    assert.equal(lease.leases[0].sessionId, older.sessionId);
    assert.ok(lease.fence > held.fence);
    await klock.close();
  });

  test(`${backend}: a younger session DIEs, sleeps retryAfterMs and retries with the same session`, async () => {
    const klock = await realKlock({ seed: 4, backoffBaseMs: 200, backoffCapMs: 400 });
    const older = await klock.session('older');
    const younger = await klock.session('younger');
    const held = await older.lease('MUTATES FILE:/x');
    const t0 = klock.now();
    const pending = younger.lease('MUTATES FILE:/x');
    await settled(klock);
    assert.equal(klock.counters.deaths, 1);
    await held.release();
    const lease = await pending;
    assert.ok(klock.now() - t0 >= 200, 'slept at least the base backoff');
    assert.equal(lease.leases[0].sessionId, younger.sessionId);
    assert.equal(klock.counters.retries, 1);
    if (backend === 'inprocess') {
      // The kernel's snapshot is in process only; remotely die-retry-keeps-priority checks it.
      const view = klock.snapshot().sessions.find((s) => s.sessionId === younger.sessionId);
      assert.equal(view.priority, younger.priority, 'same session, same priority');
    }
    await klock.close();
  });

  test(`${backend}: Died when the session holds other leases (SPEC.md §6 rule 3)`, async () => {
    const klock = await fakeKlock();
    const older = await klock.session('older');
    const younger = await klock.session('younger');
    await older.lease('MUTATES FILE:/y');
    const mine = await younger.lease('MUTATES FILE:/x');
    const error = await younger.lease('MUTATES FILE:/y').then(
      () => assert.fail('granted'),
      (e) => e,
    );
    assert.ok(error instanceof Died);
    assert.ok(error instanceof KlockError);
    assert.equal(error.name, 'DIE');
    assert.equal(error.code, 0);
    assert.ok(error.retryAfterMs >= 100);
    assert.deepEqual(error.heldBy, [older.sessionId]);
    assert.ok(mine.held, 'nothing released behind the caller');
    // After rolling back, the same unit of work asks for everything in one manifest.
    await mine.release();
    const all = younger.lease(['MUTATES FILE:/x', 'MUTATES FILE:/y'], { timeoutMs: 0 });
    await assert.rejects(all, Timeout);
    await klock.close();
  });

  test(`${backend}: heartbeats keep a lease past its TTL (real clock, ttl/3)`, async () => {
    const klock = await realKlock();
    const s = await klock.session('alice');
    const ttlMs = backend === 'remote' ? 400 : 60; // remote: HTTP round trips on a loaded machine
    const lease = await s.lease('MUTATES FILE:/x', { ttlMs });
    const first = lease.expiresAt;
    await sleep(ttlMs * 4 + 10);
    assert.ok(lease.held, 'still held after 4 TTLs');
    assert.equal(lease.lost, null);
    assert.ok(lease.expiresAt > first + ttlMs * 2, 'expiry moved forward');
    const [status] = await klock.kernel.reconcile(s.sessionId, lease.leaseIds, klock.now());
    assert.equal(status.status, 'ACTIVE');
    await lease.heartbeat();
    await lease.release();
    assert.equal(klock.timerError, null);
    await klock.close();
  });

  test(`${backend}: LeaseLost by the timer alone when the event loop stalls past the TTL`, async () => {
    const klock = await realKlock();
    const s = await klock.session('alice');
    const lease = await s.lease('MUTATES FILE:/x', { ttlMs: 50 });
    const stall = Date.now() + 150;
    while (Date.now() < stall); // no heartbeat can run
    await sleep(30);
    assert.ok(lease.lost instanceof LeaseLost);
    assert.equal(lease.lost.name, 'LEASE_EXPIRED');
    await klock.close();
  });

  test(`${backend}: withLease releases in finally, also when the callback throws`, async () => {
    const klock = await fakeKlock();
    const s = await klock.session('alice');
    const value = await s.withLease(['MUTATES FILE:/x'], async (lease) => {
      assert.ok(lease.held);
      return lease.fence;
    });
    assert.equal(typeof value, 'number');
    assert.equal((await klock.resourceState('FILE:/x')).holders.length, 0);
    const boom = new Error('boom');
    await assert.rejects(
      s.withLease('MUTATES FILE:/x', () => {
        throw boom;
      }),
      (e) => e === boom,
    );
    assert.equal((await klock.resourceState('FILE:/x')).holders.length, 0);
    await klock.close();
  });

  test(`${backend}: nested leases of one session share kernel leases (re-entrant, reference counted)`, async () => {
    const klock = await fakeKlock();
    const s = await klock.session('alice');
    await s.withLease('MUTATES FILE:/x', async (outer) => {
      await s.withLease(['MUTATES FILE:/x', 'MUTATES FILE:/y'], async (inner) => {
        assert.equal(inner.leases[0].leaseId, outer.leases[0].leaseId, 'the same kernel lease');
      });
      assert.ok(outer.held);
      assert.equal((await klock.resourceState('FILE:/x')).holders.length, 1, 'still held for the outer block');
      assert.equal((await klock.resourceState('FILE:/y')).holders.length, 0);
    });
    assert.equal((await klock.resourceState('FILE:/x')).holders.length, 0);
    await klock.close();
  });

  test(`${backend}: timeoutMs: Timeout after waiting (the ticket is withdrawn); 0 is a try-lock`, async () => {
    const klock = await realKlock({ seed: 2 });
    const older = await klock.session('older');
    const younger = await klock.session('younger');
    const held = await younger.lease('MUTATES FILE:/x');
    const t0 = klock.now();
    await assert.rejects(
      older.lease('MUTATES FILE:/x', { timeoutMs: 60 }),
      (e) => e instanceof Timeout && e.name === 'TIMEOUT' && e.code === 0,
    );
    assert.ok(klock.now() - t0 >= 60);
    assert.equal(await waiting(klock), 0);
    await assert.rejects(older.lease('MUTATES FILE:/x', { timeoutMs: 0 }), Timeout);
    assert.equal(klock.counters.timeouts, 2);
    await held.release();
    await klock.close();
  });

  test(`${backend}: a refused try-lock (timeoutMs: 0, DIE) rejects with Timeout at once, counted; never Died`, async () => {
    // Issue 27: the core's answer to a DIE that asked for no wait (AFTER_NO_WAIT_DIE) is known
    // when the verdict is: in process the block rejects before any other job runs.
    const klock = await fakeKlock();
    const old = await klock.session('old');
    const young = await klock.session('young');
    const held = await old.lease('MUTATES FILE:/x');
    const message = `MUTATES FILE:/x held by sessions ${old.sessionId} (timeout 0 ms)`;
    const limit = Error.stackTraceLimit;
    let ran = false;
    let caught = null;
    young.withLease('MUTATES FILE:/x', () => (ran = true), { timeoutMs: 0 }).catch((e) => (caught = e));
    await null; // one turn of the microtask queue
    if (backend === 'inprocess') {
      assert.ok(caught instanceof Timeout, 'rejected before the next microtask');
      // An answer, not a fault: no stack frames were captured for it.
      assert.doesNotMatch(caught.stack, /\n\s+at /);
    }
    await settled(klock);
    for (const e of [caught, await young.lease('MUTATES FILE:/x', { timeoutMs: 0 }).catch((error) => error)]) {
      assert.ok(e instanceof Timeout && e instanceof KlockError);
      assert.deepEqual([e.name, e.code, e.message, e.heldBy], ['TIMEOUT', 0, message, [old.sessionId]]);
    }
    assert.equal(ran, false);
    assert.equal(Error.stackTraceLimit, limit);
    // Holding another lease changes nothing: it asked not to wait, so it has nothing to roll back.
    const other = await young.lease('MUTATES FILE:/y');
    await assert.rejects(young.lease('MUTATES FILE:/x', { timeoutMs: 0 }), Timeout);
    const { deaths, timeouts, retries, waits } = klock.counters;
    assert.deepEqual({ deaths, timeouts, retries, waits }, { deaths: 3, timeouts: 3, retries: 0, waits: 0 });
    await other.release();
    await held.release();
    await klock.close();
  });

  test(`${backend}: AbortSignal cancels a wait (cancelWait), a backoff sleep, and an aborted signal rejects at once`, async () => {
    const klock = await fakeKlock({ backoffBaseMs: 10_000, backoffCapMs: 10_000 });
    const older = await klock.session('older');
    const younger = await klock.session('younger');
    const held = await younger.lease('MUTATES FILE:/x');

    const waitingOne = new AbortController();
    const wait = older.lease('MUTATES FILE:/x', { signal: waitingOne.signal });
    await settled(klock);
    assert.equal(await waiting(klock), 1);
    waitingOne.abort();
    await assert.rejects(wait, { name: 'AbortError' });
    await settled(klock);
    assert.equal(await waiting(klock), 0, 'the ticket was withdrawn in the kernel');
    assert.equal((await klock.stats()).counters.cancelled, 1);

    const sleeping = new AbortController();
    const reason = new Error('stop');
    const retry = (await klock.session('youngest')).lease('MUTATES FILE:/x', { signal: sleeping.signal });
    assert.equal(await state(retry, klock), 'pending');
    sleeping.abort(reason);
    await assert.rejects(retry, (e) => e === reason);

    await assert.rejects(older.lease('MUTATES FILE:/x', { signal: AbortSignal.abort() }), { name: 'AbortError' });

    // A grant that happened first wins over a later abort.
    const late = new AbortController();
    const granted = older.lease('MUTATES FILE:/x', { signal: late.signal });
    await settled(klock);
    await held.release();
    const lease = await granted;
    late.abort();
    assert.ok(lease.held);
    await klock.close();
  });

  test(`${backend}: wound_wait: the older session wounds the younger, whose Lease is lost`, async () => {
    const klock = await fakeKlock({ policy: 'wound_wait' });
    const older = await klock.session('older');
    const younger = await klock.session('younger');
    const victim = await younger.lease('MUTATES FILE:/x');
    const winner = await older.lease('MUTATES FILE:/x');
    await settled(klock); // remotely the WOUNDED event comes on the victim's stream
    assert.ok(winner.held);
    assert.ok(victim.lost instanceof LeaseLost);
    assert.equal(victim.lost.name, 'LEASE_RELEASED');
    assert.match(victim.lost.message, /wounded/);
    // The younger waits for the older now, and gets it when the older lets go.
    const again = younger.lease('MUTATES FILE:/x');
    assert.equal(await state(again, klock), 'pending');
    await winner.release();
    assert.ok((await again).held);
    await klock.close();
  });

  test(`${backend}: wound_wait: a wounded waiter backs off before asking again (real clock)`, async () => {
    const klock = await realKlock({ policy: 'wound_wait', seed: 1, backoffBaseMs: 300, backoffCapMs: 300 });
    const oldest = await klock.session('oldest');
    const middle = await klock.session('middle');
    const young = await klock.session('young');
    const held = await middle.lease('MUTATES FILE:/x');
    const pending = young.lease('MUTATES FILE:/x', { timeoutMs: 10_000 });
    await settled(klock);
    assert.equal(await waiting(klock), 1);
    // The wound comes during this acquire, so the backoff ends 300 ms or more after askedAt
    // (measuring after the call returns would start the clock late, by the call's own time).
    const askedAt = Date.now();
    const winner = await oldest.lease('MUTATES FILE:/x'); // wounds middle (holder) and young (ticket)
    await settled(klock);
    assert.ok(held.lost instanceof LeaseLost);
    await sleep(150);
    assert.equal(await waiting(klock), 0, 'the wounded waiter asked again before its backoff');
    while ((await waiting(klock)) === 0) await sleep(5);
    assert.ok(Date.now() - askedAt >= 290, 'asked again only after the backoff');
    await winner.release();
    assert.ok((await pending).held);
    await klock.close();
  });

  test(`${backend}: lanes: FIFO waits, no hold-and-wait`, async () => {
    const klock = await fakeKlock({ policy: 'lanes' });
    const a = await klock.session('a');
    const b = await klock.session('b');
    const c = await klock.session('c');
    const first = await c.lease('MUTATES FILE:/x');
    const order = [];
    const pb = b.lease('MUTATES FILE:/x').then((l) => (order.push('b'), l));
    await settled(klock);
    const pa = a.lease('MUTATES FILE:/x').then((l) => (order.push('a'), l));
    await settled(klock);
    await first.release();
    await (await pb).release();
    await (await pa).release();
    assert.deepEqual(order, ['b', 'a'], 'served in arrival order, not by age');
    const held = await a.lease('MUTATES FILE:/y');
    await assert.rejects(a.lease('MUTATES FILE:/z'), { name: 'HOLD_AND_WAIT', code: 303 });
    await held.release();
    await klock.close();
  });

  test(`${backend}: session.close and klock.close: pending leases reject with CLOSED, held ones are lost`, async () => {
    const klock = await fakeKlock();
    const older = await klock.session('older');
    const younger = await klock.session('younger');
    const held = await younger.lease('MUTATES FILE:/x');
    const pending = older.lease('MUTATES FILE:/x');
    await settled(klock);
    const rejected = assert.rejects(pending, (e) => e instanceof KlockError && e.name === 'CLOSED');
    await older.close();
    await rejected;
    assert.ok(older.closed);
    // Closed by the user: the client says so (like the Python client) instead of the kernel's
    // UNKNOWN_SESSION.
    await assert.rejects(older.lease('MUTATES FILE:/x'), { name: 'CLOSED', message: 'this session is closed' });
    await klock.close();
    assert.ok(held.lost instanceof LeaseLost);
    await assert.rejects(klock.session('late'), { name: 'CLOSED' });
    await klock.close(); // idempotent
  });
}

for (const backend of BACKENDS) {
  test(
    `${backend}: nested block with a shorter TTL: the outer lease outlives the inner TTL; nobody else gets in (real clock)`,
    { timeout: 20_000 },
    async () => {
      const klock = await makeKlock(backend, { seed: 3 });
      const owner = await klock.session('owner');
      const other = await klock.session('other');
      let grantedToOther = 0;
      let tries = 0;
      await owner.withLease(
        'MUTATES FILE:/x',
        async (outer) => {
          await owner.withLease('MUTATES FILE:/x', async () => {}, { ttlMs: 40 });
          // The inner block is gone; the outer body runs for many inner TTLs.
          const until = Date.now() + 300;
          while (Date.now() < until) {
            await other.lease('MUTATES FILE:/x', { timeoutMs: 0 }).then(
              async (l) => {
                grantedToOther++;
                await l.release();
              },
              (e) => assert.ok(e instanceof Timeout, String(e)),
            );
            tries++;
            await sleep(10);
          }
          outer.check();
          assert.ok(outer.held);
        },
        { ttlMs: 5_000 },
      );
      assert.ok(tries > 5);
      assert.equal(grantedToOther, 0, 'another session was granted while the outer block ran');
      assert.equal(klock.timerError, null);
      await klock.close();
    },
  );

  test(
    `${backend}: Klock.close(): a pending acquisition says "this Klock is closed", session.close() "this session is closed"`,
    { timeout: 20_000 },
    async () => {
      const { Closed } = require('../client.js');
      const klock = await makeKlock(backend, {}, { fake: true });
      const older = await klock.session('older');
      const younger = await klock.session('younger');
      await younger.lease('MUTATES FILE:/x');
      const pending = older.lease('MUTATES FILE:/x');
      assert.equal(await state(pending, klock), 'pending');
      const rejected = assert.rejects(
        pending,
        (e) => e instanceof Closed && /this Klock is closed/.test(e.message) && !/session/.test(e.message),
      );
      await klock.close();
      await rejected;
      await assert.rejects(klock.session('late'), (e) => e instanceof Closed && e.message === 'this Klock is closed');
      await assert.rejects(
        older.lease('MUTATES FILE:/y'),
        (e) => e instanceof Closed && /this Klock is closed/.test(e.message),
      );

      const k2 = await makeKlock(backend, {}, { fake: true });
      const a = await k2.session('a');
      const b = await k2.session('b');
      await b.lease('MUTATES FILE:/x');
      const waiting = a.lease('MUTATES FILE:/x');
      await state(waiting, k2);
      const closed = assert.rejects(waiting, (e) => e instanceof Closed && /this session is closed/.test(e.message));
      await a.close();
      await closed;
      await assert.rejects(
        a.lease('MUTATES FILE:/y'),
        (e) => e instanceof Closed && /this session is closed/.test(e.message),
      );
      await k2.close();
    },
  );

  test(
    `${backend}: session.close() ends a backing-off acquisition of that session at once with Closed`,
    { timeout: 20_000 },
    async () => {
      const { Closed } = require('../client.js');
      const klock = await makeKlock(backend, { seed: 1, backoffBaseMs: 10_000, backoffCapMs: 10_000 });
      const older = await klock.session('older');
      const younger = await klock.session('younger');
      const held = await older.lease('MUTATES FILE:/x');
      const backingOff = younger.lease('MUTATES FILE:/x'); // DIE: sleeps 10 s
      assert.equal(await state(backingOff, klock), 'pending');
      const t0 = Date.now();
      const closed = assert.rejects(
        backingOff,
        (e) => e instanceof Closed && e.message.startsWith('this session is closed'),
      );
      await younger.close();
      await closed;
      assert.ok(Date.now() - t0 < 1000);
      assert.ok(held.held, 'the other session is untouched');
      await klock.close();
    },
  );

  test(`${backend}: digest, suspend, resume (a restarted agent keeps its priority and leases), reconcile`, async () => {
    const klock = await makeKlock(backend, {}, { fake: true });
    const s = await klock.session('agent');
    const lease = await s.lease('MUTATES FILE:/x', { ttlMs: 5000 });
    const [status] = await s.reconcile(lease.leaseIds);
    assert.equal(status.leaseId, lease.leaseIds[0]);
    assert.equal(status.status, 'ACTIVE');
    assert.equal((await s.reconcile([9999]))[0].status, 'UNKNOWN');
    const digest = await s.digest();
    assert.equal(digest.identity.namespace, 'default');
    await s.suspend();
    // Resumed by this Klock: the same Session; by another client (a restarted agent): a new one.
    const again = await klock.resume(digest);
    assert.equal(again, s);
    const other = backend === 'remote' ? connect(klock.kernel.url, { clock: klock.clock }) : klock;
    const resumed = await other.resume(await s.digest());
    assert.equal(resumed.sessionId, s.sessionId);
    assert.equal(resumed.priority, s.priority);
    assert.equal((await resumed.reconcile(lease.leaseIds))[0].status, 'ACTIVE');
    // Not a digest: the addon's argument check in process, the server's INVALID_DIGEST remotely.
    await assert.rejects(
      other.resume({ nonsense: true }),
      (e) => e instanceof TypeError || e.name === 'INVALID_DIGEST',
    );
    if (other === klock) await lease.release();
    else {
      // The resumed session is the new client's now (a new session token): it lets go.
      await resumed.close();
      await other.close();
    }
    await klock.close();
  });
}

/** The tests below run in process only; each reason says why a remote run cannot do it. */
const INPROCESS_ONLY = {
  'LeaseLost when a lease expires (settled by any call; signal aborted; withLease rejects)':
    'it jumps a function clock and settles the expiry through klock.snapshot(), a call of the in-process kernel; remotely the silent-server test (remote.test.mjs) and expiry-loses-the-block cover the loss',
  "the drive timer is unref'd: a process holding a lease exits by itself":
    'a remote Klock keeps its event streams open until close() (documented); the process exits only then',
  'events of tickets made directly on klock.kernel are left to their caller': 'it calls the kernel object directly',
  'bad input to the client: named errors, no state change':
    'it compares clones of the kernel before and after (Kernel.clone), which a server cannot give',
  "a re-acquire renews the shared lease: every Lease shows the kernel's current expiresAt and ttlMs":
    'it moves a function clock between calls and checks exact expiries; remotely nested-blocks-share-a-lease and heartbeats-renew-at-a-third check the same on a ManualClock',
  "heartbeat cadence follows the lease's current TTL, not the one it was granted with":
    'it counts the kernel calls the client makes (recordEvents wraps the kernel object); remotely heartbeats-renew-at-a-third covers the cadence',
  "WOUNDED while holding other leases is a DIE: Died carrying the event's retryAfterMs":
    'it injects events into the kernel object; remotely wounded-while-holding-raises-died covers it',
  "WOUNDED backoff is the event's retryAfterMs (a retry that would pass timeoutMs is a Timeout naming it)":
    'it injects events into the kernel object; remotely wound-wait covers the backoff',
  'the client never sizes a backoff itself (no copy of the formula)': 'it reads client.js source, not a backend',
  'Lease[Symbol.asyncDispose] and [Symbol.dispose] release it (what `await using` calls)':
    'the synchronous [Symbol.dispose] cannot wait for a server; it jumps a function clock',
  'an unreachable Lease is released when collected, and its resource granted to another session (--expose-gc)':
    'garbage collection in a child process with an in-process kernel',
  'a collected Lease frees its resource; a reachable one is still heartbeated (--expose-gc)':
    'garbage collection in a child process with an in-process kernel',
  'Leases dropped unreleased within one job, among many released ones, are released once collected (--expose-gc)':
    'garbage collection in a child process with an in-process kernel',
  "a release that settles the lease's expiry raises LeaseLost (test clock)":
    'it jumps a function clock with no server call between; remotely expiry-loses-the-block covers it on a ManualClock',
  'a long synchronous callback blocks the event loop past the TTL: withLease raises LeaseLost (real clock)':
    'the same rule remotely is "LeaseLost by the timer alone when the event loop stalls" (both backends) and the local-deadline test',
  'error classes: the same names as the Python client; Closed is exported': 'it constructs error classes, no backend',
  'Klock.close() ends waiting and backing-off acquisitions promptly, withdraws their tickets, and the process exits':
    'a child process that must exit with the Klock alive (a remote one keeps its streams until close)',
  'timeoutMs: Infinity waits with no client-side limit; bad values are RangeErrors naming timeoutMs':
    'it reads the ticket deadline from klock.snapshot() (in process only); remotely timeouts covers "inf"',
  'a lease at its lifetime cap: heartbeats stop (no busy loop) and it is lost at the cap (real clock)':
    'it counts the kernel calls through the kernel object; remotely lifetime-cap covers the rule',
  'ManualClock runs timers in time order, each at its own time; jump runs none': 'the clock alone, no backend',
  'a Klock on a ManualClock: backoffs, waits and timeouts end when the test advances the clock, never by real time':
    'it reads the kernel snapshot between steps; remotely the scenarios run on a ManualClock',
  'a Klock takes a clock object or a function, and names a bad one': "the Klock constructor's options, no backend",
  'a failing timer is exposed in timerError and tries again later, not in a busy loop':
    "it replaces the kernel object's advance() to throw",
};

test('in-process-only tests are named with a reason, and every test of this file is either', () => {
  const source = readFileSync(fileURLToPath(import.meta.url), 'utf8');
  const single = [...source.matchAll(/^test\(\s*(['"])(.*?)\1,/gms)].map((m) => m[2].replace(/\\'/g, "'"));
  const listed = Object.keys(INPROCESS_ONLY);
  for (const name of listed) assert.ok(INPROCESS_ONLY[name].length > 20, name);
  const own = single.filter((name) => !name.startsWith('in-process-only tests'));
  assert.deepEqual(
    own.filter((name) => !listed.includes(name)),
    [],
    'in process only, with no reason',
  );
  assert.deepEqual(
    listed.filter((name) => !own.includes(name)),
    [],
    'listed, but no such test',
  );
  console.log(`client tests: ${listed.length} in process only (each with its reason); the others on both backends`);
});

/** A Klock on a clock that only moves when the test says so. */
function fakeKlock(config = {}) {
  const clock = { t: 0 };
  const klock = new Klock({ seed: 1, ...config, clock: () => clock.t });
  return { klock, clock };
}

/** Resolves to 'pending' if `promise` has not settled after the queued microtasks ran. */
async function inProcessState(promise) {
  const marker = {};
  const result = await Promise.race([
    promise.then(
      () => 'fulfilled',
      () => 'rejected',
    ),
    new Promise((r) => setImmediate(() => r(marker))),
  ]);
  return result === marker ? 'pending' : result;
}

test('LeaseLost when a lease expires (settled by any call; signal aborted; withLease rejects)', async () => {
  const { klock, clock } = fakeKlock();
  const s = await klock.session('alice');
  const lease = await s.lease('MUTATES FILE:/x', { ttlMs: 100 });
  clock.t = 500; // no heartbeat could run: the fake clock jumped
  klock.snapshot();
  assert.ok(lease.lost instanceof LeaseLost);
  assert.equal(lease.lost.name, 'LEASE_EXPIRED');
  assert.equal(lease.lost.code, ERROR_CODES.LEASE_EXPIRED);
  assert.deepEqual(lease.lost.leaseIds, lease.leaseIds);
  assert.ok(lease.signal.aborted);
  assert.equal(lease.signal.reason, lease.lost);
  assert.equal(lease.held, false);
  assert.throws(() => lease.check(), LeaseLost);
  assert.equal(klock.counters.lost, 1);
  assert.throws(
    () => lease.release(),
    (e) => e === lease.lost,
    'the first release reports the loss',
  );
  lease.release(); // idempotent

  let ran = false;
  const result = s.withLease(
    'MUTATES FILE:/y',
    async (l) => {
      clock.t += 100_000;
      klock.snapshot();
      assert.ok(l.signal.aborted);
      ran = true;
      return 'done';
    },
    { ttlMs: 1000 },
  );
  await assert.rejects(result, (e) => e instanceof LeaseLost && e.name === 'LEASE_EXPIRED');
  assert.ok(ran);
  klock.close();
});

test("the drive timer is unref'd: a process holding a lease exits by itself", () => {
  const script = `
    const { Klock } = require(${JSON.stringify(clientPath)});
    (async () => {
      const klock = new Klock();
      const s = await klock.session('alice');
      await s.lease('MUTATES FILE:/x', { ttlMs: 60000 });
      console.log('held');
    })();
  `;
  const t0 = Date.now();
  const child = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 20_000 });
  assert.equal(child.status, 0, child.stderr);
  assert.equal(child.stdout.trim(), 'held');
  assert.ok(Date.now() - t0 < 10_000);
});

test('events of tickets made directly on klock.kernel are left to their caller', async () => {
  const { klock } = fakeKlock();
  const friendly = await klock.session('friendly');
  const raw = klock.kernel.openSession('raw', 'default', klock.now()).sessionId;
  const held = await friendly.lease('MUTATES FILE:/x');
  const { verdict } = klock.kernel.acquire(raw, ['MUTATES FILE:/x'], null, klock.now());
  assert.equal(verdict, 'DIE');
  held.release();
  assert.equal(klock.timerError, null);
  klock.close();
});

test('bad input to the client: named errors, no state change', async () => {
  const { klock } = fakeKlock();
  const s = await klock.session('alice');
  const before = klock.kernel.clone().snapshot(0);
  const cases = [
    [() => s.lease('MUTATES FILE:/x', { timeoutMs: -1 }), 'RangeError', 'ERR_OUT_OF_RANGE'],
    [() => s.lease('MUTATES FILE:/x', { timeoutMs: NaN }), 'RangeError', 'ERR_OUT_OF_RANGE'],
    [() => s.lease('MUTATES FILE:/x', { timeoutMs: 2 ** 53 }), 'RangeError', 'ERR_OUT_OF_RANGE'],
    [() => s.lease('MUTATES FILE:/x', { timeoutMs: '5' }), 'TypeError', 'ERR_INVALID_ARG_TYPE'],
    [() => s.lease('MUTATES FILE:/x', { ttlMs: 1.5 }), 'RangeError', 'ERR_OUT_OF_RANGE'],
    [() => s.lease('MUTATES FILE:/x', { ttlMs: -3 }), 'RangeError', 'ERR_OUT_OF_RANGE'],
    [() => s.lease('MUTATES FILE:/x', { ttl: 5 }), 'TypeError', 'ERR_INVALID_ARG_VALUE'],
    [() => s.lease('MUTATES FILE:/x', { signal: {} }), 'TypeError', 'ERR_INVALID_ARG_TYPE'],
    [() => s.lease('MUTATES FILE:/x', 5), 'TypeError', 'ERR_INVALID_ARG_TYPE'],
    [() => s.lease(5), 'TypeError', 'ERR_INVALID_ARG_TYPE'],
    [() => s.lease(), 'TypeError', 'ERR_MISSING_ARGS'],
    [() => s.lease(['MUTATES FILE:/x', 7]), 'TypeError', 'ERR_INVALID_ARG_TYPE'],
    [() => s.withLease('MUTATES FILE:/x'), 'TypeError', 'ERR_INVALID_ARG_TYPE'],
    [() => klock.session(42), 'TypeError', 'ERR_INVALID_ARG_TYPE'],
    [() => klock.session(), 'TypeError', 'ERR_MISSING_ARGS'],
    [() => klock.session('x', { namespace: 5 }), 'TypeError', 'ERR_INVALID_ARG_TYPE'],
    [() => klock.session('x', { tenant: 'a' }), 'TypeError', 'ERR_INVALID_ARG_VALUE'],
  ];
  for (const [call, name, code] of cases) {
    await assert.rejects(call, (e) => e.name === name && e.code === code, String(call));
  }
  assert.deepEqual(klock.kernel.snapshot(0), before);
  await assert.rejects(
    s.lease('WRITES FILE:/x'),
    (e) => e instanceof KlockError && e.name === 'INVALID_PREDICATE' && e.code === 101,
  );
  await assert.rejects(s.lease('MUTATES FILE:/x', { ttlMs: 0 }), { name: 'INVALID_TTL' });
  await assert.rejects(s.lease([]), { name: 'INVALID_MANIFEST' });
  assert.deepEqual(klock.kernel.snapshot(0), before);
  assert.throws(() => new Klock({ clock: 5 }), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
  // An unknown config key is the kernel's INVALID_CONFIG, naming it (issue 10: one list of
  // config fields, checked by the core).
  assert.throws(() => new Klock({ polcy: 'lanes' }), { name: 'INVALID_CONFIG', message: /polcy/ });
  assert.throws(() => new Klock({ policy: 'fifo' }), { name: 'INVALID_CONFIG' });
  assert.throws(() => new Klock(null), { name: 'TypeError' });
  klock.close();
});

// ---- SPEC rev 4 and the client's own lifecycle ------------------------------------------------

/** Records every event the Klock drains (the client still routes them). */
function recordEvents(klock) {
  const seen = [];
  const drain = klock.kernel.drainEvents.bind(klock.kernel);
  klock.kernel.drainEvents = () => {
    const events = drain();
    seen.push(...events);
    return events;
  };
  return seen;
}

/** Runs `script` (CommonJS, `client` bound to the client module) in a child Node. */
function runChild(script, { args = [], timeout = 20_000 } = {}) {
  const source = `const client = require(${JSON.stringify(clientPath)});\n${script}`;
  const t0 = Date.now();
  const child = spawnSync(process.execPath, [...args, '-e', source], { encoding: 'utf8', timeout });
  return { ...child, ms: Date.now() - t0 };
}

test(
  "a re-acquire renews the shared lease: every Lease shows the kernel's current expiresAt and ttlMs",
  { timeout: 20_000 },
  async () => {
    const { klock, clock } = fakeKlock();
    const s = await klock.session('alice');
    const outer = await s.lease('MUTATES FILE:/x', { ttlMs: 1000 });
    assert.equal(outer.expiresAt, 1000);
    clock.t = 500;
    const shorter = await s.lease('MUTATES FILE:/x', { ttlMs: 100 });
    // Never shortened (SPEC.md §6): ttl max(1000, 100), expiry now + 1000.
    assert.equal(shorter.leases[0].ttlMs, 1000);
    assert.equal(shorter.expiresAt, 1500);
    assert.equal(outer.expiresAt, 1500, 'the outer Lease still shows the expiry it was granted with');
    assert.equal(outer.leases[0].ttlMs, 1000);
    clock.t = 600;
    const longer = await s.lease('MUTATES FILE:/x', { ttlMs: 5000 });
    assert.equal(longer.expiresAt, 5600);
    assert.equal(outer.leases[0].ttlMs, 5000);
    assert.equal(outer.expiresAt, 5600);
    assert.equal(shorter.expiresAt, 5600);
    // A heartbeat of one Lease moves the expiry every Lease of that kernel lease shows.
    clock.t = 700;
    shorter.heartbeat();
    assert.equal(outer.expiresAt, 5700);
    longer.release();
    shorter.release();
    outer.release();
    klock.close();
  },
);

test(
  "heartbeat cadence follows the lease's current TTL, not the one it was granted with",
  { timeout: 20_000 },
  async () => {
    const klock = new Klock({ seed: 3 });
    const s = await klock.session('alice');
    let beats = 0;
    const heartbeat = klock.kernel.heartbeat.bind(klock.kernel);
    klock.kernel.heartbeat = (...args) => {
      beats++;
      return heartbeat(...args);
    };
    const outer = await s.lease('MUTATES FILE:/x', { ttlMs: 150 }); // would beat every 50 ms
    const inner = await s.lease('MUTATES FILE:/x', { ttlMs: 30_000 }); // now ttl 30 s for both
    inner.release();
    await sleep(300);
    assert.equal(beats, 0, 'renewed every 50 ms a lease whose TTL is 30 s');
    assert.ok(outer.held);
    assert.equal(outer.leases[0].ttlMs, 30_000);
    outer.release();
    klock.close();
  },
);

test(
  "WOUNDED while holding other leases is a DIE: Died carrying the event's retryAfterMs",
  { timeout: 20_000 },
  async () => {
    const { klock } = fakeKlock({ policy: 'wound_wait', backoffBaseMs: 1000, backoffCapMs: 10_000 });
    const events = recordEvents(klock);
    const oldest = await klock.session('oldest');
    const middle = await klock.session('middle');
    const young = await klock.session('young');
    const blocker = await middle.lease('MUTATES FILE:/x');
    const mine = await young.lease('MUTATES FILE:/y');
    const pending = young.lease('MUTATES FILE:/x'); // waits for the older middle
    assert.equal(await inProcessState(pending), 'pending');
    const winner = await oldest.lease('MUTATES FILE:/x'); // wounds middle (lease) and young (ticket)
    const wounded = events.find((e) => e.event === 'WOUNDED' && e.session === young.sessionId);
    assert.ok(wounded, 'young was wounded');
    assert.ok(wounded.retryAfterMs >= 1000);
    const error = await pending.then(
      () => assert.fail('granted'),
      (e) => e,
    );
    assert.ok(error instanceof Died, String(error));
    assert.equal(error.name, 'DIE');
    assert.equal(error.retryAfterMs, wounded.retryAfterMs, "the backoff is the kernel's answer");
    assert.ok(mine.held, 'a ticket-only wound keeps the leases');
    assert.ok(blocker.lost instanceof LeaseLost);
    winner.release();
    mine.release();
    klock.close();
  },
);

test(
  "WOUNDED backoff is the event's retryAfterMs (a retry that would pass timeoutMs is a Timeout naming it)",
  { timeout: 20_000 },
  async () => {
    const { klock } = fakeKlock({ policy: 'wound_wait', backoffBaseMs: 5000, backoffCapMs: 10_000 });
    const events = recordEvents(klock);
    const oldest = await klock.session('oldest');
    const middle = await klock.session('middle');
    const young = await klock.session('young');
    await middle.lease('MUTATES FILE:/x');
    const pending = young.lease('MUTATES FILE:/x', { timeoutMs: 4000 });
    assert.equal(await inProcessState(pending), 'pending');
    await oldest.lease('MUTATES FILE:/x');
    const wounded = events.find((e) => e.event === 'WOUNDED' && e.session === young.sessionId);
    assert.ok(wounded && wounded.retryAfterMs >= 5000);
    const error = await pending.then(
      () => assert.fail('granted'),
      (e) => e,
    );
    assert.ok(error instanceof Timeout, String(error));
    assert.ok(error.message.includes(`(${wounded.retryAfterMs} ms)`), error.message);
    // Counted as the kernel counts them: a wound is not a death (DIE verdicts and DIED events
    // are), though it is backed off as one. middle (its lease) and young (its ticket) were wounded.
    assert.equal(klock.counters.wounds, 2);
    assert.equal(klock.counters.deaths, 0);
    assert.equal(klock.stats().counters.wounded, 2);
    assert.equal(klock.stats().counters.died, 0);
    klock.close();
  },
);

test('the client never sizes a backoff itself (no copy of the formula)', { timeout: 20_000 }, async () => {
  const { readFileSync } = await import('node:fs');
  const source = readFileSync(clientPath, 'utf8');
  assert.doesNotMatch(source, /backoffBaseMs|backoffCapMs|retryAfterMs\(/);
  assert.doesNotMatch(source, /Math\.random/);
});

test(
  'Lease[Symbol.asyncDispose] and [Symbol.dispose] release it (what `await using` calls)',
  { timeout: 20_000 },
  async () => {
    const { klock } = fakeKlock();
    const s = await klock.session('alice');
    assert.equal(typeof Lease.prototype[Symbol.asyncDispose], 'function');
    assert.equal(typeof Lease.prototype[Symbol.dispose], 'function');
    const a = await s.lease('MUTATES FILE:/x');
    const disposed = a[Symbol.asyncDispose]();
    assert.ok(disposed instanceof Promise);
    await disposed;
    assert.equal(a.held, false);
    assert.equal(klock.resourceState('FILE:/x').holders.length, 0);
    await a[Symbol.asyncDispose](); // idempotent
    const b = await s.lease('MUTATES FILE:/x');
    b[Symbol.dispose]();
    assert.equal(klock.resourceState('FILE:/x').holders.length, 0);
    // A lost lease: disposing reports it, as leaving a block does.
    const { klock: k2, clock } = fakeKlock();
    const s2 = await k2.session('bob');
    const c = await s2.lease('MUTATES FILE:/x', { ttlMs: 100 });
    clock.t = 1000;
    await assert.rejects(c[Symbol.asyncDispose](), (e) => e instanceof LeaseLost && e.name === 'LEASE_EXPIRED');
    k2.close();
    klock.close();
  },
);

test('an unreachable Lease is released when collected, and its resource granted to another session (--expose-gc)', () => {
  const child = runChild(
    `
    const { Klock } = client;
    (async () => {
      const klock = new Klock({ seed: 1 });
      const leaker = await klock.session('leaker');
      const other = await klock.session('other');
      await (async () => {
        await leaker.lease('MUTATES FILE:/x', { ttlMs: 60000 }); // never released, dropped
      })();
      const before = klock.resourceState('FILE:/x').holders.length;
      for (let i = 0; i < 20 && klock.counters.collected === 0; i++) {
        globalThis.gc();
        await new Promise((r) => setTimeout(r, 20));
      }
      const lease = await other.lease('MUTATES FILE:/x', { timeoutMs: 2000 });
      console.log(JSON.stringify({ before, collected: klock.counters.collected, granted: lease.leases[0].sessionId === other.sessionId }));
      klock.close();
    })().catch((e) => { console.error(e); process.exit(1); });
    `,
    { args: ['--expose-gc'] },
  );
  assert.equal(child.status, 0, child.stderr);
  assert.deepEqual(JSON.parse(child.stdout), { before: 1, collected: 1, granted: true });
});

test('a collected Lease frees its resource; a reachable one is still heartbeated (--expose-gc)', () => {
  const child = runChild(
    `
    const { Klock } = client;
    (async () => {
      const klock = new Klock({ seed: 1 });
      const s = await klock.session('alice');
      // TTLs long enough that a loaded machine (shared cores) still renews in time.
      const kept = await s.lease('MUTATES FILE:/kept', { ttlMs: 300 });
      await (async () => { await s.lease('MUTATES FILE:/dropped', { ttlMs: 300 }); })();
      for (let i = 0; i < 10; i++) { globalThis.gc(); await new Promise((r) => setTimeout(r, 10)); }
      await new Promise((r) => setTimeout(r, 1000));
      const holders = (r) => klock.resourceState(r).holders.length;
      console.log(JSON.stringify({ kept: kept.held && holders('FILE:/kept'), dropped: holders('FILE:/dropped') }));
      klock.close();
    })().catch((e) => { console.error(e); process.exit(1); });
    `,
    { args: ['--expose-gc'] },
  );
  assert.equal(child.status, 0, child.stderr);
  assert.deepEqual(JSON.parse(child.stdout), { kept: 1, dropped: 0 });
});

test('Leases dropped unreleased within one job, among many released ones, are released once collected (--expose-gc)', () => {
  // A Lease is registered for collection when the event loop turns (released ones never
  // are): those made and dropped in a loop of microtasks are registered after it and then
  // collected like any other.
  const child = runChild(
    `
    const { Klock } = client;
    (async () => {
      const klock = new Klock({ seed: 1 });
      const s = await klock.session('leaker');
      for (let i = 0; i < 1000; i++) {
        (await s.lease('MUTATES FILE:/block')).release();
        if (i % 200 === 0) await s.lease('MUTATES FILE:/dropped/' + i, { ttlMs: 60000 }); // dropped
      }
      const before = klock.stats().activeLeases;
      for (let i = 0; i < 20 && klock.counters.collected < 5; i++) {
        globalThis.gc();
        await new Promise((r) => setTimeout(r, 20));
      }
      console.log(JSON.stringify({ before, collected: klock.counters.collected, after: klock.stats().activeLeases }));
      klock.close();
    })().catch((e) => { console.error(e); process.exit(1); });
    `,
    { args: ['--expose-gc'] },
  );
  assert.equal(child.status, 0, child.stderr);
  assert.deepEqual(JSON.parse(child.stdout), { before: 5, collected: 5, after: 0 });
});

test("a release that settles the lease's expiry raises LeaseLost (test clock)", { timeout: 20_000 }, async () => {
  const { klock, clock } = fakeKlock();
  const events = recordEvents(klock);
  const s = await klock.session('alice');
  const lease = await s.lease('MUTATES FILE:/x', { ttlMs: 100 });
  clock.t = 250; // paused past the TTL: no call, no timer ran
  assert.throws(
    () => lease.release(),
    (e) => e instanceof LeaseLost && e.name === 'LEASE_EXPIRED' && e.code === ERROR_CODES.LEASE_EXPIRED,
  );
  assert.ok(
    events.some((e) => e.event === 'LEASE_EXPIRED'),
    'the kernel recorded the expiry',
  );
  assert.equal(lease.lost.name, 'LEASE_EXPIRED');
  lease.release(); // idempotent: reported once

  // withLease: the block's own release is what settles the expiry.
  await assert.rejects(
    s.withLease(
      'MUTATES FILE:/y',
      () => {
        clock.t += 1000;
      },
      { ttlMs: 100 },
    ),
    (e) => e instanceof LeaseLost && e.name === 'LEASE_EXPIRED',
  );
  // A nested block sharing the kernel lease: its release settles the expiry too.
  const outer = await s.lease('MUTATES FILE:/z', { ttlMs: 100 });
  await assert.rejects(
    s.withLease(
      'MUTATES FILE:/z',
      () => {
        clock.t += 1000;
      },
      { ttlMs: 100 },
    ),
    (e) => e instanceof LeaseLost && e.name === 'LEASE_EXPIRED',
  );
  assert.ok(outer.lost instanceof LeaseLost);
  // A callback's own error wins over the loss.
  const boom = new Error('boom');
  await assert.rejects(
    s.withLease(
      'MUTATES FILE:/w',
      () => {
        clock.t += 1000;
        throw boom;
      },
      { ttlMs: 100 },
    ),
    (e) => e === boom,
  );
  klock.close();
});

test(
  'a long synchronous callback blocks the event loop past the TTL: withLease raises LeaseLost (real clock)',
  { timeout: 20_000 },
  async () => {
    const klock = new Klock({ seed: 1 });
    const s = await klock.session('alice');
    await assert.rejects(
      s.withLease(
        'MUTATES FILE:/x',
        () => {
          const until = Date.now() + 200;
          while (Date.now() < until); // no timer, no heartbeat can run
          return 'done';
        },
        { ttlMs: 50 },
      ),
      (e) => e instanceof LeaseLost && e.name === 'LEASE_EXPIRED',
    );
    assert.equal(klock.stats().counters.expired, 1);
    klock.close();
  },
);

test('error classes: the same names as the Python client; Closed is exported', { timeout: 20_000 }, async () => {
  const { Closed } = require('../client.js');
  assert.equal(typeof Closed, 'function');
  const closed = new Closed('this Klock is closed');
  assert.ok(closed instanceof KlockError);
  assert.ok(closed instanceof Error);
  assert.equal(closed.name, 'CLOSED');
  assert.equal(closed.code, 0);
  assert.equal(closed.message, 'this Klock is closed');
  assert.equal(new Died('m', 5, [1]).name, 'DIE');
  assert.equal(new Timeout('m', [1]).name, 'TIMEOUT');
  assert.equal(new LeaseLost('LEASE_EXPIRED', 'm', [1]).code, ERROR_CODES.LEASE_EXPIRED);
  for (const cls of [LeaseLost, Died, Timeout, Closed]) assert.ok(cls.prototype instanceof KlockError, cls.name);
});

test('Klock.close() ends waiting and backing-off acquisitions promptly, withdraws their tickets, and the process exits', () => {
  const child = runChild(`
    const { Klock, Closed } = client;
    (async () => {
      const klock = new Klock({ seed: 1, backoffBaseMs: 8000, backoffCapMs: 8000 });
      const older = await klock.session('older');
      const holder = await klock.session('holder');
      const younger = await klock.session('younger');
      await holder.lease('MUTATES FILE:/x');
      const waiting = older.lease('MUTATES FILE:/x', { timeoutMs: Infinity }); // WAIT ticket
      const backingOff = younger.lease('MUTATES FILE:/x'); // DIE: sleeps >= 8 s
      await new Promise((r) => setTimeout(r, 50));
      const tickets = klock.kernel.snapshot(klock.now()).tickets.length;
      const t0 = Date.now();
      klock.close();
      const outcomes = await Promise.allSettled([waiting, backingOff]);
      const ms = Date.now() - t0;
      const after = klock.kernel.snapshot(klock.now()).tickets.length;
      console.log(JSON.stringify({
        tickets, after, prompt: ms < 1000,
        closed: outcomes.map((o) => o.status === 'rejected' && o.reason instanceof Closed && o.reason.message.startsWith('this Klock is closed')),
      }));
    })().catch((e) => { console.error(e); process.exit(1); });
  `);
  assert.equal(child.status, 0, child.stderr);
  assert.deepEqual(JSON.parse(child.stdout), { tickets: 1, after: 0, prompt: true, closed: [true, true] });
  assert.ok(child.ms < 5000, `the process took ${child.ms} ms to exit`);
});

test(
  'timeoutMs: Infinity waits with no client-side limit; bad values are RangeErrors naming timeoutMs',
  { timeout: 20_000 },
  async () => {
    const { klock, clock } = fakeKlock({ defaultWaitTimeoutMs: 1000 });
    const older = await klock.session('older');
    const younger = await klock.session('younger');
    const held = await younger.lease('MUTATES FILE:/x', { ttlMs: 300_000 });
    const pending = older.lease('MUTATES FILE:/x', { timeoutMs: Infinity });
    assert.equal(await inProcessState(pending), 'pending');
    const [ticket] = klock.snapshot().tickets;
    assert.equal(ticket.deadline, Number.MAX_SAFE_INTEGER, 'the largest wait the addon takes');
    clock.t = 250_000; // far past the kernel's default wait (1 s here)
    klock.snapshot();
    assert.equal(await inProcessState(pending), 'pending');
    assert.equal(klock.counters.timeouts, 0);
    assert.equal(klock.counters.waits, 1, 'one wait, never timed out and asked again');
    held.release();
    assert.ok((await pending).held);
    for (const bad of [NaN, -1, 1.5, 2 ** 53, -Infinity]) {
      await assert.rejects(older.lease('MUTATES FILE:/y', { timeoutMs: bad }), (e) => {
        assert.ok(e instanceof RangeError, String(e));
        assert.equal(e.code, 'ERR_OUT_OF_RANGE');
        assert.match(e.message, /timeoutMs/);
        assert.match(e.message, /9007199254740991/);
        assert.match(e.message, /Infinity/);
        return true;
      });
    }
    await assert.rejects(older.lease('MUTATES FILE:/y', { timeoutMs: '5' }), {
      name: 'TypeError',
      code: 'ERR_INVALID_ARG_TYPE',
    });
    klock.close();
  },
);

test(
  'a lease at its lifetime cap: heartbeats stop (no busy loop) and it is lost at the cap (real clock)',
  { timeout: 20_000 },
  async () => {
    // A TTL long enough that a renewal a busy CI machine delays by 200 ms still comes in time:
    // what is checked is the cap, not the scheduler (at 90 ms this failed under load).
    const klock = new Klock({ seed: 1, maxLeaseLifetimeMs: 1_000 });
    const s = await klock.session('alice');
    let beats = 0;
    const heartbeat = klock.kernel.heartbeat.bind(klock.kernel);
    klock.kernel.heartbeat = (...args) => {
      beats++;
      return heartbeat(...args);
    };
    const lease = await s.lease('MUTATES FILE:/x', { ttlMs: 300 });
    const grantedAt = klock.now();
    const keepAlive = setInterval(() => {}, 1000); // the Klock's timer is unref'd
    await new Promise((resolve) => lease.signal.addEventListener('abort', resolve, { once: true }));
    clearInterval(keepAlive);
    assert.equal(lease.lost.name, 'LEASE_EXPIRED');
    assert.ok(klock.now() - grantedAt >= 990, 'renewed up to the cap');
    assert.ok(beats >= 3 && beats <= 20, `${beats} heartbeats`);
    assert.throws(() => lease.release(), LeaseLost);
    assert.equal(klock.timerError, null);
    klock.close();
  },
);

// ---- clocks: every time the client uses comes from its clock ----------------------------------

test('ManualClock runs timers in time order, each at its own time; jump runs none', { timeout: 20_000 }, () => {
  const { ManualClock } = require('../client.js');
  const clock = new ManualClock(5);
  const seen = [];
  clock.setTimer(30, () => seen.push(['b', clock.now()]));
  clock.setTimer(10, () => seen.push(['a', clock.now()]));
  const dropped = clock.setTimer(20, () => seen.push(['dropped', clock.now()]));
  clock.clearTimer(dropped);
  clock.clearTimer(dropped); // harmless
  clock.setTimer(30, () => clock.setTimer(35, () => seen.push(['set by a callback', clock.now()])));
  assert.equal(clock.nextTimer(), 10);
  clock.jump(10); // a paused process: time passes, nothing runs
  assert.deepEqual(seen, []);
  assert.equal(clock.now(), 15);
  clock.advance(0); // the overdue timer runs now, late
  assert.deepEqual(seen, [['a', 15]]);
  clock.advance(25);
  assert.deepEqual(seen, [
    ['a', 15],
    ['b', 30],
    ['set by a callback', 35],
  ]);
  assert.equal(clock.now(), 40);
  assert.equal(clock.nextTimer(), null);
  for (const bad of [-1, 1.5, '5']) {
    assert.throws(() => clock.advance(bad), /`ms`/);
    assert.throws(() => clock.setTimer(bad, () => {}), /`at`/);
  }
  assert.throws(() => clock.setTimer(1, 'later'), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' });
  assert.equal(clock.now(), 40);
});

test(
  'a Klock on a ManualClock: backoffs, waits and timeouts end when the test advances the clock, never by real time',
  { timeout: 20_000 },
  async () => {
    const { ManualClock } = require('../client.js');
    const clock = new ManualClock();
    const klock = new Klock({ seed: 4, backoffBaseMs: 100, clock }); // DIE backoffs 178, then 204 ms
    assert.equal(klock.clock, clock);
    const older = await klock.session('older');
    const young = await klock.session('young');
    const waiter = await klock.session('waiter');
    const held = await older.lease('MUTATES FILE:/x');
    const pending = young.lease('MUTATES FILE:/x', { timeoutMs: 10_000 });
    await sleep(30);
    assert.equal(await inProcessState(pending), 'pending');
    assert.equal(clock.nextTimer(), 178);
    clock.advance(178); // retried at 178, and died again
    await sleep(0);
    assert.equal(klock.counters.deaths, 2);
    assert.equal(clock.nextTimer(), 382);
    held.release();
    clock.advance(204);
    const lease = await pending;
    assert.equal(lease.leases[0].acquiredAt, 382);
    lease.release();
    const again = await young.lease('MUTATES FILE:/x'); // a new unit of work: young is now the youngest
    const timingOut = waiter.lease('MUTATES FILE:/x', { timeoutMs: 300 });
    assert.equal(klock.counters.waits, 1);
    clock.advance(299);
    assert.equal(await inProcessState(timingOut), 'pending');
    clock.advance(1);
    await assert.rejects(timingOut, Timeout);
    assert.equal(clock.now(), 682);
    again.release();
    klock.close();
  },
);

test('a Klock takes a clock object or a function, and names a bad one', { timeout: 20_000 }, async () => {
  const { SystemClock } = require('../client.js');
  for (const bad of [5, null, {}, { now() {}, setTimer() {} }]) {
    assert.throws(() => new Klock({ clock: bad }), {
      name: 'TypeError',
      code: 'ERR_INVALID_ARG_TYPE',
      message: /options\.clock/,
    });
  }
  let reading = 1.5;
  const klock = new Klock({ clock: () => reading });
  assert.ok(klock.clock instanceof SystemClock);
  await assert.rejects(klock.session('a'), { name: 'RangeError', message: /clock\.now\(\)/ });
  reading = 7;
  assert.equal(klock.now(), 7);
  klock.close();
  assert.throws(() => new SystemClock(5), { name: 'TypeError' });
  // A SystemClock timer far away never fires early, and clearing it stops it.
  const system = new SystemClock();
  let fired = 0;
  const timer = system.setTimer(system.now() + 2 ** 40, () => fired++);
  timer.unref();
  const soon = system.setTimer(system.now() + 20, () => fired++);
  system.clearTimer(soon);
  await sleep(60);
  assert.equal(fired, 0);
  system.clearTimer(timer);
  let late = 0;
  system.setTimer(system.now() + 10, () => late++);
  await sleep(60);
  assert.equal(late, 1);
});

test(
  'a failing timer is exposed in timerError and tries again later, not in a busy loop',
  { timeout: 20_000 },
  async () => {
    const { ManualClock } = require('../client.js');
    const clock = new ManualClock();
    const klock = new Klock({ clock });
    const s = await klock.session('a');
    const lease = await s.lease('MUTATES FILE:/x', { ttlMs: 300 });
    const advance = klock.kernel.advance.bind(klock.kernel);
    let failures = 1;
    klock.kernel.advance = (now) => {
      if (failures-- > 0) throw new Error('boom');
      advance(now);
    };
    clock.advance(100); // the heartbeat's timer fires; settling time throws (a bug)
    assert.equal(klock.timerError?.message, 'boom');
    assert.equal(lease.expiresAt, 300);
    assert.equal(clock.nextTimer(), 150);
    clock.advance(50);
    assert.equal(lease.expiresAt, 450);
    assert.equal(lease.lost, null);
    lease.release();
    klock.close();
  },
);
