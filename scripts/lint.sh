#!/usr/bin/env bash
# Lints and format-checks the project's Python and JavaScript, installing the pinned tools
# when missing (idempotent): ruff (Python: `ruff check`, `ruff format --check`) in
# target/lint-venv, and ESLint and Prettier (JavaScript) from scripts/lint/package-lock.json.
# Fix formatting with: target/lint-venv/bin/ruff format python/ and
# scripts/lint/node_modules/.bin/prettier --config scripts/lint/prettier.config.mjs --write <files>.
set -euo pipefail
cd "$(dirname "$0")/.."

ruff_version=0.17.6
venv=target/lint-venv
if ! "$venv/bin/ruff" --version 2>/dev/null | grep -qx "ruff $ruff_version"; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "ruff==$ruff_version"
fi
if [ ! -x scripts/lint/node_modules/.bin/eslint ] || [ ! -x scripts/lint/node_modules/.bin/prettier ]; then
  (cd scripts/lint && npm ci --no-audit --no-fund --loglevel=error)
fi

py_paths=(python cli/tests examples)
echo "ruff check, ruff format --check (${py_paths[*]})"
"$venv/bin/ruff" check --config python/ruff.toml "${py_paths[@]}"
"$venv/bin/ruff" format --check --config python/ruff.toml "${py_paths[@]}"

js_dirs=(node dashboard examples bindings/wasm bindings/js-api bindings/js-replay scripts/lint)
echo "eslint (${js_dirs[*]})"
scripts/lint/node_modules/.bin/eslint --config scripts/lint/eslint.config.mjs --max-warnings 0 "${js_dirs[@]}"
echo "prettier --check (${js_dirs[*]})"
scripts/lint/node_modules/.bin/prettier --config scripts/lint/prettier.config.mjs \
  --ignore-path scripts/lint/.prettierignore --check "${js_dirs[@]}"
