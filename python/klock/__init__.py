"""Klock for Python: a coordination kernel for multi-agent systems.

``klock._core`` is the Rust kernel (``klock-core``) 1:1; this package is the friendly,
thread-safe and asyncio client on top of it::

    import klock

    with klock.Klock() as k, k.session("agent-1") as s:
        with s.lease("MUTATES FILE:/src/a.ts", "CONSUMES FILE:/README.md", ttl=30) as lease:
            write_file("/src/a.ts", data, fence=lease.fence)

    @klock.protected("MUTATES FILE:{path}")
    def edit(path: str, text: str) -> None: ...

The same client works against ``klock serve`` (agents in many processes, any language)::

    k = klock.connect("http://127.0.0.1:7300", token=None, namespace="default")

A file's resource is its path under a root the agents share (docs/SPEC.md §3)::

    s.lease(f"MUTATES {klock.file('src/auth.ts', root=repo)}")   # "MUTATES FILE:/src/auth.ts"

A lease alone is not mutual exclusion when a holder can pause (GC, swap, a stopped VM) past
its expiry: the protected resource must remember the largest fence it has accepted and refuse
writes that carry a smaller one (:func:`fenced_write` does that for a file).
"""

from . import _core
from .client import (
    ClientCounters,
    Klock,
    Lease,
    LeaseInfo,
    OwnSessionLease,
    Session,
    TtlCapped,
    current_session,
)
from .clock import Clock, ManualClock, SystemClock
from .election import Election, Leader
from .errors import (
    ERROR_CODES,
    CertificateError,
    Closed,
    Died,
    InvalidInput,
    KlockError,
    LeaseLost,
    QuotaExceeded,
    StateError,
    Timeout,
    Unauthorized,
    UnknownId,
    Unreachable,
)
from .fence import StaleFence, fenced_write
from .names import file
from .protect import default_klock, protected
from .remote import connect

__version__ = _core.__version__

__all__ = [
    "Klock",
    "connect",
    "Election",
    "Leader",
    "fenced_write",
    "file",
    "TtlCapped",
    "StaleFence",
    "Session",
    "Lease",
    "LeaseInfo",
    "OwnSessionLease",
    "ClientCounters",
    "current_session",
    "Clock",
    "SystemClock",
    "ManualClock",
    "protected",
    "default_klock",
    "KlockError",
    "InvalidInput",
    "UnknownId",
    "StateError",
    "QuotaExceeded",
    "LeaseLost",
    "Died",
    "Timeout",
    "Closed",
    "Unreachable",
    "Unauthorized",
    "CertificateError",
    "ERROR_CODES",
    "__version__",
]
