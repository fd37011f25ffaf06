"""What several `*_cmd.py` modules share: the `--json` option, and exiting with a status."""

import sys
from typing import Annotated, NoReturn

import typer

JsonOpt = Annotated[
    bool, typer.Option("--json", help="print JSON (stable fields, see docs/cli.md)")
]


def fail(message: str, code: int = 1) -> NoReturn:
    """`gpuyard: MESSAGE` on stderr, and exit `code`."""
    sys.stderr.write(f"gpuyard: {message}\n")
    raise typer.Exit(code)


def exit_with(code: int) -> None:
    """Exit with a command body's status (`cli/commands.py`); 0 returns."""
    if code:
        raise typer.Exit(code)
