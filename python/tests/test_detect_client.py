"""``policy = "detect"`` through the friendly client (SPEC.md §6.1): a session that dies to
break a wait-for cycle gets :class:`klock.Died` naming the cycle (``.cycle``, session ids, the
victim first, as the kernel reports it, and the message), on both backends; whether the
requester dies (a DIE verdict) or a waiter already queued on the cycle (a DIED event)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

import klock
from klock import Klock

MakeKlock = Callable[..., Klock]


def _run(fn: Callable[[], None]) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as e:  # reported by the test
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    return t, errors


def _queued(k: Klock, resource: str) -> Callable[[], bool]:
    return lambda: len(k.resource_state(resource)["waiting"]) == 1


def _wait_until(predicate: Callable[[], bool]) -> None:
    done = threading.Event()
    for _ in range(5000):
        if predicate():
            return
        done.wait(0.002)
    raise AssertionError("condition not reached in time")


def _assert_names_cycle(died: klock.Died, victim: klock.Session, other: klock.Session) -> None:
    assert died.name == "DIE" and died.code == 0
    assert died.cycle == [victim.session_id, other.session_id]
    assert died.retry_after_ms >= 1
    assert f"died breaking a wait-for cycle with sessions [{other.session_id}]" in str(died)
    assert str([victim.session_id, other.session_id]) in died.message


def test_the_requester_that_closes_a_cycle_dies_naming_it(make_klock: MakeKlock) -> None:
    k = make_klock(policy="detect")
    old, young = k.session("old"), k.session("young")
    assert old.priority < young.priority  # young is the youngest unit of work: the victim
    holding, waited = threading.Event(), []

    def old_unit() -> None:
        with old.lease("MUTATES FILE:/a", timeout=10):
            holding.set()
            with old.lease("MUTATES FILE:/b", timeout=10) as inner:  # waits for young
                waited.append(inner.held)

    with young.lease("MUTATES FILE:/b", timeout=10):
        t, errors = _run(old_unit)
        assert holding.wait(10)
        _wait_until(_queued(k, "FILE:/b"))
        with pytest.raises(klock.Died) as died:
            with young.lease("MUTATES FILE:/a", timeout=10):  # closes young → old → young
                pass
    t.join(10)
    assert not t.is_alive() and not errors, errors
    assert waited == [True]  # old was never killed: it waited and got FILE:/b
    _assert_names_cycle(died.value, young, old)


def test_a_waiter_killed_on_a_cycle_dies_naming_it(make_klock: MakeKlock) -> None:
    k = make_klock(policy="detect")
    old, young = k.session("old"), k.session("young")
    assert old.priority < young.priority
    holding = threading.Event()
    outcome: list[BaseException] = []

    def young_unit() -> None:
        with young.lease("MUTATES FILE:/a", timeout=10):
            holding.set()
            try:
                # Queued behind old's FILE:/b (detect: a younger request waits too).
                with young.lease("MUTATES FILE:/b", timeout=10):
                    pass
            except klock.Died as e:
                outcome.append(e)

    with old.lease("MUTATES FILE:/b", timeout=10):
        t, errors = _run(young_unit)
        assert holding.wait(10)
        _wait_until(_queued(k, "FILE:/b"))
        # Closes old → young → old: young, the youngest, loses its queued ticket (DIED);
        # old waits for FILE:/a until young's unit rolls back.
        with old.lease("MUTATES FILE:/a", timeout=10) as inner:
            assert inner.held
    t.join(10)
    assert not t.is_alive() and not errors, errors
    assert len(outcome) == 1, outcome
    _assert_names_cycle(outcome[0], young, old)


def test_a_death_without_a_cycle_names_none(make_klock: MakeKlock) -> None:
    # wait_die: the younger session dies because it is younger, no cycle involved.
    k = make_klock()
    old, young = k.session("old"), k.session("young")
    with old.lease("MUTATES FILE:/b"), young.lease("MUTATES FILE:/a"):
        with pytest.raises(klock.Died) as died:
            with young.lease("MUTATES FILE:/b"):
                pass
    assert died.value.cycle == [] and "cycle" not in str(died.value)
