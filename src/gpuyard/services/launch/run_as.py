"""As whom a job runs: its owner's Unix user on a server run as root, the server's own user
otherwise.

Worked example, a root server (`allow_root_jobs` off):
- owner `alice` (a Unix user): runs as alice, her groups, umask 077;
- owner `root`, the server's own user (the single token's admin: `make run` as root, the
  tests): runs as root, as every job did before, with the server's original umask;
- owner `carol`, no Unix user of that name: refused at submit, in one line;
- an account other than the server's own that maps to uid 0: refused at submit, unless the
  admin set `allow_root_jobs`.
A server run by a normal user runs every job as that user (the single-user box: nothing to
set up, nothing changes).
"""

from __future__ import annotations

import os
import time
from dataclasses import replace

from gpuyard.domain.errors import Forbidden, InvalidRequest
from gpuyard.services.ports import IdentityResolver, RunAs

_CACHE_S = 5.0  # a submit burst looks a user up once; a new user is seen within seconds


class RunAsPolicy:
    """Turns a job's owner into the `RunAs` of its launch plan, and refuses at submit what
    could never run (no such user, a root job not allowed)."""

    def __init__(
        self,
        resolve: IdentityResolver,
        server_uid: int,
        server_user: str,
        *,
        allow_root_jobs: bool = False,
        server_umask: int = 0o022,
        closed_to_owners: str | None = None,
    ) -> None:
        """`closed_to_owners`: why jobs run as their owners could not reach their folders on
        this server (its state dir under root's home); their submits are refused with it."""
        self._resolve = resolve
        self._closed_to_owners = closed_to_owners
        self._server_uid = server_uid
        self._server_user = server_user
        self._allow_root = allow_root_jobs
        self._server_umask = server_umask
        self._cache: dict[str, tuple[float, RunAs | None]] = {}

    @property
    def server_uid(self) -> int:
        return self._server_uid

    @property
    def switches_users(self) -> bool:
        """Whether jobs may run as users other than the server's (it runs as root)."""
        return self._server_uid == 0

    def check(self, owner: str, *, script: bool = False) -> None:
        """At submit: raise if `owner`'s jobs could not run here (cheap: cached lookups), as
        a `script` (run from its copy in the job's folder) when the server's state dir is
        closed to the users jobs run as: refused now, not a "Permission denied" in the job's
        log that looks like the user's own failure."""
        found = self.for_owner(owner)
        if script and self._closed_to_owners is not None and found.uid != self._server_uid:
            raise InvalidRequest(
                f"this server cannot run a script as {found.user}: {self._closed_to_owners}, "
                "and the job runs the script's copy kept there; an admin restarts the server "
                "with a state dir users can reach (`gpuyard server --state-dir "
                "/var/lib/gpuyard`, a root server's default)"
            )

    def for_owner(self, owner: str) -> RunAs:
        """The identity `owner`'s job takes. Raises InvalidRequest (no such Unix user) or
        Forbidden (it would run as root and the admin does not allow that)."""
        if not self.switches_users or owner == self._server_user:
            return self._own()
        found = self._lookup(owner)
        if found is None:
            raise InvalidRequest(
                f"job owner {owner!r} has no Unix user on this machine, and a root server "
                f"runs each job as its owner: an admin creates the user (useradd {owner})"
            )
        if found.uid == 0 and not self._allow_root:
            raise Forbidden(
                f"job owner {owner!r} would run as root, which this server does not allow: "
                "submit as a normal user (an admin may set GPUYARD_ALLOW_ROOT_JOBS=1)"
            )
        return found

    def _own(self) -> RunAs:
        """The server's own user, with its original umask: a job run as the server's user
        behaves as it always has."""
        found = self._lookup(self._server_user)
        if found is None or found.uid != self._server_uid:
            # Not in the user database (a container's arbitrary uid): as the server is.
            found = RunAs(self._server_user, os.getuid(), os.getgid(), tuple(os.getgroups()), "/")
        return replace(found, umask=self._server_umask)

    def _lookup(self, owner: str) -> RunAs | None:
        now = time.monotonic()
        cached = self._cache.get(owner)
        if cached is not None and now - cached[0] < _CACHE_S:
            return cached[1]
        found = self._resolve(owner)
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[owner] = (now, found)
        return found
