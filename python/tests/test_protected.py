"""@klock.protected: intents formatted from the call's arguments, sync and async."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

import klock
from klock import Klock

MakeKlock = Callable[..., Klock]


def test_formats_intents_from_arguments_and_defaults(make_klock: MakeKlock) -> None:
    k = make_klock()
    seen: list[dict[str, int]] = []

    @klock.protected(
        "MUTATES FILE:{path}", "CONSUMES FILE:/docs/{doc}.md", klock=k, agent_id="editor"
    )
    def edit(path: str, text: str, doc: str = "README") -> str:
        """Edits a file."""
        session = klock.current_session()
        assert session is None  # the decorator's own session is not "current"
        # Read through resource_state (both backends have it; a server has no snapshot).
        holders = [
            holder
            for resource in ("FILE:/src/a.ts", "FILE:/docs/README.md", "FILE:/docs/other.md")
            for holder in k.resource_state(resource)["holders"]
        ]
        seen.append({holder["resource"]: holder["fence"] for holder in holders})
        assert {holder["agent_id"] for holder in holders} == {"editor"}
        assert {holder["predicate"] for holder in holders} == {"MUTATES", "CONSUMES"}
        return text.upper()

    assert edit("/src/a.ts", text="hi") == "HI"
    assert edit.__name__ == "edit" and edit.__doc__ == "Edits a file."
    assert list(seen[0]) == ["FILE:/src/a.ts", "FILE:/docs/README.md"]
    assert k.stats()["active_leases"] == 0 and k.stats()["active_sessions"] == 0


def test_uses_the_current_session(make_klock: MakeKlock) -> None:
    k = make_klock()

    @klock.protected("MUTATES FILE:{path}")
    def touch(path: str) -> int:
        (holder,) = k.resource_state(f"FILE:{path}")["holders"]
        return int(holder["session_id"])

    with k.session("agent") as s:
        assert touch("/x") == s.session_id
        with s.lease("MUTATES FILE:/outer"):
            assert touch("/y") == s.session_id  # nested under the session's own lease


def test_excludes_concurrent_calls(make_klock: MakeKlock) -> None:
    k = make_klock(backoff_base_ms=1, backoff_cap_ms=20)
    total = [0]

    @klock.protected("MUTATES COUNTER:/{name}", klock=k, timeout=30)
    def bump(name: str) -> None:
        value = total[0]
        threading.Event().wait(0.0005)
        total[0] = value + 1

    threads = [threading.Thread(target=lambda: [bump("c") for _ in range(50)]) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert total[0] == 400


def test_async_functions(make_klock: MakeKlock) -> None:
    k = make_klock(backoff_base_ms=1, backoff_cap_ms=20)
    total = [0]

    @klock.protected("MUTATES COUNTER:/{name}", klock=k, timeout=30)
    async def bump(name: str) -> str:
        value = total[0]
        await asyncio.sleep(0)
        total[0] = value + 1
        return name

    async def main() -> list[str]:
        return await asyncio.gather(*(bump("c") for _ in range(100)))

    assert asyncio.run(main()) == ["c"] * 100
    assert total[0] == 100


def test_default_klock_and_errors() -> None:
    @klock.protected("MUTATES FILE:{path}")
    def f(path: str) -> str:
        return path

    assert f("/x") == "/x"
    default = klock.default_klock()
    assert default is klock.default_klock()
    default.close()
    assert klock.default_klock() is not default  # a closed default is replaced
    klock.default_klock().close()

    with pytest.raises(TypeError):
        klock.protected()
    with pytest.raises(TypeError):
        klock.protected(5)  # type: ignore[arg-type]

    @klock.protected("MUTATES FILE:{missing}", klock=None)
    def g(path: str) -> None:
        pass

    with pytest.raises(KeyError):
        g("/x")
    with pytest.raises(TypeError):
        g()  # type: ignore[call-arg]
