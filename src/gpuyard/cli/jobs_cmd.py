"""`gpuyard queue`, `show`, `logs`, `cancel`, `wait` and the other verbs of jobs already queued.

Their bodies are `cli/commands.py`'s where the fast start path runs them too (queue, show,
cancel); a job reference is checked here as the fast path checks it (`cli/job_refs.py`).
"""

import sys
from typing import Annotated

import typer

from gpuyard.cli import commands
from gpuyard.cli.cmd_common import JsonOpt, OneJobRef, exit_with, fail
from gpuyard.cli.session import client
from gpuyard.cli.when import since_timestamp

QuietOpt = Annotated[
    bool,
    typer.Option("--quiet", "-q", help="no progress bar (it is shown only on a terminal)"),
]


def _job_id(value: str) -> int:
    """A plain job id (12), as `--before` takes it: never `int("1_5")`, which reads 15."""
    from gpuyard.cli.job_refs import check_one, split

    try:
        job_id, indices = split(check_one(value))
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if indices is not None:
        raise typer.BadParameter(f"{value!r} is an array's task: give a job id (12)")
    return job_id


def queue_cmd(
    all: Annotated[bool, typer.Option("--all", "-a", help="include finished jobs")] = False,
    json_out: JsonOpt = False,
    limit: Annotated[
        int | None, typer.Option(
            min=1, max=10_000, help="at most N jobs (the newest; with --all 200 unless given)"
        )
    ] = None,
    before: Annotated[
        int | None,
        typer.Option(metavar="ID", parser=_job_id, help="only jobs older than job ID"),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(metavar="WHEN", help="submitted since: 2h, 3d (ago) or 2026-11-30[T12:00]"),
    ] = None,
    state: Annotated[
        list[str] | None, typer.Option("--state", "-t", help="only this state (repeat for more)")
    ] = None,
    user: Annotated[str | None, typer.Option("--user", "-u", help="only this user's")] = None,
    name: Annotated[str | None, typer.Option(help="only jobs of this name")] = None,
    me: Annotated[bool, typer.Option("--me", help="only my jobs (the token's user)")] = False,
    expand: Annotated[
        bool,
        typer.Option(
            "--array",
            "-r",
            help="a line per array task (else an array's pending tasks are one line, "
            "12_[3-99%8], and each other task its own, 12_0)",
        ),
    ] = False,
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            "-o",
            metavar="FORMAT",
            help="squeue-style fields: %i id, %j name, %u user, %T state, %M time used, "
            "%l limit, %D nodes, %b GPUs, %R reason or node; %10j pads, %.10j right-justifies",
        ),
    ] = None,
    sort: Annotated[
        str | None,
        typer.Option(
            "--sort",
            "-S",
            metavar="KEYS",
            help="squeue-style keys, comma-separated, - for descending: i id, j name, u user, "
            "t state, p priority, M time used, l limit, b GPUs, D nodes, V submit, S start",
        ),
    ] = None,
) -> None:
    """Pending and running jobs, with the reason a pending job waits; with --all, history too
    (newest first pages: --limit, then --before the oldest id shown). Filters apply to both."""
    page = commands.HistoryPage(
        limit, before, since_timestamp(since) if since else None,
        tuple(s.upper() for s in state or ()), user, name, me,
    )  # fmt: skip
    exit_with(commands.queue(all, json_out, page, fmt, sort, expand))


def _job_ref(value: str) -> str:
    """A job reference (cli/job_refs.py) checked as the fast path checks it."""
    from gpuyard.cli.job_refs import check

    try:
        return check(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def _job_refs(values: list[str]) -> list[str]:
    return [_job_ref(value) for value in values]


# A job (12), an array (its id: 12) or its tasks (12_3, 12_[1-3,5]).
JobRef = Annotated[str, typer.Argument(metavar="JOB", callback=_job_ref)]
JobRefs = Annotated[list[str], typer.Argument(metavar="JOB...", callback=_job_refs)]


def show(job_id: JobRef, json_out: JsonOpt = False) -> None:
    """Everything about one job; an array's id (12): its tasks by state and their table;
    12_3: that task."""
    exit_with(commands.show(job_id, json_out))


def logs(
    job_ref: OneJobRef,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="follow until the job ends")
    ] = False,
    tail: Annotated[
        int | None,
        typer.Option("--tail", "-n", min=0, metavar="N", help="only the last N lines"),
    ] = None,
    quiet: QuietOpt = False,
    as_shown: Annotated[
        bool,
        typer.Option(
            "--rendered",
            help="write what a terminal shows: a progress bar's last frame, not every \\r "
            "frame of it (for a file or grep; without it the job's raw bytes)",
        ),
    ] = False,
) -> None:
    """The job's output (stdout and stderr), streamed as it arrives; with -f on a terminal, a
    progress bar under it (on stderr). Written as the job's raw bytes: a terminal shows a
    tqdm bar's redrawn line as its last frame, a file or pipe gets every frame (--rendered:
    what a terminal shows)."""
    exit_with(commands.logs(job_ref, follow, tail, quiet, rendered=as_shown))


