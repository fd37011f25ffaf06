"""`gpuyard server`: one call into bootstrap, which binds, builds and serves."""

from __future__ import annotations

import logging
import sys

from gpuyard.domain.errors import GpuyardError
from gpuyard.settings import Settings


def run_server(settings: Settings) -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )  # fmt: skip
    logging.getLogger("alembic").setLevel(logging.WARNING)
    from gpuyard.bootstrap import serve

    serve(settings)


__all__ = ["GpuyardError", "run_server"]
