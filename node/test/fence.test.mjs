// The fence helper (fence.js): a smaller fence is refused and the file unchanged, an equal or
// greater one accepted; the fence is recorded before the data; a writer killed at any step
// never leaves a torn file (the rename is atomic) nor a lock held (flock dies with it); the
// lock excludes another process (the same flock(2) Python's fcntl.flock takes); bad input is
// named.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import {
  mkdtempSync,
  rmSync,
  readFileSync,
  writeFileSync,
  existsSync,
  readdirSync,
  statSync,
  openSync,
  closeSync,
} from 'node:fs';
import { spawn, spawnSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const { fencedWrite, fencedWriteAsync, StaleFence, KlockError } = require('../client.js');
const { flock } = require('../index.js');
const fencePath = fileURLToPath(new URL('../fence.js', import.meta.url));
const indexPath = fileURLToPath(new URL('../index.js', import.meta.url));

const dir = mkdtempSync(join(tmpdir(), 'klock-node-fence-'));
after(() => rmSync(dir, { recursive: true, force: true }));

test('a smaller fence is refused and the file unchanged; equal and greater are accepted', () => {
  const file = join(dir, 'a.txt');
  fencedWrite(file, 'five', 5);
  assert.equal(readFileSync(file, 'utf8'), 'five');
  assert.equal(readFileSync(`${file}.fence`, 'latin1'), '5');
  assert.equal(statSync(`${file}.fence`).mode & 0o777, 0o644);
  assert.throws(
    () => fencedWrite(file, 'four', 4),
    (e) => {
      assert.ok(e instanceof StaleFence);
      assert.ok(e instanceof KlockError);
      assert.equal(e.name, 'STALE_FENCE');
      assert.equal(e.path, file);
      assert.equal(e.fence, 4);
      assert.equal(e.stored, 5);
      assert.ok(e.message.includes(file) && e.message.includes('fence 4') && e.message.includes('5'), e.message);
      return true;
    },
  );
  assert.equal(readFileSync(file, 'utf8'), 'five');
  assert.equal(readFileSync(`${file}.fence`, 'latin1'), '5');
  fencedWrite(file, 'five again', 5); // one holder may write twice
  assert.equal(readFileSync(file, 'utf8'), 'five again');
  fencedWrite(file, Buffer.from('nine'), 9);
  assert.equal(readFileSync(file, 'utf8'), 'nine');
  assert.equal(readFileSync(`${file}.fence`, 'latin1'), '9');
  assert.deepEqual(
    readdirSync(dir).filter((f) => f.endsWith('.tmp')),
    [],
    'no temporary file left',
  );
});

test('the async variant follows the same protocol', async () => {
  const file = join(dir, 'async.txt');
  await fencedWriteAsync(file, 'x', 2);
  await assert.rejects(fencedWriteAsync(file, 'y', 1), StaleFence);
  assert.equal(readFileSync(file, 'utf8'), 'x');
});

test('a missing or empty fence file is no fence; a damaged one is an error naming it', () => {
  const file = join(dir, 'b.txt');
  writeFileSync(`${file}.fence`, '');
  fencedWrite(file, 'zero', 0);
  assert.equal(readFileSync(file, 'utf8'), 'zero');
  writeFileSync(`${file}.fence`, 'garbage');
  assert.throws(() => fencedWrite(file, 'one', 1), new RegExp(`${file}\\.fence does not hold a fence`));
  assert.equal(readFileSync(file, 'utf8'), 'zero');
});

test('bad input is named', () => {
  assert.throws(() => fencedWrite('', 'x', 1), { code: 'ERR_INVALID_ARG_TYPE' });
  assert.throws(() => fencedWrite(join(dir, 'c'), 5, 1), { code: 'ERR_INVALID_ARG_TYPE' });
  for (const fence of [-1, 1.5, NaN, '3', undefined]) {
    assert.throws(() => fencedWrite(join(dir, 'c'), 'x', fence), { code: 'ERR_OUT_OF_RANGE' }, String(fence));
  }
  assert.throws(() => flock(0, 'shared'), /operation must be/);
});

test('the lock excludes another process, and dies with it (SIGKILL never leaves it held)', async () => {
  const file = join(dir, 'locked.txt');
  writeFileSync(`${file}.fence`, '1');
  // A child takes the flock of <file>.fence and stays alive until killed.
  const child = spawn(
    process.execPath,
    [
      '-e',
      `const fs = require('fs'); const { flock } = require(${JSON.stringify(indexPath)});
       const fd = fs.openSync(${JSON.stringify(`${file}.fence`)}, 'r+'); flock(fd, 'exclusive');
       console.log('locked'); setInterval(() => {}, 1000);`,
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  await new Promise((resolve) => child.stdout.once('data', resolve));
  const fd = openSync(`${file}.fence`, 'r+');
  try {
    assert.equal(flock(fd, 'try-exclusive'), false, 'held by the other process');
    let done = false;
    const writing = fencedWriteAsync(file, 'after', 2).then(() => (done = true));
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.equal(done, false, 'the write waits for the lock');
    child.kill('SIGKILL');
    await writing;
    assert.equal(readFileSync(file, 'utf8'), 'after');
    assert.equal(flock(fd, 'try-exclusive'), true);
    assert.equal(flock(fd, 'unlock'), true);
  } finally {
    closeSync(fd);
    child.kill('SIGKILL');
  }
});

test('a writer killed between any two steps never leaves a torn file', () => {
  // The child runs fencedWrite with fs patched to die (SIGKILL itself) at one step.
  const steps = ['ftruncateSync', 'fsyncSync', 'openSync', 'writeFileSync', 'renameSync'];
  for (const step of steps) {
    const file = join(dir, `crash-${step}.txt`);
    fencedWrite(file, 'old content', 1);
    const script = `
      const fs = require('fs');
      const real = fs.${step};
      let calls = 0;
      fs.${step} = function (...args) {
        // Die at the step (the second openSync: the temporary file, not the fence file).
        if (${JSON.stringify(step)} !== 'openSync' || ++calls === 2) process.kill(process.pid, 'SIGKILL');
        return real.apply(this, args);
      };
      require(${JSON.stringify(fencePath)}).fencedWrite(${JSON.stringify(file)}, 'new content '.repeat(1000), 2);
    `;
    const r = spawnSync(process.execPath, ['-e', script], { timeout: 20_000 });
    assert.equal(r.signal, 'SIGKILL', `${step}: ${r.stderr}`);
    const content = readFileSync(file, 'utf8');
    assert.ok(content === 'old content' || content === 'new content '.repeat(1000), `${step}: torn file`);
    // The lock died with the writer: the next write goes through at once.
    fencedWrite(file, 'next', 3);
    assert.equal(readFileSync(file, 'utf8'), 'next');
  }
  assert.ok(existsSync(join(dir, 'crash-renameSync.txt')));
});
