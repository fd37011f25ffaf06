"""The AccountStore port in memory: `MemoryJobStore` inherits it. It keeps the promises the
SQL store keeps (names unique, a user's team exists, token ids never reused)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuyard.domain.accounts import Account, ApiToken, Team
from gpuyard.domain.errors import Conflict, NotFound
from gpuyard.domain.principal import Scope


@dataclass
class MemoryAccounts:
    """What a database holds about accounts (a `MemoryDatabase` field)."""

    teams: dict[str, Team] = field(default_factory=dict)
    users: dict[str, Account] = field(default_factory=dict)
    tokens: dict[int, ApiToken] = field(default_factory=dict)
    last_token_id: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class MemoryAccountStore:
    """Implements AccountStore over `self._accounts` (set by the store that inherits it)."""

    _accounts: MemoryAccounts

    def load_teams(self) -> list[Team]:
        with self._accounts.lock:
            return sorted(self._accounts.teams.values(), key=lambda t: t.name)

    def add_team(self, team: Team) -> None:
        with self._accounts.lock:
            if team.name in self._accounts.teams:
                raise Conflict(f"team {team.name} already exists")
            self._accounts.teams[team.name] = team

    def load_accounts(self) -> list[Account]:
        with self._accounts.lock:
            return sorted(self._accounts.users.values(), key=lambda a: a.name)

    def add_account(self, account: Account) -> None:
        db = self._accounts
        with db.lock:
            if account.name in db.users or account.team not in db.teams:
                raise Conflict(
                    f"user {account.name} already exists (or team {account.team} does not)"
                )
            db.users[account.name] = account

    def save_account(self, account: Account) -> None:
        db = self._accounts
        with db.lock:
            old = db.users.get(account.name)
            if old is None:
                raise NotFound(f"user {account.name} not found")
            if account.team not in db.teams:
                raise Conflict(f"team {account.team} does not exist")
            db.users[account.name] = dataclasses.replace(account, created_at=old.created_at)

    def load_tokens(self) -> list[ApiToken]:
        with self._accounts.lock:
            return [self._accounts.tokens[i] for i in sorted(self._accounts.tokens)]

    def add_token(
        self, user: str, scope: Scope, token_hash: str, created_at: float,
        expires_at: float | None,
    ) -> ApiToken:  # fmt: skip
        db = self._accounts
        with db.lock:
            if user not in db.users or any(t.token_hash == token_hash for t in db.tokens.values()):
                raise Conflict("that token is already stored (or its user does not exist)")
            db.last_token_id += 1
            token = ApiToken(db.last_token_id, user, scope, token_hash, created_at, expires_at)
            db.tokens[token.id] = token
            return token

    def revoke_token(self, token_id: int, at: float) -> None:
        db = self._accounts
        with db.lock:
            token = db.tokens.get(token_id)
            if token is None:
                raise NotFound(f"token {token_id} not found")
            db.tokens[token_id] = dataclasses.replace(token, revoked_at=at)

    def touch_tokens(self, last_used: Mapping[int, float]) -> None:
        db = self._accounts
        with db.lock:
            for token_id, at in last_used.items():
                token = db.tokens.get(token_id)
                if token is not None:
                    db.tokens[token_id] = dataclasses.replace(token, last_used_at=at)
