"""A job's progress and series over HTTP (in-process, real supervisors): what its owner sees
while it runs and after; another user's job does not exist for them; one-line errors."""

from __future__ import annotations

import sys
import time
from datetime import datetime

from tests.api.test_tokens_accounts import Rig, _add_user
from tests.api.test_tokens_accounts import rig as rig  # the fixture

PRINTS = (
    "import time\n"
    "for i in range(1, 21):\n"
    "    print(f'::gpuyard progress step={i} total=20 loss={1 / i:.4f}', flush=True)\n"
    "    time.sleep(0.05)\n"
)


def test_the_owner_reads_progress_and_series_of_a_job(rig: Rig) -> None:
    client = rig.admin()
    body = {"command": [sys.executable, "-c", PRINTS], "workdir": rig.workdir}
    job = client.post("/api/v1/jobs", json=body).json()
    deadline = time.monotonic() + 30
    while (progress := client.get(f"/api/v1/jobs/{job['id']}/progress").json())["step"] != 20:
        assert time.monotonic() < deadline, progress
        time.sleep(0.1)
    assert progress["job_id"] == job["id"]
    assert (progress["total"], progress["fraction"], progress["source"]) == (20, 1.0, "protocol")
    assert progress["metrics"] == {"loss": 0.05}
    assert datetime.fromisoformat(progress["updated_at"]).tzinfo is not None
    assert progress["eta_s"] in (None, 0.0)  # done: nothing left
    series = client.get(f"/api/v1/jobs/{job['id']}/series").json()
    assert series["job_id"] == job["id"] and set(series["series"]) == {"step", "loss"}
    assert series["series"]["step"][-1][1] == 20.0
    t, loss = series["series"]["loss"][-1]  # the last second's mean
    assert 0.05 <= loss < 0.2 and abs(t - time.time()) < 300
    one = client.get(f"/api/v1/jobs/{job['id']}/series", params={"names": "loss", "max_points": 1})
    assert one.json() == {"job_id": job["id"], "series": {"loss": [[t, loss]]}}


def test_a_job_that_reported_nothing_has_null_progress(rig: Rig) -> None:
    client = rig.admin()
    job = rig.submit(client).json()
    got = client.get(f"/api/v1/jobs/{job['id']}/progress")
    assert got.status_code == 200
    assert got.json() == {
        "job_id": job["id"], "step": None, "total": None, "fraction": None, "rate_per_s": None,
        "eta_s": None, "metrics": {}, "updated_at": None, "source": None,
    }  # fmt: skip
    assert client.get(f"/api/v1/jobs/{job['id']}/series").json()["series"] == {}
    client.post(f"/api/v1/jobs/{job['id']}/cancel")


def test_another_users_job_is_not_found_and_bad_requests_say_why(rig: Rig) -> None:
    job = rig.submit(rig.admin()).json()
    assert _add_user(rig, "nobody").status_code == 201
    other = rig.as_(rig.token_of("nobody", scope="read"))
    for route in ("progress", "series"):
        gone = other.get(f"/api/v1/jobs/{job['id']}/{route}")
        assert gone.status_code == 404
        assert gone.json()["error"]["message"].startswith(f"job {job['id']} not found")
    client = rig.admin()
    assert client.get("/api/v1/jobs/999/progress").status_code == 404
    bad = client.get(f"/api/v1/jobs/{job['id']}/series", params={"max_points": 0})
    assert bad.status_code == 422 and "\n" not in bad.json()["error"]["message"]
    client.post(f"/api/v1/jobs/{job['id']}/cancel")
