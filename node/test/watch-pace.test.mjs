// The event reader's pause between polls (issue 27, Node at 16 client processes; the module
// contract of remote.js, "Events"): every process's reader follows its namespace's whole event
// stream, so in a namespace busy with other processes' acquires and releases each answer used
// to be followed at once by another poll, and every reader woke for every event of every other
// process. Checked against a real `klock serve`, one client churning acquire + release in a
// loop:
// - with holder events off (the friendly layer's default), the poll asks the server to leave
//   ACQUIRED and RELEASED out (`holder_events=false`): an idle client's reader is not woken by
//   another client's uncontended acquires and releases at all, even with no pause;
// - with them on (something watches), a reader whose answers bring nothing its client routes
//   (another client's events) and whose sessions wait on nothing polls at most about once per
//   `coalesceMs`;
// - a ticket's outcome is not held back by that pause: a wait that opens while the reader
//   pauses (a pause far longer than the test) is granted by its event at once when the holder
//   releases.
// Every test is bounded (node --test-timeout, and `within` here).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { startServer, within } from './server.mjs';

const require = createRequire(import.meta.url);
const { connect } = require('../client.js');

const servers = [];
after(async () => {
  for (const s of servers) await s.stop();
});

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Counts the polls of a client's event reader of namespace `default` (its own transports). */
function countPolls(klock) {
  const watch = klock._remote._watches.get('default');
  assert.ok(watch !== undefined, 'the client reads the namespace');
  const counter = { polls: 0 };
  for (const http of watch._http) {
    const request = http.request.bind(http);
    http.request = (...args) => {
      counter.polls++;
      return request(...args);
    };
  }
  return counter;
}

/** Acquires and releases `intent` in `session` until `stop.done`; resolves with the count. */
async function churn(session, intent, stop) {
  let ops = 0;
  while (!stop.done) {
    await session.withLease(intent, async () => {});
    ops++;
  }
  return ops;
}

/**
 * One client churns acquire+release for `RUN_MS` while an idle one holds a session: the polls
 * of both readers, and the churn's operations. `setup(busy, idle)` runs before the churn.
 */
async function churnBeside(setup) {
  const s = await startServer();
  servers.push(s);
  const busy = connect(s.url);
  const idle = connect(s.url);
  const churner = await busy.session('churner');
  const bystander = await idle.session('bystander');
  setup(busy, idle);
  const busyPolls = countPolls(busy);
  const idlePolls = countPolls(idle);
  const stop = { done: false };
  const running = churn(churner, 'MUTATES FILE:/pace/churn', stop);
  await sleep(RUN_MS);
  stop.done = true;
  const ops = await within(10_000, running, 'the churn');
  return { busy, idle, bystander, busyPolls: busyPolls.polls, idlePolls: idlePolls.polls, ops };
}

const RUN_MS = 1500;

test("with holder events off, another client's acquires and releases wake no reader", async () => {
  // No pause at all: only the server's leaving ACQUIRED and RELEASED out keeps the readers
  // still (a held poll is answered once its wait ends: 10 s, longer than the run).
  const run = await churnBeside((busy, idle) => {
    busy._remote.coalesceMs = 0;
    idle._remote.coalesceMs = 0;
  });
  try {
    assert.ok(run.ops >= 30, `the churn made ${run.ops} operations, too few for this test to tell (load?)`);
    assert.ok(run.idlePolls <= 2, `the idle client's reader polled ${run.idlePolls} times for ${run.ops} operations`);
    assert.ok(run.busyPolls <= 2, `the churner's own reader polled ${run.busyPolls} times for ${run.ops} operations`);
    const lease = await run.bystander.lease('MUTATES FILE:/pace/bystander');
    await lease.release();
  } finally {
    await run.busy.close();
    await run.idle.close();
  }
});

