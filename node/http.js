'use strict';
// The HTTP transport of the remote backend (remote.js): HTTP/1.1 framed by hand on `node:net` /
// `node:tls` sockets, a pool of kept-alive connections per client, one request at a time on
// each. A request is one write (head and body together) and its answer is parsed here: this
// costs about half the CPU of `node:http` with a keep-alive Agent per request, whose
// ClientRequest/IncomingMessage/Agent layers cost more than the wire (docs/DECISIONS.md).
//
// Contract
// - `new Transport(url, { ca, verify })`: `url` an http:// or https:// URL (a path in it
//   prefixes every request's); `ca` a PEM bundle to trust instead of the system's, `verify`
//   false to accept any certificate (https only; as `tls.connect`'s `ca`/`rejectUnauthorized`).
// - `request(method, path, { headers, body, timeoutMs, signal })` sends one request (`headers` with
//   lower-case names; `body` a string, sent as UTF-8 with its Content-Length) and resolves with
//   `{ status, headers, text }` (answer header names lower-cased, repeated ones joined by ", ")
//   once the whole answer is read, whatever its status: deciding what a status means is the
//   caller's. A body over `MAX_BODY` bytes (declared, or as it arrives) is `ERR_BAD_ANSWER`.
//   It rejects with the socket's error when no whole answer arrives (`code` ECONNREFUSED,
//   ECONNRESET, a TLS certificate code, ...), `ECONNRESET` when the connection closed before
//   the answer's end, `ERR_BAD_ANSWER` when the answer is not HTTP/1.1 this
//   client can read (a bad status line or header, a head over `MAX_HEAD` bytes, a bad
//   Content-Length or chunk), or an error named `TimeoutError` when the answer is not complete
//   within `timeoutMs`, or one named `AbortError` when `signal` (optional, an AbortSignal)
//   aborts first. A header name or value that cannot be sent (a CR, LF or other control
//   character) rejects with a TypeError coded `ERR_INVALID_CHAR`, before anything is sent.
// - Answers: a 1xx head (but 101) is skipped; the body is framed by `Transfer-Encoding:
//   chunked`, else `Content-Length`, else it runs to the connection's close (HEAD, 204 and 304
//   have none). A connection is reused after an answer unless the answer said `Connection:
//   close`, was HTTP/1.0, ran to the close, or was followed by bytes nobody asked for.
// - `stream(path, { headers, signal })` opens a long-lived GET (an event stream) and resolves
//   on its answer's head with `{ status, headers, body, text() }`: `body` is the answer as an
//   async iterable of Buffers, `text()` reads it whole. While more than `STREAM_HIGH_WATER`
//   bytes of it wait unread, the socket is paused (the server's writes then wait on TCP), so a
//   slow reader holds a bounded amount of it in memory. Aborting `signal` ends it (an error
//   named `AbortError`: the promise rejects, or the body's iteration does).
// - Neither retries, with one exception: a request that fails on a pooled connection before a
//   single byte of answer came back (the server closed it while it sat idle, and the close
//   crossed the request on the wire) is sent once more on a fresh connection, if resending is
//   safe: a GET (a stream is one), or a request carrying an `Idempotency-Key` (the server
//   applies a key once). An attempt that timed out or was aborted is never resent: its caller
//   has given up on it (and a frozen server would get it twice).
// - At most `MAX_CONNECTIONS` connections are open at once (streams included); a request
//   that finds none free waits, in order, for one (its time limit runs meanwhile), so a
//   burst of thousands of calls (the heartbeats of a fleet of sessions) stays within the
//   server's per-peer connection cap instead of being reset by it.
// - Connections are kept alive and reused, most recently used first; one left idle for
//   `IDLE_MS` is closed by the client (before the server's idle timeout, 60 s by default), and
//   an idle pooled connection never keeps the process alive (one in use does, as a pending
//   request would). `close()` closes the idle ones and every one that becomes idle
//   afterwards; what is in flight finishes.

