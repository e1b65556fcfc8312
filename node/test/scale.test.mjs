// A fleet behind one token, from one process (issue 27 item 2), as python/tests/test_scale.py:
// 2,000 sessions, each holding a lease and renewing it, through one `connect()`
// against a real `klock serve` with a token file and every limit at its default. One client
// reads one event stream per namespace, so the fleet holds one of the token's 256 long-polls,
// not one per session (2,000 streams would be refused). Bounded: well under a minute.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { startServer, klockBin } from './server.mjs';

const require = createRequire(import.meta.url);
const { connect } = require('../client.js');

const SESSIONS = 2000;
const TTL_MS = 30_000;
/** Leases are renewed a third of the way through their TTL: wait well past that for the last one (a loaded machine answers heartbeats late), well before any deadline. */
const HOLD_MS = TTL_MS / 2;

const dir = mkdtempSync(join(tmpdir(), 'klock-node-scale-'));
let running = null;
after(async () => {
  await running?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** A gauge of the server's /metrics. */
async function gauge(url, name) {
  const response = await fetch(`${url}/metrics`, { headers: { authorization: 'Bearer fleet-secret' } });
  const text = await response.text();
  const match = new RegExp(`^${name} (\\S+)$`, 'm').exec(text);
  assert.ok(match, `${name} not in /metrics`);
  return Number(match[1]);
}

test('2,000 sessions behind one token hold and renew their leases', async () => {
  const tokens = join(dir, 'tokens.json');
  const sha256 = execFileSync(klockBin(), ['token-hash'], { input: 'fleet-secret', encoding: 'utf8' }).trim();
  writeFileSync(tokens, JSON.stringify({ tokens: [{ name: 'fleet', sha256, role: 'agent', namespaces: ['*'] }] }));
  running = await startServer(['--memory', '--tokens', tokens]); // every limit at its default
  const k = connect(running.url, { token: 'fleet-secret', namespace: 'fleet' });
  const leases = [];
  try {
    // Opened and acquired 50 at a time, as a fleet's agents would start: concurrently.
    for (let i = 0; i < SESSIONS; i += 50) {
      const batch = Array.from({ length: 50 }, async (_, j) => {
        const session = await k.session(`agent-${i + j}`);
        return session.lease(`MUTATES FILE:/fleet/${i + j}`, { ttlMs: TTL_MS });
      });
      leases.push(...(await Promise.all(batch)));
    }
    const first = leases.map((lease) => lease.expiresAt);
    assert.equal(await gauge(running.url, 'klock_active_sessions'), SESSIONS);
    assert.equal(await gauge(running.url, 'klock_active_leases'), SESSIONS);
    // One stream for the whole process: the namespace's watch, not one per session.
    assert.ok((await gauge(running.url, 'klock_event_readers')) <= 1);

    // Past every lease's first renewal: each is held and was renewed.
    await new Promise((resolve) => setTimeout(resolve, HOLD_MS));
    const lost = leases.flatMap((lease, i) => (lease.held ? [] : [i]));
    assert.deepEqual(lost.slice(0, 5), [], `${lost.length} leases lost`);
    const renewed = leases.filter((lease, i) => lease.expiresAt > first[i]).length;
    assert.equal(renewed, SESSIONS, `only ${renewed} of ${SESSIONS} leases renewed`);
    assert.equal(await gauge(running.url, 'klock_active_leases'), SESSIONS);

    await Promise.all(leases.map((lease) => lease.release()));
    assert.equal(await gauge(running.url, 'klock_active_leases'), 0);
  } finally {
    await k.close();
  }
});
