"""Tokens and accounts through the API in-process, with real second users' tokens: 401 for
unknown, revoked, expired tokens and disabled users; 403 for a scope or role that does not
allow the call; another user's job is 404; no secret is ever stored.

The second users are `nobody` and `daemon`, Unix users every Linux has: a root server runs a
job as its owner's Unix user."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpuyard.bootstrap import build_app
from gpuyard.domain.principal import Principal, Scope
from gpuyard.services.access.accounts import AccountService
from gpuyard.services.server import ServerFacade
from gpuyard.settings import Settings
from tests.api.served import cancel_unfinished

_BASE = "http://127.0.0.1:8765"  # the Host the server answers to (DNS rebinding check)


class Rig:
    """The app, its server, and a way to act as anyone."""

    def __init__(self, server: ServerFacade, client: TestClient, workdir: str) -> None:
        self.server, self.client, self.workdir = server, client, workdir
        assert server.accounts is not None
        self.accounts: AccountService = server.accounts
        self.admin_header = dict(client.headers)

    def token_of(self, user: str, scope: Scope = "submit", expires: str = "90d") -> str:
        """A token made by `user` through the API (with their full-scope credential)."""
        account = self.accounts.account(user)
        assert account is not None
        actor = Principal(user, account.role, account.team, "admin")
        full: Scope = "admin" if account.role == "admin" else "submit"
        secret, _ = self.accounts.create_token(actor, scope=full)
        made = self.as_(secret).post("/api/v1/tokens", json={"scope": scope, "expires": expires})
        assert made.status_code == 201, made.text
        return str(made.json()["token"])

    def as_(self, token: str) -> TestClient:
        self.client.headers["Authorization"] = f"Bearer {token}"
        return self.client

    def admin(self) -> TestClient:
        self.client.headers.update(self.admin_header)
        return self.client

    def submit(self, client: TestClient) -> Any:
        body = {"command": ["sleep", "30"], "workdir": self.workdir}
        return client.post("/api/v1/jobs", json=body)


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    settings = Settings(state_dir=tmp_path / "state", gpus="2", cpus=4, kill_grace_s=1)
    server, app = build_app(settings)
    with TestClient(app, base_url=_BASE) as client:
        client.headers["Authorization"] = f"Bearer {settings.token_path.read_text().strip()}"
        rig = Rig(server, client, "/tmp")  # any user may enter it (submits are checked as theirs)
        yield rig
        cancel_unfinished(server)


def _add_user(rig: Rig, name: str, **fields: object) -> Any:
    return rig.admin().post("/api/v1/admin/users", json={"name": name, **fields})


def test_the_server_user_is_the_first_admin_with_no_set_up(rig: Rig) -> None:
    me = rig.admin().get("/api/v1/whoami").json()
    assert me["role"] == "admin" and me["scope"] == "admin" and me["team"] == "default"
    users = rig.admin().get("/api/v1/admin/users").json()
    assert [(u["name"], u["role"], u["team"]) for u in users] == [(me["user"], "admin", "default")]


def test_a_token_is_shown_once_works_and_is_listed_without_its_secret(rig: Rig) -> None:
    made = rig.admin().post("/api/v1/tokens", json={"scope": "read", "expires": "7d"})
    assert made.status_code == 201
    secret = made.json()["token"]
    assert secret.startswith("gpy_") and len(secret) >= 4 + 43  # 256 bits, base64url
    assert made.json()["expires_at"] == pytest.approx(time.time() + 7 * 86400, abs=60)
    assert rig.as_(secret).get("/api/v1/whoami").json()["scope"] == "read"
    listed = rig.admin().get("/api/v1/tokens").json()
    assert [t["id"] for t in listed] == [made.json()["id"]]
    assert "token" not in listed[0] and secret not in str(listed)
    assert listed[0]["last_used_at"] is not None  # the whoami above


def test_no_secret_reaches_the_database(rig: Rig, tmp_path: Path) -> None:
    secret = rig.token_of(rig.admin().get("/api/v1/whoami").json()["user"])
    state = tmp_path / "state"
    stored = b"".join(p.read_bytes() for p in state.glob("gpuyard.db*") if p.is_file())
    assert secret.encode() not in stored
    import hashlib

    assert hashlib.sha256(secret.encode()).hexdigest().encode() in stored


def test_unknown_revoked_and_expired_tokens_are_401(rig: Rig) -> None:
    me = rig.admin().get("/api/v1/whoami").json()["user"]
    assert rig.as_("gpy_nonsense").get("/api/v1/jobs").status_code == 401
    secret = rig.token_of(me)
    token_id = rig.as_(secret).get("/api/v1/tokens").json()[-1]["id"]
    assert rig.as_(secret).get("/api/v1/jobs").status_code == 200
    assert rig.as_(secret).delete(f"/api/v1/tokens/{token_id}").status_code == 200
    refused = rig.as_(secret).get("/api/v1/jobs")
    assert refused.status_code == 401 and "revoked" in refused.json()["error"]["message"]
    short = rig.token_of(me, expires="1s")
    assert rig.as_(short).get("/api/v1/jobs").status_code == 200
    time.sleep(1.1)
    expired = rig.as_(short).get("/api/v1/jobs")
    assert expired.status_code == 401 and "expired" in expired.json()["error"]["message"]


def test_read_scope_only_reads(rig: Rig) -> None:
    me = rig.admin().get("/api/v1/whoami").json()["user"]
    reader = rig.token_of(me, scope="read")
    assert rig.as_(reader).get("/api/v1/jobs").status_code == 200
    writes = [("POST", "/api/v1/jobs"), ("POST", "/api/v1/tokens"),
              ("DELETE", "/api/v1/tokens/1"), ("POST", "/api/v1/gpus/0/drain")]  # fmt: skip
    for method, path in writes:
        refused = rig.as_(reader).request(method, path, json={})
        assert refused.status_code == 403, (method, path)
        assert "scope is read" in refused.json()["error"]["message"]


def test_an_admins_submit_token_acts_as_a_plain_user(rig: Rig) -> None:
    me = rig.admin().get("/api/v1/whoami").json()["user"]
    _add_user(rig, "nobody")
    bobs_job = rig.submit(rig.as_(rig.token_of("nobody"))).json()["id"]
    submitter = rig.token_of(me, scope="submit")
    mine = rig.submit(rig.as_(submitter))
    assert mine.status_code == 201 and mine.json()["owner"] == me
    assert rig.as_(submitter).post(f"/api/v1/jobs/{mine.json()['id']}/cancel").status_code == 200
    assert rig.as_(submitter).get(f"/api/v1/jobs/{bobs_job}").status_code == 404
    assert rig.as_(submitter).post(f"/api/v1/jobs/{bobs_job}/cancel").status_code == 404
    assert rig.as_(submitter).post("/api/v1/gpus/0/drain", json={}).status_code == 403
    assert rig.as_(submitter).get("/api/v1/admin/users").status_code == 403
    made = rig.as_(submitter).post("/api/v1/tokens", json={"scope": "admin"})
    assert made.status_code == 403  # a token never makes a stronger one
    assert rig.admin().get(f"/api/v1/jobs/{bobs_job}").status_code == 200  # admin scope: all


def test_another_users_job_is_not_found_to_a_second_user(rig: Rig) -> None:
    _add_user(rig, "daemon")
    _add_user(rig, "nobody")
    alice, bob = rig.token_of("daemon"), rig.token_of("nobody")
    job = rig.submit(rig.as_(alice)).json()["id"]
    for method, path in [("GET", f"/api/v1/jobs/{job}"), ("GET", f"/api/v1/jobs/{job}/log"),
                         ("POST", f"/api/v1/jobs/{job}/cancel")]:  # fmt: skip
        assert rig.as_(bob).request(method, path).status_code == 404, (method, path)
    assert [j["id"] for j in rig.as_(bob).get("/api/v1/jobs").json()] == [job]  # the queue
    assert rig.as_(alice).get(f"/api/v1/jobs/{job}").status_code == 200
    alices_token = rig.as_(alice).get("/api/v1/tokens").json()[-1]["id"]
    assert rig.as_(bob).delete(f"/api/v1/tokens/{alices_token}").status_code == 404
    assert [t["user"] for t in rig.as_(bob).get("/api/v1/tokens").json()] == ["nobody", "nobody"]


def test_users_cannot_administer_nor_hold_admin_tokens(rig: Rig) -> None:
    _add_user(rig, "nobody")
    bob = rig.token_of("nobody")
    assert rig.as_(bob).post("/api/v1/admin/users", json={"name": "eve"}).status_code == 403
    assert rig.as_(bob).post("/api/v1/admin/teams", json={"name": "x"}).status_code == 403
    assert rig.as_(bob).post("/api/v1/admin/users/nobody/disable").status_code == 403
    assert rig.as_(bob).post("/api/v1/tokens", json={"scope": "admin"}).status_code == 403
    assert rig.as_(bob).get("/api/v1/whoami").json() == {
        "user": "nobody", "role": "user", "team": "default", "scope": "submit"}  # fmt: skip


def test_a_disabled_users_tokens_are_refused(rig: Rig) -> None:
    _add_user(rig, "nobody")
    bob = rig.token_of("nobody")
    assert rig.as_(bob).get("/api/v1/jobs").status_code == 200
    disabled = rig.admin().post("/api/v1/admin/users/nobody/disable")
    assert disabled.status_code == 200 and disabled.json()["disabled"] is True
    refused = rig.as_(bob).get("/api/v1/jobs")
    assert refused.status_code == 401 and "disabled" in refused.json()["error"]["message"]
    me = rig.admin().get("/api/v1/whoami").json()["user"]
    assert rig.admin().post(f"/api/v1/admin/users/{me}/disable").status_code == 409
    assert rig.admin().post("/api/v1/admin/users/nobody/enable").status_code == 200
    assert rig.as_(bob).get("/api/v1/jobs").status_code == 200
    assert rig.admin().post("/api/v1/admin/users/ghost/enable").status_code == 404


def test_admin_adds_teams_and_users(rig: Rig) -> None:
    assert rig.admin().post("/api/v1/admin/teams", json={"name": "vision"}).status_code == 201
    assert rig.admin().post("/api/v1/admin/teams", json={"name": "vision"}).status_code == 409
    made = _add_user(rig, "carol", team="vision", role="admin", unix_user="cj")
    assert made.status_code == 201
    assert (made.json()["team"], made.json()["role"], made.json()["unix_user"]) == (
        "vision", "admin", "cj")  # fmt: skip
    assert _add_user(rig, "carol").status_code == 409
    assert _add_user(rig, "dave", team="nosuch").status_code == 404
    assert _add_user(rig, "bad name").status_code == 422
    teams = rig.admin().get("/api/v1/admin/teams").json()
    assert [t["name"] for t in teams] == ["default", "vision"]
    carol = rig.token_of("carol", scope="admin")
    assert rig.as_(carol).get("/api/v1/admin/users").status_code == 200
    everyone = rig.as_(carol).get("/api/v1/tokens?all=true").json()
    assert {t["user"] for t in everyone} == {"carol"}  # the admin's own so far
    _add_user(rig, "nobody")
    bob = rig.token_of("nobody")
    everyone = rig.as_(carol).get("/api/v1/tokens?all=true").json()
    assert {t["user"] for t in everyone} == {"carol", "nobody"}
    assert rig.as_(bob).get("/api/v1/tokens?all=true").status_code == 403
    bobs = [t["id"] for t in everyone if t["user"] == "nobody"]
    assert rig.as_(carol).delete(f"/api/v1/tokens/{bobs[-1]}").status_code == 200
    assert rig.as_(bob).get("/api/v1/jobs").status_code == 401


def test_tokens_and_accounts_survive_a_restart(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path / "state", gpus="0", cpus=2)
    server, app = build_app(settings)
    with TestClient(app, base_url=_BASE) as client:
        client.headers["Authorization"] = f"Bearer {settings.token_path.read_text().strip()}"
        assert client.post("/api/v1/admin/users", json={"name": "nobody"}).status_code == 201
        assert server.accounts is not None
        secret, _ = server.accounts.create_token(Principal("nobody", scope="submit"))
        client.headers["Authorization"] = f"Bearer {secret}"
        assert client.get("/api/v1/jobs").status_code == 200
    _, app = build_app(settings)
    with TestClient(app, base_url=_BASE) as client:
        client.headers["Authorization"] = f"Bearer {secret}"
        assert client.get("/api/v1/whoami").json()["user"] == "nobody"
        assert client.get("/api/v1/tokens").json()[0]["last_used_at"] is not None
