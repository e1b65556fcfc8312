"""The HTTP/1.1 framing of the remote client's transport (klock._http), against a real TCP
server of the test's own that answers each request with bytes the test wrote, for the answers
``klock serve`` does not send on its own: chunked bodies, bodies to the end of the connection,
``Connection: close``, HTTP/1.0, an interim 1xx, HEAD and 204, and malformed or cut answers
(a clear TransportError, never a hang or a wrong body), and bodies over the bound
(refused by their declared size, or once that much came). Also: a request is one write (head and
body together), and a header that would split the request is refused before anything is
sent. Every test is bounded in time (the sockets time out)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from klock import _http


class Canned:
    """Accepts connections on a free loopback port and answers the n-th request (over all
    connections) with ``answers[n]``; after an answer ending in ``None`` it closes that
    connection. ``requests`` keeps what each request's first read brought; ``accepted``
    counts connections."""

    def __init__(self, answers: list[bytes | None]) -> None:
        self.answers = list(answers)
        self.requests: list[bytes] = []
        self.accepted = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(10)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while self.answers:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        with conn:
            while self.answers:
                try:
                    first = conn.recv(65536)
                except OSError:
                    return
                if not first:
                    return
                with self._lock:
                    # The answer and whether it ends the connection are taken together: the
                    # client's next request, on a new connection, may arrive while this one
                    # is still being sent, and must not take the end meant for this one.
                    self.requests.append(first)
                    answer = self.answers.pop(0)
                    ends = bool(self.answers) and self.answers[0] is None
                    if ends:
                        self.answers.pop(0)
                if answer is None:
                    return  # close without answering
                try:
                    conn.sendall(answer)
                except OSError:
                    pass  # the client gave up on a long answer
                if ends:
                    return  # the answer ends the connection

    def close(self) -> None:
        self._listener.close()


@pytest.fixture
def canned() -> Iterator[list[Canned]]:
    made: list[Canned] = []
    yield made
    for server in made:
        server.close()


def _serve(canned: list[Canned], *answers: bytes | None) -> tuple[Canned, _http.Transport]:
    server = Canned(list(answers))
    canned.append(server)
    return server, _http.Transport(server.url)


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def test_a_request_is_one_write_with_its_body(canned: list[Canned]) -> None:
    server, t = _serve(canned, OK)
    body = b'{"agent_id": "' + b"x" * 2000 + b'"}'
    t.request(
        "POST",
        "/v1/x",
        content=body,
        headers={"Content-Type": "application/json", "Idempotency-Key": "k"},
        timeout=5,
    )
    (first,) = server.requests
    assert first.startswith(b"POST /v1/x HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"\r\nContent-Length: 2016\r\n" in first and b"\r\nIdempotency-Key: k\r\n" in first
    assert first.endswith(b"\r\n\r\n" + body)  # the head and the body in one read
    t.close()


def test_a_chunked_answer_is_joined_and_the_connection_reused(canned: list[Canned]) -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;ext=1\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nTrailer: x\r\n\r\n"
    )
    server, t = _serve(canned, chunked, OK)
    assert t.request("GET", "/a", timeout=5).content == b"hello world"
    assert t.request("GET", "/b", timeout=5).content == b"ok"
    assert server.accepted == 1
    t.close()


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
    ],
    ids=["connection-close", "http-1.0"],
)
def test_an_answer_that_ends_its_connection_is_not_reused(
    canned: list[Canned], answer: bytes
) -> None:
    # The server keeps the connection open: the client must not reuse it on its own reading.
    server, t = _serve(canned, answer, OK)
    assert t.request("GET", "/a", timeout=5).content == b"ok"
    assert t.request("GET", "/b", timeout=5).content == b"ok"
    assert server.accepted == 2
    t.close()


def test_a_body_without_a_length_runs_to_the_end_of_the_connection(
    canned: list[Canned],
) -> None:
    server, t = _serve(canned, b"HTTP/1.1 200 OK\r\n\r\nall of it", None, OK)
    assert t.request("GET", "/a", timeout=5).content == b"all of it"
    assert t.request("GET", "/b", timeout=5).content == b"ok"
    assert server.accepted == 2
    t.close()


def test_interim_answers_head_and_204_carry_no_body(canned: list[Canned]) -> None:
    server, t = _serve(
        canned,
        b"HTTP/1.1 100 Continue\r\n\r\n" + OK,
        b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n",  # to a HEAD: no body follows
        b"HTTP/1.1 204 No Content\r\nRetry-After: 3\r\n\r\n",
        OK,
    )
    assert t.request("GET", "/a", timeout=5).content == b"ok"
    assert t.request("HEAD", "/b", timeout=5).content == b""
    answer = t.request("GET", "/c", timeout=5)
    assert (answer.status_code, answer.content, answer.headers["retry-after"]) == (204, b"", "3")
    assert t.request("GET", "/d", timeout=5).content == b"ok"
    assert server.accepted == 1
    t.close()


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", "not an HTTP/1.x status line"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "not a header line"),
        (b"HTTP/1.1 200 OK\r\n folded: x\r\n\r\n", "not a header line"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1_0\r\n\r\n", "Content-Length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", "after 5 of 10 bytes"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\n", "chunk size"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\nabc", "inside a chunk"),
        (b"HTTP/1.1 200 OK\r\nContent-Le", "inside the answer's head"),
        (b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * 101 + b"\r\n", "more than 100 headers"),
        (b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 70_000 + b"\r\n\r\n", "a line longer than"),
    ],
    ids=[
        "not-http",
        "no-colon",
        "folded",
        "bad-length",
        "short-body",
        "bad-chunk-size",
        "cut-chunk",
        "cut-head",
        "too-many-headers",
        "long-line",
    ],
)
def test_a_malformed_or_cut_answer_is_a_clear_error(
    canned: list[Canned], answer: bytes, why: str
) -> None:
    server, t = _serve(canned, answer, None, OK)
    with pytest.raises(_http.TransportError, match="the answer was cut or malformed") as info:
        t.request("GET", "/a", timeout=5)
    assert why in str(info.value)
    assert t.request("GET", "/b", timeout=5).content == b"ok"  # on a new connection
    assert server.accepted == 2
    t.close()


def test_headers_that_would_split_the_request_are_refused_before_sending(
    canned: list[Canned],
) -> None:
    server, t = _serve(canned, OK)
    for bad in ({"X-A": "b\r\nX-Injected: 1"}, {"X A": "b"}, {"X:A": "b"}):
        with pytest.raises(ValueError, match="would not be one header line"):
            t.request("GET", "/a", headers=bad, timeout=5)
    with pytest.raises(ValueError, match="spaces or controls"):
        t.request("GET", "/a b", timeout=5)
    with pytest.raises(ValueError, match="would not be one header line") as info:
        _http.Transport(server.url, {"Authorization": "Bearer secret\ny"})
    assert "secret" not in str(info.value)  # a bearer token is never repeated
    with pytest.raises(ValueError, match="is not Latin-1 text"):
        _http.Transport(server.url, {"Authorization": "Bearer \u0442\u043e\u043a"})
    assert t.request("GET", "/ok", timeout=5).content == b"ok"
    assert len(server.requests) == 1
    t.close()


def test_a_body_larger_than_the_bound_is_refused_before_it_is_read(
    canned: list[Canned],
) -> None:
    # Declared: refused on the head alone (nothing of the terabyte is read or allocated).
    server, t = _serve(
        canned,
        b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000000\r\n\r\nxx",
        None,
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffff\r\nxx",
        None,
        OK,
    )
    for why in ("a body of 1000000000000 bytes", "chunks of more than"):
        with pytest.raises(_http.TransportError, match=why):
            t.request("GET", "/a", timeout=5)
    assert t.request("GET", "/b", timeout=5).content == b"ok"
    assert server.accepted == 3
    t.close()


def test_a_body_that_grows_past_the_bound_is_refused(
    canned: list[Canned], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Small chunks, or a body to the end of the connection, that add up to more than the bound
    # (lowered here, so that the test sends kilobytes, not 64 MiB).
    monkeypatch.setattr(_http, "MAX_BODY", 1000)
    chunk = b"1f4\r\n" + b"a" * 500 + b"\r\n"
    server, t = _serve(
        canned,
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk * 3 + b"0\r\n\r\n",
        None,
        b"HTTP/1.1 200 OK\r\n\r\n" + b"b" * 1001,
        None,
        b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"c" * 1000,
    )
    with pytest.raises(_http.TransportError, match="chunks of more than 1000 bytes"):
        t.request("GET", "/a", timeout=5)
    with pytest.raises(_http.TransportError, match="a body of more than 1000 bytes"):
        t.request("GET", "/b", timeout=5)
    assert t.request("GET", "/c", timeout=5).content == b"c" * 1000  # at the bound: whole
    t.close()
