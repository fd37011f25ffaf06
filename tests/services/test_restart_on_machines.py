"""A restarted cluster server puts each running job back on the machine it runs on: CPU-only
jobs too (their CPUs and memory are charged where they run, not on the server's own machine,
which once refused to start: "job N is still running ... more than this server now offers")."""

from __future__ import annotations

import time

from gpuyard.domain.job import Gpu, Job, JobSpec, NodeCapacity
from gpuyard.domain.states import JobState
from gpuyard.scheduling.policies import make_policy
from gpuyard.services.scheduler.inventory import Inventory
from gpuyard.services.scheduler.live import LiveScheduler


def _inventory() -> Inventory:
    gpus = [Gpu(i, f"m{i // 2}/gpu{i % 2}", "declared", None, False, f"m{i // 2}")
            for i in range(4)]  # fmt: skip
    return Inventory(
        tuple(gpus), NodeCapacity("m0", 4, 10_000), "declared", (NodeCapacity("m1", 12, 10_000),)
    )


def _running(job_id: int, node: str, cpus: int) -> Job:
    now = time.time()
    spec = JobSpec(("sleep", "60"), "s", "/tmp", cpus=cpus, mem_mib=100)
    return Job(job_id, spec, "alice", JobState.RUNNING, now - 10, started_at=now - 5, node=node,
               pid=1000 + job_id)  # fmt: skip


def test_cpu_jobs_running_on_another_machine_are_charged_there_at_a_restart() -> None:
    scheduler = LiveScheduler(make_policy("fifo", for_server=True), _inventory(), time.time,
                              estimates_in_process=True)  # fmt: skip
    try:
        on_m1 = [_running(i, "m1", 2) for i in range(1, 6)]  # 10 CPUs: m1 has 12, m0 only 4
        scheduler.rebuild(on_m1)  # raised Unavailable before: all counted on m0
        assert scheduler.binding.restored_placement(on_m1[0])[0] == ((1, 0),)
        assert scheduler.binding.restored_placement(_running(9, "m0", 1))[0] == ((0, 0),)
    finally:
        scheduler.close()
