// One Node agent process of the fleet demo (`bash scripts/demo.sh`, examples/fleet/run.py):
// the twin of agent.py, with the same arguments, the same kind of plan and the same output.
//
// It makes read-modify-write edits to JSON files in a shared folder (read, think, append the
// edit's id, write back); a unit of work is one file or two (the second file's lease taken
// while holding the first). `--mode plain` edits with no coordination; `--mode klock` holds
// `MUTATES FILE:/<name>` through `connect(URL)` and writes with `fencedWrite(path, data,
// fence)`. A Died or a lost lease rolls the unit back and redoes it; an edit id is appended
// only once, so a redo after a write that did land changes nothing.
//
// SIGUSR2 asks a `--mode klock` agent to be frozen (see agent.py): in its next edit, right
// after reading, it says {"frozen": path} and the orchestrator stops it (SIGSTOP) past the
// lease's TTL; when it wakes up, `fencedWrite` refuses its now stale fence.
//
// Output on stdout, one JSON object per line: {"progress": [ids]} after each unit (the ids of its edits, now written), then
// {"done": {...counts...}}. Exit status 0, or 1 with {"error": "..."} on the last line.

import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import { connect, fencedWrite, Died, LeaseLost, StaleFence } from '../../node/client.js';

/** mulberry32: a small seeded generator, so a run is repeatable. */
function generator(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The agent's units: one file index, or two (nested), about 30 % of them two. */
function plan(seed, edits, files) {
  const random = generator(seed);
  const below = (n) => Math.floor(random() * n);
  const units = [];
  for (let left = edits; left > 0;) {
    if (left >= 2 && random() < 0.3) {
      const a = below(files);
      units.push([a, (a + 1 + below(files - 1)) % files]);
      left -= 2;
    } else {
      units.push([below(files)]);
      left -= 1;
    }
  }
  return units;
}

const read = (path) => JSON.parse(readFileSync(path, 'utf8'));

function add(data, edit) {
  if (!data.edits.includes(edit)) data.edits.push(edit);
  return JSON.stringify(data);
}

/** Whole-file replace (readers never see half a file), with no coordination at all. */
function plainWrite(path, body) {
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, body);
  renameSync(tmp, path);
}

const emit = (obj) => process.stdout.write(`${JSON.stringify(obj)}\n`);

async function main() {
  const { values: args } = parseArgs({
    options: {
      name: { type: 'string' },
      root: { type: 'string' },
      files: { type: 'string' },
      edits: { type: 'string' },
      seed: { type: 'string' },
      'think-ms': { type: 'string', default: '5' },
      mode: { type: 'string' },
      server: { type: 'string' },
      namespace: { type: 'string', default: 'fleet' },
      'ttl-ms': { type: 'string', default: '2000' },
    },
    strict: true,
  });
  for (const required of ['name', 'root', 'files', 'edits', 'seed', 'mode']) {
    if (args[required] === undefined) throw new Error(`--${required} is required`);
  }
  if (args.mode !== 'plain' && args.mode !== 'klock') throw new Error('--mode is plain or klock');
  if (args.mode === 'klock' && !args.server) throw new Error('--mode klock needs --server URL');
  const files = Number(args.files);
  const thinkMs = Number(args['think-ms']);
  const random = generator(Number(args.seed) ^ 0x5eed);
  const think = () => sleep((0.5 + random()) * thinkMs);
  const path = (i) => join(args.root, `file${i}.json`);
  const counts = { edits: 0, fences_refused: 0, rollbacks: 0 };
  const units = plan(Number(args.seed), Number(args.edits), files);

  if (args.mode === 'plain') {
    for (const [serial, unit] of units.entries()) {
      for (const [k, i] of unit.entries()) {
        const data = read(path(i));
        await think();
        plainWrite(path(i), add(data, `${args.name}-${serial}.${k}`));
      }
      counts.edits += unit.length;
      emit({ progress: unit.map((_, k) => `${args.name}-${serial}.${k}`) });
    }
    emit({ done: counts });
    return;
  }

  const client = await connect(args.server, { namespace: args.namespace });
  const session = await client.session(args.name);

  let freezeAsked = false;
  process.on('SIGUSR2', () => {
    freezeAsked = true;
  });

  /** One fenced read-modify-write; false if the file refused the fence. */
  async function edit(i, serial, k, fence) {
    const data = read(path(i));
    if (freezeAsked) {
      freezeAsked = false;
      emit({ frozen: path(i) });
      await sleep(500); // stopped in here by the orchestrator, past the lease's TTL
    } else {
      await think();
    }
    try {
      await fencedWrite(path(i), add(data, `${args.name}-${serial}.${k}`), fence);
      return true;
    } catch (e) {
      if (!(e instanceof StaleFence)) throw e;
      counts.fences_refused++;
      return false;
    }
  }

  const lease = { ttlMs: Number(args['ttl-ms']), timeoutMs: 120_000 };
  for (const [serial, unit] of units.entries()) {
    for (let done = false; !done;) {
      try {
        done = await session.withLease(
          `MUTATES FILE:/file${unit[0]}.json`,
          async (outer) => {
            let ok = await edit(unit[0], serial, 0, outer.fence);
            if (unit.length === 2) {
              const inner = await session.withLease(
                `MUTATES FILE:/file${unit[1]}.json`,
                (held) => edit(unit[1], serial, 1, held.fence),
                lease,
              );
              ok = inner && ok;
            }
            return ok;
          },
          lease,
        );
      } catch (e) {
        if (e instanceof Died) {
          // Wait-Die rollback: everything is released; back off as told, redo the unit.
          counts.rollbacks++;
          await sleep(e.retryAfterMs);
        } else if (e instanceof LeaseLost) {
          counts.rollbacks++;
        } else {
          throw e;
        }
      }
    }
    counts.edits += unit.length;
    emit({ progress: unit.map((_, k) => `${args.name}-${serial}.${k}`) });
  }
  const c = client.counters;
  Object.assign(counts, {
    waits: c.waits,
    deaths: c.deaths,
    retries: c.retries + counts.rollbacks,
    lost_leases: c.lost,
  });
  await session.close();
  await client.close();
  emit({ done: counts });
}

main().then(
  () => process.exit(0),
  (e) => {
    emit({ error: `${e?.name ?? 'Error'}: ${e?.message ?? e}` });
    process.exit(1);
  },
);
