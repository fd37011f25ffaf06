"""GPU history routes in-process (declared GPUs: nothing is sampled, so no samples to
invent): who may read what, and the one-line errors. The samples themselves come from fake
NVML in tests/e2e/test_gpu_history_e2e.py."""

from __future__ import annotations

from tests.api.test_tokens_accounts import Rig, _add_user
from tests.api.test_tokens_accounts import rig as rig  # the fixture


def test_a_jobs_gpu_history_is_a_detail_and_gpu_history_is_everyones(rig: Rig) -> None:
    job = rig.submit(rig.admin()).json()
    assert _add_user(rig, "nobody").status_code == 201
    other = rig.as_(rig.token_of("nobody", scope="read"))
    gone = other.get(f"/api/v1/jobs/{job['id']}/gpu-history")
    assert gone.status_code == 404
    assert gone.json()["error"]["message"].startswith(f"job {job['id']} not found")
    gpu = other.get("/api/v1/gpus/1/history", params={"since": 600, "max_points": 50})
    assert gpu.status_code == 200
    assert gpu.json() == {"index": 1, "uuid": gpu.json()["uuid"], "resolution_s": 0.0,
                          "samples": []}  # fmt: skip
    assert gpu.json()["uuid"]
    mine = rig.admin().get(f"/api/v1/jobs/{job['id']}/gpu-history")
    assert mine.status_code == 200 and mine.json() == {"job_id": job["id"], "gpus": []}
    rig.admin().post(f"/api/v1/jobs/{job['id']}/cancel")


def test_bad_requests_get_one_clear_line(rig: Rig) -> None:
    client = rig.admin()
    missing = client.get("/api/v1/gpus/7/history")
    assert missing.status_code == 404
    assert missing.json()["error"]["message"] == "GPU 7 not found: `gpuyard gpus` lists them"
    assert client.get("/api/v1/gpus/0/history", params={"max_points": 0}).status_code == 422
    assert client.get("/api/v1/gpus/0/history", params={"since": -5}).status_code == 422
    assert client.get("/api/v1/jobs/999/gpu-history").status_code == 404
