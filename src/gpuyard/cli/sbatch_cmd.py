"""`gpuyard sbatch`: `submit` as Slurm's sbatch is typed and answers.

The same options as `submit` (one list, `cli/submit_options.py`, plus sbatch's `--parsable`
and `--wrap`), a batch script first, and sbatch's defaults under the script's
directives: the output in `slurm-%j.out` (`slurm-%A_%a.out` for an array) in the working
directory, the whole submitting environment (`--export=ALL`), `SLURM_SUBMIT_DIR`. It prints
`Submitted batch job N` (`--parsable`: `N`). Slurm options that mean nothing here
(`-p gpu`, `--qos high`, `-A lab`...) are one warning each, as in a script, not an error.
Here are typer's signature, help and usage errors; the body is `cli/sbatching.py`'s, which
the fast start path (`cli/slurm_fast.py`) runs without typer for the lines it is sure of.
"""

from __future__ import annotations

import inspect
import sys
from typing import Annotated, Any

import click
import typer

from gpuyard.cli import commands
from gpuyard.cli.cmd_common import exit_with
from gpuyard.cli.sbatching import run_sbatch, take_slurm_options
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
        exit_with(run_given(given))

    app.command("sbatch", cls=SbatchCommand,
                context_settings={"allow_interspersed_args": False})(sbatch)  # fmt: skip


class SbatchCommand(SubmitCommand):
    """submit's one-line usage errors, and Slurm's options that mean nothing here (before
    the script) taken out with a warning each, as the same directives in a script are."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        takes_value: dict[str, bool] = {}
        for param in self.params:
            if isinstance(param, click.Option):
                for name in (*param.opts, *param.secondary_opts):
                    takes_value[name] = not param.is_flag
        args, ctx.meta["sbatch_values"] = take_slurm_options(args, takes_value,
                                                             sys.stderr.write)  # fmt: skip
        return super().parse_args(ctx, args)


def run_given(given: dict[str, Any]) -> int:
    """The submit that `given` (sbatch's parsed options, typer's) asks for; its exit status."""
    parsable, wrap = given.pop("parsable"), given.pop("wrap")
    command = list(given.pop("command") or [])
    given["env"], given["notify"] = given.get("env") or [], given.get("notify") or []
    opts = commands.SubmitOptions(command, **given)
    values = click.get_current_context().meta.get("sbatch_values", {})
    return run_sbatch(opts, parsable, wrap, values)
