"""GPU telemetry of every machine, as one source (`GpuTelemetrySource`) for the server's
monitor: each machine's detected GPUs are read by its own agent, by device index, in one
call per machine per sample, and handed back under the server's indices. So health (XID, ECC,
lost GPUs), idle detection, GPU history, per-job GPU stats and `/metrics` cover every machine
with the code that covers one box.

A machine whose agent does not answer is left out of that sample (its GPUs show no reading,
as a GPU whose driver stopped answering does). The compute processes another machine's GPU
lists come attributed by that machine's agent (the job each runs under there: its pids are
its own, the server's process table knows nothing of them), so `--gpu-mem` enforcement, OOM
diagnosis and per-job GPU memory hold on every machine; the server's own machine's are
attributed by the server, as on one box.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace

from gpuyard.adapters.ray.agents import AgentGone, AgentLink
from gpuyard.domain.job import Gpu
from gpuyard.services.ports import GpuReading

log = logging.getLogger("gpuyard.gpus")


class ClusterTelemetry:
    """Implements GpuTelemetrySource over the machines' agents."""

    def __init__(
        self, gpus: Callable[[], Sequence[Gpu]], links: Callable[[], dict[str, AgentLink]]
    ) -> None:
        self._gpus = gpus
        self._links = links

    def read(self, indices: Sequence[int], *, processes: bool) -> list[GpuReading]:
        by_index = {gpu.index: gpu for gpu in self._gpus()}
        per_machine: dict[str, list[Gpu]] = {}
        for index in indices:
            gpu = by_index.get(index)
            if gpu is not None and gpu.detected:
                per_machine.setdefault(gpu.node, []).append(gpu)
        links = self._links()
        out: dict[int, GpuReading] = {}
        for name, gpus in per_machine.items():
            link = links.get(name)
            if link is None:
                continue
            device = {(g.index if g.device_index is None else g.device_index): g for g in gpus}
            try:
                readings: list[GpuReading] = link.call(
                    "read_gpus", list(device), processes, not link.local, timeout_s=10
                )
            except AgentGone as exc:
                log.debug("no GPU reading from %s: %s", name, exc)
                continue
            for reading in readings:
                gpu = device.get(reading.index)
                if gpu is not None:
                    out[gpu.index] = replace(reading, index=gpu.index)
        return [out[i] for i in indices if i in out]

    def close(self) -> None:
        """Each agent closes its own library."""
