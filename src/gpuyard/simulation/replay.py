"""`simulate()`: one trace, replayed once per policy on a fresh cluster, reduced to reports.

Cluster model: `gpus` GPUs in nodes of `gpus_per_node` (a smaller last node takes the rest); a
job of up to one node's GPUs runs on one node, a larger one on whole nodes, all at once; a
preempted job pays `restart_penalty_s` before it makes progress again.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from gpuyard.domain.dependency import parse_dependency
from gpuyard.domain.errors import InvalidRequest
from gpuyard.scheduling.cluster import ClusterState
from gpuyard.scheduling.policies import ORACLES, make_policy, policy_names
from gpuyard.scheduling.quotas import Limits, QuotaRules
from gpuyard.simulation.engine import Replay
from gpuyard.simulation.metrics import PolicyReport, report
from gpuyard.simulation.time_limits import default_mode, with_time_limits
from gpuyard.simulation.trace import TraceJob, load_trace, with_preemptible_fraction

# progress(policy, finished_jobs, total_jobs): at 0, every 1,000 finished jobs, and at the end.
Progress = Callable[[str, int, int], None]


def default_policy() -> str:
    """The server's default policy when there is one, else the `fifo` baseline."""
    return "default" if "default" in policy_names() else "fifo"


def simulate(
    trace_path: Path,
    gpus: int,
    gpus_per_node: int = 8,
    policies: Sequence[str] | None = None,
    restart_penalty_s: float = 60.0,
    progress: Progress | None = None,
    preemptible_fraction: float | None = None,
    max_gpus_per_user: int | None = None,
    time_limits: str | None = None,
    explain: int | None = None,
) -> list[PolicyReport]:
    """Replay the trace under each policy (default: `default_policy()`), in the given order.
    `preemptible_fraction`: only about this share of the jobs may be preempted (None: every
    job the trace does not mark `no_preempt`). `max_gpus_per_user`: every user of the trace
    may hold at most this many GPUs at once (the live quota gate, QOSMaxGpuPerUser).
    `time_limits`: none, trace or padded (`time_limits.py`; None: trace if the trace has any,
    else none); a job past its limit is killed there. `explain`: a trace job id whose rank and
    factors each report carries (`PolicyReport.explained`), at its first start."""
    names = list(policies) if policies is not None else [default_policy()]
    _check_request(gpus, gpus_per_node, names, restart_penalty_s)
    trace = load_trace(Path(trace_path))
    if preemptible_fraction is not None:
        trace = with_preemptible_fraction(trace, preemptible_fraction)
    limits_mode = time_limits if time_limits is not None else default_mode(trace)
    trace = with_time_limits(trace, limits_mode)
    _check_trace(trace, ClusterState.uniform(gpus, gpus_per_node), gpus, gpus_per_node)
    if explain is not None and all(t.id != explain for t in trace):
        raise InvalidRequest(f"--explain {explain}: the trace has no job {explain}",
                             field="explain")  # fmt: skip
    quotas = None
    if max_gpus_per_user is not None:
        quotas = _per_user_quota(trace, max_gpus_per_user)
    reports = []
    trace_has_limits = any(t.time_limit_s for t in trace)
    for name in names:
        policy = make_policy(name)
        exact = bool(getattr(policy, "uses_time_limits", False)) and not trace_has_limits
        replay = Replay(
            trace,
            policy,
            ClusterState.uniform(gpus, gpus_per_node),
            restart_penalty_s=restart_penalty_s,
            expose_durations=name in ORACLES,
            exact_time_limits=exact,
            quotas=quotas,
            explain=explain,
        )
        if progress is None:
            result = replay.run()
        else:
            progress(name, 0, len(trace))
            result = replay.run(progress=_bind(progress, name, len(trace)))
            progress(name, len(trace), len(trace))
        reports.append(
            replace(
                report(name, result),
                time_limits="exact" if exact else limits_mode,
                preemptible=sum(t.preemptible for t in trace) / len(trace),
                explained=result.explained,
            )
        )
    return reports


