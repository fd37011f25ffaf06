"""No physical GPU is ever held by two jobs (DESIGN §10), whatever happens in whatever order.

A Hypothesis state machine drives `LiveScheduler` directly, as the controller does: submits
(whole GPUs or `--gpu-mem` shares, with priorities, so preemptive policies preempt), passes
whose launches take GPUs at once, processes that end, preempted processes that stop only later,
cancels, drains and resumes, GPUs busy with foreign memory, time passing, and restarts (a new
scheduler rebuilt from the records, the processes still running). After every pass: every
whole GPU is held by at most one job, a shared GPU by shared jobs only and within its memory,
and nothing launches on a drained or busy GPU.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from gpuyard.domain.job import Gpu, Job, JobSpec, NodeCapacity
from gpuyard.domain.states import JobState
from gpuyard.scheduling.policies import make_policy
from gpuyard.services.scheduler.inventory import Inventory
from gpuyard.services.scheduler.live import LiveScheduler

GPUS = 3
GPU_MEM_MIB = 80 * 1024
INVENTORY = Inventory(
    tuple(Gpu(i, f"GPU-{i}", "test", GPU_MEM_MIB, True) for i in range(GPUS)),
    NodeCapacity("node0", cpus=64, mem_mib=1 << 20),
    "test",
)


class BindingMachine(RuleBasedStateMachine):
    """The controller's side of the scheduler, with processes that hold real GPU indices."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 1_000.0
        self.policy = "fifo"
        self.records: dict[int, Job] = {}  # the server's records (what a restart reads)
        self.holding: dict[int, tuple[int, ...]] = {}  # live processes and their GPUs
        self.stopping: dict[int, JobState] = {}  # processes asked to stop, and what they become
        self.drained: set[int] = set()
        self.busy: set[int] = set()
        self.next_id = 1
        self.scheduler = self._new_scheduler()

    def _new_scheduler(self) -> LiveScheduler:
        return LiveScheduler(make_policy(self.policy, for_server=True), INVENTORY, lambda: self.now)

    @initialize(
        policy=st.sampled_from(
            ["default", "las", "default", "las", "fifo", "backfill", "fairshare"]
        )
    )
    def choose_policy(self, policy: str) -> None:
        self.policy = policy
        self.scheduler = self._new_scheduler()

    # -- what users and processes do ------------------------------------------------------------
    @rule(
        gpus=st.integers(1, GPUS),
        share_gib=st.sampled_from([0, 0, 10, 30, 50]),
        priority=st.sampled_from([0, 0, 5]),
        limit_s=st.sampled_from([None, 600, 7200]),
    )
    def submit(self, gpus: int, share_gib: int, priority: int, limit_s: int | None) -> None:
        gpus = min(gpus, 2) if share_gib else gpus  # a share on 1 or 2 GPUs
        spec = JobSpec(("train",), "t", "/", gpus=gpus, gpu_mem_mib=share_gib * 1024,
                       priority=priority, time_limit_s=limit_s, preemptible=True)  # fmt: skip
        self._submit(spec)

    def _submit(self, spec: JobSpec) -> None:
        """A user submits a job of ``spec`` (a user of three), then a pass runs."""
        job = Job(self.next_id, spec, f"u{self.next_id % 3}", JobState.PENDING, self.now)
        self.next_id += 1
        self.records[job.id] = job
        self.scheduler.submitted(job)

        self.decide()

    @rule()
    def decide(self) -> None:
        """A pass (the controller also runs one after every event below, as it does live)."""
        decided = self.scheduler.decide()
        for launch in decided.launches:
            self._launch(launch.job_id, launch.gpus)
        if decided.preempt:
            event("a pass preempted")
        for job_id in decided.preempt:
            if job_id in self.holding and job_id not in self.stopping:
                self.stopping[job_id] = JobState.PENDING
                self.records[job_id] = replace(self.records[job_id], stop_intent=JobState.PENDING)
        self.scheduler.stops_recorded(decided.preempt)

    def _launch(self, job_id: int, gpus: tuple[int, ...]) -> None:
        record = self.records[job_id]
        assert record.state is JobState.PENDING, f"job {job_id} launched twice"
        assert not set(gpus) & self.drained, f"job {job_id} launched on drained {gpus}"
        assert not set(gpus) & self.busy, f"job {job_id} launched on busy {gpus}"
        assert len(gpus) == record.spec.gpus
        self.holding[job_id] = gpus
        self._check_gpus()
        self.records[job_id] = record.transition(JobState.RUNNING, gpus=gpus, started_at=self.now)
        self.scheduler.launched(job_id, gpus)

    @precondition(lambda self: self.holding)
    @rule(data=st.data())
    def process_exits(self, data: st.DataObject) -> None:
        """A running job ends by itself, or a stopped one is gone (requeued if preempted)."""
        job_id = data.draw(st.sampled_from(sorted(self.holding)))
        del self.holding[job_id]
        record = self.records[job_id]
        then = self.stopping.pop(job_id, JobState.COMPLETED)
        if then is JobState.PENDING:
            run_s = self.now - (record.started_at or self.now)
            ended = record.transition(
                JobState.PENDING, gpus=(), stop_intent=None, restarts=record.restarts + 1,
                attained_gpu_s=record.attained_gpu_s + run_s * record.spec.gpus,
            )  # fmt: skip
        else:
            ended = record.transition(then, ended_at=self.now, stop_intent=None)
        self.records[job_id] = ended
        self.scheduler.ended(ended, self.now)

        self.decide()

    @precondition(lambda self: any(j.state is JobState.PENDING for j in self.records.values()))
    @rule(data=st.data())
    def cancel_pending(self, data: st.DataObject) -> None:
        pending = sorted(i for i, j in self.records.items() if j.state is JobState.PENDING)
        job_id = data.draw(st.sampled_from(pending))
        self.records[job_id] = self.records[job_id].transition(
            JobState.CANCELLED, ended_at=self.now
        )
        self.scheduler.cancelled(job_id, self.now)

        self.decide()

    @precondition(lambda self: self.holding)
    @rule(data=st.data())
    def cancel_running(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.holding)))
        self.stopping[job_id] = JobState.CANCELLED

    @rule(gpu=st.integers(0, GPUS - 1))
    def drain(self, gpu: int) -> None:
        """Out of service; the jobs on it are stopped (they end NODE_FAIL)."""
        self.drained.add(gpu)
        for job_id, gpus in self.holding.items():
            if gpu in gpus:
                self.stopping[job_id] = JobState.NODE_FAIL
        self.scheduler.drained(gpu, True, self.now)

        self.decide()

    @precondition(lambda self: self.drained)
    @rule(data=st.data())
    def resume(self, data: st.DataObject) -> None:
        gpu = data.draw(st.sampled_from(sorted(self.drained)))
        self.drained.discard(gpu)
        self.scheduler.drained(gpu, False, self.now)

        self.decide()

    @rule(gpus=st.sets(st.integers(0, GPUS - 1), max_size=GPUS - 1))
    def foreign_memory(self, gpus: set[int]) -> None:
        """Free GPUs holding memory no job owns are not handed out (what telemetry reports)."""
        held = {g for gs in self.holding.values() for g in gs}
        self.busy = gpus - held
        self.scheduler.set_busy({g: f"GPU {g} busy" for g in self.busy})

        self.decide()

    @rule(seconds=st.sampled_from([1.0, 60.0, 900.0, 4_000.0]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds

        self.decide()

    @rule()
    def restart(self) -> None:
        """The server restarts: a new scheduler from the records; processes live on."""
        self.scheduler = self._new_scheduler()
        for gpu in sorted(self.drained):
            self.scheduler.drained(gpu, True, self.now)
        self.scheduler.set_busy({g: f"GPU {g} busy" for g in self.busy})
        self.scheduler.rebuild(self.records.values())
        for job_id, gpus in self.holding.items():
            self.scheduler.launched(job_id, gpus)
        self.decide()

    # -- what must always hold ---------------------------------------------------------------
    def _check_gpus(self) -> None:
        whole: dict[int, int] = {}
        shared_mib: dict[int, int] = {}
        for job_id, gpus in self.holding.items():
            share = self.records[job_id].spec.gpu_mem_mib
            for gpu in gpus:
                if share:
                    shared_mib[gpu] = shared_mib.get(gpu, 0) + share
                else:
                    assert gpu not in whole, f"GPU {gpu}: jobs {whole[gpu]} and {job_id}"
                    whole[gpu] = job_id
        for gpu, mib in shared_mib.items():
            assert gpu not in whole, f"GPU {gpu} shared and held whole by job {whole[gpu]}"
            assert mib <= GPU_MEM_MIB, f"GPU {gpu}: {mib} MiB of shares on {GPU_MEM_MIB}"

    @invariant()
    def no_gpu_is_double_booked(self) -> None:
        self._check_gpus()


BindingMachine.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_no_gpu_is_ever_held_by_two_jobs = BindingMachine.TestCase