const net = require('node:net');
const tls = require('node:tls');

/** How long an idle pooled connection is kept (undici's default; the server keeps 60 s). */
const IDLE_MS = 4000;
/** The largest answer head (status line and headers) read; more is a bad answer. */
const MAX_HEAD = 64 * 1024;
/** The largest chunk-size or trailer line of a chunked answer. */
const MAX_CHUNK_LINE = 4096;
/** The most header lines an answer head may have. */
const MAX_HEADERS = 100;
/**
 * The largest body of a request's answer. `klock serve`'s largest answers (a namespace's state,
 * an events batch of about 1 MiB) are far below it; a server (or something posing as one) that
 * declares or sends more cannot make the client hold it.
 */
const MAX_BODY = 64 * 1024 * 1024;
/**
 * Connections open at once per transport at most. `klock serve` accepts 256 per peer address
 * by default: this leaves room for several clients on one host.
 */
const MAX_CONNECTIONS = 32;
/** Unread bytes of a stream's body above which its socket is paused. */
const STREAM_HIGH_WATER = 1024 * 1024;
/** The read buffer of a plain connection (one per connection, reused by every read). */
const READ_BUFFER = 64 * 1024;

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** What a header value may not hold (as node:http: controls but horizontal tab). */
const INVALID_VALUE = /[^\t\x20-\x7e\x80-\xff]/;
const NOT_ASCII = /[\x80-\xff]/;
/** What a request path may not hold (as node:http: a space, a control, beyond Latin-1). */
const INVALID_PATH = /[^\u0021-\u00ff]/;
const STATUS_LINE = /^HTTP\/1\.([01]) (\d{3})(?: .*)?$/;

/** An answer whose connection closed before its end. */
function cutShort() {
  const error = new Error('the connection closed before the answer ended');
  error.code = 'ECONNRESET';
  return error;
}

function timeoutError(ms) {
  const error = new Error(`no answer within ${ms} ms`);
  error.name = 'TimeoutError';
  error.code = 'ETIMEDOUT';
  return error;
}

function abortError() {
  const error = new Error('the request was aborted');
  error.name = 'AbortError';
  error.code = 'ABORT_ERR';
  return error;
}

function badAnswer(why) {
  const error = new Error(`the answer is not HTTP/1.1 this client reads: ${why}`);
  error.code = 'ERR_BAD_ANSWER';
  return error;
}

function invalidHeader(name) {
  const error = new TypeError(`header ${JSON.stringify(name)}: its name or value holds a character HTTP cannot carry`);
  error.code = 'ERR_INVALID_CHAR';
  return error;
}

class Transport {
  /**
   * @param {URL} url the server's URL (http: or https:)
   * @param {{ ca?: Buffer, verify?: boolean }} [options] trust `ca` instead of the system's
   *   CAs; `verify: false` accepts any certificate
   */
  constructor(url, { ca, verify = true } = {}) {
    this._secure = url.protocol === 'https:';
    this._host = url.hostname.replace(/^\[(.*)\]$/, '$1'); // an IPv6 literal without brackets
    this._port = url.port === '' ? (this._secure ? 443 : 80) : Number(url.port);
    this._hostHeader = url.host;
    this._prefix = url.pathname.replace(/\/+$/, '');
    this._tls = {};
    if (this._secure) {
      if (net.isIP(this._host) === 0) this._tls.servername = this._host;
      if (ca !== undefined) this._tls.ca = ca;
      if (!verify) this._tls.rejectUnauthorized = false;
    }
    /** @type {Connection[]} idle connections, least recently used first */
    this._idle = [];
    /** Connections open (idle or in use). */
    this._open = 0;
    /** Exchanges waiting for a connection (all `MAX_CONNECTIONS` in use), oldest first. */
    this._queued = [];
    this._sweep = null;
    this._closed = false;
  }

