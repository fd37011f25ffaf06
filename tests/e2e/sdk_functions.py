"""Functions the SDK tests run as jobs: importable (by the job too, through the submitter's
sys.path) and light to import (no pytest), as a user's own module would be."""

from __future__ import annotations

import os
import time


def power(base: int, exponent: int) -> int:
    return int(base**exponent)


def where_am_i() -> dict[str, str]:
    """What shows the call ran inside a gpuyard job, on its GPUs."""
    keys = ("GPUYARD_JOB_ID", "CUDA_VISIBLE_DEVICES", "SLURM_ARRAY_TASK_ID")
    return {k: os.environ[k] for k in keys if k in os.environ} | {"pid": str(os.getpid())}


def diverge(lr: float) -> float:
    if lr > 0.1:
        raise ValueError(f"loss diverged at lr={lr}")
    return lr


def nap(seconds: float) -> float:
    time.sleep(seconds)
    return seconds
