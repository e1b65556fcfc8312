// The JavaScript replayer of resolved scripts (docs/VECTORS.md; written by
// scripts/resolve-vectors.sh from tests/vectors, checked there against the Rust kernel).
// Test code: it ships in neither package.
//
// `replay(api, script)` builds a kernel from the script's `config` through `api` (a module of
// the one JavaScript API: the Node addon or either wasm build, each giving `Kernel` and
// `KlockError`), makes exactly the call each step names at its `now`, and compares the answer
// (or the KlockError: code, name, message), every drained event and the snapshot at
// `snapshot_at` with the recorded ones, exactly: every key, no key missing, none extra. The
// API is camelCase and the scripts snake_case, so names are mapped once, generically, both
// ways. The first difference is reported with its path. An unknown `format`, op, call field
// or step key fails the script: nothing is ever skipped. The module is browser-safe (the
// dashboard's Chromium test runs it against the web build); run as a program it is the CLI:
//
//   node bindings/js-replay/replay.mjs MODULE PATH...
//
// MODULE is the package to load (node/index.js, bindings/wasm/pkg-nodejs/klock_wasm.js),
// PATH a script or a folder of them. It prints `ok <file>: <name>` or
// `FAIL <file>: <name>: step k: <what differed>` per script, then `N passed, M failed`, and
// exits 1 when any failed or none ran, 2 on a usage error.

export const FORMAT = 'klock-script/1';
const SCRIPT_KEYS = ['config', 'format', 'name', 'steps', 'vector'];
const STEP_KEYS = ['call', 'events', 'now', 'result', 'snapshot', 'snapshot_at'];

const snake = (name) => name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
const camel = (name) => name.replace(/_([a-z])/g, (_, c) => c.toUpperCase());
const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

/** A value of the JS API in the scripts' spelling: every key snake_case, deeply. */
export function canonical(value) {
  if (Array.isArray(value)) return value.map(canonical);
  if (!isObject(value)) return value;
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [snake(k), canonical(v)]));
}

/** A recorded input object (config, options, digest) in the API's spelling; a `null` field
 * is "not given", which the API spells by leaving the key out. */
function input(value) {
  if (Array.isArray(value)) return value.map(input);
  if (!isObject(value)) return value;
  return Object.fromEntries(
    Object.entries(value)
      .filter(([, v]) => v !== null)
      .map(([k, v]) => [camel(k), input(v)]),
  );
}

const done = (returned) => (returned === undefined ? { output: 'done' } : { output: 'done', returned });

/** Every op: the call's fields besides `op`, and the one API call it names (its answer as the
 * recorded `Output`). */
const OPS = {
  open: [
    ['agent_id', 'namespace'],
    (k, c, now) => ({ output: 'session', session: k.openSession(c.agent_id, c.namespace, now) }),
  ],
  close: [['session'], (k, c, now) => done(k.closeSession(c.session, now))],
  suspend: [['session'], (k, c, now) => done(k.suspendSession(c.session, now))],
  digest: [['session'], (k, c, now) => ({ output: 'digest', digest: k.digest(c.session, now) })],
  resume: [['digest'], (k, c, now) => ({ output: 'session', session: k.resumeSession(input(c.digest), now) })],
  acquire: [
    ['intents', 'options', 'session'],
    (k, c, now) => ({ output: 'verdict', verdict: k.acquire(c.session, c.intents, input(c.options), now) }),
  ],
  heartbeat: [
    ['leases', 'session'],
    (k, c, now) => ({ output: 'heartbeat', results: k.heartbeat(c.session, c.leases ?? 'all', now) }),
  ],
  release: [
    ['lease', 'session'],
    (k, c, now) => ({ output: 'released', released: k.release(c.session, c.lease, now) }),
  ],
  release_all: [['session'], (k, c, now) => ({ output: 'released_all', count: k.releaseAll(c.session, now) })],
  reconcile: [
    ['leases', 'session'],
    (k, c, now) => ({ output: 'reconcile', statuses: k.reconcile(c.session, c.leases, now) }),
  ],
  cancel_wait: [['session', 'ticket'], (k, c, now) => done(k.cancelWait(c.session, c.ticket, now))],
  advance: [[], (k, c, now) => done(k.advance(now))],
  resource_state: [
    ['namespace', 'resource'],
    (k, c, now) => ({ output: 'resource_state', state: k.resourceState(c.resource, c.namespace, now) }),
  ],
  next_deadline: [[], (k) => ({ output: 'next_deadline', deadline: k.nextDeadline() })],
};

const show = (v) => {
  const text = v === undefined ? 'undefined' : JSON.stringify(v);
  return text.length > 240 ? `${text.slice(0, 240)}...` : text;
};

