#!/usr/bin/env node
// The Klock conformance runner for the Node binding.
//
// Usage: node node/conformance.mjs PATH...   (vector files, or directories of *.json vectors)
//
// Contract: the same as the Rust runner (conformance/src/, format ../shared/conformance/FORMAT.md):
// - Every file named and every `*.json` directly inside every directory named (sorted by file
//   name) is one vector. Each prints `ok <file>: <name>` or `FAIL <file>: <name>: step k:
//   <do> @<now>: <what differed>`; the run ends with `N passed, M failed` and exits non-zero
//   on any failure or when no vector ran (2 for a usage error).
// - Parsing is strict before anything runs: invalid JSON, a duplicated key, a key the format
//   does not define at that place, a value of the wrong type (`1.0` is not an integer) or an
//   unknown name (error, verdict, event, status, predicate, policy) fails the vector.
// - Every step makes exactly the one kernel call its `do` names at its `now`, drains every
//   event, binds aliases, and checks the answer and the events (only the fields written;
//   lists exactly; sets order-free). A step without `expect` must succeed and emit nothing.
// - An alias never bound is passed as a literal id the kernel never issues (counting down
//   from 2^53 - 1, one fixed id per alias), which is how unknown ids are tested.
// - When an error is expected, the runner proves the failed call changed nothing but the
//   settlement of time: a clone of the kernel taken before the call is advanced to the same
//   `now`; its events must equal the call's and its snapshot the kernel's after the call.
// - Numbers cross into the kernel as JS numbers, so a vector value above 2^53 - 1 fails the
//   vector with a message saying so (the Rust runner takes the full u64 range).

import { readFileSync, readdirSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { isDeepStrictEqual } from 'node:util';
import {
  Aliases, EVENT_KEYS, EVENT_KINDS, FILE_KEYS, HEARTBEAT_ERRORS, LEASE_KEYS, POLICIES, STATUSES, VERDICTS,
  actionKeys, line, oneOf, perfectMatching, predicateName, strList,
} from '../bindings/js-conformance/vector-format.mjs';

export { line };

const require = createRequire(import.meta.url);
const native = require('./index.js');
const { Kernel, KlockError, ERROR_CODES } = native;

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);
const MAX_U64 = (1n << 64n) - 1n;

// ---------------------------------------------------------------------------------------------
// Strict JSON: objects become Maps (duplicate keys refused), integer literals BigInts, other
// numbers Numbers, so `1.0` and `1e3` are not integers (as in serde_json).

function parseJson(text) {
  let i = 0;
  const where = () => {
    const before = text.slice(0, i);
    const line = before.split('\n').length;
    const column = i - before.lastIndexOf('\n');
    return `line ${line} column ${column}`;
  };
  const fail = (what) => {
    throw new Error(`invalid JSON: ${what} at ${where()}`);
  };
  const ws = () => {
    while (i < text.length && (text[i] === ' ' || text[i] === '\t' || text[i] === '\n' || text[i] === '\r')) i++;
  };
  const expectChar = (c) => {
    if (text[i] !== c) fail(`expected \`${c}\``);
    i++;
  };
  function literal(word, value) {
    if (text.startsWith(word, i)) {
      i += word.length;
      return value;
    }
    return fail('expected value');
  }
  function number() {
    const m = /^-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/.exec(text.slice(i, i + 400));
    if (!m) fail('invalid number');
    i += m[0].length;
    if (m[1] === undefined && m[2] === undefined) return BigInt(m[0]);
    const x = Number(m[0]);
    if (!Number.isFinite(x)) fail('number out of range');
    return x;
  }
  function hex4() {
    const h = text.slice(i, i + 4);
    if (!/^[0-9a-fA-F]{4}$/.test(h)) fail('invalid escape');
    i += 4;
    return parseInt(h, 16);
  }
  function string() {
    expectChar('"');
    let out = '';
    for (;;) {
      if (i >= text.length) fail('EOF while parsing a string');
      const c = text[i];
      const code = c.charCodeAt(0);
      if (c === '"') {
        i++;
        return out;
      }
      if (code < 0x20) fail('control character (\\u0000-\\u001F) found while parsing a string');
      if (c !== '\\') {
        out += c;
        i++;
        continue;
      }
      i++;
      const e = text[i++];
      const simple = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' }[e];
      if (simple !== undefined) {
        out += simple;
        continue;
      }
      if (e !== 'u') fail('invalid escape');
      const u = hex4();
      if (u >= 0xdc00 && u <= 0xdfff) fail('lone trailing surrogate in hex escape');
      if (u >= 0xd800 && u <= 0xdbff) {
        if (text[i] !== '\\' || text[i + 1] !== 'u') fail('lone leading surrogate in hex escape');
        i += 2;
        const low = hex4();
        if (low < 0xdc00 || low > 0xdfff) fail('lone leading surrogate in hex escape');
        out += String.fromCharCode(u, low);
      } else {
        out += String.fromCharCode(u);
      }
    }
  }
  function array() {
    expectChar('[');
    const items = [];
    ws();
    if (text[i] === ']') {
      i++;
      return items;
    }
    for (;;) {
      items.push(value());
      ws();
      if (text[i] === ',') {
        i++;
        continue;
      }
      expectChar(']');
      return items;
    }
  }
  function object() {
    expectChar('{');
    const map = new Map();
    ws();
    if (text[i] === '}') {
      i++;
      return map;
    }
    for (;;) {
      ws();
      if (text[i] !== '"') fail('key must be a string');
      const key = string();
      ws();
      expectChar(':');
      const v = value();
      if (map.has(key)) fail(`duplicate key \`${key}\``);
      map.set(key, v);
      ws();
      if (text[i] === ',') {
        i++;
        continue;
      }
      expectChar('}');
      return map;
    }
  }
  function value() {
    ws();
    const c = text[i];
    if (c === '{') return object();
    if (c === '[') return array();
    if (c === '"') return string();
    if (c === 't') return literal('true', true);
    if (c === 'f') return literal('false', false);
    if (c === 'n') return literal('null', null);
    if (c === '-' || (c >= '0' && c <= '9')) return number();
    return fail(i >= text.length ? 'EOF while parsing a value' : 'expected value');
  }
  const v = value();
  ws();
  if (i !== text.length) fail('trailing characters');
  return v;
}

