// The remote backend at the edges issue 22 names (items 17-19), against real `klock serve`
// processes: a session another client resumed (its token refused, 401) loses its Lease at
// once with LeaseLost; the server's 429s (RATE_LIMITED, TOO_MANY_WAITS, from a token file with
// tiny limits) are asked again within the budget, and past it the server's error is thrown;
// a frozen server (SIGSTOP) costs a call, and `close()`, at most `reconnectTimeoutMs`, not the
// request timeout. Every test is bounded; every frozen server is thawed in `finally`.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import { createServer as createHttpServer } from 'node:http';
import { createRequire } from 'node:module';
import { startServer, klockBin, within } from './server.mjs';

const require = createRequire(import.meta.url);
const { connect, KlockError, LeaseLost, Unreachable } = require('../client.js');

const dir = mkdtempSync(join(tmpdir(), 'klock-node-limits-'));
const servers = [];
after(async () => {
  for (const s of servers) {
    s.child.kill('SIGCONT');
    await s.stop();
  }
  rmSync(dir, { recursive: true, force: true });
});

async function server(args = ['--memory']) {
  const s = await startServer(args);
  servers.push(s);
  return s;
}

/** A server whose one agent token, `secret`, covers every namespace with these limits. */
async function tokenServer(limits) {
  const tokens = join(dir, `tokens-${servers.length}.json`);
  const sha256 = execFileSync(klockBin(), ['token-hash'], { input: 'secret', encoding: 'utf8' }).trim();
  writeFileSync(
    tokens,
    JSON.stringify({ tokens: [{ name: 'tiny', sha256, role: 'agent', namespaces: ['*'], ...limits }] }),
  );
  return server(['--memory', '--tokens', tokens]);
}

/** The bound of a call whose budget is `ms`: the budget plus room for a loaded two-core machine. */
const bound = (ms) => ms + 2000;

// ---- item 17 ----------------------------------------------------------------------------------

test('a session resumed by another client: the Lease is lost at once (LEASE_RELEASED), not UNAUTHORIZED', async () => {
  const s = await server();
  const k = connect(s.url);
  const other = connect(s.url);
  try {
    const session = await k.session('taken');
    const lease = await session.lease('MUTATES FILE:/taken', { ttlMs: 60_000 });
    const taken = await other.resume(await session.digest());
    await assert.rejects(within(5000, lease.heartbeat(), 'the heartbeat'), (e) => {
      assert.ok(e instanceof LeaseLost, String(e));
      assert.equal(e.name, 'LEASE_RELEASED');
      assert.match(e.message, /session token/);
      assert.match(e.message, /another client resumed/);
      return true;
    });
    assert.ok(lease.lost instanceof LeaseLost);
    // The other client holds it now, untouched.
    assert.equal((await taken.reconcile(lease.leaseIds))[0].status, 'ACTIVE');
    await taken.close();
  } finally {
    await within(5000, k.close(), 'close');
    await within(5000, other.close(), 'close');
  }
});

test("the Klock's own heartbeat loses a taken session's Lease before its local deadline", async () => {
  const s = await server();
  const k = connect(s.url);
  const other = connect(s.url);
  try {
    const session = await k.session('taken-by-timer');
    const lease = await session.lease('MUTATES FILE:/taken-by-timer', { ttlMs: 6000 });
    const lost = new Promise((resolve) => lease.signal.addEventListener('abort', resolve, { once: true }));
    await other.resume(await session.digest());
    await within(5000, lost, 'the loss'); // the renewal at 2 s, not the 6 s deadline
    assert.equal(lease.lost.name, 'LEASE_RELEASED');
    assert.match(lease.lost.message, /session token/);
  } finally {
    await within(5000, k.close(), 'close');
    await within(5000, other.close(), 'close');
  }
});

// ---- item 18 ----------------------------------------------------------------------------------

test('RATE_LIMITED is asked again within the budget; past it, the server error is thrown', async () => {
  const s = await tokenServer({ rate_per_second: 4 });
  const k = connect(s.url, { token: 'secret', reconnectTimeoutMs: 20_000 });
  try {
    for (let i = 0; i < 12; i++) assert.deepEqual((await k.resourceState('FILE:/rate')).holders, []);
  } finally {
    await k.close();
  }
  const slow = await tokenServer({ rate_per_second: 1 });
  const hasty = connect(slow.url, { token: 'secret', reconnectTimeoutMs: 300 });
  try {
    await hasty.resourceState('FILE:/rate'); // the one request of this second
    const started = Date.now();
    await assert.rejects(hasty.resourceState('FILE:/rate'), (e) => {
      assert.ok(e instanceof KlockError && !(e instanceof Unreachable), String(e));
      assert.equal(e.name, 'RATE_LIMITED');
      return true;
    });
    assert.ok(Date.now() - started < bound(300));
  } finally {
    await hasty.close();
  }
});

test('a Retry-After is honoured (a stand-in server: klock serve may not send one)', async () => {
  const times = [];
  const fake = createHttpServer((req, res) => {
    times.push(Date.now());
    if (times.length === 1) {
      res.writeHead(429, { 'content-type': 'application/json', 'retry-after': '1' });
      res.end(JSON.stringify({ error: { code: 0, name: 'RATE_LIMITED', message: 'slow down' } }));
    } else {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ holders: [], waiting: [], covering: [] }));
    }
  });
  await new Promise((resolve) => fake.listen(0, '127.0.0.1', resolve));
  const k = connect(`http://127.0.0.1:${fake.address().port}`, { reconnectTimeoutMs: 10_000 });
  try {
    await within(5000, k.resourceState('FILE:/x'), 'the read');
    assert.ok(times[1] - times[0] >= 900, `asked again after ${times[1] - times[0]} ms`);
  } finally {
    await k.close();
    fake.closeAllConnections();
    await new Promise((resolve) => fake.close(resolve));
  }
});

// ---- item 19 ----------------------------------------------------------------------------------

test('a frozen server costs close() at most reconnectTimeoutMs, not the request timeout', async () => {
  const s = await server();
  const k = connect(s.url, { reconnectTimeoutMs: 1000 });
  try {
    const session = await k.session('frozen');
    await session.lease('MUTATES FILE:/frozen', { ttlMs: 60_000 });
    await s.freeze();
    let started = Date.now();
    await assert.rejects(within(bound(1000) + 5000, k.resourceState('FILE:/frozen'), 'the read'), (e) => {
      assert.ok(e instanceof Unreachable, String(e));
      return true;
    });
    assert.ok(Date.now() - started < bound(1000), `the read took ${Date.now() - started} ms`);
    started = Date.now();
    await within(bound(1000) + 20_000, k.close(), 'close');
    assert.ok(Date.now() - started < bound(1000), `close took ${Date.now() - started} ms`);
  } finally {
    s.child.kill('SIGCONT');
  }
});

test('requestTimeoutMs is an option, checked', async () => {
  assert.throws(() => connect('http://127.0.0.1:1', { requestTimeoutMs: 0 }), { code: 'ERR_OUT_OF_RANGE' });
  assert.throws(() => connect('http://127.0.0.1:1', { requestTimeoutMs: 'x' }), { code: 'ERR_INVALID_ARG_TYPE' });
  const k = connect('http://127.0.0.1:1', { requestTimeoutMs: 500, reconnectTimeoutMs: 300 });
  await assert.rejects(k.session('a'), Unreachable);
  await k.close();
});
