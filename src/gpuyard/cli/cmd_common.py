"""What several `*_cmd.py` modules share: the `--json` option, a one-job argument, and exiting
with a status."""

import sys
from collections.abc import Callable
from typing import Annotated, NoReturn

import typer

JsonOpt = Annotated[
    bool, typer.Option("--json", help="print JSON (stable fields, see docs/cli.md)")
]


def _one_job_ref(value: str) -> str:
    """One job's reference (12, 12_3: cli/job_refs.py), checked before any request."""
    from gpuyard.cli.job_refs import check_one

    try:
        return check_one(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


# One job (12) or one array task (12_3), for commands of one job: `job_refs.one_id` reads it.
OneJobRef = Annotated[str, typer.Argument(metavar="JOB", callback=_one_job_ref)]


def fail(message: str, code: int = 1) -> NoReturn:
    """`gpuyard: MESSAGE` on stderr, and exit `code`."""
    sys.stderr.write(f"gpuyard: {message}\n")
    raise typer.Exit(code)


def exit_with(code: int) -> None:
    """Exit with a command body's status (`cli/commands.py`); 0 returns."""
    if code:
        raise typer.Exit(code)


def raw_command(app: typer.Typer, name: str, body: Callable[[list[str]], int], doc: str) -> None:
    """Add `name`, whose words its `body` reads itself (Slurm's commands, also run by the fast
    start path without typer: both paths read them alike); typer only lists it in --help."""

    def command(ctx: typer.Context) -> None:
        raise typer.Exit(body(list(ctx.args)))

    command.__doc__ = doc
    settings = {"allow_extra_args": True, "ignore_unknown_options": True,
                "allow_interspersed_args": False}  # fmt: skip
    app.command(name, add_help_option=False, context_settings=settings)(command)


def add_app_options(app: typer.Typer) -> None:
    """The options of `gpuyard` itself, before any command: `--version`."""

    def say_version(given: bool) -> None:
        if given:
            from gpuyard import __version__

            sys.stdout.write(f"gpuyard {__version__}\n")
            raise typer.Exit()

    def app_options(
        version: Annotated[
            bool,
            typer.Option("--version", is_eager=True, callback=say_version,
                         help="print gpuyard's version and exit"),
        ] = False,
    ) -> None:  # fmt: skip
        """The options of `gpuyard` itself, before any command."""

    app.callback()(app_options)
