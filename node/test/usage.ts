// Type check (tsc --noEmit -p node/tsconfig.json): the documented usage compiles against
// client.d.ts and index.d.ts, and misuse does not (each @ts-expect-error must be an error).

import { Kernel, KlockError, ERROR_CODES, parseIntent } from '../index'
import type { Event, Verdict, Snapshot, HeartbeatResult, KlockErrorName } from '../index'
import { Klock, LeaseLost, Died, Timeout, Closed, connect, fencedWrite, fencedWriteAsync, StaleFence, Unreachable, ManualClock, Election } from '../client'
import type { Lease, Session, LeaseInfo, RemoteKlock, RemoteLease, ConnectOptions, Leader } from '../client'

// ---- the native kernel, driven by hand --------------------------------------------------
const kernel = new Kernel({ policy: 'wait_die', seed: 1, defaultTtlMs: 1_000 })
const alice = kernel.openSession('alice', 'default', 0)
const verdict: Verdict = kernel.acquire(alice.sessionId, ['MUTATES FILE:/src/a.ts'], { ttlMs: 500 }, 1)
switch (verdict.verdict) {
  case 'GRANTED': {
    const first: number = verdict.leases[0]!.fence
    kernel.release(alice.sessionId, verdict.leases[0]!.leaseId, 2)
    void first
    break
  }
  case 'WAIT':
    kernel.cancelWait(alice.sessionId, verdict.ticket, 2)
    break
  case 'DIE': {
    const ms: number = verdict.retryAfterMs
    void ms
    break
  }
}
const beats: HeartbeatResult[] = kernel.heartbeat(alice.sessionId, 'all', 3)
if (beats[0]?.status === 'OK') {
  const at: number | undefined = beats[0].expiresAt
  void at
}
let event: Event | null
while ((event = kernel.pollEvent()) !== null) {
  if (event.event === 'GRANTED') void event.leases.length
  if (event.event === 'WOUNDED') void event.lostTickets
}
const deadline: number | null = kernel.nextDeadline()
if (deadline !== null) kernel.advance(deadline)
const snap: Snapshot = kernel.snapshot(10)
void snap.stats.counters.granted
const digest = kernel.digest(alice.sessionId, 11)
kernel.resumeSession(digest, 12)
void kernel.clone().config.policy
void parseIntent('mutates FILE:/x').predicate
const code: number = ERROR_CODES.NOT_OWNER
void code
try {
  kernel.release(alice.sessionId, 12345, 13)
} catch (e) {
  if (e instanceof KlockError) {
    const name: KlockErrorName | (string & {}) = e.name
    const n: number = e.code
    void name
    void n
  }
}

// @ts-expect-error: now is a number
kernel.advance('10')
// @ts-expect-error: intents are a list
kernel.acquire(alice.sessionId, 'MUTATES FILE:/x', null, 1)
// @ts-expect-error: unknown policy
new Kernel({ policy: 'fifo' })
// @ts-expect-error: unknown option key
kernel.acquire(alice.sessionId, ['MUTATES FILE:/x'], { ttl: 5 }, 1)

