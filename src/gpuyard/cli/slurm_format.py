"""squeue's and sacct's tables: what their namesakes print, column for column.

    JOBID PARTITION NAME USER ST TIME NODES NODELIST(REASON)        squeue_text
    JobID|State|ExitCode|Elapsed                                     sacct_text (-P)

What gpuyard has no counterpart for is printed as Slurm prints an unset value: the partition
is the server's one queue (`gpuyard`), the account the owner's team is not known to a job
record (blank). Pending tasks of an array are folded as squeue folds them (`12_[3-9%2]`).
Jobs in, text out (an unknown `--format` field is typer's usage error); the commands that
fetch the jobs and print these are `cli/slurm_queries.py`'s. Standard library only: the fast
start path (`cli/slurm_fast.py`) prints these; typer is imported only to raise its error.
"""

from __future__ import annotations

import re
import signal

from gpuyard.cli.render import printable
from gpuyard.domain.units import format_duration

TYPE_CHECKING = False  # typing and typer stay unimported on the fast path
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any, NoReturn

    Job = dict[str, Any]


def bad_value(message: str, param_hint: str) -> NoReturn:
    """typer's usage error for one option's value (`Invalid value for '--format': ...`).
    typer is imported here, when a value is wrong: the fast path then hands the line to
    typer, which says it in its words (`cli/slurm_fast.py`)."""
    import typer

    raise typer.BadParameter(message, param_hint=param_hint)

PARTITION = "gpuyard"
# squeue's default and `-l` formats (squeue(1)).
SQUEUE_DEFAULT = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
SQUEUE_LONG = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R"
# sacct's default fields and `-b`'s (sacct(1)).
SACCT_DEFAULT = "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode"
SACCT_BRIEF = "JobID,State,ExitCode"
SACCT_LONG = (
    "JobID,JobIDRaw,JobName,Partition,User,Account,AllocCPUS,NNodes,NodeList,State,"
    "ExitCode,Submit,Start,End,Elapsed,Timelimit,ReqMem,AllocTRES,WorkDir,Reason"
)

# Compact job states (squeue's %t).
SHORT_STATE = {
    "PENDING": "PD", "RUNNING": "R", "COMPLETING": "CG", "CANCELLING": "CG",
    "COMPLETED": "CD", "FAILED": "F", "CANCELLED": "CA", "TIMEOUT": "TO",
    "OUT_OF_MEMORY": "OOM", "NODE_FAIL": "NF",
}  # fmt: skip
_LONG_STATE = {"CANCELLING": "COMPLETING"}


def state_of(job: Job) -> str:
    """Slurm's long state name: CANCELLING (gpuyard's) is Slurm's COMPLETING."""
    shown = str(job.get("display_state") or job["state"])
    return _LONG_STATE.get(shown, shown)


def job_ref(job: Job) -> str:
    """`12` for a job, `12_3` for task 3 of array 12 (squeue's and sacct's JobID)."""
    if job.get("array_job_id") is not None:
        return f"{job['array_job_id']}_{job['array_task_id']}"
    return str(job["id"])


def _elapsed(job: Job) -> float:
    runtime = job.get("runtime_s")
    return float(runtime) if runtime is not None else 0.0


def _when(iso: str | None) -> str:
    """sacct's times: local, to the second (`2026-12-01T20:13:03`); Unknown when unset."""
    if not iso:
        return "Unknown"
    from datetime import datetime

    return datetime.fromisoformat(iso).astimezone().strftime("%Y-%m-%dT%H:%M:%S")


