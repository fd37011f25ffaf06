"""The binding state machine (`test_binding_properties.py`) on a machine with NVIDIA and AMD
GPUs, with jobs asking for a vendor, a model or no type (issue 16): on top of its invariants
(no GPU held by two jobs, shares within memory), every job's GPUs are of one pool, of the type
it asked for, whatever the policy, preemptions, drains and restarts."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from gpuyard.domain.gpu_types import matches
from gpuyard.domain.job import Gpu, JobSpec, NodeCapacity
from gpuyard.scheduling.policies import make_policy
from gpuyard.services.scheduler.inventory import Inventory
from gpuyard.services.scheduler.live import LiveScheduler
from tests.services.test_binding_properties import GPU_MEM_MIB, BindingMachine

MIXED = Inventory(
    (
        *(Gpu(i, f"GPU-{i}", "NVIDIA H200", GPU_MEM_MIB, True, vendor="nvidia", arch="9.0")
          for i in range(2)),
        *(Gpu(i, f"amd-{i}", "AMD Instinct MI300X", GPU_MEM_MIB, True, vendor="amd",
              arch="gfx942", device_index=i - 2) for i in range(2, 4)),
    ),
    NodeCapacity("node0", cpus=64, mem_mib=1 << 20),
    "test",
)  # fmt: skip
BY_INDEX = {gpu.index: gpu for gpu in MIXED.gpus}


class TypedBindingMachine(BindingMachine):
    def _new_scheduler(self) -> LiveScheduler:
        return LiveScheduler(make_policy(self.policy, for_server=True), MIXED, lambda: self.now)

    @rule(
        gpus=st.integers(1, 2),
        gpu_type=st.sampled_from(["", "", "nvidia", "amd", "mi300x", "H200", "gfx942"]),
        share_gib=st.sampled_from([0, 0, 10, 50]),
        priority=st.sampled_from([0, 0, 5]),
    )
    def submit_typed(self, gpus: int, gpu_type: str, share_gib: int, priority: int) -> None:
        spec = JobSpec(("train",), "t", "/", gpus=gpus, gpu_mem_mib=share_gib * 1024,
                       priority=priority, gpu_type=gpu_type, preemptible=True)  # fmt: skip
        self._submit(spec)

    @invariant()
    def every_job_is_on_gpus_of_one_pool_and_its_type(self) -> None:
        for job_id, gpus in self.holding.items():
            spec = self.records[job_id].spec
            held = [BY_INDEX[g] for g in gpus]
            assert len({(g.vendor, g.name) for g in held}) == 1, f"job {job_id} on {gpus}"
            assert all(matches(spec.gpu_type, g) for g in held), (job_id, spec.gpu_type, gpus)


TypedBindingMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_typed_jobs_land_on_their_type_and_no_gpu_is_held_by_two = TypedBindingMachine.TestCase