/** A short rendering of a parsed JSON value for messages. */
function show(v) {
  const render = (x) => {
    if (x instanceof Map) return `{${[...x].map(([k, y]) => `${JSON.stringify(k)}:${render(y)}`).join(',')}}`;
    if (Array.isArray(x)) return `[${x.map(render).join(',')}]`;
    if (typeof x === 'bigint') return x.toString();
    return JSON.stringify(x);
  };
  const text = render(v);
  return text.length > 80 ? `${[...text].slice(0, 77).join('')}...` : text;
}

const isU64 = (v) => typeof v === 'bigint' && v >= 0n && v <= MAX_U64;

/** One JSON object whose keys were checked against an allowed list. */
class Fields {
  constructor(value, ctx, allowed) {
    if (!(value instanceof Map)) throw new Error(`${ctx} must be an object, got ${show(value)}`);
    for (const key of value.keys()) {
      if (!allowed.includes(key)) {
        const list = allowed.length ? allowed.join(', ') : 'none';
        throw new Error(`${ctx}: unknown key \`${key}\` (allowed here: ${list})`);
      }
    }
    this.map = value;
    this.ctx = ctx;
  }
  has(key) {
    return this.map.has(key);
  }
  get(key) {
    return this.map.get(key);
  }
  keys() {
    return [...this.map.keys()];
  }
  wrong(key, wanted, got) {
    return new Error(`${this.ctx}: \`${key}\` must be ${wanted}, got ${show(got)}`);
  }
  required(key) {
    if (!this.map.has(key)) throw new Error(`${this.ctx}: missing required key \`${key}\``);
    return this.map.get(key);
  }
  /** A non-negative integer, as a JS number (it must fit: the kernel takes JS numbers). */
  u64(key) {
    if (!this.map.has(key)) return undefined;
    const v = this.map.get(key);
    if (!isU64(v)) throw this.wrong(key, 'a non-negative integer', v);
    return toNumber(v, `${this.ctx}: \`${key}\``);
  }
  reqU64(key) {
    this.required(key);
    return this.u64(key);
  }
  str(key) {
    if (!this.map.has(key)) return undefined;
    const v = this.map.get(key);
    if (typeof v !== 'string') throw this.wrong(key, 'a string', v);
    return v;
  }
  reqStr(key) {
    this.required(key);
    return this.str(key);
  }
  bool(key) {
    if (!this.map.has(key)) return undefined;
    const v = this.map.get(key);
    if (typeof v !== 'boolean') throw this.wrong(key, 'true or false', v);
    return v;
  }
  strList(key) {
    if (!this.map.has(key)) return undefined;
    const v = this.map.get(key);
    const list = strList(v);
    if (list === undefined) throw this.wrong(key, 'a list of strings', v);
    return list;
  }
  range(key) {
    if (!this.map.has(key)) return undefined;
    const v = this.map.get(key);
    if (Array.isArray(v) && v.length === 2 && isU64(v[0]) && isU64(v[1]) && v[0] <= v[1]) {
      return [toNumber(v[0], `${this.ctx}: \`${key}\``), toNumber(v[1], `${this.ctx}: \`${key}\``)];
    }
    throw this.wrong(key, '[lo, hi] with integers lo <= hi', v);
  }
  u64OrNull(key) {
    if (!this.map.has(key)) return undefined;
    const v = this.map.get(key);
    if (v === null) return null;
    if (!isU64(v)) throw this.wrong(key, 'a non-negative integer or null', v);
    return toNumber(v, `${this.ctx}: \`${key}\``);
  }
  array(key) {
    if (!this.map.has(key)) return undefined;
    const v = this.map.get(key);
    if (!Array.isArray(v)) throw this.wrong(key, 'a list', v);
    return v;
  }
  object(key) {
    if (!this.map.has(key)) return undefined;
    const v = this.map.get(key);
    if (!(v instanceof Map)) throw this.wrong(key, 'an object', v);
    return v;
  }
}

function toNumber(v, what) {
  if (v > MAX_SAFE) {
    throw new Error(`${what} is ${v}, above 2^53 - 1: the Node binding takes times and ids as JS numbers`);
  }
  return Number(v);
}

// ---------------------------------------------------------------------------------------------
// The vector format as typed values (vector.rs).

const CONFIG_KEYS = {
  policy: 'policy',
  seed: 'seed',
  default_ttl_ms: 'defaultTtlMs',
  max_ttl_ms: 'maxTtlMs',
  default_wait_timeout_ms: 'defaultWaitTimeoutMs',
  backoff_base_ms: 'backoffBaseMs',
  backoff_cap_ms: 'backoffCapMs',
  grace_ms: 'graceMs',
  session_idle_ms: 'sessionIdleMs',
  max_leases_per_session: 'maxLeasesPerSession',
  max_lease_lifetime_ms: 'maxLeaseLifetimeMs',
};

function parseVector(value) {
  const file = new Fields(value, 'file', FILE_KEYS);
  const name = file.reqStr('name');
  file.str('spec');
  const config = file.has('config') ? parseConfig(file.get('config')) : {};
  const steps = file.array('steps');
  if (steps === undefined) throw new Error('file: missing required key `steps`');
  if (steps.length === 0) throw new Error('file: `steps` is empty');
  const parsed = steps.map((s, i) => {
    try {
      return parseStep(s);
    } catch (e) {
      throw new Error(`step ${i + 1}: ${e.message}`);
    }
  });
  return { name, config, steps: parsed };
}

