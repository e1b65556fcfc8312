// The remote client over several server URLs (node/remote.js, the core's client::failover
// rules through the addon's Servers/Attempts): against a real three-process cluster
// (`startCluster`), a `withLease` block survives a SIGKILL of the leader and an older
// session's waiting ticket is granted through a survivor; a client on a follower goes to the
// leader once an answer names it; a list whose every node is down
// rejects with `Unreachable` naming the URLs; a bad URL in a list is refused by name. Every
// test is bounded (node --test-timeout, and timeouts here).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { startCluster, startServer, freePort, within } from './server.mjs';

const require = createRequire(import.meta.url);
const { connect, Unreachable } = require('../client.js');
const { Servers } = require('../index.js');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

test('a withLease block survives the leader killed; a waiting ticket is then granted a higher fence', async () => {
  const started = Date.now();
  const cluster = await startCluster();
  let holder;
  let waiter;
  try {
    const leader = await cluster.leader();
    // The leader first: the clients' calls and event readers start there.
    const urls = [cluster.urls[leader], ...cluster.urls.filter((_, i) => i !== leader)];
    holder = connect(urls, { reconnectTimeoutMs: 15_000 });
    // One string of URLs; the waiter's event reader starts on the leader too, so its grant
    // is heard through a survivor.
    waiter = connect(urls.join(','), { reconnectTimeoutMs: 15_000 });
    // The waiter's session is the older: its acquire waits on a ticket (a younger one would
    // be told to die and ask again), so only its event reader (or its ticket's poll after a
    // switch of node) tells it of the grant.
    const elder = await waiter.session('waiter');
    const s = await holder.session('holder');
    let waiting;
    let fence;
    let killedAt;
    // A TTL well above an election plus a 503's Retry-After (the renewal due while the
    // cluster has no leader waits that long), even on a loaded machine; far below the bound.
    const ended = await s.withLease(
      'MUTATES FILE:/x',
      async (lease) => {
        fence = lease.fence;
        waiting = elder.withLease('MUTATES FILE:/x', async (l) => l.fence, { timeoutMs: 30_000 });
        waiting.catch(() => {}); // awaited below
        for (let waited = 0; waiter.counters.waits < 1; waited += 50) {
          assert.ok(waited < 10_000, 'the waiter waits on a ticket');
          await sleep(50);
        }
        await cluster.kill(leader);
        killedAt = Date.now();
        const before = lease.expiresAt;
        // Longer than the TTL: the lease lives only if renewals reach a survivor.
        await sleep(9000);
        assert.ok(lease.held, String(lease.lost));
        assert.ok(lease.expiresAt > before, 'no renewal through a survivor');
        assert.notEqual(holder.kernel._servers.preferred, 0);
        return 'ended';
      },
      { ttlMs: 8000 },
    );
    // The block ended normally (no LeaseLost) and its release was answered.
    assert.equal(ended, 'ended');
    const got = await within(20_000, waiting, 'the waiting block');
    assert.ok(got > fence, `${got} after ${fence}`);
    assert.equal(holder.counters.lost + waiter.counters.lost, 0);
    assert.ok(Date.now() - killedAt < 30_000);
  } finally {
    await holder?.close();
    await waiter?.close();
    await cluster.stop();
  }
  assert.ok(Date.now() - started < 50_000);
});

test('a client on a follower goes to the leader once an answer names it', async () => {
  const cluster = await startCluster();
  let client;
  try {
    const leader = await cluster.leader();
    const follower = (leader + 1) % 3;
    client = connect([cluster.urls[follower], cluster.urls[leader]], { reconnectTimeoutMs: 15_000 });
    const servers = client.kernel._servers;
    // The follower answers first (connect's own calls, then these), naming the leader.
    const s = await client.session('named');
    // A follower heard from its leader lately names it: calls until one does, bounded.
    const started = Date.now();
    while (servers.preferred === 0) {
      assert.ok(Date.now() - started < 15_000, 'no answer named the leader');
      await s.withLease('MUTATES FILE:/named', async () => {}, { ttlMs: 30_000 });
    }
    // The leader names none: the client stays there.
    for (let i = 0; i < 5; i++) await s.withLease('MUTATES FILE:/named', async () => {}, { ttlMs: 30_000 });
    assert.equal(servers.preferred, 1);
    await s.close();
  } finally {
    await client?.close();
    await cluster.stop();
  }
});

