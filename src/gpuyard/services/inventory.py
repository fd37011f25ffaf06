"""The resources the server schedules: its GPUs and one node's CPUs and memory."""

from __future__ import annotations

from dataclasses import dataclass

from gpuyard.domain.job import Gpu, NodeCapacity


@dataclass(frozen=True, slots=True)
class Inventory:
    """GPUs (detected or declared) plus node capacity; `source` explains where GPUs came from."""

    gpus: tuple[Gpu, ...]
    node: NodeCapacity
    source: str

    def gpu_indices(self) -> list[int]:
        return [gpu.index for gpu in self.gpus]
