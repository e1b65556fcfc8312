'use strict';
// Resource names for files: `file(path, { root })` turns a file-system path into `FILE:/path`.
//
// Contract (docs/SPEC.md §3; docs/DECISIONS.md, "Issue 25: resource names and client options";
// the same as Python's `klock.file` and `klock exec --root`): a file's resource is `FILE:`
// followed by its path relative to a root every agent agrees on (the repository's top),
// normalised, with a leading `/` and `/` between segments.
// - The root is `options.root`, else `$KLOCK_ROOT` (which `klock exec --root DIR` sets for its
//   command); it must be an existing directory. Without one it is an error: a default (the
//   current directory) would give two agents started in different directories two names.
// - A relative path is relative to the current directory, as for `fs.open`.
// - Symbolic links are resolved, in the path and in the root, for the parts that exist (a file
//   about to be created is named through its existing parent), so two agents reaching one file
//   through different links get one name.
// - A path that resolves outside the root (`..` past it, an absolute path elsewhere, a link
//   leading out) is a RangeError naming both.
// - Nothing is folded: case and Unicode form stay as written on disk (the kernel compares
//   bytes). A character the kernel refuses in resources (Unicode Cc, Cf, Zl, Zp) is a
//   RangeError.

const fs = require('node:fs');
const path = require('node:path');

const UNPRINTABLE = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/u;

function typeError(message) {
  const error = new TypeError(message);
  error.code = 'ERR_INVALID_ARG_TYPE';
  return error;
}

/** `p` (absolute, not normalised) with the links of its longest existing prefix resolved
 * (`..` there is the parent of what a link leads to, as for the file system); the rest,
 * which does not exist yet, is appended as names, `.` dropped and `..` taking off the last. */
function resolve(p) {
  const rest = [];
  let existing = p;
  for (;;) {
    try {
      let out = fs.realpathSync.native(existing);
      for (const part of rest.reverse()) {
        if (part === '..') out = path.dirname(out);
        else if (part !== '.' && part !== '') out = path.join(out, part);
      }
      return out;
    } catch (error) {
      if (error.code !== 'ENOENT' && error.code !== 'ENOTDIR') throw error;
      const cut = existing.lastIndexOf(path.sep);
      if (cut <= 0 && existing.length <= 1) throw error;
      rest.push(existing.slice(cut + 1));
      existing = cut <= 0 ? path.sep : existing.slice(0, cut);
    }
  }
}

function rootOf(root) {
  if (root === undefined) {
    root = process.env.KLOCK_ROOT || undefined;
    if (root === undefined) {
      throw new RangeError('file() needs the root the agents share: pass { root: DIR } or set KLOCK_ROOT');
    }
  }
  if (typeof root !== 'string') throw typeError('`options.root` must be a string path');
  let real;
  try {
    real = fs.realpathSync.native(root);
  } catch {
    real = undefined;
  }
  if (real === undefined || !fs.statSync(real).isDirectory()) {
    throw new RangeError(`root ${JSON.stringify(root)} is not an existing directory`);
  }
  return real;
}

/**
 * The resource name of the file at `p`: `FILE:/` + its path under the root, e.g.
 * `file('src/auth.ts', { root: '/repo' })` run in `/repo` is `'FILE:/src/auth.ts'`.
 * @param {string} p a file-system path, relative to the current directory or absolute
 * @param {{ root?: string }} [options] the shared root (default `$KLOCK_ROOT`)
 * @returns {string}
 */
function file(p, options = {}) {
  if (typeof p !== 'string') throw typeError('`path` must be a string');
  if (p === '') throw new RangeError('path is empty');
  if (options === null || typeof options !== 'object') throw typeError('`options` must be an object');
  for (const key of Object.keys(options)) {
    if (key !== 'root') throw typeError(`unknown option ${JSON.stringify(key)} (known: root)`);
  }
  const base = rootOf(options.root);
  // Not path.resolve: it would take `link/..` lexically, where the file system goes to the
  // parent of the link's target.
  const full = resolve(path.isAbsolute(p) ? p : `${process.cwd()}${path.sep}${p}`);
  const rel = path.relative(base, full);
  if (rel === '..' || rel.startsWith(`..${path.sep}`) || path.isAbsolute(rel)) {
    throw new RangeError(
      `${JSON.stringify(p)} resolves to ${JSON.stringify(full)}, outside the root ${JSON.stringify(base)}: it has no resource name under this root`,
    );
  }
  const name = `FILE:/${rel
    .split(path.sep)
    .filter((s) => s !== '')
    .join('/')}`;
  const bad = UNPRINTABLE.exec(name);
  if (bad !== null) {
    const code = bad[0].codePointAt(0).toString(16).toUpperCase().padStart(4, '0');
    throw new RangeError(
      `${JSON.stringify(p)} holds the unprintable character U+${code}, which a resource cannot hold (docs/SPEC.md §3)`,
    );
  }
  return name;
}

module.exports = { file };
