"""Jobs on AMD GPUs (issue 16), for real: a job's cgroup denies the other AMD GPUs' render nodes
and leaves /dev/kfd open (v1 devices, nodes made with mknod as the amdgpu driver makes them);
on a real server over the fake libamd_smi.so (and the fake NVML: a mixed machine), a job's
device masks, placement by `--gpu-type` and `--gres=gpu:TYPE:N`, and `gpuyard doctor`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuyard.adapters.executor.cgroups import DRM_MAJOR, JobCgroups
from tests.e2e.executor_rig import Rig
from tests.e2e.server import GPUYARD, ServerProcess, free_port, wait_ended, wait_for
from tests.fakeamdsmi import amdsmi_missing
from tests.fakenvml import build_fake_nvml, fake_nvml_env

KFD_MAJOR = 237  # the kernel picks /dev/kfd's major at load time; any but 226 here


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    cgroups = JobCgroups(
        f"test-{uuid.uuid4().hex[:8]}", all_gpus=(0, 1),
        gpu_devices={0: (DRM_MAJOR, 200), 1: (DRM_MAJOR, 201)},
    )  # fmt: skip
    if os.geteuid() != 0 or not cgroups.available:
        pytest.skip(f"no per-job cgroups here: {cgroups.describe()}")
    r = Rig(tmp_path, cgroups)
    yield r
    r.executor.close()
    cgroups.close()


def test_a_job_on_amd_gpu_1_cannot_open_gpu_0s_render_node_but_opens_kfd(
    rig: Rig, tmp_path: Path
) -> None:
    rig.start(1, "cat /proc/self/cgroup")
    rig.wait_end(1)
    if "devices" not in rig.log(1):
        pytest.skip("no devices controller: GPU device confinement needs cgroup v1 here")
    nodes = tmp_path / "dri"
    nodes.mkdir()
    for name, major, minor in (("renderD200", DRM_MAJOR, 200), ("renderD201", DRM_MAJOR, 201),
                               ("kfd", KFD_MAJOR, 0)):  # fmt: skip
        subprocess.run(["mknod", str(nodes / name), "c", str(major), str(minor)], check=True)
    script = "; ".join(
        f"(exec 3< {nodes}/{name}) 2>&1 | sed 's/^/{name}: /'"
        for name in ("renderD200", "renderD201", "kfd")
    )
    rig.start(2, script + "; true", gpus=(1,))
    assert rig.wait_end(2).exit_code == 0
    lines = {name: [ln for ln in rig.log(2).splitlines() if ln.startswith(name)]
             for name in ("renderD200", "renderD201", "kfd")}  # fmt: skip
    # Denied by the kernel: EPERM. Not denied: ENXIO/ENODEV here (no driver behind the node).
    assert any("Operation not permitted" in ln for ln in lines["renderD200"]), lines
    assert not any("Operation not permitted" in ln for ln in lines["renderD201"]), lines
    assert not any("Operation not permitted" in ln for ln in lines["kfd"]), lines


# -- through a real server on the fake libamd_smi.so (and the fake NVML) ------------------------
needs_fakes = pytest.mark.skipif(amdsmi_missing() is not None, reason=str(amdsmi_missing()))
MI300X = [("AMD Instinct MI300X", 196592, f"00ff74a1-0000-1000-80aa-00000000000{i}", "gfx942")
          for i in range(2)]  # fmt: skip
H200 = [("NVIDIA H200", 143771, f"GPU-0000000{i}-aaaa-bbbb-cccc-000000000000") for i in range(2)]
SHOW_MASKS = ("for v in ROCR_VISIBLE_DEVICES HIP_VISIBLE_DEVICES CUDA_VISIBLE_DEVICES "
              "GPU_DEVICE_ORDINAL; do eval \"echo $v=\\${$v-unset}\"; done")  # fmt: skip


@pytest.fixture(scope="module")
def rocm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.fakeamdsmi import build_fake_amdsmi

    return Path(build_fake_amdsmi(tmp_path_factory.mktemp("rocm")))


@pytest.fixture(scope="module")
def nvml_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fake_nvml(tmp_path_factory.mktemp("nvml"))


def _server(tmp_path: Path, rocm_dir: Path, nvml_dir: Path, nvidia: bool) -> ServerProcess:
    from tests.fakeamdsmi import fake_amdsmi_env

    base = fake_nvml_env(nvml_dir, H200) if nvidia else fake_nvml_env(nvml_dir, fail_init=True)
    # The submitter's own masks (exported by the CLI) must not reach the job's GPUs.
    env = fake_amdsmi_env(rocm_dir, MI300X, base=base, HIP_VISIBLE_DEVICES="7",
                          GPU_DEVICE_ORDINAL="7", CUDA_VISIBLE_DEVICES="7")  # fmt: skip
    return ServerProcess(tmp_path / "state", "--kill-grace", "1", env=env).start()


def _masks(server: ServerProcess, job_id: int) -> dict[str, str]:
    wait_ended(server.client(), job_id)
    out = server.cli("logs", str(job_id)).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def _submit(server: ServerProcess, *args: str) -> int:
    return int(server.cli("submit", *args).stdout)


def _gpus_of(server: ServerProcess, job_id: int) -> list[int]:
    return list(json.loads(server.cli("show", str(job_id), "--json").stdout)["gpus"])


@needs_fakes
def test_a_job_on_amd_gpu_1_sees_rocr_visible_devices_1_and_no_other_mask(
    tmp_path: Path, rocm_dir: Path, nvml_dir: Path
) -> None:
    server = _server(tmp_path, rocm_dir, nvml_dir, nvidia=False)
    try:
        holder = _submit(server, "--gpus", "1", "--", "sleep", "60")
        wait_for(lambda: _gpus_of(server, holder) == [0])
        job = _submit(server, "--gpus", "1", "--gpu-type", "mi300x", "--", "sh", "-c", SHOW_MASKS)
        masks = _masks(server, job)
        assert _gpus_of(server, job) == [1]
        unset = dict.fromkeys(("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES",
                               "GPU_DEVICE_ORDINAL"), "unset")  # fmt: skip
        assert masks == {"ROCR_VISIBLE_DEVICES": "1", **unset}
        refused = server.cli("submit", "--gpu-type", "h100", "--", "true", check=False)
        assert refused.returncode != 0 and "2 x AMD Instinct MI300X (amd)" in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
    finally:
        server.stop()
        server.kill_jobs()


@needs_fakes
def test_on_a_mixed_machine_a_gpu_type_places_the_job_on_its_gpus(
    tmp_path: Path, rocm_dir: Path, nvml_dir: Path
) -> None:
    server = _server(tmp_path, rocm_dir, nvml_dir, nvidia=True)
    try:
        job = _submit(server, "--gpus", "2", "--gpu-type", "mi300x", "--", "sh", "-c", SHOW_MASKS)
        masks = _masks(server, job)
        assert _gpus_of(server, job) == [2, 3]  # the AMD GPUs (after NVML's two)
        # The NVIDIA GPUs hidden from CUDA; HIP told all of ROCR's so it never reads CUDA's.
        assert masks == {"ROCR_VISIBLE_DEVICES": "0,1", "HIP_VISIBLE_DEVICES": "0,1",
                         "CUDA_VISIBLE_DEVICES": "", "GPU_DEVICE_ORDINAL": "unset"}  # fmt: skip
        on_nvidia = _submit(server, "--gpu-type", "nvidia", "--gpus", "1", "--", "sh", "-c",
                            SHOW_MASKS)  # fmt: skip
        masks = _masks(server, on_nvidia)
        assert _gpus_of(server, on_nvidia) == [0]
        assert (masks["CUDA_VISIBLE_DEVICES"], masks["ROCR_VISIBLE_DEVICES"]) == ("0", "")
        # A batch script's --gres names the type as Slurm's does.
        script = tmp_path / "train.sh"
        script.write_text(f"#!/bin/sh\n#SBATCH --gres=gpu:mi300x:1\n{SHOW_MASKS}\n")
        batch = int(
            server.cli("sbatch", "--parsable", str(script), cwd=tmp_path).stdout.split(";")[0]
        )
        assert _masks(server, batch)["ROCR_VISIBLE_DEVICES"] in ("0", "1")
        assert _gpus_of(server, batch)[0] in (2, 3)
        too_many = server.cli("submit", "--gpus", "3", "--", "true", check=False)
        assert too_many.returncode != 0 and "at most 2 of one type" in too_many.stderr
    finally:
        server.stop()
        server.kill_jobs()


@needs_fakes
def test_srun_gpu_bind_binds_each_task_to_its_amd_gpu_by_rocr_visible_devices(
    tmp_path: Path, rocm_dir: Path, nvml_dir: Path
) -> None:
    """On a mixed machine, `srun --gpu-bind=map_gpu:1,0` in a job on both AMD GPUs: each task's
    ROCR_VISIBLE_DEVICES names its one GPU, HIP's mask indexes into it (0), CUDA's still hides
    the NVIDIA GPUs, and GPU_DEVICE_ORDINAL stays unset (it would remap ROCR's again)."""
    server = _server(tmp_path, rocm_dir, nvml_dir, nvidia=True)
    try:
        says = ('echo "t $SLURM_PROCID rocr=$ROCR_VISIBLE_DEVICES hip=$HIP_VISIBLE_DEVICES '
                'cuda=$CUDA_VISIBLE_DEVICES ord=${GPU_DEVICE_ORDINAL-unset}"')  # fmt: skip
        script = tmp_path / "bind.sh"
        script.write_text("#!/bin/sh\n#SBATCH -n 2\n#SBATCH --gres=gpu:mi300x:2\n"
                          f"srun --gpu-bind=map_gpu:1,0 sh -c '{says}'\n")  # fmt: skip
        job = int(server.cli("sbatch", "--parsable", str(script), cwd=tmp_path).stdout)
        assert wait_ended(server.client(), job)["state"] == "COMPLETED"
        log = server.cli("logs", str(job)).stdout
        tasks = sorted(ln for ln in log.splitlines() if ln.startswith("t "))
        assert tasks == ["t 0 rocr=1 hip=0 cuda= ord=unset", "t 1 rocr=0 hip=0 cuda= ord=unset"]
    finally:
        server.stop()
        server.kill_jobs()


_ROCM_TORCH = """\
import types
__version__ = "2.5.1+rocm6.2"
version = types.SimpleNamespace(cuda=None, hip="6.2.41133-dd7f95766")
_C = types.SimpleNamespace(_cuda_getArchFlags=lambda: "gfx90a gfx1100")
backends = types.SimpleNamespace(cudnn=types.SimpleNamespace(version=lambda: None))
cuda = types.SimpleNamespace(is_available=lambda: True, get_arch_list=lambda: [],
                             nccl=types.SimpleNamespace(version=lambda: (2, 20, 5)))
"""


@needs_fakes
def test_doctor_reads_rocm_and_fails_a_torch_without_the_gpus_gfx_target(
    tmp_path: Path, rocm_dir: Path, nvml_dir: Path
) -> None:
    from tests.fakeamdsmi import fake_amdsmi_env

    (tmp_path / "site" / "torch").mkdir(parents=True)
    (tmp_path / "site" / "torch" / "__init__.py").write_text(_ROCM_TORCH)
    env = fake_amdsmi_env(rocm_dir, MI300X, base=fake_nvml_env(nvml_dir, fail_init=True),
                          driver_version="6.10.5", FAKE_ROCM_VERSION="6.4.1",
                          PYTHONPATH=str(tmp_path / "site"),
                          GPUYARD_URL=f"http://127.0.0.1:{free_port()}")  # fmt: skip
    done = subprocess.run([GPUYARD, "doctor", "--json", "--python", sys.executable],
                          capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    report = json.loads(done.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["amd driver"]["message"] == "amdgpu 6.10.5, 2 GPU(s)"
    assert checks["rocm"]["message"] == "ROCm runtime 6.4.1"
    assert checks["amd gpu 0-1"]["message"] == "AMD Instinct MI300X, gfx942"
    assert checks["torch rocm"]["status"] == "pass"
    arch = checks["torch arch gfx942"]
    assert arch["status"] == "fail" and "arch list includes gfx942" in arch["hint"]
    assert done.returncode == 1 and report["summary"]["amd_gpus"] == 2
