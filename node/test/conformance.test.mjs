// The resolved scripts (tests/vectors, checked by the Rust kernel) replayed exactly through
// the Node addon, and every mutant caught (bindings/js-replay/replay-tests.mjs).
import { fileURLToPath } from 'node:url';
import { replayTests } from '../../bindings/js-replay/replay-tests.mjs';

replayTests('node', fileURLToPath(new URL('../index.js', import.meta.url)));
