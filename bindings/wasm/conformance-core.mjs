// The conformance runner's engine, shared by the Node CLI (conformance.mjs) and the Chromium
// test (dashboard/test/): strict JSON, the vector format, aliases, the run loop and the
// checks — the same contract and strictness as the Rust runner in conformance/src/. It uses no
// Node API: `setKernelModule(klock)` gives it the wasm module (`{Kernel, errorCodes}`) and
// `runSource(file, text)` runs one vector, answering `{file, name, failure}`; `line(result)`
// is its report line.

import {
  Aliases, EVENT_KEYS, EVENT_KINDS, FILE_KEYS, HEARTBEAT_ERRORS, LEASE_KEYS, POLICIES, STATUSES, VERDICTS,
  actionKeys, line, oneOf, perfectMatching, predicateName, strList,
} from '../js-conformance/vector-format.mjs';

export { line };

let Kernel;
let ERROR_CODES = {}; // name -> code, from the wasm module

/** Gives the runner the wasm module to test: `{Kernel, errorCodes}` of either build. */
export function setKernelModule(klock) {
  Kernel = klock.Kernel;
  ERROR_CODES = klock.errorCodes();
}

// ---------------------------------------------------------------------------------------------
// Strict JSON

/** A JSON number written with a fraction or an exponent (never a valid integer here). */
class JsonFloat {
  constructor(text) { this.text = text; }
  toString() { return this.text; }
}

/** An integer beyond 2^53 - 1: valid JSON, but not exactly representable as a JS number. */
class JsonBigInt {
  constructor(text) { this.text = text; }
  toString() { return this.text; }
}

function parseJson(text) {
  let i = 0;
  const fail = (what) => {
    const upTo = text.slice(0, i);
    const line = upTo.split('\n').length;
    const column = i - upTo.lastIndexOf('\n');
    throw new Error(`invalid JSON: ${what} at line ${line} column ${column}`);
  };
  const ws = () => {
    while (i < text.length && ' \t\n\r'.includes(text[i])) i++;
  };
  const value = () => {
    ws();
    const c = text[i];
    if (c === '{') return object();
    if (c === '[') return array();
    if (c === '"') return string();
    if (c === '-' || (c >= '0' && c <= '9')) return number();
    for (const [word, v] of [['true', true], ['false', false], ['null', null]]) {
      if (text.startsWith(word, i)) { i += word.length; return v; }
    }
    return fail(i >= text.length ? 'unexpected end' : `unexpected character ${JSON.stringify(c)}`);
  };
  const object = () => {
    i++;
    const out = Object.create(null);
    const keys = [];
    ws();
    if (text[i] === '}') { i++; return asObject(out, keys); }
    for (;;) {
      ws();
      if (text[i] !== '"') fail('expected a string key');
      const key = string();
      if (keys.includes(key)) fail(`duplicate key \`${key}\``);
      keys.push(key);
      ws();
      if (text[i] !== ':') fail('expected `:`');
      i++;
      out[key] = value();
      ws();
      if (text[i] === ',') { i++; continue; }
      if (text[i] === '}') { i++; return asObject(out, keys); }
      fail('expected `,` or `}`');
    }
  };
  // A plain object whose keys keep the file's order (integer-like keys included).
  const asObject = (map, keys) => new JsonObject(map, keys);
  const array = () => {
    i++;
    const out = [];
    ws();
    if (text[i] === ']') { i++; return out; }
    for (;;) {
      out.push(value());
      ws();
      if (text[i] === ',') { i++; continue; }
      if (text[i] === ']') { i++; return out; }
      fail('expected `,` or `]`');
    }
  };
  const string = () => {
    i++;
    let out = '';
    for (;;) {
      if (i >= text.length) fail('unterminated string');
      const c = text[i++];
      if (c === '"') return out;
      if (c === '\\') {
        const e = text[i++];
        const simple = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' };
        if (e in simple) out += simple[e];
        else if (e === 'u') {
          const hex = text.slice(i, i + 4);
          if (!/^[0-9a-fA-F]{4}$/.test(hex)) fail('bad \\u escape');
          out += String.fromCharCode(parseInt(hex, 16));
          i += 4;
        } else fail('bad escape');
      } else if (c < ' ') {
        fail('control character in string');
      } else {
        out += c;
      }
    }
  };
  const number = () => {
    const m = /^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/.exec(text.slice(i));
    if (!m) fail('bad number');
    i += m[0].length;
    if (m[2] !== undefined || m[3] !== undefined) return new JsonFloat(m[0]);
    const n = Number(m[0]);
    if (!Number.isSafeInteger(n)) return new JsonBigInt(m[0]);
    return n;
  };
  const v = value();
  ws();
  if (i < text.length) fail('trailing characters');
  return v;
}

/** A JSON object: `map` (prototype-less) with its keys in file order. */
class JsonObject {
  constructor(map, keys) { this.map = map; this.keys = keys; }
}

/** A short rendering of a JSON value for messages. */
function show(v) {
  const plain = (x) => {
    if (x instanceof JsonObject) return Object.fromEntries(x.keys.map((k) => [k, plain(x.map[k])]));
    if (Array.isArray(x)) return x.map(plain);
    if (x instanceof JsonFloat || x instanceof JsonBigInt) return Number(x.text);
    return x;
  };
  let text = v instanceof JsonFloat || v instanceof JsonBigInt ? v.text : JSON.stringify(plain(v));
  if (text === undefined) text = String(v);
  return text.length > 80 ? `${[...text].slice(0, 77).join('')}...` : text;
}

