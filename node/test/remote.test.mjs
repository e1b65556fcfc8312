// The remote backend against real `klock serve` processes, in real time: what only a remote
// client meets. A server restarted mid-lease (SIGKILL, restart on the same data file and
// port: the lease survives through the suspension grace, reconcile and a renewal), a server
// killed while a block waits (a clear Unreachable within the reconnect budget, never a hang), a
// wait whose grant went unheard and then left the server's event stream (asked again),
// a lost lease when the server goes silent (its local deadline), a wrong bearer token, an
// unreachable URL, two clients of one server, the fence helper with leases from it, and the
// Idempotency-Key of a retried request (against a stand-in server that cuts a connection).
// Every test is bounded (node --test-timeout, and timeouts here).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import { createServer } from 'node:net';
import { createServer as createHttpServer } from 'node:http';
import { createRequire } from 'node:module';
import { startServer, klockBin, openLink, within } from './server.mjs';

const require = createRequire(import.meta.url);
const { connect, KlockError, LeaseLost, Unreachable, fencedWrite, StaleFence } = require('../client.js');

const dir = mkdtempSync(join(tmpdir(), 'klock-node-remote-'));
const servers = [];
after(async () => {
  for (const s of servers) await s.stop();
  rmSync(dir, { recursive: true, force: true });
});

