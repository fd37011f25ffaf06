"""`gpuyard server`: one call into bootstrap, which binds, builds and serves."""

from __future__ import annotations

import sys

from gpuyard.domain.errors import GpuyardError
from gpuyard.settings import Settings


def run_server(settings: Settings) -> None:
    from gpuyard.bootstrap import configure_logging, serve

    configure_logging(sys.stderr)
    serve(settings)


__all__ = ["GpuyardError", "run_server"]
