// Issue 25 in the Node client: `file(path, { root })` (relative, absolute, `..`, symlinked and
// case-different paths, refused characters), a TTL the kernel's cap cut warned about (in
// process and remotely), and `connect()` reading KLOCK_SERVER / KLOCK_TOKEN /
// KLOCK_NAMESPACE, also in a program run by a real `klock exec`. Bounded by
// node --test-timeout and the timeouts here.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, mkdirSync, rmSync, writeFileSync, symlinkSync, realpathSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import { startServer, klockBin } from './server.mjs';

const require = createRequire(import.meta.url);
const { Klock, connect, file, KlockError } = require('../client.js');

const dir = realpathSync(mkdtempSync(join(tmpdir(), 'klock-node-names-')));
const repo = join(dir, 'repo');
mkdirSync(join(repo, 'src'), { recursive: true });
writeFileSync(join(repo, 'src', 'auth.ts'), '');
const servers = [];
after(async () => {
  for (const s of servers) await s.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** Runs `fn` with `process.env` changed by `vars` (undefined: removed), then restores it. */
async function withEnv(vars, fn) {
  const saved = {};
  for (const [k, v] of Object.entries(vars)) {
    saved[k] = process.env[k];
    if (v === undefined) delete process.env[k];
    else process.env[k] = v;
  }
  try {
    return await fn();
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
}

const NO_ENV = {
  KLOCK_SERVER: undefined,
  KLOCK_TOKEN: undefined,
  KLOCK_NAMESPACE: undefined,
  KLOCK_NS: undefined,
  KLOCK_ROOT: undefined,
};

test('file(): relative paths from the current directory, absolute ones inside the root', async () => {
  const cwd = process.cwd();
  try {
    process.chdir(repo);
    assert.equal(file('src/auth.ts', { root: repo }), 'FILE:/src/auth.ts');
    assert.equal(file('./src//auth.ts', { root: repo }), 'FILE:/src/auth.ts');
    process.chdir(join(repo, 'src'));
    assert.equal(file('auth.ts', { root: repo }), 'FILE:/src/auth.ts');
    assert.equal(file('..', { root: repo }), 'FILE:/');
  } finally {
    process.chdir(cwd);
  }
  assert.equal(file(join(repo, 'src', 'auth.ts'), { root: repo }), 'FILE:/src/auth.ts');
  assert.equal(file(join(repo, 'src', 'new', 'x.ts'), { root: repo }), 'FILE:/src/new/x.ts');
  assert.throws(() => file('/etc/passwd', { root: repo }), /outside the root/);
  await withEnv({ KLOCK_ROOT: repo }, () => assert.equal(file(join(repo, 'src')), 'FILE:/src'));
  await withEnv({ KLOCK_ROOT: undefined }, () => assert.throws(() => file('x'), /KLOCK_ROOT/));
});

test('file(): `..` is resolved, and escaping the root is an error', () => {
  assert.equal(file(`${repo}/src/../src/auth.ts`, { root: repo }), 'FILE:/src/auth.ts');
  assert.equal(file(`${repo}/src/new/../y.ts`, { root: repo }), 'FILE:/src/y.ts');
  assert.throws(() => file(`${repo}/src/../../x`, { root: repo }), RangeError);
  assert.throws(() => file(`${repo}/..`, { root: repo }), /outside the root/);
});

test('file(): symbolic links are resolved, so two agents get one name', () => {
  symlinkSync(join(repo, 'src'), join(dir, 'shortcut'));
  symlinkSync(repo, join(dir, 'repo-link'));
  symlinkSync(dir, join(repo, 'out'));
  assert.equal(file(join(dir, 'shortcut', 'auth.ts'), { root: repo }), 'FILE:/src/auth.ts');
  assert.equal(file(join(repo, 'src', 'auth.ts'), { root: join(dir, 'repo-link') }), 'FILE:/src/auth.ts');
  // `link/..` is the parent of the link's target, as for the file system.
  assert.equal(file(`${dir}/shortcut/../src/auth.ts`, { root: repo }), 'FILE:/src/auth.ts');
  assert.throws(() => file(join(repo, 'out', 'x'), { root: repo }), /outside the root/);
});

test('file(): case and Unicode form are kept; unprintable characters are refused', async () => {
  assert.equal(file(join(repo, 'src', 'Auth.ts'), { root: repo }), 'FILE:/src/Auth.ts');
  assert.notEqual(file(join(repo, 'caf\u00e9'), { root: repo }), file(join(repo, 'cafe\u0301'), { root: repo }));
  assert.throws(() => file(join(repo, 'a\u200bb'), { root: repo }), /U\+200B/);
  assert.throws(() => file(join(repo, 'evil\u202ets'), { root: repo }), /U\+202E/);
  assert.throws(() => file(42, { root: repo }), TypeError);
  assert.throws(() => file('x', { root: join(repo, 'src', 'auth.ts') }), /not an existing directory/);
  assert.throws(() => file('x', { root: repo, base: 1 }), TypeError);
  // The kernel keeps case-different names apart, and refuses the unprintable ones too.
  const k = new Klock();
  const a = await k.session('a');
  const b = await k.session('b');
  const upper = await a.lease(`MUTATES ${file(join(repo, 'src', 'Auth.ts'), { root: repo })}`);
  const lower = await b.lease(`MUTATES ${file(join(repo, 'src', 'auth.ts'), { root: repo })}`, { timeoutMs: 0 });
  upper.release();
  lower.release();
  await assert.rejects(
    a.lease('MUTATES FILE:/a\u200bb'),
    (e) => e instanceof KlockError && e.name === 'INVALID_RESOURCE',
  );
  k.close();
});

/** The next process warning with code `code`. */
function nextWarning(code) {
  return new Promise((resolve) => {
    const on = (w) => {
      if (w.code === code) {
        process.off('warning', on);
        resolve(w);
      }
    };
    process.on('warning', on);
  });
}

test('a TTL over the cap is warned about, in process and remotely', async () => {
  const s = await startServer();
  servers.push(s);
  for (const k of [new Klock(), connect(s.url)]) {
    const session = await k.session('capped');
    let warned = nextWarning('KLOCK_TTL_CAPPED');
    const lease = await session.lease('MUTATES FILE:/long', { ttlMs: 600_000 });
    const warning = await warned;
    assert.equal(warning.name, 'TtlCappedWarning');
    assert.match(warning.message, /asked for a TTL of 600000 ms .* granted 300000 ms/);
    assert.equal(lease.leases[0].ttlMs, 300_000);
    await lease.release();
    // At the cap: no warning.
    let seen = false;
    const on = (w) => (seen ||= w.code === 'KLOCK_TTL_CAPPED');
    process.on('warning', on);
    const atCap = await session.lease('MUTATES FILE:/long', { ttlMs: 300_000 });
    await new Promise((resolve) => setImmediate(resolve));
    process.off('warning', on);
    assert.equal(seen, false);
    await atCap.release();
    await k.close();
  }
});

test('connect() reads KLOCK_SERVER, KLOCK_TOKEN and KLOCK_NAMESPACE', async () => {
  const s = await startServer();
  servers.push(s);
  await withEnv({ ...NO_ENV, KLOCK_SERVER: s.url, KLOCK_NAMESPACE: 'from-env' }, async () => {
    const k = connect();
    const session = await k.session('env');
    assert.equal(session.namespace, 'from-env');
    await k.close();
    const given = connect(s.url, { namespace: 'given' });
    assert.equal((await given.session('g')).namespace, 'given');
    await given.close();
  });
  await withEnv({ ...NO_ENV, KLOCK_NS: 'older-name' }, async () => {
    const k = connect(s.url);
    assert.equal((await k.session('n')).namespace, 'older-name');
    await k.close();
  });
  await withEnv({ ...NO_ENV, KLOCK_NS: 'a', KLOCK_NAMESPACE: 'b' }, () => {
    assert.throws(() => connect(s.url), /disagree/);
  });
});

test('a program run by `klock exec` reaches the same server, token and namespace', async () => {
  const secret = 'node-exec-secret';
  const digest = createHash('sha256').update(secret).digest('hex');
  const tokens = join(dir, 'tokens.json');
  writeFileSync(
    tokens,
    JSON.stringify({ tokens: [{ name: 't', sha256: digest, role: 'agent', namespaces: ['team'] }] }),
  );
  const s = await startServer(['--memory', '--tokens', tokens]);
  servers.push(s);
  const child = `
    const { connect } = require(${JSON.stringify(require.resolve('../client.js'))});
    (async () => {
      const k = connect();
      const held = (await k.resourceState('FILE:/src/app.js')).holders.map((h) => h.sessionId);
      const namespace = (await k.session('child')).namespace;
      await k.close();
      console.log(JSON.stringify({ held, namespace, session: Number(process.env.KLOCK_SESSION) }));
    })().catch((e) => { console.error(e); process.exit(1); });`;
  const out = execFileSync(
    klockBin(),
    [
      'exec',
      '--server',
      s.url,
      '--ns',
      'team',
      '--root',
      repo,
      '--file',
      'MUTATES src/app.js',
      '--',
      process.execPath,
      '-e',
      child,
    ],
    {
      cwd: repo,
      env: { ...process.env, ...{ KLOCK_NAMESPACE: '', KLOCK_NS: '' }, KLOCK_TOKEN: secret },
      encoding: 'utf8',
      timeout: 60_000,
    },
  );
  const seen = JSON.parse(out);
  assert.equal(seen.namespace, 'team');
  assert.deepEqual(seen.held, [seen.session]);
});

/** A CA of the test's own and a certificate it signed for localhost and 127.0.0.1 (openssl). */
function certificates(name) {
  const d = join(dir, name);
  mkdirSync(d);
  const run = (...args) => execFileSync('openssl', args, { cwd: d, stdio: 'ignore', timeout: 30_000 });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  run(
    'req',
    '-x509',
    ...ec,
    '-days',
    '2',
    '-subj',
    '/CN=klock test CA',
    '-keyout',
    'ca.key',
    '-out',
    'ca.pem',
    '-addext',
    'basicConstraints=critical,CA:TRUE',
    '-addext',
    'keyUsage=critical,keyCertSign',
  );
  run('req', ...ec, '-subj', '/CN=localhost', '-keyout', 'key.pem', '-out', 'leaf.csr');
  writeFileSync(join(d, 'ext'), 'subjectAltName=DNS:localhost,IP:127.0.0.1\n');
  run(
    'x509',
    '-req',
    '-in',
    'leaf.csr',
    '-CA',
    'ca.pem',
    '-CAkey',
    'ca.key',
    '-CAcreateserial',
    '-days',
    '2',
    '-out',
    'cert.pem',
    '-extfile',
    'ext',
  );
  return d;
}

test('a refused TLS certificate fails at once, named; the CA from NODE_EXTRA_CA_CERTS is trusted', async () => {
  const d = certificates('tls');
  const s = await startServer(['--memory', '--tls-cert', join(d, 'cert.pem'), '--tls-key', join(d, 'key.pem')]);
  servers.push(s);
  const k = connect(s.url, { reconnectTimeoutMs: 30_000 });
  const started = Date.now();
  await assert.rejects(k.session('tls'), (e) => {
    assert.ok(e instanceof KlockError && e.name === 'CERTIFICATE', String(e));
    assert.match(e.message, /ca: PATH/);
    return true;
  });
  assert.ok(Date.now() - started < 5_000, 'not retried for the reconnect budget');
  await k.close();
  // Node reads NODE_EXTRA_CA_CERTS when it starts: a process of its own.
  const child = `
    const { connect } = require(${JSON.stringify(require.resolve('../client.js'))});
    (async () => {
      const k = connect(${JSON.stringify(s.url)});
      const lease = await (await k.session('tls')).lease('MUTATES FILE:/tls');
      console.log(lease.fence);
      await lease.release();
      await k.close();
    })().catch((e) => { console.error(e); process.exit(1); });`;
  const out = execFileSync(process.execPath, ['-e', child], {
    env: { ...process.env, NODE_EXTRA_CA_CERTS: join(d, 'ca.pem') },
    encoding: 'utf8',
    timeout: 60_000,
  });
  assert.ok(Number(out) >= 1);
});

test('connect(url, { ca }) trusts a private CA, KLOCK_CA too; verify: false accepts any; a bad bundle is named', async () => {
  const d = certificates('tls-options');
  const s = await startServer(['--memory', '--tls-cert', join(d, 'cert.pem'), '--tls-key', join(d, 'key.pem')]);
  servers.push(s);
  const fenceThrough = async (options) => {
    const k = connect(s.url, options);
    try {
      const session = await k.session('tls');
      const lease = await session.lease('MUTATES FILE:/tls');
      const fence = lease.fence;
      await lease.release();
      return fence;
    } finally {
      await k.close();
    }
  };
  const first = await fenceThrough({ ca: join(d, 'ca.pem') });
  assert.ok(first >= 1);
  assert.ok((await fenceThrough({ verify: false })) > first);
  const before = process.env.KLOCK_CA;
  process.env.KLOCK_CA = join(d, 'ca.pem');
  try {
    assert.ok((await fenceThrough({})) > first);
  } finally {
    if (before === undefined) delete process.env.KLOCK_CA;
    else process.env.KLOCK_CA = before;
  }
  // Another CA's bundle: the server's certificate is refused at once, named.
  const k = connect(s.url, { ca: join(d, 'cert.pem'), reconnectTimeoutMs: 30_000 });
  const started = Date.now();
  await assert.rejects(k.session('tls'), (e) => e instanceof KlockError && e.name === 'CERTIFICATE');
  assert.ok(Date.now() - started < 5_000, 'not retried for the reconnect budget');
  await k.close();
  assert.throws(() => connect(s.url, { ca: join(d, 'missing.pem') }), /cannot read the CA bundle .*missing\.pem/);
  assert.throws(() => connect(s.url, { ca: join(d, 'ext') }), /holds no PEM certificate/);
  assert.throws(() => connect(s.url, { verify: 'no' }), /options\.verify/);
});
