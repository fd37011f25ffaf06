"""Shared machinery of preemptive policies that rank jobs: start the best, preempt the worst.

A pass walks pending jobs best-first. A job that fits starts. One that does not may take the
GPUs of running jobs ranked below it (the worst first), if together with the free GPUs they make
room for it; otherwise it waits and smaller jobs behind it may still use free GPUs (no GPU idles
while a fitting job waits). Subclasses say how jobs rank and when a rank changes by itself.

Jobs on shared GPUs (`--gpu-mem`) are never chosen as victims (stopping one frees a whole GPU
only together with its neighbours); when one needs room, it asks for whole GPUs, as if it could
join no shared GPU (it may then join one anyway).

A subclass may give the best jobs that can neither start nor preempt a reservation
(`_reserves_for`, `_reservations`): the node(s) where running jobs are expected to free room
first; a job ranked below starts there only if it surely ends (`_backfill_end`, its time limit)
before then, and is never placed there otherwise, nor are victims taken there for it. EASY
backfilling's promise (the head is never delayed by a job behind it), with expected ends.

A job's `priority` (`gpuyard submit --priority`) comes before the subclass's ranking: a pending
job goes ahead of every job of lower priority and may preempt any of them; it never preempts a
job of higher priority. With every priority equal (the traces) this changes nothing.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from typing import Any

from gpuyard.scheduling.cluster import ClusterState, Placement, charges
from gpuyard.scheduling.policy import Context, SchedJob, place_job, whole_gpus


class RequestSizes:
    """How many pending jobs ask for each GPU count, so a pass can stop as soon as the free
    GPUs are fewer than the smallest request still waiting."""

    def __init__(self) -> None:
        self._counts: Counter[int] = Counter()

    def __bool__(self) -> bool:
        return bool(self._counts)

    def add(self, gpus: int) -> None:
        self._counts[gpus] += 1

    def remove(self, gpus: int) -> None:
        self._counts[gpus] -= 1
        if self._counts[gpus] <= 0:
            del self._counts[gpus]

    def smallest(self) -> int:
        return min(self._counts)


class SortedJobs:
    """Jobs kept sorted by a key fixed while they are in the list (bisect on a key list)."""

    def __init__(self) -> None:
        self._keys: list[tuple[Any, ...]] = []
        self._jobs: list[SchedJob] = []
        self._key_of: dict[int, tuple[Any, ...]] = {}

    def __len__(self) -> int:
        return len(self._jobs)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(list(self._jobs))

    def __contains__(self, job: SchedJob) -> bool:
        return job.id in self._key_of

    def add(self, job: SchedJob, key: tuple[Any, ...]) -> None:
        key = (*key, job.id)
        pos = bisect.bisect_left(self._keys, key)
        self._keys.insert(pos, key)
        self._jobs.insert(pos, job)
        self._key_of[job.id] = key

    def remove(self, job: SchedJob) -> None:
        key = self._key_of.pop(job.id)
        pos = bisect.bisect_left(self._keys, key)
        del self._keys[pos]
        del self._jobs[pos]

    def first(self) -> SchedJob | None:
        return self._jobs[0] if self._jobs else None

    def last(self) -> SchedJob | None:
        return self._jobs[-1] if self._jobs else None

    def key(self, job: SchedJob) -> tuple[Any, ...]:
        return self._key_of[job.id]

    def items_desc(self) -> list[SchedJob]:
        return self._jobs[::-1]


class RankedPolicy:
    """Base of preemptive ranked policies. Subclasses implement `_pending_order()` (pending jobs
    best first), `_victims()` (running jobs worst first) and `_outranks(a, b)`."""

    name = "ranked"
    preemptive = True

    def __init__(self) -> None:
        self._pending_sizes = RequestSizes()
        self._priorities_seen = False  # a job with a non-zero priority was ever submitted
        self._held: frozenset[int] = frozenset()  # nodes reserved during a pass
        self._reservations = 0  # how many blocked jobs get one, best first (subclasses)
        self._keep_s = 900.0  # a reservation is kept for its job this long before it is redone
        self._backfills = False  # whether `_backfill_end` may let a job use a reserved node
        self._shadow: dict[int, float] = {}  # reserved node -> when it is expected to be free
        self._kept: dict[int, tuple[float, frozenset[int], float]] = {}  # job -> at, nodes, shadow

    # Subclasses keep their own structures in step through these hooks.
    def _pending_order(self, now: float) -> list[SchedJob]:
        raise NotImplementedError

    def _victims(self, now: float) -> list[SchedJob]:
        raise NotImplementedError

    def _outranks(self, a: SchedJob, b: SchedJob, now: float) -> bool:
        raise NotImplementedError

    def _refresh(self, now: float) -> None:
        """Apply rank changes that happened by themselves since the last pass."""

    def pending(self, now: float) -> list[SchedJob]:
        order = self._pending_order(now)
        if self._priorities_seen:
            order.sort(key=lambda j: -j.priority)  # stable: the policy's order within a priority
        return order

    def _shielded(self, victim: SchedJob, now: float) -> bool:
        """Whether a running job `_outranks` would give up is nonetheless kept this time, without
        shielding the jobs ranked above it (the walk goes on past it). None by default."""
        return False

    def schedule(self, ctx: Context) -> None:
        now = ctx.now
        self._refresh(now)
        cluster = ctx.cluster
        if not self._pending_sizes:
            return
        smallest = self._pending_sizes.smallest()
        # A lower-ranked job needing at least as many GPUs as one whose preemption attempt
        # failed cannot succeed either: its possible victims are a subset.
        failed_at = 1 << 30
        self._held = frozenset()
        self._shadow = {}
        reserving = 0
        # Fewest GPUs a plain job (no CPUs, memory, type) failed to find off the reserved
        # nodes in this pass: a larger one fails too (starts only take room away).
        held_failed = 1 << 30
        # Shapes (GPUs, CPUs, memory, type, limit) that found no reserved node to use: the
        # same shape fails too until more nodes are reserved or a preemption frees room.
        backfill_failed: set[tuple[object, ...]] = set()
        try:
            for job in self.pending(now):
                held = self._held
                if held and job.gpus >= held_failed:
                    placement = None
                else:  # off the reserved nodes: `place` tries the plain placement first
                    placement = place_job(cluster, job, excluding=held)
                    if held and placement is None and not (job.cpus or job.mem_mib
                            or job.gpu_mem_mib or job.gpu_type or job.nodes > 1):  # fmt: skip
                        held_failed = job.gpus
                if placement is None and held and self._backfills:
                    shape = (job.gpus, job.cpus, job.mem_mib, job.gpu_type, job.time_limit_s)
                    if shape not in backfill_failed:
                        placement = self._before_reservation(job, cluster, now)
                        if placement is None:
                            backfill_failed.add(shape)
                if placement is not None:
                    ctx.start(job, placement)
                    continue
                if job.nodes > 1 and job.gpus // job.nodes != cluster.node_gpus:
                    continue  # over parts of several nodes: not preempted for (no victims)
                if job.gpus < failed_at:
                    if self._try_preempt_for(job, ctx):
                        held_failed = 1 << 30  # the victims may have freed more than it took
                        backfill_failed.clear()
                        continue
                    failed_at = job.gpus
                if reserving < self._reservations and self._reserves_for(job, now):
                    reserving += 1
                    self._held = self._held | self._reserve(job, cluster, now)
                    backfill_failed.clear()
                if cluster.free_gpus < smallest and failed_at <= smallest:
                    return
        finally:
            self._held = frozenset()

    # -- the reservation ----------------------------------------------------------------------
    def _reserves_for(self, job: SchedJob, now: float) -> bool:
        """Whether the first job that can neither start nor preempt gets a reservation: the
        node(s) expected to free room for it first, on which no job ranked below it starts.
        None by default."""
        return False

    def _before_reservation(
        self, job: SchedJob, cluster: ClusterState, now: float
    ) -> Placement | None:
        """A reserved node `job` may use because it is expected to end before the reservation
        needs the node (`_backfill_end`); None if there is none."""
        if job.gpu_mem_mib or job.nodes > 1 or not 0 < job.gpus <= cluster.node_gpus:
            return None
        end = self._backfill_end(job, now)
        if end is None:
            return None
        for node in sorted(self._held):
            if self._shadow.get(node, 0.0) < end or cluster.free[node] < job.gpus:
                continue
            if cluster.free_cpus[node] >= job.cpus and cluster.free_mem_mib[node] >= job.mem_mib:
                allowed = cluster.nodes_of_type(job.gpu_type)
                if allowed is None or node in allowed:
                    return ((node, job.gpus),)
        return None

    def _backfill_end(self, job: SchedJob, now: float) -> float | None:
        """When a pending job would surely end if started now (None: unknown); a job that
        does may start on nodes reserved for later."""
        return None

    def _expected_end(self, job: SchedJob, now: float) -> float:
        """When a running job is expected to end (the reservation's estimate)."""
        return math.inf

    def _running_jobs(self) -> list[SchedJob]:
        return []

    def _reserve(self, job: SchedJob, cluster: ClusterState, now: float) -> frozenset[int]:
        """The node(s) where `job` is expected to find room first: a job of up to one node's
        GPUs, the node whose running jobs are expected to free enough of them soonest (most
        free GPUs first on ties); a larger one, that many whole nodes."""
        if job.gpu_mem_mib or job.nodes > 1 or job.gpus == 0:
            return frozenset()
        kept = self._kept.get(job.id)
        if kept is not None and now - kept[0] < self._keep_s and not kept[1] & self._held:
            for node in kept[1]:
                self._shadow[node] = kept[2]
            return kept[1]
        size = cluster.node_gpus
        need = 1 if job.gpus <= size else -(-job.gpus // size)
        want = job.gpus if need == 1 else size
        allowed = cluster.nodes_of_type(job.gpu_type)
        ends: dict[int, list[tuple[float, int]]] = {}
        for run in self._running_jobs():
            end = self._expected_end(run, now)
            for node, gpus in run.placement:
                ends.setdefault(node, []).append((end, gpus))
        options: list[tuple[float, int, int]] = []
        for node, spec in enumerate(cluster.nodes):
            if spec.gpus < want or (allowed is not None and node not in allowed):
                continue
            if node in self._held:
                continue  # reserved for a job ranked higher
            if need > 1 and (spec.gpus != size or spec.host):
                continue
            free, at = cluster.free[node], now
            if free < want:
                at = math.inf
                for end, gpus in sorted(ends.get(node, ())):
                    free += gpus
                    if free >= want:
                        at = end
                        break
            options.append((at, -cluster.free[node], node))
        if len(options) < need:
            return frozenset()
        options.sort()
        chosen = options[:need]
        shadow = max(at for at, _, _ in chosen)
        for _, _, node in chosen:
            self._shadow[node] = shadow
        nodes = frozenset(node for _, _, node in chosen)
        self._kept = {j: k for j, k in self._kept.items() if now - k[0] < self._keep_s}
        self._kept[job.id] = (now, nodes, shadow)
        return nodes

    def _try_preempt_for(self, job: SchedJob, ctx: Context) -> bool:
        """Make room for `job` by preempting as few lower-ranked GPUs as possible, on the
        node(s) where it will run: preempting elsewhere would free nothing it can use."""
        cluster = ctx.cluster
        if job.gpus > cluster.node_gpus and cluster.node_gpus > 0:
            victims = self._free_whole_nodes(job, ctx)
        else:
            victims = self._free_one_node(job, ctx)
        if victims is None:
            return False
        for victim in victims:
            ctx.preempt(victim)
        placement = place_job(cluster, job, excluding=self._held)
        assert placement is not None, "preemption planned room that is not there"
        ctx.start(job, placement)
        return True

    def _by_node(self, job: SchedJob, ctx: Context) -> dict[int, list[SchedJob]]:
        """Running jobs `job` may preempt, per node they hold GPUs on, worst first.

        The walk stops at the first victim `job` may not take. Victims come worst first, so for
        a pure ranking no later one could be taken either; a policy whose `_outranks` also
        protects jobs for other reasons (`default` protects jobs that started moments ago)
        thereby preempts nothing in that pass: a deliberate throttle on preemptions. A victim
        `_shielded` says to keep is skipped instead: the walk goes on to the next one."""
        per_node: dict[int, list[SchedJob]] = {}
        victims = self._victims(ctx.now)
        if self._priorities_seen:
            victims = sorted(victims, key=lambda v: v.priority)  # stable: worst first within
        for victim in victims:
            if victim.run_started_at is None or not victim.preemptible:
                continue  # preempted earlier in this pass (lists may be cached), or exempt
            if victim.gpu_mem_mib:
                # On shared GPUs: stopping it frees a whole GPU only if its neighbours go
                # too, so it is never worth a preemption on its own.
                continue
            if victim.priority > job.priority:
                break  # the rest rank higher still
            if victim.priority == job.priority and not self._outranks(job, victim, ctx.now):
                break
            if self._shielded(victim, ctx.now):
                continue
            for node, _ in victim.placement:
                per_node.setdefault(node, []).append(victim)
        return per_node

    def _free_one_node(self, job: SchedJob, ctx: Context) -> list[SchedJob] | None:
        cluster = ctx.cluster
        best: tuple[int, int, list[SchedJob]] | None = None
        allowed = cluster.nodes_of_type(job.gpu_type) if job.gpus else None
        for node, candidates in self._by_node(job, ctx).items():
            if node in self._held:
                continue  # reserved for a job ranked higher
            if allowed is not None and node not in allowed:
                continue  # GPUs of another type: freeing them gives the job nothing
            need_gpus = job.gpus - cluster.free[node]
            need_cpus = job.cpus - cluster.free_cpus[node]
            need_mem = job.mem_mib - cluster.free_mem_mib[node]
            chosen: list[SchedJob] = []
            for victim in candidates:
                if need_gpus <= 0 and need_cpus <= 0 and need_mem <= 0:
                    break
                chosen.append(victim)
                need_gpus -= sum(g for n, g in victim.placement if n == node)
                freed_cpus, freed_mem = charges(victim.placement, victim.cpus, victim.mem_mib).get(
                    node, (0, 0)
                )  # what it is charged on this node
                need_cpus -= freed_cpus
                need_mem -= freed_mem
            if need_gpus > 0 or need_cpus > 0 or need_mem > 0:
                continue
            cost = (sum(v.gpus for v in chosen), len(chosen))
            if best is None or cost < best[:2]:
                best = (*cost, chosen)
        return None if best is None else best[2]

    def _free_whole_nodes(self, job: SchedJob, ctx: Context) -> list[SchedJob] | None:
        cluster = ctx.cluster
        size = cluster.node_gpus
        need_nodes = -(-job.gpus // size)
        per_node = self._by_node(job, ctx)
        options: list[tuple[int, int, list[SchedJob]]] = []
        allowed = cluster.nodes_of_type(job.gpu_type)
        for node, spec in enumerate(cluster.nodes):
            if spec.gpus != size or spec.host or (allowed is not None and node not in allowed):
                continue  # of another type, or one pool of a machine of several
            if node in self._held:
                continue  # reserved for a job ranked higher
            held = [v for v in per_node.get(node, [])]
            freed = cluster.free[node] + sum(g for v in held for n, g in v.placement if n == node)
            if freed == size:
                options.append((sum(v.gpus for v in held), node, held))
        if len(options) < need_nodes:
            return None
        options.sort(key=lambda o: (o[0], o[1]))
        chosen: dict[int, SchedJob] = {}
        for _, _, held in options[:need_nodes]:
            for victim in held:
                chosen[victim.id] = victim
        return list(chosen.values())

    # -- pending-size bookkeeping for the early exit ----------------------------------------------
    def _pending_added(self, job: SchedJob) -> None:
        self._pending_sizes.add(whole_gpus(job))
        if job.priority:
            self._priorities_seen = True

    def _pending_removed(self, job: SchedJob) -> None:
        self._pending_sizes.remove(whole_gpus(job))


__all__ = ["Placement", "RankedPolicy", "RequestSizes", "SortedJobs"]
