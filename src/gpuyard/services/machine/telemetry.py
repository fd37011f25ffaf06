"""Live GPU telemetry: one sampling thread reads the detected GPUs (1 Hz by default), maps
GPU processes to jobs, keeps per-job GPU stats and publishes an immutable snapshot that
readers take without a lock.

Example: job 7 holds GPU 0; NVML lists pid 4242 on GPU 0 with 3000 MiB, and pid 4242 runs
under job 7's supervisor. The snapshot shows GPU 0's process 4242 as job 7's, and job 7's
stats take GPU 0's utilisation into its mean and peak, 3000 MiB as its memory if that is
its highest yet, and one GPU times the sampling interval into its GPU-seconds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from types import MappingProxyType
from typing import TYPE_CHECKING

from gpuyard.domain.job import Job
from gpuyard.services.jobs.book import JobBook
from gpuyard.services.machine.energy import (
    IntervalEnergy,
    gpu_energy,
    holders_per_gpu,
    job_energy,
)
from gpuyard.services.ports import GpuReading, GpuTelemetrySource, ProcessOwners
from gpuyard.services.scheduler.inventory import Inventory

if TYPE_CHECKING:
    from gpuyard.services.machine.gpu_history import GpuHistory

log = logging.getLogger("gpuyard.telemetry")

PROCESS_PERIOD_S = 2.0  # per-process lists cost milliseconds: sampled less often
_MAX_GAP_INTERVALS = 5  # a stalled sampler must not credit a job with the whole gap
_MAX_JOBS_KEPT = 10_000


@dataclass(frozen=True, slots=True)
class AttributedProcess:
    """A GPU process and the job it runs under (None: not started by gpuyard)."""

    pid: int
    memory_used_mib: int | None
    job_id: int | None


@dataclass(frozen=True, slots=True)
class GpuTelemetry:
    """One GPU's latest reading; `processes` from the latest listing (None: n/a)."""

    reading: GpuReading
    processes: tuple[AttributedProcess, ...] | None


@dataclass(frozen=True, slots=True)
class TelemetrySnapshot:
    """Every sampled GPU at `taken_at` (wall clock, shown to users; 0: nothing sampled yet).
    `monotonic_at` is the same instant on the monotonic clock, which durations are measured on
    (idle time, sample gaps), so a wall-clock step neither cancels an idle job early nor spares
    it; None (a snapshot made by hand) means `taken_at` serves for both."""

    taken_at: float
    gpus: Mapping[int, GpuTelemetry]
    monotonic_at: float | None = None

    @property
    def elapsed_at(self) -> float:
        """The instant to measure durations from: monotonic when known."""
        return self.taken_at if self.monotonic_at is None else self.monotonic_at


