"""The resources the server schedules: its GPUs and one node's CPUs and memory."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuyard.domain.job import Gpu, NodeCapacity
from gpuyard.services.ports import ContainerRuntime


@dataclass(slots=True)
class Inventory:
    """GPUs (detected or declared) plus node capacity; `source` explains where GPUs came from.
    On a Ray cluster (`--backend ray`) there are several machines: `node` is the first, `others`
    the rest, and each GPU's `node` names its machine (indices are unique across machines).

    One object, shared by every part of the server that reads it: a machine that joins a
    running cluster is added in place (`add_machine`), never replaced, so each reader sees it
    at its next read. Its tuples are swapped whole: a reader's tuple is never changed."""

    gpus: tuple[Gpu, ...]
    node: NodeCapacity
    source: str
    others: tuple[NodeCapacity, ...] = ()
    # Whether jobs may share GPUs (`--gpu-mem`): not on Ray, which hands out whole GPUs and
    # chooses which one a job gets.
    sharing: bool = True
    # What runs a `--container` job here (found on the server's PATH at start); None: none,
    # such a job is refused at submit.
    container_runtime: ContainerRuntime | None = None

    def add_machine(self, node: NodeCapacity, gpus: Sequence[Gpu]) -> int:
        """A machine that joined, its GPUs numbered after every GPU known (their `node` is its
        name). Returns its index in `nodes`. Its machine first, then its GPUs: a reader never
        sees a GPU of a machine it cannot find."""
        first = len(self.gpus)
        if [gpu.index for gpu in gpus] != list(range(first, first + len(gpus))):
            raise ValueError(f"machine {node.name}'s GPUs must be numbered from {first}")
        self.others = (*self.others, node)
        self.gpus = (*self.gpus, *gpus)
        return len(self.others)

    @property
    def nodes(self) -> tuple[NodeCapacity, ...]:
        return (self.node, *self.others)

    def gpu_indices(self) -> list[int]:
        return [gpu.index for gpu in self.gpus]

    def gpus_of(self, node_name: str) -> list[int]:
        """The GPU indices of one machine (all of them on a single-machine server)."""
        if not self.others:
            return self.gpu_indices()
        return [gpu.index for gpu in self.gpus if gpu.node == node_name]

    def gpu_mem_mib(self) -> int | None:
        """Memory of each GPU, for jobs that share GPUs (`--gpu-mem`): the smallest GPU's, so
        a share fits on whichever GPU it is given; None if any GPU's size is unknown (declared
        without `--gpu-mem-per-gpu`)."""
        sizes = [gpu.memory_total_mib for gpu in self.gpus]
        if not sizes or any(size is None for size in sizes):
            return None
        return min(size for size in sizes if size is not None)
