"""Clocks for the friendly client: what time it is, and callbacks at a given time.

Contract
--------
A clock has ``now()``: integer milliseconds, never going back, any epoch. ``set_timer(at,
callback)`` runs ``callback()`` once, when ``now()`` has reached ``at``, and returns a handle
for ``clear_timer(handle)``, which makes sure it does not run (clearing a timer that ran or was
cleared already is harmless). A :class:`~klock.Klock` takes every time it uses from its clock:
the ``now`` of every kernel call, its one timer (the kernel's next deadline and the next
heartbeat due), the sleep after a DIE, DIED or WOUNDED, and the ``timeout`` budget of an
acquisition. Nothing in the client reads another clock or sleeps any other way, so a
:class:`ManualClock` drives a Klock through virtual time deterministically, without sleeping.

* :class:`SystemClock` (the default): monotonic milliseconds since the clock was made (or a
  ``now`` function of your own), and one daemon thread that runs the callbacks in real time.
* :class:`ManualClock`: time moves only when a test says so. :meth:`ManualClock.advance` runs
  every timer due on the way, each with the time standing at its own ``at`` (as if the process
  had been woken exactly then); :meth:`ManualClock.jump` moves time without running any (a
  paused process: they run late, at the next ``advance``). Callbacks run in the thread that
  advances the clock.
"""

from __future__ import annotations

import heapq
import itertools
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Protocol

__all__ = ["Clock", "SystemClock", "ManualClock", "Timer"]

# threading's waits take at most TIMEOUT_MAX seconds; a later timer is waited for in steps.
_LONGEST_WAIT_S = min(threading.TIMEOUT_MAX, 86_400.0)


class Timer:
    """A handle of :meth:`Clock.set_timer`: a callback due at ``at`` (milliseconds)."""

    __slots__ = ("at", "_seq", "callback")

    def __init__(self, at: int, seq: int, callback: Callable[[], object]) -> None:
        self.at = at
        self._seq = seq
        self.callback: Callable[[], object] | None = callback

    def __lt__(self, other: Timer) -> bool:
        return (self.at, self._seq) < (other.at, other._seq)


class Clock(Protocol):
    """What a :class:`~klock.Klock` needs of a clock (see the module contract)."""

    def now(self) -> int: ...

    def set_timer(self, at: int, callback: Callable[[], object]) -> Timer: ...

    def clear_timer(self, timer: Timer) -> None: ...


class _Timers:
    """Pending timers, earliest first (ties in the order they were set)."""

    def __init__(self) -> None:
        self._heap: list[Timer] = []
        self._seq = itertools.count()

    def add(self, at: int, callback: Callable[[], object]) -> Timer:
        _check_ms(at, "at")
        if not callable(callback):
            raise TypeError(f"callback must be callable, got {type(callback).__name__}")
        timer = Timer(at, next(self._seq), callback)
        heapq.heappush(self._heap, timer)
        return timer

    def remove(self, timer: Timer) -> None:
        if timer.callback is None:
            return  # ran or cleared already
        timer.callback = None
        self._heap.remove(timer)  # a Klock keeps a handful of timers: linear is fine
        heapq.heapify(self._heap)

    def first(self) -> Timer | None:
        return self._heap[0] if self._heap else None

    def pop_due(self, now: int) -> Callable[[], object] | None:
        """Takes the earliest timer due at ``now`` (its callback), or None."""
        if not self._heap or self._heap[0].at > now:
            return None
        timer = heapq.heappop(self._heap)
        callback, timer.callback = timer.callback, None
        return callback


def _check_ms(value: object, what: str) -> int:
    if type(value) is not int:
        raise TypeError(f"{what} must be an int number of milliseconds, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{what} must be >= 0 milliseconds, got {value}")
    return value


def _run_callback(callback: Callable[[], object]) -> None:
    try:
        callback()
    except Exception:  # a callback's bug must not stop the other timers: report it
        sys.excepthook(*sys.exc_info())


