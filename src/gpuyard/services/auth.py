"""Who a request comes from. Today one bearer token, kept in the state dir, admits the
server's own user as admin (a single-user box needs no set-up); accounts and per-user tokens
plug in behind the same `authenticate` call."""

from __future__ import annotations

import hmac

from gpuyard.domain.errors import Unauthorized
from gpuyard.domain.principal import Principal


class TokenAuth:
    """One token, one principal."""

    def __init__(self, token: str, principal: Principal) -> None:
        self._expected = f"Bearer {token}".encode()
        self.principal = principal

    def authenticate(self, authorization: bytes) -> Principal:
        """The principal behind an `Authorization` header value; Unauthorized otherwise."""
        if not hmac.compare_digest(authorization, self._expected):
            raise Unauthorized(
                "missing or wrong API token: the CLI reads it from the server's state dir "
                "(or set GPUYARD_TOKEN)"
            )
        return self.principal