function parseConfig(value) {
  const f = new Fields(value, 'config', Object.keys(CONFIG_KEYS));
  const config = {};
  const policy = f.str('policy');
  if (policy !== undefined) {
    if (!POLICIES.includes(policy)) {
      throw new Error(`config: \`policy\`: unknown policy ${JSON.stringify(policy)}: expected wait_die, wound_wait or lanes`);
    }
    config.policy = policy;
  }
  for (const [key, js] of Object.entries(CONFIG_KEYS)) {
    if (key === 'policy') continue;
    const v = f.u64(key);
    if (v !== undefined) config[js] = v;
  }
  return config;
}

function parseStep(value) {
  if (!(value instanceof Map) || !value.has('do')) throw new Error('step: missing required key `do`');
  const actionName = value.get('do');
  if (typeof actionName !== 'string') throw new Error(`step: \`do\` must be a string, got ${show(actionName)}`);
  const [fields, expectKeys] = actionKeys(actionName);
  const f = new Fields(value, `${actionName} step`, ['now', 'do', 'expect', ...fields]);
  const now = f.reqU64('now');
  let action;
  switch (actionName) {
    case 'open':
      action = { do: 'open', agent: f.reqStr('agent'), namespace: f.str('namespace') ?? 'default', bind: f.str('as') };
      break;
    case 'close':
    case 'suspend':
    case 'release_all':
      action = { do: actionName, session: f.reqStr('session') };
      break;
    case 'digest':
      action = { do: 'digest', session: f.reqStr('session'), bind: f.str('as') };
      break;
    case 'resume':
      action = { do: 'resume', digest: f.reqStr('digest'), tamper: f.has('tamper') ? parseTamper(f.get('tamper')) : {} };
      break;
    case 'acquire':
      f.required('intents');
      action = {
        do: 'acquire',
        session: f.reqStr('session'),
        intents: f.strList('intents'),
        ttlMs: f.u64('ttl_ms'),
        wait: f.bool('wait'),
        waitTimeoutMs: f.u64('wait_timeout_ms'),
      };
      break;
    case 'heartbeat': {
      const raw = f.required('leases');
      let leases;
      if (raw === 'all') leases = 'all';
      else {
        leases = strList(raw);
        if (leases === undefined) throw new Error(`${f.ctx}: \`leases\` must be "all" or a list of aliases`);
      }
      action = { do: 'heartbeat', session: f.reqStr('session'), leases };
      break;
    }
    case 'release':
      action = { do: 'release', session: f.reqStr('session'), lease: f.reqStr('lease') };
      break;
    case 'reconcile':
      f.required('leases');
      action = { do: 'reconcile', session: f.reqStr('session'), leases: f.strList('leases') };
      break;
    case 'cancel_wait':
      action = { do: 'cancel_wait', session: f.reqStr('session'), ticket: f.reqStr('ticket') };
      break;
    case 'advance':
    case 'next_deadline':
      action = { do: actionName };
      break;
    case 'resource_state':
      action = { do: 'resource_state', resource: f.reqStr('resource'), namespace: f.str('namespace') ?? 'default' };
      break;
    default:
      throw new Error('unreachable');
  }
  const expect = f.has('expect') ? parseExpect(f.get('expect'), actionName, expectKeys) : undefined;
  return { now, action, expect };
}

function parseTamper(value) {
  const f = new Fields(value, 'tamper', ['agent_id', 'namespace', 'session_id', 'priority_timestamp', 'epoch']);
  let sessionId;
  if (f.has('session_id')) {
    const v = f.get('session_id');
    if (typeof v === 'string') sessionId = { alias: v };
    else if (isU64(v)) sessionId = { number: toNumber(v, 'tamper: `session_id`') };
    else throw new Error(`tamper: \`session_id\` must be a session alias or a number, got ${show(v)}`);
  }
  return {
    agentId: f.str('agent_id'),
    namespace: f.str('namespace'),
    sessionId,
    priorityTimestamp: f.u64('priority_timestamp'),
    epoch: f.u64('epoch'),
  };
}

function errorName(ctx, name) {
  if (!Object.hasOwn(ERROR_CODES, name)) {
    throw new Error(`${ctx}: unknown error name ${JSON.stringify(name)} (known: ${Object.keys(ERROR_CODES).join(', ')})`);
  }
  return name;
}

function outcomeStatus(ctx, name) {
  if (name === 'OK') return 'OK';
  errorName(ctx, name);
  if (!HEARTBEAT_ERRORS.includes(name)) {
    throw new Error(
      `${ctx}: a heartbeat outcome is OK, LEASE_EXPIRED, LEASE_RELEASED, NOT_OWNER, UNKNOWN_LEASE or LIFETIME_EXCEEDED, got ${JSON.stringify(name)}`,
    );
  }
  return name;
}

