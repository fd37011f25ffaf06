"""The HTTP API in-process: routes, auth, one error shape, bad input changes nothing."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

JOB_FIELDS = {"id", "name", "state", "reason", "gpus", "exit_code", "submitted_at", "started_at",
              "ended_at"}  # fmt: skip


def submit(api: TestClient, **fields: object):  # type: ignore[no-untyped-def]
    body = {"command": ["sleep", "30"], "workdir": api.workdir, **fields}  # type: ignore[attr-defined]
    return api.post("/api/v1/jobs", json=body)


def wait_job(api: TestClient, job_id: int, ok: Callable[[dict], bool], what: str) -> dict:  # type: ignore[type-arg]
    """The job once `ok` holds for it: the scheduler's passes are asynchronous."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        job = api.get(f"/api/v1/jobs/{job_id}").json()
        if ok(job):
            return job  # type: ignore[no-any-return]
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} never {what}")


def wait_state(api: TestClient, job_id: int, *states: str) -> dict:  # type: ignore[type-arg]
    return wait_job(api, job_id, lambda job: job["state"] in states, f"reached {states}")


def test_healthz_needs_no_token_but_everything_else_does(api: TestClient):
    assert api.get("/healthz", headers={"Authorization": ""}).json() == {"status": "ok"}
    for method, path in [("GET", "/api/v1/jobs"), ("GET", "/api/v1/gpus"),
                         ("POST", "/api/v1/jobs"), ("GET", "/api/v1/jobs/1/log")]:  # fmt: skip
        resp = api.request(method, path, headers={"Authorization": "Bearer wrong"})
        assert resp.status_code == 401
        assert resp.json()["error"]["code"] == "unauthorized"


def test_openapi_is_served(api: TestClient):
    spec = api.get("/openapi.json").json()
    assert "/api/v1/jobs" in spec["paths"] and "/api/v1/gpus" in spec["paths"]


def test_submit_get_list_cancel(api: TestClient):
    resp = submit(api, gpus=2, name="train", priority=5, time_limit="1:00:00", mem="1G")
    assert resp.status_code == 201
    job = resp.json()
    assert set(job) >= JOB_FIELDS
    assert (job["name"], job["num_gpus"], job["time_limit_s"], job["mem_mib"]) == (
        "train", 2, 3600, 1024)  # fmt: skip
    running = wait_state(api, job["id"], "RUNNING")
    assert len(running["gpus"]) == 2 and running["started_at"]
    assert [j["id"] for j in api.get("/api/v1/jobs").json()] == [job["id"]]
    gpus = api.get("/api/v1/gpus").json()
    assert sum(1 for g in gpus if g["job"] == job["id"]) == 2
    assert all(g["detected"] is False for g in gpus)
    assert api.post(f"/api/v1/jobs/{job['id']}/cancel").status_code == 200
    ended = wait_state(api, job["id"], "CANCELLED")
    assert ended["ended_at"] and api.get("/api/v1/jobs").json() == []
    assert [j["id"] for j in api.get("/api/v1/jobs?all=true").json()] == [job["id"]]


def test_pending_job_says_why(api: TestClient):
    big = submit(api, gpus=4).json()
    wait_state(api, big["id"], "RUNNING")
    first = submit(api, gpus=1).json()
    second = submit(api, gpus=1).json()
    wait_job(api, second["id"], lambda job: job["reason"] == "Priority", "waited for Priority")
    assert api.get(f"/api/v1/jobs/{first['id']}").json()["reason"] == "Resources"
    for job in (big, first, second):
        api.post(f"/api/v1/jobs/{job['id']}/cancel")


BAD_SUBMISSIONS = [
    ({"gpus": -1}, "gpus"),
    ({"gpus": 1.5}, "gpus"),
    ({"gpus": "2"}, "gpus"),
    ({"gpus": 5}, "gpus"),
    ({"cpus": 0}, "cpus"),
    ({"command": []}, "command"),
    ({"command": [""]}, "command"),
    ({"mem": "lots"}, "mem"),
    ({"time_limit": "soon"}, "time_limit"),
    ({"time_limit": "0"}, "time_limit"),
    ({"workdir": "/no/such/dir"}, "workdir"),
    ({"workdir": "relative/dir"}, "workdir"),
    ({"colour": "blue"}, "colour"),
    ({"env": {"A": 1}}, "env.A"),
    ({"time_limit": "99999999999"}, "time_limit"),
    ({"time_limit": "1" * 400 + "d"}, "time_limit"),
    ({"mem": "1" * 400 + "G"}, "mem"),
    ({"command": ["echo", "a\0b"]}, "command"),
    ({"env": {"A": "x\0y"}}, "env"),
    ({"distributed": "mpi", "gpus": 1}, "distributed"),
    ({"distributed": "torchrun", "gpus": 0}, "distributed"),
    ({"preemptible": "no"}, "preemptible"),
]


