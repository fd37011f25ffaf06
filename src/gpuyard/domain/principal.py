"""Who is acting: every use case is called with a Principal, and authorisation is decided in
the services, never in a route."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Role = Literal["admin", "user"]


@dataclass(frozen=True, slots=True)
class Principal:
    """The person (or the server itself) behind a request. `user` is the account name jobs are
    owned by; `role` decides what they may do to others' jobs and to the machine."""

    user: str
    role: Role = "user"
    team: str | None = None

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    def may_see(self, owner: str) -> bool:
        """A job's details (its log, its environment, its command) are its owner's and the
        admins'."""
        return self.is_admin or owner == self.user
