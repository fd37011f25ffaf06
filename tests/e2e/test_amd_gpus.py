"""AMD GPUs on a real server with `--gpus auto`: AMD's real amdsmi binding against the
project's fake libamd_smi.so (and the fake NVML on the mixed machine). Detection, live
telemetry in `gpuyard gpus`, /metrics under AMD's device-metrics-exporter names, and a GPU
drained on an uncorrectable RAS (ECC) count."""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.server import ServerProcess, wait_for
from tests.fakeamdsmi import (
    amdsmi_missing,
    build_fake_amdsmi,
    fake_amdsmi_env,
    write_fake_amdsmi_state,
)
from tests.fakenvml import build_fake_nvml, fake_nvml_env, write_fake_nvml_state

pytestmark = pytest.mark.skipif(amdsmi_missing() is not None, reason=str(amdsmi_missing()))

MI300X = [("AMD Instinct MI300X", 196592, f"00ff74a1-0000-1000-80aa-00000000000{i}", "gfx942",
           f"SN30{i}", "SPX", "NPS1") for i in range(2)]  # fmt: skip
H200 = [("NVIDIA H200", 143771, f"GPU-0000000{i}-aaaa-bbbb-cccc-000000000000") for i in range(2)]
BUSY = {"gfx_activity": 87, "umc_activity": 35, "vram_used_mib": 5000, "temp_hotspot_c": 72,
        "power_w": 610, "power_limit_w": 750}  # fmt: skip


@pytest.fixture(scope="module")
def rocm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fake_amdsmi(tmp_path_factory.mktemp("rocm"))