class SystemClock:
    """Real time: ``now()`` is monotonic milliseconds since the clock was made (or what the
    ``now`` function given returns, in integer milliseconds), and one daemon thread runs the
    timers when their time comes. The thread holds the clock only weakly between timers, so a
    clock nobody references any more is collected and its thread ends; :meth:`close` ends it
    at once. A :class:`~klock.Klock` made without a clock makes its own and closes it."""

    def __init__(self, now: Callable[[], int] | None = None) -> None:
        if now is not None and not callable(now):
            raise TypeError(
                f"now must be a function returning milliseconds, got {type(now).__name__}"
            )
        self._t0 = time.monotonic_ns()
        self._now = now
        self._timers = _Timers()
        self._wake = threading.Condition(threading.Lock())
        self._closed = False
        self._thread = threading.Thread(
            target=_system_clock_main,
            args=(weakref.ref(self), self._wake),
            name="klock-timer",
            daemon=True,
        )
        weakref.finalize(self, _notify, self._wake).atexit = False
        self._thread.start()

    def now(self) -> int:
        if self._now is not None:
            return self._now()
        return (time.monotonic_ns() - self._t0) // 1_000_000

    def set_timer(self, at: int, callback: Callable[[], object]) -> Timer:
        with self._wake:
            timer = self._timers.add(at, callback)
            if self._timers.first() is timer:
                self._wake.notify()
        return timer

    def clear_timer(self, timer: Timer) -> None:
        with self._wake:
            self._timers.remove(timer)

    def close(self) -> None:
        """Stops the thread (pending timers never run). Idempotent."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def _step_locked(self) -> Callable[[], object] | float | None:
        """A callback to run now, or how long to sleep (``None``: until a timer is set)."""
        first = self._timers.first()
        if first is None:
            return None
        now = self.now()
        callback = self._timers.pop_due(now)
        if callback is not None:
            return callback
        # Milliseconds of this clock are taken as real ones; a wake-up that comes early (a
        # `now` function running slow) just looks again.
        return min(_LONGEST_WAIT_S, (first.at - now) / 1000 + 0.0005)


def _system_clock_main(ref: weakref.ref[SystemClock], wake: threading.Condition) -> None:
    with wake:
        while True:
            clock = ref()
            if clock is None or clock._closed:
                return
            step = clock._step_locked()
            del clock
            if callable(step):
                wake.release()
                try:
                    _run_callback(step)
                finally:
                    wake.acquire()
            else:
                wake.wait(step)


def _notify(wake: threading.Condition) -> None:
    with wake:
        wake.notify_all()


class ManualClock:
    """Virtual time for tests: starts at ``start`` and moves only by :meth:`advance` (running
    the timers due on the way, each at its own time) or :meth:`jump` (running none).
    Thread-safe; callbacks run in the thread that advances the clock."""

    def __init__(self, start: int = 0) -> None:
        self._now = _check_ms(start, "start")
        self._timers = _Timers()
        self._lock = threading.Lock()

    def now(self) -> int:
        return self._now

    def set_timer(self, at: int, callback: Callable[[], object]) -> Timer:
        with self._lock:
            return self._timers.add(at, callback)

    def clear_timer(self, timer: Timer) -> None:
        with self._lock:
            self._timers.remove(timer)

    def next_timer(self) -> int | None:
        """When the earliest pending timer is due (possibly already), or None."""
        with self._lock:
            first = self._timers.first()
            return None if first is None else first.at

    def advance(self, ms: int) -> None:
        """Moves time forward by ``ms``, running every timer due up to the new time in time
        order, with ``now()`` standing at each one's ``at`` (or the current time, for one
        already overdue) while it runs; timers that callbacks set within the range run too."""
        with self._lock:
            target = self._now + _check_ms(ms, "ms")
        while True:
            with self._lock:
                first = self._timers.first()
                if first is None or first.at > target:
                    self._now = target
                    return
                self._now = max(self._now, first.at)
                callback = self._timers.pop_due(self._now)
            if callback is not None:
                _run_callback(callback)

    def jump(self, ms: int) -> None:
        """Moves time forward by ``ms`` without running any timer: as if the process had been
        paused (swapped out, stopped) meanwhile. The timers now overdue run at the next
        :meth:`advance` (``advance(0)`` runs them at once)."""
        with self._lock:
            self._now += _check_ms(ms, "ms")

    def __repr__(self) -> str:
        return f"ManualClock(now={self._now}, timers={len(self._timers._heap)})"
