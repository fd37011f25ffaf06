"""AMD GPUs beside NVIDIA ones (issue 16): each vendor's device mask in a job's environment,
which GPUs a `--gpu-type` names, and placement by type on a mixed machine."""

from __future__ import annotations

import pytest
from tests.unit.policy_context import RecordingContext

from gpuyard.domain.errors import InvalidRequest
from gpuyard.domain.gpu_types import check_gpu_type, matches, normalize_type, type_labels
from gpuyard.domain.job import Gpu, Job, JobSpec, NodeCapacity
from gpuyard.domain.states import JobState
from gpuyard.scheduling.cluster import ClusterState, NodeSpec
from gpuyard.scheduling.policies import make_policy, policy_names
from gpuyard.scheduling.policy import SchedJob
from gpuyard.services.launch.env import build_job_env
from gpuyard.services.launch.oom import oom_line
from gpuyard.services.scheduler.inventory import Inventory
from gpuyard.services.scheduler.live import LiveScheduler

H100 = "NVIDIA H100 80GB HBM3"
MI300X = "AMD Instinct MI300X"


def nvidia(index: int, name: str = H100) -> Gpu:
    return Gpu(index, f"GPU-{index}", name, 81559, True, vendor="nvidia", arch="9.0")


def amd(index: int, device_index: int | None = None) -> Gpu:
    return Gpu(index, f"amd-{index}", MI300X, 196592, True, vendor="amd", arch="gfx942",
               device_index=device_index)  # fmt: skip


def job_on(*gpus: int, env: tuple[tuple[str, str], ...] = ()) -> Job:
    spec = JobSpec(argv=("x",), name="n", workdir="/", gpus=len(gpus), env=env)
    return Job(1, spec, "me", JobState.RUNNING, 0.0, gpus=gpus)


# -- the environment ------------------------------------------------------------------------
def test_a_job_on_amd_gpu_1_sees_rocr_visible_devices_1_and_no_second_mask() -> None:
    gpus = [amd(0), amd(1), amd(2)]
    # A submitter's shell may carry masks of its own: none of them may remap the job's GPUs.
    sent = (("HIP_VISIBLE_DEVICES", "3"), ("CUDA_VISIBLE_DEVICES", "2"),
            ("GPU_DEVICE_ORDINAL", "1"))  # fmt: skip
    env = build_job_env(job_on(1, env=sent), {}, gpus=gpus)
    assert env["ROCR_VISIBLE_DEVICES"] == "1"
    assert "HIP_VISIBLE_DEVICES" not in env and "GPU_DEVICE_ORDINAL" not in env
    # HIP reads CUDA_VISIBLE_DEVICES as its own when HIP_VISIBLE_DEVICES is unset.
    assert "CUDA_VISIBLE_DEVICES" not in env
    assert env["GPUYARD_NUM_GPUS"] == "1"


