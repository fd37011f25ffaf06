"""The AccountStore port in SQL: `SqlJobStore` inherits it (one database, one engine).

Account changes are rare (an admin's command, a token made or revoked), so each is its own
short transaction through SQLAlchemy, not the jobs' group commit."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Engine, insert, select, update
from sqlalchemy.exc import IntegrityError

from gpuyard.adapters.store.tables import api_tokens, teams, users
from gpuyard.domain.accounts import Account, ApiToken, Team
from gpuyard.domain.errors import Conflict, NotFound
from gpuyard.domain.principal import Scope


class SqlAccounts:
    """Implements AccountStore over `self._engine` (set by the store that inherits it)."""

    _engine: Engine
    _reader: Engine  # the same engine, its transactions read-only (sql.py `_make_engine`)

    def load_teams(self) -> list[Team]:
        with self._reader.connect() as conn:
            rows = conn.execute(select(teams))
            return sorted((Team(r.name, r.created_at) for r in rows), key=_by_name)

    def add_team(self, team: Team) -> None:
        try:
            with self._engine.begin() as conn:
                conn.execute(insert(teams).values(name=team.name, created_at=team.created_at))
        except IntegrityError:
            raise Conflict(f"team {team.name} already exists") from None

    def load_accounts(self) -> list[Account]:
        with self._reader.connect() as conn:
            rows = conn.execute(select(users))
            return sorted((_account(r) for r in rows), key=_by_name)

    def add_account(self, account: Account) -> None:
        try:
            with self._engine.begin() as conn:
                conn.execute(insert(users).values(**_account_row(account)))
        except IntegrityError:
            raise Conflict(
                f"user {account.name} already exists (or team {account.team} does not)"
            ) from None

    def save_account(self, account: Account) -> None:
        row = _account_row(account)
        del row["name"], row["created_at"]
        with self._engine.begin() as conn:
            done = conn.execute(update(users).where(users.c.name == account.name).values(**row))
            if done.rowcount != 1:
                raise NotFound(f"user {account.name} not found")

    def load_tokens(self) -> list[ApiToken]:
        with self._reader.connect() as conn:
            rows = conn.execute(select(api_tokens).order_by(api_tokens.c.id))
            return [_token(r) for r in rows]

    def add_token(
        self, user: str, scope: Scope, token_hash: str, created_at: float,
        expires_at: float | None,
    ) -> ApiToken:  # fmt: skip
        values: dict[str, Any] = {
            "user_name": user, "scope": scope, "token_hash": token_hash,
            "created_at": created_at, "expires_at": expires_at,
        }  # fmt: skip
        try:
            with self._engine.begin() as conn:
                done = conn.execute(insert(api_tokens).values(**values))
                key = done.inserted_primary_key
                assert key is not None
                token_id = int(key[0])
        except IntegrityError:
            raise Conflict("that token is already stored (or its user does not exist)") from None
        return ApiToken(token_id, user, scope, token_hash, created_at, expires_at)

    def revoke_token(self, token_id: int, at: float) -> None:
        with self._engine.begin() as conn:
            done = conn.execute(
                update(api_tokens).where(api_tokens.c.id == token_id).values(revoked_at=at)
            )
            if done.rowcount != 1:
                raise NotFound(f"token {token_id} not found")

    def touch_tokens(self, last_used: Mapping[int, float]) -> None:
        if not last_used:
            return
        with self._engine.begin() as conn:
            for token_id, at in sorted(last_used.items()):
                conn.execute(
                    update(api_tokens).where(api_tokens.c.id == token_id).values(last_used_at=at)
                )


def _by_name(item: Team | Account) -> str:
    """Lists are by name in code point order, sorted here: an ORDER BY would follow the
    database's collation, and a PostgreSQL database's (en_US.UTF-8, say) puts "alice" before
    "Zed", where SQLite and the memory store put "Zed" first. The tables are small."""
    return item.name


def _account_row(account: Account) -> dict[str, Any]:
    return {
        "name": account.name, "role": account.role, "team": account.team,
        "unix_user": account.unix_user, "disabled": account.disabled,
        "created_at": account.created_at,
    }  # fmt: skip


def _account(row: Any) -> Account:
    return Account(row.name, row.role, row.team, row.created_at, row.unix_user, bool(row.disabled))


def _token(row: Any) -> ApiToken:
    return ApiToken(
        row.id, row.user_name, row.scope, row.token_hash, row.created_at, row.expires_at,
        row.last_used_at, row.revoked_at,
    )  # fmt: skip
