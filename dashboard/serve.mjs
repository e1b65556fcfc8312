#!/usr/bin/env node
// A tiny static server for the dashboard: `node dashboard/serve.mjs [--port N] [--host H]`.
// Any other argument (a typo, `--port=N`, a bare number, an option given twice or without its
// value, a port outside 0..65535) is refused with a message and the usage on stderr, exit
// status 2, before anything is served; `--help` prints the usage. `--check` only validates the
// other arguments (scripts/dashboard.sh runs it before building).
//
// Serves dashboard/ at `/` and the `--target web` wasm build (bindings/wasm/pkg-web, made by
// bindings/wasm/build.sh) at `/pkg/`, with `application/wasm` for `.wasm` so browsers can
// stream-compile it. Only files inside those two folders are served (no directory listings,
// no `..`, nothing under a `test/` or `bench/` folder: the tests serve their own code to the browser).
// Binds 127.0.0.1 by default; `--port 0` picks a free port. Prints the URL.
// Also importable: `startServer({port, host})` resolves to `{server, url}` (used by the tests).

import { createServer } from 'node:http';
import { readFile, stat } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { dirname, extname, join, normalize, sep } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const ROOTS = [
  ['/pkg/', join(here, '..', 'bindings', 'wasm', 'pkg-web')],
  ['/', here],
];
const TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.wasm': 'application/wasm',
  '.json': 'application/json; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ts': 'text/plain; charset=utf-8',
};

/** The file a URL path names inside one of the roots, or null. */
function resolvePath(urlPath) {
  let path;
  try {
    path = decodeURIComponent(urlPath.split('?')[0]);
  } catch {
    return null;
  }
  if (path === '/') path = '/index.html';
  for (const [prefix, root] of ROOTS) {
    if (!path.startsWith(prefix)) continue;
    const file = normalize(join(root, path.slice(prefix.length)));
    if (file !== root && !file.startsWith(root + sep)) return null;
    if (['test', 'bench', 'node_modules'].some((dir) => file.includes(`${sep}${dir}${sep}`))) return null;
    return file;
  }
  return null;
}

async function handle(req, res) {
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    res.writeHead(405, { Allow: 'GET, HEAD' }).end();
    return;
  }
  const file = resolvePath(req.url ?? '/');
  const type = file && TYPES[extname(file)];
  if (!type) {
    res.writeHead(404, { 'Content-Type': 'text/plain' }).end('not found\n');
    return;
  }
  try {
    if (!(await stat(file)).isFile()) throw new Error('not a file');
    const body = await readFile(file);
    res.writeHead(200, { 'Content-Type': type, 'Content-Length': body.length, 'Cache-Control': 'no-cache' });
    res.end(req.method === 'HEAD' ? undefined : body);
  } catch {
    res.writeHead(404, { 'Content-Type': 'text/plain' }).end('not found\n');
  }
}

/** Starts the server; resolves to `{server, url}` once it listens. */
export function startServer({ port = 0, host = '127.0.0.1' } = {}) {
  if (!existsSync(join(ROOTS[0][1], 'klock_wasm.js'))) {
    throw new Error('the web build is missing (bindings/wasm/pkg-web): run bash bindings/wasm/build.sh first');
  }
  const server = createServer((req, res) => {
    handle(req, res).catch(() => res.destroy());
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      const { port: actual } = server.address();
      resolve({ server, url: `http://${host.includes(':') ? `[${host}]` : host}:${actual}/` });
    });
  });
}

const USAGE = `usage: node dashboard/serve.mjs [--port N] [--host H]
  --port N   the port to listen on, 0 to 65535 (default: $PORT or 8080; 0 picks a free one)
  --host H   the address to bind (default 127.0.0.1)
  --check    only validate the other arguments, then exit
  --help     print this and exit`;

/** A refused command line: `message` says what is wrong. */
export class UsageError extends Error {}

function portNumber(text, what) {
  if (!/^[0-9]+$/.test(text) || Number(text) > 65535) {
    throw new UsageError(`${what} must be an integer from 0 to 65535, got '${text}'`);
  }
  return Number(text);
}

/**
 * Parses the command line strictly: `{port, host, help, check}`, or throws UsageError.
 * @param {string[]} argv the arguments after the script's name
 */
export function parseArgs(argv, env = process.env) {
  const seen = new Set();
  const out = { port: undefined, host: '127.0.0.1', help: false, check: false };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === '--help' || arg === '-h') {
      out.help = true;
      continue;
    }
    if (arg === '--check') {
      out.check = true;
      continue;
    }
    if (arg !== '--port' && arg !== '--host') {
      throw new UsageError(`unknown argument '${arg}'`);
    }
    if (seen.has(arg)) throw new UsageError(`${arg} is given twice`);
    seen.add(arg);
    const value = argv[i + 1];
    if (value === undefined || (arg === '--host' && value === '')) throw new UsageError(`${arg} needs a value`);
    i++;
    if (arg === '--port') out.port = portNumber(value, '--port');
    else out.host = value;
  }
  if (out.port === undefined)
    out.port = env.PORT === undefined ? 8080 : portNumber(env.PORT, 'the PORT environment variable');
  return out;
}

async function main(argv) {
  let args;
  try {
    args = parseArgs(argv);
  } catch (e) {
    if (!(e instanceof UsageError)) throw e;
    console.error(`serve.mjs: ${e.message}\n${USAGE}`);
    process.exitCode = 2;
    return;
  }
  if (args.check) return;
  if (args.help) {
    console.log(USAGE);
    return;
  }
  const { port, host } = args;
  try {
    const { url } = await startServer({ port, host });
    console.log(`Klock dashboard: ${url}  (Ctrl+C to stop)`);
  } catch (e) {
    console.error(e.code === 'EADDRINUSE' ? `port ${port} is in use: try --port 0 for a free one` : e.message);
    process.exitCode = 1;
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) main(process.argv.slice(2));
