"""The HTTP server around the app: uvicorn, hardened against clients that hold connections.

uvicorn arms no timer on a fresh connection, nor while a request's headers trickle in, so
~1,000 silent connections used to exhaust the server's file descriptors (`/healthz` died and
job launches failed with "Too many open files"). Here every connection must finish its headers
within `header_timeout_s`, at most `max_connections` are open (more are closed at once), and
the descriptor limit is raised to what the system allows. The last `reserved_connections` are
the admins' and `/healthz`'s: a connection opened past the rest is marked so in its scope
(`CONNECTION`), and the front door serves nobody else on it. On the Unix socket a uid (other
than the server's own) holds at most `max_connections_per_peer` connections, counted at
connect; over TCP, where only a request says who it is, the front door counts them per account
(`services/access/caps.py`), and a connection's close releases what it counted.

On the Unix socket (a root server's, for local users) each connection's peer credentials
are read from the kernel once (SO_PEERCRED) and put in every request's scope
(`scope["extensions"]["gpuyard.peer"]`), where the front door takes the caller's identity
from them: nothing a client sends can set them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import socket
import struct
import threading
from collections.abc import Sequence
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gpuyard.api.front_door import CONNECTION, PEER

log = logging.getLogger("gpuyard.http")

_WANTED_FDS = 65_536


class GuardedHttpProtocol(HttpToolsProtocol):
    """httptools' protocol with a header deadline and a connection cap."""

    header_timeout_s = 10.0
    max_connections = 2048
    reserved_connections = 0
    max_connections_per_peer = 0  # 0: no cap

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_timer: asyncio.TimerHandle | None = None
        self._peer = peer_credentials(transport)
        # What the front door learns of this connection: whether it is the reserve's, and
        # (set there) the release of what it counted for an account.
        self._connection: dict[str, object] = {}
        open_now = len(self.connections)
        if open_now > self.max_connections:
            log.warning("more than %s connections open: closing a new one", self.max_connections)
            transport.close()
            return
        if self._peer is not None and self._peer_over_cap(self._peer["uid"]):
            log.warning("uid %s holds %s connections: closing a new one", self._peer["uid"],
                        self.max_connections_per_peer)  # fmt: skip
            transport.close()
            return
        if open_now > self.max_connections - self.reserved_connections:
            self._connection["reserve"] = open_now
        self._arm_header_timer()

    def _peer_over_cap(self, uid: int) -> bool:
        """Whether socket peer `uid` (not the server's own) holds more connections than its
        cap, this one counted."""
        if not self.max_connections_per_peer or uid == os.geteuid():
            return False
        held = sum(
            1 for each in self.connections
            if (getattr(each, "_peer", None) or {}).get("uid") == uid
        )  # fmt: skip
        return held > self.max_connections_per_peer

    def on_message_begin(self) -> None:
        super().on_message_begin()
        extensions: dict[str, object] = dict(self.scope.get("extensions") or {})
        extensions[CONNECTION] = self._connection
        if self._peer is not None:
            extensions[PEER] = {key: value for key, value in self._peer.items()}
        self.scope["extensions"] = extensions  # type: ignore[typeddict-item]
        self._arm_header_timer()

    def on_headers_complete(self) -> None:
        self._cancel_header_timer()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        release = getattr(self, "_connection", {}).get("release")
        if callable(release):
            release()
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


def protocol_for(
    header_timeout_s: float,
    max_connections: int,
    reserved_connections: int = 0,
    max_connections_per_peer: int = 0,
) -> type[GuardedHttpProtocol]:
    """The guarded protocol with a server's settings."""
    return type(
        "ServerHttpProtocol", (GuardedHttpProtocol,),
        {"header_timeout_s": header_timeout_s, "max_connections": max_connections,
         # At most half: a reserve as large as the cap would serve only admins.
         "reserved_connections": min(reserved_connections, max_connections // 2),
         "max_connections_per_peer": max_connections_per_peer},
    )  # fmt: skip


def serve(
    app: Any,
    socks: Sequence[socket.socket],
    *,
    header_timeout_s: float,
    max_connections: int,
    reserved_connections: int = 0,
    max_connections_per_peer: int = 0,
    stop: threading.Event | None = None,
) -> None:
    """Serve `app` on bound, listening sockets (TCP, and the Unix one) until SIGINT/SIGTERM,
    or until `stop` is set (the server is built again on its database: `bootstrap/serving.py`).
    Uvicorn closes the sockets it is given when it stops: it gets duplicates, so the sockets
    stay bound and listening for the next app, and a client that connects meanwhile waits in
    the backlog instead of being refused."""
    raise_fd_limit()
    protocol = protocol_for(
        header_timeout_s, max_connections, reserved_connections, max_connections_per_peer
    )
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, loop="uvloop", http=protocol,
        timeout_keep_alive=30, proxy_headers=False,
        # Streams that never end by themselves (the change feed, a log followed) must not keep
        # a stopping server waiting for ever.
        timeout_graceful_shutdown=5,
    )  # fmt: skip
    http = uvicorn.Server(config)
    if stop is not None:

        def stop_when_told() -> None:
            stop.wait()
            http.should_exit = True

        threading.Thread(target=stop_when_told, name="gpuyard-http-stop", daemon=True).start()
    try:
        http.run(sockets=[sock.dup() for sock in socks])
    finally:
        if stop is not None:
            stop.set()  # the waiting thread ends with the run
