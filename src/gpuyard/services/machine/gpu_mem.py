"""GPU memory budgets of jobs that share GPUs (`--gpu-mem`): the hard limit, and the advice
`gpuyard submit` gives from earlier runs.

Worked example. Jobs 7 (`--gpu-mem 8G`) and 9 (`--gpu-mem 20G`) share GPU 0. A sample lists
job 7's process with 9,300 MiB on GPU 0: more than its 8,192 MiB, so job 7 is stopped and ends
OUT_OF_MEMORY ("GpuMemLimit: used 9.1 GiB on GPU 0, over its --gpu-mem 8 GiB ..."); job 9 keeps
running. Next time `gpuyard submit --name <job 7's name> --gpu-mem 8G` says that earlier runs
peaked at 9.1 GiB per GPU and suggests `--gpu-mem 12G`.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable

from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.units import format_size_mib
from gpuyard.services.machine.telemetry import TelemetrySnapshot

_HEADROOM = 1.25  # a suggestion leaves this much over the peak seen
_RUNS_REMEMBERED = 5  # per (owner, name): the suggestion covers the worst of these
_NAMES_REMEMBERED = 10_000


def memory_on_gpu(job: Job, gpu_index: int, snapshot: TelemetrySnapshot) -> int | None:
    """What a job's processes use on one of its GPUs, as NVML counts it; None: not known (no
    process list, a process NVML gives no memory for, or processes it cannot trace to jobs on
    a GPU the job shares)."""
    gpu = snapshot.gpus.get(gpu_index)
    if gpu is None or gpu.processes is None:
        return None
    mine = [p.memory_used_mib for p in gpu.processes if p.job_id == job.id]
    if mine:
        return None if any(m is None for m in mine) else sum(m for m in mine if m is not None)
    return None


def over_budget(snapshot: TelemetrySnapshot, running: Iterable[Job]) -> list[tuple[Job, int, int]]:
    """(job, GPU index, MiB used) for each job using more than its `--gpu-mem` on a GPU."""
    found = []
    for job in running:
        limit = job.spec.gpu_mem_mib
        if not limit or job.stop_intent is not None:
            continue
        for index in job.gpus:
            used = memory_on_gpu(job, index, snapshot)
            if used is not None and used > limit:
                found.append((job, index, used))
                break
    return found


class GpuMemLimit:
    """Stops a job the first time a sample shows it over its GPU memory budget (hard
    enforcement, for any program: the soft cap only binds PyTorch's allocator)."""

    def __init__(
        self,
        stop: Callable[[Job, str], object],
        peak_per_gpu_mib: Callable[[int], int | None],
    ) -> None:
        self._stop = stop
        self._peak = peak_per_gpu_mib
        self._stopped: set[int] = set()

    def check(self, snapshot: TelemetrySnapshot, running: list[Job]) -> None:
        for job, index, used in over_budget(snapshot, running):
            if job.id in self._stopped:
                continue
            self._stopped.add(job.id)
            peak = max(used, self._peak(job.id) or 0)
            limit = job.spec.gpu_mem_mib
            self._stop(
                job,
                f"GpuMemLimit: used {format_size_mib(used)} on GPU {index}, over its --gpu-mem "
                f"{format_size_mib(limit)} (peak {format_size_mib(peak)}); resubmit with "
                f"--gpu-mem {format_size_mib(suggested_mib(peak))} or make it use less",
            )
        if len(self._stopped) > _NAMES_REMEMBERED:
            self._stopped.clear()  # ids only grow; old ones will not be sampled again


def suggested_mib(peak_mib: int) -> int:
    """A --gpu-mem that holds a run that peaked at `peak_mib`: a quarter more, whole GiB."""
    return math.ceil(peak_mib * _HEADROOM / 1024) * 1024


class PeakHistory:
    """Peak GPU memory per GPU of each (owner, job name)'s last runs, for `submit`'s advice.
    Written by the threads that end jobs, read by submits: under a lock."""

    def __init__(self) -> None:
        self._peaks: OrderedDict[tuple[str, str], deque[int]] = OrderedDict()
        self._lock = threading.Lock()

    def record(self, owner: str, name: str, peak_per_gpu_mib: int) -> None:
        key = (owner, name)
        with self._lock:
            runs = self._peaks.pop(key, None) or deque(maxlen=_RUNS_REMEMBERED)
            runs.append(peak_per_gpu_mib)
            self._peaks[key] = runs
            while len(self._peaks) > _NAMES_REMEMBERED:
                self._peaks.popitem(last=False)

    def hint(self, spec: JobSpec, owner: str, gpu_total_mib: int | None) -> str | None:
        """Advice for a submission from earlier runs with the same name, or None."""
        with self._lock:
            runs = list(self._peaks.get((owner, spec.name), ()))
        if not runs or not spec.gpus:
            return None
        peak = max(runs)
        seen = f"earlier runs of {spec.name!r} peaked at {format_size_mib(peak)} per GPU"
        wanted = suggested_mib(peak)
        if spec.gpu_mem_mib and peak > spec.gpu_mem_mib:
            return (
                f"{seen}, more than --gpu-mem {format_size_mib(spec.gpu_mem_mib)}: it may end "
                f"OUT_OF_MEMORY; --gpu-mem {format_size_mib(wanted)} would hold it"
            )
        if not spec.gpu_mem_mib and gpu_total_mib and wanted <= gpu_total_mib // 2:
            return (
                f"{seen}: --gpu-mem {format_size_mib(wanted)} would let it share a GPU "
                f"({format_size_mib(gpu_total_mib)} each) and likely start sooner"
            )
        return None
