// The conformance vectors through the Node binding, and the runner's strictness (the same
// cases as conformance/tests/strictness.rs: a typo must never turn into a check of nothing).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmdirSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { runPaths, runSource, line, finalLine } from '../conformance.mjs';

const root = fileURLToPath(new URL('../..', import.meta.url));
const vectors = join(root, 'tests/vectors');
const shared = join(root, '../shared/conformance/public');
const runner = fileURLToPath(new URL('../conformance.mjs', import.meta.url));

test('every vector in tests/vectors passes', () => {
  const results = runPaths([vectors]);
  assert.ok(results.length > 0, 'no vectors found');
  const failed = results.filter((r) => r.failure !== undefined).map(line);
  assert.deepEqual(failed, []);
  assert.equal(finalLine(results), `${results.length} passed, 0 failed`);
});

test('the shared example vectors pass', { skip: !existsSync(shared) && 'shared/ is not beside the repository' }, () => {
  const results = runPaths([shared]);
  assert.ok(results.length > 0);
  assert.deepEqual(results.filter((r) => r.failure !== undefined).map(line), []);
});

test('the CLI: output contract and exit codes', () => {
  const ok = spawnSync(process.execPath, [runner, join(vectors, '01-readers-writers-upgrade.json')], { encoding: 'utf8' });
  assert.equal(ok.status, 0, ok.stderr);
  const lines = ok.stdout.trim().split('\n');
  assert.match(lines[0], /^ok .*01-readers-writers-upgrade\.json: /);
  assert.equal(lines.at(-1), '1 passed, 0 failed');
  const usage = spawnSync(process.execPath, [runner], { encoding: 'utf8' });
  assert.equal(usage.status, 2);
  const empty = mkdtempSync(join(tmpdir(), 'klock-empty-'));
  const none = spawnSync(process.execPath, [runner, empty], { encoding: 'utf8' });
  rmdirSync(empty);
  assert.equal(none.status, 1);
  assert.equal(none.stdout.trim(), '0 passed, 0 failed');
  const missing = spawnSync(process.execPath, [runner, '/nonexistent/klock/vector.json'], { encoding: 'utf8' });
  assert.equal(missing.status, 1);
  assert.match(missing.stdout, /^FAIL \/nonexistent\/klock\/vector\.json: \(unnamed\): cannot read/);
  assert.match(missing.stdout, /0 passed, 1 failed/);
});

// ---- strictness ---------------------------------------------------------------------------

const vector = (config, steps) => `{ "name": "t", "config": ${config}, "steps": [ ${steps.join(', ')} ] }`;
const run = (steps) => runSource('test.json', vector('{ "seed": 1 }', steps));
const OPEN_A = '{ "now": 0, "do": "open", "agent": "alice", "as": "A" }';
const OPEN_B = '{ "now": 1, "do": "open", "agent": "bob", "as": "B" }';

function passes(r) {
  assert.equal(r.failure, undefined, `expected a pass, got: ${line(r)}`);
}

function failsWith(r, needle) {
  const text = line(r);
  assert.notEqual(r.failure, undefined, `expected a failure mentioning ${JSON.stringify(needle)}, but it passed`);
  assert.ok(text.includes(needle), `failure does not mention ${JSON.stringify(needle)}: ${text}`);
  assert.ok(text.startsWith('FAIL test.json: '), `bad line shape: ${text}`);
}

test('a correct vector passes and the line is shaped', () => {
  const r = run([
    OPEN_A,
    '{ "now": 10, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/x"], "ttl_ms": 100, "expect": { "verdict": "GRANTED", "leases": [ { "as": "L", "expires_at": 110, "predicate": "MUTATES", "resource": "FILE:/x", "ttl_ms": 100 } ] } }',
    '{ "now": 110, "do": "advance", "expect": { "events": [ { "event": "LEASE_EXPIRED", "lease": "L", "session": "A" } ] } }',
  ]);
  passes(r);
  assert.equal(line(r), 'ok test.json: t');
});

