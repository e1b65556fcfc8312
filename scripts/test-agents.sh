#!/usr/bin/env bash
# The MCP sidecar (`klock mcp`) driven by the official Python MCP client against a real
# `klock serve`: cli/tests/mcp_client.py. Installs the pinned client in target/agents-venv
# when it is missing (idempotent). `klock exec`, `klock status` and `klock reconcile` are
# tested by cargo nextest (cli/tests/exec.rs, cli/tests/overview.rs).
set -euo pipefail
cd "$(dirname "$0")/.."

mcp_version=2.3.0
venv=target/agents-venv
installed=$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("mcp"))' 2>/dev/null || true)
if [ "$installed" != "$mcp_version" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "mcp==$mcp_version"
fi

klock=$(bash scripts/klock-bin.sh | tail -n1)
"$venv/bin/python" cli/tests/mcp_client.py "$klock"
