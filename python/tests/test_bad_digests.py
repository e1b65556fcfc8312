"""tests/bad-digests.json through the Python host: every case fails (or succeeds) exactly as on
the C and wasm hosts. Python parses the text with json.loads and resumes the dict."""

from __future__ import annotations

import json
from typing import Any

import pytest
from support import REPO

from klock._core import Kernel, KlockError

FIXTURE = json.loads((REPO / "tests" / "bad-digests.json").read_text(encoding="utf-8"))
CASES: list[dict[str, Any]] = FIXTURE["cases"]

# What "the host rejects the text before the kernel sees it" is in Python (the fixture's
# description): these, never a KlockError.
HOST_REJECTIONS = (TypeError, ValueError, OverflowError, RecursionError)


def test_the_fixture_is_not_empty_and_names_each_case_once() -> None:
    names = [c["name"] for c in CASES]
    assert len(names) >= 50 and len(set(names)) == len(names)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_a_digest_fails_as_on_every_host(case: dict[str, Any]) -> None:
    kernel = Kernel()
    kernel.open_session("a", "default", 0)
    expected = case["error"]
    try:
        digest = json.loads(case["json"])
        info = kernel.resume_session(digest, 1)
    except KlockError as e:
        assert e.name == expected, f"{case['name']}: got kernel error {e.name}: {e}"
        return
    except HOST_REJECTIONS as e:
        assert expected == "INVALID_ARGUMENT", f"{case['name']}: rejected by the host: {e!r}"
        return
    assert expected is None, f"{case['name']}: resumed, but {expected} was expected"
    assert info.epoch == 1