def _hms(seconds: float) -> str:
    """sacct's Elapsed: always with hours (`00:00:05`, `1-02:03:04`)."""
    total = max(0, int(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{clock}" if days else clock


def exit_code(job: Job) -> str:
    """sacct's ExitCode, `code:signal`: a job killed by SIGKILL is `0:9`."""
    code = job.get("exit_code")
    if code is None:
        return "0:0"
    if str(job.get("reason", "")).startswith("Signal:") and code > 128:
        return f"0:{code - 128}"
    return f"{code}:0"


def _limit(job: Job) -> str:
    return format_duration(job["time_limit_s"]) if job.get("time_limit_s") else "UNLIMITED"


def _nodelist_or_reason(job: Job) -> str:
    if job["state"] == "PENDING":
        return f"({job.get('reason') or 'None'})"
    return str(job.get("node") or "")


def _gres(job: Job) -> str:
    gpus = job.get("num_gpus") or 0
    return f"gres/gpu:{gpus}" if gpus else "N/A"


def _mem(job: Job) -> str:
    mib = job.get("mem_mib") or 0
    return f"{mib}M" if mib else "0"


def _task_id(job: Job) -> str:
    return "N/A" if job.get("array_task_id") is None else str(job["array_task_id"])


def _sacct_nodes(job: Job) -> str:
    return str(job.get("node") or "None assigned") if job.get("started_at") else "None assigned"


def _tres(job: Job) -> str:
    """What sacct's AllocTRES/ReqTRES say of the job: `cpu=4,gres/gpu=2`."""
    gpus = job.get("num_gpus")
    return f"cpu={job.get('cpus') or 1}" + (f",gres/gpu={gpus}" if gpus else "")


# squeue's %-letters: letter -> (header, cell)
SQUEUE_FIELDS: dict[str, tuple[str, Callable[[Job], str]]] = {
    "i": ("JOBID", job_ref),
    "A": ("ARRAY_JOB_ID", lambda j: str(j.get("array_job_id") or j["id"])),
    "a": ("ARRAY_TASK_ID", _task_id),
    "F": ("ARRAY_JOB_ID", lambda j: str(j.get("array_job_id") or j["id"])),
    "K": ("ARRAY_TASK_ID", _task_id),
    "P": ("PARTITION", lambda j: PARTITION),
    "j": ("NAME", lambda j: printable(str(j["name"]))),
    "u": ("USER", lambda j: str(j["owner"])),
    "t": ("ST", lambda j: SHORT_STATE.get(state_of(j), state_of(j))),
    "T": ("STATE", state_of),
    "M": ("TIME", lambda j: format_duration(_elapsed(j))),
    "l": ("TIME_LIMIT", _limit),
    "D": ("NODES", lambda j: str(j.get("nodes") or 1)),
    "C": ("CPUS", lambda j: str(j.get("cpus") or 1)),
    "m": ("MIN_MEMORY", _mem),
    "b": ("TRES_PER_NODE", _gres),
    "R": ("NODELIST(REASON)", _nodelist_or_reason),
    "r": ("REASON", lambda j: str(j.get("reason") or "None")),
    "N": ("NODELIST", lambda j: "" if j["state"] == "PENDING" else str(j.get("node") or "")),
    "Q": ("PRIORITY", lambda j: str(j.get("priority", 0))),
    "V": ("SUBMIT_TIME", lambda j: _when(j.get("submitted_at"))),
    "S": ("START_TIME", lambda j: _when(j.get("started_at") or j.get("estimated_start_at"))),
    "e": ("END_TIME", lambda j: _when(j.get("ended_at"))),
    "Z": ("WORK_DIR", lambda j: printable(str(j.get("workdir") or ""))),
    "o": ("COMMAND", lambda j: printable(" ".join(j.get("command") or []))),
    "%": ("%", lambda j: "%"),
}
_SPEC = re.compile(r"%(\.)?(\d*)([A-Za-z%])")


def squeue_text(jobs: Sequence[Job], fmt: str = SQUEUE_DEFAULT, header: bool = True) -> str:
    """Rows in squeue's `--format` language: `%.18i` right-justified in 18, `%8j` left-
    justified in 8 (both cut to the width), no width: as long as the value."""
    parts: list[str | tuple[bool, int | None, str]] = []
    at = 0
    for match in _SPEC.finditer(fmt):
        parts.append(fmt[at : match.start()])
        right, width, letter = match.groups()
        if letter not in SQUEUE_FIELDS:
            bad_value(
                f"%{letter} is not a field gpuyard knows: use {' '.join(sorted(SQUEUE_FIELDS))}",
                "--format",
            )
        parts.append((bool(right), int(width) if width else None, letter))
        at = match.end()
    parts.append(fmt[at:])

    def row(cell: Callable[[str], str]) -> str:
        out = []
        for part in parts:
            if isinstance(part, str):
                out.append(part)
                continue
            right, width, letter = part
            value = cell(letter)
            if width is not None:
                value = value[:width].rjust(width) if right else value[:width].ljust(width)
            out.append(value)
        return "".join(out).rstrip()

    lines = [row(_header)] if header else []
    lines += [row(_cells_of(job)) for job in jobs]
    return "\n".join(lines)


def _header(letter: str) -> str:
    return SQUEUE_FIELDS[letter][0]


def _cells_of(job: Job) -> Callable[[str], str]:
    return lambda letter: SQUEUE_FIELDS[letter][1](job)


def fold_arrays(jobs: Sequence[Job]) -> list[Job]:
    """squeue's default view of arrays: the pending tasks of one array as one row whose
    JOBID is `12_[3-7,9%2]`; running and ended tasks one row each."""
    folded: list[Job] = []
    pending: dict[int, list[Job]] = {}
    for job in jobs:
        array_id = job.get("array_job_id")
        if array_id is None or job["state"] != "PENDING":
            folded.append(job)
            continue
        if array_id not in pending:
            pending[array_id] = []
            folded.append({"_fold": array_id})
        pending[array_id].append(job)
    out: list[Job] = []
    for job in folded:
        if "_fold" not in job:
            out.append(job)
            continue
        tasks = pending[job["_fold"]]
        if len(tasks) == 1:
            out.append(tasks[0])
            continue
        first = tasks[0]
        cap = first.get("array_max_running") or 0
        indices = compress_indices([t["array_task_id"] for t in tasks])
        label = f"{first['array_job_id']}_[{indices}{f'%{cap}' if cap else ''}]"
        out.append({**first, "array_task_id": f"[{indices}]", "_label": label})
    return out


def compress_indices(indices: Sequence[int]) -> str:
    """`[0, 1, 2, 5, 7, 8]` -> `0-2,5,7-8`."""
    spans: list[str] = []
    ordered = sorted(indices)
    start = prev = ordered[0]
    for index in [*ordered[1:], None]:
        if index is not None and index == prev + 1:
            prev = index
            continue
        spans.append(str(start) if start == prev else f"{start}-{prev}")
        if index is not None:
            start = prev = index
    return ",".join(spans)


def _ref_or_label(job: Job) -> str:
    return str(job["_label"]) if "_label" in job else job_ref(job)


SQUEUE_FIELDS["i"] = ("JOBID", _ref_or_label)


def squeue_order(job: Job) -> tuple[int, int, int]:
    """Slurm's default `-S P,t,-p`: by state (PD before R), then priority, then age."""
    return (0 if job["state"] == "PENDING" else 1, -int(job.get("priority") or 0), job["id"])


# -- what a job used: sacct's MaxRSS, TotalCPU, ConsumedEnergy ------------------------------
# The one place these figures are read from the job record; None where the server has none
# (printed as Slurm prints a figure its accounting did not gather: 0, TotalCPU 00:00:00).
def _max_rss_kib(job: Job) -> float | None:
    """The job's peak resident memory in KiB (`max_rss_kib`, when the server records it)."""
    value = job.get("max_rss_kib")
    return float(value) if value is not None else None


def _cpu_seconds(job: Job) -> float | None:
    """CPU time its processes used, user and system (`cpu_time_s`, when recorded)."""
    value = job.get("cpu_time_s")
    return float(value) if value is not None else None


def _energy_joules(job: Job) -> float | None:
    """Energy its GPUs used, in joules: the server's per-job GPU energy (`gpu_stats.energy_j`)."""
    stats = job.get("gpu_stats") or {}
    value = stats.get("energy_j") if isinstance(stats, dict) else None
    return float(value) if value is not None else None


_UNITS = "\0KMGTP"


def convert_units(value: float, unit: int, wanted: str | None, divisor: int = 1024) -> str:
    """Slurm's convert_num_unit: `value` in `_UNITS[unit]`; `wanted` (`--units K|M|G|T|P`) as
    asked, "" (--noconvert) as it is, None: as sacct does by default, up a unit only while
    no precision is lost (`5266672K` stays, `2097152K` is `2G`). Whole numbers bare, others
    to 2 decimals."""
    if int(value) == 0:
        return "0"
    if wanted:
        target = _UNITS.index(wanted.upper())
        value *= float(divisor) ** (unit - target)
        unit = target
    elif wanted is None:
        while value >= divisor and int(value) % (divisor // 2) == 0 and unit < len(_UNITS) - 1:
            value /= divisor
            unit += 1
    suffix = _UNITS[unit].replace("\0", "")
    return f"{int(value)}{suffix}" if value == int(value) else f"{value:.2f}{suffix}"


def _step_figure(job: Job, figure: float | None, unit: int, divisor: int = 1024) -> str:
    """A figure of the steps: blank on the job's own row (Slurm's is its steps'), the batch
    step's the job's whole figure, 0 unknown."""
    if not job.get("_step"):
        return ""
    if _unmeasured(job):
        figure = None
    return convert_units(figure or 0, unit, job.get("_units"), divisor)


def _energy(job: Job) -> str:
    """ConsumedEnergy: the job's (its allocation row and its batch step, which is all of it
    here); the extern step's 0; 0 where nothing was measured, as Slurm prints."""
    joules = None if _unmeasured(job) else _energy_joules(job)
    return convert_units(round(joules or 0), 0, job.get("_units"), 1000)


def _energy_raw(job: Job) -> str:
    joules = None if _unmeasured(job) else _energy_joules(job)
    return str(round(joules or 0))


def cpu_clock(seconds: float) -> str:
    """TotalCPU's clock: `00:01.234` under a minute's hours, `01:02:03`, `1-02:03:04`."""
    whole, millis = int(seconds), round((seconds - int(seconds)) * 1000) % 1000
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    if hours:
        return f"{hours:02d}:{minutes:02d}:{secs:02d}"
    if millis:
        return f"{minutes:02d}:{secs:02d}.{millis:03d}"
    return f"00:{minutes:02d}:{secs:02d}"


def _total_cpu(job: Job) -> str:
    return cpu_clock(0 if _unmeasured(job) else _cpu_seconds(job) or 0)


def _req_mem(job: Job) -> str:
    mib = job.get("mem_mib") or 0
    return convert_units(mib, 2, job.get("_units")) if mib else "0"


def _ntasks(job: Job) -> str:
    """NTasks: blank on the job's own row, 1 for .batch and .extern, an srun step's count."""
    if not job.get("_step"):
        return ""
    return str(job.get("_ntasks") or 1)


# sacct's fields: name (lower case) -> (header, default width, cell, left-justified)
SACCT_FIELDS: dict[str, tuple[str, int, Callable[[Job], str], bool]] = {
    "jobid": ("JobID", 12, lambda j: str(j.get("_step") or job_ref(j)), True),
    "jobidraw": ("JobIDRaw", 12, lambda j: f"{j['id']}{j.get('_suffix', '')}", True),
    "jobname": ("JobName", 10, lambda j: printable(str(j["name"])), False),
    "partition": ("Partition", 10, lambda j: "" if j.get("_step") else PARTITION, False),
    "account": ("Account", 10, lambda j: "", False),
    "user": ("User", 9, lambda j: "" if j.get("_step") else str(j["owner"]), False),
    "alloccpus": ("AllocCPUS", 10, lambda j: str(j.get("cpus") or 1), False),
    "nnodes": ("NNodes", 8, lambda j: str(j.get("nodes") or 1), False),
    "nodelist": ("NodeList", 15, _sacct_nodes, False),
    "state": ("State", 10, state_of, False),
    "exitcode": ("ExitCode", 8, exit_code, False),
    "submit": ("Submit", 19, lambda j: _when(j.get("submitted_at")), False),
    "start": ("Start", 19, lambda j: _when(j.get("started_at")), False),
    "end": ("End", 19, lambda j: _when(j.get("ended_at")), False),
    "elapsed": ("Elapsed", 10, lambda j: _hms(_elapsed(j)), False),
    "elapsedraw": ("ElapsedRaw", 10, lambda j: str(int(_elapsed(j))), False),
    "timelimit": ("Timelimit", 10, _limit, False),
    "reqmem": ("ReqMem", 10, _req_mem, False),
    "maxrss": ("MaxRSS", 10, lambda j: _step_figure(j, _max_rss_kib(j), 1), False),
    "averss": ("AveRSS", 10, lambda j: _step_figure(j, _max_rss_kib(j), 1), False),
    "totalcpu": ("TotalCPU", 10, _total_cpu, False),
    "consumedenergy": ("ConsumedEnergy", 14, _energy, False),
    "consumedenergyraw": ("ConsumedEnergyRaw", 17, _energy_raw, False),
    "cluster": ("Cluster", 10, lambda j: PARTITION, False),
    "alloctres": ("AllocTRES", 10, _tres, False),
    "reqtres": ("ReqTRES", 10, _tres, False),
    "workdir": ("WorkDir", 10, lambda j: printable(str(j.get("workdir") or "")), False),
    "reason": ("Reason", 10, lambda j: str(j.get("reason") or "None"), False),
    "priority": ("Priority", 10, lambda j: str(j.get("priority", 0)), False),
    "ntasks": ("NTasks", 8, _ntasks, False),
    "cputime": ("CPUTime", 10, lambda j: _hms(_elapsed(j) * (j.get("cpus") or 1)), False),
}


def sacct_columns(fields: str) -> list[tuple[str, int]]:
    """`JobID,JobName%30,State` -> [("jobid", 12), ("jobname", 30), ("state", 10)]."""
    columns = []
    for item in (f.strip() for f in fields.split(",") if f.strip()):
        name, _, width = item.partition("%")
        key = name.lower()
        if key not in SACCT_FIELDS:
            known = ",".join(v[0] for v in SACCT_FIELDS.values())
            bad_value(f"{name} is not a field gpuyard knows: use {known}", "--format")
        if width and not width.isdigit():
            bad_value(f"{item}: the width after % is a number", "--format")
        columns.append((key, int(width) if width else SACCT_FIELDS[key][1]))
    return columns


def with_steps(jobs: Sequence[Job]) -> list[Job]:
    """Without -X sacct lists each job's steps too, as Slurm's: `.batch`, which here is the
    job's own process tree (its `srun` steps run inside it, unaccounted), and `.extern` (the
    allocation's, running while the job runs, COMPLETED once it ended). The batch step of a
    job that reached its time limit or was cancelled was killed by SIGTERM: CANCELLED, 0:15."""
    rows: list[Job] = []
    for job in jobs:
        rows.append(job)
        if not job.get("started_at"):
            continue
        ref, state = job_ref(job), state_of(job)
        batch: Job = {**job, "name": "batch", "_step": f"{ref}.batch", "_suffix": ".batch"}
        if state in ("TIMEOUT", "CANCELLED"):
            batch.update(display_state="CANCELLED", exit_code=143, reason="Signal: SIGTERM")
        extern: Job = {**job, "name": "extern", "_step": f"{ref}.extern", "_suffix": ".extern",
                       "exit_code": 0, "reason": None,
                       "display_state": "RUNNING" if state in _LIVE else "COMPLETED"}  # fmt: skip
        rows += [batch, extern]
        rows += [_numbered_step(job, ref, state, step) for step in job.get("steps") or ()]
    return rows


def _numbered_step(job: Job, ref: str, job_state: str, step: dict[str, Any]) -> Job:
    """An `srun` step's row (`12.0`), as Slurm's: COMPLETED when it exited 0, CANCELLED when a
    signal ended it as its job was cancelled (or reached its limit; ExitCode 0:15), else FAILED
    with the worst task's code. A step that recorded no end was killed with its job."""
    from datetime import datetime

    stopped = job_state in ("CANCELLED", "TIMEOUT")
    code, sig, ended = step.get("exit_code"), step.get("signal"), step.get("ended_at")
    reason = None
    if ended is None:
        ended = job.get("ended_at")
        state = "CANCELLED" if stopped else _UNENDED.get(job_state, "FAILED")
        code, sig = (None, 15) if stopped else (None, None)
    elif sig:
        state = "CANCELLED" if stopped else "FAILED"
    else:
        state = "COMPLETED" if code == 0 else "FAILED"
    if sig:
        code, reason = 128 + int(sig), f"Signal: {_signal_name(int(sig))}"
    runtime = None
    if ended and step.get("started_at"):
        began, end = datetime.fromisoformat(step["started_at"]), datetime.fromisoformat(ended)
        runtime = max(0.0, (end - began).total_seconds())
    number = step["number"]
    return {**job, "name": step.get("name") or "", "_step": f"{ref}.{number}",
            "_suffix": f".{number}", "_numbered": True, "_ntasks": step.get("ntasks") or 1,
            "display_state": state, "exit_code": code, "reason": reason,
            "started_at": step.get("started_at"), "ended_at": ended,
            "runtime_s": runtime}  # fmt: skip


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


# A step killed with its job by what ended the job: the job's state.
_UNENDED = {"NODE_FAIL": "NODE_FAIL", "OUT_OF_MEMORY": "OUT_OF_MEMORY", "PENDING": "CANCELLED"}


def _unmeasured(job: Job) -> bool:
    """A row whose figures are not gathered here: .extern (the allocation's own step, running
    none of the job), and each srun step (the job's figures are its batch step's, all of it)."""
    return job.get("_suffix") == ".extern" or bool(job.get("_numbered"))


_LIVE = ("RUNNING", "COMPLETING", "PENDING")


def sacct_text(
    jobs: Sequence[Job],
    columns: Sequence[tuple[str, int]],
    *,
    header: bool = True,
    delimiter: str | None = None,
    trailing: bool = False,
    units: str | None = None,
) -> str:
    """sacct's table: fixed widths (values longer than their column end in `+`), JobID
    left-justified and the rest right; with `delimiter` (-p/-P) no widths at all; `units`
    (`--units`: K, M, G, T or P; "": --noconvert) for memory and energy."""

    def cell(job: Job, key: str, width: int) -> str:
        _, _, value_of, left = SACCT_FIELDS[key]
        value = value_of(job)
        if delimiter is not None:
            return value
        if len(value) > width:
            value = value[: width - 1] + "+"
        return value.ljust(width) if left else value.rjust(width)

    def line(cells: list[str]) -> str:
        if delimiter is not None:
            return delimiter.join(cells) + (delimiter if trailing else "")
        return " ".join(cells) + " "

    lines = []
    if header:
        names = [SACCT_FIELDS[k][0] for k, _ in columns]
        if delimiter is not None:
            lines.append(line(names))
        else:
            lines.append(line([n[:w].ljust(w) if SACCT_FIELDS[k][3] else n[:w].rjust(w)
                               for (k, w), n in zip(columns, names, strict=True)]))  # fmt: skip
            lines.append(line(["-" * w for _, w in columns]))
    if units is not None:  # --units or --noconvert (""): read by the memory and energy cells
        jobs = [{**job, "_units": units} for job in jobs]
    lines += [line([cell(job, k, w) for k, w in columns]) for job in jobs]
    return "\n".join(lines)
