"""The server's GPU telemetry source: NVML for NVIDIA GPUs, amdsmi for AMD ones, both on a
machine that has both (each GPU read through its vendor's library, readings in the order
asked)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from gpuyard.adapters.gpus.amd import AmdSmiTelemetry
from gpuyard.adapters.gpus.nvml import NvmlTelemetry
from gpuyard.domain.job import Gpu
from gpuyard.services.ports import GpuReading, GpuTelemetrySource

log = logging.getLogger("gpuyard.gpus")


def open_gpu_telemetry(gpus: Sequence[Gpu]) -> GpuTelemetrySource:
    """A source for the detected GPUs of `gpus`: NVIDIA ones by their NVML index (the
    server's index: they come first), AMD ones by UUID."""
    amd = {gpu.index: gpu.uuid for gpu in gpus if gpu.detected and gpu.vendor == "amd"}
    nvidia = [gpu.index for gpu in gpus if gpu.detected and gpu.vendor != "amd"]
    if not amd:
        return NvmlTelemetry()
    if not nvidia:
        return AmdSmiTelemetry(amd)
    return MixedTelemetry(nvidia, amd)


class MixedTelemetry:
    """GpuTelemetrySource over both vendors' libraries. One that cannot be opened leaves its
    GPUs unsampled (as telemetry is off on a machine whose driver fails), not the others."""

    def __init__(self, nvidia: Sequence[int], amd: dict[int, str]) -> None:
        self._sources: list[tuple[frozenset[int], GpuTelemetrySource]] = []
        for indices, opener, what in (
            (frozenset(nvidia), NvmlTelemetry, "NVIDIA"),
            (frozenset(amd), lambda: AmdSmiTelemetry(amd), "AMD"),
        ):
            try:
                self._sources.append((indices, opener()))
            except Exception as exc:
                log.warning("telemetry of the %s GPUs is off: %s", what, exc)

    def read(self, indices: Sequence[int], *, processes: bool) -> list[GpuReading]:
        by_index: dict[int, GpuReading] = {}
        for mine, source in self._sources:
            wanted = [i for i in indices if i in mine]
            if wanted:
                by_index.update((r.index, r) for r in source.read(wanted, processes=processes))
        return [by_index[i] for i in indices if i in by_index]

    def close(self) -> None:
        for _, source in self._sources:
            source.close()
