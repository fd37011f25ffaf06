"""Conversions between wire models and domain objects."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from gpuyard.domain.errors import InvalidRequest
from gpuyard.domain.job import Drain, Job, JobSpec
from gpuyard.domain.units import parse_duration_s, parse_size_mib
from gpuyard.schemas.v1 import (
    DryRunOut,
    GpuOut,
    GpuProcessOut,
    JobGpuStatsOut,
    JobOut,
    JobSubmitIn,
)
from gpuyard.services.jobs import DryRun, GpuHolding
from gpuyard.services.telemetry import JobGpuStats


def spec_from_wire(body: JobSubmitIn) -> JobSpec:
    """Parse and check a submission; raises InvalidRequest naming the field."""
    if not body.command[0].strip():
        raise InvalidRequest("command: the program to run is empty", field="command")
    workdir = body.workdir or str(Path.home())
    if not os.path.isabs(workdir):
        raise InvalidRequest(f"workdir {workdir!r} must be an absolute path", field="workdir")
    for key, value in body.env.items():
        if not key or "=" in key or "\0" in key:
            raise InvalidRequest(f"env: {key!r} is not a valid variable name", field="env")
        if "\0" in value:
            raise InvalidRequest(f"env: the value of {key} contains a NUL byte", field="env")
    if any("\0" in arg for arg in body.command):
        raise InvalidRequest("command: an argument contains a NUL byte", field="command")
    if "\0" in workdir:
        raise InvalidRequest("workdir contains a NUL byte", field="workdir")
    if body.distributed and body.gpus < 1:
        raise InvalidRequest(
            f"--distributed {body.distributed} runs one process per GPU: ask for --gpus N",
            field="distributed",
        )
    if body.nodes > 1 and (body.gpus < body.nodes or body.gpus % body.nodes):
        raise InvalidRequest(
            f"--nodes {body.nodes} splits the job's GPUs evenly over the nodes: give "
            "--gpus-per-node G (or --gpus a multiple of --nodes)",
            field="nodes",
        )
    if body.nodes > 1 and body.distributed == "tf":
        raise InvalidRequest(
            "--distributed tf over several nodes is not supported yet (TF_CONFIG needs every "
            "worker's address): use torchrun or jax, or one node",
            field="distributed",
        )
    gpu_mem_mib = parse_size_mib(body.gpu_mem, field="gpu_mem") if body.gpu_mem else 0
    if gpu_mem_mib and body.nodes > 1:
        raise InvalidRequest(
            "--gpu-mem shares GPUs of one machine: it cannot be combined with --nodes",
            field="gpu_mem",
        )
    if gpu_mem_mib and body.gpus < 1:
        raise InvalidRequest(
            "--gpu-mem is GPU memory per GPU: ask for --gpus N (1 or more) too", field="gpu_mem"
        )
    return JobSpec(
        argv=tuple(body.command),
        name=body.name or Path(body.command[0]).name,
        workdir=workdir,
        gpus=body.gpus,
        cpus=body.cpus,
        mem_mib=parse_size_mib(body.mem, field="mem") if body.mem else 0,
        time_limit_s=parse_duration_s(body.time_limit, field="time_limit")
        if body.time_limit
        else None,
        priority=body.priority,
        env=tuple(sorted(body.env.items())),
        preemptible=body.preemptible,
        distributed=body.distributed,
        gpu_mem_mib=gpu_mem_mib,
        nodes=body.nodes,
    )


def job_to_wire(
    job: Job,
    reason: str,
    log_path: str,
    estimated_start: float | None = None,
    gpu_stats: JobGpuStats | None = None,
    idle_since: float | None = None,
) -> JobOut:
    spec = job.spec
    end = job.ended_at if job.ended_at is not None else time.time()
    running_s = end - job.started_at if job.started_at is not None else 0.0
    return JobOut.model_construct(  # our own values: no need to validate them again
        id=job.id,
        name=spec.name,
        owner=job.owner,
        state=job.state.value,
        reason=reason,
        command=list(spec.argv),
        gpus=list(job.gpus),
        num_gpus=spec.gpus,
        cpus=spec.cpus,
        mem_mib=spec.mem_mib,
        time_limit_s=spec.time_limit_s,
        priority=spec.priority,
        workdir=spec.workdir,
        node=job.node,
        exit_code=job.exit_code,
        submitted_at=_iso(job.submitted_at) or "",
        started_at=_iso(job.started_at),
        ended_at=_iso(job.ended_at),
        runtime_s=round(end - job.started_at, 3) if job.started_at is not None else None,
        log_path=log_path,
        preemptible=spec.preemptible,
        distributed=spec.distributed,
        gpu_mem_mib=spec.gpu_mem_mib,
        nodes=spec.nodes,
        restarts=job.restarts,
        attained_gpu_s=round(job.attained_gpu_s + len(job.gpus) * running_s, 3),
        estimated_start_at=_iso(estimated_start),
        idle_since=_iso(idle_since),
        gpu_stats=None if gpu_stats is None else gpu_stats_to_wire(gpu_stats),
    )


def gpu_stats_to_wire(stats: JobGpuStats) -> JobGpuStatsOut:
    mean = stats.util_mean_pct
    return JobGpuStatsOut(
        util_mean_pct=None if mean is None else round(mean, 1),
        util_peak_pct=stats.util_peak_pct,
        memory_peak_mib=stats.memory_peak_mib,
        memory_peak_per_gpu_mib=stats.memory_peak_per_gpu_mib,
        gpu_hours=round(stats.gpu_s / 3600, 6),
        sampled_s=round(stats.sampled_s, 3),
        samples=stats.samples,
    )


def dry_run_to_wire(answer: DryRun) -> DryRunOut:
    start = answer.start_at
    return DryRunOut(
        now=_iso(answer.now) or "",
        start_at=_iso(start),
        starts_in_s=None if start is None else round(max(0.0, start - answer.now), 3),
        not_before=_iso(answer.not_before),
    )


def gpu_to_wire(
    holding: GpuHolding,
    owner_of: Callable[[int], str | None],
    sampled_at: float,
    drain: Drain | None = None,
    hot: str | None = None,
) -> GpuOut:
    """A GPU with its telemetry; `owner_of(job_id)` names the user of a process's job."""
    gpu, job, live = holding.gpu, holding.job, holding.telemetry
    holders = {j.id for j in holding.jobs}
    out = GpuOut(
        index=gpu.index,
        uuid=gpu.uuid,
        name=gpu.name,
        memory_total_mib=gpu.memory_total_mib,
        detected=gpu.detected,
        drained=drain is not None,
        drain_reason=None if drain is None else drain.reason,
        hot=hot,
        node=gpu.node,
        job=job.id if job else None,
        user=job.owner if job else None,
        jobs=[j.id for j in holding.jobs],
        shared_free_mib=holding.shared_free_mib,
    )
    if live is None:
        return out
    r = live.reading
    out.sampled_at = _iso(sampled_at)
    out.error = r.error
    if r.error is not None:
        return out
    out.util_pct, out.memory_util_pct = r.util_pct, r.memory_util_pct
    out.memory_used_mib, out.temperature_c = r.memory_used_mib, r.temperature_c
    out.power_w = None if r.power_w is None else round(r.power_w, 1)
    out.power_limit_w = None if r.power_limit_w is None else round(r.power_limit_w, 1)
    out.sm_clock_mhz = r.sm_clock_mhz
    out.throttle_reasons = None if r.throttle_reasons is None else list(r.throttle_reasons)
    out.ecc_errors_corrected, out.ecc_errors_uncorrected = r.ecc_corrected, r.ecc_uncorrected
    out.xid_errors, out.last_xid = r.xid_events, r.last_xid
    if live.processes is not None:
        out.processes = [
            GpuProcessOut(
                pid=p.pid,
                memory_used_mib=p.memory_used_mib,
                job=p.job_id,
                user=None if p.job_id is None else owner_of(p.job_id),
                misplaced=p.job_id is not None and p.job_id not in holders,
            )
            for p in live.processes
        ]
    return out


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    try:
        return datetime.fromtimestamp(ts, UTC).isoformat()
    except (ValueError, OverflowError, OSError):  # beyond year 9999: no meaningful date
        return None
