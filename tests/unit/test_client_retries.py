"""The client's retry policy (`gpuyard._retry`) against a tiny real HTTP server on loopback that
answers what each test scripts (a boundary: no gpuyard server answers a 503 with Retry-After
on demand), then 200: what is sent again, after how long, and what fails at once."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gpuyard.client import Client, ServerUnreachable
from gpuyard.domain.errors import Conflict, InvalidRequest, NotFound, QuotaExceeded, Unavailable

# One scripted answer: (status, headers, error code); None: the connection is closed without
# an answer once the request has arrived.
Answer = tuple[int, dict[str, str], str] | None
JOB = {"id": 7, "state": "PENDING", "name": "x"}


class ScriptedServer:
    """Answers the scripted answers in order, then 200 with a job; notes every request."""

    def __init__(self, *script: Answer) -> None:
        self.script = list(script)
        self.requests: list[tuple[float, str, str]] = []  # (monotonic time, method, path)
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                with lock:
                    outer.requests.append((time.monotonic(), self.command, self.path))
                    answer = outer.script.pop(0) if outer.script else (200, {}, "")
                if answer is None:
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                status, headers, code = answer
                body = json.dumps(JOB if status == 200 else
                                  {"error": {"code": code, "message": f"said {status}"}})
                self.send_response(status)
                for key, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())

            do_GET = do_POST = do_PATCH = _answer

            def log_message(self, *_: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"


@contextmanager
def scripted(*script: Answer) -> Iterator[tuple[ScriptedServer, Client, list[str]]]:
    server = ScriptedServer(*script)
    thread = threading.Thread(target=server.httpd.serve_forever, daemon=True)
    thread.start()
    said: list[str] = []
    try:
        yield server, Client(server.url, token="", retry_s=20, on_waiting=said.append), said
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()


def test_a_503_with_retry_after_is_waited_for_and_sent_again() -> None:
    with scripted((503, {"Retry-After": "1"}, "unavailable")) as (server, client, said):
        job = client.job(7)
    assert job.id == 7
    (first, *_), (second, *_) = server.requests
    assert second - first >= 0.9  # the server's Retry-After honoured
    assert len(said) == 1 and "asks to wait (said 503); trying again for up to 20 s" in said[0]


def test_a_429_with_retry_after_on_a_cancel_is_sent_again() -> None:
    with scripted((429, {"Retry-After": "1"}, "rate_limited")) as (server, client, said):
        client.cancel(7)
    assert [(m, p) for _, m, p in server.requests] == [("POST", "/api/v1/jobs/7/cancel")] * 2
    assert len(said) == 1


@pytest.mark.parametrize(
    ("status", "code", "error"),
    [(404, "not_found", NotFound), (400, "invalid_request", InvalidRequest),
     (422, "invalid_request", InvalidRequest),
     (503, "unavailable", Unavailable),  # no Retry-After: "this server keeps no limits"
     (429, "quota_exceeded", QuotaExceeded)],  # a quota says no, not "later"
)  # fmt: skip
def test_an_answer_that_refuses_is_not_retried(
    status: int, code: str, error: type[Exception]
) -> None:
    with scripted((status, {}, code)) as (server, client, said):
        began = time.monotonic()
        with pytest.raises(error, match=f"said {status}"):
            client.job(7)
        assert time.monotonic() - began < 5  # at once, not after a retry window
    assert len(server.requests) == 1 and said == []


def test_a_read_whose_answer_was_lost_is_sent_again() -> None:
    with scripted(None) as (server, client, said):
        assert client.job(7).id == 7
    assert len(server.requests) == 2 and len(said) == 1
    assert "is not answering (restarting?)" in said[0]


def test_a_create_that_may_have_arrived_is_not_sent_again() -> None:
    """An unkeyed POST that makes something (a token) whose answer was lost may have made it:
    sending it again could make a second one, so it fails at once."""
    with scripted(None) as (server, client, said), pytest.raises(ServerUnreachable):
        client.create_token()
    assert len(server.requests) == 1 and said == []


def test_a_release_refused_after_its_lost_answer_is_what_the_lost_try_did() -> None:
    """The first release's answer is lost; sent again, the server says "not held" (the lost
    try released it): the job, pending and not held, is the answer, not that refusal."""
    with scripted(None, (409, {}, "conflict")) as (server, client, _said):
        assert client.release(7).id == 7
    assert [(m, p) for _, m, p in server.requests] == [
        ("POST", "/api/v1/jobs/7/release"), ("POST", "/api/v1/jobs/7/release"),
        ("GET", "/api/v1/jobs/7"),
    ]  # fmt: skip


def test_a_release_refused_at_once_is_the_refusal() -> None:
    with scripted((409, {}, "conflict")) as (server, client, _), pytest.raises(Conflict):
        client.release(7)
    assert len(server.requests) == 1


def test_a_create_answered_503_retry_after_is_not_sent_again() -> None:
    """A stalled database's 503 leaves the write to land later: an unkeyed create sent again
    could make a second token, so the 503 is the answer."""
    answer = (503, {"Retry-After": "1"}, "unavailable")
    with scripted(answer) as (server, client, said), pytest.raises(Unavailable):
        client.create_token()
    assert len(server.requests) == 1 and said == []