EMPTY_SNAPSHOT = TelemetrySnapshot(0.0, MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class JobGpuStats:
    """What a job did with its GPUs while it was sampled."""

    samples: int = 0  # samples with a utilisation reading
    util_sum_pct: float = 0.0
    util_peak_pct: int | None = None
    memory_peak_mib: int | None = None  # all its GPUs together
    gpu_s: float = 0.0  # GPUs held x seconds sampled
    sampled_s: float = 0.0
    memory_peak_per_gpu_mib: int | None = None  # the most on any one GPU (what --gpu-mem caps)
    energy_j: float | None = None  # its GPUs' energy, its share of a shared one (energy.py)
    energy_integrated: bool = False  # some of it from power x time (no energy counter)

    @property
    def util_mean_pct(self) -> float | None:
        return self.util_sum_pct / self.samples if self.samples else None


def job_memory_mib(job_id: int, gpu: GpuTelemetry) -> int | None:
    """The job's memory on a GPU it holds: the sum over its processes when NVML lists them
    (0 if none is the job's), else the GPU's used memory (the GPU is the job's alone). Also
    the GPU's used memory when no listed process can be traced to any job (a container's pid
    namespace hides them)."""
    listed = gpu.processes
    if listed is None:
        return gpu.reading.memory_used_mib
    mine = [p.memory_used_mib for p in listed if p.job_id == job_id]
    if not mine and listed and all(p.job_id is None for p in listed):
        return gpu.reading.memory_used_mib
    if any(m is None for m in mine):
        return gpu.reading.memory_used_mib
    return sum(m for m in mine if m is not None)


def update_stats(
    stats: JobGpuStats | None,
    job: Job,
    gpus: Mapping[int, GpuTelemetry],
    dt_s: float,
    energy: IntervalEnergy | None = None,
) -> JobGpuStats | None:
    """`stats` grown by one sample of `job` on its GPUs (and `energy`, its share of their
    energy since the last sample); None if none of them was sampled."""
    mine = [gpus[i] for i in job.gpus if i in gpus and gpus[i].reading.error is None]
    if not mine:
        return stats
    stats = stats or JobGpuStats()
    if energy is not None:
        stats = replace(
            stats,
            energy_j=(stats.energy_j or 0.0) + energy.joules,
            energy_integrated=stats.energy_integrated or energy.integrated,
        )
    utils = [g.reading.util_pct for g in mine if g.reading.util_pct is not None]
    memories = [m for m in (job_memory_mib(job.id, g) for g in mine) if m is not None]
    if utils:
        stats = replace(
            stats,
            samples=stats.samples + 1,
            util_sum_pct=stats.util_sum_pct + sum(utils) / len(utils),
            util_peak_pct=max(utils + ([stats.util_peak_pct] if stats.util_peak_pct else [])),
        )
    if memories:
        peak = max(sum(memories), stats.memory_peak_mib or 0)
        per_gpu = max(*memories, stats.memory_peak_per_gpu_mib or 0)
        stats = replace(stats, memory_peak_mib=peak, memory_peak_per_gpu_mib=per_gpu)
    return replace(
        stats, gpu_s=stats.gpu_s + len(job.gpus) * dt_s, sampled_s=stats.sampled_s + dt_s
    )


class GpuMonitor:
    """Samples the detected GPUs on one thread; `snapshot` and `job_stats` read its results."""

    def __init__(
        self,
        open_source: Callable[[], GpuTelemetrySource],
        owners: ProcessOwners,
        book: JobBook,
        inventory: Inventory,
        *,
        period_s: float = 1.0,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._open_source = open_source
        self._owners = owners
        self._book = book
        self._inventory = inventory  # read at each sample: a machine may join (its GPUs too)
        self.period_s = period_s
        self._process_every = max(1, round(PROCESS_PERIOD_S / period_s)) if period_s > 0 else 1
        self._clock = clock  # wall: when a sample was taken, as users see it
        self._monotonic = monotonic  # durations between samples
        self._source: GpuTelemetrySource | None = None
        self._ticks = 0
        self._stats: dict[int, JobGpuStats] = {}
        self.snapshot: TelemetrySnapshot = EMPTY_SNAPSHOT
        self.sample_cost_s = 0.0  # CPU seconds spent sampling, for /metrics and the bench
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.on_sample: Callable[[TelemetrySnapshot], None] | None = None
        self.history: GpuHistory | None = None  # every sample kept for charts (gpu_history.py)

    @property
    def _indices(self) -> list[int]:
        return [gpu.index for gpu in self._inventory.gpus if gpu.detected]

    @property
    def enabled(self) -> bool:
        return bool(self._indices) and self.period_s > 0

    def machines_changed(self) -> None:
        """A machine joined: its detected GPUs are sampled from the next sample on (the
        sampler starts now if the server had none to sample)."""
        if self._thread is None and not self._stop.is_set():
            self.start()

    def restore(self, saved: Mapping[int, Mapping[str, object]]) -> None:
        """Finished jobs' stats from the database (a restarted server still shows them)."""
        for job_id, fields in saved.items():
            self._stats[job_id] = JobGpuStats(**fields)  # type: ignore[arg-type]

    def saved_form(self, job_id: int) -> dict[str, object] | None:
        """A job's stats as the database keeps them, or None if it was never sampled."""
        stats = self._stats.get(job_id)
        return None if stats is None else asdict(stats)

    def job_stats(self, job_id: int) -> JobGpuStats | None:
        return self._stats.get(job_id)

    def start(self) -> None:
        if not self.enabled:
            return
        self._thread = threading.Thread(target=self._run, name="gpuyard-telemetry", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.close()

    def close(self) -> None:
        if self._source is not None:
            self._source.close()
            self._source = None

    def _run(self) -> None:
        try:
            self.open()
        except Exception as exc:
            log.warning("GPU telemetry is off: %s", exc)
            return
        next_at = time.monotonic()
        while not self._stop.is_set():
            try:
                self.sample()
            except Exception:  # a bad sample must not end telemetry; the next one retries
                log.exception("GPU telemetry sample failed")
            next_at = max(next_at + self.period_s, time.monotonic())
            self._stop.wait(next_at - time.monotonic())

    def open(self) -> None:
        """Open the telemetry source (NVML init), on the thread that will sample."""
        self._source = self._open_source()

    def sample(self) -> TelemetrySnapshot:
        """Read every GPU once, attribute processes, grow running jobs' stats, publish."""
        assert self._source is not None, "open() first"
        started = time.thread_time()
        now, elapsed = self._clock(), self._monotonic()
        with_processes = self._ticks % self._process_every == 0
        self._ticks += 1
        readings = self._source.read(self._indices, processes=with_processes)
        running = [job for job in self._book.running() if job.gpus]
        previous = self.snapshot
        owners = self._attribute(readings, running) if with_processes else {}
        gpus: dict[int, GpuTelemetry] = {}
        for reading in readings:
            if reading.processes is not None:
                processes: tuple[AttributedProcess, ...] | None = tuple(
                    AttributedProcess(
                        p.pid, p.memory_used_mib, p.job_id if p.attributed else owners.get(p.pid)
                    )
                    for p in reading.processes
                )
            elif not with_processes and reading.index in previous.gpus:
                processes = previous.gpus[reading.index].processes
            else:
                processes = None
            gpus[reading.index] = GpuTelemetry(reading, processes)
        snapshot = TelemetrySnapshot(now, MappingProxyType(gpus), elapsed)
        gap = elapsed - previous.elapsed_at if previous.taken_at else self.period_s
        dt_s = min(max(gap, 0.0), _MAX_GAP_INTERVALS * self.period_s)
        self._grow_stats(running, previous, snapshot, dt_s)
        self.snapshot = snapshot
        if self.history is not None:
            self.history.record(now, {r.index: r for r in readings}, running)
        self.sample_cost_s += time.thread_time() - started
        if self.on_sample is not None:
            self.on_sample(snapshot)  # the health guard: may drain a failing GPU
        return snapshot

    def _attribute(self, readings: Iterable[GpuReading], running: list[Job]) -> dict[int, int]:
        pids = {p.pid for r in readings for p in (r.processes or ()) if not p.attributed}
        if not pids:
            return {}
        supervisors = {j.pid: (j.id, j.pid_started_at) for j in running if j.pid is not None}
        return self._owners.owners(pids, supervisors)

    def _grow_stats(
        self,
        running: list[Job],
        previous: TelemetrySnapshot,
        snapshot: TelemetrySnapshot,
        dt_s: float,
    ) -> None:
        energy = gpu_energy(
            {i: g.reading for i, g in previous.gpus.items()},
            {i: g.reading for i, g in snapshot.gpus.items()},
            dt_s,
        )
        holders = holders_per_gpu(running)
        for job in running:
            share = job_energy(job, energy, holders)
            grown = update_stats(self._stats.get(job.id), job, snapshot.gpus, dt_s, share)
            if grown is not None:
                self._stats[job.id] = grown  # one writer (this thread); readers just `get`
        while len(self._stats) > _MAX_JOBS_KEPT:
            del self._stats[next(iter(self._stats))]
