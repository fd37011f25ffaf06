"""The web dashboard's sessions: a browser logs in once (with an API token, or with a one-time
code the CLI asked for) and then holds two secrets: a random session id in an HttpOnly cookie,
and the session's *page key*, which only the dashboard's page holds (its origin's storage) and
sends in a header with each of its requests.

Both are needed: browsers scope cookies by host, not port, so any page served on another port
of the same host (another local user's) receives the cookie; the key lives where only the
dashboard's own origin (scheme, host and port) can read it, so a copied cookie admits nobody.

Kept in memory, not in the store: a session is only a shortcut to a credential the user still
holds (a token, or their login on the server's box), so a restart costs one more login and no
migration, and no session id ever reaches a disk or a backup. Only SHA-256 hashes of session
ids and login codes are kept (a memory dump leaks no usable cookie).

A session remembers where its principal came from (`Origin`): a token's hash, so a revoked or
expired token, or a disabled account, ends the session at its next request (the front door
asks `TokenAuth` again); a local Unix-socket login's uid (asked of `PeerAuth` again); or the
principal itself. A session ends by a deadline (`ends_at`) that nothing it makes outlives: a
login link asked for by a session makes sessions that end with it, and a token made through one
expires with it (`left_s`). The server's root account may not log in (`refused_user`): a
browser's session is the easiest credential to lose, and an admin uses an admin account.
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

from gpuyard.domain.errors import Forbidden
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
    # A session made from this origin ends by then at the latest (the session clock's time):
    # set when a session asked for the login code, so the new session cannot outlive it.
    ends_by: float | None = None


@dataclass(frozen=True, slots=True)
class Session:
    """A live session: its origin, its page key (compared, never shown again), when it was
    made, last used, and when it ends whatever its use (the session clock's times)."""

    origin: Origin
    key: str
    created_at: float
    used_at: float
    ends_at: float

    @property
    def principal(self) -> Principal:
        return self.origin.principal


@dataclass(frozen=True, slots=True)
class NewSession:
    """What a login hands the browser: the cookie's value and the page's key."""

    session_id: str
    key: str
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
        refused_user: str | None = None,
    ) -> None:
        self.idle_s = idle_s
        self.refused_user = refused_user
        self.max_age_s = max_age_s
        self.code_ttl_s = code_ttl_s
        self._clock = clock
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._codes: dict[str, tuple[Origin, float]] = {}
        self._lock = threading.Lock()

    def login(self, origin: Origin) -> NewSession:
        """A new session for `origin`'s principal (its scope kept: a read token's session
        only reads); Forbidden for the refused (root) account."""
        self.check_user(origin.principal)
        session_id, key = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        now = self._clock()
        ends_at = now + self.max_age_s
        if origin.ends_by is not None:
            ends_at = min(ends_at, origin.ends_by)
        with self._lock:
            self._sessions[_hash(session_id)] = Session(origin, key, now, now, ends_at)
            while len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)
        return NewSession(session_id, key, origin.principal, max(1, int(ends_at - now)))

    def check_user(self, principal: Principal) -> None:
        """Forbidden, in one line, when `principal` may not use the dashboard (root)."""
        if self.refused_user is not None and principal.user == self.refused_user:
            raise Forbidden(
                f"{principal.user} may not log in to the dashboard (a browser session is the "
                "easiest credential to lose): use an admin account (`gpuyard admin user add "
                "NAME --role admin`), or start the server with GPUYARD_ALLOW_ROOT_DASHBOARD=1"
            )

    def left_s(self, session: Session) -> float:
        """How long `session` may live at most from now (its deadline, not its idle time)."""
        return max(0.0, session.ends_at - self._clock())

    @staticmethod
    def bound_to(session: Session) -> Origin:
        """`session`'s origin for a session made from it (its login link): ending with it
        (its `ends_at` is already within its origin's `ends_by`)."""
        return replace(session.origin, ends_by=session.ends_at)

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
            if now - session.used_at >= self.idle_s or now >= session.ends_at:
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
        """A one-time login code for `origin`, valid `code_ttl_s`, good for one login;
        Forbidden for the refused (root) account (said now, not at the click)."""
        self.check_user(origin.principal)
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
    def key_matches(session: Session, sent: bytes | None) -> bool:
        """Whether `sent` (the page's header) is `session`'s page key (constant time)."""
        return sent is not None and hmac.compare_digest(sent, session.key.encode())

    @property
    def count(self) -> int:
        return len(self._sessions)
