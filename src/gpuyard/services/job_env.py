"""The environment a job runs with: one recipe, so every executor sets the same variables."""

from __future__ import annotations

from collections.abc import Mapping

from gpuyard.domain.job import Job

# The server's own settings (token, database URL with its password, ...) never reach a job.
_SERVER_PREFIX = "GPUYARD_"


def build_job_env(job: Job, base: Mapping[str, str]) -> dict[str, str]:
    """Server environment, then the job's own `--env`, then what gpuyard guarantees."""
    env = {k: v for k, v in base.items() if not k.startswith(_SERVER_PREFIX)}
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
    if job.spec.cpus:
        env.setdefault("OMP_NUM_THREADS", str(job.spec.cpus))
    return env