  request(method, path, { headers, body, timeoutMs, signal }) {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) {
        reject(abortError());
        return;
      }
      const x = new Call(this, resolve, reject, signal);
      if (this._exchange(method, path, headers, body, x) === null) return;
      x.timer = setTimeout(callTimedOut, timeoutMs, x, timeoutMs);
      if (signal !== undefined) {
        x.onAbort = () => this._abandon(x, abortError());
        signal.addEventListener('abort', x.onAbort, { once: true });
      }
      this._send(x);
    });
  }

  stream(path, { headers, signal }) {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) {
        reject(abortError());
        return;
      }
      let body = null;
      const onAbort = () => this._abandon(x, abortError());
      const x = this._exchange('GET', path, headers, undefined, {
        onHead: (status, answerHeaders) => {
          const socket = () => x.connection?.socket;
          body = new Body(
            () => socket()?.pause(),
            () => socket()?.resume(),
          );
          resolve({ status, headers: answerHeaders, body, text: () => body.text() });
        },
        onData: (chunk) => body.push(Buffer.from(chunk)), // kept past the read: a plain socket reuses its buffer
        onEnd: () => {
          signal?.removeEventListener('abort', onAbort);
          body.end();
        },
        onError: (error) => {
          signal?.removeEventListener('abort', onAbort);
          if (body === null) reject(error);
          else body.fail(error);
        },
      });
      if (x === null) return;
      signal?.addEventListener('abort', onAbort, { once: true });
      this._send(x);
    });
  }

  /** Closes the idle pooled connections, and from now on every connection once it is idle. */
  close() {
    this._closed = true;
    this._dropIdle();
  }

  // ---- inside ------------------------------------------------------------------------------

  /**
   * One exchange: the request's bytes and the caller's callbacks (each called at most once,
   * but `onData`; `onError` after `onHead` for a failure mid-body). Null when the request
   * cannot be written (the caller's `onError` has it).
   */
  _exchange(method, path, headers, body, callbacks) {
    let wire = `${method} ${this._prefix}${path} HTTP/1.1\r\nhost: ${this._hostHeader}\r\n`;
    for (const name in headers) {
      const value = headers[name];
      if (value === undefined) continue;
      const text = String(value);
      if (!TOKEN.test(name) || INVALID_VALUE.test(text)) {
        callbacks.onError(invalidHeader(name));
        return null;
      }
      wire += `${name}: ${text}\r\n`;
    }
    if (INVALID_PATH.test(path)) {
      callbacks.onError(
        Object.assign(new TypeError(`path ${JSON.stringify(path)} holds a space or control character`), {
          code: 'ERR_UNESCAPED_CHARACTERS',
        }),
      );
      return null;
    }
    // Header bytes are Latin-1 (as node:http writes them), the body UTF-8.
    let bytes;
    if (body === undefined) bytes = NOT_ASCII.test(wire) ? Buffer.from(`${wire}\r\n`, 'latin1') : `${wire}\r\n`;
    else {
      wire += `content-length: ${Buffer.byteLength(body)}\r\n\r\n`;
      bytes = NOT_ASCII.test(wire) ? Buffer.concat([Buffer.from(wire, 'latin1'), Buffer.from(body)]) : wire + body;
    }
    const x = callbacks; // the caller's fresh object, made the exchange (no copy per request)
    x.bytes = bytes;
    x.head = method === 'HEAD';
    x.safe = method === 'GET' || headers['idempotency-key'] !== undefined;
    x.resent = false;
    x.done = false;
    x.connection = null;
    return x;
  }

  /**
   * Sends `x` on an idle connection (most recently used first), else on a new one, else (all
   * `MAX_CONNECTIONS` in use) once one is free.
   */
  _send(x) {
    let connection = this._idle.pop();
    while (connection !== undefined && connection.dead) connection = this._idle.pop();
    if (connection === undefined) {
      if (this._open >= MAX_CONNECTIONS) {
        this._queued.push(x);
        return;
      }
      this._open++;
      connection = new Connection(this);
    } else connection.socket.ref();
    x.connection = connection;
    connection.start(x);
  }

  /** The oldest waiting exchange its caller still awaits, or undefined. */
  _dequeue() {
    while (this._queued.length > 0) {
      const x = this._queued.shift();
      if (!x.done) return x;
    }
    return undefined;
  }

  /** A connection closed: a waiting exchange may open another. */
  _connectionClosed() {
    this._open--;
    const x = this._dequeue();
    if (x !== undefined) this._send(x);
  }

  /** `x` failed on its connection; `stale`: on a pooled one, before a byte of its answer. */
  _failed(x, error, stale) {
    if (x.done) return;
    if (stale && x.safe && !x.resent) {
      // The server closed the connection while it sat idle: so may it have the others.
      x.resent = true;
      this._dropIdle();
      this._send(x);
      return;
    }
    x.done = true;
    x.onError(error);
  }

  /** The caller gave up on `x` (its time limit, its signal): never resent. */
  _abandon(x, error) {
    if (x.done) return;
    x.done = true;
    x.connection?.destroy();
    x.onError(error);
  }

  /** A connection whose answer ended and which may carry another request. */
  _release(connection) {
    const next = this._dequeue();
    if (next !== undefined) {
      next.connection = connection;
      connection.start(next);
      return;
    }
    if (this._closed) {
      connection.destroy();
      return;
    }
    connection.socket.unref();
    connection.idleSince = Date.now();
    this._idle.push(connection);
    this._arm();
  }

  /** Closes the connections idle for `IDLE_MS`, on an unref'd timer while any is idle. */
  _arm() {
    if (this._sweep !== null) return;
    const next = this._idle.find((c) => !c.dead);
    if (next === undefined) return;
    const wait = Math.max(1, next.idleSince + IDLE_MS - Date.now());
    this._sweep = setTimeout(() => {
      this._sweep = null;
      const now = Date.now();
      while (this._idle.length > 0 && (this._idle[0].dead || now - this._idle[0].idleSince >= IDLE_MS)) {
        this._idle.shift().destroy();
      }
      this._arm();
    }, wait);
    this._sweep.unref();
  }

  /** Closes the idle pooled connections. */
  _dropIdle() {
    for (const connection of this._idle.splice(0)) connection.destroy();
  }
}

