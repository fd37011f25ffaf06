"""The scheduling pass: greedy priority order, first fit, no GPU idle while a fitting job waits.

Worked example. Four free GPUs (0-3), pending jobs in priority order:
  A (prio 10, 2 GPUs), B (prio 5, 4 GPUs), C (prio 0, 1 GPU), D (prio 0, 4 GPUs)
The pass starts A on GPUs 0,1. B needs 4 and only 2 are free: B waits with reason
`Resources` (it is the most important job held back by a lack of resources). C fits: it starts
on GPU 2 even though B is ahead of it, because leaving GPU 2 idle would help nobody now.
D waits with reason `Priority`: a more important job (B) is also waiting. GPU 3 stays free
because no remaining job fits it.

`plan` expects `view.pending` already in policy order (see `priority_order_key`), so the
caller can keep the queue ordered instead of sorting 10k jobs on every pass; it stops
scanning as soon as no remaining request could fit anywhere.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpuyard.domain.job import REASON_PRIORITY, REASON_RESOURCES


@dataclass(frozen=True, slots=True)
class PendingJob:
    """What the scheduler needs to know about one pending job."""

    id: int
    gpus: int
    cpus: int = 1
    mem_mib: int = 0
    priority: int = 0


@dataclass(slots=True)
class NodeFree:
    """Free resources of one node at the start of a pass; `gpus` are free GPU indices."""

    name: str
    gpus: list[int]
    cpus: int
    mem_mib: int


@dataclass(frozen=True, slots=True)
class SchedulingView:
    """A consistent snapshot: pending jobs in policy order and the free resources per node.

    `pending_by_gpus` (GPU request -> number of pending jobs asking for it) lets the pass stop
    early when nothing left could fit; without it the pass scans the whole queue.
    """

    pending: Sequence[PendingJob]
    nodes: Sequence[NodeFree]
    pending_by_gpus: Mapping[int, int] | None = None


@dataclass(frozen=True, slots=True)
class Start:
    """Start `job_id` now on `gpus` of `node`."""

    job_id: int
    node: str
    gpus: tuple[int, ...]
    reason: str


@dataclass(slots=True)
class Plan:
    """The pass's decisions: jobs to start, reasons for the jobs it examined and left waiting,
    and `rest_reason` for every pending job it did not need to examine."""

    starts: list[Start] = field(default_factory=list)
    reasons: dict[int, str] = field(default_factory=dict)
    rest_reason: str = REASON_RESOURCES

    def reason_for(self, job_id: int) -> str:
        return self.reasons.get(job_id, self.rest_reason)


def priority_order_key(priority: int, job_id: int) -> tuple[int, int]:
    """Higher priority first, then submission order (ids grow with submission)."""
    return (-priority, job_id)


def plan(view: SchedulingView) -> Plan:
    """Decide which pending jobs start now, and why the others wait."""
    nodes = [NodeFree(n.name, sorted(n.gpus), n.cpus, n.mem_mib) for n in view.nodes]
    result = Plan()
    remaining = _Remaining(view.pending_by_gpus)
    blocked = False
    for job in view.pending:
        if remaining.nothing_fits(nodes):
            result.rest_reason = REASON_PRIORITY if blocked else REASON_RESOURCES
            if not blocked:
                # The next job in order is the one held back by resources; later ones by it.
                result.reasons[job.id] = REASON_RESOURCES
                result.rest_reason = REASON_PRIORITY
            return result
        remaining.take(job.gpus)
        node = _first_fit(nodes, job)
        if node is None:
            result.reasons[job.id] = REASON_PRIORITY if blocked else REASON_RESOURCES
            blocked = True
            continue
        gpus = tuple(node.gpus[: job.gpus])
        del node.gpus[: job.gpus]
        node.cpus -= job.cpus
        node.mem_mib -= job.mem_mib
        result.starts.append(Start(job.id, node.name, gpus, "first fit"))
    result.rest_reason = REASON_PRIORITY if blocked else REASON_RESOURCES
    return result


def _first_fit(nodes: list[NodeFree], job: PendingJob) -> NodeFree | None:
    for node in nodes:
        if len(node.gpus) >= job.gpus and node.cpus >= job.cpus and node.mem_mib >= job.mem_mib:
            return node
    return None


class _Remaining:
    """Counts of the GPU requests not yet examined, to know when nothing else can fit."""

    def __init__(self, pending_by_gpus: Mapping[int, int] | None) -> None:
        self._counts = dict(pending_by_gpus) if pending_by_gpus is not None else None
        self._smallest = min(self._counts, default=0) if self._counts else 0

    def take(self, gpus: int) -> None:
        if self._counts is None or gpus not in self._counts:
            return
        self._counts[gpus] -= 1
        if self._counts[gpus] <= 0:
            del self._counts[gpus]
            if gpus == self._smallest:
                self._smallest = min(self._counts, default=0)

    def nothing_fits(self, nodes: list[NodeFree]) -> bool:
        most_cpus = max((n.cpus for n in nodes), default=0)
        if most_cpus < 1:
            return True
        if not self._counts:
            return False
        most_gpus = max((len(n.gpus) for n in nodes), default=0)
        return self._smallest > most_gpus
