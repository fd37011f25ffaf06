"""The live scheduler's gate (held jobs stay out of the policy, with their own reason), its
lock-free readers, and estimates made from a mirror of the policy: the same start times as a
copy of the live policy gives, without a copy under the scheduler's lock."""

from __future__ import annotations

import copy
import random
import threading

import pytest

from gpuyard.domain.job import REASON_PRIORITY, REASON_RESOURCES, Gpu, Job, JobSpec, NodeCapacity
from gpuyard.domain.states import JobState
from gpuyard.scheduling.policies import make_policy
from gpuyard.scheduling.projection import project_starts
from gpuyard.services.scheduler.inventory import Inventory
from gpuyard.services.scheduler.live import LiveScheduler

LIVE_POLICIES = ["fifo", "backfill", "fairshare", "las", "default"]


class Rig:
    """A LiveScheduler driven as the controller drives it, on `gpus` declared GPUs."""

    def __init__(
        self, policy: str, gpus: int = 1, in_process: bool = False, gpu_mem_mib: int | None = None
    ) -> None:
        self.now = 100.0
        listed = tuple(Gpu(i, f"GPU-{i}", "declared", gpu_mem_mib, False) for i in range(gpus))
        inventory = Inventory(listed, NodeCapacity("n", 64, 1 << 20), "declared")
        self.scheduler = LiveScheduler(
            make_policy(policy, for_server=True), inventory, self.clock,
            estimates_in_process=in_process,
        )  # fmt: skip
        self.records: dict[int, Job] = {}

    def clock(self) -> float:
        return self.now

    def submit(self, job_id: int, gpus: int = 1, limit_s: int | None = 3600, **spec: int) -> Job:
        job_spec = JobSpec(("x",), "x", "/", gpus=gpus, time_limit_s=limit_s, **spec)  # type: ignore[arg-type]
        job = Job(job_id, job_spec, f"u{job_id % 3}", JobState.PENDING, self.now)
        self.records[job_id] = job
        self.scheduler.submitted(job)
        return job

    def tick(self) -> list[int]:
        """One pass; launches are recorded at once; preempted jobs stop at once."""
        decided = self.scheduler.decide()
        for launch in decided.launches:
            record = self.records[launch.job_id]
            self.records[launch.job_id] = record.transition(
                JobState.RUNNING, gpus=launch.gpus, started_at=self.now
            )
            self.scheduler.launched(launch.job_id, launch.gpus)
        self.scheduler.stops_recorded(decided.preempt)
        for job_id in decided.preempt:
            requeued = self.records[job_id].transition(JobState.PENDING, gpus=())
            self.records[job_id] = requeued
            self.scheduler.ended(requeued, self.now)
        return [launch.job_id for launch in decided.launches]

    def end(self, job_id: int) -> None:
        ended = self.records[job_id].transition(JobState.COMPLETED, ended_at=self.now)
        self.records[job_id] = ended
        self.scheduler.ended(ended, self.now)

    def running(self) -> list[int]:
        return [i for i, j in self.records.items() if j.state is JobState.RUNNING]


# -- the gate ---------------------------------------------------------------------------------


def test_a_held_job_leaves_the_policy_with_its_own_reason_and_comes_back_when_released() -> None:
    rig = Rig("fifo")
    rig.submit(1)
    assert rig.tick() == [1]
    rig.submit(2)
    rig.submit(3)
    rig.tick()
    assert rig.scheduler.reason_for(2) == REASON_RESOURCES
    assert rig.scheduler.reason_for(3) == REASON_PRIORITY

    rig.scheduler.gate.hold(2, "JobHeldUser")
    assert rig.scheduler.reason_for(2) == "JobHeldUser"  # at once, before any pass
    rig.tick()
    assert rig.scheduler.reason_for(3) == REASON_RESOURCES  # next in line now
    assert 2 not in rig.scheduler.estimated_starts()  # the policy does not know it

    rig.now += 10
    rig.end(1)
    assert rig.tick() == [3]  # not 2, though it came first

    rig.scheduler.gate.release(2)
    rig.tick()
    assert rig.scheduler.reason_for(2) == REASON_RESOURCES
    rig.now += 10
    rig.end(3)
    assert rig.tick() == [2]


