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
