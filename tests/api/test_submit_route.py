"""The submit fast path answers exactly what the FastAPI route it stands in for answers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpuyard.api.app import create_app
from gpuyard.api.submit_route import SubmitFastPath
from gpuyard.bootstrap import build_app
from gpuyard.settings import Settings

JSON = {"Content-Type": "application/json"}
# Differ between any two submits, whichever path takes them.
PER_JOB = ("id", "submitted_at", "log_path", "attained_gpu_s")


def _cases(workdir: str) -> list[tuple[str, bytes, dict[str, str]]]:
    good = json.dumps({"command": ["sleep", "30"], "gpus": 4, "workdir": workdir}).encode()

    def body(**fields: Any) -> bytes:
        return json.dumps({"command": ["true"], "workdir": workdir, **fields}).encode()

    every = body(name="n", gpus=1, cpus=2, mem="1G", time_limit="1:00", priority=3,
                 env={"A": "b"}, preemptible=False, nodes=1)  # fmt: skip
    return [
        ("good", good, JSON),
        ("every field", every, JSON),
        ("empty body", b"", JSON),
        ("empty, no type", b"", {}),
        ("no content type", good, {"Content-Type": ""}),
        ("text/plain", good, {"Content-Type": "text/plain"}),
        ("+json type", good, {"Content-Type": "application/vnd.x+json"}),
        ("json with charset", good, {"Content-Type": "application/json; charset=utf-8"}),
        ("bad json", b"{not json", JSON),
        ("trailing garbage", good + b" x", JSON),
        ("array", b"[1]", JSON),
        ("null", b"null", JSON),
        ("not utf-8", b'{"command": ["\xff"]}', JSON),
        ("utf-16", good.decode().encode("utf-16"), JSON),
        ("byte order mark", b"\xef\xbb\xbf" + good, JSON),
        ("nested too deep", b"[" * 5000 + b"]" * 5000, JSON),
        ("float", body(gpus=1.0), JSON),
        ("bool", body(gpus=True), JSON),
        ("huge int", body(gpus=10**40), JSON),
        ("NaN", b'{"command": ["true"], "gpus": NaN}', JSON),
        ("missing command", json.dumps({"workdir": workdir}).encode(), JSON),
        ("unknown field", body(colour="blue"), JSON),
        ("no such workdir", body(workdir="/no/such/dir"), JSON),
        ("too many GPUs", body(gpus=5), JSON),
        ("no workdir: the home", json.dumps({"command": ["true"], "gpus": 4}).encode(), JSON),
    ]


@pytest.fixture
def clients(tmp_path: Path) -> Iterator[tuple[TestClient, TestClient]]:
    """The server's app (fast path) and a second app over the same server without it."""
    settings = Settings(state_dir=tmp_path / "state", gpus="4", cpus=8, kill_grace_s=1)
    server, app = build_app(settings)
    plain = create_app(server, manage_lifecycle=False)
    plain.user_middleware = [m for m in plain.user_middleware if not _is_fast_path(m)]
    auth = {"Authorization": f"Bearer {settings.token_path.read_text().strip()}"}
    with (
        TestClient(app, headers=auth, base_url=settings.url) as fast,
        TestClient(plain, headers=auth, base_url=settings.url) as slow,
    ):
        yield fast, slow
        for job in server.reads.list_jobs(server.auth.principal, include_finished=False):
            server.verbs.cancel(job.id, server.auth.principal)


def _is_fast_path(middleware: object) -> bool:
    return getattr(middleware, "cls", None) is SubmitFastPath


def _answer(client: TestClient, body: bytes, headers: dict[str, str]) -> tuple[Any, ...]:
    resp = client.post("/api/v1/jobs", content=body, headers=headers)
    data = resp.json()
    if resp.status_code == 201:
        client.post(f"/api/v1/jobs/{data['id']}/cancel")
        data = {k: v for k, v in data.items() if k not in PER_JOB}
    heads = sorted((k, v) for k, v in resp.headers.items() if k not in ("date", "content-length"))
    return resp.status_code, data, heads


def test_the_fast_path_answers_as_the_fastapi_route(
    clients: tuple[TestClient, TestClient], tmp_path: Path
) -> None:
    fast, slow = clients
    for name, body, headers in _cases(str(tmp_path)):
        assert _answer(fast, body, headers) == _answer(slow, body, headers), name


def test_the_fast_path_is_the_one_answering(clients: tuple[TestClient, TestClient]) -> None:
    fast, _ = clients
    app = fast.app
    assert any(_is_fast_path(m) for m in app.user_middleware)  # type: ignore[attr-defined]
    # A token is checked before the fast path sees the request.
    resp = fast.post("/api/v1/jobs", content=b"{}", headers={"Authorization": "Bearer wrong"})
    assert resp.status_code == 401 and resp.headers["WWW-Authenticate"] == "Bearer"
