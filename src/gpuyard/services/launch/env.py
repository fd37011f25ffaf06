"""The environment a job runs with: one recipe, so every executor sets the same variables."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from itertools import pairwise

from gpuyard.domain.arrays import parse_array
from gpuyard.domain.errors import InvalidRequest
from gpuyard.domain.job import Gpu, Job
from gpuyard.jobhooks import HOOK_DIR
from gpuyard.services.ports import RunAs

# What a job takes from the server's own environment: where programs are, the locale, the
# time zone and the terminal. Nothing else of it (the server's token, a database password,
# cloud credentials, whatever its admin's shell held) ever reaches a job; the submitter's own
# variables come with the job (the CLI exports PATH, the virtualenv, ... and `--env`).
_FROM_SERVER = frozenset({"PATH", "LANG", "LANGUAGE", "TZ", "TERM"})
_FROM_SERVER_PREFIXES = ("LC_",)
# What a CUDA process holds outside its framework's allocator (context, kernels, library
# handles): a job's allocator is capped this much below its --gpu-mem, so that what NVML
# counts for the process (what the hard limit judges) stays within --gpu-mem.
CUDA_CONTEXT_MIB = 1024


# What the CLI sends of Slurm's variables on purpose: where `sbatch` ran, and sbatch's
# `--gpu-bind` for the job's srun steps. Any other SLURM_* a submitter sent (a submit from inside
# a Slurm job) would describe that job.
_SLURM_FROM_SUBMITTER = frozenset({"SLURM_SUBMIT_DIR", "SLURM_SUBMIT_HOST", "SLURM_GPU_BIND"})
# A job's Slurm cluster name (SLURM_CLUSTER_NAME), and its partition (SLURM_JOB_PARTITION):
# the server's one queue, as squeue, sacct and sinfo name it.
CLUSTER_NAME = "gpuyard"
PARTITION = "gpuyard"
# The variables of a step's tasks: set in the batch step of a job that asked for tasks
# (`-n`, `--ntasks-per-node`, not `--distributed`), else only inside an `srun` step (the shim
# sets them per task). Lightning takes a job for a Slurm job launched by srun when
# SLURM_NTASKS is set (then every process must be one of SLURM_NTASKS tasks, started by srun).
# Any other job's batch step is task 0 of one (ONE_TASK_VARIABLES, as Slurm's batch step).
TASK_VARIABLES = (
    "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE",
    "SLURM_PROCID", "SLURM_LOCALID",
)  # fmt: skip
ONE_TASK_VARIABLES = ("SLURM_PROCID", "SLURM_LOCALID")


def _from_server(name: str) -> bool:
    return name in _FROM_SERVER or name.startswith(_FROM_SERVER_PREFIXES)


def allocator_cap_mib(gpu_mem_mib: int) -> int:
    """The cap put on a shared-GPU job's allocator for a `--gpu-mem` of `gpu_mem_mib`:
    20 GiB -> 19 GiB; never below half of it (small shares: 2 GiB -> 1 GiB)."""
    return max(gpu_mem_mib - CUDA_CONTEXT_MIB, gpu_mem_mib // 2)


def build_job_env(
    job: Job,
    base: Mapping[str, str],
    gpu_total_mib: int | None = None,
    run_as: RunAs | None = None,
    checkpoint_dir: str | None = None,
    progress_file: str | None = None,
    gpus: Sequence[Gpu] = (),
    python_hook: bool = True,
) -> dict[str, str]:
    """The allowed part of the server's environment (`_FROM_SERVER`), then the identity of
    `run_as` (HOME, USER, LOGNAME, SHELL: a job run as another user must not get the
    server's), then what the submitter sent (the CLI's exported variables and `--env`), then
    what gpuyard guarantees. `gpu_total_mib`: memory of each of the job's GPUs, for
    frameworks capped by a fraction; `checkpoint_dir`: GPUYARD_CHECKPOINT_DIR, the job's folder
    for checkpoints, the same for all its runs; `progress_file`: GPUYARD_PROGRESS_FILE, where
    `gpuyard.progress()` appends its reports; `gpus`: the
    server's GPUs, for the vendors' visibility variables (`visible_devices`); `python_hook`:
    whether the job's user can read gpuyard's Python startup hook (`_python_output_env`); the
    `SLURM_*` variables (`slurm_env`) unless the job says `GPUYARD_SLURM_ENV=0` (then none of
    them, and the submitter's own pass as sent)."""
    env = {k: v for k, v in base.items() if _from_server(k)}
    slurm = wants_slurm_env(job)
    if run_as is not None:
        env.update(HOME=run_as.home, USER=run_as.user, LOGNAME=run_as.user, SHELL=run_as.shell)
    env.update(
        (k, v)
        for k, v in job.spec.env
        if not k.startswith("SLURM_") or k in _SLURM_FROM_SUBMITTER or not slurm
    )
    env.update(
        {
            # Exactly the job's GPUs (`visible_devices`: each vendor's own mask); an empty
            # string hides every GPU from a 0-GPU job.
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "GPUYARD_JOB_ID": str(job.id),
            "GPUYARD_JOB_NAME": job.spec.name,
            "GPUYARD_NUM_GPUS": str(len(job.gpus)),
            "GPUYARD_NODE": job.node,
            # 0 on the first run; N after N preemptions: resume from your checkpoint.
            "GPUYARD_RESTART_COUNT": str(job.restarts),
        }
    )
    env.update(_python_output_env(job, env, python_hook))
    for name, value in visible_devices(job, gpus).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    if job.spec.kind == "service" and job.spec.service_port:  # chosen at submit, kept
        env["PORT"] = env["GPUYARD_SERVICE_PORT"] = str(job.spec.service_port)
    if checkpoint_dir is not None:
        env["GPUYARD_CHECKPOINT_DIR"] = checkpoint_dir
    if progress_file is not None:
        env["GPUYARD_PROGRESS_FILE"] = progress_file
    if job.spec.cpus:
        env.setdefault("OMP_NUM_THREADS", str(job.spec.cpus))
    env["GPUYARD_NTASKS_PER_NODE"] = str(job.spec.ntasks_per_node)
    if slurm:
        env.update(slurm_env(job, env, run_as))
    if job.spec.gpu_mem_mib:
        env.update(_gpu_mem_env(job.spec.gpu_mem_mib, env, gpu_total_mib))
    return env


def _python_output_env(job: Job, env: Mapping[str, str], python_hook: bool) -> dict[str, str]:
    """How a job's Python writes its output. Line-buffered, as at a terminal (the startup hook,
    `jobhooks`, on GPUYARD_LINE_BUFFERED=1): each line reaches the log as it is printed, so
    progress streams, and in one write, so the lines of processes that share one stdout
    (torchrun's workers, a script's `cmd &`) never break into each other. Not PYTHONUNBUFFERED,
    which writes a print in pieces that such processes interleave mid-line (Slurm sets neither:
    its jobs' Python output is block-buffered, late and in 8 KiB pieces). A job that sets
    PYTHONUNBUFFERED keeps it; a container's Python (which cannot see the hook) and one whose
    user cannot read the hook get PYTHONUNBUFFERED=1, as before: its lines prompt."""
    if "PYTHONUNBUFFERED" in env:
        return {}
    if job.spec.container is not None or not python_hook:
        return {"PYTHONUNBUFFERED": "1"}
    return {"GPUYARD_LINE_BUFFERED": "1", "PYTHONPATH": _with_hook(env.get("PYTHONPATH"))}


def _with_hook(path: str | None) -> str:
    """PYTHONPATH with gpuyard's hook folder first (once)."""
    if not path:
        return HOOK_DIR
    return ":".join([HOOK_DIR, *(part for part in path.split(":") if part != HOOK_DIR)])


# What the ROCm stack reads to choose GPUs, besides ROCR_VISIBLE_DEVICES: HIP (and HIP reads
# CUDA_VISIBLE_DEVICES as its own when HIP_VISIBLE_DEVICES is unset), and HIP/OpenCL's older
# GPU_DEVICE_ORDINAL. Each indexes into what ROCR left visible: a second mask.
_AMD_SECOND_MASKS = ("HIP_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL")


def visible_devices(job: Job, gpus: Sequence[Gpu]) -> dict[str, str | None]:
    """The device masks of a job on the server's `gpus` (None: removed from the job's
    environment, whatever the submitter sent). Each vendor's runtime is told its own
    numbering (`Gpu.device_index`):

    - NVIDIA (and declared GPUs): CUDA_VISIBLE_DEVICES names the job's GPUs, as always, and
      GPU_DEVICE_ORDINAL the same, as Slurm's gres/gpu plugin sets it (none on no GPUs).
    - AMD: ROCR_VISIBLE_DEVICES names them (the ROCm runtime's mask: HIP, PyTorch's ROCm
      build, JAX's ROCm plugin and RCCL see only those, numbered from 0), and no second mask
      remaps them again: HIP_VISIBLE_DEVICES and GPU_DEVICE_ORDINAL are removed (unlike
      Slurm, which sets GPU_DEVICE_ORDINAL to ROCR's list: OpenCL would remap it again), and
      CUDA_VISIBLE_DEVICES too, because HIP reads it when HIP_VISIBLE_DEVICES is unset. On a
      machine with NVIDIA GPUs as well, CUDA_VISIBLE_DEVICES must hide those (""), and an empty
      mask read by HIP would hide the job's AMD GPUs: there HIP_VISIBLE_DEVICES is set to all
      of ROCR's (0..n-1, which remaps nothing) so HIP never reads CUDA's.
    - Any job on a machine with AMD GPUs and none of them: ROCR_VISIBLE_DEVICES="" hides them
      (an NVIDIA job, a CPU job).
    A job on no GPUs gets CUDA_VISIBLE_DEVICES="" as before."""
    by_index = {gpu.index: gpu for gpu in gpus}
    mine = [by_index.get(i) for i in job.gpus]
    # The GPUs of the job's machine (all of them on a one-machine server, whose GPUs may not
    # carry its name).
    machines = {gpu.node for gpu in gpus}
    node = job.node.split(",")[0] if job.node else ""
    here = [gpu for gpu in gpus if len(machines) < 2 or gpu.node == node]
    has_amd = any(gpu.vendor == "amd" for gpu in here)
    has_other = any(gpu.vendor != "amd" for gpu in here)
    amd = [gpu for gpu in mine if gpu is not None and gpu.vendor == "amd"]
    if not amd:
        out: dict[str, str | None] = {
            "CUDA_VISIBLE_DEVICES": ",".join(str(_device_index(g, i, gpus))
                                             for g, i in zip(mine, job.gpus, strict=True)),
        }  # fmt: skip
        if has_amd:
            out["ROCR_VISIBLE_DEVICES"] = ""
            out.update(dict.fromkeys(_AMD_SECOND_MASKS))
        # Slurm's gres/gpu plugin sets GPU_DEVICE_ORDINAL to CUDA's list: tools read it. Here
        # ROCm reads it only into ROCR's mask, which names none of an NVIDIA job's GPUs.
        out["GPU_DEVICE_ORDINAL"] = out["CUDA_VISIBLE_DEVICES"] if job.gpus else None
        return out
    out = {"ROCR_VISIBLE_DEVICES": ",".join(str(_device_index(g, g.index, gpus)) for g in amd)}
    out.update(dict.fromkeys(_AMD_SECOND_MASKS))
    if has_other:
        out["CUDA_VISIBLE_DEVICES"] = ""
        out["HIP_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(amd)))
    else:
        out["CUDA_VISIBLE_DEVICES"] = None
    return out


def _device_index(gpu: Gpu | None, index: int, gpus: Sequence[Gpu]) -> int:
    """A GPU's index in its vendor's numbering: `device_index` when detection set it; else the
    server's index less the GPUs of other vendors before it on its machine (NVIDIA's come
    first); a GPU the server does not list (an old record): its index."""
    if gpu is None:
        return index
    if gpu.device_index is not None:
        return gpu.device_index
    before = sum(
        1 for g in gpus if g.node == gpu.node and g.vendor != gpu.vendor and g.index < gpu.index
    )
    return gpu.index - before


def slurm_env(job: Job, env: Mapping[str, str], run_as: RunAs | None = None) -> dict[str, str]:
    """The `SLURM_*` variables an sbatch script reads, true for `job` (docs/cli.md, "What a
    job sees of Slurm"). Every job gets the job's and its allocation's; the task variables
    (TASK_VARIABLES) only a job that asked for tasks (`ntasks_per_node` > 1) and is not
    `--distributed` (torchrun, JAX and TF give their ranks themselves): so a plain
    `python train.py` on 4 GPUs is never taken by Lightning for one task of a Slurm step, and
    each process `srun` starts gets its own task's (the shim); any other job is task 0 of one
    (SLURM_PROCID, SLURM_LOCALID: 0, as Slurm's batch step). `env`: the job's environment so
    far (SLURM_SUBMIT_DIR/HOST the CLI sent). Node 0's values: `launch.node_argv` gives every
    other node of a multi-node job its own SLURM_NODEID (and task ids).

    As sbatch's: SLURM_JOB_DEPENDENCY is `--dependency` as given, SLURM_GPUS_PER_TASK
    `--gpus-per-task` (srun binds each task to that many of the node's GPUs), an array task's
    SLURM_ARRAY_TASK_COUNT/MIN/MAX/STEP its array's (`array_shape`). Deliberately more than
    sbatch's: SLURM_GPUS_PER_NODE is set for every job on GPUs but one of `--gpus-per-task`
    (sbatch sets it only for `--gpus-per-node`; gpuyard keeps no record of which of
    `--gpus`, `--gres` or `--gpus-per-node` asked; SLURM_GPUS is never set for that reason),
    and SLURM_JOB_ACCOUNT is the job's owner
    (gpuyard accounts by user and team; `-A` is not kept). Both GPU counts carry the type the
    user named, `TYPE:N` (`a100:2`), as Slurm's do; the bare number when none was named."""
    spec = job.spec
    nodes = max(1, spec.nodes)
    names = job.node.split(",") if job.node else []
    cpus_on_node = -(-spec.cpus // nodes) if spec.cpus else 0
    out = {
        "SLURM_JOB_ID": str(job.id),
        "SLURM_JOBID": str(job.id),
        "SLURM_JOB_NAME": spec.name,
        "SLURM_JOB_USER": run_as.user if run_as is not None else job.owner,
        "SLURM_JOB_ACCOUNT": job.owner,
        "SLURM_JOB_PARTITION": PARTITION,
        "SLURM_CLUSTER_NAME": CLUSTER_NAME,
        "SLURM_JOB_NUM_NODES": str(nodes),
        "SLURM_NNODES": str(nodes),
        "SLURM_NODELIST": job.node,
        "SLURM_JOB_NODELIST": job.node,
        "SLURM_NODEID": "0",
        "SLURMD_NODENAME": names[0] if names else job.node,
        "SLURM_SUBMIT_DIR": env.get("SLURM_SUBMIT_DIR") or spec.workdir,
        "SLURM_SUBMIT_HOST": env.get("SLURM_SUBMIT_HOST") or os.uname().nodename,
        "SLURM_CPUS_PER_TASK": str(max(1, spec.cpus // (nodes * spec.ntasks_per_node))),
        "SLURM_CPUS_ON_NODE": str(max(1, cpus_on_node)),
        "SLURM_JOB_CPUS_PER_NODE": str(max(1, cpus_on_node)),
        "SLURM_RESTART_COUNT": str(job.restarts),
    }
    if spec.mem_mib:
        out["SLURM_MEM_PER_NODE"] = str(-(-spec.mem_mib // nodes))
    if spec.dependency:
        out["SLURM_JOB_DEPENDENCY"] = spec.dependency
    if job.gpus:
        out["SLURM_GPUS_ON_NODE"] = str(len(job.gpus) // nodes)
        out["SLURM_JOB_GPUS"] = ",".join(str(i) for i in job.gpus)
        # `TYPE:N` where the user named a type (`--gpus-per-task=a100:2`), as Slurm keeps it.
        typed = f"{spec.gpu_type.strip()}:" if spec.gpu_type.strip() else ""
        if spec.gpus_per_task:
            out["SLURM_GPUS_PER_TASK"] = f"{typed}{spec.gpus_per_task}"
        else:
            out["SLURM_GPUS_PER_NODE"] = f"{typed}{len(job.gpus) // nodes}"
    if job.array_job_id is not None and job.array_task_id is not None:
        out["SLURM_ARRAY_JOB_ID"] = str(job.array_job_id)
        out["SLURM_ARRAY_TASK_ID"] = str(job.array_task_id)
        shape = array_shape(spec.array)
        if shape is not None:
            keys = ("COUNT", "MIN", "MAX", "STEP")
            out.update((f"SLURM_ARRAY_TASK_{k}", str(v)) for k, v in zip(keys, shape, strict=True))
    if has_batch_tasks(job):
        out.update(task_env(spec.ntasks_per_node, nodes, node_rank=0))
    else:
        out.update(dict.fromkeys(ONE_TASK_VARIABLES, "0"))
    return out


def array_shape(text: str) -> tuple[int, int, int, int] | None:
    """An array's (count, lowest, highest index, step) for its `--array` text, as Slurm gives
    them (SLURM_ARRAY_TASK_COUNT/MIN/MAX/STEP): the step is the gap between the indices where
    they are evenly spaced (`0-12:4` -> 4), else 1 (`1,3,7` -> 1); None: no text (a sweep's
    trials), or none that parses (a record from before its rules changed)."""
    if not text:
        return None
    try:
        indices = parse_array(text).indices
    except InvalidRequest:
        return None
    gaps = {b - a for a, b in pairwise(indices)}
    step = gaps.pop() if len(gaps) == 1 else 1
    return len(indices), indices[0], indices[-1], step


def wants_slurm_env(job: Job) -> bool:
    """False when the job asked for no Slurm variables (`--env GPUYARD_SLURM_ENV=0`)."""
    return dict(job.spec.env).get("GPUYARD_SLURM_ENV", "1") != "0"


def has_batch_tasks(job: Job) -> bool:
    """Whether the batch step holds the task variables (see `slurm_env`): a job that gave a
    task count (even one a node: sbatch sets SLURM_NTASKS then) and is not `--distributed`."""
    spec = job.spec
    return (spec.ntasks_per_node > 1 or spec.ntasks_given) and spec.distributed is None


def task_env(per_node: int, nodes: int, node_rank: int) -> dict[str, str]:
    """The task variables of the batch step on node `node_rank`: its first task's (Slurm's
    batch step is task 0 of the first node)."""
    total = per_node * nodes
    return {
        "SLURM_NTASKS": str(total),
        "SLURM_NPROCS": str(total),
        "SLURM_NTASKS_PER_NODE": str(per_node),
        "SLURM_TASKS_PER_NODE": f"{per_node}(x{nodes})" if nodes > 1 else str(per_node),
        "SLURM_PROCID": str(node_rank * per_node),
        "SLURM_LOCALID": "0",
    }


def _gpu_mem_env(
    gpu_mem_mib: int, env: Mapping[str, str], gpu_total_mib: int | None
) -> dict[str, str]:
    """Make each framework keep itself within a shared GPU's budget (soft enforcement; the
    server stops a job that goes over anyway): PyTorch through a startup hook that caps its
    caching allocator when CUDA initialises (`jobhooks/site/sitecustomize.py`), JAX through
    its preallocation fraction, TensorFlow by growing instead of taking the whole GPU. A
    value the user set with --env wins."""
    cap = allocator_cap_mib(gpu_mem_mib)
    added = {
        "GPUYARD_GPU_MEM_MIB": str(gpu_mem_mib),
        "GPUYARD_GPU_MEM_CAP_MIB": str(cap),
        "PYTHONPATH": _with_hook(env.get("PYTHONPATH")),
        "TF_FORCE_GPU_ALLOW_GROWTH": env.get("TF_FORCE_GPU_ALLOW_GROWTH", "true"),
    }
    if gpu_total_mib:
        fraction = f"{min(1.0, cap / gpu_total_mib):.4f}"
        added["XLA_PYTHON_CLIENT_MEM_FRACTION"] = (
            env.get("XLA_PYTHON_CLIENT_MEM_FRACTION") or fraction
        )
    return added
