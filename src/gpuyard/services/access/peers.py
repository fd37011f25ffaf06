"""Who a local caller on the Unix socket is: the kernel says (SO_PEERCRED: the peer's uid),
so a local user needs no token and no login, and cannot claim to be anyone else.

The uid's Unix user names the account (an account of that name; the server's own uid is
the server's admin). A local user without one is registered on first use (role user, the
default team) unless the admin turned that off (`register_local_users`): then they get a
one-line 403 naming the command an admin runs. A disabled account is refused, as its tokens
are. Names are looked up once per uid and kept a minute (NSS may be LDAP: slow)."""

from __future__ import annotations

import time
from collections.abc import Callable

from gpuyard.domain.accounts import name_problem
from gpuyard.domain.errors import Forbidden, Unauthorized
from gpuyard.domain.principal import Principal
from gpuyard.services.access.accounts import AccountService

# How long a uid's Unix name is trusted before it is looked up again (a user renamed or
# removed, a uid given to someone else).
NAME_TTL_S = 60.0


class PeerAuth:
    """uid -> Principal for requests on the Unix socket. `lookup` answers from memory (the
    event loop calls it); `register` may write the store (called off the loop)."""

    def __init__(
        self,
        accounts: AccountService,
        admin: Principal,
        admin_uid: int,
        unix_name: Callable[[int], str | None],
        *,
        register: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._accounts = accounts
        self._admin = admin
        self._admin_uid = admin_uid
        self._unix_name = unix_name
        self._register = register
        self._clock = clock
        self._names: dict[int, tuple[str | None, float]] = {}

    def lookup(self, uid: int) -> Principal | None:
        """The principal of a peer whose name is known and who has an account; None: ask
        `register` (a name to look up, or an account to make). Refusals raise."""
        if uid == self._admin_uid:
            return self._admin
        known = self._names.get(uid)
        if known is None or self._clock() - known[1] > NAME_TTL_S:
            return None
        return self._principal(uid, known[0], create=False)

    def register(self, uid: int) -> Principal:
        """`lookup`'s slow path: the uid's name from the system, the account made on first
        use when allowed. Forbidden/Unauthorized with the reason otherwise."""
        principal = self.lookup(uid)
        if principal is not None:
            return principal
        name = self._unix_name(uid)
        self._names[uid] = (name, self._clock())
        found = self._principal(uid, name, create=True)
        assert found is not None
        return found

    def _principal(self, uid: int, name: str | None, *, create: bool) -> Principal | None:
        if name is None:
            raise Forbidden(f"uid {uid} has no user name on this machine: ask an admin")
        problem = name_problem("user", name)
        if problem is not None:  # a Unix name no account may have (tables, paths, filters)
            raise Forbidden(f"the Unix user {name!r} cannot have an account here: {problem}")
        account = self._accounts.account(name)
        if account is None:
            if not self._register:
                raise Forbidden(
                    f"{name} has no account on this server: an admin adds it with "
                    f"`gpuyard admin user add {name}`"
                )
            if not create:
                return None
            account = self._accounts.register_local(name)
        if account.disabled:
            raise Unauthorized(f"the account {account.name} is disabled: ask an admin")
        # The socket is as strong as the login itself: the account's whole role.
        return Principal(account.name, account.role, account.team, "admin")
