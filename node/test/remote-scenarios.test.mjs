// The shared remote scenarios (tests/remote-scenarios/*.json; format in its README.md) on the
// Node client through connect(): one test per file, each against a real `klock serve --data
// FILE` reached through a `klock-testkit link` process that the steps cut, delay, freeze and
// restore. python/tests/test_remote_scenarios.py and client/tests/remote_scenarios.rs run the
// same files on the Python and Rust clients. Real time, bounded: sleeps and `within_ms` are
// wall-clock; each lease block is a promise of its own. Three scenarios run at a time (each
// on its own server and link): one after another they take about 50 s, near the whole file's
// bound in scripts/test-node.sh.
import { describe, it, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import { createInterface } from 'node:readline';

const require = createRequire(import.meta.url);
const { connect } = require('../client.js');
const { startServer, testkitBin } = await import('./server.mjs');

const dir = new URL('../../tests/remote-scenarios/', import.meta.url);
const files = readdirSync(dir)
  .filter((f) => f.endsWith('.json'))
  .sort();
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** `klock-testkit link --to PORT`: its port, and one control line at a time. */
async function openLinkProcess(target) {
  const child = spawn(testkitBin(), ['link', '--to', String(target)], { stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const first = (await lines.next()).value ?? '';
  const m = /link on 127\.0\.0\.1:(\d+)/.exec(first);
  if (m === null) {
    child.kill('SIGKILL');
    throw new Error(`the link did not say its port: ${JSON.stringify(first)}`);
  }
  // One command at a time: a command sent later (after_ms) may overlap a step's.
  let last = Promise.resolve();
  return {
    port: Number(m[1]),
    command(line) {
      last = last.then(async () => {
        child.stdin.write(`${line}\n`);
        const answer = (await lines.next()).value;
        assert.equal(answer, 'ok', `link command ${line}`);
      });
      return last;
    },
    close() {
      child.kill('SIGKILL');
    },
  };
}

/** Every key `expected` names has the same value in `seen`; `took_ms` compares with {min, max}. */
function matches(expected, seen, at) {
  if (expected !== null && typeof expected === 'object' && !Array.isArray(expected)) {
    assert.ok(
      seen !== null && typeof seen === 'object',
      `${at}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(seen)}`,
    );
    for (const [key, value] of Object.entries(expected)) {
      const here = `${at}.${key}`;
      if (key === 'took_ms') {
        const took = seen[key];
        assert.ok(typeof took === 'number', `${here}: no time taken`);
        assert.ok(
          took >= (value.min ?? 0) && took <= (value.max ?? took),
          `${here}: ${took} ms, expected ${JSON.stringify(value)}`,
        );
      } else {
        matches(value, seen[key] ?? null, here);
      }
    }
    return;
  }
  assert.deepEqual(seen, expected, `${at}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(seen)}`);
}

class Run {
  constructor(scenario, server, link) {
    const reconnectTimeoutMs = scenario.client?.reconnect_timeout_ms ?? 30_000;
    this.server = server;
    this.link = link;
    this.linked = connect(`http://127.0.0.1:${link.port}`, { reconnectTimeoutMs });
    this.direct = connect(server.url, { reconnectTimeoutMs });
    this.sessions = new Map();
    this.openedIn = new Map(); // how long opening each session took, in ms
    this.blocks = new Map();
    this.later = [];
  }

  async step(step) {
    if ('open' in step) {
      const k = step.direct ? this.direct : this.linked;
      const started = performance.now();
      this.sessions.set(step.open, await k.session(step.open));
      this.openedIn.set(step.open, Math.round(performance.now() - started));
    } else if ('enter' in step) {
      const options = {};
      if (step.ttl_ms !== undefined) options.ttlMs = step.ttl_ms;
      if (step.timeout_ms !== undefined) options.timeoutMs = step.timeout_ms;
      const block = { state: 'pending', error: null, took_ms: null, lease: null };
      const started = performance.now();
      block.busy = this.sessions
        .get(step.session)
        .lease(step.intents, options)
        .then(
          (lease) => Object.assign(block, { state: 'held', lease }),
          (e) => Object.assign(block, { state: 'failed', error: { name: e.name } }),
        )
        .finally(() => (block.took_ms = Math.round(performance.now() - started)));
      this.blocks.set(step.enter, block);
    } else if ('exit' in step) {
      const block = this.blocks.get(step.exit);
      block.busy = block.lease.release().then(
        () => (block.state = 'exited'),
        (e) => Object.assign(block, { state: 'exited', error: { name: e.name } }),
      );
    } else if ('await' in step) {
      const bound = sleep(step.within_ms).then(() => 'late');
      const done = await Promise.race([this.blocks.get(step.await).busy.then(() => 'done'), bound]);
      assert.equal(done, 'done', `block ${step.await} did not settle within ${step.within_ms} ms`);
    } else if ('link' in step) {
      if (step.after_ms === undefined) await this.link.command(step.link);
      else this.later.push(sleep(step.after_ms).then(() => this.link.command(step.link)));
    } else if ('restart' in step) {
      await this.server.kill();
      this.server = await startServer(this.server.args, { port: this.server.port });
    } else if ('sleep' in step) {
      await sleep(step.sleep);
    } else if ('expect' in step) {
      matches(step.expect, await this.observed(step.expect), '');
    } else if ('eventually' in step) {
      const until = performance.now() + step.within_ms;
      for (;;) {
        try {
          matches(step.eventually, await this.observed(step.eventually), '');
          break;
        } catch (e) {
          if (performance.now() >= until) throw new Error(`not within ${step.within_ms} ms: ${e.message}`);
          await sleep(50);
        }
      }
    } else {
      throw new Error(`unknown step ${JSON.stringify(step)}`);
    }
  }

  async observed(expected) {
    const seen = {};
    if (expected.blocks) {
      seen.blocks = {};
      for (const name of Object.keys(expected.blocks)) {
        const block = this.blocks.get(name);
        const lost = block?.state === 'held' && block.lease.lost ? { name: block.lease.lost.name } : null;
        seen.blocks[name] = block ? { state: block.state, error: block.error, lost, took_ms: block.took_ms } : null;
      }
    }
    if (expected.sessions) {
      seen.sessions = {};
      for (const name of Object.keys(expected.sessions))
        seen.sessions[name] = { took_ms: this.openedIn.get(name) ?? null };
    }
    if (expected.holders) {
      seen.holders = {};
      for (const resource of Object.keys(expected.holders)) {
        const url = `${this.server.url}/v1/ns/default/resources/state?resource=${encodeURIComponent(resource)}`;
        const answer = await fetch(url);
        assert.equal(answer.status, 200, `resource state of ${resource}`);
        seen.holders[resource] = (await answer.json()).holders.map((h) => h.agent_id);
      }
    }
    if (expected.stats) {
      const answer = await fetch(`${this.server.url}/v1/ns/default/stats`);
      assert.equal(answer.status, 200, 'stats');
      seen.stats = await answer.json();
    }
    return seen;
  }

  async close() {
    await Promise.allSettled(this.later);
    for (const k of [this.linked, this.direct]) await k.close().catch(() => {}); // best effort: the link may be cut
    this.link.close();
    await this.server.stop();
  }
}

test('the remote scenarios are found', () => {
  assert.ok(files.length >= 6, String(files));
});

describe('the remote scenarios', { concurrency: 3 }, () => {
  for (const file of files) {
    const name = file.replace(/\.json$/, '');
    it(name, async () => {
      const scenario = JSON.parse(readFileSync(new URL(file, dir), 'utf8'));
      const data = mkdtempSync(join(tmpdir(), 'klock-rscen-'));
      const args = ['--data', join(data, 'klock.redb')];
      const server = await startServer(args);
      server.args = args;
      const link = await openLinkProcess(server.port);
      const run = new Run(scenario, server, link);
      try {
        for (const [i, step] of scenario.steps.entries()) {
          try {
            await run.step(step);
          } catch (e) {
            throw new Error(`${file}: step ${i} ${JSON.stringify(step)}: ${e.message}`, { cause: e });
          }
        }
      } finally {
        await run.close();
        rmSync(data, { recursive: true, force: true });
      }
    });
  }
});
