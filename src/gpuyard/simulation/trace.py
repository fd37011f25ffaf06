"""Loading job traces: CSV with `job_id,user,submit_time_s,num_gpus,duration_s`; optional
`time_limit_s` (seconds) and `no_preempt` (1/true: the job must never be preempted, like
`gpuyard submit --no-preempt`). Workflows, optional too: `dependency` (`--dependency` syntax,
naming jobs submitted earlier in the trace), `name` (for singleton), `array_job_id`,
`array_task_id`, `array_max_running` (an array's `%N`) and `exit_code` (how the job ends: 0
COMPLETED, else FAILED, for afterok/afternotok), gated exactly as the live server gates them.

A trace job is preemptible unless its row says `no_preempt`, although a server's jobs are not
unless they opt in (`--preemptible`): the published traces come from clusters whose jobs were
preempted and resumed, and the policies' targets were set on them. `with_preemptible_fraction`
models a server where only some jobs opt in: a fraction of the jobs, chosen by a hash of the
job id (the same jobs on every run and for every policy; a larger fraction keeps the jobs a
smaller one chose).

    with_preemptible_fraction(trace, 0.5)  # about half the jobs may be preempted
"""

from __future__ import annotations

import csv
import hashlib
from dataclasses import dataclass, replace
from pathlib import Path

from gpuyard.domain.errors import InvalidRequest

REQUIRED = ("job_id", "user", "submit_time_s", "num_gpus", "duration_s")


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace: when it arrives, what it asks for, how long it really runs."""

    id: int
    user: str
    submitted_at: float
    gpus: int
    duration_s: float
    time_limit_s: float | None = None
    preemptible: bool = True
    name: str = ""
    dependency: str = ""
    array_job_id: int | None = None
    array_task_id: int | None = None
    array_max_running: int = 0
    exit_code: int = 0


def load_trace(path: Path) -> list[TraceJob]:
    """Jobs sorted by submission time; extra columns are ignored."""
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
            if missing:
                raise InvalidRequest(
                    f"{path}: missing column(s) {', '.join(missing)}; a trace needs "
                    f"{','.join(REQUIRED)}[,time_limit_s]"
                )
            has_limit = "time_limit_s" in (reader.fieldnames or [])
            jobs = [_row(row, has_limit, n) for n, row in enumerate(reader, start=2)]
    except OSError as exc:
        raise InvalidRequest(f"cannot read trace {path}: {exc.strerror}") from None
    jobs.sort(key=lambda j: (j.submitted_at, j.id))
    return jobs


def _row(row: dict[str, str], has_limit: bool, line: int) -> TraceJob:
    try:
        limit = row.get("time_limit_s") if has_limit else None
        no_preempt = (row.get("no_preempt") or "").strip().lower() in ("1", "true", "yes")
        return TraceJob(
            id=int(row["job_id"]),
            user=row["user"],
            submitted_at=float(row["submit_time_s"]),
            gpus=int(row["num_gpus"]),
            duration_s=float(row["duration_s"]),
            time_limit_s=float(limit) if limit else None,
            preemptible=not no_preempt,
            name=row.get("name") or "",
            dependency=(row.get("dependency") or "").strip(),
            array_job_id=_int_or_none(row.get("array_job_id")),
            array_task_id=_int_or_none(row.get("array_task_id")),
            array_max_running=int(row.get("array_max_running") or 0),
            exit_code=int(row.get("exit_code") or 0),
        )
    except (TypeError, ValueError):
        raise InvalidRequest(f"trace line {line}: a number is malformed: {row}") from None


def _int_or_none(text: str | None) -> int | None:
    return int(text) if text and text.strip() else None


def with_preemptible_fraction(trace: list[TraceJob], fraction: float) -> list[TraceJob]:
    """The trace with only about `fraction` of its jobs preemptible (those the trace already
    keeps from preemption stay kept); see the module docstring."""
    if not 0.0 <= fraction <= 1.0:
        raise InvalidRequest(
            f"--preemptible-fraction must be between 0 and 1, not {fraction}",
            field="preemptible_fraction",
        )
    return [
        job if not job.preemptible or _draw(job.id) < fraction else replace(job, preemptible=False)
        for job in trace
    ]


def _draw(job_id: int) -> float:
    """A number in [0, 1) fixed by the job id alone (well mixed: ids are often sequential)."""
    digest = hashlib.blake2b(str(job_id).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64
