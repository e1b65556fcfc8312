// Replayer (only in the wasm package): text that is not a history export is refused with an
// Error naming the problem, before any kernel exists. Its exactness against a real server is
// proven in Chromium by dashboard/test/remote.test.mjs and in Rust by server/tests/history.rs.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { Replayer } = require('../pkg-nodejs/klock_wasm.js');

test('a text that is not a history export is refused, naming what is wrong', () => {
  for (const [text, words] of [
    ['not json', /not a klock history export: expected ident at line 1/],
    ['{}', /not a klock history export: missing field `start`/],
    ['{"start": {"state": {}}, "steps": []}', /not a klock history export: missing field `version`/],
  ]) {
    assert.throws(
      () => new Replayer(text),
      (e) => e instanceof Error && words.test(e.message),
      text,
    );
  }
});