function parseExpect(value, action, specific) {
  const f = new Fields(value, `expect of ${action}`, ['error', 'events', ...specific]);
  const ctx = f.ctx;
  const e = { events: [] };
  const error = f.str('error');
  if (error !== undefined) {
    e.error = errorName(ctx, error);
    const other = f.keys().find((k) => k !== 'error' && k !== 'events');
    if (other !== undefined) throw new Error(`${ctx}: \`error\` cannot be combined with \`${other}\` (a failed call returns nothing else)`);
  }
  const verdict = f.str('verdict');
  if (verdict !== undefined) e.verdict = oneOf(ctx, 'verdict', verdict, VERDICTS);
  const leases = f.array('leases');
  if (leases !== undefined) e.leases = parseLeases(leases, `${ctx}: leases`);
  e.ticket = f.str('ticket');
  e.heldBy = f.strList('held_by');
  e.retryAfterMs = f.range('retry_after_ms');
  const results = f.object('results');
  if (results !== undefined) {
    e.results = [];
    for (const [alias, v] of results) {
      const c = `${ctx}: results[${JSON.stringify(alias)}]`;
      let outcome;
      if (typeof v === 'string') outcome = { status: outcomeStatus(c, v) };
      else {
        const o = new Fields(v, c, ['status', 'expires_at']);
        const s = o.str('status');
        outcome = { status: s === undefined ? undefined : outcomeStatus(c, s), expiresAt: o.u64('expires_at') };
        if (outcome.expiresAt !== undefined && outcome.status !== undefined && outcome.status !== 'OK') {
          throw new Error(`${c}: \`expires_at\` only goes with status OK`);
        }
      }
      e.results.push([alias, outcome]);
    }
  }
  e.released = f.bool('released');
  const status = f.object('status');
  if (status !== undefined) {
    e.status = [];
    for (const [alias, v] of status) {
      const c = `${ctx}: status[${JSON.stringify(alias)}]`;
      let st;
      if (typeof v === 'string') st = { status: oneOf(c, 'status', v, STATUSES) };
      else {
        const o = new Fields(v, c, ['status', 'expires_at']);
        const s = o.str('status');
        st = { status: s === undefined ? undefined : oneOf(c, 'status', s, STATUSES), expiresAt: o.u64('expires_at') };
        if (st.expiresAt !== undefined && st.status !== undefined && st.status !== 'ACTIVE') {
          throw new Error(`${c}: \`expires_at\` only goes with status ACTIVE`);
        }
      }
      e.status.push([alias, st]);
    }
  }
  const holders = f.array('holders');
  if (holders !== undefined) e.holders = parseHolders(holders, `${ctx}: holders`);
  const covering = f.array('covering');
  if (covering !== undefined) e.covering = parseHolders(covering, `${ctx}: covering`);
  const waiting = f.array('waiting');
  if (waiting !== undefined) {
    e.waiting = waiting.map((item, i) => {
      const w = new Fields(item, `${ctx}: waiting[${i}]`, ['session', 'ticket']);
      return { session: w.str('session'), ticket: w.str('ticket') };
    });
  }
  e.deadline = f.u64OrNull('deadline');
  e.priorityLt = f.str('priority_lt');
  e.epoch = f.u64('epoch');
  const events = f.array('events');
  if (events !== undefined) e.events = events.map((item, i) => parseEvent(item, `${ctx}: events[${i}]`));
  if (action === 'acquire') checkVerdictFields(ctx, e);
  return e;
}

function checkVerdictFields(ctx, e) {
  if (e.verdict === undefined) return;
  const forbidden = {
    GRANTED: [['ticket', e.ticket], ['held_by', e.heldBy], ['retry_after_ms', e.retryAfterMs]],
    WAIT: [['leases', e.leases], ['retry_after_ms', e.retryAfterMs]],
    DIE: [['leases', e.leases], ['ticket', e.ticket]],
  }[e.verdict];
  const wrong = forbidden.find(([, v]) => v !== undefined);
  if (wrong) throw new Error(`${ctx}: \`${wrong[0]}\` cannot go with verdict ${e.verdict}`);
}

function parseLeases(items, ctx) {
  return items.map((item, i) => {
    const c = `${ctx}[${i}]`;
    const f = new Fields(item, c, LEASE_KEYS);
    const p = f.str('predicate');
    return {
      bind: f.str('as'),
      resource: f.str('resource'),
      predicate: p === undefined ? undefined : predicateName(c, p),
      expiresAt: f.u64('expires_at'),
      ttlMs: f.u64('ttl_ms'),
      fenceGt: f.str('fence_gt'),
      sameAs: f.str('same_as'),
    };
  });
}

function parseHolders(items, ctx) {
  return items.map((item, i) => {
    const c = `${ctx}[${i}]`;
    const f = new Fields(item, c, ['session', 'predicate', 'resource']);
    const p = f.str('predicate');
    return { session: f.str('session'), predicate: p === undefined ? undefined : predicateName(c, p), resource: f.str('resource') };
  });
}

function parseEvent(value, ctx) {
  let kind;
  if (value instanceof Map && value.has('event')) {
    kind = value.get('event');
    if (typeof kind !== 'string') throw new Error(`${ctx}: \`event\` must be a string, got ${show(kind)}`);
  }
  let allowed = EVENT_KEYS;
  if (kind !== undefined) {
    if (!Object.hasOwn(EVENT_KINDS, kind)) {
      throw new Error(`${ctx}: unknown event ${JSON.stringify(kind)} (known: ${Object.keys(EVENT_KINDS).join(', ')})`);
    }
    allowed = ['event', ...EVENT_KINDS[kind]];
    ctx = `${ctx} (${kind})`;
  }
  const f = new Fields(value, ctx, allowed);
  const leases = f.array('leases');
  return {
    event: f.str('event'),
    ticket: f.str('ticket'),
    session: f.str('session'),
    lease: f.str('lease'),
    by: f.str('by'),
    leases: leases === undefined ? undefined : parseLeases(leases, `${ctx}: leases`),
    retryAfterMs: f.range('retry_after_ms'),
    lostLeases: f.strList('lost_leases'),
    lostTickets: f.strList('lost_tickets'),
  };
}

// ---------------------------------------------------------------------------------------------
// Aliases (aliases.rs): bound once; unbound aliases are fixed ids the kernel never issues.

/** Digests are compared deeply; one names its session as `identity.sessionId`. */
const ALIAS_DIGESTS = { sameDigest: isDeepStrictEqual, digestSession: (d) => d.identity.sessionId };

// ---------------------------------------------------------------------------------------------
// Driving the kernel (run.rs) and checking answers (check.rs).

class StepError extends Error {}

function fail(message) {
  throw new StepError(message);
}

function describeLease(l, a) {
  return `${a.label('lease', l.leaseId)} ${l.predicate} ${l.resource} fence=${l.fence} exp=${l.expiresAt} ttl=${l.ttlMs}`;
}

function describeLeases(leases, a) {
  return `[${leases.map((l) => describeLease(l, a)).join('; ')}]`;
}

function describeVerdict(v, a) {
  const blockers = (held) => held.map((b) => a.label('session', b.sessionId)).join(', ');
  if (v.verdict === 'GRANTED') return `GRANTED ${describeLeases(v.leases, a)}`;
  if (v.verdict === 'WAIT') return `WAIT ticket=${a.label('ticket', v.ticket)} held_by={${blockers(v.heldBy)}}`;
  return `DIE retry_after_ms=${v.retryAfterMs} held_by={${blockers(v.heldBy)}}`;
}

