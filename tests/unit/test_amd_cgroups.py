"""AMD GPUs' device nodes in a job's cgroup (issue 16): other GPUs' render nodes denied, found
through sysfs by PCI address, /dev/kfd left open; NVIDIA's rule unchanged."""

from __future__ import annotations

from pathlib import Path

from gpuyard.adapters.executor.cgroups import (
    DRM_MAJOR,
    NVIDIA_MAJOR,
    JobLimits,
    denied_devices,
    gpu_device_numbers,
)
from gpuyard.domain.job import Gpu


def _sysfs(root: Path, bdf: str, render: int) -> None:
    drm = root / "bus/pci/devices" / bdf / "drm"
    (drm / f"card{render - 128}").mkdir(parents=True)
    (drm / f"renderD{render}").mkdir()


def _amd(index: int, bdf: str) -> Gpu:
    return Gpu(index, f"u{index}", "AMD Instinct MI300X", 1, True, pci_bus_id=bdf, vendor="amd",
               device_index=index - 2)  # fmt: skip


def test_each_amd_gpu_is_its_render_node_found_by_pci_address(tmp_path: Path) -> None:
    _sysfs(tmp_path, "0000:c1:00.0", 128)
    _sysfs(tmp_path, "0000:c2:00.0", 136)
    gpus = [
        Gpu(0, "GPU-0", "NVIDIA H100", 1, True, pci_bus_id="00000000:3B:00.0", vendor="nvidia"),
        Gpu(1, "GPU-1", "NVIDIA H100", 1, True, vendor="nvidia"),
        _amd(2, "0000:C1:00.0"),
        _amd(3, "0000:c2:00.0"),
        _amd(4, "0000:c3:00.0"),  # no render node under it (a CPX partition): left out
    ]
    assert gpu_device_numbers(gpus, str(tmp_path)) == {
        0: (NVIDIA_MAJOR, 0), 1: (NVIDIA_MAJOR, 1), 2: (DRM_MAJOR, 128), 3: (DRM_MAJOR, 136),
    }  # fmt: skip


def test_a_job_is_denied_every_other_gpus_node_and_never_dev_kfd(tmp_path: Path) -> None:
    devices = ((0, NVIDIA_MAJOR, 0), (1, NVIDIA_MAJOR, 1), (2, DRM_MAJOR, 128),
               (3, DRM_MAJOR, 136))  # fmt: skip

    def denied(own: tuple[int, ...]) -> list[tuple[int, int]]:
        limits = JobLimits(None, None, None, own, (0, 1, 2, 3), devices)
        found = denied_devices(limits, dri=str(tmp_path))  # no other render node present
        # A machine with more /dev/nvidiaN than this inventory denies those too.
        return [(major, minor) for major, minor in found if major != NVIDIA_MAJOR or minor <= 1]

    assert denied((2,)) == [(NVIDIA_MAJOR, 0), (NVIDIA_MAJOR, 1), (DRM_MAJOR, 136)]
    assert denied((0,)) == [(NVIDIA_MAJOR, 1), (DRM_MAJOR, 128), (DRM_MAJOR, 136)]
    assert len(denied(())) == 4
    # /dev/kfd's major is the kernel's choice, never 226: nothing here can name it.
    assert all(major in (NVIDIA_MAJOR, DRM_MAJOR) for major, _ in denied(()))


def test_without_device_numbers_the_nvidia_rule_holds() -> None:
    limits = JobLimits(None, None, None, (1,), (0, 1, 2))
    assert {(NVIDIA_MAJOR, 0), (NVIDIA_MAJOR, 2)} <= set(denied_devices(limits))
    assert (NVIDIA_MAJOR, 1) not in denied_devices(limits)
