"""PeerAuth (the Unix socket's callers) with a hand-made name table and a hand-driven clock:
the server's uid is its admin; a name is registered once and kept a minute; a name no account
may have, a uid without a name, a disabled account and registration turned off are refused
with the reason, never an error of the server's."""

from __future__ import annotations

import pytest

from gpuyard.adapters.store.memory import MemoryJobStore
from gpuyard.domain.errors import Forbidden, Unauthorized
from gpuyard.domain.principal import Principal
from gpuyard.services.access.accounts import AccountService
from gpuyard.services.access.peers import NAME_TTL_S, PeerAuth
from gpuyard.services.access.tokens import TokenAuth

ADMIN = Principal("root", "admin", "default", "admin")


class Names:
    """uid -> name, counting lookups (the system's user database, slow on LDAP)."""

    def __init__(self, names: dict[int, str]) -> None:
        self.names, self.calls = names, 0

    def __call__(self, uid: int) -> str | None:
        self.calls += 1
        return self.names.get(uid)


def _peers(names: Names, *, register: bool = True) -> tuple[PeerAuth, AccountService, list[float]]:
    now = [1000.0]
    accounts = AccountService(MemoryJobStore(), TokenAuth("t", ADMIN), server_user="root")
    accounts.start()
    peers = PeerAuth(accounts, ADMIN, 0, names, register=register, clock=lambda: now[0])
    return peers, accounts, now


def test_registered_once_then_answered_from_memory_for_a_minute() -> None:
    names = Names({1001: "alice", 0: "root"})
    peers, accounts, now = _peers(names)
    assert peers.lookup(0) == ADMIN and names.calls == 0
    assert peers.lookup(1001) is None  # not known yet: the slow path
    alice = peers.register(1001)
    assert (alice.user, alice.role, alice.team, alice.is_admin) == (
        "alice",
        "user",
        "default",
        False,
    )
    assert accounts.account("alice") is not None
    assert peers.lookup(1001) == alice and names.calls == 1
    now[0] += NAME_TTL_S + 1
    assert peers.lookup(1001) is None and peers.register(1001) == alice and names.calls == 2


@pytest.mark.parametrize(
    ("names", "uid", "refusal", "said"),
    [
        ({}, 4242, Forbidden, "uid 4242 has no user name"),
        ({1002: "bad name"}, 1002, Forbidden, "cannot have an account here"),
    ],
)
def test_names_that_cannot_be_accounts_are_refused(names, uid, refusal, said) -> None:  # type: ignore[no-untyped-def]
    peers, _, _ = _peers(Names(names))
    with pytest.raises(refusal, match=said):
        peers.register(uid)


def test_registration_off_and_disabled_accounts() -> None:
    peers, accounts, _ = _peers(Names({1001: "alice"}), register=False)
    with pytest.raises(Forbidden, match="gpuyard admin user add alice"):
        peers.register(1001)
    assert accounts.account("alice") is None
    accounts.add_user(ADMIN, "alice")
    assert peers.register(1001).user == "alice"
    accounts.disable_user(ADMIN, "alice")
    with pytest.raises(Unauthorized, match="disabled"):
        peers.lookup(1001)