test('unknown keys fail at every level', () => {
  const cases = [
    ['step', ['{ "now": 0, "do": "open", "agent": "a", "as": "A", "namespce": "n" }'], 'namespce'],
    ['expect', ['{ "now": 0, "do": "open", "agent": "a", "as": "A", "expect": { "evnts": [] } }'], 'evnts'],
    ['expect key of another do', ['{ "now": 0, "do": "open", "agent": "a", "expect": { "verdict": "GRANTED" } }'], 'verdict'],
    ['lease', [OPEN_A, '{ "now": 1, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/x"], "expect": { "leases": [ { "expires": 1 } ] } }'], 'expires'],
    ['event', [OPEN_A, '{ "now": 1, "do": "advance", "expect": { "events": [ { "event": "LEASE_EXPIRED", "ticket": "T" } ] } }'], 'ticket'],
    ['event field', [OPEN_A, '{ "now": 1, "do": "advance", "expect": { "events": [ { "sesion": "A" } ] } }'], 'sesion'],
    ['status', [OPEN_A, '{ "now": 1, "do": "reconcile", "session": "A", "leases": ["L"], "expect": { "status": { "L": { "status": "UNKNOWN", "fence": 1 } } } }'], 'fence'],
    ['results', [OPEN_A, '{ "now": 1, "do": "heartbeat", "session": "A", "leases": ["L"], "expect": { "results": { "L": { "stat": "OK" } } } }'], 'stat'],
    ['holders', [OPEN_A, '{ "now": 1, "do": "resource_state", "resource": "FILE:/x", "expect": { "holders": [ { "sesion": "A" } ] } }'], 'sesion'],
    ['waiting', [OPEN_A, '{ "now": 1, "do": "resource_state", "resource": "FILE:/x", "expect": { "waiting": [ { "session": "A", "tiket": "T" } ] } }'], 'tiket'],
    ['covering', [OPEN_A, '{ "now": 1, "do": "resource_state", "resource": "FILE:/x", "expect": { "covering": [ { "predicat": "MUTATES" } ] } }'], 'predicat'],
    ['tamper', [OPEN_A, '{ "now": 1, "do": "digest", "session": "A", "as": "D" }', '{ "now": 2, "do": "resume", "digest": "D", "tamper": { "priority": 1 } }'], 'priority'],
  ];
  for (const [what, steps, needle] of cases) {
    const r = run(steps);
    assert.notEqual(r.failure, undefined, `${what}: an unknown key passed`);
    assert.ok(line(r).includes(`unknown key \`${needle}\``), `${what}: ${line(r)}`);
  }
  const file = runSource('test.json', `{ "name": "t", "x": 1, "steps": [ ${OPEN_A} ] }`);
  assert.ok(line(file).includes('unknown key `x`'), line(file));
  failsWith(runSource('test.json', vector('{ "polcy": "lanes" }', [OPEN_A])), 'unknown key `polcy`');
});

