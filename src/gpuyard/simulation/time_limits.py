"""Which time limits a replay gives its jobs: `gpuyard simulate --time-limits none|trace|padded`.

- `none`: no job has a limit (nothing is killed; `backfill` is then given exact limits, as
  before).
- `trace`: the trace's `time_limit_s` column, where a row has one.
- `padded`: a model of how users pad their limits, for traces that carry none (Philly's).
  Users ask for more than they need, and in round numbers: a job's limit is its true duration
  times a factor between 1 and 3 drawn from its id alone (the same job gets the same limit on
  every run and for every policy), rounded up to the first of 1, 4, 12, 24, 72 or 168 hours.
  168 h (a week) is also the longest limit a user may ask for, as clusters cap `--time` (Slurm's
  MaxTime): a job that needs longer is killed at 168 h, as a live server ends it as TIMEOUT.

    padded_limit_s(job_id=7, duration_s=1800)  # 3,600 (1 h) or 14,400 (4 h), by the id

The default is `trace` when the trace has the column (some row has a limit), else `none`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace

from gpuyard.domain.errors import InvalidRequest
from gpuyard.simulation.trace import TraceJob

MODES = ("none", "trace", "padded")
LIMIT_BUCKETS_H = (1, 4, 12, 24, 72, 168)
PAD_MIN, PAD_MAX = 1.0, 3.0


def padding_factor(job_id: int) -> float:
    """A factor in [1, 3) fixed by the job id alone (its own salt: independent of the draw of
    `--preemptible-fraction`)."""
    digest = hashlib.blake2b(f"limit:{job_id}".encode(), digest_size=8).digest()
    return PAD_MIN + (PAD_MAX - PAD_MIN) * int.from_bytes(digest, "big") / 2**64


def padded_limit_s(job_id: int, duration_s: float) -> float:
    """The limit a user would ask for a job of `duration_s`: padded, then rounded up to a
    bucket; a week at most."""
    wanted_h = duration_s * padding_factor(job_id) / 3600.0
    for hours in LIMIT_BUCKETS_H:
        if wanted_h <= hours:
            return hours * 3600.0
    return LIMIT_BUCKETS_H[-1] * 3600.0


def default_mode(trace: Sequence[TraceJob]) -> str:
    """`trace` when some job of the trace has a limit, else `none`."""
    return "trace" if any(t.time_limit_s for t in trace) else "none"


def with_time_limits(trace: Sequence[TraceJob], mode: str) -> list[TraceJob]:
    """The trace with its jobs' limits as `mode` says (see the module docstring)."""
    if mode not in MODES:
        raise InvalidRequest(
            f"--time-limits must be one of {', '.join(MODES)}, not {mode!r}", field="time_limits"
        )
    if mode == "trace":
        return list(trace)
    if mode == "none":
        return [replace(t, time_limit_s=None) if t.time_limit_s else t for t in trace]
    return [replace(t, time_limit_s=padded_limit_s(t.id, t.duration_s)) for t in trace]
