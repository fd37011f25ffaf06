"""`gpuyard sbatch`: `submit` as Slurm's sbatch is typed and answers.

The same options as `submit` (one list, `cli/submit_options.py`, plus sbatch's `--parsable`
and `--wrap`), a batch script first, and sbatch's defaults under the script's
directives: the output in `slurm-%j.out` (`slurm-%A_%a.out` for an array) in the working
directory, the whole submitting environment (`--export=ALL`), `SLURM_SUBMIT_DIR`. It prints
`Submitted batch job N` (`--parsable`: `N`). Slurm options that mean nothing here
(`-p gpu`, `--qos high`, `-A lab`...) are one warning each, as in a script, not an error.
"""

from __future__ import annotations

import inspect
import sys
from typing import Annotated, Any

import click
import typer

from gpuyard.cli import commands
from gpuyard.cli.cmd_common import exit_with
from gpuyard.cli.submit_options import OPTIONS, SubmitCommand, taking


def register(app: typer.Typer, admin: typer.Typer) -> None:
    """Add `sbatch` to the app, with submit's options (cli/submit_options.py) and its own."""
    params = []
    for param in OPTIONS:
        if param.name == "command":  # optional here: --wrap needs none
            param = param.replace(
                annotation=Annotated[
                    list[str] | None,
                    typer.Argument(help="the batch script [ARGS...] (or --wrap)"),
                ],
                default=None,
            )
        params.append(param)
    params += [
        inspect.Parameter(
            "parsable", inspect.Parameter.KEYWORD_ONLY, default=False,
            annotation=Annotated[bool, typer.Option("--parsable", help="print the job id alone")],
        ),
        inspect.Parameter(
            "wrap", inspect.Parameter.KEYWORD_ONLY, default=None,
            annotation=Annotated[str | None, typer.Option(
                "--wrap", metavar="COMMAND", help="run this shell command line (sh -c)")],
        ),
    ]  # fmt: skip

    @taking(params)
    def sbatch(**given: Any) -> None:
        """Queue a batch script as Slurm's sbatch does: its #SBATCH directives, flags over
        them; prints `Submitted batch job N`."""
        exit_with(run_sbatch(given))

    app.command("sbatch", cls=SbatchCommand,
                context_settings={"allow_interspersed_args": False})(sbatch)  # fmt: skip


class SbatchCommand(SubmitCommand):
    """submit's one-line usage errors, and Slurm's options that mean nothing here (before
    the script) taken out with a warning each, as the same directives in a script are."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        args, ctx.meta["sbatch_values"] = _take_slurm_options(self, args)
        return super().parse_args(ctx, args)


def run_sbatch(given: dict[str, Any]) -> int:
    """The submit that `given` (sbatch's parsed options) asks for; its exit status."""
    parsable, wrap = given.pop("parsable"), given.pop("wrap")
    command = list(given.pop("command") or [])
    if wrap is not None:
        if command:
            sys.stderr.write("gpuyard: --wrap and a script: give one of them\n")
            return 2
        command = ["/bin/sh", "-c", wrap]
    elif not command:
        sys.stderr.write("gpuyard: sbatch: give a batch script (or --wrap COMMAND)\n")
        return 2
    given["env"], given["notify"] = given.get("env") or [], given.get("notify") or []
    opts = commands.SubmitOptions(command, **given)
    opts.style = "parsable" if parsable else "sbatch"
    opts.defaults = {"export": "ALL"}
    opts.slurm_values = click.get_current_context().meta.get("sbatch_values", {})
    return commands.submit(opts)


def _take_slurm_options(command: click.Command, args: list[str]
                        ) -> tuple[list[str], dict[str, object]]:  # fmt: skip
    """`args` without the sbatch options this command does not have, before the script, and
    the values they set: those a script's directive would read (`-n 4`, `--gpus-per-task 1`,
    `--mem-per-cpu 4G`) as its directive reads them, those it would ignore (`-p gpu`,
    `--qos=high`, `--exclusive`) each said on stderr."""
    from gpuyard.domain import sbatch

    takes_value: dict[str, bool] = {}
    for param in command.params:
        if isinstance(param, click.Option):
            for name in (*param.opts, *param.secondary_opts):
                takes_value[name] = not param.is_flag
    kept: list[str] = []
    values: dict[str, object] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--" or not arg.startswith("-") or arg == "-":
            break  # the script (or --): options end here
        name = arg.partition("=")[0] if arg.startswith("--") else arg[:2]
        if name in takes_value:
            kept.append(arg)
            joined = "=" in arg if arg.startswith("--") else len(arg) > 2
            if takes_value[name] and not joined and i + 1 < len(args):
                kept.append(args[i + 1])
                i += 1
            i += 1
            continue
        after = args[i + 1] if i + 1 < len(args) else None
        taken = sbatch.sbatch_option(arg, after)
        if taken is not None:
            used, found = taken
            values = sbatch.merge(values, found)
            i += used
            continue
        ignored = sbatch.ignored_option(arg, after)
        if ignored is None:
            break  # not Slurm's either: submit's usage error says so
        used, message = ignored
        sys.stderr.write(f"gpuyard: warning: {message}\n")
        i += used
    return [*kept, *args[i:]], values
