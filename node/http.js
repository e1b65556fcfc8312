'use strict';
// The HTTP transport of the remote backend (remote.js): `node:http` / `node:https` with one
// keep-alive Agent per client, so a call costs what the wire costs (the built-in `fetch` spent
// 3-4x the CPU per request on its WHATWG Request/Response/streams layers; docs/DECISIONS.md).
//
// Contract
// - `new Transport(url, { ca, verify })`: `url` an http:// or https:// URL (a path in it
//   prefixes every request's); `ca` a PEM bundle to trust instead of the system's, `verify`
//   false to accept any certificate (https only; as `tls.connect`'s `ca`/`rejectUnauthorized`).
// - `request(method, path, { headers, body, timeoutMs })` sends one request and resolves with
//   `{ status, headers, text }` (headers lower-cased, as Node gives them) once the whole answer
//   is read, whatever its status: deciding what a status means is the caller's. It rejects with
//   the Node error when no whole answer arrives (`code` ECONNREFUSED, ECONNRESET, a TLS
//   certificate code, ...), or with an error named `TimeoutError` when the answer is not
//   complete within `timeoutMs`.
// - `stream(path, { headers, signal })` opens a long-lived GET (an event stream) and resolves
//   on its answer's head with `{ status, headers, body, text() }`: `body` is the answer as an
//   async iterable of Buffers, `text()` reads it whole. Aborting `signal` ends it (the body's
//   iteration rejects).
// - Neither retries, with one exception: a request that fails on a pooled connection before a
//   single byte of answer came back (the server closed it while it sat idle, and the close
//   crossed the request on the wire) is sent once more on a fresh connection, if resending is
//   safe: a GET (a stream is one), or a request carrying an `Idempotency-Key` (the server
//   applies a key once). An attempt that timed out or was aborted is never resent: its caller
//   has given up on it (and a frozen server would get it twice).
// - Connections are kept alive and reused, most recently used first; one left idle for
//   `IDLE_MS` is closed by the client (before the server's idle timeout, 60 s by default), and
//   an idle pooled connection never keeps the process alive. `close()` closes the idle ones
//   and every one that becomes idle afterwards; what is in flight finishes.

const http = require('node:http');
const https = require('node:https');

/** How long an idle pooled connection is kept (undici's default; the server keeps 60 s). */
const IDLE_MS = 4000;

/** A keep-alive Agent that stops pooling once its client is closed. */
function pooling(Agent, options) {
  class Pool extends Agent {
    keepSocketAlive(socket) {
      return !this.closed && super.keepSocketAlive(socket);
    }
  }
  const pool = new Pool({ keepAlive: true, timeout: IDLE_MS, ...options });
  pool.closed = false;
  return pool;
}

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

class Transport {
  /**
   * @param {URL} url the server's URL (http: or https:)
   * @param {{ ca?: Buffer, verify?: boolean }} [tls] trust `ca` instead of the system's CAs;
   *   `verify: false` accepts any certificate
   */
  constructor(url, { ca, verify = true } = {}) {
    const secure = url.protocol === 'https:';
    this._module = secure ? https : http;
    const tls = {};
    if (secure && ca !== undefined) tls.ca = ca;
    if (secure && !verify) tls.rejectUnauthorized = false;
    this._agent = pooling(secure ? https.Agent : http.Agent, tls);
    this._host = url.hostname.replace(/^\[(.*)\]$/, '$1'); // an IPv6 literal without brackets
    this._port = url.port === '' ? (secure ? 443 : 80) : Number(url.port);
    this._prefix = url.pathname.replace(/\/+$/, '');
  }

  request(method, path, { headers, body, timeoutMs }) {
    const safe = method === 'GET' || headers['idempotency-key'] !== undefined;
    const sent = body === undefined ? headers : { ...headers, 'content-length': Buffer.byteLength(body) };
    return new Promise((resolve, reject) => {
      let settled = false;
      let current = null;
      const settle = (error, answer) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        if (error === null) resolve(answer);
        else reject(error);
      };
      const timer = setTimeout(() => {
        const error = timeoutError(timeoutMs);
        settle(error);
        current?.destroy(error);
      }, timeoutMs);
      const onResponse = (res) => {
        res.setEncoding('utf8');
        let text = '';
        res.on('data', (chunk) => (text += chunk));
        res.once('end', () => settle(null, { status: res.statusCode, headers: res.headers, text }));
        res.once('error', settle);
        res.once('close', () => {
          if (!res.complete) settle(cutShort());
        });
      };
      try {
        this._exchange({ method, path, headers: sent, body, safe }, (req) => (current = req), onResponse, settle);
      } catch (error) {
        settle(error); // a header Node refuses to send (ERR_INVALID_CHAR), thrown at once
      }
    });
  }

  stream(path, { headers, signal }) {
    return new Promise((resolve, reject) => {
      const onResponse = (res) => {
        const text = async () => {
          let all = '';
          for await (const chunk of res) all += chunk;
          return all;
        };
        resolve({ status: res.statusCode, headers: res.headers, body: res, text });
      };
      this._exchange({ method: 'GET', path, headers, signal, safe: true }, () => {}, onResponse, reject);
    });
  }

  /**
   * Sends a request (`onRequest(req)` with each one sent), then `onResponse(res)` on its
   * answer's head, or `onError(error)` once. A failure on a pooled connection before any byte
   * of answer is sent again, once, on a fresh connection when `safe`.
   */
  _exchange({ method, path, headers, body, signal, safe }, onRequest, onResponse, onError) {
    const send = (resent) => {
      const req = this._module.request({
        host: this._host,
        port: this._port,
        path: this._prefix + path,
        method,
        headers,
        agent: this._agent,
        signal,
      });
      onRequest(req);
      let readBefore = -1;
      let done = false; // answered, failed or replaced: later errors of `req` are not news
      req.once('socket', (socket) => {
        readBefore = socket.bytesRead;
      });
      req.once('response', (res) => {
        done = true;
        onResponse(res);
      });
      // Stays on after the head: a late failure reaches the caller through the answer's body.
      req.on('error', (error) => {
        if (done) return;
        done = true;
        // A pooled connection the server had closed: nothing of the request was answered.
        const stale = req.reusedSocket && readBefore >= 0 && req.socket?.bytesRead === readBefore;
        if (stale && safe && !resent && error.name !== 'TimeoutError' && error.name !== 'AbortError') {
          this._dropIdle();
          send(true);
        } else onError(error);
      });
      req.end(body);
    };
    send(false);
  }

  /** Closes the idle pooled connections, and from now on every connection once it is idle. */
  close() {
    this._agent.closed = true;
    this._dropIdle();
  }

  /** Closes the idle pooled connections (one was found closed by the server: so may the others). */
  _dropIdle() {
    for (const sockets of Object.values(this._agent.freeSockets)) {
      for (const socket of sockets) socket.destroy();
    }
  }
}

module.exports = { Transport };
