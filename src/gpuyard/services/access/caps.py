"""How many connections each account holds, so one user cannot take the API from everyone.

Every stream (the change feed, a log followed, the dashboard's GPU and event feeds) holds a
connection for as long as it is open: 2,100 of them held by one user once took all 2,048 of
the server's connections, and nobody else could submit, list or cancel. A connection counts
for the account of the first request it authenticates (a peer uid on the Unix socket, a
token, a session: whatever account it names), until it closes; at `per_user` an account's
next connection is refused with one line. Admins are not counted (they must reach a server
to mend it), and the HTTP server (`api/http_server.py`) keeps the last few connections for
admins and `/healthz` alone.

Called on the server's event loop only (the front door, a connection's close): no lock."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class ConnectionCaps:
    """Open connections per account; `per_user` 0: no cap."""

    per_user: int = 256
    _held: dict[str, int] = field(default_factory=dict)

    def hold(self, user: str) -> Callable[[], None] | None:
        """Count one more connection of `user`: what to call when it closes; None (nothing
        counted) when `user` holds `per_user` already."""
        held = self._held.get(user, 0)
        if self.per_user and held >= self.per_user:
            return None
        self._held[user] = held + 1
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            left = self._held.get(user, 1) - 1
            if left > 0:
                self._held[user] = left
            else:
                self._held.pop(user, None)

        return release

    def held(self, user: str) -> int:
        """How many connections `user` holds now."""
        return self._held.get(user, 0)

    def refusal(self, user: str) -> str:
        """The one line an account at its cap gets."""
        return (
            f"{user} holds {self.held(user)} connections to this server, the most one account "
            "may (each open stream holds one: `gpuyard logs -f`, `watch`, a dashboard tab): "
            "close some, then retry"
        )


def reserve_refusal(open_connections: int) -> str:
    """The one line a non-admin gets on a connection from the admins' reserve."""
    return (
        f"this server is at its connection limit ({open_connections} open): the last few are "
        "kept for admins and /healthz; retry shortly (an admin can see who holds them)"
    )
