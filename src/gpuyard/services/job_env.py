"""The environment a job runs with: one recipe, so every executor sets the same variables."""

from __future__ import annotations

from collections.abc import Mapping

from gpuyard.domain.job import Job
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
) -> dict[str, str]:
    """The allowed part of the server's environment (`_FROM_SERVER`), then the identity of
    `run_as` (HOME, USER, LOGNAME, SHELL: a job run as another user must not get the
    server's), then what the submitter sent (the CLI's exported variables and `--env`), then
    what gpuyard guarantees. `gpu_total_mib`: memory of each of the job's GPUs, for
    frameworks capped by a fraction; `checkpoint_dir`: GPUYARD_CHECKPOINT_DIR, the job's folder
    for checkpoints, the same for all its runs; `progress_file`: GPUYARD_PROGRESS_FILE, where
    `gpuyard.progress()` appends its reports."""
    env = {k: v for k, v in base.items() if _from_server(k)}
    if run_as is not None:
        env.update(HOME=run_as.home, USER=run_as.user, LOGNAME=run_as.user, SHELL=run_as.shell)
    env.update(dict(job.spec.env))
    env.update(
        {
            # Exactly the job's GPUs; an empty string hides every GPU from a 0-GPU job.
            "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in job.gpus),
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "GPUYARD_JOB_ID": str(job.id),
            "GPUYARD_JOB_NAME": job.spec.name,
            "GPUYARD_NUM_GPUS": str(len(job.gpus)),
            "GPUYARD_NODE": job.node,
            # 0 on the first run; N after N preemptions: resume from your checkpoint.
            "GPUYARD_RESTART_COUNT": str(job.restarts),
            "PYTHONUNBUFFERED": env.get("PYTHONUNBUFFERED", "1"),
        }
    )
    if checkpoint_dir is not None:
        env["GPUYARD_CHECKPOINT_DIR"] = checkpoint_dir
    if progress_file is not None:
        env["GPUYARD_PROGRESS_FILE"] = progress_file
    if job.spec.cpus:
        env.setdefault("OMP_NUM_THREADS", str(job.spec.cpus))
    if job.spec.gpu_mem_mib:
        env.update(_gpu_mem_env(job.spec.gpu_mem_mib, env, gpu_total_mib))
    return env


def _gpu_mem_env(
    gpu_mem_mib: int, env: Mapping[str, str], gpu_total_mib: int | None
) -> dict[str, str]:
    """Make each framework keep itself within a shared GPU's budget (soft enforcement; the
    server stops a job that goes over anyway): PyTorch through a startup hook that caps its
    caching allocator when CUDA initialises (`jobhooks/site/sitecustomize.py`), JAX through
    its preallocation fraction, TensorFlow by growing instead of taking the whole GPU. A
    value the user set with --env wins."""
    cap = allocator_cap_mib(gpu_mem_mib)
    path = env.get("PYTHONPATH")
    added = {
        "GPUYARD_GPU_MEM_MIB": str(gpu_mem_mib),
        "GPUYARD_GPU_MEM_CAP_MIB": str(cap),
        "PYTHONPATH": HOOK_DIR + (f":{path}" if path else ""),
        "TF_FORCE_GPU_ALLOW_GROWTH": env.get("TF_FORCE_GPU_ALLOW_GROWTH", "true"),
    }
    if gpu_total_mib:
        fraction = f"{min(1.0, cap / gpu_total_mib):.4f}"
        added["XLA_PYTHON_CLIENT_MEM_FRACTION"] = (
            env.get("XLA_PYTHON_CLIENT_MEM_FRACTION") or fraction
        )
    return added
