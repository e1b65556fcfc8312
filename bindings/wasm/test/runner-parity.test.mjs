// The wasm conformance runner is exactly as strict as the Rust one (conformance/src/):
// every vector of tests/vectors is mutated in several ways (a number bumped by one, a key
// misspelt, an integer written as a float, a duplicated key, another error name, an unknown
// event kind, another verdict), and both runners must give the same ok/FAIL for every file —
// the unmutated vectors included. A runner that checked less would pass a mutant the other
// fails. Builds the Rust runner (cargo, release) when it is not built yet.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..', '..', '..');
const vectors = join(root, 'tests', 'vectors');

function rustRunner() {
  const bin = join(process.env.CARGO_TARGET_DIR ?? join(root, 'target'), 'release', 'klock-conformance');
  if (!existsSync(bin)) execFileSync('cargo', ['build', '-q', '--release', '-p', 'klock-conformance'], { cwd: root, stdio: 'inherit' });
  return bin;
}

/** `{file: 'ok' | 'FAIL'}` from a runner's output lines. */
function outcomes(stdout) {
  const out = {};
  for (const line of stdout.split('\n')) {
    const m = /^(ok|FAIL) (.+?\.json): /.exec(line);
    if (m) out[m[2]] = m[1];
  }
  return out;
}

function hash(text) {
  let h = 2166136261;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 16777619) >>> 0;
  return h;
}

/** Mutants of one vector's text: [suffix, text] pairs (only those that apply). */
function mutants(name, text) {
  const out = [];
  // Integer values (after `:`, `[` or `,`, outside strings because strings start with a quote).
  const numbers = [...text.matchAll(/(?<=[:[,]\s*)\d+(?=\s*[,\]}])/g)];
  for (const k of [0, 1, 2]) {
    if (numbers.length === 0) break;
    const m = numbers[(hash(name) + k * 7919) % numbers.length];
    out.push([`bump${k}`, text.slice(0, m.index) + String(Number(m[0]) + 1) + text.slice(m.index + m[0].length)]);
  }
  if (numbers.length > 0) {
    const m = numbers[hash(`${name}f`) % numbers.length];
    out.push(['float', `${text.slice(0, m.index)}${m[0]}.0${text.slice(m.index + m[0].length)}`]);
  }
  const replaceFirst = (suffix, from, to) => {
    if (text.includes(from)) out.push([suffix, text.replace(from, to)]);
  };
  replaceFirst('typo', '"expect"', '"expext"');
  replaceFirst('dup', '"now": ', '"now": 0, "now": ');
  replaceFirst('event', '"event": "GRANTED"', '"event": "GRANTD"');
  const error = /"error": "([A-Z_]+)"/.exec(text);
  if (error) out.push(['error', text.replace(error[0], `"error": "${error[1] === 'NOT_OWNER' ? 'UNKNOWN_LEASE' : 'NOT_OWNER'}"`)]);
  const verdict = /"verdict": "(GRANTED|WAIT|DIE)"/.exec(text);
  if (verdict) out.push(['verdict', text.replace(verdict[0], `"verdict": "${verdict[1] === 'WAIT' ? 'DIE' : 'WAIT'}"`)]);
  return out;
}