test('wrong types and unknown names fail', () => {
  failsWith(run(['{ "now": "0", "do": "open", "agent": "a" }']), '`now` must be a non-negative integer');
  failsWith(run(['{ "now": 1.5, "do": "open", "agent": "a" }']), '`now` must be a non-negative integer');
  failsWith(run(['{ "now": 1.0, "do": "open", "agent": "a" }']), '`now` must be a non-negative integer');
  failsWith(run(['{ "now": -1, "do": "open", "agent": "a" }']), '`now` must be a non-negative integer');
  failsWith(run(['{ "now": 0, "do": "open", "agent": 7 }']), '`agent` must be a string');
  failsWith(run([OPEN_A, '{ "now": 1, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/x"], "wait": "yes" }']), '`wait` must be true or false');
  failsWith(run([OPEN_A, '{ "now": 1, "do": "acquire", "session": "A", "intents": "MUTATES FILE:/x" }']), '`intents` must be a list of strings');
  failsWith(run([OPEN_A, '{ "now": 1, "do": "lock", "session": "A" }']), 'unknown `do`');
  failsWith(run([OPEN_A, '{ "now": 1, "do": "close", "session": "A", "expect": { "error": "UNKNOWN_SESION" } }']), 'unknown error name');
  failsWith(
    run([OPEN_A, '{ "now": 1, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/x"], "expect": { "verdict": "GRANT" } }']),
    '`verdict` must be one of',
  );
  failsWith(run([OPEN_A, '{ "now": 1, "do": "advance", "expect": { "events": [ { "event": "EXPIRED" } ] } }']), 'unknown event');
  failsWith(
    run([OPEN_A, '{ "now": 1, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/x"], "expect": { "retry_after_ms": [5, 1] } }']),
    'lo <= hi',
  );
  failsWith(runSource('test.json', vector('{ "policy": "fifo" }', [OPEN_A])), 'unknown policy');
  failsWith(runSource('test.json', vector('{ "seed": -1 }', [OPEN_A])), '`seed` must be');
  failsWith(runSource('test.json', '{ "name": "t", "steps": [ { "now": 0, "now": 1, "do": "advance" } ] }'), 'duplicate key `now`');
  failsWith(runSource('test.json', '{ "name": "t", "steps": [] }'), '`steps` is empty');
  failsWith(runSource('test.json', '{ not json'), 'invalid JSON');
  failsWith(runSource('test.json', '{ "name": "t", "steps": [] } x'), 'invalid JSON');
  failsWith(run(['{ "now": 9007199254740992, "do": "advance" }']), 'above 2^53 - 1');
  failsWith(
    run([OPEN_A, '{ "now": 1, "do": "close", "session": "A", "expect": { "error": "UNKNOWN_SESSION", "released": true } }']),
    'unknown key `released`',
  );
  failsWith(
    run([OPEN_A, '{ "now": 1, "do": "release", "session": "A", "lease": "L", "expect": { "error": "UNKNOWN_LEASE", "released": true } }']),
    '`error` cannot be combined with `released`',
  );
});

test('a wrong expectation fails', () => {
  const acquire = (expect) =>
    `{ "now": 10, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/x"], "ttl_ms": 100, "expect": ${expect} }`;
  for (const [expect, needle] of [
    ['{ "verdict": "DIE" }', 'verdict: expected DIE, got GRANTED'],
    ['{ "leases": [ { "expires_at": 111 } ] }', 'expires_at: expected 111, got 110'],
    ['{ "leases": [ { "ttl_ms": 99 } ] }', 'ttl_ms'],
    ['{ "leases": [ { "resource": "FILE:/y" } ] }', 'resource'],
    ['{ "leases": [ { "predicate": "CONSUMES" } ] }', 'predicate'],
    ['{ "leases": [ {}, {} ] }', 'expected 2 leases, got 1'],
    ['{ "ticket": "T" }', '`ticket` is expected'],
    ['{ "held_by": [] }', '`held_by` is expected'],
    ['{ "error": "INVALID_TTL" }', 'expected error INVALID_TTL, got success'],
  ]) {
    failsWith(run([OPEN_A, acquire(expect)]), needle);
  }
  failsWith(run([OPEN_A, '{ "now": 1, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/a/../b"] }']), 'got error INVALID_RESOURCE');
  failsWith(
    run([OPEN_A, '{ "now": 1, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/a/../b"], "expect": { "error": "INVALID_PREDICATE" } }']),
    'error: expected INVALID_PREDICATE, got INVALID_RESOURCE',
  );
  const grant = '{ "now": 2, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/x"] , "expect": { "verdict": "GRANTED" } }';
  const die = (held) =>
    `{ "now": 3, "do": "acquire", "session": "B", "intents": ["MUTATES FILE:/x"], "expect": { "verdict": "DIE", "held_by": ${held} } }`;
  passes(run([OPEN_A, OPEN_B, grant, die('["A"]')]));
  failsWith(run([OPEN_A, OPEN_B, grant, die('["A", "B"]')]), 'held_by');
  failsWith(run([OPEN_A, OPEN_B, grant, die('[]')]), 'held_by');
});

