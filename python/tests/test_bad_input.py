"""Bad input at every klock._core entry point: the named error, and no change of state.

Every argument of every method gets None, wrong types, bool, float, NaN and infinities,
negative and huge numbers, and text that is not valid Unicode (lone surrogates). Each must
raise the documented exception (TypeError / ValueError / OverflowError, or the kernel's
KlockError subclass for well-typed but invalid values) and leave the kernel exactly as it was:
same clock, same snapshot, no event.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from klock import _core
from klock._core import Kernel

NAN = float("nan")
INF = float("inf")

BAD_INTS: list[tuple[Any, type[BaseException]]] = [
    (None, TypeError),
    ("1", TypeError),
    (b"1", TypeError),
    (1.0, TypeError),
    (1.5, TypeError),
    (NAN, TypeError),
    (INF, TypeError),
    (-INF, TypeError),
    (True, TypeError),
    (False, TypeError),
    ([1], TypeError),
    (object(), TypeError),
    (-1, ValueError),
    (-(2**200), ValueError),
    (2**64, OverflowError),
    (2**200, OverflowError),
]
BAD_STRS: list[tuple[Any, type[BaseException]]] = [
    (None, TypeError),
    (5, TypeError),
    (NAN, TypeError),
    (b"alice", TypeError),
    (["alice"], TypeError),
    ("\udc80", ValueError),
    ("ok\ud800ok", ValueError),
]
BAD_INTENT_LISTS: list[tuple[Any, type[BaseException]]] = [
    (None, TypeError),
    (5, TypeError),
    (NAN, TypeError),
    ("MUTATES FILE:/x", TypeError),
    (b"MUTATES FILE:/x", TypeError),
    ({"MUTATES FILE:/x": 1}, TypeError),
    ([5], TypeError),
    ([None], TypeError),
    (["MUTATES FILE:/x", b"MUTATES FILE:/y"], TypeError),
    (["MUTATES FILE:/\udc80"], ValueError),
]
BAD_ID_LISTS: list[tuple[Any, type[BaseException]]] = [
    ("1", TypeError),
    (b"\x01", TypeError),
    (5, TypeError),
    (NAN, TypeError),
    ([1.5], TypeError),
    ([NAN], TypeError),
    ([None], TypeError),
    ([True], TypeError),
    ([-1], ValueError),
    ([2**64], OverflowError),
]
BAD_BOOLS: list[tuple[Any, type[BaseException]]] = [
    (None, TypeError),
    (1, TypeError),
    (0, TypeError),
    ("yes", TypeError),
    (NAN, TypeError),
]

NOW = 100


class World:
    """A kernel with two sessions, leases and a waiting ticket, settled at NOW."""

    def __init__(self) -> None:
        self.k = Kernel(seed=9)
        self.a = self.k.open_session("alice", "default", 0).session_id
        self.b = self.k.open_session("bob", "default", 0).session_id
        self.lease = self.k.acquire(self.b, ["MUTATES FILE:/x"], 1, ttl_ms=50).leases[0].lease_id
        self.k.acquire(self.b, ["CONSUMES FILE:/y"], 2, ttl_ms=10_000)
        self.ticket = self.k.acquire(self.a, ["MUTATES FILE:/y"], 3).ticket
        self.digest = self.k.digest(self.a, 4)
        self.k.advance(NOW)  # settles the expiry of FILE:/x at 51
        self.k.drain_events()
        self.before = self.k.snapshot(NOW)

    def assert_unchanged(self) -> None:
        assert self.k.now() == NOW, "a bad call reached the kernel (its clock moved)"
        assert self.k.pending_events() == 0
        assert self.k.snapshot(NOW) == self.before


# Every entry point: name -> (call with keyword overrides, {argument: kind}).
def entry_points(w: World) -> dict[str, tuple[Callable[..., Any], dict[str, str]]]:
    k = w.k
    later = NOW + 100
    return {
        "open_session": (
            lambda agent_id="carol", namespace="default", now=later: k.open_session(
                agent_id, namespace, now
            ),
            {"agent_id": "str", "namespace": "str", "now": "int"},
        ),
        "close_session": (
            lambda session=w.a, now=later: k.close_session(session, now),
            {"session": "int", "now": "int"},
        ),
        "suspend_session": (
            lambda session=w.a, now=later: k.suspend_session(session, now),
            {"session": "int", "now": "int"},
        ),
        "digest": (
            lambda session=w.a, now=later: k.digest(session, now),
            {"session": "int", "now": "int"},
        ),
        "resume_session": (lambda now=later: k.resume_session(w.digest, now), {"now": "int"}),
        "acquire": (
            lambda session=w.b, intents=("MUTATES FILE:/z",), now=later, ttl_ms=10, wait=True, wait_timeout_ms=10: (
                k.acquire(
                    session,
                    list(intents) if isinstance(intents, tuple) else intents,
                    now,
                    ttl_ms=ttl_ms,
                    wait=wait,
                    wait_timeout_ms=wait_timeout_ms,
                )
            ),
            {
                "session": "int",
                "intents": "intents",
                "now": "int",
                "ttl_ms": "opt_int",
                "wait": "bool",
                "wait_timeout_ms": "opt_int",
            },
        ),
        "heartbeat": (
            lambda session=w.b, leases=None, now=later: k.heartbeat(session, leases, now),
            {"session": "int", "leases": "ids_or_none", "now": "int"},
        ),
        "release": (
            lambda session=w.b, lease=w.lease, now=later: k.release(session, lease, now),
            {"session": "int", "lease": "int", "now": "int"},
        ),
        "release_all": (
            lambda session=w.b, now=later: k.release_all(session, now),
            {"session": "int", "now": "int"},
        ),
        "reconcile": (
            lambda session=w.b, leases=(w.lease,), now=later: k.reconcile(
                session, list(leases) if isinstance(leases, tuple) else leases, now
            ),
            {"session": "int", "leases": "ids", "now": "int"},
        ),
        "cancel_wait": (
            lambda session=w.a, ticket=w.ticket, now=later: k.cancel_wait(session, ticket, now),
            {"session": "int", "ticket": "int", "now": "int"},
        ),
        "advance": (lambda now=later: k.advance(now), {"now": "int"}),
        "resource_state": (
            lambda resource="FILE:/x", namespace="default", now=later: k.resource_state(
                resource, namespace, now
            ),
            {"resource": "str", "namespace": "str", "now": "int"},
        ),
        "snapshot": (lambda now=later: k.snapshot(now), {"now": "int"}),
    }


def bad_values(kind: str) -> list[tuple[Any, type[BaseException]]]:
    if kind == "int":
        return BAD_INTS
    if kind == "opt_int":  # None means "the kernel's default" here
        return [(v, e) for v, e in BAD_INTS if v is not None]
    if kind == "str":
        return BAD_STRS
    if kind == "intents":
        return BAD_INTENT_LISTS
    if kind == "ids":
        return [(None, TypeError), *BAD_ID_LISTS]
    if kind == "ids_or_none":
        return BAD_ID_LISTS
    assert kind == "bool"
    return BAD_BOOLS


def cases() -> list[tuple[str, str, int]]:
    w = World()
    out = []
    for name, (_, params) in entry_points(w).items():
        for param, kind in params.items():
            for i in range(len(bad_values(kind))):
                out.append((name, param, i))
    return out


CASES = cases()


@pytest.mark.parametrize("method, param, index", CASES, ids=[f"{m}-{p}-{i}" for m, p, i in CASES])
def test_bad_argument_is_refused_and_changes_nothing(method: str, param: str, index: int) -> None:
    w = World()
    call, params = entry_points(w)[method]
    value, error = bad_values(params[param])[index]
    with pytest.raises(error) as raised:
        call(**{param: value})
    assert not isinstance(raised.value, _core.KlockError)
    assert param in str(raised.value), f"the message should name the argument: {raised.value}"
    w.assert_unchanged()


def test_good_arguments_do_reach_the_kernel() -> None:
    """The harness itself: each entry point with its default arguments succeeds (or fails in
    the kernel), so a refusal above really comes from the bad argument."""
    for name in entry_points(World()):
        w = World()
        call = entry_points(w)[name][0]
        try:
            call()
        except _core.KlockError:
            pass
        assert w.k.now() == NOW + 100, name


@pytest.mark.parametrize(
    "digest, error",
    [
        (None, TypeError),
        ([], TypeError),
        ("digest", TypeError),
        ({}, ValueError),
        ({"version": 1, "identity": {}, "recovery": {}, "extra": 1}, ValueError),
    ],
)
def test_bad_digest_shape(digest: Any, error: type[BaseException]) -> None:
    w = World()
    with pytest.raises(error):
        w.k.resume_session(digest, NOW + 1)
    w.assert_unchanged()


@pytest.mark.parametrize(
    "path, value, error",
    [
        (("version",), -1, ValueError),
        (("version",), 2**32, OverflowError),
        (("version",), 1.0, TypeError),
        (("identity", "session_id"), "1", TypeError),
        (("identity", "session_id"), True, TypeError),
        (("identity", "epoch"), 2**64, OverflowError),
        (("identity", "priority_timestamp"), NAN, TypeError),
        (("identity", "agent_id"), "\udc80", ValueError),
        (("identity", "namespace"), None, TypeError),
        (("identity", "sneaky"), 1, ValueError),
        (("recovery", "pending_intents"), "MUTATES FILE:/x", TypeError),
        (("recovery", "pending_intents"), [1], TypeError),
        (("recovery", "last_phase"), 3, TypeError),
    ],
)
def test_bad_digest_field(path: tuple[str, ...], value: Any, error: type[BaseException]) -> None:
    w = World()
    digest = {
        "version": w.digest["version"],
        "identity": dict(w.digest["identity"]),
        "recovery": dict(w.digest["recovery"]),
    }
    target: dict[str, Any] = digest
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(error):
        w.k.resume_session(digest, NOW + 1)
    w.assert_unchanged()


def test_missing_digest_field() -> None:
    w = World()
    digest = {
        "version": 1,
        "identity": dict(w.digest["identity"]),
        "recovery": dict(w.digest["recovery"]),
    }
    del digest["identity"]["epoch"]
    with pytest.raises(ValueError, match="epoch"):
        w.k.resume_session(digest, NOW + 1)
    w.assert_unchanged()


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"policy": 5}, TypeError),
        ({"policy": b"wait_die"}, TypeError),
        ({"policy": "\udc80"}, ValueError),
        ({"seed": -1}, ValueError),
        ({"seed": 2**64}, OverflowError),
        ({"seed": 1.5}, TypeError),
        ({"default_ttl_ms": True}, TypeError),
        ({"max_ttl_ms": NAN}, TypeError),
        ({"grace_ms": "1"}, TypeError),
        ({"session_idle_ms": -(2**70)}, ValueError),
        ({"max_leases_per_session": 2**65}, OverflowError),
        ({"backoff_base_ms": [1]}, TypeError),
        ({"backoff_cap_ms": INF}, TypeError),
        ({"default_wait_timeout_ms": b""}, TypeError),
        ({"max_lease_lifetime_ms": object()}, TypeError),
    ],
)
def test_bad_kernel_config(kwargs: dict[str, Any], error: type[BaseException]) -> None:
    with pytest.raises(error):
        Kernel(**kwargs)


@pytest.mark.parametrize(
    "value, error", [(None, TypeError), (5, TypeError), ("\udc80", ValueError)]
)
def test_bad_parse_intent(value: Any, error: type[BaseException]) -> None:
    with pytest.raises(error):
        _core.parse_intent(value)


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda w: w.k.open_session("", "default", NOW + 1), "INVALID_AGENT_ID"),
        (lambda w: w.k.open_session("a" * 257, "default", NOW + 1), "INVALID_AGENT_ID"),
        (lambda w: w.k.open_session("a\x00b", "default", NOW + 1), "INVALID_AGENT_ID"),
        (lambda w: w.k.open_session("a", "", NOW + 1), "INVALID_NAMESPACE"),
        (lambda w: w.k.acquire(w.b, [], NOW + 1), "INVALID_MANIFEST"),
        (lambda w: w.k.acquire(w.b, ["MUTATES FILE:/x"] * 257, NOW + 1), "INVALID_MANIFEST"),
        (lambda w: w.k.acquire(w.b, ["WRITES FILE:/x"], NOW + 1), "INVALID_PREDICATE"),
        (
            lambda w: w.k.acquire(w.b, ["MUTATES FILE:/" + "x" * 10_000_000], NOW + 1),
            "INVALID_RESOURCE",
        ),
        (lambda w: w.k.acquire(w.b, ["MUTATES FILE:/a/../b"], NOW + 1), "INVALID_RESOURCE"),
        (lambda w: w.k.acquire(w.b, ["MUTATES FILE:/x"], NOW + 1, ttl_ms=0), "INVALID_TTL"),
        (lambda w: w.k.acquire(2**64 - 1, ["MUTATES FILE:/x"], NOW + 1), "UNKNOWN_SESSION"),
        (lambda w: w.k.release(w.a, w.lease, NOW + 1), "NOT_OWNER"),
        (lambda w: w.k.release(w.b, 2**64 - 1, NOW + 1), "UNKNOWN_LEASE"),
        (lambda w: w.k.cancel_wait(w.b, w.ticket, NOW + 1), "NOT_OWNER"),
        (lambda w: w.k.cancel_wait(w.a, 0, NOW + 1), "UNKNOWN_TICKET"),
        (lambda w: w.k.resource_state("nope", "default", NOW + 1), "INVALID_RESOURCE"),
        (lambda w: w.k.resource_state("FILE:/x", "\x07", NOW + 1), "INVALID_NAMESPACE"),
    ],
)
def test_kernel_refusals_change_nothing(call: Callable[[World], Any], name: str) -> None:
    w = World()
    with pytest.raises(_core.KlockError) as raised:
        call(w)
    assert raised.value.name == name and raised.value.code == _core.ERROR_CODES[name]
    # The kernel settled time to NOW + 1 (nothing was due); nothing else changed.
    assert w.k.pending_events() == 0
    after = w.k.snapshot(NOW + 1)
    before = dict(w.before, now=NOW + 1)
    assert after == before
