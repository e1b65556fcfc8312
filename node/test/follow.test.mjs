// How the remote client follows its namespace's event stream (the core's `Follow`, through the
// addon's `Follow`), against real `klock serve --memory` processes in real time:
// - the stream starts at the log entry that opened the client's first session (its
//   `Klock-Index`), so a grant that happens before the reader's first poll reaches the server
//   (held back at a link, not failed) is still read from the stream, long before the ticket's
//   own refresh would find it; a stream started later (at the newest event when it first
//   polls, say) misses it;
// - an answer with a `gap` (the server dropped events the reader had not read: its byte
//   budget) has every held lease renewed at once, so a wound the dropped events told is learnt
//   then, not at the renewal due a third of the TTL after the grant. The reader is kept from
//   polling by a watcher of the client's events that blocks the event loop while another
//   process wounds and bursts (it runs inside the reader's hand-over of an answer), so no poll
//   fails and only the gap can say events were missed;
// - a `--memory` server restarted on its port starts a new log, whose entries begin below the
//   stream's cursor: the stream names its cursor's log (`log=`), the server reads it from its
//   log's start, and a session opened there hears of its wound through the stream, long before
//   its renewal would tell;
// - a poll right after a failed one asks with `wait_ms=0` (the core's `waitMs`): its answer is
//   the one that has the held leases renewed;
// - which leases an event ends is the core's rule (the addon's `ends`), for the kernel's events
//   and the remote client's alike, and a lease an event of the stream ends no longer has a
//   local deadline; a lease lost at its local deadline is named by the core
//   (`LOST_AT_LOCAL_DEADLINE`: `LEASE_EXPIRED`).
// Every wait is bounded.

import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { startServer, openLink, within } from './server.mjs';

const require = createRequire(import.meta.url);
const { connect } = require('../client.js');
const { Kernel, Follow, ends, LOST_AT_LOCAL_DEADLINE } = require('../index.js');

const servers = [];
after(async () => {
  for (const s of servers) await s.stop();
});

