"""A SchedJob crosses to the estimates' worker process pickled: its own state (a tuple of its
fields, cheaper than the dataclass default) must bring back every field, set or default."""

from __future__ import annotations

import dataclasses
import pickle

from gpuyard.scheduling.policy import SchedJob


def test_every_field_comes_back_from_the_worker_process_pickle() -> None:
    running = SchedJob(
        id=7, user="alice", gpus=2, submitted_at=10.5, priority=3, cpus=8, mem_mib=4096,
        gpu_mem_mib=1024, nodes=2, gpu_type="H100", time_limit_s=3600.0, preemptible=False,
        attained_gpu_s=12.0, run_started_at=20.0, first_started_at=15.0,
        placement=((0, (1, 2)),), restarts=1, oracle_duration_s=99.0,
    )  # fmt: skip
    fresh = SchedJob(id=8, user="bob", gpus=1, submitted_at=11.0)
    for job in (running, fresh):
        back = pickle.loads(pickle.dumps([job], protocol=5))[0]
        assert dataclasses.astuple(back) == dataclasses.astuple(job)
        assert back is not job and back.running == job.running
