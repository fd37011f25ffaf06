"""`gpuyard sbatch|squeue|scancel|sacct`: Slurm's commands, printing what Slurm prints."""

from __future__ import annotations

import typer


def register(app: typer.Typer, admin: typer.Typer) -> None:
    """Add this module's commands to the app (and to `gpuyard admin`)."""
    from gpuyard.cli import slurm_queries

    slurm_queries.register(app)  # squeue, scancel, sacct
    _register_sbatch(app)


def _register_sbatch(app: typer.Typer) -> None:
    """`gpuyard sbatch`: submit with sbatch's defaults and answer (cli/sbatch_cmd.py)."""
    from gpuyard.cli import sbatch_cmd

    sbatch_cmd.register(app)