test('an unbound alias is an id the kernel never issued', () => {
  passes(run(['{ "now": 0, "do": "acquire", "session": "ghost", "intents": ["MUTATES FILE:/x"], "expect": { "error": "UNKNOWN_SESSION" } }']));
  passes(run(['{ "now": 0, "do": "close", "session": "ghost", "expect": { "error": "UNKNOWN_SESSION" } }']));
  failsWith(run(['{ "now": 0, "do": "close", "session": "ghost" }']), 'got error UNKNOWN_SESSION');
  passes(
    run([
      OPEN_A,
      '{ "now": 1, "do": "release", "session": "A", "lease": "nope", "expect": { "error": "UNKNOWN_LEASE" } }',
      '{ "now": 2, "do": "reconcile", "session": "A", "leases": ["nope", "other"], "expect": { "status": { "nope": "UNKNOWN", "other": "UNKNOWN" } } }',
      '{ "now": 3, "do": "heartbeat", "session": "A", "leases": ["nope"], "expect": { "results": { "nope": "UNKNOWN_LEASE" } } }',
      '{ "now": 4, "do": "cancel_wait", "session": "A", "ticket": "T9", "expect": { "error": "UNKNOWN_TICKET" } }',
    ]),
  );
  failsWith(
    run([OPEN_A, '{ "now": 3, "do": "heartbeat", "session": "A", "leases": ["nope"], "expect": { "results": { "other": "UNKNOWN_LEASE" } } }']),
    'did not ask about',
  );
});

test('every event must be listed and matched; a failed call may only settle time', () => {
  const grant =
    '{ "now": 10, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/x"], "ttl_ms": 100, "expect": { "leases": [ { "as": "L" } ] } }';
  failsWith(run([OPEN_A, grant, '{ "now": 200, "do": "advance" }']), 'events: expected 0, got 1');
  failsWith(
    run([
      OPEN_A,
      grant,
      '{ "now": 200, "do": "next_deadline", "expect": { "deadline": 110 } }',
      '{ "now": 200, "do": "advance", "expect": {} }',
    ]),
    'LEASE_EXPIRED',
  );
  failsWith(
    run([OPEN_A, grant, '{ "now": 200, "do": "advance", "expect": { "events": [ { "event": "LEASE_EXPIRED" }, { "event": "LEASE_EXPIRED" } ] } }']),
    'events: expected 2, got 1',
  );
  failsWith(
    run([OPEN_A, grant, '{ "now": 200, "do": "advance", "expect": { "events": [ { "event": "WAIT_TIMEOUT" } ] } }']),
    'event: expected "WAIT_TIMEOUT", got "LEASE_EXPIRED"',
  );
  failsWith(
    run([OPEN_A, OPEN_B, grant, '{ "now": 200, "do": "advance", "expect": { "events": [ { "lease": "L", "session": "B" } ] } }']),
    'session: expected B',
  );
  failsWith(
    run([OPEN_A, grant, '{ "now": 200, "do": "advance", "expect": { "events": [ { "ticket": "T" } ] } }']),
    '`ticket` is expected, but a LEASE_EXPIRED event has none',
  );
  passes(
    run([
      OPEN_A,
      grant,
      '{ "now": 200, "do": "release", "session": "A", "lease": "zzz", "expect": { "error": "UNKNOWN_LEASE", "events": [ { "event": "LEASE_EXPIRED", "lease": "L" } ] } }',
    ]),
  );
  failsWith(
    run([OPEN_A, grant, '{ "now": 200, "do": "release", "session": "A", "lease": "zzz", "expect": { "error": "UNKNOWN_LEASE" } }']),
    'events: expected 0, got 1',
  );
});

