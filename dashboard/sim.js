// The simulated swarm: agents that plan, acquire manifests, wait, work, heartbeat, release,
// die and back off — driven on virtual time against a Klock kernel through its wasm API only.
//
// Contract: this module holds no rule about leases, queues or time; every decision (grant,
// wait, die, wound, expiry, timeout) comes from the kernel's answers and events, and every
// backoff is the kernel's retry_after_ms (DIE verdicts, DIED and WOUNDED events). The swarm
// owns only what an agent host owns: each agent's intentions, its timers (think, work,
// heartbeat, backoff) and the virtual clock, which it passes to the kernel as `now` on every
// call. Agent choices come from a seeded generator, so the same settings replay the same run.
// `advanceTo(t)` processes agent timers and kernel deadlines in time order up to `t`
// (optionally within a wall-clock budget: then virtual time lags instead of frames dropping).

/** The resource tree the agents work on (leaves are files; directories can be locked too). */
export const RESOURCE_TREE = (() => {
  const dirs = {
    'src/auth': ['login.ts', 'session.ts', 'tokens.ts', 'oauth.ts', 'password.ts', 'index.ts'],
    'src/db': ['schema.sql', 'migrate.ts', 'pool.ts', 'models.ts', 'seed.ts', 'index.ts'],
    'src/api': ['routes.ts', 'handlers.ts', 'middleware.ts', 'errors.ts', 'openapi.yaml', 'index.ts'],
    'src/ui': ['app.tsx', 'theme.css', 'forms.tsx', 'table.tsx', 'router.tsx', 'index.ts'],
    tests: ['auth.test.ts', 'db.test.ts', 'api.test.ts', 'ui.test.ts', 'e2e.test.ts'],
    docs: ['README.md', 'CHANGELOG.md', 'ARCHITECTURE.md'],
    build: ['bundle.js', 'bundle.css'],
  };
  const files = [];
  const directories = ['FILE:/repo', 'FILE:/repo/src'];
  for (const [dir, names] of Object.entries(dirs)) {
    directories.push(`FILE:/repo/${dir}`);
    for (const n of names) files.push(`FILE:/repo/${dir}/${n}`);
  }
  files.push('FILE:/repo/package.json');
  return { files, directories, leaders: ['LEADER:/indexer', 'LEADER:/deployer'] };
})();

export const POLICIES = ['wait_die', 'wound_wait', 'lanes'];

/** Agent states as the dashboard shows them. */
export const STATES = ['planning', 'waiting', 'executing', 'backoff', 'stalled'];

const TTL_MS = 3000;
const HEARTBEAT_MS = 1000;
const WAIT_TIMEOUT_MS = 4000;
const STALL_PROBABILITY = 0.01;

/** mulberry32: a small seeded generator for the agents' choices (never the kernel's). */
function generator(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A binary min-heap of timers ordered by (time, seq). */
class TimerHeap {
  constructor() {
    this.items = [];
    this.seq = 0;
  }
  get size() {
    return this.items.length;
  }
  peek() {
    return this.items[0];
  }
  push(time, agent, gen) {
    const item = { time, seq: this.seq++, agent, gen };
    const h = this.items;
    h.push(item);
    let i = h.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (less(h[p], h[i])) break;
      [h[p], h[i]] = [h[i], h[p]];
      i = p;
    }
  }
  pop() {
    const h = this.items;
    const top = h[0];
    const last = h.pop();
    if (h.length > 0) {
      h[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < h.length && less(h[l], h[m])) m = l;
        if (r < h.length && less(h[r], h[m])) m = r;
        if (m === i) break;
        [h[m], h[i]] = [h[i], h[m]];
        i = m;
      }
    }
    return top;
  }
}

function less(a, b) {
  return a.time < b.time || (a.time === b.time && a.seq < b.seq);
}

const PREDICATE_WEIGHTS = [
  ['MUTATES', 0.45],
  ['CONSUMES', 0.33],
  ['DEPENDS_ON', 0.12],
  ['RENAMES', 0.05],
  ['DELETES', 0.05],
];

