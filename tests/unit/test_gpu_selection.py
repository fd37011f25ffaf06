"""`--gpus auto|N|LIST` against a stand-in for NVML detection."""

from __future__ import annotations

import pytest

from gpuyard.adapters.gpus.nvml import NvmlUnavailable
from gpuyard.adapters.gpus.select import choose_gpus
from gpuyard.domain.errors import InvalidRequest
from gpuyard.domain.job import Gpu


def two() -> list[Gpu]:
    return [Gpu(i, f"GPU-{i}", "H200", 143771, detected=True) for i in range(2)]


def none() -> list[Gpu]:
    raise NvmlUnavailable("no NVIDIA driver found")


@pytest.mark.parametrize("spec", ["0,0", ",", "1,0,1"])
def test_a_list_must_name_each_gpu_once(spec: str) -> None:
    with pytest.raises(InvalidRequest, match="list each GPU index once"):
        choose_gpus(spec, detect=two)


def test_declared_gpus_without_a_driver() -> None:
    gpus, source = choose_gpus("3", detect=none)
    assert [g.index for g in gpus] == [0, 1, 2] and not any(g.detected for g in gpus)
    assert "declared" in source


def test_count_takes_the_first_detected() -> None:
    gpus, _ = choose_gpus("1", detect=two)
    assert [g.index for g in gpus] == [0] and gpus[0].detected