// ---------------------------------------------------------------------------------------------
// Fields: one JSON object whose keys were checked against an allowed list.

class Fields {
  constructor(value, ctx, allowed) {
    if (!(value instanceof JsonObject)) throw new Error(`${ctx} must be an object, got ${show(value)}`);
    for (const key of value.keys) {
      if (!allowed.includes(key)) {
        const list = allowed.length === 0 ? 'none' : allowed.join(', ');
        throw new Error(`${ctx}: unknown key \`${key}\` (allowed here: ${list})`);
      }
    }
    this.value = value;
    this.ctx = ctx;
  }

  has(key) { return this.value.keys.includes(key); }
  get(key) { return this.has(key) ? this.value.map[key] : undefined; }
  keys() { return this.value.keys; }
  wrong(key, wanted, got) { return new Error(`${this.ctx}: \`${key}\` must be ${wanted}, got ${show(got)}`); }

  required(key) {
    if (!this.has(key)) throw new Error(`${this.ctx}: missing required key \`${key}\``);
    return this.get(key);
  }

  u64(key) {
    if (!this.has(key)) return undefined;
    const v = this.get(key);
    if (v instanceof JsonBigInt) {
      throw new Error(`${this.ctx}: \`${key}\` is ${v.text}, above 2^53 - 1: the wasm API takes exact JS numbers only`);
    }
    if (!isU64(v)) throw this.wrong(key, 'a non-negative integer', v);
    return v;
  }

  reqU64(key) { this.required(key); return this.u64(key); }

  str(key) {
    if (!this.has(key)) return undefined;
    const v = this.get(key);
    if (typeof v !== 'string') throw this.wrong(key, 'a string', v);
    return v;
  }

  reqStr(key) { this.required(key); return this.str(key); }

  bool(key) {
    if (!this.has(key)) return undefined;
    const v = this.get(key);
    if (typeof v !== 'boolean') throw this.wrong(key, 'true or false', v);
    return v;
  }

  strList(key) {
    if (!this.has(key)) return undefined;
    const v = this.get(key);
    const list = strList(v);
    if (list === undefined) throw this.wrong(key, 'a list of strings', v);
    return list;
  }

  range(key) {
    if (!this.has(key)) return undefined;
    const v = this.get(key);
    if (Array.isArray(v) && v.length === 2 && isU64(v[0]) && isU64(v[1]) && v[0] <= v[1]) return [v[0], v[1]];
    throw this.wrong(key, '[lo, hi] with integers lo <= hi', v);
  }

  u64OrNull(key) {
    if (!this.has(key)) return undefined;
    const v = this.get(key);
    if (v === null) return null;
    if (!isU64(v)) throw this.wrong(key, 'a non-negative integer or null', v);
    return v;
  }

  array(key) {
    if (!this.has(key)) return undefined;
    const v = this.get(key);
    if (!Array.isArray(v)) throw this.wrong(key, 'a list', v);
    return v;
  }

  object(key) {
    if (!this.has(key)) return undefined;
    const v = this.get(key);
    if (!(v instanceof JsonObject)) throw this.wrong(key, 'an object', v);
    return v;
  }
}

function isU64(v) {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0;
}

// ---------------------------------------------------------------------------------------------
// The vector format (mirrors conformance/src/vector.rs)

const CONFIG_KEYS = [
  'policy', 'seed', 'default_ttl_ms', 'max_ttl_ms', 'default_wait_timeout_ms', 'backoff_base_ms',
  'backoff_cap_ms', 'grace_ms', 'session_idle_ms', 'max_leases_per_session', 'max_lease_lifetime_ms',
];
function nameOf(value) {
  if (value instanceof JsonObject && typeof value.map.name === 'string' && value.keys.includes('name')) return value.map.name;
  return undefined;
}

function parseVector(value) {
  const file = new Fields(value, 'file', FILE_KEYS);
  const name = file.reqStr('name');
  file.str('spec');
  const config = file.has('config') ? parseConfig(file.get('config')) : {};
  const steps = file.array('steps');
  if (steps === undefined) throw new Error('file: missing required key `steps`');
  if (steps.length === 0) throw new Error('file: `steps` is empty');
  return {
    name,
    config,
    steps: steps.map((s, i) => {
      try {
        return parseStep(s);
      } catch (e) {
        throw new Error(`step ${i + 1}: ${e.message}`);
      }
    }),
  };
}

function parseConfig(value) {
  const f = new Fields(value, 'config', CONFIG_KEYS);
  const config = {};
  const policy = f.str('policy');
  if (policy !== undefined) {
    if (!POLICIES.includes(policy)) {
      throw new Error(`config: \`policy\`: unknown policy ${JSON.stringify(policy)}: expected wait_die, wound_wait or lanes`);
    }
    config.policy = policy;
  }
  for (const key of CONFIG_KEYS.slice(1)) {
    const v = f.u64(key);
    if (v !== undefined) config[key] = v;
  }
  return config;
}

