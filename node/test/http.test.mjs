// The remote client's transport (http.js) against a real `klock serve`, reached through a link
// the test counts and cuts (server.mjs `openLink`): calls share one kept-alive connection; a
// pooled connection the server closed while it sat idle is recovered by one resend on a fresh
// connection, not taken for a network failure (no backoff, no resync); only a GET or a request
// with an Idempotency-Key is resent, and never after its time limit; a closed client leaves no
// connection open and its process exits. TLS is covered by names.test.mjs (a real TLS server
// with a CA of its own). Every test is bounded (node --test-timeout, and timeouts here).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { startServer, openLink, within } from './server.mjs';

const require = createRequire(import.meta.url);
const { connect } = require('../client.js');
const { Transport } = require('../http.js');

const servers = [];
const links = [];
after(async () => {
  for (const l of links) await l.close();
  for (const s of servers) await s.stop();
});

/** A `klock serve --memory` and a link to it. */
async function serverAndLink() {
  const s = await startServer(['--memory']);
  servers.push(s);
  const link = await openLink(s.port);
  links.push(link);
  return { s, link };
}

/** The sum of the server's Prometheus samples named `name` whose labels contain `labels`. */
async function metric(s, name, labels = '') {
  const text = await (await fetch(`${s.url}/metrics`)).text();
  let sum = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith(`${name}{`) && line.includes(labels)) sum += Number(line.split(' ').pop());
    else if (line.startsWith(`${name} `)) sum += Number(line.split(' ').pop());
  }
  return sum;
}

/** One turn of the event loop: a connection freed by the last answer is back in the pool. */
const turn = () => new Promise((resolve) => setImmediate(resolve));

