"""What a new user reads in the API's answers (issue 26): another user's job is "not found,
or not yours to see" (as the dashboard says it), a job with no reason has `"reason": null`
(never the word "None"), a never-run job names no node, and `python x.py` is named `x.py`."""

from __future__ import annotations

import time

import pytest

from tests.api.test_tokens_accounts import Rig, _add_user
from tests.api.test_tokens_accounts import rig as rig  # the fixture


def test_another_users_job_is_not_found_or_not_yours_to_see(rig: Rig) -> None:
    job = rig.submit(rig.admin()).json()
    assert _add_user(rig, "nobody").status_code == 201
    other = rig.as_(rig.token_of("nobody"))
    listed = [j["id"] for j in other.get("/api/v1/jobs").json()]
    assert job["id"] in listed  # the queue shows it to everyone ...
    for answer in (other.get(f"/api/v1/jobs/{job['id']}"),
                   other.get(f"/api/v1/jobs/{job['id']}/log"),
                   other.post(f"/api/v1/jobs/{job['id']}/cancel")):  # fmt: skip
        assert answer.status_code == 404  # ... its details are not hers: both words said
        message = answer.json()["error"]["message"]
        assert message.startswith(f"job {job['id']} not found, or not yours to see"), message
    array = rig.admin().post(
        "/api/v1/jobs", json={"command": ["sleep", "30"], "workdir": rig.workdir, "array": "0-1"}
    ).json()  # fmt: skip
    refused = rig.as_(rig.token_of("nobody")).get(f"/api/v1/arrays/{array['id']}")
    assert refused.status_code == 404
    assert "not found, or not yours to see" in refused.json()["error"]["message"]


def test_no_reason_is_null_and_a_never_run_job_names_no_node(rig: Rig) -> None:
    body = {"command": ["true"], "workdir": rig.workdir}
    ran = rig.admin().post("/api/v1/jobs", json=body).json()
    deadline = time.monotonic() + 30
    while (done := rig.admin().get(f"/api/v1/jobs/{ran['id']}").json())["state"] != "COMPLETED":
        assert time.monotonic() < deadline, done
        time.sleep(0.05)
    assert done["reason"] is None  # was the string "None"
    assert done["node"]  # the machine it ran on
    both = {**body, "command": ["sleep", "30"], "gpus": 2}
    rig.admin().post("/api/v1/jobs", json=both)  # holds both GPUs
    waiting = rig.admin().post("/api/v1/jobs", json=both).json()  # waits for them
    cancelled = rig.admin().post(f"/api/v1/jobs/{waiting['id']}/cancel").json()
    assert cancelled["state"] == "CANCELLED" and cancelled["started_at"] is None
    assert cancelled["node"] == ""  # never ran: no node (was "local" beside a hostname)


def test_a_script_run_by_python_is_named_after_the_script(
    rig: Rig, tmp_path_factory: pytest.TempPathFactory
) -> None:
    workdir = tmp_path_factory.mktemp("named")
    (workdir / "train.py").write_text("print('hi')\n")
    body = {"command": ["python3", "-u", "train.py", "--lr", "1"], "workdir": str(workdir)}
    job = rig.admin().post("/api/v1/jobs", json=body).json()
    assert job["name"] == "train.py"  # as sbatch names a job after its script (was "python3")
    assert rig.admin().post("/api/v1/jobs", json={**body, "name": "mine"}).json()["name"] == "mine"
