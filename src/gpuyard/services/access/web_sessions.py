"""The web dashboard's sessions: a browser logs in once (with an API token, or with a one-time
code the CLI asked for) and then carries a random session id in an HttpOnly cookie.

Kept in memory, not in the store: a session is only a shortcut to a credential the user still
holds (a token, or their login on the server's box), so a restart costs one more login and no
migration, and no session id ever reaches a disk or a backup. Only SHA-256 hashes of session
ids and login codes are kept (a memory dump leaks no usable cookie).

A session remembers where its principal came from (`Origin`): a token's hash, so a revoked or
expired token, or a disabled account, ends the session at its next request (the front door
asks `TokenAuth` again); a local Unix-socket login's uid (asked of `PeerAuth` again); or the
principal itself. Each session has its own CSRF token for unsafe methods (double-submit:
given to the page in a readable cookie, sent back in `X-CSRF-Token`).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace

from gpuyard.domain.principal import Principal

IDLE_S = 12 * 3600.0  # a session unused this long ends
MAX_AGE_S = 7 * 24 * 3600.0  # and any session ends this long after its login
CODE_TTL_S = 60.0  # a one-time login code's life
MAX_SESSIONS = 10_000  # the oldest go first beyond this (memory stays bounded)
MAX_CODES = 1_000


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a session's principal came from: `token_hash` (a bearer token's SHA-256, hex),
    `uid` (a Unix-socket caller's), or neither (the principal as it was at login)."""

    principal: Principal
    token_hash: str | None = None
    uid: int | None = None


@dataclass(frozen=True, slots=True)
class Session:
    origin: Origin
    csrf: str
    created_at: float
    used_at: float

    @property
    def principal(self) -> Principal:
        return self.origin.principal


@dataclass(frozen=True, slots=True)
class NewSession:
    """What a login hands the browser: the cookie's value and the page's CSRF token."""

    session_id: str
    csrf: str
    principal: Principal
    max_age_s: int


class WebSessions:
    """Session id hash -> Session, and one-time code hash -> (Origin, expiry). Thread-safe
    (logins run on the event loop, the CLI's link route in a thread)."""

    def __init__(
        self,
        *,
        idle_s: float = IDLE_S,
        max_age_s: float = MAX_AGE_S,
        code_ttl_s: float = CODE_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.idle_s = idle_s
        self.max_age_s = max_age_s
        self.code_ttl_s = code_ttl_s
        self._clock = clock
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._codes: dict[str, tuple[Origin, float]] = {}
        self._lock = threading.Lock()

    def login(self, origin: Origin) -> NewSession:
        """A new session for `origin`'s principal (its scope kept: a read token's session
        only reads)."""
        session_id, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        now = self._clock()
        with self._lock:
            self._sessions[_hash(session_id)] = Session(origin, csrf, now, now)
            while len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)
        return NewSession(session_id, csrf, origin.principal, int(self.max_age_s))

    def lookup(self, session_id: str) -> Session | None:
        """The live session the cookie names (its idle clock restarted), or None."""
        if not session_id:
            return None
        key = _hash(session_id)
        now = self._clock()
        with self._lock:
            session = self._sessions.get(key)
            if session is None:
                return None
            if now - session.used_at >= self.idle_s or now - session.created_at >= self.max_age_s:
                del self._sessions[key]
                return None
            if now - session.used_at > 1.0:  # a write per second at most per session
                session = self._sessions[key] = replace(session, used_at=now)
        return session

    def logout(self, session_id: str) -> bool:
        with self._lock:
            return self._sessions.pop(_hash(session_id), None) is not None

    def forget(self, session_id: str) -> None:
        """End a session whose credential no longer admits anyone."""
        self.logout(session_id)

    def new_code(self, origin: Origin) -> str:
        """A one-time login code for `origin`, valid `code_ttl_s`, good for one login."""
        code = secrets.token_urlsafe(24)
        now = self._clock()
        with self._lock:
            if len(self._codes) >= MAX_CODES:
                self._codes = {k: v for k, v in self._codes.items() if v[1] > now}
                while len(self._codes) >= MAX_CODES:  # all live: the oldest go
                    del self._codes[next(iter(self._codes))]
            self._codes[_hash(code)] = (origin, now + self.code_ttl_s)
        return code

    def redeem(self, code: str) -> Origin | None:
        """The origin a code was made for, once: a second use, or a use after its minute,
        is None."""
        now = self._clock()
        with self._lock:
            found = self._codes.pop(_hash(code), None)
        if found is None or now >= found[1]:
            return None
        return found[0]

    def peek(self, code: str) -> str | None:
        """Whose a live code is (the login page names them), without using it."""
        found = self._codes.get(_hash(code))
        if found is None or self._clock() >= found[1]:
            return None
        return found[0].principal.user

    @staticmethod
    def csrf_matches(session: Session, sent: bytes | None) -> bool:
        return sent is not None and hmac.compare_digest(sent, session.csrf.encode())

    @property
    def count(self) -> int:
        return len(self._sessions)
