"""`gpuyard`'s typer app: every command, its help and its usage errors.

`cli/main.py` runs the hot commands (submit, queue, show, cancel) without importing this
module (typer + click cost ~40-90 ms); it comes here for everything else. The hot commands'
bodies are `cli/commands.py`'s, shared by both paths.
"""

import sys
from typing import TYPE_CHECKING, Annotated, NoReturn

import click
import typer
from typer.core import TyperCommand

from gpuyard.cli import (
    commands,
    identity,
    limits,
    notify_cmd,
    run_cmd,
    serve_cmd,
    slurm_cmd,
    sweep_cmd,
)
from gpuyard.cli.when import since_timestamp
from gpuyard.domain.errors import GpuyardError

if TYPE_CHECKING:
    from gpuyard.client import Client

app = typer.Typer(
    name="gpuyard",
    help="A self-hosted GPU training server: queue, schedule and run jobs on isolated GPUs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

JsonOpt = Annotated[
    bool, typer.Option("--json", help="print JSON (stable fields, see docs/cli.md)")
]


def _client() -> "Client":
    return commands.client()


def _print_json(data: object) -> None:
    commands.print_json(data)


def fail(message: str, code: int = 1) -> NoReturn:
    sys.stderr.write(f"gpuyard: {message}\n")
    raise typer.Exit(code)


class _OneLineUsage(click.ClickException):
    """A usage error in one line, as the fast path's errors read; exit 2 like click's own."""

    exit_code = 2

    def show(self, file: object = None) -> None:
        sys.stderr.write(f"gpuyard: {self.message}\n")


class SubmitCommand(TyperCommand):
    """`submit` refuses an unknown option before the command instead of running it as one.

    Options end at the command's first word (`gpuyard submit python t.py --lr 1`); before it,
    `--gpu 1` or a Slurm habit (`-p gpu`) is a typo to point at, not a program to run.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            raise _OneLineUsage(no_such_option(exc.option_name, exc.possibilities)) from None


def no_such_option(name: str, close: list[str] | None) -> str:
    """`No such option: --gpu (Did you mean --gpus?)`: the closest match only, once; one of
    sbatch's options says where it is taken instead (domain/sbatch.py)."""
    from gpuyard.domain.sbatch import sbatch_hint

    hint = sbatch_hint(name)
    if hint:
        return f"No such option: {name} ({hint})"
    return f"No such option: {name}" + (f" (Did you mean {close[0]}?)" if close else "")


@app.command(cls=SubmitCommand, context_settings={"allow_interspersed_args": False})
def submit(
    command: Annotated[list[str], typer.Argument(help="COMMAND [ARGS...] or a script file")],
    gpus: Annotated[
        int | None, typer.Option("--gpus", "-G", help="GPUs (whole devices) [0]", min=0)
    ] = None,
    cpus: Annotated[
        int | None,
        typer.Option(
            "--cpus",
            "-c",
            "--cpus-per-task",
            help="CPU cores, the job's in all (split over --nodes) [1]",
            min=1,
        ),
    ] = None,
    mem: Annotated[
        str | None, typer.Option(help="memory, the job's in all (split over --nodes), e.g. 16G")
    ] = None,
    time: Annotated[
        str | None, typer.Option("--time", "-t", help="time limit: minutes, [D-]HH:MM:SS, 2h")
    ] = None,
    name: Annotated[str | None, typer.Option("--name", "-J", help="job name")] = None,
    priority: Annotated[int | None, typer.Option(help="higher runs first [0]")] = None,
    workdir: Annotated[
        str | None,
        typer.Option("--workdir", "-D", "--chdir", help="working directory (default: here)"),
    ] = None,
    env: Annotated[list[str] | None, typer.Option("--env", help="K=V, repeatable")] = None,
    export_env: Annotated[
        bool | None,
        typer.Option(
            "--export-env/--no-export-env",
            help="pass PATH and the active virtualenv/conda env to the job [yes]",
            show_default=False,
        ),
    ] = None,
    preemptible: Annotated[
        bool | None,
        typer.Option(
            "--preemptible/--no-preempt",
            "--requeue/--no-requeue",
            help="--preemptible: the scheduler may stop this job to run another and requeue "
            "it (checkpoint on the stop signal); --no-preempt: never. Default: the server's "
            "(never, unless its admin chose otherwise). --requeue/--no-requeue: sbatch's names",
            show_default=False,
        ),
    ] = None,
    stop_signal: Annotated[
        str | None,
        typer.Option(
            "--signal",
            help="what its processes get when it is cancelled, preempted or reaches its time "
            "limit, SIGKILL after the grace period (USR1, INT, 10, ...; default TERM); "
            "SIG@SECONDS: send SIG that long before the time limit (to checkpoint)",
        ),
    ] = None,
    retries: Annotated[
        int,
        typer.Option(
            help="requeue a failed run up to N times, waiting longer each time (10 s, 20 s, ...)",
            min=0,
        ),
    ] = 0,
    retry_on: Annotated[
        str | None,
        typer.Option(
            help="failures --retries covers, comma-separated: failed (non-zero exit or signal; "
            "the default), timeout, oom, launch (the command could not start)",
            metavar="CLASS[,CLASS]",
        ),
    ] = None,
    distributed: Annotated[
        str | None,
        typer.Option(help="torchrun (one process per GPU), jax or tf: see docs/cli.md"),
    ] = None,
    gpu_mem: Annotated[
        str | None,
        typer.Option(
            help="GPU memory per GPU, e.g. 20G: share GPUs with other such jobs, held to this "
            "(implies --gpus 1 unless given)"
        ),
    ] = None,
    nodes: Annotated[
        int | None,
        typer.Option("--nodes", "-N", help="machines the job spans (server --backend ray)", min=1),
    ] = None,
    gpus_per_node: Annotated[
        int | None, typer.Option(help="GPUs on each of --nodes (sets --gpus)", min=0)
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="queue nothing: say if and when the job would start"),
    ] = False,
    check: Annotated[
        bool,
        typer.Option("--check", help="refuse the job if its Python frameworks cannot run here"),
    ] = False,
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            help="sbatch -o: also write the output here (%j %x %A %a "
            "%u %N), relative to the working directory",
        ),
    ] = None,
    error: Annotated[
        str | None,
        typer.Option("--error", "-e", help="sbatch -e: standard error here apart (was -e: --env)"),
    ] = None,
    gres: Annotated[
        str | None, typer.Option(help="gpu:N or gpu:TYPE:N: GPUs per node (sets --gpus)")
    ] = None,
    ntasks_per_node: Annotated[
        int | None, typer.Option(help="tasks per node srun starts in the job [1]", min=1)
    ] = None,
    mem_per_gpu: Annotated[
        str | None, typer.Option(help="memory per GPU (instead of --mem), e.g. 32G")
    ] = None,
    array: Annotated[
        str | None,
        typer.Option(
            "--array", "-a", help="a job array: 0-99%8, 1,3,5, 0-15:4 (%N: at most N running)"
        ),
    ] = None,
    dependency: Annotated[
        str | None,
        typer.Option(
            "--dependency", "-d", help="afterok:ID[:ID], afterany, afternotok, aftercorr, singleton"
        ),
    ] = None,
    export: Annotated[
        str | None,
        typer.Option(
            help="sbatch's --export: ALL, NONE, or [ALL,]VAR[=VALUE],... "
            "(ALL: this shell's whole environment)"
        ),
    ] = None,
    mail_type: Annotated[
        str | None,
        typer.Option(help="BEGIN,END,FAIL,REQUEUE,ALL...: the events --notify webhooks get"),
    ] = None,
    mail_user: Annotated[
        str | None, typer.Option(help="an http(s) URL is a webhook (--notify); no mail is sent")
    ] = None,
    notify: Annotated[
        list[str] | None,
        typer.Option(metavar="URL", help="a webhook told of the job's state changes; repeatable"),
    ] = None,
    python: Annotated[
        str | None, typer.Option(metavar="PATH", help="the interpreter the job runs")
    ] = None,
    venv: Annotated[
        str | None, typer.Option(metavar="PATH", help="a virtualenv the job runs in")
    ] = None,
    container: Annotated[
        str | None,
        typer.Option(metavar="IMAGE", help="run the job in this image (apptainer or podman)"),
    ] = None,
    gpu_type: Annotated[
        str | None, typer.Option(help="a GPU model or vendor the job's GPUs must be: a100, h100")
    ] = None,
) -> None:
    """Queue a job; prints its id alone (JOB=$(gpuyard submit ...) works)."""
    options = commands.SubmitOptions(
        command=command, gpus=gpus, cpus=cpus, mem=mem, time=time, name=name,
        priority=priority, workdir=workdir, env=env or [], export_env=export_env,
        preemptible=preemptible, stop_signal=stop_signal, distributed=distributed,
        gpu_mem=gpu_mem, nodes=nodes, gpus_per_node=gpus_per_node, dry_run=dry_run, check=check,
        retries=retries, retry_on=retry_on, output=output, error=error, gres=gres,
        ntasks_per_node=ntasks_per_node, mem_per_gpu=mem_per_gpu, array=array,
        dependency=dependency, export=export, mail_type=mail_type, mail_user=mail_user,
        notify=notify or [], python=python, venv=venv, container=container, gpu_type=gpu_type,
    )  # fmt: skip
    _exit(commands.submit(options))


