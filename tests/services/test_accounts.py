"""AccountService over the memory store with a hand-driven clock: expiry to the second, the
credentials map refreshed by every change (revoke, disable, enable), last-used times kept in
memory until flushed, what only admins may do, and names checked."""

from __future__ import annotations

import pytest

from gpuyard.adapters.store.memory import MemoryJobStore
from gpuyard.domain.errors import Conflict, Forbidden, InvalidRequest, NotFound, Unauthorized
from gpuyard.domain.principal import Principal
from gpuyard.services.access.accounts import AccountService
from gpuyard.services.access.tokens import TokenAuth

ROOT = Principal("root", "admin", "default")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store() -> MemoryJobStore:
    return MemoryJobStore()


@pytest.fixture
def auth(clock: Clock) -> TokenAuth:
    return TokenAuth("state-dir-token", ROOT, clock=clock)


@pytest.fixture
def accounts(store: MemoryJobStore, auth: TokenAuth, clock: Clock) -> AccountService:
    service = AccountService(store, auth, server_user="root", clock=clock)
    service.start()
    return service


def bearer(secret: str) -> bytes:
    return f"Bearer {secret}".encode()


def test_start_makes_the_server_user_the_first_admin_once(
    store: MemoryJobStore, auth: TokenAuth, accounts: AccountService, clock: Clock
) -> None:
    assert [(a.name, a.role, a.team) for a in accounts.users(ROOT)] == [
        ("root", "admin", "default")
    ]
    again = AccountService(store, auth, server_user="root", clock=clock)
    again.start()  # a restart: nothing added twice
    assert len(store.load_accounts()) == 1 and len(store.load_teams()) == 1
    assert auth.authenticate(bearer("state-dir-token")) == ROOT


def test_a_token_expires_to_the_second(
    accounts: AccountService, auth: TokenAuth, clock: Clock
) -> None:
    secret, token = accounts.create_token(ROOT, scope="read", expires_in_s=60)
    assert token.expires_at == 1_060.0
    assert auth.authenticate(bearer(secret)).scope == "read"
    clock.now = 1_059.9
    auth.authenticate(bearer(secret))
    clock.now = 1_060.0
    with pytest.raises(Unauthorized, match="expired"):
        auth.authenticate(bearer(secret))


def test_last_use_is_kept_in_memory_until_flushed(
    store: MemoryJobStore, accounts: AccountService, auth: TokenAuth, clock: Clock
) -> None:
    secret, _ = accounts.create_token(ROOT)
    clock.now = 1_234.0
    auth.authenticate(bearer(secret))
    assert store.load_tokens()[0].last_used_at is None  # no write per request
    assert accounts.tokens(ROOT)[0].last_used_at == 1_234.0  # listing flushes
    assert store.load_tokens()[0].last_used_at == 1_234.0


def test_revoke_disable_and_enable_reach_the_map_at_once(
    accounts: AccountService, auth: TokenAuth
) -> None:
    accounts.add_user(ROOT, "bob")
    bob = Principal("bob", "user", "default", "submit")
    secret, token = accounts.create_token(bob)
    assert auth.authenticate(bearer(secret)) == bob
    accounts.disable_user(ROOT, "bob")
    with pytest.raises(Unauthorized, match="disabled"):
        auth.authenticate(bearer(secret))
    with pytest.raises(Forbidden, match="disabled"):  # nor makes new ones another way
        accounts.create_token(Principal("bob", "user", "default", "admin"))
    accounts.enable_user(ROOT, "bob")
    assert auth.authenticate(bearer(secret)) == bob
    accounts.revoke_token(bob, token.id)
    with pytest.raises(Unauthorized, match="revoked"):
        auth.authenticate(bearer(secret))
    with pytest.raises(Conflict):
        accounts.revoke_token(bob, token.id)
    assert accounts.tokens(bob) == []


def test_scopes_never_grow_and_only_admins_administer(accounts: AccountService) -> None:
    accounts.add_user(ROOT, "bob")
    bob = Principal("bob", "user", "default", "submit")
    with pytest.raises(Forbidden):
        accounts.create_token(bob, scope="admin")
    with pytest.raises(Forbidden):
        accounts.create_token(Principal("root", "admin", "default", "submit"), scope="admin")
    with pytest.raises(Forbidden):
        accounts.create_token(Principal("eve", "user", None, "admin"))  # no account
    for act in (
        lambda: accounts.add_user(bob, "eve"),
        lambda: accounts.add_team(bob, "x"),
        lambda: accounts.disable_user(bob, "root"),
        lambda: accounts.users(bob),
    ):
        with pytest.raises(Forbidden):
            act()
    _, roots = accounts.create_token(ROOT)
    with pytest.raises(NotFound):  # another user's token is not found to a user
        accounts.revoke_token(bob, roots.id)


def test_names_roles_and_teams_are_checked(accounts: AccountService) -> None:
    for bad in ("", "a b", "-x", "x" * 65, "tab\t", "ünï"):
        with pytest.raises(InvalidRequest):
            accounts.add_user(ROOT, bad)
    with pytest.raises(NotFound, match="team add vision"):
        accounts.add_user(ROOT, "carol", team="vision")
    accounts.add_team(ROOT, "vision")
    assert accounts.add_user(ROOT, "carol", team="vision", role="admin").role == "admin"
    with pytest.raises(Conflict):
        accounts.add_user(ROOT, "carol")
    with pytest.raises(Conflict, match="own user"):
        accounts.disable_user(ROOT, "root")
    with pytest.raises(InvalidRequest):
        accounts.create_token(ROOT, expires_in_s=0)
