// Bad digests fail the same way on every host: every case of tests/bad-digests.json (its
// `description` states the format) through the Node addon. A digest is the KLIS-8 object; the
// Node API spells its keys in camelCase, so the host's path from text is JSON.parse, the key
// spelling, then resumeSession. A JSON.parse SyntaxError, or a TypeError / RangeError from the
// addon (thrown before the kernel is touched), is INVALID_ARGUMENT; a kernel error is its
// name. `js_error`, when a case has it, is what a JS host must give instead (JSON.parse cannot
// keep integers above 2^53 - 1, nor tell 1.0 from 1).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
const { Kernel, KlockError, ERROR_CODES } = require('../index.js');
const fixture = JSON.parse(readFileSync(join(here, '..', '..', 'tests', 'bad-digests.json'), 'utf8'));

const spell = (k) => k.replace(/_([a-z])/g, (_, c) => c.toUpperCase());
const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

/** The KLIS-8 digest's snake_case keys in the Node API's camelCase: the digest's own keys and
 * those of its `identity` and `recovery` objects; anything else is passed on as it is. */
function camel(value) {
  if (!isObject(value)) return value;
  return Object.fromEntries(
    Object.entries(value).map(([k, v]) => [
      spell(k),
      isObject(v) ? Object.fromEntries(Object.entries(v).map(([kk, vv]) => [spell(kk), vv])) : v,
    ]),
  );
}

/** The outcome of one case: null (resumed, epoch 1) or an error name, and the message. */
function outcome(text) {
  const k = new Kernel();
  const info = k.openSession('a', 'default', 0);
  assert.deepEqual([info.sessionId, info.priority], [1, 1], 'the setup: session 1 with priority 1');
  let digest;
  try {
    digest = camel(JSON.parse(text));
  } catch (e) {
    assert.ok(e instanceof SyntaxError, `JSON.parse threw ${e}`);
    return { error: 'INVALID_ARGUMENT', message: e.message };
  }
  try {
    const resumed = k.resumeSession(digest, 1);
    assert.deepEqual([resumed.sessionId, resumed.epoch], [1, 1], 'resumed session 1, epoch 1');
    return { error: null, message: '' };
  } catch (e) {
    if (e instanceof KlockError) {
      assert.equal(e.code, ERROR_CODES[e.name], `a kernel error carries its code: ${e}`);
      return { error: e.name, message: e.message };
    }
    assert.ok(e instanceof TypeError || e instanceof RangeError, `unexpected ${e}`);
    return { error: 'INVALID_ARGUMENT', message: e.message };
  }
}

test('every bad digest fails on the Node host as on every host', () => {
  assert.ok(fixture.cases.length > 0, 'zero cases is a failure');
  const differ = [];
  for (const c of fixture.cases) {
    const want = 'js_error' in c ? c.js_error : c.error;
    const got = outcome(c.json);
    if (got.error !== want) differ.push(`${c.name}: expected ${want}, got ${got.error} (${got.message})`);
    else if (got.error !== null) assert.ok(got.message.length > 0, `${c.name}: the error says what is wrong`);
  }
  assert.deepEqual(differ, []);
});
