"""Who a request comes from. Every bearer token is looked up by its SHA-256 in an in-memory
map (`Credential`s, refreshed by `AccountService` whenever a token, an account or a team
changes), so authenticating costs one hash and one dict lookup, never a database read.

The state dir's token is kept as a special case: it is the server's own Unix user's admin
token (a single-user box needs no set-up and no login), never stored in the database, and a
new one replaces it when the file changes at the next start."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gpuyard.domain import hello
from gpuyard.domain.errors import Unauthorized
from gpuyard.domain.principal import Principal

_UNKNOWN = (
    "missing or wrong API token: the CLI reads it from GPUYARD_TOKEN, `gpuyard login`'s file "
    "or the server's state dir"
)


def token_hash(secret: str | bytes) -> str:
    """What is stored of a token: SHA-256, hex. A fast hash is right for 256-bit random
    secrets (nothing to guess); a slow one would cost every request milliseconds."""
    data = secret.encode() if isinstance(secret, str) else secret
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True, slots=True)
class Credential:
    """What a token admits: who acts and with which scope (in `principal`), until when, and
    which stored token it is (None: the state dir's). `refused`: why it no longer admits
    anyone (revoked, account disabled), kept so the 401 can say so."""

    principal: Principal
    expires_at: float | None = None
    token_id: int | None = None
    refused: str | None = None


class TokenAuth:
    """Bearer tokens -> principals. `principal` is the server's own admin (the state dir's
    token); `replace` installs the stored tokens' credentials (a new dict swapped in whole,
    so the event loop reads without a lock)."""

    def __init__(
        self, token: str, principal: Principal, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.principal = principal
        self._clock = clock
        self._server = (token_hash(token.strip()), Credential(principal))
        self._by_hash: dict[str, Credential] = {}
        self._hello_keys: dict[str, bytes] = {}
        self.replace({})
        # token id -> when it was last used, since `take_used` was last called.
        self._used: dict[int, float] = {}

    def replace(self, credentials: Mapping[str, Credential]) -> None:
        """The stored tokens' credentials, by hash; the state dir's token always stays."""
        fresh = dict(credentials)
        fresh[self._server[0]] = self._server[1]
        # Refused tokens too: the request that follows then hears why (revoked, disabled).
        keys = [bytes.fromhex(h) for h in fresh]
        self._hello_keys = {hello.key_id(key): key for key in keys}
        self._by_hash = fresh

    def hello_key(self, key_id: str) -> bytes | None:
        """The key (a token's SHA-256) that `key_id` names, for the server to prove it holds
        the token before a client sends it (domain/hello.py); None: no token it knows."""
        return self._hello_keys.get(key_id)

    def authenticate(self, authorization: bytes) -> Principal:
        """The principal behind an `Authorization` header value; Unauthorized otherwise.
        The scheme is case-insensitive (`bearer` is `Bearer`: RFC 9110, section 11.1)."""
        scheme, _, secret = authorization.partition(b" ")
        if scheme.lower() != b"bearer":
            raise Unauthorized(_UNKNOWN)
        # Looked up by hash: how long the lookup takes says nothing about a stored secret.
        return self.authenticate_hash(token_hash(secret.strip(b" ")))

    def authenticate_hash(self, hashed: str) -> Principal:
        """The principal behind a token known by its SHA-256 (hex), as `authenticate`: a web
        session made with a token asks again at each request, so revoking the token, its
        expiry or a disabled account ends the session too."""
        found = self._by_hash.get(hashed)
        if found is None:
            raise Unauthorized(_UNKNOWN)
        if found.refused is not None:
            raise Unauthorized(found.refused)
        now = self._clock()
        if found.expires_at is not None and now >= found.expires_at:
            when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(found.expires_at))
            raise Unauthorized(
                f"this API token expired on {when}: make a new one with `gpuyard token create`"
            )
        if found.token_id is not None:
            self._used[found.token_id] = now
        return found.principal

    def take_used(self) -> dict[int, float]:
        """When each stored token was last used since the last call (then forgotten). A use
        made during the swap may be missed: last-used times are advice, not accounting."""
        used, self._used = self._used, {}
        return used
