"""The live server's scheduler: a Policy fed with the server's events, deciding on real GPUs.

The policy objects are the ones `gpuyard simulate` replays, called the same way: events
(`submit`, `started`, `preempted`, `finished`, `cancel`) in time order, then `schedule`. Two
things differ from the simulator, and neither changes a decision:
- A preempted job's processes take a moment (SIGTERM, grace, SIGKILL) to stop. The policy sees
  the preemption at once, as in the simulator, and may start another job on the freed GPUs at
  once; that job is *assigned* and launched as soon as the stopping job's processes are gone
  (its pending reason meanwhile: `Preempting`).
- The policy thinks in GPU counts per node; the physical GPU indices are chosen here, lowest
  free first. A shared GPU (jobs with `--gpu-mem`) is a slot to the policy; the first of its
  jobs to launch binds it to a physical GPU, and its other jobs launch on that one.

Thread model: events arrive from API and executor threads and are queued in an inbox (cheap,
no lock shared with the scheduling pass); `decide()` runs on the controller thread, applies the
inbox in order and schedules. Estimates (`estimated_starts`, `dry_run`) work on a deep copy.
"""

from __future__ import annotations

import copy
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

from gpuyard.domain.errors import Unavailable
from gpuyard.domain.job import REASON_PREEMPTING, REASON_PRIORITY, REASON_RESOURCES, Job, JobSpec
from gpuyard.domain.states import JobState
from gpuyard.domain.units import format_size_mib
from gpuyard.scheduling.cluster import ClusterState, NodeSpec, Placement
from gpuyard.scheduling.policy import Policy, SchedJob, begin_run, end_run
from gpuyard.scheduling.projection import Projection, project_starts
from gpuyard.services.inventory import Inventory

# Jobs that ended longer ago than this many jobs back teach a restarted policy nothing new:
# every policy's memory of the past is bounded (histories, decayed usage).
_REBUILD_HISTORY_JOBS = 20_000
# Estimated start times: a projection that took longer than this is refreshed in the background,
# at most every _REFRESH_FACTOR times its duration; wall-time caps for one projection.
_SYNC_PROJECTION_S = 0.05
_FRESH_S = 2.0  # estimates are estimates: a projection this recent is served as it is
_REFRESH_FACTOR = 5.0
_PROJECTION_BUDGET_S = 2.0
_DRY_RUN_BUDGET_S = 5.0


@dataclass(frozen=True, slots=True)
class _Estimates:
    generation: int  # the scheduling pass they were projected after
    starts: dict[int, float | None]
    made_at: float  # time.monotonic()
    took_s: float


@dataclass(frozen=True, slots=True)
class Launch:
    """Start `job_id` now on these physical GPUs of `node`."""

    job_id: int
    node: str
    gpus: tuple[int, ...]


@dataclass(slots=True)
class Decisions:
    """One pass's outcome: jobs to launch now, and running jobs to stop for others."""

    launches: list[Launch] = field(default_factory=list)
    preempt: list[int] = field(default_factory=list)
    passed: bool = False  # the policy ran a pass (else nothing it could act on happened)


def sched_job(job: Job) -> SchedJob:
    """What the policy may know about a job."""
    spec = job.spec
    return SchedJob(
        id=job.id, user=job.owner, gpus=spec.gpus, submitted_at=job.submitted_at,
        priority=spec.priority, cpus=spec.cpus, mem_mib=spec.mem_mib,
        gpu_mem_mib=spec.gpu_mem_mib, nodes=spec.nodes, time_limit_s=spec.time_limit_s,
        preemptible=spec.preemptible,
        attained_gpu_s=job.attained_gpu_s, restarts=job.restarts,
    )  # fmt: skip


