// 200 concurrent async agents × 200 lease cycles on 20 resources: per-resource counters
// updated with a read, an await and a write prove that no update is lost, and the run
// finishing proves there is no deadlock (two-resource manifests in random order are exactly
// what deadlocks a naive lock manager).
//
// Each counter is a fenced store, as SPEC.md §7 asks of a protected resource: a read or a
// write carrying a fence smaller than the largest the store has seen is refused. Under
// wait_die and lanes no holder is ever revoked, so two blocks are never inside one resource
// at once and the store never refuses anything. Under wound_wait an older session revokes
// a younger holder while its block still runs: the fence is what keeps the revoked block from
// overwriting the newer holder's update, and the revoked block is redone.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { Klock } = require('../client.js');

const AGENTS = 200;
const CYCLES = 200;
const RESOURCES = 20;

/** A small deterministic generator per agent (xorshift32). */
function rng(seed) {
  let x = seed | 0 || 1;
  return (n) => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) % n;
  };
}

// Wound-wait revokes every younger waiter queued ahead of each older arrival; the client backs
// off after a wound (as after a DIE), which keeps that churn bounded at this size.
const RUNS = [
  ['wait_die', AGENTS, CYCLES],
  ['lanes', AGENTS, CYCLES],
  ['wound_wait', AGENTS, CYCLES],
];

for (const [policy, AGENTS, CYCLES] of RUNS) {
  test(
    `${AGENTS} agents × ${CYCLES} cycles on ${RESOURCES} resources (${policy}): no lost update, no deadlock`,
    { timeout: 600_000 },
    async () => {
      const klock = new Klock({ policy, seed: 42, backoffBaseMs: 1, backoffCapMs: 16 });
      const store = Array.from({ length: RESOURCES }, () => ({ value: 0, fence: 0, refused: 0 }));
      const expected = new Array(RESOURCES).fill(0);
      const inside = new Array(RESOURCES).fill(0);
      let overlaps = 0;
      let lostBlocks = 0;
      let completed = 0;

      /** The fenced store: refuses a stale fence, remembers the largest seen. */
      function access(r, fence) {
        const s = store[r];
        if (fence < s.fence) {
          s.refused++;
          return false;
        }
        s.fence = fence;
        return true;
      }

      async function agent(i) {
        const session = await klock.session(`agent-${i}`);
        const next = rng(0x9e3779b1 * (i + 1));
        let done = 0;
        while (done < CYCLES) {
          const a = next(RESOURCES);
          const b = (a + 1 + next(RESOURCES - 1)) % RESOURCES;
          const picked = next(4) === 0 ? [a] : [a, b];
          try {
            await session.withLease(
              picked.map((r) => `MUTATES FILE:/shared/r${r}`),
              async (lease) => {
                const fences = picked.map((r) => lease.fences[`FILE:/shared/r${r}`]);
                for (const r of picked) if (inside[r]++ > 0) overlaps++;
                try {
                  if (!picked.every((r, k) => access(r, fences[k]))) return;
                  const seen = picked.map((r) => store[r].value);
                  await new Promise((resolve) => setImmediate(resolve));
                  if (!picked.every((r, k) => access(r, fences[k]))) return;
                  picked.forEach((r, k) => {
                    store[r].value = seen[k] + 1;
                    expected[r]++;
                  });
                } finally {
                  for (const r of picked) inside[r]--;
                }
              },
              { ttlMs: 60_000 },
            );
            done++;
            completed++;
          } catch (e) {
            // wound_wait may revoke a block while it runs; it is redone, as a caller would.
            if (e?.name === 'LEASE_RELEASED') {
              lostBlocks++;
              continue;
            }
            throw e;
          }
        }
        session.close();
      }

      const t0 = Date.now();
      await Promise.all(Array.from({ length: AGENTS }, (_, i) => agent(i)));
      const seconds = (Date.now() - t0) / 1000;
      const stats = klock.stats().counters;
      klock.close();

      assert.deepEqual(
        store.map((s) => s.value),
        expected,
        'an update was lost',
      );
      const refused = store.reduce((n, s) => n + s.refused, 0);
      if (policy !== 'wound_wait') {
        assert.equal(overlaps, 0, 'two holders were inside one resource at once');
        assert.equal(refused, 0, 'a holder carried a stale fence');
      }
      assert.equal(completed, AGENTS * CYCLES);
      assert.ok(stats.granted >= AGENTS * CYCLES);
      assert.equal(stats.defensiveRepairs, 0);
      if (policy !== 'wound_wait') assert.equal(lostBlocks, 0);
      assert.equal(klock.timerError, null);
      console.log(
        `# ${policy}: ${AGENTS * CYCLES} cycles in ${seconds.toFixed(1)} s; kernel granted ${stats.granted}, waited ${stats.waited}, ` +
          `died ${stats.died}, wounded ${stats.wounded}; client retries ${klock.counters.retries}, lost blocks ${lostBlocks}, ` +
          `stale fences refused ${refused}`,
      );
    },
  );
}
