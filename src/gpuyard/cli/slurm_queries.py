"""The bodies of `gpuyard squeue`, `sacct` and `scancel`, shared by the fast start path
(`cli/slurm_fast.py`) and typer (`cli/slurm_queries_cmd.py`).

These only fetch jobs and choose them as Slurm's flags say; the tables are
`cli/slurm_format.py`'s. Each takes the values typer's parser makes of the flags (None: not
given) and returns the exit status. Standard library only, so that these commands start as
fast as `queue`: a wrong value is typer's usage error (`slurm_format.bad_value`), raised
before anything is printed or changed, so the fast path can hand the line to typer.
"""

from __future__ import annotations

import re
import sys
import time

from gpuyard.cli.session import client
from gpuyard.cli.slurm_format import (
    PARTITION,
    SACCT_BRIEF,
    SACCT_DEFAULT,
    SACCT_LONG,
    SHORT_STATE,
    SQUEUE_DEFAULT,
    SQUEUE_LONG,
    bad_value,
    fold_arrays,
    sacct_columns,
    sacct_text,
    squeue_order,
    squeue_text,
    state_of,
    with_steps,
)

TYPE_CHECKING = False  # typing stays unimported on the fast path
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, NoReturn

    from gpuyard.cli.slurm_format import Job

_ACTIVE = ("PENDING", "RUNNING")


def _split(values: Sequence[str] | None) -> list[str]:
    return [v for value in values or () for v in value.split(",") if v]


def _state_names(values: Sequence[str] | None) -> set[str]:
    """`-t PD,R` or `--states=pending,running` -> {"PENDING", "RUNNING"}; `all`: every one."""
    by_short = {short: long for long, short in SHORT_STATE.items() if long != "CANCELLING"}
    names = set()
    for value in _split(values):
        upper = value.upper()
        if upper == "ALL":
            return set()
        names.add(by_short.get(upper, upper))
    return names


def _job_list(values: Sequence[str] | None) -> list[str]:
    """`-j 12,13_2,14_[1-3,5]` -> the references, split at the commas outside brackets."""
    refs: list[str] = []
    for value in values or ():
        depth, start = 0, 0
        for i, char in enumerate(value + ","):
            depth += (char == "[") - (char == "]")
            if char == "," and depth <= 0:
                if value[start:i]:
                    refs.append(value[start:i])
                start = i + 1
    return refs


def _fetch(session: Any, refs: Sequence[str], everything: bool) -> list[Job]:
    """The jobs `refs` name (`12`: a job, or every task of array 12; `12_3`: one task;
    `12_[1-3]`: those tasks: cli/job_refs.py), or the queue (with `everything`: the recent
    history too)."""
    from gpuyard.cli.job_refs import split

    if not refs:
        return list(session.jobs(all=everything, limit=1000 if everything else None))
    found: list[Job] = []
    for ref in refs:
        try:
            array_id, indices = split(ref)
        except ValueError as exc:
            bad_value(str(exc), "--jobs")
        job = session.job(array_id)
        if job.get("array_job_id") == job["id"]:
            tasks = session.array(job["id"])
            found += [t for t in tasks if indices is None or t["array_task_id"] in indices]
        elif indices is None:
            found.append(job)
    return found


def squeue(
    user: Sequence[str] | None = None, jobs: Sequence[str] | None = None,
    states: Sequence[str] | None = None, name: Sequence[str] | None = None,
    fmt: str | None = None, noheader: bool = False, expand: bool = False, long: bool = False,
    me: bool = False, partition: str | None = None,
) -> int:  # fmt: skip
    """Slurm's squeue: pending and running jobs in squeue's columns. A job that has ended is
    shown only when `-t` asks for its state (`-t all`): `squeue -h -j 12` prints nothing once
    12 has ended, so a script's `while squeue -h -j $ID | grep -q .` wait ends with it."""

    session = client()
    wanted_states = _state_names(states)
    found = _fetch(session, _job_list(jobs), everything=bool(states) or bool(jobs))
    users = set(_split(user)) | ({session.whoami()["user"]} if me else set())
    names = set(_split(name))
    shown = [
        j for j in found
        if (j["state"] in wanted_states if wanted_states else
            (j["state"] in _ACTIVE or states is not None))
        and (not users or j["owner"] in users) and (not names or j["name"] in names)
    ]  # fmt: skip
    shown.sort(key=squeue_order)
    if not expand:
        shown = fold_arrays(shown)
    text = squeue_text(shown, fmt or (SQUEUE_LONG if long else SQUEUE_DEFAULT), not noheader)
    if long and not noheader:
        sys.stdout.write(time.strftime("%a %b %d %H:%M:%S %Y") + "\n")
    if text:
        sys.stdout.write(text + "\n")
    return 0


