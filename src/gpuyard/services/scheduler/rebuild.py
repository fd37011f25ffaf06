"""A restarted server's scheduler: the policy's world and the gate rebuilt from the stored jobs.

The policy is fed the server's past in time order, so that it ranks jobs as the one that stopped
did: finished runs (history, usage), running jobs (on their GPUs), pending jobs (with the
service they attained before a preemption). What the gate keeps is stored on the jobs (a hold,
a back-off's `not_before`, a dependency, an array's cap), so it holds again.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from operator import itemgetter

from gpuyard.domain.errors import Unavailable
from gpuyard.domain.job import Job
from gpuyard.domain.retry import hold_reason
from gpuyard.domain.states import JobState
from gpuyard.scheduling.gate import GatePipeline
from gpuyard.scheduling.workflow_gate import gate_job, gated
from gpuyard.services.scheduler.gpu_binding import GpuBinding
from gpuyard.services.scheduler.inbox import Gate
from gpuyard.services.scheduler.policy_steps import PolicyFeed

# Jobs that ended longer ago than this many jobs back teach a restarted policy nothing new:
# every policy's memory of the past is bounded (histories, decayed usage).
REBUILD_HISTORY_JOBS = 20_000

# One rebuild event: (time, kind: 0 submit / 1 start / 2 end, job id, record).
PastEvent = tuple[float, int, int, Job]


def past_events(jobs: list[Job], pipeline: GatePipeline) -> list[PastEvent]:
    """The jobs' lives in time order; the finished runs also count for GPU-hours quotas."""
    events: list[PastEvent] = []
    finished = [j for j in jobs if j.state.is_terminal and j.started_at is not None and j.ended_at]
    finished.sort(key=lambda j: j.ended_at or 0.0)
    for job in finished[-REBUILD_HISTORY_JOBS:]:
        events += _life(job, (job.submitted_at, job.started_at, job.ended_at))
        if job.started_at is not None and job.ended_at is not None:  # GPU-hours quotas
            pipeline.ledger.past_run(job.owner, job.spec.gpus, job.started_at, job.ended_at)
    for job in jobs:
        if job.state is JobState.PENDING:
            events += _life(job, (job.submitted_at,))
        elif job.state is JobState.RUNNING:
            events += _life(job, (job.submitted_at, job.started_at))
    events.sort(key=itemgetter(0, 1, 2))  # (time, kind, id): never the record
    return events


def restore_gate(jobs: list[Job], holds: Gate, pipeline: GatePipeline) -> None:
    """Holds and back-offs hold again; running jobs take their places under their caps and
    pending ones arrive again in submit order, their dependencies judged anew from the stored
    jobs (the jobs they name may have left the book: the lookup asks the store)."""
    for job in jobs:
        if job.held and job.state is JobState.PENDING:
            holds.hold(job.id, hold_reason(job))
        if job.state is JobState.PENDING:
            pipeline.back_off(job.id, job.not_before)
    by_id = sorted(jobs, key=lambda j: j.id)
    pipeline.restore(
        [gate_job(j) for j in by_id if j.state is JobState.RUNNING],
        [gate_job(j) for j in by_id if j.state is JobState.PENDING and gated(j)],
    )


def replay_past(
    events: list[PastEvent], feed: PolicyFeed, binding: GpuBinding, pipeline: GatePipeline,
    clock: Callable[[], float],
) -> set[int]:  # fmt: skip
    """Feed the past to the policy (under the scheduler's lock); returns the running jobs that
    were being preempted when the server stopped (they still are)."""
    stopping: set[int] = set()
    for at, kind, _, record in events:
        if kind == 0:
            # Every job but a pending one starts later in the replay, with no pass between:
            # its rank at submit is never read (a policy may leave it out).
            to_start = record.state is not JobState.PENDING
            feed.submit(record, at, pipeline.kept_out(record.id), to_start)
        elif kind == 2:
            # placement () for a finished run: frees nothing
            feed.finish(record.id, at, learn=record.state is not JobState.CANCELLED)
        elif record.state is not JobState.RUNNING:
            feed.restore_past_run(record.id, at)
        elif _restore_running(record, at, feed, binding, clock):
            stopping.add(record.id)
    return stopping


def _restore_running(
    record: Job, at: float, feed: PolicyFeed, binding: GpuBinding, clock: Callable[[], float]
) -> bool:
    """A job still running, back on its GPUs; True if it was being preempted."""
    placement, slots = binding.restored_placement(record)
    try:
        feed.restore_run(record.id, placement, slots, at)
    except ValueError:
        raise Unavailable(
            f"job {record.id} is still running on GPUs "
            f"{','.join(map(str, record.gpus)) or '-'} with {record.spec.cpus} CPUs, "
            "more than this server now offers next to the other running jobs; start "
            "it with the GPUs/--cpus it had, or stop that job's processes first"
        ) from None
    binding.holding[record.id] = record.gpus
    if record.stop_intent is JobState.PENDING:
        feed.restore_preemption(record.id, clock())
        return True
    return False


def _life(job: Job, times: tuple[float | None, ...]) -> list[PastEvent]:
    """Rebuild events of one job. Times never go back (a clock stepped back, or an end time a
    job wrote itself, must not put an end before its start and stop the server from starting)."""
    events, last = [], -math.inf
    for kind, at in enumerate(times):
        last = max(last, at or 0.0)
        events.append((last, kind, job.id, job))
    return events
