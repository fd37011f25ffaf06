"""Estimated start times (`queue`, `show`) and dry runs, without ever stalling a pass or the API.

A projection runs a copy of the policy forward (`scheduling/projection.py`). Copying a policy
with 10,000 pending jobs takes 40-700 ms, too long to hold the scheduler's lock for, and the
projection itself is hundreds of milliseconds of Python that would starve the event loop of the
GIL. So the estimator keeps a *mirror*: a `PolicyFeed` fed the ops every pass records (one batch
per pass, handed over through a deque, no lock), in a worker process of its own
(`estimate_worker.py`), which replays them, copies and projects on another core. The mirror
starts from the live world as it was when the scheduler was created (empty: cheap); if it ever
decides otherwise than the live pass did, or its process dies, it is rebuilt from a copy of the
live world (`resync`: the one copy made under the scheduler's lock; counted in `resyncs`,
expected never). Lock order: the estimator's lock, then the scheduler's; a pass takes only the
scheduler's.

Serving: the last estimates are served while they are current (no pass since) or recent
(`FRESH_S`) and cover the wanted jobs; else a cheap projection is made at once, and an
expensive one is served stale while a background thread makes the next, at most one at a time
and never more often than every `REFRESH_FACTOR` times its own duration. A dry run waits for a
projection in progress (one mirror, one request at a time).
"""

from __future__ import annotations

import contextlib
import logging
import pickle
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.states import JobState
from gpuyard.scheduling.projection import Projection, StartEstimates
from gpuyard.services.scheduler.estimate_worker import MirrorEngine, WorkerProcess
from gpuyard.services.scheduler.policy_steps import Op, PolicyFeed

log = logging.getLogger(__name__)

