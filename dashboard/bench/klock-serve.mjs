// Helpers shared by the dashboard's live/replay tests (dashboard/test/remote.test.mjs) and the
// replay frame-rate report (dashboard/bench/replay-fps.mjs): a real `klock serve` process (the
// binary scripts/klock-bin.sh names, or $KLOCK_BIN) with --dashboard, and small agents doing HTTP.

import { spawn, execFileSync } from 'node:child_process';
import { createInterface } from 'node:readline';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const OUT_DIR = join(process.env.CARGO_TARGET_DIR ?? join(ROOT, 'target'), 'dashboard');

let bin;
/** The klock binary: $KLOCK_BIN, else what scripts/klock-bin.sh builds and names. */
export function klockBin() {
  if (!bin) {
    bin = process.env.KLOCK_BIN;
    if (!bin) {
      const out = execFileSync('bash', [join(ROOT, 'scripts', 'klock-bin.sh')], {
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      bin = out.trim().split('\n').pop();
    }
  }
  return bin;
}

/** Starts `klock serve --dashboard ARGS...` on `port` (0: a free one); resolves {url, port, child, stop()}. */
export function startKlock(args, { port = 0 } = {}) {
  const child = spawn(
    klockBin(),
    [
      'serve',
      '--listen',
      `127.0.0.1:${port}`,
      '--dashboard',
      '--dashboard-pkg',
      join(ROOT, 'bindings', 'wasm', 'pkg-web'),
      ...args,
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let stderr = '';
  child.stderr.on('data', (d) => {
    stderr += d;
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`klock serve did not start in 20 s: ${stderr}`)), 20_000);
    child.once('exit', (code) => reject(new Error(`klock serve exited (${code}): ${stderr}`)));
    createInterface({ input: child.stdout }).once('line', (line) => {
      clearTimeout(timer);
      const m = /listening on (http:\/\/[\d.]+:(\d+))/.exec(line);
      if (!m) return reject(new Error(`unexpected first line: ${line}`));
      child.stdout.resume();
      resolve({
        url: m[1],
        port: Number(m[2]),
        child,
        stderr: () => stderr,
        /** SIGKILL, resolved once the process is gone. */
        kill() {
          return new Promise((res) => {
            if (child.exitCode !== null || child.signalCode !== null) return res();
            child.once('exit', () => res());
            child.kill('SIGKILL');
          });
        },
      });
    });
  });
}

/** A JSON request; resolves {status, body}. */
export async function call(url, method, path, { body, headers = {} } = {}) {
  const res = await fetch(`${url}${path}`, {
    method,
    headers: { 'content-type': 'application/json', ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

/** Opens a session: {ns, id, token, agent}. */
export async function openSession(url, ns, agent) {
  const { status, body } = await call(url, 'POST', `/v1/ns/${ns}/sessions`, { body: { agent_id: agent } });
  if (status !== 200) throw new Error(`open ${agent}: ${status} ${JSON.stringify(body)}`);
  return { ns, id: body.session_id, token: body.session_token, agent };
}

/** A call on a session's own route (`acquire`, `release`, ...). */
export function onSession(url, s, what, body) {
  return call(url, 'POST', `/v1/ns/${s.ns}/sessions/${s.id}/${what}`, {
    body,
    headers: { 'klock-session-token': s.token },
  });
}

/** Many operations in one request (POST /v1/ns/{ns}/batch): each is one log entry. */
export function batch(url, ns, operations) {
  return call(url, 'POST', `/v1/ns/${ns}/batch`, { body: { operations } });
}

/** The server's live state hash: {index, now, hash}. */
export async function liveHash(url) {
  return (await call(url, 'GET', '/v1/state/hash')).body;
}
