'use strict';
// The fence helper for the protected side: a file that accepts a write only with a fence at
// least as large as the largest it has accepted, so a holder that paused past its lease's
// expiry (and lost it to a newer holder with a larger fence) cannot overwrite newer data.
//
// Contract (the same protocol as python `klock.fenced_write`; the two interoperate):
// - Beside the file, `<path>.fence` holds the largest fence accepted for it (ASCII decimal).
// - Under an exclusive flock(2) on `<path>.fence` (opened or created with mode 0644; the same
//   lock Python's `fcntl.flock` takes, through the addon's `flock`): read the stored fence
//   (missing or empty = none); if `fence < stored`, unlock and throw `StaleFence` naming the
//   path, the fence given and the one stored. Otherwise write the new fence into
//   `<path>.fence` (truncate, write, fsync) FIRST, then the data to a temporary file in the
//   same directory, fsync it, rename it over `<path>` (and fsync the directory), then unlock.
//   Equal fences are accepted (one holder may write twice).
// - Why this order: once the fence file says N, no writer with a fence below N gets in, even
//   if this writer dies before its rename; the rename is atomic, so `<path>` is always a whole
//   old or a whole new content, never a torn one. The OS drops the flock when the process
//   dies, so a killed writer never blocks the others.
// - `fencedWrite` blocks the thread while it waits for the lock (another writer holds it only
//   for one write); `fencedWriteAsync` polls the lock without blocking the event loop.

const fs = require('node:fs');
const path = require('node:path');
const { randomBytes } = require('node:crypto');
const { flock, KlockError } = require('./index.js');

/** A write refused because a larger fence was already accepted for the file. */
class StaleFence extends KlockError {
  constructor(file, fence, stored) {
    super(
      `fenced write to ${file} refused: fence ${fence} is smaller than the fence ${stored} already accepted ` +
        '(a newer lease holder wrote it; this holder lost its lease)',
      0,
      'STALE_FENCE',
    );
    this.path = file;
    this.fence = fence;
    this.stored = stored;
  }
}

/** How long `fencedWriteAsync` sleeps between tries of a held lock. */
const LOCK_POLL_MS = 2;

function checkArgs(file, data, fence) {
  if (typeof file !== 'string' || file === '') {
    const error = new TypeError('`path` must be a non-empty string');
    error.code = 'ERR_INVALID_ARG_TYPE';
    throw error;
  }
  if (typeof data !== 'string' && !ArrayBuffer.isView(data)) {
    const error = new TypeError('`data` must be a string, a Buffer or a typed array');
    error.code = 'ERR_INVALID_ARG_TYPE';
    throw error;
  }
  if (typeof fence !== 'number' || !Number.isSafeInteger(fence) || fence < 0) {
    const error = new RangeError(`\`fence\` must be an integer from 0 to 2^53 - 1 (a lease's fence), got ${fence}`);
    error.code = 'ERR_OUT_OF_RANGE';
    throw error;
  }
}

/** The fence stored in the open fence file (`null` when empty); a damaged file is an error. */
function readStored(fd, fencePath) {
  const text = fs.readFileSync(fd, 'latin1').trim();
  if (text === '') return null;
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(Number(text))) {
    throw new Error(
      `${fencePath} does not hold a fence (ASCII decimal), it holds ${JSON.stringify(text.slice(0, 40))}`,
    );
  }
  return Number(text);
}

/** Everything after the lock is had: check, record the fence, write and rename the data. */
function writeLocked(fd, file, fencePath, data, fence) {
  const stored = readStored(fd, fencePath);
  if (stored !== null && fence < stored) throw new StaleFence(file, fence, stored);
  fs.ftruncateSync(fd, 0);
  fs.writeSync(fd, String(fence), 0, 'latin1');
  fs.fsyncSync(fd);
  const tmp = path.join(
    path.dirname(file),
    `.${path.basename(file)}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`,
  );
  try {
    const out = fs.openSync(tmp, 'wx', 0o644);
    try {
      fs.writeFileSync(out, data);
      fs.fsyncSync(out);
    } finally {
      fs.closeSync(out);
    }
    fs.renameSync(tmp, file);
  } catch (e) {
    fs.rmSync(tmp, { force: true });
    throw e;
  }
  // The rename itself made durable (as the Python helper does).
  const dir = fs.openSync(path.dirname(path.resolve(file)), 'r');
  try {
    fs.fsyncSync(dir);
  } finally {
    fs.closeSync(dir);
  }
}

/**
 * Writes `data` to `path` atomically if `fence` is at least the largest fence accepted for it
 * (kept in `<path>.fence`); throws `StaleFence` otherwise, leaving the file unchanged.
 * Blocks the thread while another writer holds the file's lock.
 * @param {string} file
 * @param {string | ArrayBufferView} data
 * @param {number} fence the lease's fence (`lease.fence`)
 */
function fencedWrite(file, data, fence) {
  checkArgs(file, data, fence);
  const fencePath = `${file}.fence`;
  const fd = fs.openSync(fencePath, fs.constants.O_RDWR | fs.constants.O_CREAT, 0o644);
  try {
    flock(fd, 'exclusive');
    writeLocked(fd, file, fencePath, data, fence);
  } finally {
    fs.closeSync(fd); // releases the flock
  }
}

/** `fencedWrite` without blocking the event loop while the lock is held elsewhere. */
async function fencedWriteAsync(file, data, fence) {
  checkArgs(file, data, fence);
  const fencePath = `${file}.fence`;
  const fd = fs.openSync(fencePath, fs.constants.O_RDWR | fs.constants.O_CREAT, 0o644);
  try {
    while (!flock(fd, 'try-exclusive')) await new Promise((resolve) => setTimeout(resolve, LOCK_POLL_MS));
    writeLocked(fd, file, fencePath, data, fence);
  } finally {
    fs.closeSync(fd);
  }
}

module.exports = { fencedWrite, fencedWriteAsync, StaleFence };
