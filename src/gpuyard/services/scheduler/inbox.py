"""What reaches the live scheduler from other threads, and the gate in front of its policy.

Events are typed (mypy checks every kind the pass handles) and queued in an inbox by the
threads that make them; the pass applies them in order, with their own timestamps.

The gate sits between the inbox and the policy: a job it holds is not fed to the policy (so no
policy ranks, reserves for or starts it) and its pending reason is the gate's own. Its ordered
stages (holds, retry back-off, dependencies and array caps, quotas) are one pure pipeline,
`scheduling/gate.py`, that the pass (`live.py`) feeds with these events. `Gate` here is its
first stage's front, the explicit holds, callable from any thread:

    gate.hold(7, "JobHeldUser")   # job 7 leaves the policy at the next pass (if pending)
    gate.release(7)               # and comes back at the pass after this
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from gpuyard.domain.job import Gpu, Job, NodeCapacity


@dataclass(frozen=True, slots=True)
class Submitted:
    job: Job
    at: float


@dataclass(frozen=True, slots=True)
class Cancelled:
    """A PENDING job was cancelled by its user."""

    job_id: int
    at: float


@dataclass(frozen=True, slots=True)
class Ended:
    """A job's processes are gone: `job` is its new record, final or requeued (PENDING)."""

    job: Job
    at: float


@dataclass(frozen=True, slots=True)
class Updated:
    """A PENDING job's spec changed (`gpuyard update`): the policy sees it anew, with its
    submit time kept."""

    job: Job
    at: float


@dataclass(frozen=True, slots=True)
class Joined:
    """A machine joined the cluster (its index in the inventory, capacity and GPUs)."""

    machine: int
    node: NodeCapacity
    gpus: tuple[Gpu, ...]
    at: float


@dataclass(frozen=True, slots=True)
class Drained:
    """A GPU was taken out of service (`out_of_service`) or put back."""

    gpu: int
    out_of_service: bool
    at: float


@dataclass(frozen=True, slots=True)
class Held:
    job_id: int
    reason: str
    at: float


@dataclass(frozen=True, slots=True)
class Released:
    job_id: int
    at: float


Event = Submitted | Cancelled | Ended | Updated | Joined | Drained | Held | Released


class Gate:
    """Keeps held jobs out of the policy, each with its own reason.

    `hold` and `release` may be called from any thread: they publish the reasons at once (a
    new mapping, read without a lock) and queue an event that the next pass applies."""

    def __init__(self, notify: Callable[[Event], None], clock: Callable[[], float]) -> None:
        self._notify = notify
        self._clock = clock
        self._lock = threading.Lock()  # orders hold/release; never taken by a pass
        self._reasons: Mapping[int, str] = MappingProxyType({})

    def hold(self, job_id: int, reason: str) -> None:
        """Keep `job_id` out of the policy until `release`; `reason` is its pending reason."""
        with self._lock:
            self._reasons = MappingProxyType({**self._reasons, job_id: reason})
            self._notify(Held(job_id, reason, self._clock()))

    def release(self, job_id: int) -> None:
        """Let a held job back in: the next pass submits it to the policy again."""
        with self._lock:
            if job_id not in self._reasons:
                return
            reasons = dict(self._reasons)
            del reasons[job_id]
            self._reasons = MappingProxyType(reasons)
            self._notify(Released(job_id, self._clock()))

    def forget(self, job_id: int) -> None:
        """A held job left the queue (cancelled, ended): its hold goes with it."""
        with self._lock:
            if job_id in self._reasons:
                reasons = dict(self._reasons)
                del reasons[job_id]
                self._reasons = MappingProxyType(reasons)

    def reason(self, job_id: int) -> str | None:
        """Why the gate holds `job_id`, or None (lock-free: any thread, the event loop too)."""
        return self._reasons.get(job_id)

    @property
    def held(self) -> Mapping[int, str]:
        return self._reasons
