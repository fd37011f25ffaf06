"""Webhooks, the pure part: which event a job's change is, where it goes, what is sent and how
it is signed, and which hosts the server may be made to POST to.

    events_of(before=PENDING job, after=RUNNING job) -> ("begin",)
    signature("secret", "1700000000", b'{"event": ...}') -> "sha256=5d1c..."

The service (`services/workflows/notify.py`) queues, stores and retries deliveries; the adapter
(`adapters/webhook.py`) does the HTTP POST.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from gpuyard.domain.errors import InvalidRequest
from gpuyard.domain.job import REASON_NONE, Job
from gpuyard.domain.notify import DEFAULT_EVENTS
from gpuyard.domain.states import JobState

NotifyKind = Literal["user", "team"]
DeliveryState = Literal["pending", "delivered", "failed"]
PING = "ping"  # `gpuyard notify test`: no job

# The events a state change is, most specific first: a delivery tells the first one its
# target asked for (a TIMEOUT is `time_limit` to whoever asked for that, else `fail`).
_ENDED: dict[JobState, tuple[str, ...]] = {
    JobState.COMPLETED: ("end",),
    JobState.FAILED: ("fail",),
    JobState.OUT_OF_MEMORY: ("fail",),
    JobState.NODE_FAIL: ("fail",),
    JobState.TIMEOUT: ("time_limit", "fail"),
    JobState.CANCELLED: ("cancel",),
}


def events_of(before: Job | None, after: Job) -> tuple[str, ...]:
    """The events a committed change is (most specific first); () for one that is none (a
    submit, a pid record, a hold)."""
    if before is None or before.state is after.state:
        return ()
    if after.state is JobState.RUNNING:
        return ("begin",)
    if after.state is JobState.PENDING:  # back in the queue after a run (preempted, retried)
        return ("requeue",)
    return _ENDED.get(after.state, ())


@dataclass(frozen=True, slots=True)
class NotifySettings:
    """What an account set once (`gpuyard notify set`): a user's or a team's webhook URLs and
    events, and the secret deliveries to them are signed with (None: none made yet)."""

    kind: NotifyKind
    name: str
    urls: tuple[str, ...] = ()
    events: tuple[str, ...] = ()
    secret: str | None = None
    updated_at: float = 0.0
    secret_at: float | None = None

    @property
    def signer(self) -> str:
        return f"{self.kind}:{self.name}"


@dataclass(frozen=True, slots=True)
class Target:
    """One URL a job's event may go to, the events it wants, and whose secret signs it."""

    url: str
    events: tuple[str, ...]
    signer: str  # "user:alice" or "team:vision"


def targets_of(job: Job, user: NotifySettings | None, team: NotifySettings | None) -> list[Target]:
    """Where a job's events go: the most specific level that names URLs wins, the job's own
    (`--notify`), else its owner's defaults, else their team's. The job's own events
    (`--mail-type`, `notify_events`) apply to whichever URLs win; without them, the winning
    level's events; without those, DEFAULT_EVENTS. Job and user URLs are signed with the
    owner's secret, a team's with the team's."""
    own = f"user:{job.owner}"
    urls: tuple[str, ...]
    events: tuple[str, ...]
    if job.spec.notify:
        urls, events, signer = job.spec.notify, (), own
    elif user is not None and user.urls:
        urls, events, signer = user.urls, user.events, own
    elif team is not None and team.urls:
        urls, events, signer = team.urls, team.events, team.signer
    else:
        return []
    chosen = job.spec.notify_events or events or DEFAULT_EVENTS
    return [Target(url, tuple(chosen), signer) for url in dict.fromkeys(urls)]


@dataclass(frozen=True, slots=True)
class Delivery:
    """One event for one URL, stored before it is sent (a restart retries it). `job`: the
    job as it was at the change, as sent (`job_summary`); `signer`: whose secret signs it."""

    id: str  # also the X-Gpuyard-Delivery header and the body's delivery_id: a receiver's dedup key
    owner: str
    job_id: int | None
    event: str
    url: str
    signer: str
    job: dict[str, Any]
    created_at: float
    state: DeliveryState = "pending"
    attempts: int = 0
    next_at: float = 0.0
    last_status: int | None = None
    last_error: str = ""
    updated_at: float = 0.0

    @property
    def host(self) -> str:
        """The URL's host (and port): what the delivery log shows (a URL's path or query often
        carries a chat's token)."""
        return url_host(self.url)


def url_host(url: str) -> str:
    try:
        return urlsplit(url).netloc.rpartition("@")[2] or "?"
    except ValueError:
        return "?"


def job_summary(job: Job) -> dict[str, Any]:
    """What a webhook is told of a job: never its environment, command or secrets."""
    return {
        "id": job.id,
        "name": job.spec.name,
        "owner": job.owner,
        "state": job.state.value,
        "exit_code": job.exit_code,
        "reason": None if job.reason == REASON_NONE else job.reason,  # never the word "None"
        "array_job_id": job.array_job_id,
        "array_task_id": job.array_task_id,
        "gpus": list(job.gpus),
        "node": job.node if job.started_at is not None else "",  # "" until its first start
        "restarts": job.restarts,
        "time_limit_s": job.spec.time_limit_s,
        "submitted_at": job.submitted_at,
        "started_at": job.started_at,
        "ended_at": job.ended_at,
    }


