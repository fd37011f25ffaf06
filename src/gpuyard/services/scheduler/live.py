"""The live server's scheduler: a Policy fed with the server's events, deciding on real GPUs.

The policy objects are the ones `gpuyard simulate` replays, called the same way: events
(`submit`, `started`, `preempted`, `finished`, `cancel`) in time order, then `schedule`. Two
things differ from the simulator, and neither changes a decision:
- A preempted job's processes take a moment (SIGTERM, grace, SIGKILL) to stop. The policy sees
  the preemption at once, as in the simulator, and may start another job on the freed GPUs at
  once; that job is *assigned* and launched as soon as the stopping job's processes are gone
  (its pending reason meanwhile: `Preempting`).
- The policy thinks in GPU counts per node; `gpu_binding.py` chooses the physical GPUs.

Parts: the pass (here: typed events from an inbox, `inbox.py`, through the gate's stages,
`scheduling/gate.py`, the pipeline the simulator drives too, into the policy), the GPU binding
(`gpu_binding.py`), the estimates (`estimates.py`) and a restart's rebuild (`rebuild.py`).

Thread model: events arrive from API and executor threads and are queued in an inbox (cheap,
no lock shared with the pass); `decide()` runs on the controller thread under the scheduler's
lock (a `TimedLock`: its longest hold is a metric), applies the inbox and schedules. At the end
of each pass it publishes a `PassView`, an immutable snapshot that `reason_for` and
`shared_gpus` read without any lock (they are called on the event loop). Estimates work on a
mirror of the policy that the estimator keeps in a worker process: no copy under this lock.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from gpuyard.domain.dependency import Ref
from gpuyard.domain.job import (
    REASON_PREEMPTING,
    REASON_PRIORITY,
    REASON_RESOURCES,
    Gpu,
    Job,
    JobSpec,
    NodeCapacity,
)
from gpuyard.domain.retry import hold_reason
from gpuyard.domain.states import JobState
from gpuyard.scheduling.cluster import ClusterState, NodeSpec, Placement
from gpuyard.scheduling.duration_prediction import Prediction
from gpuyard.scheduling.explain import RankFactors, explain
from gpuyard.scheduling.fair_share import Shares
from gpuyard.scheduling.gate import GatePipeline
from gpuyard.scheduling.policy import Policy
from gpuyard.scheduling.projection import Projection, StartEstimates
from gpuyard.scheduling.quotas import QuotaRules
from gpuyard.scheduling.workflow_gate import Named, gate_job, gated
from gpuyard.services.scheduler.estimates import Batch, Estimator, copy_world
from gpuyard.services.scheduler.gpu_binding import GpuBinding, Launch
from gpuyard.services.scheduler.inbox import (
    Cancelled,
    Drained,
    Ended,
    Event,
    Gate,
    Held,
    Joined,
    Released,
    Submitted,
    Updated,
)
from gpuyard.services.scheduler.inventory import Inventory
from gpuyard.services.scheduler.pass_view import PassView, head_short
from gpuyard.services.scheduler.policy_steps import Decision, PolicyFeed, sched_job
from gpuyard.services.scheduler.rebuild import past_events, replay_past, restore_gate
from gpuyard.services.scheduler.timed_lock import TimedLock

__all__ = ["Decisions", "Launch", "LiveScheduler", "PassView", "sched_job"]

# A backlog of events (a 10,000-task array arrives at once) is fed to the policy this many at
# a time, the lock released between chunks, so no single hold grows with the backlog.
_INBOX_CHUNK = 500


@dataclass(slots=True)
class Decisions:
    """One pass's outcome: jobs to launch now, and running jobs to stop for others."""

    launches: list[Launch] = field(default_factory=list)
    preempt: list[int] = field(default_factory=list)
    passed: bool = False  # the policy ran a pass (else nothing it could act on happened)
    # Pending jobs whose dependency can never hold (id, why): they stay pending, kept out by
    # the gate with reason DependencyNeverSatisfied (Slurm's default), logged after the pass.
    never: list[tuple[int, str]] = field(default_factory=list)


