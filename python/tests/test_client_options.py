"""Client options (issue 25): ``ttl=`` in seconds (``ttl_ms=`` deprecated), a TTL the
kernel's cap cut is a :class:`klock.TtlCapped` warning, ``connect(ca=..., verify=...)`` against
a real TLS ``klock serve`` with a refused certificate failing at once, and ``KLOCK_SERVER`` /
``KLOCK_TOKEN`` / ``KLOCK_NAMESPACE`` read by ``connect()``, also in a program run by a real
``klock exec``."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import pathlib
import ssl
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

import klock
from klock import _http
from server import Server, klock_bin

# ---- ttl in seconds -------------------------------------------------------------------------


def test_ttl_is_in_seconds_and_ttl_ms_is_deprecated() -> None:
    # A manual clock: a 1 ms lease must not expire inside its block on a loaded machine.
    with klock.Klock(clock=klock.ManualClock()) as k, k.session("a") as s:
        with s.lease("MUTATES FILE:/x", ttl=1.5) as lease:
            assert lease.leases[0].ttl_ms == 1_500
        with s.lease("MUTATES FILE:/x", ttl=0.0004) as lease:  # rounded up to whole ms
            assert lease.leases[0].ttl_ms == 1
        with pytest.warns(DeprecationWarning, match="ttl=2 for ttl_ms=2000"):
            block = s.lease("MUTATES FILE:/x", ttl_ms=2_000)
        with block as lease:
            assert lease.leases[0].ttl_ms == 2_000
        with pytest.warns(DeprecationWarning), k.lease("MUTATES FILE:/y", ttl_ms=3_000) as lease:
            assert lease.leases[0].ttl_ms == 3_000
        with k.lease("MUTATES FILE:/y", ttl=3) as lease:
            assert lease.leases[0].ttl_ms == 3_000
        with pytest.raises(TypeError, match="not both"):
            s.lease("MUTATES FILE:/x", ttl=1, ttl_ms=1_000)
        with pytest.raises(TypeError, match="not both"):
            k.lease("MUTATES FILE:/x", ttl=1, ttl_ms=1_000)
        for bad in (-1, float("nan"), float("inf"), 2.0**64):
            with pytest.raises(ValueError, match="ttl must be"):
                s.lease("MUTATES FILE:/x", ttl=bad)
        with (
            pytest.raises(klock.InvalidInput, match="INVALID_TTL"),
            s.lease("MUTATES FILE:/x", ttl=0),
        ):
            pass
        for wrong in ("5", True, None.__class__):
            with pytest.raises(TypeError, match="ttl must be"):
                s.lease("MUTATES FILE:/x", ttl=wrong)  # type: ignore[arg-type]
        assert k.stats()["active_leases"] == 0


def test_protected_takes_ttl_in_seconds() -> None:
    with klock.Klock() as k:
        seen: list[int] = []

        @klock.protected("MUTATES FILE:/{name}", klock=k, ttl=7)
        def edit(name: str) -> None:
            state = k.resource_state(f"FILE:/{name}")
            seen.append(state["holders"][0]["expires_at"] - k.now())

        edit("p")
        assert 6_000 < seen[0] <= 7_000
        with pytest.warns(DeprecationWarning):
            klock.protected("MUTATES FILE:/q", klock=k, ttl_ms=7_000)
        with pytest.raises(TypeError, match="not both"):
            klock.protected("MUTATES FILE:/q", klock=k, ttl=7, ttl_ms=7_000)


@pytest.mark.parametrize("where", ["inprocess", "remote"])
def test_a_ttl_over_the_cap_warns_and_is_never_cut_silently(where: str, memory_server: Any) -> None:
    k = klock.Klock() if where == "inprocess" else klock.connect(memory_server.url)
    with k, k.session("capped") as s:
        with pytest.warns(klock.TtlCapped, match="asked for a TTL of 600 s .* granted 300 s"):
            with s.lease("MUTATES FILE:/long", ttl=600) as lease:
                assert lease.leases[0].ttl_ms == 300_000
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with s.lease("MUTATES FILE:/long", ttl=300) as lease:  # at the cap: no warning
                assert lease.leases[0].ttl_ms == 300_000
        # Warnings as errors: the block does not start and holds nothing.
        with warnings.catch_warnings():
            warnings.simplefilter("error", klock.TtlCapped)
            with pytest.raises(klock.TtlCapped), s.lease("MUTATES FILE:/long", ttl=301):
                pytest.fail("the block must not run")
        assert not s.holds_leases()
        assert k.resource_state("FILE:/long")["holders"] == []


def test_a_capped_ttl_warns_under_async_with() -> None:
    async def main() -> None:
        with klock.Klock(max_ttl_ms=1_000) as k, k.session("async") as s:
            with pytest.warns(klock.TtlCapped, match="granted 1 s"):
                async with s.lease("MUTATES FILE:/a", ttl=2) as lease:
                    assert lease.leases[0].ttl_ms == 1_000

    asyncio.run(main())


# ---- TLS ------------------------------------------------------------------------------------


def _openssl(*args: str, cwd: pathlib.Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, pathlib.Path]]:
    """A real ``klock serve`` over HTTPS with a certificate for localhost and 127.0.0.1
    signed by a CA of the test's own (``ca.pem``), and a second CA (``other.pem``)."""
    d = tmp_path_factory.mktemp("tls")
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    for name in ("ca", "other"):
        _openssl(
            "req", "-x509", *ec, "-days", "2", "-subj", f"/CN=klock test {name}",
            "-keyout", f"{name}.key", "-out", f"{name}.pem",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign",
            cwd=d,
        )  # fmt: skip
    _openssl("req", *ec, "-subj", "/CN=localhost", "-keyout", "key.pem", "-out", "leaf.csr", cwd=d)
    (d / "ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    _openssl(
        "x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-out", "cert.pem", "-extfile", "ext",
        cwd=d,
    )  # fmt: skip
    server = Server("--memory", "--tls-cert", str(d / "cert.pem"), "--tls-key", str(d / "key.pem"))
    assert server.url.startswith("https://"), server.url
    yield server, d
    server.stop()


