"""Conformance runner: ``python -m klock.conformance PATH...``.

Runs the vectors of ``shared/conformance/FORMAT.md`` against ``klock._core`` with the same
contract as the Rust runner (``conformance/``):

* every file named, and every ``*.json`` directly inside every directory named (sorted by
  file name), is one vector;
* a vector is parsed completely before it runs, strictly: duplicate JSON keys, keys the
  format does not define at their level, values of the wrong type and unknown names
  (errors, verdicts, events, statuses, predicates, policies) are failures, never ignored;
* each step resolves its aliases (an alias never bound stands for an id the kernel never
  issues: they count down from 2**64-1, one per alias), makes exactly the one call its
  ``do`` names at its ``now``, drains every event, binds its aliases and checks the answer and
  the events (only the fields written; lists exactly in length; ``holders``/``covering`` as
  multisets, ``held_by``/``lost_*`` as sets). When an error is expected, a clone of the
  kernel taken before the call and advanced to the same ``now`` must emit the same events
  and end in the same snapshot: a failed call changes nothing but the settlement of time;
* output: ``ok <file>: <name>`` or ``FAIL <file>: <name>: step k: ...`` per vector, then
  ``N passed, M failed``; the exit status is non-zero on any failure or when no vector ran.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from typing import Any, Callable, NoReturn, Sequence

from . import _core

__all__ = ["run_paths", "run_file", "run_source", "main"]

U64_MAX = 2**64 - 1
ERROR_NAMES = set(_core.ERROR_CODES)
PREDICATES = ("PROVIDES", "CONSUMES", "MUTATES", "DELETES", "DEPENDS_ON", "RENAMES")
STATUSES = ("ACTIVE", "EXPIRED", "RELEASED", "NOT_OWNER", "UNKNOWN")
VERDICTS = ("GRANTED", "WAIT", "DIE")
HEARTBEAT_ERRORS = ("LEASE_EXPIRED", "LEASE_RELEASED", "NOT_OWNER", "UNKNOWN_LEASE", "LIFETIME_EXCEEDED")
FILE_KEYS = ("name", "spec", "config", "steps")
CONFIG_KEYS = (
    "policy",
    "seed",
    "default_ttl_ms",
    "max_ttl_ms",
    "default_wait_timeout_ms",
    "backoff_base_ms",
    "backoff_cap_ms",
    "grace_ms",
    "session_idle_ms",
    "max_leases_per_session",
    "max_lease_lifetime_ms",
)
POLICIES = ("wait_die", "wound_wait", "lanes")
LEASE_KEYS = ("as", "resource", "predicate", "expires_at", "ttl_ms", "fence_gt", "same_as")
EVENT_KINDS: dict[str, tuple[str, ...]] = {
    "GRANTED": ("ticket", "session", "leases"),
    "WAIT_TIMEOUT": ("ticket", "session"),
    "DIED": ("ticket", "session", "retry_after_ms"),
    "LEASE_EXPIRED": ("lease", "session"),
    "WOUNDED": ("session", "by", "lost_leases", "lost_tickets", "retry_after_ms"),
    "SESSION_CLOSED": ("session",),
}
EVENT_KEYS = ("event", "ticket", "session", "lease", "by", "leases", "retry_after_ms", "lost_leases", "lost_tickets")
# do -> (step keys besides now/do/expect, expect keys besides error/events)
ACTIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "open": (("agent", "namespace", "as"), ("priority_lt",)),
    "close": (("session",), ()),
    "suspend": (("session",), ()),
    "release_all": (("session",), ()),
    "digest": (("session", "as"), ()),
    "resume": (("digest", "tamper"), ("epoch",)),
    "acquire": (
        ("session", "intents", "ttl_ms", "wait", "wait_timeout_ms"),
        ("verdict", "leases", "ticket", "held_by", "retry_after_ms"),
    ),
    "heartbeat": (("session", "leases"), ("results",)),
    "release": (("session", "lease"), ("released",)),
    "reconcile": (("session", "leases"), ("status",)),
    "cancel_wait": (("session", "ticket"), ()),
    "advance": ((), ()),
    "next_deadline": ((), ("deadline",)),
    "resource_state": (("resource", "namespace"), ("holders", "waiting", "covering")),
}


class Failure(Exception):
    """A vector that does not parse or does not behave as written."""


def fail(message: str) -> NoReturn:
    raise Failure(message)


# ---- strict JSON ----------------------------------------------------------------------------


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key `{key}`")
        out[key] = value
    return out


def _no_constants(name: str) -> NoReturn:
    raise ValueError(f"non-finite number {name}")


def parse_json(text: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)
    except ValueError as e:
        fail(f"invalid JSON: {e}")


def show(value: Any) -> str:
    return json.dumps(value)


def is_u64(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= U64_MAX


class Fields:
    """One JSON object with exactly the keys it may hold, read through typed getters."""

    def __init__(self, value: Any, ctx: str, allowed: Sequence[str]) -> None:
        if not isinstance(value, dict):
            fail(f"{ctx} must be an object, got {show(value)}")
        for key in value:
            if key not in allowed:
                fail(f"{ctx}: unknown key `{key}` (allowed here: {', '.join(allowed)})")
        self.value: dict[str, Any] = value
        self.ctx = ctx

    def has(self, key: str) -> bool:
        return key in self.value

    def get(self, key: str) -> Any:
        return self.value.get(key)

    def keys(self) -> list[str]:
        return list(self.value)

    def wrong(self, key: str, wanted: str, got: Any) -> NoReturn:
        fail(f"{self.ctx}: `{key}` must be {wanted}, got {show(got)}")

    def required(self, key: str) -> Any:
        if key not in self.value:
            fail(f"{self.ctx}: missing required key `{key}`")
        return self.value[key]

    def u64(self, key: str) -> int | None:
        if key not in self.value:
            return None
        v = self.value[key]
        if not is_u64(v):
            self.wrong(key, "an integer in 0..=2^64-1", v)
        return int(v)

    def req_u64(self, key: str) -> int:
        self.required(key)
        v = self.u64(key)
        assert v is not None
        return v

    def text(self, key: str) -> str | None:
        if key not in self.value:
            return None
        v = self.value[key]
        if not isinstance(v, str):
            self.wrong(key, "a string", v)
        return v

    def req_str(self, key: str) -> str:
        self.required(key)
        v = self.text(key)
        assert v is not None
        return v

    def flag(self, key: str) -> bool | None:
        if key not in self.value:
            return None
        v = self.value[key]
        if not isinstance(v, bool):
            self.wrong(key, "true or false", v)
        return v

    def str_list(self, key: str) -> list[str] | None:
        if key not in self.value:
            return None
        v = self.value[key]
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            self.wrong(key, "a list of strings", v)
        return list(v)

    def range(self, key: str) -> tuple[int, int] | None:
        if key not in self.value:
            return None
        v = self.value[key]
        if not (isinstance(v, list) and len(v) == 2 and is_u64(v[0]) and is_u64(v[1]) and v[0] <= v[1]):
            self.wrong(key, "[lo, hi] with integers lo <= hi", v)
        return (v[0], v[1])

    def u64_or_null(self, key: str) -> tuple[bool, int | None]:
        if key not in self.value:
            return (False, None)
        v = self.value[key]
        if v is None:
            return (True, None)
        if not is_u64(v):
            self.wrong(key, "an integer or null", v)
        return (True, v)

    def array(self, key: str) -> list[Any] | None:
        if key not in self.value:
            return None
        v = self.value[key]
        if not isinstance(v, list):
            self.wrong(key, "a list", v)
        return v

    def object(self, key: str) -> dict[str, Any] | None:
        if key not in self.value:
            return None
        v = self.value[key]
        if not isinstance(v, dict):
            self.wrong(key, "an object", v)
        return v


# ---- the format as values -------------------------------------------------------------------


def one_of(ctx: str, key: str, value: str, allowed: Sequence[str]) -> str:
    if value not in allowed:
        fail(f"{ctx}: `{key}` must be one of {', '.join(allowed)}, got {value!r}")
    return value


def error_name(ctx: str, name: str) -> str:
    if name not in ERROR_NAMES:
        fail(f"{ctx}: unknown error name {name!r} (known: {', '.join(sorted(ERROR_NAMES, key=_core.ERROR_CODES.__getitem__))})")
    return name


def parse_vector(value: Any) -> dict[str, Any]:
    f = Fields(value, "file", FILE_KEYS)
    name = f.req_str("name")
    f.text("spec")
    config: dict[str, Any] = {}
    if f.has("config"):
        c = Fields(f.get("config"), "config", CONFIG_KEYS)
        policy = c.text("policy")
        if policy is not None:
            if policy not in POLICIES:
                fail(f"config: `policy`: unknown policy {policy!r}: expected wait_die, wound_wait or lanes")
            config["policy"] = policy
        for key in CONFIG_KEYS[1:]:
            v = c.u64(key)
            if v is not None:
                config[key] = v
    steps = f.array("steps")
    if steps is None:
        fail("file: missing required key `steps`")
    if not steps:
        fail("file: `steps` is empty")
    parsed = []
    for i, s in enumerate(steps):
        try:
            parsed.append(parse_step(s))
        except Failure as e:
            fail(f"step {i + 1}: {e}")
    return {"name": name, "config": config, "steps": parsed}


def parse_step(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict) or "do" not in value:
        fail("step: missing required key `do`")
    action = value["do"]
    if not isinstance(action, str):
        fail(f"step: `do` must be a string, got {show(action)}")
    if action not in ACTIONS:
        fail(f"unknown `do` {action!r} (known: {', '.join(ACTIONS)})")
    fields, expect_keys = ACTIONS[action]
    f = Fields(value, f"{action} step", ("now", "do", "expect", *fields))
    step: dict[str, Any] = {"do": action, "now": f.req_u64("now")}
    if action == "open":
        step["agent"] = f.req_str("agent")
        step["namespace"] = f.text("namespace") if f.has("namespace") else "default"
        step["as"] = f.text("as")
    elif action in ("close", "suspend", "release_all"):
        step["session"] = f.req_str("session")
    elif action == "digest":
        step["session"] = f.req_str("session")
        step["as"] = f.text("as")
    elif action == "resume":
        step["digest"] = f.req_str("digest")
        step["tamper"] = parse_tamper(f.get("tamper")) if f.has("tamper") else {}
    elif action == "acquire":
        f.required("intents")
        step["session"] = f.req_str("session")
        step["intents"] = f.str_list("intents")
        step["ttl_ms"] = f.u64("ttl_ms")
        step["wait"] = f.flag("wait")
        step["wait_timeout_ms"] = f.u64("wait_timeout_ms")
    elif action == "heartbeat":
        leases = f.required("leases")
        if leases == "all":
            step["leases"] = None
        elif isinstance(leases, list) and all(isinstance(x, str) for x in leases):
            step["leases"] = list(leases)
        else:
            fail(f"{f.ctx}: `leases` must be \"all\" or a list of aliases")
        step["session"] = f.req_str("session")
    elif action == "release":
        step["session"] = f.req_str("session")
        step["lease"] = f.req_str("lease")
    elif action == "reconcile":
        f.required("leases")
        step["session"] = f.req_str("session")
        step["leases"] = f.str_list("leases")
    elif action == "cancel_wait":
        step["session"] = f.req_str("session")
        step["ticket"] = f.req_str("ticket")
    elif action == "resource_state":
        step["resource"] = f.req_str("resource")
        step["namespace"] = f.text("namespace") if f.has("namespace") else "default"
    step["expect"] = parse_expect(f.get("expect"), action, expect_keys) if f.has("expect") else None
    return step


def parse_tamper(value: Any) -> dict[str, Any]:
    f = Fields(value, "tamper", ("agent_id", "namespace", "session_id", "priority_timestamp", "epoch"))
    out: dict[str, Any] = {}
    for key in ("agent_id", "namespace"):
        if f.has(key):
            out[key] = f.text(key)
    if f.has("session_id"):
        v = f.get("session_id")
        if isinstance(v, str):
            out["session_id"] = ("alias", v)
        elif is_u64(v):
            out["session_id"] = ("number", v)
        else:
            fail(f"tamper: `session_id` must be a session alias or a number, got {show(v)}")
    for key in ("priority_timestamp", "epoch"):
        if f.has(key):
            out[key] = f.u64(key)
    return out


def parse_leases(items: list[Any], ctx: str) -> list[dict[str, Any]]:
    out = []
    for i, item in enumerate(items):
        c = f"{ctx}[{i}]"
        f = Fields(item, c, LEASE_KEYS)
        lease: dict[str, Any] = {}
        for key in ("as", "resource", "fence_gt", "same_as"):
            lease[key] = f.text(key)
        predicate = f.text("predicate")
        if predicate is not None:
            one_of(c, "predicate", predicate, PREDICATES)
        lease["predicate"] = predicate
        lease["expires_at"] = f.u64("expires_at")
        lease["ttl_ms"] = f.u64("ttl_ms")
        out.append(lease)
    return out


def parse_holders(items: list[Any], ctx: str) -> list[dict[str, Any]]:
    out = []
    for i, item in enumerate(items):
        c = f"{ctx}[{i}]"
        f = Fields(item, c, ("session", "predicate", "resource"))
        predicate = f.text("predicate")
        if predicate is not None:
            one_of(c, "predicate", predicate, PREDICATES)
        out.append({"session": f.text("session"), "predicate": predicate, "resource": f.text("resource")})
    return out


def parse_event(value: Any, ctx: str) -> dict[str, Any]:
    kind = value.get("event") if isinstance(value, dict) else None
    if isinstance(value, dict) and "event" in value and not isinstance(kind, str):
        fail(f"{ctx}: `event` must be a string, got {show(kind)}")
    if kind is None:
        allowed: tuple[str, ...] = EVENT_KEYS
    else:
        if kind not in EVENT_KINDS:
            fail(f"{ctx}: unknown event {kind!r} (known: {', '.join(EVENT_KINDS)})")
        allowed = ("event", *EVENT_KINDS[kind])
        ctx = f"{ctx} ({kind})"
    f = Fields(value, ctx, allowed)
    leases = f.array("leases")
    return {
        "event": f.text("event"),
        "ticket": f.text("ticket"),
        "session": f.text("session"),
        "lease": f.text("lease"),
        "by": f.text("by"),
        "leases": None if leases is None else parse_leases(leases, f"{ctx}: leases"),
        "retry_after_ms": f.range("retry_after_ms"),
        "lost_leases": f.str_list("lost_leases"),
        "lost_tickets": f.str_list("lost_tickets"),
    }


def parse_expect(value: Any, action: str, specific: tuple[str, ...]) -> dict[str, Any]:
    f = Fields(value, f"expect of {action}", ("error", "events", *specific))
    ctx = f.ctx
    e: dict[str, Any] = {}
    err = f.text("error")
    if err is not None:
        e["error"] = error_name(ctx, err)
        for other in f.keys():
            if other not in ("error", "events"):
                fail(f"{ctx}: `error` cannot be combined with `{other}` (a failed call returns nothing else)")
    verdict = f.text("verdict")
    if verdict is not None:
        e["verdict"] = one_of(ctx, "verdict", verdict, VERDICTS)
    leases = f.array("leases")
    if leases is not None:
        e["leases"] = parse_leases(leases, f"{ctx}: leases")
    for key in ("ticket", "priority_lt"):
        if f.has(key):
            e[key] = f.text(key)
    if f.has("held_by"):
        e["held_by"] = f.str_list("held_by")
    if f.has("retry_after_ms"):
        e["retry_after_ms"] = f.range("retry_after_ms")
    results = f.object("results")
    if results is not None:
        parsed: list[tuple[str, str | None, int | None]] = []
        for alias, v in results.items():
            c = f"{ctx}: results[{alias!r}]"
            if isinstance(v, str):
                parsed.append((alias, outcome_status(c, v), None))
            else:
                o = Fields(v, c, ("status", "expires_at"))
                status = o.text("status")
                status = None if status is None else outcome_status(c, status)
                expires_at = o.u64("expires_at")
                if expires_at is not None and status not in (None, "OK"):
                    fail(f"{c}: `expires_at` only goes with status OK")
                parsed.append((alias, status, expires_at))
        e["results"] = parsed
    if f.has("released"):
        e["released"] = f.flag("released")
    status_map = f.object("status")
    if status_map is not None:
        parsed = []
        for alias, v in status_map.items():
            c = f"{ctx}: status[{alias!r}]"
            if isinstance(v, str):
                parsed.append((alias, one_of(c, "status", v, STATUSES), None))
            else:
                o = Fields(v, c, ("status", "expires_at"))
                status = o.text("status")
                if status is not None:
                    one_of(c, "status", status, STATUSES)
                expires_at = o.u64("expires_at")
                if expires_at is not None and status not in (None, "ACTIVE"):
                    fail(f"{c}: `expires_at` only goes with status ACTIVE")
                parsed.append((alias, status, expires_at))
        e["status"] = parsed
    for key in ("holders", "covering"):
        items = f.array(key)
        if items is not None:
            e[key] = parse_holders(items, f"{ctx}: {key}")
    waiting = f.array("waiting")
    if waiting is not None:
        e["waiting"] = []
        for i, item in enumerate(waiting):
            w = Fields(item, f"{ctx}: waiting[{i}]", ("session", "ticket"))
            e["waiting"].append({"session": w.text("session"), "ticket": w.text("ticket")})
    given, deadline = f.u64_or_null("deadline")
    if given:
        e["deadline"] = deadline
    if f.has("epoch"):
        e["epoch"] = f.u64("epoch")
    events = f.array("events")
    e["events"] = [] if events is None else [parse_event(item, f"{ctx}: events[{i}]") for i, item in enumerate(events)]
    if action == "acquire" and "verdict" in e:
        forbidden = {"GRANTED": ("ticket", "held_by", "retry_after_ms"), "WAIT": ("leases", "retry_after_ms"), "DIE": ("leases", "ticket")}
        for key in forbidden[e["verdict"]]:
            if key in e:
                fail(f"{ctx}: `{key}` cannot go with verdict {e['verdict']}")
    return e


def outcome_status(ctx: str, name: str) -> str:
    if name == "OK":
        return name
    error_name(ctx, name)
    if name not in HEARTBEAT_ERRORS:
        fail(
            f"{ctx}: a heartbeat outcome is OK, LEASE_EXPIRED, LEASE_RELEASED, NOT_OWNER, UNKNOWN_LEASE or "
            f"LIFETIME_EXCEEDED, got {name!r}"
        )
    return name


# ---- aliases --------------------------------------------------------------------------------


class Aliases:
    """Aliases bound once to a value of one kind; unbound ones are never-issued ids."""

    def __init__(self) -> None:
        self.bound: dict[str, tuple[str, Any]] = {}
        self.unbound: dict[str, int] = {}

    def bind(self, alias: str, kind: str, value: Any) -> None:
        old = self.bound.get(alias)
        if old is None:
            self.bound[alias] = (kind, value)
        elif old != (kind, value):
            fail(
                f"alias {alias!r} is already bound to {old[0]} {describe_bound(old)}, cannot rebind it to {kind} "
                f"{describe_bound((kind, value))} (aliases are bound once; use same_as)"
            )

    def literal(self, alias: str) -> int:
        if alias not in self.unbound:
            self.unbound[alias] = U64_MAX - len(self.unbound)
        return self.unbound[alias]

    def resolve(self, alias: str, kind: str) -> int:
        b = self.bound.get(alias)
        if b is None:
            return self.literal(alias)
        if b[0] != kind:
            fail(f"alias {alias!r} is bound to a {b[0]}, not a {kind}")
        value = b[1]
        return int(value[0] if kind == "lease" else value)

    def session(self, alias: str) -> int:
        return self.resolve(alias, "session")

    def lease(self, alias: str) -> int:
        return self.resolve(alias, "lease")

    def ticket(self, alias: str) -> int:
        return self.resolve(alias, "ticket")

    def bound_lease(self, alias: str) -> tuple[int, int]:
        b = self.bound.get(alias)
        if b is None:
            fail(f"alias {alias!r} is not bound to a lease yet")
        if b[0] != "lease":
            fail(f"alias {alias!r} is bound to a {b[0]}, not a lease")
        return b[1]  # type: ignore[no-any-return]

    def digest(self, alias: str) -> dict[str, Any]:
        b = self.bound.get(alias)
        if b is None:
            fail(f"digest alias {alias!r} was never bound (bind it with a digest step's `as`)")
        if b[0] != "digest":
            fail(f"alias {alias!r} is bound to a {b[0]}, not a digest")
        digest: dict[str, Any] = copy.deepcopy(b[1])
        return digest

    def label(self, kind: str, ident: int | None) -> str:
        for alias, (k, v) in self.bound.items():
            if k == kind and (v[0] if kind == "lease" else v) == ident:
                return f"{alias}(#{ident})"
        for alias, v in self.unbound.items():
            if v == ident:
                return f"{alias}(unbound)"
        return f"#{ident}"


def describe_bound(b: tuple[str, Any]) -> str:
    kind, value = b
    if kind == "digest":
        return f"of session #{value['identity']['session_id']}"
    return f"#{value[0] if kind == 'lease' else value}"


# ---- describing answers ---------------------------------------------------------------------


def describe_lease(lease: _core.Lease, a: Aliases) -> str:
    return (
        f"{a.label('lease', lease.lease_id)} {lease.predicate} {lease.resource} fence={lease.fence} "
        f"exp={lease.expires_at} ttl={lease.ttl_ms}"
    )


def describe_leases(leases: Sequence[_core.Lease], a: Aliases) -> str:
    return "[" + "; ".join(describe_lease(lease, a) for lease in leases) + "]"


def describe_verdict(v: _core.Verdict, a: Aliases) -> str:
    by = ", ".join(a.label("session", b.session_id) for b in v.held_by)
    if v.verdict == "GRANTED":
        return f"GRANTED {describe_leases(v.leases, a)}"
    if v.verdict == "WAIT":
        return f"WAIT ticket={a.label('ticket', v.ticket)} held_by={{{by}}}"
    return f"DIE retry_after_ms={v.retry_after_ms} held_by={{{by}}}"


def describe_event(e: _core.Event, a: Aliases) -> str:
    s = a.label("session", e.session)
    kind = e.event
    if kind == "GRANTED":
        return f"GRANTED{{ticket={a.label('ticket', e.ticket)} session={s} leases={describe_leases(e.leases or [], a)}}}"
    if kind == "WAIT_TIMEOUT":
        return f"WAIT_TIMEOUT{{ticket={a.label('ticket', e.ticket)} session={s}}}"
    if kind == "DIED":
        return f"DIED{{ticket={a.label('ticket', e.ticket)} session={s} retry_after_ms={e.retry_after_ms}}}"
    if kind == "LEASE_EXPIRED":
        return f"LEASE_EXPIRED{{lease={a.label('lease', e.lease)} session={s}}}"
    if kind == "WOUNDED":
        leases = ", ".join(a.label("lease", x) for x in e.lost_leases or [])
        tickets = ", ".join(a.label("ticket", x) for x in e.lost_tickets or [])
        return (
            f"WOUNDED{{session={s} by={a.label('session', e.by)} lost_leases=[{leases}] lost_tickets=[{tickets}] "
            f"retry_after_ms={e.retry_after_ms}}}"
        )
    return f"SESSION_CLOSED{{session={s} reason={e.reason}}}"


def describe_events(events: Sequence[_core.Event], a: Aliases) -> str:
    return "[" + ", ".join(describe_event(e, a) for e in events) + "]"


def lease_key(lease: _core.Lease) -> tuple[Any, ...]:
    return (
        lease.lease_id,
        lease.session_id,
        lease.agent_id,
        lease.resource,
        lease.predicate,
        lease.fence,
        lease.acquired_at,
        lease.expires_at,
        lease.ttl_ms,
    )


def event_key(e: _core.Event) -> tuple[Any, ...]:
    """Every field of an event, for comparing two event streams exactly."""
    return (
        e.event,
        e.session,
        e.ticket,
        None if e.leases is None else tuple(lease_key(x) for x in e.leases),
        e.retry_after_ms,
        e.lease,
        e.by,
        None if e.lost_leases is None else tuple(e.lost_leases),
        None if e.lost_tickets is None else tuple(e.lost_tickets),
        e.reason,
    )


# ---- running --------------------------------------------------------------------------------


def check_same(what: str, expected: Any, got: Any) -> None:
    if expected is not None and expected != got:
        fail(f"{what}: expected {expected!r}, got {got!r}")


def forbid(present: bool, key: str, answer: str) -> None:
    if present:
        fail(f"`{key}` is expected, but the answer is {answer}")


class Runner:
    def __init__(self, config: dict[str, Any]) -> None:
        try:
            self.kernel = _core.Kernel(config.get("policy"), **{k: v for k, v in config.items() if k != "policy"})
        except _core.KlockError as e:
            fail(f"config rejected by the kernel: {e}")
        self.aliases = Aliases()
        self.priorities: dict[int, int] = {}

    def run(self, steps: list[dict[str, Any]]) -> None:
        for i, step in enumerate(steps):
            try:
                self.step(step)
            except Failure as e:
                fail(f"step {i + 1}: {step['do']} @{step['now']}: {e}")

    def resolve(self, step: dict[str, Any]) -> Callable[[int], Any]:
        """The step's one kernel call, with its aliases resolved, as a function of ``now``."""
        a, k, do = self.aliases, self.kernel, step["do"]
        if do == "open":
            return lambda now: k.open_session(step["agent"], step["namespace"], now)
        if do in ("close", "suspend", "release_all", "digest"):
            session = a.session(step["session"])
            method = {"close": k.close_session, "suspend": k.suspend_session, "release_all": k.release_all, "digest": k.digest}[do]
            return lambda now: method(session, now)
        if do == "resume":
            digest = a.digest(step["digest"])
            identity = digest["identity"]
            for key, value in step["tamper"].items():
                if key == "session_id":
                    identity[key] = a.session(value[1]) if value[0] == "alias" else value[1]
                else:
                    identity[key] = value
            return lambda now: k.resume_session(digest, now)
        if do == "acquire":
            session = a.session(step["session"])
            wait = True if step["wait"] is None else step["wait"]
            return lambda now: k.acquire(
                session, step["intents"], now, ttl_ms=step["ttl_ms"], wait=wait, wait_timeout_ms=step["wait_timeout_ms"]
            )
        if do == "heartbeat":
            session = a.session(step["session"])
            ids = None if step["leases"] is None else [a.lease(x) for x in step["leases"]]
            return lambda now: k.heartbeat(session, ids, now)
        if do == "release":
            session, lease = a.session(step["session"]), a.lease(step["lease"])
            return lambda now: k.release(session, lease, now)
        if do == "reconcile":
            session = a.session(step["session"])
            ids = [a.lease(x) for x in step["leases"]]
            return lambda now: k.reconcile(session, ids, now)
        if do == "cancel_wait":
            session, ticket = a.session(step["session"]), a.ticket(step["ticket"])
            return lambda now: k.cancel_wait(session, ticket, now)
        if do == "advance":
            return lambda now: k.advance(now)
        if do == "resource_state":
            return lambda now: k.resource_state(step["resource"], step["namespace"], now)
        assert do == "next_deadline"
        return lambda now: k.next_deadline()

    def current_priorities(self, now: int) -> dict[int, int]:
        """Every session's priority as the kernel sees it at ``now``, read from a clone so the
        real kernel settles nothing outside the step."""
        return {int(v["session_id"]): int(v["priority"]) for v in self.kernel.clone().snapshot(now)["sessions"]}

    def request(self, step: dict[str, Any]) -> list[int] | None:
        """The lease ids a heartbeat or reconcile asked about (None: all, or not such a call)."""
        if step["do"] == "heartbeat" and step["leases"] is not None:
            return [self.aliases.lease(x) for x in step["leases"]]
        if step["do"] == "reconcile":
            return [self.aliases.lease(x) for x in step["leases"]]
        return None

    def step(self, step: dict[str, Any]) -> None:
        now = step["now"]
        call = self.resolve(step)
        expect = step["expect"] or {"events": []}
        baseline = None
        if "error" in expect:
            clone = self.kernel.clone()
            clone.advance(now)
            baseline = (clone.drain_events(), clone.snapshot(now))
        # A resume never changes the session's priority (SPEC.md §5), which since rev 4 may
        # differ from the one it opened with (a new unit of work): compare with the kernel's
        # own view just before the call, as the Rust runner does.
        priorities_before = self.current_priorities(now) if step["do"] == "resume" else {}
        error: _core.KlockError | None = None
        output: Any = None
        try:
            output = call(now)
        except _core.KlockError as e:
            error = e
        events = self.kernel.drain_events()
        if error is None and step["do"] == "resume":
            before = priorities_before.get(output.session_id)
            if before is not None and before != output.priority:
                fail(f"resume changed the session's priority from {before} to {output.priority}")
        a = self.aliases
        if error is None and "error" not in expect:
            self.bind_output(step, output)
            self.check_output(step, expect, output)
        elif error is not None and "error" not in expect:
            note = f" (events: {describe_events(events, a)})" if events else ""
            fail(f"expected success, got error {error.name}: {error.message}{note}")
        elif error is None:
            fail(f"expected error {expect['error']}, got success: {self.describe_output(output)}")
        else:
            if error.name != expect["error"]:
                fail(f"error: expected {expect['error']}, got {error.name}: {error.message}")
            assert baseline is not None
            self.check_unchanged(now, baseline, events, error)
        self.check_events(expect["events"], events)

    def check_unchanged(self, now: int, baseline: tuple[list[_core.Event], dict[str, Any]], events: list[_core.Event], error: _core.KlockError) -> None:
        settled, before = baseline
        a = self.aliases
        if [event_key(e) for e in settled] != [event_key(e) for e in events]:
            fail(
                f"the failed call ({error.name}) emitted {describe_events(events, a)} but settling time alone emits "
                f"{describe_events(settled, a)}"
            )
        after = self.kernel.snapshot(now)
        extra = self.kernel.pending_events()
        if extra:
            fail(f"taking a snapshot after the failed call emitted {extra} events")
        if before != after:
            for part in ("now", "policy", "next_deadline", "sessions", "leases", "tickets", "stats"):
                if before[part] != after[part]:
                    fail(f"the failed call ({error.name}) changed the state beyond settling time: snapshot.{part}: expected {before[part]!r}, got {after[part]!r}")
            fail(f"the failed call ({error.name}) changed the state beyond settling time")

    def describe_output(self, output: Any) -> str:
        if isinstance(output, _core.Verdict):
            return describe_verdict(output, self.aliases)
        if isinstance(output, _core.SessionInfo):
            return f"session {self.aliases.label('session', output.session_id)} epoch {output.epoch}"
        return repr(output)

    def bind_output(self, step: dict[str, Any], output: Any) -> None:
        do = step["do"]
        if do == "open":
            if step["as"] is not None:
                self.aliases.bind(step["as"], "session", output.session_id)
            self.priorities[output.session_id] = output.priority
        elif do == "resume":
            self.priorities[output.session_id] = output.priority
        elif do == "digest" and step["as"] is not None:
            self.aliases.bind(step["as"], "digest", output)

    def check_output(self, step: dict[str, Any], e: dict[str, Any], output: Any) -> None:
        a = self.aliases
        do = step["do"]
        request = self.request(step)
        if do in ("open", "resume"):
            check_same("epoch", e.get("epoch"), output.epoch)
            if e.get("priority_lt") is not None:
                alias = e["priority_lt"]
                theirs = self.priorities.get(a.session(alias))
                if theirs is None:
                    fail(f"priority_lt: alias {alias!r} names no session opened in this vector")
                if output.priority >= theirs:
                    fail(f"priority_lt: the new session's priority {output.priority} is not smaller than {alias}'s {theirs}")
        elif do == "acquire":
            self.check_verdict(e, output)
        elif do == "heartbeat" and "results" in e:
            for alias, status, expires_at in e["results"]:
                ident = a.lease(alias)
                if request is not None and ident not in request:
                    fail(f"results names {alias!r}, which the heartbeat did not ask about")
                found = [r for r in output if r[0] == ident]
                if not found:
                    got = ", ".join(f"{a.label('lease', r[0])}: {r[1]}" for r in output)
                    fail(f"results: no outcome for {alias} (got {got})")
                for _, got_status, got_expiry in found:
                    if status is not None and status != got_status:
                        fail(f"results[{alias}]: expected {status!r}, got {got_status!r}")
                    if expires_at is not None:
                        if got_status != "OK":
                            fail(f"results[{alias}]: expected OK with expires_at {expires_at}, got {got_status}")
                        check_same(f"results[{alias}].expires_at", expires_at, got_expiry)
        elif do == "release":
            check_same("released", e.get("released"), output)
        elif do == "reconcile" and "status" in e:
            for alias, status, expires_at in e["status"]:
                ident = a.lease(alias)
                if request is not None and ident not in request:
                    fail(f"status names {alias!r}, which the reconcile did not ask about")
                found = [r for r in output if r[0] == ident]
                if not found:
                    fail(f"status: no answer for {alias}")
                _, got_status, got_expiry, _fence = found[0]
                check_same(f"status[{alias}]", status, got_status)
                if expires_at is not None:
                    if got_status != "ACTIVE":
                        fail(f"status[{alias}]: expected ACTIVE with expires_at {expires_at}, got {got_status}")
                    check_same(f"status[{alias}].expires_at", expires_at, got_expiry)
        elif do == "resource_state":
            for key in ("holders", "covering"):
                if key in e:
                    self.check_holders(key, e[key], output[key])
            if "waiting" in e:
                queue = [f"{a.label('session', w['session_id'])} {a.label('ticket', w['ticket'])}" for w in output["waiting"]]
                if len(e["waiting"]) != len(queue):
                    fail(f"waiting: expected {len(e['waiting'])} entries, got {len(queue)} [{', '.join(queue)}]")
                for i, (want, w) in enumerate(zip(e["waiting"], output["waiting"])):
                    if want["session"] is not None and a.session(want["session"]) != w["session_id"]:
                        fail(f"waiting[{i}].session: expected {want['session']}, got {queue[i]} (queue: [{', '.join(queue)}])")
                    if want["ticket"] is not None and a.ticket(want["ticket"]) != w["ticket"]:
                        fail(f"waiting[{i}].ticket: expected {want['ticket']}, got {queue[i]} (queue: [{', '.join(queue)}])")
        elif do == "next_deadline" and "deadline" in e:
            if e["deadline"] != output:
                fail(f"deadline: expected {e['deadline']!r}, got {output!r}")

    def check_verdict(self, e: dict[str, Any], v: _core.Verdict) -> None:
        a = self.aliases
        if "verdict" in e and e["verdict"] != v.verdict:
            fail(f"verdict: expected {e['verdict']}, got {describe_verdict(v, a)}")
        answer = describe_verdict(v, a)
        if v.verdict == "GRANTED":
            forbid("ticket" in e, "ticket", answer)
            forbid("held_by" in e, "held_by", answer)
            forbid("retry_after_ms" in e, "retry_after_ms", answer)
            if "leases" in e:
                self.match_leases("leases", e["leases"], v.leases)
        elif v.verdict == "WAIT":
            forbid("leases" in e, "leases", answer)
            forbid("retry_after_ms" in e, "retry_after_ms", answer)
            if e.get("ticket") is not None:
                a.bind(e["ticket"], "ticket", v.ticket)
        else:
            forbid("leases" in e, "leases", answer)
            forbid("ticket" in e, "ticket", answer)
            if "retry_after_ms" in e:
                lo, hi = e["retry_after_ms"]
                if not lo <= (v.retry_after_ms or 0) <= hi:
                    fail(f"retry_after_ms: expected in [{lo}, {hi}], got {v.retry_after_ms}")
        if "held_by" in e and v.verdict != "GRANTED":
            self.session_set("held_by", e["held_by"], [b.session_id for b in v.held_by])

    def session_set(self, what: str, expected: list[str], got: list[int]) -> None:
        a = self.aliases
        want = [a.session(x) for x in expected]
        if len(set(want)) != len(want):
            fail(f"{what}: the expected set {expected!r} names a session twice")
        if sorted(want) != sorted(got):
            show_ids: Callable[[list[int]], str] = lambda ids: ", ".join(a.label("session", i) for i in sorted(ids))
            fail(f"{what}: expected {{{show_ids(want)}}}, got {{{show_ids(got)}}}")

    def id_set(self, what: str, kind: str, expected: list[str], got: list[int]) -> None:
        a = self.aliases
        want = [a.resolve(x, kind) for x in expected]
        if sorted(want) != sorted(got):
            show_ids: Callable[[list[int]], str] = lambda ids: ", ".join(a.label(kind, i) for i in sorted(ids))
            fail(f"{what}: expected {{{show_ids(want)}}}, got {{{show_ids(got)}}}")

    def match_leases(self, what: str, expected: list[dict[str, Any]], got: Sequence[_core.Lease]) -> None:
        a = self.aliases
        if len(expected) != len(got):
            fail(f"{what}: expected {len(expected)} leases, got {len(got)}: {describe_leases(got, a)}")
        for i, (e, g) in enumerate(zip(expected, got)):
            at = f"{what}[{i}]"
            check_same(f"{at}.resource", e["resource"], g.resource)
            check_same(f"{at}.predicate", e["predicate"], g.predicate)
            check_same(f"{at}.expires_at", e["expires_at"], g.expires_at)
            check_same(f"{at}.ttl_ms", e["ttl_ms"], g.ttl_ms)
            if e["fence_gt"] is not None:
                try:
                    _, fence = a.bound_lease(e["fence_gt"])
                except Failure as m:
                    fail(f"{at}.fence_gt: {m}")
                if g.fence <= fence:
                    fail(f"{at}.fence_gt: expected a fence greater than {e['fence_gt']}'s {fence}, got {g.fence}")
            if e["same_as"] is not None:
                try:
                    ident, _ = a.bound_lease(e["same_as"])
                except Failure as m:
                    fail(f"{at}.same_as: {m}")
                if g.lease_id != ident:
                    fail(f"{at}.same_as: expected lease {a.label('lease', ident)}, got {a.label('lease', g.lease_id)}")
            if e["as"] is not None:
                try:
                    a.bind(e["as"], "lease", (g.lease_id, g.fence))
                except Failure as m:
                    fail(f"{at}.as: {m}")

    def check_holders(self, what: str, expected: list[dict[str, Any]], got: list[dict[str, Any]]) -> None:
        a = self.aliases
        shown = ", ".join(f"{a.label('session', h['session_id'])} {h['predicate']} {h['resource']}" for h in got)
        if len(expected) != len(got):
            fail(f"{what}: expected {len(expected)} entries, got {len(got)} [{shown}]")

        def fits(e: dict[str, Any], h: dict[str, Any]) -> bool:
            if e["session"] is not None and a.session(e["session"]) != h["session_id"]:
                return False
            if e["predicate"] is not None and e["predicate"] != h["predicate"]:
                return False
            return e["resource"] is None or e["resource"] == h["resource"]

        table = [[fits(e, h) for h in got] for e in expected]
        if not perfect_matching(table):
            want = ", ".join(" ".join(x or "*" for x in (e["session"], e["predicate"], e["resource"])) for e in expected)
            fail(f"{what}: expected [{want}] (any order, * = any), got [{shown}]")

    def check_events(self, expected: list[dict[str, Any]], got: list[_core.Event]) -> None:
        a = self.aliases
        if len(expected) != len(got):
            fail(f"events: expected {len(expected)}, got {len(got)}: {describe_events(got, a)}")
        for i, (e, g) in enumerate(zip(expected, got)):
            try:
                self.check_event(e, g)
            except Failure as m:
                fail(f"events[{i}]: {m} (all events: {describe_events(got, a)})")

    def check_event(self, e: dict[str, Any], g: _core.Event) -> None:
        a = self.aliases
        check_same("event", e["event"], g.event)

        def absent(key: str) -> NoReturn:
            fail(f"`{key}` is expected, but a {g.event} event has none")

        if e["session"] is not None and a.session(e["session"]) != g.session:
            fail(f"session: expected {e['session']}, got {a.label('session', g.session)}")
        if e["ticket"] is not None:
            if g.ticket is None:
                absent("ticket")
            if a.ticket(e["ticket"]) != g.ticket:
                fail(f"ticket: expected {e['ticket']}, got {a.label('ticket', g.ticket)}")
        if e["lease"] is not None:
            if g.lease is None:
                absent("lease")
            if a.lease(e["lease"]) != g.lease:
                fail(f"lease: expected {e['lease']}, got {a.label('lease', g.lease)}")
        if e["by"] is not None:
            if g.by is None:
                absent("by")
            if a.session(e["by"]) != g.by:
                fail(f"by: expected {e['by']}, got {a.label('session', g.by)}")
        if e["leases"] is not None:
            if g.leases is None:
                absent("leases")
            self.match_leases("leases", e["leases"], g.leases)
        if e["retry_after_ms"] is not None:
            if g.retry_after_ms is None:
                absent("retry_after_ms")
            lo, hi = e["retry_after_ms"]
            if not lo <= g.retry_after_ms <= hi:
                fail(f"retry_after_ms: expected in [{lo}, {hi}], got {g.retry_after_ms}")
        if e["lost_leases"] is not None:
            if g.lost_leases is None:
                absent("lost_leases")
            self.id_set("lost_leases", "lease", e["lost_leases"], g.lost_leases)
        if e["lost_tickets"] is not None:
            if g.lost_tickets is None:
                absent("lost_tickets")
            self.id_set("lost_tickets", "ticket", e["lost_tickets"], g.lost_tickets)


