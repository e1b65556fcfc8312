// The transport's HTTP/1.1 framing (http.js), against a tiny TCP server of this test's own that
// answers each request path with bytes written by hand: a request goes out in one write; a
// chunked answer (split anywhere, with extensions and a trailer), an answer read to the close,
// `Connection: close` and interim 1xx heads are read right, and the connection is reused only
// when the answer allows it; a bad answer (status line, header, Content-Length, chunk size,
// a head too large) is `ERR_BAD_ANSWER` and never resent; an answer cut short is ECONNRESET; a
// header that cannot be sent is refused before anything goes out; an event stream's body
// arrives as it is written and its signal ends it, and pauses its socket while too much of it
// waits unread; a body over the transport's bound is refused. Every test is bounded (node --test-timeout,
// and `within` here).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { createRequire } from 'node:module';
import { within } from './server.mjs';

const require = createRequire(import.meta.url);
const { Transport } = require('../http.js');

/**
 * A TCP server answering each request with `answers[path](socket, request)`; counts the
 * connections and what each first read held.
 */
async function rawServer(answers) {
  const sockets = new Set();
  const state = { connections: 0, requests: [], firstReads: [] };
  const server = createServer((socket) => {
    state.connections++;
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    let buffer = '';
    let first = true;
    socket.on('data', (data) => {
      // Latin-1: one character per byte, so Content-Length counts characters here.
      if (first) state.firstReads.push(data.toString('latin1'));
      first = false;
      buffer += data.toString('latin1');
      for (;;) {
        const end = buffer.indexOf('\r\n\r\n');
        if (end < 0) return;
        const head = buffer.slice(0, end);
        const length = Number(/\r\ncontent-length: (\d+)/i.exec(head)?.[1] ?? 0);
        if (buffer.length < end + 4 + length) return;
        const body = Buffer.from(buffer.slice(end + 4, end + 4 + length), 'latin1').toString('utf8');
        const request = { head, body };
        buffer = buffer.slice(end + 4 + length);
        state.requests.push(request);
        const path = head.split(' ')[1];
        answers[path](socket, request);
      }
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = new URL(`http://127.0.0.1:${server.address().port}`);
  const close = async () => {
    for (const s of sockets) s.destroy();
    await new Promise((resolve) => server.close(resolve));
  };
  closers.push(close);
  return { url, state };
}

const closers = [];
after(async () => {
  for (const close of closers) await close();
});

const ok = (body, extra = '') => `HTTP/1.1 200 OK\r\ncontent-length: ${Buffer.byteLength(body)}\r\n${extra}\r\n${body}`;

/** Writes `text` (UTF-8) a few bytes at a time, each piece its own write a little later. */
async function trickle(socket, text, size = 3) {
  const bytes = Buffer.from(text);
  for (let i = 0; i < bytes.length; i += size) {
    socket.write(bytes.subarray(i, i + size));
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
}

const get = (t, path) => within(5000, t.request('GET', path, { headers: {}, timeoutMs: 5000 }), `GET ${path}`);

test('a request is one write, head and body; answers by Content-Length share one connection', async () => {
  const { url, state } = await rawServer({
    '/a': (s, r) => s.write(ok(`got ${r.body}`, 'x-one: 1\r\nX-Two: a\r\nx-two: b\r\n')),
  });
  const t = new Transport(url);
  try {
    const body = JSON.stringify({ name: 'é' });
    const answer = await within(
      5000,
      t.request('POST', '/a', {
        headers: { 'content-type': 'application/json', 'x-k': 'v' },
        body,
        timeoutMs: 5000,
      }),
      'the POST',
    );
    assert.equal(answer.status, 200);
    assert.equal(answer.text, `got ${body}`);
    assert.deepEqual(answer.headers, {
      'content-length': String(Buffer.byteLength(`got ${body}`)),
      'x-one': '1',
      'x-two': 'a, b',
    });
    assert.match(
      state.firstReads[0],
      /^POST \/a HTTP\/1\.1\r\nhost: 127\.0\.0\.1:\d+\r\ncontent-type: application\/json\r\nx-k: v\r\n/,
    );
    const sent = Buffer.from(body).toString('latin1');
    assert.ok(state.firstReads[0].endsWith(`\r\n\r\n${sent}`), 'the whole request in the first read');
    for (let i = 0; i < 5; i++) assert.equal((await get(t, '/a')).text, 'got ');
    assert.equal(state.connections, 1);
  } finally {
    t.close();
  }
});

test('a chunked answer split anywhere, with extensions and a trailer; the connection is reused', async () => {
  // ", wörld" is 8 bytes in UTF-8; the 3-byte pieces split the "ö" too.
  const chunked =
    'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n8\r\n, wörld\r\n0\r\nx-trailer: t\r\n\r\n';
  const { url, state } = await rawServer({ '/c': (s) => trickle(s, chunked) });
  const t = new Transport(url);
  try {
    assert.equal((await get(t, '/c')).text, 'hello, wörld');
    assert.equal((await get(t, '/c')).text, 'hello, wörld');
    assert.equal(state.connections, 1);
  } finally {
    t.close();
  }
});

test("an answer read in several reads is whole though a plain socket reuses its read buffer; so is a stream's body", async () => {
  // Each later piece is longer than everything before it, so a piece kept as a view of the
  // connection's read buffer would be overwritten by the next read (http.js `_read`).
  const pieces = ['a'.repeat(300), 'b'.repeat(5000), 'c'.repeat(20000), 'd'.repeat(40)];
  const body = pieces.join('');
  const later = async (s, rest) => {
    for (const piece of rest) {
      await new Promise((resolve) => setTimeout(resolve, 30));
      s.write(piece);
    }
  };
  let stream = null;
  const { url } = await rawServer({
    '/long': (s) => {
      s.write(`HTTP/1.1 200 OK\r\ncontent-length: ${body.length}\r\n\r\n${pieces[0]}`);
      later(s, pieces.slice(1));
    },
    '/events': (s) => {
      stream = s;
      s.write(`HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n${pieces[0]}`);
      later(s, pieces.slice(1)).then(() => s.end());
    },
  });
  const t = new Transport(url);
  try {
    const answer = await get(t, '/long');
    assert.equal(answer.text.length, body.length);
    assert.ok(answer.text === body, 'the body as written');
    assert.ok((await get(t, '/long')).text === body, 'again, on the reused connection');
    const events = await within(5000, t.stream('/events', { headers: {} }), 'the stream');
    // Read once the whole body is in: every chunk was kept across later reads.
    await new Promise((resolve) => setTimeout(resolve, 200));
    const text = await within(5000, events.text(), "the stream's body");
    assert.ok(stream !== null);
    assert.ok(text === body, "the stream's body as written");
  } finally {
    t.close();
  }
});

test('interim 1xx heads are skipped; Connection: close, a body read to the close and one framed both ways end the connection', async () => {
  const { url, state } = await rawServer({
    '/interim': (s) =>
      s.write(`HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\n${ok('after')}`),
    '/close': (s) => s.write(ok('bye', 'connection: close\r\n')),
    '/both': (s) =>
      s.write('HTTP/1.1 200 OK\r\ncontent-length: 99\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n'),
    '/to-close': (s) => {
      s.write('HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nall of ');
      setTimeout(() => s.end('it'), 20);
    },
  });
  const t = new Transport(url);
  try {
    const interim = await get(t, '/interim');
    assert.equal(interim.status, 200);
    assert.equal(interim.text, 'after');
    assert.equal((await get(t, '/interim')).text, 'after');
    assert.equal(state.connections, 1, 'kept after the interim heads');
    assert.equal((await get(t, '/close')).text, 'bye');
    assert.equal((await get(t, '/interim')).text, 'after');
    assert.equal(state.connections, 2, 'a fresh connection after Connection: close');
    assert.equal((await get(t, '/to-close')).text, 'all of it');
    assert.equal((await get(t, '/interim')).text, 'after');
    assert.equal(state.connections, 3, 'a fresh connection after a body read to the close');
    assert.equal((await get(t, '/both')).text, 'abc');
    assert.equal((await get(t, '/interim')).text, 'after');
    assert.equal(state.connections, 4, 'a fresh connection after an answer framed both ways');
  } finally {
    t.close();
  }
});

test('a bad answer is ERR_BAD_ANSWER, not resent; one cut short is ECONNRESET', async () => {
  const bad = {
    '/status': (s) => s.write('HTTP/2 200 OK\r\n\r\n'),
    '/header': (s) => s.write('HTTP/1.1 200 OK\r\nno colon here\r\ncontent-length: 0\r\n\r\n'),
    '/length': (s) => s.write('HTTP/1.1 200 OK\r\ncontent-length: 3, 4\r\n\r\nabcd'),
    '/chunk': (s) => s.write('HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n'),
    '/chunk-long': (s) => s.write('HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n'),
    // A head that never ends: refused once it passes the cap, not waited for.
    '/huge-head': (s) => s.write(`HTTP/1.1 200 OK\r\nx-big: ${'a'.repeat(70 * 1024)}`),
    '/many-headers': (s) => s.write(`HTTP/1.1 200 OK\r\n${'x-a: 1\r\n'.repeat(101)}content-length: 0\r\n\r\n`),
    '/upgrade': (s) => s.write('HTTP/1.1 101 Switching Protocols\r\n\r\n'),
  };
  const { url, state } = await rawServer({
    ...bad,
    '/short': (s) => {
      s.write('HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc');
      setTimeout(() => s.destroy(), 20);
    },
  });
  const t = new Transport(url);
  try {
    for (const path of Object.keys(bad)) {
      const before = state.requests.length;
      await assert.rejects(get(t, path), (e) => e.code === 'ERR_BAD_ANSWER', path);
      assert.equal(state.requests.length, before + 1, `${path} asked once`);
    }
    await assert.rejects(get(t, '/short'), (e) => e.code === 'ECONNRESET');
  } finally {
    t.close();
  }
});

test('a header that cannot be sent is refused before anything goes out', async () => {
  const { url, state } = await rawServer({ '/a': (s) => s.write(ok('x')) });
  const t = new Transport(url);
  try {
    for (const headers of [{ 'x-bad': 'a\r\nx-injected: 1' }, { 'bad name': 'v' }]) {
      await assert.rejects(t.request('GET', '/a', { headers, timeoutMs: 5000 }), { code: 'ERR_INVALID_CHAR' });
    }
    await assert.rejects(t.request('GET', '/a b', { headers: {}, timeoutMs: 5000 }), {
      code: 'ERR_UNESCAPED_CHARACTERS',
    });
    assert.equal(state.connections, 0);
  } finally {
    t.close();
  }
});

test('an event stream: its body arrives as written, in chunks; its signal ends it with AbortError', async () => {
  let stream = null;
  const { url } = await rawServer({
    '/events': (s) => {
      stream = s;
      s.write(
        'HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n6\r\ndata:1\r\n',
      );
    },
  });
  const t = new Transport(url);
  const stop = new AbortController();
  try {
    const answer = await within(5000, t.stream('/events', { headers: {}, signal: stop.signal }), 'the stream');
    assert.equal(answer.status, 200);
    const seen = [];
    const reading = (async () => {
      for await (const chunk of answer.body) {
        seen.push(String(chunk));
        if (seen.length === 2) stop.abort();
      }
    })();
    await new Promise((resolve) => setTimeout(resolve, 20));
    assert.deepEqual(seen, ['data:1']);
    stream.write('6\r\ndata:2\r\n');
    await assert.rejects(within(5000, reading, 'the reader'), {
      name: 'AbortError',
    });
    assert.deepEqual(seen, ['data:1', 'data:2']);
    const aborted = new AbortController();
    aborted.abort();
    await assert.rejects(t.stream('/events', { headers: {}, signal: aborted.signal }), { name: 'AbortError' });
  } finally {
    t.close();
  }
});

test("a request's signal ends it (AbortError), and one aborted before it is sent sends nothing", async () => {
  const { url, state } = await rawServer({
    // Never answers: the request waits until its signal aborts it.
    '/held': () => {},
    '/ok': (s) => s.write('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok'),
  });
  const t = new Transport(url);
  try {
    const stop = new AbortController();
    const held = t.request('GET', '/held', { headers: {}, timeoutMs: 30_000, signal: stop.signal });
    await new Promise((resolve) => setTimeout(resolve, 20));
    stop.abort();
    await assert.rejects(within(5000, held, 'the aborted request'), { name: 'AbortError' });
    // A signal that never aborts changes nothing; an answered request lets go of it.
    const kept = new AbortController();
    const answer = await within(
      5000,
      t.request('GET', '/ok', { headers: {}, timeoutMs: 5000, signal: kept.signal }),
      'ok',
    );
    assert.equal(answer.text, 'ok');
    kept.abort(); // after the answer: nothing to end
    const sent = state.requests.length;
    await assert.rejects(t.request('GET', '/ok', { headers: {}, timeoutMs: 5000, signal: stop.signal }), {
      name: 'AbortError',
    });
    assert.equal(state.requests.length, sent, 'a request whose signal had aborted is not sent');
  } finally {
    t.close();
  }
});

test('a body over MAX_BODY is ERR_BAD_ANSWER: declared, chunked or read to the close; one at the bound is whole', async () => {
  const { MAX_BODY } = require('../http.js');
  const piece = Buffer.alloc(1024 * 1024, 0x61);
  /** Writes `n` bytes of `a` (a chunk of each MiB when `chunked`), waiting on the socket's drain. */
  const pour = async (s, n, chunked) => {
    for (let left = n; left > 0 && !s.destroyed; left -= piece.length) {
      const part = piece.subarray(0, Math.min(left, piece.length));
      const wire = chunked
        ? Buffer.concat([Buffer.from(`${part.length.toString(16)}\r\n`), part, Buffer.from('\r\n')])
        : part;
      if (!s.write(wire)) await new Promise((resolve) => s.once('drain', resolve).once('close', resolve));
    }
    if (chunked && !s.destroyed) s.write('0\r\n\r\n');
  };
  const { url } = await rawServer({
    '/declared': (s) => s.write(`HTTP/1.1 200 OK\r\ncontent-length: 1000000000000\r\n\r\nxx`),
    '/chunked': (s) => {
      s.write('HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n');
      pour(s, MAX_BODY + 1, true);
    },
    '/to-close': (s) => {
      s.write('HTTP/1.1 200 OK\r\n\r\n');
      pour(s, MAX_BODY + 1, false).then(() => s.end());
    },
    '/at-bound': (s) => {
      s.write(`HTTP/1.1 200 OK\r\ncontent-length: ${MAX_BODY}\r\n\r\n`);
      pour(s, MAX_BODY, false);
    },
  });
  const t = new Transport(url);
  try {
    for (const path of ['/declared', '/chunked', '/to-close']) {
      await assert.rejects(get(t, path), (e) => e.code === 'ERR_BAD_ANSWER' && /over 67108864/.test(e.message), path);
    }
    assert.equal((await get(t, '/at-bound')).text.length, MAX_BODY);
  } finally {
    t.close();
  }
});

test("a stream's unread body pauses its socket past the high water, and resumes once read", async () => {
  const { STREAM_HIGH_WATER } = require('../http.js');
  let written = 0;
  let stream = null;
  const piece = Buffer.alloc(64 * 1024, 0x62);
  const { url } = await rawServer({
    '/events': (s) => {
      stream = s;
      s.write('HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n');
      // Writes as fast as the socket takes them: bounded only by the reader's pauses.
      const more = () => {
        while (!s.destroyed && written < 64 * STREAM_HIGH_WATER) {
          written += piece.length;
          if (!s.write(piece)) {
            s.once('drain', more);
            return;
          }
        }
      };
      more();
    },
  });
  const t = new Transport(url);
  const stop = new AbortController();
  try {
    const answer = await within(5000, t.stream('/events', { headers: {}, signal: stop.signal }), 'the stream');
    // Nobody reads: what the client holds stays near the high water (plus what TCP buffers),
    // far below what the server would write if it were not held back.
    await new Promise((resolve) => setTimeout(resolve, 300));
    const stalled = written;
    assert.ok(answer.body._unread <= STREAM_HIGH_WATER + piece.length, `unread ${answer.body._unread}`);
    assert.ok(stalled < 32 * STREAM_HIGH_WATER, `the server wrote ${stalled} bytes to an unread stream`);
    // Reading drains it, and the socket resumes: more of the stream arrives.
    let read = 0;
    for await (const chunk of answer.body) {
      read += chunk.length;
      if (read > stalled + 4 * STREAM_HIGH_WATER) break;
    }
    assert.ok(written > stalled, 'the server wrote more once the reader read');
  } finally {
    stop.abort();
    stream?.destroy();
    t.close();
  }
});

test('at most MAX_CONNECTIONS connections at once: the rest of a burst waits for one, and every request is answered', async () => {
  const { MAX_CONNECTIONS } = require('../http.js');
  let open = 0;
  let most = 0;
  const { url, state } = await rawServer({
    '/slow': (s) => {
      if (!s.counted) {
        s.counted = true;
        most = Math.max(most, ++open);
        s.on('close', () => open--);
      }
      setTimeout(() => s.write(ok('x')), 20);
    },
  });
  const t = new Transport(url);
  try {
    const burst = Array.from({ length: 3 * MAX_CONNECTIONS }, () => get(t, '/slow'));
    const answers = await Promise.all(burst);
    assert.ok(answers.every((a) => a.text === 'x'));
    assert.equal(state.connections, MAX_CONNECTIONS, 'connections made');
    assert.equal(most, MAX_CONNECTIONS, 'connections open at once');
  } finally {
    t.close();
  }
});
