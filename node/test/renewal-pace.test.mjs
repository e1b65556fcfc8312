// A resync's renewals are paced (issue 27; the core's rule, core/src/client/renewals.rs, as
// client/tests/scale.rs and python/tests/test_renewal_pace.py): hundreds of sessions of one
// `connect()` each hold a lease against a durable `klock serve` whose connections per peer are
// capped at `MAX_RENEWALS_IN_FLIGHT + 8`; the server is SIGKILLed and restarted on its port and
// data file after the client's reconnect budget, so the event reader's poll gives up, its next
// answer may follow missed events (the core's rule), and the client resyncs every session at
// once (a reconcile, then a heartbeat, each).
// Checked: every lease held and renewed by the restarted server (a heartbeat each answered
// OK), none lost; no connection closed or refused at the per-peer cap; and never more than
// `MAX_RENEWALS_IN_FLIGHT` renewals (heartbeats and the resync's reconciles) in flight at once,
// each heartbeat's send time (where its local deadline counts from) taken when its turn comes.
// Bounded: about 15 s in a debug build.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import { startServer } from './server.mjs';

const require = createRequire(import.meta.url);
const { connect } = require('../client.js');
const { MAX_RENEWALS_IN_FLIGHT } = require('../index.js');

const SESSIONS = 400;
/** No renewal falls due on its schedule during the test: every renewal it sees is the resync's. */
const TTL_MS = 240_000;
/** The client's reconnect budget: a call gives up once the server has been away this long. */
const RECONNECT_MS = 1500;
/**
 * How long the server stays away: longer than the budget, so the event reader's poll gives up
 * and its next answer has every session resynced (a server back within the budget, on the same
 * data file, kept every event after the cursor: nothing to resync, as in Python's
 * test_renewal_pace.py and Rust's client/tests/scale.rs).
 */
const DOWN_MS = 3500;
/** How long after the restart every lease must have been renewed (generous: a loaded machine). */
const BURST_MS = 30_000;
/** Room under the per-peer cap for the client's event reader and this test's reads of /metrics. */
const ROOM = 8;
/** How much older than the moment a heartbeat goes its send time may be (the time to call it). */
const LAG_MS = 50;

const dir = mkdtempSync(join(tmpdir(), 'klock-node-pace-'));
let running = null;
after(async () => {
  await running?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** The sum of the samples of `name` (those whose labels contain `label`) in /metrics. */
async function metric(url, name, label = '') {
  const text = await (await fetch(`${url}/metrics`)).text();
  let total = 0;
  for (const line of text.split('\n')) {
    const m = new RegExp(`^${name}(\\{.*\\})? (\\S+)$`).exec(line);
    if (m !== null && (m[1] ?? '').includes(label)) total += Number(m[2]);
  }
  return total;
}

/**
 * Counts the backend's renewals in flight (heartbeats, reconciles, ticket polls), and the most
 * at once; and
 * notes when each lease's last heartbeat went (`sent`: lease id -> the client's clock).
 */
function countRenewals(kernel) {
  const flight = { now: 0, most: 0, sent: new Map() };
  const request = kernel._request.bind(kernel);
  kernel._request = async (method, path, options) => {
    const renewal = /\/(heartbeat|reconcile|tickets\/\d+\?wait_ms=0)$/.test(path);
    if (renewal) flight.most = Math.max(flight.most, ++flight.now);
    if (path.endsWith('/heartbeat')) for (const id of options.body.lease_ids) flight.sent.set(id, kernel._clock.now());
    try {
      return await request(method, path, options);
    } finally {
      if (renewal) flight.now--;
    }
  };
  return flight;
}

test('after a restart, hundreds of leases renew paced and all survive', async () => {
  assert.equal(MAX_RENEWALS_IN_FLIGHT, 32); // the core's number
  const cap = MAX_RENEWALS_IN_FLIGHT + ROOM;
  const args = ['--data', join(dir, 'klock.redb'), '--max-connections-per-peer', String(cap)];
  running = await startServer(args);
  const { port } = running;
  const k = connect(running.url, { namespace: 'pace', reconnectTimeoutMs: RECONNECT_MS });
  const flight = countRenewals(k.kernel);
  const leases = [];
  try {
    for (let i = 0; i < SESSIONS; i += 50) {
      const batch = Array.from({ length: 50 }, async (_, j) => {
        const session = await k.session(`agent-${i + j}`);
        return session.lease(`MUTATES FILE:/pace/${i + j}`, { ttlMs: TTL_MS });
      });
      leases.push(...(await Promise.all(batch)));
    }
    assert.equal(flight.most, 0); // nothing renewed yet: every renewal below is the resync's

    await running.kill('SIGKILL'); // a crash
    await new Promise((resolve) => setTimeout(resolve, DOWN_MS));
    running = await startServer(args, { port }); // the same port and data file
    const back = performance.now();

    // Every lease renewed by the restarted server (its own count of heartbeats answered OK:
    // a resync's renewal moves the local deadline, not `lease.expiresAt`), none lost.
    const renewed = () => metric(running.url, 'klock_http_requests_total', '/heartbeat",status="200"');
    let heartbeats = 0;
    while (performance.now() - back < BURST_MS) {
      heartbeats = await renewed();
      if (heartbeats >= SESSIONS || leases.some((lease) => !lease.held)) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const took = performance.now() - back;
    // The server counted the last answers: let the client take them in.
    while (flight.now > 0 && performance.now() - back < BURST_MS)
      await new Promise((resolve) => setTimeout(resolve, 20));
    const lost = leases.flatMap((lease, i) => (lease.held ? [] : [i]));
    assert.deepEqual(lost.slice(0, 5), [], `${lost.length} leases lost after the restart: ${leases[lost[0]]?.lost}`);
    assert.ok(heartbeats >= SESSIONS, `only ${heartbeats} of ${SESSIONS} leases renewed within ${BURST_MS} ms`);
    const evicted = await metric(running.url, 'klock_connections_closed_total', '"evicted_idle"');
    const refused = await metric(running.url, 'klock_connections_closed_total', '"too_many_connections_from_peer"');
    const accepted = await metric(running.url, 'klock_connections_accepted_total');
    console.log(
      `burst: ${SESSIONS} leases renewed ${Math.round(took)} ms after the restart; ${heartbeats} heartbeats ` +
        `answered 200, ${accepted} connections accepted, ${evicted} evicted at the cap of ${cap}, ${refused} ` +
        `refused; at most ${flight.most} renewals in flight`,
    );
    // Paced: the burst stayed under the per-peer cap, which closed or refused nothing.
    assert.deepEqual([evicted, refused], [0, 0], 'connections closed at the per-peer cap (evicted, refused)');
    assert.ok(
      flight.most >= 1 && flight.most <= MAX_RENEWALS_IN_FLIGHT,
      `${flight.most} renewals in flight at once, more than ${MAX_RENEWALS_IN_FLIGHT}`,
    );
    // Each renewal's local deadline counts from when it went, not from when it fell due (the
    // last of 400 waits about a second for its turn).
    let lag = 0;
    for (const [id, held] of k.kernel._leases) lag = Math.max(lag, flight.sent.get(id) - (held.deadline - held.ttlMs));
    assert.ok(lag <= LAG_MS, `a send time ${lag} ms old`);
    assert.equal(await metric(running.url, 'klock_active_leases'), SESSIONS);

    for (let i = 0; i < SESSIONS; i += 50) await Promise.all(leases.slice(i, i + 50).map((lease) => lease.release()));
    assert.equal(await metric(running.url, 'klock_active_leases'), 0);
  } finally {
    await k.close();
  }
});
