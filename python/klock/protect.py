"""``@klock.protected(...)``: guard a tool function with a lease formatted from its arguments.

Contract: every call of the decorated function holds every intent (templates formatted with
``str.format`` from the call's bound arguments, defaults applied) for the duration of the
call, all at once, then releases them. The session is, in order: the ``session`` given to the
decorator; the current ``with session:`` block of this thread or task, when it belongs to the
decorator's Klock (or no Klock was given); otherwise a session of its own for the call
(agent id ``agent_id`` or the function's qualified name) on ``klock`` or on the process-wide
:func:`default_klock`. Works on plain and ``async`` functions.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from .client import Klock, OwnSessionLease, Session, _lease_ttl_ms, current_session

__all__ = ["protected", "default_klock"]

F = TypeVar("F", bound=Callable[..., Any])

_default: Klock | None = None
_default_lock = threading.Lock()


def default_klock() -> Klock:
    """The process-wide Klock used when no other is given (created on first use)."""
    global _default
    with _default_lock:
        if _default is None or _default._closed:
            _default = Klock()
        return _default


def protected(
    *templates: str,
    klock: Klock | None = None,
    session: Session | None = None,
    agent_id: str | None = None,
    namespace: str = "default",
    ttl: float | None = None,
    timeout: float | None = None,
    ttl_ms: int | None = None,
) -> Callable[[F], F]:
    """Decorates a function so each call holds ``templates`` (e.g. ``"MUTATES FILE:{path}"``).
    ``ttl`` and ``timeout`` are in seconds, as for :meth:`klock.Session.lease` (``ttl_ms`` is
    the deprecated spelling of ``ttl``)."""
    asked = _lease_ttl_ms(ttl, ttl_ms)
    if not templates:
        raise TypeError(
            "protected() needs at least one intent template, e.g. 'MUTATES FILE:{path}'"
        )
    for template in templates:
        if not isinstance(template, str):
            raise TypeError(f"intent templates must be str, got {type(template).__name__}")

    def decorate(fn: F) -> F:
        signature = inspect.signature(fn)
        name = agent_id or str(getattr(fn, "__qualname__", "protected"))

        def intents_for(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, ...]:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            return tuple(t.format(**bound.arguments) for t in templates)

        def session_for() -> Session | None:
            if session is not None:
                return session
            current = current_session()
            if (
                current is not None
                and not current.closed
                and (klock is None or current.klock is klock)
            ):
                return current
            return None

        if inspect.iscoroutinefunction(fn):
            async_fn = cast(Callable[..., Awaitable[Any]], fn)

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                intents = intents_for(args, kwargs)
                s = session_for()
                if s is not None:
                    async with s._lease_ms(intents, asked, timeout):
                        return await async_fn(*args, **kwargs)
                k = klock or default_klock()
                async with OwnSessionLease(k, intents, name, namespace, asked, timeout):
                    return await async_fn(*args, **kwargs)

            return cast(F, async_wrapper)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            intents = intents_for(args, kwargs)
            s = session_for()
            if s is not None:
                with s._lease_ms(intents, asked, timeout):
                    return fn(*args, **kwargs)
            k = klock or default_klock()
            with OwnSessionLease(k, intents, name, namespace, asked, timeout):
                return fn(*args, **kwargs)

        return cast(F, wrapper)

    return decorate
