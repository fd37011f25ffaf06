"""`queue --format` and `--sort` in squeue's style: the fields people already type.

    gpuyard queue --format "%.6i %j %T %R" --sort -p,i

`--format`: `%i` id, `%j` name, `%u` user, `%T` state, `%M` time used, `%l` time limit,
`%D` nodes, `%b` GPUs, `%R` reason (a pending job's) or node; `%10j` pads (left-justified),
`%.10j` right-justifies, both cut to the width; other text is kept as it is. Without a width a
column is as wide as its widest cell. `--sort`: keys separated by commas, `-` before a key for
descending: `i` id, `j` name, `u` user, `t`/`T` state, `p` priority, `M` time used, `l` time
limit, `b` GPUs, `D` nodes, `V` submit time, `S` start time.
Arrays fold as squeue folds them (`fold_arrays`): an array's pending tasks are one line,
`12_[3-99%8]`, each of its other tasks a line of its own, `12_0`.
Standard library only: the CLI's start path.
"""

from __future__ import annotations

import re

from gpuyard.cli.job_refs import label
from gpuyard.cli.render import gpu_list, printable, shown_state
from gpuyard.cli.service_format import service_note
from gpuyard.domain.errors import InvalidRequest
from gpuyard.domain.units import format_duration, format_size_mib

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    Field = Callable[[dict[str, Any]], str]

_SPEC = re.compile(r"%(\.?)(\d*)([A-Za-z%])")


def _time_used(job: dict[str, Any]) -> str:
    runtime = job.get("runtime_s")
    return format_duration(runtime) if runtime is not None else "0:00"


def _limit(job: dict[str, Any]) -> str:
    return format_duration(job["time_limit_s"]) if job.get("time_limit_s") else "UNLIMITED"


def _gpus(job: dict[str, Any]) -> str:
    mib = job.get("gpu_mem_mib")
    return f"{job['num_gpus']}x{format_size_mib(mib)}" if mib else str(job["num_gpus"])


def _reason(job: dict[str, Any]) -> str:
    if job["state"] == "PENDING":
        return f"({job['reason'] or 'None'})"
    if job["state"] == "RUNNING":
        where = f"{job.get('node') or '-'}:{gpu_list(job.get('gpus') or [])}"
        return f"{where} {service_note(job)}" if job.get("kind") == "service" else where
    return f"({job['reason']})" if job.get("reason") not in (None, "None") else "-"


# letter -> (header, cell)
FIELDS: dict[str, tuple[str, Field]] = {
    "i": ("JOBID", label),
    "j": ("NAME", lambda j: str(j["name"])),
    "u": ("USER", lambda j: str(j["owner"])),
    "T": ("STATE", shown_state),
    "M": ("TIME", _time_used),
    "l": ("TIME_LIMIT", _limit),
    "D": ("NODES", lambda j: str(j.get("nodes", 1))),
    "b": ("GPUS", _gpus),
    "R": ("NODE:GPUS(REASON)", _reason),
}

# key -> the value jobs are ordered by (None sorts first)
SORT_KEYS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "i": lambda j: j["id"],
    "j": lambda j: j["name"],
    "u": lambda j: j["owner"],
    "t": lambda j: shown_state(j),
    "T": lambda j: shown_state(j),
    "p": lambda j: j.get("priority", 0),
    "M": lambda j: j.get("runtime_s") or 0.0,
    "l": lambda j: j.get("time_limit_s") or float("inf"),
    "b": lambda j: j.get("num_gpus", 0),
    "D": lambda j: j.get("nodes", 1),
    "V": lambda j: j.get("submitted_at") or "",
    "S": lambda j: j.get("started_at") or "",
}


def sort_jobs(jobs: Sequence[dict[str, Any]], keys: str) -> list[dict[str, Any]]:
    """Jobs ordered by squeue-style keys (`-p,i`: priority descending, then id)."""
    ordered = list(jobs)
    parsed = []
    for raw in keys.split(","):
        key = raw.strip()
        descending = key.startswith("-")
        key = key.lstrip("+-")
        if key not in SORT_KEYS:
            known = ", ".join(SORT_KEYS)
            raise InvalidRequest(f"--sort {raw.strip() or raw!r}: use keys among {known}")
        parsed.append((SORT_KEYS[key], descending))
    for value, descending in reversed(parsed):  # stable: the first key decides last
        ordered.sort(key=value, reverse=descending)
    return ordered


