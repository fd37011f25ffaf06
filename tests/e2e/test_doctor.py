"""`gpuyard doctor` and `submit --check`: the real CLI, real nvidia-ml-py against the fake
libnvidia-ml, real interpreters (with a stand-in torch where a CUDA build is needed)."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.server import GPUYARD, ServerProcess, free_port
from tests.fakeframeworks import write_fake_torch
from tests.fakenvml import build_fake_nvml, fake_nvml_env, gcc_path, write_fake_nvml_state

pytestmark = pytest.mark.skipif(gcc_path() is None, reason="gcc is needed to build fake NVML")

GPUS = [
    ("NVIDIA H200", 143771, "GPU-00000000-aaaa-bbbb-cccc-000000000000", "9.0"),
    ("NVIDIA H200", 143771, "GPU-00000001-aaaa-bbbb-cccc-000000000000", "9.0"),
    ("NVIDIA A100-SXM4-80GB", 81920, "GPU-00000002-aaaa-bbbb-cccc-000000000000", "8.0"),
]


@pytest.fixture(scope="module")
def nvml_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fake_nvml(tmp_path_factory.mktemp("nvml"))


def _no_server(env: dict[str, str]) -> dict[str, str]:
    env["GPUYARD_URL"] = f"http://127.0.0.1:{free_port()}"
    env.pop("PYTHONPATH", None)
    return env


def doctor(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([GPUYARD, "doctor", "--python", sys.executable, *args],
                          capture_output=True, text=True, env=env, timeout=120)  # fmt: skip


def test_doctor_json_reads_driver_cuda_gpus_persistence_and_this_cpu_torch(
    tmp_path: Path, nvml_dir: Path
):
    state = tmp_path / "nvml-state"
    write_fake_nvml_state(state, {1: {"persistence": 0}})
    env = _no_server(fake_nvml_env(nvml_dir, gpus=GPUS, driver_version="550.54.15",
                                   cuda_version=12040, state=state))  # fmt: skip
    result = doctor(env, "--json", "--state-dir", str(tmp_path / "srv"))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["nvidia driver"]["message"] == "driver 550.54.15, 3 GPU(s)"
    assert checks["driver cuda"]["message"] == "the driver supports CUDA up to 12.4"
    assert checks["gpu 0-1"]["message"] == "NVIDIA H200, compute capability 9.0 (sm_90)"
    assert checks["gpu 2"]["message"] == "NVIDIA A100-SXM4-80GB, compute capability 8.0 (sm_80)"
    assert (checks["persistence mode"]["status"], checks["persistence mode"]["message"]) == (
        "warn", "off on GPU 1",
    )  # fmt: skip
    assert checks["state dir disk"]["status"] == "pass"
    assert str(tmp_path / "srv") in checks["state dir disk"]["message"]
    assert checks["server nvml"]["status"] == "info"
    torch = checks["torch"]  # the venv's real torch is a CPU build
    assert torch["status"] == "warn"
    assert "+cpu: CPU-only build, this torch cannot use the GPUs" in torch["message"]
    assert "CUDA <= 12.4" in torch["hint"]
    assert checks["tensorflow"]["message"] == "not installed"
    assert set(c["status"] for c in report["checks"]) <= {"pass", "warn", "info"}
    assert report["summary"] | {"pass": 0, "info": 0} == {
        "pass": 0, "warn": 2, "fail": 0, "info": 0, "ok": True, "gpus": 3,
        "driver": "550.54.15", "cuda": "12.4", "python": sys.executable,
    }  # fmt: skip


def test_doctor_without_nvml_says_so_plainly_and_checks_the_rest(tmp_path: Path):
    env = _no_server(dict(os.environ))
    env["LD_LIBRARY_PATH"] = str(tmp_path)  # nothing there
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
        pytest.skip("this machine has a real NVIDIA driver")
    except OSError:
        pass
    result = doctor(env, "--state-dir", str(tmp_path / "srv"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("INFO  nvidia driver: no NVIDIA GPU/driver found")
    assert any(line.startswith("PASS  state dir disk: ") for line in lines)
    assert any(line.startswith("PASS  torch: torch ") and "CPU-only build" in line
               for line in lines)  # fmt: skip
    assert not any(line.startswith("FAIL") for line in lines)


def test_doctor_exits_1_on_a_failing_check(tmp_path: Path, nvml_dir: Path):
    env = _no_server(fake_nvml_env(nvml_dir, fail_init=18))  # NVML/RM version mismatch
    result = doctor(env)
    assert result.returncode == 1
    assert result.stdout.startswith("FAIL  nvidia driver: NVML failed: ")


@pytest.fixture
def gpu_server(tmp_path: Path, nvml_dir: Path):  # type: ignore[no-untyped-def]
    env = fake_nvml_env(nvml_dir, gpus=GPUS, cuda_version=11080, driver_version="520.61.05")
    env.pop("PYTHONPATH", None)
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    server = ServerProcess(tmp_path / "state", "--gpus", "auto", env=env).start()
    yield server
    server.stop()
    server.kill_jobs()


def test_submit_check_refuses_a_job_built_for_a_newer_cuda_and_queues_nothing(
    tmp_path: Path, gpu_server: ServerProcess
):
    fake = write_fake_torch(tmp_path / "site", version="2.1.0+cu121", cuda="12.1")
    (tmp_path / "train.py").write_text("import torch\n")
    gpu_server.env["PYTHONPATH"] = str(fake)  # the job's env: the CLI exports PYTHONPATH
    result = gpu_server.cli("submit", "--check", "--gpus", "1", "--", "python3", "train.py",
                            check=False, cwd=tmp_path)  # fmt: skip
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(
        "gpuyard: --check refused the job: torch cuda: built for CUDA 12.1, but the driver "
        "supports only CUDA 11.8; upgrade the NVIDIA driver"
    )
    assert gpu_server.client().jobs(all=True) == []
    # `doctor` fails the same torch, and sees that the server found its GPUs through NVML.
    result = gpu_server.cli("doctor", "--json", check=False, cwd=tmp_path)
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert {c["name"]: c["status"] for c in report["checks"]}["torch cuda"] == "fail"
    server_check = next(c for c in report["checks"] if c["name"] == "server nvml")
    assert server_check["status"] == "pass"
    assert "3 GPUs detected by NVML" in server_check["message"]


def test_submit_check_warns_and_queues_a_job_that_can_run(
    tmp_path: Path, gpu_server: ServerProcess
):
    fake = write_fake_torch(tmp_path / "site", version="2.1.0+cu118", cuda="11.8",
                            archs="sm_70 sm_75 compute_80")  # fmt: skip
    gpu_server.env["PYTHONPATH"] = str(fake)
    result = gpu_server.cli("submit", "--check", "--gpus", "1", "--", "python3", "-c", "pass",
                            cwd=tmp_path)  # fmt: skip
    job_id = int(result.stdout)
    assert (
        "gpuyard: --check: torch arch sm_90: GPU 0-1 (NVIDIA H200): no sm_90 kernels, "
        "only compute_80 PTX" in result.stderr
    )
    assert [j["id"] for j in gpu_server.client().jobs(all=True)] == [job_id]
    # A CPU job is not refused for its CUDA build, nor warned about it.
    write_fake_torch(tmp_path / "site", version="2.1.0+cu121", cuda="12.1")
    result = gpu_server.cli("submit", "--check", "--mem", "1G", "--", "python3", "-c", "pass",
                            cwd=tmp_path)  # --mem: no hint of the default memory  # fmt: skip
    assert result.stdout.strip().isdigit() and result.stderr == ""
