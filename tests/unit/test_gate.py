"""The gate's pipeline (`scheduling/gate.py`) driven directly: its module's worked example."""

from __future__ import annotations

from gpuyard.domain.dependency import Ref, parse_dependency
from gpuyard.domain.states import JobState
from gpuyard.scheduling.gate import STAGES, GatePipeline
from gpuyard.scheduling.policy import SchedJob
from gpuyard.scheduling.quotas import Limits, QuotaRules
from gpuyard.scheduling.workflow_gate import GateJob, Named


class _World:
    """The policy's side of the gate, without a policy."""

    def __init__(self) -> None:
        self.jobs: dict[int, SchedJob] = {}
        self.parked: dict[int, SchedJob] = {}

    def park(self, job_id: int, at: float) -> bool:
        job = self.jobs.get(job_id)
        if job is None or job.running:
            return False
        self.parked[job_id] = self.jobs.pop(job_id)
        return True

    def unpark(self, job_id: int, at: float) -> bool:
        job = self.parked.pop(job_id, None)
        if job is not None:
            self.jobs[job_id] = job
        return job is not None


def test_the_stages_in_their_order() -> None:
    assert [stage.name for stage in STAGES] == ["held", "backoff", "workflow", "quotas"]


def test_the_worked_example() -> None:
    now = [50.0]
    bob_running = Named(3, JobState.RUNNING, None, 0.0)

    def named(ref: Ref) -> list[Named]:
        return [bob_running] if ref.job_id == 3 else []

    rules = QuotaRules(users={"alice": Limits(max_gpus=4)})
    gate = GatePipeline(named, lambda: now[0], holds={5: "JobHeldUser"}.get, quotas=rules)
    world = _World()
    for job_id, user in ((1, "alice"), (3, "bob")):
        world.jobs[job_id] = SchedJob(job_id, user, 2, 0.0, run_started_at=0.0)
    for job_id in range(5, 10):
        flow = GateJob(7, "alice", "", parse_dependency("afterok:3")) if job_id == 7 else None
        later = 100.0 if job_id == 6 else None
        job = SchedJob(job_id, "alice", 2, float(job_id))
        parked = gate.submitted(job_id, job.submitted_at, flow=flow, not_before=later)
        (world.parked if parked else world.jobs)[job_id] = job

    assert gate.admit(world, 50.0, told=True)
    reasons = {job_id: gate.reason(job_id) for job_id in range(5, 10)}
    assert reasons == {5: "JobHeldUser", 6: "BeginTime", 7: "Dependency", 8: None,
                       9: "QOSMaxGpuPerUser"}  # fmt: skip
    world.jobs[8].run_started_at = 50.0  # the policy starts 8
    gate.passed(world, 50.0)
    assert gate.next_at(50.0) == 100.0  # the back-off's end

    now[0] = 100.0
    assert gate.admit(world, 100.0, told=False, due=True)
    assert gate.reason(6) == "QOSMaxGpuPerUser" and 6 in world.parked

    del world.jobs[3]
    gate.run_ended(3, 120.0)
    gate.ended(3, JobState.COMPLETED, 0, 120.0)
    assert gate.busy and gate.admit(world, 120.0, told=True)
    assert gate.reason(7) == "QOSMaxGpuPerUser" and 7 in world.parked


def test_a_back_off_shows_another_stage_s_reason_first() -> None:
    gate = GatePipeline(lambda ref: [Named(3, JobState.RUNNING)], lambda: 0.0)
    flow = GateJob(4, "alice", "", parse_dependency("afterok:3"))
    assert gate.submitted(4, 0.0, flow=flow, not_before=10.0)
    assert gate.reason(4) == "Dependency"