def _per_user_quota(trace: Sequence[TraceJob], max_gpus: int) -> QuotaRules:
    """Every trace user limited to `max_gpus` GPUs at once; a job larger than that could never
    run (a live server refuses it at submit), so such a trace is refused."""
    if max_gpus < 1:
        raise InvalidRequest("--max-gpus-per-user must be 1 or more", field="max_gpus_per_user")
    too_big = [t for t in trace if t.gpus > max_gpus]
    if too_big:
        raise InvalidRequest(
            f"{len(too_big)} jobs of the trace ask more than {max_gpus} GPUs (job {too_big[0].id}:"
            f" {too_big[0].gpus}); they could never run under --max-gpus-per-user {max_gpus}",
            field="max_gpus_per_user",
        )
    return QuotaRules(users={t.user: Limits(max_gpus=max_gpus) for t in trace})


def _bind(progress: Progress, name: str, total: int) -> Callable[[int], None]:
    return lambda finished: progress(name, finished, total)


def _check_request(
    gpus: int, gpus_per_node: int, names: Sequence[str], restart_penalty_s: float
) -> None:
    if gpus < 1:
        raise InvalidRequest(f"--gpus must be at least 1, not {gpus}", field="gpus")
    if gpus_per_node < 1:
        raise InvalidRequest(
            f"--gpus-per-node must be at least 1, not {gpus_per_node}", field="gpus_per_node"
        )
    if not math.isfinite(restart_penalty_s) or restart_penalty_s < 0:
        raise InvalidRequest(
            f"--restart-penalty must be a number of seconds >= 0, not {restart_penalty_s}",
            field="restart_penalty_s",
        )
    if not names:
        raise InvalidRequest("no policy to simulate", field="policy")
    for name in names:
        make_policy(name)  # refuses an unknown name before any replay runs


def _check_dependency(job: TraceJob, seen: set[int]) -> None:
    """A dependency's syntax, naming only jobs the trace submits before it (as a live submit
    can only name jobs that exist)."""
    try:
        dep = parse_dependency(job.dependency)
    except InvalidRequest as exc:
        raise InvalidRequest(f"job {job.id}: {exc.message}") from None
    for _, ref in dep.refs():
        if ref.job_id not in seen or ref.job_id == job.id:
            raise InvalidRequest(
                f"job {job.id} depends on job {ref.job_id}, which the trace does not submit "
                "before it"
            )


def _check_trace(
    trace: Sequence[TraceJob], cluster: ClusterState, gpus: int, per_node: int
) -> None:
    """Refuse what the engine cannot replay faithfully, naming the first offending job."""
    if not trace:
        raise InvalidRequest("the trace has no jobs")
    seen: set[int] = set()
    for job in trace:
        if job.id in seen:
            raise InvalidRequest(f"job {job.id}: job_id appears twice in the trace")
        seen.add(job.id)
        if job.gpus < 0 or not math.isfinite(job.duration_s) or job.duration_s < 0:
            raise InvalidRequest(
                f"job {job.id}: num_gpus and duration_s must be >= 0 "
                f"(got {job.gpus} GPUs, {job.duration_s} s)"
            )
        if not math.isfinite(job.submitted_at):
            raise InvalidRequest(f"job {job.id}: submit_time_s must be a finite number")
        limit = job.time_limit_s
        if limit is not None and not (math.isfinite(limit) and limit > 0):
            raise InvalidRequest(f"job {job.id}: time_limit_s must be > 0 (or empty), not {limit}")
        _check_dependency(job, seen)
        if not cluster.can_ever_fit(job.gpus):
            raise InvalidRequest(
                f"job {job.id} needs {job.gpus} GPUs: more than the simulated cluster can give "
                f"one job ({gpus} GPUs in nodes of {per_node}); raise --gpus"
            )
