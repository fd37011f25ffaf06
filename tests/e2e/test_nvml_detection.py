"""`--gpus auto|N|LIST` with the real nvidia-ml-py against the project's fake libnvidia-ml."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.e2e.server import GPUYARD, ServerProcess
from tests.fakenvml import build_fake_nvml, fake_nvml_env, gcc_path

pytestmark = pytest.mark.skipif(gcc_path() is None, reason="gcc is needed to build fake NVML")

H200 = [("NVIDIA H200", 143771, f"GPU-0000000{i}-aaaa-bbbb-cccc-000000000000") for i in range(3)]


@pytest.fixture(scope="module")
def nvml_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fake_nvml(tmp_path_factory.mktemp("nvml"))


def _serve(tmp_path: Path, env: dict[str, str], *args: str) -> ServerProcess:
    return ServerProcess(tmp_path / "state", *args, env=env).start()


def test_auto_detects_gpus_through_nvml(tmp_path: Path, nvml_dir: Path):
    server = _serve(tmp_path, fake_nvml_env(nvml_dir, gpus=H200))
    try:
        gpus = json.loads(server.cli("gpus", "--json").stdout)
        assert [(g["index"], g["name"], g["memory_total_mib"], g["detected"]) for g in gpus] == [
            (i, "NVIDIA H200", 143771, True) for i in range(3)
        ]
        assert [g["uuid"] for g in gpus] == [u for _, _, u in H200]
        assert "detected" in server.cli("gpus").stdout
        job = server.cli("submit", "--gpus", "3", "--", "sh", "-c", "echo $CUDA_VISIBLE_DEVICES")
        server.cli("wait", job.stdout.strip())
        assert server.cli("logs", job.stdout.strip()).stdout == "0,1,2\n"
    finally:
        server.stop()


def test_list_restricts_to_those_gpus(tmp_path: Path, nvml_dir: Path):
    server = _serve(tmp_path, fake_nvml_env(nvml_dir, gpus=H200), "--gpus", "0,2")
    try:
        gpus = json.loads(server.cli("gpus", "--json").stdout)
        assert [g["index"] for g in gpus] == [0, 2]
        job = server.cli("submit", "--gpus", "2", "--", "sh", "-c", "echo $CUDA_VISIBLE_DEVICES")
        server.cli("wait", job.stdout.strip())
        assert server.cli("logs", job.stdout.strip()).stdout == "0,2\n"
    finally:
        server.stop()


def test_auto_without_a_driver_starts_with_zero_gpus_and_says_so(tmp_path: Path, nvml_dir: Path):
    server = _serve(tmp_path, fake_nvml_env(nvml_dir, fail_init=True))
    try:
        assert json.loads(server.cli("gpus", "--json").stdout) == []
        assert "no GPUs" in server.cli("gpus").stdout
        assert "0 GPUs: no NVIDIA driver found" in server.log.read_text()
        refused = server.cli("submit", "--gpus", "1", "--", "true", check=False)
        assert "asks for 1 GPU but this server has 0 GPUs" in refused.stderr
        cpu_job = server.cli("submit", "--", "true").stdout.strip()
        assert server.cli("wait", cpu_job).returncode == 0
    finally:
        server.stop()


def test_list_of_missing_gpus_is_refused_at_start(tmp_path: Path, nvml_dir: Path):
    state = tmp_path / "state"
    result = subprocess.run(
        [GPUYARD, "server", "--state-dir", str(state), "--port", "1", "--gpus", "0,7"],
        capture_output=True, text=True, env=fake_nvml_env(nvml_dir, gpus=H200), timeout=60,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip().endswith("--gpus 0,7: no GPU with index 7 (detected: 0, 1, 2)")
    assert "Traceback" not in result.stderr