function describeEvent(e, a) {
  const s = a.label('session', e.session);
  switch (e.event) {
    case 'GRANTED':
      return `GRANTED{ticket=${a.label('ticket', e.ticket)} session=${s} leases=${describeLeases(e.leases, a)}}`;
    case 'WAIT_TIMEOUT':
      return `WAIT_TIMEOUT{ticket=${a.label('ticket', e.ticket)} session=${s}}`;
    case 'DIED':
      return `DIED{ticket=${a.label('ticket', e.ticket)} session=${s} retry_after_ms=${e.retryAfterMs}}`;
    case 'LEASE_EXPIRED':
      return `LEASE_EXPIRED{lease=${a.label('lease', e.lease)} session=${s}}`;
    case 'WOUNDED':
      return `WOUNDED{session=${s} by=${a.label('session', e.by)} lost_leases=[${e.lostLeases
        .map((l) => a.label('lease', l))
        .join(', ')}] lost_tickets=[${e.lostTickets.map((t) => a.label('ticket', t)).join(', ')}] retry_after_ms=${e.retryAfterMs}}`;
    default:
      return `SESSION_CLOSED{session=${s} reason=${e.reason}}`;
  }
}

function describeEvents(events, a) {
  return `[${events.map((e) => describeEvent(e, a)).join(', ')}]`;
}

function describeOutput(out, a) {
  if (out.kind === 'verdict') return describeVerdict(out.value, a);
  if (out.kind === 'session') return `session ${a.label('session', out.value.sessionId)} epoch ${out.value.epoch}`;
  return `${out.kind} ${JSON.stringify(out.value)}`;
}

function same(what, expected, got) {
  if (expected !== undefined && expected !== got) fail(`${what}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(got)}`);
}

function matchLeases(what, expected, got, a) {
  if (expected.length !== got.length) fail(`${what}: expected ${expected.length} leases, got ${got.length}: ${describeLeases(got, a)}`);
  expected.forEach((e, i) => {
    const g = got[i];
    const at = `${what}[${i}]`;
    same(`${at}.resource`, e.resource, g.resource);
    same(`${at}.predicate`, e.predicate, g.predicate);
    same(`${at}.expires_at`, e.expiresAt, g.expiresAt);
    same(`${at}.ttl_ms`, e.ttlMs, g.ttlMs);
    if (e.fenceGt !== undefined) {
      let fence;
      try {
        fence = a.boundLease(e.fenceGt).fence;
      } catch (err) {
        fail(`${at}.fence_gt: ${err.message}`);
      }
      if (g.fence <= fence) fail(`${at}.fence_gt: expected a fence greater than ${e.fenceGt}'s ${fence}, got ${g.fence}`);
    }
    if (e.sameAs !== undefined) {
      let id;
      try {
        id = a.boundLease(e.sameAs).id;
      } catch (err) {
        fail(`${at}.same_as: ${err.message}`);
      }
      if (g.leaseId !== id) fail(`${at}.same_as: expected lease ${a.label('lease', id)}, got ${a.label('lease', g.leaseId)}`);
    }
    if (e.bind !== undefined) {
      try {
        a.bindLease(e.bind, g.leaseId, g.fence);
      } catch (err) {
        fail(`${at}.as: ${err.message}`);
      }
    }
  });
}

function sessionSet(what, expected, got, a) {
  const want = expected.map((x) => a.session(x)).sort((p, q) => p - q);
  if (new Set(want).size !== want.length) fail(`${what}: the expected set ${JSON.stringify(expected)} names a session twice`);
  const have = [...got].sort((p, q) => p - q);
  if (!isDeepStrictEqual(want, have)) {
    const showIds = (ids) => ids.map((s) => a.label('session', s)).join(', ');
    fail(`${what}: expected {${showIds(want)}}, got {${showIds(have)}}`);
  }
}

function idSet(what, expected, got, label) {
  const want = [...expected].sort((p, q) => p - q);
  const have = [...got].sort((p, q) => p - q);
  if (!isDeepStrictEqual(want, have)) {
    fail(`${what}: expected {${want.map(label).join(', ')}}, got {${have.map(label).join(', ')}}`);
  }
}

function holderMatches(e, h, a) {
  if (e.session !== undefined && a.session(e.session) !== h.sessionId) return false;
  return (e.predicate === undefined || e.predicate === h.predicate) && (e.resource === undefined || e.resource === h.resource);
}

function holders(what, expected, got, a) {
  const shown = () => got.map((h) => `${a.label('session', h.sessionId)} ${h.predicate} ${h.resource}`).join(', ');
  if (expected.length !== got.length) fail(`${what}: expected ${expected.length} entries, got ${got.length} [${shown()}]`);
  const fits = expected.map((e) => got.map((h) => holderMatches(e, h, a)));
  if (!perfectMatching(fits, got.length)) {
    const want = expected.map((e) => [e.session, e.predicate, e.resource].map((x) => x ?? '*').join(' '));
    fail(`${what}: expected [${want.join(', ')}] (any order, * = any), got [${shown()}]`);
  }
}

function checkVerdict(expect, v, a) {
  if (expect.verdict !== undefined && expect.verdict !== v.verdict) fail(`verdict: expected ${expect.verdict}, got ${describeVerdict(v, a)}`);
  const answer = describeVerdict(v, a);
  const forbid = (present, key) => {
    if (present) fail(`\`${key}\` is expected, but the answer is ${answer}`);
  };
  if (v.verdict === 'GRANTED') {
    forbid(expect.ticket !== undefined, 'ticket');
    forbid(expect.heldBy !== undefined, 'held_by');
    forbid(expect.retryAfterMs !== undefined, 'retry_after_ms');
    if (expect.leases !== undefined) matchLeases('leases', expect.leases, v.leases, a);
  } else if (v.verdict === 'WAIT') {
    forbid(expect.leases !== undefined, 'leases');
    forbid(expect.retryAfterMs !== undefined, 'retry_after_ms');
    if (expect.ticket !== undefined) a.bindTicket(expect.ticket, v.ticket);
  } else {
    forbid(expect.leases !== undefined, 'leases');
    forbid(expect.ticket !== undefined, 'ticket');
    if (expect.retryAfterMs !== undefined) {
      const [lo, hi] = expect.retryAfterMs;
      if (v.retryAfterMs < lo || v.retryAfterMs > hi) fail(`retry_after_ms: expected in [${lo}, ${hi}], got ${v.retryAfterMs}`);
    }
  }
  if (expect.heldBy !== undefined && v.verdict !== 'GRANTED') {
    sessionSet('held_by', expect.heldBy, v.heldBy.map((b) => b.sessionId), a);
  }
}

