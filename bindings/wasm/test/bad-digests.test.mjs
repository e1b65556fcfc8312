// Every case of tests/bad-digests.json against the wasm nodejs build
// (bindings/js-api/test/bad-digests.mjs, shared with the Node addon).
import { createRequire } from 'node:module';
import { badDigestTests } from '../../js-api/test/bad-digests.mjs';

badDigestTests('wasm', createRequire(import.meta.url)('../pkg-nodejs/klock_wasm.js'));