function parseStep(value) {
  const action = value instanceof JsonObject && value.keys.includes('do') ? value.map.do : undefined;
  if (action === undefined) throw new Error('step: missing required key `do`');
  if (typeof action !== 'string') throw new Error(`step: \`do\` must be a string, got ${show(action)}`);
  const [fields, expectKeys] = actionKeys(action);
  const f = new Fields(value, `${action} step`, ['now', 'do', 'expect', ...fields]);
  const now = f.reqU64('now');
  const a = { do: action };
  switch (action) {
    case 'open':
      a.agent = f.reqStr('agent');
      a.namespace = f.str('namespace') ?? 'default';
      a.bind = f.str('as');
      break;
    case 'close':
    case 'suspend':
    case 'release_all':
      a.session = f.reqStr('session');
      break;
    case 'digest':
      a.session = f.reqStr('session');
      a.bind = f.str('as');
      break;
    case 'resume':
      a.digest = f.reqStr('digest');
      a.tamper = f.has('tamper') ? parseTamper(f.get('tamper')) : {};
      break;
    case 'acquire':
      f.required('intents');
      a.session = f.reqStr('session');
      a.intents = f.strList('intents');
      a.ttl_ms = f.u64('ttl_ms');
      a.wait = f.bool('wait');
      a.wait_timeout_ms = f.u64('wait_timeout_ms');
      break;
    case 'heartbeat': {
      const leases = f.required('leases');
      if (leases === 'all') a.leases = 'all';
      else {
        a.leases = strList(leases);
        if (a.leases === undefined) throw new Error(`${f.ctx}: \`leases\` must be "all" or a list of aliases`);
      }
      a.session = f.reqStr('session');
      break;
    }
    case 'release':
      a.session = f.reqStr('session');
      a.lease = f.reqStr('lease');
      break;
    case 'reconcile':
      f.required('leases');
      a.session = f.reqStr('session');
      a.leases = f.strList('leases');
      break;
    case 'cancel_wait':
      a.session = f.reqStr('session');
      a.ticket = f.reqStr('ticket');
      break;
    case 'resource_state':
      a.resource = f.reqStr('resource');
      a.namespace = f.str('namespace') ?? 'default';
      break;
    default:
      break; // advance, next_deadline
  }
  const expect = f.has('expect') ? parseExpect(f.get('expect'), action, expectKeys) : undefined;
  return { now, action: a, expect };
}

function parseTamper(value) {
  const f = new Fields(value, 'tamper', ['agent_id', 'namespace', 'session_id', 'priority_timestamp', 'epoch']);
  const t = {
    agent_id: f.str('agent_id'),
    namespace: f.str('namespace'),
    priority_timestamp: f.u64('priority_timestamp'),
    epoch: f.u64('epoch'),
  };
  if (f.has('session_id')) {
    const v = f.get('session_id');
    if (typeof v === 'string') t.session_id = { alias: v };
    else if (isU64(v)) t.session_id = { number: v };
    else if (v instanceof JsonBigInt) {
      throw new Error(`tamper: \`session_id\` is ${v.text}, above 2^53 - 1: the wasm API takes exact JS numbers only`);
    } else throw new Error(`tamper: \`session_id\` must be a session alias or a number, got ${show(v)}`);
  }
  return t;
}

function errorName(ctx, name) {
  if (!Object.hasOwn(ERROR_CODES, name)) {
    throw new Error(`${ctx}: unknown error name ${JSON.stringify(name)} (known: ${Object.keys(ERROR_CODES).sort((a, b) => ERROR_CODES[a] - ERROR_CODES[b]).join(', ')})`);
  }
  return name;
}

