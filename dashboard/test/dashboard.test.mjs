// The dashboard in headless Chromium (Debian `chromium` driven by playwright-core):
// `node --test dashboard/test/` after bindings/wasm/build.sh (scripts/test-wasm.sh does both).
//
// First, every resolved script (scripts/resolve-vectors.sh) replays in the browser against the
// --target web build (the replayer, bindings/js-replay/replay.mjs, is handed to a blank page
// by this test, never by the dashboard's server). Then it
// checks what a person would: the page loads with no console error, warning or failed
// request; the simulation runs N steps and the counters change; the `lanes` policy gives zero
// deaths (and wait_die, on the same swarm, does not — so the check can fail); clicking a
// resource shows its holders as the kernel's resource_state reports them; with 1,000 agents
// the header stays on one line (target/dashboard/header-1000-agents.png). It also writes a
// screenshot and measures frames per second and kernel operations per second for 500 agents
// (printed and written to target/dashboard/perf.json, not asserted: these machines are shared).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { startServer } from '../serve.mjs';
import { RESOURCE_TREE } from '../sim.js';
import { readScripts, SCRIPTS } from '../../bindings/js-replay/replay-tests.mjs';

// ---- the server and the browser ----------------------------------------------------------

const here = dirname(fileURLToPath(import.meta.url));
const ROOT = join(here, '..', '..');
/** Where screenshots and measurements go (build output, ignored by git). */
const OUT_DIR = join(process.env.CARGO_TARGET_DIR ?? join(ROOT, 'target'), 'dashboard');

const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--no-first-run',
  '--disable-quic',
  '--disable-sync',
];