def test_an_nvidia_only_machine_is_unchanged() -> None:
    env = build_job_env(job_on(1, 3), {}, gpus=[nvidia(i) for i in range(4)])
    assert env["CUDA_VISIBLE_DEVICES"] == "1,3"
    assert not any(k in env for k in ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"))
    # Declared GPUs (no vendor), and no inventory at all (older callers): the same.
    assert build_job_env(job_on(0, 2), {})["CUDA_VISIBLE_DEVICES"] == "0,2"


def test_on_a_mixed_machine_each_vendor_gets_its_own_numbering_and_the_others_are_hidden() -> None:
    gpus = [nvidia(0), nvidia(1), amd(2), amd(3)]  # NVIDIA first, then AMD
    on_amd = build_job_env(job_on(3), {}, gpus=gpus)
    assert on_amd["ROCR_VISIBLE_DEVICES"] == "1"  # the second AMD GPU in amdsmi's numbering
    assert on_amd["CUDA_VISIBLE_DEVICES"] == ""  # no NVIDIA GPU for a job on AMD ones
    # ... and HIP, which would read that empty CUDA mask, reads its own: all of ROCR's.
    assert on_amd["HIP_VISIBLE_DEVICES"] == "0"
    on_nvidia = build_job_env(job_on(1), {}, gpus=gpus)
    assert on_nvidia["CUDA_VISIBLE_DEVICES"] == "1"
    assert on_nvidia["ROCR_VISIBLE_DEVICES"] == ""  # no AMD GPU for a job on NVIDIA ones
    cpu_only = build_job_env(job_on(), {}, gpus=gpus)
    assert cpu_only["CUDA_VISIBLE_DEVICES"] == "" and cpu_only["ROCR_VISIBLE_DEVICES"] == ""


def test_the_vendor_index_from_detection_wins_over_the_servers_index() -> None:
    # `--gpus 0,3` on 2 NVIDIA + 2 AMD GPUs keeps NVIDIA 0 and AMD 1 (server index 3).
    gpus = [nvidia(0), amd(3, device_index=1)]
    assert build_job_env(job_on(3), {}, gpus=gpus)["ROCR_VISIBLE_DEVICES"] == "1"
    two = build_job_env(job_on(2, 3), {}, gpus=[amd(2, 0), amd(3, 1), nvidia(0)])
    assert two["ROCR_VISIBLE_DEVICES"] == "0,1" and two["HIP_VISIBLE_DEVICES"] == "0,1"


# -- types ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("asked", "gpu", "fits"),
    [
        ("mi300x", amd(0), True),
        ("MI300X", amd(0), True),
        ("amd", amd(0), True),
        ("AMD", amd(0), True),
        ("gfx942", amd(0), True),
        ("instinct-mi300x", amd(0), True),
        ("nvidia", amd(0), False),
        ("h100", nvidia(0), True),
        ("nvidia", nvidia(0), True),
        ("mi300x", nvidia(0), False),
        ("a100", nvidia(0, "NVIDIA A100-SXM4-80GB"), True),
        ("a10", nvidia(0, "NVIDIA A100-SXM4-80GB"), False),  # whole words only
        ("rtx4090", nvidia(0, "NVIDIA GeForce RTX 4090"), True),
        ("", amd(0), True),
    ],
)
def test_a_type_names_a_vendor_a_model_or_an_architecture(asked: str, gpu: Gpu, fits: bool) -> None:
    assert matches(asked, gpu) is fits


def test_labels_and_normalizing() -> None:
    assert normalize_type(" MI-300X ") == "mi300x"
    assert {"amd", "instinct", "mi300x", "amdinstinctmi300x", "gfx942"} <= type_labels(
        "amd", MI300X, "gfx942"
    )


def test_a_type_the_server_lacks_is_refused_in_one_line_naming_the_types_there_are() -> None:
    gpus = [nvidia(0), nvidia(1), amd(2), amd(3)]
    check_gpu_type("mi300x", 2, 1, gpus)  # fits
    with pytest.raises(InvalidRequest) as err:
        check_gpu_type("a100", 1, 1, gpus)
    message = err.value.message
    assert "\n" not in message and err.value.field == "gpu_type"
    assert "2 x NVIDIA H100 80GB HBM3 (nvidia)" in message
    assert "2 x AMD Instinct MI300X (amd)" in message
    with pytest.raises(InvalidRequest, match="at most 2"):
        check_gpu_type("amd", 3, 1, gpus)
    with pytest.raises(InvalidRequest, match="no GPUs"):
        check_gpu_type("amd", 1, 1, [])


# -- placement by type ----------------------------------------------------------------------
def mixed_cluster(cpus: int | None = None) -> ClusterState:
    """One machine with 2 NVIDIA H100s and 2 AMD MI300Xs: a node per pool, one host."""
    return ClusterState(
        [
            NodeSpec("m", 2, cpus, None, 80 * 1024, type_labels("nvidia", H100, "9.0"), "m"),
            NodeSpec("m", 2, cpus, None, 80 * 1024, type_labels("amd", MI300X, "gfx942"), "m"),
        ]
    )