export class Swarm {
  /**
   * @param {typeof import('../bindings/wasm/pkg-web/klock_wasm.js').Kernel} Kernel the wasm class
   * @param {{policy?: string, agents?: number, skew?: number, seed?: number}} options
   */
  constructor(Kernel, { policy = 'wait_die', agents = 60, skew = 1, seed = 7 } = {}) {
    this.Kernel = Kernel;
    this.policy = policy;
    this.seed = seed;
    this.random = generator(seed);
    this.kernel = new Kernel({ policy, seed, backoffBaseMs: 100, backoffCapMs: 4000 });
    this.now = 0;
    this.timers = new TimerHeap();
    this.agents = [];
    this.bySession = new Map();
    this.ops = 0; // state-changing kernel operations (open, acquire, heartbeat, release, advance, ...)
    this.queries = 0; // read-only or observing calls (snapshot, stats, resource_state, next_deadline, drain)
    this.lagging = false;
    this.listeners = [];
    /** Per-bucket history for the chart: {t, granted, waited, died, timedOut} per virtual second. */
    this.history = [];
    this.bucketMs = 1000;
    this.setSkew(skew);
    this.setAgentCount(agents);
  }

  /** Registers `fn(entry)` for every verdict and event (the log). */
  onLog(fn) {
    this.listeners.push(fn);
  }

  log(kind, agent, text) {
    const entry = { t: this.now, kind, agent: agent?.name ?? '', text };
    for (const fn of this.listeners) fn(entry);
  }

  free() {
    this.kernel.free();
  }

  setSkew(skew) {
    this.skew = skew;
    // Zipf weights over a fixed shuffle of the files, so hot files are spread over the tree.
    const order = RESOURCE_TREE.files
      .map((f, i) => [f, ((i * 7919) % 101) / 101])
      .sort((a, b) => a[1] - b[1])
      .map(([f]) => f);
    let total = 0;
    this.cdf = order.map((file, rank) => {
      total += 1 / (rank + 1) ** skew;
      return [total, file];
    });
    for (const c of this.cdf) c[0] /= total;
  }

  pickFile() {
    const u = this.random();
    for (const [p, file] of this.cdf) if (u <= p) return file;
    return this.cdf[this.cdf.length - 1][1];
  }

  pickPredicate() {
    let u = this.random();
    for (const [p, w] of PREDICATE_WEIGHTS) {
      if (u < w) return p;
      u -= w;
    }
    return 'MUTATES';
  }

  /** A manifest of 1 to 3 intents; now and then a directory or a leadership role. */
  newManifest() {
    const intents = new Set();
    const n = 1 + (this.random() < 0.35 ? 1 : 0) + (this.random() < 0.12 ? 1 : 0);
    while (intents.size < n) intents.add(`${this.pickPredicate()} ${this.pickFile()}`);
    const r = this.random();
    if (r < 0.02) {
      const dirs = RESOURCE_TREE.directories.slice(2);
      intents.add(`${r < 0.01 ? 'DELETES' : 'RENAMES'} ${dirs[Math.floor(this.random() * dirs.length)]}`);
    } else if (r < 0.05) {
      const leaders = RESOURCE_TREE.leaders;
      intents.add(`PROVIDES ${leaders[Math.floor(this.random() * leaders.length)]}`);
    }
    return [...intents];
  }

  between(lo, hi) {
    return lo + Math.floor(this.random() * (hi - lo));
  }

  setAgentCount(count) {
    while (this.agents.length < count) this.addAgent();
    while (this.agents.length > count) this.removeAgent();
  }

  addAgent() {
    const index = this.agents.length;
    const name = `agent-${String(index + 1).padStart(3, '0')}`;
    const agent = {
      index,
      name,
      session: 0,
      priority: 0,
      state: 'planning',
      manifest: [],
      ticket: 0,
      leases: [],
      gen: 0,
      since: this.now,
      wake: 0,
      working: false,
      done: 0,
    };
    this.agents.push(agent);
    this.openSession(agent);
    this.plan(agent);
  }

  removeAgent() {
    const agent = this.agents.pop();
    agent.gen++; // cancels its timers
    this.bySession.delete(agent.session);
    this.kernel.closeSession(agent.session, this.now);
    this.ops++;
    this.drain();
  }

  openSession(agent) {
    const info = this.kernel.openSession(agent.name, 'default', this.now);
    this.ops++;
    agent.session = info.sessionId;
    agent.priority = info.priority;
    this.bySession.set(info.sessionId, agent);
  }

  setState(agent, state) {
    agent.state = state;
    agent.since = this.now;
  }