// ---- the friendly client ----------------------------------------------------------------
async function agent(klock: Klock): Promise<number> {
  const session: Session = await klock.session('bob', { namespace: 'default' })
  const controller = new AbortController()
  const lease: Lease = await session.lease(['MUTATES FILE:/x', 'CONSUMES FILE:/y'], {
    ttlMs: 30_000,
    timeoutMs: 5_000,
    signal: controller.signal,
  })
  const info: LeaseInfo[] = lease.leases
  const fence: number = lease.fence
  lease.signal.addEventListener('abort', () => void lease.lost)
  lease.release()
  const written: string = await session.withLease('MUTATES FILE:/x', async (held) => {
    held.check()
    return `fence ${held.fence}`
  })
  try {
    await session.lease('MUTATES FILE:/z', { timeoutMs: 0 })
  } catch (e) {
    if (e instanceof Died) void e.retryAfterMs
    else if (e instanceof Timeout) void e.heldBy
    else if (e instanceof LeaseLost) void e.leaseIds
    else if (e instanceof Closed) void e.message
    else if (e instanceof KlockError) void e.code
  }
  await session.lease('MUTATES FILE:/w', { timeoutMs: Infinity }).then((l) => l.release())
  {
    // Released when the block ends, even if it throws (Node 20 lacks the syntax; TS has it).
    await using scoped = await session.lease('MUTATES FILE:/v')
    void scoped.fence
    const dispose: () => Promise<void> = scoped[Symbol.asyncDispose]
    void dispose
    // @ts-expect-error: only a disposable can be `await using`'d
    await using notDisposable = { fence: 1 }
    void notDisposable
  }
  {
    using sync = await session.lease('MUTATES FILE:/u')
    void sync.expiresAt
  }
  session.close()
  void info
  void written
  return fence
}

const klock = new Klock({ policy: 'wound_wait', clock: () => Date.now() })
void agent(klock).finally(() => klock.close())
void klock.counters.grants
void klock.counters.collected
void (async () => {
  await using session = await klock.session('carol')
  void session.priority
})()

// @ts-expect-error: the callback receives a Lease
void klock.session('x').then((s) => s.withLease('MUTATES FILE:/x', (l: string) => l))
// @ts-expect-error: timeoutMs is a number
void klock.session('x').then((s) => s.lease('MUTATES FILE:/x', { timeoutMs: '5' }))

// ---- the same client against klock serve (connect) ----------------------------------------
async function remote(): Promise<void> {
  const options: ConnectOptions = { token: 'secret', namespace: 'ci', reconnectTimeoutMs: 5_000 }
  const klock: RemoteKlock = connect('http://127.0.0.1:7300', options)
  const session = await klock.session('bot')
  const fence: number = await session.withLease('MUTATES FILE:/out.txt', async (lease: RemoteLease) => {
    fencedWrite('/tmp/out.txt', 'data', lease.fence)
    await fencedWriteAsync('/tmp/out.txt', new Uint8Array([1]), lease.fence)
    return lease.fence
  })
  const lease = await session.lease(['MUTATES FILE:/x'], { ttlMs: 1_000 })
  await lease.heartbeat()
  await lease.release()
  const holders: number = (await klock.resourceState('FILE:/x')).holders.length
  const digest = await session.digest()
  await session.suspend()
  const back = await klock.resume(digest)
  const statuses = await back.reconcile([1, 2])
  void statuses[0]?.status
  void fence
  void holders
  // @ts-expect-error snapshot() is in process only
  klock.snapshot()
  // @ts-expect-error a bad option
  connect('http://127.0.0.1:7300', { tokn: 'x' })
  connect('http://127.0.0.1:7300', { clock: new ManualClock() })
  try {
    await session.close()
  } catch (e) {
    if (e instanceof Unreachable || e instanceof StaleFence) void e.code
  }
  await klock.close()
}
void remote

// ---- leader election --------------------------------------------------------------------
async function elect(klock: Klock | RemoteKlock): Promise<void> {
  const election = new Election(klock, 'indexer', { agentId: 'worker-3', ttlMs: 10_000, onLost: (e: LeaseLost) => void e.name })
  const term: number = await election.campaign({ timeoutMs: 5_000, signal: AbortSignal.timeout(10_000) })
  if (election.isLeader()) fencedWrite('/tmp/index.json', '{}', term)
  election.signal.addEventListener('abort', () => void election.lost?.name)
  const who: Leader | null = await election.leader()
  void who?.since
  for await (const change of election.observe({ signal: AbortSignal.timeout(1_000) })) void change?.term
  void election.whenLost().then((e: LeaseLost) => e.leaseIds)
  await election.resign()
  // @ts-expect-error ttlMs is milliseconds, ttl does not exist
  new Election(klock, 'x', { ttl: 10 })
}
void elect
