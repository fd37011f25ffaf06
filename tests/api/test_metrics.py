"""/metrics in-process (declared GPUs: queue metrics only, no GPU samples to invent)."""

from __future__ import annotations

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from tests.api.test_api import submit, wait_state


def scrape(api: TestClient) -> dict[str, dict[str, float]]:
    """`{family: {sample name + labels: value}}` from the exposition text."""
    resp = api.get("/metrics")
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/plain")
    return {
        family.name: {f"{s.name}{sorted(s.labels.items())}": s.value for s in family.samples}
        for family in text_string_to_metric_families(resp.text)
    }


def test_metrics_needs_the_token(api: TestClient):
    resp = api.get("/metrics", headers={"Authorization": "Bearer wrong"})
    assert resp.status_code == 401
    assert resp.json()["error"]["code"] == "unauthorized"


def test_queue_metrics_follow_submits_and_starts(api: TestClient):
    before = scrape(api)
    assert before["gpuyard_job_submits"]["gpuyard_job_submits_total[]"] == 0
    assert before["gpuyard_gpus"]["gpuyard_gpus[]"] == 4
    job = submit(api, gpus=4).json()
    wait_state(api, job["id"], "RUNNING")
    waiting = submit(api, gpus=1).json()
    after = scrape(api)
    assert after["gpuyard_job_submits"]["gpuyard_job_submits_total[]"] == 2
    assert after["gpuyard_jobs_running"]["gpuyard_jobs_running[]"] == 1
    assert after["gpuyard_jobs_pending"]["gpuyard_jobs_pending[]"] == 1
    started = after["gpuyard_submit_to_start_seconds"]
    assert started["gpuyard_submit_to_start_seconds_count[]"] == 1
    assert started["gpuyard_submit_to_start_seconds_sum[]"] < 5
    passes = after["gpuyard_scheduling_pass_seconds"]
    assert passes["gpuyard_scheduling_pass_seconds_count[]"] >= 1
    # Declared GPUs are never sampled: no dcgm samples, and jobs have no GPU stats.
    assert after["DCGM_FI_DEV_GPU_UTIL"] == {}
    assert api.get(f"/api/v1/jobs/{job['id']}").json()["gpu_stats"] is None
    gpus = api.get("/api/v1/gpus").json()
    assert gpus[0]["job"] == job["id"] and gpus[0]["util_pct"] is None
    api.post(f"/api/v1/jobs/{waiting['id']}/cancel")
