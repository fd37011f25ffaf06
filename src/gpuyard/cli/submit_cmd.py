"""`gpuyard submit`: queue a job. Its options are `cli/submit_options.py`'s (sbatch's too)."""

from typing import Any

import typer

from gpuyard.cli import commands
from gpuyard.cli.cmd_common import exit_with
from gpuyard.cli.submit_options import SubmitCommand, taking


@taking()
def submit(**given: Any) -> None:
    """Queue a job; prints its id alone (JOB=$(gpuyard submit ...) works)."""
    exit_with(commands.submit(commands.SubmitOptions(**given)))


def register(app: typer.Typer, admin: typer.Typer) -> None:
    """Add `submit` to the app."""
    app.command("submit", cls=SubmitCommand,
                context_settings={"allow_interspersed_args": False})(submit)  # fmt: skip