def perfect_matching(fits: list[list[bool]]) -> bool:
    """Whether every row can take a distinct column it fits (augmenting paths)."""
    cols = len(fits[0]) if fits else 0
    owner: list[int | None] = [None] * cols

    def augment(row: int, seen: list[bool]) -> bool:
        for col in range(cols):
            if fits[row][col] and not seen[col]:
                seen[col] = True
                other = owner[col]
                if other is None or augment(other, seen):
                    owner[col] = row
                    return True
        return False

    return all(augment(row, [False] * cols) for row in range(len(fits)))


# ---- files and the command line -------------------------------------------------------------


def run_source(file: str, text: str) -> tuple[str, str | None, str | None]:
    """Runs one vector given as text: ``(file, name, failure or None)``."""
    name: str | None = None
    try:
        value = parse_json(text)
        if isinstance(value, dict) and isinstance(value.get("name"), str):
            name = value["name"]
        vector = parse_vector(value)
        Runner(vector["config"]).run(vector["steps"])
    except Failure as e:
        return (file, name, str(e))
    except BaseException as e:  # a crash of the binding is a failure of this vector, not of the run
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        return (file, name, f"the host crashed: {type(e).__name__}: {e}")
    return (file, name, None)


def run_file(path: str) -> tuple[str, str | None, str | None]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        return (path, None, f"cannot read the file: {e}")
    return run_source(path, text)


