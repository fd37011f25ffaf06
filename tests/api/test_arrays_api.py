"""Job arrays over HTTP, in-process on a real SQLite store: one submit makes a task per index
(consecutive ids, the first task's id is the array's), answered 201 with the first task; the
array's tasks by index, also once the server's memory evicted them; cancel one task or all;
a retried submit never makes a second array; every task counts against max pending."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpuyard.bootstrap import build_app
from gpuyard.services.server import ServerFacade
from gpuyard.settings import Settings
from tests.api.served import cancel_unfinished
from tests.api.test_api import wait_state
from tests.api.test_limits_api import _add_user
from tests.api.test_tokens_accounts import Rig
from tests.api.test_tokens_accounts import rig as rig  # the fixture

KEY = "Idempotency-Key"
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL",
            "OUT_OF_MEMORY"}  # fmt: skip


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ServerFacade, TestClient]]:
    settings = Settings(state_dir=tmp_path / "state", gpus="4", cpus=8, kill_grace_s=1)
    server, app = build_app(settings)
    with TestClient(app, base_url=settings.url) as client:
        client.headers["Authorization"] = f"Bearer {settings.token_path.read_text().strip()}"
        client.workdir = str(tmp_path)  # type: ignore[attr-defined]
        yield server, client
        cancel_unfinished(server)


@pytest.fixture
def api(served: tuple[ServerFacade, TestClient]) -> TestClient:
    return served[1]


def _submit(api: TestClient, array: str, **fields: Any) -> Any:
    body = {"command": ["sleep", "30"], "workdir": api.workdir, "array": array, **fields}  # type: ignore[attr-defined]
    return api.post("/api/v1/jobs", json=body)


def _tasks(api: TestClient, array_id: int) -> list[dict[str, Any]]:
    resp = api.get(f"/api/v1/arrays/{array_id}")
    assert resp.status_code == 200, resp.text
    tasks: list[dict[str, Any]] = resp.json()
    return tasks


def _wait_all(api: TestClient, array_id: int, states: set[str]) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 30
    while True:
        tasks = _tasks(api, array_id)
        if all(t["state"] in states for t in tasks):
            return tasks
        assert time.monotonic() < deadline, [t["state"] for t in tasks]
        time.sleep(0.05)


def test_one_submit_makes_a_task_per_index_with_consecutive_ids(api: TestClient) -> None:
    resp = _submit(api, "0-4:2,7%2", gpus=4)
    assert resp.status_code == 201, resp.text
    first = resp.json()
    array_id = first["id"]
    assert (first["array_job_id"], first["array_task_id"]) == (array_id, 0)
    assert first["array_max_running"] == 2
    tasks = _tasks(api, array_id)
    assert [t["array_task_id"] for t in tasks] == [0, 2, 4, 7]
    assert [t["id"] for t in tasks] == list(range(array_id, array_id + 4))
    assert {t["array_job_id"] for t in tasks} == {array_id}
    assert all(t["command"] == ["sleep", "30"] and t["num_gpus"] == 4 for t in tasks)
    # Each task is a job like any other: listed, shown by its own id.
    task7 = api.get(f"/api/v1/jobs/{array_id + 3}").json()
    assert (task7["array_job_id"], task7["array_task_id"]) == (array_id, 7)
    listed = [j for j in api.get("/api/v1/jobs").json() if j["array_job_id"] == array_id]
    assert len(listed) == 4
    # The next submit's id comes after the whole array.
    assert api.post("/api/v1/jobs", json={"command": ["true"], "workdir": "/"}).json()["id"] == (
        array_id + 4
    )


def test_a_bad_array_is_422_naming_the_field(api: TestClient) -> None:
    for text in ("5-1", "x", "0-3%0", "0-20000"):
        resp = _submit(api, text)
        assert resp.status_code == 422, text
        error = resp.json()["error"]
        assert error["field"] == "array" and "\n" not in error["message"]
    assert api.get("/api/v1/jobs").json() == []


def test_no_such_array_and_a_plain_job_are_404(api: TestClient) -> None:
    plain = api.post("/api/v1/jobs", json={"command": ["true"], "workdir": "/"}).json()["id"]
    for array_id in (plain, 999, 2**70):
        resp = api.get(f"/api/v1/arrays/{array_id}")
        assert resp.status_code in (404, 422)
        if array_id != 2**70:
            assert resp.status_code == 404 and "array" in resp.json()["error"]["message"]
    assert api.post("/api/v1/arrays/999/cancel").status_code == 404


def test_cancel_one_task_then_the_whole_array(api: TestClient) -> None:
    # 4 GPUs a task on a 4-GPU server: task 0 runs, the others wait.
    array_id = _submit(api, "0-3", gpus=4).json()["id"]
    wait_state(api, array_id, "RUNNING")
    one = api.post(f"/api/v1/jobs/{array_id + 2}/cancel")
    assert one.status_code == 200 and one.json()["state"] == "CANCELLED"
    states = [t["state"] for t in _tasks(api, array_id)]
    assert states == ["RUNNING", "PENDING", "CANCELLED", "PENDING"]

    resp = api.post(f"/api/v1/arrays/{array_id}/cancel")
    assert resp.status_code == 200, resp.text
    assert [t["array_task_id"] for t in resp.json()] == [0, 1, 2, 3]
    tasks = _wait_all(api, array_id, TERMINAL)
    assert [t["state"] for t in tasks] == ["CANCELLED"] * 4
    assert api.get("/api/v1/jobs").json() == []
    # Nothing left to cancel is not an error: the tasks as they ended.
    again = api.post(f"/api/v1/arrays/{array_id}/cancel")
    assert again.status_code == 200 and {t["state"] for t in again.json()} == {"CANCELLED"}


def test_ended_tasks_are_read_from_the_store_once_evicted(
    served: tuple[ServerFacade, TestClient],
) -> None:
    server, api = served
    server.controller.book.keep_finished = 1  # keep one finished job in memory
    array_id = _submit(api, "1-3", command=["true"]).json()["id"]
    tasks = _wait_all(api, array_id, TERMINAL)
    assert len(server.controller.book.array_tasks(array_id)) < 3  # evicted from memory
    assert [(t["array_task_id"], t["state"]) for t in tasks] == [
        (1, "COMPLETED"), (2, "COMPLETED"), (3, "COMPLETED"),
    ]  # fmt: skip


def test_a_retried_array_submit_makes_no_second_array(api: TestClient) -> None:
    body = {"command": ["sleep", "30"], "workdir": api.workdir, "array": "0-9%3"}  # type: ignore[attr-defined]
    first = api.post("/api/v1/jobs", json=body, headers={KEY: "array-key-1"})
    again = api.post("/api/v1/jobs", json=body, headers={KEY: "array-key-1"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"] == first.json()["array_job_id"]
    assert len(api.get("/api/v1/jobs").json()) == 10
    other = api.post("/api/v1/jobs", json={**body, "array": "0-9%4"}, headers={KEY: "array-key-1"})
    assert other.status_code == 422 and other.json()["error"]["field"] == KEY
    # The same spec with other indices, or as one plain job, is another submission.
    for changed in ({**body, "array": "0-8%3"}, {k: v for k, v in body.items() if k != "array"}):
        refused = api.post("/api/v1/jobs", json=changed, headers={KEY: "array-key-1"})
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["field"] == KEY
    assert len(api.get("/api/v1/jobs").json()) == 10


def test_every_task_counts_against_max_pending(rig: Rig) -> None:
    assert _add_user(rig, "nobody").status_code == 201
    token = rig.token_of("nobody")
    put = rig.admin().put("/api/v1/admin/limits/user/nobody", json={"max_pending": 3})
    assert put.status_code == 200, put.text
    # A task holds every GPU of the server: at most one runs, the others stay pending.
    body = {"command": ["sleep", "30"], "workdir": rig.workdir, "gpus": 2, "array": "0-3"}
    refused = rig.as_(token).post("/api/v1/jobs", json=body)
    assert refused.status_code == 429, refused.text
    error = refused.json()["error"]
    assert error["code"] == "quota_exceeded"
    assert error["message"].startswith("the array's 4 tasks would give user nobody 4 pending")
    assert rig.as_(token).get("/api/v1/jobs").json() == []  # nothing of it was queued
    made = rig.as_(token).post("/api/v1/jobs", json={**body, "array": "0-2"})
    assert made.status_code == 201, made.text
    assert made.json()["owner"] == "nobody"
    again = rig.as_(token).post("/api/v1/jobs", json={**body, "array": "5-6"})
    assert again.status_code == 429, again.text
    # An admin sees and cancels another user's array.
    array_id = made.json()["id"]
    assert rig.admin().get(f"/api/v1/arrays/{array_id}").status_code == 200
    assert rig.admin().post(f"/api/v1/arrays/{array_id}/cancel").status_code == 200
