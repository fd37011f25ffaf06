"""Estimated start times (`queue`, `show`) and dry runs, without ever stalling a pass.

A projection runs a copy of the policy forward (`scheduling/projection.py`). Copying a policy
with 10,000 pending jobs takes 40-700 ms, too long to hold the scheduler's lock for. So the
estimator keeps a *mirror*: its own `PolicyFeed`, fed the ops every pass records (one batch per
pass, handed over through a deque), replayed on the estimator's side; the copy for a projection
is made from the mirror under the estimator's own lock, which no pass takes. The mirror is
built once, when the scheduler is created (an empty policy: microseconds); if it ever decides
otherwise than the live pass did, it is rebuilt from a copy of the live state (`resync`: the
one copy made under the scheduler's lock; counted in `resyncs`, expected never).

Serving: the last estimates are served while they are current (no pass since) or recent
(`FRESH_S`) and cover the wanted jobs; else a cheap projection is made at once, and an
expensive one is served stale while a background thread makes the next, at most one at a time
and never more often than every `REFRESH_FACTOR` times its own duration.
"""

from __future__ import annotations

import logging
import pickle
import threading
import time
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass

from gpuyard.domain.job import Job, JobSpec
from gpuyard.domain.states import JobState
from gpuyard.scheduling.cluster import ClusterState
from gpuyard.scheduling.policy import Policy, SchedJob
from gpuyard.scheduling.projection import Projection, project_starts
from gpuyard.services.policy_feed import Op, PolicyFeed, sched_job

log = logging.getLogger(__name__)

SYNC_PROJECTION_S = 0.05  # slower than this: refreshed in the background
FRESH_S = 2.0  # estimates are estimates: a projection this recent is served as it is
REFRESH_FACTOR = 5.0
PROJECTION_BUDGET_S = 2.0
DRY_RUN_BUDGET_S = 5.0
# Passes queued for the mirror before a background thread replays them (bounds the memory a
# server that nobody asks for estimates keeps for them).
CATCH_UP_BATCHES = 2_000


@dataclass(frozen=True, slots=True)
class Batch:
    """What one pass (or a restart's replay) did to the policy's world."""

    generation: int  # passes the policy has run, this one included
    ops: list[Op]


@dataclass(frozen=True, slots=True)
class _Estimates:
    generation: int  # the scheduling pass they were projected after
    starts: dict[int, float | None]
    made_at: float  # time.monotonic()
    took_s: float


World = tuple[Policy, ClusterState, dict[int, SchedJob], dict[int, SchedJob]]


def copy_world(feed: PolicyFeed) -> bytes:
    """The policy's world as bytes (pickle keeps shared jobs shared; 5x faster than deepcopy)."""
    return pickle.dumps((feed.policy, feed.cluster, feed.jobs, feed.parked), protocol=5)


def feed_from(data: bytes) -> PolicyFeed:
    policy, cluster, jobs, parked = pickle.loads(data)
    feed = PolicyFeed(policy, cluster, record=False)
    feed.jobs, feed.parked = jobs, parked
    return feed


