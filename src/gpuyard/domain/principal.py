"""Who is acting: every use case is called with a Principal. What it may see and do is
decided in one table, `services/access/rules.py`, which every service asks; never in a route."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Role = Literal["admin", "user"]
# What a credential allows, least first: `read` only reads (GET), `submit` also changes the
# caller's own jobs and tokens, `admin` is everything the account may do. A token never
# gives more than its account's role: an admin's `submit` token acts as a plain user.
Scope = Literal["read", "submit", "admin"]
SCOPES: tuple[Scope, ...] = ("read", "submit", "admin")


@dataclass(frozen=True, slots=True)
class Principal:
    """The person (or the server itself) behind a request. `user` is the account name jobs are
    owned by; `role` decides what they may do to others' jobs and to the machine; `scope` is
    what the credential they came with allows (the state dir's token: everything)."""

    user: str
    role: Role = "user"
    team: str | None = None
    scope: Scope = "admin"

    @property
    def is_admin(self) -> bool:
        """An admin acting with a credential that allows it: an admin's read or submit token
        must not cancel other people's jobs if it leaks."""
        return self.role == "admin" and self.scope == "admin"

    @property
    def may_change(self) -> bool:
        """Whether this credential may change anything (a read token may only read)."""
        return self.scope != "read"
