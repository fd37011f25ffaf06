"""`gpuyard notify`: webhooks told of jobs' state changes (defaults, secret, delivery log)."""

from __future__ import annotations

import typer


def register(app: typer.Typer, admin: typer.Typer) -> None:
    """Add this module's commands to the app (and to `gpuyard admin`)."""
