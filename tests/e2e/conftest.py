from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.server import ServerProcess

pytestmark = pytest.mark.e2e


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A server with 4 declared GPUs, enough CPUs for parallel jobs, a 1 s kill grace."""
    srv = ServerProcess(tmp_path / "state", "--gpus", "4", "--cpus", "32", "--kill-grace", "1")
    srv.start()
    yield srv
    srv.stop()
    srv.kill_jobs()
