"""One user cannot lock the others out, over real HTTP (uvicorn with the server's own protocol on
a loopback port): every local TCP client is 127.0.0.1, so the failed-authentication throttle
counts per presented credential, and connections (streams among them) count per account, with
a reserve that only admins and `/healthz` may use."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from gpuyard.api.http_server import GuardedHttpProtocol, protocol_for
from gpuyard.bootstrap import build_app
from gpuyard.domain.principal import Principal
from gpuyard.services.server import ServerFacade
from gpuyard.settings import Settings
from tests.api.served import served
from tests.e2e.unix_users import unix_users


@dataclass
class Box:
    server: ServerFacade
    url: str
    admin: str
    alice: str  # tokens of two real Unix users' accounts
    bob: str
    bob_name: str


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Box]:
    port = _free_port()
    settings = Settings(
        state_dir=tmp_path / "state", gpus="1", cpus=2, kill_grace_s=1, port=port,
        max_connections=48, reserved_connections=8, max_connections_per_user=6,
    )  # fmt: skip
    server, app = build_app(settings)
    with (
        unix_users() as users,
        served(server, app, "127.0.0.1", port, protocol=server_protocol(settings)),
    ):
        assert server.accounts is not None
        tokens = []
        for name in (users.alice, users.bob):
            server.accounts.add_user(server.auth.principal, name)
            token, _ = server.accounts.create_token(Principal(name, "user", None, "submit"))
            tokens.append(token)
        admin = settings.token_path.read_text().strip()
        yield Box(server, settings.url, admin, *tokens, users.bob)


def server_protocol(settings: Settings) -> type[GuardedHttpProtocol]:
    """The HTTP protocol `gpuyard server` serves with, from these settings."""
    return protocol_for(
        settings.header_timeout_s, settings.max_connections, settings.reserved_connections,
        settings.max_connections_per_user,
    )  # fmt: skip


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_wrong_tokens_from_one_client_never_lock_out_anothers_valid_token(box: Box) -> None:
    wrong = "gpy_" + "x" * 43
    throttled = threading.Event()

    def guess() -> None:
        with httpx.Client(base_url=box.url, timeout=30) as bob:
            for _ in range(200):
                status = bob.get("/api/v1/jobs", headers=_bearer(wrong)).status_code
                assert status in (401, 429)
                if status == 429:
                    throttled.set()
                    return

    guessers = [threading.Thread(target=guess) for _ in range(3)]
    for each in guessers:
        each.start()
    for each in guessers:
        each.join()
    assert throttled.is_set()  # the wrong token itself is slowed
    with httpx.Client(base_url=box.url, timeout=30) as alice:
        statuses = [alice.get("/api/v1/jobs", headers=_bearer(box.alice)).status_code
                    for _ in range(20)]  # fmt: skip
        assert statuses == [200] * 20
        # Her own typo is her own bucket: it is told what is wrong, not to wait for bob.
        typo = alice.get("/api/v1/jobs", headers=_bearer(box.alice + "x"))
        assert typo.status_code == 401
    with httpx.Client(base_url=box.url, timeout=30) as bob:
        # Still slowed. The bucket refills 2 a second while alice was answered (a loaded
        # machine: a try or two pass again), but a 429 comes before a fresh key's 20th failure.
        again = None
        for _ in range(19):
            again = bob.get("/api/v1/jobs", headers=_bearer(wrong))
            if again.status_code != 401:
                break
        assert again is not None and again.status_code == 429
        assert int(again.headers["Retry-After"]) >= 1
        assert "wrong API token" in again.json()["error"]["message"]
        assert bob.get("/api/v1/jobs", headers=_bearer(box.bob)).status_code == 200


def test_a_login_form_full_of_wrong_tokens_locks_out_no_other_login(box: Box) -> None:
    with httpx.Client(base_url=box.url, timeout=30) as bob:
        statuses = [bob.post("/ui/login", json={"token": "nope"}).status_code
                    for _ in range(40)]  # fmt: skip
        assert statuses[0] == 401 and statuses[-1] == 429
    with httpx.Client(base_url=box.url, timeout=30) as alice:
        assert alice.post("/ui/login", json={"token": box.alice}).status_code == 200


class Feed:
    """The change feed held open on a connection of its own (a raw socket: no client pool)."""

    def __init__(self, url: str, token: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        request = (
            f"GET /api/v1/jobs/changes HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Authorization: Bearer {token}\r\n\r\n"
        )
        self.sock.sendall(request.encode())
        self.status = int(self.sock.recv(4096).split(b" ", 2)[1])

    def close(self) -> None:
        self.sock.close()


def test_one_users_streams_leave_the_others_able_to_submit_list_and_cancel(box: Box) -> None:
    held = [Feed(box.url, box.bob) for _ in range(6)]  # bob's cap: 6
    try:
        assert [feed.status for feed in held] == [200] * 6
        refused = httpx.get(f"{box.url}/api/v1/jobs", headers=_bearer(box.bob), timeout=30)
        assert refused.status_code == 429
        assert f"{box.bob_name} holds 6 connections" in refused.json()["error"]["message"]
        with httpx.Client(base_url=box.url, headers=_bearer(box.alice), timeout=30) as alice:
            made = alice.post("/api/v1/jobs", json={"command": ["sleep", "30"], "workdir": "/"})
            assert made.status_code == 201, made.text
            assert [j["id"] for j in alice.get("/api/v1/jobs").json()] == [made.json()["id"]]
            cancelled = alice.post(f"/api/v1/jobs/{made.json()['id']}/cancel")
            assert cancelled.status_code == 200, cancelled.text
    finally:
        for feed in held:
            feed.close()
    # Closed streams give their connections back.
    wait_for(lambda: httpx.get(f"{box.url}/api/v1/jobs", headers=_bearer(box.bob),
                               timeout=30).status_code == 200)  # fmt: skip


def test_the_last_connections_are_the_admins_and_healthzs(box: Box) -> None:
    users = [Principal(f"gyuser{i}", "user", None, "submit") for i in range(8)]
    feeds: list[Feed] = []
    try:
        assert box.server.accounts is not None
        for user in users:  # 8 users x 5 streams: 40 of 48, the rest the reserve
            box.server.accounts.add_user(box.server.auth.principal, user.user)
            token, _ = box.server.accounts.create_token(user)
            feeds += [Feed(box.url, token) for _ in range(5)]
        assert [feed.status for feed in feeds] == [200] * 40
        late = httpx.get(f"{box.url}/api/v1/jobs", headers=_bearer(box.alice), timeout=30)
        assert late.status_code == 503
        assert "kept for admins and /healthz" in late.json()["error"]["message"]
        assert httpx.get(f"{box.url}/healthz", timeout=30).status_code == 200
        admin = httpx.get(f"{box.url}/api/v1/jobs", headers=_bearer(box.admin), timeout=30)
        assert admin.status_code == 200
    finally:
        for feed in feeds:
            feed.close()


def wait_for(condition: Callable[[], bool], within_s: float = 30.0) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, "the condition did not hold in time"
        time.sleep(0.05)


def test_a_reserve_set_larger_than_the_cap_still_leaves_half_for_everyone() -> None:
    protocol = protocol_for(10.0, max_connections=32, reserved_connections=64)
    assert protocol.reserved_connections == 16
