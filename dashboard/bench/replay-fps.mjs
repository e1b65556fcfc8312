// The replay frame-rate report (a measurement, not a test: these machines are shared):
//   node dashboard/bench/replay-fps.mjs [--commands N]      (default 100000)
// Starts `klock serve --memory --dashboard`, records N commands of a contended swarm through
// the batch endpoint (each operation one log entry: acquires that are granted, wait or die,
// and releases, by 64 sessions on 24 files in two namespaces), opens the replay view in
// headless Chromium at 1,440×900, plays it at max speed from the start five times and
// records the page's frame times (requestAnimationFrame). Writes target/dashboard/replay-fps.json and prints
// one line. Needs the wasm package (bindings/wasm/build.sh) and the klock binary
// ($KLOCK_BIN, else scripts/klock-bin.sh).

import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { OUT_DIR, startKlock, openSession, batch } from './klock-serve.mjs';

const args = process.argv.slice(2);
const at = args.indexOf('--commands');
const COMMANDS = at >= 0 ? Number(args[at + 1]) : 100_000;
if (
  !Number.isInteger(COMMANDS) ||
  COMMANDS < 1000 ||
  args.some((a, i) => a !== '--commands' && args[i - 1] !== '--commands')
) {
  console.error('usage: node dashboard/bench/replay-fps.mjs [--commands N]  (N ≥ 1000)');
  process.exit(2);
}

mkdirSync(OUT_DIR, { recursive: true });
const server = await startKlock(['--memory', '--history', String(COMMANDS + 10_000)]);
let browser;
try {
  const url = server.url;
  const sessions = [];
  for (let i = 0; i < 64; i++) sessions.push(await openSession(url, i % 4 === 0 ? 'other' : 'team', `agent-${i}`));
  let made = sessions.length;
  let round = 0;
  const recordStart = Date.now();
  while (made < COMMANDS) {
    for (const ns of ['team', 'other']) {
      const mine = sessions.filter((s) => s.ns === ns);
      const ops = [];
      while (ops.length < 1000 && made + ops.length < COMMANDS) {
        const s = mine[(round * 7 + ops.length) % mine.length];
        const file = (round * 13 + ops.length * 5) % 24;
        ops.push(
          ops.length % 3 === 2
            ? { op: 'release_all', session: s.id, token: s.token }
            : {
                op: 'acquire',
                session: s.id,
                token: s.token,
                intents: [`MUTATES FILE:/src/f${file}.ts`],
                ttl_ms: 30_000,
                wait: ops.length % 2 === 0,
                wait_timeout_ms: 2000,
              },
        );
      }
      if (ops.length === 0) break;
      const { status, body } = await batch(url, ns, ops);
      if (status !== 200) throw new Error(`batch: ${status} ${JSON.stringify(body).slice(0, 300)}`);
      made += ops.length;
      round++;
    }
  }
  const recordMs = Date.now() - recordStart;

  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run'],
    timeout: 30_000,
  });
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  page.setDefaultTimeout(120_000);
  const loadStart = Date.now();
  await page.goto(`${url}/dashboard/?mode=replay&ns=team`);
  await page.waitForFunction(() => window.klock?.ready === true, null, { timeout: 120_000 });
  const loadMs = Date.now() - loadStart;
  const length = await page.evaluate(() => window.klock.replay.length);
  // Every frame's time is recorded in the page (requestAnimationFrame), from the press of
  // play until the replay reaches its end; the whole replay is played REPEATS times from the
  // start (one pass at max speed takes well under a second).
  const REPEATS = 5;
  const run = page.evaluate(
    (repeats) =>
      new Promise((resolve) => {
        const frames = [];
        const work = [];
        let left = repeats;
        const start = () => {
          window.klock.replay.seek(0);
          window.klock.replay.play('max');
          requestAnimationFrame(tick);
        };
        const tick = (ts) => {
          frames.push(ts);
          work.push([window.klock.state.stepMs ?? 0, window.klock.state.renderMs ?? 0]);
          if (window.klock.replay.playing()) requestAnimationFrame(tick);
          else if (--left > 0) start();
          else resolve({ frames, work });
        };
        start();
      }),
    REPEATS,
  );
  const { frames, work } = await Promise.race([
    run,
    new Promise((_, reject) => setTimeout(() => reject(new Error('the replay did not finish in 5 minutes')), 300_000)),
  ]);
  const gaps = frames.slice(1).map((t, i) => t - frames[i]);
  const span = frames[frames.length - 1] - frames[0];
  const mean = ((frames.length - 1) * 1000) / span;
  const sorted = [...gaps].sort((x, y) => x - y);
  const p95 = sorted[Math.floor(sorted.length * 0.95)] ?? 0;
  const avg = (k) => work.reduce((a, w) => a + w[k], 0) / Math.max(1, work.length);
  const report = {
    commands: COMMANDS,
    replayed_steps: length,
    viewport: '1440x900',
    record_ms: recordMs,
    page_load_and_first_pass_ms: loadMs,
    repeats: REPEATS,
    play_ms: Math.round(span),
    steps_per_second: Math.round(((length * REPEATS) / span) * 1000),
    frames: frames.length,
    fps_mean: Number(mean.toFixed(1)),
    frame_ms_median: Number((sorted[Math.floor(sorted.length / 2)] ?? 0).toFixed(1)),
    frame_ms_p95: Number(p95.toFixed(1)),
    frame_ms_max: Number(Math.max(...gaps).toFixed(1)),
    frame_replay_ms_mean: Number(avg(0).toFixed(1)),
    frame_render_ms_mean: Number(avg(1).toFixed(1)),
    frame_gaps_ms: gaps.map((g) => Math.round(g)),
    target_fps: 30,
  };
  writeFileSync(join(OUT_DIR, 'replay-fps.json'), `${JSON.stringify(report, null, 2)}\n`);
  console.log(
    `replay of ${length} steps at max speed (×${REPEATS}), 1440×900: ${report.fps_mean} fps mean over ${frames.length} frames, ` +
      `p95 frame ${report.frame_ms_p95} ms, worst ${report.frame_ms_max} ms ` +
      `(${report.steps_per_second} steps/s; page load and first pass ${loadMs} ms) -> ${join(OUT_DIR, 'replay-fps.json')}`,
  );
} finally {
  await browser?.close();
  await server.kill();
}