/** `promise`, or a failure naming `what` after `ms` (page.evaluate has no timeout of its own). */
function bounded(promise, ms, what) {
  let timer;
  const limit = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} took longer than ${ms} ms`)), ms);
  });
  return Promise.race([promise, limit]).finally(() => clearTimeout(timer));
}

async function launch() {
  mkdirSync(OUT_DIR, { recursive: true });
  const { server, url } = await startServer({ port: 0 });
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
    args: CHROMIUM_ARGS,
    timeout: 30_000,
  });
  return {
    url,
    browser,
    async close() {
      await browser.close();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** Opens the dashboard; `errors` collects console errors, page errors and failed requests. */
async function openDashboard(env, { width = 1440, height = 900, query = '' } = {}) {
  const page = await env.browser.newPage({ viewport: { width, height } });
  page.setDefaultTimeout(30_000); // every wait of the page (goto, click, waitFor...) is bounded
  const errors = [];
  page.on('console', (msg) => {
    if (msg.type() === 'error' || msg.type() === 'warning') errors.push(`console.${msg.type()}: ${msg.text()}`);
  });
  page.on('pageerror', (err) => errors.push(`pageerror: ${err.message}`));
  page.on('requestfailed', (req) => errors.push(`request failed: ${req.url()} ${req.failure()?.errorText}`));
  page.on('response', (res) => {
    if (res.status() >= 400) errors.push(`HTTP ${res.status()}: ${res.url()}`);
  });
  await page.goto(`${env.url}${query}`);
  await page.waitForFunction(() => window.klock?.ready === true, null, { timeout: 15000 });
  return { page, errors };
}

// ---- the tests ------------------------------------------------------------------------------

let env;
before(async () => {
  env = await launch();
});
after(async () => {
  await env?.close();
});

/** Sets a range input the way a user does (value + input event). */
async function setRange(page, id, value) {
  await page.evaluate(
    ([id, value]) => {
      const el = document.getElementById(id);
      el.value = String(value);
      el.dispatchEvent(new Event('input', { bubbles: true }));
    },
    [id, value],
  );
}

/** The counters as the cards show them: {granted: 12, died: 3, ...}. */
async function cards(page) {
  return page.evaluate(() =>
    Object.fromEntries(
      [...document.querySelectorAll('.card')].map((c) => [
        c.dataset.key,
        Number(c.querySelector('.v').textContent.replace(/,/g, '')),
      ]),
    ),
  );
}

test('every resolved script replays exactly in Chromium against the web build', { timeout: 120_000 }, async () => {
  const page = await env.browser.newPage();
  page.setDefaultTimeout(60_000);
  const errors = [];
  page.on('pageerror', (err) => errors.push(err.message));
  // The replayer and the scripts are test code: this test hands them to the page itself, under
  // a path the dashboard's server does not have.
  const replayer = readFileSync(join(ROOT, 'bindings', 'js-replay', 'replay.mjs'), 'utf8');
  await page.route(`${env.url}__test__/replay.html`, (route) =>
    route.fulfill({ contentType: 'text/html', body: '<!doctype html><title>replay</title>' }),
  );
  await page.route(`${env.url}__test__/replay.mjs`, (route) =>
    route.fulfill({ contentType: 'text/javascript', body: replayer }),
  );
  await page.goto(`${env.url}__test__/replay.html`);
  const scripts = readScripts(SCRIPTS).map(([file, text]) => [relative(ROOT, file), text]);
  const run = page.evaluate(async (scripts) => {
    const klock = await import('/pkg/klock_wasm.js');
    await klock.default();
    const { replayAll } = await import('/__test__/replay.mjs');
    const { lines, passed } = replayAll(klock, scripts);
    // The web build's glue has the freed-kernel guard too (bindings/wasm/freed-guard.js).
    const k = new klock.Kernel();
    k.free();
    let freed = null;
    try {
      k.now();
    } catch (e) {
      freed = `${e.name} ${e.code}: ${e.message}`;
    }
    return { lines, passed, freed };
  }, scripts);
  const { lines, passed, freed } = await bounded(run, 60_000, 'the replay in Chromium');
  assert.match(freed ?? 'nothing thrown', /^Error ERR_INVALID_STATE: this Kernel was freed/);
  const failed = lines.filter((l) => !l.startsWith('ok '));
  console.log(`resolved scripts in Chromium: ${passed} passed, ${failed.length} failed`);
  const vectors = readdirSync(join(ROOT, 'tests', 'vectors')).filter((n) => n.endsWith('.json'));
  assert.ok(vectors.length > 0, 'a run with zero vectors is a failure');
  assert.deepEqual(failed, []);
  assert.equal(passed, vectors.length, 'one script per vector');
  assert.deepEqual(errors, []);
  await page.close();
});

test('the page loads with no console error and shows every panel', async () => {
  const { page, errors } = await openDashboard(env);
  await page.waitForTimeout(1500);
  for (const sel of ['#cards .card', '#chart', '#agents-canvas', '#tree .row', '#log', '#detail', '#state-counts']) {
    assert.ok(await page.isVisible(sel), `${sel} is visible`);
  }
  const resources = RESOURCE_TREE.files.length + RESOURCE_TREE.directories.length + RESOURCE_TREE.leaders.length;
  assert.equal(await page.locator('#tree .row').count(), resources, 'every resource of the tree has a row');
  assert.ok((await page.locator('#log .ln').count()) > 0, 'the log shows verdicts');
  const now = await page.evaluate(() => window.klock.swarm.now);
  assert.ok(now > 0, 'virtual time runs on requestAnimationFrame');
  assert.deepEqual(errors, []);
  await page.close();
});

test('the simulation runs N steps and the counters change', async () => {
  const { page, errors } = await openDashboard(env);
  await page.click('#pause');
  const t0 = await page.evaluate(() => window.klock.swarm.now);
  const before = await cards(page);
  const N = 30;
  for (let i = 0; i < N; i++) await page.click('#step');
  const t1 = await page.evaluate(() => window.klock.swarm.now);
  assert.equal(t1 - t0, N * 100, 'each step advances 100 virtual ms');
  const after = await cards(page);
  assert.ok(after.granted > before.granted, `granted ${before.granted} -> ${after.granted}`);
  const kernel = await page.evaluate(() => window.klock.swarm.stats().counters);
  assert.equal(after.granted, kernel.granted, 'the cards show the kernel counters');
  assert.equal(after.died, kernel.died);
  // Paused means paused: time does not move on its own.
  await page.waitForTimeout(300);
  assert.equal(await page.evaluate(() => window.klock.swarm.now), t1);
  assert.equal(await page.textContent('#pause'), 'Resume');
  assert.deepEqual(errors, []);
  await page.close();
});

test('switching the policy to lanes gives zero deaths (wait_die on the same swarm does not)', async () => {
  const { page, errors } = await openDashboard(env);
  const run = async (policy) => {
    await page.selectOption('#policy', policy);
    await setRange(page, 'agents', 200);
    await page.evaluate(() => window.klock.setRunning(false));
    await page.evaluate(() => window.klock.step(200)); // 20 virtual seconds
    return { ...(await cards(page)), policy: await page.evaluate(() => window.klock.swarm.kernel.snapshot(0).policy) };
  };
  const lanes = await run('lanes');
  assert.equal(lanes.policy, 'lanes');
  assert.equal(lanes.died, 0, 'lanes: no DIE verdict, no DIED event');
  assert.equal(lanes.wounded, 0);
  assert.ok(lanes.granted > 100 && lanes.waited > 100, `lanes was contended: ${JSON.stringify(lanes)}`);
  const states = await page.evaluate(() => window.klock.swarm.stateCounts());
  assert.equal(states.backoff, 0, 'no agent is backing off under lanes');
  const waitDie = await run('wait_die');
  assert.equal(waitDie.policy, 'wait_die');
  assert.ok(waitDie.died > 0, 'the same swarm under wait_die has deaths');
  assert.deepEqual(errors, []);
  await page.close();
});

test("clicking a resource shows its holders (the kernel's resource_state)", async () => {
  const { page, errors } = await openDashboard(env);
  await page.evaluate(() => window.klock.setRunning(false));
  // Step until some file is held, then click its row.
  const resource = await page.evaluate(() => {
    for (let i = 0; i < 100; i++) {
      const leases = window.klock.swarm.snapshot().leases.filter((l) => l.resource.startsWith('FILE:'));
      if (leases.length) return leases[0].resource;
      window.klock.step(1);
    }
    return null;
  });
  assert.ok(resource, 'some resource is held');
  await page.click(`.row[data-r="${resource}"]`);
  assert.equal(await page.getAttribute(`.row[data-r="${resource}"]`, 'class'), 'row file selected');
  assert.equal(await page.textContent('#detail-name'), resource);
  const state = await page.evaluate(
    (r) => window.klock.swarm.kernel.resourceState(r, 'default', window.klock.swarm.now),
    resource,
  );
  assert.ok(state.holders.length > 0);
  const shown = await page.$$eval('#detail table:first-of-type tr td:first-child', (tds) =>
    tds.map((td) => td.textContent),
  );
  assert.deepEqual(
    shown,
    state.holders.map((h) => h.agentId),
    'the holders table lists the holders',
  );
  assert.equal(await page.getAttribute('#detail', 'data-holders'), String(state.holders.length));
  const text = await page.textContent('#detail');
  for (const h of state.holders) assert.ok(text.includes(String(h.fence)), `fence ${h.fence} is shown`);
  assert.deepEqual(errors, []);
  await page.close();
});

/** The header's layout: how many rows its items sit on, its height, and whether #perf is cut. */
async function headerLayout(page) {
  return page.evaluate(() => {
    const bar = document.querySelector('header.bar');
    const items = [...bar.children].map((c) => c.getBoundingClientRect());
    // Items on one row overlap vertically; a wrapped item starts below the first row's bottom.
    const firstBottom = Math.min(...items.map((r) => r.bottom));
    const rows = 1 + (items.some((r) => r.top >= firstBottom) ? 1 : 0);
    const perf = document.getElementById('perf');
    const barBox = bar.getBoundingClientRect();
    return {
      rows,
      height: barBox.height,
      tallest: Math.max(...items.map((r) => r.height)),
      right: Math.max(...items.map((r) => r.right)),
      barRight: barBox.right,
      perfCut: perf.scrollWidth > perf.clientWidth,
      perf: perf.textContent,
      agents: document.getElementById('agents-out').value,
    };
  });
}

test('the header stays on one line with 1,000 agents (and a screenshot of it)', async () => {
  for (const width of [1440, 1280]) {
    const { page, errors } = await openDashboard(env, { width, height: 900 });
    const before = await headerLayout(page);
    assert.equal(before.rows, 1, `${width}px, 60 agents: one row (${JSON.stringify(before)})`);
    await setRange(page, 'agents', 1000);
    await page.selectOption('#speed', 'max');
    await page.waitForTimeout(2500);
    const live = await headerLayout(page);
    assert.equal(live.agents, '1000');
    assert.equal(await page.evaluate(() => window.klock.swarm.agents.length), 1000);
    // The widest texts the header can show, whatever this machine's speed: a lagging
    // simulation at high rates after a long run.
    await page.evaluate(() => window.klock.setRunning(false));
    await page.evaluate(() => {
      document.getElementById('perf').textContent = '144 fps · 999.9k ops/s · lagging';
      document.getElementById('vclock').textContent = 't = 99999.9 s';
    });
    const worst = await headerLayout(page);
    for (const [what, l] of [
      ['live', live],
      ['widest texts', worst],
    ]) {
      const shown = `${width}px, 1,000 agents, ${what}: ${JSON.stringify(l)}`;
      assert.equal(l.rows, 1, `${shown}: one row`);
      assert.ok(l.height < 2 * l.tallest, `${shown}: the header is one line high`);
      assert.ok(Math.abs(l.height - before.height) < 1, `${shown}: as high as with 60 agents (${before.height}px)`);
      assert.ok(l.right <= l.barRight + 0.5, `${shown}: nothing sticks out of the header`);
      if (width === 1440) assert.equal(l.perfCut, false, `${shown}: the numbers are shown in full at ${width}px`);
    }
    if (width === 1440) {
      await page.evaluate(() => window.klock.setRunning(true));
      await page.waitForTimeout(500);
      const path = join(OUT_DIR, 'header-1000-agents.png');
      await page.screenshot({ path });
      assert.ok(statSync(path).size > 20000, 'a real screenshot');
      console.log(`screenshot: ${path} (header ${live.height}px, one line, ${live.perf})`);
    }
    assert.deepEqual(errors, []);
    await page.close();
  }
});

test('screenshot, and frames and kernel operations per second for 500 agents', async () => {
  const { page, errors } = await openDashboard(env, { width: 1440, height: 900 });

  // Performance: 500 agents at 1× (the target is ≥ 30 fps), then at max speed (the kernel
  // runs as many operations as fit in the per-frame budget while the page keeps rendering).
  await setRange(page, 'agents', 500);
  const sample = async (ms) => {
    await page.waitForTimeout(ms);
    return page.evaluate(() => ({
      fps: Number(window.klock.perf.fps.toFixed(1)),
      opsPerSec: Math.round(window.klock.perf.opsPerSec),
      queriesPerSec: Math.round(window.klock.perf.queriesPerSec),
      agents: window.klock.swarm.agents.length,
    }));
  };
  await page.waitForTimeout(1000);
  const realtime = await sample(3000);
  await page.selectOption('#speed', 'max');
  await page.waitForTimeout(1000);
  const max = await sample(3000);
  const perf = {
    agents: 500,
    viewport: '1440x900',
    chromium: env.browser.version(),
    realtime_1x: realtime,
    max_speed: max,
  };
  writeFileSync(join(OUT_DIR, 'perf.json'), `${JSON.stringify(perf, null, 2)}\n`);
  console.log(
    `dashboard, 500 agents, headless Chromium ${perf.chromium}: ` +
      `1x speed ${realtime.fps} fps (${realtime.opsPerSec} kernel ops/s); ` +
      `max speed ${max.fps} fps while sustaining ${max.opsPerSec} kernel ops/s (+ ${max.queriesPerSec} queries/s)`,
  );
  assert.equal(realtime.agents, 500);
  assert.ok(realtime.fps > 0 && max.opsPerSec > 0);

  // The screenshot: a medium swarm after a while, with a busy resource selected.
  await page.selectOption('#speed', '4');
  await page.click('#reset');
  await setRange(page, 'agents', 144);
  await page.waitForTimeout(5000);
  await page.click('#pause');
  const hot = await page.evaluate(
    () => window.klock.swarm.stats().topContended[0]?.resource ?? 'FILE:/repo/src/auth/login.ts',
  );
  await page.click(`.row[data-r="${hot}"]`);
  await page.waitForTimeout(200);
  const path = join(OUT_DIR, 'screenshot.png');
  await page.screenshot({ path });
  assert.ok(statSync(path).size > 20000, 'a real screenshot');
  console.log(`screenshot: ${path}`);
  assert.deepEqual(errors, []);
  await page.close();
});
