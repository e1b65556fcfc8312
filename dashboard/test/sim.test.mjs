// The simulated swarm (dashboard/sim.js) in Node, against the --target nodejs build: fast
// checks of what the swarm takes from the kernel. Run by `node --test dashboard/test/`.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { Swarm } from '../sim.js';

const require = createRequire(import.meta.url);
const { Kernel } = require('../../bindings/wasm/pkg-nodejs/klock_wasm.js');

/**
 * Runs a swarm for `ms` virtual ms and records, in order, every retryAfterMs the kernel
 * answered (DIE verdicts, DIED and WOUNDED events) and every backoff the swarm slept.
 */
function run(policy, ms) {
  const swarm = new Swarm(Kernel, { policy, agents: 150, skew: 1.2, seed: 11 });
  const fromKernel = [];
  const slept = [];
  const kinds = { DIE: 0, DIED: 0, WOUNDED: 0 };
  const kernel = swarm.kernel;
  const acquire = kernel.acquire.bind(kernel);
  kernel.acquire = (...args) => {
    const v = acquire(...args);
    if (v.verdict === 'DIE') {
      kinds.DIE++;
      fromKernel.push(v.retryAfterMs);
    }
    return v;
  };
  const drainEvents = kernel.drainEvents.bind(kernel);
  kernel.drainEvents = () => {
    const events = drainEvents();
    for (const e of events) {
      if ((e.event === 'DIED' || e.event === 'WOUNDED') && swarm.bySession.has(e.session)) {
        kinds[e.event]++;
        fromKernel.push(e.retryAfterMs);
      }
    }
    return events;
  };
  const backoff = swarm.backoff.bind(swarm);
  swarm.backoff = (agent, wait) => {
    slept.push(wait);
    backoff(agent, wait);
    assert.equal(agent.wake, swarm.now + Math.max(1, wait), 'the agent wakes after the backoff');
  };
  swarm.advanceTo(ms);
  swarm.free();
  return { fromKernel, slept, kinds };
}

test("the swarm backs off exactly the kernel's retryAfterMs: DIE verdicts, DIED and WOUNDED events", () => {
  const wound = run('wound_wait', 20000);
  assert.ok(wound.kinds.WOUNDED > 20, `wound_wait was contended: ${JSON.stringify(wound.kinds)}`);
  assert.ok(
    wound.fromKernel.every((ms) => Number.isInteger(ms)),
    'every WOUNDED event carries retryAfterMs',
  );
  assert.deepEqual(wound.slept, wound.fromKernel);
  const die = run('wait_die', 20000);
  assert.ok(die.kinds.DIE > 20, `wait_die was contended: ${JSON.stringify(die.kinds)}`);
  assert.deepEqual(die.slept, die.fromKernel);
});