def sacct(
    jobs: Sequence[str] | None = None, user: Sequence[str] | None = None,
    allusers: bool = False, allocations: bool = False, fmt: str | None = None,
    brief: bool = False, long: bool = False, parsable: bool = False, parsable2: bool = False,
    noheader: bool = False, states: Sequence[str] | None = None, starttime: str | None = None,
    name: Sequence[str] | None = None, endtime: str | None = None,
    clusters: Sequence[str] | None = None, allclusters: bool = False,
    units: str | None = None, noconvert: bool = False,
) -> int:  # fmt: skip
    """Slurm's sacct: finished and running jobs with their states, exit codes and steps."""

    if units is not None and (len(units) != 1 or units.upper() not in "KMGTP"):
        bad_value(f"{units!r}: use K, M, G, T or P", "--units")
    fields = fmt or (SACCT_BRIEF if brief else SACCT_LONG if long else SACCT_DEFAULT)
    columns = sacct_columns(fields)
    delimiter = "|" if parsable or parsable2 else None
    if not _is_here(clusters, allclusters):  # no job of another cluster is known here
        sys.stdout.write(sacct_text([], columns, header=not noheader, delimiter=delimiter,
                                    trailing=parsable) + "\n")  # fmt: skip
        return 0
    session = client()
    refs = _job_list(jobs)
    found = _fetch(session, refs, everything=True)
    since = slurm_time(starttime, "--starttime") if starttime else (None if refs else _midnight())
    until = slurm_time(endtime, "--endtime") if endtime else None
    users = set(_split(user))
    if not users and not allusers and not refs:
        users = {session.whoami()["user"]}
    wanted_states = _state_names(states)
    names = set(_split(name))
    rows = [
        j for j in found
        if (since is None or _ended_since(j, since)) and (until is None or _began_by(j, until))
        and (not users or j["owner"] in users) and (not names or j["name"] in names)
        and (not wanted_states or state_of(j) in wanted_states)
    ]  # fmt: skip
    rows.sort(key=lambda j: j["id"])
    if not allocations and not brief:
        rows = with_steps(rows)
    shown = sacct_text(rows, columns, header=not noheader, delimiter=delimiter,
                       trailing=parsable, units="" if noconvert else units)  # fmt: skip
    sys.stdout.write(shown + "\n")
    return 0


def _is_here(clusters: Sequence[str] | None, every: bool) -> bool:
    """`-M gpuyard`, `-M all`, `-L`, or none: this server's jobs (one cluster, named as
    jobs see it in SLURM_CLUSTER_NAME); `-M other`: none."""
    names = {name.lower() for name in _split(clusters)}
    return every or not names or bool(names & {"all", "-1", PARTITION})


def scancel(
    job_ids: Sequence[str] | None = None, user: str | None = None, name: str | None = None,
    state: str | None = None, signal: str | None = None, quiet: bool = False,
) -> int:  # fmt: skip
    """Slurm's scancel: cancel jobs, array tasks or whole arrays; silent when it works (1,
    with one line on stderr, when the line names no job or a malformed one)."""
    try:
        _scancel(list(job_ids or []), user, name, state, signal, quiet)
    except _Refused:
        return 1
    return 0


class _Refused(Exception):
    """scancel said why it cancels nothing (`_fail`): exit 1."""


def _scancel(refs: list[str], user: str | None, name: str | None, state: str | None,
             signal: str | None, quiet: bool) -> None:  # fmt: skip
    from gpuyard.domain.errors import NotFound

    if signal is not None:
        _fail("--signal only signals a job in Slurm, which gpuyard cannot do without stopping "
              "it: use `gpuyard cancel --signal SIG JOB` to stop it with SIG")  # fmt: skip
    if not refs and not (user or name or state):
        _fail("no job identification provided: give job ids, or --user/--name/--state")
    session = client()
    wanted = _state_names([state] if state else None)
    ids: list[int] = []  # each cancelled on its own
    arrays: list[int] = []  # each an array's id: all its tasks
    if refs and not wanted and all(ref.isdigit() for ref in refs):
        _scancel_ids(session, [int(ref) for ref in refs], quiet)
        return
    if refs:
        from gpuyard.cli.job_refs import split

        for ref in refs:
            try:  # 12, 12_3, 12_[1-3]: the references every command takes (cli/job_refs.py)
                array_id, indices = split(ref)
            except ValueError:
                _fail(f"Invalid job id {ref}")
            try:
                job = session.job(array_id)
            except NotFound:
                _warn(f"Kill job error on job id {ref}: Invalid job id specified", quiet)
                continue
            is_array = job.get("array_job_id") == job["id"]
            if is_array and indices is None:
                arrays.append(job["id"])
                continue
            named = [job]
            if indices is not None:
                named = [t for t in session.array(job["id"]) if t["array_task_id"] in indices]
                if not is_array or not named:
                    _warn(f"Kill job error on job id {ref}: Invalid job id specified", quiet)
                    continue
            for job in named:
                if job["state"] in _ACTIVE and (not wanted or job["state"] in wanted):
                    ids.append(job["id"])
                elif job["state"] not in _ACTIVE and len(named) == 1:
                    _warn(f"Kill job error on job id {ref}: Job/step already completing or "
                          "completed", quiet)  # fmt: skip
    else:
        for job in session.jobs():
            if ((not user or job["owner"] == user) and (not name or job["name"] == name)
                    and (not wanted or job["state"] in wanted)):  # fmt: skip
                ids.append(job["id"])
    for chosen, whole_arrays in ((ids, False), (arrays, True)):  # one request each
        if chosen:
            done = session.cancel_many(chosen, whole_arrays=whole_arrays)
            for refused in done["refused"]:
                _warn(f"Kill job error on job id {refused['id']}: {refused['message']}", quiet)


