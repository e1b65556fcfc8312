// The page's wait-for graph (dashboard/waitfor.js) held to the kernel (the --target nodejs
// build): in seeded random runs under detect and lanes (everyone may wait), the blockers the
// page derives for every new ticket equal the held_by of its WAIT verdict, and under detect
// the graph never has a cycle after a call (the kernel breaks each one). Run by
// `node --test dashboard/test/`.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { blockersOf, waitFor, conflicts, overlaps, cycleText } from '../waitfor.js';

const require = createRequire(import.meta.url);
const { Kernel } = require('../../bindings/wasm/pkg-nodejs/klock_wasm.js');

const RESOURCES = ['FILE:/', 'FILE:/a', 'FILE:/a/b', 'FILE:/a/c', 'FILE:/ab', 'SYMBOL:/a'];
const PREDICATES = ['PROVIDES', 'CONSUMES', 'MUTATES', 'DELETES', 'DEPENDS_ON', 'RENAMES'];

/** A small seeded generator (mulberry32): the same run every time. */
function rng(seed) {
  let a = seed >>> 0;
  return (n) => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return Math.floor((((t ^ (t >>> 14)) >>> 0) / 4294967296) * n);
  };
}

/** The kernel's camelCase snapshot in the server's snake_case (what the page reads). */
function snake(value) {
  if (Array.isArray(value)) return value.map(snake);
  if (value === null || typeof value !== 'object') return value;
  return Object.fromEntries(
    Object.entries(value).map(([k, v]) => [k.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`), snake(v)]),
  );
}

function hasCycle(edges) {
  const next = new Map();
  for (const e of edges) next.set(e.from, [...(next.get(e.from) ?? []), e.to]);
  const state = new Map(); // 1 on the path, 2 done
  const visit = (n) => {
    if (state.get(n) === 1) return true;
    if (state.get(n) === 2) return false;
    state.set(n, 1);
    const found = (next.get(n) ?? []).some(visit);
    state.set(n, 2);
    return found;
  };
  return [...next.keys()].some(visit);
}

function run(policy, seed, steps) {
  const pick = rng(seed);
  const kernel = new Kernel({ policy, seed });
  const namespaces = ['default', 'other'];
  const sessions = [];
  for (let i = 0; i < 6; i++) {
    sessions.push(kernel.openSession(`agent-${i}`, namespaces[i % 3 === 2 ? 1 : 0], 0).sessionId);
  }
  let now = 0;
  let waits = 0;
  let cycles = 0;
  for (let step = 0; step < steps; step++) {
    now += pick(20);
    const session = sessions[pick(sessions.length)];
    if (pick(4) === 0) {
      kernel.releaseAll(session, now);
    } else {
      const intents = Array.from(
        { length: 1 + pick(2) },
        () => `${PREDICATES[pick(PREDICATES.length)]} ${RESOURCES[pick(RESOURCES.length)]}`,
      );
      let v;
      try {
        v = kernel.acquire(session, intents, { wait: true, ttlMs: 100_000, waitTimeoutMs: 100_000 }, now);
      } catch {
        continue; // hold-and-wait limits and the like: nothing to compare
      }
      if (v.verdict === 'WAIT') {
        waits++;
        const snap = snake(kernel.snapshot(now));
        const ticket = snap.tickets.find((t) => t.ticket === v.ticket);
        assert.ok(ticket, `ticket ${v.ticket} is in the snapshot`);
        assert.deepEqual(
          blockersOf(snap, ticket),
          v.heldBy.map((b) => b.sessionId).sort((a, b) => a - b),
          `${policy} seed ${seed} step ${step}: the blockers of ticket ${v.ticket} (${intents.join(', ')})`,
        );
      }
      if (v.verdict === 'DIE' && v.cycle?.length) cycles++;
    }
    for (const e of kernel.drainEvents()) if (e.event === 'DIED' && e.cycle?.length) cycles++;
    if (policy === 'detect') {
      assert.ok(!hasCycle(waitFor(snake(kernel.snapshot(now)))), `detect left a cycle at step ${step}`);
    }
  }
  kernel.free();
  return { waits, cycles };
}

test('the wait-for edges the page derives are the kernel blockers of every WAIT verdict', () => {
  for (const policy of ['detect', 'lanes']) {
    let waits = 0;
    let cycles = 0;
    for (let seed = 1; seed <= 12; seed++) {
      const r = run(policy, seed, 300);
      waits += r.waits;
      cycles += r.cycles;
    }
    assert.ok(waits > 200, `${policy}: ${waits} WAIT verdicts compared`);
    if (policy === 'detect') assert.ok(cycles > 5, `detect broke ${cycles} cycles`);
  }
});

test('overlap and conflicts follow SPEC.md §3 and §4', () => {
  assert.ok(overlaps('FILE:/a', 'FILE:/a/b') && overlaps('FILE:/a/b', 'FILE:/a') && overlaps('FILE:/', 'FILE:/x'));
  assert.ok(!overlaps('FILE:/a', 'FILE:/ab') && !overlaps('FILE:/a', 'SYMBOL:/a'));
  assert.ok(!conflicts('CONSUMES', 'DEPENDS_ON') && !conflicts('PROVIDES', 'CONSUMES'));
  assert.ok(
    conflicts('PROVIDES', 'PROVIDES') && conflicts('MUTATES', 'CONSUMES') && conflicts('RENAMES', 'DEPENDS_ON'),
  );
  assert.equal(
    cycleText([3, 1], (s) => `s${s}`),
    's3 → s1 → s3',
  );
});