SYNC_PROJECTION_S = 0.05  # slower than this: refreshed in the background
FRESH_S = 2.0  # estimates are estimates: a projection this recent is served as it is
REFRESH_FACTOR = 5.0
PROJECTION_BUDGET_S = 2.0
DRY_RUN_BUDGET_S = 5.0
# Passes queued for the mirror before a background thread replays them (bounds the memory a
# server that nobody asks for estimates keeps for them).
CATCH_UP_BATCHES = 2_000
_NO_HOLDS: Mapping[int, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Batch:
    """What one pass (or a restart's replay) did to the policy's world."""

    generation: int  # passes the policy has run, this one included
    ops: list[Op]


@dataclass(frozen=True, slots=True)
class _Estimates:
    generation: int  # the scheduling pass they were projected after
    held: Mapping[int, str]  # the gate's holds they count (a new mapping at each change)
    estimates: StartEstimates
    made_at: float  # time.monotonic()
    took_s: float


def copy_world(feed: PolicyFeed) -> bytes:
    """The policy's world as bytes (pickle keeps shared jobs shared; 5x faster than deepcopy)."""
    return pickle.dumps((feed.policy, feed.cluster, feed.jobs, feed.parked), protocol=5)


class _InProcess:
    """The mirror in the server's own process: when no worker process can be started (and for
    tests that patch the mirror)."""

    def __init__(self) -> None:
        self._engine = MirrorEngine()

    def send(self, message: tuple[Any, ...]) -> None:
        self._engine.handle(message)

    def ask(self, message: tuple[Any, ...]) -> Any:
        return self._engine.handle(message)

    def close(self) -> None:
        pass


_Mirror = WorkerProcess | _InProcess
_SHIP_BATCHES = 500  # passes per message to the mirror (bounds one pickling's GIL hold)


class Estimator:
    """Projected starts and dry runs from a mirror of the live policy (in a worker process)."""

    def __init__(
        self,
        clock: Callable[[], float],
        live_generation: Callable[[], int],
        live_assigned: Callable[[], frozenset[int]],
        resync: Callable[[], tuple[bytes, int]],
        *,
        held: Callable[[], Mapping[int, str]] = lambda: _NO_HOLDS,
        in_process: bool = False,
    ) -> None:
        """`held`: the gate's holds now (lock-free; a new mapping at each hold or release):
        estimates count a hold at once, before the pass that parks the job."""
        self._clock = clock
        self._held = held
        self._live_generation = live_generation  # lock-free reads of the last pass
        self._live_assigned = live_assigned  # chosen by the policy, not launched yet
        self._resync_from_live = resync  # a copy of the live world, taken under its lock
        self._in_process = in_process
        self._batches: deque[Batch] = deque()  # appended by passes, shipped to the mirror
        self._lock = threading.Lock()  # the mirror; never taken by a pass
        self._initial: bytes | None = None  # the world before the first batch
        self._mirror: _Mirror | None = None
        self._estimates: _Estimates | None = None
        self._refreshing = False
        self._catching_up = False
        self.resyncs = 0

    def start_mirror(self, feed: PolicyFeed) -> None:
        """Remember the live world before any pass (empty: cheap) as the mirror's start. A
        policy that cannot be copied gets no mirror: estimates then fail as a copy would."""
        try:
            self._initial = copy_world(feed)
        except (pickle.PicklingError, TypeError, AttributeError, RecursionError):
            log.warning("policy %r cannot be copied: no estimated start times", feed.policy)

    def close(self) -> None:
        with self._lock:
            if self._mirror is not None:
                self._mirror.close()
                self._mirror = None

    # -- the pass's side (under the scheduler's lock) ----------------------------------------
    def record(self, batch: Batch) -> None:
        """A pass's ops, for the mirror. Cheap: shipping and replaying happen elsewhere."""
        if self._initial is None and self._mirror is None:
            return  # no mirror: a resync would copy the live world whole anyway
        self._batches.append(batch)
        if len(self._batches) > CATCH_UP_BATCHES and not self._catching_up:
            self._catching_up = True
            threading.Thread(target=self._catch_up, daemon=True, name="gpuyard-mirror").start()

    def drop_batches(self) -> None:
        """The live world was just copied (scheduler lock held): earlier batches are in it."""
        self._batches.clear()

    # -- the mirror (estimator lock held) -----------------------------------------------------
    def _catch_up(self) -> None:
        try:
            with self._lock:
                self._ship()
        finally:
            self._catching_up = False

    def _open(self) -> _Mirror:
        if self._mirror is None:
            mirror: _Mirror = _InProcess()
            if not self._in_process:
                try:
                    mirror = WorkerProcess()
                except OSError as error:
                    log.warning("estimates: no worker process (%s); projecting in-process", error)
            self._mirror = mirror
            if self._initial is not None:
                mirror.send(("init", self._initial, 0))
                self._initial = None
            else:
                self._resync(mirror)
        return self._mirror

    def _ship(self) -> _Mirror:
        """Bring the mirror up to the last pass."""
        mirror = self._open()
        batches = self._batches
        while batches:
            chunk = [batches.popleft() for _ in range(min(len(batches), _SHIP_BATCHES))]
            mirror.send(("ops", [(batch.generation, batch.ops) for batch in chunk]))
        return mirror

    def _resync(self, mirror: _Mirror) -> None:
        data, generation = self._resync_from_live()
        mirror.send(("init", data, generation))
        self.resyncs += 1

    def _ask(self, message: tuple[Any, ...]) -> tuple[Any, ...]:
        """Ask the mirror, as of the last pass; rebuild it if it decided otherwise than the live
        pass or its process died."""
        with self._lock:
            for attempt in (0, 1):
                try:
                    mirror = self._ship()
                    answer: tuple[Any, ...] = mirror.ask(message)
                except (OSError, EOFError) as error:
                    log.warning("estimates: the worker process failed (%s); restarting", error)
                    self._drop_mirror()
                    continue
                if answer[0] == "ok":
                    return answer
                log.warning("estimates: the mirror decided otherwise than the live pass")
                if not attempt:
                    self._resync(mirror)
            raise RuntimeError("estimates: the mirror cannot follow the live policy")

    def _drop_mirror(self) -> None:
        if self._mirror is not None:
            with contextlib.suppress(OSError):
                self._mirror.close()
        self._mirror = None  # the next `_open` resyncs from the live world

    # -- estimates -------------------------------------------------------------------------
    def estimated_starts(self, wanted: Collection[int] = ()) -> dict[int, float | None]:
        """Projected start of every pending job (None: not within the projection)."""
        return self.estimates(wanted).starts

    def estimates(self, wanted: Collection[int] = ()) -> StartEstimates:
        """Projected start of every pending job, and what they assume (a preemption)."""
        cached = self._estimates
        if cached is not None and cached.held is self._held():
            current = cached.generation == self._live_generation()
            recent = time.monotonic() - cached.made_at < FRESH_S
            covers = all(job_id in cached.estimates.starts for job_id in wanted)
            if current or (recent and covers):
                return cached.estimates
            if cached.took_s > SYNC_PROJECTION_S:
                self._refresh_in_background(cached)
                return cached.estimates
        return self._project()

    def _refresh_in_background(self, cached: _Estimates) -> None:
        if self._refreshing:
            return
        self._refreshing = True
        delay = max(0.0, cached.made_at + REFRESH_FACTOR * cached.took_s - time.monotonic())
        threading.Thread(
            target=self._refresh, args=(delay,), daemon=True, name="gpuyard-estimates"
        ).start()

    def _refresh(self, delay_s: float) -> None:
        try:
            time.sleep(delay_s)
            self._project()
        finally:
            self._refreshing = False

    def _project(self) -> StartEstimates:
        began = time.monotonic()
        now = self._clock()
        held = self._held()
        projected: StartEstimates
        _, generation, projected = self._ask(("project", now, PROJECTION_BUDGET_S, tuple(held)))
        starts = dict(projected.starts)
        starts.update({job_id: now for job_id in self._live_assigned()})  # chosen: start now
        estimates = StartEstimates(starts, projected.preempted_from)
        took_s = time.monotonic() - began
        made = _Estimates(generation, held, estimates, time.monotonic(), took_s)
        previous = self._estimates
        if previous is None or previous.generation <= generation:
            self._estimates = made
        return estimates

    def dry_run(self, spec: JobSpec, owner: str, job_id: int) -> tuple[Projection, str | None]:
        """When a job of `spec` submitted now would start (`starts[job_id]`; None: not within
        the projection, which says how far it got), as of the last pass; and the resource it
        would wait for now (`pass_view.waits_for`'s text; None: it fits now)."""
        now = self._clock()
        probe = Job(job_id, spec, owner, JobState.PENDING, submitted_at=now)
        ask = ("dry_run", probe, now, DRY_RUN_BUDGET_S, tuple(self._held()))
        answer = self._ask(ask)
        projection: Projection = answer[2]
        short: str | None = answer[3]
        return projection, short
