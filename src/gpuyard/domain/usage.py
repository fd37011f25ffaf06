"""`gpuyard usage` (as `sreport`): GPU-hours allocated and used, jobs by final state and mean GPU
utilisation, per user or team, over the jobs that ran since a date. Pure (stdlib only).

Allocated GPU-hours: GPUs x wall time of each job's run, clipped to [since, now] (a job still
running counts up to now), plus its earlier preempted runs (`attained_gpu_s`) if it was
submitted since. Used GPU-hours: what telemetry saw busy, the sampled GPU-seconds times the
mean utilisation (a job with no saved stats, e.g. on a server without NVML, counts as unknown,
not 0, and is left out of the mean). So an admin sees who holds GPUs idle: allocated 100,
used 12, utilisation 12%.

Worked example. Since t=0: alice's 2-GPU job ran 0-3,600 s, sampled at 50% mean (2 GPU-h
allocated, 1 used); her 1-GPU job failed after 1,800 s with no stats (0.5 allocated, unknown).
alice: 2.5 GPU-h allocated, 1.0 used, jobs COMPLETED 1 FAILED 1, utilisation 50%.

Energy: the GPU energy saved with each job's stats (`energy_j`: its GPUs' energy counters, or
power x time), summed in kWh; unknown (None) when no job of the row had a power reading.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuyard.domain.job import Job


@dataclass(slots=True)
class UsageRow:
    """One user's (or team's) figures."""

    key: str
    jobs: int = 0
    states: dict[str, int] = field(default_factory=dict)
    allocated_gpu_h: float = 0.0
    used_gpu_h: float | None = None  # None: no job of theirs was sampled
    util_mean_pct: float | None = None
    _sampled_gpu_s: float = 0.0  # the weights of the mean
    energy_kwh: float | None = None  # its jobs' GPU energy; None: no job had a power reading


def allocated_gpu_s(job: Job, since: float, now: float) -> float:
    """GPU-seconds the job held within [since, now]."""
    held = 0.0
    if job.started_at is not None:
        end = now if job.ended_at is None else min(job.ended_at, now)
        held = job.spec.gpus * max(0.0, end - max(job.started_at, since))
    if job.submitted_at >= since:
        held += job.attained_gpu_s  # earlier runs, ended by a preemption
    return held


def busy_gpu_s(stats: Mapping[str, Any] | None) -> tuple[float, float] | None:
    """(GPU-seconds sampled, of which busy) from a job's saved telemetry; None if never
    sampled."""
    if not stats:
        return None
    samples, util_sum = stats.get("samples") or 0, stats.get("util_sum_pct") or 0.0
    gpu_s = float(stats.get("gpu_s") or 0.0)
    if not samples or gpu_s <= 0:
        return None
    return gpu_s, gpu_s * float(util_sum) / samples / 100.0


def summarise(
    records: Iterable[tuple[Job, Mapping[str, Any] | None]],
    *,
    since: float,
    now: float,
    key_of: Mapping[str, str] | None = None,
) -> list[UsageRow]:
    """Rows by user (or, with `key_of` mapping users to teams, by team; a user in no team
    counts under their own name), sorted by allocated GPU-hours, largest first."""
    rows: dict[str, UsageRow] = {}
    for job, stats in records:
        key = job.owner if key_of is None else key_of.get(job.owner, job.owner)
        row = rows.setdefault(key, UsageRow(key))
        row.jobs += 1
        row.states[job.state.value] = row.states.get(job.state.value, 0) + 1
        row.allocated_gpu_h += allocated_gpu_s(job, since, now) / 3600.0
        joules = (stats or {}).get("energy_j")
        if joules is not None:
            row.energy_kwh = (row.energy_kwh or 0.0) + float(joules) / 3.6e6
        busy = busy_gpu_s(stats)
        if busy is not None:
            sampled, used = busy
            row.used_gpu_h = (row.used_gpu_h or 0.0) + used / 3600.0
            row._sampled_gpu_s += sampled
    for row in rows.values():
        if row.used_gpu_h is not None and row._sampled_gpu_s > 0:
            row.util_mean_pct = 100.0 * row.used_gpu_h * 3600.0 / row._sampled_gpu_s
    return sorted(rows.values(), key=lambda r: (-r.allocated_gpu_h, r.key))
