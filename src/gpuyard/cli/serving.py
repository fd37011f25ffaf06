"""`gpuyard server`: one call into bootstrap, which binds, builds and serves."""

from __future__ import annotations

import gc
import sys

from gpuyard.domain.errors import GpuyardError
from gpuyard.settings import Settings


def run_server(settings: Settings) -> None:
    # The server's modules (FastAPI, SQLAlchemy, pydantic) live as long as it does: no cyclic
    # collection while they are imported either (~40 ms); `serve` freezes what the start made
    # and turns the collector back on.
    gc.disable()
    from gpuyard.bootstrap import configure_logging, serve

    configure_logging(sys.stderr)
    serve(settings)


__all__ = ["GpuyardError", "run_server"]