/** Checks the direct answer of a successful call (the events are checked by checkEvents). */
function checkOutput(expect, request, out, a, priorities) {
  switch (out.kind) {
    case 'session': {
      same('epoch', expect.epoch, out.value.epoch);
      if (expect.priorityLt !== undefined) {
        const other = a.session(expect.priorityLt);
        const theirs = priorities.get(other);
        if (theirs === undefined) fail(`priority_lt: alias ${JSON.stringify(expect.priorityLt)} names no session opened in this vector`);
        if (out.value.priority >= theirs) {
          fail(`priority_lt: the new session's priority ${out.value.priority} is not smaller than ${expect.priorityLt}'s ${theirs}`);
        }
      }
      return;
    }
    case 'verdict':
      return checkVerdict(expect, out.value, a);
    case 'heartbeat': {
      if (expect.results === undefined) return;
      for (const [alias, exp] of expect.results) {
        const id = a.lease(alias);
        if (request !== undefined && !request.includes(id)) fail(`results names ${JSON.stringify(alias)}, which the heartbeat did not ask about`);
        const found = out.value.filter((r) => r.leaseId === id);
        if (found.length === 0) {
          fail(`results: no outcome for ${alias} (got ${out.value.map((r) => `${a.label('lease', r.leaseId)}: ${r.status}`).join(', ')})`);
        }
        for (const r of found) {
          if (exp.status !== undefined && exp.status !== r.status) fail(`results[${alias}]: expected ${JSON.stringify(exp.status)}, got ${JSON.stringify(r.status)}`);
          if (exp.expiresAt !== undefined) {
            if (r.status !== 'OK') fail(`results[${alias}]: expected OK with expires_at ${exp.expiresAt}, got ${r.status}`);
            if (r.expiresAt !== exp.expiresAt) fail(`results[${alias}].expires_at: expected ${exp.expiresAt}, got ${r.expiresAt}`);
          }
        }
      }
      return;
    }
    case 'released':
      return same('released', expect.released, out.value);
    case 'statuses': {
      if (expect.status === undefined) return;
      for (const [alias, exp] of expect.status) {
        const id = a.lease(alias);
        if (request !== undefined && !request.includes(id)) fail(`status names ${JSON.stringify(alias)}, which the reconcile did not ask about`);
        const got = out.value.find((r) => r.leaseId === id);
        if (got === undefined) fail(`status: no answer for ${alias}`);
        same(`status[${alias}]`, exp.status, got.status);
        if (exp.expiresAt !== undefined) {
          if (got.status !== 'ACTIVE') fail(`status[${alias}]: expected ACTIVE with expires_at ${exp.expiresAt}, got ${got.status}`);
          same(`status[${alias}].expires_at`, exp.expiresAt, got.expiresAt);
        }
      }
      return;
    }
    case 'resource': {
      const state = out.value;
      if (expect.holders !== undefined) holders('holders', expect.holders, state.holders, a);
      if (expect.covering !== undefined) holders('covering', expect.covering, state.covering, a);
      if (expect.waiting !== undefined) {
        const got = state.waiting.map((w) => `${a.label('session', w.sessionId)} ${a.label('ticket', w.ticket)}`);
        if (expect.waiting.length !== got.length) fail(`waiting: expected ${expect.waiting.length} entries, got ${got.length} [${got.join(', ')}]`);
        expect.waiting.forEach((e, i) => {
          const w = state.waiting[i];
          if (e.session !== undefined && a.session(e.session) !== w.sessionId) {
            fail(`waiting[${i}].session: expected ${e.session}, got ${got[i]} (queue: [${got.join(', ')}])`);
          }
          if (e.ticket !== undefined && a.ticket(e.ticket) !== w.ticket) {
            fail(`waiting[${i}].ticket: expected ${e.ticket}, got ${got[i]} (queue: [${got.join(', ')}])`);
          }
        });
      }
      return;
    }
    case 'deadline':
      if (expect.deadline !== undefined && expect.deadline !== out.value) fail(`deadline: expected ${JSON.stringify(expect.deadline)}, got ${JSON.stringify(out.value)}`);
      return;
    default:
      return;
  }
}

function checkEvent(e, g, a) {
  same('event', e.event, g.event);
  const absent = (key) => fail(`\`${key}\` is expected, but a ${g.event} event has none`);
  if (e.session !== undefined && a.session(e.session) !== g.session) fail(`session: expected ${e.session}, got ${a.label('session', g.session)}`);
  if (e.ticket !== undefined) {
    if (g.ticket === undefined) absent('ticket');
    if (a.ticket(e.ticket) !== g.ticket) fail(`ticket: expected ${e.ticket}, got ${a.label('ticket', g.ticket)}`);
  }
  if (e.lease !== undefined) {
    if (g.event !== 'LEASE_EXPIRED') absent('lease');
    if (a.lease(e.lease) !== g.lease) fail(`lease: expected ${e.lease}, got ${a.label('lease', g.lease)}`);
  }
  if (e.by !== undefined) {
    if (g.by === undefined) absent('by');
    if (a.session(e.by) !== g.by) fail(`by: expected ${e.by}, got ${a.label('session', g.by)}`);
  }
  if (e.leases !== undefined) {
    if (g.event !== 'GRANTED') absent('leases');
    matchLeases('leases', e.leases, g.leases, a);
  }
  if (e.retryAfterMs !== undefined) {
    if (g.retryAfterMs === undefined) absent('retry_after_ms');
    const [lo, hi] = e.retryAfterMs;
    if (g.retryAfterMs < lo || g.retryAfterMs > hi) fail(`retry_after_ms: expected in [${lo}, ${hi}], got ${g.retryAfterMs}`);
  }
  if (e.lostLeases !== undefined) {
    if (g.lostLeases === undefined) absent('lost_leases');
    idSet('lost_leases', e.lostLeases.map((x) => a.lease(x)), g.lostLeases, (i) => a.label('lease', i));
  }
  if (e.lostTickets !== undefined) {
    if (g.lostTickets === undefined) absent('lost_tickets');
    idSet('lost_tickets', e.lostTickets.map((x) => a.ticket(x)), g.lostTickets, (i) => a.label('ticket', i));
  }
}

