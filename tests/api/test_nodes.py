"""`GET /api/v1/nodes` (`gpuyard nodes`): each machine as `sinfo -N` shows a node, its state
following its GPUs' use and drains (a one-box server here; the cluster's machines in
tests/raycluster/test_ray_machines.py)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpuyard import __version__
from gpuyard.bootstrap import build_app
from gpuyard.services.server import ServerFacade
from gpuyard.settings import Settings

_BASE = "http://127.0.0.1:8765"  # the Host the in-process server answers to


@pytest.fixture
def app(tmp_path: Path) -> Iterator[tuple[ServerFacade, TestClient]]:
    settings = Settings(state_dir=tmp_path / "state", gpus="2", cpus=4, kill_grace_s=1)
    server, app = build_app(settings)
    with TestClient(app, base_url=_BASE) as client:
        client.headers["Authorization"] = f"Bearer {settings.token_path.read_text().strip()}"
        yield server, client


def _node(client: TestClient) -> dict[str, Any]:
    nodes = client.get("/api/v1/nodes").json()
    assert len(nodes) == 1
    return nodes[0]  # type: ignore[no-any-return]


def test_the_one_machine_is_listed_with_its_use_drains_and_agent(app) -> None:  # type: ignore[no-untyped-def]
    _server, client = app
    node = _node(client)
    assert (node["name"], node["state"], node["gpus"], node["gpus_used"]) == (
        socket.gethostname(), "idle", 2, 0,
    )  # fmt: skip
    assert node["cpus"] == 4 and node["agent_version"] == __version__
    assert node["last_heard"] is not None and abs(node["last_heard"] - time.time()) < 60

    job = client.post("/api/v1/jobs", json={"command": ["sleep", "30"], "gpus": 1,
                                            "workdir": "/tmp"}).json()  # fmt: skip
    deadline = time.monotonic() + 30
    while _node(client)["gpus_used"] != 1:
        assert time.monotonic() < deadline, _node(client)
        time.sleep(0.05)
    node = _node(client)
    assert (node["state"], node["jobs"], node["cpus_used"]) == ("mix", 1, 1)

    free = next(g["index"] for g in client.get("/api/v1/gpus").json() if g["job"] is None)
    assert client.post(f"/api/v1/gpus/{free}/drain", json={"reason": "fan"}).status_code == 200
    node = _node(client)
    assert (node["gpus_drained"], node["state"]) == (1, "alloc")  # nothing left to give
    client.post(f"/api/v1/jobs/{job['id']}/cancel")
