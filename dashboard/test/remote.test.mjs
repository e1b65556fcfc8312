// The dashboard against a real `klock serve --dashboard` (the page served by the server itself)
// in headless Chromium, with real agents: `klock exec` processes and small HTTP clients.
//   1. live: a lease shows within a second of its grant (the grant is when `klock exec` starts
//      its command, seen by the file the command writes); screenshot target/dashboard/live.png;
//   2. after a SIGKILL of the server and a restart on the same data file and port, the page
//      says it is reconnecting, comes back live by itself, shows a lease granted after the
//      restart, and lists no event twice; an in-memory server restarted on its port (a new
//      log): the page reads the new log from its start and says the server started over;
//   3. replay: a contended run in two namespaces, the server's live state hash sampled at
//      several instants; the page replays the history in its wasm kernel and gives the same
//      hash at each sampled log index (and the server's own GET /v1/state/hash?index=); a DIE
//      verdict clicked is explained with the priorities; screenshot target/dashboard/replay.png.
// Run by scripts/test-wasm.sh after the wasm build (KLOCK_BIN names the klock binary).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { OUT_DIR, klockBin, startKlock, openSession, onSession, liveHash, call } from '../bench/klock-serve.mjs';

const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--no-first-run',
  '--disable-quic',
];

let browser;
let dir;
let server;
const agents = [];

before(async () => {
  mkdirSync(OUT_DIR, { recursive: true });
  klockBin(); // built (or named) once, before any timer runs
  dir = mkdtempSync(join(tmpdir(), 'klock-dash-'));
  server = await startKlock(['--data', join(dir, 'k.redb')]);
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
    args: CHROMIUM_ARGS,
    timeout: 30_000,
  });
});

