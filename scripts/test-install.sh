#!/usr/bin/env bash
# The install paths a user of each package follows, from a clean checkout, and everything the
# READMEs show, run as written against what was installed:
#   1. a clean checkout: the tree's tracked and not-ignored files copied (mtimes kept, so
#      the builds below stay incremental) to target/install/checkout, without target/,
#      .venv, node_modules or built addons;
#   2. `cargo install --locked --path cli` from it into target/install/root; the installed
#      `klock` must answer;
#   3. `pip install ./python` into a clean venv; a wheel from maturin with its own manylinux
#      compliance check (the tag the index accepts) and the sdist, both carrying LICENSE;
#      the wheel installed into a second clean venv;
#   4. `npm install ./node` in a scratch npm project: first without cargo on PATH (it must
#      fail with the message naming the platform and what to run), then with it (the
#      package's install script builds the addon); `npm pack` carries LICENSE and the addon;
#   5. every fenced block of the READMEs (scripts/readme-snippets.py) against those installs;
#   6. the API reference: pdoc (Python), TypeDoc (Node), `cargo doc --no-deps` of the public
#      crate with warnings denied, under target/api/.
# Every build goes to target/install/cargo (CARGO_TARGET_DIR), so a rerun rebuilds only what
# changed; tools (maturin, pdoc, TypeDoc) are installed once, from the registries, under
# target/install/tools. Nothing is written into the source tree.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
work=$root/target/install
checkout=$work/checkout
export CARGO_TARGET_DIR=$work/cargo
mkdir -p "$work/tools"

step() { printf '\n==> [%4d s] %s\n' "$SECONDS" "$*"; }
fail() { echo "test-install: $*" >&2; exit 1; }
for tool in cargo python3 node npm git tar; do
  command -v "$tool" >/dev/null || fail "$tool is not installed"
done

step "LICENSE: the repository's, copied unchanged into every published package"
for copy in core/LICENSE python/LICENSE node/LICENSE; do
  cmp -s LICENSE "$copy" || fail "$copy differs from LICENSE (copy LICENSE over it)"
done
grep -q "Apache License" LICENSE && grep -q "Version 2.0, January 2004" LICENSE || fail "LICENSE is not the Apache-2.0 text"
cargo package --list --allow-dirty --locked -p klock-core | grep -qx LICENSE || fail "the klock-core crate would not carry LICENSE"
echo "same text in core/, python/, node/; the klock-core crate carries it"

step "a clean checkout of the tree at $checkout"
rm -rf "$checkout"
mkdir -p "$checkout"
# --ignore-failed-read: a tracked file deleted in the working tree is absent from the copy too.
git ls-files -z --cached --others --exclude-standard \
  | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C "$checkout"
echo "$(git ls-files --cached --others --exclude-standard | wc -l) files"

step "cargo install --locked --path cli"
(cd "$checkout" && cargo install --quiet --locked --path cli --root "$work/root")
klock=$work/root/bin/klock
answer=$("$klock" --version)
echo "$answer"
version=$(cargo metadata --no-deps --format-version 1 --manifest-path "$checkout/Cargo.toml" |
  python3 -c 'import json, sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "klock-cli"))')
[[ $answer == "klock $version"* ]] || fail "the installed klock --version said \"$answer\", not klock $version"

step "pip install ./python into a clean venv"
venv=$work/venv
python3 -m venv --clear "$venv"
(cd "$checkout" && "$venv/bin/python" -m pip install --quiet --disable-pip-version-check ./python)
(cd / && "$venv/bin/python" - <<'EOF'
import importlib.metadata as metadata
import klock, klock._core, klock.remote
dist = metadata.distribution("klock-kernel")
files = [str(f) for f in dist.files or []]
assert any(f.endswith("licenses/LICENSE") for f in files), f"no LICENSE in {files}"
# klock.connect's transport is the standard library's (klock/_http.py): nothing to install
# (the optional extras, such as `test`, aside).
needed = [r for r in dist.requires or [] if "extra ==" not in r]
assert not needed, f"klock-kernel requires {needed}; it should need nothing"
print(f"klock-kernel {dist.version}: import klock from {klock.__file__}")
EOF
)