  schedule(agent, delay, what) {
    agent.gen++;
    agent.next = what;
    agent.wake = this.now + delay;
    this.timers.push(agent.wake, agent, agent.gen);
  }

  plan(agent) {
    this.setState(agent, 'planning');
    agent.leases = [];
    agent.ticket = 0;
    this.schedule(agent, this.between(300, 1500), 'acquire-new');
  }

  acquire(agent) {
    const v = this.kernel.acquire(
      agent.session,
      agent.manifest,
      { ttlMs: TTL_MS, waitTimeoutMs: WAIT_TIMEOUT_MS },
      this.now,
    );
    this.ops++;
    this.count(v.verdict === 'GRANTED' ? 'granted' : v.verdict === 'WAIT' ? 'waited' : 'died');
    const what = agent.manifest.join(', ');
    if (v.verdict === 'GRANTED') {
      this.log('GRANTED', agent, `acquire ${what} → GRANTED (fence ${v.leases.map((l) => l.fence).join(', ')})`);
      this.execute(agent, v.leases);
    } else if (v.verdict === 'WAIT') {
      this.log('WAIT', agent, `acquire ${what} → WAIT ticket ${v.ticket}, held by ${this.blockers(v.heldBy)}`);
      this.setState(agent, 'waiting');
      agent.ticket = v.ticket;
      agent.gen++; // nothing to do until the kernel answers with an event
    } else {
      this.log(
        'DIE',
        agent,
        `acquire ${what} → DIE, retry in ${v.retryAfterMs} ms (held by ${this.blockers(v.heldBy)})`,
      );
      this.backoff(agent, v.retryAfterMs);
    }
  }

  blockers(heldBy) {
    const names = heldBy.map((b) => b.agentId);
    return names.length > 3 ? `${names.slice(0, 3).join(', ')} +${names.length - 3}` : names.join(', ');
  }

  backoff(agent, ms) {
    this.setState(agent, 'backoff');
    agent.ticket = 0;
    agent.leases = [];
    this.schedule(agent, Math.max(1, ms), 'acquire-retry');
  }

  execute(agent, leases) {
    this.setState(agent, 'executing');
    agent.ticket = 0;
    agent.leases = leases.map((l) => l.leaseId);
    agent.workEnd = this.now + this.between(400, 2500);
    if (this.random() < STALL_PROBABILITY) {
      // The agent hangs: no heartbeat, no release; its leases will expire.
      this.setState(agent, 'stalled');
      agent.gen++;
      return;
    }
    this.schedule(agent, Math.min(HEARTBEAT_MS, agent.workEnd - this.now), 'work');
  }

  /** Runs the agent's due timer. */
  wake(agent) {
    switch (agent.next) {
      case 'acquire-new':
        agent.manifest = this.newManifest();
        this.acquire(agent);
        break;
      case 'acquire-retry':
        this.acquire(agent);
        break;
      case 'work':
        if (this.now >= agent.workEnd) {
          const n = this.kernel.releaseAll(agent.session, this.now);
          this.ops++;
          agent.done++;
          this.log('RELEASE', agent, `done, released ${n} lease${n === 1 ? '' : 's'}`);
          this.plan(agent);
        } else {
          const results = this.kernel.heartbeat(agent.session, 'all', this.now);
          this.ops++;
          const lost = results.filter((r) => r.status !== 'OK');
          if (lost.length > 0) {
            this.log('HEARTBEAT', agent, `heartbeat: ${lost.map((r) => `lease ${r.leaseId} ${r.status}`).join(', ')}`);
          }
          this.schedule(agent, Math.min(HEARTBEAT_MS, agent.workEnd - this.now), 'work');
        }
        break;
      default:
        break;
    }
  }

  /** Dispatches every queued kernel event to its agent. */
  drain() {
    if (this.kernel.pendingEvents() === 0) return;
    const events = this.kernel.drainEvents();
    this.queries++;
    for (const e of events) this.onEvent(e);
  }