test('the wasm runner and the Rust runner agree on every vector and every mutant', () => {
  const bin = rustRunner();
  const dir = mkdtempSync(join(tmpdir(), 'klock-parity-'));
  try {
    let count = 0;
    for (const name of readdirSync(vectors).filter((n) => n.endsWith('.json')).sort()) {
      const text = readFileSync(join(vectors, name), 'utf8');
      writeFileSync(join(dir, name), text);
      count++;
      for (const [suffix, mutant] of mutants(name, text)) {
        writeFileSync(join(dir, name.replace(/\.json$/, `.${suffix}.json`)), mutant);
        count++;
      }
    }
    const rust = spawnSync(bin, [dir], { encoding: 'utf8', maxBuffer: 64 << 20 });
    const wasm = spawnSync(process.execPath, [join(here, '..', 'conformance.mjs'), dir], { encoding: 'utf8', maxBuffer: 64 << 20 });
    const r = outcomes(rust.stdout);
    const w = outcomes(wasm.stdout);
    assert.equal(Object.keys(r).length, count, `the Rust runner reported ${Object.keys(r).length} of ${count} files`);
    assert.equal(Object.keys(w).length, count, `the wasm runner reported ${Object.keys(w).length} of ${count} files`);
    const differ = Object.keys(r).filter((f) => r[f] !== w[f]);
    const lines = (out, f) => out.split('\n').find((l) => l.includes(f)) ?? '(no line)';
    assert.deepEqual(
      differ.map((f) => `${f}: rust ${lines(rust.stdout, f)} | wasm ${lines(wasm.stdout, f)}`),
      [],
      'the two runners disagree',
    );
    const failed = Object.values(r).filter((x) => x === 'FAIL').length;
    const originals = Object.keys(r).filter((f) => !/\.\w+\.json$/.test(f));
    assert.deepEqual(originals.filter((f) => r[f] !== 'ok'), [], 'every unmutated vector passes');
    // A misspelt key, a float, a duplicate key, an unknown event, another error or verdict
    // must always fail; a bumped number fails when it matters (a `now` may not).
    const mustFail = Object.keys(r).filter((f) => /\.(typo|float|dup|event|error|verdict)\.json$/.test(f));
    assert.deepEqual(mustFail.filter((f) => r[f] !== 'FAIL'), [], 'mutants that both runners must reject');
    const bumps = Object.keys(r).filter((f) => /\.bump\d\.json$/.test(f));
    const bumpsFailed = bumps.filter((f) => r[f] === 'FAIL').length;
    assert.equal(wasm.status, 1);
    assert.equal(rust.status, 1);
    console.log(`parity: ${count} files (${originals.length} vectors, ${mustFail.length} malformed mutants, ${bumps.length} bumped numbers), ${failed} FAIL under both runners (${bumpsFailed} of the bumps), ${count - failed} ok under both`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('failure lines describe WOUNDED events exactly as the Rust runner does (retry_after_ms included)', () => {
  const bin = rustRunner();
  const dir = mkdtempSync(join(tmpdir(), 'klock-wounded-'));
  try {
    // Every vector with an expected WOUNDED event, with that event's retry_after_ms range
    // narrowed to one impossible value: both runners fail the step and print every event.
    let count = 0;
    for (const name of readdirSync(vectors).filter((n) => n.endsWith('.json')).sort()) {
      const text = readFileSync(join(vectors, name), 'utf8');
      const m = /"event": "WOUNDED"[^}]*"retry_after_ms": \[\d+, \d+\]/.exec(text);
      if (!m) continue;
      const narrowed = m[0].replace(/"retry_after_ms": \[\d+, \d+\]$/, '"retry_after_ms": [99999999, 99999999]');
      writeFileSync(join(dir, name), text.replace(m[0], narrowed));
      count++;
    }
    assert.ok(count > 0, 'some vector expects a WOUNDED event with retry_after_ms');
    const rust = spawnSync(bin, [dir], { encoding: 'utf8', maxBuffer: 64 << 20 });
    const wasm = spawnSync(process.execPath, [join(here, '..', 'conformance.mjs'), dir], { encoding: 'utf8', maxBuffer: 64 << 20 });
    assert.equal(rust.status, 1);
    assert.equal(wasm.status, 1);
    const rustLines = rust.stdout.trimEnd().split('\n');
    assert.equal(rustLines.filter((l) => l.startsWith('FAIL ')).length, count, rust.stdout);
    for (const l of rustLines.slice(0, -1)) assert.match(l, /WOUNDED\{[^}]* retry_after_ms=\d+\}/);
    assert.deepEqual(wasm.stdout.trimEnd().split('\n'), rustLines);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
