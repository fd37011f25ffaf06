"""Through the API of a root server (in-process, real supervisors): each account's job runs
as its Unix user (its own name, or the `--unix-user` it maps to); an account with no Unix
user, or one mapped to root, is refused at submit in one line (issue 11)."""

from __future__ import annotations

import os
import pwd
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpuyard.bootstrap import build_app
from gpuyard.domain.principal import Principal
from gpuyard.services.server import ServerFacade
from gpuyard.settings import Settings
from tests.e2e.unix_users import UnixUsers

_BASE = "http://127.0.0.1:8765"  # the Host the in-process server answers to


@pytest.fixture
def app(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[ServerFacade, TestClient]]:
    """An in-process server on one box, or (`indirect` param "ray") on a local Ray cluster of
    two machines: each job through its machine's agent, run as its owner there too."""
    settings = Settings(state_dir=tmp_path / "state", gpus="1", cpus=4, kill_grace_s=1)
    if getattr(request, "param", "local") == "ray":
        pytest.importorskip("ray")
        settings = Settings(state_dir=tmp_path / "state", kill_grace_s=1, backend="ray",
                            ray_local_nodes="2x1x2", ray_node_timeout_s=5)  # fmt: skip
    server, app = build_app(settings)
    with TestClient(app, base_url=_BASE) as client:
        client.headers["Authorization"] = f"Bearer {settings.token_path.read_text().strip()}"
        yield server, client


def _as(server: ServerFacade, client: TestClient, name: str, **fields: object) -> dict[str, str]:
    """An account made by the admin through the API, and a submit token of its own."""
    made = client.post("/api/v1/admin/users", json={"name": name, **fields})
    assert made.status_code == 201, made.text
    assert server.accounts is not None
    secret, _ = server.accounts.create_token(Principal(name, "user", None, "submit"))
    return {"Authorization": f"Bearer {secret}"}


def _run(server: ServerFacade, client: TestClient, who: dict[str, str]) -> tuple[str, str]:
    body = {"command": ["sh", "-c", "id -un; echo $HOME"], "workdir": "/"}
    answer = client.post("/api/v1/jobs", json=body, headers=who)
    assert answer.status_code == 201, answer.text
    job_id = answer.json()["id"]
    admin = server.auth.principal
    deadline = time.monotonic() + 20
    while server.reads.get(job_id, admin).state.value in ("PENDING", "RUNNING"):
        assert time.monotonic() < deadline, "the job did not end"
        time.sleep(0.05)
    user, home = Path(server.controller.executor.log_path(job_id)).read_text().split()
    return user, home


@pytest.mark.skipif(os.geteuid() != 0, reason="running jobs as other users needs root")
@pytest.mark.parametrize("app", ["local", "ray"], indirect=True)
def test_each_accounts_job_runs_as_its_unix_user(app, users: UnixUsers):  # type: ignore[no-untyped-def]
    server, client = app
    bob = _as(server, client, users.bob)
    assert _run(server, client, bob) == (users.bob, pwd.getpwnam(users.bob).pw_dir)
    mapped = _as(server, client, "ada", unix_user=users.alice)
    assert _run(server, client, mapped) == (users.alice, pwd.getpwnam(users.alice).pw_dir)


@pytest.mark.skipif(os.geteuid() != 0, reason="a root server is what refuses these")
def test_accounts_without_a_unix_user_or_mapped_to_root_are_refused(app):  # type: ignore[no-untyped-def]
    server, client = app
    body = {"command": ["true"], "workdir": "/"}
    ghost = client.post("/api/v1/jobs", json=body, headers=_as(server, client, "gyghost"))
    assert ghost.status_code == 422 and "has no Unix user" in ghost.json()["error"]["message"]
    root = client.post("/api/v1/jobs", json=body,
                       headers=_as(server, client, "mallory", unix_user="root"))  # fmt: skip
    assert root.status_code == 403 and "would run as root" in root.json()["error"]["message"]


@pytest.mark.skipif(os.geteuid() != 0, reason="running jobs as other users needs root")
@pytest.mark.parametrize("app", ["local", "ray"], indirect=True)
def test_a_job_naming_no_workdir_runs_in_its_owners_home(app, users: UnixUsers):  # type: ignore[no-untyped-def]
    # A web form or a bare API call sends no workdir: on a root server the default is the
    # owner's home, not the server's (root's home is not the owner's to enter).
    server, client = app
    bob = _as(server, client, users.bob)
    home = pwd.getpwnam(users.bob).pw_dir
    asked = client.post("/api/v1/jobs/dry-run", json={"command": ["pwd"]}, headers=bob)
    assert asked.status_code == 200, asked.text
    answer = client.post("/api/v1/jobs", json={"command": ["pwd"]}, headers=bob)
    assert answer.status_code == 201, answer.text
    assert answer.json()["workdir"] == home
    job_id = answer.json()["id"]
    deadline = time.monotonic() + 20
    while server.reads.get(job_id, server.auth.principal).state.value in ("PENDING", "RUNNING"):
        assert time.monotonic() < deadline, "the job did not end"
        time.sleep(0.05)
    job = server.reads.get(job_id, server.auth.principal)
    assert job.state.value == "COMPLETED", job.reason
    assert Path(server.controller.executor.log_path(job_id)).read_text().strip() == home
