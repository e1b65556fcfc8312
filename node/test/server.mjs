// Test harness: a real `klock serve` on a free loopback port, started by the test and stopped
// by it. The binary is $KLOCK_BIN (scripts/test-node.sh sets it from scripts/klock-bin.sh),
// else the one scripts/klock-bin.sh names (building it if needed). `startManualServer` starts
// the test kit's resettable manual-clock server instead (`klock-testkit serve`:
// $KLOCK_TESTKIT_BIN, else `scripts/klock-bin.sh klock-testkit`). And `openLink`, a loopback
// TCP link to it that a test can cut and restore.
import { spawn, execFileSync } from 'node:child_process';
import { createServer as createNetServer, connect as connectNet } from 'node:net';
import { fileURLToPath } from 'node:url';
import { readdirSync, readFileSync } from 'node:fs';

const root = fileURLToPath(new URL('../../', import.meta.url));

const binaries = { klock: process.env.KLOCK_BIN, 'klock-testkit': process.env.KLOCK_TESTKIT_BIN };

/** The path of binary `name` (resolved once): $KLOCK_BIN or $KLOCK_TESTKIT_BIN, else built. */
function binaryPath(name) {
  binaries[name] ??= execFileSync('bash', [`${root}scripts/klock-bin.sh`, name], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  })
    .trim()
    .split('\n')
    .pop();
  return binaries[name];
}

/** The path of the `klock` binary (resolved once). */
export function klockBin() {
  return binaryPath('klock');
}

/**
 * SIGSTOP `child` (a ChildProcess), and wait until every thread of the process has stopped:
 * `kill` returns before the stop reaches the other threads, which can still answer a request
 * sent meanwhile.
 */
export async function freezeProcess(child) {
  child.kill('SIGSTOP');
  const tasks = `/proc/${child.pid}/task`;
  const deadline = Date.now() + 5000;
  while (Date.now() < deadline) {
    const states = [];
    for (const task of readdirSync(tasks)) {
      try {
        // The state follows the command name in parentheses.
        states.push(readFileSync(`${tasks}/${task}/stat`, 'utf8').split(')').pop().trim()[0]);
      } catch {
        // a thread that ended meanwhile
      }
    }
    if (states.length > 0 && states.every((state) => state === 'T' || state === 't')) return;
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
  throw new Error(`process ${child.pid} did not stop within 5 s`);
}

/**
 * Starts `klock-testkit serve`: what `klock serve --memory --clock manual` serves, plus
 * `POST /v1/reset` (a whole kernel config) to start over with that config. Same handle as
 * `startServer`.
 */
export function startManualServer() {
  return startServer([], { bin: binaryPath('klock-testkit') });
}

/**
 * Starts `klock serve ARGS --listen 127.0.0.1:PORT` (PORT 0: a free one) and resolves once it
 * prints its address: `{ url, port, kill(signal), stop() }`. `stop()` kills it and waits.
 */
export async function startServer(args = ['--memory'], { port = 0, bin = klockBin() } = {}) {
  const child = spawn(bin, ['serve', ...args, '--listen', `127.0.0.1:${port}`], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  const exited = new Promise((resolve) => child.once('exit', resolve));
  const line = await new Promise((resolve, reject) => {
    let out = '';
    const onData = (d) => {
      out += d;
      const nl = out.indexOf('\n');
      if (nl >= 0) {
        child.stdout.off('data', onData);
        resolve(out.slice(0, nl));
      }
    };
    child.stdout.on('data', onData);
    child.once('exit', (code) => reject(new Error(`klock serve exited (${code}) before listening: ${stderr}`)));
    setTimeout(() => reject(new Error(`klock serve did not start within 20 s: ${stderr}`)), 20_000).unref();
  });
  const m = /listening on (https?:\/\/[^\s]+)/.exec(line);
  if (m === null) throw new Error(`unexpected first line of klock serve: ${line}`);
  const url = m[1];
  return {
    url,
    port: Number(new URL(url).port),
    child,
    exited,
    kill(signal = 'SIGKILL') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    },
    /**
     * SIGSTOP, and wait until every thread of the process has stopped: `kill` returns before
     * the stop reaches the other threads, which can still answer a request sent meanwhile.
     */
    async freeze() {
      await freezeProcess(child);
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
  };
}

/**
 * A TCP forwarder from a free loopback port of its own (`url`) to `port`: a client's network,
 * which `cut()` takes away (every open connection destroyed, new ones destroyed at once) while
 * the server stays up, and `restore()` gives back. It reaches whatever listens on `port`, so a
 * server restarted on it is reached again. `close()` stops it. `connections` counts the
 * connections it forwarded, `open()` gives the latest request line of each one open now;
 * `reset(keep)` closes every open one whose latest request line does not match `keep` (a
 * RegExp), at once and while still accepting, as a server closing idle keep-alive connections
 * does.
 */
export async function openLink(port) {
  const open = new Set();
  /** @type {Map<import('node:net').Socket, string>} client side -> the first line of its latest request */
  const clients = new Map();
  let cut = false;
  let connections = 0;
  const listener = createNetServer((conn) => {
    if (cut) {
      conn.destroy();
      return;
    }
    connections++;
    clients.set(conn, '');
    conn.on('data', (chunk) => {
      const line = chunk.toString('latin1', 0, 300).split('\r\n')[0];
      if (/^[A-Z]+ \S+ HTTP\/1\.1$/.test(line)) clients.set(conn, line);
    });
    conn.once('close', () => clients.delete(conn));
    const upstream = connectNet(port, '127.0.0.1');
    for (const end of [conn, upstream]) {
      open.add(end);
      end.on('error', () => {});
      end.on('close', () => {
        open.delete(end);
        conn.destroy();
        upstream.destroy();
      });
    }
    conn.pipe(upstream);
    upstream.pipe(conn);
  });
  await new Promise((resolve) => listener.listen(0, '127.0.0.1', resolve));
  const drop = () => {
    for (const end of open) end.destroy();
    open.clear();
  };
  return {
    url: `http://127.0.0.1:${listener.address().port}`,
    cut() {
      cut = true;
      drop();
    },
    restore() {
      cut = false;
    },
    get connections() {
      return connections;
    },
    /** The latest request line of each connection open now. */
    open() {
      return [...clients.values()];
    },
    reset(keep = null) {
      for (const [conn, head] of clients) if (keep === null || !keep.test(head)) conn.destroy();
    },
    close() {
      cut = true;
      drop();
      return new Promise((resolve) => listener.close(resolve));
    },
  };
}

/** Rejects if `promise` takes longer than `ms` (a hang is a failure, not a timeout of the runner). */
export function within(ms, promise, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} did not settle within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}
