"""The live scheduler's binding of shared GPUs (`--gpu-mem` slots) to physical GPUs: a GPU bound
to a slot stays its slot's until the slot closes, even while no process holds it."""

from __future__ import annotations

from gpuyard.domain.job import Gpu, Job, JobSpec, NodeCapacity
from gpuyard.domain.states import JobState
from gpuyard.scheduling.policies import make_policy
from gpuyard.services.scheduler.inventory import Inventory
from gpuyard.services.scheduler.live import LiveScheduler

GIB = 1024


def _job(job_id: int, gpus: int, gpu_mem_gib: int = 0) -> Job:
    spec = JobSpec(("x",), f"j{job_id}", "/", gpus=gpus, gpu_mem_mib=gpu_mem_gib * GIB)
    return Job(job_id, spec, "u", JobState.PENDING, submitted_at=float(job_id))


def test_a_gpu_bound_to_a_shared_slot_is_not_given_to_a_whole_gpu_job_while_the_slot_lives() -> (
    None
):
    gpus = tuple(Gpu(i, f"GPU-{i}", "x", 80 * GIB, True) for i in range(3))
    inventory = Inventory(gpus, NodeCapacity("n", 64, 1 << 20), "test")
    now = [10.0]
    scheduler = LiveScheduler(make_policy("fifo", for_server=True), inventory, lambda: now[0])

    a = _job(1, 1, 10)
    scheduler.submitted(a)
    (launch,) = scheduler.decide().launches
    assert launch.gpus == (0,)  # slot S1 bound to GPU 0
    scheduler.launched(1, launch.gpus)

    # B needs S1 and a second shared GPU, but GPUs 1 and 2 hold foreign memory: it waits.
    scheduler.set_busy({1: "GPU 1 busy", 2: "GPU 2 busy"})
    b = _job(2, 2, 10)
    scheduler.submitted(b)
    assert scheduler.decide().launches == []

    # A ends: S1 lives on (B is in it), GPU 0 is held by no process now.
    now[0] = 20.0
    scheduler.ended(a.transition(JobState.RUNNING).transition(JobState.COMPLETED), now[0])
    c = _job(3, 1)  # a whole-GPU job: the policy sees one whole GPU free (3 - S1 - S2)
    scheduler.submitted(c)
    assert scheduler.decide().launches == []  # not GPU 0: it is S1's

    scheduler.set_busy({})
    launched = {launch.job_id: launch.gpus for launch in scheduler.decide().launches}
    assert launched[2][0] == 0  # B on S1's GPU and on a new one
    assert 0 not in launched[3] and set(launched[3]).isdisjoint(launched[2])