def format_jobs(jobs: Sequence[dict[str, Any]], fmt: str) -> str:
    """The jobs as `fmt` lays them out, a header line first."""
    parts: list[str | tuple[str, bool, int | None]] = []
    at = 0
    for match in _SPEC.finditer(fmt):
        parts.append(fmt[at : match.start()])
        right, width, letter = match.groups()
        if letter == "%":
            parts.append("%")
        elif letter not in FIELDS:
            known = " ".join(f"%{k}" for k in FIELDS)
            raise InvalidRequest(f"--format: %{letter} is not a field here; use {known}")
        else:
            parts.append((letter, bool(right), int(width) if width else None))
        at = match.end()
    parts.append(fmt[at:])
    rows = [[FIELDS[p[0]][0] if isinstance(p, tuple) else p for p in parts]]
    rows += [
        [printable(FIELDS[p[0]][1](job)) if isinstance(p, tuple) else p for p in parts]
        for job in jobs
    ]  # a job's name or reason cannot break a row or reach the terminal raw
    widths = [
        (p[2] or max(len(row[i]) for row in rows)) if isinstance(p, tuple) else 0
        for i, p in enumerate(parts)
    ]
    lines = []
    for row in rows:
        cells = []
        for part, cell, width in zip(parts, row, widths, strict=True):
            if isinstance(part, tuple):
                cell = cell[:width]
                cell = cell.rjust(width) if part[1] else cell.ljust(width)
            cells.append(cell)
        lines.append("".join(cells).rstrip())
    return "\n".join(lines)


def fold_arrays(jobs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The jobs as squeue lists them: an array's pending tasks folded into one line where the
    first of them was (`12_[3-99%8]`: their indices, and the array's cap on running tasks),
    every other task a line of its own (`12_0`); jobs of no array as they are. A folded line
    is its first pending task's record with `shown_id` set and `array_pending` its count."""
    pending: dict[int, list[dict[str, Any]]] = {}
    for job in jobs:
        array_id = job.get("array_job_id")
        if array_id is not None and job["state"] == "PENDING":
            pending.setdefault(array_id, []).append(job)
    folded: list[dict[str, Any]] = []
    for job in jobs:
        array_id = job.get("array_job_id")
        tasks = pending.get(array_id) if array_id is not None else None
        if tasks is None or job["state"] != "PENDING":
            folded.append(job)
        elif tasks[0] is job:
            indices = [int(task["array_task_id"]) for task in tasks]
            cap = job.get("array_max_running") or 0
            shown = f"{array_id}_[{index_ranges(indices)}{f'%{cap}' if cap else ''}]"
            if len(tasks) == 1 and not cap:
                shown = f"{array_id}_{indices[0]}"
            folded.append({**job, "shown_id": shown, "array_pending": len(tasks)})
    return folded


def index_ranges(indices: Sequence[int]) -> str:
    """Task indices as sbatch's --array writes them: `0-3,7,9-10`."""
    parts: list[str] = []
    ordered = sorted(set(indices))
    start = prev = ordered[0] if ordered else 0
    for index in ordered[1:]:
        if index == prev + 1:
            prev = index
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = index
    if ordered:
        parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(parts)


def array_summary(tasks: Sequence[dict[str, Any]]) -> str:
    """`show`'s first line for an array: its tasks by state, and its cap on running ones.

    Array 12: 100 tasks (0-99), at most 8 running: 8 RUNNING, 90 PENDING, 2 COMPLETED
    """
    if not tasks:
        return "no tasks"
    first = tasks[0]
    counts: dict[str, int] = {}
    for task in tasks:
        state = shown_state(task)
        counts[state] = counts.get(state, 0) + 1
    by_state = ", ".join(f"{count} {state}" for state, count in counts.items())
    cap = first.get("array_max_running") or 0
    capped = f", at most {cap} running" if cap else ""
    indices = index_ranges([int(task["array_task_id"]) for task in tasks])
    count = len(tasks)
    return (
        f"Array {first['array_job_id']}: {count} task{'' if count == 1 else 's'} ({indices})"
        f"{capped}: {by_state}"
    )
