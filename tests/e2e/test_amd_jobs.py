"""Jobs on AMD GPUs (issue 16), for real: a job's cgroup denies the other AMD GPUs' render nodes
and leaves /dev/kfd open (v1 devices, nodes made with mknod as the amdgpu driver makes them)."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuyard.adapters.executor.cgroups import DRM_MAJOR, JobCgroups
from tests.e2e.executor_rig import Rig

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
