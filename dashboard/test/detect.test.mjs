// The dashboard under policy detect (docs/SPEC.md §6.1), in headless Chromium against a real
// `klock serve --memory --config policy=detect`: the live view shows the wait-for edges of the
// state and, once the kernel breaks a cycle (a waiter's ticket withdrawn with DIED), the cycle
// with its victim; the replay shows the same, and a DIE verdict that broke a cycle (the
// requester the victim) is explained with its cycle. Screenshot target/dashboard/detect.png.
// Run by scripts/test-wasm.sh after the wasm build (KLOCK_BIN names the klock binary).

/* global window, document -- page functions run in Chromium (page.evaluate, waitForFunction) */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { OUT_DIR, klockBin, startKlock, openSession, onSession } from '../bench/klock-serve.mjs';

let browser;
let server;

before(async () => {
  mkdirSync(OUT_DIR, { recursive: true });
  klockBin();
  server = await startKlock(['--memory', '--config', 'policy=detect']);
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--no-first-run',
      '--disable-quic',
    ],
    timeout: 30_000,
  });
});

after(async () => {
  await browser?.close();
  await server?.kill();
});

async function openPage(query) {
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  page.setDefaultTimeout(30_000);
  const errors = [];
  page.on('pageerror', (err) => errors.push(`pageerror: ${err.message}`));
  page.on('console', (msg) => {
    if (msg.type() === 'error') errors.push(`console: ${msg.text()}`);
  });
  await page.goto(`${server.url}/dashboard/${query}`);
  await page.waitForFunction(() => window.klock?.ready === true, null, { timeout: 20_000 });
  return { page, errors };
}

const edgeShown = ([from, to]) => document.querySelector(`#waitfor tr[data-from="${from}"][data-to="${to}"]`) !== null;

async function acquire(s, resource) {
  const { body } = await onSession(server.url, s, 'acquire', {
    intents: [`MUTATES ${resource}`],
    wait_timeout_ms: 120_000,
  });
  return body;
}

test('live and replay: the wait-for edges, and the cycle the kernel broke', { timeout: 90_000 }, async () => {
  const old = await openSession(server.url, 'team', 'old');
  const young = await openSession(server.url, 'team', 'young');
  assert.equal((await acquire(old, 'FILE:/a')).verdict, 'GRANTED');
  assert.equal((await acquire(young, 'FILE:/b')).verdict, 'GRANTED');
  const { page, errors } = await openPage('?live&ns=team');
  assert.match(await page.textContent('#cycle'), /no wait-for cycle broken/);

  // Younger, it still waits under detect: the edge young → old shows.
  assert.equal((await acquire(young, 'FILE:/a')).verdict, 'WAIT');
  await page.waitForFunction(edgeShown, [young.id, old.id], { timeout: 2000, polling: 20 });

  // old closes old → young → old: young, the youngest, loses its ticket (DIED, naming the
  // cycle), and old waits for young's FILE:/b.
  const closing = await acquire(old, 'FILE:/b');
  assert.equal(closing.verdict, 'WAIT', JSON.stringify(closing));
  await page.waitForFunction(edgeShown, [old.id, young.id], { timeout: 2000, polling: 20 });
  assert.ok(!(await page.evaluate(edgeShown, [young.id, old.id])), 'the victim no longer waits');
  await page.waitForFunction(() => document.getElementById('cycle').dataset.cycle !== '', null, { timeout: 2000 });
  assert.equal(await page.getAttribute('#cycle', 'data-cycle'), `${young.id} ${old.id}`);
  const cycle = `young (${young.id}) → old (${old.id}) → young (${young.id})`;
  assert.match(await page.textContent('#cycle'), new RegExp(`${escape(cycle)} — victim young \\(DIED\\)`));
  assert.match(await page.textContent('#log'), new RegExp(`withdrawn to break the wait-for cycle ${escape(cycle)}`));
  await page.screenshot({ path: join(OUT_DIR, 'detect.png') });
  assert.deepEqual(errors, []);
  await page.close();

  // A requester that closes a cycle and is its youngest dies itself (DIE): young holds FILE:/b,
  // old waits for it; young asks for old's FILE:/a.
  const dead = await acquire(young, 'FILE:/a');
  assert.equal(dead.verdict, 'DIE', JSON.stringify(dead));
  assert.deepEqual(dead.cycle, [young.id, old.id]);

  const replay = await openPage('?mode=replay&ns=team');
  assert.equal(await replay.page.evaluate(() => window.klock.state.status), 'replay');
  assert.ok(await replay.page.evaluate(edgeShown, [old.id, young.id]), 'old still waits for young');
  assert.equal(await replay.page.getAttribute('#cycle', 'data-cycle'), `${young.id} ${old.id}`);
  assert.match(await replay.page.textContent('#cycle'), /victim young \(DIE\)/);
  const die = replay.page.locator('#log .ln.why', { has: replay.page.locator('.k-DIE') }).first();
  assert.match(await die.textContent(), new RegExp(`died breaking the wait-for cycle ${escape(cycle)}`));
  await die.click();
  assert.match(
    await replay.page.textContent('#detail'),
    new RegExp(`Detect: waiting would have closed the wait-for cycle ${escape(cycle)}`),
  );
  // Scrubbed back to the start: nothing waits, no cycle broken yet.
  await replay.page.evaluate(() => window.klock.replay.seek(0));
  assert.equal(await replay.page.evaluate(() => document.querySelectorAll('#waitfor tr[data-from]').length), 0);
  assert.match(await replay.page.textContent('#cycle'), /no wait-for cycle broken/);
  assert.deepEqual(replay.errors, []);
  await replay.page.close();
});

function escape(text) {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
