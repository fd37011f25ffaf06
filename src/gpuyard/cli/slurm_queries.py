"""`gpuyard squeue`, `sacct` and `scancel`: Slurm's commands for the common flags, printing
what their namesakes print, so muscle memory and small scripts keep working.

    gpuyard squeue -u alice          JOBID PARTITION NAME USER ST TIME NODES NODELIST(REASON)
    gpuyard sacct -j 12 -X --format=JobID,State,ExitCode,Elapsed -P

What gpuyard has no counterpart for is printed as Slurm prints an unset value: the partition
is the server's one queue (`gpuyard`), the account the owner's team is not known to a job
record (blank). Pending tasks of an array are folded as squeue folds them (`12_[3-9%2]`);
`-r` shows one line per task. The formatting is pure; the commands only fetch jobs.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Annotated, Any

import typer

from gpuyard.cli.render import printable
from gpuyard.domain.units import format_duration

Job = dict[str, Any]

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
_SHORT_STATE = {
    "PENDING": "PD", "RUNNING": "R", "COMPLETING": "CG", "CANCELLING": "CG",
    "COMPLETED": "CD", "FAILED": "F", "CANCELLED": "CA", "TIMEOUT": "TO",
    "OUT_OF_MEMORY": "OOM", "NODE_FAIL": "NF",
}  # fmt: skip
_LONG_STATE = {"CANCELLING": "COMPLETING"}
_ACTIVE = ("PENDING", "RUNNING")


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
    "t": ("ST", lambda j: _SHORT_STATE.get(state_of(j), state_of(j))),
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
            raise typer.BadParameter(
                f"%{letter} is not a field gpuyard knows: use {' '.join(sorted(SQUEUE_FIELDS))}",
                param_hint="--format",
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


def _squeue_order(job: Job) -> tuple[int, int, int]:
    """Slurm's default `-S P,t,-p`: by state (PD before R), then priority, then age."""
    return (0 if job["state"] == "PENDING" else 1, -int(job.get("priority") or 0), job["id"])


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
    "reqmem": ("ReqMem", 10, _mem, False),
    "alloctres": ("AllocTRES", 10, _tres, False),
    "reqtres": ("ReqTRES", 10, _tres, False),
    "workdir": ("WorkDir", 10, lambda j: printable(str(j.get("workdir") or "")), False),
    "reason": ("Reason", 10, lambda j: str(j.get("reason") or "None"), False),
    "priority": ("Priority", 10, lambda j: str(j.get("priority", 0)), False),
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
            raise typer.BadParameter(f"{name} is not a field gpuyard knows: use {known}",
                                     param_hint="--format")  # fmt: skip
        if width and not width.isdigit():
            raise typer.BadParameter(f"{item}: the width after % is a number",
                                     param_hint="--format")  # fmt: skip
        columns.append((key, int(width) if width else SACCT_FIELDS[key][1]))
    return columns


def with_steps(jobs: Sequence[Job]) -> list[Job]:
    """Without -X sacct lists each job's steps too: a batch job's `.batch` step, which here
    is the job's own process tree (gpuyard has no separate steps to account)."""
    rows: list[Job] = []
    for job in jobs:
        rows.append(job)
        if job.get("started_at"):
            rows.append({**job, "name": "batch", "_step": f"{job_ref(job)}.batch",
                         "_suffix": ".batch"})  # fmt: skip
    return rows


def sacct_text(
    jobs: Sequence[Job],
    columns: Sequence[tuple[str, int]],
    *,
    header: bool = True,
    delimiter: str | None = None,
    trailing: bool = False,
) -> str:
    """sacct's table: fixed widths (values longer than their column end in `+`), JobID
    left-justified and the rest right; with `delimiter` (-p/-P) no widths at all."""

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
    lines += [line([cell(job, k, w) for k, w in columns]) for job in jobs]
    return "\n".join(lines)


# -- the commands ---------------------------------------------------------------------------


def _split(values: Sequence[str] | None) -> list[str]:
    return [v for value in values or () for v in value.split(",") if v]


def _state_names(values: Sequence[str] | None) -> set[str]:
    """`-t PD,R` or `--states=pending,running` -> {"PENDING", "RUNNING"}; `all`: every one."""
    by_short = {short: long for long, short in _SHORT_STATE.items() if long != "CANCELLING"}
    names = set()
    for value in _split(values):
        upper = value.upper()
        if upper == "ALL":
            return set()
        names.add(by_short.get(upper, upper))
    return names