after(async () => {
  for (const a of agents) a.kill('SIGKILL');
  await browser?.close();
  await server?.kill();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** A `klock exec` holding `intent` while its command runs; resolves when the command started. */
function execAgent(url, agent, intent, marker, seconds = 60) {
  const child = spawn(
    klockBin(),
    [
      'exec',
      '--server',
      url,
      '--ns',
      'team',
      '--agent',
      agent,
      '--intent',
      intent,
      '--wait',
      '30s',
      '--',
      'sh',
      '-c',
      `touch "${marker}"; sleep ${seconds}`,
    ],
    { stdio: 'ignore', env: { PATH: process.env.PATH } },
  );
  agents.push(child);
  return child;
}

async function waitFor(check, ms, what) {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`${what}: not within ${ms} ms`);
}

async function openPage(url, query) {
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  page.setDefaultTimeout(30_000);
  const errors = [];
  page.on('pageerror', (err) => errors.push(`pageerror: ${err.message}`));
  page.on('console', (msg) => {
    if (msg.type() === 'error') errors.push(`console: ${msg.text()}`);
  });
  await page.goto(`${url}/dashboard/${query}`);
  await page.waitForFunction(() => window.klock?.ready === true, null, { timeout: 20_000 });
  return { page, errors };
}

const leaseShown = (resource) => [...document.querySelectorAll('#leases td')].some((td) => td.textContent === resource);

let live;

test('live: a lease shows within a second of its grant', { timeout: 60_000 }, async () => {
  live = await openPage(server.url, '?live&ns=team');
  const { page } = live;
  assert.equal(await page.evaluate(() => window.klock.state.status), 'live');
  // An agent that opened its session first (so it is older than the builder below).
  const reviewer = await openSession(server.url, 'team', 'reviewer');
  const marker = join(dir, 'granted-1');
  execAgent(server.url, 'builder-1', 'MUTATES FILE:/src/auth.ts', marker);
  await waitFor(() => existsSync(marker), 20_000, 'klock exec starts its command');
  const granted = Date.now();
  await page.waitForFunction(leaseShown, 'FILE:/src/auth.ts', { timeout: 1000, polling: 20 });
  const shownAfter = Date.now() - granted;
  console.log(`live: lease shown ${shownAfter} ms after its grant was used`);
  assert.ok(shownAfter < 1000);
  // The older agent asks for the same file: Wait-Die lets it wait, and its ticket shows in the
  // queues (a younger one would die instead).
  const wait = await onSession(server.url, reviewer, 'acquire', {
    intents: ['CONSUMES FILE:/src/auth.ts'],
    wait_timeout_ms: 120_000,
  });
  assert.equal(wait.body.verdict, 'WAIT', JSON.stringify(wait.body));
  await page.waitForFunction(() => /reviewer/.test(document.getElementById('queues').textContent), null, {
    timeout: 1000,
    polling: 20,
  });
  await page.screenshot({ path: join(OUT_DIR, 'live.png') });
  assert.deepEqual(live.errors, []);
});

test(
  'live: after SIGKILL and a restart of the server, the page reconnects and resumes',
  { timeout: 90_000 },
  async () => {
    const { page } = live;
    const port = server.port;
    await server.kill();
    await page.waitForFunction(() => window.klock.state.status === 'reconnecting', null, { timeout: 10_000 });
    const lastBefore = await page.evaluate(() => window.klock.state.lastEventId);
    server = await startKlock(['--data', join(dir, 'k.redb')], { port });
    await page.waitForFunction(() => window.klock.state.status === 'live', null, { timeout: 15_000 });
    // The lease granted before the kill is still there (the server never shortens a lease).
    assert.ok(await page.evaluate(leaseShown, 'FILE:/src/auth.ts'));
    const marker = join(dir, 'granted-3');
    execAgent(server.url, 'builder-3', 'MUTATES FILE:/docs/after-restart.md', marker);
    await waitFor(() => existsSync(marker), 20_000, 'klock exec after the restart');
    const granted = Date.now();
    await page.waitForFunction(leaseShown, 'FILE:/docs/after-restart.md', { timeout: 1000, polling: 20 });
    console.log(`live after restart: lease shown ${Date.now() - granted} ms after its grant was used`);
    // An event after the restart arrives on the resumed stream: the holder's command is stopped,
    // its klock exec closes the session, and the reviewer waiting behind it gets a GRANTED event.
    const [holder] = agents;
    holder.kill('SIGTERM');
    await page.waitForFunction(
      () => window.klock.state.log.some((e) => e.kind === 'GRANTED' && e.id && /FILE:\/src\/auth\.ts/.test(e.text)),
      null,
      { timeout: 15_000 },
    );
    const ids = await page.evaluate(() => window.klock.state.log.filter((e) => e.id).map((e) => e.id));
    assert.equal(new Set(ids).size, ids.length, 'no event is listed twice');
    const after = await page.evaluate(() => window.klock.state.lastEventId);
    const num = (id) => id.split('.').map(Number);
    assert.ok(num(after)[0] > num(lastBefore)[0], `resumed after ${lastBefore}, now at ${after}`);
    await page.screenshot({ path: join(OUT_DIR, 'live-after-restart.png') });
    // The browser itself reports the requests the outage broke; nothing else may be logged.
    const outage =
      /Failed to load resource: net::ERR_(INCOMPLETE_CHUNKED_ENCODING|CONNECTION_REFUSED|CONNECTION_RESET|EMPTY_RESPONSE)/;
    assert.deepEqual(
      live.errors.filter((e) => !outage.test(e)),
      [],
    );
    await page.close();
  },
);

/** `pairs` acquire+release pairs of `resource` by session `s`: one log entry each. */
async function pump(url, s, resource, pairs) {
  for (let i = 0; i < pairs; i++) {
    const { body } = await onSession(url, s, 'acquire', { intents: [`MUTATES ${resource}`] });
    assert.equal(body.verdict, 'GRANTED', JSON.stringify(body));
    await onSession(url, s, 'release', { lease_ids: body.leases.map((l) => l.lease_id) });
  }
}

test(
  'live: an in-memory server restarted on its port: the page reads the new log from its start',
  { timeout: 90_000 },
  async () => {
    // Event ids count entries of one log. The page's cursor is pushed past where the new log's
    // first grant will be; the new log then grows past the cursor before the page may reach
    // it, so neither the cursor nor the log's length tells the page the server started over:
    // only the log's name does.
    let mem = await startKlock(['--memory']);
    const port = mem.port;
    const { page, errors } = await openPage(mem.url, '?live&ns=team');
    try {
      const first = await openSession(mem.url, 'team', 'pump');
      await pump(mem.url, first, 'FILE:/old-log/x', 30);
      await page.waitForFunction(() => Number(window.klock.state.lastEventId.split('.')[0]) >= 60, null, {
        timeout: 15_000,
      });
      const oldLog = await page.evaluate(() => window.klock.state.cursorLog);
      assert.match(oldLog ?? '', /^[0-9a-f]{32}$/);
      const cursor = await page.evaluate(() => window.klock.state.lastEventId);
      // The page cannot reach the server until the new log is ready.
      await page.route('**/v1/**', (route) => route.abort());
      await mem.kill();
      mem = await startKlock(['--memory'], { port });
      // A grant by an event, early in the new log (an older session waits, then is granted).
      const waiter = await openSession(mem.url, 'team', 'waiter');
      const holder = await openSession(mem.url, 'team', 'holder');
      const held = await onSession(mem.url, holder, 'acquire', { intents: ['MUTATES FILE:/new-log/x'] });
      assert.equal(held.body.verdict, 'GRANTED', JSON.stringify(held.body));
      const wait = await onSession(mem.url, waiter, 'acquire', {
        intents: ['MUTATES FILE:/new-log/x'],
        wait_timeout_ms: 60_000,
      });
      assert.equal(wait.body.verdict, 'WAIT', JSON.stringify(wait.body));
      await onSession(mem.url, holder, 'release', { lease_ids: held.body.leases.map((l) => l.lease_id) });
      await pump(mem.url, holder, 'FILE:/new-log/y', 50);
      const { index } = await liveHash(mem.url);
      assert.ok(index > Number(cursor.split('.')[0]), `the new log (${index}) is past the cursor (${cursor})`);
      await page.unroute('**/v1/**');
      await page.waitForFunction(
        () => window.klock.state.log.some((e) => e.kind === 'GRANTED' && e.id && /FILE:\/new-log\/x/.test(e.text)),
        null,
        { timeout: 20_000 },
      );
      const entries = await page.evaluate(() => window.klock.state.log.map((e) => `${e.kind}: ${e.text}`));
      assert.ok(
        entries.some((e) => /^RESTART: the server started over \(a new log\)/.test(e)),
        entries.slice(-10).join('\n'),
      );
      assert.ok(!entries.some((e) => /were dropped/.test(e)), 'the new log is not reported as dropped events');
      const newLog = await page.evaluate(() => window.klock.state.cursorLog);
      assert.match(newLog ?? '', /^[0-9a-f]{32}$/);
      assert.notEqual(newLog, oldLog);
      assert.deepEqual(
        errors.filter((e) => e.startsWith('pageerror')),
        [],
      );
    } finally {
      await page.close();
      await mem.kill();
    }
  },
);

test(
  'replay: the replayed state hash equals the server state hash at several instants; a DIE is explained',
  { timeout: 120_000 },
  async () => {
    const url = server.url;
    const team = [];
    const other = [];
    for (let i = 0; i < 5; i++) team.push(await openSession(url, 'team', `agent-${i}`));
    for (let i = 0; i < 3; i++) other.push(await openSession(url, 'other', `other-${i}`));
    const samples = [];
    for (let round = 0; round < 12; round++) {
      const all = [...team, ...other];
      await Promise.all(
        all.map((s, k) =>
          onSession(url, s, 'acquire', {
            intents: [`MUTATES FILE:/hot/${(round + k) % 3}`, 'CONSUMES FILE:/README.md'],
            ttl_ms: 5000,
          }),
        ),
      );
      samples.push(await liveHash(url));
      await Promise.all(
        all.filter((_, k) => (k + round) % 3 === 0).map((s) => onSession(url, s, 'release', { all: true })),
      );
      samples.push(await liveHash(url));
      await new Promise((r) => setTimeout(r, 30));
    }
    const { page, errors } = await openPage(url, '?mode=replay&ns=team');
    assert.equal(
      await page.evaluate(() => window.klock.state.status),
      'replay',
      await page.evaluate(() => document.getElementById('status').textContent),
    );
    const start = await page.evaluate(() => window.klock.replay.meta.start.index);
    const checked = samples.filter((s) => s.index >= start);
    assert.ok(checked.length >= 10, `${checked.length} instants to compare`);
    for (const s of checked) {
      const replayed = await page.evaluate((i) => window.klock.replay.hashAt(i), s.index);
      assert.equal(replayed, s.hash, `state hash after entry ${s.index}`);
      const server = await call(url, 'GET', `/v1/state/hash?index=${s.index}`);
      assert.equal(server.body.hash, s.hash, `the server's replay after entry ${s.index}`);
    }
    console.log(`replay: ${checked.length} instants, every replayed state hash equals the server's`);
    // Back to the end, then click a DIE verdict: the explanation names blockers and priorities.
    await page.evaluate(() => window.klock.replay.seek(window.klock.replay.length));
    const die = page.locator('#log .ln.why', { has: page.locator('.k-DIE') }).first();
    await die.click();
    const why = await page.textContent('#detail');
    assert.match(why, /blocked by/);
    assert.match(why, /Wait-Die: .* older than the requester \(priority \d+\)/);
    assert.match(why, /priority/);
    await page.screenshot({ path: join(OUT_DIR, 'replay.png') });
    // The scrubber moves the state back in time: at the start, no lease of the run is held.
    await page.evaluate(() => window.klock.replay.seek(0));
    assert.equal(
      await page.evaluate(() => window.klock.replay.hash()),
      await page.evaluate(() => window.klock.replay.meta.start.hash),
    );
    assert.deepEqual(errors, []);
    await page.close();
  },
);