def test_a_job_held_before_its_submit_is_never_fed_and_a_held_job_can_be_cancelled() -> None:
    rig = Rig("fifo")
    rig.scheduler.gate.hold(1, "Dependency")
    rig.submit(1)
    assert rig.tick() == []
    assert rig.scheduler.reason_for(1) == "Dependency"
    rig.scheduler.cancelled(1, rig.now)
    rig.scheduler.gate.release(1)  # too late: nothing comes back
    rig.submit(2)
    assert rig.tick() == [2]


@pytest.mark.parametrize("in_process", [True, False])
def test_estimates_stop_counting_a_held_job_at_once_and_count_it_again_on_release(
    in_process: bool,
) -> None:
    """Right after `hold`, the job behind the held one is estimated to start in its place:
    not after the next pass, nor after the last estimates grow stale (issue 26)."""
    rig = Rig("default", in_process=in_process)
    try:
        rig.submit(1)
        assert rig.tick() == [1]
        rig.submit(2)
        rig.submit(3)
        rig.tick()
        assert rig.scheduler.estimated_starts() == {2: rig.now + 3600, 3: rig.now + 7200}

        rig.scheduler.gate.hold(2, "JobHeldUser")
        assert rig.scheduler.estimated_starts() == {3: rig.now + 3600}  # before any pass
        rig.tick()
        assert rig.scheduler.estimated_starts() == {3: rig.now + 3600}

        rig.scheduler.gate.release(2)
        rig.tick()
        assert rig.scheduler.estimated_starts() == {2: rig.now + 3600, 3: rig.now + 7200}
    finally:
        rig.scheduler.close()


# -- lock-free readers ------------------------------------------------------------------------


def test_reasons_gpus_and_cached_estimates_never_wait_for_the_scheduler_lock() -> None:
    """The event loop asks these: while a pass (or anything) holds the lock, they answer."""
    rig = Rig("fifo")
    rig.submit(1)
    rig.tick()
    rig.submit(2)
    rig.tick()
    rig.scheduler.estimated_starts()
    answers: list[object] = []

    def ask() -> None:
        answers.append(rig.scheduler.reason_for(2))
        answers.append(rig.scheduler.shared_gpus())
        answers.append(rig.scheduler.estimated_starts([2]))

    with rig.scheduler._lock:  # a pass that takes its time
        reader = threading.Thread(target=ask)
        reader.start()
        reader.join(timeout=5)
        assert not reader.is_alive(), "a reader waited for the scheduler's lock"
    assert answers == [REASON_RESOURCES, {}, {2: 100.0 + 3600}]


def test_the_head_asking_for_gpu_memory_is_told_what_is_short_from_the_snapshot() -> None:
    rig = Rig("fifo", gpu_mem_mib=80 * 1024)
    rig.submit(1, gpu_mem_mib=50 * 1024)
    assert rig.tick() == [1]
    rig.submit(2, gpu_mem_mib=40 * 1024)
    rig.tick()
    assert rig.scheduler.reason_for(2) == (
        "Resources: GPU memory: 40G wanted on 1 GPU; most free on a shared GPU: 30G, "
        "0 whole GPUs free"
    )
    assert rig.scheduler.shared_gpus() == {0: 30 * 1024}


# -- estimates from the mirror ----------------------------------------------------------------


