// The package imported as an ES module: every export of client.js is a named export. Node
// finds a CommonJS module's names by reading `module.exports = { ... }`, and an entry it cannot
// read (an expression such as `require(...).x`) silently hides that entry and every later one
// from `import { Died } from 'klock'` (the fleet demo's agents import so).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import * as esm from '../client.js';

const require = createRequire(import.meta.url);

test('every export of client.js is a named ES module export', () => {
  const names = Object.keys(require('../client.js'));
  assert.ok(names.includes('Died') && names.includes('Election'), names.join(', '));
  const missing = names.filter((name) => !(name in esm) || esm[name] !== esm.default[name]);
  assert.deepEqual(missing, [], `not importable by name: ${missing.join(', ')}`);
});