QuietOpt = Annotated[
    bool,
    typer.Option("--quiet", "-q", help="no progress bar (it is shown only on a terminal)"),
]


def _exit(code: int) -> None:
    if code:
        raise typer.Exit(code)


@app.command("queue")
def queue_cmd(
    all: Annotated[bool, typer.Option("--all", "-a", help="include finished jobs")] = False,
    json_out: JsonOpt = False,
    limit: Annotated[
        int | None, typer.Option(min=1, max=10_000, help="at most N jobs (the newest)")
    ] = None,
    before: Annotated[
        int | None, typer.Option(min=1, metavar="ID", help="only jobs older than job ID")
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
    _exit(commands.queue(all, json_out, page, fmt, sort, expand))


app.command("ps", hidden=True, help="Alias of `queue`.")(queue_cmd)


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


@app.command()
def show(job_id: JobRef, json_out: JsonOpt = False) -> None:
    """Everything about one job; an array's id (12): its tasks by state and their table;
    12_3: that task."""
    _exit(commands.show(job_id, json_out))


@app.command()
def logs(
    job_id: Annotated[int, typer.Argument(metavar="JOB")],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="follow until the job ends")
    ] = False,
    tail: Annotated[
        int | None,
        typer.Option("--tail", "-n", min=0, metavar="N", help="only the last N lines"),
    ] = None,
    quiet: QuietOpt = False,
) -> None:
    """The job's output (stdout and stderr), streamed as it arrives; with -f on a terminal, a
    progress bar under it (on stderr)."""
    _exit(commands.logs(job_id, follow, tail, quiet))