  onEvent(e) {
    const agent = this.bySession.get(e.session);
    switch (e.event) {
      case 'GRANTED':
        this.count('granted');
        if (!agent) return;
        this.log(
          'GRANTED',
          agent,
          `ticket ${e.ticket} GRANTED after ${this.now - agent.since} ms (fence ${e.leases.map((l) => l.fence).join(', ')})`,
        );
        this.execute(agent, e.leases);
        break;
      case 'WAIT_TIMEOUT':
        this.count('timedOut');
        if (!agent) return;
        this.log('WAIT_TIMEOUT', agent, `ticket ${e.ticket} WAIT_TIMEOUT, gives up this task`);
        this.plan(agent);
        break;
      case 'DIED':
        this.count('died');
        if (!agent) return;
        this.log('DIED', agent, `ticket ${e.ticket} DIED, retry in ${e.retryAfterMs} ms`);
        this.backoff(agent, e.retryAfterMs);
        break;
      case 'WOUNDED': {
        this.count('wounded');
        if (!agent) return;
        const by = this.bySession.get(e.by)?.name ?? `session ${e.by}`;
        this.log(
          'WOUNDED',
          agent,
          `WOUNDED by ${by}: lost ${e.lostLeases.length} lease(s), ${e.lostTickets.length} ticket(s); rolls back, retry in ${e.retryAfterMs} ms`,
        );
        // The older agent took what it needed: roll back and retry the same work after the
        // kernel's backoff (a wound counts as a DIE, SPEC.md §8).
        this.backoff(agent, e.retryAfterMs);
        break;
      }
      case 'LEASE_EXPIRED':
        this.count('expired');
        if (!agent) return;
        this.log('LEASE_EXPIRED', agent, `lease ${e.lease} EXPIRED`);
        agent.leases = agent.leases.filter((l) => l !== e.lease);
        if (agent.leases.length === 0 && (agent.state === 'stalled' || agent.state === 'executing')) {
          // The stalled agent comes back (or a working one lost its grip): start over.
          this.log('RESTART', agent, 'restarts after losing its leases');
          this.plan(agent);
        }
        break;
      case 'SESSION_CLOSED':
        if (!agent) return;
        this.log('SESSION_CLOSED', agent, `session closed by the kernel (${e.reason}); reopens`);
        this.bySession.delete(e.session);
        this.openSession(agent);
        this.plan(agent);
        break;
      default:
        break;
    }
  }

  count(what) {
    const b = Math.floor(this.now / this.bucketMs);
    let last = this.history[this.history.length - 1];
    if (!last || last.bucket !== b) {
      last = { bucket: b, granted: 0, waited: 0, died: 0, timedOut: 0, expired: 0, wounded: 0 };
      this.history.push(last);
      if (this.history.length > 600) this.history.splice(0, this.history.length - 600);
    }
    last[what]++;
  }

  /**
   * Processes every agent timer and kernel deadline due at or before `target`, in time order.
   * With `budgetMs` and a `clock()` (wall time), stops early when the budget is spent; then
   * virtual time stays where the work stopped (the simulation lags instead of frames dropping).
   */
  advanceTo(target, budgetMs = Infinity, clock = null) {
    const start = clock ? clock() : 0;
    let steps = 0;
    this.lagging = false;
    for (;;) {
      const deadline = this.kernel.nextDeadline();
      this.queries++;
      let top = this.timers.peek();
      while (top && top.gen !== top.agent.gen) {
        this.timers.pop(); // stale: the agent moved on
        top = this.timers.peek();
      }
      const timerAt = top ? top.time : Infinity;
      const kernelAt = deadline === null ? Infinity : deadline;
      const at = Math.min(timerAt, kernelAt);
      if (at > target) break;
      if (clock && (++steps & 15) === 0 && clock() - start > budgetMs) {
        this.lagging = true;
        return;
      }
      this.now = Math.max(this.now, at);
      if (kernelAt <= timerAt) {
        this.kernel.advance(this.now);
        this.ops++;
      } else {
        this.timers.pop();
        this.wake(top.agent);
      }
      this.drain();
    }
    this.now = Math.max(this.now, target);
  }

  /** A summary of the agents by state. */
  stateCounts() {
    const counts = Object.fromEntries(STATES.map((s) => [s, 0]));
    for (const a of this.agents) counts[a.state]++;
    return counts;
  }

  snapshot() {
    this.queries++;
    return this.kernel.snapshot(this.now);
  }

  stats() {
    this.queries++;
    return this.kernel.stats();
  }

  resourceState(resource) {
    this.queries++;
    return this.kernel.resourceState(resource, 'default', this.now);
  }
}
