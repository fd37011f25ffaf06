"""The `gpuyard` typer app before any command is registered, and the app of one command.

Building the whole app imports every `*_cmd.py` module and makes click inspect every command's
signature: about 0.15 s on a quiet 2-core machine and 0.5 s loaded, paid by every command the
fast path (`cli/fast.py`) does not run, `gpuyard server`'s start included. A command line whose
first word names a command is run by an app holding only the module that registers it
(`COMMAND_MODULES`; tests/unit/test_cli_layout.py checks the table against the modules); its
`--help`, its errors and what it runs are the same. Anything else (no command, `--help`, an
option first, `admin ...`, a misspelt command that deserves close names) gets the whole app
(`cli/app.py`).
"""

import importlib

import click.exceptions
import typer

from gpuyard.cli.cmd_common import add_app_options

# An unknown command's close names, said once: click from 8.4 says them itself
# (NoSuchCommand), and typer's would be a second list.
_TYPER_SUGGESTS = not hasattr(click.exceptions, "NoSuchCommand")

# Each command of `gpuyard` (not `gpuyard admin ...`) -> the `*_cmd.py` module registering it.
COMMAND_MODULES = {
    "submit": "submit_cmd",
    **dict.fromkeys(
        (
            "queue",
            "ps",
            "show",
            "logs",
            "cancel",
            "hold",
            "release",
            "requeue",
            "restart",
            "update",
            "clean",
            "wait",
        ),
        "jobs_cmd",
    ),
    **dict.fromkeys(("gpus", "nodes", "top"), "gpus_cmd"),
    "node": "node_cmd",
    **dict.fromkeys(("dashboard", "doctor", "server"), "server_cmd"),
    **dict.fromkeys(("login", "whoami", "token"), "identity_cmd"),
    **dict.fromkeys(("share", "usage"), "limits_cmd"),
    **dict.fromkeys(("run", "attach"), "run_cmd"),
    "serve": "serve_cmd",
    "sweep": "sweep_cmd",
    **dict.fromkeys(("squeue", "sacct", "scancel"), "slurm_queries_cmd"),
    "sbatch": "sbatch_cmd",
    "scontrol": "scontrol_cmd",
    "sinfo": "sinfo_cmd",
    **dict.fromkeys(("srun", "salloc", "slurm-commands"), "srun_cmd"),
    "simulate": "simulate_cmd",
    "notify": "notify_cmd",
}


def new_app() -> tuple[typer.Typer, typer.Typer]:
    """`gpuyard` and its `admin` group, with `--version`, no command yet."""
    app = typer.Typer(
        name="gpuyard",
        help="A self-hosted GPU training server: queue, schedule and run jobs on isolated GPUs.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        suggest_commands=_TYPER_SUGGESTS,
    )
    admin = typer.Typer(
        help="Administer the server: GPUs, users, teams.",
        no_args_is_help=True,
        suggest_commands=_TYPER_SUGGESTS,
    )
    app.add_typer(admin, name="admin")
    add_app_options(app)  # --version
    return app, admin


def one_command_app(args: list[str]) -> typer.Typer | None:
    """The app of the one command `gpuyard ARGS` names; None: run it with the whole app."""
    module = COMMAND_MODULES.get(args[0]) if args else None
    if module is None:
        return None
    app, admin = new_app()
    importlib.import_module(f"gpuyard.cli.{module}").register(app, admin)
    return app