def _fetch(session: Any, refs: Sequence[str], everything: bool) -> list[Job]:
    """The jobs `refs` name (`12`: a job, or every task of array 12; `12_3`: one task), or
    the queue (with `everything`: the recent history too)."""
    if not refs:
        return list(session.jobs(all=everything, limit=1000 if everything else None))
    found: list[Job] = []
    for ref in refs:
        array_id, sep, task = ref.partition("_")
        if not array_id.isdigit() or (sep and not task.isdigit()):
            raise typer.BadParameter(f"{ref!r} is not a job id (12) or an array task (12_3)")
        job = session.job(int(array_id))
        if job.get("array_job_id") == job["id"]:
            tasks = session.array(job["id"])
            found += [t for t in tasks if not sep or str(t["array_task_id"]) == task]
        elif not sep:
            found.append(job)
    return found


def squeue(
    user: Annotated[list[str] | None, typer.Option("--user", "-u", help="users' jobs")] = None,
    jobs: Annotated[list[str] | None, typer.Option("--jobs", "-j", help="job ids")] = None,
    states: Annotated[list[str] | None, typer.Option("--states", "-t", help="PD,R,...")] = None,
    name: Annotated[list[str] | None, typer.Option("--name", "-n", help="job names")] = None,
    fmt: Annotated[str | None, typer.Option("--format", "-o", help="squeue's %-fields")] = None,
    noheader: Annotated[bool, typer.Option("--noheader", "-h")] = False,
    expand: Annotated[bool, typer.Option("--array", "-r", help="one line per array task")] = False,
    long: Annotated[bool, typer.Option("--long", "-l")] = False,
    me: Annotated[bool, typer.Option("--me", help="your jobs")] = False,
    partition: Annotated[str | None, typer.Option("--partition", "-p", hidden=True)] = None,
) -> None:
    """Slurm's squeue: pending and running jobs in squeue's columns."""
    from gpuyard.cli.commands import client

    session = client()
    wanted_states = _state_names(states)
    found = _fetch(session, _split(jobs), everything=bool(states) or bool(jobs))
    users = set(_split(user)) | ({session.whoami()["user"]} if me else set())
    names = set(_split(name))
    shown = [
        j for j in found
        if (j["state"] in wanted_states if wanted_states else
            (j["state"] in _ACTIVE or bool(jobs) or states is not None))
        and (not users or j["owner"] in users) and (not names or j["name"] in names)
    ]  # fmt: skip
    shown.sort(key=_squeue_order)
    if not expand:
        shown = fold_arrays(shown)
    text = squeue_text(shown, fmt or (SQUEUE_LONG if long else SQUEUE_DEFAULT), not noheader)
    if long and not noheader:
        sys.stdout.write(time.strftime("%a %b %d %H:%M:%S %Y") + "\n")
    if text:
        sys.stdout.write(text + "\n")


def sacct(
    jobs: Annotated[list[str] | None, typer.Option("--jobs", "-j", help="job ids")] = None,
    user: Annotated[list[str] | None, typer.Option("--user", "-u")] = None,
    allusers: Annotated[bool, typer.Option("--allusers", "-a")] = False,
    allocations: Annotated[bool, typer.Option("--allocations", "-X", help="no steps")] = False,
    fmt: Annotated[str | None, typer.Option("--format", "-o", help="Field[%W],...")] = None,
    brief: Annotated[bool, typer.Option("--brief", "-b")] = False,
    long: Annotated[bool, typer.Option("--long", "-l")] = False,
    parsable: Annotated[bool, typer.Option("--parsable", "-p", help="'|' after each")] = False,
    parsable2: Annotated[bool, typer.Option("--parsable2", "-P", help="'|' between")] = False,
    noheader: Annotated[bool, typer.Option("--noheader", "-n")] = False,
    states: Annotated[list[str] | None, typer.Option("--state", "-s")] = None,
    starttime: Annotated[
        str | None, typer.Option("--starttime", "-S", help="YYYY-MM-DD[THH:MM[:SS]]")
    ] = None,
    name: Annotated[list[str] | None, typer.Option("--name")] = None,
) -> None:
    """Slurm's sacct: finished and running jobs with their states and exit codes."""
    from gpuyard.cli.commands import client

    session = client()
    fields = fmt or (SACCT_BRIEF if brief else SACCT_LONG if long else SACCT_DEFAULT)
    columns = sacct_columns(fields)
    refs = _split(jobs)
    found = _fetch(session, refs, everything=True)
    since = _since(starttime) if starttime else (None if refs else _midnight())
    users = set(_split(user))
    if not users and not allusers and not refs:
        users = {session.whoami()["user"]}
    wanted_states = _state_names(states)
    names = set(_split(name))
    rows = [
        j for j in found
        if (since is None or _ended_since(j, since))
        and (not users or j["owner"] in users) and (not names or j["name"] in names)
        and (not wanted_states or state_of(j) in wanted_states)
    ]  # fmt: skip
    rows.sort(key=lambda j: j["id"])
    if not allocations and not brief:
        rows = with_steps(rows)
    delimiter = "|" if parsable or parsable2 else None
    sys.stdout.write(
        sacct_text(rows, columns, header=not noheader, delimiter=delimiter, trailing=parsable)
        + "\n"
    )