/**
 * A request's exchange: its callbacks as methods and its state as fields set up front (one
 * object per request, of one shape, instead of a closure per callback: issue 27, Node at 16
 * client processes, where a process runs these paths mostly before V8 optimizes them).
 */
class Call {
  constructor(transport, resolve, reject, signal) {
    // The exchange's fields (`_exchange` and the connection set them).
    this.bytes = null;
    this.head = false;
    this.safe = false;
    this.resent = false;
    this.done = false;
    this.connection = null;
    // The caller's.
    this.transport = transport;
    this.resolve = resolve;
    this.reject = reject;
    this.signal = signal;
    this.onAbort = null;
    this.timer = undefined;
    this.answer = null; // { status, headers }
    this.chunks = [];
    this.size = 0;
  }

  onHead(status, headers) {
    this.answer = { status, headers };
    const declared = Number(headers['content-length'] ?? 0);
    if (declared > MAX_BODY) this.transport._abandon(this, badAnswer(`a body of ${declared} bytes, over ${MAX_BODY}`));
  }

  onData(chunk) {
    this.size += chunk.length;
    if (this.size > MAX_BODY) this.transport._abandon(this, badAnswer(`a body of over ${MAX_BODY} bytes`));
    else this.chunks.push(chunk);
  }

  onEnd() {
    this._settle();
    const chunks = this.chunks;
    const text = chunks.length === 1 ? chunks[0].toString('utf8') : Buffer.concat(chunks).toString('utf8');
    this.resolve({ status: this.answer.status, headers: this.answer.headers, text });
  }

