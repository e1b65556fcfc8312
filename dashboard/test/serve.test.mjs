// The dashboard server's command line (dashboard/serve.mjs, run by scripts/dashboard.sh):
// known options work, anything else is refused with a clear message and a non-zero exit,
// before anything is built or served. Run by `node --test dashboard/test/`.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..', '..');
const serve = join(root, 'dashboard', 'serve.mjs');

const run = (args) => spawnSync(process.execPath, [serve, ...args], { encoding: 'utf8', timeout: 10000 });

test('unknown or malformed arguments are refused with a message and exit status 2', () => {
  const cases = [
    [['--bogus'], /unknown argument '--bogus'/],
    [['--prot', '8080'], /unknown argument '--prot'/],
    [['8080'], /unknown argument '8080'/],
    [['--port'], /--port needs a value/],
    [['--port', 'abc'], /--port must be an integer from 0 to 65535, got 'abc'/],
    [['--port', '70000'], /--port must be an integer from 0 to 65535, got '70000'/],
    [['--port', '-1'], /--port must be an integer from 0 to 65535, got '-1'/],
    [['--port', '1.5'], /--port must be an integer from 0 to 65535/],
    [['--port', ''], /--port must be an integer from 0 to 65535/],
    [['--host'], /--host needs a value/],
    [['--host', ''], /--host needs a value/],
    [['--port', '0', '--port', '1'], /--port is given twice/],
    [['--port=0'], /unknown argument '--port=0'/],
  ];
  for (const [args, message] of cases) {
    const r = run(args);
    assert.equal(r.status, 2, `${args.join(' ')}: exit status (stderr: ${r.stderr})`);
    assert.match(r.stderr, message, args.join(' '));
    assert.match(
      r.stderr,
      /usage: node dashboard\/serve\.mjs \[--port N\] \[--host H\]/,
      `${args.join(' ')}: the usage follows`,
    );
    assert.equal(r.stdout, '', `${args.join(' ')}: nothing is served`);
  }
});

test('--help prints the usage and exits 0', () => {
  for (const flag of ['--help', '-h']) {
    const r = run([flag]);
    assert.equal(r.status, 0);
    assert.match(r.stdout, /usage: node dashboard\/serve\.mjs \[--port N\] \[--host H\]/);
  }
});

test('--port 0 --host 127.0.0.1 serves the dashboard and prints its URL', async () => {
  const child = spawn(process.execPath, [serve, '--port', '0', '--host', '127.0.0.1'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  try {
    const url = await new Promise((resolve, reject) => {
      let out = '';
      const timer = setTimeout(() => reject(new Error(`no URL within 10 s: ${out}`)), 10000);
      child.stdout.on('data', (d) => {
        out += d;
        const m = /Klock dashboard: (http:\/\/127\.0\.0\.1:\d+\/)/.exec(out);
        if (m) {
          clearTimeout(timer);
          resolve(m[1]);
        }
      });
      child.once('exit', (code) => reject(new Error(`exited with ${code}: ${out}`)));
    });
    const res = await fetch(url);
    assert.equal(res.status, 200);
    assert.match(await res.text(), /<title>Klock · swarm dashboard<\/title>/);
    assert.equal((await fetch(`${url}pkg/klock_wasm.js`)).status, 200);
    // Test code never reaches users: the tests serve their own to the browser.
    for (const path of [
      'test/dashboard.test.mjs',
      'js-conformance/vector-format.mjs',
      'js-replay/replay.mjs',
      '..%2Fbindings%2Fjs-replay%2Freplay.mjs',
    ]) {
      assert.equal((await fetch(`${url}${path}`)).status, 404, path);
    }
  } finally {
    child.kill();
  }
});

test('scripts/dashboard.sh refuses a bad argument before it builds anything', () => {
  const started = Date.now();
  const r = spawnSync('bash', [join(root, 'scripts', 'dashboard.sh'), '--bogus'], { encoding: 'utf8', timeout: 20000 });
  assert.equal(r.status, 2, `exit status (stderr: ${r.stderr})`);
  assert.match(r.stderr, /unknown argument '--bogus'/);
  assert.doesNotMatch(r.stderr, /built bindings\/wasm/, 'nothing was built');
  assert.ok(Date.now() - started < 15000);
});