@app.command()
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
    _exit(commands.cancel(job_ids, signal))


def _each(refs: list[str], act: str, said: str, state: str) -> None:
    """Apply the client's `act` to each job the references name: `said` (formatted with the
    job's label, 12 or 12_3) on stdout, or one line per job it could not be done to on stderr,
    and exit 1 if any. Of an array (or 12_[1-3]), the tasks in `state` (and not held, for a
    hold; held, for a release)."""
    from gpuyard.cli.job_refs import each_job

    client = _client()

    def applies(job: dict[str, object]) -> bool:
        held = bool(job.get("held"))
        return job["state"] == state and (held if act == "release" else not held)

    _exit(each_job(refs, lambda job: getattr(client, act)(job["id"]), said, applies))


JobIds = JobRefs


@app.command()
def hold(job_ids: JobIds) -> None:
    """Keep pending jobs out of the queue (reason JobHeldUser) until released; a hold
    survives a server restart."""
    _each(job_ids, "hold", "job {id} held (`gpuyard release {id}` lets it run)", "PENDING")


@app.command()
def release(job_ids: JobIds) -> None:
    """Let held jobs back in the queue."""
    _each(job_ids, "release", "job {id} released", "PENDING")


@app.command()
def requeue(job_ids: JobIds) -> None:
    """Stop running jobs and put them back in the queue, as a preemption does (their restart
    count grows; GPUYARD_RESTART_COUNT tells the next run)."""
    _each(job_ids, "requeue", "job {id} is stopping and goes back to the queue", "RUNNING")