def expand(path: str) -> list[str]:
    if not os.path.isdir(path):
        return [path]
    names = sorted(n for n in os.listdir(path) if n.endswith(".json") and not os.path.isdir(os.path.join(path, n)))
    return [os.path.join(path, n) for n in names]


def run_paths(paths: Sequence[str]) -> list[tuple[str, str | None, str | None]]:
    results: list[tuple[str, str | None, str | None]] = []
    for path in paths:
        try:
            files = expand(path)
        except OSError as e:
            results.append((path, None, f"cannot list the directory: {e}"))
            continue
        results.extend(run_file(f) for f in files)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    paths = list(sys.argv[1:] if argv is None else argv)
    if not paths or any(p in ("-h", "--help") for p in paths):
        print("usage: python -m klock.conformance PATH...   (vector files, or directories of *.json vectors)", file=sys.stderr)
        return 2
    results = run_paths(paths)
    passed = 0
    for file, name, failure in results:
        label = name if name is not None else "(unnamed)"
        if failure is None:
            passed += 1
            print(f"ok {file}: {label}")
        else:
            print(f"FAIL {file}: {label}: {failure}")
    failed = len(results) - passed
    print(f"{passed} passed, {failed} failed")
    if not results:
        print(f"no vectors found in {' '.join(paths)}", file=sys.stderr)
    return 0 if results and failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