def scancel(
    job_ids: Annotated[list[str] | None, typer.Argument(metavar="[JOB_ID[_TASK]...]")] = None,
    user: Annotated[str | None, typer.Option("--user", "-u")] = None,
    name: Annotated[str | None, typer.Option("--name", "-n")] = None,
    state: Annotated[str | None, typer.Option("--state", "-t", help="PENDING or RUNNING")] = None,
    signal: Annotated[str | None, typer.Option("--signal", "-s")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
) -> None:
    """Slurm's scancel: cancel jobs, array tasks or whole arrays; silent when it works."""
    from gpuyard.cli.commands import client
    from gpuyard.domain.errors import NotFound

    if signal is not None:
        _fail("--signal only signals a job in Slurm, which gpuyard cannot do without stopping "
              "it: use `gpuyard cancel --signal SIG JOB` to stop it with SIG")  # fmt: skip
    refs = list(job_ids or [])
    if not refs and not (user or name or state):
        _fail("no job identification provided: give job ids, or --user/--name/--state")
    session = client()
    wanted = _state_names([state] if state else None)
    targets: list[tuple[str, Callable[[], object]]] = []
    if refs:
        for ref in refs:
            array_id, sep, task = ref.partition("_")
            if not array_id.isdigit() or (sep and not task.isdigit()):
                _fail(f"Invalid job id {ref}")
            try:
                job = session.job(int(array_id))
            except NotFound:
                _warn(f"Kill job error on job id {ref}: Invalid job id specified", quiet)
                continue
            is_array = job.get("array_job_id") == job["id"]
            if is_array and not sep:
                targets.append((ref, _canceller(session.cancel_array, job["id"])))
                continue
            if sep:
                tasks = [t for t in session.array(job["id"]) if str(t["array_task_id"]) == task]
                if not is_array or not tasks:
                    _warn(f"Kill job error on job id {ref}: Invalid job id specified", quiet)
                    continue
                job = tasks[0]
            if job["state"] in _ACTIVE and (not wanted or job["state"] in wanted):
                targets.append((ref, _canceller(session.cancel, job["id"])))
            elif job["state"] not in _ACTIVE:
                _warn(f"Kill job error on job id {ref}: Job/step already completing or "
                      "completed", quiet)  # fmt: skip
    else:
        for job in session.jobs():
            if ((not user or job["owner"] == user) and (not name or job["name"] == name)
                    and (not wanted or job["state"] in wanted)):  # fmt: skip
                targets.append((job_ref(job), _canceller(session.cancel, job["id"])))
    for _ref, cancel in targets:
        cancel()


def _canceller(cancel: Callable[[int], object], job_id: int) -> Callable[[], object]:
    return lambda: cancel(job_id)


def _warn(message: str, quiet: bool) -> None:
    if not quiet:
        sys.stderr.write(f"scancel: error: {message}\n")


def _fail(message: str) -> None:
    sys.stderr.write(f"gpuyard: {message}\n")
    raise typer.Exit(1)


def _midnight() -> float:
    """sacct's default start: 00:00 today, local time."""
    now = time.localtime()
    return time.mktime((now.tm_year, now.tm_mon, now.tm_mday, 0, 0, 0, 0, 0, -1))


def _since(text: str) -> float:
    for form in ("%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d", "%m/%d/%y"):
        try:
            return time.mktime(time.strptime(text, form))
        except ValueError:
            continue
    raise typer.BadParameter(f"{text!r}: give YYYY-MM-DD[THH:MM[:SS]]", param_hint="--starttime")


def _ended_since(job: Job, since: float) -> bool:
    """Still running or pending, or ended at or after `since` (sacct's window)."""
    ended = job.get("ended_at")
    return not ended or datetime.fromisoformat(ended).timestamp() >= since


def register(app: typer.Typer) -> None:
    app.command("squeue")(squeue)
    app.command("sacct")(sacct)
    app.command("scancel")(scancel)
