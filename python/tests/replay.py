"""Replays resolved conformance scripts (``klock-script/1``, docs/VECTORS.md) through
``klock._core``, the Python binding's public API. Test code: not part of the package.

Contract: a ``Kernel`` built from a script's ``config`` makes exactly the call each step
names at its ``now``; the answer (or the raised ``KlockError``'s code, name and message),
the events drained after it and ``snapshot(snapshot_at)``, turned into the kernel's canonical
JSON, must equal the recorded ``result``, ``events`` and ``snapshot`` exactly: same types
(``True`` is not ``1``, a tuple is not a list), no key missing, none extra. The conversion
shows whatever the binding returns, so a value it drops, adds or renders differently is a
difference. The first difference fails the script, named by its path (``step 3:
snapshot.sessions[0].die_count: expected 1, got 0``); so do an unknown ``format`` or ``op``,
missing or unknown keys, and any exception but a ``KlockError``.

CLI: ``python python/tests/replay.py PATH...`` (scripts, or directories of them) prints ``ok
<file>: <name>`` or ``FAIL <file>: <name>: <why>`` per script, then ``N passed, M failed``,
and exits 1 on any failure or when it finds no script.
"""

from __future__ import annotations

import json
import pathlib
import sys
from collections.abc import Callable
from typing import Any

from klock import _core

FORMAT = "klock-script/1"
SCRIPT_KEYS = {"format", "vector", "name", "config", "steps"}
STEP_KEYS = {"now", "call", "result", "events", "snapshot_at", "snapshot"}

SESSION = ("session_id", "agent_id", "namespace", "priority", "epoch")
LEASE = (
    "lease_id",
    "session_id",
    "agent_id",
    "resource",
    "predicate",
    "fence",
    "acquired_at",
    "expires_at",
    "ttl_ms",
)
# The fields of each kind of tagged answer. The binding's Verdict and Event flatten every kind
# into one class whose fields of other kinds are None or empty; such a field that is set
# anyway is shown too, so that it fails the comparison.
VERDICT = {
    "GRANTED": ("leases",),
    "WAIT": ("ticket", "held_by"),
    "DIE": ("retry_after_ms", "held_by"),
}
EVENT = {
    "GRANTED": ("ticket", "session", "leases"),
    "WAIT_TIMEOUT": ("ticket", "session"),
    "DIED": ("ticket", "session", "retry_after_ms"),
    "LEASE_EXPIRED": ("lease", "session"),
    "WOUNDED": ("session", "by", "lost_leases", "lost_tickets", "retry_after_ms"),
    "SESSION_CLOSED": ("session", "reason"),
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


def plain(value: Any) -> Any:
    """A binding value as JSON: its classes become objects; tuples stay tuples (no JSON value
    is one, so a tuple where a list is recorded is a difference)."""
    if isinstance(value, _core.Lease):
        return {name: getattr(value, name) for name in LEASE}
    if isinstance(value, _core.Blocker):
        intents = [{"predicate": p, "resource": r} for p, r in value.intents]
        return {"session_id": value.session_id, "agent_id": value.agent_id, "intents": intents}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def tagged(obj: Any, tag: str, kinds: dict[str, tuple[str, ...]]) -> dict[str, Any]:
    kind = getattr(obj, tag)
    out = {tag: kind}
    for name in sorted({n for fields in kinds.values() for n in fields}):
        value = getattr(obj, name)
        if name in kinds.get(kind, ()) or value not in (None, []):
            out[name] = plain(value)
    return out


def out(kind: str, **fields: Any) -> dict[str, Any]:
    return {"output": kind, **fields}


def session(info: _core.SessionInfo) -> dict[str, Any]:
    return out("session", session={name: getattr(info, name) for name in SESSION})


def done(returned: object) -> dict[str, Any]:
    return out("done") if returned is None else out("done", returned=returned)


def per_lease(lease_id: int, status: str, **values: int | None) -> dict[str, Any]:
    """One per-lease answer; a value is shown when set, or when its status needs it."""
    needs = {"OK": ("expires_at",), "ACTIVE": ("expires_at", "fence")}.get(status, ())
    shown = {k: v for k, v in values.items() if v is not None or k in needs}
    return {"lease_id": lease_id, "status": status, **shown}


def acquire(k: _core.Kernel, c: dict[str, Any], now: int) -> dict[str, Any]:
    keys(c["options"], {"ttl_ms", "wait", "wait_timeout_ms"}, "call.options")
    verdict = k.acquire(c["session"], c["intents"], now, **c["options"])
    return out("verdict", verdict=tagged(verdict, "verdict", VERDICT))


# Every op: its argument keys, and the call it makes through the binding.
Call = Callable[[_core.Kernel, dict[str, Any], int], dict[str, Any]]
OPS: dict[str, tuple[set[str], Call]] = {
    "open": (
        {"agent_id", "namespace"},
        lambda k, c, now: session(k.open_session(c["agent_id"], c["namespace"], now)),
    ),
    "close": ({"session"}, lambda k, c, now: done(k.close_session(c["session"], now))),
    "suspend": ({"session"}, lambda k, c, now: done(k.suspend_session(c["session"], now))),
    "digest": ({"session"}, lambda k, c, now: out("digest", digest=k.digest(c["session"], now))),
    "resume": ({"digest"}, lambda k, c, now: session(k.resume_session(c["digest"], now))),
    "acquire": ({"session", "intents", "options"}, acquire),
    "heartbeat": (
        {"session", "leases"},
        lambda k, c, now: out(
            "heartbeat",
            results=[
                per_lease(i, s, expires_at=e)
                for i, s, e in k.heartbeat(c["session"], c["leases"], now)
            ],
        ),
    ),
    "release": (
        {"session", "lease"},
        lambda k, c, now: out("released", released=k.release(c["session"], c["lease"], now)),
    ),
    "release_all": (
        {"session"},
        lambda k, c, now: out("released_all", count=k.release_all(c["session"], now)),
    ),
    "reconcile": (
        {"session", "leases"},
        lambda k, c, now: out(
            "reconcile",
            statuses=[
                per_lease(i, s, expires_at=e, fence=f)
                for i, s, e, f in k.reconcile(c["session"], c["leases"], now)
            ],
        ),
    ),
    "cancel_wait": (
        {"session", "ticket"},
        lambda k, c, now: done(k.cancel_wait(c["session"], c["ticket"], now)),
    ),
    "advance": (set(), lambda k, c, now: done(k.advance(now))),
    "resource_state": (
        {"resource", "namespace"},
        lambda k, c, now: out(
            "resource_state", state=k.resource_state(c["resource"], c["namespace"], now)
        ),
    ),
    # A pure query: the binding's next_deadline takes no `now`.
    "next_deadline": (set(), lambda k, c, now: out("next_deadline", deadline=k.next_deadline())),
}


def answer(kernel: _core.Kernel, call: Any, now: int) -> dict[str, Any]:
    """Makes the one call `call` names and returns its result as canonical JSON."""
    op = call.get("op") if isinstance(call, dict) else None
    if op not in OPS:
        raise Failure(f"unknown op {op!r}")
    names, make = OPS[op]
    keys(call, names | {"op"}, f"call {op}")
    try:
        return {"ok": make(kernel, call, now)}
    except _core.KlockError as e:
        return {"error": {"code": e.code, "name": e.name, "message": e.message}}


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
        text = path.read_text(encoding="utf-8")
        script = json.loads(text, object_pairs_hook=no_duplicates)
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
            got["events"] = [tagged(e, "event", EVENT) for e in kernel.drain_events()]
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