async function server(args, options) {
  const s = await startServer(args, options);
  servers.push(s);
  return s;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

test('a poll right after a failed one is not held for an event', () => {
  // The core's rule, through the addon: the answer after a failed poll is the resync's.
  const follow = new Follow(3);
  assert.equal(follow.waitMs(10_000), 10_000);
  follow.failed();
  assert.equal(follow.waitMs(10_000), 0);
  assert.equal(follow.answered(0, '3.0', false), true);
  assert.equal(follow.waitMs(10_000), 10_000);
});

test("ends is the core's rule for kernel and remote events", () => {
  const k = new Kernel({ policy: 'wound_wait' });
  const old = k.openSession('old', 'default', 0).sessionId;
  const young = k.openSession('young', 'default', 0).sessionId;
  const [a, b] = k.acquire(young, ['MUTATES FILE:/a', 'MUTATES FILE:/b'], { ttlMs: 1000 }, 1).leases;
  k.acquire(old, ['MUTATES FILE:/a'], null, 2); // wounds the younger holder
  const byKind = Object.fromEntries(k.drainEvents().map((e) => [e.event, e]));
  assert.equal(ends(byKind.ACQUIRED), null);
  assert.deepEqual(ends(byKind.WOUNDED), { leases: [a.leaseId, b.leaseId], name: 'WOUNDED' });
  k.advance(1e6);
  const expired = k.drainEvents().filter((e) => e.event === 'LEASE_EXPIRED');
  assert.ok(expired.length > 0);
  for (const e of expired) assert.deepEqual(ends(e), { leases: [e.lease], name: 'LEASE_EXPIRED' });
  // The remote client's events (camelCase, as remote.js makes them).
  assert.deepEqual(ends({ event: 'LEASE_EXPIRED', session: 1, lease: 7 }), { leases: [7], name: 'LEASE_EXPIRED' });
  assert.deepEqual(ends({ event: 'WOUNDED', session: 1, lostLeases: [3, 4] }), { leases: [3, 4], name: 'WOUNDED' });
  assert.deepEqual(ends({ event: 'WOUNDED', session: 1 }), { leases: [], name: 'WOUNDED' });
  assert.deepEqual(ends({ event: 'SESSION_CLOSED', session: 1, reason: 'IDLE' }), {
    leases: null,
    name: 'SESSION_CLOSED',
  });
  for (const event of ['GRANTED', 'ACQUIRED', 'RELEASED', 'WAIT_TIMEOUT', 'DIED', 'LEASE_LOST']) {
    assert.equal(ends({ event, session: 1, lease: 7, lostLeases: [7] }), null, event);
  }
  // Bad fields are named.
  assert.throws(() => ends({ event: 'LEASE_EXPIRED', lease: '7' }), { name: 'TypeError', message: /event\.lease/ });
  assert.throws(() => ends({ event: 'WOUNDED', lostLeases: [1, -2] }), {
    name: 'RangeError',
    message: /event\.lostLeases\[1\]/,
  });
  assert.throws(() => ends({ event: 7 }), { name: 'TypeError', message: /event\.event/ });
  assert.throws(() => ends(null), { name: 'TypeError' });
  assert.equal(LOST_AT_LOCAL_DEADLINE, 'LEASE_EXPIRED');
});

test('an event that ends a lease drops its local deadline', async () => {
  const s = await server(['--memory', '--config', 'policy=wound_wait']);
  const direct = connect(s.url);
  const k = connect(s.url);
  try {
    const older = await direct.session('older');
    const younger = await k.session('younger');
    const held = await younger.lease(['MUTATES FILE:/x']);
    const [leaseId] = held.leaseIds;
    assert.notEqual(k.kernel.deadline(leaseId), undefined, 'a held lease has a local deadline');
    const lost = new Promise((resolve) => held.signal.addEventListener('abort', () => resolve(held.signal.reason)));
    const taken = await older.lease(['MUTATES FILE:/x']); // wounds the holder: a WOUNDED on the stream
    const loss = await within(8_000, lost, 'the wound heard');
    assert.equal(loss.name, 'LEASE_RELEASED', String(loss));
    // Its local deadline is gone with it: nothing is left for the timer.
    assert.equal(k.kernel.deadline(leaseId), undefined);
    assert.equal(k.kernel.nextDeadline(), null);
    await taken.release();
  } finally {
    await k.close();
    await direct.close();
  }
});

test("a grant before the reader's first poll is read from the stream", async () => {
  // Under wound_wait the younger session waits for the older holder (under wait_die it dies).
  const s = await server(['--memory', '--config', 'policy=wound_wait']);
  const link = await openLink(s.port);
  const direct = connect(s.url);
  let k;
  try {
    const holder = await direct.session('holder');
    const held = await holder.lease(['MUTATES FILE:/x']);
    // Every event poll of the client waits at the link: its first one reaches the server only
    // after the grant below.
    link.hold(/^GET \/v1\/ns\/default\/watch/);
    k = connect(link.url);
    const late = await k.session('late');
    let granted = false;
    const waiting = late.lease(['MUTATES FILE:/x'], { timeoutMs: 30_000 }).then((lease) => {
      granted = true;
      return lease;
    });
    const queued = async () => {
      while ((await direct.resourceState('FILE:/x')).waiting.length === 0) await sleep(20);
    };
    await within(10_000, queued(), 'the waiter queuing');
    await held.release(); // the grant: an event of a later entry
    await sleep(300);
    assert.equal(granted, false, 'granted before any poll read the grant');
    link.release();
    // The ticket's own refresh comes a third of the TTL (20 s) after its acquire: only the
    // stream can tell the grant this soon.
    const lease = await within(5_000, waiting, 'the grant read from the stream');
    await lease.release();
  } finally {
    link.release();
    await k?.close();
    await direct.close();
    await link.close();
  }
});

/** Wounds session `id` (older than the holder of FILE:/x) onto FILE:/x, then makes 200 events. */
const WOUND_AND_BURST = `
const [url, id, token] = process.argv.slice(1);
const headers = { 'content-type': 'application/json', 'klock-session-token': token };
const post = async (tail, body) => {
  const r = await fetch(url + '/v1/ns/default/sessions/' + id + tail, { method: 'POST', headers, body: JSON.stringify(body) });
  const answer = await r.json();
  if (!r.ok) throw new Error(tail + ': ' + JSON.stringify(answer));
  return answer;
};
(async () => {
  const wound = await post('/acquire', { intents: ['MUTATES FILE:/x'] });
  if (wound.verdict !== 'GRANTED') throw new Error('the wound: ' + JSON.stringify(wound));
  for (let i = 0; i < 100; i++) {
    const burst = await post('/acquire', { intents: ['MUTATES FILE:/burst'] });
    await post('/release', { lease_ids: burst.leases.map((l) => l.lease_id) });
  }
})().catch((e) => { console.error(e); process.exit(1); });
`;

test('a gap renews the held leases at once', async () => {
  // A budget of a few events: a burst of others' events drops the wound that concerns us.
  const s = await server(['--memory', '--config', 'policy=wound_wait', '--event-bytes', '4096']);
  // The oldest session, opened before the client's, by hand: the other process wounds with it.
  const opened = await fetch(`${s.url}/v1/ns/default/sessions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ agent_id: 'oldest' }),
  });
  const oldest = await opened.json();
  const k = connect(s.url);
  try {
    const younger = await k.session('younger');
    const tripper = await k.session('tripper');
    const grantedAt = Date.now();
    const held = await younger.lease(['MUTATES FILE:/x']);
    let tripped = false;
    const stop = k._watch((event) => {
      const trip = event.event === 'ACQUIRED' && event.leases.some((l) => l.resource === 'FILE:/trip');
      if (!trip || tripped) return;
      tripped = true;
      // Synchronous: the reader cannot poll until the other process is done.
      execFileSync(process.execPath, ['-e', WOUND_AND_BURST, s.url, String(oldest.session_id), oldest.session_token], {
        timeout: 20_000,
      });
      assert.equal(held.lost, null, 'the loss cannot have been heard yet');
    });
    const trip = await tripper.lease(['MUTATES FILE:/trip']);
    const lost = new Promise((resolve) => held.signal.addEventListener('abort', () => resolve(held.signal.reason)));
    const loss = await within(8_000, lost, 'the loss learnt after the gap');
    assert.ok(tripped);
    assert.ok(Date.now() - grantedAt < 18_000, 'too slow to tell a resync from the renewal due at 20 s');
    // The renewal's answer (a wounded lease counts as released), not the local deadline's
    // LEASE_EXPIRED.
    assert.equal(loss.name, 'LEASE_RELEASED', String(loss));
    stop();
    await trip.release();
  } finally {
    await k.close();
  }
});

test("after a --memory server's restart the stream reads the new log", async () => {
  const s = await server(['--memory', '--config', 'policy=wound_wait']);
  const k = connect(s.url, { reconnectTimeoutMs: 15_000 });
  try {
    const first = await k.session('first');
    // Entries push the stream's cursor past where a new log starts.
    for (let i = 0; i < 20; i += 1) await (await first.lease(['MUTATES FILE:/warm'])).release();
    const watch = k.kernel._watches.get('default');
    const log = watch.follow.log;
    assert.match(log, /^[0-9a-f]{32}$/);
    await s.stop();
    const again = await server(['--memory', '--config', 'policy=wound_wait'], { port: s.port });
    // On the new log: an older session of another client, then this client's younger one.
    const direct = connect(again.url);
    try {
      const older = await direct.session('older');
      const younger = await k.session('younger');
      const grantedAt = Date.now();
      const held = await younger.lease(['MUTATES FILE:/x']);
      const lost = new Promise((resolve) => held.signal.addEventListener('abort', () => resolve(held.signal.reason)));
      // Wound-Wait: the older session takes /x; the WOUNDED is an early entry of the new log,
      // below the old cursor.
      await (await older.lease(['MUTATES FILE:/x'])).release();
      const loss = await within(8_000, lost, 'the loss heard through the stream of the new log');
      assert.ok(Date.now() - grantedAt < 18_000, 'too slow to tell from the renewal due at 20 s');
      assert.ok(loss instanceof Error, String(loss));
      assert.notEqual(watch.follow.log, log);
      assert.notEqual(watch.follow.log, null);
    } finally {
      await direct.close();
    }
  } finally {
    await k.close();
  }
});
