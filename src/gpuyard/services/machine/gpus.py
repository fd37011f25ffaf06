"""The GPUs as the API shows them: who holds each, its latest telemetry, what a job did with
its GPUs and whether it idles, --gpu-mem advice from earlier runs; and an admin's drain and
resume of a GPU (`jobs/drains.py` records them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuyard.domain.errors import NotFound, Unavailable
from gpuyard.domain.job import Gpu, Job, JobSpec
from gpuyard.domain.principal import Principal
from gpuyard.domain.states import JobState
from gpuyard.services.access.rules import require_admin
from gpuyard.services.jobs.book import JobBook, jobs_by_gpu
from gpuyard.services.jobs.drains import DrainService
from gpuyard.services.machine.gpu_mem import PeakHistory
from gpuyard.services.machine.idle import IdleWatch
from gpuyard.services.machine.machines import MachineView, machine_views
from gpuyard.services.machine.telemetry import (
    EMPTY_SNAPSHOT,
    GpuMonitor,
    GpuTelemetry,
    JobGpuStats,
    TelemetrySnapshot,
)
from gpuyard.services.ports import MachineDirectory, MachineDoctor, MachineNotAnswering
from gpuyard.services.scheduler.inventory import Inventory
from gpuyard.services.scheduler.live import LiveScheduler


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


class GpuDesk:
    """The GPUs' use cases. `monitor` None: no sampling (declared GPUs, a test's rig)."""

    def __init__(
        self,
        inventory: Inventory,
        book: JobBook,
        scheduler: LiveScheduler,
        drains: DrainService,
        *,
        monitor: GpuMonitor | None = None,
        idle: IdleWatch | None = None,
        peaks: PeakHistory | None = None,
    ) -> None:
        self.inventory = inventory
        self._book = book
        self._scheduler = scheduler
        self._drains = drains
        self.monitor = monitor
        self._idle = idle
        self._peaks = peaks or PeakHistory()  # earlier runs' GPU memory, for --gpu-mem advice
        # The machines' agents (set by the server's wiring; None: the inventory alone).
        self.directory: MachineDirectory | None = None
        self.doctor: MachineDoctor | None = None  # each machine's doctor facts (the wiring's)

    def holdings(self) -> list[GpuHolding]:
        """Every GPU with its holders, its latest sample (detected GPUs) and shared memory."""
        holders = jobs_by_gpu(self._book.running())
        sampled = self.telemetry().gpus
        shared = self._scheduler.shared_gpus()
        return [
            GpuHolding(
                gpu,
                tuple(holders.get(gpu.index, ())),
                sampled.get(gpu.index) if gpu.detected else None,
                shared.get(gpu.index),
            )
            for gpu in self.inventory.gpus
        ]

    def machines(self) -> list[MachineView]:
        """Every machine, as `gpuyard nodes` lists them (`machines.py`)."""
        statuses = self.directory.statuses() if self.directory is not None else {}
        drained = set(self._drains.current())
        return machine_views(self.inventory, self._book.running(), drained, statuses)

    def doctor_facts(self, name: str, actor: Principal) -> dict[str, Any]:
        """`gpuyard doctor --node NAME`: that machine's doctor facts, gathered there. Admins
        only: unlike `gpuyard nodes` (anyone's, as `scontrol show node`), they name the
        machine's paths, interpreter and driver."""
        require_admin(actor, f"run the doctor on machine {name}")
        listed = "`gpuyard nodes` lists the machines"
        if self.doctor is None:
            raise Unavailable("this server cannot ask its machines for their doctor facts")
        try:
            facts = self.doctor.doctor_facts(name)
        except MachineNotAnswering as exc:
            raise Unavailable(
                f"machine {name} did not answer the doctor: {exc}; `gpuyard nodes` shows its state"
            ) from exc
        if facts is None:
            raise NotFound(f"no machine named {name!r}: {listed}")
        return facts

    def owner_of(self, job_id: int) -> str | None:
        """Whose job a GPU process belongs to (None: a job no longer kept)."""
        job = self._book.get(job_id)
        return None if job is None else job.owner

    def telemetry(self) -> TelemetrySnapshot:
        """The latest GPU sample (empty without NVML or before the first sample)."""
        return self.monitor.snapshot if self.monitor is not None else EMPTY_SNAPSHOT

    def idle_since(self, job: Job) -> float | None:
        """When a running job's GPUs went idle, once it has been flagged (None: not idle)."""
        if self._idle is None or job.state is not JobState.RUNNING:
            return None
        return self._idle.idle_since(job.id)

    def job_stats(self, job_id: int) -> JobGpuStats | None:
        """What the job did with its GPUs while sampled; None if it never was."""
        return self.monitor.job_stats(job_id) if self.monitor is not None else None

    def hint(self, spec: JobSpec, actor: Principal) -> str | None:
        """Advice for a submission: a --gpu-mem from the peaks of earlier runs of that name."""
        return self._peaks.hint(spec, actor.user, self.inventory.gpu_mem_mib())

    def drain(
        self, gpu_index: int, reason: str, actor: Principal, *, now: bool = False
    ) -> list[Job]:
        """Take a GPU out of service: no new job goes there. Returns the jobs on it: left to
        finish (Slurm's DRAIN), or with `now` stopped and requeued (not failed)."""
        require_admin(actor, f"drain GPU {gpu_index}")
        stopped = self._drains.drain(gpu_index, reason or "drained by an admin", "admin", now=now)
        if now:
            return stopped
        return [job for job in self._book.running() if gpu_index in job.gpus]

    def resume(self, gpu_index: int, actor: Principal) -> None:
        """Put a drained GPU back in service."""
        require_admin(actor, f"resume GPU {gpu_index}")
        self._drains.resume(gpu_index)