def test_a_typed_job_goes_only_to_its_type_and_an_untyped_one_never_spans_two_pools() -> None:
    cluster = mixed_cluster()
    assert cluster.place(2, gpu_type="mi300x") == ((1, 2),)
    assert cluster.place(1, gpu_type="H100") == ((0, 1),)
    assert cluster.place(1, gpu_type="a100") is None
    assert cluster.place(3) is None  # 3 GPUs would mix NVIDIA and AMD
    cluster.allocate(((1, 2),))  # the AMD GPUs are taken
    assert cluster.place(1, gpu_type="amd") is None
    assert cluster.place(2) == ((0, 2),)
    assert cluster.place(1, gpu_mem_mib=1024, gpu_type="amd") is None  # shares too
    assert cluster.place(1, gpu_mem_mib=1024, gpu_type="nvidia") == ((0, 0),)
    free = list(cluster.free)
    assert cluster.would_fit(free, 2, gpu_type="nvidia")
    assert not cluster.would_fit(free, 1, gpu_type="amd")


def test_one_machines_pools_share_its_cpus() -> None:
    cluster = mixed_cluster(cpus=8)
    cluster.allocate(((0, 1),), cpus=6)
    assert cluster.free_cpus == [2, 2]
    assert cluster.place(1, cpus=4, gpu_type="amd") is None  # the machine has 2 CPUs left
    cluster.release(((0, 1),), cpus=6)
    assert cluster.place(1, cpus=4, gpu_type="amd") == ((1, 1),)


@pytest.mark.parametrize("policy", policy_names())
def test_every_policy_places_typed_jobs_on_their_type_only(policy: str) -> None:
    cluster = mixed_cluster()
    chosen = make_policy(policy)
    ctx = RecordingContext(chosen, cluster)
    jobs = [
        SchedJob(1, "a", 2, 0.0, gpu_type="mi300x", oracle_duration_s=10),
        SchedJob(2, "c", 2, 1.0, gpu_type="nvidia", oracle_duration_s=10),
        SchedJob(3, "b", 1, 2.0, gpu_type="mi300x", oracle_duration_s=10),  # waits: AMD busy
    ]
    for job in jobs:
        chosen.submit(job, job.submitted_at)
    where: dict[int, int] = {}
    for step in range(4):
        ctx.now = 3.0 + step
        chosen.schedule(ctx)
        for job in jobs:
            if job.running and job.id not in where:
                where[job.id] = job.placement[0][0]
        assert not ctx.preempted
        for job in [j for j in jobs if j.running][:1]:
            ctx.finish(job)
    assert where == {1: 1, 2: 0, 3: 1}  # node 0: the NVIDIA pool, node 1: the AMD one


def test_a_preemptive_policy_frees_gpus_of_the_type_asked_for() -> None:
    cluster = mixed_cluster()
    chosen = make_policy("default")
    ctx = RecordingContext(chosen, cluster)
    low = [SchedJob(i, "a", 2, float(i), gpu_type=t) for i, t in ((1, "nvidia"), (2, "amd"))]
    for job in low:
        chosen.submit(job, job.submitted_at)
    chosen.schedule(ctx)
    urgent = SchedJob(3, "b", 2, 5.0, priority=10, gpu_type="mi300x")
    chosen.submit(urgent, 5.0)
    ctx.now = 5.0
    chosen.schedule(ctx)
    assert ctx.preempted == [2] and urgent.placement == ((1, 2),)


def test_the_live_scheduler_binds_a_typed_job_to_the_gpus_of_its_type() -> None:
    gpus = (nvidia(0), nvidia(1), amd(2, 0), amd(3, 1))
    inventory = Inventory(gpus, NodeCapacity("m", 64, 1 << 20), "test")
    scheduler = LiveScheduler(make_policy("fifo", for_server=True), inventory, lambda: 10.0)

    def submit(job_id: int, count: int, gpu_type: str = "") -> None:
        spec = JobSpec(("x",), "n", "/", gpus=count, gpu_type=gpu_type)
        scheduler.submitted(Job(job_id, spec, "u", JobState.PENDING, float(job_id)))

    submit(1, 1, "mi300x")
    submit(2, 1, "AMD")
    submit(3, 2)  # any type: the NVIDIA pool is the one with room
    launched = {launch.job_id: launch.gpus for launch in scheduler.decide().launches}
    assert set(launched[1] + launched[2]) == {2, 3}
    assert launched[3] == (0, 1)