test('every node down: Unreachable naming each URL, after the budget', async () => {
  const dead = [];
  for (let i = 0; i < 3; i++) dead.push(`http://127.0.0.1:${await freePort()}`);
  const saved = process.env.KLOCK_SERVER;
  process.env.KLOCK_SERVER = dead.join(',');
  let k;
  try {
    k = connect(undefined, { reconnectTimeoutMs: 500 });
  } finally {
    if (saved === undefined) delete process.env.KLOCK_SERVER;
    else process.env.KLOCK_SERVER = saved;
  }
  const t0 = Date.now();
  await assert.rejects(within(5000, k.session('a'), 'session()'), (e) => {
    assert.ok(e instanceof Unreachable, String(e));
    for (const url of dead) assert.ok(e.message.includes(`${url}: connection refused`), e.message);
    assert.match(e.message, /reconnectTimeoutMs 500/);
    return true;
  });
  const took = Date.now() - t0;
  assert.ok(took > 300 && took < 3000, `${took} ms`);
  await k.close();
});

test('a dead node in the list is passed over', async () => {
  const s = await startServer();
  const dead = `http://127.0.0.1:${await freePort()}`;
  const k = connect([dead, s.url], { reconnectTimeoutMs: 5000 });
  try {
    const session = await k.session('over');
    assert.ok(await session.withLease('MUTATES FILE:/over', async (lease) => lease.held));
    assert.equal(k.kernel._servers.preferred, 1);
  } finally {
    await k.close();
    await s.stop();
  }
});

test('a bad URL in a list is refused by name', () => {
  for (const [url, named] of [
    [['http://127.0.0.1:1', 'ftp://127.0.0.1:2'], '"ftp://127.0.0.1:2"'],
    ['http://127.0.0.1:1,127.0.0.1:2', '"127.0.0.1:2"'],
    ['http://127.0.0.1:1,,http://127.0.0.1:2', 'got ""'],
    [['http://127.0.0.1:1', 7], 'got 7'],
  ]) {
    assert.throws(
      () => connect(url),
      (e) => {
        assert.equal(e.code, 'ERR_INVALID_ARG_VALUE');
        assert.match(e.message, /must be an http:\/\/ or https:\/\/ URL/);
        assert.ok(e.message.includes(named), e.message);
        return true;
      },
    );
  }
  assert.throws(() => connect(['http://127.0.0.1:1', 'http://127.0.0.1:1/']), /given twice/);
  assert.throws(() => connect([]), /empty array/);
});

test("the core's rules cross the addon as plain values (Servers, Attempts)", () => {
  const servers = new Servers(3);
  assert.deepEqual([servers.count, servers.preferred], [3, 0]);
  const call = servers.call(1000, 10_000);
  assert.deepEqual([call.node, call.endsMs], [0, 11_000]);
  assert.equal(call.attemptLimitMs(10_000, 5000), 1000);
  const after = (attempts, outcome, retryAfterMs, now) => ({ ...attempts.after(servers, outcome, retryAfterMs, now) });
  assert.deepEqual(after(call, 'unreachable', undefined, 1000), { what: 'retry', node: 1, ms: 0 });
  assert.deepEqual(after(call, 'unavailable', 2000, 1000), { what: 'retry', node: 2, ms: 0 });
  assert.deepEqual(after(call, 'unavailable', undefined, 1000), { what: 'retry', node: 0, ms: 50 });
  assert.deepEqual(after(call, 'busy', 700, 1050), { what: 'retry', node: 0, ms: 700 });
  assert.deepEqual(after(call, 'unreachable', undefined, 1750), { what: 'retry', node: 1, ms: 0 });
  assert.deepEqual(after(call, 'answered', undefined, 1760), { what: 'done', node: 1, ms: 0 });
  assert.equal(servers.preferred, 1);
  const once = servers.callOnce(0, 100);
  assert.deepEqual(after(once, 'unreachable', undefined, 0), { what: 'retry', node: 2, ms: 0 });
  assert.deepEqual(after(once, 'unreachable', undefined, 0), { what: 'retry', node: 0, ms: 0 });
  assert.deepEqual(after(once, 'unreachable', undefined, 0), { what: 'gave_up_unreachable', node: 0, ms: 0 });
  assert.deepEqual(after(servers.call(0, 100), 'busy', 1000, 0), { what: 'gave_up_busy', node: 1, ms: 0 });
  assert.throws(() => new Servers(0), { name: 'RangeError', message: /at least one server URL/ });
  assert.throws(() => servers.call(0, 1).after(servers, 'lost', undefined, 0), {
    name: 'RangeError',
    message: /outcome must be one of/,
  });
  assert.throws(() => servers.call(-1, 1), { name: 'RangeError' });
});
