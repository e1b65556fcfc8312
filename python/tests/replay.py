"""Replays resolved conformance scripts (``klock-script/1``, docs/VECTORS.md) through
``klock._core``, the Python binding's public API. Test code: not part of the package.

Contract: a ``Kernel`` built from a script's ``config`` makes exactly the call each step names at
its ``now``; the answer (or the raised ``KlockError``'s code, name and message), the events drained
after it and ``snapshot(snapshot_at)``, turned into the kernel's canonical JSON, must equal the
recorded ``result``, ``events`` and ``snapshot`` exactly: same types (``True`` is not ``1``, a tuple
is not a list), no key missing, none extra. The conversion shows whatever the binding returns, so a
value it drops, adds or renders differently is a difference. The first difference fails the script,
named by its path (``step 3: snapshot.sessions[0].die_count: expected 1, got 0``); so do an unknown
``format`` or ``op``, missing or unknown keys, and any exception but a ``KlockError``.

CLI: ``python python/tests/replay.py PATH...`` (scripts, or directories of them) prints ``ok <file>:
<name>`` or ``FAIL <file>: <name>: <why>`` per script, then ``N passed, M failed``, and exits 1 on
any failure or when it finds no script.
"""

from __future__ import annotations

import json
import pathlib
import sys
from typing import Any

from klock import _core

FORMAT = "klock-script/1"
SCRIPT_KEYS = {"format", "vector", "name", "config", "steps"}
STEP_KEYS = {"now", "call", "result", "events", "snapshot_at", "snapshot"}
OPTION_KEYS = {"ttl_ms", "wait", "wait_timeout_ms"}

# The fields of each binding class, under the kernel's serde names.
FIELDS: dict[type, list[str]] = {
    _core.SessionInfo: "session_id agent_id namespace priority epoch".split(),
    _core.Lease: (
        "lease_id session_id agent_id resource predicate fence acquired_at expires_at ttl_ms"
    ).split(),
    _core.Blocker: "session_id agent_id intents".split(),
}
# The fields of each kind of tagged answer. The binding's Verdict and Event flatten every kind
# into one class whose fields of other kinds are None or empty; such a field that is set anyway
# is shown too, so that it fails the comparison.
VERDICT = {
    "GRANTED": ("leases",),
    "WAIT": ("ticket", "held_by"),
    "DIE": ("retry_after_ms", "held_by"),
}
EVENT = {
    "GRANTED": ("ticket", "session", "leases"),
    "ACQUIRED": ("session", "leases"),
    "RELEASED": ("session", "leases"),
    "WAIT_TIMEOUT": ("ticket", "session"),
    "DIED": ("ticket", "session", "retry_after_ms"),
    "LEASE_EXPIRED": ("lease", "session"),
    "WOUNDED": ("session", "by", "lost_leases", "lost_tickets", "retry_after_ms"),
    "SESSION_CLOSED": ("session", "reason"),
}
TAGGED = {_core.Verdict: ("verdict", VERDICT), _core.Event: ("event", EVENT)}
# Fields the kernel writes only when they are not empty: a detect victim's `cycle` (DIE, DIED).
SPARSE = ("cycle",)
# The fields of the binding's tuples: the rows of a heartbeat's or a reconcile's answer (by op)
# and a Blocker's intents (by field).
ROWS = {
    "heartbeat": ("lease_id", "status", "expires_at"),
    "reconcile": ("lease_id", "status", "expires_at", "fence"),
    "intents": ("predicate", "resource"),
}
# Every op: the Kernel method it calls, its arguments in order (the call's keys, and the step's
# `now`; acquire's `options` go by name; next_deadline, a pure query, takes no `now`), and the
# Output it answers: its name and the returned value's key ("done" shows a value only if any).
OPS: dict[str, tuple[str, str, str, str]] = {
    "open": ("open_session", "agent_id namespace now", "session", "session"),
    "close": ("close_session", "session now", "done", "returned"),
    "suspend": ("suspend_session", "session now", "done", "returned"),
    "digest": ("digest", "session now", "digest", "digest"),
    "resume": ("resume_session", "digest now", "session", "session"),
    "acquire": ("acquire", "session intents now options", "verdict", "verdict"),
    "heartbeat": ("heartbeat", "session leases now", "heartbeat", "results"),
    "release": ("release", "session lease now", "released", "released"),
    "release_all": ("release_all", "session now", "released_all", "count"),
    "reconcile": ("reconcile", "session leases now", "reconcile", "statuses"),
    "cancel_wait": ("cancel_wait", "session ticket now", "done", "returned"),
    "advance": ("advance", "now", "done", "returned"),
    "resource_state": ("resource_state", "resource namespace now", "resource_state", "state"),
    "next_deadline": ("next_deadline", "", "next_deadline", "deadline"),
}


class Failure(Exception):
    """Why a script did not replay: a difference, or a script this replayer cannot replay
    (unknown format or op, missing or unknown keys)."""


def describe(e: Exception) -> str:
    return str(e) if isinstance(e, Failure) else f"{type(e).__name__}: {e}"


def keys(obj: object, expected: set[str], where: str) -> None:
    if not isinstance(obj, dict):
        raise Failure(f"{where} must be an object, got {type(obj).__name__}")
    if obj.keys() != expected:
        missing, unknown = sorted(expected - obj.keys()), sorted(obj.keys() - expected)
        raise Failure(f"{where}: missing keys {missing}, unknown keys {unknown}")


