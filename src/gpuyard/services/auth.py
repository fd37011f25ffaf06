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
        self._expected = token.encode()
        self.principal = principal

    def authenticate(self, authorization: bytes) -> Principal:
        """The principal behind an `Authorization` header value; Unauthorized otherwise.
        The scheme is case-insensitive (`bearer` is `Bearer`: RFC 9110, section 11.1)."""
        scheme, _, credentials = authorization.partition(b" ")
        # Both compared whatever the scheme: the time taken says nothing about the token.
        right_token = hmac.compare_digest(credentials.strip(b" "), self._expected)
        if not (right_token and scheme.lower() == b"bearer"):
            raise Unauthorized(
                "missing or wrong API token: the CLI reads it from the server's state dir "
                "(or set GPUYARD_TOKEN)"
            )
        return self.principal