class LiveScheduler:
    """One policy, the cluster it sees, and the physical GPUs behind it."""

    def __init__(
        self,
        policy: Policy,
        inventory: Inventory,
        clock: Callable[[], float],
        *,
        estimates_in_process: bool = False,
    ) -> None:
        """`estimates_in_process`: keep the estimator's mirror in this process (tests that
        patch it); by default it lives in a worker process, started at the first estimate."""
        self._clock = clock
        self.binding = GpuBinding(inventory)
        machines, gpu_mem = inventory.nodes, inventory.gpu_mem_mib()
        nodes = [
            _node_spec(self.binding, i, machines[m], gpu_mem)
            for i, m in enumerate(self.binding.node_machine)
        ]
        self._feed = PolicyFeed(policy, ClusterState(nodes), record=True)
        self._lock = TimedLock()  # the feed, the binding and the pass state below
        self._inbox: deque[Event] = deque()
        self.gate = Gate(self._inbox.append, clock)
        self._assigned: dict[int, Placement] = {}  # started by the policy, not launched yet
        self._stopping: set[int] = set()  # preempted, processes not gone yet
        self._unrecorded_stops: dict[int, None] = {}  # preempted, not yet recorded (ordered)
        self._wake_at: float | None = -math.inf  # the first pass runs whatever happened
        self._view = PassView()
        self._ranks: tuple[PassView | None, Mapping[int, tuple[int, int]]] = (None, {})
        self._shares = self._shares_applied = Shares()
        # The gate's stages after the holds (`scheduling/gate.py`, pure: the simulator drives
        # it too): back-off, dependencies and array caps, quotas. A job they hold is parked out
        # of the policy; their reasons are read lock-free. `_named` looks up the jobs a
        # dependency names (the book, else the store: `set_job_lookup`).
        self._named: Callable[[Ref], Sequence[Named]] = lambda ref: []
        self.pipeline = GatePipeline(lambda ref: self._named(ref), clock, holds=self.gate.reason)
        self._fed_early = False  # events fed by `_feed_backlog` since the last pass
        self.estimator = Estimator(
            clock, lambda: self._view.generation, lambda: self._view.assigned, self._copy_live,
            held=lambda: self.gate.held, in_process=estimates_in_process,
        )  # fmt: skip
        self.estimator.start_mirror(self._feed)

    @property
    def policy(self) -> Policy:
        return self._feed.policy

    @property
    def cluster(self) -> ClusterState:
        return self._feed.cluster

    @property
    def lock_hold_max_s(self) -> float:
        """The longest time a pass (or anything else) held the scheduler's lock."""
        return self._lock.hold_max_s

    # -- events (any thread) -------------------------------------------------------------------
    def submitted(self, job: Job) -> None:
        self._inbox.append(Submitted(job, job.submitted_at))

    def cancelled(self, job_id: int, at: float) -> None:
        """A PENDING job was cancelled by its user."""
        self._inbox.append(Cancelled(job_id, at))

    def ended(self, job: Job, at: float) -> None:
        """A job's processes are gone: `job` is its new record, final or requeued (PENDING)."""
        self._inbox.append(Ended(job, at))

    def updated(self, job: Job, at: float) -> None:
        """A PENDING job's spec changed: the policy forgets it and hears of it again."""
        self._inbox.append(Updated(job, at))

    def joined(self, machine: int, node: NodeCapacity, gpus: Sequence[Gpu], at: float) -> None:
        """A machine joined (`machine`: its index in the inventory's nodes, `gpus` numbered
        after every GPU known): the next pass may place jobs on it."""
        self._inbox.append(Joined(machine, node, tuple(gpus), at))

    def drained(self, gpu_index: int, out_of_service: bool, at: float) -> None:
        """A GPU was taken out of service (True) or put back (False)."""
        self._inbox.append(Drained(gpu_index, out_of_service, at))

    def set_shares(self, shares: Shares) -> None:
        """New fair-share weights (any thread): the next pass gives them to the policy."""
        self._shares = shares

    def set_quotas(self, rules: QuotaRules) -> None:
        """New limits (any thread): the next pass holds and releases jobs by them."""
        self.pipeline.set_quotas(rules)

    def set_job_lookup(self, named: Callable[[Ref], Sequence[Named]]) -> None:
        """How the gate finds the jobs a dependency names (wired once, before `rebuild`)."""
        self._named = named

    @property
    def quota_rules(self) -> QuotaRules:
        return self.pipeline.quota_rules

    def set_hot(self, hot: dict[int, str]) -> None:
        """GPUs to hand out last (too hot, or throttled by heat or power), with why."""
        self.binding.hot = dict(hot)

    @property
    def hot(self) -> Mapping[int, str]:
        return self.binding.hot

    def set_busy(self, busy: dict[int, str]) -> None:
        """Free GPUs not to be handed out yet, with why: GPU memory still held by processes no
        running job owns (a finished job's memory not released yet, or a ghost process)."""
        self.binding.busy = dict(busy)

    def launched(self, job_id: int, gpus: tuple[int, ...]) -> None:
        """The controller recorded a launch durably; its GPUs are held from now on."""
        with self._lock:
            if self._assigned.pop(job_id, None) is not None:
                self._view = replace(self._view, assigned=frozenset(self._assigned))
            self.binding.holding[job_id] = gpus
            self.pipeline.began(job_id, self._clock())  # `after` holds from its start

    # -- the pass (controller thread) ----------------------------------------------------------
    def decide(self) -> Decisions:
        """Apply the events since the last pass, let the gate and the policy decide, and say
        what to do."""
        self._feed_backlog()
        with self._lock:
            now = self._clock()
            told = self._apply_inbox() or self._fed_early
            self._fed_early = False
            due = self._wake_at is not None and self._wake_at <= now
            pipeline = self.pipeline
            fed = pipeline.admit(
                self._feed, now, told=told, due=due, before_quotas=self._apply_shares
            )  # fmt: skip
            passed = fed or due
            generation = self._view.generation
            if passed:
                # Else no pass, exactly as in the simulator (a pass at another instant could
                # decide otherwise for time-dependent ranks).
                self._apply_decisions(self._feed.schedule(now))
                pipeline.passed(self._feed, now)  # the runs it started count from now on
                generation += 1
                wakes = (self.policy.next_decision_at(now), pipeline.next_at(now))
                self._wake_at = min((w for w in wakes if w is not None), default=None)
            launches, waiting_busy = self.binding.launchable(self._assigned, self.cluster)
            ops = self._feed.take_ops()
            if ops:
                self.estimator.record(Batch(generation, ops))
            self._publish(generation, now, waiting_busy, refresh_head=passed)
            never = pipeline.take_never()
            return Decisions(launches, list(self._unrecorded_stops), passed, never)

    def _apply_shares(self) -> bool:
        """New fair-share weights go to the policy (a recorded step); True if there were."""
        if self._shares is self._shares_applied:
            return False
        self._shares_applied = self._shares
        self._feed.set_shares(self._shares_applied)
        return True

    def _apply_decisions(self, decided: list[Decision]) -> None:
        for decision in decided:
            job_id = decision.job_id
            if decision.start:
                self._assigned[job_id] = decision.placement
            elif self._assigned.pop(job_id, None) is None:  # it has processes to stop
                self._stopping.add(job_id)
                self._unrecorded_stops[job_id] = None

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

    def _publish(
        self, generation: int, now: float, waiting_busy: dict[int, str], refresh_head: bool
    ) -> None:
        """Leave the pass's outcome for lock-free readers. The head is looked up once per pass:
        a reader's answer must not cost a walk over a deep queue."""
        view = self._view
        head, memory, pending = view.head, view.head_memory, view.pending
        if refresh_head or head not in self._feed.jobs:
            pending = self.policy.pending(now)
            head = pending[0].id if pending else None
            memory = head_short(self.cluster, None if head is None else self._feed.jobs.get(head))
        self._view = PassView(
            generation, head, memory, frozenset(self._assigned), waiting_busy,
            self.binding.shared_free(self.cluster), pending,
        )  # fmt: skip

    def reason_for(self, job_id: int) -> str:
        """Why a pending job waits, as of the last pass, in Slurm's words: the gate's reason
        for a held job; the job next in line waits for Resources, the ones behind it for
        Priority; a job already chosen waits for the jobs it preempted (Preempting). Reads
        only the last pass's snapshot: never waits for a pass (the event loop calls this)."""
        held = self.pipeline.reason(job_id)  # the gate's: a hold, back-off, workflow, quota
        if held is not None:
            return held
        view = self._view
        if job_id in view.waiting_busy:
            return f"GpuMemoryBusy: {view.waiting_busy[job_id]}"
        if job_id in view.assigned:
            return REASON_PREEMPTING
        if view.head not in (job_id, None):
            return REASON_PRIORITY
        if view.head == job_id and view.head_memory is not None:
            return f"{REASON_RESOURCES}: {view.head_memory.text()}"
        return REASON_RESOURCES

    def ranks(self) -> Mapping[int, tuple[int, int]]:
        """Pending job -> (its place in the policy's order, how many it orders), as of the last
        pass (`queue`'s rank beside its reason). Lock-free: built from the pass's snapshot once
        per pass, on the first ask (two readers racing build the same map twice)."""
        view = self._view
        cached = self._ranks
        if cached[0] is not view:
            among = len(view.pending)
            cached = self._ranks = (view, {j.id: (i, among) for i, j in
                                           enumerate(view.pending, 1)})  # fmt: skip
        return cached[1]

    def explain(self, job_id: int) -> RankFactors | None:
        """Why a pending job ranks where it does (`scheduling/explain.py`, the words `simulate
        --explain` uses): its rank as of the last pass, the factors of the policy's key now.
        None: not in the policy's queue (held by the gate, or chosen and waiting for its
        GPUs). Under the scheduler's lock (a policy's state is not safe to read during a pass),
        so callers ask from a thread, not the event loop; it reads, it never changes a
        decision."""
        with self._lock:
            job = self._feed.jobs.get(job_id)
            if job is None or job.running:
                return None
            return explain(self.policy, job, self._clock(), self.cluster, self._view.pending)

    def shared_gpus(self) -> dict[int, int]:
        """Physical GPU -> free GPU memory (MiB) the scheduler may still give to shared jobs,
        as of the last pass."""
        return dict(self._view.shared_free)

    # -- applying events (under the lock) -----------------------------------------------------
    def _feed_backlog(self) -> None:
        """Feed a long inbox to the policy in chunks, each under the lock on its own (the pass
        that follows sees them all, as if fed in one hold: they keep their own times)."""
        while len(self._inbox) > _INBOX_CHUNK:
            with self._lock:
                self._fed_early = self._apply_inbox(_INBOX_CHUNK) or self._fed_early

    def _apply_inbox(self, limit: int | None = None) -> bool:
        """Feed the queued events (at most `limit`) to the policy, through the gate; True if it
        was told anything."""
        inbox, feed, gate, pipeline = self._inbox, self._feed, self.gate, self.pipeline
        fed = False
        taken = 0
        while inbox and (limit is None or taken < limit):
            taken += 1
            event = inbox.popleft()
            match event:
                case Submitted(job, at):
                    flow = gate_job(job) if gated(job) else None
                    parked = pipeline.submitted(job.id, at, flow=flow, not_before=job.not_before)
                    feed.submit(job, at, parked)
                    fed = fed or not parked
                case Cancelled(job_id, at):
                    gate.forget(job_id)
                    pipeline.ended(job_id, JobState.CANCELLED, None, at)
                    fed = self._forget(job_id, at) or fed
                case Joined(machine, node, gpus, _):
                    sizes = [g.memory_total_mib for g in gpus]
                    known = [size for size in sizes if size is not None]
                    gpu_mem = min(known) if known and len(known) == len(sizes) else None
                    for i in self.binding.add_machine(machine, node.name, gpus):
                        feed.add_node(_node_spec(self.binding, i, node, gpu_mem))
                    fed = True
                case Drained(gpu, out_of_service, _):
                    drained = self.binding.drained
                    (drained.add if out_of_service else drained.discard)(gpu)
                    fed = True  # the cluster the policy sees changes
                case Ended(job, at):
                    fed = self._on_end(job, at) or fed
                case Updated(job, at):
                    fed = self._on_update(job, at) or fed
                case Held(job_id, _, at):
                    held = gate.reason(job_id) is not None and job_id not in self._assigned
                    fed = (held and feed.park(job_id, at)) or fed
                    if held and (job_id in feed.parked or job_id not in feed.jobs):
                        pipeline.step_aside(job_id)  # no place under its array's cap
                case Released(job_id, at):  # a job still in its backoff stays out
                    pipeline.come_back(job_id)
                    fed = (not pipeline.kept_out(job_id) and feed.unpark(job_id, at)) or fed
        self.binding.charge_drained(feed)
        return fed

    def _forget(self, job_id: int, at: float) -> bool:
        self._assigned.pop(job_id, None)
        return self._feed.forget(job_id, at)

    def _on_end(self, record: Job, at: float) -> bool:
        job_id = record.id
        self.binding.holding.pop(job_id, None)
        self.pipeline.run_ended(job_id, at)  # its run counts for GPU-hours up to its end
        requeued = record.state is JobState.PENDING
        if not requeued:
            self.gate.forget(job_id)
            self.pipeline.ended(job_id, record.state, record.exit_code, at)
        else:  # a retry waits out its backoff; a job held by the server (NodeFailLimit) waits
            self.pipeline.back_off(job_id, record.not_before)
            if record.held and self.gate.reason(job_id) is None:
                self.gate.hold(job_id, hold_reason(record))
        if job_id in self._stopping:
            self._stopping.discard(job_id)
            if not requeued:  # it ended for good before the stop reached it
                return self._forget(job_id, at)
            return self._park_if_held(job_id, at)  # the policy saw the preemption already
        job = self._feed.jobs.get(job_id)
        if job is None:
            return False
        if requeued:  # its start was recorded but it never ran (server restart)
            if not job.running:
                return False
            self._feed.requeue(job_id, at)
            self._park_if_held(job_id, at)
            return True
        if not job.running:
            return self._forget(job_id, at)
        self._assigned.pop(job_id, None)
        # A cancelled run says nothing of how long such jobs take: not learned from.
        self._feed.finish(job_id, at, learn=record.state is not JobState.CANCELLED)
        return True

    def _on_update(self, record: Job, at: float) -> bool:
        """Cancel and resubmit in the policy's view (its rank, reservations and fit come from
        the spec); the record keeps its submit time, so its place by age is kept. A job the
        policy already runs is left alone (the journal refuses updates of running jobs)."""
        known = self._feed.jobs.get(record.id)
        if known is not None and known.running:
            return False
        if known is None and record.id not in self._feed.parked:
            return False  # cancelled meanwhile
        self._forget(record.id, at)
        parked = self.pipeline.kept_out(record.id)
        self._feed.submit(record, at, parked)
        return not parked

    def _park_if_held(self, job_id: int, at: float) -> bool:
        """A requeued job the gate holds, or one waiting out a retry's backoff, leaves the
        policy again."""
        return self.pipeline.kept_out(job_id) and self._feed.park(job_id, at)

    # -- restart ------------------------------------------------------------------------------
    def rebuild(self, jobs: Iterable[Job]) -> None:
        """Feed the policy the server's past in time order (`rebuild.py`), so that a restarted
        server ranks jobs as the one that stopped did; the gate holds what it held."""
        jobs = list(jobs)
        events = past_events(jobs, self.pipeline)
        restore_gate(jobs, self.gate, self.pipeline)
        with self._lock:
            self._stopping |= replay_past(
                events, self._feed, self.binding, self.pipeline, self._clock
            )  # fmt: skip
            ops = self._feed.take_ops()
            self.estimator.record(Batch(self._view.generation, ops))

    # -- estimates ----------------------------------------------------------------------------
    def expected_run(
        self, owner: str, gpus: int, time_limit_s: float | None, job_id: int | None = None
    ) -> Prediction | None:
        """How long a job of `owner` with `gpus` and `time_limit_s` is expected to run
        (`scheduling/duration_prediction.py`, fed by the policy's steps); lock-free."""
        return self._feed.durations.predict(owner, gpus, time_limit_s, self._clock(), job_id)

    def estimated_starts(self, wanted: Collection[int] = ()) -> dict[int, float | None]:
        """Projected start of every pending job (None: not within the projection); see
        `estimates.py`. Never takes the scheduler's lock."""
        return self.estimator.estimated_starts(wanted)

    def start_estimates(self, wanted: Collection[int] = ()) -> StartEstimates:
        """`estimated_starts` with what they assume (a preemption the policy plans)."""
        return self.estimator.estimates(wanted)

    def dry_run(self, spec: JobSpec, owner: str, job_id: int) -> tuple[Projection, str | None]:
        """When a job of `spec` submitted now would start (`starts[job_id]`; None: not within
        the projection, which says how far it got), and what it would wait for now."""
        return self.estimator.dry_run(spec, owner, job_id)

    def close(self) -> None:
        """Stop the estimator's worker process (it also ends by itself when this process
        exits: its stdin closes)."""
        self.estimator.close()

    def _copy_live(self) -> tuple[bytes, int]:
        """The live world, copied under the lock: the estimator's last resort (its mirror
        decided otherwise than a pass did)."""
        with self._lock:
            self.estimator.drop_batches()
            data = copy_world(self._feed)
            return data, self._view.generation


def _node_spec(
    binding: GpuBinding, node: int, machine: NodeCapacity, gpu_mem: int | None
) -> NodeSpec:
    """The policy's view of one of the binding's nodes (a machine, or one pool of it)."""
    return NodeSpec(
        machine.name, len(binding.node_gpus[node]), machine.cpus, machine.mem_mib, gpu_mem,
        binding.node_labels[node], binding.node_host[node],
    )  # fmt: skip
