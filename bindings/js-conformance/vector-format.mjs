// The engine-agnostic part of the two JavaScript conformance runners (node/conformance.mjs for
// the napi-rs addon, bindings/wasm/conformance-core.mjs for the wasm build, which also runs in
// Chromium): the closed sets and key lists of ../../../shared/conformance/FORMAT.md
// (mirrors conformance/src/vector.rs), the alias table (aliases.rs), set matching and the report
// line. No Node API here: the browser loads this module too (dashboard/serve.mjs serves it at
// /js-conformance/).

// ---------------------------------------------------------------------------------------------
// Keys and closed sets of the vector format

export const FILE_KEYS = ['name', 'spec', 'config', 'steps'];
export const POLICIES = ['wait_die', 'wound_wait', 'lanes'];
export const PREDICATES = ['PROVIDES', 'CONSUMES', 'MUTATES', 'DELETES', 'DEPENDS_ON', 'RENAMES'];
export const LEASE_KEYS = ['as', 'resource', 'predicate', 'expires_at', 'ttl_ms', 'fence_gt', 'same_as'];
export const EVENT_KINDS = {
  GRANTED: ['ticket', 'session', 'leases'],
  WAIT_TIMEOUT: ['ticket', 'session'],
  DIED: ['ticket', 'session', 'retry_after_ms'],
  LEASE_EXPIRED: ['lease', 'session'],
  WOUNDED: ['session', 'by', 'lost_leases', 'lost_tickets', 'retry_after_ms'],
  SESSION_CLOSED: ['session'],
};
export const EVENT_KEYS = ['event', 'ticket', 'session', 'lease', 'by', 'leases', 'retry_after_ms', 'lost_leases', 'lost_tickets'];
export const STATUSES = ['ACTIVE', 'EXPIRED', 'RELEASED', 'NOT_OWNER', 'UNKNOWN'];
export const VERDICTS = ['GRANTED', 'WAIT', 'DIE'];
export const HEARTBEAT_ERRORS = ['LEASE_EXPIRED', 'LEASE_RELEASED', 'NOT_OWNER', 'UNKNOWN_LEASE', 'LIFETIME_EXCEEDED'];

/** Per `do`: [step keys besides now/do/expect, expect keys besides error/events]. */
const ACTIONS = {
  open: [['agent', 'namespace', 'as'], ['priority_lt']],
  close: [['session'], []],
  suspend: [['session'], []],
  release_all: [['session'], []],
  digest: [['session', 'as'], []],
  resume: [['digest', 'tamper'], ['epoch']],
  acquire: [['session', 'intents', 'ttl_ms', 'wait', 'wait_timeout_ms'], ['verdict', 'leases', 'ticket', 'held_by', 'retry_after_ms']],
  heartbeat: [['session', 'leases'], ['results']],
  release: [['session', 'lease'], ['released']],
  reconcile: [['session', 'leases'], ['status']],
  cancel_wait: [['session', 'ticket'], []],
  advance: [[], []],
  next_deadline: [[], ['deadline']],
  resource_state: [['resource', 'namespace'], ['holders', 'waiting', 'covering']],
};
const DOS = 'open, close, suspend, digest, resume, acquire, heartbeat, release, release_all, reconcile, cancel_wait, advance, resource_state, next_deadline';

/** The key lists of one `do` (see ACTIONS); throws on an unknown `do`. */
export function actionKeys(action) {
  if (!Object.hasOwn(ACTIONS, action)) throw new Error(`unknown \`do\` ${JSON.stringify(action)} (known: ${DOS})`);
  return ACTIONS[action];
}

// ---------------------------------------------------------------------------------------------
// Small value checks

/** A copy of `v` when it is a list of strings, else undefined. */
export function strList(v) {
  if (!Array.isArray(v) || !v.every((x) => typeof x === 'string')) return undefined;
  return [...v];
}

export function predicateName(ctx, name) {
  if (!PREDICATES.includes(name)) {
    throw new Error(`${ctx}: \`predicate\` must be one of ${PREDICATES.join(', ')}, got ${JSON.stringify(name)}`);
  }
  return name;
}

export function oneOf(ctx, key, value, allowed) {
  if (!allowed.includes(value)) throw new Error(`${ctx}: \`${key}\` must be one of ${allowed.join(', ')}, got ${JSON.stringify(value)}`);
  return value;
}

// ---------------------------------------------------------------------------------------------
// Aliases (mirrors conformance/src/aliases.rs, with 2^53 - 1 as the top of the literal ids):
// bound once; an unbound alias is a fixed literal id the kernel never issues.

