#!/usr/bin/env bash
# Prints the working tree's state relative to git: every modified, added, deleted or untracked
# (not ignored) path with a hash of its content. scripts/test.sh compares the output before
# and after the run, so a test or build that writes into the source tree fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
git status --porcelain=v1 --untracked-files=all | while IFS= read -r line; do
  path=${line:3}
  path=${path#*-> }
  if [ -f "$path" ]; then
    printf '%s %s\n' "$line" "$(git hash-object -- "$path")"
  else
    printf '%s (absent)\n' "$line"
  fi
done
