// A remote Lease that becomes unreachable without being released is released when it is
// garbage-collected, as in process (client.js module contract; the in-process tests are in
// client.test.mjs). Remote, a Lease is registered with the FinalizationRegistry as it is given
// out, not at the next turn of the event loop (no Immediate per operation: issue 27, Node at 16
// client processes). Against a real `klock serve`, in a child process run with --expose-gc.
// Every test is bounded (node --test-timeout, and the child's own time limit).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { startServer } from './server.mjs';

const require = createRequire(import.meta.url);
const clientPath = require.resolve('../client.js');

const servers = [];
after(async () => {
  for (const s of servers) await s.stop();
});

test('a remote Lease dropped unreleased is released once collected, and another session gets its resource (--expose-gc)', async () => {
  const server = await startServer();
  servers.push(server);
  const script = `
    const { connect } = require(${JSON.stringify(clientPath)});
    (async () => {
      const klock = connect(${JSON.stringify(server.url)});
      const leaker = await klock.session('leaker');
      const other = await klock.session('other');
      let deferred;
      await (async () => {
        await leaker.lease('MUTATES FILE:/collected', { ttlMs: 60000 }); // never released, dropped
        deferred = { immediate: klock._registering !== null, waiting: klock._unregistered.length };
      })();
      for (let i = 0; i < 50 && klock.counters.collected === 0; i++) {
        globalThis.gc();
        await new Promise((r) => setTimeout(r, 20));
      }
      const lease = await other.lease('MUTATES FILE:/collected', { timeoutMs: 5000 });
      console.log(JSON.stringify({ ...deferred, collected: klock.counters.collected, granted: lease.leases[0].sessionId === other.sessionId }));
      await lease.release();
      await klock.close();
    })().catch((e) => { console.error(e); process.exit(1); });
  `;
  const child = spawnSync(process.execPath, ['--expose-gc', '-e', script], { encoding: 'utf8', timeout: 30_000 });
  assert.equal(child.status, 0, child.stderr);
  assert.deepEqual(JSON.parse(child.stdout), { immediate: false, waiting: 0, collected: 1, granted: true });
});
