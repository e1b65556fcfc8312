"""Fixtures shared by the tests.

``make_klock`` makes Klocks on one of two backends (klock.backend), and every test that uses
it runs on both: ``inprocess`` (the Rust kernel in this process) and ``remote``
(klock.connect to a real ``klock serve --memory`` started for the test, one per kernel
configuration, so its counters are the test's own; or the test kit's manual-clock server,
``klock-testkit serve``, reset to the configuration when the test gives a ManualClock). A test that cannot run remotely is named in ``REMOTE_CANNOT`` with the reason,
and shows as skipped with it (never counted as a pass)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

import klock

# test name (without parameters) -> why it cannot run on the remote backend.
REMOTE_CANNOT: dict[str, str] = {
    "test_snapshot_stats_resource_state": (
        "klock serve has no snapshot route (stats and resource_state are covered by "
        "test_remote.py and the client scenarios)"
    ),
    "test_a_grant_settled_late_is_heartbeaten_by_its_expiry_not_by_the_time_it_was_seen": (
        "remotely a grant after a WAIT starts its local deadline at the acquire's send time "
        "(the shared lost-lease rule: the grant may predate the event), so a grant heard of "
        "1.1 s after the acquire with a 1 s TTL is lost at once, by design; this test holds "
        "the in-process rule (the kernel's settled expiry)"
    ),
}


@pytest.fixture(params=["inprocess", "remote"])
def backend(request: pytest.FixtureRequest) -> str:
    name = request.node.originalname
    if request.param == "remote" and name in REMOTE_CANNOT:
        pytest.skip(f"cannot run remotely: {REMOTE_CANNOT[name]}")
    return str(request.param)


@pytest.fixture
def make_klock(
    backend: str, request: pytest.FixtureRequest
) -> Iterator[Callable[..., klock.Klock]]:
    """Klocks that are closed (timer thread joined) when the test ends; the timer must not
    have failed."""
    made: list[klock.Klock] = []
    servers = _Servers()

    def make(*args: Any, **kwargs: Any) -> klock.Klock:
        if backend == "inprocess":
            k = klock.Klock(*args, **kwargs)
        else:
            clock = kwargs.pop("clock", None)
            config = dict(kwargs)
            if args:
                config["policy"] = args[0]
            if isinstance(clock, klock.ManualClock):
                server = request.getfixturevalue("manual_server")
                full = klock._core.Kernel(**config).config
                from server import call

                status, text = call(
                    "POST", f"{server.url}/v1/reset", json_body=full, headers={"Klock-Now": "0"}
                )
                assert status == 200, text
            else:
                server = servers.get(config)
            k = klock.connect(server.url, clock=clock)
        made.append(k)
        return k

    try:
        yield make
        for k in made:
            k.close()
            assert k.timer_error is None, f"the timer thread failed: {k.timer_error!r}"
            reader_error = getattr(k.kernel, "reader_error", None)
            assert reader_error is None, f"the event reader failed: {reader_error!r}"
    finally:
        servers.stop()


@pytest.fixture(scope="session")
def manual_server() -> Iterator[Any]:
    """One ``klock-testkit serve`` (``klock serve --memory --clock manual`` that can start
    over) for the deterministic remote runs (each resets it to its configuration with
    ``POST /v1/reset``)."""
    from server import Server, testkit_bin

    server = Server(program=testkit_bin())
    yield server
    server.stop()


class _Servers:
    """``klock serve --memory`` on the system clock, one per kernel configuration (``--config
    NAME=VALUE``), started on first use and stopped by :meth:`stop`."""

    def __init__(self) -> None:
        self._servers: dict[tuple[tuple[str, str], ...], Any] = {}

    def get(self, config: dict[str, Any]) -> Any:
        from server import Server

        key = tuple(
            sorted((name, str(value)) for name, value in config.items() if value is not None)
        )
        if key not in self._servers:
            flags = [arg for name, value in key for arg in ("--config", f"{name}={value}")]
            self._servers[key] = Server("--memory", *flags)
        return self._servers[key]

    def stop(self) -> None:
        for server in self._servers.values():
            server.stop()


@pytest.fixture(scope="session")
def memory_server() -> Iterator[Any]:
    """``klock serve --memory`` with the default configuration, on the system clock, shared by
    the remote-only tests."""
    servers = _Servers()
    yield servers.get({})
    servers.stop()