class Estimator:
    """Projected starts and dry runs from a mirror of the live policy."""

    def __init__(
        self,
        clock: Callable[[], float],
        live_generation: Callable[[], int],
        live_assigned: Callable[[], frozenset[int]],
        resync: Callable[[], tuple[bytes, int]],
    ) -> None:
        self._clock = clock
        self._live_generation = live_generation  # lock-free reads of the last pass
        self._live_assigned = live_assigned  # chosen by the policy, not launched yet
        self._resync_from_live = resync  # a copy of the live world, taken under its lock
        self._batches: deque[Batch] = deque()  # appended by passes, taken by the mirror
        self._lock = threading.Lock()  # the mirror; never taken by a pass
        self._mirror: PolicyFeed | None = None
        self._generation = 0
        self._estimates: _Estimates | None = None
        self._refreshing = False
        self._catching_up = False
        self.resyncs = 0

    def start_mirror(self, feed: PolicyFeed) -> None:
        """Build the mirror from the live feed, before any pass (it is empty: cheap). A policy
        that cannot be copied gets no mirror: estimates then fail as a copy would have."""
        try:
            self._mirror = feed_from(copy_world(feed))
        except (pickle.PicklingError, TypeError, AttributeError, RecursionError):
            log.warning("policy %r cannot be copied: no estimated start times", feed.policy)

    # -- the pass's side (under the scheduler's lock) ----------------------------------------
    def record(self, batch: Batch) -> None:
        """A pass's ops, for the mirror. Cheap: the replay happens on the estimator's side."""
        if self._mirror is None:
            return  # no mirror: a resync would copy the live world whole anyway
        self._batches.append(batch)
        if len(self._batches) > CATCH_UP_BATCHES and not self._catching_up:
            self._catching_up = True
            threading.Thread(target=self._catch_up, daemon=True, name="gpuyard-mirror").start()

    # -- the mirror ------------------------------------------------------------------------
    def _catch_up(self) -> None:
        try:
            with self._lock:
                self._sync()
        finally:
            self._catching_up = False

    def _sync(self) -> PolicyFeed:
        """Bring the mirror up to the last pass (estimator lock held)."""
        mirror = self._mirror
        batches = self._batches
        while batches and mirror is not None:
            batch = batches.popleft()
            if not mirror.replay(batch.ops):
                log.warning("estimates: the mirror decided otherwise at pass %d", batch.generation)
                mirror = None
                break
            self._generation = batch.generation
        if mirror is None:
            data, self._generation = self._resync_from_live()
            mirror = feed_from(data)
            self.resyncs += 1
        self._mirror = mirror
        return mirror

    def drop_batches(self) -> None:
        """The live world was just copied (scheduler lock held): earlier batches are in it."""
        self._batches.clear()

    def _copy(self) -> tuple[Policy, ClusterState, list[SchedJob], frozenset[int], int]:
        """A private copy of the mirror, as of the last pass, to run forward."""
        with self._lock:
            mirror = self._sync()
            running = [job for job in mirror.jobs.values() if job.running]
            data = pickle.dumps((mirror.policy, mirror.cluster, running), protocol=5)
            generation = self._generation
        # Chosen jobs start now; read after the sync, so one chosen since is included too,
        # and one launched since (running now, not asked about) is not.
        assigned = self._live_assigned()
        policy, cluster, running = pickle.loads(data)
        return policy, cluster, running, assigned, generation

    # -- estimates -------------------------------------------------------------------------
    def estimated_starts(self, wanted: Collection[int] = ()) -> dict[int, float | None]:
        """Projected start of every pending job (None: not within the projection)."""
        cached = self._estimates
        if cached is not None:
            current = cached.generation == self._live_generation()
            recent = time.monotonic() - cached.made_at < FRESH_S
            covers = all(job_id in cached.starts for job_id in wanted)
            if current or (recent and covers):
                return cached.starts
            if cached.took_s > SYNC_PROJECTION_S:
                self._refresh_in_background(cached)
                return cached.starts
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

    def _project(self) -> dict[int, float | None]:
        began = time.monotonic()
        policy, cluster, running, assigned, generation = self._copy()
        now = self._clock()
        starts = project_starts(policy, cluster, running, now, budget_s=PROJECTION_BUDGET_S).starts
        starts.update({job_id: now for job_id in assigned})
        made = _Estimates(generation, starts, time.monotonic(), time.monotonic() - began)
        previous = self._estimates
        if previous is None or previous.generation <= generation:
            self._estimates = made
        return starts

    def dry_run(self, spec: JobSpec, owner: str, job_id: int) -> Projection:
        """When a job of `spec` submitted now would start (`starts[job_id]`; None: not within
        the projection, which says how far it got), as of the last pass."""
        now = self._clock()
        probe = sched_job(Job(job_id, spec, owner, JobState.PENDING, submitted_at=now))
        policy, cluster, running, _, _ = self._copy()
        policy.submit(probe, now)
        return project_starts(
            policy, cluster, running, now, wanted={probe.id}, max_events=100_000,
            budget_s=DRY_RUN_BUDGET_S,
        )  # fmt: skip
