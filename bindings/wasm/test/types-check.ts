// Compiled (never run) by scripts/test-wasm.sh with `tsc --noEmit --strict`: the generated
// declarations (pkg-web/klock_wasm.d.ts: bindings/js-api/kernel.d.ts verbatim, plus what only
// the wasm package has) are valid and describe the one JavaScript API as documented.
import init, { Kernel, KlockError, ERROR_CODES, PREDICATES, type Verdict, type Event } from '../pkg-web/klock_wasm.js';

export async function example(): Promise<number> {
  await init();
  const k = new Kernel({ policy: 'lanes', seed: 1 });
  const a: number = k.openSession('alice', 'default', 0).sessionId;
  const v: Verdict = k.acquire(a, ['MUTATES FILE:/x'], { ttlMs: 500 }, 1);
  let fence = 0;
  switch (v.verdict) {
    case 'GRANTED':
      fence = v.leases[0]!.fence;
      break;
    case 'WAIT':
      fence = v.ticket;
      break;
    case 'DIE':
      fence = v.retryAfterMs + v.heldBy.length;
      break;
  }
  const events: Event[] = k.drainEvents();
  for (const e of events) {
    // DIED and WOUNDED both count as a DIE and carry the kernel's backoff (SPEC.md §8).
    if (e.event === 'WOUNDED') fence += e.lostLeases.length + e.retryAfterMs;
    if (e.event === 'DIED') fence += e.retryAfterMs;
  }
  const next: number | null = k.nextDeadline();
  const hb = k.heartbeat(a, 'all', 2);
  const rs = k.resourceState('FILE:/x', 'default', 3);
  const snap = k.snapshot(4);
  try {
    k.release(a, 99, 5);
  } catch (err) {
    if (err instanceof KlockError) fence += err.code + ERROR_CODES.UNKNOWN_LEASE + PREDICATES.length;
  }
  // @ts-expect-error: `now` is the last argument (options come before it)
  k.acquire(a, ['MUTATES FILE:/x'], 6, { ttlMs: 500 });
  const copy = k.clone();
  copy.free(); // only the wasm package has free()
  return fence + (next ?? 0) + hb.length + rs.holders.length + snap.stats.counters.granted + k.now();
}
