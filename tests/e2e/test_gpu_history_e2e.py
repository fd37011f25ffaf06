"""GPU history and per-job /metrics series from a real server over the fake libnvidia-ml: a
job on a GPU has GPU charts with the fake's utilisation and memory while it runs, and still
after the server restarted (the minute buckets in the database); two jobs sharing a GPU
leave it one series in /metrics (a dashboard's sum counts its power once), with both jobs in
`hpc_job` and one `gpuyard_gpu_job_info` series each."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.server import ServerProcess, wait_for
from tests.fakenvml import build_fake_nvml, fake_nvml_env, gcc_path, write_fake_nvml_state

pytestmark = pytest.mark.skipif(gcc_path() is None, reason="gcc is needed to build fake NVML")

H200 = [("NVIDIA H200", 143771, f"GPU-0000000{i}-aaaa-bbbb-cccc-000000000000") for i in range(2)]
BUSY = {"util_gpu": 83, "mem_used_mib": 5000, "temp_c": 71, "power_mw": 612345}
IDLE = {"util_gpu": 0, "mem_used_mib": 0, "temp_c": 30, "power_mw": 60000}


@pytest.fixture(scope="module")
def nvml_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fake_nvml(tmp_path_factory.mktemp("nvml"))


def get(server: ServerProcess, path: str) -> Any:
    token = (server.state_dir / "token").read_text().strip()
    req = urllib.request.Request(server.url + path, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        body = resp.read().decode()
    return body if path == "/metrics" else json.loads(body)


def test_a_jobs_gpu_history_has_the_fakes_samples_and_survives_a_restart(
    tmp_path: Path, nvml_dir: Path
) -> None:
    state = tmp_path / "nvml_state"
    write_fake_nvml_state(state, {0: IDLE, 1: IDLE})
    env = fake_nvml_env(nvml_dir, gpus=H200, state=state, GPUYARD_TELEMETRY_S="0.2")
    server = ServerProcess(tmp_path / "state", env=env).start()
    try:
        job_id = int(server.cli("submit", "--gpus", "1", "--", "sleep", "60").stdout)
        mine = wait_for(lambda: get(server, f"/api/v1/jobs/{job_id}")["gpus"])[0]
        write_fake_nvml_state(state, {mine: BUSY, 1 - mine: IDLE})

        def busy_samples() -> list[list[float | None]] | None:
            history = get(server, f"/api/v1/jobs/{job_id}/gpu-history?max_points=1000")
            assert [g["index"] for g in history["gpus"]] == [mine]
            busy = [s for s in history["gpus"][0]["samples"] if s[1] == 83]
            return busy if len(busy) >= 3 else None

        busy = wait_for(busy_samples, timeout_s=20)
        assert {tuple(s[1:]) for s in busy} == {(83, 5000, 71, 612.345)}
        gpu = get(server, f"/api/v1/gpus/{mine}/history?since=600&max_points=5000")
        assert gpu["uuid"] == H200[mine][2] and gpu["resolution_s"] >= 1  # 1 s at the finest
        assert [83, 5000, 71, 612.345] in [s[1:] for s in gpu["samples"]]
        other = get(server, f"/api/v1/gpus/{1 - mine}/history?since=600")["samples"]
        assert other and {s[1] for s in other} == {0}

        server.cli("cancel", str(job_id))
        wait_for(lambda: get(server, f"/api/v1/jobs/{job_id}")["state"] == "CANCELLED")
        server.stop()  # its GPU history writes the samples not yet in the database
        server.start()
        after = get(server, f"/api/v1/jobs/{job_id}/gpu-history")["gpus"]
        assert [g["index"] for g in after] == [mine] and after[0]["resolution_s"] == 60
        # The minute's means: between idle and busy, from the database (the ring is new).
        [*_, last] = after[0]["samples"]
        assert 0 < last[1] <= 83 and 0 < last[2] <= 5000
    finally:
        server.stop()
        server.kill_jobs()


def test_two_jobs_sharing_a_gpu_leave_it_one_series_whose_power_sums_once(
    tmp_path: Path, nvml_dir: Path
) -> None:
    state = tmp_path / "nvml_state"
    write_fake_nvml_state(state, {0: {**BUSY, "power_mw": 549000}})
    env = fake_nvml_env(nvml_dir, gpus=H200[:1], state=state, GPUYARD_TELEMETRY_S="0.2")
    server = ServerProcess(tmp_path / "state", env=env).start()
    try:
        jobs = [
            int(server.cli("submit", "--gpu-mem", "60G", "--", "sleep", "60").stdout)
            for _ in range(2)
        ]
        for job_id in jobs:
            wait_for(lambda j=job_id: get(server, f"/api/v1/jobs/{j}")["state"] == "RUNNING")
        both = ",".join(str(j) for j in sorted(jobs))

        def families() -> dict[str, Any] | None:
            found = {f.name: f for f in text_string_to_metric_families(get(server, "/metrics"))}
            util = found["DCGM_FI_DEV_GPU_UTIL"].samples
            return found if util and util[0].labels["hpc_job"] == both else None

        found = wait_for(families, timeout_s=20)
        # Grafana's "GPU Power Total" is sum(DCGM_FI_DEV_POWER_USAGE): the 549 W drawn, once.
        power = found["DCGM_FI_DEV_POWER_USAGE"].samples
        assert [s.value for s in power] == [549.0]
        [util] = found["DCGM_FI_DEV_GPU_UTIL"].samples
        assert util.value == 83
        assert {k: v for k, v in util.labels.items() if k not in ("Hostname", "hostname")} == {
            "gpu": "0", "UUID": H200[0][2], "pci_bus_id": "00000000:18:00.0",
            "device": "nvidia0", "modelName": "NVIDIA H200",
            "DCGM_FI_DRIVER_VERSION": "560.35.03", "hpc_job": both,
        }  # fmt: skip
        assert util.labels["Hostname"] == util.labels["hostname"] != ""
        # Which jobs the GPU's series stand for: one info series per job, to select on.
        info = found["gpuyard_gpu_job_info"].samples
        assert sorted(s.labels["hpc_job"] for s in info) == sorted(str(j) for j in jobs)
        assert {(s.labels["UUID"], s.labels["gpu"], s.value) for s in info} == {
            (H200[0][2], "0", 1.0)
        }
    finally:
        server.stop()
        server.kill_jobs()
