"""The Ray session folder on a machine with other users (issue 23, item 6): a root server on
`--backend ray` keeps its local cluster's session (sockets, logs, the runtime env) in `ray/`
of its state dir, 0700; another Unix user, on a state dir they may traverse (0711, as
/var/lib/gpuyard is), can neither list it, nor read a log in it, nor reach a socket in it."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.raycluster.conftest import ray_server


def _probe(action: Callable[[], object]) -> str:
    """What a try did: "ok", or the name of the error it raised."""
    try:
        action()
    except OSError as exc:
        return type(exc).__name__
    return "ok"


def _connect(path: str) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(path)


@pytest.mark.skipif(os.geteuid() != 0, reason="another Unix user needs root to be made")
def test_another_user_can_neither_list_nor_read_the_ray_session() -> None:
    from tests.e2e.test_local_socket import as_user
    from tests.e2e.unix_users import unix_users

    place = Path(tempfile.mkdtemp(prefix="gyray-"))
    place.chmod(0o755)  # every user may reach the state dir itself
    try:
        with unix_users() as users, ray_server(place / "state"):
            root = place / "state" / "ray"
            info = root.stat()
            assert stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == 0
            (session,) = (root / "t").glob("session_2*")
            logs = sorted(p for p in (session / "logs").iterdir() if p.is_file())
            sockets = sorted(str(p) for p in (session / "sockets").iterdir())
            assert logs and sockets  # there is something to read and to reach
            paths = {"root": str(root), "log": str(logs[0]), "socket": sockets[0]}

            def tries() -> dict[str, str]:
                return {
                    "state dir": _probe(lambda: os.stat(place / "state")),
                    "list": _probe(lambda: os.listdir(paths["root"])),
                    "list inside": _probe(lambda: os.listdir(str(session))),
                    "read a log": _probe(lambda: Path(paths["log"]).read_bytes()),
                    "reach a socket": _probe(lambda: _connect(paths["socket"])),
                }

            seen = as_user(users.bob, tries)
            assert seen["state dir"] == "ok"  # the state dir is reachable: the folder holds
            assert {k: v for k, v in seen.items() if k != "state dir"} == {
                "list": "PermissionError",
                "list inside": "PermissionError",
                "read a log": "PermissionError",
                "reach a socket": "PermissionError",
            }, seen
    finally:
        shutil.rmtree(place, ignore_errors=True)
