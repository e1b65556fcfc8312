// ESLint's configuration for the project's JavaScript (run by scripts/lint.sh): the recommended
// rules everywhere, with the globals of where each file runs. Generated code (wasm-bindgen
// output, the napi-rs loader node/index.js) is not ours to lint. Patterns start with `**/`
// because this file lives in scripts/lint/ and the files it configures at the root.
import js from '@eslint/js';
import globals from 'globals';

const configs = [
  {
    ignores: ['**/node_modules/**', '**/pkg-web/**', '**/pkg-nodejs/**', '**/target/**', '**/node/index.js'],
  },
  js.configs.recommended,
  {
    files: ['**/*.js', '**/*.mjs'],
    languageOptions: {
      ecmaVersion: 2024,
      sourceType: 'module',
      globals: { ...globals.node },
    },
    rules: {
      // An unused argument documents a callback's signature; unused variables are errors.
      'no-unused-vars': ['error', { args: 'none', caughtErrors: 'none' }],
    },
  },
  {
    files: ['**/node/client.js', '**/bindings/wasm/freed-guard.js'],
    languageOptions: { sourceType: 'commonjs' },
  },
  {
    // Fragments build.sh concatenates into wasm-bindgen's glue: plain scripts in its scope.
    files: ['**/bindings/wasm/freed-guard.js', '**/bindings/wasm/glue-prelude.js'],
    languageOptions: { sourceType: 'script' },
  },
  {
    files: [
      '**/dashboard/app.js',
      '**/dashboard/sim.js',
      '**/dashboard/main.js',
      '**/dashboard/remote.js',
      '**/dashboard/test/dashboard.test.mjs',
      '**/dashboard/test/remote.test.mjs',
      '**/dashboard/bench/replay-fps.mjs',
    ],
    languageOptions: { globals: { ...globals.browser } },
  },
];

export default configs.map((config) => ({ ...config, basePath: '../..' }));
