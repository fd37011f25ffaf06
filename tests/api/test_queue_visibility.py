"""Everyone sees the queue (who, what size, which state, why: as `squeue`); a job's command,
working directory, log and GPU stats are its owner's and the admins' only."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from tests.api.test_tokens_accounts import Rig, _add_user
from tests.api.test_tokens_accounts import rig as rig  # the fixture


def test_the_queue_shows_others_jobs_without_their_details(rig: Rig) -> None:
    command = ["sh", "-c", "sleep 30", "secret-arg"]
    body = {"command": command, "workdir": rig.workdir, "name": "exp"}
    job = rig.admin().post("/api/v1/jobs", json=body).json()
    assert _add_user(rig, "nobody").status_code == 201
    other = rig.as_(rig.token_of("nobody"))

    seen = {j["id"]: j for j in other.get("/api/v1/jobs").json()}[job["id"]]
    assert (seen["owner"], seen["name"], seen["num_gpus"]) == (job["owner"], "exp", 0)
    assert seen["state"] in ("PENDING", "RUNNING")  # a running job's reason is null
    assert seen["reason"] is None or seen["reason"] == seen["reason"].split(":")[0]  # code only
    assert seen["command"] == [] and seen["workdir"] == "" and seen["log_path"] == ""
    assert seen["gpu_stats"] is None
    assert other.get(f"/api/v1/jobs/{job['id']}").status_code == 404  # details: not theirs

    mine = {j["id"]: j for j in rig.admin().get("/api/v1/jobs").json()}[job["id"]]
    assert mine["command"] == body["command"] and mine["workdir"] == rig.workdir


def test_others_rows_hide_output_paths_launch_failures_and_names_from_the_command(
    rig: Rig,
) -> None:
    # A program submit finds (a missing one is refused at submit) whose #! names nothing: it
    # fails at its launch, with a reason that quotes its path.
    secret = Path(tempfile.mkdtemp(prefix="alice-secret-", dir=rig.workdir))  # unique per run
    try:
        _a_launch_failure_hides_its_details(rig, secret)
    finally:
        shutil.rmtree(secret, ignore_errors=True)


def _a_launch_failure_hides_its_details(rig: Rig, secret: Path) -> None:
    (secret / "train.sh").write_text("#!/nonexistent/interpreter\n")
    (secret / "train.sh").chmod(0o755)
    body = {
        "command": [str(secret / "train.sh"), "--key", "k1"],
        "workdir": rig.workdir,
        "output_path": "/srv/alice-private/out-%j.txt",
        "error_path": "/srv/alice-private/e",
    }
    job = rig.admin().post("/api/v1/jobs", json=body).json()
    deadline = time.monotonic() + 30
    while rig.admin().get(f"/api/v1/jobs/{job['id']}").json()["state"] != "FAILED":
        assert time.monotonic() < deadline, "the job did not fail to launch"
        time.sleep(0.05)
    mine = rig.admin().get(f"/api/v1/jobs/{job['id']}").json()
    assert mine["reason"].startswith("LaunchFailed: ") and "alice-secret" in mine["reason"]
    assert mine["name"] == "train.sh" and mine["output_path"] == body["output_path"]
    assert _add_user(rig, "nobody").status_code == 201
    other = rig.as_(rig.token_of("nobody"))
    listed = other.get("/api/v1/jobs", params={"all": "true"}).json()
    seen = {j["id"]: j for j in listed}[job["id"]]
    assert seen["reason"] == "LaunchFailed" and seen["state"] == "FAILED"
    assert seen["name"] == "job"  # not the program's name
    assert "alice-private" not in str(seen) and "alice-secret" not in str(seen)
    assert seen["output_path"] is None and seen["error_path"] is None


def test_the_events_everyone_reads_name_a_job_only_as_its_owner_named_it(rig: Rig) -> None:
    body = {"command": ["sh", "-c", "sleep 30", "secret-arg"], "workdir": rig.workdir}
    unnamed = rig.admin().post("/api/v1/jobs", json=body).json()
    named = rig.admin().post("/api/v1/jobs", json={**body, "name": "exp"}).json()
    for job in (unnamed, named):
        deadline = time.monotonic() + 30
        while rig.admin().get(f"/api/v1/jobs/{job['id']}").json()["state"] != "RUNNING":
            assert time.monotonic() < deadline, "the job did not start"
            time.sleep(0.05)
        assert rig.admin().post(f"/api/v1/jobs/{job['id']}/requeue").status_code == 200
    assert _add_user(rig, "nobody").status_code == 201
    other = rig.as_(rig.token_of("nobody"))
    deadline = time.monotonic() + 30
    while True:  # a requeue's event comes once the run has stopped
        events = {e["job_id"]: e for e in other.get("/api/v1/events").json() if e["job_id"]}
        if {unnamed["id"], named["id"]} <= set(events):
            break
        assert time.monotonic() < deadline, f"no requeue events: {events}"
        time.sleep(0.05)
    assert events[unnamed["id"]]["name"] == "job" and "(job, " in events[unnamed["id"]]["message"]
    assert events[named["id"]]["name"] == "exp" and "(exp, " in events[named["id"]]["message"]
    assert unnamed["name"] not in str(events[unnamed["id"]])


def test_a_name_filter_never_finds_anothers_job_by_its_command(rig: Rig) -> None:
    body = {"command": ["sh", "-c", "sleep 30"], "workdir": rig.workdir}
    job = rig.admin().post("/api/v1/jobs", json=body).json()
    assert job["name"] == "sh"
    assert [j["id"] for j in rig.admin().get("/api/v1/jobs", params={"name": "sh"}).json()] == [
        job["id"]
    ]
    assert _add_user(rig, "nobody").status_code == 201
    other = rig.as_(rig.token_of("nobody"))
    assert other.get("/api/v1/jobs", params={"name": "sh"}).json() == []
    assert other.get("/api/v1/jobs", params={"name": "sh", "all": "true"}).json() == []
