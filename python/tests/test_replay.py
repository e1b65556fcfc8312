"""The resolved conformance scripts through klock._core (python/tests/replay.py).

Every vector's script replays exactly; every mutant (one recorded value changed) fails, at
the step and the value that was changed; a script the replayer cannot replay fails loudly.
The scripts are made by scripts/resolve-vectors.sh (the Rust checker), or taken from
$KLOCK_SCRIPTS when the caller has just made them (scripts/test-python.sh does).
"""

from __future__ import annotations

import copy
import json
import os
import pathlib
import re
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import replay
from support import REPO, VECTORS

# Resolving the vectors builds the Rust checker when it is not built yet.
pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def scripts() -> pathlib.Path:
    given = os.environ.get("KLOCK_SCRIPTS")
    if given:
        return pathlib.Path(given).resolve()
    done = subprocess.run(
        ["bash", "scripts/resolve-vectors.sh"], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return REPO / done.stdout.splitlines()[-1]


@pytest.fixture(scope="module")
def mutants(scripts: pathlib.Path) -> list[pathlib.Path]:
    return sorted((scripts.parent / "mutants").glob("*.json"))


def run_cli(*paths: object) -> tuple[int, list[str]]:
    done = subprocess.run(
        [sys.executable, str(REPO / "python/tests/replay.py"), *map(str, paths)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert done.stderr == "", done.stderr
    return done.returncode, done.stdout.splitlines()


def test_every_vector_replays_exactly(scripts: pathlib.Path) -> None:
    files = sorted(scripts.glob("*.json"))
    vectors = sorted(VECTORS.glob("*.json"))
    assert len(vectors) >= 1 and len(files) == len(vectors)
    # One script per vector file.
    named = {pathlib.Path(json.loads(f.read_text())["vector"]).name for f in files}
    assert named == {v.name for v in vectors}
    failures = [(f.name, why) for f in files for _, why in [replay.replay_file(f)] if why]
    assert failures == []


def test_the_cli_passes_every_script(scripts: pathlib.Path) -> None:
    status, lines = run_cli(scripts)
    count = len(list(VECTORS.glob("*.json")))
    assert (status, lines[-1]) == (0, f"{count} passed, 0 failed")
    assert len(lines) == count + 1 and all(line.startswith(f"ok {scripts}/") for line in lines[:-1])


def mutated_at(mutant: pathlib.Path) -> tuple[int, str]:
    """The step and field path a mutant's name says was changed, list positions as `[]`."""
    name = json.loads(mutant.read_text())["name"]
    found = re.match(
        r"MUTANT step (\d+): (\S+) (changed|one item fewer|one key more|one key fewer) \(of: ", name
    )
    assert found, name
    return int(found.group(1)), re.sub(r"\[[^\]]*\]", "[]", found.group(2)).removesuffix("[]")


def test_every_mutant_fails_at_the_changed_value(mutants: list[pathlib.Path]) -> None:
    assert len(mutants) >= 1
    for mutant in mutants:
        step, path = mutated_at(mutant)
        _, why = replay.replay_file(mutant)
        assert why is not None, f"{mutant.name} replayed: the replayer ignores {path}"
        found = re.match(r"step (\d+): (\S+?): ", why)
        assert found, (mutant.name, why)
        assert int(found.group(1)) == step, (mutant.name, why)
        assert re.sub(r"\[\d+\]", "[]", found.group(2)).startswith(path), (mutant.name, path, why)


def test_the_cli_fails_every_mutant(mutants: list[pathlib.Path]) -> None:
    status, lines = run_cli(mutants[0].parent)
    assert (status, lines[-1]) == (1, f"0 passed, {len(mutants)} failed")
    assert len(lines) == len(mutants) + 1 and all(line.startswith("FAIL ") for line in lines[:-1])


def test_the_cli_fails_on_no_script(tmp_path: pathlib.Path) -> None:
    assert run_cli(tmp_path) == (1, ["0 passed, 0 failed"])


@pytest.fixture
def one_step(scripts: pathlib.Path) -> dict[str, Any]:
    """A real script cut to its first step, an open."""
    script = json.loads((scripts / "01-readers-writers-upgrade.json").read_text())
    script["steps"] = script["steps"][:1]
    assert script["steps"][0]["call"]["op"] == "open"
    return script  # type: ignore[no-any-return]


def replayed(tmp_path: pathlib.Path, script: object) -> str | None:
    path = tmp_path / "script.json"
    path.write_text(script if isinstance(script, str) else json.dumps(script))
    return replay.replay_file(path)[1]


def set_in(keys: str, value: object) -> Callable[[dict[str, Any]], None]:
    """Sets `value` at a path of keys like `steps.0.call.op`."""

    def change(script: dict[str, Any]) -> None:
        *parents, last = [int(k) if k.isdigit() else k for k in keys.split(".")]
        target: Any = script
        for key in parents:
            target = target[key]
        target[last] = value

    return change


@pytest.mark.parametrize(
    "change, message",
    [
        (
            set_in("format", "klock-script/2"),
            "unknown format 'klock-script/2': expected 'klock-script/1'",
        ),
        (lambda s: s.pop("format"), "unknown format None"),
        (set_in("steps.0.call.op", "open_all"), "step 1: unknown op 'open_all'"),
        (lambda s: s["steps"][0]["call"].pop("op"), "step 1: unknown op None"),
        (
            set_in("steps.0.call.priority", 1),
            "step 1: call open: missing keys [], unknown keys ['priority']",
        ),
        (
            lambda s: s["steps"][0]["call"].pop("namespace"),
            "step 1: call open: missing keys ['namespace']",
        ),
        (set_in("steps.0.extra", 1), "step 1: step: missing keys [], unknown keys ['extra']"),
        (set_in("extra", 1), "script: missing keys [], unknown keys ['extra']"),
        (
            set_in("config.max_lease_lifetme_ms", 1),
            'INVALID_CONFIG: unknown config field "max_lease_lifetme_ms"',
        ),
        (set_in("steps", []), "`steps` must be a non-empty list"),
        (set_in("steps.0.now", -1), "step 1: ValueError: now must be >= 0, got -1"),
        (set_in("steps.0.snapshot_at", 1.0), "step 1: TypeError: now must be an int, got float"),
        (
            set_in("steps.0.result.ok.session.priority", True),
            "step 1: result.ok.session.priority: expected true, got 1",
        ),
    ],
)
def test_a_script_that_cannot_replay_fails_loudly(
    tmp_path: pathlib.Path,
    one_step: dict[str, Any],
    change: Callable[[dict[str, Any]], object],
    message: str,
) -> None:
    assert replayed(tmp_path, one_step) is None
    broken = copy.deepcopy(one_step)
    change(broken)
    why = replayed(tmp_path, broken)
    assert why is not None and message in why, why


def test_an_acquire_with_unknown_options_fails_loudly(
    tmp_path: pathlib.Path, scripts: pathlib.Path
) -> None:
    script = json.loads((scripts / "01-readers-writers-upgrade.json").read_text())
    step = next(i for i, s in enumerate(script["steps"]) if s["call"]["op"] == "acquire")
    script["steps"][step]["call"]["options"]["wiat"] = True
    why = replayed(tmp_path, script)
    assert why == f"step {step + 1}: call.options: missing keys [], unknown keys ['wiat']"


def test_unreadable_scripts_fail_loudly(tmp_path: pathlib.Path, one_step: dict[str, Any]) -> None:
    text = json.dumps(one_step)
    duplicate = text.replace('"name": ', '"name": "again", "name": ', 1)
    assert "invalid JSON: duplicate key" in (replayed(tmp_path, duplicate) or "")
    assert "cannot read the script" in (replayed(tmp_path, "{") or "")
    assert replay.replay_file(tmp_path / "missing.json")[1].startswith("cannot read the script")  # type: ignore[union-attr]
