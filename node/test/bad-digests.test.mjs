// Every case of tests/bad-digests.json against the Node addon
// (bindings/js-api/test/bad-digests.mjs, shared with the wasm package).
import { createRequire } from 'node:module';
import { badDigestTests } from '../../bindings/js-api/test/bad-digests.mjs';

badDigestTests('node', createRequire(import.meta.url)('../index.js'));
