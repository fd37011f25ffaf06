"""Plain-text tables and records, like squeue/scontrol print them: fast to import, easy to grep."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from gpuyard.domain.units import format_duration, format_size_mib


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


def gpu_list(gpus: Sequence[int]) -> str:
    return ",".join(map(str, gpus)) if gpus else "-"


def queue_rows(jobs: Sequence[dict[str, Any]]) -> str:
    rows = []
    for job in jobs:
        pending = job["state"] == "PENDING"
        where = f"({job['reason']})" if pending else gpu_list(job["gpus"])
        if job["state"] not in ("PENDING", "RUNNING") and job["reason"] != "None":
            where = f"{gpu_list(job['gpus'])} ({job['reason']})"
        rows.append(
            [
                str(job["id"]),
                _clip(job["name"], 24),
                job["owner"],
                job["state"],
                str(job["num_gpus"]),
                format_duration(job["runtime_s"]) if job["runtime_s"] is not None else "0:00",
                format_duration(job["time_limit_s"]) if job["time_limit_s"] else "UNLIMITED",
                _start(job),
                where,
            ]
        )
    return table(["JOBID", "NAME", "USER", "STATE", "GPUS", "TIME", "TIME_LIMIT", "START",
                  "GPU_IDS(REASON)"], rows)  # fmt: skip


def _start(job: dict[str, Any]) -> str:
    """Start time; for a pending job the estimate (`~`), or `?` when none can be made."""
    if job["state"] == "PENDING":
        estimate = job.get("estimated_start_at")
        return f"~{_local(estimate, short=True)}" if estimate else "?"
    return _local(job["started_at"], short=True)


def dry_run_answer(answer: dict[str, Any]) -> str:
    """One line for `submit --dry-run`."""
    seconds = answer["starts_in_s"]
    if seconds is None and answer.get("not_before"):
        return (f"the job fits this server; it would not start before "
                f"{_local(answer['not_before'])} (the projection of a deep queue stopped "
                "there; nothing was queued)")  # fmt: skip
    if seconds is None:
        return ("the job fits this server, but no start can be estimated: the GPUs it needs "
                "are held by jobs without a time limit (nothing was queued)")  # fmt: skip
    if seconds < 1:
        return "the job would start now (nothing was queued)"
    return (f"the job would start in about {format_duration(seconds)}, at "
            f"{_local(answer['start_at'])}, if running jobs use their whole time limit "
            "(nothing was queued)")  # fmt: skip


def job_record(job: dict[str, Any]) -> str:
    fields = [
        ("JobId", job["id"]),
        ("Name", job["name"]),
        ("User", job["owner"]),
        ("State", job["state"]),
        ("Reason", job["reason"]),
        ("ExitCode", "-" if job["exit_code"] is None else job["exit_code"]),
        ("Priority", job["priority"]),
        ("Preemptible", "yes" if job["preemptible"] else "no (--no-preempt)"),
        ("Distributed", job.get("distributed") or "no"),
        ("Restarts", f"{job['restarts']} (preempted and requeued)"),
        ("GpuTime", f"{job['attained_gpu_s'] / 3600:.2f} GPU-hours, all runs"),
        ("Command", " ".join(_quote(a) for a in job["command"])),
        ("WorkDir", job["workdir"]),
        ("GPUs", f"{job['num_gpus']} requested, held: {gpu_list(job['gpus'])}"),
        ("CPUs", job["cpus"]),
        ("Mem", format_size_mib(job["mem_mib"])),
        ("TimeLimit", format_duration(job["time_limit_s"]) if job["time_limit_s"] else "UNLIMITED"),
        ("Node", job["node"]),
        ("SubmitTime", _local(job["submitted_at"])),
        ("StartTime", _local(job["started_at"])),
        ("EstimatedStart", _estimate(job)),
        ("EndTime", _local(job["ended_at"])),
        ("RunTime", format_duration(job["runtime_s"])),
        ("Log", job["log_path"]),
    ]
    width = max(len(k) for k, _ in fields)
    return "\n".join(f"{k.rjust(width)}: {v}" for k, v in fields)


def gpu_rows(gpus: Sequence[dict[str, Any]]) -> str:
    rows = [
        [
            str(g["index"]),
            _clip(g["name"], 28),
            format_size_mib(g["memory_total_mib"]),
            "detected" if g["detected"] else "declared",
            g["uuid"],
            str(g["job"]) if g["job"] is not None else "-",
        ]
        for g in gpus
    ]
    return table(["GPU", "NAME", "MEMORY", "SOURCE", "UUID", "JOB"], rows)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _estimate(job: dict[str, Any]) -> str:
    if job["state"] != "PENDING":
        return "-"
    if not job.get("estimated_start_at"):
        return ("unknown (jobs without a time limit hold what it needs, or the queue ahead is "
                "too deep to project)")  # fmt: skip
    return f"{_local(job['estimated_start_at'])} if running jobs use their whole time limit"


def _local(iso: str | None, *, short: bool = False) -> str:
    """ISO UTC time in local time; `short` drops today's date."""
    if not iso:
        return "-"
    when = datetime.fromisoformat(iso).astimezone()
    if short and when.date() == datetime.now().astimezone().date():
        return when.strftime("%H:%M:%S")
    return when.strftime("%Y-%m-%dT%H:%M:%S")


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)
