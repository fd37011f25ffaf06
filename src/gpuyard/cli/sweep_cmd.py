"""`gpuyard sweep`: hyper-parameter sweeps (grid or random, median stopping) as job arrays."""

from __future__ import annotations

import typer


def register(app: typer.Typer, admin: typer.Typer) -> None:
    """Add this module's commands to the app (and to `gpuyard admin`)."""
