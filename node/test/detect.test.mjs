// `policy: 'detect'` through the friendly client (SPEC.md §6.1): a session that dies to break a
// wait-for cycle gets `Died` naming the cycle (`cycle`, session ids, the victim first, as the
// kernel reports it, and the message), in process and through a real `klock serve`; whether
// the requester dies (a DIE verdict) or a waiter already queued on the cycle (a DIED event).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { startServer } from './server.mjs';

const require = createRequire(import.meta.url);
const { Klock, Died, connect } = require('../client.js');

const servers = [];
after(async () => {
  for (const s of servers) await s.stop();
});

async function makeKlock(backend, policy) {
  if (backend === 'inprocess') return new Klock({ policy });
  const server = await startServer(['--memory', '--config', `policy=${policy}`]);
  servers.push(server);
  return connect(server.url);
}

/** Resolves once `resource` has one waiting ticket (bounded: 10 s). */
async function queued(klock, resource) {
  for (let i = 0; i < 5000; i++) {
    if ((await klock.resourceState(resource)).waiting.length === 1) return;
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
  assert.fail(`nothing queued on ${resource}`);
}

function assertNamesCycle(error, victim, other) {
  assert.ok(error instanceof Died, String(error));
  assert.equal(error.name, 'DIE');
  assert.deepEqual(error.cycle, [victim.sessionId, other.sessionId]);
  assert.ok(error.retryAfterMs >= 1);
  assert.match(error.message, new RegExp(`died breaking a wait-for cycle with sessions ${other.sessionId} `));
  assert.ok(error.message.includes(`${victim.sessionId} -> ${other.sessionId}`), error.message);
}

const rejection = (promise) =>
  promise.then(
    () => assert.fail('granted'),
    (e) => e,
  );

for (const backend of ['inprocess', 'remote']) {
  test(`${backend}: the requester that closes a cycle dies naming it`, async () => {
    const klock = await makeKlock(backend, 'detect');
    const old = await klock.session('old');
    const young = await klock.session('young');
    assert.ok(old.priority < young.priority, 'young is the youngest unit of work: the victim');
    const oldA = await old.lease('MUTATES FILE:/a', { timeoutMs: 10_000 });
    const youngB = await young.lease('MUTATES FILE:/b', { timeoutMs: 10_000 });
    const oldB = old.lease('MUTATES FILE:/b', { timeoutMs: 10_000 }); // waits for young
    await queued(klock, 'FILE:/b');
    // Closes young -> old -> young: young's own request dies (DIE).
    const error = await rejection(young.lease('MUTATES FILE:/a', { timeoutMs: 10_000 }));
    assertNamesCycle(error, young, old);
    await youngB.release();
    assert.ok((await oldB).held, 'old was never killed: it waited and got FILE:/b');
    await oldA.release();
    await klock.close();
  });

  test(`${backend}: a waiter killed on a cycle dies naming it`, async () => {
    const klock = await makeKlock(backend, 'detect');
    const old = await klock.session('old');
    const young = await klock.session('young');
    assert.ok(old.priority < young.priority);
    const youngA = await young.lease('MUTATES FILE:/a', { timeoutMs: 10_000 });
    const oldB = await old.lease('MUTATES FILE:/b', { timeoutMs: 10_000 });
    // Queued behind old's FILE:/b (detect: a younger request waits too).
    const youngB = rejection(young.lease('MUTATES FILE:/b', { timeoutMs: 10_000 }));
    await queued(klock, 'FILE:/b');
    // Closes old -> young -> old: young, the youngest, loses its queued ticket (DIED); old
    // waits for FILE:/a until young's unit rolls back.
    const oldA = old.lease('MUTATES FILE:/a', { timeoutMs: 10_000 });
    assertNamesCycle(await youngB, young, old);
    await youngA.release();
    assert.ok((await oldA).held);
    await oldB.release();
    await klock.close();
  });

  test(`${backend}: a death without a cycle names none`, async () => {
    const klock = await makeKlock(backend, 'wait_die');
    const old = await klock.session('old');
    const young = await klock.session('young');
    await old.lease('MUTATES FILE:/b');
    await young.lease('MUTATES FILE:/a');
    const error = await rejection(young.lease('MUTATES FILE:/b'));
    assert.ok(error instanceof Died);
    assert.deepEqual(error.cycle, []);
    assert.ok(!error.message.includes('cycle'), error.message);
    await klock.close();
  });
}