@pytest.mark.parametrize(("fields", "field"), BAD_SUBMISSIONS)
def test_bad_submissions_are_422_naming_the_field_and_store_nothing(
    api: TestClient,
    fields: dict,
    field: str,  # type: ignore[type-arg]
):
    resp = submit(api, **fields)
    assert resp.status_code == 422, resp.text
    error = resp.json()["error"]
    assert error["code"] == "invalid_request"
    assert error.get("field") == field
    assert error["message"] and "\n" not in error["message"]
    assert api.get("/api/v1/jobs?all=true").json() == []


def test_too_many_gpus_message_says_what_the_server_has(api: TestClient):
    error = submit(api, gpus=8).json()["error"]
    assert "8 GPUs" in error["message"] and "4 GPUs" in error["message"]


def test_malformed_json_is_422(api: TestClient):
    resp = api.post(
        "/api/v1/jobs", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert resp.status_code == 422
    assert resp.json()["error"]["message"] == "the request body is not valid JSON"


def test_unknown_job_is_404_and_finished_cancel_is_409(api: TestClient):
    resp = api.get("/api/v1/jobs/12345")
    assert resp.status_code == 404 and resp.json()["error"]["code"] == "not_found"
    assert api.post("/api/v1/jobs/12345/cancel").status_code == 404
    job = submit(api, command=["true"]).json()
    wait_state(api, job["id"], "COMPLETED")
    resp = api.post(f"/api/v1/jobs/{job['id']}/cancel")
    assert resp.status_code == 409 and resp.json()["error"]["code"] == "conflict"
    assert api.get("/api/v1/jobs/not-a-number").status_code == 422
    assert api.get("/api/v1/nothing-here").json()["error"]["code"] == "not_found"


def test_absurd_log_offset_is_422(api: TestClient):
    job = submit(api, command=["true"]).json()
    assert api.get(f"/api/v1/jobs/{job['id']}/log", params={"offset": "9" * 30}).status_code == 422


def test_log_reads_from_an_offset(api: TestClient):
    job = submit(api, command=["sh", "-c", "printf 'hello world'"]).json()
    wait_state(api, job["id"], "COMPLETED")
    resp = api.get(f"/api/v1/jobs/{job['id']}/log", params={"offset": 6})
    assert resp.text == "world" and resp.headers["X-Log-Offset"] == "11"
    followed = api.get(f"/api/v1/jobs/{job['id']}/log", params={"follow": "true"})
    assert followed.text == "hello world"


def test_pending_jobs_carry_an_estimated_start_and_running_ones_their_service(api: TestClient):
    blocker = submit(api, gpus=4, time_limit="2h", preemptible=False).json()
    wait_state(api, blocker["id"], "RUNNING")
    waiting = submit(api, gpus=2).json()
    wait_job(api, waiting["id"], lambda job: job["estimated_start_at"], "got an estimate")
    jobs = {j["id"]: j for j in api.get("/api/v1/jobs").json()}
    started = time.mktime(
        time.strptime(jobs[blocker["id"]]["started_at"][:19], "%Y-%m-%dT%H:%M:%S")
    )
    estimate = jobs[waiting["id"]]["estimated_start_at"]
    assert estimate is not None
    projected = time.mktime(time.strptime(estimate[:19], "%Y-%m-%dT%H:%M:%S"))
    assert abs(projected - (started + 7200)) <= 2  # the blocker's whole 2 h limit
    assert jobs[blocker["id"]]["estimated_start_at"] is None
    assert jobs[blocker["id"]]["preemptible"] is False
    assert jobs[blocker["id"]]["attained_gpu_s"] >= 0 and jobs[blocker["id"]]["restarts"] == 0
    for job in (blocker, waiting):
        api.post(f"/api/v1/jobs/{job['id']}/cancel")


def test_dry_run_route_answers_and_queues_nothing(api: TestClient):
    body = {"command": ["true"], "workdir": api.workdir, "gpus": 1}  # type: ignore[attr-defined]
    answer = api.post("/api/v1/jobs/dry-run", json=body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["starts_in_s"] == 0.0 and answer.json()["not_before"] is None
    too_big = api.post("/api/v1/jobs/dry-run", json={**body, "gpus": 5})
    assert too_big.status_code == 422 and too_big.json()["error"]["field"] == "gpus"
    assert api.get("/api/v1/jobs?all=true").json() == []
