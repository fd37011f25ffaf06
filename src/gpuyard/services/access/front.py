"""Who may knock at all: the checks the front door makes before authentication.

- **Host** (DNS rebinding: a web page on `evil.example` whose name is made to resolve to
  127.0.0.1 talks to a loopback server from the victim's browser, sending `Host:
  evil.example`): a request must name this server — its bound address and port, the loopback
  names when it listens on loopback, this machine's addresses and names when it listens on all
  interfaces, or a name the admin configured (`--public-name`, for a reverse proxy).
- **Origin** (CSRF: a browser sends a page's cross-site request with the user's credentials):
  a state-changing request whose `Origin` is not this server is refused.
- **Failed authentication** is throttled per client address (a token bucket in memory): a
  guesser is slowed to a few tries a second, and a client that authenticates pays one dict
  lookup.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from gpuyard.locations import is_loopback

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
    """A token bucket per client address, charged only by failed authentications: `burst`
    failures at once, then `per_s` a second. An empty bucket refuses the address (even with
    the right token: otherwise a guesser would learn from a 2xx that it guessed right)."""

    burst: int = 20
    per_s: float = 2.0
    max_addresses: int = 10_000
    clock: Callable[[], float] = time.monotonic
    _buckets: dict[str, _Bucket] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def retry_after_s(self, address: str) -> int:
        """0 when `address` may try; else how many seconds until it may (Retry-After)."""
        bucket = self._buckets.get(address)
        if bucket is None:  # the usual request: one dict lookup
            return 0
        with self._lock:
            tokens = self._refill(bucket)
            if tokens >= self.burst:  # forgiven: the next request pays no lock
                self._buckets.pop(address, None)
            if tokens >= 1:
                return 0
            return max(1, math.ceil((1 - tokens) / self.per_s))

    def failed(self, address: str) -> None:
        """Charge one failed authentication to `address`."""
        with self._lock:
            bucket = self._buckets.get(address)
            if bucket is None:
                if len(self._buckets) >= self.max_addresses:
                    self._forget_full()
                bucket = self._buckets[address] = _Bucket(float(self.burst), self.clock())
            bucket.tokens = self._refill(bucket) - 1

    def _refill(self, bucket: _Bucket) -> float:
        now = self.clock()
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.at) * self.per_s)
        bucket.at = now
        return bucket.tokens

    def _forget_full(self) -> None:
        """Drop the addresses whose bucket refilled (memory stays bounded under a scan)."""
        for address, bucket in list(self._buckets.items()):
            if self._refill(bucket) >= self.burst:
                del self._buckets[address]
        if len(self._buckets) >= self.max_addresses:  # all still throttled: the oldest go
            for address in list(self._buckets)[: self.max_addresses // 10]:
                del self._buckets[address]


@dataclass(frozen=True)
class AccessRules:
    """The front door's checks before a token is looked at, and the scrape-only credential."""

    hosts: HostRules = field(default_factory=lambda: HostRules("127.0.0.1", 8765))
    throttle: FailureThrottle = field(default_factory=FailureThrottle)
    # Accepted for GET /metrics only: a Prometheus scraper must not hold an admin token.
    metrics_token: str | None = None
