"""Who may knock at all: the checks the front door makes before authentication.

- **Host** (DNS rebinding: a web page on `evil.example` whose name is made to resolve to
  127.0.0.1 talks to a loopback server from the victim's browser, sending `Host:
  evil.example`): a request must name this server — its bound address and port, the loopback
  names when it listens on loopback, this machine's addresses and names when it listens on all
  interfaces, or a name the admin configured (`--public-name`, for a reverse proxy).
- **Origin** (CSRF: a browser sends a page's cross-site request with the user's credentials):
  a state-changing request whose `Origin` is not this server is refused.
- **Failed authentication** is throttled per presented credential (a token's hash, a login
  code's, a hello key's; a socket peer's uid), never per client address: every local TCP client
  is 127.0.0.1, and one user's wrong tokens must not lock another out. A valid credential is
  never refused by the throttle (tokens and codes are 192-256 random bits: there is nothing to
  guess, so a 2xx teaches a guesser nothing); a credential that keeps failing (a revoked token
  in a script's loop) is answered 429 with when to try again, and the server pays one dict
  lookup for it.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from gpuyard.locations import is_loopback
from gpuyard.services.access.caps import ConnectionCaps

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
_WILDCARDS = ("0.0.0.0", "::", "")


def host_port(host: str, port: int | None) -> str:
    """`host:port` as a Host header writes it (an IPv6 address in brackets)."""
    host = host.lower()
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return host if port is None else f"{host}:{port}"


class HostRules:
    """Which Host headers (and so which Origins) name this server."""

    def __init__(
        self,
        bind_host: str,
        port: int,
        public_names: Iterable[str] = (),
        machine_names: Callable[[], Iterable[str]] = lambda: (),
    ) -> None:
        names: set[str] = set()
        if is_loopback(bind_host):
            names.update(LOOPBACK_NAMES)
            names.add(bind_host)
        elif bind_host in _WILDCARDS:
            # Every address and name of this machine reaches it; a rebinding attacker's name
            # is none of them.
            names.update(LOOPBACK_NAMES)
            names.update(machine_names())
        else:
            names.add(bind_host)
        self.port = port
        exact = {host_port(name, port) for name in names}
        # A configured public name: with a port, exactly that; without, any port (a reverse
        # proxy may forward `Host: gpu.lab.org`, its own port implied).
        self._any_port: set[str] = set()
        for name in public_names:
            name = name.strip().lower()
            if not name:
                continue
            bare, sep, maybe_port = name.rpartition(":")
            if sep and maybe_port.isdigit() and not bare.endswith(":"):
                exact.add(name)
            else:
                self._any_port.add(host_port(name, None))
        self._exact = frozenset(h.encode() for h in exact)
        self.names = sorted(exact | self._any_port)

    def allows(self, host: bytes) -> bool:
        """Whether a Host header's value names this server (case-insensitive)."""
        if host in self._exact:  # the usual request: one set lookup
            return True
        text = host.decode("latin-1").lower()
        if text.encode() in self._exact:
            return True
        if not self._any_port:
            return False
        name = text.rsplit(":", 1)[0] if text.rpartition(":")[2].isdigit() else text
        if text.startswith("[") and not name.endswith("]"):
            name = text  # a bare IPv6 address in brackets, no port
        return name in self._any_port

    def allows_origin(self, origin: bytes) -> bool:
        """Whether an Origin header (`scheme://host[:port]`) is this server itself."""
        scheme, sep, rest = origin.decode("latin-1").lower().partition("://")
        if not sep or scheme not in ("http", "https") or "/" in rest:
            return False  # "null" (a sandboxed page, a file) is nobody's
        if self.allows(rest.encode()):
            return True
        default = 443 if scheme == "https" else 80
        return ":" not in rest.rsplit("]", 1)[-1] and self.allows(f"{rest}:{default}".encode())

    def refusal(self, host: bytes) -> str:
        """The one line a request with a foreign Host gets."""
        shown = host.decode("latin-1")[:100] or "(none)"
        return (
            f"Host {shown!r} is not this server's (DNS rebinding?): connect to "
            f"{self.names[0] if self.names else 'its address'}, or start the server with "
            "--public-name NAME to accept that name"
        )


@dataclass
class _Bucket:
    tokens: float
    at: float


@dataclass
class FailureThrottle:
    """A token bucket per credential key (`failure_key`), charged only by its failed
    authentications: `burst` failures at once, then `per_s` a second."""

    burst: int = 20
    per_s: float = 2.0
    max_keys: int = 10_000
    clock: Callable[[], float] = time.monotonic
    _buckets: dict[str, _Bucket] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def retry_after_s(self, key: str) -> int:
        """0 when `key` may try; else how many seconds until it may (Retry-After)."""
        bucket = self._buckets.get(key)
        if bucket is None:  # the usual request: one dict lookup
            return 0
        with self._lock:
            tokens = self._refill(bucket)
            if tokens >= self.burst:  # forgiven: the next request pays no lock
                self._buckets.pop(key, None)
            if tokens >= 1:
                return 0
            return max(1, math.ceil((1 - tokens) / self.per_s))

    def failed(self, key: str) -> None:
        """Charge one failed authentication to `key`."""
        with self._lock:
            bucket = self._buckets.get(key)
            if bucket is None:
                if len(self._buckets) >= self.max_keys:
                    self._forget_full()
                bucket = self._buckets[key] = _Bucket(float(self.burst), self.clock())
            bucket.tokens = self._refill(bucket) - 1

    def _refill(self, bucket: _Bucket) -> float:
        now = self.clock()
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.at) * self.per_s)
        bucket.at = now
        return bucket.tokens

    def _forget_full(self) -> None:
        """Drop the keys whose bucket refilled (memory stays bounded under a scan)."""
        for key, bucket in list(self._buckets.items()):
            if self._refill(bucket) >= self.burst:
                del self._buckets[key]
        if len(self._buckets) >= self.max_keys:  # all still throttled: the oldest go
            for key in list(self._buckets)[: self.max_keys // 10]:
                del self._buckets[key]


def failure_key(kind: str, secret: str | bytes) -> str:
    """The throttle's key of a presented credential: its kind and a hash of it (a wrong
    token's secret is kept nowhere, not even in memory)."""
    data = secret.encode() if isinstance(secret, str) else secret
    return f"{kind}:{hashlib.sha256(data).hexdigest()[:32]}"


@dataclass(frozen=True)
class AccessRules:
    """The front door's checks before a token is looked at, and the scrape-only credential."""

    hosts: HostRules = field(default_factory=lambda: HostRules("127.0.0.1", 8765))
    throttle: FailureThrottle = field(default_factory=FailureThrottle)
    connections: ConnectionCaps = field(default_factory=ConnectionCaps)
    # Accepted for GET /metrics only: a Prometheus scraper must not hold an admin token.
    metrics_token: str | None = None
