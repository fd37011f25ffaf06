"""`gpuyard run`: an interactive session (a pty the terminal attaches to) or JupyterLab."""

from __future__ import annotations

import typer


def register(app: typer.Typer, admin: typer.Typer) -> None:
    """Add this module's commands to the app (and to `gpuyard admin`)."""
