"""`gpuyard submit`'s options, one list that `submit` and `sbatch` both take.

typer reads a command's options from its function's signature: the list is `_options`'s, and
`taking` gives a command (cli/submit_cmd.py, cli/sbatch_cmd.py, which adds its own) that
signature. `SubmitCommand` parses them: options end at the command's first word, and an
unknown option before it is a usage error in one line, not a program to run.
"""

import inspect
import sys
from collections.abc import Callable, Sequence
from typing import Annotated

import click
import typer
from typer.core import TyperCommand


def _options(
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
    json: Annotated[
        bool,
        typer.Option("--json", help="print the job's record (with --dry-run: the answer) as JSON"),
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
    gpus_per_task: Annotated[
        str | None,
        typer.Option(
            metavar="N", help="GPUs of each task (sets --gpus): srun binds each to its own"
        ),
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
    """The options as typer reads them: only the signature is used, it never runs."""


SIGNATURE = inspect.signature(_options)
OPTIONS: tuple[inspect.Parameter, ...] = tuple(SIGNATURE.parameters.values())


def taking(
    params: Sequence[inspect.Parameter] = OPTIONS,
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """A decorator: the command (a `**given` function) takes `params` (submit's options)."""

    def give(run: Callable[..., None]) -> Callable[..., None]:
        run.__signature__ = SIGNATURE.replace(parameters=list(params))  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in params}
        return run

    return give


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
