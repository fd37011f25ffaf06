"""GPU health: which readings mean a GPU must get no more work, and acting on them once.

Worked example. GPU 1 reports XID 79 ("fallen off the bus") while job 7 runs on it. The next
telemetry sample finds it, so GPU 1 is drained (reason "XID 79: the GPU has fallen off the
bus; it needs a reset") and job 7 ends NODE_FAIL. An admin resets the GPU and runs `gpuyard
admin resume 1`; the same XID, still the last one the driver reported, does not drain it
again: only a new failure (another XID event, more uncorrectable ECC errors, the GPU lost
anew) does.

XIDs that need a reset or a reboot, from NVIDIA's XID catalogue; the others (application
errors such as 13 or 31, which one job's bug can cause) leave the GPU in service.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gpuyard.services.jobs.book import JobBook, jobs_by_gpu
from gpuyard.services.machine.gpu_mem import GpuMemLimit
from gpuyard.services.machine.idle import IdleWatch
from gpuyard.services.machine.telemetry import TelemetrySnapshot
from gpuyard.services.ports import GpuReading
from gpuyard.services.scheduler.live import LiveScheduler

log = logging.getLogger("gpuyard.health")

RESET_XIDS: dict[int, str] = {
    48: "double-bit ECC error",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failed",
    74: "NVLink error",
    79: "the GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}


def failure_of(reading: GpuReading) -> str | None:
    """Why this GPU must be drained, or None if it may keep working."""
    if reading.error:
        return f"the GPU cannot be read ({reading.error}); it may have fallen off the bus"
    if reading.ecc_uncorrected:
        return f"{reading.ecc_uncorrected} uncorrectable ECC error(s); the GPU needs a reset"
    if reading.last_xid in RESET_XIDS:
        return f"XID {reading.last_xid}: {RESET_XIDS[reading.last_xid]}; it needs a reset"
    return None


def _signature(reading: GpuReading) -> tuple[object, ...]:
    return (reading.error, reading.ecc_uncorrected, reading.xid_events, reading.last_xid)


class HealthGuard:
    """Drains a GPU the first time a failure shows in its telemetry (called after every
    sample), never twice for the same failure."""

    def __init__(self, drain: Callable[[int, str, str], object]) -> None:
        self._drain = drain
        self._acted: dict[int, tuple[object, ...]] = {}

    def check(self, snapshot: TelemetrySnapshot) -> None:
        for index, gpu in snapshot.gpus.items():
            reason = failure_of(gpu.reading)
            signature = _signature(gpu.reading)
            if reason is None or self._acted.get(index) == signature:
                continue
            self._acted[index] = signature
            self._drain(index, reason, "auto")


def foreign_memory(
    snapshot: TelemetrySnapshot, held: set[int], threshold_mib: int
) -> dict[int, str]:
    """GPUs no running job holds whose listed processes use more than `threshold_mib`: a
    finished job's memory not released yet, or a process gpuyard did not start. A new job must
    not be put there (it would run out of memory). GPUs whose processes NVML cannot list are
    not judged."""
    busy = {}
    for index, gpu in snapshot.gpus.items():
        if index in held or not gpu.processes:
            continue
        used = sum(p.memory_used_mib or 0 for p in gpu.processes)
        if used > threshold_mib:
            pids = ", ".join(str(p.pid) for p in gpu.processes)
            busy[index] = (
                f"GPU {index} still has {used} MiB used by processes that are no running "
                f"job's (pid {pids})"
            )
    return busy


# Clock event reasons that mean the GPU is too hot or at its power limit (not just idle):
# NVML's, then amdsmi's violations (adapters/gpus/amd.py).
_THERMAL_OR_POWER = (
    "sw_thermal", "hw_thermal", "hw_slowdown", "sw_power_cap", "hw_power_brake",
    "processor_hot", "package_power", "socket_thermal", "vr_thermal", "hbm_thermal",
)  # fmt: skip


def hot_gpus(snapshot: TelemetrySnapshot, limit_c: int) -> dict[int, str]:
    """GPUs placement should avoid while an equivalent one is free: at or above `limit_c`, or
    held back by heat or power. The value says why (shown by `gpuyard gpus`)."""
    hot = {}
    for index, gpu in snapshot.gpus.items():
        reading = gpu.reading
        why = []
        if reading.temperature_c is not None and reading.temperature_c >= limit_c:
            why.append(f"{reading.temperature_c} C (limit {limit_c} C)")
        held = [r for r in reading.throttle_reasons or () if r in _THERMAL_OR_POWER]
        if held:
            why.append(f"clocks held back: {', '.join(held)}")
        if why:
            hot[index] = "; ".join(why)
    return hot


@dataclass
class AfterSample:
    """What the server does with each telemetry sample: drain failing GPUs, stop jobs over
    their GPU memory budget, flag (and maybe cancel) idle jobs, keep GPUs with foreign memory
    from new jobs, hand out hot GPUs last."""

    guard: HealthGuard
    idle: IdleWatch
    scheduler: LiveScheduler
    book: JobBook
    foreign_mem_mib: int
    hot_temp_c: int
    gpu_mem_limit: GpuMemLimit | None = None
    on_hot: Callable[[Mapping[int, str]], None] | None = None  # told the hot GPUs (events ring)
    _misplaced: set[tuple[int, int]] = field(default_factory=set)  # (pid, GPU) logged once

    def __call__(self, snapshot: TelemetrySnapshot) -> None:
        self.guard.check(snapshot)
        running = self.book.running()
        if self.gpu_mem_limit is not None:
            self.gpu_mem_limit.check(snapshot, running)
        self.idle.update(snapshot, running)
        holders = {gpu: {job.id for job in jobs} for gpu, jobs in jobs_by_gpu(running).items()}
        self._log_misplaced(snapshot, holders)
        self.scheduler.set_busy(foreign_memory(snapshot, set(holders), self.foreign_mem_mib))
        hot = hot_gpus(snapshot, self.hot_temp_c)
        self.scheduler.set_hot(hot)
        if self.on_hot is not None:
            self.on_hot(hot)

    def _log_misplaced(self, snapshot: TelemetrySnapshot, holders: dict[int, set[int]]) -> None:
        """A job's process on a GPU not allocated to it (it ignored CUDA_VISIBLE_DEVICES):
        logged once per process and GPU; `gpuyard gpus` marks it."""
        for index, gpu in snapshot.gpus.items():
            for proc in gpu.processes or ():
                key = (proc.pid, index)
                misplaced = proc.job_id is not None and proc.job_id not in holders.get(index, ())
                if misplaced and key not in self._misplaced:
                    self._misplaced.add(key)
                    log.warning("job %s's process %s runs on GPU %s, not allocated to it",
                                proc.job_id, proc.pid, index)  # fmt: skip
