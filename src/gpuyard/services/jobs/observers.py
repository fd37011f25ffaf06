"""What follows a committed job change, one observer per concern, registered on the journal
when the server is built (`bootstrap.build_core`): the scheduler's inbox, the queue metrics,
rendezvous ports (a finished job's GPU stats: `machine/observers.py`). Each reads the change's
before and after; a removal (`clean`: before and after the same finished job) is none of
their changes."""

from __future__ import annotations

from collections.abc import Callable

from gpuyard.domain.job import REASON_HELD, Job
from gpuyard.domain.states import JobState
from gpuyard.services.jobs.journal import JobChange
from gpuyard.services.launch.rendezvous import RendezvousPorts
from gpuyard.services.metrics import QueueMetrics
from gpuyard.services.scheduler.live import LiveScheduler


def scheduler_events(scheduler: LiveScheduler) -> Callable[[JobChange], None]:
    """In order: the scheduler hears of submits, launches, cancels of pending jobs and ends."""

    def observe(change: JobChange) -> None:
        before, job = change.before, change.after
        if before is None:
            if job.held:  # submitted held (sbatch --hold): held before the policy hears of it
                scheduler.gate.hold(job.id, REASON_HELD)
            scheduler.submitted(job)
        elif before.state is JobState.PENDING and job.state is JobState.RUNNING:
            scheduler.launched(job.id, job.gpus)
        elif before.state is JobState.PENDING and job.state.is_terminal:
            scheduler.cancelled(job.id, job.ended_at or change.at)
        elif before.state is JobState.RUNNING and job.state is not JobState.RUNNING:
            scheduler.ended(job, change.at)
        elif before.state is JobState.PENDING and job.state is JobState.PENDING:
            _pending_changed(scheduler, before, job, change.at)

    return observe


def _pending_changed(scheduler: LiveScheduler, before: Job, job: Job, at: float) -> None:
    """A hold or release reaches the gate, and a new spec the policy, only once durable."""
    if job.held and not before.held:
        scheduler.gate.hold(job.id, REASON_HELD)
    elif before.held and not job.held:
        scheduler.gate.release(job.id)
    if job.spec != before.spec:
        scheduler.updated(job, at)


def queue_metrics(metrics: QueueMetrics) -> Callable[[JobChange], None]:
    """In order: submits counted; the wait users feel, submit to first start, observed."""

    def observe(change: JobChange) -> None:
        before, job = change.before, change.after
        if before is None:
            metrics.submitted()
        elif (
            before.state is JobState.PENDING and job.state is JobState.RUNNING and job.restarts == 0
        ):
            metrics.submit_to_start_s.observe(max(0.0, change.at - job.submitted_at))

    return observe


def release_ports(ports: RendezvousPorts) -> Callable[[JobChange], None]:
    """In order: a job whose processes are gone gives its rendezvous port back."""

    def observe(change: JobChange) -> None:
        was_running = change.before is not None and change.before.state is JobState.RUNNING
        if was_running and change.after.state is not JobState.RUNNING:
            ports.release(change.after.id)

    return observe