@pytest.fixture(scope="module")
def nvml(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fake_nvml(tmp_path_factory.mktemp("nvml"))


def _gpus(server: ServerProcess) -> list[dict]:  # type: ignore[type-arg]
    return json.loads(server.cli("gpus", "--json").stdout)  # type: ignore[no-any-return]


def _job(server: ServerProcess, job_id: int) -> dict:  # type: ignore[type-arg]
    return json.loads(server.cli("show", str(job_id), "--json").stdout)  # type: ignore[no-any-return]


def _metrics(server: ServerProcess) -> dict[str, list]:  # type: ignore[type-arg]
    token = (server.state_dir / "token").read_text().strip()
    req = urllib.request.Request(f"{server.url}/metrics",
                                 headers={"Authorization": f"Bearer {token}"})  # fmt: skip
    with urllib.request.urlopen(req, timeout=10) as resp:
        text = resp.read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_amd_gpus_are_detected_sampled_exported_and_drained_on_uncorrectable_errors(
    tmp_path: Path, rocm: Path, nvml: Path
):
    state = tmp_path / "amd_state"
    write_fake_amdsmi_state(state, {0: {}, 1: {}})
    env = fake_amdsmi_env(
        rocm, MI300X, base=fake_nvml_env(nvml, fail_init=True), state=state,
        GPUYARD_TELEMETRY_S="0.2", GPUYARD_NODE_FAIL_REQUEUES="0",
    )  # fmt: skip
    server = ServerProcess(tmp_path / "state", "--kill-grace", "1", env=env).start()
    try:
        assert "2 GPUs detected by amdsmi" in server.log.read_text()
        gpus = _gpus(server)
        assert [(g["index"], g["name"], g["memory_total_mib"], g["uuid"], g["vendor"], g["arch"],
                 g["serial"], g["compute_partition"], g["memory_partition"], g["detected"])
                for g in gpus] == [
            (i, "AMD Instinct MI300X", 196592, MI300X[i][2], "amd", "gfx942", f"SN30{i}", "SPX",
             "NPS1", True) for i in range(2)
        ]  # fmt: skip

        pidfile = tmp_path / "job.pid"
        job_id = int(server.cli("submit", "--gpus", "1", "--", "sh", "-c",
                                f"echo $$ > {pidfile}; exec sleep 60").stdout)  # fmt: skip
        pid = int(wait_for(lambda: pidfile.exists() and pidfile.read_text().strip()))
        job = _job(server, job_id)
        mine, other = job["gpus"][0], 1 - job["gpus"][0]
        # amdsmi lists the job's process (3000 MiB) and a stranger's; the other GPU is held
        # back at its package power limit.
        write_fake_amdsmi_state(
            state, {mine: BUSY, other: {"violation": 2}},
            procs={mine: [(pid, 3000), (os.getpid(), 700)]},
        )  # fmt: skip

        def attributed() -> list[dict[str, object]] | None:
            listed = _gpus(server)
            return (
                listed if any(p["job"] == job_id for p in listed[mine]["processes"] or []) else None
            )

        g, o = (gpu := wait_for(attributed, timeout_s=20))[mine], gpu[other]
        assert (g["util_pct"], g["memory_util_pct"], g["memory_used_mib"]) == (87, 35, 5000)
        assert (g["temperature_c"], g["power_w"], g["power_limit_w"]) == (72, 610.0, 750.0)
        assert (g["ecc_errors_uncorrected"], g["xid_errors"], g["error"]) == (0, None, None)
        procs = {p["pid"]: p["job"] for p in g["processes"]}
        assert procs == {pid: job_id, os.getpid(): None}
        assert o["throttle_reasons"] == ["package_power"]
        assert o["hot"] == "clocks held back: package_power"
        table = server.cli("gpus").stdout
        row = next(line for line in table.splitlines() if line.startswith(f"{mine} "))
        assert "amd gfx942" in row and "87%" in row and "72C" in row and "610/750W" in row
        assert "clocks held back: package_power" in table

        families = _metrics(server)
        util = {s.labels["gpu_id"]: s for s in families["gpu_gfx_activity"]}
        assert util[str(mine)].value == 87
        assert util[str(mine)].labels == {
            "gpu_id": str(mine), "serial_number": f"SN30{mine}",
            "card_model": "AMD Instinct MI300X", "hostname": util[str(mine)].labels["hostname"],
            "gpu_partition_id": "0", "gpu_compute_partition_type": "spx",
            "gpu_memory_partition_type": "nps1", "gpu_uuid": MI300X[mine][2],
            "job_id": str(job_id), "job_user": job["owner"],
        }  # fmt: skip
        assert util[str(other)].labels["job_id"] == ""
        value = {name: {s.labels["gpu_id"]: s.value for s in families[name]}
                 for name in ("gpu_used_vram", "gpu_total_vram", "gpu_junction_temperature",
                              "gpu_power_usage", "gpu_ecc_uncorrect_total")}  # fmt: skip
        assert value["gpu_used_vram"][str(mine)] == 5000
        assert value["gpu_total_vram"][str(mine)] == 196592
        assert value["gpu_junction_temperature"][str(mine)] == 72
        assert value["gpu_power_usage"][str(mine)] == 610
        assert value["gpu_ecc_uncorrect_total"] == {"0": 0, "1": 0}
        assert families["DCGM_FI_DEV_GPU_UTIL"] == []  # NVIDIA's names: no AMD GPU there

        # RAS: the job's GPU reports uncorrectable ECC errors: it is drained, the job fails.
        write_fake_amdsmi_state(state, {mine: {**BUSY, "ecc_uncorrectable": 2}, other: {}})
        failed = wait_for(lambda: (j := _job(server, job_id))["state"] == "NODE_FAIL" and j)
        assert f"GPU {mine} was taken out of service" in failed["reason"]
        assert "2 uncorrectable ECC error(s)" in failed["reason"]
        drained = _gpus(server)[mine]
        assert drained["drained"] and "uncorrectable ECC" in drained["drain_reason"]
        next_job = int(server.cli("submit", "--gpus", "1", "--", "sleep", "60").stdout)
        wait_for(lambda: _job(server, next_job)["state"] == "RUNNING")
        assert _job(server, next_job)["gpus"] == [other]  # never the drained GPU
    finally:
        server.stop()
        server.kill_jobs()


def test_a_machine_with_nvidia_and_amd_gpus_schedules_and_samples_both(
    tmp_path: Path, rocm: Path, nvml: Path
):
    nv_state, amd_state = tmp_path / "nvml_state", tmp_path / "amd_state"
    write_fake_nvml_state(nv_state, {0: {"util_gpu": 11}, 1: {"util_gpu": 22}})
    write_fake_amdsmi_state(amd_state, {0: {"gfx_activity": 33}, 1: {"gfx_activity": 44}})
    env = fake_amdsmi_env(
        rocm, MI300X, base=fake_nvml_env(nvml, H200, state=nv_state), state=amd_state,
        GPUYARD_TELEMETRY_S="0.2",
    )  # fmt: skip
    server = ServerProcess(tmp_path / "state", env=env).start()
    try:
        assert "4 GPUs detected (2 by NVML, 2 by amdsmi)" in server.log.read_text()

        def sampled() -> list[dict[str, object]] | None:
            listed = _gpus(server)
            return listed if listed[3]["util_pct"] is not None else None

        gpus = wait_for(sampled)
        assert [(g["index"], g["vendor"], g["name"], g["util_pct"]) for g in gpus] == [
            (0, "nvidia", "NVIDIA H200", 11), (1, "nvidia", "NVIDIA H200", 22),
            (2, "amd", "AMD Instinct MI300X", 33), (3, "amd", "AMD Instinct MI300X", 44),
        ]  # fmt: skip
        table = server.cli("gpus").stdout
        assert "nvidia 9.0" in table and "amd gfx942" in table
        # A job's GPUs are all of one kind: two jobs of 2 take the NVIDIA and the AMD pair.
        jobs = [int(server.cli("submit", "--gpus", "2", "--", "sleep", "60").stdout)
                for _ in range(2)]  # fmt: skip
        wait_for(lambda: all(_job(server, j)["state"] == "RUNNING" for j in jobs))
        (job,) = [j for j in jobs if _job(server, j)["gpus"] == [2, 3]]
        families = _metrics(server)
        dcgm = {s.labels["gpu"]: s.value for s in families["DCGM_FI_DEV_GPU_UTIL"]}
        assert dcgm == {"0": 11, "1": 22}
        amd = {s.labels["gpu_id"]: (s.value, s.labels["gpu_uuid"], s.labels["job_id"])
               for s in families["gpu_gfx_activity"]}  # fmt: skip
        assert amd == {"0": (33, MI300X[0][2], str(job)), "1": (44, MI300X[1][2], str(job))}
    finally:
        server.stop()
        server.kill_jobs()


def test_gpu_mem_hard_limit_and_idle_cancel_work_from_amd_readings(
    tmp_path: Path, rocm: Path, nvml: Path
):
    state = tmp_path / "amd_state"
    write_fake_amdsmi_state(state, {0: {"gfx_activity": 60}, 1: {}})
    env = fake_amdsmi_env(
        rocm, MI300X, base=fake_nvml_env(nvml, fail_init=True), state=state,
        GPUYARD_TELEMETRY_S="0.2", GPUYARD_IDLE_AFTER_S="1", GPUYARD_IDLE_CANCEL_S="2",
    )  # fmt: skip
    server = ServerProcess(tmp_path / "state", "--kill-grace", "1", env=env).start()
    try:
        pids = {}
        jobs = []
        for name in ("big", "small"):
            pidfile = tmp_path / f"{name}.pid"
            jobs.append(int(server.cli("submit", "--gpu-mem", "60G", "--", "sh", "-c",
                                       f"echo $$ > {pidfile}; exec sleep 60").stdout))  # fmt: skip
            pids[name] = int(wait_for(lambda p=pidfile: p.exists() and p.read_text().strip()))
        big, small = jobs
        shared = _job(server, big)["gpus"]
        assert shared == _job(server, small)["gpus"]
        busy = shared[0]
        write_fake_amdsmi_state(
            state, {busy: {"gfx_activity": 60}, 1 - busy: {}},
            procs={busy: [(pids["big"], 70_000), (pids["small"], 30_000)]},
        )  # fmt: skip
        ended = wait_for(lambda: (j := _job(server, big))["state"] == "OUT_OF_MEMORY" and j)
        assert f"GpuMemLimit: used 68.4G on GPU {busy}, over its --gpu-mem 60G" in ended["reason"]
        assert _job(server, small)["state"] == "RUNNING"

        idle = int(server.cli("submit", "--gpus", "1", "--", "sleep", "60").stdout)
        wait_for(lambda: _job(server, idle)["state"] == "RUNNING")
        assert _job(server, idle)["gpus"] == [1 - busy]
        cancelled = wait_for(lambda: (j := _job(server, idle))["state"] == "CANCELLED" and j)
        assert cancelled["reason"].startswith("Idle: its GPUs stayed below 5%")
        assert _job(server, small)["state"] == "RUNNING"  # its GPU is busy
    finally:
        server.stop()
        server.kill_jobs()