/** The first difference between a recorded value and a replayed one, or null. */
export function diff(want, got, path) {
  if (Array.isArray(want) && Array.isArray(got)) {
    if (want.length !== got.length)
      return `${path}: expected ${want.length} items, got ${got.length}: expected ${show(want)}, got ${show(got)}`;
    for (let i = 0; i < want.length; i++) {
      const d = diff(want[i], got[i], `${path}[${i}]`);
      if (d) return d;
    }
    return null;
  }
  if (isObject(want) && isObject(got)) {
    for (const key of Object.keys(want))
      if (!Object.hasOwn(got, key)) return `${path}.${key}: missing (expected ${show(want[key])})`;
    for (const key of Object.keys(got))
      if (!Object.hasOwn(want, key)) return `${path}.${key}: not expected (got ${show(got[key])})`;
    for (const key of Object.keys(want)) {
      const d = diff(want[key], got[key], `${path}.${key}`);
      if (d) return d;
    }
    return null;
  }
  const same = Array.isArray(want) === Array.isArray(got) && isObject(want) === isObject(got) && Object.is(want, got);
  return same ? null : `${path}: expected ${show(want)}, got ${show(got)}`;
}

/** Throws when `object` has other keys than `keys` (sorted). */
function exactKeys(object, keys, what) {
  const have = isObject(object) ? Object.keys(object).sort() : [];
  if (have.join() !== keys.join())
    throw new Error(`${what} must have exactly the keys ${keys.join(', ')}; it has ${have.join(', ') || 'none'}`);
}

/** The step's call through the API: `{ok}` with the answer, or `{error}` for a KlockError. */
function call(api, kernel, step) {
  const c = step.call;
  const op = isObject(c) ? OPS[c.op] : undefined;
  if (!op) throw new Error(`unknown op ${show(c?.op)}: this replayer knows ${Object.keys(OPS).join(', ')}`);
  exactKeys(c, ['op', ...op[0]].sort(), `the ${c.op} call`);
  try {
    return { ok: canonical(op[1](kernel, c, step.now)) };
  } catch (e) {
    if (!(e instanceof api.KlockError)) throw e;
    return { error: { code: e.code, name: e.name, message: e.message } };
  }
}

/** Replays one parsed script; returns null when it reproduces exactly, or what differed. */
export function replay(api, script) {
  exactKeys(script, SCRIPT_KEYS, 'a script');
  if (script.format !== FORMAT)
    throw new Error(`unknown format ${show(script.format)} (this replayer reads ${FORMAT})`);
  if (!Array.isArray(script.steps) || script.steps.length === 0) throw new Error('a script needs at least one step');
  const kernel = new api.Kernel(input(script.config));
  try {
    for (const [i, step] of script.steps.entries()) {
      const where = `step ${i + 1} (${show(step?.call?.op)} at ${show(step?.now)})`;
      try {
        exactKeys(step, STEP_KEYS, 'a step');
        const d =
          diff(step.result, call(api, kernel, step), 'result') ??
          diff(step.events, canonical(kernel.drainEvents()), 'events') ??
          diff(step.snapshot, canonical(kernel.snapshot(step.snapshot_at)), 'snapshot');
        if (d) return `${where}: ${d}`;
      } catch (e) {
        return `${where}: ${e?.name ?? 'Error'}: ${e?.message ?? e}`;
      }
    }
    return null;
  } finally {
    kernel.free?.(); // the wasm builds' memory; the Node addon's is collected
  }
}

/** Replays `[file, text]` pairs: one report line each, and the counts. */
export function replayAll(api, entries) {
  const lines = [];
  for (const [file, text] of entries) {
    let name = '(unnamed)';
    let failure;
    try {
      const script = JSON.parse(text);
      if (typeof script?.name === 'string') name = script.name;
      failure = replay(api, script);
    } catch (e) {
      failure = `${e?.name ?? 'Error'}: ${e?.message ?? e}`;
    }
    lines.push(failure === null ? `ok ${file}: ${name}` : `FAIL ${file}: ${name}: ${failure}`);
  }
  const failed = lines.filter((l) => !l.startsWith('ok ')).length;
  return { lines, passed: lines.length - failed, failed };
}

/** The CLI (see the header). */
async function main(argv) {
  const { readFileSync, readdirSync, statSync } = await import('node:fs');
  const { join, resolve } = await import('node:path');
  const { createRequire } = await import('node:module');
  if (argv.length < 2) {
    console.error(
      "usage: node bindings/js-replay/replay.mjs MODULE PATH...  (MODULE: node/index.js or a wasm build's klock_wasm.js)",
    );
    return 2;
  }
  const api = createRequire(import.meta.url)(resolve(argv[0]));
  const files = argv.slice(1).flatMap((p) => {
    const isDir = (() => {
      try {
        return statSync(p).isDirectory();
      } catch {
        return false;
      }
    })();
    return isDir
      ? readdirSync(p)
          .filter((n) => n.endsWith('.json'))
          .sort()
          .map((n) => join(p, n))
      : [p];
  });
  const entries = files.map((f) => {
    try {
      return [f, readFileSync(f, 'utf8')];
    } catch (e) {
      return [f, `cannot read: ${e.message}`];
    }
  });
  const { lines, passed, failed } = replayAll(api, entries);
  for (const line of lines) console.log(line);
  console.log(`${passed} passed, ${failed} failed`);
  return failed > 0 || passed === 0 ? 1 : 0;
}

if (
  typeof process !== 'undefined' &&
  process.argv?.[1] &&
  import.meta.url === (await import('node:url')).pathToFileURL(process.argv[1]).href
) {
  process.exitCode = await main(process.argv.slice(2));
}