@app.command()
def restart(job_id: Annotated[int, typer.Argument(metavar="JOB")]) -> None:
    """Run a finished job again: same command and resources, a new job; prints its id alone."""
    job = _client().restart(job_id)
    sys.stdout.write(f"{job['id']}\n")


@app.command()
def update(
    job_id: Annotated[int, typer.Argument(metavar="JOB")],
    time: Annotated[
        str | None, typer.Option("--time", "-t", help="time limit: minutes, [D-]HH:MM:SS, 2h")
    ] = None,
    priority: Annotated[int | None, typer.Option(help="higher runs first")] = None,
    gpus: Annotated[int | None, typer.Option(help="GPUs (whole devices)", min=0)] = None,
) -> None:
    """Change a pending job's time limit, priority or GPUs (scontrol update, pueue edit);
    a running job holds its resources: requeue it first."""
    job = _client().update(job_id, time_limit=time, priority=priority, gpus=gpus)
    from gpuyard.domain.units import format_duration

    limit = format_duration(job["time_limit_s"]) if job["time_limit_s"] else "UNLIMITED"
    sys.stdout.write(
        f"job {job_id} updated: {job['num_gpus']} GPUs, time limit {limit}, "
        f"priority {job['priority']}\n"
    )


@app.command()
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
    done = _client().clean(older_than, user)
    count = done["cleaned"]
    sys.stdout.write(f"cleaned {count} finished job{'' if count == 1 else 's'}\n")
    kept = done.get("folders_kept") or []
    if kept:
        fail(
            f"the folders of job(s) {', '.join(map(str, kept))} could not be removed "
            "(see the server's jobs/ folder); their records are gone"
        )


@app.command()
def wait(job_ids: JobRefs, quiet: QuietOpt = False) -> None:
    """Block until the jobs end; exit 0 only if all COMPLETED. An array's id waits for every
    task (12_3: one). On a terminal, a progress bar per job (on stderr) until then."""
    _exit(commands.wait(job_ids, quiet))


@app.command()
def gpus(json_out: JsonOpt = False) -> None:
    """The GPUs: utilisation, memory, temperature, power, processes and the job on each."""
    inventory = _client().gpus()
    if json_out:
        _print_json(inventory)
        return
    from gpuyard.cli.render import gpu_rows

    if not inventory:
        sys.stdout.write(
            "no GPUs: the server runs CPU-only jobs (start it with --gpus N to declare)\n"
        )
        return
    sys.stdout.write(gpu_rows(inventory) + "\n")


@app.command()
def top(
    interval: Annotated[
        float, typer.Option("--interval", "-d", help="seconds between redraws")
    ] = 1.0,
    iterations: Annotated[
        int | None, typer.Option("--iterations", "-n", help="stop after N frames (as top -n)")
    ] = None,
) -> None:
    """The GPUs and the running jobs, live (Ctrl-C to quit)."""
    if interval < 0.1:
        fail(f"--interval {interval}: use at least 0.1 s")
    from gpuyard.cli.top import run_top

    run_top(_client(), interval, iterations)