# -- out of memory on AMD GPUs ----------------------------------------------------------------
@pytest.mark.parametrize(
    "line",
    [
        "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
        "capacity of 191.98 GiB of which 1.2 GiB is free.",
        "RuntimeError: HIP error: out of memory",
        "hipErrorOutOfMemory: out of memory",
        "rocBLAS error: rocblas_status_memory_error",
        "MIOpen Error: miopenStatusAllocFailed",
    ],
)
def test_hip_out_of_memory_messages_are_recognised(line: str) -> None:
    tail = f"step 3\nTraceback (most recent call last):\n{line}\n"
    assert oom_line(tail) == (line if len(line) <= 200 else line[:197] + "...")


def test_other_hip_errors_are_not_out_of_memory() -> None:
    assert oom_line("RuntimeError: HIP error: invalid device ordinal") is None


def test_the_jobs_machine_name_need_not_be_its_gpus_node_on_one_machine() -> None:
    job = Job(1, JobSpec(argv=("x",), name="n", workdir="/", gpus=1), "me", JobState.RUNNING,
              0.0, gpus=(3,), node="host-a")  # fmt: skip
    env = build_job_env(job, {}, gpus=[nvidia(0), nvidia(1), amd(2), amd(3)])  # node "local"
    assert (env["ROCR_VISIBLE_DEVICES"], env["CUDA_VISIBLE_DEVICES"]) == ("1", "")


def test_declared_gpus_take_a_job_of_any_type() -> None:
    declared = [Gpu(i, f"declared-{i}", "declared GPU", None, False) for i in range(4)]
    check_gpu_type("a100", 4, 1, declared)  # an sbatch script's --gres=gpu:a100:4
    assert matches("mi300x", declared[0])
    inventory = Inventory(tuple(declared), NodeCapacity("m", 64, 1 << 20), "test")
    scheduler = LiveScheduler(make_policy("fifo", for_server=True), inventory, lambda: 1.0)
    spec = JobSpec(("x",), "n", "/", gpus=2, gpu_type="v100")
    scheduler.submitted(Job(1, spec, "u", JobState.PENDING, 0.0))
    assert [launch.gpus for launch in scheduler.decide().launches] == [(0, 1)]


def test_a_full_type_is_remembered_only_until_room_comes_back() -> None:
    cluster = mixed_cluster()
    cluster.allocate(((1, 2),))  # every AMD GPU taken
    assert cluster.place(1, gpu_type="amd") is None
    assert cluster.place(2, gpu_type="amd") is None  # from the memo: a larger one fails too
    assert cluster.place(1, gpu_type="nvidia") == ((0, 1),)  # another type is not affected
    cluster.release(((1, 1),))
    assert cluster.place(1, gpu_type="amd") == ((1, 1),)


# -- containers -------------------------------------------------------------------------------
def test_a_container_on_amd_gpus_gets_rocm_devices_and_keeps_the_hosts_numbering() -> None:
    from gpuyard.services.launch.plan import _on_amd, container_argv
    from gpuyard.services.ports import ContainerRuntime

    env = {"ROCR_VISIBLE_DEVICES": "1", "PATH": "/usr/bin"}
    apptainer = ContainerRuntime("apptainer", "/usr/bin/apptainer")
    argv, out = container_argv(apptainer, "rocm.sif", ["python"], env, "/w", (3,), 1000, amd=True)
    assert "--rocm" in argv and "--nv" not in argv
    assert out["APPTAINERENV_ROCR_VISIBLE_DEVICES"] == "1"
    podman = ContainerRuntime("podman", "/usr/bin/podman")
    argv, _ = container_argv(podman, "rocm/pytorch", ["python"], env, "/w", (3,), 1000, amd=True)
    assert "--device=/dev/kfd" in argv and "--device=/dev/dri" in argv
    assert not any("nvidia.com" in a for a in argv) and "--env=ROCR_VISIBLE_DEVICES" in argv
    gpus = [nvidia(0), nvidia(1), amd(2), amd(3)]
    assert _on_amd(job_on(3), gpus) and not _on_amd(job_on(1), gpus) and not _on_amd(job_on(), gpus)
