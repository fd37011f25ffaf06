"""A TCP proxy on loopback that loses the answers to job submits: a flaky network, made to order.

Every byte passes both ways, except that on the first `drops` connections that carry a submit
(`POST /api/v1/jobs `), the server's answer to it is swallowed: when its first bytes arrive
(the job is durable by then: the server answers only after the commit) the client's connection
is closed without them, as a dropped network path or a proxy restart would. The client is left
not knowing whether its job was queued.

    with DroppingProxy(server.port) as proxy:   # the server: --public-name 127.0.0.1:PROXY
        Client(proxy.url, token).submit(["true"])   # retried with the same key: one job
        assert proxy.submits == 2 and proxy.dropped == 1

The server must accept the proxy's address as its name (`--public-name 127.0.0.1:PORT`): the
client's Host header names the proxy. The upstream is connected per client connection, so the
proxy may be made before the server starts (to learn its port).
"""

from __future__ import annotations

import socket
import threading
from types import TracebackType

_SUBMIT = b"POST /api/v1/jobs "


class DroppingProxy:
    def __init__(self, upstream_port: int, drops: int = 1, request: bytes = _SUBMIT) -> None:
        """`request`: the start of the request line whose answers are lost (a submit's)."""
        self._upstream = ("127.0.0.1", upstream_port)
        self._request = request
        self.drops = drops  # answers still to lose
        self._lock = threading.Lock()
        self.submits = 0  # submit requests that passed through
        self.dropped = 0  # answers swallowed
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._open: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> DroppingProxy:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        with self._lock:
            for sock in self._open:
                _close(sock)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self._upstream)
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._open += [client, server]
            link = _Link()
            threading.Thread(
                target=self._requests, args=(client, server, link), daemon=True
            ).start()
            threading.Thread(target=self._answers, args=(server, client, link), daemon=True).start()

    def _requests(self, client: socket.socket, server: socket.socket, link: _Link) -> None:
        """Client to server; marks the link when a submit goes by (and a drop is due)."""
        seen = b""
        try:
            while data := client.recv(1 << 16):
                seen = (seen + data)[-4096:]
                if self._request in seen:
                    seen = b""
                    with self._lock:
                        self.submits += 1
                        if self.drops > 0:
                            self.drops -= 1
                            link.drop = True
                server.sendall(data)
        except OSError:
            pass
        _close(server)

    def _answers(self, server: socket.socket, client: socket.socket, link: _Link) -> None:
        """Server to client, unless the link carries a submit whose answer is to be lost."""
        try:
            while data := server.recv(1 << 16):
                if link.drop:
                    with self._lock:
                        self.dropped += 1
                    break
                client.sendall(data)
        except OSError:
            pass
        _close(client)
        _close(server)


class _Link:
    drop = False


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
