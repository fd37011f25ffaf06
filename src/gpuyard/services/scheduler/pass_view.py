"""What a scheduling pass leaves for readers on other threads: an immutable snapshot.

`reason_for` (called on the event loop for every listed job) and `shared_gpus` read the last
`PassView` without any lock: the pass builds a new one at its end and swaps it in whole (one
attribute write), so a reader sees one pass's state or the next's, never a mix, and never waits
for a pass. The GPU-memory shortfall text of the head of the queue is built only when asked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpuyard.domain.units import format_size_mib
from gpuyard.scheduling.cluster import ClusterState
from gpuyard.scheduling.policy import SchedJob, place_job


@dataclass(frozen=True, slots=True)
class MemoryShort:
    """Why the head of the queue, asking for GPU memory, does not fit (numbers of the pass)."""

    gpus: int
    gpu_mem_mib: int
    fits_now: bool
    most_free_shared_mib: int | None
    free_gpus: int

    def text(self) -> str:
        if self.fits_now:
            return "waiting for the next pass"
        most = self.most_free_shared_mib
        shared = "no GPU is shared yet" if most is None else (
            f"most free on a shared GPU: {format_size_mib(most)}"
        )  # fmt: skip
        return (
            f"GPU memory: {format_size_mib(self.gpu_mem_mib)} wanted on "
            f"{_count(self.gpus, 'GPU')}; {shared}, {_count(self.free_gpus, 'whole GPU')} free"
        )


@dataclass(frozen=True, slots=True)
class HostShort:
    """Why the head of the queue waits with GPUs free: a machine's CPUs or memory are taken
    (numbers of the pass, from the machine with the most of it free). Plain `Resources` sent
    users looking at the GPUs."""

    what: str  # "CPUs" or "memory"
    in_use: float
    total: float

    def text(self) -> str:
        if self.what == "CPUs":
            return f"CPUs ({self.in_use:.0f} of {self.total:.0f} in use)"
        used, total = format_size_mib(round(self.in_use)), format_size_mib(round(self.total))
        return f"memory ({used} of {total} in use)"


@dataclass(frozen=True, slots=True)
class GpuShort:
    """Whole GPUs are what a job waits for (of the type it asks for, if any)."""

    in_use: int
    total: int

    def text(self) -> str:
        return f"GPUs ({self.in_use} of {self.total} in use)"


Short = MemoryShort | HostShort | GpuShort


@dataclass(frozen=True, slots=True)
class PassView:
    """What the last pass leaves for readers on other threads; replaced whole, never changed."""

    generation: int = 0
    head: int | None = None  # the pending job next in line
    head_memory: MemoryShort | HostShort | None = None
    assigned: frozenset[int] = frozenset()
    waiting_busy: Mapping[int, str] = field(default_factory=dict)
    shared_free: Mapping[int, int] = field(default_factory=dict)
    # The policy's pending jobs in its order, as the pass that found `head` listed them (the
    # list it built anyway: keeping it costs nothing); ranks are looked up only when asked.
    pending: Sequence[SchedJob] = ()


def head_short(cluster: ClusterState, job: SchedJob | None) -> MemoryShort | HostShort | None:
    """What the head of the queue lacks, in the pass's numbers (None: not pending, or whole
    GPUs are what it waits for: plain `Resources`)."""
    if job is None or job.running:
        return None
    short = waits_for(cluster, job)
    if short is None and job.gpu_mem_mib:  # it fits: the next pass places it
        most, free = cluster.most_free_shared_mib(), cluster.free_gpus
        return MemoryShort(job.gpus, job.gpu_mem_mib, True, most, free)
    return None if isinstance(short, GpuShort) else short


def waits_for(cluster: ClusterState, job: SchedJob) -> Short | None:
    """The resource that keeps `job` from starting on `cluster` now (None: it fits now): GPU
    memory only when that is what is short (a `--gpu-mem` job waiting for a CPU is told CPUs),
    then a machine's CPUs or memory, else whole GPUs."""
    if job.gpu_mem_mib:
        shared = cluster.place(
            job.gpus, 0, 0, job.gpu_mem_mib, nodes=job.nodes, gpu_type=job.gpu_type
        )  # fmt: skip
        if shared is None:
            most, free = cluster.most_free_shared_mib(), cluster.free_gpus
            return MemoryShort(job.gpus, job.gpu_mem_mib, False, most, free)
        if place_job(cluster, job) is None:
            return _host_short_on(cluster, [node for node, _ in shared], job.cpus, job.mem_mib,
                                  job.nodes)  # fmt: skip
        return None
    if place_job(cluster, job) is not None:
        return None
    host = _host_short(cluster, job.gpus, job.cpus, job.mem_mib, job.nodes)
    if host is not None:
        return host
    allowed = cluster.nodes_of_type(job.gpu_type)
    typed = [i for i in range(len(cluster.nodes)) if allowed is None or i in allowed]
    total = sum(cluster.nodes[i].gpus for i in typed)
    return GpuShort(total - sum(cluster.free[i] for i in typed), total)


def _host_short(
    cluster: ClusterState, gpus: int, cpus: int, mem_mib: int, nodes: int
) -> HostShort | None:
    """What a machine lacks for a job whose GPUs are free: CPUs first, then memory; None when
    GPUs are what it waits for (or nothing: the next pass starts it)."""
    per_node = gpus // max(nodes, 1)
    with_gpus = [i for i, free in enumerate(cluster.free) if free >= per_node]
    if len(with_gpus) < nodes or gpus > cluster.free_gpus:
        return None
    return _host_short_on(cluster, with_gpus, cpus, mem_mib, nodes)


def _host_short_on(
    cluster: ClusterState, with_gpus: list[int], cpus: int, mem_mib: int, nodes: int
) -> HostShort | None:
    """CPUs first, then memory, of the machines `with_gpus` (those with the GPUs the job
    needs): what the best of them lacks; None when they have enough."""
    nodes = min(nodes, len(with_gpus))
    if not nodes:
        return None
    cpus_each, mem_each = -(-cpus // nodes), -(-mem_mib // nodes)
    for what, free, want in (
        ("CPUs", cluster.free_cpus, cpus_each),
        ("memory", cluster.free_mem_mib, mem_each),
    ):
        fits = sorted((free[i] for i in with_gpus), reverse=True)
        if fits[nodes - 1] < want:
            best = max(with_gpus, key=lambda i: free[i])
            spec = cluster.nodes[best]
            total = spec.cpus if what == "CPUs" else spec.mem_mib
            if total is not None:
                return HostShort(what, total - free[best], total)
    return None


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")
