"""Loading job traces: CSV with `job_id,user,submit_time_s,num_gpus,duration_s`; optional
`time_limit_s` (seconds) and `no_preempt` (1/true: the job must never be preempted, like
`gpuyard submit --no-preempt`)."""

from __future__ import annotations

import csv
from dataclasses import dataclass
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
        )
    except (TypeError, ValueError):
        raise InvalidRequest(f"trace line {line}: a number is malformed: {row}") from None
