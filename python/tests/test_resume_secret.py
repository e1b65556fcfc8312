"""A remote session resumes only with its resume secret (issue 22, item 1): ``digest()``
carries it beside the digest's fields, a second process resumes from that dict, and a digest
rebuilt from public data (no secret) is refused while the holder keeps its lease."""

from __future__ import annotations

from typing import Any

import pytest

import klock


def test_a_digest_resumes_in_another_client_only_with_its_secret(memory_server: Any) -> None:
    with klock.connect(memory_server.url) as owner, klock.connect(memory_server.url) as other:
        s = owner.session("holder")
        with s.lease("MUTATES FILE:/resume-secret", ttl=30) as lease:
            digest = s.digest()
            assert isinstance(digest.get("resume_secret"), str) and digest["resume_secret"]
            public = {k: v for k, v in digest.items() if k != "resume_secret"}
            with pytest.raises(klock.KlockError) as refused:
                other.resume(public)
            assert refused.value.name == "RESUME_SECRET_REFUSED"
            assert not lease.lost and lease.held
        # The holder's dict (with its secret) resumes it, from another client too.
        again = other.resume(digest)
        assert again.session_id == s.session_id and again.priority == s.priority
        again.close()
