"""The front door's Unix socket callers, in-process: the HTTP server puts the kernel's peer
credentials in the scope (`PEER`); here a wrapper does, as uvicorn's protocol would. The
caller is the uid's Unix user (no token), any Host is accepted (no DNS rebinding over a Unix
socket) while TCP keeps its Host check, an Authorization header changes nothing, and a uid
without a name or an account (registration off) is refused in one line."""

from __future__ import annotations

import os
import pwd
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from starlette.types import ASGIApp, Receive, Scope, Send

from gpuyard.api.front_door import PEER
from gpuyard.bootstrap import build_app
from gpuyard.services.server import ServerFacade
from gpuyard.settings import Settings

_BASE = "http://127.0.0.1:8765"
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="only a root server takes socket callers")


class AsPeer:
    """The app as the Unix socket serves it: every request from `uid` (None: over TCP)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.uid: int | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.uid is not None:
            scope = {**scope, "extensions": {PEER: {"pid": 1, "uid": self.uid, "gid": 0}}}
        await self.app(scope, receive, send)


def _rig(tmp_path: Path, **settings: object) -> Iterator[tuple[ServerFacade, AsPeer, TestClient]]:
    made = Settings(state_dir=tmp_path / "state", gpus="1", cpus=4, **settings)  # type: ignore[arg-type]
    server, app = build_app(made)
    peer = AsPeer(app)
    with TestClient(peer, base_url=_BASE) as client:
        yield server, peer, client


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[tuple[ServerFacade, AsPeer, TestClient]]:
    yield from _rig(tmp_path)


@root_only
def test_a_socket_caller_is_its_unix_user_whatever_host_or_token_it_sends(rig) -> None:  # type: ignore[no-untyped-def]
    server, peer, client = rig
    nobody = pwd.getpwnam("nobody").pw_uid
    peer.uid = nobody
    answer = client.get("/api/v1/whoami", headers={"Host": "evil.example",
                                                   "Authorization": "Bearer nonsense"})  # fmt: skip
    assert answer.status_code == 200, answer.text
    assert answer.json()["user"] == "nobody" and answer.json()["role"] == "user"
    account = server.accounts.account("nobody")
    assert account is not None and account.role == "user" and account.team == "default"
    peer.uid = None  # the same Host over TCP is refused (DNS rebinding)
    assert client.get("/healthz", headers={"Host": "evil.example"}).status_code == 421
    peer.uid = 0
    me = client.get("/api/v1/whoami").json()
    assert me["user"] == server.auth.principal.user and me["role"] == "admin"


@root_only
def test_a_uid_without_a_name_is_refused_in_one_line(rig) -> None:  # type: ignore[no-untyped-def]
    _, peer, client = rig
    unused = next(uid for uid in range(54_321, 60_000) if not _has_name(uid))
    peer.uid = unused
    answer = client.get("/api/v1/whoami")
    assert answer.status_code == 403
    assert f"uid {unused} has no user name" in answer.json()["error"]["message"]


@root_only
def test_without_registration_an_unknown_local_user_is_told_the_fix(tmp_path: Path) -> None:
    for server, peer, client in _rig(tmp_path, register_local_users=False):
        peer.uid = pwd.getpwnam("daemon").pw_uid
        answer = client.post("/api/v1/jobs", json={"command": ["true"], "workdir": "/"})
        assert answer.status_code == 403
        assert "gpuyard admin user add daemon" in answer.json()["error"]["message"]
        assert server.accounts is not None and server.accounts.account("daemon") is None


def test_a_server_without_a_socket_takes_no_socket_callers(tmp_path: Path) -> None:
    for server, peer, client in _rig(tmp_path, socket="off"):
        assert server.peers is None
        peer.uid = os.geteuid()
        answer = client.get("/api/v1/whoami")
        assert answer.status_code == 401 and "no callers on a Unix socket" in answer.text


def _has_name(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


@root_only
def test_a_refused_uid_is_slowed_alone_and_never_anyone_elses_login(tmp_path: Path) -> None:
    rig = _rig(tmp_path)
    server, peer, client = next(rig)
    server.access.throttle.burst = 5
    unused = next(uid for uid in range(54_321, 60_000) if not _has_name(uid))
    peer.uid = unused
    statuses = [client.get("/api/v1/whoami").status_code for _ in range(8)]
    assert statuses[:5] == [403] * 5 and statuses[5:] == [429] * 3
    slowed = client.get("/api/v1/whoami")
    assert int(slowed.headers["Retry-After"]) >= 1
    assert f"refused uid {unused}" in slowed.json()["error"]["message"]
    peer.uid = pwd.getpwnam("nobody").pw_uid  # another local user, the same machine
    assert client.get("/api/v1/whoami").json()["user"] == "nobody"
    peer.uid = None  # and over TCP (127.0.0.1, as every local client)
    token = (tmp_path / "state" / "token").read_text().strip()
    assert client.get("/api/v1/whoami", headers={"Authorization": f"Bearer {token}"}).is_success
    rig.close()