def _busy_history(rig: Rig, seed: int) -> None:
    """Submits, ends, cancels and priority preemptions on 4 GPUs, in time order."""
    rng = random.Random(seed)
    for job_id in range(1, 60):
        rig.now += rng.choice([0, 5, 60, 600])
        rig.submit(job_id, gpus=rng.choice([1, 1, 2, 4]), limit_s=rng.choice([600, 7200, 86400]),
                   priority=rng.choice([0, 0, 0, 3]), preemptible=True)  # fmt: skip
        if rng.random() < 0.3 and rig.running():
            rig.end(rng.choice(rig.running()))
        if rng.random() < 0.1:
            rig.scheduler.cancelled(job_id, rig.now)
            rig.records[job_id] = rig.records[job_id].transition(JobState.CANCELLED)
        rig.tick()


@pytest.mark.parametrize("policy", LIVE_POLICIES)
def test_estimates_from_the_mirror_equal_a_projection_of_a_copy_of_the_live_policy(
    policy: str,
) -> None:
    rig = Rig(policy, gpus=4)
    _busy_history(rig, seed=3)
    scheduler = rig.scheduler
    running = [j for j in scheduler._feed.jobs.values() if j.running]
    live_copy = copy.deepcopy((scheduler.policy, scheduler.cluster, running))
    projection = project_starts(*live_copy, rig.now, budget_s=None)
    expected = projection.starts
    expected.update({job_id: rig.now for job_id in scheduler._assigned})  # chosen: start now
    assert any(start is not None for start in expected.values())
    assert scheduler.estimated_starts() == expected
    assert scheduler.start_estimates().preempted_from == projection.preempted_from
    assert scheduler.estimator.resyncs == 0


def test_a_mirror_that_decides_otherwise_is_rebuilt_from_the_live_policy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rig = Rig("default", gpus=4, in_process=True)  # the patch below is this process's
    _busy_history(rig, seed=5)
    from gpuyard.services.scheduler.policy_steps import PolicyFeed

    monkeypatch.setattr(PolicyFeed, "replay", lambda self, ops: False)
    rig.submit(100)
    rig.tick()
    scheduler = rig.scheduler
    running = [j for j in scheduler._feed.jobs.values() if j.running]
    expected = project_starts(
        *copy.deepcopy((scheduler.policy, scheduler.cluster, running)), rig.now, budget_s=None
    ).starts
    expected.update({job_id: rig.now for job_id in scheduler._assigned})
    assert scheduler.estimated_starts() == expected
    assert scheduler.estimator.resyncs == 1


def test_the_head_waiting_for_cpus_or_memory_with_gpus_free_is_told_which_and_how_much() -> None:
    """GPUs free, CPUs (or memory) all taken: `Resources` alone sent users looking at GPUs."""
    rig = Rig("fifo", gpus=2)
    rig.submit(1, cpus=64)
    assert rig.tick() == [1]
    rig.submit(2, cpus=2)
    rig.tick()
    assert rig.scheduler.reason_for(2) == "Resources: CPUs (64 of 64 in use)"

    rig = Rig("fifo", gpus=2)
    rig.submit(1, mem_mib=1 << 20)
    assert rig.tick() == [1]
    rig.submit(2, mem_mib=1024)
    rig.tick()
    assert rig.scheduler.reason_for(2) == "Resources: memory (1024G of 1024G in use)"


def test_a_gpu_memory_job_waiting_for_a_cpu_is_told_cpus_not_gpu_memory() -> None:
    """3 GPUs free, every CPU taken: the reason names the CPUs (it blamed GPU memory)."""
    rig = Rig("fifo", gpus=4, gpu_mem_mib=80 * 1024)
    rig.submit(1, cpus=64)
    assert rig.tick() == [1]
    rig.submit(2, gpu_mem_mib=70 * 1024, cpus=2)
    rig.tick()
    assert rig.scheduler.reason_for(2) == "Resources: CPUs (64 of 64 in use)"


def test_the_head_waiting_for_gpus_keeps_the_plain_resources_reason() -> None:
    rig = Rig("fifo", gpus=1)
    rig.submit(1)
    rig.tick()
    rig.submit(2, cpus=2)
    rig.tick()
    assert rig.scheduler.reason_for(2) == REASON_RESOURCES
