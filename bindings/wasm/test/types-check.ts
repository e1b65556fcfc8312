// Compiled (never run) by scripts/test-wasm.sh with `tsc --noEmit --strict`: the generated
// declarations (pkg-web/klock_wasm.d.ts) are valid and describe the API as documented.
import init, { Kernel, errorCodes, type KlockError, type Verdict, type KlockEvent } from '../pkg-web/klock_wasm.js';

export async function example(): Promise<number> {
  await init();
  const k = new Kernel({ policy: 'lanes', seed: 1 });
  const a: number = k.openSession('alice', 'default', 0).session_id;
  const v: Verdict = k.acquire(a, ['MUTATES FILE:/x'], 1, { ttl_ms: 500 });
  let fence = 0;
  switch (v.verdict) {
    case 'GRANTED':
      fence = v.leases[0].fence;
      break;
    case 'WAIT':
      fence = v.ticket;
      break;
    case 'DIE':
      fence = v.retry_after_ms + v.held_by.length;
      break;
  }
  const events: KlockEvent[] = k.drainEvents();
  for (const e of events) {
    // DIED and WOUNDED both count as a DIE and carry the kernel's backoff (SPEC.md §8).
    if (e.event === 'WOUNDED') fence += e.lost_leases.length + e.retry_after_ms;
    if (e.event === 'DIED') fence += e.retry_after_ms;
  }
  const next: number | null = k.nextDeadline();
  const hb = k.heartbeat(a, 'all', 2);
  const rs = k.resourceState('FILE:/x', undefined, 3);
  const snap = k.snapshot(4);
  try {
    k.release(a, 99, 5);
  } catch (err) {
    const e = err as KlockError;
    fence += e.code + errorCodes()[e.name];
  }
  return fence + (next ?? 0) + hb.length + rs.holders.length + snap.stats.counters.granted + k.clone().now();
}