/** Resolves once `check()` is true, polled every 10 ms; rejects after `ms`. */
async function eventually(ms, check, what) {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`${what} not within ${ms} ms`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

test("200 lease blocks share one kept-alive connection (and the namespace's event stream its own); close() closes both", async () => {
  const { link } = await serverAndLink();
  const k = connect(link.url);
  const session = await k.session('a');
  for (let i = 0; i < 200; i++) await session.withLease('MUTATES FILE:/x', async () => {});
  assert.equal(link.connections, 2, `connections opened: ${link.connections} (${link.open().join('; ')})`);
  assert.equal(link.open().filter((head) => / \/v1\/ns\/default\/watch\?/.test(head)).length, 1);
  await within(5000, k.close(), 'close');
  await eventually(2000, () => link.open().length === 0, `no connection open (${link.open().join('; ')})`);
});

test('a pooled connection the server closed while idle: the call is sent again on a fresh one, no reconnect', async () => {
  const { s, link } = await serverAndLink();
  const k = connect(link.url, { reconnectTimeoutMs: 5000 });
  try {
    const session = await k.session('a');
    const lease = await session.lease('MUTATES FILE:/x', { ttlMs: 60_000 });
    await lease.heartbeat();
    await turn();
    const opened = link.connections;
    // Closed under the client, which has not read the close yet: the renewal goes out on it.
    link.reset(/\/watch\?/);
    const beat = lease.heartbeat();
    await within(5000, beat, 'the renewal');
    assert.equal(lease.lost, null);
    assert.equal(link.connections, opened + 1, 'one fresh connection');
    // Not a network failure: no resync followed (it would reconcile the held lease).
    assert.equal(await metric(s, 'klock_http_requests_total', 'reconcile'), 0);
    assert.equal(await metric(s, 'klock_http_requests_total', '/heartbeat'), 2);
    await lease.release();
  } finally {
    await within(5000, k.close(), 'close');
  }
});

test('a request on a connection closed under it is resent only if safe: a GET (an event stream too) or with an Idempotency-Key', async () => {
  const { s, link } = await serverAndLink();
  const t = new Transport(new URL(link.url));
  const json = { 'content-type': 'application/json' };
  const open = (headers) =>
    t.request('POST', '/v1/ns/default/sessions', { headers, body: '{"agent_id":"a"}', timeoutMs: 5000 });
  const stats = () => t.request('GET', '/v1/ns/default/stats', { headers: {}, timeoutMs: 5000 });
  const sessions = async () => JSON.parse((await stats()).text).active_sessions;
  try {
    assert.equal(await sessions(), 0);
    await turn();
    link.reset();
    // Without a key the server could apply it twice: the failure is the caller's to judge.
    await assert.rejects(open(json), (e) => ['ECONNRESET', 'EPIPE'].includes(e.code));
    assert.equal(await sessions(), 0, 'not resent');
    await turn();
    link.reset();
    const answer = await open({ ...json, 'idempotency-key': 'k-1' });
    assert.equal(answer.status, 200);
    await turn();
    link.reset();
    assert.equal(await sessions(), 1, 'the GET was resent, the keyed POST applied once');
    assert.equal(await metric(s, 'klock_http_requests_total', 'route="/v1/ns/{ns}/sessions"'), 1);
    // An event stream (a GET) is resent too.
    const { session_id: id, session_token: token } = JSON.parse(answer.text);
    await turn();
    link.reset();
    const stop = new AbortController();
    const stream = await t.stream(`/v1/ns/default/sessions/${id}/events`, {
      headers: { accept: 'text/event-stream', 'klock-session-token': token },
      signal: stop.signal,
    });
    assert.equal(stream.status, 200);
    stop.abort();
  } finally {
    t.close();
  }
});

test('an attempt that times out on a pooled connection is not sent again', async () => {
  const { s, link } = await serverAndLink();
  const t = new Transport(new URL(link.url));
  try {
    await t.request('GET', '/v1/ns/default/stats', { headers: {}, timeoutMs: 5000 });
    await turn();
    const opened = link.connections;
    await s.freeze(); // no answer, no close: only the attempt's time limit ends it
    await assert.rejects(t.request('GET', '/v1/ns/default/stats', { headers: {}, timeoutMs: 200 }), {
      name: 'TimeoutError',
    });
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal(link.connections, opened, 'no second attempt behind the caller');
  } finally {
    s.child.kill('SIGCONT');
    t.close();
  }
});

test('a process whose client is closed exits on its own, before an idle connection would expire', async () => {
  const { link } = await serverAndLink();
  const program = `
    const { connect } = require(${JSON.stringify(require.resolve('../client.js'))});
    (async () => {
      const k = connect(${JSON.stringify(link.url)});
      const session = await k.session('a');
      for (let i = 0; i < 20; i++) await session.withLease('MUTATES FILE:/exit', async () => {});
      await k.stats();
      await k.close();
      console.log('closed');
    })().catch((e) => { console.error(e); process.exit(1); });`;
  const child = spawn(process.execPath, ['-e', program], { stdio: ['ignore', 'pipe', 'inherit'] });
  let closedAt = null;
  child.stdout.on('data', (d) => {
    if (String(d).includes('closed')) closedAt = Date.now();
  });
  const code = await within(20_000, new Promise((resolve) => child.once('exit', resolve)), 'the child').finally(() =>
    child.kill(),
  );
  assert.equal(code, 0);
  assert.ok(closedAt !== null);
  // An idle pooled connection is closed after 4 s: one that kept the process alive would show.
  assert.ok(Date.now() - closedAt < 3000, `exited ${Date.now() - closedAt} ms after close()`);
});

test('close() with a request in flight: the request finishes, then its connection is closed', async () => {
  const { link } = await serverAndLink();
  const t = new Transport(new URL(link.url));
  const pending = t.request('GET', '/v1/ns/default/stats', { headers: {}, timeoutMs: 5000 });
  t.close();
  assert.equal((await within(5000, pending, 'the request')).status, 200);
  // Closed at once, not by the idle timer (4 s).
  await eventually(2000, () => link.open().length === 0, `no connection open (${link.open().join('; ')})`);
});

test('an idle pooled connection does not keep the process alive, even unclosed', async () => {
  const { link } = await serverAndLink();
  const program = `
    const { Transport } = require(${JSON.stringify(require.resolve('../http.js'))});
    const t = new Transport(new URL(${JSON.stringify(link.url)}));
    t.request('GET', '/v1/ns/default/stats', { headers: {}, timeoutMs: 5000 }).then(
      (answer) => console.log('answered', answer.status),
      (e) => { console.error(e); process.exit(1); },
    );`;
  const child = spawn(process.execPath, ['-e', program], { stdio: ['ignore', 'pipe', 'inherit'] });
  let answeredAt = null;
  child.stdout.on('data', (d) => {
    if (String(d).includes('answered 200')) answeredAt = Date.now();
  });
  const code = await within(20_000, new Promise((resolve) => child.once('exit', resolve)), 'the child').finally(() =>
    child.kill(),
  );
  assert.equal(code, 0);
  assert.ok(answeredAt !== null);
  // The client closes an idle connection after 4 s: one that kept the process alive would show.
  assert.ok(Date.now() - answeredAt < 3000, `exited ${Date.now() - answeredAt} ms after the answer`);
});
