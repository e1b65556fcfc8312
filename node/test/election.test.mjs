// Election (node/election.js) on both backends: campaign, term, resign, leader(), observe(),
// losses, the order of successors under each policy, bad input; and three campaigner
// processes through a real `klock serve` (the leader SIGKILLed, the next SIGSTOPped past its
// TTL, the next resigning), checked against a fenced file (`fencedWrite`). Run as a child
// with KLOCK_ELECTION_CHILD set, this file is one campaigner.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir, hostname } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';
import { startServer, freezeProcess, within } from './server.mjs';

const require = createRequire(import.meta.url);
const {
  Klock,
  connect,
  Election,
  ManualClock,
  KlockError,
  LeaseLost,
  Timeout,
  Closed,
  fencedWrite,
  StaleFence,
} = require('../client.js');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function until(predicate, ms = 10_000) {
  const end = Date.now() + ms;
  while (!(await predicate())) {
    if (Date.now() > end) throw new Error('condition not reached in time');
    await sleep(2);
  }
}

if (process.env.KLOCK_ELECTION_CHILD !== undefined) {
  await campaigner(JSON.parse(process.env.KLOCK_ELECTION_CHILD));
} else {
  tests();
}

/** One campaigner process: campaigns, acts while it leads, resigns on SIGUSR2; JSON lines out. */
async function campaigner({ url, name, agent, register, ttlMs }) {
  const log = (fields) =>
    process.stdout.write(JSON.stringify({ ...fields, agent, t: Number(process.hrtime.bigint()) / 1e6 }) + '\n');
  const k = connect(url);
  const e = new Election(k, name, { agentId: agent, ttlMs, onLost: (error) => log({ ev: 'lost', name: error.name }) });
  let resign = false;
  process.on('SIGUSR2', () => (resign = true));
  for (;;) {
    log({ ev: 'campaigning' });
    const term = await e.campaign();
    log({ ev: 'lead', term });
    for (;;) {
      if (resign) {
        resign = false;
        await e.resign();
        log({ ev: 'resigned', term });
        break;
      }
      const t0 = Number(process.hrtime.bigint()) / 1e6;
      const leading = e.isLeader();
      const t1 = Number(process.hrtime.bigint()) / 1e6;
      if (!leading) {
        log({ ev: 'not_leader', term });
        await e.resign();
        break;
      }
      let accepted = true;
      try {
        fencedWrite(register, `${agent} ${term}\n`, term);
      } catch (error) {
        if (!(error instanceof StaleFence)) throw error;
        accepted = false;
      }
      log({ ev: 'act', term, t0, t1, accepted });
      await sleep(20);
    }
  }
}

