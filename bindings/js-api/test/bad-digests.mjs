// Bad digests fail the same way on every host: every case of tests/bad-digests.json (its
// `description` states the format), run by the Node addon's and the wasm package's tests
// against the one JS API. A digest is the KLIS-8 object; the JS API spells its keys in
// camelCase, so the host's path from text is JSON.parse, the key spelling, then resumeSession.
// A JSON.parse SyntaxError, or a TypeError / RangeError from the binding (thrown before the
// kernel is touched), is INVALID_ARGUMENT; a kernel error is its name. `js_error`, when a case
// has it, is what a JS host must give instead (JSON.parse cannot keep integers above 2^53 - 1,
// nor tell 1.0 from 1).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const fixture = JSON.parse(readFileSync(join(here, '..', '..', '..', 'tests', 'bad-digests.json'), 'utf8'));

const spell = (k) => k.replace(/_([a-z])/g, (_, c) => c.toUpperCase());
const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

/** The KLIS-8 digest's snake_case keys in the JS API's camelCase: the digest's own keys and
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
function outcome({ Kernel, KlockError, ERROR_CODES }, text) {
  const k = new Kernel();
  try {
    const info = k.openSession('a', 'default', 0);
    assert.deepEqual([info.sessionId, info.priority], [1, 1], 'the setup: session 1 with priority 1');
    let digest;
    try {
      digest = camel(JSON.parse(text));
    } catch (e) {
      assert.ok(e instanceof SyntaxError, `JSON.parse threw ${e}`);
      return { error: 'INVALID_ARGUMENT', message: e.message };
    }
    let resumed;
    try {
      resumed = k.resumeSession(digest, 1);
    } catch (e) {
      if (e instanceof KlockError) {
        assert.equal(e.code, ERROR_CODES[e.name], `a kernel error carries its code: ${e}`);
        return { error: e.name, message: e.message };
      }
      assert.ok(e instanceof TypeError || e instanceof RangeError, `unexpected ${e}`);
      assert.ok(
        ['ERR_INVALID_ARG_TYPE', 'ERR_INVALID_ARG_VALUE', 'ERR_OUT_OF_RANGE'].includes(e.code),
        `${e.name} with code ${e.code}`,
      );
      return { error: 'INVALID_ARGUMENT', message: e.message };
    }
    assert.deepEqual([resumed.sessionId, resumed.epoch, resumed.priority], [1, 1, 1], 'resumed session 1, epoch 1');
    return { error: null, message: '' };
  } finally {
    k.free?.(); // wasm memory is freed by hand; the Node addon's by the garbage collector
  }
}

/** The fixture's checks and every case, as tests labelled `label`, against the package `api`. */
export function badDigestTests(label, api) {
  const { ERROR_CODES } = api;
  test(`tests/bad-digests.json is well-formed (${label})`, () => {
    assert.deepEqual(Object.keys(fixture).sort(), ['cases', 'description']);
    assert.ok(fixture.cases.length > 0, 'zero cases is a failure');
    const names = new Set();
    for (const c of fixture.cases) {
      for (const key of Object.keys(c))
        assert.ok(['name', 'json', 'error', 'js_error'].includes(key), `unknown key ${key} in ${c.name}`);
      assert.equal(typeof c.name, 'string');
      assert.ok(!names.has(c.name), `duplicate case name ${c.name}`);
      names.add(c.name);
      assert.equal(typeof c.json, 'string', c.name);
      for (const key of ['error', 'js_error']) {
        if (!(key in c) || c[key] === null) continue;
        assert.ok(
          c[key] === 'INVALID_ARGUMENT' || c[key] in ERROR_CODES,
          `${c.name}: ${key} ${c[key]} is no error name`,
        );
      }
    }
  });

  test(`every bad digest fails on the ${label} host as on every host`, () => {
    const differ = [];
    for (const c of fixture.cases) {
      const want = 'js_error' in c ? c.js_error : c.error;
      const got = outcome(api, c.json);
      if (got.error !== want) differ.push(`${c.name}: expected ${want}, got ${got.error} (${got.message})`);
      else if (got.error !== null) assert.ok(got.message.length > 0, `${c.name}: the error says what is wrong`);
    }
    assert.deepEqual(differ, []);
    console.log(`bad digests: ${fixture.cases.length} cases agree`);
  });
}
