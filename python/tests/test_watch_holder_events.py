"""The remote client's event polls leave the holder events (ACQUIRED, RELEASED) out unless
something watches the namespace (``holder_events=false``: the client learns its own grants and
releases from their answers), against a real ``klock serve --memory`` in real time:

* another client's uncontended acquire+release pairs answer none of an idle client's polls
  (each would answer one otherwise: a poll per event of every process in the namespace);
* a watcher registered while the reader's poll is held without them still sees the next
  ACQUIRED: the poll is sent again at once, with them, from the same cursor (held, it would
  have moved past it).

Every wait is bounded."""

from __future__ import annotations

import re
import time

import klock
from klock.remote import RemoteEvent
from server import Server, call


def _watch_polls(url: str) -> float:
    """The watch requests the server answered so far (``/metrics``)."""
    status, text = call("GET", f"{url}/metrics")
    assert status == 200, text
    total = 0.0
    for line in text.splitlines():
        match = re.match(
            r'^klock_http_requests_total\{route="/v1/ns/\{ns\}/watch".*\} (\S+)$', line
        )
        if match:
            total += float(match.group(1))
    return total


def test_another_clients_acquires_and_releases_answer_no_poll() -> None:
    server = Server("--memory")
    try:
        with (
            klock.connect(server.url) as idle,
            idle.session("bystander"),
            klock.connect(server.url) as busy,
            busy.session("churner") as churner,
        ):
            time.sleep(0.3)  # both readers' polls are held
            before = _watch_polls(server.url)
            for _ in range(100):
                with churner.lease("MUTATES FILE:/churn"):
                    pass
            answered = _watch_polls(server.url) - before
            assert answered <= 1, f"{answered} polls answered during 100 acquire+release pairs"
    finally:
        server.stop()


def test_a_watcher_registered_while_a_poll_is_held_sees_the_next_acquired() -> None:
    server = Server("--memory")
    try:
        with klock.connect(server.url) as k, k.session("a") as session:
            time.sleep(0.3)  # the reader's poll is held, without holder events
            seen: list[RemoteEvent] = []
            watch = k._watch("default", seen.append)
            try:
                with session.lease("MUTATES FILE:/holder"):
                    deadline = time.monotonic() + 3
                    while not any(e.event == "ACQUIRED" for e in seen):
                        assert time.monotonic() < deadline, f"no ACQUIRED within 3 s: {seen}"
                        time.sleep(0.02)
            finally:
                watch.stop()
    finally:
        server.stop()