  onError(error) {
    this._settle();
    this.reject(error);
  }

  _settle() {
    clearTimeout(this.timer);
    if (this.onAbort !== null) this.signal.removeEventListener('abort', this.onAbort);
  }
}

/** A request's time limit ran out (`setTimeout`'s callback, no closure per request). */
function callTimedOut(x, timeoutMs) {
  x.transport._abandon(x, timeoutError(timeoutMs));
}

/** One connection: writes a request, parses its answer, one at a time. */
class Connection {
  constructor(transport) {
    this.transport = transport;
    const t = transport;
    // Plain connections read into one buffer per connection (`onread`): the socket's readable
    // stream (a push, a chunk and a 'data' event per read) is skipped, and what is read is
    // copied out only when an answer is not whole yet. TLS sockets read through 'data'.
    this.socket = t._secure
      ? tls.connect({ host: t._host, port: t._port, ...t._tls })
      : net.connect({
          host: t._host,
          port: t._port,
          onread: { buffer: Buffer.allocUnsafe(READ_BUFFER), callback: (n, buffer) => this._read(n, buffer) },
        });
    this.socket.setNoDelay(true);
    /** Answers read whole on this connection (a pooled one has one or more). */
    this.answered = 0;
    /** @type {object | null} the exchange in flight */
    this.exchange = null;
    this.dead = false;
    this.idleSince = 0;
    // The answer's parse: what is read and not yet taken, where it stands ('head', 'length',
    // 'close', 'size', 'chunk', 'chunk-end', 'trailer', 'done'), the bytes left of a body or
    // chunk, whether a byte of it came, whether the connection may carry another request.
    this.buffer = null;
    this.state = 'head';
    this.left = 0;
    this.received = false;
    this.reuse = false;
    if (t._secure) this.socket.on('data', (chunk) => this._data(chunk));
    this.socket.on('end', () => this._end());
    this.socket.on('error', (error) => this._lost(error));
    this.socket.on('close', () => {
      this._lost(cutShort());
      transport._connectionClosed();
    });
  }

  start(x) {
    this.exchange = x;
    this.received = false;
    this.state = 'head';
    this.buffer = null;
    this.socket.write(x.bytes);
  }

  destroy() {
    this.dead = true;
    this.exchange = null;
    this.socket.destroy();
  }

  /** The connection failed or closed: its exchange (if any) fails with `error`. */
  _lost(error) {
    const x = this.exchange;
    this.dead = true;
    this.exchange = null;
    this.socket.destroy();
    if (x !== null) this.transport._failed(x, error, this.answered > 0 && !this.received);
  }

  /** The server closed its side: the end of an answer read to the close, else a failure. */
  _end() {
    if (this.exchange !== null && this.state === 'close') {
      const x = this.exchange;
      this.exchange = null;
      this.dead = true;
      this.socket.destroy();
      x.done = true;
      x.onEnd();
      return;
    }
    this._lost(cutShort());
  }

  /** `onread`'s callback: `n` bytes read into the connection's `buffer`, reused by the next read. */
  _read(n, buffer) {
    this._data(buffer.subarray(0, n));
    // What the parse keeps (an answer not whole yet) must outlive this read's bytes.
    if (this.buffer !== null && this.buffer.buffer === buffer.buffer) this.buffer = Buffer.from(this.buffer);
    const x = this.exchange;
    if (x !== null && x.chunks !== undefined) {
      const chunks = x.chunks;
      for (let i = 0; i < chunks.length; i++) {
        if (chunks[i].buffer === buffer.buffer) chunks[i] = Buffer.from(chunks[i]);
      }
    }
  }

  _data(chunk) {
    const x = this.exchange;
    if (x === null) {
      this.destroy(); // bytes nobody asked for: the connection is not to be trusted
      return;
    }
    this.received = true;
    this.buffer = this.buffer === null ? chunk : Buffer.concat([this.buffer, chunk]);
    try {
      this._parse(x);
    } catch (error) {
      if (error.code !== 'ERR_BAD_ANSWER') throw error;
      this._lost(error);
    }
  }

