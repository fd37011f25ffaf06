"""`gpuyard squeue`, `sacct` and `scancel`: Slurm's commands for the common flags, printing
what their namesakes print, so muscle memory and small scripts keep working.

    gpuyard squeue -u alice          JOBID PARTITION NAME USER ST TIME NODES NODELIST(REASON)
    gpuyard sacct -j 12 -X --format=JobID,State,ExitCode,Elapsed -P

Here are typer's signatures, its `--help` and its usage errors; the bodies are
`cli/slurm_queries.py`'s, which the fast start path (`cli/slurm_fast.py`) runs without typer
for the lines it is sure of. `-r` shows one line per array task.
"""

from __future__ import annotations

from typing import Annotated

import typer

from gpuyard.cli import slurm_queries as queries
from gpuyard.cli.cmd_common import exit_with
from gpuyard.cli.slurm_queries import slurm_time

__all__ = ["register", "slurm_time"]


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
    """Slurm's squeue: pending and running jobs in squeue's columns. A job that has ended is
    shown only when `-t` asks for its state (`-t all`): `squeue -h -j 12` prints nothing once
    12 has ended, so a script's `while squeue -h -j $ID | grep -q .` wait ends with it."""
    exit_with(queries.squeue(
        user=user, jobs=jobs, states=states, name=name, fmt=fmt, noheader=noheader,
        expand=expand, long=long, me=me, partition=partition,
    ))


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
    endtime: Annotated[
        str | None, typer.Option("--endtime", "-E", help="as --starttime; also now, now-1hour")
    ] = None,
    clusters: Annotated[
        list[str] | None, typer.Option("--clusters", "-M", help="one cluster here: gpuyard")
    ] = None,
    allclusters: Annotated[bool, typer.Option("--allclusters", "-L")] = False,
    units: Annotated[
        str | None, typer.Option("--units", help="K, M, G, T or P for memory and energy")
    ] = None,
    noconvert: Annotated[bool, typer.Option("--noconvert", help="figures as recorded")] = False,
) -> None:
    """Slurm's sacct: finished and running jobs with their states, exit codes and steps."""
    exit_with(queries.sacct(
        jobs=jobs, user=user, allusers=allusers, allocations=allocations, fmt=fmt, brief=brief,
        long=long, parsable=parsable, parsable2=parsable2, noheader=noheader, states=states,
        starttime=starttime, name=name, endtime=endtime, clusters=clusters,
        allclusters=allclusters, units=units, noconvert=noconvert,
    ))


def scancel(
    job_ids: Annotated[list[str] | None, typer.Argument(metavar="[JOB_ID[_TASK]...]")] = None,
    user: Annotated[str | None, typer.Option("--user", "-u")] = None,
    name: Annotated[str | None, typer.Option("--name", "-n")] = None,
    state: Annotated[str | None, typer.Option("--state", "-t", help="PENDING or RUNNING")] = None,
    signal: Annotated[str | None, typer.Option("--signal", "-s")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
) -> None:
    """Slurm's scancel: cancel jobs, array tasks or whole arrays; silent when it works."""
    exit_with(queries.scancel(job_ids=job_ids, user=user, name=name, state=state,
                              signal=signal, quiet=quiet))  # fmt: skip


def register(app: typer.Typer, admin: typer.Typer) -> None:
    """Add `squeue`, `sacct` and `scancel` to the app."""
    app.command("squeue")(squeue)
    app.command("sacct")(sacct)
    app.command("scancel")(scancel)