function tests() {
  const servers = new Map();
  const dir = mkdtempSync(join(tmpdir(), 'klock-node-election-'));
  after(async () => {
    for (const s of servers.values()) await s.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  /** A Klock with `policy` on `backend`: in process, or connected to a `klock serve --memory` of that policy. */
  async function makeKlock(backend, policy = 'wait_die', config = {}) {
    if (backend === 'inprocess') return new Klock({ policy, ...config });
    const flags = Object.entries({ policy, ...config }).flatMap(([name, value]) => [
      '--config',
      `${name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)}=${value}`,
    ]);
    const key = flags.join(' ');
    if (!servers.has(key)) servers.set(key, await startServer(['--memory', ...flags]));
    return connect(servers.get(key).url);
  }

  const queued = async (k, e) => (await k.resourceState(e.resource)).waiting.length;

  for (const backend of ['inprocess', 'remote']) {
    test(`${backend}: campaign returns the fence as term, leader() shows it, resign hands over`, async () => {
      const k = await makeKlock(backend, 'detect');
      try {
        const a = new Election(k, 'indexer', { agentId: 'a', ttlMs: 5000 });
        const b = new Election(k, 'indexer', { agentId: 'b', ttlMs: 5000 });
        assert.equal(a.resource, 'LEADER:/indexer');
        assert.equal(a.name, 'indexer');
        assert.equal(await a.leader(), null);
        assert.equal(a.isLeader(), false);
        const term = await a.campaign();
        assert.equal(term, a.term);
        assert.equal(a.check(), term);
        const seen = await b.leader();
        assert.equal(seen.agentId, 'a');
        assert.equal(seen.term, term);
        assert.equal(seen.expiresAt - seen.since, 5000); // the kernel's milliseconds: granted now, for the TTL
        assert.ok(a.isLeader() && !b.isLeader());
        const pending = b.campaign();
        await until(async () => (await queued(k, b)) === 1);
        await a.resign();
        const bTerm = await within(10_000, pending, 'the successor');
        assert.ok(bTerm > term);
        assert.ok(b.isLeader() && !a.isLeader());
        assert.equal((await a.leader()).agentId, 'b');
        await a.resign(); // idempotent
        await b.resign();
        const state = await k.resourceState('LEADER:/indexer');
        assert.deepEqual([state.holders, state.waiting], [[], []]);
      } finally {
        await k.close();
      }
    });

    test(`${backend}: a lost term aborts the signal, calls onLost and resolves whenLost`, async () => {
      const k = await makeKlock(backend);
      try {
        const told = [];
        const e = new Election(k, 'x', { agentId: 'a', ttlMs: 300, onLost: (error) => told.push(error) });
        const term = await e.campaign();
        const lost = e.whenLost();
        assert.equal(e.signal.aborted, false);
        const closed = k.kernel.closeSession(e._session.sessionId, k.now()); // behind the client's back
        if (closed instanceof Promise) await closed;
        const error = await within(10_000, lost, 'the loss'); // the next heartbeat finds it
        assert.ok(error instanceof LeaseLost);
        assert.equal(error.name, 'LEASE_RELEASED');
        assert.equal(e.signal.reason, error);
        assert.equal(e.lost, error);
        await until(() => told.length === 1);
        assert.equal(told[0], error);
        assert.equal(e.isLeader(), false);
        assert.equal(e.term, term);
        assert.throws(() => e.check(), LeaseLost);
        await e.resign();
        assert.equal(e.term, null);
        // A new campaign is a new term with a fresh signal.
        const again = await e.campaign();
        assert.ok(again > term && !e.signal.aborted && e.lost === null);
        await e.resign();
      } finally {
        await k.close();
      }
    });

    test(`${backend}: a campaign waiting longer than its TTL leads with a valid lease`, async () => {
      // Remotely a grant after a wait dates from the last moment the ticket was known to wait
      // (remote.js, "long waits"): without the refreshes it would be lost on arrival.
      const k = await makeKlock(backend, 'detect');
      try {
        const a = new Election(k, 'x', { agentId: 'a', ttlMs: 300 });
        const b = new Election(k, 'x', { agentId: 'b', ttlMs: 300 });
        await a.campaign();
        const pending = b.campaign();
        await until(async () => (await queued(k, a)) === 1);
        await sleep(1000); // more than three TTLs in the queue
        await a.resign();
        await within(10_000, pending, 'the successor');
        await sleep(500); // and it keeps it
        assert.ok(b.isLeader());
        assert.equal(b.lost, null);
        await b.resign();
      } finally {
        await k.close();
      }
    });

    test(`${backend}: campaign timeout and abort leave nothing behind`, async () => {
      const k = await makeKlock(backend, 'detect');
      try {
        const a = new Election(k, 'x', { agentId: 'a' });
        const b = new Election(k, 'x', { agentId: 'b' });
        await a.campaign();
        await assert.rejects(b.campaign({ timeoutMs: 200 }), Timeout);
        await assert.rejects(b.campaign({ timeoutMs: 0 }), Timeout);
        const controller = new AbortController();
        const pending = b.campaign({ signal: controller.signal });
        await until(async () => (await queued(k, b)) === 1);
        controller.abort(new Error('stop'));
        await assert.rejects(pending, /stop/);
        assert.equal(await queued(k, b), 0);
        assert.equal(b.isLeader(), false);
        // resign() abandons a campaign in progress.
        const again = assert.rejects(b.campaign(), Closed); // handled before it rejects
        await until(async () => (await queued(k, b)) === 1);
        await b.resign();
        await again;
        assert.equal(await queued(k, b), 0);
        await assert.rejects(a.campaign(), (error) => error.name === 'STATE_ERROR');
        await a.resign();
      } finally {
        await k.close();
      }
    });

    test(`${backend}: observe() yields every change in order and ends on abort`, async () => {
      const k = await makeKlock(backend, 'detect');
      try {
        const watcher = new Election(k, 'x', { agentId: 'w', pollMs: 10 });
        const controller = new AbortController();
        const changes = watcher.observe({ signal: controller.signal });
        const next = async () => (await within(10_000, changes.next(), 'a change')).value;
        assert.equal(await next(), null);
        const a = new Election(k, 'x', { agentId: 'a' });
        const b = new Election(k, 'x', { agentId: 'b' });
        const ta = await a.campaign();
        const first = await next();
        assert.deepEqual([first.agentId, first.term], ['a', ta]);
        const pending = b.campaign();
        await until(async () => (await queued(k, a)) === 1);
        await a.resign();
        const tb = await pending;
        // A resign ends the term (null) before the queue's next campaigner is granted.
        assert.equal(await next(), null);
        const second = await next();
        assert.deepEqual([second.agentId, second.term], ['b', tb]);
        assert.ok(second.since >= first.since);
        await b.resign();
        assert.equal(await next(), null);
        controller.abort();
        assert.equal((await within(10_000, changes.next(), 'the end')).done, true);
      } finally {
        await k.close();
      }
    });

    test(`${backend}: observe() sees a term that begins and ends between two reads, in order`, async () => {
      // A reader of the state every 2 s would never see a's term: it begins and ends between
      // two reads. The events tell it, with its fence; another namespace's term is not this one.
      const k = await makeKlock(backend, 'detect');
      try {
        const watcher = new Election(k, 'x', { agentId: 'w', pollMs: 2000 });
        const controller = new AbortController();
        const changes = watcher.observe({ signal: controller.signal });
        const next = async () => (await within(10_000, changes.next(), 'a change')).value;
        assert.equal(await next(), null);
        const a = new Election(k, 'x', { agentId: 'a' });
        const b = new Election(k, 'x', { agentId: 'b' });
        const other = new Election(k, 'x', { agentId: 'o', namespace: 'elsewhere' });
        const ta = await a.campaign();
        await a.resign();
        await other.campaign();
        const tb = await b.campaign();
        const seen = [await next(), await next(), await next()];
        assert.deepEqual(
          seen.map((s) => (s === null ? null : [s.agentId, s.term])),
          [['a', ta], null, ['b', tb]],
        );
        assert.equal(seen[0].expiresAt - seen[0].since, 15_000);
        await b.resign();
        await other.resign();
        assert.equal(await next(), null);
        controller.abort();
        assert.equal((await within(10_000, changes.next(), 'the end')).done, true);
      } finally {
        await k.close();
      }
    });
  }

  test('remote: an abort while the acquire is on its way withdraws the wait', async () => {
    // What a campaign's AbortSignal meets when it aborts before the server's WAIT arrives: the
    // wait must still be withdrawn and the promise rejected (it used to wait forever).
    const k = await makeKlock('remote', 'detect');
    try {
      const holder = await k.session('holder');
      await holder.lease('MUTATES LEADER:/y');
      const waiter = await k.session('waiter');
      const controller = new AbortController();
      const pending = waiter.lease('MUTATES LEADER:/y', { signal: controller.signal });
      controller.abort(new Error('stop')); // the acquire is in flight
      await within(10_000, assert.rejects(pending, /stop/), 'the abort');
      await until(async () => (await k.resourceState('LEADER:/y')).waiting.length === 0);
    } finally {
      await k.close();
    }
  });

  for (const policy of ['detect', 'lanes', 'wound_wait']) {
    test(`inprocess: successors are served in campaign order under ${policy}`, async () => {
      // Short kernel waits: a campaign that re-asked when its wait timed out would lose its place.
      const k = new Klock({ policy, defaultWaitTimeoutMs: 100 });
      try {
        const first = new Election(k, 'x', { agentId: 'c0' });
        await first.campaign();
        const others = [1, 2, 3, 4].map((i) => new Election(k, 'x', { agentId: `c${i}` }));
        const pending = [];
        for (const [i, e] of others.entries()) {
          pending.push(e.campaign());
          await until(async () => (await queued(k, first)) === i + 1);
        }
        await sleep(300); // past the kernel's wait timeout
        const order = ['c0'];
        let leader = first;
        for (let i = 0; i < others.length; i++) {
          await leader.resign();
          await until(() => others.some((e) => e.isLeader()));
          leader = others.find((e) => e.isLeader());
          order.push(leader.agentId);
        }
        await leader.resign();
        const terms = await Promise.all(pending);
        assert.deepEqual(order, ['c0', 'c1', 'c2', 'c3', 'c4']);
        assert.deepEqual(
          terms,
          [...terms].sort((x, y) => x - y),
        );
      } finally {
        k.close();
      }
    });
  }

  test('inprocess: a pause past the TTL is noticed before any timer runs', async () => {
    const clock = new ManualClock();
    const k = new Klock({ clock });
    try {
      const told = [];
      const a = new Election(k, 'x', { agentId: 'a', ttlMs: 1000, onLost: (error) => told.push(error) });
      await a.campaign();
      clock.advance(5000); // heartbeats keep it
      assert.ok(a.isLeader());
      clock.jump(1000); // paused past the TTL: no timer ran
      assert.equal(a.isLeader(), false); // settled on the spot
      assert.equal(a.lost.name, 'LEASE_EXPIRED');
      assert.ok(a.signal.aborted);
      await until(() => told.length === 1);
      const b = new Election(k, 'x', { agentId: 'b', ttlMs: 1000 });
      assert.ok((await b.campaign({ timeoutMs: 0 })) > told[0].leaseIds[0]);
      await a.resign();
      await b.resign();
    } finally {
      k.close();
    }
  });

  test('bad names and options are named errors', () => {
    const k = new Klock();
    try {
      for (const [bad, says] of [
        ['', 'root'],
        ['.', 'root'],
        ['/', 'root'],
        ['a/../b', "'..'"],
        ['x\u0007', 'unprintable character U+0007'],
      ]) {
        assert.throws(
          () => new Election(k, bad),
          (error) => error instanceof KlockError && error.name === 'INVALID_RESOURCE' && error.message.includes(says),
          bad,
        );
      }
      assert.equal(new Election(k, 'a//b/').resource, 'LEADER:/a/b');
      assert.equal(new Election(k, 'x').agentId, `${hostname()}/${process.pid}`);
      assert.throws(() => new Election(k, 3), /`name` must be a string/);
      assert.throws(() => new Election({}, 'x'), /`klock` must be a Klock/);
      for (const ttlMs of [0, -1, 1.5, NaN, Infinity]) {
        assert.throws(
          () => new Election(k, 'x', { ttlMs }),
          /`options.ttlMs` must be an integer number of milliseconds > 0/,
        );
      }
      assert.throws(() => new Election(k, 'x', { ttl: 3 }), /unknown option `ttl`/);
      assert.throws(() => new Election(k, 'x', { onLost: 1 }), /`options.onLost` must be a function/);
      assert.throws(
        () => new Election(k, 'x').check(),
        (error) => error.name === 'STATE_ERROR',
      );
    } finally {
      k.close();
    }
  });

  test(
    'three campaigner processes through klock serve: SIGKILL, SIGSTOP past the TTL, resign',
    { timeout: 120_000 },
    async () => {
      const ttlMs = 2000;
      const retryMs = 450; // backoff cap 400 + base 50: the longest retry delay (SPEC.md §8)
      const slackMs = 3000; // scheduling, round trips and the event stream on a busy machine
      const server = await startServer([
        '--memory',
        '--config',
        'policy=detect',
        '--config',
        'backoff_base_ms=50',
        '--config',
        'backoff_cap_ms=400',
      ]);
      const register = join(dir, 'register');
      const events = [];
      const children = [];
      const now = () => Number(process.hrtime.bigint()) / 1e6;
      const waitFor = async (predicate, ms) => {
        await until(() => events.some(predicate), ms);
        return events.find(predicate);
      };
      const k = connect(server.url);
      try {
        for (const agent of ['p0', 'p1', 'p2']) {
          // A plain process, not a test file of `node --test` (which tells its files so).
          const env = { ...process.env };
          delete env.NODE_TEST_CONTEXT;
          const child = spawn(process.execPath, [fileURLToPath(import.meta.url)], {
            env: {
              ...env,
              KLOCK_ELECTION_CHILD: JSON.stringify({ url: server.url, name: 'e2e', agent, register, ttlMs }),
            },
            stdio: ['ignore', 'pipe', 'inherit'],
          });
          let buffer = '';
          child.stdout.on('data', (d) => {
            buffer += d;
            let nl;
            while ((nl = buffer.indexOf('\n')) >= 0) {
              events.push(JSON.parse(buffer.slice(0, nl)));
              buffer = buffer.slice(nl + 1);
            }
          });
          children.push(child);
          await waitFor((e) => e.ev === 'campaigning' && e.agent === agent, 30_000);
          await until(async () => (await k.resourceState('LEADER:/e2e')).waiting.length === children.length - 1);
        }
        const byAgent = (agent) => children[Number(agent.slice(1))];
        await waitFor((e) => e.ev === 'lead', 10_000);
        // Does `act` to the leader the server reports (a loaded machine may change leaders on
        // its own) and waits for the successor, which must be the first one the server had
        // queued (detect: campaign order): [the leader, the successor's lead, when act began].
        const disrupt = async (act) => {
          await sleep(300); // the leader acts a little
          const state = await k.resourceState('LEADER:/e2e');
          const leader = state.holders[0].agentId;
          const queue = state.waiting.map((w) => w.agentId);
          const at = now();
          await act(byAgent(leader));
          const successor = await waitFor((e) => e.ev === 'lead' && e.t > at, 30_000);
          assert.equal(successor.agent, queue[0], JSON.stringify(events.filter((e) => e.ev !== 'act')));
          return [leader, successor, at];
        };

        const [, second, killedAt] = await disrupt((child) => child.kill('SIGKILL'));
        assert.ok(second.t - killedAt <= ttlMs + retryMs + slackMs, `successor after ${second.t - killedAt} ms`);

        const [stopped, third, stoppedAt] = await disrupt((child) => freezeProcess(child));
        assert.ok(third.t - stoppedAt <= ttlMs + retryMs + slackMs, `successor after ${third.t - stoppedAt} ms`);
        await sleep(300);
        const resumedAt = now();
        byAgent(stopped).kill('SIGCONT');
        const told = await waitFor((e) => e.agent === stopped && e.ev === 'lost' && e.t > resumedAt, 10_000);
        assert.equal(told.name, 'LEASE_EXPIRED');

        const [, fourth, askedAt] = await disrupt((child) => child.kill('SIGUSR2'));
        assert.ok(fourth.t - askedAt <= retryMs + slackMs, `successor after ${fourth.t - askedAt} ms`);
        await sleep(300);
      } finally {
        for (const child of children) {
          child.kill('SIGCONT');
          child.kill('SIGKILL');
        }
        await k.close();
        await server.stop();
      }
      const leads = events.filter((e) => e.ev === 'lead');
      const terms = leads.map((e) => e.term);
      assert.deepEqual(
        terms,
        [...new Set(terms)].sort((x, y) => x - y),
      ); // strictly increasing
      // Never two leaders at once: every act of a term ends before the first act of a later one,
      // and only acts of a term still valid were accepted by the fenced file.
      const acts = new Map();
      for (const e of events.filter((x) => x.ev === 'act')) {
        if (!acts.has(e.term)) acts.set(e.term, []);
        acts.get(e.term).push(e);
      }
      const acted = [...acts.keys()].sort((x, y) => x - y);
      for (const term of acted) {
        // One campaigner per term: the one that led it.
        const leader = leads.find((e) => e.term === term);
        assert.ok(leader !== undefined && acts.get(term).every((a) => a.agent === leader.agent), `term ${term}`);
      }
      for (let i = 0; i + 1 < acted.length; i++) {
        const last = Math.max(...acts.get(acted[i]).map((a) => a.t1));
        const next = Math.min(...acts.get(acted[i + 1]).map((a) => a.t0));
        assert.ok(last < next, `term ${acted[i]} acted until ${last}, term ${acted[i + 1]} from ${next}`);
      }
      for (const [term, list] of acts) {
        const refused = list.filter((a) => !a.accepted);
        // A refusal is an ex-leader's write checked before a pause and sent after it.
        for (const r of refused)
          assert.ok(
            acted.some((t) => t > term && acts.get(t)[0].t0 < r.t),
            JSON.stringify(r),
          );
      }
    },
  );
}