test('a reader whose answers bring nothing for its client polls at most once per coalesceMs', async () => {
  const PACE_MS = 200;
  // Holder events on in the idle client (as when something watches): the churn's ACQUIRED and
  // RELEASED reach its reader, which takes none of them in (another client's sessions).
  const run = await churnBeside((busy, idle) => {
    busy._remote.coalesceMs = PACE_MS;
    idle._remote.coalesceMs = PACE_MS;
    idle._remote.setHolderEvents(true);
  });
  const { busy, idle, bystander, ops } = run;
  try {
    // Each operation is two events (ACQUIRED, RELEASED): without the pause, the idle reader
    // would poll about once per operation (more than the bound below by far).
    const bound = Math.ceil(RUN_MS / PACE_MS) + 3;
    assert.ok(ops >= 3 * bound, `the churn made ${ops} operations, too few for this test to tell (load?)`);
    assert.ok(
      run.idlePolls <= bound,
      `the idle client's reader polled ${run.idlePolls} times (bound ${bound}) for ${ops} operations`,
    );
    // The idle client still takes in its sessions' events: its session is open and usable.
    const lease = await bystander.lease('MUTATES FILE:/pace/bystander');
    await lease.release();
    assert.equal(busy.counters.lost + idle.counters.lost, 0);
  } finally {
    await busy.close();
    await idle.close();
  }
});

test("a ticket's outcome is not held back by the pause: a wait opened while the reader pauses is granted at once", async () => {
  const s = await startServer();
  servers.push(s);
  const waiter = connect(s.url);
  const holder = connect(s.url);
  const busy = connect(s.url);
  try {
    // A pause far longer than the test: the grant below can only come from a poll the new
    // ticket started (or the ticket's own refresh, each third of its TTL: 60 s here).
    waiter._remote.coalesceMs = 120_000;
    // Opened first: the oldest, so it waits (a ticket) where a younger one would die.
    const w = await waiter.session('w');
    const h = await holder.session('h');
    const c = await busy.session('c');
    const held = await h.lease('MUTATES FILE:/pace/x', { ttlMs: 60_000 });
    // The namespace is busy: the waiter's reader gets answers with nothing for it, and pauses.
    const stop = { done: false };
    const running = churn(c, 'MUTATES FILE:/pace/churn', stop);
    await sleep(300);
    const polls = countPolls(waiter);
    const wait = w.lease('MUTATES FILE:/pace/x', { timeoutMs: 20_000, ttlMs: 60_000 });
    for (let i = 0; i < 100 && waiter.counters.waits === 0; i++) await sleep(50);
    assert.equal(waiter.counters.waits, 1, 'the wait is a ticket');
    const released = performance.now();
    await held.release();
    const granted = await within(5000, wait, 'the grant of the waiting lease');
    const tookMs = performance.now() - released;
    assert.ok(granted.held);
    assert.ok(polls.polls >= 1, 'the new ticket started a poll');
    assert.ok(tookMs < 5000, `the grant took ${tookMs} ms`);
    await granted.release();
    stop.done = true;
    await within(10_000, running, 'the churn');
  } finally {
    await waiter.close();
    await holder.close();
    await busy.close();
  }
});

test('holder events turned on while a poll is held without them: the next ACQUIRED still comes', async () => {
  const s = await startServer();
  servers.push(s);
  const k = connect(s.url);
  try {
    const session = await k.session('a');
    await sleep(300); // the reader's poll is held, without holder events (the default)
    const seen = [];
    const ingest = k._remote._ingest.bind(k._remote);
    k._remote._ingest = (owner, event, id) => {
      seen.push(event.event);
      return ingest(owner, event, id);
    };
    k._remote.setHolderEvents(true);
    const lease = await session.lease('MUTATES FILE:/pace/holder');
    const heard = (async () => {
      while (!seen.includes('ACQUIRED')) await sleep(20);
    })();
    // The held poll would have skipped it and gone on waiting (10 s): it is sent again at once.
    await within(3000, heard, "the session's ACQUIRED");
    await lease.release();
  } finally {
    await k.close();
  }
});
