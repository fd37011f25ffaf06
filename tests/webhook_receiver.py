"""A real webhook receiver for the tests: an HTTP server on a free loopback port, in a thread,
that records every request and answers the statuses it is told to (then 200)."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    status: int  # what the receiver answered

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def event(self) -> str:
        return self.headers["x-gpuyard-event"]

    def verifies(self, secret: str) -> bool:
        """What a receiver does with the secret: the HMAC over "timestamp.body"."""
        timestamp = self.headers["x-gpuyard-timestamp"]
        expected = (
            "sha256="
            + hmac.new(
                secret.encode(), timestamp.encode() + b"." + self.body, hashlib.sha256
            ).hexdigest()
        )
        return hmac.compare_digest(expected, self.headers["x-gpuyard-signature"])


class Receiver:
    def __init__(self) -> None:
        self.requests: list[Received] = []
        self.answers: list[int] = []  # answered in order, then 200
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver._lock:
                    status = receiver.answers.pop(0) if receiver.answers else 200
                    receiver.requests.append(Received(
                        self.path, {k.lower(): v for k, v in self.headers.items()}, body, status,
                    ))  # fmt: skip
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def received(self) -> list[Received]:
        with self._lock:
            return list(self.requests)

    def wait(self, count: int, timeout_s: float = 30) -> list[Received]:
        """The first `count` requests, once that many came (polling)."""
        deadline = time.monotonic() + timeout_s
        while len(got := self.received()) < count:
            assert time.monotonic() < deadline, f"{len(got)} of {count} webhook requests came"
            time.sleep(0.02)
        return got

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    try:
        yield r
    finally:
        r.close()
