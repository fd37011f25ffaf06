"""How a running job's end is judged: the one place that turns an exit into a final state."""

from __future__ import annotations

import signal as signals

from gpuyard.domain.job import REASON_NONE, REASON_PREEMPTED, Job
from gpuyard.domain.states import JobState
from gpuyard.domain.units import format_duration


def judge_exit(
    job: Job,
    exit_code: int | None,
    signal: int | None,
    timed_out: bool,
    lost: bool,
    stop_requested: bool = False,
) -> tuple[JobState, int | None, str]:
    """Final state, recorded exit code and reason for a job whose process tree ended.

    A preempted job (stop intent PENDING) goes back to PENDING whatever its exit (a job that
    saves a checkpoint on SIGTERM and exits 0 is resumed, not done), unless it ran out of time
    or completed before the stop reached it (`stop_requested` false, exit 0)."""
    if job.stop_intent is JobState.CANCELLED:  # by its user, or by the server (reason set)
        why = job.reason if job.reason != REASON_NONE else "Cancelled by user"
        return JobState.CANCELLED, exit_code, why
    if job.stop_intent in (JobState.NODE_FAIL, JobState.OUT_OF_MEMORY):
        return job.stop_intent, exit_code, job.reason  # the reason was recorded with the intent
    completed_first = exit_code == 0 and not signal and not stop_requested
    if job.stop_intent is JobState.PENDING and not timed_out and not completed_first:
        return JobState.PENDING, None, REASON_PREEMPTED
    if timed_out:
        limit = format_duration(job.spec.time_limit_s)
        return JobState.TIMEOUT, exit_code, f"TimeLimit: stopped after its limit of {limit}"
    if lost:
        return JobState.FAILED, None, "SupervisorLost: the job's supervisor vanished; exit unknown"
    if signal:
        name = _signal_name(signal)
        return JobState.FAILED, 128 + signal, f"Signal: killed by {name}"
    if exit_code == 0:
        return JobState.COMPLETED, 0, REASON_NONE
    return JobState.FAILED, exit_code, f"NonZeroExitCode: exited with code {exit_code}"


def _signal_name(number: int) -> str:
    try:
        return signals.Signals(number).name
    except ValueError:
        return f"signal {number}"
