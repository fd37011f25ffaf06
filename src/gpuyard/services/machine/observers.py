"""The machine's observers of committed job changes, registered on the journal when the server
is built (`bootstrap.build_core`): what a finished job leaves for the GPUs' side."""

from __future__ import annotations

from collections.abc import Callable

from gpuyard.services.jobs.journal import JobChange
from gpuyard.services.machine.gpu_mem import PeakHistory
from gpuyard.services.machine.telemetry import GpuMonitor
from gpuyard.services.ports import JobStore


def finished_job_stats(
    store: JobStore, monitor: GpuMonitor, peaks: PeakHistory
) -> Callable[[JobChange], None]:
    """After the lock: a job that ended for good keeps its GPU stats across restarts, and its
    per-GPU peak memory feeds `submit`'s --gpu-mem advice (a removal, `clean`, is no end)."""

    def observe(change: JobChange) -> None:
        job = change.after
        if not job.state.is_terminal or (change.before and change.before.state.is_terminal):
            return
        saved = monitor.saved_form(job.id)
        if saved is not None:
            store.save_gpu_stats(job.id, saved)
        stats = monitor.job_stats(job.id)
        if stats is not None and stats.memory_peak_per_gpu_mib:
            peaks.record(job.owner, job.spec.name, stats.memory_peak_per_gpu_mib)

    return observe