step "maturin: a manylinux wheel (maturin's compliance check) and the sdist"
tools=$work/tools/venv
[ -x "$tools/bin/python" ] || python3 -m venv "$tools"
missing=()
[ -x "$tools/bin/maturin" ] || missing+=("maturin>=1.9,<2.0")
[ -x "$tools/bin/pdoc" ] || missing+=("pdoc>=16,<17")
if [ ${#missing[@]} -gt 0 ]; then
  "$tools/bin/python" -m pip install --quiet --disable-pip-version-check "${missing[@]}"
fi
dist=$work/dist
rm -rf "$dist"
# No --compatibility: maturin picks the lowest manylinux policy the built library complies
# with (its own auditwheel check, no container) and fails if none does.
(cd "$checkout/python" && "$tools/bin/maturin" build --quiet --release --locked --out "$dist" 2>&1 | grep -v '^📦\|^🍹\|^🔗\|^🐍' || true)
(cd "$checkout/python" && "$tools/bin/maturin" sdist --out "$dist" >/dev/null)
wheel=$(ls "$dist"/*.whl 2>/dev/null | head -n1)
[ -n "$wheel" ] || fail "maturin built no wheel"
case "$(basename "$wheel")" in
  *-manylinux_2_*_x86_64.whl | *-manylinux2014_x86_64.whl) echo "wheel: $(basename "$wheel")" ;;
  *) fail "the wheel $(basename "$wheel") has no manylinux tag the index accepts" ;;
esac
python3 - "$wheel" "$dist"/*.tar.gz <<'EOF'
import sys, tarfile, zipfile
wheel, sdist = sys.argv[1], sys.argv[2]
names = zipfile.ZipFile(wheel).namelist()
assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), "the wheel has no LICENSE"
members = tarfile.open(sdist).getnames()
assert any(m.endswith("/LICENSE") for m in members), "the sdist has no LICENSE"
print(f"LICENSE in the wheel and in {sdist.rsplit('/', 1)[1]}")
EOF
wheel_venv=$work/venv-wheel
python3 -m venv --clear "$wheel_venv"
"$wheel_venv/bin/python" -m pip install --quiet --disable-pip-version-check "$wheel"
(cd / && "$wheel_venv/bin/python" -c "import klock, klock._core, klock.remote; print('the wheel imports:', klock.__file__)")

step "npm install ./node in a scratch npm project"
project=$work/npm-project
rm -rf "$project"
mkdir -p "$project"
echo '{ "name": "scratch", "version": "1.0.0", "private": true }' >"$project/package.json"
# Without cargo on PATH the addon cannot be built: the install must fail and say what to run.
no_cargo_path=$(tr ':' '\n' <<<"$PATH" | while read -r dir; do [ -x "$dir/cargo" ] || printf '%s:' "$dir"; done)
if out=$(cd "$project" && PATH=${no_cargo_path%:} npm install --no-audit --no-fund "$checkout/node" 2>&1); then
  fail "npm install without cargo succeeded, yet no addon was built"
fi
grep -Eq "klock: the native addon for [a-z0-9]+-[a-z0-9]+(-[a-z]+)? is not built, and cargo is not on PATH: install Rust" <<<"$out" \
  || { echo "$out" >&2; fail "npm install without cargo did not say what to run"; }
echo "without cargo: $(grep -o 'klock: the native addon.*' <<<"$out" | head -n1)"
rm -rf "$project/node_modules" "$project/package-lock.json"
(cd "$project" && npm install --no-audit --no-fund --loglevel=error "$checkout/node")
(cd "$project" && node -e "const { Klock } = require('klock'); new Klock().close(); console.log('require(\"klock\") works')")
packed=$(cd "$checkout/node" && npm pack --dry-run --json 2>/dev/null)
node -e '
  const files = JSON.parse(process.argv[1])[0].files.map((f) => f.path);
  for (const wanted of ["LICENSE", "README.md", "install.js", "client.js", /^klock\.[a-z0-9-]+\.node$/]) {
    const found = typeof wanted === "string" ? files.includes(wanted) : files.some((f) => wanted.test(f));
    if (!found) { console.error(`npm pack: ${wanted} missing from ${files}`); process.exit(1); }
  }
  console.log(`npm pack: ${files.length} files, LICENSE and the addon among them`);
' "$packed"

step "every README block, run as written against the installs above"
export CARGO_INSTALL_ROOT=$work/root
rm -rf "$work/snippets"
python3 scripts/readme-snippets.py --python "$venv/bin/python" --node-project "$project" \
  --klock "$klock" --checkout "$checkout" --workdir "$work/snippets" \
  "$checkout/README.md" "$checkout/core/README.md" "$checkout/python/README.md" "$checkout/node/README.md" \
  "$checkout/server/README.md" "$checkout/bindings/c/README.md" "$checkout/bindings/wasm/README.md"

step "API reference: pdoc, TypeDoc, cargo doc (warnings denied) into target/api/"
api=$root/target/api
rm -rf "$api"
mkdir -p "$api"
# pdoc documents the installed package (the wheel's venv), so it reads what a user gets.
(cd / && PYTHONPATH=$("$wheel_venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])') \
  "$tools/bin/pdoc" --output-directory "$api/python" klock)
npm_tools=$work/tools/npm
if [ ! -x "$npm_tools/node_modules/.bin/typedoc" ]; then
  mkdir -p "$npm_tools"
  [ -f "$npm_tools/package.json" ] || echo '{ "private": true }' >"$npm_tools/package.json"
  (cd "$npm_tools" && npm install --no-audit --no-fund --loglevel=error typedoc@0.28.20 typescript@5.9.3)
fi
(cd "$checkout/node" && "$npm_tools/node_modules/.bin/typedoc" --treatWarningsAsErrors --logLevel Warn \
  --tsconfig tsconfig.json --out "$api/node" client.d.ts index.d.ts)
(cd "$checkout" && RUSTDOCFLAGS="-D warnings" cargo doc --quiet --locked --no-deps -p klock-core)
cp -r "$CARGO_TARGET_DIR/doc" "$api/rust"
for page in python/klock.html node/index.html rust/klock_core/index.html; do
  [ -s "$api/$page" ] || fail "the API reference has no $page"
done
echo "target/api/python/klock.html, target/api/node/index.html, target/api/rust/klock_core/index.html"
