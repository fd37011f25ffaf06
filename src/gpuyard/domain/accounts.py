"""Accounts, teams and API tokens as the services see them (the store keeps them; the token's
secret never: only its SHA-256)."""

from __future__ import annotations

from dataclasses import dataclass

from gpuyard.domain.principal import Role, Scope

DEFAULT_TEAM = "default"


@dataclass(frozen=True, slots=True)
class Team:
    """A group of users (quotas and fair share are per team and per user)."""

    name: str
    created_at: float


@dataclass(frozen=True, slots=True)
class Account:
    """A person who may use the server. `unix_user`: whom their jobs run as (None: the same
    name); a disabled account keeps its jobs and history, but none of its tokens is accepted."""

    name: str
    role: Role
    team: str
    created_at: float
    unix_user: str | None = None
    disabled: bool = False


@dataclass(frozen=True, slots=True)
class ApiToken:
    """A bearer token of one account: `token_hash` is the SHA-256 of the secret (hex), the
    secret itself is shown once and kept nowhere. None times: never (expires), not yet."""

    id: int
    user: str
    scope: Scope
    token_hash: str
    created_at: float
    expires_at: float | None = None
    last_used_at: float | None = None
    revoked_at: float | None = None


_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
MAX_NAME_CHARS = 64


def name_problem(kind: str, name: str) -> str | None:
    """Why `name` cannot name a user or a team (None: it can). Unix-like names only: they
    appear in tables, logs, file names and `--user` filters, where spaces or control
    characters would break a row or a path."""
    if not name or len(name) > MAX_NAME_CHARS:
        return f"a {kind} name has 1-{MAX_NAME_CHARS} characters; got {len(name)}"
    if not set(name) <= _NAME_CHARS or name[0] in ".-":
        return f"bad {kind} name {name!r}: use letters, digits, '_', '.' and '-' (not first)"
    return None