  /** Reads what the buffer holds of `x`'s answer. */
  _parse(x) {
    for (;;) {
      if (this.exchange !== x) return; // the caller gave up on it meanwhile
      const buffer = this.buffer;
      if (buffer === null || buffer.length === 0) {
        if (this.state === 'done') this._finish(x);
        return;
      }
      switch (this.state) {
        case 'head': {
          const end = buffer.indexOf('\r\n\r\n', 0, 'latin1');
          if (end < 0) {
            if (buffer.length > MAX_HEAD) throw badAnswer(`a head over ${MAX_HEAD} bytes`);
            return;
          }
          if (end > MAX_HEAD) throw badAnswer(`a head over ${MAX_HEAD} bytes`);
          this.buffer = buffer.subarray(end + 4);
          this._head(x, buffer.toString('latin1', 0, end));
          break;
        }
        case 'length': {
          const n = Math.min(this.left, buffer.length);
          x.onData(buffer.subarray(0, n));
          this.buffer = buffer.subarray(n);
          this.left -= n;
          if (this.left === 0) this.state = 'done';
          break;
        }
        case 'close':
          x.onData(buffer);
          this.buffer = null;
          break;
        case 'size': {
          const line = this._line(buffer);
          if (line === null) return;
          const size = line.split(';', 1)[0].trim();
          if (!/^[0-9a-fA-F]{1,12}$/.test(size)) throw badAnswer(`a chunk size ${JSON.stringify(size.slice(0, 40))}`);
          this.left = parseInt(size, 16);
          this.state = this.left === 0 ? 'trailer' : 'chunk';
          break;
        }
        case 'chunk': {
          const n = Math.min(this.left, buffer.length);
          x.onData(buffer.subarray(0, n));
          this.buffer = buffer.subarray(n);
          this.left -= n;
          if (this.left === 0) this.state = 'chunk-end';
          break;
        }
        case 'chunk-end': {
          const line = this._line(buffer);
          if (line === null) return;
          if (line !== '') throw badAnswer('a chunk longer than its size');
          this.state = 'size';
          break;
        }
        case 'trailer': {
          const line = this._line(buffer);
          if (line === null) return;
          if (line === '') this.state = 'done';
          break;
        }
        case 'done':
          // More than the answer: bytes nobody asked for.
          this.reuse = false;
          this.buffer = null;
          this._finish(x);
          return;
        default:
          return;
      }
    }
  }

  /** A CRLF-ended line at the buffer's start (taken off it), or null until it is whole. */
  _line(buffer) {
    const end = buffer.indexOf('\r\n', 0, 'latin1');
    if (end < 0) {
      if (buffer.length > MAX_CHUNK_LINE) throw badAnswer(`a chunk line over ${MAX_CHUNK_LINE} bytes`);
      return null;
    }
    if (end > MAX_CHUNK_LINE) throw badAnswer(`a chunk line over ${MAX_CHUNK_LINE} bytes`);
    this.buffer = buffer.subarray(end + 2);
    return buffer.toString('latin1', 0, end);
  }