def plain(value: Any, names: tuple[str, ...] = ()) -> Any:
    """A binding value as JSON: its classes become objects (FIELDS, TAGGED), and so do tuples of
    known fields (`names`, from ROWS); other tuples stay tuples (no JSON value is one, so a tuple
    where a list is recorded is a difference)."""
    if isinstance(value, list):
        return [plain(item, names) for item in value]
    if isinstance(value, tuple) and names:
        return row(names, value)
    if type(value) in TAGGED:
        tag, kinds = TAGGED[type(value)]
        kind = getattr(value, tag)
        shown = {tag: kind}
        for name in sorted({n for fields in kinds.values() for n in fields} | set(SPARSE)):
            field = getattr(value, name)
            if name in kinds.get(kind, ()) or field not in (None, []):
                shown[name] = plain(field)
        return shown
    if type(value) in FIELDS:
        return {n: plain(getattr(value, n), ROWS.get(n, ())) for n in FIELDS[type(value)]}
    return value


def row(fields: tuple[str, ...], values: tuple[Any, ...]) -> dict[str, Any]:
    """A tuple of `fields` as an object: its first two values, then each one that is set or that
    the second, a status, needs (a heartbeat's OK and a reconcile's ACTIVE need every one)."""
    needed = values[1] in ("OK", "ACTIVE")
    pairs = enumerate(zip(fields, values, strict=True))
    return {name: v for i, (name, v) in pairs if i < 2 or needed or v is not None}


def answer(kernel: _core.Kernel, call: Any, now: int) -> dict[str, Any]:
    """Makes the one call `call` names and returns its result as canonical JSON."""
    op = call.get("op") if isinstance(call, dict) else None
    if op not in OPS:
        raise Failure(f"unknown op {op!r}")
    method, arguments, output, key = OPS[op]
    names = arguments.split()
    keys(call, {"op", *names} - {"now"}, f"call {op}")
    args = [now if name == "now" else call[name] for name in names if name != "options"]
    options = call.get("options", {})
    if op == "acquire":
        keys(options, OPTION_KEYS, "call.options")
    try:
        value = plain(getattr(kernel, method)(*args, **options), ROWS.get(op, ()))
    except _core.KlockError as e:
        return {"error": {"code": e.code, "name": e.name, "message": e.message}}
    shown = {} if output == "done" and value is None else {key: value}
    return {"ok": {"output": output, **shown}}


def show(value: Any) -> str:
    text = repr(value) if isinstance(value, tuple) else json.dumps(value, sort_keys=True)
    return text if len(text) <= 240 else text[:240] + "..."


def diff(want: Any, got: Any, path: str) -> str | None:
    """Where `got` first differs from `want` (types too), or None when they are equal."""
    if type(want) is not type(got):
        return f"{path}: expected {show(want)}, got {show(got)}"
    if isinstance(want, dict):
        for key in [*want, *(k for k in got if k not in want)]:
            if key not in got:
                return f"{path}.{key}: missing, expected {show(want[key])}"
            if key not in want:
                return f"{path}.{key}: unexpected, got {show(got[key])}"
            found = diff(want[key], got[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(want, list):
        for index, (w, g) in enumerate(zip(want, got, strict=False)):
            found = diff(w, g, f"{path}[{index}]")
            if found:
                return found
        if len(want) != len(got):
            return f"{path}: expected {len(want)} items, got {len(got)}: {show(got)}"
        return None
    return None if want == got else f"{path}: expected {show(want)}, got {show(got)}"


def load(path: pathlib.Path) -> dict[str, Any]:
    """A script file, strictly: no duplicate keys (the last would win unseen), a known format."""

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        if len({k for k, _ in pairs}) != len(pairs):
            raise Failure(f"invalid JSON: duplicate key among {[k for k, _ in pairs]}")
        return dict(pairs)

    try:
        script = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=no_duplicates)
    except (OSError, ValueError) as e:
        raise Failure(f"cannot read the script: {e}") from e
    got = script.get("format") if isinstance(script, dict) else script
    if got != FORMAT:
        raise Failure(f"unknown format {got!r}: expected {FORMAT!r}")
    keys(script, SCRIPT_KEYS, "script")
    return script  # type: ignore[no-any-return]


def replay(script: dict[str, Any]) -> None:
    """Replays one loaded script; raises Failure at the first difference."""
    kernel = _core.Kernel(**script["config"])
    found = diff(script["config"], kernel.config, "config")
    if found:
        raise Failure(found)
    if not isinstance(script["steps"], list) or not script["steps"]:
        raise Failure("`steps` must be a non-empty list")
    for index, step in enumerate(script["steps"], 1):
        try:
            keys(step, STEP_KEYS, "step")
            got: dict[str, Any] = {"result": answer(kernel, step["call"], step["now"])}
            got["events"] = plain(kernel.drain_events())
            got["snapshot"] = kernel.snapshot(step["snapshot_at"])
            for part in ("result", "events", "snapshot"):
                found = diff(step[part], got[part], part)
                if found:
                    raise Failure(found)
        except Exception as e:
            raise Failure(f"step {index}: {describe(e)}") from e


def replay_file(path: pathlib.Path) -> tuple[str, str | None]:
    """`(name, None)` when the script replays exactly, else `(name, why it did not)`."""
    name = "?"
    try:
        script = load(path)
        name = str(script["name"])
        replay(script)
    except Exception as e:  # any exception is a failure to report, never a crash
        return name, describe(e)
    return name, None


def main(argv: list[str]) -> int:
    files: list[pathlib.Path] = []
    for text in argv:
        path = pathlib.Path(text)
        files += sorted(path.glob("*.json")) if path.is_dir() else [path]
    failed = 0
    for path in files:
        name, why = replay_file(path)
        failed += why is not None
        print(f"ok {path}: {name}" if why is None else f"FAIL {path}: {name}: {why}")
    print(f"{len(files) - failed} passed, {failed} failed")
    return 1 if failed or not files else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
