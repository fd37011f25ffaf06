"""The Idempotency-Key header over HTTP: a repeat is 200 with the same job, a malformed key 400,
a key reused for another job 422, each in one line; the submit fast path answers all of it
exactly as the FastAPI route it stands in for, and OpenAPI declares the header and the 200."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpuyard.api.app import create_app
from gpuyard.api.submit_route import SubmitFastPath
from gpuyard.bootstrap import build_app
from gpuyard.settings import Settings

KEY = "Idempotency-Key"


@pytest.fixture
def clients(tmp_path: Path) -> Iterator[tuple[TestClient, TestClient]]:
    """The server's app (fast path) and a second app over the same server without it."""
    settings = Settings(state_dir=tmp_path / "state", gpus="4", cpus=8, kill_grace_s=1)
    server, app = build_app(settings)
    plain = create_app(server, manage_lifecycle=False)
    plain.user_middleware = [
        m for m in plain.user_middleware if getattr(m, "cls", None) is not SubmitFastPath
    ]
    auth = {"Authorization": f"Bearer {settings.token_path.read_text().strip()}"}
    with (
        TestClient(app, headers=auth, base_url=settings.url) as fast,
        TestClient(plain, headers=auth, base_url=settings.url) as slow,
    ):
        yield fast, slow
        for job in server.reads.list_jobs(server.auth.principal, include_finished=False):
            server.verbs.cancel(job.id, server.auth.principal)


def _body(workdir: Path, **fields: Any) -> bytes:
    return json.dumps({"command": ["sleep", "30"], "workdir": str(workdir), **fields}).encode()


def _post(client: TestClient, body: bytes, *keys: str | bytes) -> tuple[int, Any, dict[str, str]]:
    headers: list[tuple[str, str | bytes]] = [("Content-Type", "application/json")]
    headers += [(KEY, key) for key in keys]
    resp = client.post("/api/v1/jobs", content=body, headers=headers)
    return resp.status_code, resp.json(), dict(resp.headers)


def test_a_repeat_answers_the_same_job_with_200(
    clients: tuple[TestClient, TestClient], tmp_path: Path
) -> None:
    fast, _ = clients
    status, first, heads = _post(fast, _body(tmp_path), "key-1")
    assert status == 201 and "idempotent-replayed" not in heads
    status, again, heads = _post(fast, _body(tmp_path), "key-1")
    assert status == 200 and heads["idempotent-replayed"] == "true"
    assert again["id"] == first["id"] and again.keys() == first.keys()
    status, other, _ = _post(fast, _body(tmp_path), "key-2")
    assert status == 201 and other["id"] != first["id"]
    status, plain, _ = _post(fast, _body(tmp_path))  # no key: a new job every time
    assert status == 201 and plain["id"] not in (first["id"], other["id"])


def test_a_key_reused_for_another_job_is_422_in_one_line(
    clients: tuple[TestClient, TestClient], tmp_path: Path
) -> None:
    fast, _ = clients
    status, first, _ = _post(fast, _body(tmp_path), "key-1")
    status, error, _ = _post(fast, _body(tmp_path, gpus=2), "key-1")
    assert status == 422
    assert error["error"] == {
        "code": "invalid_request",
        "field": KEY,
        "message": f"this {KEY} was already used for another submission (job {first['id']}); "
        "send a new key with a new job",
    }


@pytest.mark.parametrize(
    "keys",
    [("",), ("k" * 256,), ("caf\xe9".encode("latin-1"),), ("tab\there",), ("a", "b")],
    ids=["empty", "256 characters", "not ASCII", "a control character", "two headers"],
)
def test_a_malformed_key_is_400_in_one_line(
    clients: tuple[TestClient, TestClient], tmp_path: Path, keys: tuple[str | bytes, ...]
) -> None:
    fast, _ = clients
    status, error, _ = _post(fast, _body(tmp_path), *keys)
    assert status == 400 and error["error"]["field"] == KEY
    assert "\n" not in error["error"]["message"] and KEY in error["error"]["message"]
    assert _post(fast, _body(tmp_path), "k" * 255)[0] == 201  # the longest key is fine


def test_the_fast_path_answers_keys_as_the_fastapi_route(
    clients: tuple[TestClient, TestClient], tmp_path: Path
) -> None:
    """Each path gets its own keys (a key is spent by its first job), the same sequence."""

    def answers(client: TestClient, tag: str) -> list[tuple[int, Any, list[tuple[str, str]]]]:
        steps: list[tuple[bytes, tuple[str | bytes, ...]]] = [
            (_body(tmp_path), (f"{tag}-1",)),
            (_body(tmp_path), (f"{tag}-1",)),
            (_body(tmp_path, gpus=2), (f"{tag}-1",)),
            (_body(tmp_path, gpus=9), (f"{tag}-2",)),  # refused: the key stays unused
            (_body(tmp_path), ("",)),
            (_body(tmp_path), ("x", "y")),
            (b"{not json", (f"{tag}-3",)),
        ]
        out = []
        for body, keys in steps:
            status, data, heads = _post(client, body, *keys)
            if "error" in data:
                message = data["error"]["message"].replace(tag, "TAG")
                data["error"]["message"] = re.sub(r"job \d+", "job N", message)
            else:  # the job as it now is (a replay's may be running by then): its shape
                data = (sorted(data), data["name"], data["command"], data["owner"])
            skip = ("date", "content-length")
            out.append((status, data, sorted((k, v) for k, v in heads.items() if k not in skip)))
        return out

    fast, slow = clients
    assert answers(fast, "fast") == answers(slow, "slow")


def test_openapi_declares_the_header_and_the_replay(clients: tuple[TestClient, TestClient]) -> None:
    fast, _ = clients
    submit = fast.get("/openapi.json").json()["paths"]["/api/v1/jobs"]["post"]
    assert [p["name"] for p in submit["parameters"] if p["in"] == "header"] == [KEY]
    assert "Idempotent-Replayed" in submit["responses"]["200"]["headers"]
    assert (
        submit["responses"]["201"]["content"]["application/json"]["schema"]
        == (submit["responses"]["200"]["content"]["application/json"]["schema"])
    )
