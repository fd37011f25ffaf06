"""Interactive sessions on another machine of a cluster, reached from the server's machine.

A session's terminal is a Unix socket its supervisor makes in the job's folder on the machine
it runs on (`attach.sock`, the owner's, 0600). `gpuyard run`/`attach` connect to it by path on
the server's machine. For a session on another machine the server makes the same socket in its
own folder of the job (the one the log mirror fills), owned by the same user with the same mode,
and relays each connection to that machine's agent: the agent connects to the real socket (as
root, which the supervisor lets in) and the bytes go both ways through `session_io` calls, each
waiting up to `_WAIT_S` for the terminal's output. The frames are the supervisor's own, untouched
(window size, Ctrl-C, `~.`, the end): the CLI cannot tell the difference but for the latency of
one agent call.

Only the socket's owner (or root) may connect: the socket's mode, and its peer's uid checked again
as the supervisor checks it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuyard.adapters.executor.job_folder import ATTACH_SOCKET
from gpuyard.adapters.ray.agents import AgentGone, AgentLink

log = logging.getLogger("gpuyard.sessions")

_WAIT_S = 0.05  # how long one relay call waits for the terminal's output
_SOCKET_WAIT_S = 60.0  # the remote terminal's socket not made by then: no relay
_CHUNK = 1 << 16


class SessionRelays:
    """One relay per interactive job running on another machine."""

    def __init__(self) -> None:
        self._relays: dict[int, _Relay] = {}
        self._lock = threading.Lock()

    def start(self, job_id: int, link: Callable[[], AgentLink | None], folder: Path) -> None:
        """Relay job `job_id`'s terminal on its machine to `folder/attach.sock` here; `link()`:
        that machine's agent now (a new one after a restart of its agent), None while away."""
        with self._lock:
            if job_id in self._relays:
                return
            relay = self._relays[job_id] = _Relay(job_id, link, folder)
        threading.Thread(target=relay.run, name=f"gpuyard-session-{job_id}", daemon=True).start()

    def stop(self, job_id: int) -> None:
        with self._lock:
            relay = self._relays.pop(job_id, None)
        if relay is not None:
            relay.close()

    def close(self) -> None:
        with self._lock:
            relays, self._relays = list(self._relays.values()), {}
        for relay in relays:
            relay.close()


class _Relay:
    def __init__(self, job_id: int, link: Callable[[], AgentLink | None], folder: Path) -> None:
        self.job_id, self._link, self.folder = job_id, link, folder
        self.path = folder / ATTACH_SOCKET
        self.listener: socket.socket | None = None
        self.owner: tuple[int, int] | None = None
        self.closed = threading.Event()

    def call(self, method: str, *args: object) -> Any:
        link = self._link()
        if link is None:
            raise AgentGone(f"job {self.job_id}'s machine is not answering")
        return link.call(method, *args)

    def run(self) -> None:
        try:
            self.owner = self._wait_owner()
            if self.owner is None:
                return
            self.listener = self._listen(*self.owner)
            while not self.closed.is_set():
                try:
                    conn, _ = self.listener.accept()
                except OSError:
                    return  # closed
                threading.Thread(target=self._serve, args=(conn,), daemon=True,
                                 name=f"gpuyard-session-{self.job_id}-io").start()  # fmt: skip
        except Exception:
            log.exception("job %s: the session relay stopped", self.job_id)

    def _wait_owner(self) -> tuple[int, int] | None:
        deadline = time.monotonic() + _SOCKET_WAIT_S
        while not self.closed.is_set() and time.monotonic() < deadline:
            try:
                owner: tuple[int, int] | None = self.call("session_owner", self.job_id)
            except AgentGone:
                owner = None
            if owner is not None:
                return owner
            self.closed.wait(0.2)
        return None

    def _listen(self, uid: int, gid: int) -> socket.socket:
        """The socket here as the supervisor makes its own: the owner's, 0600, its folder
        (and the jobs folder) searchable so its owner reaches it by path."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path.unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        folder = os.open(self.folder, os.O_PATH | os.O_DIRECTORY)
        try:
            sock.bind(f"/proc/self/fd/{folder}/{ATTACH_SOCKET}")
        finally:
            os.close(folder)
        os.chmod(self.path, 0o600)
        if uid != os.geteuid():
            os.chown(self.path, uid, gid, follow_symlinks=False)
            for each in (self.folder, self.folder.parent):
                os.chmod(each, 0o711)
        sock.listen(4)
        return sock

    def _serve(self, conn: socket.socket) -> None:
        cred = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        uid = int.from_bytes(cred[4:8], sys.byteorder)
        if self.owner is None or uid not in (0, self.owner[0], os.geteuid()):
            conn.close()
            return
        try:
            key = self.call("session_open", self.job_id)
        except AgentGone:
            key = None
        if key is None:
            conn.close()
            return
        try:
            self._pump(conn, key)
        finally:
            with contextlib.suppress(AgentGone):
                self.call("session_close", key)
            conn.close()

    def _pump(self, conn: socket.socket, key: str) -> None:
        """Until either end goes: what the client typed (a recv only when select says it
        will not block) to the agent, what the terminal showed back."""
        while not self.closed.is_set():
            data = b""
            try:
                if select.select([conn], [], [], 0)[0]:
                    data = conn.recv(_CHUNK)
                    if not data:
                        return  # the client left
                out, ended = self.call("session_io", key, data, 0 if data else _WAIT_S)
                if out:
                    conn.sendall(out)
            except (OSError, AgentGone):
                return
            if ended:
                return

    def close(self) -> None:
        self.closed.set()
        if self.listener is not None:
            with contextlib.suppress(OSError):
                self.listener.close()
        with contextlib.suppress(OSError):
            self.path.unlink(missing_ok=True)
