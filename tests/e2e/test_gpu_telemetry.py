"""Live GPU telemetry with the real nvidia-ml-py against the project's fake libnvidia-ml:
`gpus`, `top`, `show` and /metrics as a user sees them."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.server import ServerProcess, wait_for
from tests.fakenvml import build_fake_nvml, fake_nvml_env, gcc_path, write_fake_nvml_state

pytestmark = pytest.mark.skipif(gcc_path() is None, reason="gcc is needed to build fake NVML")

H200 = [("NVIDIA H200", 143771, f"GPU-0000000{i}-aaaa-bbbb-cccc-000000000000") for i in range(2)]
BUSY = {"util_gpu": 83, "util_mem": 40, "mem_used_mib": 5000, "temp_c": 71, "power_mw": 612345}


@pytest.fixture(scope="module")
def nvml_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fake_nvml(tmp_path_factory.mktemp("nvml"))


def scrape(server: ServerProcess, token: str | None) -> str:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    req = urllib.request.Request(f"{server.url}/metrics", headers=headers)
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.read().decode()


def test_gpus_top_show_and_metrics_from_live_telemetry(tmp_path: Path, nvml_dir: Path):
    state = tmp_path / "nvml_state"
    write_fake_nvml_state(state, {0: BUSY, 1: BUSY})
    env = fake_nvml_env(
        nvml_dir, gpus=H200, state=state, missing="nvmlDeviceGetPowerUsage",  # an old driver
        GPUYARD_TELEMETRY_S="0.2", COLUMNS="200",  # `top` draws wide when not on a terminal
    )  # fmt: skip
    server = ServerProcess(tmp_path / "state", env=env).start()
    try:
        pidfile = tmp_path / "job.pid"
        job_id = int(server.cli("submit", "--gpus", "1", "--", "sh", "-c",
                                f"echo $$ > {pidfile}; exec sleep 60").stdout)  # fmt: skip
        pid = int(wait_for(lambda: pidfile.exists() and pidfile.read_text().strip()))
        job = json.loads(server.cli("show", str(job_id), "--json").stdout)
        mine, other = job["gpus"][0], 1 - job["gpus"][0]
        # NVML now lists the job's process (3000 MiB) and a stranger's on the job's GPU, and
        # the other GPU raises a critical XID.
        write_fake_nvml_state(
            state, {mine: BUSY, other: {**BUSY, "temp_c": 40, "xid": 79, "xid_events": 1}},
            procs={mine: [(pid, 3000), (os.getpid(), 700)]},
        )  # fmt: skip

        def attributed() -> list[dict[str, object]] | None:
            gpus = json.loads(server.cli("gpus", "--json").stdout)
            listed = gpus[mine]["processes"] or []
            return gpus if any(p["job"] == job_id for p in listed) else None

        gpus = wait_for(attributed, timeout_s=20)
        g, o = gpus[mine], gpus[other]
        assert (g["util_pct"], g["memory_used_mib"], g["temperature_c"]) == (83, 5000, 71)
        assert (g["job"], g["user"], g["detected"]) == (job_id, job["owner"], True)
        procs = {p["pid"]: p for p in g["processes"]}
        assert procs[pid] == {"pid": pid, "memory_used_mib": 3000, "job": job_id,
                              "user": job["owner"], "misplaced": False}  # fmt: skip
        assert procs[os.getpid()]["job"] is None
        assert g["power_w"] is None and g["power_limit_w"] == 700.0  # n/a, no crash
        assert (g["sm_clock_mhz"], g["xid_errors"]) == (1980, 0)
        assert (o["temperature_c"], o["job"], o["xid_errors"], o["last_xid"]) == (40, None, 1, 79)

        table = server.cli("gpus").stdout
        row = next(line for line in table.splitlines() if line.startswith(f"{mine} "))
        assert "83%" in row and "4.9/140.4G" in row and "71C" in row and "n/a" in row
        assert f"{job_id} {job['owner']}" in row and "detected" in row
        assert f"pid {pid}" in table and f"job {job_id} ({job['owner']})" in table
        assert "not a gpuyard job" in table and "XID errors, last XID 79" in table

        def stats_with_memory() -> dict[str, object] | None:
            stats = json.loads(server.cli("show", str(job_id), "--json").stdout)["gpu_stats"]
            return stats if stats and stats["memory_peak_mib"] == 3000 else None

        stats = wait_for(stats_with_memory, timeout_s=10)
        assert (stats["util_mean_pct"], stats["util_peak_pct"]) == (83.0, 83)
        assert 0 < stats["gpu_hours"] < 0.1
        shown = server.cli("show", str(job_id)).stdout
        assert "GpuUtil: mean 83%, peak 83%" in shown and "GpuMemPeak: 2.9G" in shown

        families = {f.name: f for f in text_string_to_metric_families(
            scrape(server, (server.state_dir / "token").read_text().strip()))}  # fmt: skip
        util = {s.labels["gpu"]: s for s in families["DCGM_FI_DEV_GPU_UTIL"].samples}
        assert util[str(mine)].value == 83
        assert util[str(mine)].labels == {
            "gpu": str(mine), "UUID": H200[mine][2],
            "pci_bus_id": f"00000000:{0x18 + mine:02X}:00.0", "device": f"nvidia{mine}",
            "modelName": "NVIDIA H200", "Hostname": util[str(mine)].labels["Hostname"],
            "hostname": util[str(mine)].labels["Hostname"],
            "DCGM_FI_DRIVER_VERSION": "560.35.03", "hpc_job": str(job_id),
        }  # fmt: skip
        assert util[str(other)].labels["hpc_job"] == ""
        fb_used = {s.labels["gpu"]: s.value for s in families["DCGM_FI_DEV_FB_USED"].samples}
        assert fb_used[str(mine)] == 5000
        xid = {s.labels["gpu"]: s.value for s in families["DCGM_FI_DEV_XID_ERRORS"].samples}
        assert xid == {str(mine): 0, str(other): 79}
        assert families["DCGM_FI_DEV_POWER_USAGE"].samples == []  # n/a is left out
        assert families["gpuyard_jobs_running"].samples[0].value == 1
        with pytest.raises(urllib.error.HTTPError) as refused:
            scrape(server, None)
        assert refused.value.code == 401

        top = server.cli("top", "-n", "1").stdout
        assert "83%" in top and f"pid {pid}" in top
        assert any(line.split()[:2] == [str(job_id), "sh"] for line in top.splitlines())

        write_fake_nvml_state(state, {mine: BUSY, other: {"lost": 1}})
        lost = wait_for(lambda: json.loads(server.cli("gpus", "--json").stdout)[other]["error"])
        assert lost == "GPU is lost"
        assert "cannot read this GPU: GPU is lost" in server.cli("gpus").stdout
    finally:
        server.stop()
        server.kill_jobs()