async function server(args = ['--memory'], options) {
  const s = await startServer(args, options);
  servers.push(s);
  return s;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

test('a lease block, a wait granted by an event, and two clients of one server', async () => {
  const s = await server();
  const one = connect(s.url);
  const two = connect(s.url);
  try {
    // Opened first and left alone: the oldest priority (a session that releases everything
    // starts a new unit of work with a fresh, youngest one, SPEC.md §5).
    const w = await one.session('w');
    const a = await one.session('a');
    const b = await two.session('b');
    const held = await a.lease(['MUTATES FILE:/x'], { ttlMs: 2000 });
    assert.ok(held.held);
    assert.equal(typeof held.fence, 'number');
    // b is younger: it DIEs and retries (the kernel's backoff) until a releases.
    const waiting = b.withLease('MUTATES FILE:/x', async (lease) => lease.fence, { timeoutMs: 10_000 });
    await sleep(300);
    await held.release();
    const fence = await within(10_000, waiting, 'the waiting block');
    assert.ok(fence > held.fence);
    // w is older than b: it waits (a ticket) and is granted by its GRANTED event.
    const blocker = await b.lease('MUTATES FILE:/y', { ttlMs: 2000 });
    const wait = w.lease('MUTATES FILE:/y', { timeoutMs: 10_000, ttlMs: 2000 });
    await sleep(200);
    assert.equal(one.counters.waits, 1);
    await blocker.release();
    const granted = await within(10_000, wait, 'the wait');
    assert.ok(granted.held);
    await granted.release();
    assert.equal(one.counters.lost + two.counters.lost, 0);
  } finally {
    await one.close();
    await two.close();
  }
});

test("heartbeats keep a lease past its TTL; expires_at is the server's", async () => {
  const s = await server();
  const k = connect(s.url);
  try {
    const session = await k.session('a');
    await session.withLease(
      'MUTATES FILE:/x',
      async (lease) => {
        const first = lease.expiresAt;
        await sleep(900); // three TTLs
        assert.ok(lease.held);
        assert.ok(lease.expiresAt > first + 500, `${lease.expiresAt} > ${first} + 500`);
        // A renewal every 100 ms can land (or be in flight) between the two reads: look for
        // a pair of reads with no renewal between them, where the two must agree. A client
        // whose expiresAt is not the server's never finds one.
        const seen = [];
        for (let attempt = 0; attempt < 20; attempt++) {
          const before = lease.expiresAt;
          const state = await k.resourceState('FILE:/x');
          seen.push([before, state.holders[0].expiresAt, lease.expiresAt]);
          if (seen.at(-1).every((value) => value === before)) break;
        }
        const [before, atServer, after] = seen.at(-1);
        assert.ok(before === atServer && atServer === after, `client, server, client: ${JSON.stringify(seen)}`);
      },
      { ttlMs: 300 },
    );
  } finally {
    await k.close();
  }
});

test("the server's errors are the in-process error classes and codes", async () => {
  const s = await server();
  const k = connect(s.url);
  try {
    const session = await k.session('a');
    await assert.rejects(session.lease('WRITES FILE:/x'), (e) => {
      assert.ok(e instanceof KlockError);
      assert.equal(e.name, 'INVALID_PREDICATE');
      assert.equal(e.code, 101);
      return true;
    });
    await assert.rejects(k.session(''), (e) => e instanceof KlockError);
  } finally {
    await k.close();
  }
});

test('server restarted mid-lease (SIGKILL, same file and port): the lease survives, the block exits cleanly', async () => {
  const data = join(dir, 'restart.redb');
  let s = await server(['--data', data]);
  const port = s.port;
  const k = connect(s.url, { reconnectTimeoutMs: 20_000 });
  try {
    const session = await k.session('a');
    const result = session.withLease(
      'MUTATES FILE:/x',
      async (lease) => {
        const fence = lease.fence;
        await sleep(200);
        await s.kill('SIGKILL');
        await sleep(300); // down for a while (less than the TTL)
        s = await server(['--data', data], { port });
        await sleep(1500); // reconnect, reconcile, renew; then a few heartbeats
        lease.check();
        assert.equal(lease.fence, fence);
        return 'done';
      },
      { ttlMs: 3000 },
    );
    assert.equal(await within(20_000, result, 'the block'), 'done');
    assert.equal(k.counters.lost, 0);
    // The server still knows the session: a new lease works.
    await session.withLease('MUTATES FILE:/x', async () => {});
  } finally {
    await k.close();
  }
});

test('a server back within the budget on its data file: a call that failed meanwhile resyncs nothing', async () => {
  // The core's stream rule is the only resync rule (as in Python and Rust): the server kept
  // every event after the reader's cursor, so nothing was missed and no session is reconciled,
  // even though a request failed while the server was away and then got through.
  const data = join(dir, 'no-resync.redb');
  let s = await server(['--data', data]);
  const port = s.port;
  const k = connect(s.url, { reconnectTimeoutMs: 20_000 });
  const reconciles = [];
  const request = k.kernel._request.bind(k.kernel);
  k.kernel._request = (method, path, options) => {
    if (path.endsWith('/reconcile')) reconciles.push(path);
    return request(method, path, options);
  };
  try {
    const session = await k.session('a');
    const lease = await session.lease('MUTATES FILE:/no-resync', { ttlMs: 30_000 });
    await s.kill('SIGKILL');
    const meanwhile = k.session('meanwhile'); // its attempts fail until the restart
    await sleep(500);
    s = await server(['--data', data], { port });
    await within(20_000, meanwhile, 'the call made while the server was away');
    await sleep(1000); // time for a resync to start, were there one
    assert.deepEqual(reconciles, []);
    lease.check();
    await lease.release();
    assert.equal(k.counters.lost, 0);
  } finally {
    await k.close();
  }
});

test('a wait whose outcome the server no longer has asks again, reusing the lease granted meanwhile', async () => {
  // The waiter's client loses its network while the holder (another client) releases, so the
  // grant's event goes unheard; the server then restarts from a snapshot taken after it, so
  // the event is gone from the session's stream. Back on the network, the poll of the ticket
  // answers TICKET_ENDED, and the block asks again instead of waiting for an event that will
  // never come.
  const data = join(dir, 'ended.redb');
  const args = ['--data', data, '--snapshot-every', '1'];
  let s = await server(args);
  const port = s.port;
  const link = await openLink(port);
  const one = connect(link.url, { reconnectTimeoutMs: 30_000 });
  const two = connect(s.url, { reconnectTimeoutMs: 30_000 });
  try {
    const waiting = await one.session('ended-old'); // the older: under wait_die it waits
    const holder = await two.session('ended-young');
    const held = await holder.lease('MUTATES FILE:/ended', { ttlMs: 60_000 });
    const wait = waiting.lease('MUTATES FILE:/ended', { timeoutMs: 40_000 });
    wait.catch(() => {}); // inspected below
    const until = Date.now() + 5000;
    while (one.counters.waits === 0 && Date.now() < until) await sleep(10);
    assert.equal(one.counters.waits, 1);
    link.cut();
    await held.release(); // the waiter's ticket is granted, unheard
    // The server snapshots after a batch before it takes the next: once this later call is
    // answered, the grant is in the snapshot, not in a log a restart replays.
    await two.session('ended-later');
    await s.kill('SIGKILL');
    s = await server(args, { port }); // from the snapshot: the grant's event is gone
    link.restore();
    const lease = await within(30_000, wait, 'the waiter');
    assert.ok(lease.fence > held.fence);
    assert.equal(one.counters.retries, 1, 'the block asked again (no event delivered the grant)');
    await lease.release();
    // The lease the server granted meanwhile is the one the block got: nothing held twice.
    assert.equal((await two.stats()).activeLeases, 0);
  } finally {
    await one.close();
    await two.close();
    await link.close();
  }
});

test('server killed while a block waits, not restarted: Unreachable within the reconnect budget', async () => {
  const s = await server();
  const k = connect(s.url, { reconnectTimeoutMs: 1500 });
  const other = connect(s.url, { reconnectTimeoutMs: 1500 });
  try {
    const old = await k.session('old');
    const young = await other.session('young');
    await young.lease('MUTATES FILE:/x', { ttlMs: 30_000 });
    const waiting = old.lease('MUTATES FILE:/x', { timeoutMs: 60_000 }); // older: waits
    await sleep(200);
    assert.equal(k.counters.waits, 1);
    const started = Date.now();
    await s.kill('SIGKILL');
    await assert.rejects(within(8000, waiting, 'the waiting block'), (e) => {
      assert.ok(e instanceof Unreachable, String(e));
      assert.match(e.message, new RegExp(`cannot reach klock serve at ${s.url}`));
      return true;
    });
    assert.ok(Date.now() - started < 6000);
  } finally {
    await within(5000, k.close(), 'close');
    await within(5000, other.close(), 'close');
  }
});

test("a server that goes silent: the held lease is lost at its local deadline, before the server's expiry", async () => {
  const s = await server();
  const k = connect(s.url, { reconnectTimeoutMs: 10_000 });
  try {
    const session = await k.session('a');
    const lease = await session.lease('MUTATES FILE:/x', { ttlMs: 600 });
    const lost = new Promise((resolve) =>
      lease.signal.addEventListener('abort', () => resolve(Date.now()), { once: true }),
    );
    const killed = Date.now();
    await s.freeze(); // no answers, no errors: only the local deadline can tell
    const at = await within(3000, lost, 'the loss');
    assert.ok(at - killed <= 700, `lost ${at - killed} ms after the server stopped`);
    assert.ok(lease.lost instanceof LeaseLost);
    assert.equal(lease.lost.name, 'LEASE_EXPIRED');
    assert.match(lease.lost.message, /local deadline/);
    s.child.kill('SIGCONT');
    await assert.rejects(lease.release(), LeaseLost);
  } finally {
    s.child.kill('SIGCONT');
    await within(15_000, k.close(), 'close');
  }
});

test('a wrong bearer token: an error that says the token was refused, naming the URL', async () => {
  const tokens = join(dir, 'tokens.json');
  const digest = execFileSync(klockBin(), ['token-hash'], { input: 'right-secret', encoding: 'utf8' }).trim();
  writeFileSync(
    tokens,
    JSON.stringify({ tokens: [{ name: 'test', sha256: digest, role: 'agent', namespaces: ['*'] }] }),
  );
  const s = await server(['--memory', '--tokens', tokens]);
  const wrong = connect(s.url, { token: 'wrong-secret' });
  const none = connect(s.url);
  const right = connect(s.url, { token: 'right-secret' });
  try {
    for (const k of [wrong, none]) {
      await assert.rejects(k.session('a'), (e) => {
        assert.ok(e instanceof KlockError, String(e));
        assert.match(e.message, /refused the bearer token \(401/);
        assert.ok(e.message.includes(s.url), e.message);
        return true;
      });
    }
    const session = await right.session('a');
    await session.withLease('MUTATES FILE:/x', async () => {});
  } finally {
    await wrong.close();
    await none.close();
    await right.close();
  }
});

test('an unreachable URL: a clear error naming the URL and what failed, within the budget', async () => {
  const free = await new Promise((resolve) => {
    const probe = createServer().listen(0, '127.0.0.1', () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
  const url = `http://127.0.0.1:${free}`;
  const k = connect(url, { reconnectTimeoutMs: 300 });
  const started = Date.now();
  await assert.rejects(within(5000, k.session('a'), 'session()'), (e) => {
    assert.ok(e instanceof Unreachable, String(e));
    assert.equal(e.name, 'UNREACHABLE');
    assert.ok(e.message.startsWith(`cannot reach klock serve at ${url}: connection refused`), e.message);
    return true;
  });
  assert.ok(Date.now() - started < 2000);
  await k.close();
  assert.throws(() => connect('ftp://x'), { code: 'ERR_INVALID_ARG_VALUE' });
  assert.throws(() => connect('http://x', { tokn: 'x' }), { code: 'ERR_INVALID_ARG_VALUE' });
});

test("fencedWrite with leases from the server: the newer holder's fence wins", async () => {
  const s = await server();
  const k = connect(s.url);
  try {
    const file = join(dir, 'fenced.txt');
    const session = await k.session('a');
    const first = await session.lease('MUTATES FILE:/fenced', { ttlMs: 2000 });
    const stale = first.fence;
    await first.release();
    await session.withLease('MUTATES FILE:/fenced', async (lease) => fencedWrite(file, 'new', lease.fence));
    assert.throws(() => fencedWrite(file, 'old', stale), StaleFence);
    assert.equal(readFileSync(file, 'utf8'), 'new');
  } finally {
    await k.close();
  }
});

test('a mutating request lost on the wire is retried with the same Idempotency-Key', async () => {
  // A stand-in server: the first acquire's connection is cut before any answer (as a
  // server killed after committing it would), the retry is answered. Both must carry one key.
  const keys = [];
  let acquires = 0;
  const fake = createHttpServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      const json = (status, value) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(value));
      };
      if (req.method === 'POST' && req.url === '/v1/ns/default/sessions') {
        json(200, { session_id: 1, session_token: 't', agent_id: 'a', namespace: 'default', priority: 1, epoch: 0 });
      } else if (req.url.endsWith('/acquire')) {
        keys.push(req.headers['idempotency-key']);
        if (++acquires === 1) req.socket.destroy();
        else {
          const lease = { lease_id: 7, session_id: 1, agent_id: 'a', resource: 'FILE:/x', predicate: 'MUTATES' };
          json(200, {
            verdict: 'GRANTED',
            leases: [{ ...lease, fence: 3, acquired_at: 0, expires_at: 60_000, ttl_ms: 60_000 }],
          });
        }
      } else if (req.url.endsWith('/release')) json(200, { released: 1 });
      else if (req.url.includes('/events'))
        res.writeHead(200, { 'content-type': 'text/event-stream' }); // stays open
      else json(200, { closed: true });
    });
  });
  await new Promise((resolve) => fake.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${fake.address().port}`;
  const k = connect(url, { reconnectTimeoutMs: 5000 });
  try {
    const session = await k.session('a');
    const lease = await within(5000, session.lease('MUTATES FILE:/x'), 'the acquire');
    assert.equal(lease.fence, 3);
    assert.equal(keys.length, 2);
    assert.match(keys[0], /^[0-9a-f-]{36}$/);
    assert.equal(keys[0], keys[1], 'the retry reused the key');
    await lease.release();
  } finally {
    await within(5000, k.close(), 'close');
    fake.closeAllConnections();
    await new Promise((resolve) => fake.close(resolve));
  }
});
