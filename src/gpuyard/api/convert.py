"""Conversions between wire models and domain objects, driven by JobSpec's fields.

Only units are parsed here; what makes a spec valid and its defaults are the domain's
(`domain/spec_rules.py`), the same for every front door.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from gpuyard.domain.arrays import parse_array
from gpuyard.domain.job import (
    REASON_NONE,
    Attempt,
    Drain,
    Job,
    JobSpec,
    JobStep,
    display_state,
)
from gpuyard.domain.signals import SIGTERM, parse_signal
from gpuyard.domain.spec_rules import SpecDraft, decide_spec
from gpuyard.domain.states import JobState
from gpuyard.domain.units import parse_duration_s, parse_size_mib
from gpuyard.scheduling.duration_prediction import Prediction
from gpuyard.schemas.v1 import (
    AttemptOut,
    DryRunOut,
    GpuOut,
    GpuProcessOut,
    JobGpuStatsOut,
    JobOut,
    JobSubmitIn,
    ServiceHealthOut,
    StepOut,
)
from gpuyard.services.jobs.submit import DryRun
from gpuyard.services.launch.service_check import HealthState, service_url
from gpuyard.services.machine.gpus import GpuHolding
from gpuyard.services.machine.telemetry import GpuTelemetry, JobGpuStats

# JobSpec fields the wire spells otherwise (units a person writes, a mapping): spec field ->
# (JobSubmitIn field, parse). Every other spec field is read from the wire field of its name.
_FROM_WIRE: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "argv": ("command", tuple),
    "env": ("env", lambda env: tuple(sorted(env.items()))),
    # None: not given; "" is a mistake to point at (`--time ''` is not "unlimited").
    "mem_mib": ("mem", lambda text: 0 if text is None else parse_size_mib(text, field="mem")),
    "time_limit_s": (
        "time_limit",
        lambda text: None if text is None else parse_duration_s(text, field="time_limit"),
    ),
    "gpu_mem_mib": (
        "gpu_mem",
        lambda text: 0 if text is None else parse_size_mib(text, field="gpu_mem"),
    ),
    "stop_signal": ("stop_signal", lambda sig: SIGTERM if sig is None else parse_signal(sig)),
    "retry_on": ("retry_on", tuple),
    "warn_signal": (
        "warn_signal",
        lambda sig: 0 if sig is None else parse_signal(sig, field="warn_signal"),
    ),
    # An array's %N; the indices make one job each (the submit route's part).
    "array_max_running": (
        "array",
        lambda text: 0 if text is None else parse_array(text).max_running,
    ),
    "array": ("array", lambda text: "" if text is None else text.strip()),
    "notify": ("notify", tuple),
    "notify_events": ("notify_events", tuple),
}
_DRAFT_FIELDS: tuple[tuple[str, str, Callable[[Any], Any] | None], ...] = tuple(
    (f.name, *_FROM_WIRE.get(f.name, (f.name, None))) for f in fields(SpecDraft)
)

# JobSpec fields a JobOut carries under another name (`gpus` there is the GPUs held).
_TO_WIRE_NAMES = {"argv": "command", "gpus": "num_gpus"}
# JobSpec fields never sent back, with why: a new field must be carried or listed here.
WRITE_ONLY_SPEC_FIELDS = {
    "env": "may hold secrets (API keys, tokens): a job list or record must not show them",
    "script": "up to 1 MiB per job: every list would carry it; it is in the job's folder",
    "script_index": "only means something with the script, which is not sent back",
    "notify": "webhook URLs often carry a secret (a chat's incoming-hook token)",
}
_TO_WIRE = tuple(
    (f.name, _TO_WIRE_NAMES.get(f.name, f.name))
    for f in fields(JobSpec)
    if f.name not in WRITE_ONLY_SPEC_FIELDS
)


def spec_from_wire(
    body: JobSubmitIn, default_workdir: str | None = None, default_preemptible: bool = False
) -> JobSpec:
    """Parse units, then the domain's rules decide; raises InvalidRequest naming the field.

    `default_workdir`: the server's choice when the client sent no workdir (its home);
    `default_preemptible`: when the client did not say (the server's `--preemptible-default`).
    """
    draft: dict[str, Any] = {}
    for name, wire_name, parse in _DRAFT_FIELDS:
        value = getattr(body, wire_name)
        draft[name] = value if parse is None else parse(value)
    return decide_spec(
        SpecDraft(**draft),
        default_workdir=default_workdir or str(Path.home()),
        default_preemptible=default_preemptible,
    )


def wire_reason(reason: str) -> str | None:
    """A reason as JSON gives it: null when there is none (never the word "None")."""
    return None if reason == REASON_NONE else reason


def spec_to_wire_fields(spec: JobSpec) -> dict[str, Any]:
    """The JobOut fields that come from the spec (write-only ones left out)."""
    out: dict[str, Any] = {}
    for name, wire_name in _TO_WIRE:
        value = getattr(spec, name)
        out[wire_name] = list(value) if type(value) is tuple else value
    return out


def job_to_wire(job: Job, reason: str, log_path: str, **details: Any) -> JobOut:
    """`job`'s JobOut; `details`: the rest of `job_fields`' arguments (estimated start, GPU
    stats, rank...)."""
    return JobOut.model_construct(  # our own values: no need to validate them again
        **job_fields(job, reason, log_path, **details)
    )


def job_fields(
    job: Job,
    reason: str,
    log_path: str,
    estimated_start: float | None = None,
    gpu_stats: JobGpuStats | None = None,
    idle_since: float | None = None,
    estimate_assumes: Literal["preemption"] | None = None,
    service_health: HealthState | None = None,
    rank: tuple[int, int] | None = None,
    *,
    plain: bool = False,
) -> dict[str, Any]:
    """JobOut's fields of `job`. `rank`: a pending job's (place, among) in the policy's order
    (`LiveScheduler.ranks`); `plain`: its nested records as dicts too (a job list encoded
    without building models: `api/wire_json.py`), else as their models."""
    end = job.ended_at if job.ended_at is not None else time.time()
    running_s = end - job.started_at if job.started_at is not None else 0.0
    return dict(
        **spec_to_wire_fields(job.spec),
        id=job.id,
        owner=job.owner,
        state=job.state.value,
        display_state=display_state(job),
        reason=wire_reason(reason),
        gpus=list(job.gpus),
        node=job.node if job.started_at is not None else "",  # where it runs, once it has
        exit_code=job.exit_code,
        submitted_at=_iso(job.submitted_at) or "",
        started_at=_iso(job.started_at),
        ended_at=_iso(job.ended_at),
        runtime_s=round(end - job.started_at, 3) if job.started_at is not None else None,
        log_path=log_path,
        restarts=job.restarts,
        log_dropped_bytes=job.log_dropped_bytes,
        held=job.held,
        restart_of=job.restart_of,
        array_job_id=job.array_job_id,
        array_task_id=job.array_task_id,
        max_rss_kib=job.max_rss_kib,
        cpu_time_s=job.cpu_time_s,
        steps=[step_fields(step) if plain else step_to_wire(step) for step in job.steps],
        attained_gpu_s=round(job.attained_gpu_s + len(job.gpus) * running_s, 3),
        estimated_start_at=_iso(estimated_start),
        estimate_assumes=estimate_assumes,
        attempts=[attempt_fields(a) if plain else attempt_to_wire(a) for a in job.attempts],
        not_before=_iso(job.not_before) if job.state is JobState.PENDING else None,
        idle_since=_iso(idle_since),
        gpu_stats=None if gpu_stats is None
        else gpu_stats_fields(gpu_stats) if plain else gpu_stats_to_wire(gpu_stats),
        service_url=service_url(job),
        service_health=None if service_health is None
        else health_fields(service_health) if plain else health_to_wire(service_health),
        rank=None if rank is None else rank[0],
        rank_among=None if rank is None else rank[1],
    )  # fmt: skip


def health_to_wire(health: HealthState) -> ServiceHealthOut:
    return ServiceHealthOut.model_construct(**health_fields(health))


def health_fields(health: HealthState) -> dict[str, Any]:
    return {
        "state": health.state,
        "since": _iso(health.since),
        "checked_at": _iso(health.checked_at),
        "last_error": health.last_error,
        "failures": health.failures,
    }


def attempt_to_wire(attempt: Attempt) -> AttemptOut:
    return AttemptOut.model_construct(**attempt_fields(attempt))


def attempt_fields(attempt: Attempt) -> dict[str, Any]:
    return {
        "number": attempt.number,
        "started_at": _iso(attempt.started_at),
        "ended_at": _iso(attempt.ended_at),
        "state": attempt.state.value,
        "exit_code": attempt.exit_code,
        "reason": wire_reason(attempt.reason),
        "node": attempt.node,
        "gpus": list(attempt.gpus),
    }


def step_to_wire(step: JobStep) -> StepOut:
    return StepOut.model_construct(**step_fields(step))


def step_fields(step: JobStep) -> dict[str, Any]:
    return {
        "number": step.number,
        "name": step.name,
        "ntasks": step.ntasks,
        "started_at": _iso(step.started_at) or "",
        "ended_at": _iso(step.ended_at),
        "exit_code": step.exit_code,
        "signal": step.signal,
    }


def gpu_stats_to_wire(stats: JobGpuStats) -> JobGpuStatsOut:
    return JobGpuStatsOut(**gpu_stats_fields(stats))


def gpu_stats_fields(stats: JobGpuStats) -> dict[str, Any]:
    mean = stats.util_mean_pct
    return {
        "util_mean_pct": None if mean is None else round(mean, 1),
        "util_peak_pct": stats.util_peak_pct,
        "memory_peak_mib": stats.memory_peak_mib,
        "memory_peak_per_gpu_mib": stats.memory_peak_per_gpu_mib,
        "gpu_hours": round(stats.gpu_s / 3600, 6),
        "sampled_s": round(stats.sampled_s, 3),
        "samples": stats.samples,
        "energy_j": None if stats.energy_j is None else round(stats.energy_j, 3),
        "energy_integrated": stats.energy_integrated,
    }


def dry_run_to_wire(answer: DryRun) -> DryRunOut:
    start = answer.start_at
    return DryRunOut(
        now=_iso(answer.now) or "",
        start_at=_iso(start),
        starts_in_s=None if start is None else round(max(0.0, start - answer.now), 3),
        not_before=_iso(answer.not_before),
        estimate_assumes="preemption" if answer.assumes_preemption else None,
        waits_for=answer.waits_for,
        after_jobs=list(answer.after_jobs),
        **expected_run_fields(answer.expected_run),
    )


def expected_run_fields(expected: Prediction | None) -> dict[str, Any]:
    """`expected_run_s` and `expected_run` of a prediction (both None: nothing known)."""
    if expected is None:
        return {"expected_run_s": None, "expected_run": None}
    return {"expected_run_s": round(expected.expected_s, 3), "expected_run": expected.describe()}


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
        vendor=gpu.vendor,
        arch=gpu.arch,
        serial=gpu.serial,
        compute_partition=gpu.compute_partition,
        memory_partition=gpu.memory_partition,
        drained=drain is not None,
        drain_reason=None if drain is None else drain.reason,
        hot=hot,
        node=gpu.node,
        job=job.id if job else None,
        user=job.owner if job else None,
        jobs=[j.id for j in holding.jobs],
        shared_free_mib=holding.shared_free_mib,
    )
    if live is not None:
        _add_telemetry(out, live, sampled_at, holders, owner_of)
    return out


def _add_telemetry(
    out: GpuOut,
    live: GpuTelemetry,
    sampled_at: float,
    holders: set[int],
    owner_of: Callable[[int], str | None],
) -> None:
    """The GPU's last sample (an error alone when it could not be read) and its processes."""
    r = live.reading
    out.sampled_at = _iso(sampled_at)
    out.error = r.error
    if r.error is not None:
        return
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


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    try:
        return datetime.fromtimestamp(ts, UTC).isoformat()
    except (ValueError, OverflowError, OSError):  # beyond year 9999: no meaningful date
        return None