class LiveScheduler:
    """One policy, the cluster it sees, and the physical GPUs behind it."""

    def __init__(self, policy: Policy, inventory: Inventory, clock: Callable[[], float]) -> None:
        self.policy = policy
        self._clock = clock
        nodes = inventory.nodes
        self._node_names = [node.name for node in nodes]
        self._node_gpus = [inventory.gpus_of(node.name) for node in nodes]
        self._node_of = {gpu: i for i, gpus in enumerate(self._node_gpus) for gpu in gpus}
        self.cluster = ClusterState(
            [NodeSpec(node.name, len(gpus), node.cpus, node.mem_mib, inventory.gpu_mem_mib())
             for node, gpus in zip(nodes, self._node_gpus, strict=True)]
        )  # fmt: skip
        self._slot_gpu: dict[tuple[int, int], int] = {}  # shared GPU (node, slot) -> physical
        self._lock = threading.Lock()  # the policy and everything below
        self._inbox: deque[tuple[str, float, object]] = deque()
        self._jobs: dict[int, SchedJob] = {}  # pending or running in the policy's view
        self._assigned: dict[int, Placement] = {}  # started by the policy, not launched yet
        self._holding: dict[int, tuple[int, ...]] = {}  # GPUs held by a job's processes
        self._stopping: set[int] = set()  # preempted, processes not gone yet
        self._drained: set[int] = set()  # GPUs out of service
        self._busy: dict[int, str] = {}  # free GPUs occupied by others' memory, and why
        self._hot: dict[int, str] = {}  # GPUs to hand out last, and why
        self._waiting_busy: dict[int, str] = {}  # assigned jobs waiting for those, and why
        self._drain_charged: set[int] = set()  # drained GPUs the cluster counts as busy
        self._unrecorded_stops: dict[int, None] = {}  # preempted, not yet recorded (ordered)
        self._head: tuple[int, int | None] = (-1, None)  # (pass, first pending job's id)
        self._estimates: _Estimates | None = None
        self._wake_at: float | None = -math.inf  # the first pass runs whatever happened
        self._refreshing = False
        self._generation = 0

    # -- events (any thread) -------------------------------------------------------------------
    def submitted(self, job: Job) -> None:
        self._inbox.append(("submit", job.submitted_at, job))

    def cancelled(self, job_id: int, at: float) -> None:
        """A PENDING job was cancelled by its user."""
        self._inbox.append(("cancel", at, job_id))

    def ended(self, job: Job, at: float) -> None:
        """A job's processes are gone: `job` is its new record, final or requeued (PENDING)."""
        self._inbox.append(("end", at, job))

    def drained(self, gpu_index: int, out_of_service: bool, at: float) -> None:
        """A GPU was taken out of service (True) or put back (False)."""
        self._inbox.append(("drain" if out_of_service else "resume", at, gpu_index))

    def set_hot(self, hot: dict[int, str]) -> None:
        """GPUs to hand out last (too hot, or throttled by heat or power), with why."""
        self._hot = dict(hot)

    @property
    def hot(self) -> dict[int, str]:
        return self._hot

    def set_busy(self, busy: dict[int, str]) -> None:
        """Free GPUs not to be handed out yet, with why: GPU memory still held by processes no
        running job owns (a finished job's memory not released yet, or a ghost process)."""
        self._busy = dict(busy)

    def launched(self, job_id: int, gpus: tuple[int, ...]) -> None:
        """The controller recorded a launch durably; its GPUs are held from now on."""
        with self._lock:
            self._assigned.pop(job_id, None)
            self._holding[job_id] = gpus

    # -- the pass (controller thread) ----------------------------------------------------------
    def decide(self) -> Decisions:
        """Apply the events since the last pass, let the policy decide, and say what to do."""
        with self._lock:
            now = self._clock()
            fed = self._apply_inbox()
            due = self._wake_at is not None and self._wake_at <= now
            passed = fed or due
            if passed:
                # Else no pass, exactly as in the simulator (a pass at another instant could
                # decide otherwise for time-dependent ranks).
                self.policy.schedule(_LiveContext(self, now))
                self._generation += 1
                self._wake_at = self.policy.next_decision_at(now)
            return Decisions(self._launchable(), list(self._unrecorded_stops), passed)

    def stops_recorded(self, job_ids: list[int]) -> None:
        """The controller recorded these preemptions durably; until then `decide` repeats them
        (a failed write must not leave a preempted job running for ever)."""
        with self._lock:
            for job_id in job_ids:
                self._unrecorded_stops.pop(job_id, None)

    @property
    def next_pass_at(self) -> float | None:
        """When the policy asked for its next pass without a new event (None: not needed)."""
        return self._wake_at

    def reason_for(self, job_id: int) -> str:
        """Why a pending job waits, as of the last pass, in Slurm's words: the job next in line
        waits for Resources, the ones behind it for Priority; a job already chosen waits for
        the jobs it preempted (Preempting). Only the head of the queue is looked up, once per
        pass: a submit's answer must not cost a walk over a deep queue."""
        with self._lock:
            if job_id in self._waiting_busy:
                return f"GpuMemoryBusy: {self._waiting_busy[job_id]}"
            if job_id in self._assigned:
                return REASON_PREEMPTING
            if self._head[0] != self._generation:
                pending = self.policy.pending(self._clock())
                self._head = (self._generation, pending[0].id if pending else None)
            if self._head[1] not in (job_id, None):
                return REASON_PRIORITY
            job = self._jobs.get(job_id)
            if job is not None and job.gpu_mem_mib and not job.running:
                return f"{REASON_RESOURCES}: {self._gpu_memory_short(job)}"
            return REASON_RESOURCES

    def _gpu_memory_short(self, job: SchedJob) -> str:
        """Why a job asking for GPU memory does not fit, when memory is the limit."""
        cluster = self.cluster
        if cluster.place(job.gpus, job.cpus, job.mem_mib, job.gpu_mem_mib) is not None:
            return "waiting for the next pass"
        most = cluster.most_free_shared_mib()
        shared = (
            f"most free on a shared GPU: {format_size_mib(most)}"
            if most is not None
            else ("no GPU is shared yet")
        )
        whole = _count(cluster.free_gpus, "whole GPU") + " free"
        return (
            f"GPU memory: {format_size_mib(job.gpu_mem_mib)} wanted on "
            f"{_count(job.gpus, 'GPU')}; {shared}, {whole}"
        )

    def _apply_inbox(self) -> bool:
        """Feed the queued events to the policy; True if it was told anything."""
        inbox = self._inbox
        fed = False
        while inbox:
            kind, at, item = inbox.popleft()
            if kind == "submit":
                assert isinstance(item, Job)
                job = self._jobs[item.id] = sched_job(item)
                self.policy.submit(job, at)
                fed = True
            elif kind == "cancel":
                assert isinstance(item, int)
                fed = self._forget(item, at) or fed
            elif kind in ("drain", "resume"):
                assert isinstance(item, int)
                (self._drained.add if kind == "drain" else self._drained.discard)(item)
                fed = True  # the cluster the policy sees changes
            else:
                assert isinstance(item, Job)
                fed = self._on_end(item, at) or fed
        self._charge_drained()
        return fed

    def _charge_drained(self) -> None:
        """Keep drained GPUs out of the policy's cluster: each drained GPU no process holds is
        charged as busy; a resumed one is released. (A drained GPU a job still holds is charged
        once that job has ended.)"""
        held = {gpu for gpus in self._holding.values() for gpu in gpus}
        for gpu in list(self._drain_charged - self._drained):
            self.cluster.release(((self._node_of[gpu], 1),))
            self._drain_charged.discard(gpu)
        for gpu in sorted(self._drained - self._drain_charged - held):
            node = self._node_of.get(gpu)
            if node is None or self.cluster.free[node] < 1:
                continue  # not ours, or counted for a job waiting to launch: next time
            self.cluster.allocate(((node, 1),))
            self._drain_charged.add(gpu)

    def _on_end(self, record: Job, at: float) -> bool:
        job_id = record.id
        self._holding.pop(job_id, None)
        requeued = record.state is JobState.PENDING
        if job_id in self._stopping:
            self._stopping.discard(job_id)
            if not requeued:  # it ended for good before the stop reached it
                return self._forget(job_id, at)
            return False  # requeued: the policy saw the preemption when it decided it
        job = self._jobs.get(job_id)
        if job is None:
            return False
        if requeued:  # its start was recorded but it never ran (server restart)
            if not job.running:
                return False
            end_run(job, self.cluster, at)
            self.policy.preempted(job, at)
            return True
        if not job.running:
            return self._forget(job_id, at)
        del self._jobs[job_id]
        self._assigned.pop(job_id, None)
        end_run(job, self.cluster, at)
        self.policy.finished(job, at)
        return True

    def _forget(self, job_id: int, at: float) -> bool:
        """Take a job out of the policy's view without a run to learn from (cancelled while
        pending or assigned, or ended while the policy had it pending)."""
        job = self._jobs.pop(job_id, None)
        if job is None:
            return False
        if job.running:
            self._assigned.pop(job_id, None)
            end_run(job, self.cluster, at)
            self.policy.preempted(job, at)
        self.policy.cancel(job, at)
        return True

    def _launchable(self) -> list[Launch]:
        """Assigned jobs whose GPUs are physically free now, in the order they were decided."""
        self._forget_closed_slots()
        held = {gpu for gpus in self._holding.values() for gpu in gpus} | self._drained
        held |= set(self._slot_gpu.values())  # a shared GPU is its slot's until the slot closes
        busy = self._busy  # free GPUs whose memory other processes still occupy
        hot = self._hot
        free = [
            sorted((g for g in gpus if g not in held and g not in busy), key=lambda g: g in hot)
            for gpus in self._node_gpus
        ]  # a cool GPU before a hot one; lowest index first otherwise
        launches = []
        self._waiting_busy = {}
        for job_id, placement in self._assigned.items():
            if job_id in self._holding:
                continue  # chosen again while its preempted processes are still stopping
            share = self.cluster.share_of(job_id)
            if share is not None:
                launch = self._launch_shared(job_id, share, free)
                if launch is not None:
                    launches.append(launch)
                elif blockers := sorted(g for g in busy if g not in held):
                    self._waiting_busy[job_id] = "; ".join(busy[g] for g in blockers)
                continue
            if any(len(free[node]) < count for node, count in placement):
                blockers = sorted(g for g in busy if g not in held)
                if blockers:
                    self._waiting_busy[job_id] = "; ".join(busy[g] for g in blockers)
                continue  # waits for a preempted job's processes, or foreign memory, to go
            gpus: list[int] = []
            for node, count in placement:
                gpus.extend(free[node][:count])
                del free[node][:count]
            names = ",".join(self._node_names[node] for node, _ in placement)
            launches.append(Launch(job_id, names or self._node_names[0], tuple(gpus)))
        return launches

    def _launch_shared(
        self, job_id: int, share: tuple[int, tuple[int, ...]], free: list[list[int]]
    ) -> Launch | None:
        """A job on shared GPUs: each slot's bound GPU, or a free one bound to it now (the slot's
        first job to launch); None if a slot needs a free GPU and there is none yet. A slot bound
        to a GPU drained since is bound afresh."""
        node, slots = share
        bound = self._slot_gpu
        unbound = [s for s in slots if bound.get((node, s), -1) in self._drained | {-1}]
        if len(unbound) > len(free[node]):
            return None
        for slot in unbound:
            self._slot_gpu[(node, slot)] = free[node].pop(0)
        gpus = tuple(self._slot_gpu[(node, slot)] for slot in slots)
        return Launch(job_id, self._node_names[node], gpus)

    def _forget_closed_slots(self) -> None:
        """Unbind shared GPUs whose last job left (the physical GPU is free again)."""
        for key in [k for k in self._slot_gpu if not self.cluster.slot_open(*k)]:
            del self._slot_gpu[key]

    def shared_gpus(self) -> dict[int, int]:
        """Physical GPU -> free GPU memory (MiB) the scheduler may still give to shared jobs."""
        with self._lock:
            free: dict[int, int] = {}
            for (node, slot), gpu in self._slot_gpu.items():
                mib = self.cluster.slot_free_mib(node, slot)
                if mib is not None:
                    free[gpu] = mib
            return free

    # -- restart ------------------------------------------------------------------------------
    def rebuild(self, jobs: Iterable[Job]) -> None:
        """Feed the policy the server's past in time order, so that a restarted server ranks
        jobs as the one that stopped did: finished runs (history, usage), running jobs (on
        their GPUs), pending jobs (with the service they attained before a preemption)."""
        events: list[tuple[float, int, int, Job]] = []
        jobs = list(jobs)
        finished = [
            j for j in jobs if j.state.is_terminal and j.started_at is not None and j.ended_at
        ]
        finished.sort(key=lambda j: j.ended_at or 0.0)
        for job in finished[-_REBUILD_HISTORY_JOBS:]:
            events += _life(job, (job.submitted_at, job.started_at, job.ended_at))
        for job in jobs:
            if job.state is JobState.PENDING:
                events += _life(job, (job.submitted_at,))
            elif job.state is JobState.RUNNING:
                events += _life(job, (job.submitted_at, job.started_at))
        events.sort(key=lambda e: e[:3])
        with self._lock:
            for at, kind, _, record in events:
                self._replay(kind, at, record)

    def _rebuilt_placement(self, record: Job) -> tuple[Placement, tuple[int, ...] | None]:
        """Where a job still running after a restart is, in the policy's terms: whole GPUs, or
        the shared GPUs it runs on (one slot per physical GPU, bound to it again)."""
        per_node: dict[int, int] = {}
        for gpu in record.gpus:
            node = self._node_of.get(gpu, 0)
            per_node[node] = per_node.get(node, 0) + 1
        if not record.spec.gpu_mem_mib:
            return tuple(sorted(per_node.items())) or ((0, 0),), None
        node = min(per_node, default=0)
        slots = tuple(_REBUILT_SLOT + gpu for gpu in record.gpus)
        for gpu, slot in zip(record.gpus, slots, strict=True):
            self._slot_gpu[(node, slot)] = gpu
        return ((node, 0),), slots

    def _replay(self, kind: int, at: float, record: Job) -> None:
        if kind == 0:
            job = self._jobs[record.id] = sched_job(record)
            self.policy.submit(job, at)
            return
        job = self._jobs[record.id]
        if kind == 1:
            if record.state is JobState.RUNNING:
                placement, slots = self._rebuilt_placement(record)
                try:
                    begin_run(job, self.cluster, placement, at, slots)
                except ValueError:
                    raise Unavailable(
                        f"job {record.id} is still running on GPUs "
                        f"{','.join(map(str, record.gpus)) or '-'} with {record.spec.cpus} CPUs, "
                        "more than this server now offers next to the other running jobs; start "
                        "it with the GPUs/--cpus it had, or stop that job's processes first"
                    ) from None
                self._holding[record.id] = record.gpus
            else:  # a finished run: on no GPUs any more, only its times matter
                job.run_started_at = at
            self.policy.started(job, at)
            if record.state is JobState.RUNNING and record.stop_intent is JobState.PENDING:
                # It was being preempted when the server stopped: it still is.
                end_run(job, self.cluster, self._clock())
                job.restarts += 1
                self.policy.preempted(job, self._clock())
                self._stopping.add(record.id)
            return
        del self._jobs[record.id]
        end_run(job, self.cluster, at)  # placement () for a finished run: frees nothing
        self.policy.finished(job, at)

    # -- estimates ----------------------------------------------------------------------------
    def estimated_starts(self, wanted: Collection[int] = ()) -> dict[int, float | None]:
        """Projected start of every pending job (None: not within the projection).

        A projection costs a deep copy of the policy: milliseconds for a short queue, up to a
        second or two for a deep one. So the last one is served while it is recent
        (`_FRESH_S`) and covers the `wanted` jobs; otherwise a cheap one is made now, and an
        expensive one is served stale while a background thread makes the next, at most one at
        a time and never more often than every `_REFRESH_FACTOR` times its own duration."""
        with self._lock:
            cached = self._estimates
            if cached is not None:
                current = cached.generation == self._generation
                recent = time.monotonic() - cached.made_at < _FRESH_S
                covers = all(job_id in cached.starts for job_id in wanted)
                if current or (recent and covers):
                    return cached.starts
                if cached.took_s > _SYNC_PROJECTION_S:
                    self._refresh_in_background(cached)
                    return cached.starts
        return self._project_estimates()

    def _refresh_in_background(self, cached: _Estimates) -> None:
        if self._refreshing:
            return
        self._refreshing = True
        delay = max(0.0, cached.made_at + _REFRESH_FACTOR * cached.took_s - time.monotonic())
        threading.Thread(
            target=self._refresh_estimates, args=(delay,), daemon=True, name="gpuyard-estimates"
        ).start()

    def _refresh_estimates(self, delay_s: float) -> None:
        try:
            time.sleep(delay_s)
            self._project_estimates()
        finally:
            self._refreshing = False

    def _project_estimates(self) -> dict[int, float | None]:
        began = time.monotonic()
        with self._lock:
            generation = self._generation
            policy, cluster, running, assigned = self._copy()
        now = self._clock()
        starts = project_starts(policy, cluster, running, now, budget_s=_PROJECTION_BUDGET_S).starts
        starts.update({job_id: now for job_id in assigned})
        made = _Estimates(
            generation, starts, made_at=time.monotonic(), took_s=time.monotonic() - began
        )
        with self._lock:
            if self._estimates is None or self._estimates.generation <= generation:
                self._estimates = made
        return starts

    def dry_run(self, spec: JobSpec, owner: str, job_id: int) -> Projection:
        """When a job of `spec` submitted now would start (`starts[job_id]`; None: not within
        the projection, which says how far it got)."""
        now = self._clock()
        probe = sched_job(Job(job_id, spec, owner, JobState.PENDING, submitted_at=now))
        with self._lock:  # as of the last pass (which follows every submit at once)
            policy, cluster, running, _ = self._copy()
        policy.submit(probe, now)
        return project_starts(
            policy, cluster, running, now, wanted={probe.id}, max_events=100_000,
            budget_s=_DRY_RUN_BUDGET_S,
        )  # fmt: skip

    def _copy(self) -> tuple[Policy, ClusterState, list[SchedJob], list[int]]:
        running = [j for j in self._jobs.values() if j.running]
        policy, cluster, running = copy.deepcopy((self.policy, self.cluster, running))
        return policy, cluster, running, list(self._assigned)


class _LiveContext:
    """The Context the policy acts on during a live pass."""

    def __init__(self, scheduler: LiveScheduler, now: float) -> None:
        self._s = scheduler
        self.now = now
        self.cluster = scheduler.cluster

    def start(self, job: SchedJob, placement: Placement) -> None:
        begin_run(job, self.cluster, placement, self.now)
        self._s._assigned[job.id] = placement
        self._s.policy.started(job, self.now)

    def preempt(self, job: SchedJob) -> None:
        end_run(job, self.cluster, self.now)
        job.restarts += 1
        self._s.policy.preempted(job, self.now)
        if self._s._assigned.pop(job.id, None) is None:  # it has processes to stop
            self._s._stopping.add(job.id)
            self._s._unrecorded_stops[job.id] = None


def _life(job: Job, times: tuple[float | None, ...]) -> list[tuple[float, int, int, Job]]:
    """Rebuild events of one job: (time, kind: 0 submit / 1 start / 2 end, id, record)."""
    return [(at or 0.0, kind, job.id, job) for kind, at in enumerate(times)]


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


_REBUILT_SLOT = 1 << 40  # slot ids of shared GPUs re-created after a restart: GPU index + this
