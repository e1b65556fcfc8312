// The TypeScript declarations: a usage file type-checks against client.d.ts and index.d.ts
// (tsc --noEmit, with misuse marked @ts-expect-error), index.d.ts declares exactly what
// index.js exports, and index.d.ts declares the one JavaScript API of
// bindings/js-api/kernel.d.ts (bindings/js-api/test/same-api.ts), a check that fails on drift.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync, existsSync, mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const dir = fileURLToPath(new URL('..', import.meta.url));
const tsc = `${dir}node_modules/typescript/bin/tsc`;
const api = fileURLToPath(new URL('../../bindings/js-api/', import.meta.url));

/** tsc --noEmit --strict of `files`, as the test below runs same-api.ts. */
function typecheck(...files) {
  const flags = [
    '--noEmit',
    '--strict',
    '--exactOptionalPropertyTypes',
    '--target',
    'es2022',
    '--lib',
    'es2022,esnext.disposable',
  ];
  const modules = [
    '--module',
    'node16',
    '--moduleResolution',
    'node16',
    '--types',
    'node',
    '--typeRoots',
    `${dir}node_modules/@types`,
  ];
  return spawnSync(process.execPath, [tsc, ...flags, ...modules, ...files], { encoding: 'utf8', timeout: 60_000 });
}

test(
  'tsc --noEmit: the usage file compiles against the declarations',
  { skip: !existsSync(tsc) && 'typescript is not installed (npm install)' },
  () => {
    const r = spawnSync(process.execPath, [tsc, '--noEmit', '-p', `${dir}tsconfig.json`], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stdout + r.stderr);
  },
);

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
    for (const name of block[1]
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean))
      declared.add(name);
  }
  const exported = Object.keys(require('../client.js'));
  for (const name of exported) assert.ok(declared.has(name), `${name} is exported by client.js but not declared`);
});

test(
  'index.d.ts declares the one JavaScript API (kernel.d.ts), both ways',
  { skip: !existsSync(tsc) && 'typescript is not installed (npm install)' },
  () => {
    const r = typecheck(`${api}test/same-api.ts`);
    assert.equal(r.status, 0, r.stdout + r.stderr);
  },
);

test(
  'the check fails on drift: a renamed field, a swapped argument, a missing key',
  { skip: !existsSync(tsc) && 'typescript is not installed (npm install)' },
  () => {
    const tmp = mkdtempSync(join(tmpdir(), 'klock-same-api-'));
    try {
      const check = readFileSync(`${api}test/same-api.ts`, 'utf8').replace(
        "'../../../node/index'",
        JSON.stringify(join(dir, 'index')),
      );
      const one = readFileSync(`${api}kernel.d.ts`, 'utf8');
      const drifts = [
        ['expiresAt?: number\n}', 'expires_at?: number\n}'],
        [
          'options: AcquireOptions | undefined | null, now: number): Verdict',
          'now: number, options?: AcquireOptions | undefined | null): Verdict',
        ],
        ['  unitEnded: boolean\n', ''],
      ];
      // Each drifted copy of kernel.d.ts in its own folder, all checked by one tsc run.
      const files = drifts.map(([from, to], i) => {
        assert.ok(one.includes(from), `kernel.d.ts contains ${from}`);
        mkdirSync(join(tmp, `${i}`, 'test'), { recursive: true });
        writeFileSync(join(tmp, `${i}`, 'kernel.d.ts'), one.replace(from, to));
        writeFileSync(join(tmp, `${i}`, 'test', 'same-api.ts'), check);
        return join(tmp, `${i}`, 'test', 'same-api.ts');
      });
      const r = typecheck(...files);
      assert.notEqual(r.status, 0, 'tsc accepted a drift');
      drifts.forEach(([from, to], i) => {
        assert.ok(
          r.stdout.includes(`${join(`${i}`, 'test', 'same-api.ts')}(`),
          `tsc accepted the drift ${from} -> ${to}: ${r.stdout}`,
        );
      });
      assert.match(r.stdout, /same-api\.ts\(\d+,\d+\): error TS2344/);
    } finally {
      rmSync(tmp, { recursive: true });
    }
  },
);
