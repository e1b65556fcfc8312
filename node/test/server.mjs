// Test harness: a real `klock serve` on a free loopback port, started by the test and stopped
// by it. The binary is $KLOCK_BIN (scripts/test-node.sh sets it from scripts/klock-bin.sh),
// else the one scripts/klock-bin.sh names (building it if needed). `startManualServer` starts
// the test kit's resettable manual-clock server instead (`klock-testkit serve`:
// $KLOCK_TESTKIT_BIN, else `scripts/klock-bin.sh klock-testkit`). And `openLink`, a loopback
// TCP link to it that a test can cut and restore. And `startCluster`, three `klock serve
// --node-id` processes on free loopback ports joined by `klock cluster init`.
import { spawn, execFileSync, execFile } from 'node:child_process';
import { createServer as createNetServer, connect as connectNet } from 'node:net';
import { fileURLToPath } from 'node:url';
import { readdirSync, readFileSync, mkdtempSync, writeFileSync, openSync, closeSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

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

/** The path of the `klock-testkit` binary (resolved once). */
export function testkitBin() {
  return binaryPath('klock-testkit');
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
 * does. `hold(line)` keeps every request whose request line matches `line` (a RegExp) at the
 * link, neither forwarded nor failed, until `release()`: a request that is late, not lost.
 */
export async function openLink(port) {
  const open = new Set();
  /** @type {RegExp | null} the request lines held back */
  let held = null;
  /** @type {Array<() => void>} the requests held back, each forwarded by its call */
  const waiting = [];
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
    const upstream = connectNet(port, '127.0.0.1');
    conn.on('data', (chunk) => {
      const line = chunk.toString('latin1', 0, 300).split('\r\n')[0];
      if (/^[A-Z]+ \S+ HTTP\/1\.1$/.test(line)) clients.set(conn, line);
      if (held !== null && held.test(line)) {
        conn.pause(); // nothing more of this connection until it is forwarded
        waiting.push(() => {
          upstream.write(chunk);
          conn.resume();
        });
        return;
      }
      upstream.write(chunk);
    });
    conn.once('end', () => upstream.end());
    conn.once('close', () => clients.delete(conn));
    for (const end of [conn, upstream]) {
      open.add(end);
      end.on('error', () => {});
      end.on('close', () => {
        open.delete(end);
        conn.destroy();
        upstream.destroy();
      });
    }
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
    hold(line) {
      held = line;
    },
    release() {
      held = null;
      for (const forward of waiting.splice(0)) forward();
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

/** The cluster secret of the test clusters (klock serve asks for at least 16 characters). */
export const CLUSTER_SECRET = 'a-cluster-secret-of-the-tests';

/**
 * A loopback port nothing listens on now, for a node that binds it just after. It is drawn
 * from below the kernel's ephemeral range: until the node binds it, a port of that range can
 * be handed to any socket of the machine (another test's `listen(0)`, the local end of an
 * outgoing connection), and the node could not listen. Within this process a port is given
 * once (two nodes of one cluster never meet on one). Across processes only the Rust and
 * Python tests also pick below the range, and they run in other steps of the test command
 * than Node's, where only one file starts clusters.
 */
export async function freePort() {
  let low = 32768;
  try {
    low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').split(/\s+/)[0]) || low;
  } catch {
    // Not Linux: the default range's start.
  }
  const floor = 10000;
  for (let attempt = 0; low > floor + 1000 && attempt < 1000; attempt++) {
    const candidate = floor + Math.floor(Math.random() * (low - floor));
    if (!givenPorts.has(candidate) && (await listensOn(candidate)) !== null) {
      givenPorts.add(candidate);
      return candidate;
    }
  }
  return listensOn(0);
}

/** The ports freePort gave in this process. */
const givenPorts = new Set();

/** Binds `port` on loopback and lets it go: the port bound, or null if it was taken. */
function listensOn(port) {
  return new Promise((resolve) => {
    const probe = createNetServer();
    probe.once('error', () => resolve(null));
    probe.listen(port, '127.0.0.1', () => {
      const bound = probe.address().port;
      probe.close(() => resolve(bound));
    });
  });
}

/**
 * Starts `size` (three) `klock serve --node-id N --cluster-peers ... --cluster-secret-file`
 * processes on free loopback ports, each with a redb file of its own in a temporary
 * directory, runs `klock cluster init` through node 1 and resolves once every node names the
 * same leader: `{ urls, leader(), kill(i), stop() }` (`i` 0-based; its Raft id is `i + 1`).
 * `stop()` kills every node and removes the directory: call it in a `finally`. A node's log
 * goes to a file (its INFO lines would fill a pipe nobody reads). If the start fails, the
 * nodes started are killed before the error is thrown.
 */
export async function startCluster(size = 3) {
  const dir = mkdtempSync(join(tmpdir(), 'klock-cluster-'));
  const secret = join(dir, 'secret');
  writeFileSync(secret, CLUSTER_SECRET);
  const ports = [];
  for (let i = 0; i < size; i++) ports.push(await freePort());
  const urls = ports.map((p) => `http://127.0.0.1:${p}`);
  const peers = urls.map((u, i) => `${i + 1}=${u}`).join(',');
  /** @type {(import('node:child_process').ChildProcess | null)[]} */
  const nodes = urls.map(() => null);
  const start = (i) => {
    const log = openSync(join(dir, `node${i + 1}.log`), 'a');
    const args = ['serve', '--listen', `127.0.0.1:${ports[i]}`, '--data', join(dir, `node${i + 1}.redb`)];
    args.push('--node-id', String(i + 1), '--cluster-peers', peers, '--cluster-secret-file', secret);
    nodes[i] = spawn(klockBin(), args, { stdio: ['ignore', 'ignore', log] });
    closeSync(log);
  };
  const status = async (i) => {
    try {
      const r = await fetch(`${urls[i]}/raft/status`, {
        headers: { 'klock-cluster-secret': CLUSTER_SECRET },
        signal: AbortSignal.timeout(2000),
      });
      return r.ok ? await r.json() : null;
    } catch {
      return null;
    }
  };
  const kill = async (i) => {
    const child = nodes[i];
    nodes[i] = null;
    if (child === null) return;
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGKILL');
      await exited;
    }
  };
  const stop = async () => {
    for (let i = 0; i < size; i++) await kill(i);
    rmSync(dir, { recursive: true, force: true });
  };
  /** The index of the live node every live node names as leader, once there is one. */
  const leader = async (timeoutMs = 15_000) => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const live = nodes.map((n, i) => (n === null ? -1 : i)).filter((i) => i >= 0);
      const named = await Promise.all(live.map(async (i) => (await status(i))?.leader ?? null));
      const first = named[0];
      if (Number.isInteger(first) && named.every((n) => n === first) && nodes[first - 1] !== null) return first - 1;
      if (Date.now() > deadline)
        throw new Error(`no leader agreed on within ${timeoutMs} ms: ${JSON.stringify(named)}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  };
  try {
    for (let i = 0; i < size; i++) start(i);
    const deadline = Date.now() + 15_000;
    for (;;) {
      const init = await new Promise((resolve) =>
        execFile(
          klockBin(),
          ['cluster', 'init', '--node', urls[0], '--cluster-secret-file', secret],
          { timeout: 15_000 },
          (error, _out, stderr) => resolve(error === null ? null : stderr || String(error)),
        ),
      );
      if (init === null) break;
      if (Date.now() > deadline) throw new Error(`klock cluster init failed: ${init}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    await leader();
  } catch (error) {
    await stop();
    throw error;
  }
  return { urls, leader, kill, stop };
}
