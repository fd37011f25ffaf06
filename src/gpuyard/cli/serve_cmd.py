"""`gpuyard serve`: a long-running service (a model server) on allocated GPUs, as a job."""

from __future__ import annotations

import typer


def register(app: typer.Typer, admin: typer.Typer) -> None:
    """Add this module's commands to the app (and to `gpuyard admin`)."""