def body_of(delivery: Delivery, sent_at: float) -> bytes:
    """The JSON a delivery POSTs (the same at each attempt but for `sent_at`)."""
    return json.dumps(
        {
            "event": delivery.event,
            "job": delivery.job or None,
            "sent_at": sent_at,
            "delivery_id": delivery.id,
        },
        separators=(",", ":"),
    ).encode()


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """`X-Gpuyard-Signature`: HMAC-SHA256 keyed by the secret over "timestamp.body"."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def headers_of(delivery: Delivery, secret: str, sent_at: float, body: bytes) -> dict[str, str]:
    timestamp = str(int(sent_at))
    return {
        "Content-Type": "application/json",
        "User-Agent": "gpuyard-webhook",
        "X-Gpuyard-Event": delivery.event,
        "X-Gpuyard-Delivery": delivery.id,
        "X-Gpuyard-Timestamp": timestamp,
        "X-Gpuyard-Signature": signature(secret, timestamp, body),
    }


def retry_delay_s(attempts: int, first_s: float) -> float:
    """The wait after the `attempts`-th failed try: first_s, doubled each time (40 s: 40, 80,
    160, 320: five tries over ten minutes)."""
    return float(first_s * 2 ** max(0, attempts - 1))


# -- where the server may POST ---------------------------------------------------------------

_WORDS = ("loopback", "private", "public")
DEFAULT_ALLOW = "private,public"


@dataclass(frozen=True, slots=True)
class UrlPolicy:
    """GPUYARD_NOTIFY_ALLOW: the hosts a webhook may name. A webhook makes the server POST
    wherever its user says, from the server's own network position (server-side request
    forgery): by default private and public addresses are allowed (a lab's chat relay is on
    its network), loopback and link-local never (the server's own API, services bound to
    loopback, a cloud's metadata endpoint at 169.254.169.254). Entries, comma-separated:
    `loopback`, `private`, `public`, an address or network (10.1.0.0/16), a host name
    (hooks.slack.com) or a domain (`.example.org`: it and its subdomains); `none`: no
    webhooks at all. A URL is allowed when every address its host resolves to is allowed.
    `own_ports`: the server's API port on loopback, refused even with `loopback`."""

    words: frozenset[str]
    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]
    names: frozenset[str]
    domains: tuple[str, ...]
    own_ports: tuple[int, ...] = ()
    off: bool = False

    @classmethod
    def parse(cls, text: str | None, own_ports: Sequence[int] = ()) -> UrlPolicy:
        words: set[str] = set()
        networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        names: set[str] = set()
        domains: list[str] = []
        entries = [e.strip().lower() for e in (text or DEFAULT_ALLOW).split(",") if e.strip()]
        off = entries == ["none"]
        for entry in [] if off else entries:
            if entry in _WORDS:
                words.add(entry)
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
                continue
            except ValueError:
                pass
            if entry.startswith("."):
                domains.append(entry)
            elif entry and all(c.isalnum() or c in "-._" for c in entry):
                names.add(entry)
            else:
                raise InvalidRequest(
                    f"GPUYARD_NOTIFY_ALLOW: {entry!r} is none of loopback, private, public, "
                    "an address or network, a host name or a .domain"
                )
        return cls(
            frozenset(words), tuple(networks), frozenset(names), tuple(domains),
            tuple(own_ports), off,
        )  # fmt: skip

    def refuses_name(self, url: str) -> str | None:
        """Why the URL is refused before any name is resolved (None: it may be, once its
        addresses are checked)."""
        if self.off:
            return "webhooks are turned off on this server (GPUYARD_NOTIFY_ALLOW=none)"
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError:
            return "not a valid URL"
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return "not an http(s) URL"
        host = parts.hostname.lower()
        if host == "localhost" or host.endswith(".localhost"):
            return self.refuses_address(host, "127.0.0.1", port or _default_port(parts.scheme))
        try:
            ipaddress.ip_address(host)
        except ValueError:
            return None
        return self.refuses_address(host, host, port or _default_port(parts.scheme))

    def refuses_address(self, host: str, address: str, port: int) -> str | None:
        """Why a POST to `address` (which `host` resolved to) is refused; None: allowed."""
        if self.off:
            return "webhooks are turned off on this server (GPUYARD_NOTIFY_ALLOW=none)"
        ip = ipaddress.ip_address(address.split("%")[0])
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        if ip.is_loopback and port in self.own_ports:
            return "it is this server's own API"
        host = host.lower().rstrip(".")
        if host in self.names or any(host.endswith(d) or host == d[1:] for d in self.domains):
            return None
        if any(ip in net for net in self.networks if net.version == ip.version):
            return None
        if ip.is_loopback:
            ok = "loopback" in self.words
        elif ip.is_link_local or ip.is_multicast or ip.is_unspecified or ip.is_reserved:
            ok = False  # only by address (169.254.0.0/16 in the list): a cloud's metadata
        elif ip.is_private:
            ok = "private" in self.words
        else:
            ok = "public" in self.words
        if ok:
            return None
        return f"{host} ({ip}) is not allowed by the server's GPUYARD_NOTIFY_ALLOW (ask its admin)"


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80
