"""dcgm-exporter's default counter set and per-job GPU energy, from a real server over the
fake libnvidia-ml (the real nvidia-ml-py calls: field values, GPM samples, remapped rows,
energy counter): what a Grafana dashboard and a user's `show`/`usage` see."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e import test_gpu_history_e2e as history
from tests.e2e.server import ServerProcess, wait_for
from tests.fakenvml import fake_nvml_env, gcc_path, write_fake_nvml_state

nvml_dir = history.nvml_dir  # the fake library, built once per module (a fixture)
get = history.get

pytestmark = pytest.mark.skipif(gcc_path() is None, reason="gcc is needed to build fake NVML")

H200 = [("NVIDIA H200", 143771, f"GPU-0000000{i}-aaaa-bbbb-cccc-000000000000") for i in range(2)]
# GPU 0: an SXM board with NVLink and GPM; GPU 1: a PCIe board without either.
SXM = {
    "util_gpu": 83, "util_mem": 40, "mem_used_mib": 5000, "mem_reserved_mib": 512,
    "temp_c": 71, "mem_temp_c": 64, "power_mw": 612345, "sm_clock_mhz": 1980,
    "mem_clock_mhz": 2619, "enc_util": 3, "dec_util": 9, "energy_mj": 123456789,
    "pcie_tx_bytes": 4096 * 1024, "pcie_rx_bytes": 2048 * 1024, "pcie_replay": 2,
    "nvlink_links": 18, "nvlink_tx_kib": 100, "nvlink_rx_kib": 50, "remap_corr": 1,
    "remap_unc": 2, "remap_failure": 1, "tensor_pct": 37, "gr_engine_pct": 88,
    "dram_pct": 45, "xid": 79, "xid_events": 1,
}  # fmt: skip
PCIE = {"nvlink_links": 0, "gpm": 0}


def by_gpu(families: dict[str, Any], name: str) -> dict[str, float]:
    return {s.labels["gpu"]: s.value for s in families[name].samples}


def test_metrics_have_dcgm_exporters_default_counters_where_nvml_gives_them(
    tmp_path: Path, nvml_dir: Path
) -> None:
    state = tmp_path / "nvml_state"
    write_fake_nvml_state(state, {0: {"nvlink_links": 18}, 1: PCIE})  # links: read once
    env = fake_nvml_env(nvml_dir, gpus=H200, state=state, GPUYARD_TELEMETRY_S="0.2")
    server = ServerProcess(tmp_path / "state", env=env).start()
    try:
        write_fake_nvml_state(state, {0: SXM, 1: PCIE})  # the XID is raised after start

        def scraped() -> dict[str, Any] | None:
            found = {f.name: f for f in text_string_to_metric_families(get(server, "/metrics"))}
            tensor = by_gpu(found, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")
            xid = by_gpu(found, "DCGM_FI_DEV_XID_ERRORS")
            return found if tensor.get("0") == 0.37 and xid.get("0") == 79 else None

        found = wait_for(scraped, timeout_s=20)
        expected = {
            "DCGM_FI_DEV_SM_CLOCK": 1980, "DCGM_FI_DEV_MEM_CLOCK": 2619,
            "DCGM_FI_DEV_MEMORY_TEMP": 64, "DCGM_FI_DEV_GPU_TEMP": 71,
            "DCGM_FI_DEV_POWER_USAGE": 612.345, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 123456789,
            "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": 4096, "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": 2048,
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 2, "DCGM_FI_DEV_GPU_UTIL": 83,
            "DCGM_FI_DEV_MEM_COPY_UTIL": 40, "DCGM_FI_DEV_ENC_UTIL": 3, "DCGM_FI_DEV_DEC_UTIL": 9,
            "DCGM_FI_DEV_FB_USED": 5000, "DCGM_FI_DEV_FB_RESERVED": 512,
            "DCGM_FI_DEV_FB_FREE": 143771 - 5000 - 512,
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": 18 * 150,
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 1,
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 2, "DCGM_FI_DEV_ROW_REMAP_FAILURE": 1,
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.37, "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.88,
            "DCGM_FI_PROF_DRAM_ACTIVE": 0.45,
        }  # fmt: skip
        got = {name: by_gpu(found, name).get("0") for name in expected}
        assert got == pytest.approx(expected)
        # NVML without NVLink or GPM on the PCIe board: those are left out for it, not 0.
        for absent in ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"):
            assert "1" not in by_gpu(found, absent), absent
        assert by_gpu(found, "DCGM_FI_DEV_MEMORY_TEMP")["1"] == 45
        # XID: dcgm-exporter's err_code/err_msg labels; the driver version on every series.
        xid = {s.labels["gpu"]: s.labels for s in found["DCGM_FI_DEV_XID_ERRORS"].samples}
        assert (xid["0"]["err_code"], xid["0"]["err_msg"]) == ("79", "GPU has fallen off the bus")
        assert (xid["1"]["err_code"], xid["1"]["err_msg"]) == ("0", "No Error")
        for name in expected:
            for sample in found[name].samples:
                assert sample.labels["DCGM_FI_DRIVER_VERSION"] == "560.35.03", name
    finally:
        server.stop()


def _energy_stats(server: ServerProcess, job_id: int) -> dict[str, Any]:
    return json.loads(server.cli("show", str(job_id), "--json").stdout)["gpu_stats"] or {}


def test_jobs_sharing_a_gpu_each_get_half_its_counted_energy_in_show_and_usage(
    tmp_path: Path, nvml_dir: Path
) -> None:
    state = tmp_path / "nvml_state"
    write_fake_nvml_state(state, {0: {"energy_mj": 1_000_000}})
    env = fake_nvml_env(nvml_dir, gpus=H200[:1], state=state, GPUYARD_TELEMETRY_S="0.2")
    server = ServerProcess(tmp_path / "state", env=env).start()
    try:
        go = tmp_path / "go"
        jobs = [
            int(server.cli("submit", "--gpu-mem", "60G", "--", "sh", "-c",
                           f"while [ ! -e {go} ]; do sleep 0.1; done").stdout)
            for _ in range(2)
        ]  # fmt: skip
        for job_id in jobs:
            wait_for(lambda j=job_id: _energy_stats(server, j).get("samples", 0) > 0)
        # The GPU uses 7.2 kJ (0.002 kWh) while both run: 3.6 kJ each, from the counter.
        write_fake_nvml_state(state, {0: {"energy_mj": 8_200_000}})
        for job_id in jobs:
            wait_for(lambda j=job_id: _energy_stats(server, j).get("energy_j", 0) >= 3600)
        go.touch()
        for job_id in jobs:
            wait_for(lambda j=job_id: _show_state(server, j) == "COMPLETED")
        for job_id in jobs:
            stats = _energy_stats(server, job_id)
            assert (stats["energy_j"], stats["energy_integrated"]) == (3600.0, False)
            shown = server.cli("show", str(job_id)).stdout
            assert "GpuEnergy: 0.0010 kWh (3600 J, from the GPUs' energy counters)" in shown
        [row] = json.loads(server.cli("usage", "--json").stdout)
        assert row["energy_kwh"] == pytest.approx(0.002)
        assert "0.002" in server.cli("usage").stdout.splitlines()[1].split()
    finally:
        server.stop()
        server.kill_jobs()


def _show_state(server: ServerProcess, job_id: int) -> str:
    return str(json.loads(server.cli("show", str(job_id), "--json").stdout)["state"])


def test_without_an_energy_counter_a_jobs_energy_is_its_power_over_time(
    tmp_path: Path, nvml_dir: Path
) -> None:
    state = tmp_path / "nvml_state"
    write_fake_nvml_state(state, {0: {"power_mw": 400000}})
    env = fake_nvml_env(
        nvml_dir, gpus=H200[:1], state=state, GPUYARD_TELEMETRY_S="0.2",
        missing="nvmlDeviceGetTotalEnergyConsumption",  # an old driver
    )  # fmt: skip
    server = ServerProcess(tmp_path / "state", env=env).start()
    try:
        job_id = int(server.cli("submit", "--gpus", "1", "--", "sleep", "2").stdout)
        wait_for(lambda: _show_state(server, job_id) == "COMPLETED", timeout_s=30)
        stats = _energy_stats(server, job_id)
        assert stats["energy_integrated"] is True and stats["sampled_s"] > 0
        # 400 W over the time it was sampled (sampled_s is rounded to the ms: 0.2 J at most)
        assert stats["energy_j"] == pytest.approx(400 * stats["sampled_s"], abs=0.5)
        assert "from power x time" in server.cli("show", str(job_id)).stdout
    finally:
        server.stop()
        server.kill_jobs()
