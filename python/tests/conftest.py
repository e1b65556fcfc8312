from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

import klock


@pytest.fixture
def make_klock() -> Iterator[Callable[..., klock.Klock]]:
    """Klocks that are closed (timer thread joined) when the test ends; the timer must not
    have failed."""
    made: list[klock.Klock] = []

    def make(*args: Any, **kwargs: Any) -> klock.Klock:
        k = klock.Klock(*args, **kwargs)
        made.append(k)
        return k

    yield make
    for k in made:
        k.close()
        assert k.timer_error is None, f"the timer thread failed: {k.timer_error!r}"


@pytest.fixture(scope="session")
def manual_server() -> Iterator[Any]:
    """One ``klock serve --memory --clock manual`` for the deterministic remote runs (each
    resets it to its configuration with ``POST /v1/reset``)."""
    from server import Server

    server = Server("--memory", "--clock", "manual")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def memory_server() -> Iterator[Any]:
    """One ``klock serve --memory`` on the system clock for the real-time remote tests."""
    from server import Server

    server = Server("--memory")
    yield server
    server.stop()
