// The replayer's tests for one JavaScript host, shared by node/test/conformance.test.mjs (the
// Node addon) and bindings/wasm/test/replay.test.mjs (the wasm nodejs build); the dashboard's
// Chromium test replays the same scripts against the web build. Test code, shipped nowhere.
//
// `replayTests(label, modulePath)` registers: every resolved script replays exactly (one per
// vector of tests/vectors, none missing); every mutant fails, at the step and in the part
// (result, events, snapshot) its name says was changed; broken scripts fail loudly; the CLI's
// lines and exit codes. The scripts come from `bash scripts/resolve-vectors.sh` (the test
// scripts run it first).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { replayAll } from './replay.mjs';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const CLI = fileURLToPath(new URL('./replay.mjs', import.meta.url));
const OUT = join(process.env.CARGO_TARGET_DIR ?? join(ROOT, 'target'), 'conformance');

/** `[file, text]` of every .json file in `dir` (sorted); a clear failure when it is missing. */
export function readScripts(dir) {
  assert.ok(existsSync(dir), `${dir} is missing: run bash scripts/resolve-vectors.sh first`);
  return readdirSync(dir)
    .filter((n) => n.endsWith('.json'))
    .sort()
    .map((n) => [join(dir, n), readFileSync(join(dir, n), 'utf8')]);
}

/** The directories of the resolved scripts and of their mutants. */
export const SCRIPTS = join(OUT, 'scripts');
export const MUTANTS = join(OUT, 'mutants');

export function replayTests(label, modulePath) {
  const api = createRequire(import.meta.url)(modulePath);

  test(`${label}: every resolved script replays exactly, one per vector`, () => {
    const scripts = readScripts(SCRIPTS);
    const { lines, passed, failed } = replayAll(api, scripts);
    assert.deepEqual(
      lines.filter((l) => !l.startsWith('ok ')),
      [],
    );
    const vectors = readdirSync(join(ROOT, 'tests', 'vectors')).filter((n) => n.endsWith('.json'));
    assert.ok(vectors.length > 0, 'zero vectors is a failure');
    assert.equal(passed, vectors.length);
    assert.equal(failed, 0);
    const covered = scripts.map(([, text]) => JSON.parse(text).vector.replace(/^tests\/vectors\//, '')).sort();
    assert.deepEqual(covered, vectors.sort(), 'every vector has its script');
  });

  test(`${label}: every mutant fails, at the step and in the part that was changed`, () => {
    const mutants = readScripts(MUTANTS);
    assert.ok(mutants.length > 0, 'zero mutants is a failure');
    const { lines, passed } = replayAll(api, mutants);
    assert.deepEqual(
      lines.filter((l) => l.startsWith('ok ')),
      [],
      'a mutant passed: the replayer ignores that value',
    );
    assert.equal(passed, 0);
    const misplaced = lines.filter((l) => {
      const [, step, part] = l.match(/: MUTANT step (\d+): (result|events|snapshot)\b/) ?? [];
      return !step || !new RegExp(`\\): step ${step} \\([^)]*\\): ${part}[.[:]`).test(l);
    });
    assert.deepEqual(misplaced, [], 'a mutant failed, but not where it was changed');
  });

  test(`${label}: a broken script fails loudly, never silently`, () => {
    const [file, text] = readScripts(SCRIPTS)[0];
    const base = JSON.parse(text);
    const broken = (name, edit) => {
      const script = structuredClone(base);
      edit(script);
      return [name, JSON.stringify(script)];
    };
    const cases = [
      broken('format', (s) => (s.format = 'klock-script/2')),
      broken('op', (s) => (s.steps[0].call.op = 'teleport')),
      broken('call field', (s) => (s.steps[0].call.extra = 1)),
      broken('step key', (s) => (s.steps[0].comment = 'hi')),
      broken('missing step key', (s) => delete s.steps[0].events),
      broken('script key', (s) => (s.extra = true)),
      broken('no steps', (s) => (s.steps = [])),
      broken('config', (s) => (s.config.typo_ms = 5)),
      broken('a value', (s) => (s.steps[0].now += 1_000_000_000)),
      ['not JSON', '{"format": '],
    ];
    const { lines, passed, failed } = replayAll(api, cases);
    assert.equal(passed, 0, lines.join('\n'));
    assert.equal(failed, cases.length);
    assert.match(lines[0], /^FAIL format: .*unknown format "klock-script\/2"/);
    assert.match(lines[1], /^FAIL op: .*step 1 .*unknown op "teleport"/);
    assert.match(lines[2], /^FAIL call field: .*the open call must have exactly the keys/);
    assert.match(lines[7], /^FAIL config: .*INVALID_CONFIG: unknown config field "typoMs"/);
    assert.match(lines[9], /^FAIL not JSON: \(unnamed\): SyntaxError/);
    assert.deepEqual(replayAll(api, [[file, text]]).lines, [`ok ${file}: ${base.name}`]);
  });

  test(`${label}: the CLI prints a line per script and the counts, and its exit code`, () => {
    const run = (...args) => spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 60_000 });
    const [file] = readScripts(SCRIPTS)[0];
    const ok = run(modulePath, file);
    assert.equal(ok.status, 0, ok.stderr);
    assert.match(ok.stdout, /^ok .*: .*\n1 passed, 0 failed\n$/);
    const dir = mkdtempSync(join(tmpdir(), 'klock-replay-'));
    try {
      const none = run(modulePath, dir);
      assert.equal(none.status, 1, 'zero scripts is a failure');
      assert.equal(none.stdout, '0 passed, 0 failed\n');
      writeFileSync(join(dir, 'bad.json'), JSON.stringify({ ...JSON.parse(readFileSync(file, 'utf8')), format: 'x' }));
      const bad = run(modulePath, file, dir);
      assert.equal(bad.status, 1);
      assert.match(bad.stdout, /\nFAIL .*bad\.json: .*unknown format "x".*\n1 passed, 1 failed\n$/);
    } finally {
      rmSync(dir, { recursive: true });
    }
    assert.equal(run(modulePath).status, 2, 'usage');
  });
}
