"""Use cases behind the API: submit, cancel, read jobs and GPUs."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

from gpuyard.domain.errors import Conflict, InvalidRequest, NotFound
from gpuyard.domain.job import Drain, Gpu, Job, JobSpec
from gpuyard.domain.states import JobState
from gpuyard.domain.units import format_size_mib
from gpuyard.services.controller import Controller
from gpuyard.services.gpu_mem import PeakHistory
from gpuyard.services.idle import IdleWatch
from gpuyard.services.inventory import Inventory
from gpuyard.services.jobbook import JobBook, jobs_by_gpu
from gpuyard.services.metrics import QueueMetrics
from gpuyard.services.ports import JobStore
from gpuyard.services.telemetry import (
    EMPTY_SNAPSHOT,
    GpuMonitor,
    GpuTelemetry,
    JobGpuStats,
    TelemetrySnapshot,
)


@dataclass(frozen=True, slots=True)
class GpuHolding:
    """One GPU, the jobs holding it (several on a GPU shared with --gpu-mem), its live
    telemetry (None: not sampled) and, when shared, the GPU memory still free to share."""

    gpu: Gpu
    jobs: tuple[Job, ...] = ()
    telemetry: GpuTelemetry | None = None
    shared_free_mib: int | None = None

    @property
    def job(self) -> Job | None:
        return self.jobs[0] if self.jobs else None


@dataclass(frozen=True, slots=True)
class DryRun:
    """The answer to `submit --dry-run`: the job fits this server; it would start at
    `start_at`. None: not before jobs without a time limit end, or, with `not_before`, not
    before that time (the projection stopped there: a deep queue)."""

    now: float
    start_at: float | None
    not_before: float | None = None


class JobService:
    """The server's use cases; the API is a thin layer over these."""

    def __init__(
        self,
        book: JobBook,
        store: JobStore,
        controller: Controller,
        *,
        clock: Callable[[], float] = time.time,
        monitor: GpuMonitor | None = None,
        metrics: QueueMetrics | None = None,
    ) -> None:
        self.book = book
        self.store = store
        self.controller = controller
        self._clock = clock
        self.monitor = monitor
        self.idle: IdleWatch | None = None  # set by bootstrap when telemetry runs
        self.peaks = PeakHistory()  # earlier runs' GPU memory, for `submit`'s --gpu-mem advice
        self.metrics = metrics or controller.metrics

    @property
    def inventory(self) -> Inventory:
        return self.controller.inventory

    def submit(self, spec: JobSpec, owner: str) -> Job:
        """Validate, store durably, then queue; returns only once the job cannot be lost."""
        job = self._new_job(spec, owner)
        self.store.write([job], [])
        return self._queue(job)

    async def submit_async(self, spec: JobSpec, owner: str) -> Job:
        """`submit` for the event loop: waits for the group commit without holding a thread."""
        job = self._new_job(spec, owner)
        await asyncio.wrap_future(self.store.write_future([job], []))
        return self._queue(job)

    def _new_job(self, spec: JobSpec, owner: str) -> Job:
        self._check_fits(spec)
        return Job(
            id=self.book.allocate_id(),
            spec=spec,
            owner=owner,
            state=JobState.PENDING,
            submitted_at=self._clock(),
        )

    def _queue(self, job: Job) -> Job:
        """Only a durable job enters the queue: the scheduler never starts a job it could lose."""
        # The scheduler hears of it first: a cancel, which needs the job in the book, can then
        # never reach the scheduler before the submit.
        self.controller.scheduler.submitted(job)
        self.book.put(job)
        self.controller.wake()
        self.metrics.submitted()
        return job

    def hint(self, spec: JobSpec, owner: str) -> str | None:
        """Advice for a submission: a --gpu-mem from the peaks of earlier runs of that name."""
        return self.peaks.hint(spec, owner, self.inventory.gpu_mem_mib())

    def job_ended(self, job: Job) -> None:
        """Remember what a finished job used (its peak GPU memory per GPU), for advice."""
        stats = self.gpu_stats(job.id)
        if stats is not None and stats.memory_peak_per_gpu_mib:
            self.peaks.record(job.owner, job.spec.name, stats.memory_peak_per_gpu_mib)

    def get(self, job_id: int) -> Job:
        job = self.book.get(job_id)
        if job is None:
            raise NotFound(f"job {job_id} not found: `gpuyard queue --all` lists every job")
        return job

    def list_jobs(self, *, include_finished: bool) -> list[Job]:
        return self.book.jobs(include_finished=include_finished)

    def cancel(self, job_id: int) -> Job:
        """Cancel a pending job at once; ask a running one to stop (TERM, grace, KILL)."""
        with self.book.mutation_lock:
            job = self.get(job_id)
            if job.state.is_terminal:
                raise Conflict(
                    f"job {job_id} already ended ({job.state.value}); there is nothing to cancel"
                )
            if job.state is JobState.PENDING:
                cancelled = job.transition(
                    JobState.CANCELLED, ended_at=self._clock(), reason="Cancelled by user"
                )
                self.store.write([], [cancelled])
                self.book.put(cancelled)
                self.controller.scheduler.cancelled(job_id, cancelled.ended_at or 0.0)
                self.controller.wake()
                return cancelled
        return self.controller.request_stop(job, JobState.CANCELLED)

    def reason(self, job: Job) -> str:
        return self.controller.reason_for(job)

    def estimated_starts(self, wanted: Collection[int] = ()) -> dict[int, float | None]:
        """Projected start of each pending job: running and started jobs use their whole time
        limit (what Slurm's `squeue --start` assumes); None where no estimate is possible."""
        return self.controller.scheduler.estimated_starts(wanted)

    def dry_run(self, spec: JobSpec, owner: str) -> DryRun:
        """Whether `spec` can ever run here and when it would start, without queueing it."""
        self._check_fits(spec)
        probe_id = self.book.peek_next_id()
        projection = self.controller.scheduler.dry_run(spec, owner, probe_id)
        start = projection.starts[probe_id]
        later_than = None if start is not None or projection.complete else projection.reached_at
        return DryRun(now=self._clock(), start_at=start, not_before=later_than)

    def gpus(self) -> list[GpuHolding]:
        holders = jobs_by_gpu(self.book.running())
        sampled = self.telemetry().gpus
        shared = self.controller.scheduler.shared_gpus()
        return [
            GpuHolding(
                gpu,
                tuple(holders.get(gpu.index, ())),
                sampled.get(gpu.index) if gpu.detected else None,
                shared.get(gpu.index),
            )
            for gpu in self.inventory.gpus
        ]

    def drain(self, gpu_index: int, reason: str, source: str = "admin") -> list[Job]:
        """Take a GPU out of service: no new job goes there; jobs on it end NODE_FAIL."""
        self._gpu(gpu_index)
        return self.controller.drain_gpu(gpu_index, reason or "drained by an admin", source)

    def resume(self, gpu_index: int) -> None:
        """Put a drained GPU back in service."""
        self._gpu(gpu_index)
        if gpu_index not in self.controller.drains:
            raise Conflict(f"GPU {gpu_index} is in service; there is nothing to resume")
        self.controller.resume_gpu(gpu_index)

    def drains(self) -> dict[int, Drain]:
        return dict(self.controller.drains)

    def hot_gpus(self) -> dict[int, str]:
        """GPUs placed last because they are too hot or throttled, and why."""
        return dict(self.controller.scheduler.hot)

    def _gpu(self, gpu_index: int) -> Gpu:
        for gpu in self.inventory.gpus:
            if gpu.index == gpu_index:
                return gpu
        known = ", ".join(str(g.index) for g in self.inventory.gpus) or "none"
        raise NotFound(f"GPU {gpu_index} is not one of this server's GPUs ({known})")

    def telemetry(self) -> TelemetrySnapshot:
        """The latest GPU sample (empty without NVML or before the first sample)."""
        return self.monitor.snapshot if self.monitor is not None else EMPTY_SNAPSHOT

    def idle_since(self, job: Job) -> float | None:
        """When a running job's GPUs went idle, once it has been flagged (None: not idle)."""
        if self.idle is None or job.state is not JobState.RUNNING:
            return None
        return self.idle.idle_since(job.id, self._clock())

    def gpu_stats(self, job_id: int) -> JobGpuStats | None:
        """What the job did with its GPUs while sampled; None if it never was."""
        return self.monitor.job_stats(job_id) if self.monitor is not None else None

    def _check_fits(self, spec: JobSpec) -> None:
        inv = self.inventory
        if spec.gpus > len(inv.gpus):
            raise InvalidRequest(
                f"the job asks for {_gpus(spec.gpus)} but this server has {_gpus(len(inv.gpus))} "
                f"({inv.source}); ask for fewer",
                field="gpus",
            )
        if spec.gpu_mem_mib:
            self._check_gpu_mem(spec)
        self._check_machines(spec)
        # Per machine: a job on several has its CPUs and memory split over them.
        cpus, mem_mib = -(-spec.cpus // spec.nodes), -(-spec.mem_mib // spec.nodes)
        most_cpus = max(node.cpus for node in inv.nodes)
        most_mem = max(node.mem_mib for node in inv.nodes)
        each = " per machine" if spec.nodes > 1 else ""
        if cpus > most_cpus:
            raise InvalidRequest(
                f"the job asks for {cpus} CPUs{each} but this server offers {most_cpus}",
                field="cpus",
            )
        if mem_mib > most_mem:
            raise InvalidRequest(
                f"the job asks for {format_size_mib(mem_mib)} of memory{each} but this server "
                f"offers {format_size_mib(most_mem)}",
                field="mem",
            )
        if not os.path.isdir(spec.workdir):
            raise InvalidRequest(
                f"workdir {spec.workdir!r} does not exist on the server; create it or pass "
                "--workdir",
                field="workdir",
            )

    def _check_machines(self, spec: JobSpec) -> None:
        """A job fits on one machine, or (`--nodes N`) on N machines with its share of GPUs."""
        inv = self.inventory
        sizes = sorted((len(inv.gpus_of(node.name)) for node in inv.nodes), reverse=True)
        if spec.nodes > len(sizes):
            raise InvalidRequest(
                f"the job asks for {spec.nodes} nodes but this server has {len(sizes)} "
                "(multi-node jobs need `gpuyard server --backend ray` on a cluster)",
                field="nodes",
            )
        per_node = spec.gpus_per_node
        if sizes[spec.nodes - 1] < per_node:
            where = "one machine" if spec.nodes == 1 else f"{spec.nodes} machines"
            raise InvalidRequest(
                f"the job asks for {_gpus(per_node)} on {where}, but the largest machines here "
                f"have {', '.join(map(str, sizes[: spec.nodes]))} GPUs; ask for fewer"
                + (" or spread it with --nodes" if spec.nodes == 1 and len(sizes) > 1 else ""),
                field="gpus",
            )

    def _check_gpu_mem(self, spec: JobSpec) -> None:
        if not self.inventory.sharing:
            raise InvalidRequest(
                "--gpu-mem shares GPUs of one machine, but this server runs jobs on Ray, which "
                "gives each job whole GPUs: submit without --gpu-mem",
                field="gpu_mem",
            )
        per_gpu = self.inventory.gpu_mem_mib()
        if per_gpu is None:
            raise InvalidRequest(
                "--gpu-mem shares GPUs by memory, but this server does not know its GPUs' memory "
                "(declared GPUs): start it with --gpu-mem-per-gpu SIZE, or submit without "
                "--gpu-mem for whole GPUs",
                field="gpu_mem",
            )
        if spec.gpu_mem_mib > per_gpu:
            raise InvalidRequest(
                f"--gpu-mem {format_size_mib(spec.gpu_mem_mib)} is more than a GPU here has "
                f"({format_size_mib(per_gpu)}); ask for at most that, or for whole GPUs without "
                "--gpu-mem",
                field="gpu_mem",
            )


def _gpus(count: int) -> str:
    return f"{count} GPU" + ("" if count == 1 else "s")
