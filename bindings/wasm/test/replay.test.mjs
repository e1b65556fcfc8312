// The resolved scripts (tests/vectors, checked by the Rust kernel) replayed exactly through
// the wasm nodejs build, and every mutant caught (bindings/js-replay/replay-tests.mjs).
import { fileURLToPath } from 'node:url';
import { replayTests } from '../../js-replay/replay-tests.mjs';

replayTests('wasm nodejs', fileURLToPath(new URL('../pkg-nodejs/klock_wasm.js', import.meta.url)));
