"""A machine that joins a running server takes jobs at the next pass, no restart: a job too big
for the machines there were waits, then runs on the new machine's GPUs; GPUs already handed out
keep their numbers; the estimator's mirror follows (its estimates count the new GPUs)."""

from __future__ import annotations

import time

import pytest

from gpuyard.domain.job import Gpu, Job, JobSpec, NodeCapacity
from gpuyard.domain.states import JobState
from gpuyard.scheduling.policies import make_policy
from gpuyard.services.machine.event_ring import NODE_JOIN, EventLog
from gpuyard.services.machine.joins import MachineJoins
from gpuyard.services.scheduler.inventory import Inventory
from gpuyard.services.scheduler.live import LiveScheduler


def _gpu(index: int, node: str, name: str = "NVIDIA H100") -> Gpu:
    return Gpu(index, f"GPU-{node}-{index}", name, 81_559, True, node)


def _pending(job_id: int, gpus: int, gpu_type: str = "", limit_s: int | None = None) -> Job:
    spec = JobSpec(("train",), f"j{job_id}", "/tmp", gpus=gpus, cpus=1, mem_mib=100,
                   gpu_type=gpu_type, time_limit_s=limit_s)  # fmt: skip
    return Job(job_id, spec, "alice", JobState.PENDING, time.time())


@pytest.fixture
def world() -> tuple[Inventory, LiveScheduler, MachineJoins, EventLog]:
    inventory = Inventory((_gpu(0, "m0"), _gpu(1, "m0")), NodeCapacity("m0", 8, 64_000), "nvml",
                          (NodeCapacity("m1", 8, 64_000),))  # fmt: skip
    inventory.gpus = (*inventory.gpus, _gpu(2, "m1"), _gpu(3, "m1"))
    scheduler = LiveScheduler(make_policy("default", for_server=True), inventory, time.time,
                              estimates_in_process=True)  # fmt: skip
    events = EventLog()
    joins = MachineJoins(inventory, scheduler, events, wake=lambda: None)
    yield inventory, scheduler, joins, events
    scheduler.close()


def test_a_job_too_big_for_every_machine_runs_on_one_that_joins(world) -> None:  # type: ignore[no-untyped-def]
    inventory, scheduler, joins, events = world
    scheduler.submitted(_pending(1, 2))
    first = scheduler.decide().launches
    assert [launch.gpus for launch in first] == [(0, 1)]
    scheduler.launched(1, (0, 1))
    scheduler.submitted(_pending(2, 4))  # no machine has 4 GPUs
    assert scheduler.decide().launches == []
    assert scheduler.reason_for(2).startswith("Resources")

    new = [_gpu(0, "m2", "NVIDIA H200"), _gpu(1, "m2", "NVIDIA H200"),
           _gpu(2, "m2", "NVIDIA H200"), _gpu(3, "m2", "NVIDIA H200")]  # fmt: skip
    numbered = joins.join(NodeCapacity("m2", 16, 128_000), new)
    assert [g.index for g in numbered] == [4, 5, 6, 7]  # after every GPU known: none moves
    assert [g.node for g in numbered] == ["m2"] * 4
    assert [g.index for g in inventory.gpus] == list(range(8))
    assert inventory.gpus_of("m2") == [4, 5, 6, 7] and inventory.gpus_of("m0") == [0, 1]

    launches = scheduler.decide().launches
    assert [(launch.job_id, launch.node, launch.gpus) for launch in launches] == [
        (2, "m2", (4, 5, 6, 7))
    ]
    assert [e.kind for e in events.recent()] == [NODE_JOIN]
    assert "m2 joined: 4 GPU(s), 16 CPUs" in events.recent()[0].message


def test_a_joined_machines_gpu_type_is_asked_for_by_name(world) -> None:  # type: ignore[no-untyped-def]
    _, scheduler, joins, _ = world
    scheduler.submitted(_pending(1, 1, gpu_type="h200"))
    assert scheduler.decide().launches == []  # no H200 yet
    joins.join(NodeCapacity("m2", 4, 32_000), [_gpu(0, "m2", "NVIDIA H200")])
    assert [(launch.node, launch.gpus) for launch in scheduler.decide().launches] == [("m2", (4,))]


def test_estimates_after_a_join_count_the_new_gpus(world) -> None:  # type: ignore[no-untyped-def]
    _, scheduler, joins, _ = world
    asked = _pending(9, 1, gpu_type="h200", limit_s=3600).spec
    scheduler.submitted(_pending(1, 1, gpu_type="h200", limit_s=3600))
    scheduler.decide()
    assert scheduler.dry_run(asked, "bob", 9)[0].starts[9] is None  # no H200: never
    joins.join(NodeCapacity("m2", 4, 32_000), [_gpu(0, "m2", "NVIDIA H200")])
    assert [launch.job_id for launch in scheduler.decide().launches] == [1]
    scheduler.launched(1, (4,))
    start = scheduler.dry_run(asked, "bob", 9)[0].starts[9]
    assert start is not None and start > time.time() + 3000  # on the H200, after job 1's hour
    assert scheduler.estimator.resyncs == 0  # the mirror replayed the join, as the pass did


def test_a_machine_cannot_join_twice(world) -> None:  # type: ignore[no-untyped-def]
    _, _, joins, _ = world
    with pytest.raises(ValueError, match="m1 is already"):
        joins.join(NodeCapacity("m1", 8, 64_000), [])