function checkEvents(expected, got, a) {
  if (expected.length !== got.length) fail(`events: expected ${expected.length}, got ${got.length}: ${describeEvents(got, a)}`);
  expected.forEach((e, i) => {
    try {
      checkEvent(e, got[i], a);
    } catch (err) {
      fail(`events[${i}]: ${err.message} (all events: ${describeEvents(got, a)})`);
    }
  });
}

/** The first part of two snapshots that differs. */
function snapshotDiff(before, after) {
  if (isDeepStrictEqual(before, after)) return undefined;
  for (const part of ['now', 'policy', 'nextDeadline', 'sessions', 'leases', 'tickets', 'stats']) {
    if (!isDeepStrictEqual(before[part], after[part])) {
      return `snapshot.${part}: expected ${JSON.stringify(before[part])}, got ${JSON.stringify(after[part])}`;
    }
  }
  return 'snapshots differ';
}

class Runner {
  constructor(config) {
    try {
      this.kernel = new Kernel(config);
    } catch (e) {
      throw new Error(`config rejected by the kernel: ${e.name}: ${e.message}`);
    }
    this.aliases = new Aliases(ALIAS_DIGESTS);
    this.priorities = new Map();
  }

  resolve(action) {
    const a = this.aliases;
    switch (action.do) {
      case 'open':
        return { ...action };
      case 'resume': {
        const d = a.digest(action.digest);
        const t = action.tamper;
        if (t.agentId !== undefined) d.identity.agentId = t.agentId;
        if (t.namespace !== undefined) d.identity.namespace = t.namespace;
        if (t.sessionId !== undefined) d.identity.sessionId = t.sessionId.alias !== undefined ? a.session(t.sessionId.alias) : t.sessionId.number;
        if (t.priorityTimestamp !== undefined) d.identity.priorityTimestamp = t.priorityTimestamp;
        if (t.epoch !== undefined) d.identity.epoch = t.epoch;
        return { do: 'resume', digest: d };
      }
      case 'acquire': {
        const options = {};
        if (action.ttlMs !== undefined) options.ttlMs = action.ttlMs;
        if (action.wait !== undefined) options.wait = action.wait;
        if (action.waitTimeoutMs !== undefined) options.waitTimeoutMs = action.waitTimeoutMs;
        return { do: 'acquire', session: a.session(action.session), intents: action.intents, options };
      }
      case 'heartbeat':
        return { do: 'heartbeat', session: a.session(action.session), leases: action.leases === 'all' ? 'all' : action.leases.map((l) => a.lease(l)) };
      case 'release':
        return { do: 'release', session: a.session(action.session), lease: a.lease(action.lease) };
      case 'reconcile':
        return { do: 'reconcile', session: a.session(action.session), leases: action.leases.map((l) => a.lease(l)) };
      case 'cancel_wait':
        return { do: 'cancel_wait', session: a.session(action.session), ticket: a.ticket(action.ticket) };
      case 'advance':
      case 'next_deadline':
      case 'resource_state':
        return { ...action };
      default:
        return { do: action.do, session: a.session(action.session) };
    }
  }

  /** Exactly one kernel call; returns the answer tagged with its kind. */
  call(c, now) {
    const k = this.kernel;
    switch (c.do) {
      case 'open':
        return { kind: 'session', value: k.openSession(c.agent, c.namespace, now) };
      case 'close':
        k.closeSession(c.session, now);
        return { kind: 'nothing' };
      case 'suspend':
        k.suspendSession(c.session, now);
        return { kind: 'nothing' };
      case 'digest':
        return { kind: 'digest', value: k.digest(c.session, now) };
      case 'resume':
        return { kind: 'session', value: k.resumeSession(c.digest, now) };
      case 'acquire':
        return { kind: 'verdict', value: k.acquire(c.session, c.intents, c.options, now) };
      case 'heartbeat':
        return { kind: 'heartbeat', value: k.heartbeat(c.session, c.leases, now) };
      case 'release':
        return { kind: 'released', value: k.release(c.session, c.lease, now) };
      case 'release_all':
        return { kind: 'count', value: k.releaseAll(c.session, now) };
      case 'reconcile':
        return { kind: 'statuses', value: k.reconcile(c.session, c.leases, now) };
      case 'cancel_wait':
        k.cancelWait(c.session, c.ticket, now);
        return { kind: 'nothing' };
      case 'advance':
        k.advance(now);
        return { kind: 'nothing' };
      case 'resource_state':
        return { kind: 'resource', value: k.resourceState(c.resource, c.namespace, now) };
      case 'next_deadline':
        return { kind: 'deadline', value: k.nextDeadline() };
      default:
        throw new Error(`unreachable: ${c.do}`);
    }
  }

  /** The kernel's current priority of a session (undefined if it has none), without settling. */
  currentPriority(sessionId, now) {
    if (typeof sessionId !== 'number') return undefined;
    return this.kernel.clone().snapshot(now).sessions.find((s) => s.sessionId === sessionId)?.priority;
  }

