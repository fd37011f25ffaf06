"""`--since WHEN` as the commands that page through the past read it (`queue --all`, `usage`)."""

from __future__ import annotations

import datetime
import time

import typer

from gpuyard.domain.errors import GpuyardError
from gpuyard.domain.units import parse_duration_s


def since_timestamp(text: str) -> float:
    """`2h`/`3d` ago, or a date (and time) in the local time zone, as Unix time."""
    try:
        return datetime.datetime.fromisoformat(text).timestamp()
    except ValueError:
        pass
    try:
        return time.time() - parse_duration_s(text, field="since")
    except GpuyardError:
        raise typer.BadParameter(
            f"{text!r}: use a duration ago (30m, 2h, 3d) or a date (2026-11-30[T12:00])"
        ) from None