test('aliases bind once and by kind', () => {
  const grant = (now, path, alias) =>
    `{ "now": ${now}, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:${path}"], "expect": { "leases": [ { "as": "${alias}" } ] } }`;
  failsWith(run([OPEN_A, grant(1, '/x', 'L'), grant(2, '/y', 'L')]), 'already bound');
  passes(run([OPEN_A, grant(1, '/x', 'L'), grant(2, '/x', 'L')]));
  const same = '{ "now": 3, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/x"], "expect": { "leases": [ { "same_as": "L" } ] } }';
  passes(run([OPEN_A, grant(1, '/x', 'L'), same]));
  const fence = '{ "now": 3, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/y"], "expect": { "leases": [ { "fence_gt": "L", "same_as": "L" } ] } }';
  failsWith(run([OPEN_A, grant(1, '/x', 'L'), fence]), 'same_as');
  const other = '{ "now": 3, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/y"], "expect": { "leases": [ { "as": "M" } ] } }';
  const check = '{ "now": 4, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/x"], "expect": { "leases": [ { "fence_gt": "M" } ] } }';
  failsWith(run([OPEN_A, grant(1, '/x', 'L'), other, check]), 'fence_gt');
  failsWith(run([OPEN_A, '{ "now": 1, "do": "release", "session": "A", "lease": "A" }']), 'bound to a session, not a lease');
  failsWith(run([OPEN_A, '{ "now": 1, "do": "resume", "digest": "D" }']), 'never bound');
});

test('WOUNDED: retry_after_ms is checked and shown (SPEC.md rev 4)', () => {
  const runWw = (steps) => runSource('test.json', vector('{ "policy": "wound_wait", "seed": 1, "backoff_base_ms": 100 }', steps));
  const hold = '{ "now": 2, "do": "acquire", "session": "B", "intents": ["MUTATES FILE:/x"], "expect": { "verdict": "GRANTED", "leases": [ { "as": "L" } ] } }';
  const wound = (events) => `{ "now": 3, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/x"], "expect": { "verdict": "GRANTED", "events": ${events} } }`;
  passes(runWw([OPEN_A, OPEN_B, hold, wound('[ { "event": "WOUNDED", "session": "B", "by": "A", "lost_leases": ["L"], "retry_after_ms": [100, 199] } ]')]));
  failsWith(
    runWw([OPEN_A, OPEN_B, hold, wound('[ { "event": "WOUNDED", "retry_after_ms": [0, 99] } ]')]),
    'retry_after_ms: expected in [0, 99], got 1',
  );
  // The event's description carries the kernel's backoff, like the Rust runner's.
  const r = runWw([OPEN_A, OPEN_B, hold, wound('[]')]);
  assert.notEqual(r.failure, undefined);
  assert.match(line(r), /WOUNDED\{session=B\(#\d+\) by=A\(#\d+\) lost_leases=\[L\(#\d+\)\] lost_tickets=\[\] retry_after_ms=1\d\d\}/);
});

test('a resume is compared with the session\'s current priority, which may differ from the one it opened with', () => {
  // Rev 4: a release that ends a unit of work gives the session a fresh (youngest) priority at
  // its next acquire; an earlier digest still resumes, and the resume keeps the current one.
  passes(
    run([
      OPEN_A,
      '{ "now": 1, "do": "digest", "session": "A", "as": "D" }',
      '{ "now": 2, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/x"], "expect": { "leases": [ { "as": "L" } ] } }',
      '{ "now": 3, "do": "release", "session": "A", "lease": "L", "expect": { "released": true } }',
      '{ "now": 4, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/x"], "expect": { "leases": [ { "as": "M" } ] } }',
      '{ "now": 5, "do": "resume", "digest": "D", "expect": { "epoch": 1 } }',
    ]),
  );
});