  bindOutput(action, out) {
    if (action.do === 'open' && out.kind === 'session') {
      if (action.bind !== undefined) this.aliases.bindSession(action.bind, out.value.sessionId);
      this.priorities.set(out.value.sessionId, out.value.priority);
    } else if (action.do === 'resume' && out.kind === 'session') {
      this.priorities.set(out.value.sessionId, out.value.priority);
    } else if (action.do === 'digest' && action.bind !== undefined && out.kind === 'digest') {
      this.aliases.bindDigest(action.bind, out.value);
    }
  }

  step(step) {
    const { now, action } = step;
    const c = this.resolve(action);
    const expect = step.expect ?? { events: [] };
    let baseline;
    if (expect.error !== undefined) {
      const clone = this.kernel.clone();
      clone.advance(now);
      const events = clone.drainEvents();
      baseline = { events, snapshot: clone.snapshot(now) };
    }
    // A resume never changes the session's priority (SPEC.md §5), which since rev 4 may differ
    // from the one it opened with (a new unit of work): compare with the kernel's own view
    // just before the call, as run.rs does.
    const priorityBefore = c.do === 'resume' ? this.currentPriority(c.digest.identity.sessionId, now) : undefined;
    let out;
    let error;
    try {
      out = this.call(c, now);
    } catch (e) {
      if (!(e instanceof KlockError)) {
        throw new StepError(`the binding threw ${e.name} (${e.code ?? 'no code'}): ${e.message}`);
      }
      error = e;
    }
    const events = this.kernel.drainEvents();
    const a = this.aliases;
    if (priorityBefore !== undefined && error === undefined && out.value.priority !== priorityBefore) {
      fail(`resume changed the session's priority from ${priorityBefore} to ${out.value.priority}`);
    }
    if (expect.error === undefined && error === undefined) {
      this.bindOutput(action, out);
      checkOutput(expect, requestOf(c), out, a, this.priorities);
    } else if (expect.error === undefined) {
      fail(`expected success, got error ${error.name}: ${error.message}${events.length ? ` (events: ${describeEvents(events, a)})` : ''}`);
    } else if (error === undefined) {
      fail(`expected error ${expect.error}, got success: ${describeOutput(out, a)}`);
    } else {
      if (error.name !== expect.error) fail(`error: expected ${expect.error}, got ${error.name}: ${error.message}`);
      if (!isDeepStrictEqual(baseline.events, events)) {
        fail(`the failed call (${error.name}) emitted ${describeEvents(events, a)} but settling time alone emits ${describeEvents(baseline.events, a)}`);
      }
      const after = this.kernel.snapshot(now);
      const extra = this.kernel.pendingEvents();
      if (extra !== 0) fail(`taking a snapshot after the failed call emitted ${extra} events`);
      const diff = snapshotDiff(baseline.snapshot, after);
      if (diff !== undefined) fail(`the failed call (${error.name}) changed the state beyond settling time: ${diff}`);
    }
    checkEvents(expect.events, events, a);
  }
}

/** The lease ids a heartbeat or reconcile asked about (undefined: all, or not such a call). */
function requestOf(c) {
  if (c.do === 'heartbeat') return c.leases === 'all' ? undefined : c.leases;
  if (c.do === 'reconcile') return c.leases;
  return undefined;
}

function runVector(vector) {
  const runner = new Runner(vector.config);
  vector.steps.forEach((step, i) => {
    try {
      runner.step(step);
    } catch (e) {
      throw new Error(`step ${i + 1}: ${step.action.do} @${step.now}: ${e.message}`);
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Files, directories and the report (lib.rs, main.rs).

/** Runs a vector given as text; `file` only labels the result. */
export function runSource(file, text) {
  const result = { file, name: undefined, failure: undefined };
  let value;
  try {
    value = parseJson(text);
  } catch (e) {
    result.failure = e.message;
    return result;
  }
  if (value instanceof Map && typeof value.get('name') === 'string') result.name = value.get('name');
  try {
    runVector(parseVector(value));
  } catch (e) {
    result.failure = e.message;
  }
  return result;
}

/** Runs one vector file. */
export function runFile(path) {
  let text;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    return { file: path, name: undefined, failure: `cannot read the file: ${e.message}` };
  }
  return runSource(path, text);
}

function expand(path) {
  let isDir = false;
  try {
    isDir = statSync(path).isDirectory();
  } catch {
    return [path];
  }
  if (!isDir) return [path];
  const dir = path.endsWith('/') ? path : `${path}/`;
  return readdirSync(path)
    .filter((name) => name.endsWith('.json') && !statSync(dir + name).isDirectory())
    .sort((x, y) => (Buffer.from(x) < Buffer.from(y) ? -1 : Buffer.from(x) > Buffer.from(y) ? 1 : 0))
    .map((name) => dir + name);
}

/** Runs every vector the paths stand for (files, or directories of `*.json`). */
export function runPaths(paths) {
  const results = [];
  for (const p of paths) {
    let files;
    try {
      files = expand(p);
    } catch (e) {
      results.push({ file: p, name: undefined, failure: `cannot list the directory: ${e.message}` });
      continue;
    }
    for (const f of files) results.push(runFile(f));
  }
  return results;
}

/** `N passed, M failed`. */
export function finalLine(results) {
  const passed = results.filter((r) => r.failure === undefined).length;
  return `${passed} passed, ${results.length - passed} failed`;
}

function main(argv) {
  if (argv.length === 0 || argv.some((p) => p === '-h' || p === '--help')) {
    process.stderr.write('usage: node node/conformance.mjs PATH...   (vector files, or directories of *.json vectors)\n');
    return 2;
  }
  const results = runPaths(argv);
  for (const r of results) process.stdout.write(`${line(r)}\n`);
  process.stdout.write(`${finalLine(results)}\n`);
  if (results.length === 0) process.stderr.write(`no vectors found in ${argv.join(' ')}\n`);
  return results.length > 0 && results.every((r) => r.failure === undefined) ? 0 : 1;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  process.exitCode = main(process.argv.slice(2));
}