def _scancel_ids(session: Any, job_ids: list[int], quiet: bool) -> None:
    """`scancel 12 13`, the usual line: one request, the server's refusals in Slurm's words.
    An array's id stands for all its tasks there too (`whole_arrays`), so nothing is looked up
    first (that GET, on a connection of its own, took a third of the command's time)."""
    done = session.cancel_many(job_ids, whole_arrays=True)
    for refused in done["refused"]:
        why = _SLURM_REFUSALS.get(refused["code"], refused["message"])
        _warn(f"Kill job error on job id {refused['id']}: {why}", quiet)


_SLURM_REFUSALS = {  # a refusal's code -> what Slurm's scancel says
    "not_found": "Invalid job id specified",
    "conflict": "Job/step already completing or completed",
    "forbidden": "Access/permission denied",
}


def _warn(message: str, quiet: bool) -> None:
    if not quiet:
        sys.stderr.write(f"scancel: error: {message}\n")


def _fail(message: str) -> NoReturn:
    sys.stderr.write(f"gpuyard: {message}\n")
    raise _Refused


def _midnight() -> float:
    """sacct's default start: 00:00 today, local time."""
    now = time.localtime()
    return time.mktime((now.tm_year, now.tm_mon, now.tm_mday, 0, 0, 0, 0, 0, -1))


_FORMS = ("%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d", "%m/%d/%y", "%m/%d/%Y", "%m/%d",
          "%m%d%y", "%m%d")  # fmt: skip
_NOW_UNITS = {"": 1, "second": 1, "seconds": 1, "minute": 60, "minutes": 60, "hour": 3600,
              "hours": 3600, "day": 86400, "days": 86400, "week": 604800,
              "weeks": 604800}  # fmt: skip
_NOW = re.compile(r"now(?:([+-])(\d+)([a-z]*))?")
_CLOCK = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}))?")


def slurm_time(text: str, flag: str) -> float:
    """sacct's time forms (as sbatch's --begin): YYYY-MM-DD[THH:MM[:SS]], MM/DD[/YY],
    MMDD[YY], HH:MM[:SS] (today), now[{+|-}N[seconds|minutes|hours|days|weeks]], today,
    midnight, noon, tomorrow; local time, as epoch seconds."""
    word = text.strip().lower()
    now = time.time()
    relative = _NOW.fullmatch(word)
    if relative:
        sign, count, unit = relative.groups()
        unit = unit or ""
        if unit not in _NOW_UNITS:
            bad_value(f"{text!r}: the unit is seconds, minutes, hours, days or weeks", flag)
        step = int(count or 0) * _NOW_UNITS[unit]
        return now - step if sign == "-" else now + step
    named = {"today": 0.0, "midnight": 0.0, "noon": 12 * 3600.0, "tomorrow": 86400.0}
    if word in named:
        return _midnight() + named[word]
    clock = _CLOCK.fullmatch(word)
    if clock:
        hours, minutes, secs = (int(v or 0) for v in clock.groups())
        return _midnight() + hours * 3600 + minutes * 60 + secs
    for form in _FORMS:
        try:
            parsed = time.strptime(text, form)
        except ValueError:
            continue
        if "%y" not in form.lower():  # no year given: this year's
            parsed = time.struct_time((time.localtime().tm_year, *parsed[1:]))
        return time.mktime(parsed)
    bad_value(f"{text!r}: give YYYY-MM-DD[THH:MM[:SS]], MM/DD[/YY], HH:MM or "
              "now[-N(minutes|hours|days)]", flag)  # fmt: skip


def _ended_since(job: Job, since: float) -> bool:
    """Still running or pending, or ended at or after `since` (sacct's window)."""
    from datetime import datetime

    ended = job.get("ended_at")
    return not ended or datetime.fromisoformat(ended).timestamp() >= since


def _began_by(job: Job, until: float) -> bool:
    """Submitted at or before `until` (the window's end: a job submitted later was not yet
    in the system then)."""
    from datetime import datetime

    return datetime.fromisoformat(job["submitted_at"]).timestamp() <= until


