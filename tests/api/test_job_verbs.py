"""The verbs' routes in-process: who the token is, and bodies and states refused with the
one error shape (409/422), never a 500."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.api.test_api import submit, wait_state


def test_whoami_names_the_tokens_user(api: TestClient):
    me = api.get("/api/v1/whoami").json()
    assert me["role"] == "admin" and me["user"] == api.get("/api/v1/info").json()["owner"]


def test_update_refuses_bad_bodies_and_running_jobs_in_one_error(api: TestClient):
    running = submit(api, gpus=4, command=["sleep", "30"]).json()
    wait_state(api, running["id"], "RUNNING")
    pending = submit(api, gpus=4, command=["true"]).json()
    path = f"/api/v1/jobs/{pending['id']}"
    assert api.patch(path, json={"frobnicate": 1}).status_code == 422
    assert api.patch(path, json={"gpus": -1}).status_code == 422
    bad_time = api.patch(path, json={"time_limit": "1:99:99"})
    assert bad_time.status_code == 422 and bad_time.json()["error"]["field"] == "time_limit"
    nothing = api.patch(path, json={})
    assert nothing.status_code == 422 and "nothing to update" in nothing.json()["error"]["message"]
    updated = api.patch(path, json={"time_limit": "2h", "priority": 4}).json()
    assert (updated["time_limit_s"], updated["priority"]) == (7200, 4)
    busy = api.patch(f"/api/v1/jobs/{running['id']}", json={"priority": 1})
    assert busy.status_code == 409 and "\n" not in busy.json()["error"]["message"]
    held = api.post(f"/api/v1/jobs/{pending['id']}/hold").json()
    assert (held["held"], held["reason"]) == (True, "JobHeldUser")
    assert api.post(f"/api/v1/jobs/{running['id']}/hold").status_code == 409
    assert api.post(f"/api/v1/jobs/{pending['id']}/requeue").status_code == 409
    assert api.post(f"/api/v1/jobs/{pending['id']}/restart").status_code == 409
    assert api.post("/api/v1/jobs/999/release").status_code == 404


def test_many_jobs_are_cancelled_in_one_request_each_refusal_on_its_own_line(api: TestClient):
    running = submit(api, gpus=4, command=["sleep", "30"]).json()
    wait_state(api, running["id"], "RUNNING")
    pending = [submit(api, gpus=4, command=["true"]).json()["id"] for _ in range(5)]
    done = api.post("/api/v1/jobs/cancel", json={"ids": [*pending, running["id"], 999_999]})
    assert done.status_code == 200
    body = done.json()
    assert sorted(body["cancelled"]) == pending and body["stopping"] == [running["id"]]
    assert [(r["id"], r["code"]) for r in body["refused"]] == [(999_999, "not_found")]
    again = api.post("/api/v1/jobs/cancel", json={"ids": pending[:1]}).json()
    assert again["refused"][0]["code"] == "conflict"
    assert "already ended" in again["refused"][0]["message"]
    for bad in ({"ids": []}, {"ids": [1], "frobnicate": 1}, {"ids": [1], "signal": "NOPE"}):
        refused = api.post("/api/v1/jobs/cancel", json=bad)
        assert refused.status_code == 422 and "\n" not in refused.json()["error"]["message"]
