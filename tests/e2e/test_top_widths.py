"""`gpuyard top` on a narrow terminal: columns go and names shorten first (as nvitop's do), so
each GPU's index, utilisation, memory and temperature stay whole at 80 and at 60 columns.
Drawn at fixed widths (rich takes COLUMNS when not on a terminal) against a real server with
the project's fake NVML."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.e2e.server import GPUYARD, ServerProcess, wait_for
from tests.fakenvml import build_fake_nvml, fake_nvml_env, gcc_path, write_fake_nvml_state

pytestmark = pytest.mark.skipif(gcc_path() is None, reason="gcc is needed to build fake NVML")

H200 = [("NVIDIA H200", 143771, f"GPU-0000000{i}-aaaa-bbbb-cccc-000000000000") for i in range(2)]
BUSY = {"util_gpu": 83, "mem_used_mib": 5000, "temp_c": 71, "power_mw": 612345}
MEMORY = f"{5000 / 1024:.1f}/{143771 / 1024:.1f}G"


def _top(server: ServerProcess, columns: int) -> list[str]:
    env = {**server.cli_env(), "COLUMNS": str(columns)}
    done = subprocess.run([GPUYARD, "top", "-n", "1"], capture_output=True, text=True, env=env,
                          timeout=60, check=True)  # fmt: skip
    return done.stdout.splitlines()


def test_top_keeps_index_util_memory_and_temperature_at_80_and_60_columns(tmp_path: Path):
    nvml = build_fake_nvml(tmp_path / "nvml")
    state = tmp_path / "nvml_state"
    write_fake_nvml_state(state, {0: BUSY, 1: BUSY})
    env = fake_nvml_env(nvml, gpus=H200, state=state, GPUYARD_TELEMETRY_S="0.2")
    server = ServerProcess(tmp_path / "state", env=env).start()
    try:
        job_id = server.cli("submit", "--gpus", "1", "--name", "a-rather-long-job-name", "--",
                            "sleep", "300").stdout.strip()  # fmt: skip
        wait_for(lambda: server.client().job(int(job_id))["state"] == "RUNNING")
        wait_for(lambda: "83%" in "".join(_top(server, 200)))  # telemetry has been read
        for columns in (200, 120, 80, 60):
            lines = _top(server, columns)
            assert all(len(line) <= columns for line in lines), (columns, lines)
            header = next(line for line in lines if line.startswith("GPU "))
            assert header.split()[:1] == ["GPU"] and "UTIL" in header and "TEMP" in header
            for index in (0, 1):
                row = next((line for line in lines if line.split()[:1] == [str(index)]), None)
                assert row is not None, (columns, lines)
                assert "83%" in row and MEMORY in row and "71C" in row, (columns, row)
            job_header = next(line for line in lines if line.startswith("JOBID"))
            assert "PROGRESS" in job_header and "TIME" in job_header, (columns, job_header)
            assert any(line.split()[:1] == [job_id] for line in lines), (columns, lines)
        wide = _top(server, 200)
        assert any("SOURCE" in line and "POWER" in line for line in wide), wide
        assert any("NVIDIA H200" in line for line in wide), wide
        assert any("a-rather-long-job-name" in line for line in wide), wide
    finally:
        server.stop()
        server.kill_jobs()
