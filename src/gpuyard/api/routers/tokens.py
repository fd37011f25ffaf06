"""/api/v1/tokens: the caller's own API tokens (make, list, revoke); the rules are
`services/access/accounts.py`'s."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Query, Request

from gpuyard.api.deps import Accounts, Actor, Server
from gpuyard.api.front_door import session_left_s
from gpuyard.domain.accounts import ApiToken
from gpuyard.domain.units import parse_duration_s
from gpuyard.schemas.accounts_v1 import TokenCreatedOut, TokenCreateIn, TokenOut

router = APIRouter(prefix="/api/v1/tokens", tags=["tokens"])


def token_out(token: ApiToken) -> TokenOut:
    expired = token.expires_at is not None and token.expires_at <= time.time()
    return TokenOut(
        id=token.id, user=token.user, scope=token.scope, created_at=token.created_at,
        expires_at=token.expires_at, last_used_at=token.last_used_at, expired=expired,
    )  # fmt: skip


@router.post("", status_code=201)
def create_token(
    body: TokenCreateIn, accounts: Accounts, actor: Actor, request: Request, server: Server
) -> TokenCreatedOut:
    """A new token for yourself; its secret is in this answer only. Made through a dashboard
    session, it expires when that session would at the latest (a session mints nothing that
    outlives it)."""
    never = body.expires.strip().lower() == "never"
    lifetime: float | None = None if never else parse_duration_s(body.expires, field="expires")
    left_s = session_left_s(request.scope, server.web_sessions)
    if left_s is not None:
        lifetime = left_s if lifetime is None else min(lifetime, left_s)
    secret, token = accounts.create_token(actor, scope=body.scope, expires_in_s=lifetime)
    return TokenCreatedOut(**token_out(token).model_dump(), token=secret)


@router.get("")
def list_tokens(
    accounts: Accounts,
    actor: Actor,
    all: Annotated[bool, Query(description="every user's (admins only)")] = False,
) -> list[TokenOut]:
    """Your tokens that are not revoked (never their secrets); `all`: everyone's."""
    return [token_out(t) for t in accounts.tokens(actor, everyone=all)]


@router.delete("/{token_id}")
def revoke_token(token_id: int, accounts: Accounts, actor: Actor) -> TokenOut:
    """Refuse a token from now on (yours; an admin: anyone's)."""
    return token_out(accounts.revoke_token(actor, token_id))
