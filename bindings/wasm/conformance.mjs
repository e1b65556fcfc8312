#!/usr/bin/env node
// Conformance runner for the wasm build: `node bindings/wasm/conformance.mjs PATH...`
//
// Runs the vectors of ../shared/conformance/FORMAT.md against the `--target nodejs` build in
// bindings/wasm/pkg-nodejs (built by bindings/wasm/build.sh), with the same contract and the
// same strictness as the Rust runner in conformance/src/ (the engine is conformance-core.mjs,
// which the Chromium tests also run in the browser):
// - every file named, and every `*.json` directly inside every directory named (sorted by
//   file name), is one vector; a run with zero vectors fails;
// - the JSON is read strictly (no duplicate keys; integers kept apart from fractions), and
//   every key and closed-set value is checked before the vector runs, so a typo fails loudly;
// - each step makes exactly one kernel call at its `now`, drains every event, binds aliases
//   and checks the answer and every event; a step without `expect` must succeed and emit
//   nothing; when an error is expected, the runner proves the failed call changed nothing but
//   the settlement of time (a clone advanced to the same `now` must emit the same events and
//   end in the same snapshot);
// - an alias that was never bound is a literal id the kernel never issues: kernel ids count
//   up from 1, unbound aliases count down from 2^53 - 1 (the largest id the wasm API accepts);
// - output: `ok <file>: <name>` or `FAIL <file>: <name>: step k: <what differed>` per vector,
//   then `N passed, M failed`; exit status 0 only when at least one vector ran and none failed
//   (2 for a usage error or a missing build).

import { readFileSync, readdirSync, statSync, existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { line, runSource, setKernelModule } from './conformance-core.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const pkgPath = join(here, 'pkg-nodejs', 'klock_wasm.js');

// ---------------------------------------------------------------------------------------------
// Files and the command line (mirrors conformance/src/lib.rs and main.rs)

function runFile(file) {
  let text;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    return { file, name: undefined, failure: `cannot read the file: ${e.message}` };
  }
  return runSource(file, text);
}

function expand(path) {
  let isDir = false;
  try {
    isDir = statSync(path).isDirectory();
  } catch {
    return [path]; // reported as unreadable by runFile
  }
  if (!isDir) return [path];
  const names = readdirSync(path, { withFileTypes: true })
    .filter((d) => d.name.endsWith('.json') && !d.isDirectory())
    .map((d) => d.name)
    .sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  return names.map((n) => (path.endsWith('/') ? `${path}${n}` : `${path}/${n}`));
}

function main(argv) {
  const paths = argv.slice(2);
  if (paths.length === 0 || paths.some((p) => p === '-h' || p === '--help')) {
    console.error('usage: node bindings/wasm/conformance.mjs PATH...   (vector files, or directories of *.json vectors)');
    return 2;
  }
  if (!existsSync(pkgPath)) {
    console.error(`the nodejs build is missing (${pkgPath}): run bash bindings/wasm/build.sh first`);
    return 2;
  }
  setKernelModule(createRequire(import.meta.url)(pkgPath));
  const results = [];
  for (const p of paths) for (const file of expand(p)) results.push(runFile(file));
  for (const r of results) console.log(line(r));
  const passed = results.filter((r) => r.failure === undefined).length;
  const failed = results.length - passed;
  console.log(`${passed} passed, ${failed} failed`);
  if (results.length === 0) console.error(`no vectors found in ${paths.join(' ')}`);
  return results.length > 0 && failed === 0 ? 0 : 1;
}

process.exitCode = main(process.argv);
