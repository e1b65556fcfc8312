// Compiled, never run (tsc --noEmit --strict, by scripts/test-node.sh): the Node addon's
// generated declarations (node/index.d.ts, from its Rust declarations) declare exactly the one
// JavaScript API of bindings/js-api/kernel.d.ts, which the wasm package's declarations are
// verbatim. Every export, the Kernel class and every value type must be assignable both ways
// and have the same keys (so a renamed optional field is caught too); a difference is a
// compile error naming the type.

import * as One from '../kernel'
import * as Node from '../../../node/index'

/** `true` when A and B are assignable to each other (not distributed over unions). */
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false
/** Same, and the same keys: optional keys do not weaken the check. */
type Exact<A, B> = Same<A, B> extends true ? Same<keyof A, keyof B> : false
/** The keys of each member of a tagged union, by tag. */
type Variants<U, Tag extends keyof U> = { [K in U[Tag] & string]: keyof Extract<U, Record<Tag, K>> }

function check<T extends true>(): T | void {}

// The module: the same exports (the loader's marker aside), each of the same type.
// `flock` is Node only (flock(2) for node/fence.js; a browser has no files), and so is
// `afterSetback` and `AFTER_NO_WAIT_DIE` (the core's acquisition rule for node/client.js, the
// friendly client), and
// `Servers`/`Attempts`, `LEADER_HEADER`, `Follow`, `ends`, `LOST_AT_LOCAL_DEADLINE` and
// `MAX_RENEWALS_IN_FLIGHT` (the core's failover, leader, watch, lost-lease and renewal-pacing
// rules for node/remote.js, the remote client), and
// `Ledger`/`renewAt` (the core's ledger of nested lease blocks, for node/client.js).
check<Same<keyof typeof One, Exclude<keyof typeof Node, '__napiBindingTarget' | 'flock' | 'afterSetback' | 'AFTER_NO_WAIT_DIE' | 'Servers' | 'Attempts' | 'LEADER_HEADER' | 'Follow' | 'ends' | 'LOST_AT_LOCAL_DEADLINE' | 'MAX_RENEWALS_IN_FLIGHT' | 'Ledger' | 'renewAt'>>>()
check<Same<typeof One.ERROR_CODES, typeof Node.ERROR_CODES>>()
check<Same<typeof One.PREDICATES, typeof Node.PREDICATES>>()
check<Same<typeof One.EVENT_KINDS, typeof Node.EVENT_KINDS>>()
check<Same<typeof One.parseIntent, typeof Node.parseIntent>>()
check<Same<typeof One.MAX_MANIFEST_INTENTS, typeof Node.MAX_MANIFEST_INTENTS>>()
check<Same<typeof One.MAX_NAME_BYTES, typeof Node.MAX_NAME_BYTES>>()
check<Same<typeof One.MAX_RESOURCE_BYTES, typeof Node.MAX_RESOURCE_BYTES>>()
check<Same<ConstructorParameters<typeof One.KlockError>, ConstructorParameters<typeof Node.KlockError>>>()
check<Exact<One.KlockError, Node.KlockError>>()

// The kernel: constructor, every method (names, argument order, answers).
check<Same<ConstructorParameters<typeof One.Kernel>, ConstructorParameters<typeof Node.Kernel>>>()
check<Exact<One.Kernel, Node.Kernel>>()
type Methods = Exclude<keyof One.Kernel, 'config'>
check<Same<{ [M in Methods]: Parameters<One.Kernel[M]> }, { [M in Methods]: Parameters<Node.Kernel[M]> }>>()
check<Same<{ [M in Methods]: ReturnType<One.Kernel[M]> }, { [M in Methods]: ReturnType<Node.Kernel[M]> }>>()

// The values the kernel takes and answers.
check<Exact<One.Config, Node.Config>>()
check<Exact<One.ConfigView, Node.ConfigView>>()
check<Exact<One.AcquireOptions, Node.AcquireOptions>>()
check<Exact<One.SessionInfo, Node.SessionInfo>>()
check<Exact<One.Intent, Node.Intent>>()
check<Exact<One.Lease, Node.Lease>>()
check<Exact<One.Blocker, Node.Blocker>>()
check<Same<One.Verdict, Node.Verdict>>()
check<Same<Variants<One.Verdict, 'verdict'>, Variants<Node.Verdict, 'verdict'>>>()
check<Same<One.Event, Node.Event>>()
check<Same<Variants<One.Event, 'event'>, Variants<Node.Event, 'event'>>>()
check<Exact<One.HeartbeatResult, Node.HeartbeatResult>>()
check<Exact<One.ReconcileResult, Node.ReconcileResult>>()
check<Exact<One.Holder, Node.Holder>>()
check<Exact<One.Waiter, Node.Waiter>>()
check<Exact<One.ResourceState, Node.ResourceState>>()
check<Exact<One.StateDigest, Node.StateDigest>>()
check<Exact<One.DigestIdentity, Node.DigestIdentity>>()
check<Exact<One.DigestRecovery, Node.DigestRecovery>>()
check<Exact<One.Counters, Node.Counters>>()
check<Exact<One.Contention, Node.Contention>>()
check<Exact<One.GhostAgent, Node.GhostAgent>>()
check<Exact<One.Stats, Node.Stats>>()
check<Exact<One.SessionView, Node.SessionView>>()
check<Exact<One.TicketView, Node.TicketView>>()
check<Exact<One.Snapshot, Node.Snapshot>>()
