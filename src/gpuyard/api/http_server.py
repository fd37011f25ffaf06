"""The HTTP server around the app: uvicorn, hardened against clients that hold connections.

uvicorn arms no timer on a fresh connection, nor while a request's headers trickle in, so
~1,000 silent connections used to exhaust the server's file descriptors (`/healthz` died and
job launches failed with "Too many open files"). Here every connection must finish its headers
within `header_timeout_s`, at most `max_connections` are open (more are closed at once), and
the descriptor limit is raised to what the system allows.

On the Unix socket (a root server's, for local users) each connection's peer credentials
are read from the kernel once (SO_PEERCRED) and put in every request's scope
(`scope["extensions"]["gpuyard.peer"]`), where the front door takes the caller's identity
from them: nothing a client sends can set them.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import socket
import struct
from collections.abc import Sequence
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gpuyard.api.front_door import PEER

log = logging.getLogger("gpuyard.http")

_WANTED_FDS = 65_536


class GuardedHttpProtocol(HttpToolsProtocol):
    """httptools' protocol with a header deadline and a connection cap."""

    header_timeout_s = 10.0
    max_connections = 2048

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_timer: asyncio.TimerHandle | None = None
        self._peer = peer_credentials(transport)
        if len(self.connections) > self.max_connections:
            log.warning("more than %s connections open: closing a new one", self.max_connections)
            transport.close()
            return
        self._arm_header_timer()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._peer is not None:
            extensions: dict[str, dict[object, object]] = dict(self.scope.get("extensions") or {})
            extensions[PEER] = {key: value for key, value in self._peer.items()}
            self.scope["extensions"] = extensions
        self._arm_header_timer()

    def on_headers_complete(self) -> None:
        self._cancel_header_timer()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)

    def shutdown(self) -> None:
        """A stopping server's word to this connection: a response already streaming (a log
        followed, a live feed: they never end by themselves) is cut now, and its client comes
        back to the next server, instead of holding the stop until uvicorn cancels it with an
        ERROR; a request still being answered is answered first."""
        cycle = self.cycle
        if cycle is not None and cycle.response_started and not cycle.response_complete:
            self.transport.close()
            return
        super().shutdown()

    def _arm_header_timer(self) -> None:
        if getattr(self, "_header_timer", None) is None:
            self._header_timer = self.loop.call_later(self.header_timeout_s, self._too_slow)

    def _cancel_header_timer(self) -> None:
        timer = getattr(self, "_header_timer", None)
        if timer is not None:
            timer.cancel()
            self._header_timer = None

    def _too_slow(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.close()


def peer_credentials(transport: asyncio.BaseTransport) -> dict[str, int] | None:
    """The kernel's word on who is at the other end of a Unix socket connection (pid, uid,
    gid as of connect); None for TCP, where only a token says who it is."""
    sock = transport.get_extra_info("socket")
    if sock is None or sock.family != socket.AF_UNIX:
        return None
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    pid, uid, gid = struct.unpack("3i", raw)
    return {"pid": pid, "uid": uid, "gid": gid}


def raise_fd_limit(wanted: int = _WANTED_FDS) -> int:
    """Raise the soft limit on open files towards the hard one; returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return target
        except (ValueError, OSError):
            pass
    return soft


def serve(
    app: Any, socks: Sequence[socket.socket], *, header_timeout_s: float, max_connections: int
) -> None:
    """Serve `app` on bound, listening sockets (TCP, and the Unix one) until SIGINT/SIGTERM."""
    raise_fd_limit()
    protocol = type(
        "ServerHttpProtocol", (GuardedHttpProtocol,),
        {"header_timeout_s": header_timeout_s, "max_connections": max_connections},
    )  # fmt: skip
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, loop="uvloop", http=protocol,
        timeout_keep_alive=30, proxy_headers=False,
        # Streams that never end by themselves (the change feed, a log followed) must not keep
        # a stopping server waiting for ever.
        timeout_graceful_shutdown=5,
    )  # fmt: skip
    uvicorn.Server(config).run(sockets=list(socks))
