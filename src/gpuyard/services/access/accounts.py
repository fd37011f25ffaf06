"""Accounts and API tokens as use cases: admins add teams and users and disable them; every
user makes, lists and revokes their own tokens. Each change is written to the store first,
then the in-memory credentials map (`TokenAuth.replace`) is rebuilt, so a revoked token or a
disabled user is refused from the next request on, and authenticating never reads the store.

The first admin is the server's own Unix user, created at start if absent: a single-user box
works with no set-up (its state dir token is that admin's)."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from gpuyard.domain.accounts import DEFAULT_TEAM, Account, ApiToken, Team, name_problem
from gpuyard.domain.errors import Conflict, Forbidden, InvalidRequest, NotFound
from gpuyard.domain.principal import SCOPES, Principal, Role, Scope
from gpuyard.services.access.rules import may_change, may_make_token, owns, require_admin
from gpuyard.services.access.tokens import Credential, TokenAuth, token_hash
from gpuyard.services.stores import AccountStore

# Secrets start with this, so secret scanners and people can tell one when they see it.
TOKEN_PREFIX = "gpy_"


class AccountService:
    """Accounts, teams and tokens: the store is the truth, this keeps a copy for lookups."""

    def __init__(
        self,
        store: AccountStore,
        auth: TokenAuth,
        *,
        server_user: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._auth = auth
        self._server_user = server_user
        self._clock = clock
        self._lock = threading.Lock()  # one change at a time; readers take copies
        self._accounts: dict[str, Account] = {}
        self._tokens: dict[int, ApiToken] = {}
        self._teams: dict[str, Team] = {}

    def start(self) -> None:
        """Load what is stored; create the default team and the server's own user as admin
        if absent (the first admin); install the tokens' credentials."""
        with self._lock:
            now = self._clock()
            teams = {t.name: t for t in self._store.load_teams()}
            if DEFAULT_TEAM not in teams:
                teams[DEFAULT_TEAM] = Team(DEFAULT_TEAM, now)
                self._store.add_team(teams[DEFAULT_TEAM])
            accounts = {a.name: a for a in self._store.load_accounts()}
            if self._server_user not in accounts:
                first = Account(self._server_user, "admin", DEFAULT_TEAM, now)
                self._store.add_account(first)
                accounts[first.name] = first
            self._teams, self._accounts = teams, accounts
            self._tokens = {t.id: t for t in self._store.load_tokens()}
            self._refresh()

    # -- accounts (admins) ----------------------------------------------------------------
    def add_team(self, actor: Principal, name: str) -> Team:
        require_admin(actor, "add a team")
        _check_name("team", name)
        with self._lock:
            if name in self._teams:
                raise Conflict(f"team {name} already exists")
            team = Team(name, self._clock())
            self._store.add_team(team)
            self._teams[name] = team
            return team

    def teams(self, actor: Principal) -> list[Team]:
        require_admin(actor, "list teams")
        with self._lock:
            return sorted(self._teams.values(), key=lambda t: t.name)

    def add_user(
        self,
        actor: Principal,
        name: str,
        *,
        team: str | None = None,
        role: Role = "user",
        unix_user: str | None = None,
    ) -> Account:
        """A new account (team: the default one); `unix_user`: whom its jobs run as."""
        require_admin(actor, "add a user")
        _check_name("user", name)
        if unix_user is not None:
            _check_name("Unix user", unix_user)
        if role not in ("admin", "user"):
            raise InvalidRequest(f"role {role!r}: use admin or user", field="role")
        with self._lock:
            team = team or DEFAULT_TEAM
            if team not in self._teams:
                raise NotFound(f"team {team} does not exist: `gpuyard admin team add {team}`")
            if name in self._accounts:
                raise Conflict(f"user {name} already exists (`gpuyard admin user list`)")
            account = Account(name, role, team, self._clock(), unix_user)
            self._store.add_account(account)
            self._accounts[name] = account
            self._refresh()
            return account

    def users(self, actor: Principal) -> list[Account]:
        require_admin(actor, "list users")
        with self._lock:
            return sorted(self._accounts.values(), key=lambda a: a.name)

    def account(self, name: str) -> Account | None:
        """The account of that name, if any (for the other front doors: the Unix socket)."""
        return self._accounts.get(name)

    def register_local(self, name: str) -> Account:
        """A local Unix user's account, made on their first request on the Unix socket (the
        kernel vouched for the name): role user, the default team. The existing one if two
        first requests race."""
        _check_name("user", name)
        with self._lock:
            account = self._accounts.get(name)
            if account is None:
                account = Account(name, "user", DEFAULT_TEAM, self._clock())
                self._store.add_account(account)
                self._accounts[name] = account
                self._refresh()
            return account

    def disable_user(self, actor: Principal, name: str) -> Account:
        """Refuse every token of `name` from now on; its jobs and history stay."""
        require_admin(actor, "disable a user")
        if name == self._server_user:
            raise Conflict(
                f"{name} is the server's own user, the admin of last resort: it cannot be disabled"
            )
        return self._set_disabled(name, True)

    def enable_user(self, actor: Principal, name: str) -> Account:
        """Accept a disabled user's tokens again (those not revoked or expired meanwhile)."""
        require_admin(actor, "enable a user")
        return self._set_disabled(name, False)

    def _set_disabled(self, name: str, disabled: bool) -> Account:
        with self._lock:
            account = self._accounts.get(name)
            if account is None:
                raise NotFound(f"user {name} not found (`gpuyard admin user list`)")
            changed = replace(account, disabled=disabled)
            self._store.save_account(changed)
            self._accounts[name] = changed
            self._refresh()
            return changed

    # -- tokens (one's own) ---------------------------------------------------------------
    def create_token(
        self, actor: Principal, *, scope: Scope = "submit", expires_in_s: float | None = None
    ) -> tuple[str, ApiToken]:
        """A new token for the actor: (the secret, shown once; its record). 256 random bits;
        only the SHA-256 is kept. A token never allows more than the credential that made it
        (a read credential makes none: the front door refuses it every change), and `admin`
        scope is for admins."""
        if scope not in SCOPES:
            raise InvalidRequest(f"scope {scope!r}: use read, submit or admin", field="scope")
        if not may_make_token(actor, scope):
            raise Forbidden("only an admin's admin-scope token may make admin tokens")
        if expires_in_s is not None and expires_in_s <= 0:
            raise InvalidRequest("a token's lifetime must be positive", field="expires")
        secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
        now = self._clock()
        expires_at = None if expires_in_s is None else now + expires_in_s
        with self._lock:
            self._own_account(actor)
            token = self._store.add_token(actor.user, scope, token_hash(secret), now, expires_at)
            self._tokens[token.id] = token
            self._refresh()
        return secret, token

    def tokens(self, actor: Principal, *, everyone: bool = False) -> list[ApiToken]:
        """The actor's tokens not revoked, by id (expired ones too: `token list` marks them),
        with when each was last used; `everyone`: every user's (admins only, to find the one
        to revoke)."""
        if everyone:
            require_admin(actor, "list everyone's tokens")
        self.flush_last_used()
        with self._lock:
            return [
                t for t in self._tokens.values()
                if (everyone or owns(actor, t.user)) and not t.revoked_at
            ]  # fmt: skip

    def revoke_token(self, actor: Principal, token_id: int) -> ApiToken:
        """Refuse a token from now on: one's own; an admin, anyone's (another user's is 'not
        found' to a user, as their jobs are)."""
        with self._lock:
            token = self._tokens.get(token_id)
            if token is None or not may_change(actor, token.user):
                raise NotFound(f"token {token_id} not found (`gpuyard token list`)")
            if token.revoked_at is not None:
                raise Conflict(f"token {token_id} is already revoked")
            now = self._clock()
            self._store.revoke_token(token_id, now)
            self._tokens[token_id] = replace(token, revoked_at=now)
            self._refresh()
            return self._tokens[token_id]

    def flush_last_used(self) -> None:
        """Write when tokens were last used (kept in memory per request: a write per request
        would cost the API its throughput); at `token list` and at close."""
        used = self._auth.take_used()
        if not used:
            return
        with self._lock:
            self._store.touch_tokens(used)
            for token_id, at in used.items():
                token = self._tokens.get(token_id)
                if token is not None:
                    self._tokens[token_id] = replace(token, last_used_at=at)

    # -- inside ---------------------------------------------------------------------------
    def _own_account(self, actor: Principal) -> Account:
        account = self._accounts.get(actor.user)
        if account is None:
            raise Forbidden(
                f"{actor.user} has no account here: an admin adds it with "
                f"`gpuyard admin user add {actor.user}`"
            )
        if account.disabled:  # e.g. a local user on the Unix socket, which needs no token
            raise Forbidden(f"the account {actor.user} is disabled: ask an admin")
        return account

    def _refresh(self) -> None:
        """Rebuild the credentials map from the copy (under the lock, after a change)."""
        credentials: dict[str, Credential] = {}
        for token in self._tokens.values():
            account = self._accounts.get(token.user)
            if account is None:
                continue
            principal = Principal(account.name, account.role, account.team, token.scope)
            refused = None
            if token.revoked_at is not None:
                refused = "this API token was revoked: make a new one with `gpuyard token create`"
            elif account.disabled:
                refused = f"the account {account.name} is disabled: ask an admin"
            credentials[token.token_hash] = Credential(
                principal, token.expires_at, token.id, refused
            )
        self._auth.replace(credentials)


def _check_name(kind: str, name: str) -> None:
    problem = name_problem(kind, name)
    if problem is not None:
        raise InvalidRequest(problem, field="name")