  /** An answer head: a 1xx is skipped, else the body's framing is decided and `onHead` called. */
  _head(x, text) {
    const lines = text.split('\r\n');
    const status = STATUS_LINE.exec(lines[0]);
    if (status === null) throw badAnswer(`a status line ${JSON.stringify(lines[0].slice(0, 80))}`);
    const code = Number(status[2]);
    if (code === 101) throw badAnswer('101 Switching Protocols (no upgrade was asked)');
    if (code < 200 && code >= 100) return; // an interim answer: the real one follows
    if (code < 100) throw badAnswer(`status ${code}`);
    if (lines.length > MAX_HEADERS + 1) throw badAnswer(`over ${MAX_HEADERS} header lines`);
    const headers = {};
    for (let i = 1; i < lines.length; i++) {
      const line = lines[i];
      const colon = line.indexOf(':');
      const name = colon > 0 ? line.slice(0, colon) : '';
      if (!TOKEN.test(name)) throw badAnswer(`a header line ${JSON.stringify(line.slice(0, 80))}`);
      const key = name.toLowerCase();
      const value = line.slice(colon + 1).trim();
      headers[key] = headers[key] === undefined ? value : `${headers[key]}, ${value}`;
    }
    const connection = (headers.connection ?? '').toLowerCase();
    this.reuse = status[1] === '1' && !/(^|,)\s*close\s*(,|$)/.test(connection);
    const coding = headers['transfer-encoding'];
    const length = headers['content-length'];
    if (x.head || code === 204 || code === 304) this.state = 'done';
    else if (coding !== undefined) {
      // Both framings at once: the chunks frame the body, and the connection, which a
      // smuggling middlebox may read otherwise, is not reused (RFC 9112 §6.3).
      if (length !== undefined) this.reuse = false;
      if (/(^|,)\s*chunked\s*$/i.test(coding)) this.state = 'size';
      else {
        this.state = 'close';
        this.reuse = false;
      }
    } else if (length !== undefined) {
      // Repeated, the values must agree (RFC 9110 §8.6).
      const values = length.includes(',') ? new Set(length.split(',').map((v) => v.trim())) : null;
      const only = values === null ? length : values.size === 1 ? [...values][0] : '';
      if (!/^\d{1,15}$/.test(only)) throw badAnswer(`a Content-Length ${JSON.stringify(length.slice(0, 40))}`);
      this.left = Number(only);
      this.state = this.left === 0 ? 'done' : 'length';
    } else {
      this.state = 'close';
      this.reuse = false;
    }
    x.onHead(code, headers);
  }

  /** The answer of `x` is whole: the caller has it; the connection is pooled or closed. */
  _finish(x) {
    this.exchange = null;
    this.answered++;
    x.done = true;
    if (this.reuse && !this.dead && (this.buffer === null || this.buffer.length === 0)) {
      this.buffer = null;
      this.transport._release(this);
    } else this.destroy();
    x.onEnd();
  }
}

/** A stream's body: an async iterable of the Buffers as they arrive, until its end or failure. */
class Body {
  /** `pause` and `resume` stop and restart the socket's reads (backpressure). */
  constructor(pause, resume) {
    this._chunks = [];
    this._unread = 0;
    this._paused = false;
    this._pause = pause;
    this._resume = resume;
    this._ended = false;
    this._error = null;
    this._wake = null;
  }

  push(chunk) {
    this._chunks.push(chunk);
    this._unread += chunk.length;
    if (!this._paused && this._unread > STREAM_HIGH_WATER) {
      this._paused = true;
      this._pause();
    }
    this._notify();
  }

  /** The next unread chunk, resuming the socket once what waits is under the high water. */
  _take() {
    const chunk = this._chunks.shift();
    this._unread -= chunk.length;
    if (this._paused && this._unread <= STREAM_HIGH_WATER) {
      this._paused = false;
      this._resume();
    }
    return chunk;
  }

  end() {
    this._ended = true;
    this._notify();
  }

  fail(error) {
    this._error = error;
    this._notify();
  }

  _notify() {
    const wake = this._wake;
    this._wake = null;
    wake?.();
  }

  async *[Symbol.asyncIterator]() {
    for (;;) {
      if (this._chunks.length > 0) yield this._take();
      else if (this._error !== null) throw this._error;
      else if (this._ended) return;
      else await new Promise((resolve) => (this._wake = resolve));
    }
  }

  async text() {
    const chunks = [];
    for await (const chunk of this) chunks.push(chunk);
    return Buffer.concat(chunks).toString('utf8');
  }
}

module.exports = { Transport, MAX_BODY, MAX_CONNECTIONS, STREAM_HIGH_WATER };
