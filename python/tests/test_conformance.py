"""The conformance vectors through klock._core, and the runner's own contract."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

import pytest

from klock import conformance

from support import REPO, VECTORS

VECTOR_FILES = sorted(VECTORS.glob("*.json"))


def test_there_are_vectors() -> None:
    assert len(VECTOR_FILES) >= 7


@pytest.mark.parametrize("path", VECTOR_FILES, ids=[p.name for p in VECTOR_FILES])
def test_vector(path: pathlib.Path) -> None:
    file, name, failure = conformance.run_file(str(path))
    assert name is not None
    assert failure is None, failure


def test_public_examples_pass_too() -> None:
    public = REPO.parent / "shared" / "conformance" / "public"
    if not public.is_dir():
        pytest.skip("shared/conformance/public is not beside the repository")
    results = conformance.run_paths([str(public)])
    assert results and all(f is None for _, _, f in results), [r for r in results if r[2]]


def run_cli(*paths: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "klock.conformance", *paths], capture_output=True, text=True, cwd=REPO, timeout=300
    )


def test_cli_runs_the_directory() -> None:
    done = run_cli("tests/vectors")
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout + done.stderr
    assert lines[-1] == f"{len(VECTOR_FILES)} passed, 0 failed"
    assert all(line.startswith("ok tests/vectors/") for line in lines[:-1])


def write(tmp: pathlib.Path, name: str, vector: object) -> str:
    path = tmp / name
    path.write_text(vector if isinstance(vector, str) else json.dumps(vector))
    return str(path)


GOOD = {
    "name": "one grant",
    "config": {"policy": "wait_die", "seed": 1},
    "steps": [
        {"now": 0, "do": "open", "agent": "alice", "as": "A"},
        {"now": 1, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/x"],
         "expect": {"verdict": "GRANTED", "leases": [{"as": "L", "expires_at": 60001}]}},
    ],
}


def test_cli_zero_vectors_is_a_failure(tmp_path: pathlib.Path) -> None:
    done = run_cli(str(tmp_path))
    assert done.returncode != 0
    assert done.stdout.splitlines()[-1] == "0 passed, 0 failed"


def test_cli_failure_exit_and_lines(tmp_path: pathlib.Path) -> None:
    bad = json.loads(json.dumps(GOOD))
    bad["steps"][1]["expect"]["leases"][0]["expires_at"] = 5
    write(tmp_path, "a.json", GOOD)
    write(tmp_path, "b.json", bad)
    done = run_cli(str(tmp_path))
    lines = done.stdout.splitlines()
    assert done.returncode == 1
    assert lines[0].startswith("ok ") and lines[0].endswith("a.json: one grant")
    assert lines[1].startswith("FAIL ") and "step 2" in lines[1] and "expires_at" in lines[1]
    assert lines[-1] == "1 passed, 1 failed"


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda v: v.update(extra=1), "unknown key `extra`"),
        (lambda v: v["config"].update(polcy="wait_die"), "unknown key `polcy`"),
        (lambda v: v["steps"][1].update(ttl=5), "unknown key `ttl`"),
        (lambda v: v["steps"][1]["expect"].update(verdic="GRANTED"), "unknown key `verdic`"),
        (lambda v: v["steps"][1]["expect"]["leases"][0].update(fence=1), "unknown key `fence`"),
        (lambda v: v["steps"][1].update(do="acquire_all"), "unknown `do`"),
        (lambda v: v["steps"][1]["expect"].update(verdict="GRANTD"), "must be one of"),
        (lambda v: v["steps"][1]["expect"].update(error="NO_SUCH_ERROR"), "unknown error name"),
        (lambda v: v["steps"][1].update(now=-1), "`now` must be an integer"),
        (lambda v: v["steps"][1].update(now=1.5), "`now` must be an integer"),
        (lambda v: v["steps"][1].update(wait="yes"), "`wait` must be true or false"),
        (lambda v: v["steps"][1]["expect"].update(events=[{"event": "GRANTED", "lease": "L"}]), "unknown key `lease`"),
        (lambda v: v["steps"][1]["expect"].update(ticket="T"), "cannot go with verdict GRANTED"),
        (lambda v: v.update(steps=[]), "`steps` is empty"),
    ],
)
def test_runner_is_strict(tmp_path: pathlib.Path, mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    vector = json.loads(json.dumps(GOOD))
    mutate(vector)
    _, _, failure = conformance.run_file(write(tmp_path, "v.json", vector))
    assert failure is not None and message in failure, failure


def test_runner_refuses_duplicate_keys_and_nan(tmp_path: pathlib.Path) -> None:
    text = json.dumps(GOOD)
    dup = text.replace('"name": "one grant"', '"name": "one grant", "name": "again"')
    assert "duplicate key" in (conformance.run_file(write(tmp_path, "d.json", dup))[2] or "")
    nan = text.replace('"seed": 1', '"seed": NaN')
    assert "invalid JSON" in (conformance.run_file(write(tmp_path, "n.json", nan))[2] or "")
    assert "invalid JSON" in (conformance.run_file(write(tmp_path, "t.json", "{"))[2] or "")
    assert "cannot read" in (conformance.run_file(str(tmp_path / "missing.json"))[2] or "")


def test_unexpected_event_fails(tmp_path: pathlib.Path) -> None:
    vector = json.loads(json.dumps(GOOD))
    vector["steps"].append({"now": 60001, "do": "advance"})
    _, _, failure = conformance.run_file(write(tmp_path, "v.json", vector))
    assert failure is not None and "events: expected 0, got 1" in failure and "LEASE_EXPIRED" in failure


def test_unbound_aliases_are_unknown_ids(tmp_path: pathlib.Path) -> None:
    vector = json.loads(json.dumps(GOOD))
    vector["steps"] += [
        {"now": 2, "do": "release", "session": "A", "lease": "nope", "expect": {"error": "UNKNOWN_LEASE"}},
        {"now": 3, "do": "acquire", "session": "ghost", "intents": ["MUTATES FILE:/y"], "expect": {"error": "UNKNOWN_SESSION"}},
        {"now": 4, "do": "reconcile", "session": "A", "leases": ["L", "nope"], "expect": {"status": {"L": "ACTIVE", "nope": "UNKNOWN"}}},
    ]
    _, _, failure = conformance.run_file(write(tmp_path, "v.json", vector))
    assert failure is None, failure


def test_error_step_must_change_nothing_but_time(tmp_path: pathlib.Path) -> None:
    vector = json.loads(json.dumps(GOOD))
    # The failed call at 60001 settles the expiry: the event must be listed, and the state
    # must equal a plain advance to 60001.
    vector["steps"].append(
        {"now": 60001, "do": "acquire", "session": "A", "intents": ["WRITES FILE:/x"],
         "expect": {"error": "INVALID_PREDICATE", "events": [{"event": "LEASE_EXPIRED", "lease": "L", "session": "A"}]}}
    )
    _, _, failure = conformance.run_file(write(tmp_path, "v.json", vector))
    assert failure is None, failure


WOUND = {
    "name": "a wound",
    "config": {"policy": "wound_wait", "seed": 212},
    "steps": [
        {"now": 0, "do": "open", "agent": "alice", "as": "A"},
        {"now": 0, "do": "open", "agent": "bob", "as": "B"},
        {"now": 0, "do": "acquire", "session": "B", "intents": ["MUTATES FILE:/x"],
         "expect": {"verdict": "GRANTED", "leases": [{"as": "LB"}]}},
        {"now": 10, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/x"],
         "expect": {"verdict": "GRANTED", "events": [
             {"event": "WOUNDED", "session": "B", "by": "A", "lost_leases": ["LB"], "lost_tickets": [],
              "retry_after_ms": [100, 199]}]}},
    ],
}


def test_wounded_retry_after_ms_is_checked_and_described(tmp_path: pathlib.Path) -> None:
    assert conformance.run_file(write(tmp_path, "ok.json", WOUND))[2] is None
    bad = json.loads(json.dumps(WOUND))
    bad["steps"][3]["expect"]["events"][0]["retry_after_ms"] = [500, 600]
    failure = conformance.run_file(write(tmp_path, "bad.json", bad))[2]
    assert failure is not None and re.search(r"retry_after_ms: expected in \[500, 600\], got 1\d\d\b", failure), failure
    # An unexpected WOUNDED is shown the way the Rust runner shows it.
    extra = json.loads(json.dumps(WOUND))
    del extra["steps"][3]["expect"]["events"]
    failure = conformance.run_file(write(tmp_path, "extra.json", extra))[2]
    assert failure is not None
    shown = r"WOUNDED\{session=B\(#2\) by=A\(#1\) lost_leases=\[LB\(#1\)\] lost_tickets=\[\] retry_after_ms=1\d\d\}"
    assert re.search(shown, failure), failure


def test_resume_is_checked_against_the_kernels_current_priority(tmp_path: pathlib.Path) -> None:
    # Rev 4: a session's priority changes between units of work, so a resume is compared
    # with the priority the kernel holds just before it, not with the one it opened with.
    vector = {
        "name": "resume after a new unit",
        "config": {"policy": "wait_die", "seed": 1},
        "steps": [
            {"now": 0, "do": "open", "agent": "alice", "as": "A"},
            {"now": 0, "do": "open", "agent": "bob", "as": "B"},
            {"now": 1, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/x"],
             "expect": {"verdict": "GRANTED", "leases": [{"as": "L1"}]}},
            {"now": 2, "do": "release", "session": "A", "lease": "L1", "expect": {"released": True}},
            {"now": 3, "do": "acquire", "session": "A", "intents": ["MUTATES FILE:/x"],
             "expect": {"verdict": "GRANTED", "leases": [{"as": "L2"}]}},
            {"now": 4, "do": "digest", "session": "A", "as": "D"},
            {"now": 5, "do": "resume", "digest": "D", "expect": {"epoch": 1}},
        ],
    }
    assert conformance.run_file(write(tmp_path, "v.json", vector))[2] is None