@app.command()
def dashboard(
    open_browser: Annotated[
        bool, typer.Option("--open", help="open the link in this machine's browser")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Print a one-time link to the web dashboard, logged in as you (valid a minute, once)."""
    from gpuyard.cli.dashboard import run

    try:
        run(_client(), open_browser=open_browser, json_out=json_out)
    except GpuyardError as exc:
        fail(exc.message)


@app.command()
def doctor(
    json_out: JsonOpt = False,
    state_dir: Annotated[
        str | None, typer.Option(help="the server's state dir, for its free disk")
    ] = None,
    python: Annotated[
        str | None, typer.Option(help="check this interpreter's frameworks [python3 on PATH]")
    ] = None,
) -> None:
    """Check driver, CUDA, GPUs, frameworks and disk: PASS/WARN/FAIL, each with a fix."""
    from gpuyard.cli.doctoring import run_doctor

    raise typer.Exit(run_doctor(json_out, state_dir, python))


@app.command()
def server(
    host: Annotated[str | None, typer.Option(help="address to bind [127.0.0.1]")] = None,
    port: Annotated[int | None, typer.Option(help="port [8765]")] = None,
    state_dir: Annotated[
        str | None, typer.Option(help="database, logs, job folders [~/.local/share/gpuyard]")
    ] = None,
    gpus: Annotated[
        str | None, typer.Option("--gpus", help="auto | N (declare N without a driver) | 0,2")
    ] = None,
    cpus: Annotated[int | None, typer.Option(help="CPU cores jobs may use [all]")] = None,
    kill_grace: Annotated[
        float | None, typer.Option(help="seconds between SIGTERM and SIGKILL [10]")
    ] = None,
    policy: Annotated[
        str | None,
        typer.Option(help="scheduling policy: default, fifo, backfill, fairshare, las [default]"),
    ] = None,
    gpu_mem_per_gpu: Annotated[
        str | None,
        typer.Option(help="memory of each declared GPU, e.g. 80G (lets --gpu-mem jobs share)"),
    ] = None,
    backend: Annotated[
        str | None, typer.Option(help="local (this machine) or ray (a Ray cluster) [local]")
    ] = None,
    ray_address: Annotated[
        str | None,
        typer.Option(help="GCS host:port of an existing Ray cluster [start a local one]"),
    ] = None,
    preemptible_default: Annotated[
        bool | None,
        typer.Option(
            "--preemptible-default/--no-preemptible-default",
            help="jobs that say neither --preemptible nor --no-preempt may be preempted "
            "(for a lab whose jobs checkpoint) [no]",
            show_default=False,
        ),
    ] = None,
    allow_remote: Annotated[
        bool,
        typer.Option(
            "--allow-remote",
            help="let a --host other than loopback take requests (plain HTTP: put TLS in "
            "front, e.g. a reverse proxy)",
        ),
    ] = False,
    public_name: Annotated[
        list[str] | None,
        typer.Option(
            "--public-name",
            help="a name clients reach the server by (a reverse proxy's host[:port]), "
            "accepted in Host/Origin; repeat for more",
        ),
    ] = None,
    socket_path: Annotated[
        str | None,
        typer.Option(
            "--socket",
            help="a root server's Unix socket for local users, who need no token (the kernel "
            "says who they are); off: none [/run/gpuyard/gpuyard.sock]",
        ),
    ] = None,
    register_local_users: Annotated[
        bool | None,
        typer.Option(
            "--register-local-users/--no-register-local-users",
            help="a local user on the socket without an account gets one (role user) [yes]",
            show_default=False,
        ),
    ] = None,
    fair_share_half_life: Annotated[
        str | None,
        typer.Option(
            metavar="DURATION",
            help="past GPU usage counts half after this long (fairshare, gpuyard share) [7d]",
        ),
    ] = None,
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            metavar="URL",
            help="the database: a SQLite file's path, or postgresql://USER@HOST:PORT/DB "
            "(password from ~/.pgpass or PGPASSWORD) [gpuyard.db in the state dir]",
        ),
    ] = None,
    standby: Annotated[
        bool,
        typer.Option(
            "--standby",
            help="if another server holds the database, wait for it to stop, then take over "
            "(instead of refusing to start)",
        ),
    ] = False,
) -> None:
    """Run the server: HTTP API, scheduler and executor in one process."""
    from gpuyard.cli.serving import run_server
    from gpuyard.domain.units import parse_duration_s, parse_size_mib
    from gpuyard.settings import Settings

    try:
        declared = (
            parse_size_mib(gpu_mem_per_gpu, field="gpu_mem_per_gpu") if gpu_mem_per_gpu else None
        )
        settings = Settings.from_env(
            host=host, port=port, state_dir=state_dir, gpus=gpus, cpus=cpus,
            kill_grace_s=kill_grace, policy=policy, declared_gpu_mem_mib=declared,
            backend=backend, ray_address=ray_address, preemptible_default=preemptible_default,
            allow_remote=allow_remote or None,
            public_names=tuple(public_name) if public_name else None,
            socket=socket_path, register_local_users=register_local_users,
            fair_share_half_life_s=parse_duration_s(
                fair_share_half_life, field="fair_share_half_life"
            ) if fair_share_half_life else None,
            database_url=db, standby=standby or None,
        )  # fmt: skip
    except (ValueError, GpuyardError) as exc:
        fail(str(exc))
    run_server(settings)


admin = typer.Typer(help="Administer the server: GPUs, users, teams.", no_args_is_help=True)
app.add_typer(admin, name="admin")
identity.register(app, admin)  # token, login, admin user|team (cli/identity.py)
limits.register(app, admin)  # admin limit, share, usage (cli/limits.py)
run_cmd.register(app, admin)  # run: interactive sessions, JupyterLab
serve_cmd.register(app, admin)  # serve: services
sweep_cmd.register(app, admin)  # sweep
slurm_cmd.register(app, admin)  # sbatch, squeue, scancel, sacct
notify_cmd.register(app, admin)  # notify: webhooks


@admin.command("drain")
def admin_drain(
    gpu: Annotated[int, typer.Argument(metavar="GPU", help="GPU index")],
    reason: Annotated[str, typer.Option(help="why, shown in `gpuyard gpus`")] = "",
    now: Annotated[
        bool, typer.Option("--now", help="stop the jobs on it and requeue them (not failed)")
    ] = False,
) -> None:
    """Take a GPU out of service: no new job goes there; jobs on it finish (Slurm's DRAIN),
    or with --now are stopped and requeued."""
    answer = _client().drain(gpu, reason, now=now)
    running, requeued = answer.get("running_jobs") or [], answer.get("requeued_jobs") or []
    jobs = ""
    if running:
        jobs = f"; job(s) {', '.join(map(str, running))} on it finish there (--now requeues them)"
    if requeued:
        jobs = f"; job(s) {', '.join(map(str, requeued))} on it are stopped and requeued"
    sys.stdout.write(f"GPU {gpu} drained{jobs}\n")


@admin.command("resume")
def admin_resume(gpu: Annotated[int, typer.Argument(metavar="GPU", help="GPU index")]) -> None:
    """Put a drained GPU back in service."""
    _client().resume(gpu)
    sys.stdout.write(f"GPU {gpu} is back in service\n")


@app.command("simulate")
def simulate_cmd(
    trace: Annotated[
        str,
        typer.Option(
            "--trace", help="CSV: job_id,user,submit_time_s,num_gpus,duration_s[,time_limit_s]"
        ),
    ],
    gpus: Annotated[int, typer.Option("--gpus", help="GPUs in the simulated cluster")],
    gpus_per_node: Annotated[int, typer.Option(help="GPUs per node")] = 8,
    policy: Annotated[str | None, typer.Option(help="the policy to replay [default]")] = None,
    compare: Annotated[
        str | None, typer.Option(help="P1,P2,...: replay each, one table row per policy")
    ] = None,
    restart_penalty: Annotated[
        float, typer.Option(help="seconds a preempted job loses when it restarts")
    ] = 60.0,
    json_out: Annotated[
        bool, typer.Option("--json", help="one JSON object per policy per line")
    ] = False,
    preemptible_fraction: Annotated[
        float | None,
        typer.Option(
            help="only this share of the jobs may be preempted (0-1; chosen by job id, the "
            "same jobs every run), as on a server where jobs opt in [every job]"
        ),
    ] = None,
    max_gpus_per_user: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            help="every user may hold at most N GPUs at once: the live quota gate "
            "(QOSMaxGpuPerUser) replayed [no limit]",
        ),
    ] = None,
) -> None:
    """Replay a job trace in simulated time under scheduling policies and compare them."""
    from gpuyard.cli.simulating import run_simulation

    run_simulation(trace, gpus, gpus_per_node, policy, compare, restart_penalty, json_out,
                   preemptible_fraction, max_gpus_per_user)  # fmt: skip
