"""A minimal HTTP/1.1 client over a socket, for the CLI's start path.

`http.client` pulls in the `email` package (~25 ms of imports) to parse headers; the CLI must
answer in ~60 ms, so this reads the few things gpuyard's own server sends: a status line,
headers, and a Content-Length or chunked body. One request per connection.
"""

from __future__ import annotations

import socket

TYPE_CHECKING = False  # typing stays unimported on the CLI's start path
if TYPE_CHECKING:
    from collections.abc import Iterator


class HttpResponse:
    """Status, lower-cased headers, and the body (read at once, or streamed by `chunks`)."""

    def __init__(self, sock: socket.socket, reader: _Reader, status: int,
                 reason: str, headers: dict[str, str]) -> None:  # fmt: skip
        self.status = status
        self.reason = reason
        self.headers = headers
        self._sock = sock
        self._reader = reader

    def chunks(self) -> Iterator[bytes]:
        try:
            if self.headers.get("transfer-encoding", "").lower() == "chunked":
                while True:
                    size = int(self._reader.line().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        return
                    yield self._reader.exactly(size)
                    self._reader.line()
            elif "content-length" in self.headers:
                yield self._reader.exactly(int(self.headers["content-length"]))
            else:
                yield from self._reader.rest()
        finally:
            self._sock.close()

    def read(self) -> bytes:
        return b"".join(self.chunks())


class _Reader:
    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buf = b""

    def _fill(self) -> bool:
        data = self._sock.recv(65536)
        self._buf += data
        return bool(data)

    def line(self) -> bytes:
        while b"\r\n" not in self._buf:
            if not self._fill():
                raise ConnectionResetError("the server closed the connection")
        line, self._buf = self._buf.split(b"\r\n", 1)
        return line

    def exactly(self, size: int) -> bytes:
        while len(self._buf) < size:
            if not self._fill():
                raise ConnectionResetError("the server closed the connection mid-response")
        data, self._buf = self._buf[:size], self._buf[size:]
        return data

    def rest(self) -> Iterator[bytes]:
        if self._buf:
            yield self._buf
            self._buf = b""
        while data := self._sock.recv(65536):
            yield data


def request(
    host: str, port: int, method: str, path: str, headers: dict[str, str],
    body: bytes | None, *, timeout_s: float | None, tls: bool = False,
) -> HttpResponse:  # fmt: skip
    """Send one request; raises OSError (ConnectionRefusedError, ...) when unreachable."""
    # An ASCII host as bytes (getaddrinfo takes both; typeshed says str): a str would be
    # IDNA-encoded, which imports `encodings.idna` (~1 ms).
    address = host.encode() if host.isascii() else host
    sock = socket.create_connection((address, port), timeout=timeout_s)  # type: ignore[arg-type]
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls:
            import ssl

            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        lines = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}", "Connection: close"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b""))
        reader = _Reader(sock)
        _version, status, *reason = reader.line().decode("latin-1").split(" ", 2)
        response_headers: dict[str, str] = {}
        while line := reader.line():
            key, _, value = line.decode("latin-1").partition(":")
            response_headers[key.strip().lower()] = value.strip()
        return HttpResponse(sock, reader, int(status), reason[0] if reason else "",
                            response_headers)  # fmt: skip
    except BaseException:
        sock.close()
        raise