function parseExpect(value, action, specific) {
  const f = new Fields(value, `expect of ${action}`, ['error', 'events', ...specific]);
  const ctx = f.ctx;
  const e = { events: [] };
  const err = f.str('error');
  if (err !== undefined) {
    e.error = errorName(ctx, err);
    const other = f.keys().find((k) => k !== 'error' && k !== 'events');
    if (other !== undefined) {
      throw new Error(`${ctx}: \`error\` cannot be combined with \`${other}\` (a failed call returns nothing else)`);
    }
  }
  const verdict = f.str('verdict');
  if (verdict !== undefined) e.verdict = oneOf(ctx, 'verdict', verdict, VERDICTS);
  const leases = f.array('leases');
  if (leases !== undefined) e.leases = parseLeases(leases, `${ctx}: leases`);
  e.ticket = f.str('ticket');
  e.held_by = f.strList('held_by');
  e.retry_after_ms = f.range('retry_after_ms');
  const results = f.object('results');
  if (results !== undefined) {
    e.results = results.keys.map((alias) => {
      const v = results.map[alias];
      const c = `${ctx}: results[${JSON.stringify(alias)}]`;
      if (typeof v === 'string') return [alias, { status: outcomeStatus(c, v) }];
      const o = new Fields(v, c, ['status', 'expires_at']);
      const s = o.str('status');
      const status = s === undefined ? undefined : outcomeStatus(c, s);
      const expires_at = o.u64('expires_at');
      if (expires_at !== undefined && status !== undefined && status !== 'OK') {
        throw new Error(`${c}: \`expires_at\` only goes with status OK`);
      }
      return [alias, { status, expires_at }];
    });
  }
  e.released = f.bool('released');
  const status = f.object('status');
  if (status !== undefined) {
    e.status = status.keys.map((alias) => {
      const v = status.map[alias];
      const c = `${ctx}: status[${JSON.stringify(alias)}]`;
      if (typeof v === 'string') return [alias, { status: oneOf(c, 'status', v, STATUSES) }];
      const o = new Fields(v, c, ['status', 'expires_at']);
      const s = o.str('status');
      const st = s === undefined ? undefined : oneOf(c, 'status', s, STATUSES);
      const expires_at = o.u64('expires_at');
      if (expires_at !== undefined && st !== undefined && st !== 'ACTIVE') {
        throw new Error(`${c}: \`expires_at\` only goes with status ACTIVE`);
      }
      return [alias, { status: st, expires_at }];
    });
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
  e.priority_lt = f.str('priority_lt');
  e.epoch = f.u64('epoch');
  const events = f.array('events');
  if (events !== undefined) e.events = events.map((item, i) => parseEvent(item, `${ctx}: events[${i}]`));
  if (action === 'acquire') checkVerdictFields(ctx, e);
  return e;
}

function checkVerdictFields(ctx, e) {
  if (e.verdict === undefined) return;
  const forbidden = {
    GRANTED: ['ticket', 'held_by', 'retry_after_ms'],
    WAIT: ['leases', 'retry_after_ms'],
    DIE: ['leases', 'ticket'],
  }[e.verdict];
  const wrong = forbidden.find((key) => e[key] !== undefined);
  if (wrong !== undefined) throw new Error(`${ctx}: \`${wrong}\` cannot go with verdict ${e.verdict}`);
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

function parseLeases(items, ctx) {
  return items.map((item, i) => {
    const c = `${ctx}[${i}]`;
    const f = new Fields(item, c, LEASE_KEYS);
    const p = f.str('predicate');
    return {
      bind: f.str('as'),
      resource: f.str('resource'),
      predicate: p === undefined ? undefined : predicateName(c, p),
      expires_at: f.u64('expires_at'),
      ttl_ms: f.u64('ttl_ms'),
      fence_gt: f.str('fence_gt'),
      same_as: f.str('same_as'),
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
  if (value instanceof JsonObject && value.keys.includes('event')) {
    kind = value.map.event;
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
    retry_after_ms: f.range('retry_after_ms'),
    lost_leases: f.strList('lost_leases'),
    lost_tickets: f.strList('lost_tickets'),
  };
}

// ---------------------------------------------------------------------------------------------
// Aliases (mirrors conformance/src/aliases.rs, with 2^53 - 1 as the top of the literal ids)

/** Digests (plain JSON data) are compared as JSON; one names its session as `identity.session_id`. */
const ALIAS_DIGESTS = {
  sameDigest: (a, b) => JSON.stringify(a) === JSON.stringify(b),
  digestSession: (d) => d.identity.session_id,
};

// ---------------------------------------------------------------------------------------------
// Running a vector (mirrors conformance/src/run.rs)

function kernelConfig(config) {
  return { ...config };
}

function drain(kernel) {
  return kernel.drainEvents();
}

/** The error name of a thrown kernel error, or rethrow anything else (a binding failure). */
function kernelErrorName(e) {
  if (e instanceof Error && typeof e.code === 'number' && ERROR_CODES[e.name] === e.code) return e.name;
  if (e instanceof WebAssembly.RuntimeError) {
    throw new Error(`the kernel panicked (SPEC.md §11: bad input never panics): ${e.message}`);
  }
  throw new Error(`the wasm binding threw something that is not a kernel error: ${e instanceof Error ? `${e.name}: ${e.message}` : String(e)}`);
}

function runVector(vector) {
  let kernel;
  try {
    kernel = new Kernel(kernelConfig(vector.config));
  } catch (e) {
    throw new Error(`config rejected by the kernel: ${e.name}: ${e.message}`);
  }
  const runner = { kernel, aliases: new Aliases(ALIAS_DIGESTS), priorities: new Map() };
  try {
    vector.steps.forEach((step, i) => {
      try {
        runStep(runner, step);
      } catch (e) {
        throw new Error(`step ${i + 1}: ${step.action.do} @${step.now}: ${e.message}`);
      }
    });
  } finally {
    kernel.free();
  }
}

function resolveCall(a, action) {
  switch (action.do) {
    case 'open':
      return { do: 'open', agent: action.agent, namespace: action.namespace };
    case 'close':
    case 'suspend':
    case 'digest':
    case 'release_all':
      return { do: action.do, session: a.session(action.session) };
    case 'resume': {
      const d = a.digest(action.digest);
      const t = action.tamper;
      const id = d.identity;
      if (t.agent_id !== undefined) id.agent_id = t.agent_id;
      if (t.namespace !== undefined) id.namespace = t.namespace;
      if (t.session_id !== undefined) id.session_id = t.session_id.alias !== undefined ? a.session(t.session_id.alias) : t.session_id.number;
      if (t.priority_timestamp !== undefined) id.priority_timestamp = t.priority_timestamp;
      if (t.epoch !== undefined) id.epoch = t.epoch;
      return { do: 'resume', digest: d };
    }
    case 'acquire': {
      const options = { wait: action.wait ?? true };
      if (action.ttl_ms !== undefined) options.ttl_ms = action.ttl_ms;
      if (action.wait_timeout_ms !== undefined) options.wait_timeout_ms = action.wait_timeout_ms;
      return { do: 'acquire', session: a.session(action.session), intents: action.intents, options };
    }
    case 'heartbeat':
      return {
        do: 'heartbeat',
        session: a.session(action.session),
        leases: action.leases === 'all' ? null : action.leases.map((l) => a.lease(l)),
      };
    case 'release':
      return { do: 'release', session: a.session(action.session), lease: a.lease(action.lease) };
    case 'reconcile':
      return { do: 'reconcile', session: a.session(action.session), leases: action.leases.map((l) => a.lease(l)) };
    case 'cancel_wait':
      return { do: 'cancel_wait', session: a.session(action.session), ticket: a.ticket(action.ticket) };
    case 'resource_state':
      return { do: 'resource_state', resource: action.resource, namespace: action.namespace };
    default:
      return { do: action.do };
  }
}

/** Makes the one kernel call; returns the answer tagged by its kind. */
function call(k, c, now) {
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
      return { kind: 'verdict', value: k.acquire(c.session, c.intents, now, c.options) };
    case 'heartbeat':
      return { kind: 'heartbeat', value: k.heartbeat(c.session, c.leases, now) };
    case 'release':
      return { kind: 'released', value: k.release(c.session, c.lease, now) };
    case 'release_all':
      return { kind: 'released_count', value: k.releaseAll(c.session, now) };
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
      throw new Error(`internal: unknown call ${c.do}`);
  }
}

function runStep(runner, step) {
  const { now } = step;
  const c = resolveCall(runner.aliases, step.action);
  const expect = step.expect ?? { events: [] };
  let baseline;
  if (expect.error !== undefined) {
    const clone = runner.kernel.clone();
    try {
      clone.advance(now);
      baseline = { events: drain(clone), snapshot: clone.snapshot(now) };
    } finally {
      clone.free();
    }
  }
  // A resume never changes the session's priority (SPEC.md §5), which since rev 4 may differ
  // from the one it opened with: compare with the kernel's own view just before.
  const priorityBefore = c.do === 'resume' ? currentPriority(runner.kernel, c.digest.identity.session_id, now) : undefined;
  let output;
  let error;
  try {
    output = call(runner.kernel, c, now);
  } catch (e) {
    error = { name: kernelErrorName(e), message: e.message };
  }
  const events = drain(runner.kernel);
  if (priorityBefore !== undefined && error === undefined && output.value.priority !== priorityBefore) {
    throw new Error(`resume changed the session's priority from ${priorityBefore} to ${output.value.priority}`);
  }
  if (expect.error === undefined && error === undefined) {
    bindOutput(runner, step.action, output);
    checkOutput(expect, c, output, runner.aliases, runner.priorities);
  } else if (expect.error === undefined) {
    throw new Error(`expected success, got error ${error.name}: ${error.message}${eventsNote(events, runner.aliases)}`);
  } else if (error === undefined) {
    throw new Error(`expected error ${expect.error}, got success: ${describeOutput(output, runner.aliases)}`);
  } else {
    if (error.name !== expect.error) throw new Error(`error: expected ${expect.error}, got ${error.name}: ${error.message}`);
    checkUnchanged(runner, now, baseline, events, error);
  }
  checkEvents(expect.events, events, runner.aliases);
}

/** The session's priority as the kernel sees it at `now`, read from a clone so the real kernel
 * settles nothing outside the step; `undefined` when the session is not open. */
function currentPriority(kernel, session, now) {
  const clone = kernel.clone();
  try {
    return clone.snapshot(now).sessions.find((s) => s.session_id === session)?.priority;
  } finally {
    clone.free();
  }
}

function checkUnchanged(runner, now, baseline, events, error) {
  if (JSON.stringify(baseline.events) !== JSON.stringify(events)) {
    throw new Error(
      `the failed call (${error.name}) emitted ${describeEvents(events, runner.aliases)} but settling time alone emits ` +
        `${describeEvents(baseline.events, runner.aliases)}`,
    );
  }
  const after = runner.kernel.snapshot(now);
  const extra = runner.kernel.pendingEvents();
  if (extra !== 0) throw new Error(`taking a snapshot after the failed call emitted ${extra} events`);
  for (const part of ['now', 'policy', 'next_deadline', 'sessions', 'leases', 'tickets', 'stats']) {
    const b = JSON.stringify(baseline.snapshot[part]);
    const a = JSON.stringify(after[part]);
    if (a !== b) throw new Error(`the failed call (${error.name}) changed the state beyond settling time: snapshot.${part}: expected ${b}, got ${a}`);
  }
  if (JSON.stringify(baseline.snapshot) !== JSON.stringify(after)) {
    throw new Error(`the failed call (${error.name}) changed the state beyond settling time: snapshots differ`);
  }
}

function bindOutput(runner, action, output) {
  if (action.do === 'open' && output.kind === 'session') {
    const info = output.value;
    if (action.bind !== undefined) runner.aliases.bindSession(action.bind, info.session_id);
    runner.priorities.set(info.session_id, info.priority);
  } else if (action.do === 'resume' && output.kind === 'session') {
    const info = output.value;
    runner.priorities.set(info.session_id, info.priority);
  } else if (action.do === 'digest' && action.bind !== undefined && output.kind === 'digest') {
    runner.aliases.bindDigest(action.bind, output.value);
  }
}

// ---------------------------------------------------------------------------------------------
// Checks (mirrors conformance/src/check.rs)

function same(what, expected, got) {
  if (expected !== undefined && expected !== got) throw new Error(`${what}: expected ${fmt(expected)}, got ${fmt(got)}`);
}

function fmt(v) {
  return typeof v === 'string' ? JSON.stringify(v) : String(v);
}

function forbid(present, key, answer) {
  if (present) throw new Error(`\`${key}\` is expected, but the answer is ${answer}`);
}

function checkOutput(expect, c, output, aliases, priorities) {
  const request = c.do === 'heartbeat' ? c.leases : c.do === 'reconcile' ? c.leases : null;
  const v = output.value;
  switch (output.kind) {
    case 'session': {
      same('epoch', expect.epoch, v.epoch);
      if (expect.priority_lt !== undefined) {
        const alias = expect.priority_lt;
        const other = aliases.session(alias);
        const theirs = priorities.get(other);
        if (theirs === undefined) {
          throw new Error(`priority_lt: alias ${JSON.stringify(alias)} names no session opened in this vector`);
        }
        if (v.priority >= theirs) {
          throw new Error(`priority_lt: the new session's priority ${v.priority} is not smaller than ${alias}'s ${theirs}`);
        }
      }
      return;
    }
    case 'verdict':
      checkVerdict(expect, v, aliases);
      return;
    case 'heartbeat': {
      if (expect.results === undefined) return;
      for (const [alias, exp] of expect.results) {
        const id = aliases.lease(alias);
        if (request !== null && !request.includes(id)) {
          throw new Error(`results names ${JSON.stringify(alias)}, which the heartbeat did not ask about`);
        }
        const found = v.filter((r) => r.lease_id === id);
        if (found.length === 0) {
          throw new Error(
            `results: no outcome for ${alias} (got ${v.map((r) => `${aliases.leaseLabel(r.lease_id)}: ${r.status}`).join(', ')})`,
          );
        }
        for (const r of found) {
          if (exp.status !== undefined && exp.status !== r.status) {
            throw new Error(`results[${alias}]: expected ${JSON.stringify(exp.status)}, got ${JSON.stringify(r.status)}`);
          }
          if (exp.expires_at !== undefined) {
            if (r.status !== 'OK') throw new Error(`results[${alias}]: expected OK with expires_at ${exp.expires_at}, got ${r.status}`);
            same(`results[${alias}].expires_at`, exp.expires_at, r.expires_at);
          }
        }
      }
      return;
    }
    case 'released':
      same('released', expect.released, v);
      return;
    case 'statuses': {
      if (expect.status === undefined) return;
      for (const [alias, exp] of expect.status) {
        const id = aliases.lease(alias);
        if (request !== null && !request.includes(id)) {
          throw new Error(`status names ${JSON.stringify(alias)}, which the reconcile did not ask about`);
        }
        const got = v.find((r) => r.lease_id === id);
        if (got === undefined) throw new Error(`status: no answer for ${alias}`);
        same(`status[${alias}]`, exp.status, got.status);
        if (exp.expires_at !== undefined) {
          if (got.status !== 'ACTIVE') throw new Error(`status[${alias}]: expected ACTIVE with expires_at ${exp.expires_at}, got ${got.status}`);
          same(`status[${alias}].expires_at`, exp.expires_at, got.expires_at);
        }
      }
      return;
    }
    case 'resource':
      if (expect.holders !== undefined) checkHolders('holders', expect.holders, v.holders, aliases);
      if (expect.covering !== undefined) checkHolders('covering', expect.covering, v.covering, aliases);
      if (expect.waiting !== undefined) checkWaiting(expect.waiting, v.waiting, aliases);
      return;
    case 'deadline':
      if (expect.deadline !== undefined && expect.deadline !== v) {
        throw new Error(`deadline: expected ${expect.deadline === null ? 'None' : `Some(${expect.deadline})`}, got ${v === null ? 'None' : `Some(${v})`}`);
      }
      return;
    default:
      return; // nothing, digest, released_count
  }
}

function checkWaiting(exp, waiting, aliases) {
  const got = waiting.map((w) => `${aliases.sessionLabel(w.session_id)} ${aliases.ticketLabel(w.ticket)}`);
  if (exp.length !== got.length) throw new Error(`waiting: expected ${exp.length} entries, got ${got.length} [${got.join(', ')}]`);
  exp.forEach((e, i) => {
    const w = waiting[i];
    if (e.session !== undefined && aliases.session(e.session) !== w.session_id) {
      throw new Error(`waiting[${i}].session: expected ${e.session}, got ${got[i]} (queue: [${got.join(', ')}])`);
    }
    if (e.ticket !== undefined && aliases.ticket(e.ticket) !== w.ticket) {
      throw new Error(`waiting[${i}].ticket: expected ${e.ticket}, got ${got[i]} (queue: [${got.join(', ')}])`);
    }
  });
}

function checkVerdict(expect, v, aliases) {
  const answer = describeVerdict(v, aliases);
  if (expect.verdict !== undefined && expect.verdict !== v.verdict) {
    throw new Error(`verdict: expected ${expect.verdict}, got ${answer}`);
  }
  if (v.verdict === 'GRANTED') {
    forbid(expect.ticket !== undefined, 'ticket', answer);
    forbid(expect.held_by !== undefined, 'held_by', answer);
    forbid(expect.retry_after_ms !== undefined, 'retry_after_ms', answer);
    if (expect.leases !== undefined) matchLeases('leases', expect.leases, v.leases, aliases);
  } else if (v.verdict === 'WAIT') {
    forbid(expect.leases !== undefined, 'leases', answer);
    forbid(expect.retry_after_ms !== undefined, 'retry_after_ms', answer);
    if (expect.ticket !== undefined) aliases.bindTicket(expect.ticket, v.ticket);
  } else if (v.verdict === 'DIE') {
    forbid(expect.leases !== undefined, 'leases', answer);
    forbid(expect.ticket !== undefined, 'ticket', answer);
    if (expect.retry_after_ms !== undefined) {
      const [lo, hi] = expect.retry_after_ms;
      if (!(v.retry_after_ms >= lo && v.retry_after_ms <= hi)) {
        throw new Error(`retry_after_ms: expected in [${lo}, ${hi}], got ${v.retry_after_ms}`);
      }
    }
  } else {
    throw new Error(`the binding answered an unknown verdict ${JSON.stringify(v.verdict)}`);
  }
  if (expect.held_by !== undefined && v.held_by !== undefined) {
    sessionSet('held_by', expect.held_by, v.held_by.map((b) => b.session_id), aliases);
  }
}

function sessionSet(what, expected, got, aliases) {
  const want = expected.map((a) => aliases.session(a)).sort((x, y) => x - y);
  if (new Set(want).size !== want.length) throw new Error(`${what}: the expected set ${JSON.stringify(expected)} names a session twice`);
  const have = [...got].sort((x, y) => x - y);
  if (JSON.stringify(want) !== JSON.stringify(have)) {
    const showIds = (ids) => ids.map((s) => aliases.sessionLabel(s)).join(', ');
    throw new Error(`${what}: expected {${showIds(want)}}, got {${showIds(have)}}`);
  }
}

function idSet(what, expected, got, label) {
  const want = [...expected].sort((x, y) => x - y);
  const have = [...got].sort((x, y) => x - y);
  if (JSON.stringify(want) !== JSON.stringify(have)) {
    const showIds = (ids) => ids.map(label).join(', ');
    throw new Error(`${what}: expected {${showIds(want)}}, got {${showIds(have)}}`);
  }
}

function matchLeases(what, expected, got, aliases) {
  if (expected.length !== got.length) {
    throw new Error(`${what}: expected ${expected.length} leases, got ${got.length}: ${describeLeases(got, aliases)}`);
  }
  expected.forEach((e, i) => {
    const g = got[i];
    const at = `${what}[${i}]`;
    same(`${at}.resource`, e.resource, g.resource);
    same(`${at}.predicate`, e.predicate, g.predicate);
    same(`${at}.expires_at`, e.expires_at, g.expires_at);
    same(`${at}.ttl_ms`, e.ttl_ms, g.ttl_ms);
    if (e.fence_gt !== undefined) {
      let bound;
      try {
        bound = aliases.boundLease(e.fence_gt);
      } catch (err) {
        throw new Error(`${at}.fence_gt: ${err.message}`);
      }
      if (g.fence <= bound.fence) {
        throw new Error(`${at}.fence_gt: expected a fence greater than ${e.fence_gt}'s ${bound.fence}, got ${g.fence}`);
      }
    }
    if (e.same_as !== undefined) {
      let bound;
      try {
        bound = aliases.boundLease(e.same_as);
      } catch (err) {
        throw new Error(`${at}.same_as: ${err.message}`);
      }
      if (g.lease_id !== bound.id) {
        throw new Error(`${at}.same_as: expected lease ${aliases.leaseLabel(bound.id)}, got ${aliases.leaseLabel(g.lease_id)}`);
      }
    }
    if (e.bind !== undefined) {
      try {
        aliases.bindLease(e.bind, g.lease_id, g.fence);
      } catch (err) {
        throw new Error(`${at}.as: ${err.message}`);
      }
    }
  });
}

function holderMatches(e, h, aliases) {
  if (e.session !== undefined && aliases.session(e.session) !== h.session_id) return false;
  if (e.predicate !== undefined && e.predicate !== h.predicate) return false;
  if (e.resource !== undefined && e.resource !== h.resource) return false;
  return true;
}

function checkHolders(what, expected, got, aliases) {
  const shown = () => got.map((h) => `${aliases.sessionLabel(h.session_id)} ${h.predicate} ${h.resource}`).join(', ');
  if (expected.length !== got.length) {
    throw new Error(`${what}: expected ${expected.length} entries, got ${got.length} [${shown()}]`);
  }
  const fits = expected.map((e) => got.map((h) => holderMatches(e, h, aliases)));
  if (!perfectMatching(fits, got.length)) {
    const want = expected.map((e) => [e.session, e.predicate, e.resource].map((f) => f ?? '*').join(' '));
    throw new Error(`${what}: expected [${want.join(', ')}] (any order, * = any), got [${shown()}]`);
  }
}

function checkEvents(expected, got, aliases) {
  if (expected.length !== got.length) {
    throw new Error(`events: expected ${expected.length}, got ${got.length}: ${describeEvents(got, aliases)}`);
  }
  expected.forEach((e, i) => {
    try {
      checkEvent(e, got[i], aliases);
    } catch (err) {
      throw new Error(`events[${i}]: ${err.message} (all events: ${describeEvents(got, aliases)})`);
    }
  });
}

function checkEvent(e, g, aliases) {
  same('event', e.event, g.event);
  const absent = (key) => new Error(`\`${key}\` is expected, but a ${g.event} event has none`);
  const field = (key) => (Object.hasOwn(g, key) && key !== 'event' ? g[key] : undefined);
  if (e.session !== undefined && aliases.session(e.session) !== g.session) {
    throw new Error(`session: expected ${e.session}, got ${aliases.sessionLabel(g.session)}`);
  }
  if (e.ticket !== undefined) {
    const got = field('ticket');
    if (got === undefined) throw absent('ticket');
    if (aliases.ticket(e.ticket) !== got) throw new Error(`ticket: expected ${e.ticket}, got ${aliases.ticketLabel(got)}`);
  }
  if (e.lease !== undefined) {
    const got = field('lease');
    if (got === undefined) throw absent('lease');
    if (aliases.lease(e.lease) !== got) throw new Error(`lease: expected ${e.lease}, got ${aliases.leaseLabel(got)}`);
  }
  if (e.by !== undefined) {
    const got = field('by');
    if (got === undefined) throw absent('by');
    if (aliases.session(e.by) !== got) throw new Error(`by: expected ${e.by}, got ${aliases.sessionLabel(got)}`);
  }
  if (e.leases !== undefined) {
    const got = field('leases');
    if (got === undefined) throw absent('leases');
    matchLeases('leases', e.leases, got, aliases);
  }
  if (e.retry_after_ms !== undefined) {
    const got = field('retry_after_ms');
    if (got === undefined) throw absent('retry_after_ms');
    const [lo, hi] = e.retry_after_ms;
    if (!(got >= lo && got <= hi)) throw new Error(`retry_after_ms: expected in [${lo}, ${hi}], got ${got}`);
  }
  if (e.lost_leases !== undefined) {
    const got = field('lost_leases');
    if (got === undefined) throw absent('lost_leases');
    idSet('lost_leases', e.lost_leases.map((a) => aliases.lease(a)), got, (i) => aliases.leaseLabel(i));
  }
  if (e.lost_tickets !== undefined) {
    const got = field('lost_tickets');
    if (got === undefined) throw absent('lost_tickets');
    idSet('lost_tickets', e.lost_tickets.map((a) => aliases.ticket(a)), got, (i) => aliases.ticketLabel(i));
  }
}

// ---------------------------------------------------------------------------------------------
// Descriptions for messages

function describeLease(l, aliases) {
  return `${aliases.leaseLabel(l.lease_id)} ${l.predicate} ${l.resource} fence=${l.fence} exp=${l.expires_at} ttl=${l.ttl_ms}`;
}

function describeLeases(leases, aliases) {
  return `[${leases.map((l) => describeLease(l, aliases)).join('; ')}]`;
}

function describeVerdict(v, aliases) {
  const blockers = (held) => held.map((b) => aliases.sessionLabel(b.session_id)).join(', ');
  if (v.verdict === 'GRANTED') return `GRANTED ${describeLeases(v.leases, aliases)}`;
  if (v.verdict === 'WAIT') return `WAIT ticket=${aliases.ticketLabel(v.ticket)} held_by={${blockers(v.held_by)}}`;
  return `DIE retry_after_ms=${v.retry_after_ms} held_by={${blockers(v.held_by)}}`;
}

function describeOutput(output, aliases) {
  if (output.kind === 'verdict') return describeVerdict(output.value, aliases);
  if (output.kind === 'session') return `session ${aliases.sessionLabel(output.value.session_id)} epoch ${output.value.epoch}`;
  return `${output.kind} ${JSON.stringify(output.value ?? null)}`;
}

function describeEvent(e, aliases) {
  const s = aliases.sessionLabel(e.session);
  switch (e.event) {
    case 'GRANTED':
      return `GRANTED{ticket=${aliases.ticketLabel(e.ticket)} session=${s} leases=${describeLeases(e.leases, aliases)}}`;
    case 'WAIT_TIMEOUT':
      return `WAIT_TIMEOUT{ticket=${aliases.ticketLabel(e.ticket)} session=${s}}`;
    case 'DIED':
      return `DIED{ticket=${aliases.ticketLabel(e.ticket)} session=${s} retry_after_ms=${e.retry_after_ms}}`;
    case 'LEASE_EXPIRED':
      return `LEASE_EXPIRED{lease=${aliases.leaseLabel(e.lease)} session=${s}}`;
    case 'WOUNDED':
      return (
        `WOUNDED{session=${s} by=${aliases.sessionLabel(e.by)} lost_leases=[${e.lost_leases.map((l) => aliases.leaseLabel(l)).join(', ')}] ` +
        `lost_tickets=[${e.lost_tickets.map((t) => aliases.ticketLabel(t)).join(', ')}] retry_after_ms=${e.retry_after_ms}}`
      );
    case 'SESSION_CLOSED':
      return `SESSION_CLOSED{session=${s} reason=${e.reason}}`;
    default:
      return JSON.stringify(e);
  }
}

function describeEvents(events, aliases) {
  return `[${events.map((e) => describeEvent(e, aliases)).join(', ')}]`;
}

function eventsNote(events, aliases) {
  return events.length === 0 ? '' : ` (events: ${describeEvents(events, aliases)})`;
}

// ---------------------------------------------------------------------------------------------
// One vector

/** Runs one vector given as text; `file` only labels the result. */
export function runSource(file, text) {
  const result = { file, name: undefined, failure: undefined };
  let value;
  try {
    value = parseJson(text);
  } catch (e) {
    result.failure = e.message;
    return result;
  }
  result.name = nameOf(value);
  try {
    runVector(parseVector(value));
  } catch (e) {
    result.failure = e instanceof Error ? e.message : String(e);
  }
  return result;
}
