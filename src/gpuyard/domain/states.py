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
    NODE_FAIL = "NODE_FAIL"  # its GPU failed (XID, ECC, off the bus) or was drained under it
    OUT_OF_MEMORY = "OUT_OF_MEMORY"  # it died of GPU out-of-memory (its output says so)

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset(
    {
        JobState.COMPLETED,
        JobState.FAILED,
        JobState.CANCELLED,
        JobState.TIMEOUT,
        JobState.NODE_FAIL,
        JobState.OUT_OF_MEMORY,
    }
)

# A running job may end in any terminal state, or go back to PENDING: a requeue (preempted, or
# marked to start when the server died before its process began). Terminal states are final.
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.PENDING: frozenset({JobState.RUNNING, JobState.CANCELLED}),
    JobState.RUNNING: TERMINAL_STATES | {JobState.PENDING},
    **{state: frozenset() for state in TERMINAL_STATES},
}


def check_transition(job_id: int, current: JobState, target: JobState) -> None:
    """Raise Conflict when `current -> target` is not in the transition table."""
    if target not in TRANSITIONS[current]:
        raise Conflict(f"job {job_id} is {current.value} and cannot become {target.value}")
