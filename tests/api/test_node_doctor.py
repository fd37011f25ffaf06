"""`GET /api/v1/nodes/{name}/doctor` (`gpuyard doctor --node`) on a one-box server: its one
machine's doctor facts, gathered by the server on its own machine; an unknown machine is a
404 naming `gpuyard nodes`; only admins may ask (the facts name the machine's paths). The
cluster's machines: tests/raycluster/test_ray_machines.py."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpuyard.bootstrap import build_app
from gpuyard.doctor.checks import run_checks
from gpuyard.doctor.model import Status
from gpuyard.doctor.wire import facts_from_json
from gpuyard.domain.principal import Principal
from gpuyard.services.server import ServerFacade
from gpuyard.settings import Settings

_BASE = "http://127.0.0.1:8765"  # the Host the in-process server answers to


@pytest.fixture
def app(tmp_path: Path) -> Iterator[tuple[ServerFacade, TestClient, Settings]]:
    settings = Settings(state_dir=tmp_path / "state", gpus="2", cpus=4, kill_grace_s=1)
    server, app = build_app(settings)
    with TestClient(app, base_url=_BASE) as client:
        client.headers["Authorization"] = f"Bearer {settings.token_path.read_text().strip()}"
        yield server, client, settings


def test_the_server_machines_own_facts_judged_as_the_local_doctor_judges(app) -> None:  # type: ignore[no-untyped-def]
    _server, client, settings = app
    name = client.get("/api/v1/nodes").json()[0]["name"]
    assert name == socket.gethostname()
    answer = client.get(f"/api/v1/nodes/{name}/doctor")
    assert answer.status_code == 200, answer.text
    assert answer.json()["node"] == name
    checks = {c.name: c for c in run_checks(facts_from_json(answer.json()["facts"]))}
    disk = checks["state dir disk"]
    assert disk.status is not Status.FAIL and str(settings.state_dir) in disk.message
    assert checks["python"].status is Status.PASS, checks["python"]  # python3 on the PATH
    assert "job limits" in checks  # the server's own per-job cgroups (or why none)
    assert "nvidia driver" in checks


def test_an_unknown_machine_is_one_line_naming_the_list(app) -> None:  # type: ignore[no-untyped-def]
    _server, client, _settings = app
    answer = client.get("/api/v1/nodes/no-such-machine/doctor")
    assert answer.status_code == 404
    message = answer.json()["error"]["message"]
    assert "no-such-machine" in message and "`gpuyard nodes`" in message and "\n" not in message


def test_only_an_admin_may_ask(app) -> None:  # type: ignore[no-untyped-def]
    server, client, _settings = app
    made = client.post("/api/v1/admin/users", json={"name": "gydoc"})
    assert made.status_code == 201, made.text
    assert server.accounts is not None
    secret, _ = server.accounts.create_token(Principal("gydoc", "user", None, "submit"))
    name = socket.gethostname()
    answer = client.get(f"/api/v1/nodes/{name}/doctor",
                        headers={"Authorization": f"Bearer {secret}"})  # fmt: skip
    assert answer.status_code == 403
    assert "only an admin" in answer.json()["error"]["message"]
    assert client.get("/api/v1/nodes", headers={"Authorization": f"Bearer {secret}"}).is_success