def cancel(
    job_ids: JobRefs,
    signal: Annotated[
        str | None,
        typer.Option(
            "--signal",
            "-s",
            help="what running jobs' processes get instead of their own stop signal "
            "(USR1, INT, 10, ...); SIGKILL follows after the grace period",
        ),
    ] = None,
) -> None:
    """Cancel jobs: pending ones at once, running ones by their stop signal (SIGTERM unless
    submitted with --signal), a grace period, SIGKILL. An array's id cancels the whole array,
    12_3 one task, 12_[1-3] those tasks."""
    exit_with(commands.cancel(job_ids, signal))


def _each(refs: list[str], act: str, said: str, state: str) -> None:
    """Apply the client's `act` to each job the references name: `said` (formatted with the
    job's label, 12 or 12_3) on stdout, or one line per job it could not be done to on stderr,
    and exit 1 if any. Of an array (or 12_[1-3]), the tasks in `state` (and not held, for a
    hold; held, for a release)."""
    from gpuyard.cli.job_refs import each_job

    session = client()

    def applies(job: dict[str, object]) -> bool:
        held = bool(job.get("held"))
        return job["state"] == state and (held if act == "release" else not held)

    exit_with(each_job(refs, lambda job: getattr(session, act)(job["id"]), said, applies))


JobIds = JobRefs


def hold(job_ids: JobIds) -> None:
    """Keep pending jobs out of the queue (reason JobHeldUser) until released; a hold
    survives a server restart."""
    _each(job_ids, "hold", "job {id} held (`gpuyard release {id}` lets it run)", "PENDING")


def release(job_ids: JobIds) -> None:
    """Let held jobs back in the queue."""
    _each(job_ids, "release", "job {id} released", "PENDING")


def requeue(job_ids: JobIds) -> None:
    """Stop running jobs and put them back in the queue, as a preemption does (their restart
    count grows; GPUYARD_RESTART_COUNT tells the next run)."""
    _each(job_ids, "requeue", "job {id} is stopping and goes back to the queue", "RUNNING")


def restart(job_ref: OneJobRef) -> None:
    """Run a finished job (12, or an array's task 12_3) again: same command and resources, a
    new job; prints its id alone."""
    from gpuyard.cli.job_refs import one_id

    session = client()
    job = session.restart(one_id(session, job_ref))
    sys.stdout.write(f"{job['id']}\n")


def update(
    job_ref: OneJobRef,
    time: Annotated[
        str | None, typer.Option("--time", "-t", help="time limit: minutes, [D-]HH:MM:SS, 2h")
    ] = None,
    priority: Annotated[int | None, typer.Option(help="higher runs first")] = None,
    gpus: Annotated[int | None, typer.Option(help="GPUs (whole devices)", min=0)] = None,
) -> None:
    """Change a pending job's time limit, priority or GPUs (scontrol update, pueue edit);
    a running job holds its resources: requeue it first."""
    from gpuyard.cli.job_refs import label, one_id
    from gpuyard.domain.units import format_duration

    session = client()
    job = session.update(one_id(session, job_ref), time_limit=time, priority=priority, gpus=gpus)
    limit = format_duration(job["time_limit_s"]) if job["time_limit_s"] else "UNLIMITED"
    sys.stdout.write(
        f"job {label(job)} updated: {job['num_gpus']} GPUs, time limit {limit}, "
        f"priority {job['priority']}\n"
    )


def clean(
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than",
            metavar="DURATION",
            help="only jobs that ended longer ago than this (7d, 12h, 30m) [any]",
        ),
    ] = None,
    user: Annotated[
        str | None, typer.Option("--user", "-u", help="only this user's (admins) [everyone's]")
    ] = None,
) -> None:
    """Forget finished jobs: their records, logs and folders (pueue's clean). Yours, or for an
    admin everyone's; pending and running jobs are never touched."""
    done = client().clean(older_than, user)
    count = done["cleaned"]
    sys.stdout.write(f"cleaned {count} finished job{'' if count == 1 else 's'}\n")
    kept = done.get("folders_kept") or []
    if kept:
        fail(
            f"the folders of job(s) {', '.join(map(str, kept))} could not be removed "
            "(see the server's jobs/ folder); their records are gone"
        )


def wait(job_ids: JobRefs, quiet: QuietOpt = False) -> None:
    """Block until the jobs end; exit 0 only if all COMPLETED. An array's id waits for every
    task (12_3: one). On a terminal, a progress bar per job (on stderr) until then."""
    exit_with(commands.wait(job_ids, quiet))


def register(app: typer.Typer, admin: typer.Typer) -> None:
    """Add the job commands to the app, in the order `gpuyard --help` lists them."""
    app.command("queue")(queue_cmd)
    app.command("ps", hidden=True, help="Alias of `queue`.")(queue_cmd)
    for verb in (show, logs, cancel, hold, release, requeue, restart, update, clean, wait):
        app.command(verb.__name__)(verb)