export class Aliases {
  /**
   * `sameDigest(a, b)`: whether two digests (as the binding returns them) are equal;
   * `digestSession(d)`: the session id a digest names (for messages).
   */
  constructor({ sameDigest, digestSession }) {
    this.bound = new Map(); // alias -> {kind, id, fence?, digest?}
    this.unbound = new Map(); // alias -> literal id
    this.sameDigest = sameDigest;
    this.digestSession = digestSession;
  }

  describeBound(b) {
    return b.kind === 'digest' ? `of session #${this.digestSession(b.digest)}` : `#${b.id}`;
  }

  sameBound(a, b) {
    if (a.kind !== b.kind) return false;
    if (a.kind === 'digest') return this.sameDigest(a.digest, b.digest);
    return a.id === b.id && a.fence === b.fence;
  }

  bind(alias, value) {
    const old = this.bound.get(alias);
    if (old === undefined) {
      this.bound.set(alias, value);
      return;
    }
    if (this.sameBound(old, value)) return;
    throw new Error(
      `alias ${JSON.stringify(alias)} is already bound to ${old.kind} ${this.describeBound(old)}, cannot rebind it to ` +
        `${value.kind} ${this.describeBound(value)} (aliases are bound once; use same_as)`,
    );
  }

  bindSession(alias, id) { this.bind(alias, { kind: 'session', id }); }
  bindLease(alias, id, fence) { this.bind(alias, { kind: 'lease', id, fence }); }
  bindTicket(alias, id) { this.bind(alias, { kind: 'ticket', id }); }
  bindDigest(alias, digest) { this.bind(alias, { kind: 'digest', digest }); }

  literal(alias) {
    if (!this.unbound.has(alias)) this.unbound.set(alias, Number.MAX_SAFE_INTEGER - this.unbound.size);
    return this.unbound.get(alias);
  }

  resolve(alias, kind) {
    const b = this.bound.get(alias);
    if (b === undefined) return this.literal(alias);
    if (b.kind !== kind) throw new Error(`alias ${JSON.stringify(alias)} is bound to a ${b.kind}, not a ${kind}`);
    return b.id;
  }

  session(alias) { return this.resolve(alias, 'session'); }
  lease(alias) { return this.resolve(alias, 'lease'); }
  ticket(alias) { return this.resolve(alias, 'ticket'); }

  boundLease(alias) {
    const b = this.bound.get(alias);
    if (b === undefined) throw new Error(`alias ${JSON.stringify(alias)} is not bound to a lease yet`);
    if (b.kind !== 'lease') throw new Error(`alias ${JSON.stringify(alias)} is bound to a ${b.kind}, not a lease`);
    return b;
  }

  digest(alias) {
    const b = this.bound.get(alias);
    if (b === undefined) {
      throw new Error(`digest alias ${JSON.stringify(alias)} was never bound (bind it with a digest step's \`as\`)`);
    }
    if (b.kind !== 'digest') throw new Error(`alias ${JSON.stringify(alias)} is bound to a ${b.kind}, not a digest`);
    return structuredClone(b.digest);
  }

  label(kind, id) {
    for (const [alias, b] of this.bound) if (b.kind === kind && b.id === id) return `${alias}(#${id})`;
    for (const [alias, x] of this.unbound) if (x === id) return `${alias}(unbound)`;
    return `#${id}`;
  }

  sessionLabel(id) { return this.label('session', id); }
  leaseLabel(id) { return this.label('lease', id); }
  ticketLabel(id) { return this.label('ticket', id); }
}

// ---------------------------------------------------------------------------------------------
// Matching and the report line

export function perfectMatching(fits, cols) {
  const owner = new Array(cols).fill(-1);
  const augment = (row, seen) => {
    for (let col = 0; col < cols; col++) {
      if (fits[row][col] && !seen[col]) {
        seen[col] = true;
        if (owner[col] === -1 || augment(owner[col], seen)) {
          owner[col] = row;
          return true;
        }
      }
    }
    return false;
  };
  return fits.every((_, row) => augment(row, new Array(cols).fill(false)));
}

/** The report line: `ok <file>: <name>` or `FAIL <file>: <name>: <failure>`. */
export function line(r) {
  const name = r.name ?? '(unnamed)';
  return r.failure === undefined ? `ok ${r.file}: ${name}` : `FAIL ${r.file}: ${name}: ${r.failure}`;
}