def test_connect_trusts_the_ca_bundle_it_is_given(
    tls: tuple[Server, pathlib.Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, d = tls
    monkeypatch.delenv("KLOCK_CA", raising=False)
    with klock.connect(server.url, ca=d / "ca.pem") as k, k.session("tls") as s:
        with s.lease("MUTATES FILE:/tls") as lease:
            assert lease.fence >= 1
    with klock.connect(server.url, verify=ssl.create_default_context(cafile=d / "ca.pem")) as k:
        assert k.stats()["active_leases"] == 0
    monkeypatch.setenv("KLOCK_CA", str(d / "ca.pem"))
    with klock.connect(server.url) as k:
        assert k.stats()["active_leases"] == 0


def test_tls_connections_are_kept_alive_and_reused(
    tls: tuple[Server, pathlib.Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over TLS too, every call shares one connection (counted by the server's /metrics, read
    through a transport of the test's own that also keeps its one connection)."""
    server, d = tls
    monkeypatch.delenv("KLOCK_CA", raising=False)
    metrics = _http.Transport(server.url, tls=ssl.create_default_context(cafile=d / "ca.pem"))

    def accepted() -> int:
        text = metrics.request("GET", "/metrics", timeout=5).text
        (line,) = [
            x for x in text.splitlines() if x.startswith("klock_connections_accepted_total ")
        ]
        return int(line.split()[1])

    try:
        before = accepted()
        with klock.connect(server.url, ca=d / "ca.pem") as k, k.session("tls-reuse") as s:
            for _ in range(50):
                with s.lease("MUTATES FILE:/tls-reuse"):
                    pass
        assert accepted() - before == 2  # the calls' connection and the event reader's
    finally:
        metrics.close()


def test_a_refused_certificate_fails_at_once_and_by_name(
    tls: tuple[Server, pathlib.Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, d = tls
    monkeypatch.delenv("KLOCK_CA", raising=False)
    for options in ({}, {"ca": d / "other.pem"}):
        started = time.monotonic()
        with pytest.raises(klock.CertificateError) as info:
            klock.connect(server.url, reconnect_timeout=30, **options)  # type: ignore[arg-type]
        # Not retried for the 30 s budget as if the server were unreachable.
        assert time.monotonic() - started < 5
        assert info.value.name == "CERTIFICATE"
        assert server.url in info.value.message and "ca=PATH" in info.value.message
        assert not isinstance(info.value, klock.Unreachable)


def test_bad_tls_options_are_named(
    tls: tuple[Server, pathlib.Path], tmp_path: pathlib.Path
) -> None:
    server, d = tls
    with pytest.raises(ValueError, match="no such file"):
        klock.connect(server.url, ca=tmp_path / "missing.pem")
    (tmp_path / "junk.pem").write_text("not a certificate")
    with pytest.raises(ValueError, match="not a PEM bundle"):
        klock.connect(server.url, ca=tmp_path / "junk.pem")
    with pytest.raises(ValueError, match="not both"):
        klock.connect(server.url, ca=d / "ca.pem", verify=False)
    with pytest.raises(ValueError, match="https://"):
        klock.connect("http://127.0.0.1:1", ca=d / "ca.pem")
    with pytest.raises(TypeError, match="verify"):
        klock.connect(server.url, verify="yes")  # type: ignore[arg-type]


# ---- the environment ------------------------------------------------------------------------


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("KLOCK_SERVER", "KLOCK_TOKEN", "KLOCK_NAMESPACE", "KLOCK_NS", "KLOCK_CA"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_connect_reads_the_environment(memory_server: Any, clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("KLOCK_SERVER", memory_server.url)
    clean_env.setenv("KLOCK_NAMESPACE", "from-env")
    with klock.connect() as k, k.session("env") as s:
        assert s.namespace == "from-env"
    clean_env.delenv("KLOCK_NAMESPACE")
    clean_env.setenv("KLOCK_NS", "older-name")
    with klock.connect() as k:
        assert k.namespace == "older-name"
    clean_env.setenv("KLOCK_NAMESPACE", "other")
    with pytest.raises(ValueError, match="disagree"):
        klock.connect()
    # Arguments win over the environment.
    with klock.connect(memory_server.url, namespace="given") as k:
        assert k.namespace == "given"
    clean_env.setenv("KLOCK_SERVER", "http://127.0.0.1:1")
    with pytest.raises(klock.Unreachable, match="127.0.0.1:1"):
        klock.connect(namespace="x", reconnect_timeout=0.2)


def _tokens(tmp_path: pathlib.Path, secret: str, namespace: str) -> pathlib.Path:
    tokens = tmp_path / "tokens.json"
    digest = hashlib.sha256(secret.encode()).hexdigest()
    entry = {"name": "t", "sha256": digest, "role": "agent", "namespaces": [namespace]}
    tokens.write_text(json.dumps({"tokens": [entry]}))
    return tokens


_CHILD = """
import json, klock, os
with klock.connect() as k:
    held = k.resource_state("FILE:/src/app.py")["holders"]
    with k.session("child") as s:
        namespace = s.namespace
print(json.dumps({"namespace": namespace, "holders": [h["session_id"] for h in held],
                  "session": int(os.environ["KLOCK_SESSION"]), "root": os.environ["KLOCK_ROOT"]}))
"""


def test_a_program_run_by_klock_exec_reaches_the_same_server(
    tmp_path: pathlib.Path, clean_env: pytest.MonkeyPatch
) -> None:
    """``klock exec --server --token --ns --root`` hands its connection to the command: the
    Python client there, given no argument, reaches the same server with the same token, in
    the same namespace, and sees the lease exec holds on the file it named by its path."""
    secret = "exec-secret"
    server = Server("--memory", "--tokens", str(_tokens(tmp_path, secret, "team")))
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    try:
        env = {**os.environ, "KLOCK_TOKEN": secret}  # the token the way the CLI advises
        run = subprocess.run(
            [
                klock_bin(), "exec", "--server", server.url, "--ns", "team", "--root", str(repo),
                "--file", "MUTATES src/app.py", "--", sys.executable, "-c", _CHILD,
            ],
            cwd=repo, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        seen = json.loads(run.stdout)
        assert seen["namespace"] == "team"
        assert seen["holders"] == [seen["session"]]
        assert seen["root"] == str(repo.resolve())
    finally:
        server.stop()


def test_the_cli_reaches_a_tls_server_with_ca_and_hands_it_to_its_command(
    tls: tuple[Server, pathlib.Path], clean_env: pytest.MonkeyPatch
) -> None:
    """``klock status --ca`` and ``klock exec --ca`` against the real TLS server: the right CA
    works, none is a usage error naming ``--ca``, another CA's fails at once by name; the
    command exec runs connects with the CA it was handed (``KLOCK_CA``)."""
    server, d = tls

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [klock_bin(), *args], capture_output=True, text=True, timeout=60, env=dict(os.environ)
        )

    ok = run("status", "--server", server.url, "--ca", str(d / "ca.pem"))
    assert ok.returncode == 0, ok.stderr
    missing = run("status", "--server", server.url)
    assert missing.returncode == 2 and "--ca PATH" in missing.stderr
    started = time.monotonic()
    other = run("status", "--server", server.url, "--ca", str(d / "other.pem"))
    assert other.returncode == 69 and "CERTIFICATE" in other.stderr, other.stderr
    assert time.monotonic() - started < 5
    child = "import klock\nwith klock.connect() as k:\n    print(k.stats()['active_leases'])"
    exec_run = run(
        "exec", "--server", server.url, "--ca", str(d / "ca.pem"),
        "--intent", "MUTATES FILE:/tls-exec", "--", sys.executable, "-c", child,
    )  # fmt: skip
    assert exec_run.returncode == 0, exec_run.stderr
    assert exec_run.stdout.strip() == "1"


def test_klock_exec_refuses_a_host_path_inside_its_root_and_warns_of_one_outside(
    tmp_path: pathlib.Path, memory_server: Any, clean_env: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "a.py").write_text("")
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("")

    def run(intent: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [klock_bin(), "exec", "--server", memory_server.url, "--root", str(repo),
             "--intent", intent, "--", "true"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    inside = run(f"MUTATES FILE:{repo / 'src' / 'a.py'}")
    assert inside.returncode == 2 and "its resource is FILE:/src/a.py" in inside.stderr
    outside = run(f"MUTATES FILE:{elsewhere}")
    assert (
        outside.returncode == 0
        and "warning" in outside.stderr
        and "not under --root" in (outside.stderr)
    )
    plain = run("MUTATES FILE:/src/a.py")
    assert plain.returncode == 0 and plain.stderr == ""
