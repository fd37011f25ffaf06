"""The CLI's one rule for where a command lives (cli/app.py's docstring), checked on the source."""

from __future__ import annotations

import ast
from pathlib import Path

CLI = Path(__file__).resolve().parents[2] / "src" / "gpuyard" / "cli"


def _sources() -> dict[str, str]:
    return {path.stem: path.read_text() for path in sorted(CLI.glob("*.py"))}


def test_every_command_lives_in_a_cmd_module_that_the_app_registers() -> None:
    sources = _sources()
    cmd_modules = {name for name in sources if name.endswith("_cmd")}
    # `cmd_common.raw_command` is the one helper that declares (Slurm's commands, which read
    # their words themselves); the modules calling it declare through it.
    declaring = {
        name for name, text in sources.items()
        if (".command(" in text or "raw_command(" in text) and name != "cmd_common"
    }  # fmt: skip
    assert declaring == cmd_modules, "commands declared outside a *_cmd.py module"
    registering = {name for name, text in sources.items() if "\ndef register(" in text}
    assert registering == cmd_modules
    app = ast.parse(sources["app"])
    imported = {
        alias.name
        for node in ast.walk(app)
        if isinstance(node, ast.ImportFrom) and node.module == "gpuyard.cli"
        for alias in node.names
    }
    assert imported == cmd_modules, "app.py registers every *_cmd.py module, and only those"


def test_the_app_only_builds_and_registers() -> None:
    app = ast.parse(_sources()["app"])
    assert not [node for node in ast.walk(app) if isinstance(node, ast.FunctionDef)]


def test_each_command_is_run_by_the_module_that_registers_it() -> None:
    """`cli/app_shell.py` runs a command line naming a command with that command's module
    alone: its table must name, for every command of the whole app, the module that
    registers it (a command added without its entry would be run by the whole app, slower)."""
    import importlib

    import typer
    from typer.main import get_command

    from gpuyard.cli.app import app as whole
    from gpuyard.cli.app_shell import COMMAND_MODULES

    registered = {}
    for module in sorted(set(COMMAND_MODULES.values())):
        alone, admin = typer.Typer(), typer.Typer()
        alone.add_typer(admin, name="admin")
        importlib.import_module(f"gpuyard.cli.{module}").register(alone, admin)
        registered.update(dict.fromkeys(set(get_command(alone).commands) - {"admin"}, module))
    assert registered == COMMAND_MODULES
    assert set(get_command(whole).commands) - {"admin"} == set(COMMAND_MODULES)


def test_one_commands_app_says_what_the_whole_app_says() -> None:
    from typer.testing import CliRunner

    from gpuyard.cli.app import app as whole
    from gpuyard.cli.app_shell import one_command_app

    runner = CliRunner()
    for args in (["sbatch", "--help"], ["logs", "--help"], ["server", "--help"], ["wait"]):
        alone = runner.invoke(one_command_app(args), args, prog_name="gpuyard")
        full = runner.invoke(whole, args, prog_name="gpuyard")
        assert (alone.exit_code, alone.output) == (full.exit_code, full.output), args
