// The TypeScript declarations: a usage file type-checks against client.d.ts and index.d.ts
// (tsc --noEmit, with misuse marked @ts-expect-error), and index.d.ts declares exactly what
// index.js exports.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync, existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const dir = fileURLToPath(new URL('..', import.meta.url));
const tsc = `${dir}node_modules/typescript/bin/tsc`;

test('tsc --noEmit: the usage file compiles against the declarations', { skip: !existsSync(tsc) && 'typescript is not installed (npm install)' }, () => {
  const r = spawnSync(process.execPath, [tsc, '--noEmit', '-p', `${dir}tsconfig.json`], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stdout + r.stderr);
});

test('index.d.ts declares every export of index.js, and nothing else', () => {
  const dts = readFileSync(`${dir}index.d.ts`, 'utf8');
  const declared = new Set([...dts.matchAll(/^export declare (?:class|function|const) (\w+)/gm)].map((m) => m[1]));
  const exported = new Set(Object.keys(require('../index.js')));
  assert.deepEqual([...exported].sort(), [...declared].sort());
});

test('client.d.ts declares every export of client.js', () => {
  const dts = readFileSync(`${dir}client.d.ts`, 'utf8');
  const declared = new Set([...dts.matchAll(/^export declare (?:class|function|const) (\w+)/gm)].map((m) => m[1]));
  for (const block of dts.matchAll(/^export \{([^}]*)\} from '\.\/index'/gm)) {
    for (const name of block[1].split(',').map((s) => s.trim()).filter(Boolean)) declared.add(name);
  }
  const exported = Object.keys(require('../client.js'));
  for (const name of exported) assert.ok(declared.has(name), `${name} is exported by client.js but not declared`);
});
