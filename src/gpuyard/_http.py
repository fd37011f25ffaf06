"""A minimal HTTP/1.1 client over a socket, for the CLI's start path.

`http.client` pulls in the `email` package (~25 ms of imports) to parse headers; the CLI must
answer in ~60 ms, so this reads the few things gpuyard's own server sends: a status line,
headers, and a Content-Length or chunked body. One request per connection.
"""

from __future__ import annotations

import os
import socket
import sys

TYPE_CHECKING = False  # typing stays unimported on the CLI's start path
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    # A request on a connection kept open: (method, path, headers) -> its response.
    Exchange = Callable[[str, str, dict[str, str]], "HttpResponse"]


# Bytes asked of the socket at once: big enough that a 200 MB body is ~800 calls.
_RECV = 1 << 18


class HttpResponse:
    """Status, lower-cased headers, and the body (read at once, or streamed by `chunks`)."""

    def __init__(self, sock: socket.socket, reader: _Reader, status: int,
                 reason: str, headers: dict[str, str], *, keep: bool = False) -> None:  # fmt: skip
        self.status = status
        self.reason = reason
        self.headers = headers
        self._sock = sock
        self._reader = reader
        self._keep = keep  # a response read before the connection's next request

    def chunks(self) -> Iterator[bytes]:
        """The body in pieces as they arrive (each at most `_RECV` bytes): nothing is
        buffered beyond one piece, so a 200 MB log streams in constant memory."""
        try:
            if self.headers.get("transfer-encoding", "").lower() == "chunked":
                while True:
                    size = int(self._reader.line().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        return
                    yield from self._reader.pieces(size)
                    self._reader.line()
            elif "content-length" in self.headers:
                yield from self._reader.pieces(int(self.headers["content-length"]))
            elif self._keep:  # its end is the connection's: nothing could follow it
                raise ConnectionResetError("a response without a length on a kept connection")
            else:
                yield from self._reader.rest()
        finally:
            if not self._keep:
                self._sock.close()

    def read(self) -> bytes:
        return b"".join(self.chunks())


class _Reader:
    """Reads a response: lines from a small buffer, bodies straight from the socket.

    The buffer is a bytearray consumed from the front (amortised O(1) in CPython): appending
    to `bytes` copied the whole buffer on every receive, quadratic in the body's size
    (7 minutes for a 200 MB log).
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buf = bytearray()

    def line(self) -> bytes:
        start = 0
        while (end := self._buf.find(b"\r\n", start)) < 0:
            start = max(0, len(self._buf) - 1)
            data = self._sock.recv(_RECV)
            if not data:
                raise ConnectionResetError("the server closed the connection")
            self._buf += data
        line = bytes(self._buf[:end])
        del self._buf[: end + 2]
        return line

    def pieces(self, size: int) -> Iterator[bytes]:
        if self._buf:
            head = bytes(self._buf[:size])
            del self._buf[: len(head)]
            size -= len(head)
            yield head
        while size > 0:
            data = self._sock.recv(min(size, _RECV))
            if not data:
                raise ConnectionResetError("the server closed the connection mid-response")
            size -= len(data)
            yield data

    def rest(self) -> Iterator[bytes]:
        if self._buf:
            yield bytes(self._buf)
            self._buf.clear()
        while data := self._sock.recv(_RECV):
            yield data


def request(
    host: str, port: int, method: str, path: str, headers: dict[str, str],
    body: bytes | None, *, timeout_s: float | None, tls: bool = False,
    before: Callable[[Exchange], None] | None = None, unix: str | None = None,
) -> HttpResponse:  # fmt: skip
    """Send one request; raises OSError (ConnectionRefusedError, ...) when unreachable.
    `unix`: over that Unix socket instead of TCP to `host`/`port` (a root server's, for
    local users: no token, the kernel tells the server who connects).
    `before` may first make requests of its own on the same connection (kept alive), e.g.
    check that the server is who it should be before this request's secrets are sent."""
    if unix is not None:
        sock = _connect_unix(unix, timeout_s)
    else:
        # An ASCII host as bytes (getaddrinfo takes both; typeshed says str): a str would be
        # IDNA-encoded, which imports `encodings.idna` (~1 ms).
        address = host.encode() if host.isascii() else host
        sock = socket.create_connection((address, port), timeout=timeout_s)  # type: ignore[arg-type]
    try:
        if unix is None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls:
            import ssl

            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        reader = _Reader(sock)
        name = f"[{host}]" if ":" in host else host  # an IPv6 address in brackets
        authority = "localhost" if unix is not None else f"{name}:{port}"

        def exchange(
            method: str, path: str, headers: dict[str, str], body: bytes | None, keep: bool
        ) -> HttpResponse:
            lines = [f"{method} {path} HTTP/1.1", f"Host: {authority}"]
            lines += [f"{k}: {v}" for k, v in headers.items()]
            lines.append("Connection: keep-alive" if keep else "Connection: close")
            if body is not None:
                lines.append(f"Content-Length: {len(body)}")
            sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b""))
            _version, status, *reason = reader.line().decode("latin-1").split(" ", 2)
            response_headers: dict[str, str] = {}
            while line := reader.line():
                key, _, value = line.decode("latin-1").partition(":")
                response_headers[key.strip().lower()] = value.strip()
            return HttpResponse(sock, reader, int(status), reason[0] if reason else "",
                                response_headers, keep=keep)  # fmt: skip

        if before is not None:
            before(lambda method, path, headers: exchange(method, path, headers, None, True))
        return exchange(method, path, headers, body, False)
    except BaseException:
        sock.close()
        raise


class UntrustedSocket(ConnectionError):
    """What listens on the Unix socket is neither root nor this user: not a gpuyard server
    anyone installed, so nothing is sent to it."""


def _connect_unix(path: str, timeout_s: float | None) -> socket.socket:
    """A connection to the server's Unix socket, whose listener the kernel says is root or
    this very user (SO_PEERCRED): a socket put where the CLI looks (GPUYARD_SOCKET in a
    folder others may write) by another user never gets a request."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout_s)
        sock.connect(path)
        # struct ucred {pid_t pid; uid_t uid; gid_t gid;}: the uid is the second int.
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        uid = int.from_bytes(raw[4:8], sys.byteorder)
        if uid not in (0, os.getuid()):
            raise UntrustedSocket(
                f"what listens on {path} runs as uid {uid}, neither root nor you: nothing was "
                "sent to it (set GPUYARD_SOCKET to the gpuyard server's socket, or off)"
            )
        return sock
    except BaseException:
        sock.close()
        raise
