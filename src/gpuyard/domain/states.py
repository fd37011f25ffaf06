"""Job states in Slurm's vocabulary and the one table that says which changes are allowed."""

from __future__ import annotations

from enum import StrEnum

from gpuyard.domain.errors import Conflict


class JobState(StrEnum):
    """The states a user knows from `squeue`/`sacct`."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset(
    {JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT}
)

# RUNNING -> PENDING is a requeue: the job was marked to start but its process never began
# (the server died between recording the start and spawning the supervisor).
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.PENDING: frozenset({JobState.RUNNING, JobState.CANCELLED}),
    JobState.RUNNING: frozenset(
        {
            JobState.COMPLETED,
            JobState.FAILED,
            JobState.CANCELLED,
            JobState.TIMEOUT,
            JobState.PENDING,
        }
    ),
    JobState.COMPLETED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
    JobState.TIMEOUT: frozenset(),
}


def check_transition(job_id: int, current: JobState, target: JobState) -> None:
    """Raise Conflict when `current -> target` is not in the transition table."""
    if target not in TRANSITIONS[current]:
        raise Conflict(f"job {job_id} is {current.value} and cannot become {target.value}")
