#!/usr/bin/env node
// `node bindings/wasm/check-imports.mjs PKG_DIR...`: proves the kernel compiled to wasm asks its
// host for nothing but wasm-bindgen's own glue — in particular no clock and no randomness.
//
// For each package directory (pkg-web, pkg-nodejs) it reads `klock_wasm_bg.wasm` and lists
// its imports with `WebAssembly.Module.imports`, then requires of every import:
// - it comes from the glue module wasm-bindgen generated (`./klock_wasm_bg.js`, `wbg`, or
//   `__wbindgen_placeholder__`) and is a function named `__wbg_*` / `__wbindgen_*`;
// - its name does not mention a clock, timer or random source (date, now, time, random,
//   crypto, performance, hrtime, ...);
// - its implementation in the generated glue (`klock_wasm.js`) exists and does not reach for
//   `Date`, `performance`, `crypto`, `Math.random`, `process`, timers, I/O or `eval`.
// Prints every import with a one-line summary of what it does; exits 1 on any problem.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const GLUE_MODULES = ['./klock_wasm_bg.js', 'wbg', '__wbindgen_placeholder__'];
const FORBIDDEN_NAME = /date|now|time|clock|random|crypto|perf|hrtime|rand|entropy|sleep|fetch|fs_|env/i;
const FORBIDDEN_BODY = [
  /\bDate\b/,
  /\bperformance\b/,
  /\bcrypto\b/,
  /Math\.random/,
  /\bprocess\b/,
  /\bhrtime\b/,
  /\bsetTimeout\b/,
  /\bsetInterval\b/,
  /\bsetImmediate\b/,
  /\bqueueMicrotask\b/,
  /\brequestAnimationFrame\b/,
  /\bfetch\b/,
  /\bXMLHttpRequest\b/,
  /\bWebSocket\b/,
  /\brequire\b/,
  /\bimport\s*\(/,
  /\beval\b/,
  /\bFunction\s*\(/,
  /getRandomValues/,
  /randomUUID/,
];

/**
 * Checks one module's imports against its glue source.
 * @param {Array<{module: string, name: string, kind: string}>} imports
 * @param {string} glue the generated JS glue
 * @returns {{lines: string[], problems: string[]}}
 */
export function checkImports(imports, glue) {
  const problems = [];
  const lines = [];
  // Where each glue function starts (`name: function`); it ends where the next one starts, or
  // at the end of the imports object.
  const starts = [...glue.matchAll(/^\s*(__wbg_\w+|__wbindgen_\w+):\s*function/gm)]
    .map((m) => ({ name: m[1], at: m.index }))
    .sort((a, b) => a.at - b.at);
  const body = (name) => {
    const i = starts.findIndex((s) => s.name === name);
    if (i < 0) return undefined;
    const end = i + 1 < starts.length ? starts[i + 1].at : glue.indexOf('\n    };', starts[i].at);
    return glue.slice(starts[i].at, end < 0 ? undefined : end);
  };
  for (const imp of imports) {
    const where = `${imp.module} ${imp.name}`;
    if (!GLUE_MODULES.includes(imp.module))
      problems.push(`${where}: imported from a module wasm-bindgen does not generate`);
    if (imp.kind !== 'function')
      problems.push(`${where}: a ${imp.kind} import (wasm-bindgen glue imports functions only)`);
    if (!/^__wbg_|^__wbindgen_/.test(imp.name)) problems.push(`${where}: not a wasm-bindgen glue function`);
    const stem = imp.name.replace(/^__wbg_+/, '').replace(/_[0-9a-f]{16}$/, '');
    if (FORBIDDEN_NAME.test(stem.replace(/^wbindgen_/, '')))
      problems.push(`${where}: its name suggests a clock or a random source`);
    const code = body(imp.name);
    if (code === undefined) {
      problems.push(`${where}: no implementation in the generated glue`);
      lines.push(`  ${imp.name}  (no implementation found)`);
      continue;
    }
    for (const pattern of FORBIDDEN_BODY) {
      if (pattern.test(code))
        problems.push(`${where}: its glue uses ${pattern} (a clock, timer, random source or I/O)`);
    }
    const summary = code
      .split('\n')
      .slice(1)
      .map((l) => l.trim())
      .filter(
        (l) =>
          l &&
          !l.startsWith('}') &&
          !/^(const|let|var) ptr|^(const|let|var) len|getDataViewMemory|^return ret;$/.test(l),
      )
      .join(' ')
      .slice(0, 90);
    lines.push(`  ${imp.name.padEnd(52)} ${summary}`);
  }
  return { lines, problems };
}

function main(dirs) {
  if (dirs.length === 0) {
    console.error('usage: node bindings/wasm/check-imports.mjs PKG_DIR...');
    return 2;
  }
  let failed = 0;
  for (const dir of dirs) {
    const wasm = readFileSync(join(dir, 'klock_wasm_bg.wasm'));
    const glue = readFileSync(join(dir, 'klock_wasm.js'), 'utf8');
    const imports = WebAssembly.Module.imports(new WebAssembly.Module(wasm));
    const { lines, problems } = checkImports(imports, glue);
    console.log(`${dir}: ${imports.length} imports, all from wasm-bindgen's glue${problems.length ? ' (NOT)' : ''}:`);
    for (const l of lines) console.log(l);
    for (const p of problems) console.log(`PROBLEM ${p}`);
    if (problems.length) failed++;
  }
  console.log(
    failed ? `imports check failed for ${failed} package(s)` : 'imports check passed: no clock, no randomness, no I/O',
  );
  return failed ? 1 : 0;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) process.exitCode = main(process.argv.slice(2));
