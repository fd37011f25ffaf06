"""The WebhookPoster port over the standard library's `http.client`: one POST, no redirect
followed (a 3xx is a failed try), a timeout for connecting and for the answer, and the host's
addresses checked against the server's allow-list (`UrlPolicy`) before connecting to exactly
the address that was checked (a name that resolves to an allowed address at the check and
to loopback at the connection, DNS rebinding, cannot slip through). TLS verifies the
certificate against the URL's host name, as any client would.
"""

from __future__ import annotations

import http.client
import socket
import ssl
from collections.abc import Mapping
from urllib.parse import urlsplit

from gpuyard.domain.webhooks import UrlPolicy
from gpuyard.services.ports import PostResult

TIMEOUT_S = 5.0
_MAX_ANSWER = 64 * 1024  # a receiver's answer is read (so the connection ends cleanly), not kept


class HttpPoster:
    """Implements WebhookPoster."""

    def __init__(self, policy: UrlPolicy, timeout_s: float = TIMEOUT_S) -> None:
        self.policy = policy
        self.timeout_s = timeout_s
        # Made at the first HTTPS post: loading the system's certificates cost every start
        # ~35 ms, for a server that may never post to an https URL.
        self._tls: ssl.SSLContext | None = None

    def _tls_context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = ssl.create_default_context()
        return self._tls

    def post(self, url: str, headers: Mapping[str, str], body: bytes) -> PostResult:
        refused = self.policy.refuses_name(url)
        if refused is not None:
            return PostResult(None, f"refused: {refused}", final=True)
        parts = urlsplit(url)
        host = parts.hostname or ""
        tls = parts.scheme == "https"
        port = parts.port or (443 if tls else 80)
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            return PostResult(None, f"cannot resolve {host}: {_why(exc)}")
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        for address in addresses:  # every address must be allowed: no picking the good one
            why = self.policy.refuses_address(host, address, port)
            if why is not None:
                return PostResult(None, f"refused: {why}", final=True)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        last = "no address"
        context = self._tls_context() if tls else None
        for address in addresses:
            conn = _connection(address, host, port, context, self.timeout_s)
            try:
                conn.request("POST", path, body=body, headers={"Host": parts.netloc.rpartition(
                    "@")[2], "Content-Length": str(len(body)), **headers})  # fmt: skip
                answer = conn.getresponse()
                answer.read(_MAX_ANSWER)
                status = answer.status
            except (OSError, http.client.HTTPException) as exc:
                last = _why(exc)
                continue
            finally:
                conn.close()
            if 200 <= status < 300:
                return PostResult(status)
            if 300 <= status < 400:
                return PostResult(status, f"HTTP {status}: redirects are not followed")
            return PostResult(status, f"HTTP {status}")
        return PostResult(None, last)


def _connection(
    address: str, host: str, port: int, context: ssl.SSLContext | None, timeout_s: float
) -> http.client.HTTPConnection:
    """A connection to `address` that speaks to `host` (its Host header, its certificate);
    `context`: HTTPS with it, None: plain HTTP."""
    if context is None:
        conn = http.client.HTTPConnection(address, port, timeout=timeout_s)
        return conn
    return _PinnedHttps(address, host, port, context, timeout_s)


class _PinnedHttps(http.client.HTTPSConnection):
    """HTTPS to one checked address, the certificate verified for the URL's host name."""

    def __init__(
        self, address: str, host: str, port: int, context: ssl.SSLContext, timeout_s: float
    ) -> None:
        super().__init__(address, port, timeout=timeout_s, context=context)
        self._server_name = host
        self._context = context

    def connect(self) -> None:
        sock = socket.create_connection((self.host, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self._server_name)


def _why(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__
