"""The AccountStore port, run against every store (`stores.STORE_BACKENDS`): teams, accounts
and tokens survive a reopen, names are unique, a token's hash is unique and only the hash is
kept, a revoked token stays listed."""

from __future__ import annotations

from typing import cast

import pytest

from gpuyard.domain.accounts import Account, ApiToken, Team
from gpuyard.domain.errors import Conflict, NotFound
from gpuyard.services.ports import JobStore
from gpuyard.services.stores import AccountStore
from tests.contract.stores import Backend

HASH_A, HASH_B = "a" * 64, "b" * 64


def accounts(store: JobStore) -> AccountStore:
    return cast(AccountStore, store)


def _with_alice(store: AccountStore) -> Account:
    store.add_team(Team("default", 1.0))
    store.add_team(Team("vision", 2.0))
    alice = Account("alice", "user", "vision", 3.0, unix_user="alice2")
    store.add_account(alice)
    return alice


def test_a_new_database_has_no_accounts(store: JobStore) -> None:
    assert accounts(store).load_teams() == []
    assert accounts(store).load_accounts() == []
    assert accounts(store).load_tokens() == []


def test_teams_accounts_and_tokens_survive_a_reopen(backend: Backend) -> None:
    first = accounts(backend.open())
    alice = _with_alice(first)
    root = Account("root", "admin", "default", 4.0)
    first.add_account(root)
    made = first.add_token("alice", "read", HASH_A, 5.0, 100.0)
    assert made == ApiToken(made.id, "alice", "read", HASH_A, 5.0, 100.0)
    backend.close_all()
    again = accounts(backend.open())
    assert again.load_teams() == [Team("default", 1.0), Team("vision", 2.0)]
    assert again.load_accounts() == [alice, root]  # by name
    assert again.load_tokens() == [made]


def test_names_are_unique_and_a_user_needs_an_existing_team(store: JobStore) -> None:
    store_ = accounts(store)
    _with_alice(store_)
    with pytest.raises(Conflict):
        store_.add_team(Team("vision", 9.0))
    with pytest.raises(Conflict):
        store_.add_account(Account("alice", "admin", "default", 9.0))
    with pytest.raises(Conflict):
        store_.add_account(Account("bob", "user", "nosuchteam", 9.0))
    assert [a.name for a in store_.load_accounts()] == ["alice"]


def test_save_account_changes_its_fields_not_its_creation(store: JobStore) -> None:
    store_ = accounts(store)
    alice = _with_alice(store_)
    changed = Account("alice", "admin", "default", alice.created_at, None, disabled=True)
    store_.save_account(changed)
    assert store_.load_accounts() == [changed]
    with pytest.raises(NotFound):
        store_.save_account(Account("bob", "user", "default", 1.0))


def test_token_ids_grow_hashes_are_unique_and_need_a_user(store: JobStore) -> None:
    store_ = accounts(store)
    _with_alice(store_)
    one = store_.add_token("alice", "submit", HASH_A, 5.0, None)
    two = store_.add_token("alice", "admin", HASH_B, 6.0, None)
    assert two.id > one.id
    with pytest.raises(Conflict):
        store_.add_token("alice", "read", HASH_A, 7.0, None)
    with pytest.raises(Conflict):
        store_.add_token("nobody", "read", "c" * 64, 7.0, None)
    assert [t.id for t in store_.load_tokens()] == [one.id, two.id]


def test_revoked_tokens_stay_listed_and_last_use_is_recorded(store: JobStore) -> None:
    store_ = accounts(store)
    _with_alice(store_)
    one = store_.add_token("alice", "submit", HASH_A, 5.0, None)
    two = store_.add_token("alice", "read", HASH_B, 6.0, 60.0)
    store_.revoke_token(one.id, 10.0)
    store_.touch_tokens({two.id: 12.5, 999: 1.0})  # an unknown id is ignored
    assert store_.load_tokens() == [
        ApiToken(one.id, "alice", "submit", HASH_A, 5.0, None, None, 10.0),
        ApiToken(two.id, "alice", "read", HASH_B, 6.0, 60.0, 12.5, None),
    ]
    with pytest.raises(NotFound):
        store_.revoke_token(999, 1.0)
