"""An app as `gpuyard server` serves it, on a real loopback socket (uvicorn with the server's own
HTTP protocol, in a thread of the test's process, so a test can reach the server's objects:
give a second account a token, look at the book)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from fastapi import FastAPI

from gpuyard.api.http_server import GuardedHttpProtocol
from gpuyard.domain.errors import GpuyardError
from gpuyard.services.server import ServerFacade


def cancel_unfinished(server: ServerFacade) -> None:
    """Cancel every job of `server` not ended yet, while it still runs: no job outlives a test.
    A job listed may end before its cancel arrives (its own end, a cancel it was already
    asked for); that is what was wanted, so its 409 is no error."""
    admin = server.auth.principal
    for job in server.reads.list_jobs(admin, include_finished=False):
        with contextlib.suppress(GpuyardError):
            server.verbs.cancel(job.id, admin)


@contextmanager
def served(
    server: ServerFacade,
    app: FastAPI,
    host: str,
    port: int,
    protocol: type[GuardedHttpProtocol] = GuardedHttpProtocol,
) -> Iterator[None]:
    """Serve `app` on `host:port` until the block ends; then the server's unfinished jobs are
    cancelled (none outlives the test) and uvicorn is stopped."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    config = uvicorn.Config(app, log_level="warning", access_log=False, http=protocol)
    http = uvicorn.Server(config)
    thread = threading.Thread(target=http.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not http.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.02)
        yield
    finally:
        cancel_unfinished(server)
        http.should_exit = True
        thread.join(timeout=30)
