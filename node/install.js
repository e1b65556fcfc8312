// The package's `install` script: makes sure the native addon for this platform is present
// when the package is installed as a dependency, so a missing addon is found at install time
// with a message saying what to run, never at the first require() with napi's generic
// "npm has a bug related to optional dependencies".
//
// Contract:
// - the addon already loads (a prebuilt `klock.<platform>.node` in the package, or napi's
//   per-platform package `klock-<platform>`): nothing to do, exit 0;
// - `npm install` run inside this folder (developing the package): exit 0, the addon is
//   built by `npm run build` (scripts/test-node.sh and scripts/node-env.sh do it);
// - the package sits in a checkout of the repository (`../bindings/node/Cargo.toml` exists)
//   and `cargo` is on PATH: build the addon with `cargo build --release` and copy it beside
//   index.js under the name index.js loads, then check that it loads;
// - otherwise: exit 1 with a message naming the platform and what to run.
'use strict';

const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');

const here = __dirname;
const manifest = path.join(here, '..', 'bindings', 'node', 'Cargo.toml');

// The suffix napi-rs gives this platform's addon (`klock.linux-x64-gnu.node`), as index.js
// computes it.
function platformSuffix() {
  const { platform, arch } = process;
  if (platform === 'linux') {
    const glibc = process.report?.getReport()?.header?.glibcVersionRuntime;
    return `linux-${arch}-${glibc ? 'gnu' : 'musl'}`;
  }
  if (platform === 'win32') return `win32-${arch}-msvc`;
  return `${platform}-${arch}`;
}

function loads() {
  try {
    require(path.join(here, 'index.js'));
    return true;
  } catch {
    return false;
  }
}

function fail(message) {
  process.stderr.write(`klock: ${message}\n`);
  process.exit(1);
}

const suffix = platformSuffix();
if (loads()) process.exit(0);
// npm names the project being installed; when it is this folder, the package is being developed.
const project = process.env.npm_config_local_prefix;
if (project && path.resolve(project) === here) {
  console.error('klock: development install; build the addon with `npm run build`');
  process.exit(0);
}
const fromSource =
  'install Rust (cargo, rust-version 1.88 or later: https://rustup.rs) and run ' +
  '`npm install ./node` again from the repository root';
if (!fs.existsSync(manifest)) {
  fail(
    `no native addon for ${suffix} in this package (it carries klock.linux-x64-gnu.node), ` +
      `and no Rust sources to build one. Build it from a checkout of the repository: ${fromSource}.`,
  );
}
const cargoFound = spawnSync('cargo', ['--version'], { stdio: 'ignore' });
if (cargoFound.error || cargoFound.status !== 0) {
  fail(`the native addon for ${suffix} is not built, and cargo is not on PATH: ${fromSource}.`);
}

console.error(`klock: building the native addon for ${suffix} (cargo build --release -p klock-node)`);
// JSON messages name the built library wherever the target directory is (CARGO_TARGET_DIR).
const build = spawnSync(
  'cargo',
  ['build', '--release', '--locked', '--lib', '--manifest-path', manifest, '--message-format=json-render-diagnostics'],
  { stdio: ['ignore', 'pipe', 'inherit'], encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 },
);
if (build.status !== 0) fail(`cargo build of the addon failed (exit ${build.status}); see above.`);
let library;
for (const line of build.stdout.split('\n')) {
  if (!line.startsWith('{')) continue;
  const message = JSON.parse(line);
  if (message.reason === 'compiler-artifact' && message.target?.name === 'klock_node') {
    library = message.filenames.find((file) => /\.(so|dylib|dll)$/.test(file));
  }
}
if (!library) fail('cargo built no klock_node library; nothing to install.');
fs.copyFileSync(library, path.join(here, `klock.${suffix}.node`));
if (!loads()) fail(`the addon built at ${library} does not load; run \`node -e "require('klock')"\` to see why.`);
console.error(`klock: installed klock.${suffix}.node`);
